"""`gpu-pool-scaler demo`: the simulated cluster's rules, a replica's /metrics over real
HTTP, and the whole demo run briefly at high speed (real scaler, real gRPC, real HTTP)."""

from __future__ import annotations

import ast
import asyncio
import csv
import itertools
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from rich.console import Console

from scaler._proto import externalscaler_pb2 as pb
from scaler._proto import externalscaler_pb2_grpc as pb_grpc
from scaler.core.exposition import read_sample
from scaler.core.load import EngineSample
from scaler.demo.cluster import DemoCluster
from scaler.demo.engine_http import EngineServer
from scaler.demo.keda import KedaDriver, ScaledJob, ScaledObject
from scaler.demo.queue import (
    QueueError,
    SimItem,
    SimQueue,
    seed_budget,
    seed_count,
    seed_items,
)
from scaler.demo.run import run
from scaler.demo.scenario import MIN_PERIOD_S, Params, parse_args, research_classes
from scaler.demo.view import summary_table
from scaler.research.model import DONE, QUEUED, REQUEUED, RUNNING
from scaler.sim.kube import JobState, ResearchClassSpec
from scaler.sim.pods import RepState

REPO = Path(__file__).resolve().parent.parent
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# ---- the simulated cluster (scaler.sim.kube underneath) ----------------------------------
CLASSES = {
    "eval": ResearchClassSpec("eval", 1, median_hours=100.0, sigma=0.0, checkpoint_s=600.0),
    "finetune": ResearchClassSpec("finetune", 4, median_hours=100.0, sigma=0.0, checkpoint_s=600.0),
}
GRACE_S, COLD_S, STARTUP_S = 60.0, 100.0, 10.0


def idle(row: int) -> bool:
    """Every draining replica process has finished its requests."""
    return True


def busy(row: int) -> bool:
    return False


def make_cluster(pool_gpus: int = 16, items: list[SimItem] | None = None) -> DemoCluster:
    return DemoCluster(
        pool_gpus=pool_gpus,
        gpus_per_node=8,
        service="chat",
        gpus_per_replica=4,
        min_replicas=1,
        max_replicas=8,
        cold_start_s=COLD_S,
        classes=list(CLASSES.values()),
        grace_s=GRACE_S,
        startup_s=STARTUP_S,
        seed=0,
        items=items,
    )


@pytest.mark.parametrize(
    ("research_class", "jobs", "want_preempted"),
    [
        # 2 nodes × 8 GPUs: 1 replica (4) + 12 one-GPU Jobs fill them; +1 replica needs 4
        # GPUs on one node: the 4 Jobs beside the replica go.
        pytest.param("eval", 12, 4, id="four-1-gpu-jobs-on-one-node"),
        pytest.param("finetune", 3, 1, id="one-4-gpu-job"),
        pytest.param("finetune", 2, 0, id="fits-without-preemption"),
    ],
)
def test_scale_up_preempts_research_which_is_recreated_not_lost(
    research_class: str, jobs: int, want_preempted: int
) -> None:
    c = make_cluster()
    assert len(c.start_with(1, 0.0)) == 1
    assert c.scaled_job_poll(research_class, float(jobs), 0.0) == jobs
    c.step(0.0, 10.0, idle)
    assert c.jobs_in(JobState.RUNNING) == jobs

    c.hpa_sync(2.0, 1.0, 20.0, why="GetMetrics=2")  # the HPA: 2 replicas
    c.step(20.0, 10.0, idle)
    assert c.preemptions == want_preempted
    assert c.jobs_in(JobState.EVICTED) == want_preempted
    if want_preempted:  # victims keep their GPUs for the grace period; the replica waits
        assert c.count(RepState.PENDING) == 1
        c.step(30.0, 40.0, idle)
        assert c.count(RepState.PENDING) == 1, "bound before the grace period ended"
        c.step(70.0, 20.0, idle)
    assert c.count(RepState.PENDING) == 0 and c.count(RepState.LOADING) == 1
    ready = c.step(90.0, COLD_S + 50.0, idle).ready
    assert len(ready) == 1 and c.count(RepState.READY) == 2
    # Preempted Jobs are pending again (pod re-created), never deleted.
    assert c.unfinished(research_class) == jobs
    assert c.jobs_in(JobState.PENDING) == want_preempted
    assert c.inference_gpus() + c.research_gpus() <= 16


def test_scaled_job_creates_the_difference_and_never_deletes() -> None:
    c = make_cluster(pool_gpus=64)
    c.start_with(1, 0.0)
    created = [c.scaled_job_poll("eval", m, float(t)) for t, m in enumerate((5.0, 2.0, 0.0, 7.0))]
    assert created == [5, 0, 0, 2]
    assert c.unfinished("eval") == 7


