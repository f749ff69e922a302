"""KEDA ExternalScaler servicer: a thin adapter over the latest Decision snapshot.

Handlers never scrape or compute; they resolve the trigger's metadata against the config
the snapshot was made under and read one number. Contract facts, and how each is applied
here: docs/keda-contract.md.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass

import grpc

from scaler._proto import externalscaler_pb2 as pb
from scaler._proto import externalscaler_pb2_grpc as pb_grpc
from scaler.config import Config
from scaler.core.decision import Decision
from scaler.serve.metrics import ScalerMetrics
from scaler.serve.snapshot import Snapshots

log = logging.getLogger("scaler.grpc")

# KEDA strips the `s<index>-` prefix before GetMetrics; tolerate it anyway.
_KEDA_PREFIX = re.compile(r"^s\d+-")
_MAX_KEY_LEN = 253


class RequestError(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class Target:
    kind: str  # "inference" | "research"
    name: str
    activation: float

    @property
    def metric_name(self) -> str:
        return f"{self.kind}-{self.name}"


def metric_name_for(kind: str, name: str) -> str:
    return f"{kind}-{name}"


def _known(names: list[str]) -> str:
    return ", ".join(sorted(names)) or "(none configured)"


def resolve(metadata: Mapping[str, str], cfg: Config | None) -> Target:
    """Which service or research class a trigger means. Raises RequestError(INVALID_ARGUMENT)."""
    if cfg is None:
        raise RequestError(grpc.StatusCode.UNAVAILABLE, "scaler is starting: no config loaded yet")
    service = metadata.get("service", "").strip()
    rclass = metadata.get("researchClass", "").strip()
    if service and rclass:
        raise RequestError(
            grpc.StatusCode.INVALID_ARGUMENT,
            "metadata sets both 'service' and 'researchClass': a ScaledObject trigger sets "
            "'service', a ScaledJob trigger sets 'researchClass'",
        )
    pool = metadata.get("pool", "").strip()
    if pool and pool != cfg.pool.name:
        raise RequestError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"metadata 'pool' is {pool[:64]!r} but this scaler serves pool {cfg.pool.name!r}",
        )
    raw_act = metadata.get("activationThreshold", "").strip()
    activation = 0.0
    if raw_act:
        try:
            activation = float(raw_act)
        except ValueError:
            activation = math.nan
        if not math.isfinite(activation) or activation < 0:
            raise RequestError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"metadata 'activationThreshold' must be a number >= 0, got {raw_act[:64]!r}",
            )
    if service:
        if cfg.service(service) is None:
            raise RequestError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"metadata 'service' names unknown inference service {service[:64]!r}; "
                f"known: {_known([s.name for s in cfg.inference])}",
            )
        return Target("inference", service, activation)
    if rclass:
        if cfg.research_class(rclass) is None:
            raise RequestError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"metadata 'researchClass' names unknown research class {rclass[:64]!r}; "
                f"known: {_known([r.name for r in cfg.research])}",
            )
        if raw_act:
            raise RequestError(
                grpc.StatusCode.INVALID_ARGUMENT,
                "metadata 'activationThreshold' does not apply to a research trigger: it is "
                "always active, so that KEDA's ScaledJob `min` counts its 0 "
                "(docs/keda-contract.md)",
            )
        return Target("research", rclass, activation)
    raise RequestError(
        grpc.StatusCode.INVALID_ARGUMENT,
        "metadata needs 'service' (ScaledObject; known: "
        f"{_known([s.name for s in cfg.inference])}) or 'researchClass' (ScaledJob; known: "
        f"{_known([r.name for r in cfg.research])})",
    )


def is_active(t: Target, value: float) -> bool:
    """Inference: value > activationThreshold. Research: always. KEDA's ScaledJob `min`
    leaves inactive triggers out (KEDA 2.20.2, seen in cluster/e2e.py): a research trigger
    inactive at 0 slots would let a work-queue trigger alone start Jobs on GPUs inference
    needs. Active at 0, it is counted and the ScaledJob gets 0 Jobs."""
    return True if t.kind == "research" else value > t.activation


def too_old(decision: Decision, now: float) -> str | None:
    """Why the decision must not be served as current (the control loop stopped producing
    new ones), or None. The limit is the data staleness limit: a decision older than the
    data it may rest on is no better than stale data."""
    if decision.made_at is None or decision.config is None:
        return None
    age = now - decision.made_at
    limit = decision.config.scrape.staleAfterSeconds
    if age <= limit:
        return None
    return f"latest decision is {age:.0f}s old (limit scrape.staleAfterSeconds={limit:g}s)"


def value_of(target: Target, decision: Decision, stale: str | None = None) -> int:
    """The metric value for a trigger. Inference without fresh data -> UNAVAILABLE.

    Research never errors (KEDA silently skips a failing ScaledJob trigger): it fails
    closed with 0 slots instead. `stale`: why the decision itself is too old to serve.
    """
    if stale is not None:
        if target.kind == "research":
            return 0
        raise RequestError(grpc.StatusCode.UNAVAILABLE, f"service {target.name!r}: {stale}")
    if target.kind == "research":
        r = decision.research.get(target.name)
        return r.slots if r is not None else 0
    s = decision.services.get(target.name)
    value = None if s is None else s.keda_value
    if value is None:
        why = "no decision yet (first scrape cycle not complete)" if s is None else s.reason
        raise RequestError(
            grpc.StatusCode.UNAVAILABLE, f"no fresh data for service {target.name!r}: {why}"
        )
    return value


def _safe_metadata(md: Mapping[str, str]) -> dict[str, str]:
    """Metadata for logs: values of *FromEnv keys (may be secrets) are never logged."""
    out = {}
    for k, v in list(md.items())[:20]:
        k = k[:64]
        out[k] = "<redacted>" if k.endswith("FromEnv") else v[:64]
    return out


class ExternalScalerServicer(pb_grpc.ExternalScalerServicer):
    def __init__(
        self,
        snapshots: Snapshots,
        metrics: ScalerMetrics,
        *,
        config: Callable[[], Config | None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._snapshots = snapshots
        self._metrics = metrics
        # The config in force: GetMetricSpec needs nothing else, so it answers from the
        # moment the server listens (KEDA's reconcile calls it first, also on restarts).
        self._config = config
        self._clock = clock  # the control loop's clock: Decision.made_at is on it
        self._stale_logged: int | None = None  # seq of the too-old decision last logged

    def _staleness(self, d: Decision) -> str | None:
        why = too_old(d, self._clock())
        if why is not None:
            self._metrics.stale_answers.inc()
            if self._stale_logged != d.seq:  # once per stuck decision, not per call
                self._stale_logged = d.seq
                log.warning(
                    "serving no current decision: %s; inference UNAVAILABLE (KEDA fallback), "
                    "research 0 slots",
                    why,
                )
        return why

    async def _fail(
        self,
        context: grpc.aio.ServicerContext,
        method: str,
        ref: pb.ScaledObjectRef,
        e: RequestError,
    ) -> None:
        self._metrics.grpc_requests.labels(method, e.code.name).inc()
        level = logging.INFO if e.code is grpc.StatusCode.UNAVAILABLE else logging.WARNING
        log.log(
            level,
            "%s rejected: %s",
            method,
            e.message,
            extra={
                "method": method,
                "scaled_object": ref.name[:253],
                "namespace": ref.namespace[:63],
                "fields": {"code": e.code.name, "metadata": _safe_metadata(ref.scalerMetadata)},
            },
        )
        await context.abort(e.code, e.message)

    def _done(self, method: str, start: float) -> None:
        self._metrics.grpc_requests.labels(method, "OK").inc()
        self._metrics.grpc_latency.labels(method).observe(time.perf_counter() - start)

    async def IsActive(
        self, request: pb.ScaledObjectRef, context: grpc.aio.ServicerContext
    ) -> pb.IsActiveResponse:
        start = time.perf_counter()
        d = self._snapshots.latest()
        try:
            t = resolve(request.scalerMetadata, d.config)
            active = is_active(t, value_of(t, d, self._staleness(d)))
        except RequestError as e:
            await self._fail(context, "IsActive", request, e)
            raise  # unreachable: abort raises
        self._done("IsActive", start)
        return pb.IsActiveResponse(result=active)

    async def StreamIsActive(
        self, request: pb.ScaledObjectRef, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.IsActiveResponse]:
        d = self._snapshots.latest()
        try:
            t = resolve(request.scalerMetadata, d.config)
        except RequestError as e:
            await self._fail(context, "StreamIsActive", request, e)
            return
        self._metrics.grpc_requests.labels("StreamIsActive", "OK").inc()
        self._metrics.open_streams.inc()
        last: bool | None = None
        try:
            while True:
                try:
                    active: bool | None = is_active(t, value_of(t, d, too_old(d, self._clock())))
                except RequestError:
                    active = None  # no data: say nothing rather than a made-up false
                if active is not None and active != last:
                    yield pb.IsActiveResponse(result=active)
                    last = active
                d = await self._snapshots.wait_newer(d.seq)
                if d.config is not None and (
                    (t.kind == "inference" and d.config.service(t.name) is None)
                    or (t.kind == "research" and d.config.research_class(t.name) is None)
                ):
                    await context.abort(
                        grpc.StatusCode.NOT_FOUND,
                        f"{t.kind} {t.name!r} was removed from the config",
                    )
        finally:
            self._metrics.open_streams.dec()

    async def GetMetricSpec(
        self, request: pb.ScaledObjectRef, context: grpc.aio.ServicerContext
    ) -> pb.GetMetricSpecResponse:
        start = time.perf_counter()
        cfg = self._snapshots.latest().config
        if cfg is None and self._config is not None:
            cfg = self._config()
        try:
            t = resolve(request.scalerMetadata, cfg)
        except RequestError as e:
            await self._fail(context, "GetMetricSpec", request, e)
            raise
        self._done("GetMetricSpec", start)
        # Target 1 with AverageValue: the HPA's desired replicas = ceil(value / 1) = value.
        return pb.GetMetricSpecResponse(
            metricSpecs=[pb.MetricSpec(metricName=t.metric_name, targetSize=1, targetSizeFloat=1.0)]
        )

    async def GetMetrics(
        self, request: pb.GetMetricsRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetMetricsResponse:
        start = time.perf_counter()
        ref = request.scaledObjectRef
        d = self._snapshots.latest()
        try:
            t = resolve(ref.scalerMetadata, d.config)
            asked = _KEDA_PREFIX.sub("", request.metricName)
            if asked != t.metric_name:
                raise RequestError(
                    grpc.StatusCode.NOT_FOUND,
                    f"unknown metricName {request.metricName[:128]!r}; this trigger's metric is "
                    f"{t.metric_name!r}",
                )
            value = value_of(t, d, self._staleness(d))
        except RequestError as e:
            await self._fail(context, "GetMetrics", ref, e)
            raise
        self._done("GetMetrics", start)
        return pb.GetMetricsResponse(
            metricValues=[
                pb.MetricValue(
                    metricName=t.metric_name, metricValue=value, metricValueFloat=float(value)
                )
            ]
        )
