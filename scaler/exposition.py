"""Read an engine's Prometheus text exposition into an EngineSample.

First version: prometheus_client's parser over the whole text. (Issue 3 replaces the
parsing with a faster family-filtered reader, keeping this function's contract.)
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from prometheus_client.parser import text_string_to_metric_families

from scaler.load import EngineSample

Engine = Literal["vllm", "sglang", "tgi"]


class ParseError(ValueError):
    """The exposition is malformed; the target is marked failed for this scrape."""


@dataclass(frozen=True, slots=True)
class _Names:
    waiting: tuple[str, ...]
    running: tuple[str, ...]
    kv: tuple[str, ...]  # first present wins (renamed across versions)
    prompt_tokens: tuple[str, ...]
    generation_tokens: tuple[str, ...]
    preemptions: tuple[str, ...]


NAMES: dict[str, _Names] = {
    "vllm": _Names(
        waiting=("vllm:num_requests_waiting",),
        running=("vllm:num_requests_running",),
        kv=("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        prompt_tokens=("vllm:prompt_tokens_total",),
        generation_tokens=("vllm:generation_tokens_total",),
        preemptions=("vllm:num_preemptions_total",),
    ),
    "sglang": _Names(
        waiting=("sglang:num_queue_reqs",),
        running=("sglang:num_running_reqs",),
        kv=("sglang:token_usage",),
        prompt_tokens=("sglang:prompt_tokens_total",),
        generation_tokens=("sglang:generation_tokens_total",),
        preemptions=(),
    ),
    "tgi": _Names(
        waiting=("tgi_queue_size",),
        running=("tgi_batch_current_size",),
        kv=(),
        prompt_tokens=(),
        generation_tokens=(),
        preemptions=(),
    ),
}


def _per_engine(
    samples: dict[str, list[tuple[dict[str, str], float]]],
    names: Iterable[str],
    model: str | None,
) -> dict[str, float] | None:
    for name in names:
        rows = samples.get(name)
        if rows is None:
            continue
        out: dict[str, float] = defaultdict(float)
        for labels, value in rows:
            if model is not None and labels.get("model_name", model) != model:
                continue
            out[labels.get("engine", "0")] += value
        return dict(out)
    return None


def read_sample(text: str, engine: Engine = "vllm", model: str | None = None) -> EngineSample | None:
    """Return the target's load, or None when it exports no engine families (no data).

    Raises ParseError on malformed text.
    """
    names = NAMES[engine]
    wanted = {
        *names.waiting,
        *names.running,
        *names.kv,
        *names.prompt_tokens,
        *names.generation_tokens,
        *names.preemptions,
        "process_start_time_seconds",
    }
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name in wanted:
                    samples.setdefault(s.name, []).append((s.labels, s.value))
    except (ValueError, TypeError, IndexError) as e:
        raise ParseError(str(e) or type(e).__name__) from None

    waiting = _per_engine(samples, names.waiting, model)
    running = _per_engine(samples, names.running, model)
    if waiting is None or running is None:
        return None  # e.g. vLLM --disable-log-stats: no data, which is not zero load
    kv = _per_engine(samples, names.kv, model) or {}
    kv_values = list(kv.values()) or [0.0]

    def total(ns: tuple[str, ...]) -> float | None:
        per = _per_engine(samples, ns, model)
        return None if per is None else sum(per.values())

    start = samples.get("process_start_time_seconds")
    return EngineSample(
        waiting=sum(waiting.values()),
        running=sum(running.values()),
        kv_usage_mean=sum(kv_values) / len(kv_values),
        kv_usage_max=max(kv_values),
        prompt_tokens_total=total(names.prompt_tokens),
        generation_tokens_total=total(names.generation_tokens),
        preemptions_total=total(names.preemptions),
        process_start_seconds=start[0][1] if start else None,
        engines=max(len(waiting), 1),
    )
