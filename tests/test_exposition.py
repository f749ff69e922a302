"""scaler.core.exposition: real captures, every text-format quirk, V0/V1, SGLang, TGI, errors."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from scaler.core.exposition import ParseError, read_sample, read_sample_reference
from scaler.core.load import EngineSample
from tests.support.exposition import SGLANG_ITL_BOUNDS, SGLANG_TTFT_BOUNDS
from tests.support.fuzz import budget
from tests.support.paths import FIXTURES, SGLANG_CAPTURES

AFTER_LOAD = (FIXTURES / "metrics_after_load.txt").read_text()
IDLE = (FIXTURES / "metrics_idle.txt").read_text()


def _without_vllm(text: str) -> str:
    """What `--disable-log-stats` serves: the same exposition minus every vllm: family."""
    return "".join(
        line
        for line in text.splitlines(keepends=True)
        if not line.startswith("vllm:") and not line.startswith(("# HELP vllm:", "# TYPE vllm:"))
    )


def v1(
    waiting: str = "3.0",
    running: str = "2.0",
    kv: str = "0.25",
    engine: str = "0",
    model: str = "m",
) -> str:
    lab = f'engine="{engine}",model_name="{model}"'
    return (
        "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
        "# TYPE vllm:num_requests_waiting gauge\n"
        f"vllm:num_requests_waiting{{{lab}}} {waiting}\n"
        "# TYPE vllm:num_requests_running gauge\n"
        f"vllm:num_requests_running{{{lab}}} {running}\n"
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        f"vllm:kv_cache_usage_perc{{{lab}}} {kv}\n"
    )


def test_real_capture_after_load_values() -> None:
    s = read_sample(AFTER_LOAD)
    assert s == EngineSample(
        waiting=0.0,
        running=0.0,
        kv_usage_mean=0.0,
        kv_usage_max=0.0,
        prompt_tokens_total=1640.0,
        generation_tokens_total=8000.0,
        preemptions_total=0.0,
        process_start_seconds=1.7960483095e09,
        engines=1,
    )


@pytest.mark.parametrize("text", [AFTER_LOAD, IDLE], ids=["after_load", "idle"])
@pytest.mark.parametrize("model", [None, "tiny-llama"], ids=["any-model", "select-model"])
def test_real_captures_match_prometheus_client(text: str, model: str | None) -> None:
    ours = read_sample(text, "vllm", model)
    assert ours is not None
    assert ours == read_sample_reference(text, "vllm", model)


def _only(text: str, family: str) -> str:
    """`text` without the lines of every vLLM queue gauge but `family`."""
    queues = ("vllm:num_requests_waiting", "vllm:num_requests_running")
    drop = [q for q in queues if q != family]
    return "".join(line for line in text.splitlines(True) if not any(d in line for d in drop))


@pytest.mark.parametrize(
    "text",
    [
        _without_vllm(AFTER_LOAD),
        _without_vllm(IDLE),
        "",
        _only(AFTER_LOAD, "vllm:num_requests_waiting"),
        _only(AFTER_LOAD, "vllm:num_requests_running"),
    ],
    ids=[
        "disable-log-stats-after-load",
        "disable-log-stats-idle",
        "empty-body",
        "waiting-without-running",
        "running-without-waiting",
    ],
)
def test_no_engine_families_is_no_data(text: str) -> None:
    assert read_sample(text) is None


SGLANG = """\
# HELP sglang:num_queue_reqs The number of requests in the waiting queue
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="qwen"} 12.0
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="qwen"} 30.0
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="qwen"} 0.71
# TYPE sglang:gen_throughput gauge
sglang:gen_throughput{model_name="qwen"} 812.5
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="qwen"} 1.2e+06
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="qwen"} 3.4e+06
"""

# What tools/sglang_capture.py logs through SGLang 0.5.23's collectors (its RUNNING,
# WAITING, TTFT, ITL and FINISHED), read back as the scaler must read it.
SGLANG_TTFT_CUMULATIVE = {0.4: 2.0, 1.0: 3.0, 2.0: 4.0, 4.0: 5.0, 6.0: 6.0, math.inf: 6.0}
# ITL: each step's interval over its new tokens (0.05 s / 5, 0.3 s / 2, 12 s / 1), tokens counted.
SGLANG_ITL_CUMULATIVE = {0.008: 0.0, 0.01: 5.0, 0.1: 5.0, 0.2: 7.0, 8.0: 7.0, math.inf: 8.0}


@pytest.mark.parametrize(
    ("capture", "engines", "kv_mean", "kv_max"),
    [
        pytest.param("metrics.txt", 1, 0.42, 0.42, id="default"),
        pytest.param("metrics_priority.txt", 1, 0.42, 0.42, id="priority-scheduling"),
        pytest.param("metrics_dp2.txt", 2, 0.52, 0.62, id="two-data-parallel-schedulers"),
        pytest.param("metrics_pp2.txt", 1, 0.42, 0.42, id="two-pipeline-stages"),
        pytest.param("metrics_tp2_all.txt", 1, 0.42, 0.42, id="every-tp-rank-logs"),
    ],
)
@pytest.mark.parametrize("model", [None, "tiny-llama"], ids=["any-model", "select-model"])
def test_sglang_capture_reads_each_queue_once(
    capture: str, engines: int, kv_mean: float, kv_max: float, model: str | None
) -> None:
    """SGLang's own collectors (not a hand-written imitation): with priority scheduling its
    queue gauges carry the total under priority="" and a per-priority breakdown beside it;
    with two data-parallel schedulers each logs its own queue (7 waiting, 5 running each,
    labelled `dp_rank`); one engine's two pipeline stages (`--pp-size 2`), or its two TP
    ranks with `--enable-metrics-for-all-schedulers`, each log that engine's one queue
    (labelled `pp_rank` / `tp_rank`); the latency histograms split by `is_streaming` and
    `priority`."""
    text = (SGLANG_CAPTURES / capture).read_text()
    s = read_sample(text, "sglang", model, ttft=True, itl=True)
    assert s is not None
    assert (s.waiting, s.running, s.engines) == (7.0 * engines, 5.0 * engines, engines)
    assert (s.kv_usage_mean, s.kv_usage_max) == pytest.approx((kv_mean, kv_max))
    assert (s.prompt_tokens_total, s.generation_tokens_total) == (140.0, 28.0)
    assert s.process_start_seconds is None  # multiprocess collector: no process metrics
    assert s.ttft_buckets is not None and s.itl_buckets is not None
    ttft, itl = dict(s.ttft_buckets), dict(s.itl_buckets)
    assert {le: ttft[le] for le in SGLANG_TTFT_CUMULATIVE} == SGLANG_TTFT_CUMULATIVE
    assert {le: itl[le] for le in SGLANG_ITL_CUMULATIVE} == SGLANG_ITL_CUMULATIVE
    assert s == read_sample_reference(text, "sglang", model, ttft=True, itl=True)


def test_the_sglang_helper_s_bounds_are_sglang_s() -> None:
    """tests/support/exposition.py writes SGLang expositions for the app tests: its bucket
    bounds must be those SGLang's collectors write."""
    s = read_sample((SGLANG_CAPTURES / "metrics.txt").read_text(), "sglang", ttft=True, itl=True)
    assert s is not None and s.ttft_buckets is not None and s.itl_buckets is not None
    assert [le for le, _ in s.ttft_buckets] == [*map(float, SGLANG_TTFT_BOUNDS), math.inf]
    assert [le for le, _ in s.itl_buckets] == [*map(float, SGLANG_ITL_BOUNDS), math.inf]


