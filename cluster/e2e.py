"""End to end on the real control plane and real KEDA: `make e2e` (see cluster/README.md).

    cluster/e2e [--out out/e2e] [--keep] [--no-up] [--only SCENARIO ...]

Brings a cluster up (cluster/up: etcd, kube-apiserver, controller-manager, scheduler,
kwok GPU nodes, KEDA operator + adapter), installs the chart with real helm, runs the
scaler as a local process with the config the chart rendered (the Kubernetes discovery
path, node capacity and the state ConfigMap through the real API), gives every Running
inference pod a simulated vLLM engine at its pod IP (127.128.x.y, on loopback), drives
them with a load generator, and asserts each scenario through the API server:

  1 low-load   KEDA made the HPA from our ScaledObject, it holds minReplicas, the research
               ScaledJob's Jobs fill the GPU headroom and no more (GPUs of Running pods per
               PriorityClass).
  2 ramp       load up → our metric → the HPA scales the Deployment → the new inference pods
               preempt research pods (the scheduler, through the PriorityClasses); the
               preempted pods' Jobs are not failed; decision latencies measured.
  3 scaler-down the scaler is killed: KEDA's fallback keeps the inference replicas and no
               new research Jobs start; back: answers resume, research resumes.
  4 upgrade    `helm upgrade` with a new threshold: the config reaches the scaler (the
               kubelet's volume sync, done here by re-rendering), the HPA's target moves,
               running research Jobs are not restarted.
  6 hpa-fields what the API server keeps of the HPA KEDA builds: behavior and tolerance.

Writes out/e2e/report.json (per scenario: passed, figures, error) and tears everything
down, also on failure (--keep leaves the cluster up for debugging). Exit 0 only when every
scenario passed.

  7 queue      a class fed by the work queue, which the scaler reads: no Job for an empty
               queue with free GPUs, then min(queued items, slots) Jobs.
  5 tls        mTLS between KEDA and the scaler with the chart's TLS values.
  8 preemption-order  two more kwok nodes (their own label, outside the pool): research
               pods of three classes at the PriorityClass values the chart gives them,
               then one inference pod that fits nowhere; the real scheduler's victims and
               node are the ones the bench's simulated scheduler picks (scaler.sim.kube).
  9 nominated-wait  two more kwok nodes: two inference pods nominated one after the
               other to the node whose research pods they preempt; the first binds only
               when the second's victims are gone too (each counts the other's
               reservation), in kube-scheduler as in the bench's simulated scheduler.
 10 give-back  the chart's default (subtractForeignPods off): giveBack.namespaces and a
               Role on the research namespace's pods; a second scaler as the chart's
               ServiceAccount measures research pods that take up to 30 s to leave.
 11 placement  where kube-scheduler binds research pods that fit on two nodes and a
               Deployment's two replicas: the default profile spreads them, the
               bin-packing one (docs/install.md) packs them; the bench's simulated
               scheduler does the same for each placement.
 12 chart-scheduler  `binpackScheduler.enabled`: the chart's second kube-scheduler, run
               here with the ConfigMap and flags the chart rendered as its own
               ServiceAccount, takes its Lease and packs the pods that select it; the
               research ScaledJob's pods select it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))  # tests.support.pki
import cluster

REPO = cluster.REPO
CHART = REPO / "charts" / "gpu-pool-scaler"
NS = "gps-e2e"
RELEASE = "gps"
FULL = f"{RELEASE}-gpu-pool-scaler"
SCALER_IDENTITY = f"system:serviceaccount:{NS}:{FULL}"  # the chart's ServiceAccount
DEPLOY = "vllm-chat"
ENGINE_PORT = 8000
GPUS_PER_REPLICA = 4
GPUS_PER_JOB = 2
NODES, GPUS_PER_NODE = 4, 4  # 16 GPUs: 1 replica (4) + 6 research Jobs (12) at low load
MAX_REPLICAS = 3
LOW_RPS, HIGH_RPS = 1.5, 14.0  # one simulated replica serves ~4-5 requests/s
MID_RPS = 5.5  # two replicas' worth, with room (at 7 the HPA went back to 3 at times)


def say(msg: str) -> None:
    print(f"[e2e {time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Failed(AssertionError):
    pass


def wait(what: str, check: Callable[[], Any], timeout: float, every: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            r = check()
            if r:
                return r
        except Exception as e:  # the API can blip while components restart
            last = e
        time.sleep(every)
    raise Failed(
        f"timed out after {timeout:.0f} s: {what}" + (f" (last error: {last})" if last else "")
    )


def wait_steady(what: str, check: Callable[[], Any], steady: float, timeout: float) -> None:
    """`wait` until `check()` has been true for `steady` seconds in a row (polled each
    second; a failed check, like a false one, starts the count again)."""
    since: list[float] = []  # when the current run of true checks began

    def held() -> bool:
        now = time.monotonic()
        try:
            ok = bool(check())
        except Exception:  # `wait` records it and tries again
            since.clear()
            raise
        if not ok:
            since.clear()
            return False
        if not since:
            since.append(now)
        return now - since[0] >= steady

    wait(f"{what} for {steady:.0f} s in a row", held, timeout, every=1)


# --- simulated engines at the pod IPs -----------------------------------------------------


class EngineFarm:
    """One simulated vLLM replica per Running inference pod, serving /metrics at
    podIP:8000, fed by a Poisson load generator (least-outstanding routing)."""

    def __init__(self, core: Any, rps: float) -> None:
        from scaler.sim.profile import ReplicaSpec

        self.core = core
        self.rps = rps
        self.spec = ReplicaSpec()
        self.engines: dict[str, tuple[Any, Any, str]] = {}  # pod uid -> (replica, server, ip)
        self.rng = np.random.default_rng(7)
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def waiting(self) -> float:
        return sum(r.sample().waiting for r, _, _ in list(self.engines.values()))

    def answer_late(self, seconds: float, ip: str | None = None) -> str:
        """Make one engine (the one at `ip`, else any) answer /metrics `seconds` late; its
        replica keeps serving requests. Returns the engine's IP."""
        for _, server, at in list(self.engines.values()):
            if ip is None or at == ip:
                server.answer_after_s = seconds
                return str(at)
        raise Failed(f"no engine at {ip or 'any address'}")

    async def _main(self) -> None:
        dt, next_list = 0.5, 0.0
        while not self._stop.is_set():
            now = time.monotonic()
            if now >= next_list:
                next_list = now + 1.0
                try:
                    await self._sync()
                except Exception as e:  # keep serving what we have
                    self.errors.append(repr(e))
            reps = [r for r, _, _ in self.engines.values()]
            if reps:
                for _ in range(self.rng.poisson(self.rps * dt)):
                    r = min(reps, key=lambda x: x.sample().waiting + x.sample().running)
                    r.submit(
                        prompt=int(self.rng.integers(200, 1500)),
                        output=int(self.rng.integers(50, 400)),
                    )
                for r in reps:
                    r.step(dt)
            await asyncio.sleep(max(0.0, now + dt - time.monotonic()))
        for _, server, _ in self.engines.values():
            await server.stop()

    async def _sync(self) -> None:
        from scaler.demo.engine_http import EngineServer
        from scaler.sim.replica import Replica

        pods = await asyncio.to_thread(
            self.core.list_namespaced_pod, NS, label_selector=f"app={DEPLOY}"
        )
        live = {
            p.metadata.uid: p.status.pod_ip
            for p in pods.items
            if p.status.phase == "Running"
            and p.status.pod_ip
            and p.metadata.deletion_timestamp is None
        }
        for uid in set(self.engines) - set(live):
            _, server, ip = self.engines.pop(uid)
            await server.stop()
            say(f"engine at {ip}:{ENGINE_PORT} stopped (pod gone)")
        for uid, ip in live.items():
            if uid in self.engines:
                continue
            rep = Replica(self.spec, now=0.0)
            server = EngineServer.for_engine(
                rep.sample, "llama3-70b", time.time(), host=ip, port=ENGINE_PORT
            )
            await server.start()
            self.engines[uid] = (rep, server, ip)
            say(f"engine serving at {ip}:{ENGINE_PORT}")


# --- the cluster's view -----------------------------------------------------------------


@dataclass
class Api:
    kubeconfig: Path
    core: Any = field(init=False)
    apps: Any = field(init=False)
    batch: Any = field(init=False)
    hpa: Any = field(init=False)
    custom: Any = field(init=False)

    def __post_init__(self) -> None:
        from kubernetes import client

        c = cluster.api_client(self.kubeconfig)
        self.core, self.apps = client.CoreV1Api(c), client.AppsV1Api(c)
        self.batch, self.hpa = client.BatchV1Api(c), client.AutoscalingV2Api(c)
        self.custom = client.CustomObjectsApi(c)

    def running_gpus(self) -> dict[str, int]:
        """GPUs requested by Running, not terminating pods, per PriorityClass (the research
        classes' own PriorityClasses summed as `<fullname>-research`)."""
        out: dict[str, int] = {}
        for p in self.core.list_namespaced_pod(NS).items:
            if p.status.phase != "Running" or p.metadata.deletion_timestamp is not None:
                continue
            gpus = sum(
                int((c.resources.limits or {}).get("nvidia.com/gpu", 0)) for c in p.spec.containers
            )
            if gpus:
                pc = p.spec.priority_class_name or ""
                if pc.startswith(f"{FULL}-research-"):  # one class per research class
                    pc = f"{FULL}-research"
                out[pc] = out.get(pc, 0) + gpus
        return out

    def scaled_object(self) -> dict[str, Any]:
        (so,) = self.custom.list_namespaced_custom_object(
            "keda.sh", "v1alpha1", NS, "scaledobjects"
        )["items"]
        return dict(so)

    def hpa_name(self) -> str:
        """KEDA's name for the HPA of our ScaledObject: `keda-hpa-<ScaledObject name>`."""
        return f"keda-hpa-{self.scaled_object()['metadata']['name']}"

    def hpa_obj(self) -> Any:
        """The HPA KEDA made for our ScaledObject."""
        return self.hpa.read_namespaced_horizontal_pod_autoscaler(self.hpa_name(), NS)

    def hpa_behavior(self) -> dict[str, Any]:
        """The HPA's `spec.behavior` as the API server stored it, read as raw JSON: a client
        model may not know a newer field (the tolerance)."""
        resp = self.hpa.read_namespaced_horizontal_pod_autoscaler(
            self.hpa_name(), NS, _preload_content=False
        )
        return dict(json.loads(resp.data)["spec"]["behavior"])

    def desired(self) -> int | None:
        h = self.hpa_obj()
        return h.status.desired_replicas if h.status else None

    def deploy_replicas(self) -> int:
        return int(self.apps.read_namespaced_deployment(DEPLOY, NS).spec.replicas)

    def jobs(self) -> list[Any]:
        return self.batch.list_namespaced_job(NS).items

    def research_pods(self, phase: str | None = None) -> list[Any]:
        pods = self.core.list_namespaced_pod(NS, label_selector="gps-e2e=research").items
        return [p for p in pods if phase is None or p.status.phase == phase]


# --- chart values, helm, the local scaler ----------------------------------------------


