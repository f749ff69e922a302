"""The chart's side of the measured research give-back (pool.giveBack): with capacity from
nodes and subtractForeignPods off, the scaler reads research pods only in the research
classes' namespaces, with a read-only Role (+ RoleBinding) in each, and the rendered config
names those namespaces; never with subtractForeignPods (the ClusterRole reads every pod),
with learn off, with static capacity, or with rbac.create off (the config still says them).
Rendered by the real `helm` binary (helpers from tests/test_chart.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from scaler import config as cfgmod
from scaler.ingest.capacity import research_watch_namespaces
from tests import test_chart
from tests.test_chart import (
    CHART,
    NAMESPACE,
    READ_VERBS,
    RELEASE,
    Helm,
    helm,  # noqa: F401  (the session fixture)
    loaded_config,
    objs,
    one,
)

pytestmark = pytest.mark.helm

ROLE = f"{RELEASE}-gpu-pool-scaler-research-pods"
NODES = {"nodes": {"labelSelector": "gpu-pool=shared"}}


def research(name: str, namespace: str | None = None) -> dict[str, Any]:
    rc: dict[str, Any] = {
        "name": name,
        "gpusPerJob": 1,
        "scaledJob": {
            "jobTemplate": {"spec": {"containers": [{"name": name, "image": "r.example/j:1"}]}}
        },
    }
    if namespace is not None:
        rc["namespace"] = namespace
    return rc


# eval runs in the release namespace, two classes share "research", one in "batch"
CLASSES = [
    research("eval"),
    research("finetune", "research"),
    research("pretrain", "research"),
    research("sweep", "batch"),
]


@dataclass(frozen=True)
class Case:
    name: str
    capacity: dict[str, Any]
    give_back: dict[str, Any] | None  # pool.giveBack values; None: not set
    roles: tuple[str, ...]  # namespaces with the research-pods Role (and RoleBinding)
    config_namespaces: list[str]  # pool.giveBack.namespaces in the rendered config
    research_classes: list[dict[str, Any]] = field(default_factory=lambda: CLASSES)
    extra: dict[str, Any] = field(default_factory=dict)  # more top-level values


CASES = [
    Case(
        "default-install-watches-the-research-namespaces",
        NODES,
        None,
        ("batch", NAMESPACE, "research"),
        ["batch", NAMESPACE, "research"],
    ),
    Case(
        "learn-explicitly-on",
        NODES,
        {"learn": True, "samples": 10},
        ("batch", NAMESPACE, "research"),
        ["batch", NAMESPACE, "research"],
    ),
    Case(
        "subtract-foreign-pods-reads-every-pod-already",
        {"nodes": {"labelSelector": "gpu-pool=shared", "subtractForeignPods": True}},
        None,
        (),
        [],
    ),
    Case("learn-off", NODES, {"learn": False}, (), []),
    Case("static-capacity", {"gpus": 64}, None, (), []),
    Case("no-research-classes", NODES, None, (), [], research_classes=[]),
    Case("user-namespaces-win", NODES, {"namespaces": ["ml-jobs"]}, ("ml-jobs",), ["ml-jobs"]),
    Case("user-turns-the-watch-off", NODES, {"namespaces": []}, (), []),
    Case(
        "no-rbac-still-configured",
        NODES,
        None,
        (),
        ["batch", NAMESPACE, "research"],
        extra={"rbac": {"create": False}},
    ),
]


def values(case: Case) -> dict[str, Any]:
    pool: dict[str, Any] = {"name": "shared-h100", "capacity": case.capacity}
    if case.give_back is not None:
        pool["giveBack"] = case.give_back
    return {
        "pool": pool,
        "inference": [
            {"name": "chat", "gpusPerReplica": 4, "targets": {"static": ["10.0.0.5:8000"]}}
        ],
        "research": case.research_classes,
        "additionalLabels": {"team": "ml-platform"},
        **case.extra,
    }


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_research_pod_roles_and_config_namespaces(
    helm: Helm,  # noqa: F811
    tmp_path: Path,
    case: Case,
) -> None:
    f = tmp_path / "v.yaml"
    f.write_text(yaml.safe_dump(values(case)))
    docs = helm.render(f)

    roles = [r for r in objs(docs, "Role") if r["metadata"]["name"] == ROLE]
    bindings = [b for b in objs(docs, "RoleBinding") if b["metadata"]["name"] == ROLE]
    assert tuple(sorted(r["metadata"]["namespace"] for r in roles)) == case.roles
    assert tuple(sorted(b["metadata"]["namespace"] for b in bindings)) == case.roles
    sa = one(docs, "ServiceAccount")["metadata"]["name"]
    for role in roles:
        assert role["rules"] == [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
        ]
        assert set(role["rules"][0]["verbs"]) <= READ_VERBS
        assert role["metadata"]["labels"]["team"] == "ml-platform"
        assert role["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE
    for b in bindings:
        assert b["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": ROLE,
        }
        assert b["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}]

    cfg = loaded_config(docs, tmp_path)
    assert cfg.pool.giveBack.namespaces == case.config_namespaces
    # What the scaler will watch is exactly where the chart grants the read (unless the
    # user manages RBAC: rbac.create false).
    watched = research_watch_namespaces(cfg.pool)
    if case.extra.get("rbac", {}).get("create") is False:
        assert watched == ("batch", NAMESPACE, "research")
    else:
        assert watched == case.roles
    # No cluster-wide pod read unless subtractForeignPods asks for it.
    for cr in objs(docs, "ClusterRole"):
        pods = any("pods" in rule["resources"] for rule in cr["rules"])
        assert pods is bool(case.capacity.get("nodes", {}).get("subtractForeignPods"))


BAD_NAMESPACES = {
    "uppercase": ["Research"],
    "underscore": ["ml_jobs"],
    "duplicate": ["ml", "ml"],
    "not-a-list": "research",
}


@pytest.mark.parametrize("namespaces", BAD_NAMESPACES.values(), ids=BAD_NAMESPACES)
def test_bad_give_back_namespaces_fail_the_chart_with_the_values_path(
    helm: Helm,  # noqa: F811
    tmp_path: Path,
    namespaces: object,
) -> None:
    case = Case("bad", NODES, {"namespaces": namespaces}, (), [])
    f = tmp_path / "v.yaml"
    f.write_text(yaml.safe_dump(values(case)))
    proc = helm.template(f)
    assert proc.returncode != 0
    assert "giveBack" in proc.stderr and "namespaces" in proc.stderr, proc.stderr


def test_give_back_schema_matches_the_scalers_config_model() -> None:
    test_chart.test_values_schema_matches_the_scalers_config_model(
        ("pool", "giveBack"), cfgmod.GiveBack, set()
    )


def test_chart_readme_documents_every_give_back_key() -> None:
    readme = (CHART / "README.md").read_text()
    for name in cfgmod.GiveBack.model_fields:
        assert f"| `pool.giveBack.{name}` |" in readme, name
