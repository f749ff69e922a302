"""Write SGLang `/metrics` expositions with SGLang's own collectors (no GPU, no server).

    python tools/sglang_capture.py --site DIR --model .cache/tiny-llama \
        --out tests/data/sglang-0.5.23 [--priority-scheduling]

Run it with a Python that has torch and prometheus_client (the vLLM venv of
`tools/vllm_peer.py install` has both), and `--site DIR` holding SGLang and the few
modules its import needs beyond that venv, installed without their dependencies:

    .cache/vllm-venv/bin/python -m pip install --target DIR --no-deps sglang==0.5.23 \
        torchvision==0.28.0
    .cache/vllm-venv/bin/python -m pip install --target DIR orjson ipython gguf

An SGLang server cannot run here (no GPU; its CPU backend needs a source build of its
kernels), but what it serves on `/metrics` is written by these classes into
prometheus_client's multiprocess directory and read back by `MultiProcessCollector`
(`sglang.srt.utils.common.add_prometheus_middleware`). So this script does what the
server's processes do: it builds the runtime context from `ServerArgs`, creates the
scheduler's collector with `SchedulerMetricsCollector.init_new` and the tokenizer's with
`tokenizer_metric_labels()`, logs one `SchedulerStats` and a few requests through the
calls `TokenizerManager.collect_metrics` makes, and renders the directory as the server's
`/metrics` route does. One file with `--enable-priority-scheduling` (queue gauges then
carry a per-priority breakdown beside the total), one without.

The numbers it logs are fixed (below), so the tests can assert what the scaler reads. A
re-run writes the same lines up to the families' order and the value of the `pid` label
some gauges carry (the multiprocess files are read in directory order).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

# What each capture logs. Scheduler: requests running / waiting (total, per priority),
# KV-token usage. Tokenizer: (stream, priority, TTFT seconds) per request, then
# (priority, interval seconds, new tokens) per decode step, then finished requests.
RUNNING = (5, {0: 3, 1: 2})
WAITING = (7, {0: 4, 1: 3})
TOKEN_USAGE = 0.42
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


def capture(model: str, priority_scheduling: bool) -> str:
    multiproc = tempfile.mkdtemp(prefix="sglang-metrics-")
    # Set before prometheus_client is imported: SGLang's own order (its comment says so).
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = multiproc
    from prometheus_client import CollectorRegistry, generate_latest, multiprocess
    from sglang.srt import runtime_context
    from sglang.srt.observability.metrics_collector import (
        QueueCount,
        SchedulerMetricsCollector,
        SchedulerStats,
        TokenizerMetricsCollector,
        tokenizer_metric_labels,
    )
    from sglang.srt.server_args import ServerArgs

    args = ServerArgs(
        model_path=model,
        served_model_name="tiny-llama",
        enable_metrics=True,
        enable_priority_scheduling=priority_scheduling,
        device="cpu",
    )
    # The one scheduler of a tp=1, dp=1 server: world rank 0, no data-parallel controller.
    context = runtime_context.create_context(
        args, role="scheduler", ranks=runtime_context.SpawnRanks(world_rank=0)
    )
    with runtime_context.use_context(context):
        sched = SchedulerMetricsCollector.init_new(
            server_args=args,
            enable_priority_scheduling=priority_scheduling,
            enable_lora=False,
            enable_hierarchical_cache=False,
        ).collector
        assert sched is not None

        def count(total: int, by: dict[int, int]) -> QueueCount:
            return QueueCount(total=total, by_priority=by if priority_scheduling else None)

        sched.log_stats(
            SchedulerStats(
                num_running_reqs=count(*RUNNING),
                num_queue_reqs=count(*WAITING),
                token_usage=TOKEN_USAGE,
                full_token_usage=TOKEN_USAGE,
            )
        )
        base = tokenizer_metric_labels()
        tok = TokenizerMetricsCollector(server_args=args, labels=base)

        def labels(priority: int) -> dict[str, str]:
            # TokenizerManager.collect_metrics: the request's priority fills the label.
            return {**base, "priority": str(priority)} if priority_scheduling else dict(base)

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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--site", required=True, help="directory holding sglang (pip --target)")
    p.add_argument("--model", required=True, help="a model directory ServerArgs can read")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--priority-scheduling", action="store_true")
    a = p.parse_args(argv)
    sys.path.insert(0, a.site)
    name = "metrics_priority.txt" if a.priority_scheduling else "metrics.txt"
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / name).write_text(capture(a.model, a.priority_scheduling))
    print(a.out / name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