def test_sglang_capture_of_another_model_is_not_this_pod_s() -> None:
    text = (SGLANG_CAPTURES / "metrics_priority.txt").read_text()
    assert read_sample(text, "sglang", "other-model") is None


def _g(labels: str, value: float) -> str:
    return f"sglang:num_queue_reqs{{{labels}}} {value}\n"


@pytest.mark.parametrize(
    ("lines", "waiting", "engines"),
    [
        pytest.param([_g('dp_rank="0"', 4)], 4.0, 1, id="no-priority-label"),
        pytest.param([_g('priority=""', 4)], 4.0, 1, id="total-only"),
        pytest.param(
            [_g('priority=""', 7), _g('priority="0"', 4), _g('priority="1"', 3)],
            7.0,
            1,
            id="total-and-breakdown",
        ),
        pytest.param(
            [_g('priority="0"', 4), _g('priority="1"', 3)], 7.0, 2, id="breakdown-without-total"
        ),
        pytest.param(
            [
                _g('dp_rank="0",priority=""', 7),
                _g('dp_rank="0",priority="2"', 7),
                _g('dp_rank="1",priority=""', 1),
                _g('dp_rank="1",priority="2"', 1),
            ],
            8.0,
            2,
            id="two-engines-each-with-breakdown",
        ),
        pytest.param(
            [_g('dp_rank="0",priority=""', 2), _g('dp_rank="1",priority="3"', 5)],
            7.0,
            2,
            id="a-breakdown-of-another-engine-is-kept",
        ),
        # SGLang logs one engine's queue from each pipeline stage (and from each TP rank
        # with --enable-metrics-for-all-schedulers): copies of one queue, not queues to sum.
        pytest.param([_g('pp_rank="0",tp_rank="0"', 7)], 7.0, 1, id="one-rank"),
        pytest.param(
            [_g('pp_rank="0",tp_rank="0"', 7), _g('pp_rank="1",tp_rank="0"', 7)],
            7.0,
            1,
            id="two-pipeline-stages-one-queue",
        ),
        pytest.param(
            [_g('pp_rank="0",tp_rank="0"', 6), _g('pp_rank="1",tp_rank="0"', 7)],
            7.0,
            1,
            id="stages-that-disagree-read-as-the-largest",
        ),
        pytest.param(
            [
                _g('dp_rank="0",tp_rank="0",moe_ep_rank="0"', 3),
                _g('dp_rank="0",tp_rank="1",moe_ep_rank="1"', 3),
                _g('dp_rank="1",tp_rank="2",moe_ep_rank="2"', 5),
                _g('dp_rank="1",tp_rank="3",moe_ep_rank="3"', 5),
            ],
            8.0,
            2,
            id="each-data-parallel-engine-once",
        ),
        pytest.param(
            [
                _g('pp_rank="0",priority=""', 7),
                _g('pp_rank="0",priority="1"', 7),
                _g('pp_rank="1",priority=""', 7),
                _g('pp_rank="1",priority="1"', 7),
            ],
            7.0,
            1,
            id="ranks-and-priority-breakdown",
        ),
        pytest.param(
            [_g('model_name="a",tp_rank="0"', 2), _g('model_name="b",tp_rank="0"', 3)],
            5.0,
            2,
            id="two-models-are-two-engines",
        ),
    ],
)
def test_each_engine_s_queue_is_read_once(lines: list[str], waiting: float, engines: int) -> None:
    """A queue gauge's priority breakdown is not summed with its total, nor one engine's
    ranks with each other; separate engines (`dp_rank`, `model_name`) are."""
    running = "".join(line.replace("num_queue_reqs", "num_running_reqs") for line in lines)
    text = "# TYPE sglang:num_queue_reqs gauge\n" + "".join(lines) + running
    s = read_sample(text, "sglang")
    assert s is not None
    assert (s.waiting, s.running, s.engines) == (waiting, waiting, engines)
    assert s == read_sample_reference(text, "sglang")


