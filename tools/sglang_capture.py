"""Write SGLang `/metrics` expositions with SGLang's own collectors (no GPU, no server).

    python3 tools/vllm_peer.py build-model     # the venv (torch) and the tiny model
    .cache/vllm-venv/bin/python tools/sglang_capture.py --out tests/data/sglang-0.5.23 \
        [--priority-scheduling] [--dp-size N] [--tp-size N [--all-schedulers]] [--pp-size N] \
        [--site .cache/sglang-site] [--model .cache/tiny-llama]

Run it with the vLLM venv's Python (it has torch and prometheus_client). SGLang and the
few modules its import needs beyond that venv are installed into `--site` without their
dependencies (`SITE_REQS`, pinned; reused while its marker matches the list; ~250 MB).

An SGLang server cannot run here (no GPU; its CPU backend needs a source build of its
kernels), but what it serves on `/metrics` is written by these classes into
prometheus_client's multiprocess directory and read back by `MultiProcessCollector`
(`sglang.srt.utils.common.add_prometheus_middleware`). So this script does what the
server's processes do: it builds the runtime context from `ServerArgs`, creates the
scheduler's collector with `SchedulerMetricsCollector.init_new` and the tokenizer's with
`tokenizer_metric_labels()`, logs one `SchedulerStats` and a few requests through the
calls `TokenizerManager.collect_metrics` makes, and renders the directory as the server's
`/metrics` route does. Each scheduler logs in a child process of its own, as SGLang runs
them, and the tokenizer in this one; each placed by SGLang's own `spawn_world_rank` and
logging only where SGLang's collector says it may. One file with
`--enable-priority-scheduling` (queue gauges then carry a per-priority breakdown beside the
total), one without, one with two data-parallel schedulers (`--dp-size 2`: each its own
queue, labelled `dp_rank`), one with two pipeline stages (`--pp-size 2`: both log the
engine's one queue, labelled `pp_rank`) and one with two TP ranks and
`--enable-metrics-for-all-schedulers` (`--tp-size 2 --all-schedulers`: both log it,
labelled `tp_rank`; without the flag only rank 0 logs, as in the default file).

The numbers it logs are fixed (below), so the tests can assert what the scaler reads. A
re-run writes the same lines up to the families' order and the value of the `pid` label
some gauges carry (the multiprocess files are read in directory order).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vllm_peer import DEFAULT_MODEL, ROOT, locked  # tools/ is not a package

DEFAULT_SITE = ROOT / ".cache" / "sglang-site"
# SGLang, and what importing its collectors needs that the vLLM venv lacks (found by
# importing it in that venv: torchvision for torch 2.13, orjson, IPython, traitlets, gguf).
SITE_REQS = (
    "sglang==0.5.23",
    "torchvision==0.28.0",
    "orjson==3.13.0",
    "ipython==9.19.1",
    "traitlets==5.16.1",
    "gguf==0.19.0",
)
SITE_MARKER = "gpu-pool-scaler-site-ok"

# What each capture logs. Scheduler: requests running / waiting (total, per priority),
# KV-token usage. Tokenizer: (stream, priority, TTFT seconds) per request, then
# (priority, interval seconds, new tokens) per decode step, then finished requests.
RUNNING = (5, {0: 3, 1: 2})
WAITING = (7, {0: 4, 1: 3})
TOKEN_USAGE = 0.42
USAGE_STEP = 0.2  # each further data-parallel rank's token usage is this much higher
TTFT = [
    (True, 0, 0.15),
    (True, 0, 0.5),
    (True, 1, 1.5),
    (True, 1, 3.0),
    (False, 0, 0.3),
    (False, 1, 5.0),
]
ITL = [(0, 0.05, 5), (1, 0.3, 2), (1, 12.0, 1)]
FINISHED = [(True, 0, 100, 20), (False, 1, 40, 8)]  # stream, priority, prompt, generation


@dataclass(frozen=True)
class Layout:
    """The server flags a capture varies: how many schedulers there are and which log."""

    priority_scheduling: bool = False
    dp_size: int = 1  # data-parallel schedulers, each its own queue
    tp_size: int = 1  # tensor-parallel ranks of one engine: one queue
    pp_size: int = 1  # pipeline stages of one engine: each stage holds the same requests
    all_schedulers: bool = False  # --enable-metrics-for-all-schedulers

    def flags(self) -> list[str]:
        return [
            *(["--priority-scheduling"] if self.priority_scheduling else []),
            *(["--all-schedulers"] if self.all_schedulers else []),
            "--dp-size", str(self.dp_size),
            "--tp-size", str(self.tp_size),
            "--pp-size", str(self.pp_size),
        ]  # fmt: skip


def _server_args(model: str, layout: Layout) -> Any:
    from sglang.srt.server_args import ServerArgs

    return ServerArgs(
        model_path=model,
        served_model_name="tiny-llama",
        enable_metrics=True,
        enable_priority_scheduling=layout.priority_scheduling,
        enable_metrics_for_all_schedulers=layout.all_schedulers,
        dp_size=layout.dp_size,
        tp_size=layout.tp_size,
        pp_size=layout.pp_size,
        device="cpu",
    )


def log_scheduler(model: str, layout: Layout, dp_rank: int, pp_rank: int, tp_rank: int) -> None:
    """One scheduler process: its collector logs `RUNNING`, `WAITING` and a token usage into
    the multiprocess directory, if SGLang lets this rank log (by default attention-TP rank
    0 of each pipeline stage; every rank with `--enable-metrics-for-all-schedulers`). Every
    data-parallel rank logs the same counts (so the capture's queue is dp_size × 7) and a
    usage of `TOKEN_USAGE` + `USAGE_STEP` × rank (so mean and max differ); the ranks of one
    engine (TP ranks, pipeline stages) log the same numbers, as they hold the same requests."""
    from sglang.srt import runtime_context
    from sglang.srt.observability.metrics_collector import (
        QueueCount,
        SchedulerMetricsCollector,
        SchedulerStats,
    )

    args = _server_args(model, layout)
    # The launcher's placement: a world rank from (tp, pp), and the data-parallel
    # controller's dp_rank (None without one).
    world = runtime_context.spawn_world_rank(args, tp_rank=tp_rank, pp_rank=pp_rank)
    ranks = runtime_context.SpawnRanks(
        world_rank=world, dp_rank=dp_rank if layout.dp_size > 1 else None
    )
    with runtime_context.use_context(
        runtime_context.create_context(args, role="scheduler", ranks=ranks)
    ):
        context = SchedulerMetricsCollector.init_new(
            server_args=args,
            enable_priority_scheduling=layout.priority_scheduling,
            enable_lora=False,
            enable_hierarchical_cache=False,
        )
        if not context.current_scheduler_metrics_enabled:
            return  # SchedulerMetricsReporter logs stats only on such ranks
        sched = context.collector
        assert sched is not None

        def count(total: int, by: dict[int, int]) -> QueueCount:
            return QueueCount(total=total, by_priority=by if layout.priority_scheduling else None)

        sched.log_stats(
            SchedulerStats(
                num_running_reqs=count(*RUNNING),
                num_queue_reqs=count(*WAITING),
                token_usage=TOKEN_USAGE + USAGE_STEP * dp_rank,
                full_token_usage=TOKEN_USAGE + USAGE_STEP * dp_rank,
            )
        )


def capture(model: str, site: Path, layout: Layout) -> str:
    """The `/metrics` body, from a multiprocess directory that is removed afterwards (one
    per run: a kept one would leak into /tmp on every test run)."""
    with tempfile.TemporaryDirectory(prefix="sglang-metrics-") as multiproc:
        return _render(model, site, layout, multiproc)


def _render(model: str, site: Path, layout: Layout, multiproc: str) -> str:
    """The server's processes: one scheduler per (data-parallel rank, pipeline stage, TP
    rank) (child processes, as SGLang runs them), the tokenizer (this one), then the
    `/metrics` route's rendering."""
    # Set before prometheus_client is imported: SGLang's own order (its comment says so).
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = multiproc
    for dp in range(layout.dp_size):
        for pp in range(layout.pp_size):
            for tp in range(layout.tp_size):
                subprocess.run(
                    [sys.executable, __file__, "--site", str(site), "--model", model,
                     *layout.flags(), "--scheduler-rank", f"{dp},{pp},{tp}"],
                    check=True,
                )  # fmt: skip
    from prometheus_client import CollectorRegistry, generate_latest, multiprocess
    from sglang.srt import runtime_context
    from sglang.srt.observability.metrics_collector import (
        TokenizerMetricsCollector,
        tokenizer_metric_labels,
    )

    args = _server_args(model, layout)
    context = runtime_context.create_context(
        args, role="scheduler", ranks=runtime_context.SpawnRanks(world_rank=0)
    )
    with runtime_context.use_context(context):
        base = tokenizer_metric_labels()
        tok = TokenizerMetricsCollector(server_args=args, labels=base)

        def labels(priority: int) -> dict[str, str]:
            # TokenizerManager.collect_metrics: the request's priority fills the label.
            if layout.priority_scheduling:
                return {**base, "priority": str(priority)}
            return dict(base)

        for stream, prio, seconds in TTFT:
            tok.observe_time_to_first_token(labels(prio), seconds, stream=stream)
        for prio, interval, tokens in ITL:
            tok.observe_inter_token_latency(labels(prio), interval, tokens)
        for stream, prio, prompt, generated in FINISHED:
            tok.observe_one_finished_request(
                labels(prio), prompt, generated, 0, 1.0, False, is_streaming=stream
            )
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    return generate_latest(registry).decode()


