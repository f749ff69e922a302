"""Targets from Kubernetes (`targets.kubernetes`): pods by label selector, or a Service's
EndpointSlices, kept current by the official client's list + watch (re-list on 410 Gone).

Pure part: `pod_endpoints` / `slice_endpoints` turn API JSON into Endpoints. I/O part:
`KubeDiscovery` starts one watcher thread per (kind, namespace, selector, port) the first
time a service asks for it, and answers from memory afterwards (the control loop never
waits on the API server).

What counts (documented in docs/ingestion.md):
* SERVING: a Running pod whose Ready condition is True and that has an IP; an EndpointSlice
  endpoint whose `conditions.ready` is true or absent (the API: nil means ready).
* STARTING: a pod not Ready yet (scheduled, pulling, loading the model), or a not-ready,
  not-terminating endpoint. A pod without an IP yet is STARTING with the address
  `namespace/name`, which the scraper does not dial.
* Left out: finished pods (Succeeded/Failed), pods being deleted, terminating endpoints:
  capacity that is going away is not capacity.
`endpoints()` is None (targets unknown: the policy holds) until the first complete list,
and again while the watch has been failing for longer than `stale_after_s`.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s_client

from scaler.config import InferenceService, KubernetesTargets
from scaler.core.load import Endpoint, TargetPhase
from scaler.ingest.kube_watch import Reflector

log = logging.getLogger(__name__)

Obj = Mapping[str, Any]
SERVICE_NAME_LABEL = "kubernetes.io/service-name"  # set on every EndpointSlice of a Service


def _address(ip: str, port: int) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def _pod_ready(pod: Obj) -> bool:
    for c in (pod.get("status") or {}).get("conditions") or ():
        if c.get("type") == "Ready":
            return c.get("status") == "True"
    return False


def pod_endpoints(pods: Iterable[Obj], port: int) -> list[Endpoint]:
    """Pods -> Endpoints, sorted by address (pure)."""
    out: list[Endpoint] = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        status = pod.get("status") or {}
        if meta.get("deletionTimestamp") or status.get("phase") in ("Succeeded", "Failed"):
            continue
        ip = status.get("podIP")
        if not ip:
            out.append(
                Endpoint(f"{meta.get('namespace')}/{meta.get('name')}", TargetPhase.STARTING)
            )
            continue
        serving = status.get("phase") == "Running" and _pod_ready(pod)
        out.append(
            Endpoint(_address(ip, port), TargetPhase.SERVING if serving else TargetPhase.STARTING)
        )
    return sorted(out, key=lambda e: e.address)


def slice_endpoints(slices: Iterable[Obj], port: int) -> list[Endpoint]:
    """EndpointSlices of one Service -> Endpoints, deduplicated across slices (pure)."""
    phases: dict[str, TargetPhase] = {}
    for sl in slices:
        for ep in sl.get("endpoints") or ():
            cond = ep.get("conditions") or {}
            if cond.get("terminating") is True:
                continue
            addresses = ep.get("addresses") or ()
            if not addresses:
                continue
            addr = _address(str(addresses[0]), port)  # consumers use the first address
            ready = cond.get("ready") is not False  # nil means ready
            if ready or addr not in phases:
                phases[addr] = TargetPhase.SERVING if ready else TargetPhase.STARTING
    return [Endpoint(a, phases[a]) for a in sorted(phases)]


@dataclass(frozen=True, slots=True)
class _Key:
    kind: str  # "pods" | "endpointslices"
    namespace: str
    selector: str  # label selector (pods) or Service name (slices)
    port: int


class _Watch:
    def __init__(
        self, key: _Key, reflector: Reflector, lock: threading.Lock, stop: threading.Event
    ) -> None:
        self.key = key
        self.reflector = reflector
        self.lock = lock
        self.stop = stop
        self.thread = threading.Thread(
            target=reflector.run, name=f"discovery-{key.kind}-{key.selector}", daemon=True
        )
        self.last_used = 0.0


class KubeDiscovery:
    """The Discovery for `targets.kubernetes`. Call `close()` on exit."""

    def __init__(
        self,
        api_client: k8s_client.ApiClient,
        *,
        clock: Callable[[], float] = time.monotonic,
        stale_after_s: float = 60.0,
        idle_stop_s: float = 600.0,
        watch_timeout_seconds: int = 55,
        request_timeout_seconds: float = 10.0,
        retry_seconds: float = 1.0,
        max_retry_seconds: float = 30.0,
    ) -> None:
        self._core = k8s_client.CoreV1Api(api_client)
        self._discovery = k8s_client.DiscoveryV1Api(api_client)
        self._clock = clock
        self._stale_after = stale_after_s
        self._idle_stop = idle_stop_s
        self._opts: dict[str, Any] = {
            "watch_timeout_seconds": watch_timeout_seconds,
            "request_timeout_seconds": request_timeout_seconds,
            "retry_seconds": retry_seconds,
            "max_retry_seconds": max_retry_seconds,
        }
        self._closed = False
        self._watches: dict[_Key, _Watch] = {}
        self._mu = threading.Lock()

    @staticmethod
    def _key(svc: InferenceService, kt: KubernetesTargets) -> _Key:
        ns = kt.namespace or svc.namespace
        if kt.service is not None:
            return _Key("endpointslices", ns, kt.service, kt.port)
        return _Key("pods", ns, kt.labelSelector or "", kt.port)

    def _start(self, key: _Key) -> _Watch:
        lock = threading.Lock()
        stop = threading.Event()
        list_fn: Callable[..., Any]
        if key.kind == "pods":
            list_fn = functools.partial(self._core.list_namespaced_pod, key.namespace)
            selector = key.selector
        else:
            list_fn = functools.partial(
                self._discovery.list_namespaced_endpoint_slice, key.namespace
            )
            selector = f"{SERVICE_NAME_LABEL}={key.selector}"
        reflector = Reflector(
            f"{key.kind} {key.namespace}/{key.selector}",
            list_fn,
            label_selector=selector,
            field_selector="",
            clock=self._clock,
            stop_event=stop,
            lock=lock,
            **self._opts,
        )
        w = _Watch(key, reflector, lock, stop)
        w.thread.start()
        log.info("watching %s in %s (%s) for targets", key.kind, key.namespace, key.selector)
        return w

    def endpoints(self, svc: InferenceService) -> list[Endpoint] | None:
        kt = svc.targets.kubernetes
        if kt is None:
            return None
        key = self._key(svc, kt)
        now = self._clock()
        with self._mu:
            if self._closed:
                return None
            w = self._watches.get(key)
            if w is None:
                w = self._watches[key] = self._start(key)
            w.last_used = now
            self._stop_idle(now)
        status = w.reflector.status()
        if not status.synced:
            return None
        if status.failing_since is not None and now - status.failing_since > self._stale_after:
            return None  # the view may be arbitrarily old: targets unknown
        with w.lock:
            objs = list(w.reflector.objects.values())
        if key.kind == "pods":
            return pod_endpoints(objs, key.port)
        return slice_endpoints(objs, key.port)

    def _stop_idle(self, now: float) -> None:
        """Stop watches no service asked for in a while (a reload changed the selector).

        Called holding self._mu; the thread ends on its own once interrupted.
        """
        for key, w in list(self._watches.items()):
            if now - w.last_used > self._idle_stop:
                del self._watches[key]
                w.stop.set()
                w.reflector.interrupt()

    def status(self) -> dict[str, Any]:
        with self._mu:
            return {
                f"{k.kind} {k.namespace}/{k.selector}": w.reflector.status()
                for k, w in self._watches.items()
            }

    def close(self, timeout: float = 5.0) -> None:
        with self._mu:
            self._closed = True
            watches = list(self._watches.values())
            self._watches.clear()
        for w in watches:
            w.stop.set()
            w.reflector.interrupt()
        for w in watches:
            w.thread.join(timeout)