def test_a_counter_logged_by_two_ranks_counts_once() -> None:
    text = (
        _g('pp_rank="0"', 1)
        + 'sglang:num_running_reqs{pp_rank="0"} 1\n'
        + 'sglang:prompt_tokens_total{pp_rank="0"} 20\n'
        + 'sglang:prompt_tokens_total{pp_rank="1"} 20\n'
    )
    s = read_sample(text, "sglang")
    assert s is not None and s.prompt_tokens_total == 20.0
    assert s == read_sample_reference(text, "sglang")


def test_a_counter_s_priority_series_are_summed() -> None:
    """Token counters split by the request's priority: a partition, every series counts."""
    text = (
        _g('priority=""', 1)
        + 'sglang:num_running_reqs{priority=""} 1\n'
        + 'sglang:prompt_tokens_total{priority=""} 10\n'
        + 'sglang:prompt_tokens_total{priority="0"} 20\n'
    )
    s = read_sample(text, "sglang")
    assert s is not None and s.prompt_tokens_total == 30.0


TGI = """\
# TYPE tgi_queue_size gauge
tgi_queue_size 7
# TYPE tgi_batch_current_size gauge
tgi_batch_current_size 16
# TYPE tgi_batch_current_max_tokens gauge
tgi_batch_current_max_tokens 20480
# TYPE tgi_request_input_length histogram
tgi_request_input_length_bucket{le="+Inf"} 10
tgi_request_input_length_sum 5000
tgi_request_input_length_count 10
# TYPE tgi_request_generated_tokens histogram
tgi_request_generated_tokens_bucket{le="+Inf"} 10
tgi_request_generated_tokens_sum 2500
tgi_request_generated_tokens_count 10
"""

