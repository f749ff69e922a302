"""The scaler's own Prometheus metrics, built on an injected registry (no globals)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from scaler.core.decision import Decision, replica_room

_PREFIX = "gpu_pool_scaler_"


class OutcomeCounter:
    """A counter by `result`, one value for success and one for failure, both exported at
    0 from start: a labelled series first exported at 1 has no earlier sample, so
    `increase()` (the alerts) would miss the first failure. The values are named here
    only; the parts call `record(ok)`."""

    def __init__(self, counter: Counter, ok: str, failed: str) -> None:
        self.counter, self.ok, self.failed = counter, ok, failed
        counter.labels(ok)
        counter.labels(failed)

    def record(self, ok: bool) -> None:
        self.counter.labels(self.ok if ok else self.failed).inc()


class ScalerMetrics:
    """Counters and histograms the parts push, plus the decision gauges, which are read
    from the latest Decision at scrape time (`DecisionCollector`): what /metrics shows is
    always one consistent snapshot, and services removed by a reload simply vanish."""

    def __init__(
        self, registry: CollectorRegistry, decisions: Callable[[], Decision] | None = None
    ) -> None:
        self.registry = registry
        registry.register(DecisionCollector(decisions or Decision.initial))
        p = _PREFIX

        def gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> Gauge:
            return Gauge(p + name, doc, labels, registry=registry)

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
        self.config_reloads = OutcomeCounter(
            Counter(
                p + "config_reloads",
                "Config reloads by result (ok, invalid: the config in force is kept).",
                ("result",),
                registry=registry,
            ),
            "ok",
            "invalid",
        )
        self.config_generation = gauge("config_generation", "Generation of the config in force.")
        self.hpa_ignoring = gauge(
            "hpa_ignoring_answer",
            "1 while the HPA KEDA built for the service keeps its replicas because our "
            "answer is within its tolerance (server.hpaCheck).",
            ("service",),
        )
        self.hpa_tolerance = gauge(
            "hpa_tolerance",
            "Tolerance in force on the service's HPA (0.1 when the field was dropped).",
            ("service", "direction"),
        )
        self.tls_reloads = OutcomeCounter(
            Counter(
                p + "tls_reloads",
                "Rotated gRPC TLS files examined, by result (ok, invalid: old ones kept).",
                ("result",),
                registry=registry,
            ),
            "ok",
            "invalid",
        )
        self.queue_secret_reads = OutcomeCounter(
            Counter(
                p + "research_queue_secret_reads",
                "Reads of the work queues' Secrets through the Kubernetes API (research[]."
                "queue.secret), by result (ok, error: the credentials read before are kept, "
                "if any).",
                ("result",),
                registry=registry,
            ),
            "ok",
            "error",
        )


class DecisionCollector(Collector):
    """The decision gauges, computed from the latest Decision at each scrape.

    A value the decision does not have is left out, never shown as 0: no `desired` without
    fresh data, no signal reading when the signal abstained."""

    def __init__(self, decisions: Callable[[], Decision]) -> None:
        self._decisions = decisions

    def collect(self) -> Iterator[GaugeMetricFamily]:
        d = self._decisions()
        p = _PREFIX

        def fam(name: str, doc: str, labels: tuple[str, ...] = ()) -> GaugeMetricFamily:
            return GaugeMetricFamily(p + name, doc, labels=list(labels))

        desired = fam("desired_replicas", "Replica target per inference service.", ("service",))
        current = fam(
            "current_replicas", "Replicas that exist (ready + starting + unhealthy).", ("service",)
        )
        ready = fam("ready_replicas", "Replicas serving with fresh metrics.", ("service",))
        starting = fam("starting_replicas", "Replicas discovered, not Ready.", ("service",))
        fresh = fam(
            "service_data_fresh",
            "1 when every replica of the service has fresh data.",
            ("service",),
        )
        sig_value = fam(
            "signal_value", "Observed value of each policy signal.", ("service", "signal")
        )
        sig_replicas = fam(
            "signal_replicas", "Replicas each policy signal asks for.", ("service", "signal")
        )
        unread = fam(
            "queue_unread",
            "1 while the service holds or scales down with at least one request waiting per "
            "ready replica and no signal reading the queue (waitingPerReplica 0, no slo): "
            "explain's 'queue unread' line.",
            ("service",),
        )
        # The latency objective (services with `slo:`, on cycles with fresh data): what is
        # asked, what was measured over the window and the capacity learned; a value not
        # measured or not learned yet is left out (an alert must not read it as a miss).
        slo_objective = fam(
            "slo_objective",
            "Share of requests that must meet the service's latency objective (0-1).",
            ("service",),
        )
        slo_ttft = fam(
            "slo_ttft_seconds", "The objective's time to first token, seconds.", ("service",)
        )
        slo_attainment = fam(
            "slo_attainment",
            "Share of requests with a first token within slo_ttft_seconds over the slo "
            "window (absent: fewer than minRequests).",
            ("service",),
        )
        slo_itl = fam(
            "slo_itl_attainment",
            "Share of token intervals within the inter-token objective over the slo window "
            "(only with slo.itlSeconds).",
            ("service",),
        )
        slo_capacity = fam(
            "slo_capacity_requests_per_second",
            "Learned requests/s one ready replica serves at the objective (absent: not "
            "learned yet).",
            ("service",),
        )
        for name, sd in d.services.items():
            unread.add_metric([name], 1 if sd.queue_note else 0)
            if sd.slo is not None:
                slo_objective.add_metric([name], sd.slo.objective)
                slo_ttft.add_metric([name], sd.slo.ttft_s)
                if sd.slo.attainment is not None:
                    slo_attainment.add_metric([name], sd.slo.attainment)
                if sd.slo.itl_attainment is not None:
                    slo_itl.add_metric([name], sd.slo.itl_attainment)
                if sd.slo.capacity_rps is not None:
                    slo_capacity.add_metric([name], sd.slo.capacity_rps)
            if sd.desired is not None:
                desired.add_metric([name], sd.desired)
            current.add_metric([name], sd.current)
            ready.add_metric([name], sd.ready)
            starting.add_metric([name], sd.starting)
            fresh.add_metric([name], 1 if sd.fresh else 0)
            for v in sd.signals:
                if not v.abstain:
                    # The slo signal's value is the measured attainment: while too few
                    # requests measure it, its verdict carries a placeholder 1.0 (it asks
                    # nothing then), which must not read as "objective met".
                    unmeasured = v.signal == "slo" and (sd.slo is None or sd.slo.attainment is None)
                    if not unmeasured:
                        sig_value.add_metric([name, v.signal], v.value)
                    sig_replicas.add_metric([name, v.signal], v.replicas)
        slots = fam("research_slots", "Total research Job slots per class.", ("research_class",))
        items = fam(
            "research_queue_items",
            "Outstanding work-queue items (waiting + leased) of each queue-fed research class; "
            "absent while its queue is unread (the class then gets 0 slots).",
            ("research_class",),
        )
        unread_q = fam(
            "research_queue_unread",
            "1 while a queue-fed research class's work queue cannot be read (it gets 0 slots), "
            "0 once read; absent for classes without a queue.",
            ("research_class",),
        )
        for name, r in d.research.items():
            slots.add_metric([name], r.slots)
            if r.queued_items is not None:
                items.add_metric([name], r.queued_items)
            if r.queued_items is not None or r.queue_error is not None:
                unread_q.add_metric([name], 1 if r.queue_error is not None else 0)
        pool_gpus = fam(
            "pool_gpus",
            "Pool split in GPUs (capacity, inference, reserve, foreign, headroom, research; "
            "free: no pod holds them, with the pods watched).",
            ("part",),
        )
        known = fam("capacity_known", "1 when pool capacity is known.")
        if d.pool is not None:
            parts = {
                "capacity": d.pool.capacity or 0,
                "inference": d.pool.inference_gpus,
                "reserve": d.pool.reserve_gpus,
                "foreign": d.pool.foreign_gpus,
                "headroom": d.pool.headroom_gpus,
                "research": d.pool.research_gpus,
            }
            if d.pool.free_by_node is not None:  # pods watched (subtractForeignPods)
                parts["free"] = sum(d.pool.free_by_node)
            for part, value in parts.items():
                pool_gpus.add_metric([part], value)
            known.add_metric([], 0 if d.pool.capacity is None else 1)
        give_back = fam(
            "research_give_back_seconds",
            "Research give-back: planned (what the forecast and reserve look ahead by) and "
            "measured (longest recent research pod deletion, asked -> gone).",
            ("kind",),
        )
        if d.give_back is not None:
            give_back.add_metric(["planned"], d.give_back.seconds)
            if d.give_back.measured is not None:
                give_back.add_metric(["measured"], d.give_back.measured)
        last = fam("last_cycle_timestamp_seconds", "Unix time of the last cycle.")
        if d.seq > 0:
            last.add_metric([], d.wall_time)
        yield from (desired, current, ready, starting, fresh, sig_value, sig_replicas, unread)
        yield from (slo_objective, slo_ttft, slo_attainment, slo_itl, slo_capacity)
        room = fam(
            "replica_room",
            "Replicas of each service that would bind now without preempting (its GPUs free "
            'on one node); below pool_gpus{part="free"} / gpusPerReplica the free GPUs are '
            "fragmented. Only with the pods watched (subtractForeignPods).",
            ("service",),
        )
        if d.pool is not None and d.pool.free_by_node is not None and d.config is not None:
            for svc in d.config.inference:
                room.add_metric([svc.name], replica_room(d.pool.free_by_node, svc.gpusPerReplica))
        yield from (slots, items, unread_q, pool_gpus, known, room, give_back, last)