@pytest.mark.parametrize(
    ("start", "metric", "want"),
    [
        pytest.param(1, 10.0, 5, id="up-limited-to-plus-4"),
        pytest.param(4, 20.0, 8, id="up-limited-to-max"),
        pytest.param(3, 3.0, 3, id="equal-holds"),
        pytest.param(6, 2.0, 2, id="down-at-once"),
        pytest.param(2, 0.0, 1, id="min-replicas"),
    ],
)
def test_hpa_follows_the_metric_with_the_charts_behavior(
    start: int, metric: float, want: int
) -> None:
    c = make_cluster(pool_gpus=64)
    c.start_with(start, 0.0)
    draining = c.hpa_sync(metric, 1.0, 100.0, why="test")
    assert c.spec_replicas == want
    # A scale-down drains the newest Ready replicas; their GPUs stay held until `gone`.
    assert len(draining) == max(0, start - want)
    assert c.step(100.0, 1.0, busy).gone == []  # still serving: their GPUs stay held
    held = c.inference_gpus()
    assert c.step(101.0, 1.0, idle).gone == draining  # their processes exited
    assert c.inference_gpus() == held - 4 * len(draining)


def test_preempted_job_loses_only_work_since_its_last_checkpoint() -> None:
    c = make_cluster(pool_gpus=8)
    c.start_with(1, 0.0)
    c.scaled_job_poll("finetune", 1.0, 0.0)
    c.step(0.0, 1.0, idle)  # bound at 1 s, useful work from 11 s
    c.hpa_sync(2.0, 1.0, 1000.0, why="test")
    c.step(1000.0, 1.0, idle)  # preempted at 1001 s: 990 s of work, one 600 s checkpoint kept
    assert c.preemptions == 1
    assert c.ledger.lost_gpu_s == pytest.approx(4 * 390.0)


# ---- the simulated research work queue --------------------------------------------------
def item_events(c: DemoCluster, item: str) -> list[tuple[str, float, float]]:
    """(kind, time, checkpointed GPU-hours) of one item's events."""
    return [
        (e.kind, e.t, float(e.detail["checkpointed_gpu_hours"]))
        for e in c.events
        if e.detail.get("item") == item
    ]


def test_preempted_item_returns_to_the_front_with_its_checkpoint_and_completes_once() -> None:
    big, small = SimItem("ft-1", "finetune", 4, 2000.0), SimItem("ft-2", "finetune", 4, 500.0)
    c = make_cluster(pool_gpus=8, items=[big, small])
    q = c.queue
    assert q is not None
    c.start_with(1, 0.0)  # 4 GPUs for inference, 4 free: room for one finetune Job
    assert q.outstanding("finetune") == 2  # what the scaler reads: 2 items, 1 Job fits
    assert c.scaled_job_poll("finetune", 1.0, 0.0) == 1  # its answer 1 − 0 Jobs
    c.step(0.0, 1.0, idle)  # bound at 1 s: takes the front item; useful work from 11 s
    assert (big.state, small.state, big.attempts) == (RUNNING, QUEUED, 1)

    c.hpa_sync(2.0, 1.0, 1000.0, why="test")
    c.step(1000.0, 1.0, idle)  # preempted at 1001 s: 990 s of work, one 600 s checkpoint
    assert c.preemptions == 1
    assert big.state == RUNNING, "leased until its pod is gone (the grace period)"
    assert q.waiting("finetune") == 1
    c.step(1001.0, GRACE_S, idle)  # the pod is gone: the item is back, at the front
    assert big.state == REQUEUED and big.saved_s == pytest.approx(600.0)
    assert [qc.requeued for qc in q.counts()] == [0, 1]
    assert q.waiting("finetune") == 2

    c.hpa_sync(1.0, 1.0, 1061.0, why="test")  # the loading replica goes: room again
    c.step(1061.0, 1.0, idle)  # the re-created pod binds and takes the front item again
    assert big.state == RUNNING and big.attempts == 2 and small.state == QUEUED
    t = 1062.0
    while big.state != DONE and t < 5000.0:
        c.step(t, 10.0, idle)
        t += 10.0
    # Resumed from the checkpoint: 1400 s of work left, from 1062 + 10 s of start-up.
    (done,) = [e for e in c.events if e.kind == "item-done"]
    assert big.state == DONE and done.t == pytest.approx(1072.0 + 1400.0)
    assert [k for k, *_ in item_events(c, "ft-1")] == [
        "item-taken",
        "item-requeued",
        "item-taken",
        "item-done",
    ]
    kept = pytest.approx(4 * 600 / 3600, abs=1e-3)  # GPU-hours checkpointed
    assert [h for *_, h in item_events(c, "ft-1")] == [
        0.0,
        kept,
        kept,
        pytest.approx(4 * 2000 / 3600, abs=1e-3),
    ]
    with pytest.raises(QueueError):  # done at most once
        q.finish(big, t)

    # The same worker goes on with the next item, in the same pod, from that moment.
    assert small.state == RUNNING and c.jobs_in(JobState.RUNNING, "finetune") == 1
    assert [(k, tt) for k, tt, _ in item_events(c, "ft-2")] == [("item-taken", done.t)]
    while c.jobs_in(JobState.RUNNING, "finetune") and t < 9000.0:
        c.step(t, 10.0, idle)
        t += 10.0
    assert small.state == DONE
    assert [e.t for e in c.events if e.kind == "item-done"][1] == pytest.approx(done.t + 500.0)
    # Then its take gets nothing: the worker exits, the Job completes. Nothing is left for
    # the scaler to count, so it answers 0 and no new Job starts.
    (exit_,) = [e for e in c.events if e.kind == "worker-exit"]
    assert exit_.detail == {"why": "queue empty", "items": 2}
    assert c.jobs_in(JobState.DONE, "finetune") == 1 and c.jobs_created == 1
    assert q.outstanding("finetune") == 0
    assert [(qc.queued, qc.requeued, qc.running, qc.done) for qc in q.counts()] == [
        (0, 0, 0, 0),
        (0, 0, 0, 2),
    ]


