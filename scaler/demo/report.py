"""What a run leaves behind: summary.json, the timeline, the events, the view captures,
the pool-split plot and, with the simulated work queue, queue.csv."""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING

import httpx
from prometheus_client.parser import text_string_to_metric_families

from scaler.demo.keda import KedaDriver
from scaler.demo.scenario import Params
from scaler.demo.view import plot_pool

if TYPE_CHECKING:
    from scaler.demo.run import Demo


async def scaler_grpc_requests(metrics_port: int) -> int:
    """gRPC requests the scaler counted, read from its own /metrics endpoint."""
    async with httpx.AsyncClient(timeout=5.0) as client:
        r = await client.get(f"http://127.0.0.1:{metrics_port}/metrics")
        r.raise_for_status()
    total = 0.0
    for fam in text_string_to_metric_families(r.text):
        if fam.name.endswith("grpc_requests"):
            total += sum(s.value for s in fam.samples if s.name.endswith("_total"))
    return int(total)


def summarize(
    p: Params,
    d: Demo,
    driver: KedaDriver,
    server_side: int | None,
    real_s: float,
    interrupted: bool,
) -> dict[str, object]:
    w, c = d.world, d.world.cluster
    q = c.queue
    w.slo.advance(w.log, w.now)
    ready = [r.ready for r in w.records]
    arrived = w.arrived()
    return {
        "research_gpu_hours": round(c.research_gpu_s / 3600.0, 2),
        "research_useful_gpu_hours": round(c.useful_gpu_s(w.now) / 3600.0, 2),
        "research_gpu_hours_lost": round(c.ledger.lost_gpu_s / 3600.0, 2),
        "research_jobs_created": c.jobs_created,
        "research_jobs_completed": c.jobs_done,
        "max_inference_replicas": max(ready) if ready else None,
        "min_inference_replicas": min(ready) if ready else None,
        "preemptions": c.preemptions,
        "slo_attainment": w.slo.attainment,
        "slo_ttft_seconds": p.slo_ttft_s,
        "grpc_calls": sum(driver.calls.values()),
        "grpc_calls_by_method": dict(driver.calls),
        "scaler_grpc_requests": server_side,
        "requests": arrived,
        "sim_hours": round(w.now / 3600.0, 3),
        "start_hour": p.start_hour,
        "interrupted": interrupted,
        "real_seconds": round(real_s, 1),
        "day_seconds": p.day_seconds,
        "compression": round(p.compression, 1),
        "pool_gpus": p.pool_gpus,
        "gpus_per_replica": p.gpus_per_replica,
        "reserve_gpus": p.reserve_gpus,
        "trace": p.trace,
        "lengths": p.lengths,
        "peak_rps": p.peak_rps,
        "seed": p.seed,
        "config_writes": d.config.writes,
        # Added with the simulated work queue (None with --no-queue).
        "research_jobs_took_nothing": None if q is None else sum(q.took_nothing.values()),
        "research_queue": None
        if q is None
        else {
            "simulated": True,
            "seed_hours": p.queue_hours,
            "classes": q.summary(),
        },
    }


def write_outputs(p: Params, d: Demo, summary: dict[str, object], frames: list[str]) -> None:
    out = p.out
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    with (out / "timeline.csv").open("w") as f:
        fields = [x.name for x in dataclasses.fields(d.world.records[0])] if d.world.records else []
        f.write(",".join(fields) + "\n")
        for r in d.world.records:
            row = dataclasses.asdict(r)
            f.write(",".join("" if row[k] is None else str(row[k]) for k in fields) + "\n")
    with (out / "events.jsonl").open("w") as f:
        for e in d.world.cluster.events:
            f.write(json.dumps(dataclasses.asdict(e)) + "\n")
    (out / "frames.txt").write_text("\n".join(frames))
    if d.world.queue_records:
        with (out / "queue.csv").open("w") as f:
            fields = [x.name for x in dataclasses.fields(d.world.queue_records[0])]
            f.write(",".join(fields) + "\n")
            for qr in d.world.queue_records:
                row = dataclasses.asdict(qr)
                f.write(",".join(str(row[k]) for k in fields) + "\n")
    title = (
        f"{p.trace} (rate curve) with {p.lengths} lengths, peak {p.peak_rps:.0f} req/s; "
        f"{p.pool_gpus} GPUs, {p.gpus_per_replica} per replica; "
        f"{summary['research_gpu_hours']} research GPU-hours, {summary['preemptions']} preemptions"
    )
    plot_pool(
        d.world.records,
        p.pool_gpus,
        p.reserve_gpus,
        p.start_hour,
        out / "pool.png",
        title,
        d.world.queue_records,
    )