def capture_name(layout: Layout) -> str:
    """metrics.txt, metrics_priority.txt, metrics_dp2.txt, metrics_pp2.txt,
    metrics_tp2_all.txt, ..."""
    return (
        "metrics"
        + ("_priority" if layout.priority_scheduling else "")
        + (f"_dp{layout.dp_size}" if layout.dp_size > 1 else "")
        + (f"_tp{layout.tp_size}" if layout.tp_size > 1 else "")
        + (f"_pp{layout.pp_size}" if layout.pp_size > 1 else "")
        + ("_all" if layout.all_schedulers else "")
        + ".txt"
    )


def install_site(site: Path) -> None:
    """`SITE_REQS` into `site` with this Python's pip, unless a completed install is there."""
    with locked(site.with_name(site.name + ".lock")):
        marker, want = site / SITE_MARKER, " ".join(SITE_REQS) + "\n"
        if marker.exists() and marker.read_text() == want:
            return
        shutil.rmtree(site, ignore_errors=True)  # an incomplete or older install
        env = {k: v for k, v in os.environ.items() if k != "PIP_FIND_LINKS"}
        pip = [sys.executable, "-m", "pip", "install", "--progress-bar", "off", "--no-deps"]
        subprocess.run([*pip, "--only-binary", ":all:", "--target", str(site), *SITE_REQS],
                       check=True, env=env)  # fmt: skip
        marker.write_text(want)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--site", type=Path, default=DEFAULT_SITE, help="where SGLang is installed")
    p.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="for ServerArgs")
    p.add_argument("--out", type=Path, help="directory for the capture")
    p.add_argument("--priority-scheduling", action="store_true")
    p.add_argument("--dp-size", type=int, default=1, help="data-parallel schedulers")
    p.add_argument("--tp-size", type=int, default=1, help="tensor-parallel ranks")
    p.add_argument("--pp-size", type=int, default=1, help="pipeline stages")
    p.add_argument(
        "--all-schedulers", action="store_true", help="--enable-metrics-for-all-schedulers"
    )
    p.add_argument("--scheduler-rank", help=argparse.SUPPRESS)  # a child's "dp,pp,tp"
    a = p.parse_args(argv)
    layout = Layout(a.priority_scheduling, a.dp_size, a.tp_size, a.pp_size, a.all_schedulers)
    if a.scheduler_rank is not None:
        sys.path.insert(0, str(a.site))
        dp, pp, tp = (int(r) for r in a.scheduler_rank.split(","))
        log_scheduler(str(a.model), layout, dp, pp, tp)
        return 0
    if a.out is None:
        p.error("--out is required")
    install_site(a.site)
    sys.path.insert(0, str(a.site))
    a.out.mkdir(parents=True, exist_ok=True)
    out = a.out / capture_name(layout)
    out.write_text(capture(str(a.model), a.site, layout))
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
