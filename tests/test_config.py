"""Config parsing: scaler/examples/pool.yaml loads; every bad file names the file and the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from scaler.config import ConfigError, load_config, parse_config, parse_config_text

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "scaler" / "examples" / "pool.yaml"


def base() -> dict[str, Any]:
    return {
        "pool": {"name": "p", "capacity": {"gpus": 8}},
        "inference": [{"name": "chat", "gpusPerReplica": 4, "targets": {"static": ["h:1"]}}],
        "research": [{"name": "eval", "gpusPerJob": 1}],
    }


def test_design_md_example_loads_with_documented_values() -> None:
    cfg = load_config(EXAMPLE)
    assert (cfg.server.grpcPort, cfg.server.metricsPort) == (50051, 8080)
    assert (cfg.pool.name, cfg.pool.capacity.gpus, cfg.pool.reserveGPUs) == ("shared-h100", 64, 4)
    chat = cfg.inference[0]
    assert (chat.name, chat.gpusPerReplica, chat.minReplicas, chat.maxReplicas) == (
        "chat",
        4,
        1,
        16,
    )
    assert chat.thresholds.waitingPerReplica == 5 and chat.thresholds.kvCacheUsage == 0.8
    assert chat.scaleDown.stabilizationSeconds == 300 and chat.coldStartSeconds == 180
    assert cfg.research[0].maxJobs == 32


def test_defaults_fill_everything_not_required() -> None:
    cfg = parse_config(base())
    assert cfg.scrape.intervalSeconds == 5 and cfg.scrape.staleAfterSeconds == 30
    svc = cfg.inference[0]
    assert svc.namespace == "default" and svc.engine == "vllm"
    # No thresholds block: llm-d's saturation levels (queue 5, KV 0.8).
    assert (svc.thresholds.waitingPerReplica, svc.thresholds.kvCacheUsage) == (5.0, 0.8)
    # No scaleDown block: 600 s, measured by the bench (docs/bench.md, "Sizing experiments").
    assert svc.scaleDown.stabilizationSeconds == 600.0


def _set(d: dict[str, Any], path: str, value: object) -> dict[str, Any]:
    cur: Any = d  # dicts and lists, by the path
    keys = path.split(".")
    for k in keys[:-1]:
        cur = cur[int(k)] if k.isdigit() else cur[k]
    last = keys[-1]
    if value is KeyError:
        del cur[last]
    else:
        cur[int(last) if last.isdigit() else last] = value
    return d


WEEK = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]

BAD = [
    ("pool-name-missing", "pool.name", KeyError, "pool.name: Field required"),
    ("pool-name-not-dns", "pool.name", "Shared_H100", "pool.name"),
    ("capacity-neither", "pool.capacity", {}, "pool.capacity: set exactly one of 'gpus'"),
    ("capacity-both", "pool.capacity", {"gpus": 1, "nodes": {}}, "pool.capacity: set exactly one"),
    ("negative-reserve", "pool.reserveGPUs", -1, "pool.reserveGPUs"),
    (
        "gpus-per-replica-missing",
        "inference.0.gpusPerReplica",
        KeyError,
        "inference[0].gpusPerReplica: Field required",
    ),
    ("gpus-per-replica-zero", "inference.0.gpusPerReplica", 0, "inference[0].gpusPerReplica"),
    (
        "min-above-max",
        "inference.0.minReplicas",
        20,
        "minReplicas (20) is greater than maxReplicas",
    ),
    ("unknown-engine", "inference.0.engine", "triton", "inference[0].engine"),
    (
        "typo-key",
        "inference.0.thresholds",
        {"waitingPerReplicas": 5},
        "inference[0].thresholds.waitingPerReplicas: Extra inputs are not permitted",
    ),
    (
        "all-thresholds-off",
        "inference.0.thresholds",
        {"waitingPerReplica": 0},
        "inference[0].thresholds: at least one threshold",
    ),
    ("kv-above-one", "inference.0.thresholds", {"kvCacheUsage": 80}, "kvCacheUsage"),
    (
        "static-not-host-port",
        "inference.0.targets",
        {"static": ["10.0.0.5"]},
        "inference[0].targets: static[0] '10.0.0.5' is not host:port",
    ),
    (
        "targets-both",
        "inference.0.targets",
        {"static": ["a:1"], "kubernetes": {"labelSelector": "a=b"}},
        "set exactly one of 'static' or 'kubernetes'",
    ),
    (
        "research-gpus-missing",
        "research.0.gpusPerJob",
        KeyError,
        "research[0].gpusPerJob: Field required",
    ),
    (
        "timeout-above-interval",
        "scrape",
        {"intervalSeconds": 1, "timeoutSeconds": 2},
        "timeoutSeconds must not exceed intervalSeconds",
    ),
    (
        "stale-below-interval",
        "scrape",
        {"intervalSeconds": 10, "staleAfterSeconds": 5},
        "staleAfterSeconds must be at least intervalSeconds",
    ),
    (
        "late-answer-past-stale",
        "scrape",
        {"timeoutSeconds": 2, "lateAnswerSeconds": 29, "staleAfterSeconds": 30},
        "timeoutSeconds + lateAnswerSeconds must not exceed staleAfterSeconds (2.0 + 29.0 > 30.0)",
    ),
    (
        "late-answer-negative",
        "scrape",
        {"lateAnswerSeconds": -1},
        "scrape.lateAnswerSeconds",
    ),
    ("port-out-of-range", "server", {"grpcPort": 70000}, "server.grpcPort"),
    (
        "listen-address-hostname",
        "server",
        {"listenAddress": "localhost"},
        "server.listenAddress: must be an IP address",
    ),
    (
        "target-selector-typo",
        "inference.0.targets",
        {"kubernetes": {"labelSelector": "app in (vllm"}},
        "inference[0].targets.kubernetes.labelSelector",
    ),
    (
        "target-selector-empty",
        "inference.0.targets",
        {"kubernetes": {"labelSelector": " "}},
        "would match every pod",
    ),
    ("duplicate-service", "inference.1", None, "inference: duplicate name 'chat'"),
    (
        "slo-attainment-percent",
        "inference.0.slo",
        {"attainment": 99},
        "inference[0].slo.attainment",
    ),
    ("slo-ttft-zero", "inference.0.slo", {"ttftSeconds": 0}, "inference[0].slo.ttftSeconds"),
    ("slo-window-too-short", "inference.0.slo", {"windowSeconds": 5}, "slo.windowSeconds"),
    ("slo-typo", "inference.0.slo", {"ttftSecond": 2}, "slo.ttftSecond: Extra inputs"),
    (
        "slo-on-tgi",
        "inference.0",
        {
            "name": "chat",
            "gpusPerReplica": 1,
            "engine": "tgi",
            "targets": {"static": ["h:1"]},
            "slo": {},
        },
        "slo is measured from the engine's time-to-first-token histogram (vLLM, SGLang); "
        "engine 'tgi' exports none",
    ),
    (
        "queue-without-url",
        "research.0.queue",
        {"prefix": "gps"},
        "research[0].queue: give the queue's URL as urlFile (a mounted Secret) or secret",
    ),
    (
        "queue-with-two-urls",
        "research.0.queue",
        {"urlFile": "/run/url", "secret": {"namespace": "r", "name": "s", "urlKey": "url"}},
        "research[0].queue: give the queue's URL as urlFile (a mounted Secret) or secret",
    ),
    (
        "queue-secret-password-without-address",
        "research.0.queue",
        {"secret": {"namespace": "r", "name": "s"}},
        "research[0].queue: address (host:port) is required to build the URL from "
        "secret.passwordKey",
    ),
    (
        "queue-secret-without-name",
        "research.0.queue",
        {"secret": {"namespace": "r", "urlKey": "url"}},
        "research[0].queue.secret.name: Field required",
    ),
    (
        "queue-timeout-above-interval",
        "research.0.queue",
        {"urlFile": "/run/url", "timeoutSeconds": 10},
        "research[0].queue.timeoutSeconds must not exceed scrape.intervalSeconds (10.0 > 5.0)",
    ),
    ("queue-typo", "research.0.queue", {"urlFiles": "/run/url"}, "queue.urlFiles: Extra inputs"),
    (
        "queue-database-negative",
        "research.0.queue",
        {"urlFile": "/run/url", "database": -1},
        "research[0].queue.database: Input should be greater than or equal to 0",
    ),
    (
        "checkpoint-negative",
        "research.0.checkpointIntervalSeconds",
        -1,
        "research[0].checkpointIntervalSeconds",
    ),
    (
        "forecast-min-above-kept",
        "pool.forecast",
        {"historyDays": 2, "minHistoryDays": 3},
        "minHistoryDays (3.0) exceeds historyDays (2)",
    ),
    (
        "state-both-stores",
        "server",
        {"stateFile": "/tmp/s.json", "stateConfigMap": "ns/cm"},
        "set at most one of 'stateFile'",
    ),
    ("state-configmap-no-namespace", "server", {"stateConfigMap": "cm"}, "namespace/name"),
    # one past the ends that AT_THE_EDGE below accepts
    (
        "static-port-0",
        "inference.0.targets",
        {"static": ["a:0"]},
        "static[0] 'a:0' is not host:port",
    ),
    (
        "static-port-65536",
        "inference.0.targets",
        {"static": ["a:65536"]},
        "static[0] 'a:65536' is not host:port",
    ),
    ("seven-weekend-days", "pool.forecast", {"weekendDays": WEEK}, "all seven days"),
]


@pytest.mark.parametrize(("path", "value", "needle"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_config_names_file_and_key(path: str, value: object, needle: str) -> None:
    data = base()
    if path == "inference.1":
        data["inference"].append(dict(data["inference"][0]))
    else:
        _set(data, path, value)
    with pytest.raises(ConfigError) as exc:
        parse_config(data, "pool.yaml")
    msg = str(exc.value)
    assert msg.startswith("pool.yaml: ")
    assert needle in msg


# Each cross-field limit at equality, and each range at its end: accepted (one past each is
# in BAD above, or test_nothing_to_scale_is_refused). (id, [(path, value), ...])
AT_THE_EDGE = [
    ("min-equals-max-replicas", [("inference.0.minReplicas", 3), ("inference.0.maxReplicas", 3)]),
    ("timeout-equals-interval", [("scrape", {"intervalSeconds": 2, "timeoutSeconds": 2})]),
    ("stale-equals-interval", [("scrape", {"intervalSeconds": 10, "staleAfterSeconds": 10})]),
    (
        "timeout-plus-late-equals-stale",
        [("scrape", {"timeoutSeconds": 2, "lateAnswerSeconds": 28, "staleAfterSeconds": 30})],
    ),
    ("min-history-equals-history", [("pool.forecast", {"historyDays": 3, "minHistoryDays": 3})]),
    ("min-samples-equals-samples", [("pool.giveBack", {"samples": 20, "minSamples": 20})]),
    ("state-file-alone", [("server", {"stateFile": "/tmp/s.json"})]),
    ("inference-only", [("research", [])]),
    ("research-only", [("inference", [])]),
    ("six-weekend-days", [("pool.forecast", {"weekendDays": WEEK[:6]})]),
    ("static-ports-1-and-65535", [("inference.0.targets", {"static": ["a:1", "b:65535"]})]),
]


@pytest.mark.parametrize("edits", [e[1] for e in AT_THE_EDGE], ids=[e[0] for e in AT_THE_EDGE])
def test_config_at_the_edge_is_accepted(edits: list[tuple[str, object]]) -> None:
    data = base()
    for path, value in edits:
        _set(data, path, value)
    parse_config(data, "pool.yaml")  # no ConfigError


def test_nothing_to_scale_is_refused() -> None:
    data = {**base(), "inference": [], "research": []}
    with pytest.raises(ConfigError, match=r"^pool\.yaml: ") as exc:
        parse_config(data, "pool.yaml")
    assert "nothing to scale" in str(exc.value)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        pytest.param("pool: [", "invalid YAML", id="yaml-syntax"),
        pytest.param("- just\n- a list\n", "top level must be a mapping", id="not-a-mapping"),
        pytest.param("", "top level must be a mapping", id="empty"),
    ],
)
def test_unparseable_text(text: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        parse_config_text(text, "x.yaml")


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.yaml: cannot read"):
        load_config(tmp_path / "nope.yaml")


def test_slo_forecast_and_state_defaults() -> None:
    cfg = parse_config(base())
    svc = cfg.inference[0]
    assert svc.slo is None  # absent: no slo signal, behaviour unchanged
    assert not cfg.pool.forecast.enabled
    assert cfg.research[0].checkpointIntervalSeconds == 0
    assert (cfg.server.stateFile, cfg.server.stateConfigMap) == (None, None)
    data = base()
    data["inference"][0]["slo"] = {}
    slo = parse_config(data).inference[0].slo
    assert slo is not None
    assert (slo.ttftSeconds, slo.attainment, slo.windowSeconds, slo.itlSeconds) == (
        2.0,
        0.99,
        300.0,
        None,
    )
    assert slo.min_requests == 100  # 1 / (1 - 0.99)
    f = cfg.pool.forecast
    assert (f.slotSeconds, f.historyDays, f.minHistoryDays, f.researchGraceSeconds) == (
        600.0,
        21,
        1.0,
        600.0,
    )


# --- pool.giveBack.namespaces (the research pods watched for the measured give-back) --------

GIVE_BACK_NAMESPACES_OK = {
    "none": ([], []),
    "one": (["research"], ["research"]),
    "several-kept-in-order": (["team-b", "team-a", "ml1"], ["team-b", "team-a", "ml1"]),
    "63-characters": (["a" * 63], ["a" * 63]),
}


@pytest.mark.parametrize(
    ("namespaces", "expected"), GIVE_BACK_NAMESPACES_OK.values(), ids=GIVE_BACK_NAMESPACES_OK
)
def test_give_back_namespaces_accepted(namespaces: list[str], expected: list[str]) -> None:
    data = base()
    _set(data, "pool.giveBack", {"namespaces": namespaces})
    assert parse_config(data).pool.giveBack.namespaces == expected


def test_give_back_namespaces_default_empty() -> None:
    assert parse_config(base()).pool.giveBack.namespaces == []


GIVE_BACK_NAMESPACES_BAD = {
    "uppercase": (["Research"], "'Research' is not a Kubernetes namespace name"),
    "underscore": (["ml_jobs"], "'ml_jobs' is not a Kubernetes namespace name"),
    "leading-dash": (["-ml"], "'-ml' is not a Kubernetes namespace name"),
    "dotted": (["ml.jobs"], "'ml.jobs' is not a Kubernetes namespace name"),
    "empty": ([""], "'' is not a Kubernetes namespace name"),
    "64-characters": (["a" * 64], "is not a Kubernetes namespace name"),
    "duplicate": (["ml", "research", "ml"], "namespace(s) listed twice: ml"),
    "a-string-not-a-list": ("research", "pool.giveBack.namespaces"),
}


@pytest.mark.parametrize(
    ("namespaces", "needle"), GIVE_BACK_NAMESPACES_BAD.values(), ids=GIVE_BACK_NAMESPACES_BAD
)
def test_give_back_namespaces_refused_with_the_key(namespaces: object, needle: str) -> None:
    data = base()
    _set(data, "pool.giveBack", {"namespaces": namespaces})
    with pytest.raises(ConfigError) as exc:
        parse_config(data, "pool.yaml")
    msg = str(exc.value)
    assert msg.startswith("pool.yaml: pool.giveBack.namespaces")
    assert needle in msg
