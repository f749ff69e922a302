"""Driving a real scaler from tests: its config file, a KEDA-like gRPC client, polling."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import yaml

from scaler._proto import externalscaler_pb2 as pb
from scaler._proto import externalscaler_pb2_grpc as pb_grpc


def write_config(path: Path, targets: list[str], **overrides: object) -> Path:
    svc = {
        "name": "chat",
        "namespace": "serving",
        "gpusPerReplica": 4,
        "minReplicas": 1,
        "maxReplicas": 16,
        "targets": {"static": targets},
        "thresholds": {"waitingPerReplica": 5},
        "scaleDown": {"stabilizationSeconds": 0, "stepSeconds": 0, "maxStepReplicas": 16},
    }
    svc.update(overrides)
    cfg = {
        "pool": {"name": "shared-h100", "capacity": {"gpus": 64}, "reserveGPUs": 4},
        "scrape": {"intervalSeconds": 0.2, "timeoutSeconds": 0.2, "staleAfterSeconds": 5},
        "inference": [svc],
        "research": [{"name": "eval", "gpusPerJob": 1, "maxJobs": 100}],
    }
    path.write_text(yaml.safe_dump(cfg))
    return path


class Client:
    def __init__(self, port: int) -> None:
        self.channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        self.stub = pb_grpc.ExternalScalerStub(self.channel)

    async def value(self, **md: str) -> int:
        ref = pb.ScaledObjectRef(name="so", namespace="serving", scalerMetadata=md)
        spec = await self.stub.GetMetricSpec(ref)
        name = spec.metricSpecs[0].metricName
        resp = await self.stub.GetMetrics(
            pb.GetMetricsRequest(scaledObjectRef=ref, metricName=name)
        )
        assert resp.metricValues[0].metricValueFloat == float(resp.metricValues[0].metricValue)
        return resp.metricValues[0].metricValue


def ask_once(port: int, **metadata: str) -> int:
    """One GetMetrics through a fresh channel, from synchronous test code (a scaler in
    another process)."""

    async def once() -> int:
        c = Client(port)
        try:
            return await c.value(**metadata)
        finally:
            await c.channel.close()

    return asyncio.run(once())


async def wait_for(pred: Callable[[], object], within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        r = pred()
        if asyncio.iscoroutine(r):
            r = await r
        if r:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition not reached in time")