def test_worker_takes_the_next_item_only_while_the_class_has_a_slot() -> None:
    first, second = SimItem("e-1", "eval", 1, 600.0), SimItem("e-2", "eval", 1, 600.0)
    c = make_cluster(pool_gpus=64, items=[first, second])
    c.start_with(1, 0.0)
    assert c.scaled_job_poll("eval", 1.0, 0.0) == 1
    c.step(0.0, 1.0, idle)
    assert first.state == RUNNING
    c.scaled_job_poll("eval", 0.0, 100.0)  # inference needs the GPUs: 0 slots
    t = 1.0
    while c.jobs_in(JobState.RUNNING, "eval") and t < 2000.0:
        c.step(t, 5.0, idle)
        t += 5.0
    # Fail closed: done with its item, the worker takes nothing more and exits.
    assert (first.state, second.state) == (DONE, QUEUED)
    (exit_,) = [e for e in c.events if e.kind == "worker-exit"]
    assert exit_.detail == {"why": "0 slots", "items": 1}


async def test_the_scaler_reads_the_items_waiting_and_running_of_each_queued_class() -> None:
    from scaler.config import parse_config
    from scaler.demo.queue import SimQueueReader

    items = [SimItem(f"e-{i}", "eval", 1, 600.0) for i in range(3)]
    c = make_cluster(pool_gpus=64, items=[*items, SimItem("f-1", "finetune", 4, 600.0)])
    q = c.queue
    assert q is not None
    queued = {"urlFile": "unused"}
    cfg = parse_config(
        {
            "pool": {"name": "p", "capacity": {"gpus": 64}},
            "research": [
                {"name": "eval", "gpusPerJob": 1, "queue": queued},
                {"name": "finetune", "gpusPerJob": 4},  # not queue-fed: not read
            ],
        }
    )
    reader = SimQueueReader()
    assert await reader.read(cfg) == {}  # nothing published: no read, never a 0
    c.start_with(1, 0.0)
    assert c.scaled_job_poll("eval", 1.0, 0.0) == 1
    c.step(0.0, 1.0, idle)  # one item taken: 2 waiting + 1 running
    reader.publish(q)
    reads = await reader.read(cfg)
    assert set(reads) == {"eval"}
    assert (reads["eval"].items, reads["eval"].error) == (3, None)
    assert (q.waiting("eval"), q.running("eval")) == (2, 1)


@pytest.mark.parametrize("why", ["no-slot", "queue-empty"])
def test_a_job_with_nothing_to_take_ends_once_its_pod_started(why: str) -> None:
    item = SimItem("e-1", "eval", 1, 600.0)
    c = make_cluster(pool_gpus=64, items=[item])
    q = c.queue
    assert q is not None
    c.start_with(1, 0.0)
    if why == "no-slot":  # slots fell to 0 after KEDA created the Job: fail closed
        assert c.scaled_job_poll("eval", 1.0, 0.0) == 1
        c.scaled_job_poll("eval", 0.0, 0.5)
    else:  # a Job KEDA created from a stale queue length: the item is gone already
        q.slots["eval"] = 4
        c.pods.create_jobs("eval", 2.0, 0.0)
    c.step(0.0, 1.0, idle)
    ended = [e for e in c.events if e.kind == "worker-exit"]
    assert [e.detail["items"] for e in ended] == [0] and q.took_nothing["eval"] == 1
    assert item.state == (QUEUED if why == "no-slot" else RUNNING)
    c.step(1.0, STARTUP_S, idle)  # started, found nothing, exited 0: its GPU is free
    assert c.jobs_in(JobState.DONE, "eval") == 1
    assert c.research_gpus() == (0 if why == "no-slot" else 1)


def test_seeded_batch_reaches_its_gpu_hours_deterministically() -> None:
    classes = list(CLASSES.values())
    budget = seed_budget(64, 4, 3, 10.0)
    assert budget == pytest.approx(200.0)  # 10 h of a third of 60 lendable GPUs
    a = seed_items(classes, [budget, 1.0], seed=3)
    b = seed_items(classes, [budget, 1.0], seed=3)
    assert [(x.id, x.work_s) for x in a] == [(x.id, x.work_s) for x in b]
    by = {c.name: [x for x in a if x.research_class == c.name] for c in classes}
    # 100-hour eval items: two hold 200 GPU-hours; a 400-GPU-hour finetune item is at least
    # one item.
    assert [len(by["eval"]), len(by["finetune"])] == [2, 1]
    assert sum(x.gpu_hours for x in by["eval"]) == pytest.approx(budget)
    # The demo's classes at 64 GPUs (docs/demo.md): 157 eval, 10 finetune, 2 pretrain.
    assert [seed_count(c, budget) for c in research_classes()] == [157, 10, 2]
    q = SimQueue(("eval", "finetune"))
    for x in a:
        q.submit(x)
    with pytest.raises(QueueError):
        q.submit(a[0])


