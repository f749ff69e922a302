"""What the scaler knows about a service's load: plain immutable data, no I/O.

Flow: Endpoint (discovered) + ScrapeResult (scraped: an EngineSample, one target, one
scrape) -> TargetState (with rates and staleness) -> ServiceLoad (one service,
aggregated). The policy reads ServiceLoad.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Literal

from scaler.core.histogram import Buckets

# A KV-cache usage above this is not a fraction 0-1 (vLLM kv_cache_usage_perc, SGLang
# token_usage): garbage. The slack covers a mean's rounding, not an engine reporting percent.
KV_USAGE_MAX = 1.0 + 1e-6


@dataclass(frozen=True, slots=True)
class EngineSample:
    """Load read from one target's /metrics at one instant, summed over its engines."""

    waiting: float  # queued requests (sum over engines)
    running: float  # requests in the running batch (sum over engines)
    kv_usage_mean: float  # KV-cache fraction 0-1, mean over engines
    kv_usage_max: float  # KV-cache fraction 0-1, max over engines
    prompt_tokens_total: float | None = None  # counters (sum over engines); None = absent
    generation_tokens_total: float | None = None
    preemptions_total: float | None = None
    process_start_seconds: float | None = None  # process_start_time_seconds, for reset detection
    engines: int = 1
    # vLLM histograms (cumulative, summed over engines; bounds as exported), None = absent.
    ttft_buckets: Buckets | None = None  # vllm:time_to_first_token_seconds
    itl_buckets: Buckets | None = None  # vllm:inter_token_latency_seconds (older: per output token)


class TargetPhase(Enum):
    SERVING = "serving"  # discovered and Ready: counts as capacity
    STARTING = "starting"  # discovered, not Ready yet (model loading): capacity on the way


@dataclass(frozen=True, slots=True)
class TargetState:
    """One replica as of the latest scrape."""

    address: str
    phase: TargetPhase
    sample: EngineSample | None  # latest good sample (None: never scraped successfully)
    sampled_at: float | None  # monotonic time of `sample`
    error: str | None = None  # latest scrape error; None if the latest scrape succeeded
    tokens_per_s: float | None = None  # prompt+generation tokens/s from counter deltas
    preemptions_per_s: float | None = None
    # Histogram observations since the previous good scrape, set only in the update that
    # brought a new sample (so a held sample is never counted twice); None after a reset.
    ttft_delta: Buckets | None = None
    itl_delta: Buckets | None = None
    delta_s: float | None = None  # interval those deltas cover

    def fresh(self, now: float, stale_after: float) -> bool:
        return self.sampled_at is not None and now - self.sampled_at <= stale_after


@dataclass(frozen=True, slots=True)
class ServiceLoad:
    """One inference service's load, aggregated over its fresh serving targets."""

    name: str
    ready: int  # serving targets with fresh data
    starting: int  # discovered but not Ready (cold start in progress)
    unhealthy: int  # serving targets without fresh data
    waiting: float  # sum over ready targets
    running: float
    kv_usage_mean: float  # mean over ready targets
    kv_usage_max: float
    tokens_per_s: float | None  # sum over ready targets with a rate; None = no rate yet
    complete: bool  # every serving target has fresh data
    reason: str = ""  # why the data is incomplete, for the SRE
    # SLO measurement this cycle (vLLM, SGLang): histogram deltas summed over the fresh targets
    # that have one; requests/s = first tokens per second, scaled to every fresh target.
    ttft: Buckets | None = None
    itl: Buckets | None = None
    requests_per_s: float | None = None

    @property
    def current(self) -> int:
        """Replicas that exist now (serving or on the way)."""
        return self.ready + self.unhealthy + self.starting

    @property
    def usable(self) -> bool:
        """Enough data to decide on: every serving target fresh and at least one of them."""
        return self.complete and self.ready > 0


Engine = Literal["vllm", "sglang", "tgi"]


@dataclass(frozen=True, slots=True)
class Endpoint:
    address: str  # host:port ([v6]:port); "namespace/pod" for a pod without an IP yet
    phase: TargetPhase


# Outcome of one scrape, for the `result` label of the scrape counter.
Outcome = Literal[
    "ok", "no_data", "timeout", "http_error", "connect_error", "too_large", "malformed"
]


@dataclass(frozen=True, slots=True)
class ScrapeJob:
    address: str  # host:port
    engine: Engine = "vllm"
    model: str | None = None
    path: str = "/metrics"
    scheme: str = "http"
    ttft: bool = False  # also read the TTFT histogram (a service with an SLO)
    itl: bool = False  # also read the inter-token latency histogram (slo.itlSeconds set)


@dataclass(frozen=True, slots=True)
class ScrapeResult:
    job: ScrapeJob
    sample: EngineSample | None  # None: failed, or no engine families
    error: str | None  # None on success; "no engine metrics" when the target exports none
    at: float  # clock time when the response was complete
    duration_s: float
    outcome: Outcome = "ok"
    body_bytes: int = 0
