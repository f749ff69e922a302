"""Where the repository's own test data lives (tests/data/, see its README)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"
FIXTURES = DATA / "vllm-0.32.0-cpu"  # real vLLM 0.32.0 CPU /metrics captures
# SGLang 0.5.23's /metrics written by its own collectors (tools/sglang_capture.py)
SGLANG_CAPTURES = DATA / "sglang-0.5.23"
KEDA_CRDS = DATA / "keda-crds"  # KEDA 2.20 CRDs (descriptions stripped)
