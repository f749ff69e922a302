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

import httpx
import pytest

from scaler.demo.cluster import ClassSpec, Cluster, JobPhase, PodPhase, ServiceSpec
from scaler.demo.engine_http import EngineServer
from scaler.demo.run import parse_args, run
from scaler.exposition import read_sample
from scaler.load import EngineSample

REPO = Path(__file__).resolve().parent.parent
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# ---- the simulated cluster -----------------------------------------------------------------
def make_cluster(capacity: int = 16, grace: float = 60.0) -> Cluster:
    return Cluster(
        capacity,
        [ServiceSpec("chat", 4, cold_start_s=100.0)],
        [ClassSpec("train", 4, (1e6, 1e6), 300.0), ClassSpec("eval", 1, (1e6, 1e6), 300.0)],
        grace_s=grace,
    )


@pytest.mark.parametrize(
    ("train", "evals", "scale_to", "want_preempted", "want_research_left"),
    [
        # 16 GPUs: 1 replica (4) + 2 train (8) + 4 eval (4) = 16; +1 replica needs 4 GPUs.
        pytest.param(2, 4, 2, 4, 8, id="newest-evals-evicted-first"),
        # +2 replicas need 8: all 4 evals (newest), then one train.
        pytest.param(2, 4, 3, 5, 4, id="evicts-only-what-is-needed"),
        # Room left: no eviction.
        pytest.param(1, 0, 3, 0, 4, id="fits-without-preemption"),
    ],
)
def test_inference_preempts_newest_research_pods_only_as_needed(
    train: int, evals: int, scale_to: int, want_preempted: int, want_research_left: int
) -> None:
    c = make_cluster()
    c.add_ready("chat", 1, 0.0)
    c.create_jobs("train", train, 0.0)
    c.step(0.0, 10.0)
    c.create_jobs("eval", evals, 10.0)  # started after the train Jobs: newer
    assert c.research_gpus(JobPhase.RUNNING) == 4 * train + evals

    c.scale("chat", scale_to, 20.0, why="test")
    assert c.preemptions == want_preempted
    assert c.research_gpus(JobPhase.RUNNING) == want_research_left
    # Preempted pods keep their GPUs for the grace period; the new replica waits.
    if want_preempted:
        assert c.count("chat", PodPhase.PENDING) > 0
        c.step(20.0, 30.0)
        assert c.count("chat", PodPhase.PENDING) > 0, "bound before the grace period ended"
        c.step(50.0, 30.0)  # grace (60 s) over at 80 s
    assert c.count("chat", PodPhase.PENDING) == 0
    assert c.count("chat", PodPhase.STARTING) == scale_to - 1
    # Preempted Jobs are not lost: pending again (re-created pod), never deleted.
    assert c.unfinished("train") == train and c.unfinished("eval") == evals
    assert c.inference_gpus() + c.research_gpus() <= c.capacity


def test_research_never_preempts_and_waits_for_free_gpus() -> None:
    c = make_cluster(capacity=8)
    c.add_ready("chat", 1, 0.0)
    c.create_jobs("train", 2, 0.0)  # only one fits
    assert (c.jobs_in(JobPhase.RUNNING), c.jobs_in(JobPhase.PENDING)) == (1, 1)
    assert c.count("chat", PodPhase.READY) == 1 and c.preemptions == 0


def test_lost_work_is_what_came_after_the_last_checkpoint() -> None:
    c = make_cluster(capacity=8)
    c.add_ready("chat", 1, 0.0)
    c.create_jobs("train", 1, 0.0)
    for t in range(0, 400, 10):  # checkpoints every 300 s; preempted at 400 s
        c.step(float(t), 10.0)
    c.scale("chat", 2, 400.0, why="test")
    assert c.preemptions == 1
    assert c.lost_gpu_s == pytest.approx(4 * 100.0)


@pytest.mark.parametrize(
    ("ready", "pending_extra", "scale_to", "want_draining"),
    [
        pytest.param(3, 0, 1, 2, id="ready-pods-drain"),
        pytest.param(2, 1, 2, 0, id="pending-pod-removed-first"),
    ],
)
def test_scale_down_removes_pending_before_ready(
    ready: int, pending_extra: int, scale_to: int, want_draining: int
) -> None:
    c = make_cluster(capacity=4 * ready)  # no room for the extra pod: it stays Pending
    c.add_ready("chat", ready, 0.0)
    c.scale("chat", ready + pending_extra, 0.0, why="test")
    removed = c.scale("chat", scale_to, 1.0, why="test")
    assert len(removed) == want_draining
    assert c.count("chat", PodPhase.TERMINATING) == want_draining
    assert c.count("chat", PodPhase.PENDING) == 0
    for pod in removed:
        c.pod_gone(pod, 2.0)
    assert c.inference_gpus() == 4 * scale_to


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
    started = time.monotonic()
    summary = await run(p)
    assert time.monotonic() - started < 85

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