# ---- one replica's /metrics --------------------------------------------------------------
async def test_replica_serves_vllm_metrics_the_scaler_reads_back() -> None:
    sample = EngineSample(
        waiting=7.0,
        running=31.0,
        kv_usage_mean=0.42,
        kv_usage_max=0.42,
        prompt_tokens_total=123456.0,
        generation_tokens_total=7890.0,
        preemptions_total=3.0,
        process_start_seconds=None,
    )
    server = EngineServer.for_engine(lambda: sample, "llama3-70b", 1.7e9)
    await server.start()
    try:
        async with httpx.AsyncClient() as client:
            r1 = await client.get(f"http://{server.address}/metrics")
            r2 = await client.get(f"http://{server.address}/metrics")  # same connection
            missing = await client.get(f"http://{server.address}/other")
    finally:
        await server.stop()
    assert r1.status_code == r2.status_code == 200 and missing.status_code == 404
    text = r1.text
    for line in (
        'vllm:num_requests_waiting{engine="0",model_name="llama3-70b"} 7.0',
        'vllm:num_requests_running{engine="0",model_name="llama3-70b"} 31.0',
        'vllm:kv_cache_usage_perc{engine="0",model_name="llama3-70b"} 0.42',
        'vllm:prompt_tokens_total{engine="0",model_name="llama3-70b"} 123456.0',
        'vllm:generation_tokens_total{engine="0",model_name="llama3-70b"} 7890.0',
        'vllm:num_preemptions_total{engine="0",model_name="llama3-70b"} 3.0',
        "process_start_time_seconds 1.7e+09",
    ):
        assert line in text.splitlines(), line
    back = read_sample(text, "vllm")
    assert back is not None
    assert (back.waiting, back.running, back.kv_usage_mean) == (7.0, 31.0, 0.42)
    assert (back.prompt_tokens_total, back.generation_tokens_total) == (123456.0, 7890.0)
    assert back.process_start_seconds == 1.7e9


async def test_a_replica_answering_late_times_the_scraper_out_and_recovers() -> None:
    """`answer_after_s` (cluster/e2e.py's unread replica): the scraper's deadline passes,
    then, set back to 0, the same server answers at once."""
    sample = EngineSample(waiting=3.0, running=1.0, kv_usage_mean=0.1, kv_usage_max=0.1)
    server = EngineServer.for_engine(lambda: sample, "llama3-70b", 1.7e9)
    await server.start()
    try:
        async with httpx.AsyncClient() as client:
            server.answer_after_s = 1.0
            with pytest.raises(httpx.ReadTimeout):
                await client.get(f"http://{server.address}/metrics", timeout=0.2)
            server.answer_after_s = 0.0
            r = await client.get(f"http://{server.address}/metrics", timeout=2.0)
    finally:
        await server.stop()
    back = read_sample(r.text, "vllm")
    assert back is not None and back.waiting == 3.0


def test_replica_stops_cleanly_with_a_keep_alive_connection_open() -> None:
    """A scraper's keep-alive connection left open when the engine stops (cluster/e2e.py's
    engine farm at the end of a run): its handler must end before the loop does. Cancelled
    at loop teardown instead, Python 3.11 logs "Exception in callback ... CancelledError"."""
    sample = EngineSample(waiting=0.0, running=0.0, kv_usage_mean=0.0, kv_usage_max=0.0)
    errors: list[dict[str, Any]] = []

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _, ctx: errors.append(ctx))
        server = EngineServer.for_engine(lambda: sample, "llama3-70b", 1.7e9)
        await server.start()
        host, port = server.address.split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        assert (await reader.readline()).startswith(b"HTTP/1.1 200")
        await server.stop()  # the client never closes its side; the loop ends right after

    asyncio.run(main())
    assert errors == []


def test_replica_stops_at_once_while_an_answer_is_late() -> None:
    """A scrape waiting out `answer_after_s` when the engine stops (cluster/e2e.py's unread
    replica at the end of a run): its handler ends at once, without a loop error."""
    sample = EngineSample(waiting=0.0, running=0.0, kv_usage_mean=0.0, kv_usage_max=0.0)
    errors: list[dict[str, Any]] = []
    took: list[float] = []

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _, ctx: errors.append(ctx))
        server = EngineServer.for_engine(lambda: sample, "llama3-70b", 1.7e9)
        server.answer_after_s = 30.0
        await server.start()
        host, port = server.address.split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(0.1)  # the handler is waiting now
        t0 = time.monotonic()
        await server.stop()
        took.append(time.monotonic() - t0)
        assert await reader.read() == b""  # closed without an answer

    asyncio.run(main())
    assert errors == [] and took[0] < 2.0, (errors, took)


# ---- the KEDA driver has no way to decisions but gRPC ------------------------------------
def test_driver_imports_nothing_of_the_scaler_but_the_grpc_stubs() -> None:
    tree = ast.parse((REPO / "scaler" / "demo" / "keda.py").read_text())
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            imported.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            imported.update(a.name for a in node.names)
    ours = {m for m in imported if m.startswith("scaler")}
    assert ours == {
        "scaler._proto.externalscaler_pb2",
        "scaler._proto.externalscaler_pb2_grpc",
    }


