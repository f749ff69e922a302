"""Fuzzing `scaler.core.exposition.read_sample`: whatever a target sends, the reader returns an
EngineSample or None, or raises the typed ParseError (the target is then marked failed).
Any other exception would escape as a bug; any non-finite or negative value would be
invented load.

Four generators: arbitrary text; the real vLLM capture mutated (truncation, byte
flips, hostile characters, duplicated and dropped lines); grammar-built expositions of
exactly the families the reader uses, with odd-but-legal and illegal spellings; and
grammar-built latency histograms (vLLM, SGLang) under a valid load. Each is also read as
for a service with an objective (`ttft`/`itl`), where a histogram must come back None or
usable, never with made-up counts.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from scaler.core.exposition import NAMES, ParseError, read_sample
from scaler.core.load import Engine, EngineSample
from tests.support.fuzz import budget
from tests.support.paths import FIXTURES

CAPTURE = (FIXTURES / "metrics_after_load.txt").read_text()
CAPTURE_LINES = CAPTURE.splitlines()
ENGINES: list[Engine] = ["vllm", "sglang", "tgi"]

# `make test` runs a fixed, reproducible set; `make fuzz` searches longer and at random
# (tests/support/fuzz.py; a found crash is printed with its input either way). No deadline:
# the slow validation path takes ~10 ms on a full capture.
FUZZ = budget(150, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def check(text: str, engine: Engine = "vllm", model: str | None = None, slo: bool = False) -> None:
    """The property: a sample with sane values, None, or ParseError; nothing else. `slo`:
    also the latency histograms (a service with an objective), each None or buckets with
    rising bounds ending at +Inf and finite, non-negative, cumulative counts."""
    try:
        s = read_sample(text, engine, model, ttft=slo, itl=slo)
    except ParseError:
        return
    if s is None:
        return
    for buckets in (s.ttft_buckets, s.itl_buckets):
        if buckets is None:
            continue
        bounds, counts = [b for b, _ in buckets], [c for _, c in buckets]
        assert bounds[-1] == math.inf and bounds == sorted(set(bounds)), bounds
        assert all(math.isfinite(c) and c >= 0 for c in counts), counts
        assert counts == sorted(counts), counts
    assert isinstance(s, EngineSample)
    for field in ("waiting", "running", "kv_usage_mean", "kv_usage_max"):
        v = getattr(s, field)
        assert math.isfinite(v) and v >= 0, (field, v)
    for field in ("prompt_tokens_total", "generation_tokens_total", "preemptions_total"):
        v = getattr(s, field)
        assert v is None or (math.isfinite(v) and v >= 0), (field, v)
    assert s.kv_usage_max >= s.kv_usage_mean - 1e-9
    assert s.kv_usage_max <= 1 + 1e-6
    assert s.engines >= 1


HOSTILE = st.sampled_from(
    [*'{}",=\\\n\t #:_.eE+-', "NaN", "+Inf", "-Inf", "\x00", "\ufffd", "é", "1e309"]
)


@FUZZ
@given(text=st.text(max_size=2000), engine=st.sampled_from(ENGINES), slo=st.booleans())
def test_arbitrary_text(text: str, engine: Engine, slo: bool) -> None:
    check(text, engine, slo=slo)


@FUZZ
@given(cut=st.integers(min_value=0, max_value=len(CAPTURE)))
def test_real_capture_truncated_anywhere(cut: int) -> None:
    check(CAPTURE[:cut])


@FUZZ
@given(
    edits=st.lists(
        st.tuples(st.integers(0, len(CAPTURE) - 1), st.integers(0, 3), HOSTILE),
        min_size=1,
        max_size=8,
    ),
    model=st.sampled_from([None, "tiny-llama", "other"]),
    slo=st.booleans(),
)
def test_real_capture_with_hostile_edits(
    edits: list[tuple[int, int, str]], model: str, slo: bool
) -> None:
    text = CAPTURE
    for pos, op, s in edits:
        pos = min(pos, len(text))
        if op == 0:  # insert
            text = text[:pos] + s + text[pos:]
        elif op == 1:  # replace one character
            text = text[:pos] + s + text[pos + 1 :]
        elif op == 2:  # delete a run
            text = text[:pos] + text[pos + len(s) * 7 :]
        else:  # duplicate the line around pos
            start = text.rfind("\n", 0, pos) + 1
            end = text.find("\n", pos)
            end = len(text) if end < 0 else end
            text = text[:end] + "\n" + text[start:end] + text[end:]
    check(text, "vllm", model, slo)


@FUZZ
@given(
    picks=st.lists(st.integers(0, len(CAPTURE_LINES) - 1), max_size=60),
    shuffle=st.randoms(use_true_random=False),
)
def test_real_capture_lines_dropped_reordered_repeated(picks: list[int], shuffle: object) -> None:
    lines = [CAPTURE_LINES[i] for i in picks]
    shuffle.shuffle(lines)  # type: ignore[attr-defined]
    check("\n".join(lines) + "\n")


# -- grammar-built expositions of the used families ---------------------------------------

VALUES = st.one_of(
    st.sampled_from(
        [
            *("0", "1", "1e+10", "1.5E-3", ".5", "5.", "+3", "-0", "-1", "NaN", "nan", "+Inf"),
            *("-Inf", "inf", "Infinity", "1_000", "0x10", "", " ", "1e", "1e999", "--1", "١"),
        ]
    ),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
)
LABEL_VALUES = st.text(alphabet=st.sampled_from(list('ab0 -_.:/"\\n\n{},=é')), max_size=12).map(
    lambda s: '"' + s + '"'
)
LABEL_NAMES = st.sampled_from(
    [
        "engine",
        "model_name",
        "rank",
        "tp_rank",
        "pp_rank",
        "dp_rank",
        "priority",
        "le",
        "1bad",
        "",
        "a b",
    ]
)
# Bucket bounds as engines spell them, and as they must not ("NaN", unquoted garbage).
LE_VALUES = st.sampled_from(
    ['"0.5"', '"1.0"', '"2"', '"+Inf"', '"Inf"', '"NaN"', '"-1"', '"1e3"', '"x"']
)


@st.composite
def sample_line(draw: st.DrawFn, engine: Engine) -> str:
    n = NAMES[engine]
    used = [*n.waiting, *n.running, *n.kv, *n.prompt_tokens, *n.generation_tokens]
    used += [*n.preemptions, *n.swapped, "process_start_time_seconds"]
    used += [f"{h}{part}" for h in (*n.ttft, *n.itl) for part in ("_bucket", "_sum", "_count")]
    name = draw(st.sampled_from(used))
    if draw(st.booleans()):
        return f"# TYPE {name.removesuffix('_total')} " + draw(
            st.sampled_from(["gauge", "counter", "untyped", "histogram", "", "gauge extra"])
        )
    labels = draw(st.lists(st.tuples(LABEL_NAMES, LE_VALUES | LABEL_VALUES), max_size=3))
    block = ",".join(f"{k}={v}" for k, v in labels)
    open_, close = draw(st.sampled_from([("{", "}"), ("{", ""), ("", "}"), ("", "")]))
    sep = draw(st.sampled_from([" ", "\t", "  ", ""]))
    stamp = draw(st.sampled_from(["", " 1700000000000", " -5", " x"]))
    labelled = f"{open_}{block}{close}" if labels or open_ or close else ""
    return f"{name}{labelled}{sep}{draw(VALUES)}{stamp}"


@pytest.mark.parametrize("engine", ENGINES)
def test_grammar_built_expositions(engine: Engine) -> None:
    @FUZZ
    @given(lines=st.lists(sample_line(engine), min_size=1, max_size=12))
    def run(lines: list[str]) -> None:
        text = "\n".join(lines) + "\n"
        for slo in (False, True):
            check(text, engine, slo=slo)
            check(text, engine, "a", slo)

    run()


HIST_ENGINES: list[Engine] = [e for e in ENGINES if NAMES[e].ttft]
GOOD_LE = st.sampled_from(['"0.4"', '"1"', '"2.0"', '"2.5"', '"4"', '"1e1"', '"+Inf"'])


@st.composite
def histogram_exposition(draw: st.DrawFn, engine: Engine) -> str:
    """A valid load (waiting, running) and latency-histogram lines built from the grammar:
    bounds as engines spell them and as they must not, counts legal and illegal, in any
    order, often not cumulative (the reader must then drop only the histogram)."""
    n = NAMES[engine]
    lines = [f'{n.waiting[0]}{{model_name="a"}} 1', f'{n.running[0]}{{model_name="a"}} 2']
    family = draw(st.sampled_from([*n.ttft, *n.itl]))
    if draw(st.booleans()):
        lines.append(f"# TYPE {family} " + draw(st.sampled_from(["histogram", "gauge", ""])))
    # Mostly bounds an engine writes (one bad bound fails the whole target, by design).
    les = GOOD_LE if draw(st.integers(0, 3)) else LE_VALUES
    ups = draw(st.lists(st.tuples(les, VALUES), min_size=1, max_size=8, unique_by=lambda u: u[0]))
    if les is GOOD_LE and all(le != '"+Inf"' for le, _ in ups) and draw(st.booleans()):
        ups.append(('"+Inf"', draw(VALUES)))  # complete, counts as drawn
    if draw(st.booleans()) and les is GOOD_LE:  # cumulative with +Inf, as engines write
        bounds = sorted({le for le, _ in ups} | {'"+Inf"'}, key=lambda le: float(le[1:-1]))
        ups = [(le, str(i)) for i, le in enumerate(bounds)]
        ups = draw(st.permutations(ups))
    extra = draw(st.sampled_from(["", ',engine="1"', ',rank="0"']))
    lines += [f'{family}_bucket{{le={le},model_name="a"{extra}}} {v}' for le, v in ups]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("engine", HIST_ENGINES)
def test_histograms_built_from_the_grammar(engine: Engine) -> None:
    @FUZZ
    @given(text=histogram_exposition(engine), model=st.sampled_from([None, "a"]))
    def run(text: str, model: str | None) -> None:
        check(text, engine, model, slo=True)

    run()


def test_fuzz_property_is_not_vacuous() -> None:
    """The property accepts the real capture as a sample and rejects invented numbers."""
    s = read_sample(CAPTURE)
    assert isinstance(s, EngineSample)
    check(CAPTURE)
    check(CAPTURE, slo=True)
    for engine in HIST_ENGINES:  # the histogram generator's texts can be read whole
        n = NAMES[engine]
        text = (
            f'{n.waiting[0]}{{model_name="a"}} 1\n{n.running[0]}{{model_name="a"}} 2\n'
            f'{n.ttft[0]}_bucket{{le="2",model_name="a"}} 1\n'
            f'{n.ttft[0]}_bucket{{le="+Inf",model_name="a"}} 3\n'
        )
        read = read_sample(text, engine, ttft=True)
        assert read is not None and read.ttft_buckets == ((2.0, 1.0), (math.inf, 3.0))
    bad = CAPTURE.replace('vllm:num_requests_waiting{engine="0",model_name="tiny-llama"} 0.0', "")
    assert bad != CAPTURE
    for value in ("NaN", "-1", "+Inf"):
        with pytest.raises(ParseError):
            read_sample(
                bad + f'vllm:num_requests_waiting{{engine="0",model_name="tiny-llama"}} {value}\n'
            )
