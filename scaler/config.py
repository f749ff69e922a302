"""Pool configuration: parsed once from YAML into typed, validated, immutable objects.

The schema is documented in README.md ("Configuration reference"; the interface rules in
docs/architecture.md, "Interfaces users depend on"); the Helm chart renders the same keys
into a ConfigMap, and `tests/test_chart.py` loads the rendered file with `load_config`, so
chart and code cannot drift. Keys are camelCase with the unit in the name; every field
that is not required has a default next to it. Unknown keys are errors: a typo such as
`waitingPerReplicas` must not silently fall back to a default.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, get_args
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from scaler.selector import LabelSelector

# KEDA metric names and Kubernetes object names: lowercase DNS-1123 labels.
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_DNS_RE = re.compile(DNS_LABEL)

Port = Annotated[int, Field(ge=1, le=65535)]
Name = Annotated[str, Field(pattern=DNS_LABEL, max_length=63)]


class ConfigError(Exception):
    """A configuration file that cannot be used. The message names the file and the key."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(f"{source}: " + "; ".join(problems))


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class TLSConfig(_Model):
    """TLS for the KEDA-facing gRPC port. Files are PEM, re-read when they change."""

    certFile: str
    keyFile: str
    clientCAFile: str | None = None  # set → mTLS: clients must present a cert signed by it


class ServerConfig(_Model):
    # IP address both servers bind: "0.0.0.0" all IPv4; "::" all IPv6 (and IPv4 on a
    # dual-stack node): the one that works in an IPv6-only cluster.
    listenAddress: str = "0.0.0.0"
    grpcPort: Port = 50051  # KEDA-facing ExternalScaler (+ grpc.health.v1)
    metricsPort: Port = 8080  # own /metrics, /healthz, /readyz
    # Read back the HPAs KEDA builds from our ScaledObjects and warn when their tolerance
    # swallows our answers (docs/operations.md). auto: when the config already talks to
    # Kubernetes (kubernetes targets or node capacity); needs get/list on HPAs.
    hpaCheck: Literal["auto", "on", "off"] = "auto"
    hpaCheckSeconds: Annotated[float, Field(ge=5)] = 60.0

    @field_validator("listenAddress")
    @classmethod
    def _ip(cls, v: str) -> str:
        try:
            return str(ipaddress.ip_address(v.strip().strip("[]")))
        except ValueError:
            raise ValueError(
                f"must be an IP address such as 0.0.0.0 or :: (got {v!r}); host names are "
                "not resolved for binding"
            ) from None

    tls: TLSConfig | None = None  # absent → plaintext gRPC
    # Policy memory (stabilization windows, learned batch/capacity, forecast history) is
    # written here and restored on start, so a restart or rolling update keeps it. Absent →
    # kept in memory only. `stateFile`: a local file (written atomically). `stateConfigMap`:
    # "namespace/name" of a ConfigMap the scaler may get/create/update (chart RBAC).
    stateFile: str | None = None
    stateConfigMap: str | None = None
    stateWriteSeconds: Annotated[float, Field(ge=1)] = 60.0  # at most one write per this long

    @field_validator("stateConfigMap")
    @classmethod
    def _configmap(cls, v: str | None) -> str | None:
        if v is None:
            return v
        ns, sep, name = v.partition("/")
        if (
            not sep
            or not _DNS_RE.match(ns)
            or not re.match(r"^[a-z0-9]([-.a-z0-9]*[a-z0-9])?$", name)
        ):
            raise ValueError(
                "must be namespace/name of a ConfigMap, e.g. gpu-pool/gpu-pool-scaler-state "
                f"(got {v!r})"
            )
        return v

    @model_validator(mode="after")
    def _one_state_store(self) -> ServerConfig:
        if self.stateFile is not None and self.stateConfigMap is not None:
            raise ValueError("set at most one of 'stateFile' (local) or 'stateConfigMap' (cluster)")
        return self


