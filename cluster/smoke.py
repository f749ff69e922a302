"""Smoke check of a running cluster/up cluster, end to end with the real components.

    cluster/smoke [--state-dir DIR] [--keep]

1. PriorityClasses: gps-inference (high) and gps-research (-100, preemptionPolicy Never).
2. A Deployment asking nvidia.com/gpu: 4 per pod (nodeSelector gpu-pool=shared, kwok
   toleration): the real scheduler binds it, kwok marks it Running with a 127.x pod IP.
3. A ScaledObject with KEDA's `cron` trigger (desiredReplicas 3): the KEDA operator
   creates the HPA, the HPA (kube-controller-manager) reads the external metric through
   the aggregation layer from the KEDA adapter and scales the Deployment to 3.
4. Preemption: a low-priority research Job fills the free GPUs, the ScaledObject asks for
   every GPU in the pool; the scheduler preempts the research pods for inference pods.

Exits 0 and prints a PASS line per step, or fails naming the step.
"""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cluster

T = TypeVar("T")

# Objects read back from the API server are typed `Any` here (as in e2e.py): the server
# fills in their metadata and status, which the client's models declare Optional.

NS = "gps-smoke"
DEPLOY = "smoke-vllm"
SO = "smoke-vllm"
GPUS_PER_POD = 4
LOOPBACK_NET = ipaddress.ip_network("127.0.0.0/8")


