"""Where each inference service's replicas are: the targets to scrape and their phase.

Static lists here; Kubernetes pods / EndpointSlices in `scaler/ingest/kube_discovery.py`.
"""

from __future__ import annotations

from typing import Protocol

from scaler.config import InferenceService
from scaler.core.load import Endpoint, TargetPhase


class Discovery(Protocol):
    def endpoints(self, svc: InferenceService) -> list[Endpoint] | None:
        """Current endpoints of the service; None when not known (e.g. not synced yet)."""
        ...


class StaticDiscovery:
    """`targets.static`: every listed address is a serving replica."""

    def endpoints(self, svc: InferenceService) -> list[Endpoint] | None:
        if svc.targets.static is None:
            return None
        return [Endpoint(a, TargetPhase.SERVING) for a in svc.targets.static]