def values(
    grpc_port: int,
    metrics_port: int,
    waiting_per_replica: float,
    redis_port: int | None = None,
    tls: bool = False,
) -> dict[str, Any]:
    """The chart values of the run; with `redis_port` the research class is `train`, fed by
    the work queue on that Redis (scenario 7) instead of `eval`; `tls`: mTLS between KEDA
    and the scaler (scenario 5)."""
    kwok = {
        "nodeSelector": {"gpu-pool": "shared"},
        "tolerations": [
            {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}
        ],
    }
    research: dict[str, Any] = {
        "name": "eval",
        "gpusPerJob": GPUS_PER_JOB,
        "maxJobs": 8,
        "scaledJob": {
            "pollingInterval": 5,
            "job": {"terminationGracePeriodSeconds": 5, "backoffLimit": 6},
            "jobTemplate": {
                "metadata": {
                    "labels": {"gps-e2e": "research"},
                    # kwok: Running for an hour unless preempted
                    "annotations": {
                        "pod-complete.stage.kwok.x-k8s.io/delay": "3600s",
                        "pod-complete.stage.kwok.x-k8s.io/jitter-delay": "3601s",
                    },
                },
                "spec": {
                    **kwok,
                    "containers": [
                        {
                            "name": "eval",
                            "image": "fake.invalid/eval:kwok",
                            "command": ["python", "eval.py"],
                            "resources": {"limits": {"nvidia.com/gpu": str(GPUS_PER_JOB)}},
                        }
                    ],
                },
            },
        },
    }
    queue: dict[str, Any] = {}
    if redis_port is not None:
        # The worker needs time to hand the item back after SIGTERM (the chart refuses a
        # grace period not above queue.worker.reportSeconds, 20 s by default).
        sj = {**research["scaledJob"], "job": {"terminationGracePeriodSeconds": 30}}
        research = {**research, "name": "train", "queue": {"enabled": True}, "scaledJob": sj}
        # The chart's default: the scaler counts the queue's items (its trigger alone),
        # reading the workers' Secret through the API (researchQueue.scaler.readWorkerSecret).
        queue = {
            "researchQueue": {
                "redis": {"address": f"127.0.0.1:{redis_port}", "secretName": "research-redis"},
            }
        }
    out: dict[str, Any] = {
        **queue,
        "replicaCount": 1,
        "image": {"repository": "fake.invalid/gpu-pool-scaler"},  # kwok never runs it
        "pool": {
            "name": "e2e",
            "capacity": {"nodes": {"labelSelector": "gpu-pool=shared"}},
            "reserveGPUs": 0,
        },
        "scrape": {"intervalSeconds": 1, "timeoutSeconds": 1, "staleAfterSeconds": 10},
        "server": {
            "listenAddress": "127.0.0.1",
            "grpcPort": grpc_port,
            "metricsPort": metrics_port,
            "state": {"writeSeconds": 5},
        },
        "inference": [
            {
                "name": "chat",
                "gpusPerReplica": GPUS_PER_REPLICA,
                "minReplicas": 1,
                "maxReplicas": MAX_REPLICAS,
                "targets": {"kubernetes": {"labelSelector": f"app={DEPLOY}", "port": ENGINE_PORT}},
                "thresholds": {"waitingPerReplica": waiting_per_replica},
                "scaleDown": {"stabilizationSeconds": 30},
                "coldStartSeconds": 5,
                "scaledObject": {"scaleTargetRef": {"name": DEPLOY}},
            }
        ],
        "research": [research],
        "keda": {
            # No cluster DNS here: KEDA dials the local scaler process directly.
            "scalerAddress": f"127.0.0.1:{grpc_port}",
            "scaledObject": {
                "pollingInterval": 5,
                "cooldownPeriod": 30,
                # scenario 6: does the API server keep the field? (gate HPAConfigurableTolerance)
                "tolerance": "0.05",
                "toleranceMode": "always",
            },
        },
        "nodeSelector": kwok["nodeSelector"],
        "tolerations": kwok["tolerations"],
    }
    if tls:
        out["server"]["tls"] = {"enabled": True, "secretName": "scaler-tls", "clientAuth": True}
        out["keda"]["auth"] = {"enabled": True, "secretName": "keda-client"}
    return out


class Helm:
    def __init__(self, kubeconfig: Path, home: Path) -> None:
        proc = subprocess.run(
            ["bash", str(REPO / "tools" / "install-helm.sh")],
            capture_output=True,
            text=True,
            check=True,
        )
        self.binary = proc.stdout.strip().splitlines()[-1]
        self.env = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_DATA_HOME": str(home / "data"),
        }

    def run(self, *args: str) -> str:
        proc = subprocess.run(
            [self.binary, *args], capture_output=True, text=True, env=self.env, timeout=300
        )
        if proc.returncode != 0:
            raise Failed(f"helm {' '.join(args[:2])} failed: {proc.stderr.strip()}")
        return proc.stdout

    def install(self, vfile: Path, upgrade: bool = False) -> None:
        verb = ["upgrade"] if upgrade else ["install", "--create-namespace"]
        self.run(*verb, RELEASE, str(CHART), "-n", NS, "-f", str(vfile))

    def uninstall_quietly(self, release: str, namespace: str) -> None:
        """Uninstall, and never fail for a release already gone."""
        subprocess.run(
            [self.binary, "uninstall", release, "-n", namespace, "--wait", "--ignore-not-found"],
            capture_output=True,
            env=self.env,
            timeout=300,
            check=False,
        )

    def config(self) -> str:
        """config.yaml of the ConfigMap helm put into the cluster."""
        for d in yaml.safe_load_all(self.run("get", "manifest", RELEASE, "-n", NS)):
            if d and d["kind"] == "ConfigMap" and d["metadata"]["name"] == FULL:
                return str(d["data"]["config.yaml"])
        raise Failed("the release has no scaler ConfigMap")


