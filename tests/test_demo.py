"""`gpu-pool-scaler demo`: the simulated cluster's rules, a replica's /metrics over real
HTTP, and the whole demo run briefly at high speed (real scaler, real gRPC, real HTTP)."""

from __future__ import annotations

import ast
import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import httpx
import pytest

from scaler._proto import externalscaler_pb2 as pb
from scaler._proto import externalscaler_pb2_grpc as pb_grpc
from scaler.core.exposition import read_sample
from scaler.core.load import EngineSample
from scaler.demo.cluster import DemoCluster
from scaler.demo.engine_http import EngineServer
from scaler.demo.keda import KedaDriver, ScaledJob, ScaledObject
from scaler.demo.run import run
from scaler.demo.scenario import parse_args
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


def make_cluster(pool_gpus: int = 16) -> DemoCluster:
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


async def test_demo_lends_at_night_and_gives_back_when_traffic_rises(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    # 04:00 → 22:00 of a weekday: the night trough, the morning ramp, the evening peak.
    p = parse_args(
        [
            "--day-seconds", "40", "--hours", "18", "--start-hour", "4",
            "--pool-gpus", "32", "--no-live", "--out", str(out),
        ]
    )  # fmt: skip
    summary = await run(p)

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
