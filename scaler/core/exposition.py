"""Read an engine's Prometheus text exposition into an EngineSample.

A vLLM exposition is ~50 KB per engine, of which the policy needs about ten lines. Instead
of parsing every family (prometheus_client's parser: ~12 ms on the real capture), we find
the lines of the needed families with `str.find` (memchr-speed) and parse only those, each
strictly (text format 0.0.4: escapes, exponent floats, NaN/±Inf, optional timestamp).
`python -m bench.parse FILE` measures the gain and checks the values match
prometheus_client's; docs/ingestion.md records the numbers.

Decisions (documented in docs/ingestion.md, tested in tests/test_exposition.py):
* No waiting/running family (e.g. vLLM `--disable-log-stats`) -> None, "no data". To tell
  that apart from a body that is not an exposition at all (HTML error page, truncated
  garbage), that rare path validates the whole text with prometheus_client's parser.
* A used sample that is NaN, ±Inf or negative -> ParseError: such a number cannot be load,
  and taking it as 0 would invent a zero. The target is failed for this scrape.
* The same series (name + labels) twice -> ParseError (which one is true is unknowable).
  The same family in two separate groups (out of order) is merged, series by series.
* Series that differ only in SGLang's rank labels (`tp_rank`, `pp_rank`, `moe_ep_rank`)
  are one engine logged by several of its schedulers: read once (`_one_per_engine`).
* Lines of families we do not use are not validated: that is where the speed comes from.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from scaler.core import histogram
from scaler.core.histogram import Buckets
from scaler.core.load import KV_USAGE_MAX, Engine, EngineSample


class ParseError(ValueError):
    """The exposition is malformed; the target is marked failed for this scrape."""


@dataclass(frozen=True, slots=True)
class _Names:
    waiting: tuple[str, ...]  # each tuple: alternatives, the first present wins
    running: tuple[str, ...]
    kv: tuple[str, ...]
    prompt_tokens: tuple[str, ...]
    generation_tokens: tuple[str, ...]
    preemptions: tuple[str, ...]
    swapped: tuple[str, ...] = ()  # vLLM V0: swapped-out requests still wait for the GPU
    # Histogram families (the SLO signal; names without `_bucket`), alternatives as above.
    ttft: tuple[str, ...] = ()
    itl: tuple[str, ...] = ()


NAMES: dict[str, _Names] = {
    "vllm": _Names(
        waiting=("vllm:num_requests_waiting",),
        running=("vllm:num_requests_running",),
        # Renamed in 0.11 (old name hidden in 0.11, removed in 0.12): accept either.
        kv=("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        prompt_tokens=("vllm:prompt_tokens_total",),
        generation_tokens=("vllm:generation_tokens_total",),
        preemptions=("vllm:num_preemptions_total",),
        swapped=("vllm:num_requests_swapped",),
        ttft=("vllm:time_to_first_token_seconds",),
        # Renamed in 0.11 (the old one is deprecated): accept either.
        itl=("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    ),
    "sglang": _Names(
        waiting=("sglang:num_queue_reqs",),
        running=("sglang:num_running_reqs",),
        kv=("sglang:token_usage",),
        prompt_tokens=("sglang:prompt_tokens_total",),
        generation_tokens=("sglang:generation_tokens_total",),
        preemptions=(),
        # With --enable-metrics; bounds are SGLang's own (…, 1, 2, 4, … s by default).
        ttft=("sglang:time_to_first_token_seconds",),
        # Counts tokens per bucket, as vLLM's does. The older time_per_output_token
        # histogram is not read: what it counts (tokens or requests) is not the same
        # across SGLang versions.
        itl=("sglang:inter_token_latency_seconds",),
    ),
    "tgi": _Names(
        waiting=("tgi_queue_size",),
        running=("tgi_batch_current_size",),
        kv=(),  # TGI exports no KV fraction
        # Histogram sums of per-request lengths: total tokens of finished requests.
        prompt_tokens=("tgi_request_input_length_sum",),
        generation_tokens=("tgi_request_generated_tokens_sum",),
        preemptions=(),
    ),
}

START_TIME = "process_start_time_seconds"

# One sample line. Label values: any char but `"`, `\` and newline, or the three escapes.
# Possessive quantifiers (`*+`, Python 3.11+) everywhere: no token can start with what the
# previous one may end with, so nothing needs to be given back, and a hostile line (100 KB
# of spaces inside a used family) fails in linear time instead of blocking the event loop.
_LV = r'"(?:[^"\\\n]|\\[\\"n])*+"'
_PAIR_RE = rf"[a-zA-Z_][a-zA-Z0-9_]*+[ \t]*+=[ \t]*+{_LV}"
_LINE = re.compile(
    r"[a-zA-Z_:][a-zA-Z0-9_:]*+"
    rf"(?:[ \t]*+\{{(?P<labels>[ \t]*+(?:{_PAIR_RE}[ \t]*+(?:,[ \t]*+{_PAIR_RE}[ \t]*+)*+"
    r"(?:,[ \t]*+)?)?)\})?"
    r"[ \t]++(?P<value>\S++)(?:[ \t]++-?[0-9]++)?[ \t]*+"
)
_PAIR = re.compile(rf"([a-zA-Z_][a-zA-Z0-9_]*+)[ \t]*+=[ \t]*+({_LV})")
# Go's ParseFloat spellings that Prometheus emits; Python's float() alone would also take
# "1_000" or " 1".
_VALUE = re.compile(
    r"[+-]?(?:(?:[0-9]++(?:\.[0-9]*+)?|\.[0-9]++)(?:[eE][+-]?[0-9]++)?|[iI][nN][fF](?:inity)?)"
    r"|[nN]a[nN]"
)
_UNESCAPE = re.compile(r"\\(.)")
_ESCAPES = {"n": "\n", "\\": "\\", '"': '"'}

Series = dict[tuple[tuple[str, str], ...], float]  # sorted labels -> value


class _Scan:
    """The lines of the wanted metrics (and their TYPE lines), found in one regex pass.

    The pattern starts with a literal newline, so the regex engine jumps from line start
    to line start at C speed and only tries the name alternation there.
    """

    def __init__(self, text: str, pattern: re.Pattern[str]) -> None:
        self.samples: dict[str, list[str]] = {}
        self.types: dict[str, list[str]] = {}
        for m in pattern.finditer("\n" + text):
            name = m.group(2)
            if m.group(1):
                self.types.setdefault(name, []).append(m.group(3))
            else:
                self.samples.setdefault(name, []).append(m.group(0)[1:])


def _scan_pattern(names: _Names, ttft: bool = False, itl: bool = False) -> re.Pattern[str]:
    hists = (*(names.ttft if ttft else ()), *(names.itl if itl else ()))
    samples = {
        *names.waiting,
        *names.running,
        *names.kv,
        *names.prompt_tokens,
        *names.generation_tokens,
        *names.preemptions,
        *names.swapped,
        START_TIME,
        *(f"{h}_bucket" for h in hists),
    }
    # Counter families may be TYPE'd under the name without `_total` (older clients);
    # histograms under the name without `_bucket`.
    families = samples | {n.removesuffix("_total") for n in samples} | {*names.ttft, *names.itl}
    return re.compile(rf"\n(# TYPE )?({_trie(sorted(families))})(?=[{{ \t])([^\n]*)")


def _trie(words: list[str]) -> str:
    """An alternation with shared prefixes factored out: `a(?:b|c)`, so a line that is not
    wanted fails on its first differing character instead of once per name."""
    if len(words) == 1:
        return re.escape(words[0])
    groups: dict[str, list[str]] = {}
    for w in words:
        groups.setdefault(w[:1], []).append(w[1:])
    alts = []
    for head, tails in groups.items():
        if not head:
            continue  # the empty word: handled by making the group optional below
        alts.append(re.escape(head) + _trie(tails))
    body = alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
    return f"(?:{body})?" if "" in groups else body


def _labels(block: str | None) -> tuple[tuple[str, str], ...]:
    if not block:
        return ()
    pairs = []
    for k, v in _PAIR.findall(block):
        v = v[1:-1]
        if "\\" in v:
            v = _UNESCAPE.sub(lambda m: _ESCAPES[m.group(1)], v)
        pairs.append((k, v))
    if len({k for k, _ in pairs}) != len(pairs):
        raise ParseError(f"duplicate label name in {{{block}}}")
    pairs.sort()
    return tuple(pairs)


def _series(scan: _Scan, name: str) -> Series | None:
    """All series of one metric, strictly parsed; None when the metric is absent."""
    lines = scan.samples.get(name)
    if lines is None:
        return None
    out: Series = {}
    for line in lines:
        m = _LINE.fullmatch(line)
        if m is None:
            raise ParseError(f"malformed sample line: {line[:200]!r}")
        raw = m.group("value")
        if _VALUE.fullmatch(raw) is None:
            raise ParseError(f"invalid value {raw[:40]!r} for {name}")
        value = float(raw)
        if not math.isfinite(value) or value < 0:
            raise ParseError(f"{name} is {raw}: not a usable load value")
        key = _labels(m.group("labels"))
        if key in out:
            raise ParseError(f"duplicate series {name}{dict(key)}")
        out[key] = value
    return out


def _check_type(scan: _Scan, name: str, kinds: tuple[str, ...]) -> None:
    """TYPE lines of `name` (or its family name without `_total`) must agree with `kinds`."""
    for fam in {name, name.removesuffix("_total")}:
        seen: str | None = None
        for rest in scan.types.get(fam, ()):
            kind = rest.strip()
            if not kind or " " in kind or "\t" in kind:
                raise ParseError(f"malformed TYPE line for {fam}: {rest[:100]!r}")
            if kind not in kinds or (seen is not None and seen != kind):
                raise ParseError(f"{fam} has TYPE {kind}, expected {'/'.join(kinds)}")
            seen = kind


def _without_breakdowns(series: Series) -> Series:
    """A gauge's per-engine totals: drop each series that repeats another's labels with a
    non-empty `priority`. SGLang with `--enable-priority-scheduling` sets its queue gauges
    twice per engine, the total under `priority=""` and a breakdown under
    `priority="<n>"` (`SchedulerMetricsCollector._log_gauge_queue_count`); summed, the
    queue would count twice. Counters and histograms are not passed here: their
    `priority` series are a partition (one per request's priority), not a breakdown."""
    if not any(k == "priority" for key in series for k, _ in key):
        return series
    rest = {key: tuple(p for p in key if p[0] != "priority") for key in series}
    totals = {rest[key] for key in series if ("priority", "") in key}
    return {
        key: v for key, v in series.items() if ("priority", "") in key or rest[key] not in totals
    }


# SGLang's placement labels on its scheduler metrics. The schedulers of one engine (its
# tensor-parallel ranks, pipeline stages, expert-parallel ranks) hold the same requests;
# separate engines differ in `dp_rank` (data-parallel, also with DP attention).
_RANK_LABELS = frozenset({"tp_rank", "pp_rank", "moe_ep_rank"})


def _one_per_engine(series: Series) -> Series:
    """Series that differ only in `_RANK_LABELS` are one engine seen from several ranks:
    read once, as the largest any rank reports (summed, the queue would count once per
    rank). SGLang logs its queue from attention-TP rank 0 of *every pipeline stage* (each
    stage receives every request: `--pp-size 2` exports the queue twice, differing in
    `pp_rank`), and from every TP rank with `--enable-metrics-for-all-schedulers`
    (`SchedulerMetricsCollector.init_new`; tests/data/sglang-0.5.23 holds both)."""
    if not any(k in _RANK_LABELS for key in series for k, _ in key):
        return series
    out: Series = {}
    for key, value in series.items():
        engine = tuple(p for p in key if p[0] not in _RANK_LABELS)
        out[engine] = max(out.get(engine, value), value)
    return out


def _pick(
    scan: _Scan, names: tuple[str, ...], model: str | None, kinds: tuple[str, ...]
) -> dict[tuple[tuple[str, str], ...], float] | None:
    """Series of the first present alternative (one per engine: `_one_per_engine`), of
    `model` if given; a gauge's without its breakdowns (`_without_breakdowns`)."""
    for name in names:
        series = _series(scan, name)
        if series is None:
            continue
        _check_type(scan, name, kinds)
        if "gauge" in kinds:
            series = _without_breakdowns(series)
        series = _one_per_engine(series)
        if model is None:
            return series
        # A series is one engine (labels: engine, model_name, rank...); keep the model's.
        return {k: v for k, v in series.items() if dict(k).get("model_name", model) == model}
    return None


# Per engine and (ttft, itl): histogram lines are parsed only for services with an SLO
# (they triple the lines read: ~0.45 ms instead of ~0.15 ms on the 0.32.0 capture).
_PATTERNS = {
    (engine, t, i): _scan_pattern(n, t, i)
    for engine, n in NAMES.items()
    for t in (False, True)
    for i in (False, True)
}
_GAUGE = ("gauge", "untyped")
_COUNTER = ("counter", "untyped")


def _le(value: str) -> float:
    v = value.strip()
    if _VALUE.fullmatch(v) is None:
        raise ParseError(f"invalid le label {value[:40]!r}")
    le = float(v)
    if math.isnan(le):
        raise ParseError("le label is NaN")
    return le


def _per_le(series: dict[tuple[tuple[str, str], ...], float]) -> dict[float, float] | None:
    """Bucket series of one histogram (any engines) -> cumulative count per upper bound,
    summed over engines; None if a series lacks its `le` label."""
    out: dict[float, float] = {}
    for key, value in series.items():
        labels = dict(key)
        if "le" not in labels:
            return None
        le = _le(labels["le"])
        out[le] = out.get(le, 0.0) + value
    return out


def _histogram(scan: _Scan, names: tuple[str, ...], model: str | None) -> Buckets | None:
    """A histogram family's buckets, summed over engines; None when absent or unusable
    (no +Inf bucket, counts not cumulative): only the SLO signal goes without, the target
    is not failed for it."""
    for name in names:
        series = _series(scan, f"{name}_bucket")
        if series is None:
            continue
        _check_type(scan, name, ("histogram", "untyped"))
        if model is not None:
            series = {k: v for k, v in series.items() if dict(k).get("model_name", model) == model}
        per = _per_le(series)
        return None if per is None else histogram.from_series(per)
    return None


def validate_full(text: str) -> None:
    """Full-text validation with prometheus_client (slow path): ParseError if not an exposition."""
    try:
        for _ in text_string_to_metric_families(text):
            pass
    except (ValueError, TypeError, IndexError, KeyError) as e:
        raise ParseError(f"not a Prometheus exposition: {e}"[:300]) from None


def read_sample(
    text: str,
    engine: Engine = "vllm",
    model: str | None = None,
    *,
    ttft: bool = False,
    itl: bool = False,
) -> EngineSample | None:
    """Return the target's load, or None when it exports no engine families (no data).

    Per pod: counts are summed and the KV fraction averaged / maxed over engines
    (data-parallel ranks, the `engine` label); `model` keeps only that `model_name`.
    `ttft` / `itl`: also read those histograms (services with an SLO).
    Raises ParseError on malformed text.
    """
    names = NAMES[engine]
    scan = _Scan(text, _PATTERNS[engine, ttft, itl])
    waiting = _pick(scan, names.waiting, model, _GAUGE)
    running = _pick(scan, names.running, model, _GAUGE)
    if waiting is None or running is None:
        # No data (e.g. --disable-log-stats), unless the body is not an exposition at all.
        validate_full(text)
        return None
    if model is not None and not waiting:
        return None  # this pod does not serve the selected model
    swapped = _pick(scan, names.swapped, model, _GAUGE) if names.swapped else None
    kv = _pick(scan, names.kv, model, _GAUGE) if names.kv else None
    kv_values = list(kv.values()) if kv else [0.0]
    if max(kv_values) > KV_USAGE_MAX:
        raise ParseError(f"KV-cache usage is {max(kv_values):g}: not a fraction 0-1")

    def total(ns: tuple[str, ...], kinds: tuple[str, ...]) -> float | None:
        per = _pick(scan, ns, model, kinds) if ns else None
        return None if per is None else sum(per.values())

    start = _series(scan, START_TIME)
    return EngineSample(
        waiting=sum(waiting.values()) + (sum(swapped.values()) if swapped else 0.0),
        running=sum(running.values()),
        kv_usage_mean=sum(kv_values) / len(kv_values),
        kv_usage_max=max(kv_values),
        prompt_tokens_total=total(names.prompt_tokens, _COUNTER),
        generation_tokens_total=total(names.generation_tokens, _COUNTER),
        preemptions_total=total(names.preemptions, _COUNTER),
        process_start_seconds=next(iter(start.values())) if start else None,
        engines=max(len(waiting), 1),
        ttft_buckets=_histogram(scan, names.ttft, model) if ttft else None,
        itl_buckets=_histogram(scan, names.itl, model) if itl else None,
    )


def read_sample_reference(
    text: str,
    engine: Engine = "vllm",
    model: str | None = None,
    *,
    ttft: bool = False,
    itl: bool = False,
) -> EngineSample | None:
    """The same reading over prometheus_client's full parse: slow (every family), lenient.

    The oracle `bench/parse.py` and the tests compare `read_sample` with on valid input.
    """
    names = NAMES[engine]
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                key = tuple(sorted(s.labels.items()))
                if model is not None and s.labels.get("model_name", model) != model:
                    continue
                per = samples.setdefault(s.name, {})
                per[key] = per.get(key, 0.0) + s.value
    except (ValueError, TypeError, IndexError, KeyError) as e:
        raise ParseError(str(e)) from None

    def first(ns: tuple[str, ...]) -> dict[tuple[tuple[str, str], ...], float] | None:
        return next((samples[n] for n in ns if n in samples), None)

    def gauge(ns: tuple[str, ...]) -> dict[tuple[tuple[str, str], ...], float] | None:
        per = first(ns)
        return None if per is None else _one_per_engine(_without_breakdowns(per))

    waiting, running = gauge(names.waiting), gauge(names.running)
    if waiting is None or running is None or not waiting:
        return None
    swapped = gauge(names.swapped) or {}
    kv = list((gauge(names.kv) or {}).values()) or [0.0]

    def total(ns: tuple[str, ...]) -> float | None:
        per = first(ns)
        return None if per is None else sum(_one_per_engine(per).values())

    def hist(ns: tuple[str, ...]) -> Buckets | None:
        for n in ns:
            if f"{n}_bucket" in samples:
                per = _per_le(samples[f"{n}_bucket"])
                return None if per is None else histogram.from_series(per)
        return None

    start = samples.get(START_TIME)
    return EngineSample(
        waiting=sum(waiting.values()) + sum(swapped.values()),
        running=sum(running.values()),
        kv_usage_mean=sum(kv) / len(kv),
        kv_usage_max=max(kv),
        prompt_tokens_total=total(names.prompt_tokens),
        generation_tokens_total=total(names.generation_tokens),
        preemptions_total=total(names.preemptions),
        process_start_seconds=next(iter(start.values())) if start else None,
        engines=max(len(waiting), 1),
        ttft_buckets=hist(names.ttft) if ttft else None,
        itl_buckets=hist(names.itl) if itl else None,
    )