class LocalScaler:
    """`gpu-pool-scaler serve` with the chart's config, talking to the real API server."""

    def __init__(self, config: Path, kubeconfig: Path, log: Path) -> None:
        self.config, self.kubeconfig, self.log = config, kubeconfig, log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, metrics_port: int) -> None:
        out = self.log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "scaler", "serve", "--config", str(self.config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "KUBECONFIG": str(self.kubeconfig)},
        )
        import urllib.request

        def ready() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise Failed(f"scaler exited {self.proc.returncode}: see {self.log}")
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{metrics_port}/readyz", timeout=2
                ) as r:
                    return bool(r.status == 200)
            except OSError:
                return False

        wait("scaler /readyz", ready, 60)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def scaler_metrics(port: int, prefix: str, contains: str = "") -> list[float]:
    """The values of the sample lines of the scaler's /metrics starting with `prefix` (and
    containing `contains`), in order."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
        return [
            float(line.rsplit(" ", 1)[1])
            for line in r.read().decode().splitlines()
            if line.startswith(prefix) and contains in line
        ]


def scaler_metric(port: int, prefix: str, contains: str = "") -> float | None:
    """The first of `scaler_metrics`, None when absent."""
    values = scaler_metrics(port, prefix, contains)
    return values[0] if values else None


def config_generation(port: int) -> float:
    return scaler_metric(port, "gpu_pool_scaler_config_generation ") or 0.0


# --- scenarios -----------------------------------------------------------------------------


@dataclass
class Ctx:
    api: Api
    farm: EngineFarm
    helm: Helm
    scaler: LocalScaler
    vfile: Path
    config_file: Path
    grpc_port: int
    metrics_port: int
    pool_gpus: int
    cleanup: list[Callable[[], object]] = field(default_factory=list)
    redis_port: int | None = None  # set by scenario 7


def create_inference_deployment(api: Api) -> None:
    api.apps.create_namespaced_deployment(
        NS,
        {
            "metadata": {"name": DEPLOY},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": DEPLOY}},
                "template": {
                    "metadata": {"labels": {"app": DEPLOY}},
                    "spec": {
                        "priorityClassName": f"{FULL}-inference",
                        "nodeSelector": {"gpu-pool": "shared"},
                        "tolerations": [
                            {
                                "key": "kwok.x-k8s.io/node",
                                "operator": "Exists",
                                "effect": "NoSchedule",
                            }
                        ],
                        "containers": [
                            {
                                "name": "vllm",
                                "image": "fake.invalid/vllm:kwok",
                                "ports": [{"containerPort": ENGINE_PORT}],
                                "resources": {"limits": {"nvidia.com/gpu": str(GPUS_PER_REPLICA)}},
                            }
                        ],
                    },
                },
            },
        },
    )


def hpa_created(api: Api, timeout: float = 120) -> Any:
    """Wait until KEDA has made the HPA from our ScaledObject; the HPA. Scenarios that read
    it wait, not assume it from scenario 1, so that each also runs alone."""
    return wait("KEDA creates the HPA from our ScaledObject", api.hpa_obj, timeout)


def research_filled(
    c: Ctx, what: str = "research Jobs fill the {} free GPUs", timeout: float = 180
) -> int:
    """Wait until research Jobs fill what one inference replica leaves free (whole Jobs);
    their GPUs. Scenarios that start from that state call it, so each also runs alone."""
    headroom = c.pool_gpus - GPUS_PER_REPLICA
    want = headroom // GPUS_PER_JOB * GPUS_PER_JOB
    wait(
        what.format(headroom),
        lambda: c.api.running_gpus().get(f"{FULL}-research", 0) == want,
        timeout,
    )
    return want


def s1_low_load(c: Ctx) -> dict[str, Any]:
    c.farm.rps = LOW_RPS
    api = c.api
    t0 = time.monotonic()
    h = hpa_created(api)
    t_hpa = time.monotonic() - t0
    metric = h.spec.metrics[0].external.metric.name
    research_pc = f"{FULL}-research"
    want = research_filled(c)
    t_fill = time.monotonic() - t0
    wait("the HPA computed its first answer", lambda: api.desired() == 1, 60)
    # Hold for a while: the HPA stays at minReplicas and research never over-fills.
    seen_research, seen_desired = set(), set()
    for _ in range(20):
        g = api.running_gpus()
        seen_research.add(g.get(research_pc, 0))
        seen_desired.add(api.desired())
        time.sleep(1)
    if max(seen_research) > want:
        raise Failed(f"research over-filled the pool: {sorted(seen_research)} GPUs > {want}")
    if seen_desired != {1} or api.deploy_replicas() != 1:
        raise Failed(f"HPA left minReplicas at low load: desired {sorted(seen_desired, key=str)}")
    return {
        "hpa_created_s": round(t_hpa, 1),
        "external_metric": metric,
        "research_filled_s": round(t_fill, 1),
        "research_gpus": want,
        "inference_gpus": api.running_gpus().get(f"{FULL}-inference", 0),
        "pool_gpus": c.pool_gpus,
        "research_jobs": len(api.jobs()),
    }


def s2_ramp(c: Ctx) -> dict[str, Any]:
    api = c.api
    research_pc, inference_pc = f"{FULL}-research", f"{FULL}-inference"
    research_filled(c)
    before = {p.metadata.uid: p.metadata.name for p in api.research_pods("Running")}
    t0 = time.monotonic()
    c.farm.rps = HIGH_RPS
    wait("the HPA wants more replicas", lambda: (api.desired() or 0) > 1, 120)
    t_hpa = time.monotonic() - t0
    wait(
        "a second inference pod Running",
        lambda: api.running_gpus().get(inference_pc, 0) >= 2 * GPUS_PER_REPLICA,
        120,
    )
    t_pod = time.monotonic() - t0
    wait(
        f"inference at {MAX_REPLICAS} replicas Running",
        lambda: api.running_gpus().get(inference_pc, 0) == MAX_REPLICAS * GPUS_PER_REPLICA,
        180,
    )
    t_all = time.monotonic() - t0

    def preempted() -> list[Any]:
        evs = api.core.list_namespaced_event(NS).items
        return [e for e in evs if e.reason == "Preempted" and e.involved_object.uid in before]

    evs = wait("Preempted events on research pods", preempted, 60)
    time.sleep(5)
    failed = [j.metadata.name for j in api.jobs() if (j.status.failed or 0) > 0]
    failed_cond = [
        j.metadata.name
        for j in api.jobs()
        if any(cd.type == "Failed" and cd.status == "True" for cd in (j.status.conditions or []))
    ]
    if failed_cond:
        raise Failed(f"preempted Jobs were failed: {failed_cond}")
    g = api.running_gpus()
    if g.get(research_pc, 0) + g.get(inference_pc, 0) > c.pool_gpus:
        raise Failed(f"more GPUs Running than the pool has: {g}")
    pending = [p.metadata.name for p in api.research_pods("Pending")]
    return {
        "load_rps": [LOW_RPS, HIGH_RPS],
        "to_hpa_desired_s": round(t_hpa, 1),
        "to_second_pod_running_s": round(t_pod, 1),
        "to_all_replicas_running_s": round(t_all, 1),
        "preempted_research_pods": sorted({before[e.involved_object.uid] for e in evs}),
        "jobs_with_a_failed_pod_count": len(failed),  # DisruptionTarget pods: not counted
        "jobs_failed": len(failed_cond),
        "research_pods_pending": len(pending),
        "gpus_running": g,
    }


def s3_scaler_down(c: Ctx) -> dict[str, Any]:
    """The scaler process is killed. What KEDA 2.20 and 2.21.0 do (kedacore/keda#8056):
    GetMetricSpec fails before its fallback path, so `Fallback` never turns True; the HPA
    gets an error for the metric and does not scale. Asserted: inference never shrinks, no
    research Job starts; then the scaler comes back and both resume."""
    api = c.api

    def conditions() -> dict[str, tuple[str, str]]:
        so = api.scaled_object()
        return {
            x["type"]: (x["status"], x.get("reason", ""))
            for x in so.get("status", {}).get("conditions", [])
        }

    def reads_metric() -> bool:
        return conditions().get("HPAActive", ("", ""))[1] not in ("", "FailedGetExternalMetric")

    # The HPA must be reading our metric before the scaler goes (when run alone, it may
    # still report the error it had before the scaler started).
    wait("the HPA reads our metric", lambda: api.desired() and reads_metric(), 120, every=1)
    replicas = api.deploy_replicas()
    jobs_before = {j.metadata.name for j in api.jobs()}
    c.scaler.kill()
    t0 = time.monotonic()
    c.farm.rps = LOW_RPS  # load falls while the scaler is away: nothing may shrink anyway

    wait(
        "the HPA reports it cannot get our metric",
        lambda: conditions().get("HPAActive", ("", ""))[1] == "FailedGetExternalMetric",
        120,
        every=1,
    )
    t_seen = time.monotonic() - t0
    mins: list[int] = []
    fallback_seen = set()
    for _ in range(40):
        mins.append(api.deploy_replicas())
        fallback_seen.add(conditions().get("Fallback", ("?", ""))[0])
        time.sleep(1)
    new_jobs = {j.metadata.name for j in api.jobs()} - jobs_before
    if min(mins) < replicas:
        raise Failed(f"inference shrank while the scaler was down: {replicas} → {min(mins)}")
    if new_jobs:
        raise Failed(f"research Jobs created while the scaler was down: {sorted(new_jobs)}")
    down_s = time.monotonic() - t0
    c.scaler.start(c.metrics_port)
    t1 = time.monotonic()
    wait(
        "the HPA reads our metric again",
        reads_metric,
        120,
        every=1,
    )
    t_back = time.monotonic() - t1
    # Load fell to LOW_RPS meanwhile: the scaler gives GPUs back (after its scale-down
    # stabilization) and research takes them again: the preempted Jobs' Pending pods
    # schedule, and new Jobs start if slots exceed them.
    research_down = api.running_gpus().get(f"{FULL}-research", 0)
    research_filled(c, "research refills the {} GPUs inference gave back", 300)
    return {
        "replicas_held": replicas,
        "min_replicas_while_down": min(mins),
        "hpa_error_after_s": round(t_seen, 1),
        "keda_fallback_condition_while_down": sorted(fallback_seen),
        "down_for_s": round(down_s, 1),
        "metric_back_after_s": round(t_back, 1),
        "research_gpus_while_down": research_down,
        "research_refilled_after_s": round(time.monotonic() - t1, 1),
    }


def upgrade_and_reload(c: Ctx, values_yaml: str) -> None:
    """`helm upgrade` with these values; returns once the scaler runs the new config."""
    generation = config_generation(c.metrics_port)
    c.vfile.write_text(values_yaml)
    c.helm.install(c.vfile, upgrade=True)
    c.config_file.write_text(c.helm.config())  # the kubelet's ConfigMap volume sync
    wait(
        "the scaler reloads the new config",
        lambda: config_generation(c.metrics_port) > generation,
        60,
    )


def s4_upgrade(c: Ctx) -> dict[str, Any]:
    api = c.api
    hpa = hpa_created(api)
    # Some research running, which the upgrade must keep (not `research_filled`: in the
    # full run scenario 2 left inference at maxReplicas, so research holds less).
    running = wait(
        "research Jobs run (the upgrade must keep them)",
        lambda: {j.metadata.uid for j in api.jobs() if (j.status.active or 0) > 0},
        180,
    )
    target_before = hpa.spec.metrics[0].external.target.average_value
    t0 = time.monotonic()
    upgrade_and_reload(c, yaml.safe_dump(values(c.grpc_port, c.metrics_port, 2.0)))
    t_reload = time.monotonic() - t0
    time.sleep(10)
    gone = running - {j.metadata.uid for j in api.jobs()}
    if gone:
        raise Failed(f"helm upgrade deleted {len(gone)} running research Jobs")
    return {
        "reload_s": round(t_reload, 1),
        "hpa_target_before": str(target_before),
        "research_jobs_kept": len(running),
    }


def s6_hpa_fields(c: Ctx) -> dict[str, Any]:
    """What the API server kept of the HPA KEDA built from our ScaledObject: the chart's
    behavior, and the tolerance (kept only with the HPAConfigurableTolerance gate, beta
    and on by default in 1.35)."""
    hpa_created(c.api)
    b = c.api.hpa_behavior()
    up, down = b["scaleUp"], b["scaleDown"]
    want_up = {("Percent", 100, 15), ("Pods", 4, 15)}
    got_up = {(p["type"], p["value"], p["periodSeconds"]) for p in up["policies"]}
    if got_up != want_up or up.get("stabilizationWindowSeconds") != 0:
        raise Failed(f"scaleUp behavior not as the chart asked: {up}")
    if down.get("stabilizationWindowSeconds") != 0:
        raise Failed(f"scaleDown behavior not as the chart asked: {down}")
    tol = (up.get("tolerance"), down.get("tolerance"))
    if tol != ("50m", "50m"):
        raise Failed(f"tolerance 0.05 asked, the HPA has {tol} (gate on by default from 1.35)")
    seen = wait(
        "the scaler reads the HPA's tolerance back (server.hpaCheck)",
        lambda: scaler_metric(c.metrics_port, "gpu_pool_scaler_hpa_tolerance{", '"up"'),
        90,
        every=2,
    )
    if seen != 0.05:
        raise Failed(f"the scaler reports tolerance {seen}, the HPA has 0.05")
    return {
        "scale_up_policies": sorted(got_up),
        "scale_down_stabilization_s": down.get("stabilizationWindowSeconds"),
        "tolerance_asked": "0.05",
        "tolerance_kept": {"up": tol[0], "down": tol[1]},
        "scaler_hpa_tolerance_metric": seen,
        "feature_gate": "HPAConfigurableTolerance default (beta, on from 1.35); off: 6b",
    }


def s7_queue(c: Ctx) -> dict[str, Any]:
    """A queued class on the real KEDA: `helm upgrade` swaps class eval for class train fed
    by the work queue, which the scaler reads itself (the chart's default: its trigger
    alone; the workers' Secret read through the API, which the chart's Role allows for that
    Secret only, checked with the ServiceAccount's token). With the queue EMPTY and free
    GPUs, KEDA must start no Job; items submitted with the real WorkQueue then get
    min(queued items, the free slots) Jobs. (kwok runs no container, so gpu-pool-worker
    itself does not run here: tests/test_research_* and tests/test_chart.py run it against
    the real scaler and Redis.)"""
    from scaler.research.queue import WorkQueue
    from scaler.research.redisconn import connect

    api = c.api
    password = "e2e-Redis-pw1"
    port = cluster.free_port()
    redis_dir = c.vfile.parent / "redis"
    redis_dir.mkdir(exist_ok=True)
    proc = subprocess.Popen(
        [
            "redis-server",
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--requirepass",
            password,
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(redis_dir),
        ],
        stdout=subprocess.DEVNULL,
    )
    c.cleanup.append(proc.terminate)
    client = connect(f"redis://:{password}@127.0.0.1:{port}/0")
    wait("redis-server answers", client.ping, 20)
    q = WorkQueue(client)
    q.update_classes(add=["train"])
    # The workers' Secret, which the scaler reads too; and one it must not read.
    for name, data in (("research-redis", {"password": password}), ("decoy", {"x": "y"})):
        api.core.create_namespaced_secret(NS, {"metadata": {"name": name}, "stringData": data})
    c.farm.rps = LOW_RPS
    wait("inference back at 1 replica", lambda: api.deploy_replicas() == 1, 240)
    c.redis_port = port
    c.vfile.write_text(yaml.safe_dump(values(c.grpc_port, c.metrics_port, 2.0, port)))
    # The scaler learns class train BEFORE KEDA sees its ScaledJob. The other order is a
    # known gap (closing note, docs/keda-contract.md): until the kubelet syncs the config,
    # the scaler answers INVALID_ARGUMENT for the new class, KEDA skips its trigger and the
    # queue alone starts Jobs; on KEDA 2.20.2 a reconcile race then started 5 Jobs for 3 items.
    rendered = c.helm.run("template", RELEASE, str(CHART), "-n", NS, "-f", str(c.vfile))
    (cm,) = [
        d
        for d in yaml.safe_load_all(rendered)
        if d and d["kind"] == "ConfigMap" and d["metadata"]["name"] == FULL
    ]
    gen = config_generation(c.metrics_port)
    c.config_file.write_text(cm["data"]["config.yaml"])
    wait(
        "the scaler reloads the config with class train",
        lambda: config_generation(c.metrics_port) > gen,
        60,
    )
    c.helm.install(c.vfile, upgrade=True)
    c.config_file.write_text(c.helm.config())
    secret_rbac = queue_secret_rbac(c)
    # Class eval is gone: its Jobs go with its ScaledJob (owner references), or by hand.
    from kubernetes.client.exceptions import ApiException

    for j in api.jobs():
        if j.metadata.name.startswith(f"{FULL}-eval-"):
            try:
                api.batch.delete_namespaced_job(
                    j.metadata.name, NS, propagation_policy="Background"
                )
            except ApiException as e:
                if e.status != 404:  # already collected with its ScaledJob
                    raise
    slots = (c.pool_gpus - GPUS_PER_REPLICA) // GPUS_PER_JOB

    def train_jobs() -> list[Any]:
        return [j for j in api.jobs() if j.metadata.name.startswith(f"{FULL}-train-")]

    (sj,) = [
        o
        for o in api.custom.list_namespaced_custom_object("keda.sh", "v1alpha1", NS, "scaledjobs")[
            "items"
        ]
        if o["metadata"]["name"] == f"{FULL}-train"
    ]
    if [t["type"] for t in sj["spec"]["triggers"]] != ["external"]:
        raise Failed(f"ScaledJob train triggers {sj['spec']['triggers']}: want the scaler's alone")

    def train_metric(name: str) -> float | None:
        return scaler_metric(c.metrics_port, f"gpu_pool_scaler_{name}{{", 'research_class="train"')

    # The empty queue: free GPUs, 0 items, so 0 slots, and KEDA starts nothing over
    # several polls (pollingInterval 5 s). Before the scaler read the queue, KEDA 2.20
    # started the slots' worth of Jobs here (its `min` skips the inactive redis trigger).
    wait(
        "the scaler reads train's empty queue",
        lambda: train_metric("research_queue_items") == 0,
        60,
    )
    headroom = scaler_metric(c.metrics_port, "gpu_pool_scaler_pool_gpus{", 'part="headroom"')
    if not headroom or headroom < GPUS_PER_JOB:
        raise Failed(f"headroom {headroom} GPUs: the empty-queue check needs free GPUs")
    if train_metric("research_slots") != 0:
        raise Failed(f"{train_metric('research_slots')} slots for an empty queue")
    wait("KEDA has polled ScaledJob train", lambda: keda_polled(api, f"{FULL}-train"), 60)
    time.sleep(20)
    if train_jobs():
        raise Failed(f"{len(train_jobs())} Jobs for an empty queue ({headroom:g} GPUs free)")
    for n in range(3):
        q.submit("train", {"SHARD": str(n)}, submitter="e2e")
    t0 = time.monotonic()
    wait("3 Jobs for 3 queued items", lambda: len(train_jobs()) >= 3, 120)
    t_first = time.monotonic() - t0
    time.sleep(15)  # and not more while 3 wait
    # KEDA 2.20.2 races itself when a ScaledJob is new: the first scale loop is cancelled
    # mid-creation by the next reconcile and a "failed" create goes through, so 4 or 5 Jobs
    # were seen for 3 items (operator log: "Failed to create a new Job ... context
    # canceled", then "Effective number of max jobs: 2"). What this project owns is the
    # bound: never more Jobs than the scaler's slots.
    first = len(train_jobs())
    if not 3 <= first <= slots:
        raise Failed(f"{first} Jobs for 3 queued items ({slots} slots)")
    for n in range(3, 3 + 2 * slots):
        q.submit("train", {"SHARD": str(n)}, submitter="e2e")
    wait(
        f"{slots} Jobs (the slots) for {3 + 2 * slots} items",
        lambda: len(train_jobs()) == slots,
        120,
    )
    time.sleep(20)  # and no more
    n_jobs = len(train_jobs())
    if n_jobs != slots:
        raise Failed(f"{n_jobs} train Jobs for {slots} slots")
    g = api.running_gpus().get(f"{FULL}-research", 0)
    return {
        "jobs_for_empty_queue": 0,
        "headroom_gpus_while_empty": headroom,
        "queued_items": 3 + 2 * slots,
        "slots": slots,
        "jobs": n_jobs,
        "jobs_for_3_items": first,
        "keda_overshoot_at_creation": first - 3,
        "first_jobs_after_s": round(t_first, 1),
        "research_gpus_running": g,
        "keda_list": client.llen("gps:q:train"),
        **secret_rbac,
    }


def queue_secret_rbac(c: Ctx) -> dict[str, Any]:
    """The chart's Role lets the scaler's ServiceAccount get the workers' Redis Secret and
    no other: read with the product's own reader and the ServiceAccount's token."""
    from kubernetes import client

    from scaler.ingest.kube_secret import SecretUnreadable, read_secret

    core = c.api.core
    role = client.RbacAuthorizationV1Api(core.api_client).read_namespaced_role(
        f"{FULL}-queue-secret", NS
    )
    rules = [(r.resources, r.resource_names, r.verbs) for r in role.rules or []]
    if rules != [(["secrets"], ["research-redis"], ["get"])]:
        raise Failed(f"queue-secret Role rules: {rules}")
    kc = service_account_kubeconfig(c.api, FULL, c.config_file.parent / "kubeconfig-queue-sa")
    sa = cluster.api_client(kc)
    data = read_secret(sa, NS, "research-redis", 10)
    if "password" not in data:
        raise Failed(f"the ServiceAccount read Secret research-redis without its password: {data}")
    try:
        read_secret(sa, NS, "decoy", 10)
        raise Failed("the scaler's ServiceAccount can read Secret decoy")
    except SecretUnreadable as e:
        if "forbidden" not in str(e):
            raise
        refused = str(e)
    return {"sa_reads": "research-redis", "sa_refused": refused}


def keda_polled(api: Api, name: str) -> bool:
    """KEDA's operator reconciled the ScaledJob and runs its scale loop (Ready True)."""
    o = api.custom.get_namespaced_custom_object("keda.sh", "v1alpha1", NS, "scaledjobs", name)
    conds = {x["type"]: x.get("status") for x in (o.get("status") or {}).get("conditions", [])}
    return conds.get("Ready") == "True"


def s5_tls(c: Ctx) -> dict[str, Any]:
    """mTLS between KEDA and the scaler, with the chart's TLS values: `helm upgrade` to
    server.tls (clientAuth) + keda.auth (TriggerAuthentication from a Secret), the scaler
    restarted with the certificate files where the chart mounts them (TLS on/off is a
    restart), then the HPA reads our metric again: KEDA connects over mTLS. A plaintext
    client and a TLS client without a certificate are refused."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from tests.support.pki import make_pki

    api = c.api
    pki = make_pki("127.0.0.1")  # KEDA dials 127.0.0.1: the certificate's IP SAN
    for name, data in (("scaler-tls", pki["scaler"]), ("keda-client", pki["keda"])):
        api.core.create_namespaced_secret(
            NS,
            {
                "metadata": {"name": name},
                "type": "kubernetes.io/tls" if name == "scaler-tls" else "Opaque",
                "stringData": {k: v.decode() for k, v in data.items()},
            },
        )
    tls_dir = c.vfile.parent / "tls"
    tls_dir.mkdir(exist_ok=True)
    for k, v in pki["scaler"].items():  # what kubelet would mount from Secret scaler-tls
        (tls_dir / k).write_bytes(v)
    c.vfile.write_text(
        yaml.safe_dump(values(c.grpc_port, c.metrics_port, 2.0, c.redis_port, tls=True))
    )
    c.helm.install(c.vfile, upgrade=True)
    config = c.helm.config()
    if "/var/run/gpu-pool-scaler/tls/" not in config:
        raise Failed("the chart's config has no TLS file paths")
    c.config_file.write_text(config.replace("/var/run/gpu-pool-scaler/tls/", f"{tls_dir}/"))
    c.scaler.stop()
    t0 = time.monotonic()
    c.scaler.start(c.metrics_port)

    def hpa_reads_metric() -> bool:
        h = api.hpa_obj()
        conds = {x.type: (x.status, x.reason) for x in (h.status.conditions or [])}
        return conds.get("ScalingActive", ("", ""))[0] == "True" and bool(h.status.current_metrics)

    # The ScaledObject changed (TriggerAuthentication): wait for KEDA to rebuild the scaler.
    time.sleep(10)
    wait("the HPA reads our metric over mTLS", hpa_reads_metric, 120, every=1)
    t_ok = time.monotonic() - t0
    ta = api.custom.list_namespaced_custom_object(
        "keda.sh", "v1alpha1", NS, "triggerauthentications"
    )["items"]
    address = f"127.0.0.1:{c.grpc_port}"
    refused: dict[str, bool | str] = {}  # False: it answered; else the gRPC status code
    for label, channel in (
        ("plaintext", grpc.insecure_channel(address)),
        (
            "tls-no-client-cert",
            grpc.secure_channel(
                address, grpc.ssl_channel_credentials(root_certificates=pki["keda"]["ca.crt"])
            ),
        ),
    ):
        try:
            health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
            refused[label] = False
        except grpc.RpcError as e:
            refused[label] = e.code().name
        finally:
            channel.close()
    if not all(refused.values()):
        raise Failed(f"the scaler answered a client without mTLS: {refused}")
    return {
        "trigger_authentications": [t["metadata"]["name"] for t in ta],
        "metric_over_mtls_after_s": round(t_ok, 1),
        "refused": refused,
    }


_SVC_ADDRESS = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?\.svc(\.[a-z0-9.-]+)?:(\d+)$")


def loopback_only(values: Any, closed_port: int) -> Any:
    """The ci/ values with every address a component would dial moved to loopback (network
    hygiene: no cluster DNS here, and a lookup would go to the machine's resolver): each
    `<name>.svc[...]:<port>` string → 127.0.0.1:<port>, and KEDA's scalerAddress (by default
    a *.svc.cluster.local name) → 127.0.0.1:<a port nothing listens on>."""

    def walk(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, str) and (m := _SVC_ADDRESS.match(v)):
            return f"127.0.0.1:{m.group(3)}"
        return v

    out = walk(values)
    out.setdefault("keda", {})["scalerAddress"] = f"127.0.0.1:{closed_port}"
    return out


def make_target(api: Api, namespace: str, kind: str, name: str) -> None:
    """A GPU-less Deployment or StatefulSet for a ScaledObject to scale (kwok runs its pods)."""
    from kubernetes.client.exceptions import ApiException

    kwok = [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}]
    pod = {
        "metadata": {"labels": {"app": name}},
        "spec": {
            "nodeSelector": {"gpu-pool": "shared"},
            "tolerations": kwok,
            "containers": [{"name": "c", "image": "fake.invalid/c:kwok"}],
        },
    }
    spec = {"replicas": 1, "selector": {"matchLabels": {"app": name}}, "template": pod}
    create = api.apps.create_namespaced_deployment
    if kind == "StatefulSet":
        spec["serviceName"] = name
        create = api.apps.create_namespaced_stateful_set
    try:
        create(namespace, {"metadata": {"name": name}, "spec": spec})
    except ApiException as e:
        if e.status != 409:  # already there (another values file)
            raise


def keda_errors(api: Api, kind: str, name: str) -> str:
    """The errors KEDA's operator logged for one object: the Ready condition and event of a
    ScaledJob only say "Failed to ensure ScaledJob is correctly created"."""
    log_file = api.kubeconfig.parent / "logs" / "keda-operator.log"
    lines = log_file.read_text(errors="replace").splitlines() if log_file.exists() else []
    tag = f'"{kind}": {{"name":"{name}"'
    return " | ".join(ln for ln in lines if "ERROR" in ln and tag in ln)[-4000:]


def s0_chart_ci_values(c: Ctx) -> dict[str, Any]:
    """Every values file under charts/gpu-pool-scaler/ci/ installs with real helm on this
    cluster (each its own release and namespace), and KEDA's operator accepts every
    ScaledObject/ScaledJob it made (no `*CheckFailed` condition: a spec KEDA refuses, as
    the metricType it once refused on ScaledJobs). Their scalers and Secrets do not exist
    here (a ScaledObject then reports that no scaler answered, the one failure allowed),
    so nothing more is asked of them; the releases are uninstalled."""
    results: dict[str, Any] = {}
    # ci/monitoring renders a ServiceMonitor and a PrometheusRule: the real CRDs first.
    crds = cluster.apply_prometheus_operator_crds(cluster.api_client(c.api.kubeconfig))
    wait(
        "Prometheus Operator CRDs established",
        lambda: cluster.crds_established(cluster.api_client(c.api.kubeconfig), crds),
        60,
    )
    closed_port = cluster.free_port()  # nothing listens: KEDA's dial fails at once
    for src in sorted((CHART / "ci").glob("*-values.yaml")):
        cid = src.name.removesuffix("-values.yaml")
        rel, ns = f"ci-{cid}", f"ci-{cid}"
        f = c.vfile.parent / f"ci-{src.name}"
        f.write_text(yaml.safe_dump(loopback_only(yaml.safe_load(src.read_text()), closed_port)))
        rendered = c.helm.run("template", rel, str(CHART), "-n", ns, "-f", str(f))
        docs = [d for d in yaml.safe_load_all(rendered) if d]
        # What the values assume exists: their namespaces and the scale targets.
        have = {n.metadata.name for n in c.api.core.list_namespace().items}
        for n in {d["metadata"].get("namespace") or ns for d in docs} - have:
            c.api.core.create_namespace({"metadata": {"name": n}})
        for d in docs:
            if d["kind"] == "ScaledObject":
                target_ns = d["metadata"].get("namespace") or ns
                ref = d["spec"]["scaleTargetRef"]
                make_target(c.api, target_ns, ref.get("kind", "Deployment"), ref["name"])
        c.helm.run("install", rel, str(CHART), "-n", ns, "-f", str(f))
        c.cleanup.append(partial(c.helm.uninstall_quietly, rel, ns))  # also on failure
        manifest = [
            d for d in yaml.safe_load_all(c.helm.run("get", "manifest", rel, "-n", ns)) if d
        ]
        keda = [
            (d["kind"], d["metadata"].get("namespace", ns), d["metadata"]["name"])
            for d in manifest
            if d["kind"] in ("ScaledObject", "ScaledJob")
        ]

        def judged(keda: list[tuple[str, str, str]] = keda) -> dict[str, str] | None:
            out = {}
            for kind, kns, name in keda:
                obj = c.api.custom.get_namespaced_custom_object(
                    "keda.sh", "v1alpha1", kns, kind.lower() + "s", name
                )
                conds = {x["type"]: x for x in obj.get("status", {}).get("conditions", [])}
                ready = conds.get("Ready")
                if ready is None or ready.get("status") == "Unknown":
                    return None  # not reconciled yet
                out[f"{kind}/{name}"] = (
                    f"{ready['status']} {ready.get('reason', '')}: {ready.get('message', '')}"
                )
            return out

        verdict = wait(f"KEDA reconciles the objects of ci/{src.name}", judged, 90, every=2)
        # A refused spec reads "<Kind>CheckFailed: <why>". Expected here, and only these:
        # what the values expect to exist does not (the scaler's pod is kwok's, their Redis
        # and their EXISTING Secrets are the user's), which KEDA reports while building the
        # scalers. The reasons come from KEDA's log when the condition is generic.
        absent_peers = (
            "no metric specs returned from scalers",
            "connection to redis failed",
            "error resolving secret",
        )
        refused = {}
        for k, v in verdict.items():
            if "CheckFailed" not in v:
                continue
            kind, name = k.split("/", 1)
            why = v + " " + keda_errors(c.api, kind, name)
            if not any(p in why for p in absent_peers):
                refused[k] = why
        if refused:
            raise Failed(f"KEDA refused objects of ci/{src.name}: {refused}")
        results[cid] = {"objects": len(manifest), "keda": verdict}
        c.helm.uninstall_quietly(rel, ns)
    return {"releases": results}


ORDER_NS, ORDER_POOL = "gps-order", "order-check"
# (name, class, GPUs, node): node 0 holds one pretraining pod; node 1 a finetune pod and
# four eval pods. One research priority: the fewest victims (the 8-GPU pod on node 0);
# per class: the four 1-GPU evals on node 1 (the finetune pod reprieved).
ORDER_LAYOUT = [
    ("pretrain-0", "pretrain", 8, 0),
    ("finetune-0", "finetune", 4, 1),
    *((f"eval-{i}", "eval", 1, 1) for i in range(4)),
]
ORDER_CLASSES = [("eval", 1, 600.0, 0), ("finetune", 4, 1200.0, 0), ("pretrain", 8, 1800.0, 0)]


def side_nodes(c: Ctx, prefix: str, pool: str) -> list[str]:
    """Two 8-GPU kwok nodes outside the scaler's pool (their own `gpu-pool` label),
    deleted at cleanup; not yet waited for. Returns the node names."""
    core = c.api.core
    nodes = cluster.create_nodes(core.api_client, 2, 8, prefix=prefix, pool=pool)
    for n in nodes:
        c.cleanup.append(partial(core.delete_node, n))
    return nodes


def side_setup(
    c: Ctx, ns: str, classes: dict[str, int], prefix: str, pool: str, label: str
) -> list[str]:
    """A namespace, research PriorityClasses {name: value} (preemptionPolicy Never, as the
    chart's) and two 8-GPU kwok nodes outside the scaler's pool (their own `gpu-pool`
    label), Ready; all deleted at cleanup. Returns the node names."""
    from kubernetes import client

    core, sched = c.api.core, client.SchedulingV1Api(c.api.core.api_client)
    core.create_namespace({"metadata": {"name": ns}})
    c.cleanup.append(lambda: core.delete_namespace(ns))
    for name, value in classes.items():
        body = {
            "metadata": {"name": name},
            "value": value,
            "preemptionPolicy": "Never",
            "globalDefault": False,
        }
        sched.create_priority_class(cluster.manifest(body))
        c.cleanup.append(partial(sched.delete_priority_class, name))
    nodes = side_nodes(c, prefix, pool)
    wait(
        f"the two {label} nodes are Ready",
        lambda: cluster.nodes_ready(core.api_client, nodes),
        120,
    )
    return nodes


def kwok_pod(
    name: str,
    pc: str,
    gpus: int,
    node: str | None,
    pool: str,
    grace: int = 0,
    finalizer: str | None = None,
    scheduler: str | None = None,
    host_share: bool = False,
) -> dict[str, Any]:
    """A GPU pod for kwok nodes of `pool`; `node` places it directly (no scheduling choice).
    `scheduler`: the kube-scheduler profile (schedulerName); `host_share`: it also requests
    the node's CPU and memory in proportion to its GPUs, as a real GPU pod does (what the
    default profile's LeastAllocated scores)."""
    resources: dict[str, Any] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    if host_share:  # the kwok nodes: 64 CPUs, 512 Gi for 8 GPUs
        resources["requests"] = {"cpu": str(8 * gpus), "memory": f"{64 * gpus}Gi"}
    spec: dict[str, Any] = {
        "priorityClassName": pc,
        "terminationGracePeriodSeconds": grace,
        "nodeSelector": {"gpu-pool": pool},
        "tolerations": [
            {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}
        ],
        "containers": [
            {
                "name": "c",
                "image": "fake.invalid/job:kwok",
                "resources": resources,
            }
        ],
    }
    meta: dict[str, Any] = {"name": name}
    if node is not None:
        spec["nodeName"] = node
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    if finalizer is not None:
        meta["finalizers"] = [finalizer]
    return {"metadata": meta, "spec": spec}


def held_layout(c: Ctx, ns: str, pool: str, nodes: list[str]) -> Callable[..., dict[str, Any]]:
    """Two 4-GPU inference pods on `nodes[0]` (no victims there); returns the pod builder
    for the rest: a pod with a grace period is held by a finalizer until it has terminated,
    as the Job controller does (the scenario releases it)."""

    def pod(name: str, pc: str, gpus: int, node: str | None, grace: int = 0) -> dict[str, Any]:
        fin = NOM_FINALIZER if grace else None
        return kwok_pod(name, pc, gpus, node, pool, grace=grace, finalizer=fin)

    for i in range(2):
        c.api.core.create_namespaced_pod(ns, pod(f"keep-{i}", f"{FULL}-inference", 4, nodes[0]))
    return pod


def ns_pods(c: Ctx, ns: str) -> dict[str, Any]:
    return {p.metadata.name: p for p in c.api.core.list_namespaced_pod(ns).items}


def release_held(c: Ctx, ns: str, pods: dict[str, Any], *, terminated_only: bool) -> list[str]:
    """Strip the finalizer that holds a test pod past its grace (kwok_pod(finalizer=)), so
    it goes: only the terminated ones (phase Failed: what the Job controller lets go once
    the pod has stopped) or, for cleanup, all of them. Returns the names released."""
    released = []
    for n, p in pods.items():
        if p.metadata.finalizers and (not terminated_only or p.status.phase == "Failed"):
            c.api.core.patch_namespaced_pod(n, ns, {"metadata": {"finalizers": None}})
            released.append(n)
    return released


def s8_preemption_order(c: Ctx) -> dict[str, Any]:
    from scaler.sim.kube import INFERENCE_PRIORITY, Cluster, Pod, research_priorities

    core = c.api.core
    values = research_priorities(ORDER_CLASSES)  # what the chart deploys for these classes
    classes = {f"e2e-order-{cls}": v for cls, v in values.items()}
    nodes = side_setup(c, ORDER_NS, classes, "order-node", ORDER_POOL, "order-check")

    pod = partial(kwok_pod, pool=ORDER_POOL)

    for name, cls, gpus, node in ORDER_LAYOUT:
        core.create_namespaced_pod(ORDER_NS, pod(name, f"e2e-order-{cls}", gpus, nodes[node]))
        time.sleep(0.2)  # start times in layout order (the last tie-break)

    def running() -> set[str]:
        return {
            p.metadata.name
            for p in core.list_namespaced_pod(ORDER_NS).items
            if p.status.phase == "Running" and p.metadata.deletion_timestamp is None
        }

    wait("the research layout Running", lambda: running() >= {n for n, *_ in ORDER_LAYOUT}, 120)
    t0 = time.monotonic()
    core.create_namespaced_pod(ORDER_NS, pod("inference", f"{FULL}-inference", 4, None))
    preemptor = wait(
        "the inference pod Running after preemption",
        lambda: "inference" in running() and core.read_namespaced_pod("inference", ORDER_NS),
        120,
    )
    t_run = time.monotonic() - t0
    real = sorted({n for n, *_ in ORDER_LAYOUT} - running())
    real_node = nodes.index(preemptor.spec.node_name)

    # The same layout in the bench's simulated cluster.
    sim = Cluster(16, 8)
    by_pod: dict[int, str] = {}
    for i, (name, cls, gpus, node) in enumerate(ORDER_LAYOUT):
        p = Pod("research", gpus, values[cls], float(i))
        by_pod[id(p)] = name
        sim.submit(p)
        sim.schedule(float(i), 0.0)
        if p.node != node:
            raise Failed(f"simulated layout differs: {name} on node {p.node}, not {node}")
    inf = Pod("inference", 4, INFERENCE_PRIORITY, 10.0)
    sim.submit(inf)
    _, evicted = sim.schedule(10.0, 0.0)
    simulated = sorted(by_pod[id(e.victim)] for e in evicted)
    if real != simulated or real_node != inf.nominated:
        raise Failed(
            f"kube-scheduler evicted {real} on node {real_node}; the simulated scheduler "
            f"{simulated} on node {inf.nominated}"
        )
    if real != [f"eval-{i}" for i in range(4)]:
        raise Failed(f"expected the four eval pods to go first, got {real}")
    return {
        "priority_values": values,
        "victims": real,
        "node": real_node,
        "inference_running_s": round(t_run, 1),
    }


NOM_NS, NOM_POOL = "gps-nominated", "nominated-check"
NOM_FINALIZER = "e2e.gpu-pool-scaler/hold"  # released once terminated, as the Job controller does
NOM_GRACE_A, NOM_GRACE_B = 30, 90  # grace of the first / second inference pod's victims (s)
NOM_EVENTS = ("low victims gone", "mid victims gone", "inf-a bound", "inf-b bound")


def s9_nominated_wait(c: Ctx) -> dict[str, Any]:
    """kube-scheduler's filter counts other nominated pods of equal or higher priority on a
    node: two replicas nominated to one node wait for each other's victims. The bench's
    ServeGen seed 3 shortfall runs on this (docs/bench.md); the simulator must keep it."""
    from scaler.sim.kube import INFERENCE_PRIORITY, Cluster, Pod

    core = c.api.core
    # The first inference pod evicts the lowest priority (short grace), the second the rest.
    layers = {"low": (-120, NOM_GRACE_A), "mid": (-110, NOM_GRACE_B)}
    classes = {f"e2e-nom-{cls}": value for cls, (value, _) in layers.items()}
    nodes = side_setup(c, NOM_NS, classes, "nom-node", NOM_POOL, "nominated-check")

    # Node 0 full of inference (no victims there); node 1: four 1-GPU research pods per layer.
    pod = held_layout(c, NOM_NS, NOM_POOL, nodes)
    inf_pc = f"{FULL}-inference"
    group = {cls: [f"{cls}-{i}" for i in range(4)] for cls in layers}
    for cls, names in group.items():
        for n in names:
            core.create_namespaced_pod(
                NOM_NS, pod(n, f"e2e-nom-{cls}", 1, nodes[1], layers[cls][1])
            )

    def pods() -> dict[str, Any]:
        return ns_pods(c, NOM_NS)

    wait(
        "the layout Running",
        lambda: sum(p.status.phase == "Running" for p in pods().values()) == 10,
        120,
    )
    t0 = time.monotonic()
    seen: dict[str, float] = {}
    core.create_namespaced_pod(NOM_NS, pod("inf-a", inf_pc, 4, None))
    deadline = t0 + NOM_GRACE_B + 60
    while time.monotonic() < deadline:
        now = round(time.monotonic() - t0, 1)
        ps = pods()
        release_held(c, NOM_NS, ps, terminated_only=True)
        for x in ("inf-a", "inf-b"):
            p = ps.get(x)
            if p is not None and p.status.nominated_node_name:
                seen.setdefault(f"{x} nominated", now)
            if p is not None and p.spec.node_name:
                seen.setdefault(f"{x} bound", now)
        for cls, names in group.items():
            # A terminated (Failed) pod no longer counts against its node, finalizer or not.
            if all(n not in ps or ps[n].status.phase == "Failed" for n in names):
                seen.setdefault(f"{cls} victims gone", now)
        if "inf-a nominated" in seen and "inf-b" not in ps:
            core.create_namespaced_pod(NOM_NS, pod("inf-b", inf_pc, 4, None))
        if all(k in seen for k in NOM_EVENTS):
            break
        time.sleep(0.25)
    for k in NOM_EVENTS:
        if k not in seen:
            raise Failed(f"no '{k}' within {NOM_GRACE_B + 60} s: {seen}")
    if seen["low victims gone"] > seen["mid victims gone"]:
        raise Failed(f"the first pod's victims (priority -120) went last: {seen}")
    if seen["inf-a bound"] < seen["mid victims gone"] - 2.0:
        raise Failed(f"kube-scheduler bound the first pod before the second's victims went: {seen}")

    # The same two preemptions in the simulated cluster: the first binds with the second.
    sim = Cluster(16, 8)
    for i in range(2):
        sim.submit(Pod("inference", 4, INFERENCE_PRIORITY, float(i)))
        sim.schedule(float(i), 0.0)
    for i, cls in enumerate(["mid"] * 4 + ["low"] * 4):
        sim.submit(Pod("research", 1, layers[cls][0], 10.0 + i))
        sim.schedule(10.0 + i, 0.0)
    a = Pod("inference", 4, INFERENCE_PRIORITY, 100.0)
    b = Pod("inference", 4, INFERENCE_PRIORITY, 101.0)
    sim.submit(a)
    sim.schedule(100.0, float(NOM_GRACE_A))
    sim.submit(b)
    sim.schedule(101.0, float(NOM_GRACE_B))
    for t in range(100, 101 + NOM_GRACE_B + 2):
        sim.release_due(float(t))
        sim.schedule(float(t), 0.0)
    if a.bound_at != b.bound_at or a.bound_at < 101.0 + NOM_GRACE_B:
        raise Failed(f"simulated: first bound at {a.bound_at}, second at {b.bound_at}")
    return {
        "seen_s": seen,
        "first_waited_after_its_victims_s": round(
            seen["inf-a bound"] - seen["low victims gone"], 1
        ),
        "simulated_bound_at_s": [a.bound_at - 100.0, b.bound_at - 100.0],
    }


ELSE_NS, ELSE_POOL = "gps-nominated-elsewhere", "nominated-elsewhere"
ELSE_GRACE = 120  # the research victims' grace period (s): far longer than the check waits


def s13_nominated_elsewhere(c: Ctx) -> dict[str, Any]:
    """A pod nominated to a node whose victims are still terminating binds on another node
    as soon as room appears there (KEP-1923: the nominated node is tried first, then every
    node): a replica does not wait out research's grace period if another node frees up.
    The simulator kept it on its nominated node; the bench's waiting misses ran on that."""
    from scaler.sim.kube import INFERENCE_PRIORITY, Cluster, Pod

    core = c.api.core
    low = "e2e-else-low"
    nodes = side_setup(c, ELSE_NS, {low: -120}, "else-node", ELSE_POOL, "nominated-elsewhere")

    # Node 0: two 4-GPU inference pods (no victims there); node 1: eight 1-GPU research pods.
    pod = held_layout(c, ELSE_NS, ELSE_POOL, nodes)
    inf_pc = f"{FULL}-inference"
    for i in range(8):
        core.create_namespaced_pod(ELSE_NS, pod(f"research-{i}", low, 1, nodes[1], ELSE_GRACE))

    def pods() -> dict[str, Any]:
        return ns_pods(c, ELSE_NS)

    def release_all() -> None:  # the held victims, so that the namespace can go
        release_held(c, ELSE_NS, pods(), terminated_only=False)

    c.cleanup.append(release_all)
    wait(
        "the layout Running",
        lambda: sum(p.status.phase == "Running" for p in pods().values()) == 10,
        120,
    )
    core.create_namespaced_pod(ELSE_NS, pod("inf-a", inf_pc, 4, None))
    a = wait(
        "inf-a nominated to the research node",
        lambda: (p := pods()["inf-a"]).status.nominated_node_name == nodes[1] and p,
        60,
    )
    if a.spec.node_name:
        raise Failed(f"inf-a bound at once to {a.spec.node_name}: no preemption to wait for")
    # The preemption deletes its victims one API call each: wait until all four show.
    victims = wait(
        "four research victims terminating",
        lambda: (
            len(v := sorted(n for n, p in pods().items() if p.metadata.deletion_timestamp)) >= 4
            and v
        ),
        30,
    )
    if len(victims) != 4:
        raise Failed(f"expected four research victims terminating, got {victims}")
    t0 = time.monotonic()
    core.delete_namespaced_pod("keep-1", ELSE_NS, grace_period_seconds=0)
    bound = wait("inf-a bound", lambda: pods()["inf-a"].spec.node_name, ELSE_GRACE / 2)
    took = round(time.monotonic() - t0, 1)
    still = [n for n in victims if n in pods()]
    release_all()
    if bound != nodes[0] or not still:
        raise Failed(
            f"inf-a bound to {bound} after {took} s (victims left: {still}); expected the "
            f"node freed by keep-1 ({nodes[0]}) while its victims still terminate"
        )

    # The same in the simulated cluster: nominated to node 1, bound on node 0 once it frees.
    sim = Cluster(16, 8)
    keep = [Pod("inference", 4, INFERENCE_PRIORITY, float(i)) for i in range(2)]
    for i, k in enumerate(keep):
        sim.submit(k)
        sim.schedule(float(i), 0.0)
    for i in range(8):
        sim.submit(Pod("research", 1, -120, 10.0 + i))
        sim.schedule(10.0 + i, 0.0)
    inf = Pod("inference", 4, INFERENCE_PRIORITY, 100.0)
    sim.submit(inf)
    sim.schedule(100.0, float(ELSE_GRACE))
    if inf.nominated != 1 or {k.node for k in keep} != {0}:
        raise Failed(
            f"simulated layout: nominated {inf.nominated}, inference on {[k.node for k in keep]}"
        )
    sim.delete(keep[1], 110.0)
    sim.schedule(110.0, 0.0)
    if inf.node != 0 or inf.bound_at != 110.0:
        raise Failed(f"simulated: bound on node {inf.node} at {inf.bound_at}, not node 0 at 110")
    return {
        "bound_to": "the freed node",
        "bound_after_s": took,
        "victims_still_terminating": len(still),
    }


PLACE_NS = "gps-placement"
PLACE_RESEARCH = 4  # 1-GPU research pods created one after the other
# (kube-scheduler profile, the bench's placement it must match, the research pods' nodes,
# how many nodes a Deployment's two 4-GPU replicas take)
PLACE_PROFILES = [
    ("default-scheduler", "spread", [1] * PLACE_RESEARCH, 2),
    (cluster.BINPACK_SCHEDULER, "pack", [0] * PLACE_RESEARCH, 1),
]


def s11_placement(c: Ctx) -> dict[str, Any]:
    """Where kube-scheduler binds pods that fit on more than one node, per profile, against
    the bench's simulated scheduler (`scaler.sim.kube.Cluster(placement=...)`), on pairs of
    8-GPU nodes of their own:
    * a 4-GPU inference pod on the first node, then 1-GPU research pods one by one: the
      default profile spreads them to the emptier node; the bin-packing profile
      (docs/install.md) fills the first, keeping the second whole for the next replica;
    * a Deployment scaled to two 4-GPU replicas: one per node, or both on one node. (The
      system's default topology spread for ReplicaSet pods outweighed MostAllocated here
      until the profile turned it off.)"""
    research_pc = "e2e-place-research"
    first = side_setup(c, PLACE_NS, {research_pc: -100}, "place-0", "placement-0", "placement")
    pairs = [first]
    pairs += [side_nodes(c, f"place-{k}", f"placement-{k}") for k in (1, 2, 3)]
    every = [n for p in pairs for n in p]
    wait(
        "the placement nodes are Ready",
        lambda: cluster.nodes_ready(c.api.core.api_client, every),
        120,
    )
    out: dict[str, Any] = {}
    for k, (profile, placement, expected, dep_nodes) in enumerate(PLACE_PROFILES):
        out[profile] = placement_check(
            c,
            PLACE_NS,
            research_pc,
            profile,
            placement,
            (pairs[2 * k], f"placement-{2 * k}"),
            f"placement-{2 * k + 1}",
            expected,
            dep_nodes,
        )
    return out


def placement_check(
    c: Ctx,
    ns: str,
    research_pc: str,
    profile: str,
    placement: str,
    research_pair: tuple[list[str], str],
    deployment_pool: str,
    expected: list[int],
    dep_nodes: int,
) -> dict[str, Any]:
    """Scenario 11's two checks for one scheduler profile: research pods beside an inference
    pod on `research_pair` (node names, pool label), then a Deployment's two replicas on
    the pair labelled `deployment_pool`; each against the simulated `Cluster(placement)`
    and the expected outcome."""
    from scaler.sim.kube import INFERENCE_PRIORITY, Cluster, Pod

    core = c.api.core

    def pod_of(name: str) -> Any:
        return core.read_namespaced_pod(name, ns)

    def running(name: str) -> bool:
        return bool(pod_of(name).status.phase == "Running")

    def bound_node(name: str) -> str | None:
        return pod_of(name).spec.node_name

    def replicas_bound(app: str, n: int) -> list[str] | None:
        ps = core.list_namespaced_pod(ns, label_selector=f"app={app}").items
        nodes = [p.spec.node_name for p in ps if p.metadata.deletion_timestamp is None]
        return nodes if len(nodes) == n and all(nodes) else None

    # Research pods beside an inference pod.
    nodes, pool = research_pair
    pod = partial(kwok_pod, pool=pool, scheduler=profile, host_share=True)
    inf = f"{placement}-inference"
    core.create_namespaced_pod(ns, pod(inf, f"{FULL}-inference", 4, nodes[0]))
    wait(f"{inf} Running", partial(running, inf), 60)
    time.sleep(1.0)  # the scheduler's informer has seen it too
    real: list[int] = []
    for i in range(PLACE_RESEARCH):
        name = f"{placement}-research-{i}"
        core.create_namespaced_pod(ns, pod(name, research_pc, 1, None))
        node = wait(f"{name} bound ({profile})", partial(bound_node, name), 60)
        real.append(nodes.index(node))
    # The same pods in the simulated cluster (its first pod lands on node 0 unpinned).
    sim = Cluster(16, 8, placement)
    sim.submit(Pod("inference", 4, INFERENCE_PRIORITY, 0.0))
    simulated: list[int] = []
    for i in range(PLACE_RESEARCH):
        p = Pod("research", 1, -100, 1.0 + i)
        sim.submit(p)
        sim.schedule(1.0 + i, 0.0)
        simulated.append(p.node)
    if real != simulated:
        raise Failed(
            f"{profile}: kube-scheduler bound the research pods to nodes {real}, the "
            f"simulated scheduler (placement {placement!r}) to {simulated}"
        )
    if real != expected:
        raise Failed(f"{profile}: research pods on nodes {real}, expected {expected}")

    # A Deployment's replicas, one scale step at a time (the first one's node is a tie).
    app = f"place-{placement}"
    template = kwok_pod(
        "x", f"{FULL}-inference", 4, None, deployment_pool, scheduler=profile, host_share=True
    )
    template["metadata"] = {"labels": {"app": app}}
    c.api.apps.create_namespaced_deployment(
        ns,
        {
            "metadata": {"name": app},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"app": app}},
                "template": template,
            },
        },
    )
    for r in (1, 2):
        c.api.apps.patch_namespaced_deployment_scale(app, ns, {"spec": {"replicas": r}})
        bound = wait(f"{app}: {r} replica(s) bound", partial(replicas_bound, app, r), 60)
    sim = Cluster(16, 8, placement)
    reps = [Pod("inference", 4, INFERENCE_PRIORITY, float(i)) for i in range(2)]
    for p in reps:
        sim.submit(p)
        sim.schedule(p.created, 0.0)
    sim_nodes = len({p.node for p in reps})
    if len(set(bound)) != sim_nodes or sim_nodes != dep_nodes:
        raise Failed(
            f"{profile}: a Deployment's two replicas on {len(set(bound))} node(s) "
            f"({bound}); simulated {sim_nodes}, expected {dep_nodes}"
        )
    return {
        "placement": placement,
        "research_nodes": real,
        "deployment_replica_nodes": len(set(bound)),
    }