TWO_ENGINES = v1("3", "8", "0.2", engine="0") + (
    'vllm:num_requests_waiting{engine="1",model_name="m"} 5\n'
    'vllm:num_requests_running{engine="1",model_name="m"} 6\n'
    'vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.6\n'
)

V0 = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="old"} 4.0
# TYPE vllm:num_requests_swapped gauge
vllm:num_requests_swapped{model_name="old"} 2.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="old"} 9.0
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="old"} 0.93
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{model_name="old"} 100.0
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{model_name="old"} 50.0
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{model_name="old"} 3.0
"""

TWO_MODELS = v1("1", "1", "0.1", model="a") + (
    'vllm:num_requests_waiting{engine="0",model_name="b"} 10\n'
    'vllm:num_requests_running{engine="0",model_name="b"} 20\n'
    'vllm:kv_cache_usage_perc{engine="0",model_name="b"} 0.9\n'
)

ESCAPED = (
    '# HELP vllm:num_requests_waiting Help with "quotes" and \\\\ and \\n escapes.\n'
    'vllm:num_requests_waiting{engine="0",model_name="a\\"b\\\\c\\nd"} 2\n'
    'vllm:num_requests_running{engine="0",model_name="a\\"b\\\\c\\nd"} 1\n'
    'vllm:num_requests_waiting{engine="0",model_name="plain"} 100\n'
    'vllm:num_requests_running{engine="0",model_name="plain"} 100\n'
)

OUT_OF_ORDER = (
    'vllm:num_requests_running{engine="1",model_name="m"} 1\n'
    "# TYPE python_info gauge\n"
    'python_info{implementation="CPython"} 1.0\n'
    'vllm:num_requests_waiting{engine="1",model_name="m"} 4\n'
    'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5\n'
    "# TYPE vllm:num_requests_waiting gauge\n"
    'vllm:num_requests_waiting{engine="0",model_name="m"} 6\n'
    'vllm:num_requests_running{engine="0",model_name="m"} 2\n'
    'vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.1\n'
)

OPENMETRICS = (
    "# TYPE vllm:num_requests_waiting gauge\n"
    'vllm:num_requests_waiting{engine="0",model_name="m"} 4.0\n'
    "# TYPE vllm:num_requests_running gauge\n"
    'vllm:num_requests_running{engine="0",model_name="m"} 1.0\n'
    "# TYPE vllm:generation_tokens counter\n"
    "# UNIT vllm:generation_tokens tokens\n"
    'vllm:generation_tokens_total{engine="0",model_name="m"} 12.0\n'
    'vllm:generation_tokens_created{engine="0",model_name="m"} 1.7e+09\n'
    "# EOF\n"
)

QUIRKS = (
    # first line, no preceding newline; timestamp; tabs and spaces; trailing comma in labels
    'vllm:num_requests_waiting{ engine = "0" , model_name="m", } 1e+01 1700000000000\n'
    "# TYPE vllm:num_requests_waiting_by_reason gauge\n"
    'vllm:num_requests_waiting_by_reason{engine="0",model_name="m",reason="capacity"} 99\n'
    'vllm:num_requests_running{engine="0",model_name="m"}\t2.5E0\n'
    'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 5e-1\n'
    "# TYPE vllm:prompt_tokens counter\n"  # older clients: family name without _total
    'vllm:prompt_tokens_total{engine="0",model_name="m"} 1.5e+10\n'
    'vllm:prompt_tokens_created{engine="0",model_name="m"} 1.7e+09\n'
    'vllm:generation_tokens_total{engine="0",model_name="m"} +7\n'
    'vllm:generation_tokens_created{engine="0",model_name="m"} 1.7e+09\n'
    'vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 3\n'
    'vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} NaN\n'
    'vllm:some_future_gauge{engine="0",model_name="m"} -Inf\n'
    "process_start_time_seconds 1.7e+09"  # no trailing newline
)


def _s(
    waiting: float,
    running: float,
    kv_mean: float,
    kv_max: float,
    prompt: float | None = None,
    gen: float | None = None,
    pre: float | None = None,
    start: float | None = None,
    engines: int = 1,
) -> EngineSample:
    return EngineSample(waiting, running, kv_mean, kv_max, prompt, gen, pre, start, engines)


@pytest.mark.parametrize(
    ("text", "engine", "model", "expected"),
    [
        pytest.param(v1(), "vllm", None, _s(3, 2, 0.25, 0.25), id="v1-minimal"),
        pytest.param(TWO_ENGINES, "vllm", None, _s(8, 14, 0.4, 0.6, engines=2), id="two-engines"),
        pytest.param(
            V0, "vllm", None, _s(11, 4, 0.93, 0.93, 100, 50, 3), id="v0-swapped-gpu-cache"
        ),
        pytest.param(
            v1(kv="0.4") + 'vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.9\n',
            "vllm",
            None,
            _s(3, 2, 0.4, 0.4),
            id="new-kv-name-wins-over-old",
        ),
        pytest.param(TWO_MODELS, "vllm", "b", _s(10, 20, 0.9, 0.9), id="select-model-b"),
        pytest.param(
            TWO_MODELS, "vllm", None, _s(11, 21, 0.5, 0.9, engines=2), id="all-models-summed"
        ),
        pytest.param(TWO_MODELS, "vllm", "nope", None, id="model-not-served"),
        pytest.param(ESCAPED, "vllm", 'a"b\\c\nd', _s(2, 1, 0.0, 0.0), id="escaped-label-values"),
        pytest.param(OUT_OF_ORDER, "vllm", None, _s(10, 3, 0.3, 0.5, engines=2), id="out-of-order"),
        pytest.param(
            QUIRKS, "vllm", None, _s(10, 2.5, 0.5, 0.5, 1.5e10, 7, None, 1.7e9), id="format-quirks"
        ),
        pytest.param(OPENMETRICS, "vllm", None, _s(4, 1, 0, 0, None, 12), id="openmetrics"),
        pytest.param(SGLANG, "sglang", None, _s(12, 30, 0.71, 0.71, 1.2e6, 3.4e6), id="sglang"),
        pytest.param(TGI, "tgi", None, _s(7, 16, 0.0, 0.0, 5000, 2500), id="tgi"),
        pytest.param(v1(), "sglang", None, None, id="vllm-text-read-as-sglang"),
    ],
)
def test_reads(text: str, engine: str, model: str | None, expected: EngineSample | None) -> None:
    got = read_sample(text, engine, model)  # type: ignore[arg-type]
    if expected is None:
        assert got is None
        return
    assert got is not None
    for field in EngineSample.__slots__:
        a, b = getattr(got, field), getattr(expected, field)
        assert (a == b) or (a is not None and b is not None and math.isclose(a, b)), field
    if "NaN" not in text and "-Inf" not in text:
        assert got == read_sample_reference(text, engine, model)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(v1(waiting="NaN"), "not a usable", id="nan-in-used-gauge"),
        pytest.param(v1(kv="+Inf"), "not a usable", id="inf-in-kv"),
        pytest.param(v1(kv="1.5"), "KV-cache usage is 1.5: not a fraction", id="kv-above-one"),
        pytest.param(v1(kv="87"), "not a fraction 0-1", id="kv-in-percent"),
        pytest.param(
            TWO_ENGINES.replace("} 0.6\n", "} 1.5\n"),
            "KV-cache usage is 1.5: not a fraction",
            id="kv-above-one-on-one-engine-of-two",
        ),
        pytest.param(v1(running="-1"), "not a usable", id="negative-count"),
        pytest.param(v1(waiting="1_000"), "invalid value", id="python-only-float-syntax"),
        pytest.param(v1(waiting="0x10"), "invalid value", id="hex-value"),
        pytest.param(v1(waiting="1 2 3"), "malformed sample line", id="trailing-garbage"),
        pytest.param(v1(waiting=""), "malformed sample line", id="missing-value"),
        pytest.param(v1(model="x\\q"), "malformed sample line", id="bad-escape"),
        pytest.param(v1(model='x"y'), "malformed sample line", id="unescaped-quote"),
        pytest.param(
            v1() + 'vllm:num_requests_waiting{engine="0",model_name="m"} 4\n',
            "duplicate series",
            id="duplicate-series",
        ),
        pytest.param(
            v1().replace('engine="0"', 'engine="0",engine="1"', 1),
            "duplicate label",
            id="duplicate-label-name",
        ),
        pytest.param(
            v1().replace("waiting gauge", "waiting counter"), "has TYPE", id="type-mismatch"
        ),
        pytest.param(
            v1() + "# TYPE vllm:kv_cache_usage_perc histogram\n", "has TYPE", id="type-conflict"
        ),
        pytest.param(
            v1() + "# TYPE vllm:num_requests_waiting untyped\n",
            "has TYPE untyped",
            id="type-gauge-then-untyped",
        ),
        pytest.param(
            v1().replace("waiting gauge", "waiting gauge now"),
            "malformed TYPE line",
            id="type-of-two-words",
        ),
        pytest.param(
            v1()[: v1().index('vllm:kv_cache_usage_perc{engine="0",mod') + 32],
            "malformed sample line",
            id="truncated-mid-line",
        ),
        pytest.param(v1().replace("\n", "\r\n"), "malformed", id="crlf"),
        pytest.param(
            "<html><body><h1>502 Bad Gateway</h1></body></html>\n",
            "not a Prometheus exposition",
            id="html-error-page",
        ),
        pytest.param("\x00\x01\x02garbage\n", "not a Prometheus exposition", id="binary-garbage"),
    ],
)
def test_malformed_raises_parse_error(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        read_sample(text)


_label_text = st.text(
    st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=0, max_size=12
)
_value = st.floats(min_value=0, max_value=1e15, allow_nan=False, allow_infinity=False)


@budget(60)
@given(
    engines=st.dictionaries(
        st.text("0123456789", min_size=1, max_size=3),
        st.tuples(_value, _value, st.floats(0, 1), _value),
        min_size=1,
        max_size=4,
    ),
    model=_label_text,
)
def test_matches_prometheus_client_on_what_it_writes(
    engines: dict[str, tuple[float, float, float, float]], model: str
) -> None:
    """prometheus_client writes (any label text, any float repr); both readers agree."""
    reg = CollectorRegistry()
    lab = ("model_name", "engine")
    waiting = Gauge("vllm:num_requests_waiting", "w", lab, registry=reg)
    running = Gauge("vllm:num_requests_running", "r", lab, registry=reg)
    kv = Gauge("vllm:kv_cache_usage_perc", "kv", lab, registry=reg)
    gen = Counter("vllm:generation_tokens", "g", lab, registry=reg)
    for eng, (w, r, k, g) in engines.items():
        waiting.labels(model, eng).set(w)
        running.labels(model, eng).set(r)
        kv.labels(model, eng).set(k)
        gen.labels(model, eng).inc(g)
    text = generate_latest(reg).decode()
    ours = read_sample(text, "vllm", model)
    assert ours is not None
    assert ours == read_sample_reference(text, "vllm", model)
    assert ours.engines == len(engines)
    assert read_sample(text, "vllm", model + "-other") is None


@pytest.mark.timeout(60)  # with backtracking these take minutes each: the event loop would hang
@pytest.mark.parametrize(
    "line",
    [
        'vllm:num_requests_waiting{a="b"' + " " * 300_000 + "x",
        'vllm:num_requests_waiting{a="b",' + " " * 300_000 + "x",
        "vllm:num_requests_waiting" + " " * 300_000 + "x y z",
        "vllm:num_requests_waiting 1" + "1" * 300_000 + "x",
        'vllm:num_requests_waiting{a="' + "b\\\\" * 150_000,
    ],
    ids=[
        "spaces-after-label",
        "spaces-after-comma",
        "spaces-before-value",
        "long-number",
        "open-quote",
    ],
)
def test_hostile_lines_fail_in_linear_time(line: str) -> None:
    with pytest.raises(ParseError):
        read_sample(line + "\nvllm:num_requests_running 1\n")
