"""A KEDA-like driver: asks the scaler over its real gRPC API, on KEDA's schedule, and
hands the answers to the simulated cluster the way KEDA does.

The driver's only source of decisions is the `ExternalScalerStub` it is given (it never
sees the scaler's objects); what it does with an answer goes through the `Actuator`
(the HPA and the ScaledJob controller of the simulated cluster). Semantics
(docs/keda-contract.md, "Call cadence", "Errors and fallback", "ScaledJobs"):
* ScaledObject, every `so_interval_s`: GetMetricSpec → GetMetrics → IsActive; the value
  and targetSize feed the HPA (AverageValue). A failing call applies nothing: the scaler
  answers but GetMetrics fails (UNAVAILABLE, what this driver meets), KEDA's fallback
  (`currentReplicasIfHigher`, after `failureThreshold` = 3) keeps the current replicas;
  the scaler unreachable, GetMetricSpec fails first and KEDA's fallback never engages
  (kedacore/keda#8056, seen on the real KEDA in cluster/e2e.py): the HPA, without a
  metric, holds the current count. Either way the Deployment keeps its size.
* ScaledJob, every `sj_interval_s`: GetMetricSpec → GetMetrics; the value / targetSize
  goes to the ScaledJob controller (Jobs created = maxScale − unfinished, never deleted).
  A failing call is skipped, as KEDA skips a failing ScaledJob trigger.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

import grpc

from scaler._proto import externalscaler_pb2 as pb
from scaler._proto import externalscaler_pb2_grpc as pb_grpc


class Actuator(Protocol):
    """What KEDA hands its answers to in the cluster."""

    def hpa(self, service: str, value: float, target: float, *, why: str) -> None:
        """The HPA of `service`'s Deployment reads the external metric (AverageValue)."""
        ...

    def scaled_job(self, research_class: str, metric: float) -> None:
        """One ScaledJob poll: `metric` = queue length / targetAverageValue."""
        ...


@dataclass(frozen=True, slots=True)
class ScaledObject:
    name: str
    namespace: str
    service: str  # trigger metadata `service`


@dataclass(frozen=True, slots=True)
class ScaledJob:
    name: str
    namespace: str
    research_class: str  # trigger metadata `researchClass`


@dataclass
class Answer:
    """The latest value the scaler gave for one object (for the view and the record)."""

    value: int | None = None
    active: bool | None = None
    error: str | None = None
    failures: int = 0


@dataclass
class KedaDriver:
    stub: pb_grpc.ExternalScalerAsyncStub
    actuator: Actuator
    scaled_objects: list[ScaledObject]
    scaled_jobs: list[ScaledJob]
    so_interval_s: float
    sj_interval_s: float
    scaler_address: str
    failure_threshold: int = 3
    calls: Counter[str] = field(default_factory=Counter)  # RPCs made, by method
    answers: dict[str, Answer] = field(default_factory=dict)  # by object name

    def _ref(self, name: str, namespace: str, key: str, value: str) -> pb.ScaledObjectRef:
        # KEDA passes every trigger metadata key, its own included.
        md = {key: value, "scalerAddress": self.scaler_address, "enableTLS": "false"}
        return pb.ScaledObjectRef(name=name, namespace=namespace, scalerMetadata=md)

    async def _metric(self, ref: pb.ScaledObjectRef) -> tuple[int, float, float]:
        """GetMetricSpec then GetMetrics, as KEDA reads them: (raw int, value, targetSize).

        KEDA uses the float fields when they are > 0, else the int ones."""
        self.calls["GetMetricSpec"] += 1
        spec = await self.stub.GetMetricSpec(ref)
        ms = spec.metricSpecs[0]
        target = ms.targetSizeFloat if ms.targetSizeFloat > 0 else float(ms.targetSize)
        self.calls["GetMetrics"] += 1
        resp = await self.stub.GetMetrics(
            pb.GetMetricsRequest(scaledObjectRef=ref, metricName=ms.metricName)
        )
        mv = resp.metricValues[0]
        value = mv.metricValueFloat if mv.metricValueFloat > 0 else float(mv.metricValue)
        return int(mv.metricValue), value, target

    async def poll_scaled_object(self, so: ScaledObject) -> None:
        ans = self.answers.setdefault(so.name, Answer())
        ref = self._ref(so.name, so.namespace, "service", so.service)
        try:
            raw, value, target = await self._metric(ref)
            self.calls["IsActive"] += 1
            active = (await self.stub.IsActive(ref)).result
        except grpc.aio.AioRpcError as e:
            ans.failures += 1
            ans.error = f"{e.code().name}: {e.details()}"
            if ans.failures >= self.failure_threshold:
                ans.error += " (fallback currentReplicasIfHigher: keeping current replicas)"
            return
        ans.value, ans.active, ans.error, ans.failures = raw, active, None, 0
        # minReplicaCount >= 1 here: IsActive only matters for scale-to-zero.
        self.actuator.hpa(so.service, value, target, why=f"GetMetrics={raw}")

    async def poll_scaled_job(self, sj: ScaledJob) -> None:
        ans = self.answers.setdefault(sj.name, Answer())
        ref = self._ref(sj.name, sj.namespace, "researchClass", sj.research_class)
        try:
            raw, value, target = await self._metric(ref)
        except grpc.aio.AioRpcError as e:
            ans.error = f"{e.code().name}: {e.details()}"
            return
        ans.value, ans.error = raw, None
        self.actuator.scaled_job(sj.research_class, value / target)

    async def run(self, stop: asyncio.Event) -> None:
        await asyncio.gather(
            self._every(self.so_interval_s, stop, self._poll_objects),
            self._every(self.sj_interval_s, stop, self._poll_jobs),
        )

    async def _poll_objects(self) -> None:
        for so in self.scaled_objects:
            await self.poll_scaled_object(so)

    async def _poll_jobs(self) -> None:
        for sj in self.scaled_jobs:
            await self.poll_scaled_job(sj)

    @staticmethod
    async def _every(period: float, stop: asyncio.Event, fn: Callable[[], Awaitable[None]]) -> None:
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while not stop.is_set():
            await fn()
            next_at += period
            delay = next_at - loop.time()
            if delay < 0:
                next_at, delay = loop.time(), 0.0
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)
