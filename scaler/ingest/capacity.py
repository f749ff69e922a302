"""Pool capacity sources: a static GPU count, or live from Kubernetes nodes (watched).

Pure part: `capacity_from_nodes(nodes, pods, cfg, pool_name=...)` turns Kubernetes API JSON
(plain dicts, camelCase, as the API server sends them) into a `Capacity`. I/O part:
`NodeCapacityWatcher` keeps nodes (and, with subtractForeignPods, pods) current with the
official client's list + watch, re-listing when a watch expires (410 Gone), and reports
`None` (unknown: research fails closed) before its first complete list and when its watches
have been failing for longer than `staleAfterSeconds`. Without subtractForeignPods it may
also watch the research pods of a few namespaces (`pool.giveBack.namespaces`) for the
measured give-back only: that watch failing never makes capacity unknown.

Which nodes count (documented in docs/research-headroom.md):
* the node matches `labelSelector` (also filtered here, not only server-side);
* condition Ready is "True";
* schedulable: `spec.unschedulable` is not true (cordoned), it has no NoExecute taint, and
  none of the taints Kubernetes itself puts on unusable nodes (`node.kubernetes.io/
  unschedulable`, `not-ready`, `unreachable`, `network-unavailable`). Other NoSchedule
  taints count as schedulable: dedicated GPU pools taint their nodes (for example
  `nvidia.com/gpu=present:NoSchedule`) precisely so that only the pool's pods, which
  tolerate it, land there;
* its GPUs are `status.allocatable[resource]` (a Kubernetes quantity, floored to whole
  GPUs; absent or unparsable counts 0, which can only lend less).

Foreign GPUs (subtractForeignPods): the GPU requests of pods bound to a counted node, not
terminated (phase not Succeeded/Failed), and not labelled `<poolLabel>=<pool name>`.
Requests are the effective pod request (containers, init containers, sidecars), rounded
up; a pod that sets only a limit requests its limit (extended resources).

Research deletions (with the pods watched: all of them with subtractForeignPods, else the
research pods of `pool.giveBack.namespaces`): the pool's research pods (labelled
`gpu-pool-scaler.io/research-class`, as the chart does) whose deletion was requested and
that have not left yet, for the measured give-back (scaler/core/giveback.py).
"""

from __future__ import annotations

import functools
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any, Protocol

from kubernetes import client as k8s_client
from kubernetes.utils.quantity import parse_quantity

from scaler.config import CapacityConfig, NodeCapacity, PoolConfig
from scaler.core.accounting import Capacity
from scaler.ingest.kube_watch import Obj, Reflector, ReflectorStatus
from scaler.ingest.kube_watch import meta as obj_meta
from scaler.selector import LabelSelector

log = logging.getLogger(__name__)

# Taints the node lifecycle controller sets on nodes nothing new should run on.
UNUSABLE_TAINT_KEYS = frozenset(
    {
        "node.kubernetes.io/unschedulable",
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
        "node.kubernetes.io/network-unavailable",
    }
)
TERMINATED_PHASES = frozenset({"Succeeded", "Failed"})
# The chart labels every research Job's pod with its class (templates/scaledjobs.yaml).
RESEARCH_CLASS_LABEL = "gpu-pool-scaler.io/research-class"
# The research-pod watch (without subtractForeignPods) asks the server for Running pods
# only: research_deleting counts nothing else, and a pod that leaves Running (Succeeded,
# Failed when the kubelet has killed it) then arrives as DELETED, which is the moment
# research_deleting stops counting it too. The same map either way.
RESEARCH_FIELD_SELECTOR = "status.phase=Running"


def research_label_selector(pool_label: str, pool_name: str) -> str:
    """Server-side filter of the research-pod watch: what research_deleting keeps anyway
    (the research-class label, and `<poolLabel>=<pool name>`: not foreign)."""
    return f"{RESEARCH_CLASS_LABEL},{pool_label}={pool_name}"


def research_watch_namespaces(pool: PoolConfig) -> tuple[str, ...]:
    """Namespaces whose research pods the capacity watcher watches for the give-back: only
    with capacity from nodes, learning on and subtractForeignPods off (with it, every pod is
    watched already); sorted, unique."""
    nodes = pool.capacity.nodes
    if nodes is None or nodes.subtractForeignPods or not pool.giveBack.learn:
        return ()
    return tuple(sorted(set(pool.giveBack.namespaces)))


