"""Our exposition reader vs prometheus_client's full parse, on any exposition file.

    python -m bench.parse FILE [--engine vllm|sglang|tgi] [--model NAME] [--seconds 2]

Prints both per-read times and their ratio (last line: `ratio: N`), after checking that
both readings give identical values for the families the policy uses (exit 1 if not).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from scaler.core.exposition import read_sample, read_sample_reference


def per_call_seconds(fn: Callable[[], object], budget_s: float) -> float:
    """Best of 5 rounds of as many calls as fit in budget_s/5 (min over noise from others)."""
    fn()
    t0 = time.perf_counter()
    fn()
    once = max(time.perf_counter() - t0, 1e-7)
    n = max(1, int(budget_s / 5 / once))
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n)
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", type=Path)
    ap.add_argument("--engine", default="vllm", choices=["vllm", "sglang", "tgi"])
    ap.add_argument("--model", default=None)
    ap.add_argument("--seconds", type=float, default=2.0, help="time budget per reader")
    args = ap.parse_args(argv)
    text = args.file.read_text(encoding="utf-8")

    ours = read_sample(text, args.engine, args.model)
    ref = read_sample_reference(text, args.engine, args.model)
    if ours != ref:
        print(f"MISMATCH\n  ours:      {ours}\n  reference: {ref}", file=sys.stderr)
        return 1

    t_ours = per_call_seconds(lambda: read_sample(text, args.engine, args.model), args.seconds)
    t_full = per_call_seconds(
        lambda: [s for f in text_string_to_metric_families(text) for s in f.samples],
        args.seconds,
    )
    print(f"file: {args.file} ({len(text)} bytes, {text.count(chr(10))} lines)")
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, "
        f"{platform.python_implementation()} {platform.python_version()}"
    )
    print(f"values identical: {ours}")
    print(f"ours (scaler.core.exposition.read_sample): {t_ours * 1e6:.1f} us")
    print(f"prometheus_client full parse: {t_full * 1e6:.1f} us")
    print(f"ratio: {t_full / t_ours:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