# ---- flags --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(["--gpus-per-replica", "1"], "does not fit", id="model-does-not-fit"),
        pytest.param(["--trace", "servegen-r1", "--hours", "30"], "spans 1.0 days", id="span"),
        pytest.param(["--start-hour", "24"], "--start-hour", id="start-hour"),
        pytest.param(["--pool-gpus", "6"], "reserve", id="pool-too-small"),
        pytest.param(["--day-seconds", "0"], "--day-seconds", id="day-seconds"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        parse_args(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_compressed_config_is_valid_and_scales_every_interval(tmp_path: Path) -> None:
    from scaler.config import parse_config
    from scaler.demo.scenario import pool_config

    slow, fast = (parse_args(["--day-seconds", d, "--out", str(tmp_path)]) for d in ("150", "60"))
    cfg_slow = parse_config(pool_config(slow, ["127.0.0.1:1"], 120.0))
    cfg_fast = parse_config(pool_config(fast, ["127.0.0.1:1"], 120.0))
    s, f = cfg_slow.inference[0], cfg_fast.inference[0]
    assert s.coldStartSeconds == pytest.approx(120.0 / 576, rel=1e-3)
    assert f.coldStartSeconds == pytest.approx(120.0 / 1440, rel=1e-3)
    # The token-rate threshold is per real second: it grows with the compression.
    assert f.thresholds.tokensPerSecondPerReplica == pytest.approx(
        s.thresholds.tokensPerSecondPerReplica * 1440 / 576, rel=1e-3
    )
    # Periodic loops have a floor; the scale-down window never shrinks below 3 cycles.
    for cfg in (cfg_slow, cfg_fast):
        assert cfg.scrape.intervalSeconds >= 0.4
        assert (
            cfg.inference[0].scaleDown.stabilizationSeconds >= 3 * cfg.scrape.intervalSeconds - 1e-9
        )


# ---- the KEDA driver against a real gRPC server ----------------------------------------
class FakeScaler(pb_grpc.ExternalScalerServicer):
    """Answers every trigger with `value`, or aborts with `error`."""

    def __init__(self, value: float, error: grpc.StatusCode | None) -> None:
        self.value, self.error = value, error

    async def _check(self, context: grpc.aio.ServicerContext) -> None:
        if self.error is not None:
            await context.abort(self.error, "no fresh data")

    async def GetMetricSpec(
        self, request: pb.ScaledObjectRef, context: grpc.aio.ServicerContext
    ) -> pb.GetMetricSpecResponse:
        await self._check(context)
        return pb.GetMetricSpecResponse(
            metricSpecs=[pb.MetricSpec(metricName="m", targetSize=1, targetSizeFloat=1.0)]
        )

    async def GetMetrics(
        self, request: pb.GetMetricsRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetMetricsResponse:
        await self._check(context)
        v = self.value
        return pb.GetMetricsResponse(
            metricValues=[pb.MetricValue(metricName="m", metricValue=int(v), metricValueFloat=v)]
        )

    async def IsActive(
        self, request: pb.ScaledObjectRef, context: grpc.aio.ServicerContext
    ) -> pb.IsActiveResponse:
        await self._check(context)
        return pb.IsActiveResponse(result=self.value > 0)

    async def StreamIsActive(
        self, request: pb.ScaledObjectRef, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.IsActiveResponse]:
        yield await self.IsActive(request, context)  # the driver polls; one answer is enough


class RecordingActuator:
    def __init__(self) -> None:
        self.hpa_calls: list[tuple[str, float, float]] = []
        self.job_calls: list[tuple[str, float]] = []

    def hpa(self, service: str, value: float, target: float, *, why: str) -> None:
        self.hpa_calls.append((service, value, target))

    def scaled_job(self, research_class: str, metric: float) -> None:
        self.job_calls.append((research_class, metric))


@pytest.mark.parametrize(
    ("value", "error", "want_hpa", "want_jobs", "want_error"),
    [
        pytest.param(7.0, None, [("chat", 7.0, 1.0)] * 3, [("eval", 7.0)] * 3, None, id="answers"),
        # KEDA prefers the float field when it is > 0.
        pytest.param(2.5, None, [("chat", 2.5, 1.0)] * 3, [("eval", 2.5)] * 3, None, id="float"),
        # Inference without data: nothing applied; after 3 failures the fallback keeps
        # the replicas. Research: the failing trigger is skipped (no Jobs).
        pytest.param(0.0, grpc.StatusCode.UNAVAILABLE, [], [], "fallback", id="unavailable"),
    ],
)
async def test_driver_applies_only_what_grpc_answered(
    value: float,
    error: grpc.StatusCode | None,
    want_hpa: list[tuple[str, float, float]],
    want_jobs: list[tuple[str, float]],
    want_error: str | None,
) -> None:
    server = grpc.aio.server()
    pb_grpc.add_ExternalScalerServicer_to_server(FakeScaler(value, error), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    act = RecordingActuator()
    driver = KedaDriver(
        stub=pb_grpc.ExternalScalerStub(channel),
        actuator=act,
        scaled_objects=[ScaledObject("vllm-chat", "serving", "chat")],
        scaled_jobs=[ScaledJob("research-eval", "research", "eval")],
        so_interval_s=1.0,
        sj_interval_s=1.0,
        scaler_address=f"127.0.0.1:{port}",
    )
    try:
        for _ in range(3):
            await driver.poll_scaled_object(driver.scaled_objects[0])
            await driver.poll_scaled_job(driver.scaled_jobs[0])
    finally:
        await channel.close(None)
        await server.stop(None)
    assert act.hpa_calls == want_hpa
    assert act.job_calls == want_jobs
    so = driver.answers["vllm-chat"]
    if want_error is None:
        assert so.error is None and so.value == int(value)
    else:
        assert so.failures == 3 and so.error is not None and want_error in so.error


# ---- the whole demo, briefly -------------------------------------------------------------
def read_timeline(path: Path) -> list[dict[str, float]]:
    with path.open() as f:
        return [
            {k: float(v) if v else float("nan") for k, v in row.items()}
            for row in csv.DictReader(f)
        ]


def read_events(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]


@dataclass(frozen=True)
class DemoRun:
    p: Params
    out: Path
    summary: dict[str, object]


@pytest.fixture(scope="module")
def day(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    """The demo with its defaults (the simulated work queue on), 04:00 → 22:00 of a
    weekday: the night trough, the morning ramp, the evening peak. ~30 s."""
    out = tmp_path_factory.mktemp("day") / "demo"
    p = parse_args(
        [
            "--day-seconds", "40", "--hours", "18", "--start-hour", "4",
            "--pool-gpus", "32", "--no-live", "--out", str(out),
        ]
    )  # fmt: skip
    return DemoRun(p, out, asyncio.run(run(p)))


def test_demo_lends_at_night_and_gives_back_when_traffic_rises(day: DemoRun) -> None:
    p, out, summary = day.p, day.out, day.summary
    on_disk = json.loads((out / "summary.json").read_text())
    assert on_disk == json.loads(json.dumps(summary))
    for key in (
        "research_gpu_hours",
        "max_inference_replicas",
        "min_inference_replicas",
        "preemptions",
        "slo_attainment",
        "grpc_calls",
    ):
        assert key in on_disk, key
    assert on_disk["sim_hours"] == pytest.approx(18.0)
    assert not on_disk["interrupted"]

    # Every call the driver made reached the real gRPC server, and nothing else called it.
    assert on_disk["grpc_calls"] > 50
    assert on_disk["scaler_grpc_requests"] == on_disk["grpc_calls"]
    assert set(on_disk["grpc_calls_by_method"]) == {"GetMetricSpec", "GetMetrics", "IsActive"}

    rows = read_timeline(out / "timeline.csv")
    peak = max(r["rps"] for r in rows)
    low = [r for r in rows if r["rps"] <= 0.3 * peak]
    high = [r for r in rows if r["rps"] >= 0.8 * peak]
    assert len(low) >= 10 and len(high) >= 5
    # Research Jobs ran while traffic was low: most of the lendable GPUs were lent.
    lendable = p.pool_gpus - p.reserve_gpus
    low_research = sum(r["research_gpus"] for r in low) / len(low)
    assert low_research >= 0.5 * (lendable - min(r["inference_gpus"] for r in low))
    # Inference scaled up when traffic rose, and research gave way.
    low_ready = sum(r["ready"] for r in low) / len(low)
    high_ready = sum(r["ready"] for r in high) / len(high)
    assert high_ready >= low_ready + 2
    assert sum(r["research_gpus"] for r in high) / len(high) < low_research
    assert on_disk["max_inference_replicas"] > on_disk["min_inference_replicas"]
    assert on_disk["research_gpu_hours"] > 0
    # The pool is never oversubscribed.
    for r in rows:
        assert r["inference_gpus"] + r["research_gpus"] + r["research_terminating_gpus"] <= 32

    # Every Deployment change came from a gRPC answer (HPA: value / target 1, clamped).
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    scales = [e for e in events if e["kind"] == "scale"]
    assert any(e["detail"]["to"] > e["detail"]["from"] for e in scales)
    for e in scales:
        why = e["detail"]["why"]
        assert why.startswith("GetMetrics="), why
        answer = int(why.removeprefix("GetMetrics="))
        to, frm = e["detail"]["to"], e["detail"]["from"]
        assert to == max(1, min(p.max_replicas, answer)) or to == max(2 * frm, frm + 4), e
    assert any(e["kind"] == "jobs-created" for e in events)

    png = (out / "pool.png").read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 10_000
    assert "time of day" in (out / "frames.txt").read_text()


def test_a_drained_queue_starts_no_more_jobs(tmp_path: Path) -> None:
    """Little work, early hours: the eval queue drains with GPUs still free. The scaler
    counts the items, so KEDA's driver starts no Job for the class after its last item
    (before, KEDA's `min` started the slots' worth every poll, whose workers exited)."""
    out = tmp_path / "demo"
    p = parse_args(
        [
            "--day-seconds", "40", "--hours", "4", "--start-hour", "2", "--pool-gpus", "32",
            "--queue-hours", "0.5", "--no-live", "--out", str(out),
        ]
    )  # fmt: skip
    summary = asyncio.run(run(p))
    queue = summary["research_queue"]
    assert isinstance(queue, dict)
    classes: dict[str, dict[str, int]] = queue["classes"]
    events = read_events(out)
    drained = [c for c, v in classes.items() if v["done"] == v["total"]]
    assert drained, f"no class drained, nothing to test: {classes}"
    # The scaler's read and KEDA's poll can each be one period old when the last item
    # ends (periods of MIN_PERIOD_S real seconds at this compression): one more poll may
    # still start a Job whose worker finds nothing; none after that.
    settle = 3 * MIN_PERIOD_S * p.compression
    for c in drained:
        last = max(e["t"] for e in events if e["kind"] == "item-done" and e["subject"] == c)
        later = [
            e
            for e in events
            if e["kind"] == "jobs-created" and e["subject"] == c and e["t"] > last + settle
        ]
        assert later == [], (c, last, later)
    empty = [
        e
        for e in events
        if e["kind"] == "worker-exit"
        and e["detail"]["items"] == 0
        and e["detail"]["why"] == "queue empty"
    ]
    assert len(empty) <= 4, empty  # one poll's worth (eval's 4 slots), not one per poll


def read_queue(out: Path) -> dict[str, list[dict[str, float]]]:
    """queue.csv by class, in time order."""
    by: dict[str, list[dict[str, float]]] = {}
    with (out / "queue.csv").open() as f:
        for row in csv.DictReader(f):
            cls = row.pop("research_class")
            by.setdefault(cls, []).append({k: float(v) for k, v in row.items()})
    return by


def test_work_queue_drains_at_night_and_refills_when_the_morning_preempts(day: DemoRun) -> None:
    out, summary = day.out, day.summary
    queue = summary["research_queue"]
    assert isinstance(queue, dict) and queue["simulated"] is True
    classes: dict[str, dict[str, int]] = queue["classes"]
    events = read_events(out)
    series = read_queue(out)
    assert set(series) == set(classes) == {"eval", "finetune", "pretrain"}

    def waiting(r: dict[str, float]) -> float:
        return r["queued"] + r["requeued"]

    # The night ends at the trough: the lowest hourly request rate.
    rows = read_timeline(out / "timeline.csv")
    hourly = [sum(r["rps"] for r in rows[i : i + 12]) for i in range(len(rows) - 11)]
    trough_t = rows[hourly.index(min(hourly)) + 6]["t"]
    assert 4 * 3600 <= trough_t <= 9 * 3600, trough_t  # 08:00–13:00 of the trace

    # Drains at night: every class has fewer items waiting at the trough than seeded, and
    # the whole queue at most 3/4 of its seed.
    at_trough = {c: next(r for r in s if r["t"] >= trough_t) for c, s in series.items()}
    for c, s in series.items():
        assert s[0]["t"] == 0 and waiting(s[0]) == s[0]["submitted"] == classes[c]["submitted"]
        assert waiting(at_trough[c]) < s[0]["submitted"], c
    seeded = sum(s[0]["submitted"] for s in series.values())
    assert sum(waiting(r) for r in at_trough.values()) <= 0.75 * seeded
    # Nothing is submitted after the seed: the queue grows only by requeued items.
    for c, s in series.items():
        for a, b in itertools.pairwise(s):
            assert waiting(b) - waiting(a) <= b["requeue_events"] - a["requeue_events"], (c, b)
            assert b["done"] >= a["done"]

    # Refills in the morning: preemptions send items back, and a queue grows again.
    requeued = [e for e in events if e["kind"] == "item-requeued"]
    assert any(e["t"] > trough_t for e in requeued), "no item requeued after the trough"
    rises = [
        (c, b["t"])
        for c, s in series.items()
        for a, b in itertools.pairwise(s)
        if b["t"] > trough_t and waiting(b) > waiting(a)
    ]
    assert rises, "no queue grew in the morning"

    # Per item, the events follow the queue's state machine; done at most once; a
    # requeued item keeps its checkpoint and resumes from it.
    state: dict[str, str] = {}
    ckpt: dict[str, float] = {}
    cls_of: dict[str, str] = {}
    for e in events:
        item = e["detail"].get("item")
        if item is None:
            continue
        kind, was, kept = (
            e["kind"],
            state.get(item, "queued"),
            e["detail"]["checkpointed_gpu_hours"],
        )
        cls_of[item] = e["subject"]
        if kind == "item-taken":
            assert was in ("queued", "requeued"), (item, was, e)
            assert kept == ckpt.get(item, 0.0), (item, e)
            state[item] = "running"
        elif kind == "item-requeued":
            assert was == "running", (item, e)
            assert kept >= ckpt.get(item, 0.0)
            state[item], ckpt[item] = "requeued", kept
        elif kind == "item-done":
            assert was == "running", (item, "completed twice" if was == "done" else was)
            state[item] = "done"
    # summary.json matches the events.
    for c, counts in classes.items():
        mine = [e for e in events if e["subject"] == c]
        (seed,) = [e for e in mine if e["kind"] == "items-seeded"]
        assert seed["detail"]["n"] == counts["submitted"] == counts["total"]
        assert counts["done"] == sum(e["kind"] == "item-done" for e in mine)
        assert counts["preempted_requeued"] == sum(e["kind"] == "item-requeued" for e in mine)
        assert counts["taken"] == sum(e["kind"] == "item-taken" for e in mine)
        exits = [e for e in mine if e["kind"] == "worker-exit"]
        assert counts["worker_exits"] == len(exits)
        assert counts["jobs_took_nothing"] == sum(e["detail"]["items"] == 0 for e in exits)
        assert counts["preempted_requeued"] <= sum(e["kind"] == "preempt" for e in mine)
        final = [st for it, st in state.items() if cls_of[it] == c]
        assert counts["running"] == final.count("running")
        assert counts["requeued"] == final.count("requeued")
        assert counts["done"] == final.count("done")
        assert counts["queued"] == counts["submitted"] - len(final)
        assert (
            counts["queued"] + counts["requeued"] + counts["running"] + counts["done"]
            == (counts["submitted"])
        )
        last = series[c][-1]
        assert last["t"] == pytest.approx(18 * 3600)
        assert [last[k] for k in ("queued", "requeued", "running", "done")] == [
            counts[k] for k in ("queued", "requeued", "running", "done")
        ]
    assert sum(c["done"] for c in classes.values()) > 0
    # The scaler counts the items: never more Jobs than its slots, and few workers that
    # find the queue empty (a Job started as the last items finish). With KEDA's queue
    # trigger beside the scaler's, an empty queue started the free slots' worth every
    # poll: 849 of 854 Jobs in the default day (docs/demo.md). (A preempted Job's new pod
    # that finds 0 slots takes nothing too: that is the fail-closed check, counted apart.)
    created = [e["detail"] for e in events if e["kind"] == "jobs-created"]
    assert created
    for d in created:
        assert d["n"] <= d["slots"], d
    jobs = sum(d["n"] for d in created)
    found_empty = [
        e
        for e in events
        if e["kind"] == "worker-exit"
        and e["detail"]["items"] == 0
        and e["detail"]["why"] == "queue empty"
    ]
    assert len(found_empty) <= max(3, jobs // 5), (jobs, found_empty)
    assert summary["research_jobs_took_nothing"] == sum(
        c["jobs_took_nothing"] for c in classes.values()
    )
    frames = (out / "frames.txt").read_text()
    assert "work queue (simulated)" in frames


QUEUE_SUMMARY = {
    "simulated": True,
    "seed_hours": 10.0,
    "classes": {
        "eval": {
            "done": 19,
            "submitted": 40,
            "queued": 3,
            "requeued": 1,
            "running": 4,
            "preempted_requeued": 2,
        },
    },
}


@pytest.mark.parametrize(
    ("queue", "label"),
    [
        pytest.param(QUEUE_SUMMARY, "research Jobs (workers) completed", id="queue"),
        pytest.param(None, "research Jobs completed", id="no-queue"),
    ],
)
def test_the_summary_says_a_job_is_a_worker_when_items_are_queued(
    queue: dict[str, object] | None, label: str
) -> None:
    """With the queue a Job is a worker that may do many items or none, so its count is not
    the items done (8 Jobs, 19 items here); the summary's label says so, on one line of an
    80-column terminal (the width rich falls back to without one, as under `make run`)."""
    console = Console(record=True, width=80)
    console.print(summary_table({"research_jobs_completed": 8, "research_queue": queue}))
    text = console.export_text()
    (row,) = [line for line in text.splitlines() if "research Jobs" in line]
    assert [cell.strip() for cell in row.strip("│ ").split("│")] == [label, "8"]
    assert ("19/40" in text) == (queue is not None)


async def test_no_queue_keeps_the_never_ending_backlog(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    p = parse_args(
        [
            "--day-seconds", "40", "--hours", "3", "--start-hour", "4", "--pool-gpus", "32",
            "--no-live", "--no-queue", "--out", str(out),
        ]
    )  # fmt: skip
    summary = await run(p)
    assert summary["research_queue"] is None and summary["research_jobs_took_nothing"] is None
    harvested = summary["research_gpu_hours"]
    assert isinstance(harvested, float) and harvested > 0  # research Jobs ran, without items
    assert not (out / "queue.csv").exists()
    kinds = {e["kind"] for e in read_events(out)}
    assert "jobs-created" in kinds
    assert not kinds & {"items-seeded", "item-taken", "item-done", "item-requeued"}
    created = [e for e in read_events(out) if e["kind"] == "jobs-created"]
    assert all(set(e["detail"]) == {"n"} for e in created)
    assert all(math.isnan(r["queue_waiting"]) for r in read_timeline(out / "timeline.csv"))
    assert "work queue" not in (out / "frames.txt").read_text()


def test_ctrl_c_stops_cleanly_and_still_writes_the_summary(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    cmd = [
        sys.executable, "-m", "scaler.cli", "demo", "--day-seconds", "600", "--pool-gpus", "16",
        "--no-live", "--out", str(out),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()  # the first status line: the day is running
        assert first.startswith("00:"), first
        time.sleep(3)
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, rest
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] is True
    assert 0 < summary["sim_hours"] < 24
    assert summary["grpc_calls"] > 0
    assert (out / "pool.png").read_bytes().startswith(PNG_MAGIC)
    assert "interrupted" in rest