# --- pure capacity from API objects ----------------------------------------------------


def _quantity(q: Any) -> Decimal | None:
    """A Kubernetes quantity as a finite non-negative Decimal; None if unusable."""
    if q is None:
        return None
    try:
        d = parse_quantity(q)
    except (ValueError, TypeError, ArithmeticError):
        return None
    if not d.is_finite() or d < 0:
        return None
    return d


def node_exclusion(node: Obj, selector: LabelSelector) -> str | None:
    """Why this node's GPUs do not count (None: they count)."""
    meta = obj_meta(node)
    if not selector.matches(meta.get("labels")):
        return "not in pool"
    spec = node.get("spec") or {}
    if spec.get("unschedulable") is True:
        return "cordoned"
    for t in spec.get("taints") or ():
        key, effect = t.get("key"), t.get("effect")
        if key in UNUSABLE_TAINT_KEYS or effect == "NoExecute":
            return f"taint {key}:{effect}"
    conditions = (node.get("status") or {}).get("conditions") or ()
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    if ready is None or ready.get("status") != "True":
        return "NotReady"
    return None


def node_gpus(node: Obj, resource: str) -> int:
    """Allocatable GPUs of a node; absent or unparsable → 0 (lends less, never more)."""
    alloc = (node.get("status") or {}).get("allocatable") or {}
    q = _quantity(alloc.get(resource))
    return 0 if q is None else math.floor(q)


def _container_request(c: Obj, resource: str) -> Decimal:
    res = c.get("resources") or {}
    q = _quantity((res.get("requests") or {}).get(resource))
    if q is None:  # extended resources: a limit alone is also the request
        q = _quantity((res.get("limits") or {}).get(resource))
    return q or Decimal(0)


def pod_request(pod: Obj, resource: str) -> int:
    """Effective request of a pod, as the scheduler computes it, rounded up.

    max(Σ app containers + Σ sidecars, max over init containers of (its request + the
    sidecars started before it)); sidecars are init containers with restartPolicy Always.
    """
    spec = pod.get("spec") or {}
    app = sum((_container_request(c, resource) for c in spec.get("containers") or ()), Decimal(0))
    sidecars = Decimal(0)
    init_peak = Decimal(0)
    for c in spec.get("initContainers") or ():
        r = _container_request(c, resource)
        if c.get("restartPolicy") == "Always":
            sidecars += r
            init_peak = max(init_peak, sidecars)
        else:
            init_peak = max(init_peak, sidecars + r)
    return math.ceil(max(app + sidecars, init_peak))


def is_foreign(pod: Obj, pool_label: str, pool_name: str) -> bool:
    labels = obj_meta(pod).get("labels") or {}
    return labels.get(pool_label) != pool_name


def _rfc3339(v: Any) -> float | None:
    if not isinstance(v, str):
        return None
    try:
        t = datetime.fromisoformat(v)
    except ValueError:
        return None
    return t.timestamp() if t.tzinfo is not None else None


def research_deleting(pods: Iterable[Obj], pool_label: str, pool_name: str) -> dict[str, float]:
    """This pool's research pods whose deletion was requested and that still hold their GPUs:
    pod uid -> wall time of the request. The API server sets deletionTimestamp to the request
    time plus the pod's grace period (deletionGracePeriodSeconds), so the request is their
    difference. Only Running pods count: a pod deleted while still starting (phase Pending:
    pulling its image) leaves at once and says nothing about how long a running job takes
    to checkpoint and go. A pod with unreadable timestamps is left out (it cannot be measured)."""
    out: dict[str, float] = {}
    for pod in pods:
        meta = obj_meta(pod)
        if is_foreign(pod, pool_label, pool_name) or RESEARCH_CLASS_LABEL not in (
            meta.get("labels") or {}
        ):
            continue
        if (pod.get("status") or {}).get("phase") != "Running":
            continue
        at = _rfc3339(meta.get("deletionTimestamp"))
        grace = meta.get("deletionGracePeriodSeconds")
        if at is None or isinstance(grace, bool) or not isinstance(grace, int) or grace < 0:
            continue
        uid = meta.get("uid") or f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        out[str(uid)] = at - grace
    return out


