"""The scaler's own Prometheus metrics, built on an injected registry (no globals)."""

from __future__ import annotations

import contextlib

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from scaler.core.decision import Decision

_PREFIX = "gpu_pool_scaler_"


class ScalerMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        p = _PREFIX

        def gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> Gauge:
            return Gauge(p + name, doc, labels, registry=registry)

        self.desired = gauge(
            "desired_replicas", "Replica target per inference service.", ("service",)
        )
        self.current = gauge(
            "current_replicas", "Replicas that exist (ready + starting + unhealthy).", ("service",)
        )
        self.ready = gauge("ready_replicas", "Replicas serving with fresh metrics.", ("service",))
        self.starting = gauge("starting_replicas", "Replicas discovered, not Ready.", ("service",))
        self.fresh = gauge(
            "service_data_fresh",
            "1 when every replica of the service has fresh data.",
            ("service",),
        )
        self.signal_value = gauge(
            "signal_value", "Observed value of each policy signal.", ("service", "signal")
        )
        self.signal_replicas = gauge(
            "signal_replicas", "Replicas each policy signal asks for.", ("service", "signal")
        )
        self.research_slots = gauge(
            "research_slots", "Total research Job slots per class.", ("research_class",)
        )
        self.pool_gpus = gauge(
            "pool_gpus",
            "Pool split in GPUs (capacity, inference, reserve, foreign, headroom, research).",
            ("part",),
        )
        self.capacity_known = gauge("capacity_known", "1 when pool capacity is known.")
        self.harvested = Counter(
            p + "harvested_gpu_hours",
            "GPU-hours lent to research slots since start.",
            registry=registry,
        )
        self.scrapes = Counter(
            p + "scrape", "Target scrapes by result.", ("service", "result"), registry=registry
        )
        self.scrape_duration = Histogram(
            p + "scrape_duration_seconds",
            "Duration of one target scrape.",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5),
            registry=registry,
        )
        self.cycle_duration = Histogram(
            p + "cycle_duration_seconds",
            "Wall time of one control-loop cycle.",
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10),
            registry=registry,
        )
        self.cycles = Counter(p + "cycles", "Control-loop cycles completed.", registry=registry)
        self.last_cycle = gauge("last_cycle_timestamp_seconds", "Unix time of the last cycle.")
        self.grpc_requests = Counter(
            p + "grpc_requests", "KEDA gRPC requests.", ("method", "code"), registry=registry
        )
        self.grpc_latency = Histogram(
            p + "grpc_request_duration_seconds",
            "Handling time of unary KEDA gRPC requests.",
            ("method",),
            buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05),
            registry=registry,
        )
        self.open_streams = gauge("open_streams", "Open StreamIsActive streams.")
        self.stale_answers = Counter(
            p + "stale_decision_answers",
            "Answers given while the latest decision was older than scrape.staleAfterSeconds "
            "(inference UNAVAILABLE, research 0 slots).",
            registry=registry,
        )
        self.config_reloads = Counter(
            p + "config_reloads", "Config reloads by result.", ("result",), registry=registry
        )
        self.config_generation = gauge("config_generation", "Generation of the config in force.")
        self.tls_reloads = Counter(
            p + "tls_reloads",
            "Rotated gRPC TLS files examined, by result (ok, invalid: old ones kept).",
            ("result",),
            registry=registry,
        )

    def observe_decision(self, d: Decision) -> None:
        for name, s in d.services.items():
            if s.desired is not None:
                self.desired.labels(name).set(s.desired)
            self.current.labels(name).set(s.current)
            self.ready.labels(name).set(s.ready)
            self.starting.labels(name).set(s.starting)
            self.fresh.labels(name).set(1 if s.fresh else 0)
            for sig in s.signals:
                if sig.abstain:  # no reading this cycle: drop the series, never show a fake 0
                    with contextlib.suppress(KeyError):
                        self.signal_value.remove(name, sig.signal)
                        self.signal_replicas.remove(name, sig.signal)
                    continue
                self.signal_value.labels(name, sig.signal).set(sig.value)
                self.signal_replicas.labels(name, sig.signal).set(sig.replicas)
        for name, r in d.research.items():
            self.research_slots.labels(name).set(r.slots)
        if d.pool is not None:
            pool = d.pool
            self.capacity_known.set(0 if pool.capacity is None else 1)
            parts = {
                "capacity": pool.capacity or 0,
                "inference": pool.inference_gpus,
                "reserve": pool.reserve_gpus,
                "foreign": pool.foreign_gpus,
                "headroom": pool.headroom_gpus,
                "research": pool.research_gpus,
            }
            for part, v in parts.items():
                self.pool_gpus.labels(part).set(v)
        self.last_cycle.set(d.wall_time)
        self.config_generation.set(d.config_generation)

    def forget(self, services: set[str], classes: set[str]) -> None:
        """Drop label sets of services/classes removed by a config reload."""
        for g in (self.desired, self.current, self.ready, self.starting, self.fresh):
            for labels in list(g._metrics):  # prometheus_client has no public label listing
                if labels[0] not in services:
                    g.remove(*labels)
        for g in (self.signal_value, self.signal_replicas):
            for labels in list(g._metrics):
                if labels[0] not in services:
                    g.remove(*labels)
        for labels in list(self.research_slots._metrics):
            if labels[0] not in classes:
                self.research_slots.remove(*labels)
