"""Benchmarks of gpu-pool-scaler (see docs/bench.md)."""

from pathlib import Path

# The real vLLM 0.32.0 CPU captures the benches serve and parse (tests/data/README.md).
CAPTURES = Path(__file__).resolve().parent.parent / "tests" / "data" / "vllm-0.32.0-cpu"