def capacity_from_nodes(
    nodes: Iterable[Obj],
    pods: Iterable[Obj] | None,
    cfg: NodeCapacity,
    *,
    pool_name: str,
    observed_at: float | None = None,
    research_pods: Iterable[Obj] | None = None,
) -> Capacity:
    """Capacity of the pool from node (and pod) objects. `pods` is ignored unless
    cfg.subtractForeignPods; then None means "pods unknown" and raises ValueError.
    `research_pods` (the research-pod watch, without subtractForeignPods) only feeds
    `research_deleting`; None = not watched or unknown, and never touches the GPU counts."""
    selector = LabelSelector.parse(cfg.labelSelector)
    total = 0
    counted: dict[str, int] = {}
    excluded: dict[str, list[str]] = {}
    for node in nodes:
        name = str(obj_meta(node).get("name", "?"))
        why = node_exclusion(node, selector)
        if why is None:
            gpus = node_gpus(node, cfg.resource)
            if gpus == 0:
                why = f"no {cfg.resource}"
            else:
                counted[name] = gpus
                total += gpus
        if why is not None and why != "not in pool":
            excluded.setdefault(why, []).append(name)

    foreign = 0
    deleting: dict[str, float] | None = None
    free: tuple[int, ...] | None = None
    if cfg.subtractForeignPods:
        if pods is None:
            raise ValueError("subtractForeignPods needs the pod list")
        pods = list(pods)  # read twice: foreign requests, research deletions
        per_node: dict[str, int] = {}
        held: dict[str, int] = {}  # every pod's GPUs, the pool's own too
        for pod in pods:
            node_name = (pod.get("spec") or {}).get("nodeName")
            if node_name not in counted:
                continue
            if (pod.get("status") or {}).get("phase") in TERMINATED_PHASES:
                continue
            gpus = pod_request(pod, cfg.resource)
            held[node_name] = held.get(node_name, 0) + gpus
            if not is_foreign(pod, cfg.poolLabel, pool_name):
                continue
            per_node[node_name] = per_node.get(node_name, 0) + gpus
        # A node cannot lose more GPUs than it has (over-requests are the scheduler's bug).
        foreign = sum(min(g, counted[n]) for n, g in per_node.items())
        free = tuple(sorted((max(0, g - held.get(n, 0)) for n, g in counted.items()), reverse=True))
        deleting = research_deleting(pods, cfg.poolLabel, pool_name)
    elif research_pods is not None:
        deleting = research_deleting(research_pods, cfg.poolLabel, pool_name)

    parts = [f"{len(counted)} node(s), {total} {cfg.resource}"]
    parts += [f"{why}: {', '.join(sorted(names))}" for why, names in sorted(excluded.items())]
    if cfg.subtractForeignPods:
        parts.append(f"foreign pods hold {foreign}")
    return Capacity(
        total_gpus=total,
        foreign_gpus=foreign,
        source="nodes",
        observed_at=observed_at,
        nodes=len(counted),
        detail="; ".join(parts),
        research_deleting=deleting,
        free_by_node=free,
    )


# --- sources ---------------------------------------------------------------------------


class CapacitySource(Protocol):
    def current(self) -> Capacity | None: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...


class StaticCapacity:
    """A fixed GPU count from config."""

    def __init__(self, gpus: int) -> None:
        if gpus < 0:
            raise ValueError(f"static capacity must be >= 0, got {gpus}")
        self._cap = Capacity(total_gpus=gpus, source="static", detail=f"static {gpus} GPUs")

    def current(self) -> Capacity:
        return self._cap

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