BP_NS = "gps-binpack"
# Not cluster.BINPACK_SCHEDULER: the cluster's own kube-scheduler has a profile of that
# name, and only the chart's scheduler may be the one that places these pods.
BP_NAME = "gps-e2e-binpack"


def s12_chart_scheduler(c: Ctx) -> dict[str, Any]:
    """`binpackScheduler.enabled` (charts/gpu-pool-scaler/templates/binpack-scheduler.yaml):
    `helm upgrade` creates the second scheduler's objects; the research ScaledJob's pods
    select it. kwok runs no container, so the cluster's real kube-scheduler runs here with the
    ConfigMap the chart put in the cluster and the Deployment's own flags, as the chart's
    ServiceAccount (its token: the RBAC is what the pod gets). Checked: a pod selecting it
    stays Pending until it runs; it takes its Lease; /healthz and /livez (the probes) answer
    without credentials; it places pods as the bench's `--placement pack` (scenario 11's
    checks); an inference pod of the default scheduler preempts research pods it placed
    (the two schedulers share preemption); none of its requests was forbidden. The
    release's values are restored after."""
    from kubernetes import client

    core = c.api.core
    vals = yaml.safe_load(c.vfile.read_text())
    vals["binpackScheduler"] = {"enabled": True, "name": BP_NAME}
    vfile = c.vfile.parent / "values-binpack.yaml"
    vfile.write_text(yaml.safe_dump(vals))
    c.helm.install(vfile, upgrade=True)
    out_dir = c.config_file.parent
    sched: subprocess.Popen[bytes] | None = None
    try:
        name = f"{FULL}-scheduler"
        manifest = [
            d for d in yaml.safe_load_all(c.helm.run("get", "manifest", RELEASE, "-n", NS)) if d
        ]
        (dep,) = [
            d for d in manifest if d["kind"] == "Deployment" and d["metadata"]["name"] == name
        ]
        (sj,) = c.api.custom.list_namespaced_custom_object("keda.sh", "v1alpha1", NS, "scaledjobs")[
            "items"
        ]
        sj_sched = sj["spec"]["jobTargetRef"]["template"]["spec"].get("schedulerName")
        if sj_sched != BP_NAME:
            raise Failed(f"the research ScaledJob's pods select scheduler {sj_sched!r}")

        # Its ServiceAccount's token; the config and flags as the chart wrote them, plus
        # where the API server is and a local port (the pod would use in-cluster config).
        sa_kc = service_account_kubeconfig(c.api, name, out_dir / "kubeconfig-binpack-sa")
        cfg = yaml.safe_load(core.read_namespaced_config_map(name, NS).data["config.yaml"])
        cfg["clientConnection"] = {"kubeconfig": str(sa_kc)}
        cfg_file = out_dir / "binpack-scheduler.yaml"
        cfg_file.write_text(yaml.safe_dump(cfg))
        (container,) = dep["spec"]["template"]["spec"]["containers"]
        argv = [cluster.binaries()["kube-scheduler"]]
        for a in container["command"][1:]:
            argv.append(f"--config={cfg_file}" if a.startswith("--config=") else a)
        port = cluster.free_port()
        argv += [
            f"--authentication-kubeconfig={sa_kc}",
            f"--authorization-kubeconfig={sa_kc}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
        ]

        research_pc = "e2e-binpack-research"
        pair = side_setup(c, BP_NS, {research_pc: -100}, "bp-0", "binpack-0", "binpack")
        dpair = side_nodes(c, "bp-1", "binpack-1")
        wait(
            "the binpack nodes are Ready", lambda: cluster.nodes_ready(core.api_client, dpair), 120
        )

        def node_of(name: str) -> str | None:
            return core.read_namespaced_pod(name, BP_NS).spec.node_name

        probe = kwok_pod("probe", research_pc, 1, None, "binpack-0", scheduler=BP_NAME)
        core.create_namespaced_pod(BP_NS, probe)
        time.sleep(3)
        if node_of("probe"):
            raise Failed(f"a pod selecting {BP_NAME} was bound before the chart's scheduler ran")

        log = out_dir / "binpack-scheduler.log"
        with log.open("ab") as f:
            sched = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT)
        for path in ("/healthz", "/livez"):
            url = f"https://127.0.0.1:{port}{path}"
            wait(f"the chart's scheduler {path}", partial(cluster.https_get_insecure, url), 60)
        coord = client.CoordinationV1Api(core.api_client)

        def lease_holder() -> str | None:
            spec = coord.read_namespaced_lease(name, NS).spec
            return spec.holder_identity if spec else None

        holder = wait(f"the chart's scheduler holds Lease {NS}/{name}", lease_holder, 60)
        wait("the probe pod bound by the chart's scheduler", partial(node_of, "probe"), 60)
        core.delete_namespaced_pod("probe", BP_NS, grace_period_seconds=0)
        wait(
            "the probe pod gone",
            lambda: not core.list_namespaced_pod(BP_NS, field_selector="metadata.name=probe").items,
            60,
        )
        placed = placement_check(
            c,
            BP_NS,
            research_pc,
            BP_NAME,
            "pack",
            (pair, "binpack-0"),
            "binpack-1",
            [0] * PLACE_RESEARCH,
            1,
        )
        # Preemption across schedulers: research pods this scheduler placed fill the pair's
        # second node; an inference pod of the default scheduler must preempt four of them.
        fill = [f"fill-{i}" for i in range(8)]
        for n in fill:
            body = kwok_pod(
                n, research_pc, 1, None, "binpack-0", scheduler=BP_NAME, host_share=True
            )
            core.create_namespaced_pod(BP_NS, body)

        for n in fill:
            node = wait(f"{n} bound by the chart's scheduler", partial(node_of, n), 60)
            if node != pair[1]:
                raise Failed(f"{n} bound to {node}, expected the empty node {pair[1]}")
        inf = kwok_pod(
            "cross-inference", f"{FULL}-inference", 4, None, "binpack-0", host_share=True
        )
        core.create_namespaced_pod(BP_NS, inf)
        node = wait(
            "the default scheduler's inference pod bound after preempting",
            partial(node_of, "cross-inference"),
            90,
        )
        # Both nodes are full of research pods beside equal-priority inference: either is
        # a valid choice; four research pods of that node must be gone.
        research = fill + [f"pack-research-{i}" for i in range(PLACE_RESEARCH)]  # placement_check's

        def left() -> list[str]:
            live = {
                p.metadata.name
                for p in core.list_namespaced_pod(BP_NS).items
                if p.metadata.deletion_timestamp is None
            }
            return [n for n in research if n not in live]

        gone = wait("four research pods preempted", lambda: len(left()) >= 4 and left(), 60)
        if node not in pair or len(gone) != 4:
            raise Failed(f"cross-scheduler preemption: bound to {node}, preempted {gone}")
        forbidden = [ln for ln in log.read_text(errors="replace").splitlines() if "forbidden" in ln]
        if forbidden:
            raise Failed(
                f"the chart's scheduler was refused {len(forbidden)} request(s): {forbidden[:3]}"
            )
        return {
            **placed,
            "lease_holder": holder,
            "image": container["image"],
            "preempted_by_default_scheduler": sorted(gone),
        }
    finally:
        if sched is not None:
            sched.terminate()
            try:
                sched.wait(10)
            except subprocess.TimeoutExpired:
                sched.kill()
        c.helm.install(c.vfile, upgrade=True)  # the run's values, without the scheduler


