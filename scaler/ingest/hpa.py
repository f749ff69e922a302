"""Reading back the HPAs KEDA builds from our ScaledObjects: is our answer being followed?

KEDA turns each ScaledObject into an HPA (`keda-hpa-<name>`, label
`scaledobject.keda.sh/name: <name>`) whose external metric is ours,
`s<index>-inference-<service>`, target 1 (AverageValue). For such a metric the HPA's usage
ratio is `value / (target × current replicas)` = `desired / current`, and the HPA keeps the
current count while `|ratio − 1| ≤ tolerance`. The tolerance is the HPA's
`spec.behavior.scale{Up,Down}.tolerance` when the API server kept that field (it sits
behind the alpha `HPAConfigurableTolerance` gate, Kubernetes ≥ 1.33, and KEDA passes it
from 2.18 on), else the controller-manager's default, 10 %. With 10 % a one-replica step
from 10 replicas up is swallowed: the scaler says 11, the HPA stays at 10.

`hpa_views` and `ignored_by_tolerance` are pure; `HpaChecker` polls the API (an injected
list function per namespace) at a bounded rate for the control loop's caller.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes.utils import parse_quantity

log = logging.getLogger(__name__)

DEFAULT_TOLERANCE = 0.1  # kube-controller-manager --horizontal-pod-autoscaler-tolerance
# Every HPA KEDA builds carries `scaledobject.keda.sh/name` (the operator labels the
# ScaledObject, and the HPA gets its labels). Not `app.kubernetes.io/managed-by=keda-operator`:
# KEDA copies the ScaledObject's own labels over its defaults, so a Helm-installed
# ScaledObject yields `managed-by: Helm` and that selector found nothing (cluster/e2e.py).
KEDA_HPA_SELECTOR = "scaledobject.keda.sh/name"
_OUR_METRIC = re.compile(r"^s\d+-inference-(?P<service>[a-z0-9]([-a-z0-9]*[a-z0-9])?)$")

Obj = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class HpaView:
    namespace: str
    name: str
    service: str  # the inference service whose metric this HPA follows
    current: int  # status.currentReplicas
    desired: int  # status.desiredReplicas
    tolerance_up: float  # in force: the field if the API server kept it, else the default
    tolerance_down: float
    tolerance_field: bool  # spec.behavior carries a tolerance (the alpha gate kept it)


def _tolerance(behavior: Obj, direction: str) -> float | None:
    rules = behavior.get(direction)
    if not isinstance(rules, Mapping) or "tolerance" not in rules:
        return None
    try:
        # A Quantity: the API server returns it canonical ("50m" for 0.05), never a float.
        return float(parse_quantity(rules["tolerance"]))
    except (TypeError, ValueError):
        return None


def hpa_views(objs: Iterable[Obj]) -> list[HpaView]:
    """The HPAs among `objs` that follow one of our inference metrics."""
    out = []
    for o in objs:
        meta, spec, status = (o.get(k) or {} for k in ("metadata", "spec", "status"))
        for m in spec.get("metrics") or ():
            name = ((m.get("external") or {}).get("metric") or {}).get("name", "")
            match = _OUR_METRIC.match(str(name))
            if m.get("type") != "External" or match is None:
                continue
            behavior = spec.get("behavior") or {}
            up, down = _tolerance(behavior, "scaleUp"), _tolerance(behavior, "scaleDown")
            out.append(
                HpaView(
                    namespace=str(meta.get("namespace", "")),
                    name=str(meta.get("name", "")),
                    service=match["service"],
                    current=int(status.get("currentReplicas") or 0),
                    desired=int(status.get("desiredReplicas") or 0),
                    tolerance_up=DEFAULT_TOLERANCE if up is None else up,
                    tolerance_down=DEFAULT_TOLERANCE if down is None else down,
                    tolerance_field=up is not None or down is not None,
                )
            )
    return out


def ignored_by_tolerance(ours: int | None, hpa: HpaView) -> str | None:
    """Why the HPA is not following our answer because of its tolerance, or None."""
    if ours is None or hpa.current <= 0 or ours == hpa.current or hpa.desired != hpa.current:
        return None
    ratio = ours / hpa.current
    tol = hpa.tolerance_up if ratio > 1 else hpa.tolerance_down
    if abs(ratio - 1.0) > tol:
        return None
    return (
        f"HPA {hpa.namespace}/{hpa.name} keeps {hpa.current} replicas while the scaler asks "
        f"for {ours}: ratio {ratio:.3f} is within its tolerance {tol:g}"
        + ("" if hpa.tolerance_field else " (the HPA carries no tolerance field: the 10 % default)")
    )


class HpaChecker:
    """Polls the KEDA-made HPAs of the given namespaces every `period_s` seconds."""

    def __init__(
        self,
        list_hpas: Callable[[str], Sequence[Obj]],  # namespace -> raw HPA objects
        *,
        period_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._list = list_hpas
        self._period = period_s
        self._clock = clock
        self._last: float | None = None
        self.views: dict[str, HpaView] = {}  # service -> its HPA
        self.error: str | None = None

    def poll(self, namespaces: Iterable[str]) -> bool:
        """Re-read the HPAs if the period has passed. Returns True when it read."""
        now = self._clock()
        if self._last is not None and now - self._last < self._period:
            return False
        self._last = now
        views: dict[str, HpaView] = {}
        try:
            for ns in sorted(set(namespaces)):
                for v in hpa_views(self._list(ns)):
                    views[v.service] = v
        except Exception as e:  # RBAC missing, API down: a diagnostic, never fatal
            if self.error is None:
                log.warning("cannot read HPAs (the tolerance check is paused): %s", e)
            self.error = f"{type(e).__name__}: {e}"[:300]
            return True
        self.error = None
        self.views = views
        return True