def step(msg: str) -> None:
    print(f"[smoke {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def wait(what: str, check: Callable[[], T], timeout: float = 120.0) -> T:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            r = check()
            if r:
                return r
        except Exception as e:
            last = e
        time.sleep(1)
    raise SystemExit(f"FAIL: timed out after {timeout:.0f}s: {what} (last error: {last})")


def pod_template(priority: str, app: str, gpus: int) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": app}},
        "spec": {
            "priorityClassName": priority,
            "nodeSelector": {"gpu-pool": "shared"},
            "tolerations": [
                {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}
            ],
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "main",
                    "image": "fake.invalid/not-pulled:kwok",  # kwok never pulls or runs it
                    "resources": {
                        "requests": {"cpu": "1", "memory": "1Gi"},
                        "limits": {"nvidia.com/gpu": str(gpus)},
                    },
                }
            ],
        },
    }


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--state-dir", type=Path, default=cluster.DEFAULT_STATE)
    p.add_argument("--keep", action="store_true", help="leave the smoke objects in place")
    args = p.parse_args()
    kc = args.state_dir.resolve() / "kubeconfig"
    from kubernetes import client

    api = cluster.api_client(kc)
    core = client.CoreV1Api(api)
    apps = client.AppsV1Api(api)
    batch = client.BatchV1Api(api)
    sched = client.SchedulingV1Api(api)
    autoscaling = client.AutoscalingV2Api(api)
    custom = client.CustomObjectsApi(api)

    nodes: list[Any] = [n for n in core.list_node(label_selector="gpu-pool=shared").items]
    total_gpus = sum(int(n.status.allocatable.get("nvidia.com/gpu", 0)) for n in nodes)
    pool_pods = total_gpus // GPUS_PER_POD
    if pool_pods < 4:
        raise SystemExit(f"FAIL: need >= {4 * GPUS_PER_POD} GPUs in the pool, have {total_gpus}")
    step(f"{len(nodes)} nodes, {total_gpus} GPUs -> room for {pool_pods} pods of {GPUS_PER_POD}")

    # clean slate
    try:
        core.delete_namespace(NS)
        wait(
            "old smoke namespace gone",
            lambda: NS not in [n.metadata.name for n in core.list_namespace().items if n.metadata],
            120,
        )
    except client.ApiException as e:
        if e.status != 404:
            raise
    for pc in ("gps-inference", "gps-research"):
        try:
            sched.delete_priority_class(pc)
        except client.ApiException as e:
            if e.status != 404:
                raise

    # 1. priority classes ------------------------------------------------------------
    sched.create_priority_class(
        cluster.manifest(
            {
                "metadata": {"name": "gps-inference"},
                "value": 1000,
                "description": "vLLM inference (smoke)",
            }
        )
    )
    sched.create_priority_class(
        cluster.manifest(
            {
                "metadata": {"name": "gps-research"},
                "value": -100,
                "preemptionPolicy": "Never",
                "description": "research jobs on borrowed GPUs (smoke)",
            }
        )
    )
    core.create_namespace(cluster.manifest({"metadata": {"name": NS}}))
    step("PASS 1: PriorityClasses gps-inference (1000) and gps-research (-100, Never)")

    # 2. deployment scheduled + Running on kwok ----------------------------------------
    t = time.monotonic()
    apps.create_namespaced_deployment(
        NS,
        cluster.manifest(
            {
                "metadata": {"name": DEPLOY},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": {"app": DEPLOY}},
                    "template": pod_template("gps-inference", DEPLOY, GPUS_PER_POD),
                },
            }
        ),
    )

    def app_pods(app: str) -> list[Any]:
        return core.list_namespaced_pod(NS, label_selector=f"app={app}").items

    def running_pods(app: str) -> list[Any]:
        pods = app_pods(app)
        return [
            x
            for x in pods
            if x.status.phase == "Running"
            and x.status.pod_ip
            and x.metadata.deletion_timestamp is None
        ]

    pods = wait("deployment pod Running", lambda: running_pods(DEPLOY), 120)
    ip = pods[0].status.pod_ip
    assert ipaddress.ip_address(ip) in LOOPBACK_NET, ip
    step(
        f"PASS 2: pod {pods[0].metadata.name} on {pods[0].spec.node_name} Running, "
        f"pod IP {ip} (in 127.0.0.0/8) after {time.monotonic() - t:.1f}s"
    )

    # 3. ScaledObject (cron) -> HPA -> 3 replicas ----------------------------------------
    now = dt.datetime.now(dt.UTC)

    def cron_so(desired: int) -> dict[str, Any]:
        start = (now - dt.timedelta(minutes=1)).minute
        end = (now + dt.timedelta(minutes=30)).minute
        return {
            "apiVersion": "keda.sh/v1alpha1",
            "kind": "ScaledObject",
            "metadata": {"name": SO, "namespace": NS},
            "spec": {
                "scaleTargetRef": {"name": DEPLOY},
                "pollingInterval": 5,
                "cooldownPeriod": 30,
                "minReplicaCount": 1,
                "maxReplicaCount": pool_pods,
                "triggers": [
                    {
                        "type": "cron",
                        "metadata": {
                            "timezone": "Etc/UTC",
                            "start": f"{start} * * * *",
                            "end": f"{end} * * * *",
                            "desiredReplicas": str(desired),
                        },
                    }
                ],
            },
        }

    t = time.monotonic()
    custom.create_namespaced_custom_object("keda.sh", "v1alpha1", NS, "scaledobjects", cron_so(3))
    hpa: Any = wait(
        "KEDA creates the HPA",
        lambda: autoscaling.read_namespaced_horizontal_pod_autoscaler(f"keda-hpa-{SO}", NS),
        60,
    )
    step(
        f"      HPA {hpa.metadata.name} created by KEDA after {time.monotonic() - t:.1f}s "
        f"(metric {hpa.spec.metrics[0].external.metric.name})"
    )
    wait(
        "deployment scaled to 3",
        lambda: apps.read_namespaced_deployment(DEPLOY, NS).spec.replicas == 3,
        120,
    )
    wait("3 pods Running", lambda: len(running_pods(DEPLOY)) == 3, 120)
    hpa = autoscaling.read_namespaced_horizontal_pod_autoscaler(f"keda-hpa-{SO}", NS)
    cur = hpa.status.current_metrics[0].external.current if hpa.status.current_metrics else None
    step(
        f"PASS 3: HPA scaled {DEPLOY} 1 -> 3 after {time.monotonic() - t:.1f}s "
        f"(external metric current={cur.average_value if cur else '?'})"
    )
    so = cast(  # custom objects come back as the JSON dict
        "dict[str, Any]",
        custom.get_namespaced_custom_object("keda.sh", "v1alpha1", NS, "scaledobjects", SO),
    )
    conds = {c["type"]: c["status"] for c in so.get("status", {}).get("conditions", [])}
    step(f"      ScaledObject conditions: {conds}")

    # 4. preemption ------------------------------------------------------------------------
    free_pods = pool_pods - 3
    job_tpl = pod_template("gps-research", "smoke-research", GPUS_PER_POD)
    job_tpl["spec"]["restartPolicy"] = "Never"
    # kwok 'general' stages: keep the research pods Running for an hour. Both annotations:
    # kwok uses the jitter (default 5 s) instead when it is not above the delay.
    job_tpl["metadata"]["annotations"] = {
        "pod-complete.stage.kwok.x-k8s.io/delay": "3600s",
        "pod-complete.stage.kwok.x-k8s.io/jitter-delay": "3601s",
    }
    batch.create_namespaced_job(
        NS,
        cluster.manifest(
            {
                "metadata": {"name": "smoke-research"},
                "spec": {
                    "parallelism": free_pods,
                    "completions": free_pods,
                    "backoffLimit": 100,
                    "template": job_tpl,
                },
            }
        ),
    )
    wait(
        f"{free_pods} research pods Running",
        lambda: len(running_pods("smoke-research")) == free_pods,
        120,
    )
    victims = {x.metadata.uid: x.metadata.name for x in running_pods("smoke-research")}
    step(
        f"      research Job fills the remaining {free_pods * GPUS_PER_POD} GPUs: "
        f"{sorted(victims.values())}"
    )
    t = time.monotonic()
    custom.patch_namespaced_custom_object(
        "keda.sh", "v1alpha1", NS, "scaledobjects", SO, cron_so(pool_pods)
    )
    wait(f"{pool_pods} inference pods Running", lambda: len(running_pods(DEPLOY)) == pool_pods, 180)
    still = {x.metadata.uid for x in running_pods("smoke-research")} & set(victims)
    if still:
        raise SystemExit(f"FAIL: research pods not preempted: {still}")

    def preemption_events() -> list[Any]:  # core/v1 view of the scheduler's events
        evs: list[Any] = core.list_namespaced_event(NS).items
        return [e for e in evs if e.reason == "Preempted" and e.involved_object.uid in victims]

    evs = wait("Preempted events for the research pods", preemption_events, 30)
    pending = [x.metadata.name for x in app_pods("smoke-research") if x.status.phase == "Pending"]
    step(
        f"PASS 4: inference scaled to {pool_pods} after {time.monotonic() - t:.1f}s; "
        f"research pods preempted by the scheduler: "
        f"{sorted(victims[e.involved_object.uid] for e in evs)} ({evs[0].message}); "
        f"replacement research pods Pending (preemptionPolicy Never): {len(pending)}"
    )

    if not args.keep:
        core.delete_namespace(NS)
        for pc in ("gps-inference", "gps-research"):
            sched.delete_priority_class(pc)
    print("smoke: 4 passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
