"""The chart's PrometheusRule run by Prometheus' own rule engine (`promtool test rules`).

tests/test_chart.py checks that every alert names metrics the scaler exports; this checks
what each alert does with them: when it fires, with which labels and annotations, and when
it stays quiet (a ramp the replicas follow, the HPA ignoring us, a fresh install). The
rules are the ones `helm template` renders from ci/monitoring-values.yaml with
binpackScheduler on; promtool comes from tools/ensure-promtool.sh (built from the published
Prometheus module, never skipped).
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.tools import ensure_tool
from tests.test_chart import CHART, NAMESPACE, RELEASE, Helm, helm, one  # noqa: F401

SEL = {"job": f"{RELEASE}-gpu-pool-scaler", "namespace": NAMESPACE, "instance": "10.0.0.9:9090"}
TEAM = {"team": "ml-platform"}  # ci/monitoring-values.yaml prometheusRule.alertLabels
SCHED = f"{RELEASE}-gpu-pool-scaler-scheduler"


def series(metric: str, values: str, **labels: str) -> dict[str, str]:
    """One promtool input series of the scaler (its job/namespace/instance) at 1-min steps."""
    all_labels = {**SEL, **labels}
    body = ",".join(f'{k}="{v}"' for k, v in all_labels.items())
    return {"series": f"{metric}{{{body}}}", "values": values}


def ksm(values: str) -> dict[str, str]:
    """kube-state-metrics' available replicas of the chart's scheduler Deployment."""
    return {
        "series": "kube_deployment_status_replicas_available{"
        f'namespace="{NAMESPACE}",deployment="{SCHED}",job="kube-state-metrics"}}',
        "values": values,
    }


@dataclass(frozen=True)
class Case:
    id: str
    alert: str
    inputs: list[dict[str, str]]
    # eval time (minutes) -> the firing alerts' labels beyond alertname + the rule's own
    # (an empty list: quiet at that time)
    expect: dict[int, list[dict[str, str]]] = field(default_factory=dict)


CHAT = {"service": "chat"}
CASES = [
    Case(
        "replicas-not-ready-fires-when-asked-replicas-never-serve",
        "GpuPoolScalerReplicasNotReady",
        [
            series("gpu_pool_scaler_desired_replicas", "2x30 4x60", **CHAT),
            series("gpu_pool_scaler_ready_replicas", "2x90", **CHAT),
        ],
        # Asked for 4 at 30 min; the 28-min window holds a 2 until ~58 min, then 5 min pending.
        {50: [], 58: [], 70: [CHAT], 90: [CHAT]},
    ),
    Case(
        "replicas-not-ready-quiet-on-a-ramp-the-replicas-follow-12-min-late",
        "GpuPoolScalerReplicasNotReady",
        [
            series(
                "gpu_pool_scaler_desired_replicas",
                "2x30 3x10 4x10 5x10 6x10 7x10 8x50",
                **CHAT,
            ),
            series("gpu_pool_scaler_ready_replicas", "2x42 3x10 4x10 5x10 6x10 7x10 8x38", **CHAT),
        ],
        {m: [] for m in (40, 60, 80, 100, 120, 130)},
    ),
    Case(
        "replicas-not-ready-quiet-while-the-hpa-ignores-the-answer",
        "GpuPoolScalerReplicasNotReady",
        [
            series("gpu_pool_scaler_desired_replicas", "4x90", **CHAT),
            series("gpu_pool_scaler_ready_replicas", "3x90", **CHAT),
            series("gpu_pool_scaler_hpa_ignoring_answer", "1x90", **CHAT),
        ],
        {45: [], 80: []},
    ),
    Case(
        "replicas-not-ready-quiet-on-scale-down",
        "GpuPoolScalerReplicasNotReady",
        [
            series("gpu_pool_scaler_desired_replicas", "2x90", **CHAT),
            series("gpu_pool_scaler_ready_replicas", "4x90", **CHAT),
        ],
        {45: [], 80: []},
    ),
    Case(
        "replicas-not-ready-waits-until-the-series-span-the-window",
        "GpuPoolScalerReplicasNotReady",
        [
            series("gpu_pool_scaler_desired_replicas", "4x60", **CHAT),
            series("gpu_pool_scaler_ready_replicas", "2x60", **CHAT),
        ],
        # First install: 28 min of history first (the offset guard), then 5 min pending.
        {20: [], 30: [], 40: [CHAT]},
    ),
    Case(
        "replicas-not-ready-per-service",
        "GpuPoolScalerReplicasNotReady",
        [
            series("gpu_pool_scaler_desired_replicas", "3x90", service="chat"),
            series("gpu_pool_scaler_ready_replicas", "3x90", service="chat"),
            series("gpu_pool_scaler_desired_replicas", "2x90", service="embed"),
            series("gpu_pool_scaler_ready_replicas", "1x90", service="embed"),
        ],
        {60: [{"service": "embed"}]},
    ),
    Case(
        "binpack-scheduler-down",
        "GpuPoolScalerBinpackSchedulerDown",
        [ksm("1x10 0x20")],
        {8: [], 13: [], 20: [{}]},
    ),
    Case(
        "binpack-scheduler-quiet-without-kube-state-metrics",
        "GpuPoolScalerBinpackSchedulerDown",
        [series("gpu_pool_scaler_cycles_total", "0+1x30")],
        {20: []},
    ),
    Case(
        "scaler-down-when-not-scraped-up",
        "GpuPoolScalerDown",
        [series("up", "1x10 0x20")],
        # absent() of a comparison carries no labels (of a bare selector it would).
        {8: [], 20: [{}]},
    ),
    Case(
        "service-data-stale",
        "GpuPoolScalerServiceDataStale",
        [series("gpu_pool_scaler_service_data_fresh", "1x10 0x30", **CHAT)],
        {15: [], 25: [CHAT]},
    ),
    Case(
        "capacity-unknown",
        "GpuPoolScalerCapacityUnknown",
        [series("gpu_pool_scaler_capacity_known", "1x5 0x30")],
        {10: [], 20: [{}]},
    ),
    Case(
        "research-starved-with-headroom-for-the-smallest-job",
        "GpuPoolScalerResearchStarved",
        [
            series("gpu_pool_scaler_research_slots", "0x60", research_class="eval"),
            series("gpu_pool_scaler_pool_gpus", "8x60", part="headroom"),
        ],
        {20: [], 40: [{}]},
    ),
    Case(
        "research-not-starved-with-slots",
        "GpuPoolScalerResearchStarved",
        [
            series("gpu_pool_scaler_research_slots", "3x60", research_class="eval"),
            series("gpu_pool_scaler_pool_gpus", "8x60", part="headroom"),
        ],
        {40: []},
    ),
    Case(
        "research-not-starved-when-the-queue-fed-class-has-no-items",
        "GpuPoolScalerResearchStarved",
        [
            series("gpu_pool_scaler_research_slots", "0x60", research_class="eval"),
            series("gpu_pool_scaler_research_queue_items", "0x60", research_class="eval"),
            series("gpu_pool_scaler_pool_gpus", "8x60", part="headroom"),
        ],
        {40: []},
    ),
    Case(
        "research-starved-when-queued-items-get-no-slot",
        "GpuPoolScalerResearchStarved",
        [
            series("gpu_pool_scaler_research_slots", "0x60", research_class="eval"),
            series("gpu_pool_scaler_research_queue_items", "5x60", research_class="eval"),
            series("gpu_pool_scaler_pool_gpus", "8x60", part="headroom"),
        ],
        {40: [{}]},
    ),
    Case(
        "research-starved-for-a-class-without-queue-beside-an-empty-queue",
        "GpuPoolScalerResearchStarved",
        [
            series("gpu_pool_scaler_research_slots", "0x60", research_class="eval"),
            series("gpu_pool_scaler_research_queue_items", "0x60", research_class="eval"),
            series("gpu_pool_scaler_research_slots", "0x60", research_class="sweep"),
            series("gpu_pool_scaler_pool_gpus", "8x60", part="headroom"),
        ],
        {40: [{}]},
    ),
    Case(
        "research-queue-unread-per-class",
        "GpuPoolScalerResearchQueueUnread",
        [
            series("gpu_pool_scaler_research_queue_unread", "0x5 1x30", research_class="eval"),
            series("gpu_pool_scaler_research_queue_unread", "0x35", research_class="train"),
        ],
        {10: [], 20: [{"research_class": "eval"}]},
    ),
    Case(
        "queue-secret-reads-failing-for-15-min",
        "GpuPoolScalerResearchQueueSecretUnreadable",
        # A good read, then refused from minute 10 on: tried again 5, 10, 20, 40 s later
        # (4 in the first minute), then once a minute (depth.SECRET_REFRESH_S). Both results
        # exist at 0 from start (ScalerMetrics).
        [
            series("gpu_pool_scaler_research_queue_secret_reads_total", "1x40", result="ok"),
            series(
                "gpu_pool_scaler_research_queue_secret_reads_total", "0x10 4+1x30", result="error"
            ),
        ],
        {20: [], 30: [{}]},
    ),
    Case(
        "queue-secret-read-again-quiet",
        "GpuPoolScalerResearchQueueSecretUnreadable",
        # Refused for 5 minutes, then read again: no alert.
        [
            series(
                "gpu_pool_scaler_research_queue_secret_reads_total",
                "0x10 4+1x5 9x30",
                result="error",
            )
        ],
        {20: [], 30: [], 40: []},
    ),
    Case(
        "queue-secret-refused-once-after-an-upgrade-quiet",
        "GpuPoolScalerResearchQueueSecretUnreadable",
        # The authorizer has not seen the upgrade's new Role yet: one refused read, read on
        # the retry 5 s later (cluster/README.md, scenario 7). No page.
        [
            series("gpu_pool_scaler_research_queue_secret_reads_total", "0x10 1x30", result="ok"),
            series(
                "gpu_pool_scaler_research_queue_secret_reads_total", "0x10 1x30", result="error"
            ),
        ],
        {12: [], 20: [], 30: []},
    ),
    Case(
        "stale-decisions-at-once",
        "GpuPoolScalerStaleDecisions",
        [series("gpu_pool_scaler_stale_decision_answers_total", "0x10 1+1x5 6x20")],
        {9: [], 13: [{}], 30: []},
    ),
    Case(
        "config-rejected-for-15-min",
        "GpuPoolScalerConfigRejected",
        [series("gpu_pool_scaler_config_reloads_total", "0x10 1x30", result="invalid")],
        {9: [], 12: [{}], 30: []},
    ),
    Case(
        "backlog-unread-over-half-the-window",
        "GpuPoolScalerBacklogUnread",
        [series("gpu_pool_scaler_queue_unread", "0x10 1x40", **CHAT)],
        # Half of 15 min by ~18 min, then 5 min pending.
        {15: [], 20: [], 25: [CHAT], 45: [CHAT]},
    ),
    Case(
        "backlog-unread-quiet-while-it-flickers-at-bursts",
        "GpuPoolScalerBacklogUnread",
        [series("gpu_pool_scaler_queue_unread", " ".join(["0 0 1"] * 14), **CHAT)],
        {20: [], 30: [], 40: []},
    ),
    Case(
        "backlog-unread-per-service",
        "GpuPoolScalerBacklogUnread",
        [
            series("gpu_pool_scaler_queue_unread", "0x40", service="chat"),
            series("gpu_pool_scaler_queue_unread", "1x40", service="embed"),
        ],
        {30: [{"service": "embed"}]},
    ),
    Case(
        "slo-missed-for-15-min",
        "GpuPoolScalerSloMissed",
        [
            series("gpu_pool_scaler_slo_objective", "0.99x40", **CHAT),
            series("gpu_pool_scaler_slo_attainment", "0.995x5 0.97x35", **CHAT),
        ],
        {5: [], 15: [], 21: [CHAT], 35: [CHAT]},
    ),
    Case(
        # A 10-min dip (a burst the scaler answered) stays quiet; so does an objective met.
        "slo-quiet-through-a-dip-the-scaler-answers",
        "GpuPoolScalerSloMissed",
        [
            series("gpu_pool_scaler_slo_objective", "0.99x40", **CHAT),
            series("gpu_pool_scaler_slo_attainment", "0.995x5 0.98x10 0.995x25", **CHAT),
        ],
        {10: [], 16: [], 30: []},
    ),
    Case(
        # Too few requests to measure: the attainment is absent, never read as a miss.
        "slo-quiet-while-not-measured",
        "GpuPoolScalerSloMissed",
        [
            series("gpu_pool_scaler_slo_objective", "0.99x40", **CHAT),
            series("gpu_pool_scaler_slo_attainment", "_x40", **CHAT),
        ],
        {20: [], 35: []},
    ),
    Case(
        "slo-missed-on-inter-token-latency-per-service",
        "GpuPoolScalerSloMissed",
        [
            series("gpu_pool_scaler_slo_objective", "0.95x40", service="chat"),
            series("gpu_pool_scaler_slo_attainment", "0.99x40", service="chat"),
            series("gpu_pool_scaler_slo_itl_attainment", "0.90x40", service="chat"),
            series("gpu_pool_scaler_slo_objective", "0.95x40", service="embed"),
            series("gpu_pool_scaler_slo_attainment", "0.99x40", service="embed"),
        ],
        {10: [], 20: [CHAT]},
    ),
    Case(
        "hpa-ignores-answer",
        "GpuPoolScalerHpaIgnoresAnswer",
        [series("gpu_pool_scaler_hpa_ignoring_answer", "0x5 1x30", **CHAT)],
        {15: [], 25: [CHAT]},
    ),
]


@pytest.fixture(scope="session")
def promtool() -> str:
    return ensure_tool("ensure-promtool.sh", 1800)  # a first build: ~3 min on 2 cores


@pytest.fixture(scope="session")
def rule(helm: Helm, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:  # noqa: F811
    """The rendered PrometheusRule (monitoring CI values + binpackScheduler)."""
    d = tmp_path_factory.mktemp("alerts")
    extra = d / "binpack.yaml"
    extra.write_text(yaml.safe_dump({"binpackScheduler": {"enabled": True}}))
    docs = helm.render(CHART / "ci" / "monitoring-values.yaml", extra)
    return one(docs, "PrometheusRule")


def _annotations(r: dict[str, Any], labels: dict[str, str]) -> dict[str, str]:
    """The rule's annotations as Prometheus expands them ({{ $labels.x }} only)."""

    def expand(text: str) -> str:
        return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m.group(1), ""), text)

    return {k: expand(v) for k, v in r.get("annotations", {}).items()}