class NodeCapacity(_Model):
    """Capacity read live from Kubernetes nodes."""

    labelSelector: str = ""  # nodes of the pool, e.g. "gpu-pool=shared"; "" = all nodes
    resource: str = "nvidia.com/gpu"  # extended resource counted as GPUs
    subtractForeignPods: bool = False  # subtract GPUs requested by pods of neither pool side
    # Pods of either pool side (inference and research) carry `<poolLabel>: <pool.name>`;
    # with subtractForeignPods, GPU pods without it count as foreign.
    poolLabel: str = "gpu-pool-scaler.io/pool"
    # Watch failing longer than this → capacity unknown (research fails closed).
    staleAfterSeconds: Annotated[float, Field(gt=0)] = 60.0

    @field_validator("labelSelector")
    @classmethod
    def _selector(cls, v: str) -> str:
        LabelSelector.parse(v)  # a typo must fail the (re)load, not every control cycle
        return v


class CapacityConfig(_Model):
    gpus: Annotated[int, Field(ge=0)] | None = None  # static capacity (GPUs)
    nodes: NodeCapacity | None = None  # or: live from nodes

    @model_validator(mode="after")
    def _exactly_one(self) -> CapacityConfig:
        if (self.gpus is None) == (self.nodes is None):
            raise ValueError("set exactly one of 'gpus' (static) or 'nodes' (from Kubernetes)")
        return self


class AdaptiveReserve(_Model):
    """Extra reserve sized from recent inference demand growth (core.reserve); it does not
    fall while a smooth service's rate is rising and research gives GPUs back slower than
    that service's coldStartSeconds."""

    enabled: bool = False
    windowSeconds: Annotated[float, Field(gt=0)] = 3600.0  # trailing window of demand history
    leadTimeSeconds: Annotated[float, Field(gt=0)] = 300.0  # reclaim latency to cover
    maxGPUs: Annotated[int, Field(ge=0)] = 16  # cap on the adaptive part