class NodeCapacityWatcher:
    """Pool capacity from Kubernetes nodes, kept current by list + watch in two threads.

    `current()` is None until the first complete list (of nodes, and of pods when foreign
    pods are subtracted), and again whenever a watch has been failing (errors, no successful
    re-list) for longer than cfg.staleAfterSeconds. Call `start()` once, `stop()` on exit.

    `research_namespaces` (without subtractForeignPods; see research_watch_namespaces): one
    more watch per namespace, of the pool's Running research pods, for the measured
    give-back. Those never make `current()` None: until all of them have listed, or while
    one has been failing longer than staleAfterSeconds, `research_deleting` is None (not
    observed: the give-back keeps what it had) and capacity is as good as the node watch.
    """

    def __init__(
        self,
        api_client: k8s_client.ApiClient,
        cfg: NodeCapacity,
        *,
        pool_name: str,
        research_namespaces: Sequence[str] = (),
        clock: Callable[[], float] = time.monotonic,
        watch_timeout_seconds: int = 55,
        request_timeout_seconds: float = 10.0,
        retry_seconds: float = 1.0,
        max_retry_seconds: float = 30.0,
    ) -> None:
        LabelSelector.parse(cfg.labelSelector)  # fail at construction on a bad selector
        self._cfg = cfg
        self._pool_name = pool_name
        self._clock = clock
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        api = k8s_client.CoreV1Api(api_client)
        common: dict[str, Any] = {
            "clock": clock,
            "stop_event": self._stop,
            "lock": self._lock,
            "watch_timeout_seconds": watch_timeout_seconds,
            "request_timeout_seconds": request_timeout_seconds,
            "retry_seconds": retry_seconds,
            "max_retry_seconds": max_retry_seconds,
        }
        self._nodes = Reflector(
            "nodes", api.list_node, label_selector=cfg.labelSelector, field_selector="", **common
        )
        self._reflectors = [self._nodes]
        self._pods: Reflector | None = None
        if cfg.subtractForeignPods:
            # Only pods that are bound and not terminated can hold GPUs.
            self._pods = Reflector(
                "pods",
                api.list_pod_for_all_namespaces,
                label_selector="",
                field_selector="spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed",
                **common,
            )
            self._reflectors.append(self._pods)
        # Capacity depends on these; the research watches below only on themselves.
        self._capacity_reflectors = list(self._reflectors)
        self._research: list[Reflector] = []
        if not cfg.subtractForeignPods:
            selector = research_label_selector(cfg.poolLabel, pool_name)
            for ns in sorted(set(research_namespaces)):
                self._research.append(
                    Reflector(
                        f"research-pods/{ns}",
                        functools.partial(api.list_namespaced_pod, ns),
                        label_selector=selector,
                        field_selector=RESEARCH_FIELD_SELECTOR,
                        **common,
                    )
                )
            self._reflectors += self._research

    def start(self) -> None:
        if self._threads:
            return
        for r in self._reflectors:
            t = threading.Thread(target=r.run, name=f"capacity-{r.resource}", daemon=True)
            self._threads.append(t)
            t.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        # Interrupt repeatedly: Watch.stream() clears the client's stop flag when it starts,
        # so a stop() racing with a watch being opened must be repeated once it is open.
        deadline = time.monotonic() + timeout
        for t in self._threads:
            while t.is_alive() and time.monotonic() < deadline:
                for r in self._reflectors:
                    r.interrupt()
                t.join(0.05)

    def __enter__(self) -> NodeCapacityWatcher:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def status(self) -> list[ReflectorStatus]:
        return [r.status() for r in self._reflectors]

    def _usable(self, r: Reflector, now: float) -> bool:
        """Listed at least once and not failing for longer than staleAfterSeconds."""
        return r.synced and (
            r.failing_since is None or now - r.failing_since <= self._cfg.staleAfterSeconds
        )

    def current(self) -> Capacity | None:
        now = self._clock()
        with self._lock:
            if not all(self._usable(r, now) for r in self._capacity_reflectors):
                return None
            nodes = list(self._nodes.objects.values())
            pods = list(self._pods.objects.values()) if self._pods is not None else None
            confirmed = [
                r.confirmed_at for r in self._capacity_reflectors if r.confirmed_at is not None
            ]
            # All research namespaces or none: a pod missing only because its namespace's
            # watch is down must not read as "left" (a give-back measured too short).
            research: list[Obj] | None = None
            if self._research and all(self._usable(r, now) for r in self._research):
                research = [o for r in self._research for o in r.objects.values()]
        return capacity_from_nodes(
            nodes,
            pods,
            self._cfg,
            pool_name=self._pool_name,
            observed_at=min(confirmed) if confirmed else None,
            research_pods=research,
        )


def capacity_source(
    cfg: CapacityConfig,
    *,
    pool_name: str,
    api_client_factory: Callable[[], k8s_client.ApiClient],
    clock: Callable[[], float] = time.monotonic,
    research_namespaces: Sequence[str] = (),
) -> StaticCapacity | NodeCapacityWatcher:
    """The source the config asks for. The API client is built only for `nodes`."""
    if cfg.nodes is not None:
        return NodeCapacityWatcher(
            api_client_factory(),
            cfg.nodes,
            pool_name=pool_name,
            research_namespaces=research_namespaces,
            clock=clock,
        )
    assert cfg.gpus is not None  # config validation: exactly one of gpus / nodes
    return StaticCapacity(cfg.gpus)