def test_every_alert_has_a_case(rule: dict[str, Any]) -> None:
    (group,) = rule["spec"]["groups"]
    alerts = {r["alert"] for r in group["rules"]}
    assert alerts == {c.alert for c in CASES}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_alert_fires_as_stated(
    promtool: str, rule: dict[str, Any], tmp_path: Path, case: Case
) -> None:
    (group,) = rule["spec"]["groups"]
    (r,) = [x for x in group["rules"] if x.get("alert") == case.alert]
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(yaml.safe_dump({"groups": [{**group, "rules": [r]}]}))
    checks = []
    for minute, firing in sorted(case.expect.items()):
        exp = []
        for extra in firing:
            labels = {**r["labels"], **extra}
            exp.append({"exp_labels": labels, "exp_annotations": _annotations(r, labels)})
        checks.append({"eval_time": f"{minute}m", "alertname": case.alert, "exp_alerts": exp})
    test = {
        "rule_files": [rules_file.name],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": case.inputs, "alert_rule_test": checks}],
    }
    test_file = tmp_path / "test.yaml"
    test_file.write_text(yaml.safe_dump(test, sort_keys=False))
    check = subprocess.run(
        [promtool, "check", "rules", str(rules_file)], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
    proc = subprocess.run(
        [promtool, "test", "rules", test_file.name],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_alert_test_fails_on_a_wrong_expectation(
    promtool: str, rule: dict[str, Any], tmp_path: Path
) -> None:
    """The harness can fail: a firing alert the case says is quiet is reported."""
    wrong = Case(
        "wrong",
        "GpuPoolScalerCapacityUnknown",
        [series("gpu_pool_scaler_capacity_known", "0x30")],
        {20: []},
    )
    with pytest.raises(AssertionError, match="GpuPoolScalerCapacityUnknown"):
        test_alert_fires_as_stated(promtool, rule, tmp_path, wrong)