GB_GRACE = 30  # grace period of the give-back probes: each leaves Running ~30 s after its delete
# At least giveBack.minSamples (5, the chart's default), so the measurement is in use; eight so
# that every exit landing in the first 10 s of the 30-s grace (the check below) is a
# (1/3)^8 ≈ 0.02 % chance per run, not (1/3)^5 ≈ 0.4 %.
GB_PODS = 8
GB_FINALIZER = "e2e.gpu-pool-scaler/hold"  # released once terminated, as the Job controller does


def service_account_kubeconfig(
    api: Api, account: str, path: Path, expiration_s: int = 3600
) -> Path:
    """A kubeconfig acting as ServiceAccount `account` of NS (a fresh token for it): the admin
    kubeconfig's cluster with that bearer token instead of the admin's certificate."""
    token = api.core.create_namespaced_service_account_token(
        account, NS, {"spec": {"expirationSeconds": expiration_s}}
    ).status.token
    kc = yaml.safe_load(api.kubeconfig.read_text())
    for u in kc["users"]:
        u["user"] = {"token": token}
    path.write_text(yaml.safe_dump(kc))
    path.chmod(0o600)
    return path


def s10_give_back(c: Ctx) -> dict[str, Any]:
    """The measured research give-back on the chart's default (subtractForeignPods off): the
    chart writes giveBack.namespaces = the research namespace with a Role on its pods; a
    second scaler runs as the chart's ServiceAccount (its token, not the admin's: the RBAC
    is what a pod in the cluster gets) with the rendered config (other ports, no state
    ConfigMap: the main scaler owns it), GB_PODS research pods of the pool that take up to
    GB_GRACE s to leave (finalizer + kwok's terminate stage, as a Job's pod; kwok picks a
    random point of the grace) are deleted, and the scaler's
    `research_give_back_seconds{kind="measured"}` reads the longest of their exits."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core = c.api.core
    rendered = yaml.safe_load(c.helm.config())["pool"]
    namespaces = rendered.get("giveBack", {}).get("namespaces")
    if namespaces != [NS]:
        raise Failed(f"the chart wrote giveBack.namespaces {namespaces}, expected [{NS!r}]")
    if rendered["capacity"]["nodes"].get("subtractForeignPods"):
        raise Failed("this scenario is about the default: subtractForeignPods off")
    role = client.RbacAuthorizationV1Api(core.api_client).read_namespaced_role(
        f"{FULL}-research-pods", NS
    )
    rules = [(r.resources, sorted(r.verbs)) for r in role.rules or []]
    if rules != [(["pods"], ["get", "list", "watch"])]:
        raise Failed(f"research-pods Role rules: {rules}")

    # The ServiceAccount's own token: least privilege, checked before it is relied on.
    out = c.config_file.parent
    sa_kubeconfig = service_account_kubeconfig(c.api, FULL, out / "kubeconfig-scaler-sa")
    sa_core = client.CoreV1Api(cluster.api_client(sa_kubeconfig))
    try:
        sa_core.list_pod_for_all_namespaces(limit=1)
        raise Failed("the scaler's ServiceAccount can list pods cluster-wide")
    except ApiException as e:
        if e.status != 403:
            raise
    sa_core.list_namespaced_pod(NS, limit=1)  # allowed: the research-pods Role

    # The main scaler's config as it runs (the chart's, with earlier scenarios' local file
    # paths, e.g. TLS after scenario 5); other ports, no state ConfigMap.
    cfg = yaml.safe_load(c.config_file.read_text())
    grpc_port, metrics_port = cluster.free_port(), cluster.free_port()
    cfg["server"].update({"grpcPort": grpc_port, "metricsPort": metrics_port})
    cfg["server"].pop("stateConfigMap", None)
    cfg["server"].pop("stateWriteSeconds", None)
    config_file = out / "config-give-back.yaml"
    config_file.write_text(yaml.safe_dump(cfg))
    second = LocalScaler(config_file, sa_kubeconfig, out / "scaler-give-back.log")
    c.cleanup.append(second.stop)
    second.start(metrics_port)

    labels = {
        "gpu-pool-scaler.io/pool": cfg["pool"]["name"],
        "gpu-pool-scaler.io/research-class": "probe",
    }
    names = [f"give-back-probe-{i}" for i in range(GB_PODS)]
    for n in names:
        body = {
            "metadata": {
                "name": n,
                "labels": labels,
                "finalizers": [GB_FINALIZER],
                # kwok: Running for an hour unless deleted
                "annotations": {
                    "pod-complete.stage.kwok.x-k8s.io/delay": "3600s",
                    "pod-complete.stage.kwok.x-k8s.io/jitter-delay": "3601s",
                },
            },
            "spec": {
                "terminationGracePeriodSeconds": GB_GRACE,
                "nodeSelector": {"gpu-pool": "shared"},
                "tolerations": [
                    {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}
                ],
                "containers": [{"name": "c", "image": "fake.invalid/probe:kwok"}],
            },
        }
        core.create_namespaced_pod(NS, body)

    def release(n: str) -> None:
        with contextlib.suppress(ApiException):
            core.patch_namespaced_pod(n, NS, {"metadata": {"finalizers": None}})
            core.delete_namespaced_pod(n, NS, grace_period_seconds=0)

    for n in names:
        c.cleanup.append(partial(release, n))

    def probes() -> dict[str, Any]:
        return {
            p.metadata.name: p
            for p in core.list_namespaced_pod(
                NS, label_selector="gpu-pool-scaler.io/research-class=probe"
            ).items
        }

    wait(
        "the give-back probes Running",
        lambda: sum(p.status.phase == "Running" for p in probes().values()) == GB_PODS,
        120,
    )
    time.sleep(3)  # the scaler's research-pod watch has them (cycle 1 s)
    before = scaler_metric(metrics_port, "gpu_pool_scaler_research_give_back_seconds{", "measured")
    if before is not None:
        raise Failed(f"measured give-back before any deletion: {before}")
    t0 = time.monotonic()
    for n in names:
        core.delete_namespaced_pod(n, NS)  # the pod's grace: GB_GRACE
    left: dict[str, float] = {}
    deadline = t0 + GB_GRACE + 60
    measured = None
    while time.monotonic() < deadline:
        ps = probes()
        for n, p in ps.items():
            if p.status.phase == "Failed":
                left.setdefault(n, round(time.monotonic() - t0, 1))
        release_held(c, NS, ps, terminated_only=True)
        listed = probes()  # once per pass, after the release (not once per name)
        for n in names:
            if n not in listed:
                left.setdefault(n, round(time.monotonic() - t0, 1))
        measured = scaler_metric(
            metrics_port, "gpu_pool_scaler_research_give_back_seconds{", "measured"
        )
        if measured is not None and len(left) == GB_PODS:
            break
        time.sleep(0.5)
    time.sleep(3)  # the scaler's next cycles see the last probe gone too
    measured = scaler_metric(
        metrics_port, "gpu_pool_scaler_research_give_back_seconds{", "measured"
    )
    planned = scaler_metric(metrics_port, "gpu_pool_scaler_research_give_back_seconds{", "planned")
    if measured is None:
        raise Failed(f"no measured give-back within {GB_GRACE + 60} s; probes left at {left}")
    # kwok's terminate stage ends each probe at a random point of its grace (jitter up to
    # deletionTimestamp): the scaler must report the longest, to the cycle (1 s) and the
    # second deletionTimestamp is rounded to.
    longest = max(left.values())
    if longest < 10:
        raise Failed(f"every probe left within 10 s ({left}): nothing slow to measure")
    if not longest - 2.5 <= measured <= longest + 4:
        raise Failed(
            f"measured give-back {measured} s; the probes left Running at {left} "
            f"(grace {GB_GRACE} s)"
        )
    return {
        "probes_left_running_s": left,
        "measured_give_back_s": round(measured, 1),
        "planned_give_back_s": None if planned is None else round(planned, 1),
        "scaler_identity": f"ServiceAccount {NS}/{FULL}",
    }


def two_replicas_at_mid_load(c: Ctx) -> None:
    """Scenarios 14 and 15 start from the HPA holding 2 Running replicas for 20 s in a row
    at 5.5 req/s (at 7 req/s it went to 3 on its own at times)."""
    hpa_created(c.api)
    if (c.api.desired() or 0) > 2:
        # Down from maxReplicas (scenario 14 ends there) through the low load: at the
        # middle load the draining backlog kept asking for 3 for 171 s (and > 210 s: a
        # failed CI run) before the 30-s window let go; at the low load it lets go in one.
        c.farm.rps = LOW_RPS
        wait("the HPA below 3 replicas", lambda: (c.api.desired() or 0) <= 2, 180, every=1)
    c.farm.rps = MID_RPS
    wait_steady(
        "two inference replicas Running at the middle load",
        lambda: (
            c.api.desired() == 2
            and c.api.running_gpus().get(f"{FULL}-inference", 0) == 2 * GPUS_PER_REPLICA
        ),
        20,
        240,
    )


def step_to_high_load(c: Ctx, how: str) -> float:
    """The load steps to 14 req/s; seconds until the HPA asks for every replica."""
    c.farm.rps = HIGH_RPS
    t = time.monotonic()
    wait(f"the HPA at {MAX_REPLICAS} {how}", lambda: c.api.desired() == MAX_REPLICAS, 120)
    return time.monotonic() - t


def s14_unread_replica(c: Ctx) -> dict[str, Any]:
    """One inference replica answers /metrics late (an engine's API server busy with its
    streams; the real vLLM on 2 cores did so through a 200-request queue): the scaler
    cannot read it, yet the load the other replica shows raises the HPA at once (replicas
    read may raise, never lower), no research Job starts while a replica is unread, and
    once it answers again the service is fresh."""
    api = c.api

    def fresh() -> float | None:
        return scaler_metric(c.metrics_port, "gpu_pool_scaler_service_data_fresh{", '"chat"')

    two_replicas_at_mid_load(c)
    ip = c.farm.answer_late(5.0)  # past the scrape timeout (1 s) on every scrape
    t0 = time.monotonic()
    wait("the scaler reads the service as not fresh", lambda: fresh() == 0.0, 60, every=1)
    t_unread = time.monotonic() - t0
    if api.desired() != 2:
        raise Failed(f"the HPA moved before the load did: {api.desired()}")
    jobs_before = {j.metadata.name for j in api.jobs()}
    t_raise = step_to_high_load(c, "with a replica unread")
    still = fresh()
    slots = scaler_metrics(c.metrics_port, "gpu_pool_scaler_research_slots{")
    new_jobs = sorted({j.metadata.name for j in api.jobs()} - jobs_before)
    c.farm.answer_late(0.0, ip)
    c.farm.rps = LOW_RPS
    if still != 0.0:
        raise Failed(f"the replica at {ip} was read again before the raise: fresh={still}")
    if not slots or any(slots):
        raise Failed(f"research slots {slots} while a replica was unread (each class: 0)")
    if new_jobs:
        raise Failed(f"research Jobs created while a replica was unread: {new_jobs}")
    t2 = time.monotonic()
    wait("the service fresh again", lambda: fresh() == 1.0, 60, every=1)
    return {
        "unread_engine": f"{ip}:{ENGINE_PORT}",
        "load_rps": [MID_RPS, HIGH_RPS],
        "to_not_fresh_s": round(t_unread, 1),
        "to_hpa_max_s": round(t_raise, 1),
        "research_slots_while_unread": slots,
        "fresh_again_s": round(time.monotonic() - t2, 1),
    }


def s15_late_answer(c: Ctx) -> dict[str, Any]:
    """The same engine answering /metrics late, with `scrape.lateAnswerSeconds` set by a
    helm upgrade: its request stays open past the 1-s timeout and the answer counts in the
    next cycle, so the service never goes stale, the raise reads both replicas, and
    research is not shut out."""

    def scrapes(result: str) -> float:
        return sum(
            scaler_metrics(
                c.metrics_port, "gpu_pool_scaler_scrape_total{", f'result="{result}",service="chat"'
            )
        )

    before = c.vfile.read_text()
    late = yaml.safe_load(before)
    late["scrape"] = {**late["scrape"], "lateAnswerSeconds": 8}  # timeout 1 s + 8 <= stale 10

    two_replicas_at_mid_load(c)
    upgrade_and_reload(c, yaml.safe_dump(late))
    ip = c.farm.answer_late(3.0)  # past the scrape timeout (1 s), within it + 8 s
    try:
        timeouts0, ok0 = scrapes("timeout"), scrapes("ok")
        seen: list[float | None] = []
        for _ in range(15):  # staleAfterSeconds 10: dropped answers would show within it
            seen.append(
                scaler_metric(c.metrics_port, "gpu_pool_scaler_service_data_fresh{", '"chat"')
            )
            time.sleep(1)
        timeouts, oks = scrapes("timeout") - timeouts0, scrapes("ok") - ok0
        if timeouts < 3:
            raise Failed(f"{timeouts:g} scrapes timed out in 15 s: the engine did not answer late")
        if any(f != 1.0 for f in seen):
            raise Failed(f"the service went stale with late answers kept: fresh {seen}")
        t_raise = step_to_high_load(c, "with every replica read")
        fresh = scaler_metric(c.metrics_port, "gpu_pool_scaler_service_data_fresh{", '"chat"')
        if fresh != 1.0:
            raise Failed(f"the raise came with the service not fresh ({fresh})")
    finally:
        c.farm.answer_late(0.0, ip)
        c.farm.rps = LOW_RPS
        upgrade_and_reload(c, before)
    return {
        "late_engine": f"{ip}:{ENGINE_PORT}",
        "answers_after_s": 3.0,
        "scrape": {"timeoutSeconds": 1, "lateAnswerSeconds": 8, "staleAfterSeconds": 10},
        "fresh_each_second": seen,
        "scrapes_timed_out_in_15_s": timeouts,
        "scrapes_ok_in_15_s": oks,
        "to_hpa_max_s": round(t_raise, 1),
    }


SCENARIOS: list[tuple[str, Callable[[Ctx], dict[str, Any]]]] = [
    ("1-low-load", s1_low_load),
    ("0-chart-ci-values", s0_chart_ci_values),
    ("6-hpa-fields", s6_hpa_fields),
    ("2-ramp", s2_ramp),
    ("4-upgrade", s4_upgrade),
    ("3-scaler-down", s3_scaler_down),
    ("7-queue", s7_queue),
    ("5-tls", s5_tls),
    ("8-preemption-order", s8_preemption_order),
    ("9-nominated-wait", s9_nominated_wait),
    ("10-give-back", s10_give_back),
    ("11-placement", s11_placement),
    ("12-chart-scheduler", s12_chart_scheduler),
    ("13-nominated-elsewhere", s13_nominated_elsewhere),
    ("14-unread-replica", s14_unread_replica),
    ("15-late-answer", s15_late_answer),
]


def cluster_up(state: Path, feature_gates: str = "") -> None:
    cluster_down(state)  # this harness's own state dir: leftovers of an interrupted run
    argv = [sys.executable, str(cluster.CLUSTER_DIR / "cluster.py"), "up"]
    argv += ["--nodes", str(NODES), "--gpus-per-node", str(GPUS_PER_NODE)]
    argv += ["--state-dir", str(state)]
    if feature_gates:
        argv += ["--feature-gates", feature_gates]
    subprocess.run(argv, check=True)


def cluster_down(state: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            str(cluster.CLUSTER_DIR / "cluster.py"),
            "down",
            "--state-dir",
            str(state),
        ],
        check=False,
    )


def hpa_tolerance_gate_off(out: Path) -> dict[str, Any]:
    """Scenario 6 with HPAConfigurableTolerance=false on kube-apiserver and
    kube-controller-manager: the same chart values ask for 0.05; the API server drops the
    field silently, so the HPA runs with the cluster's 10 %. The scaler's HPA read-back
    (server.hpaCheck) is what reports it."""
    state = out / "cluster-gate-off"
    scaler: LocalScaler | None = None
    cluster_up(state, "HPAConfigurableTolerance=false")  # a failed `up` stops what it started
    try:
        kubeconfig = state / "kubeconfig"
        api = Api(kubeconfig)
        grpc_port, metrics_port = cluster.free_port(), cluster.free_port()
        vfile = out / "values-gate-off.yaml"
        vfile.write_text(yaml.safe_dump(values(grpc_port, metrics_port, 5.0)))
        helm = Helm(kubeconfig, out / "helm-home")
        helm.install(vfile)
        create_inference_deployment(api)
        config_file = out / "config-gate-off.yaml"
        config_file.write_text(helm.config())
        # As the main cluster's scaler: the chart's ServiceAccount reads the HPA back.
        sa_kubeconfig = service_account_kubeconfig(api, FULL, out / "kubeconfig-gate-off-sa")
        scaler = LocalScaler(config_file, sa_kubeconfig, out / "scaler-gate-off.log")
        scaler.start(metrics_port)
        hpa_created(api)
        asked = api.scaled_object()["spec"]["advanced"]["horizontalPodAutoscalerConfig"]
        b = api.hpa_behavior()
        kept = {d: b[d].get("tolerance") for d in ("scaleUp", "scaleDown")}
        if any(v is not None for v in kept.values()):
            raise Failed(f"the gate is off but the HPA kept a tolerance: {kept}")

        seen = wait(
            "the scaler reads the HPA's tolerance back (server.hpaCheck)",
            lambda: scaler_metric(metrics_port, "gpu_pool_scaler_hpa_tolerance{", '"up"'),
            90,
            every=2,
        )
        if seen != 0.1:
            raise Failed(f"the scaler reports tolerance {seen}, the HPA runs with 0.1")
        return {
            "scaler_hpa_tolerance_metric": seen,
            "tolerance_asked": asked["behavior"]["scaleUp"].get("tolerance"),
            "tolerance_kept": kept,
            "note": "dropped silently: the HPA runs with the 10 % default",
            "scaler_identity": SCALER_IDENTITY,
        }
    finally:
        if scaler is not None:
            scaler.stop()
        cluster_down(state)


def run_scenario(name: str, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """One scenario's entry in report.json: passed, seconds, its figures or the error."""
    say(f"scenario {name} ...")
    t = time.monotonic()
    try:
        figures = fn()
    except Exception as e:
        say(f"FAIL {name}: {e}")
        traceback.print_exc()
        return {"passed": False, "seconds": round(time.monotonic() - t, 1), "error": str(e)}
    say(f"PASS {name}: {json.dumps(figures)}")
    return {"passed": True, "seconds": round(time.monotonic() - t, 1), **figures}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--out", type=Path, default=REPO / "out" / "e2e")
    p.add_argument("--keep", action="store_true", help="leave the cluster up afterwards")
    p.add_argument("--no-up", action="store_true", help="use the cluster already in --out/cluster")
    p.add_argument(
        "--only",
        action="append",
        metavar="SCENARIO",
        choices=[n for n, _ in SCENARIOS] + ["6b-hpa-fields-gate-off"],
        help="run only these scenarios (repeatable; the setup runs in any case)",
    )
    args = p.parse_args(argv)
    only = set(args.only or [])
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    state = out / "cluster"
    report: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    results: dict[str, Any] = {}
    report["scenarios"] = results
    farm: EngineFarm | None = None
    scaler: LocalScaler | None = None
    cleanups: list[Callable[[], object]] = []
    started = False
    t_start = time.monotonic()
    try:
        if not args.no_up:
            t = time.monotonic()
            cluster_up(state)  # a failed `up` stops what it started
            started = True
            report["cluster_up_s"] = round(time.monotonic() - t, 1)
        kubeconfig = state / "kubeconfig"
        api = Api(kubeconfig)
        pool_gpus = NODES * GPUS_PER_NODE
        grpc_port, metrics_port = cluster.free_port(), cluster.free_port()
        vfile = out / "values.yaml"
        vfile.write_text(yaml.safe_dump(values(grpc_port, metrics_port, 5.0)))
        helm = Helm(kubeconfig, out / "helm-home")
        t = time.monotonic()
        helm.install(vfile)
        report["helm_install_s"] = round(time.monotonic() - t, 1)
        say(f"chart installed in namespace {NS}")
        create_inference_deployment(api)
        config_file = out / "config.yaml"
        config_file.write_text(helm.config())
        # The scaler acts as the chart's ServiceAccount (a token of it, not the admin's
        # certificate), so every scenario runs on the RBAC the chart gives a pod in the cluster.
        sa_kubeconfig = service_account_kubeconfig(
            api, FULL, out / "kubeconfig-scaler-main-sa", expiration_s=4 * 3600
        )
        report["scaler_identity"] = SCALER_IDENTITY
        scaler = LocalScaler(config_file, sa_kubeconfig, out / "scaler.log")
        farm = EngineFarm(api.core, LOW_RPS)
        farm.start()
        wait("the first inference pod has an engine", lambda: farm.engines, 120)
        scaler.start(metrics_port)
        say(f"scaler serving on 127.0.0.1:{grpc_port}")
        ctx = Ctx(api, farm, helm, scaler, vfile, config_file, grpc_port, metrics_port, pool_gpus)
        cleanups = ctx.cleanup
        for name, fn in SCENARIOS:
            if not only or name in only:
                results[name] = run_scenario(name, partial(fn, ctx))
    except Exception as e:
        report["error"] = f"{type(e).__name__}: {e}"
        traceback.print_exc()
    finally:
        if farm is not None:
            farm.stop()
            report["engine_errors"] = farm.errors[-5:]
        if scaler is not None:
            scaler.stop()
        for cleanup in cleanups:
            with contextlib.suppress(Exception):
                cleanup()
        if started and not args.keep:  # never another run's cluster
            cluster_down(state)
        name = "6b-hpa-fields-gate-off"
        if started and (not only or name in only):  # a second cluster
            results[name] = run_scenario(name, partial(hpa_tolerance_gate_off, out))
        report["total_s"] = round(time.monotonic() - t_start, 1)
        (out / "report.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
        say(f"report: {out / 'report.json'}")
    ok = "error" not in report and all(r.get("passed") for r in results.values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