Weekday = Literal["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
WEEKDAYS: tuple[str, ...] = get_args(Weekday)  # Monday 0 ... Sunday 6


def _listed_once(v: Sequence[str], what: str) -> None:
    dupes = sorted({x for x in v if v.count(x) > 1})
    if dupes:
        raise ValueError(f"{what}(s) listed twice: {', '.join(dupes)}")


def _zone(v: str) -> str:
    try:
        ZoneInfo(v)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a directory ("Europe")
        raise ValueError(
            f"unknown time zone {v!r}: an IANA name such as UTC, Europe/Berlin or America/New_York"
        ) from None
    return v


def _weekend_days(v: list[Weekday]) -> list[Weekday]:
    _listed_once(v, "day")
    if len(v) == len(WEEKDAYS):
        raise ValueError("all seven days are weekend days: set [] for every day alike")
    return v


TimeZone = Annotated[str, AfterValidator(_zone)]  # an IANA name
WeekendDays = Annotated[list[Weekday], AfterValidator(_weekend_days)]


class Forecast(_Model):
    """Forecast-aware decisions from a per-service history of needed replicas by time of week.

    The forecast may add replicas ahead of a predicted ramp and withhold GPUs from research
    classes whose Jobs would not reach a checkpoint before inference needs them back; it never
    lowers inference. It falls back to the reactive decision when the history is short or
    today does not fit it (docs/policy.md, "Forecast").
    """

    enabled: bool = False
    slotSeconds: Annotated[float, Field(ge=60, le=3600)] = 600.0  # history resolution
    historyDays: Annotated[int, Field(ge=1, le=35)] = 21  # days of history kept (bounded)
    minHistoryDays: Annotated[float, Field(ge=0.25, le=35)] = 1.0  # before: reactive only
    # A new replica may wait for a research pod's grace period before it can even load the
    # model: the chart gives research pods terminationGracePeriodSeconds 600.
    researchGraceSeconds: Annotated[float, Field(ge=0)] = 600.0
    # Today's last `fitHours` of observed need vs the forecast for the same slots: quieter
    # on average by more than `maxErrorFraction` of the forecast (and by more than 1
    # replica) = a day unlike the others (weekend, holiday), reactive only until it fits
    # again. A busier day keeps the forecast (a floor the reactive signals exceed).
    fitHours: Annotated[float, Field(gt=0, le=24)] = 2.0
    maxErrorFraction: Annotated[float, Field(gt=0)] = 0.35
    # The forecast acts only when it asks at least this share more than the load itself
    # asked over the scale-down window (and at least one replica more): a forecast within
    # the load's own noise held replicas for nothing on smooth services (ServeGen,
    # conversation week); on bursty ones it is a burst the reactive signals would be late for.
    # 0.3 since the window keeps the averaged load's ask (lower than before): with 0.2 the
    # forecast set ServeGen's target twice as often (bench: conversation 88.5 -> 92.9 % of the
    # oracle's harvest, ServeGen 72.7 -> 78.7 %, coding 82.2 -> 81.6 %).
    minAboveLoadFraction: Annotated[float, Field(ge=0)] = 0.3
    # A service whose request rate swings at least this much (typical |ln(5-min / 20-min
    # average)|, `core.ramp`; services with `slo:`, once an hour of rates is in) is bursty:
    # the forecast raises ahead for it, and the ramp signal stands aside while the forecast
    # predicts. A smoother rate is followed by the reactive and ramp signals, and the
    # forecast's raises there only cost research (bench: ServeGen 0.02-0.09, conversation
    # week 0.025-0.05; coding week 0.16-0.86). Withholding research stays. On a smoother rate
    # the slo signal sizes alone while the objective is met: the queue's hold band stands
    # aside, the queue raises only as far as its averaged load asks, and the slo signal steps
    # down with a deadband (`policy.SMOOTH_DEADBAND`, `SMOOTH_TOLERANCE`; forecast on or off).
    # 0 = every service swings.
    minRateSwing: Annotated[float, Field(ge=0)] = 0.12
    # The zone whose dates and clock times the history keeps (an IANA name): a service whose
    # users' day starts at local midnight and whose peak follows daylight-saving time sets
    # theirs; in UTC, a New York weekend starts on Friday at 19:00 or 20:00 local and
    # the 09:00 peak moves an hour in the slots twice a year. Changing it starts a new history.
    timeZone: TimeZone = "UTC"
    # Days (in `timeZone`) whose traffic is unlike the others'. Without a week of history a slot is
    # predicted from the last three days of the same kind (a Tuesday from Monday and Friday,
    # not from the weekend before it; a Sunday from Saturday), else from the last three
    # days. [] = every day alike (bench: conversation week 93.3 -> 95.7 % of the oracle's
    # harvest; coding week unchanged within its noise, seed 2 2.5 -> 2.2 % lost).
    weekendDays: WeekendDays = ["Saturday", "Sunday"]

    @model_validator(mode="after")
    def _consistent(self) -> Forecast:
        if self.minHistoryDays > self.historyDays:
            raise ValueError(
                f"minHistoryDays ({self.minHistoryDays}) exceeds historyDays "
                f"({self.historyDays}): the forecast would never start"
            )
        return self


class GiveBack(_Model):
    """How long research takes to give GPUs back, measured (docs/policy.md, "Give-back").

    A research pod's give-back is the time from its deletion being requested (preemption,
    Job deletion) to the pod leaving the pool, read from the pods the capacity watcher
    sees: every pod with `capacity.nodes.subtractForeignPods`, else the research pods of
    `namespaces`. Planned give-back = the longest of the last `samples`, never more than
    `pool.forecast.researchGraceSeconds` (the kubelet kills at the grace period); that value
    until `minSamples` are seen. It shortens the forecast's lead and the adaptive reserve's
    `leadTimeSeconds` by what research returns sooner.
    """

    learn: bool = True
    samples: Annotated[int, Field(ge=1, le=1000)] = 20  # last deletions that count
    minSamples: Annotated[int, Field(ge=1, le=1000)] = 5  # before: the configured grace
    # Namespaces the pool's research pods run in (the research Jobs'; the chart fills it in).
    # With capacity from nodes and subtractForeignPods off, the scaler watches only the
    # Running pods labelled gpu-pool-scaler.io/research-class of this pool there (least
    # privilege: a Role per namespace, no cluster-wide pod read). Empty: measured only when
    # subtractForeignPods already watches every pod, else never (the plan stays the grace).
    # Ignored with static capacity, with subtractForeignPods, and with learn off. A failing
    # watch here never makes capacity unknown: it only pauses the measuring.
    namespaces: list[str] = []

    @field_validator("namespaces")
    @classmethod
    def _namespaces(cls, v: list[str]) -> list[str]:
        for ns in v:
            if len(ns) > 63 or not _DNS_RE.match(ns):
                raise ValueError(
                    f"{ns!r} is not a Kubernetes namespace name (lowercase letters, digits "
                    "and '-', starting and ending with a letter or digit, at most 63 "
                    "characters), e.g. research"
                )
        _listed_once(v, "namespace")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> GiveBack:
        if self.minSamples > self.samples:
            raise ValueError(
                f"minSamples ({self.minSamples}) exceeds samples ({self.samples}): the "
                "measured give-back would never be used"
            )
        return self


class PoolConfig(_Model):
    name: Name  # required
    capacity: CapacityConfig
    reserveGPUs: Annotated[int, Field(ge=0)] = 0  # floor of GPUs always kept free
    adaptiveReserve: AdaptiveReserve = AdaptiveReserve()
    forecast: Forecast = Forecast()
    giveBack: GiveBack = GiveBack()


class ScrapeConfig(_Model):
    intervalSeconds: Annotated[float, Field(gt=0, le=3600)] = 5.0  # control-loop period
    timeoutSeconds: Annotated[float, Field(gt=0)] = 2.0  # per-target deadline (connect+read)
    staleAfterSeconds: Annotated[float, Field(gt=0)] = 30.0  # older data = missing data
    # A request unanswered at timeoutSeconds stays open this much longer and its answer
    # counts in the next cycle (engines that answer /metrics late under load); 0 = dropped.
    lateAnswerSeconds: Annotated[float, Field(ge=0)] = 0.0
    maxConcurrency: Annotated[int, Field(ge=1)] = 64  # targets scraped at once
    maxBodyBytes: Annotated[int, Field(ge=1024)] = 8 * 1024 * 1024  # larger response = failed
    bearerTokenFile: str | None = None  # sent as Authorization: Bearer (re-read per cycle)
    scheme: Literal["http", "https"] = "http"
    caFile: str | None = None  # CA bundle for https targets
    insecureSkipVerify: bool = False

    @model_validator(mode="after")
    def _consistent(self) -> ScrapeConfig:
        if self.timeoutSeconds > self.intervalSeconds:
            raise ValueError(
                "timeoutSeconds must not exceed intervalSeconds "
                f"({self.timeoutSeconds} > {self.intervalSeconds}): a cycle would overrun"
            )
        if self.staleAfterSeconds < self.intervalSeconds:
            raise ValueError(
                "staleAfterSeconds must be at least intervalSeconds "
                f"({self.staleAfterSeconds} < {self.intervalSeconds}): every sample would be stale"
            )
        if self.timeoutSeconds + self.lateAnswerSeconds > self.staleAfterSeconds:
            raise ValueError(
                "timeoutSeconds + lateAnswerSeconds must not exceed staleAfterSeconds "
                f"({self.timeoutSeconds} + {self.lateAnswerSeconds} > {self.staleAfterSeconds}): "
                "an answer that late would be stale data already"
            )
        return self


class KubernetesTargets(_Model):
    """Targets discovered from Kubernetes: pods by label selector, or a Service's EndpointSlices."""

    labelSelector: str | None = None  # pods matching it in `namespace`
    service: str | None = None  # or: EndpointSlices of this Service
    port: Port = 8000  # port of /metrics on each pod
    namespace: str | None = None  # default: the inference service's namespace

    @field_validator("labelSelector")
    @classmethod
    def _selector(cls, v: str | None) -> str | None:
        if v is not None:
            if not v.strip():
                raise ValueError("empty label selector would match every pod in the namespace")
            LabelSelector.parse(v)  # a typo must fail the (re)load, not every discovery
        return v

    @model_validator(mode="after")
    def _exactly_one(self) -> KubernetesTargets:
        if (self.labelSelector is None) == (self.service is None):
            raise ValueError(
                "set exactly one of 'labelSelector' (pods) or 'service' (EndpointSlices)"
            )
        return self


class Targets(_Model):
    static: list[str] | None = None  # "host:port" of each replica's /metrics
    kubernetes: KubernetesTargets | None = None
    metricsPath: str = "/metrics"

    @model_validator(mode="after")
    def _exactly_one(self) -> Targets:
        if (self.static is None) == (self.kubernetes is None):
            raise ValueError("set exactly one of 'static' or 'kubernetes'")
        for i, t in enumerate(self.static or ()):
            host, sep, port = t.rpartition(":")
            if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
                raise ValueError(f"static[{i}] {t!r} is not host:port")
        return self


class Thresholds(_Model):
    """Per-replica targets of each signal. A signal whose threshold is 0 or absent is off."""

    waitingPerReplica: Annotated[float, Field(ge=0)] = 0.0  # queued requests per ready replica
    kvCacheUsage: Annotated[float, Field(ge=0, le=1)] = 0.0  # KV-cache fraction (0-1)
    runningPerReplica: Annotated[float, Field(ge=0)] = 0.0  # running requests per replica
    tokensPerSecondPerReplica: Annotated[float, Field(ge=0)] = 0.0  # prompt+generation tok/s
    kvCacheAggregation: Literal["mean", "max"] = "mean"  # across replicas

    @model_validator(mode="after")
    def _one_on(self) -> Thresholds:
        if not any(
            (
                self.waitingPerReplica,
                self.kvCacheUsage,
                self.runningPerReplica,
                self.tokensPerSecondPerReplica,
            )
        ):
            raise ValueError("at least one threshold must be > 0, or the service never scales")
        return self


# Used when a service has no `thresholds:` block at all (llm-d's saturation levels).
DEFAULT_THRESHOLDS = Thresholds(waitingPerReplica=5.0, kvCacheUsage=0.8)


class ScaleUp(_Model):
    maxStepReplicas: Annotated[int, Field(ge=0)] = 0  # max replicas added per decision; 0 = no cap


class ScaleDown(_Model):
    # All signals low this long. 2x the HPA's 300 s: a scale-down lends GPUs to research,
    # and a re-raise soon after preempts pods that lose up to a checkpoint interval of work
    # (bench, coding trace: 7.3 % of the harvest lost with 300 s, 3.6 % with 600 s; docs/bench.md).
    stabilizationSeconds: Annotated[float, Field(ge=0)] = 600.0
    maxStepReplicas: Annotated[int, Field(ge=1)] = 1  # replicas removed per step
    stepSeconds: Annotated[float, Field(ge=0)] = 60.0  # min time between scale-down steps
    # Time constant (s) of the moving average of waiting and running requests whose ask the
    # window keeps (scale-ups read the load as it is). The window holds its highest ask, so
    # a queue that flickers into the hold zone once a minute otherwise holds a replica the
    # load does not need (bench, conversation week: 77.8 % -> 88.5 % of the oracle's harvest).
    # None: stabilizationSeconds / 10; 0: off (the window keeps the instantaneous asks).
    smoothingSeconds: Annotated[float, Field(ge=0)] | None = None

    @property
    def smoothing_s(self) -> float:
        if self.smoothingSeconds is None:
            return self.stabilizationSeconds / 10.0
        return self.smoothingSeconds


class Slo(_Model):
    """The latency objective of one service, measured from vLLM's histograms.

    "`attainment` of the requests get their first token within `ttftSeconds`, over the last
    `windowSeconds`". When the measured attainment falls below it, the `slo` signal asks for
    more replicas, sized from the request rate per replica the service was learned to serve
    at the objective; the other signals remain floors (docs/policy.md, "The SLO signal").
    """

    ttftSeconds: Annotated[float, Field(gt=0)] = 2.0  # time to first token objective (s)
    attainment: Annotated[float, Field(gt=0, lt=1)] = 0.99  # share of requests within it (0-1)
    windowSeconds: Annotated[float, Field(ge=30, le=3600)] = 300.0  # measured over this long
    itlSeconds: Annotated[float, Field(gt=0)] | None = None  # inter-token latency objective (s)
    # Fewer requests than this in the window: too few to tell the attainment apart from
    # noise; the slo signal asks nothing and the other signals decide. 0 = 1 / (1 - attainment).
    minRequests: Annotated[int, Field(ge=0)] = 0
    # The ramp signal (docs/policy.md, "The ramp signal"): while the request rate doubles
    # faster than this (s), ask now what it will need when a replica asked now is Ready
    # (cold start + research give-back), at most twice what it needs now. 0 = off.
    rampDoublingSeconds: Annotated[float, Field(ge=0)] = 7200.0

    @property
    def min_requests(self) -> int:
        return self.minRequests or max(10, round(1.0 / (1.0 - self.attainment)))


class Calendar(_Model):
    """A service's own calendar for the forecast history, where its users live elsewhere
    than the pool's (`pool.forecast`): unset keys are the pool's. Changing the zone starts
    that service's history over."""

    timeZone: TimeZone | None = None
    weekendDays: WeekendDays | None = None


class InferenceService(_Model):
    name: Name  # required; the ScaledObject trigger's `service` metadata
    namespace: str = "default"
    engine: Literal["vllm", "sglang", "tgi"] = "vllm"
    model: str | None = None  # select one `model_name` when a pod serves several
    gpusPerReplica: Annotated[int, Field(ge=1)]  # required
    minReplicas: Annotated[int, Field(ge=0)] = 1
    maxReplicas: Annotated[int, Field(ge=1)] = 16
    targets: Targets
    thresholds: Thresholds = DEFAULT_THRESHOLDS
    scaleUp: ScaleUp = ScaleUp()
    scaleDown: ScaleDown = ScaleDown()
    coldStartSeconds: Annotated[float, Field(ge=0)] = 180.0  # model load time of a new replica
    slo: Slo | None = None  # latency objective; absent = no slo signal
    # With pool.forecast enabled: whether this service uses it. Its level holds bursts of
    # a bursty service with a daily pattern; on a smooth one it holds more than it buys
    # (docs/policy.md, "Forecast"): false = reactive only, no history kept.
    forecast: bool = True
    calendar: Calendar | None = None  # the forecast's days for this service; unset: the pool's

    @model_validator(mode="after")
    def _bounds(self) -> InferenceService:
        if self.minReplicas > self.maxReplicas:
            raise ValueError(
                f"minReplicas ({self.minReplicas}) is greater than maxReplicas ({self.maxReplicas})"
            )
        if self.slo is not None and self.engine == "tgi":
            raise ValueError(
                "slo is measured from the engine's time-to-first-token histogram (vLLM, "
                "SGLang); engine 'tgi' exports none (remove 'slo' or use the queue/KV "
                "thresholds)"
            )
        return self


class QueueSecret(_Model):
    """The workers' Redis Secret, read by the scaler through the Kubernetes API (it needs
    `get` on that one Secret: the chart's Role). Re-read every minute, so a rotated
    password takes effect without a restart."""

    namespace: Annotated[str, Field(min_length=1)]  # required; the research class's
    name: Annotated[str, Field(min_length=1)]  # required
    # Key of a complete redis:// URL; unset: the URL is built from `queue.address`,
    # `queue.database` and the password (and user name) below.
    urlKey: Annotated[str, Field(min_length=1)] | None = None
    passwordKey: Annotated[str, Field(min_length=1)] = "password"
    usernameKey: Annotated[str, Field(min_length=1)] | None = None  # unset: the default user


class ResearchQueue(_Model):
    """The class is fed by the work queue (docs/research-queue.md): the scaler reads the
    class's outstanding items (waiting + leased) and answers KEDA min(slots, items), so an
    empty queue starts no Job. No answer from Redis: 0 slots (research fails closed).

    Where the queue's URL comes from: `urlFile` (a mounted Secret) or `secret` (the
    workers' Secret through the Kubernetes API), exactly one."""

    # File holding the queue's redis:// URL (a mounted Secret), read each cycle: a rotated
    # Secret takes effect without a restart.
    urlFile: Annotated[str, Field(min_length=1)] | None = None
    secret: QueueSecret | None = None
    # host:port of the queue's Redis, for a URL built from `secret`'s password.
    address: Annotated[str, Field(min_length=1)] | None = None
    prefix: Annotated[str, Field(min_length=1)] = "gps"  # key prefix: <prefix>:q:<class>
    # Per read (connect + reply); unset: scrape.timeoutSeconds (the read runs beside the
    # scrape, each cycle).
    timeoutSeconds: Annotated[float, Field(gt=0)] | None = None
    # The workers' Redis database (the chart sets it when it builds their URL, from
    # researchQueue.redis.databaseIndex). A URL selecting another one leaves the queue
    # unread with that reason: read there, the queue would look empty and start no Job.
    # Unset: the URL's database is trusted (0 for a URL built from `secret`).
    database: Annotated[int, Field(ge=0)] | None = None

    @model_validator(mode="after")
    def _one_source(self) -> ResearchQueue:
        if (self.urlFile is None) == (self.secret is None):
            raise ValueError(
                "give the queue's URL as urlFile (a mounted Secret) or secret (read through "
                "the Kubernetes API), exactly one"
            )
        if self.secret is not None and self.secret.urlKey is None and self.address is None:
            raise ValueError(
                "address (host:port) is required to build the URL from secret.passwordKey; "
                "or set secret.urlKey"
            )
        return self

    def timeout_s(self, scrape: ScrapeConfig) -> float:
        return self.timeoutSeconds if self.timeoutSeconds is not None else scrape.timeoutSeconds


class ResearchClass(_Model):
    name: Name  # required; the ScaledJob trigger's `researchClass` metadata
    gpusPerJob: Annotated[int, Field(ge=1)]  # required
    weight: Annotated[float, Field(gt=0)] = 1.0  # share of headroom among classes of a priority
    priority: int = 0  # higher priority classes are served first
    maxJobs: Annotated[int, Field(ge=0)] = 32  # cap on this class's slots
    # How often this class's Jobs save a checkpoint (s). With pool.forecast enabled, a new
    # Job is started only where the forecast says its GPUs stay free at least this long, so
    # it can save something before inference takes them back. 0 = the Jobs checkpoint on
    # SIGTERM within the grace period (the chart's contract): no forecast gate.
    checkpointIntervalSeconds: Annotated[float, Field(ge=0)] = 0.0
    queue: ResearchQueue | None = None  # set: Jobs only for queued items (see ResearchQueue)


def forecast_for(fc: Forecast, svc: InferenceService) -> Forecast:
    """The pool's forecast settings with the service's own calendar (`calendar:`)."""
    c = svc.calendar
    if c is None:
        return fc
    keys = {"timeZone": c.timeZone, "weekendDays": c.weekendDays}
    update = {k: v for k, v in keys.items() if v is not None}
    return fc.model_copy(update=update) if update else fc


class Config(_Model):
    server: ServerConfig = ServerConfig()
    pool: PoolConfig
    scrape: ScrapeConfig = ScrapeConfig()
    inference: list[InferenceService] = []
    research: list[ResearchClass] = []

    @model_validator(mode="after")
    def _unique_names(self) -> Config:
        for section, items in (("inference", self.inference), ("research", self.research)):
            seen: set[str] = set()
            for item in items:
                if item.name in seen:
                    raise ValueError(f"{section}: duplicate name {item.name!r}")
                seen.add(item.name)
        if not self.inference and not self.research:
            raise ValueError("nothing to scale: add at least one 'inference' or 'research' entry")
        for i, r in enumerate(self.research):
            # Read beside the scrape, each cycle: a slower read would stretch every cycle.
            t = r.queue.timeoutSeconds if r.queue is not None else None
            if t is not None and t > self.scrape.intervalSeconds:
                raise ValueError(
                    f"research[{i}].queue.timeoutSeconds must not exceed scrape.intervalSeconds "
                    f"({t} > {self.scrape.intervalSeconds}): the queue is "
                    "read every cycle"
                )
        return self

    def service(self, name: str) -> InferenceService | None:
        return next((s for s in self.inference if s.name == name), None)

    def research_class(self, name: str) -> ResearchClass | None:
        return next((r for r in self.research if r.name == name), None)


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.startswith(("function-after", "function-before")):
            continue  # pydantic's validator frames: not a key the user wrote
        else:
            out += ("." if out else "") + part
    return out or "(top level)"


def parse_config(data: Any, source: str = "<config>") -> Config:
    """Validate already-loaded YAML data. Raises ConfigError naming source and keys."""
    if not isinstance(data, dict):
        raise ConfigError(source, ["top level must be a mapping (server, pool, scrape, ...)"])
    try:
        return Config.model_validate(data)
    except ValidationError as e:
        problems = []
        for err in e.errors():
            msg = err["msg"].removeprefix("Value error, ")
            problems.append(f"{_loc(err['loc'])}: {msg}")
        raise ConfigError(source, problems) from None


def parse_config_text(text: str, source: str = "<config>") -> Config:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(source, [f"invalid YAML: {e}"]) from None
    return parse_config(data, source)


def load_config(path: str | Path) -> Config:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(str(p), [f"cannot read: {e.strerror or e}"]) from None
    except UnicodeDecodeError:
        raise ConfigError(str(p), ["not UTF-8 text"]) from None
    return parse_config_text(text, str(p))


def is_dns_label(name: str) -> bool:
    return bool(_DNS_RE.match(name))
