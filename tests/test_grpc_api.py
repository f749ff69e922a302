"""Every KEDA RPC through a real grpc.aio server on 127.0.0.1, with stubs from the proto.

The servicer only reads Decision snapshots, so these tests publish hand-made snapshots
and check what KEDA would see.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import replace

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from prometheus_client import CollectorRegistry

from scaler._proto import externalscaler_pb2 as pb
from scaler._proto import externalscaler_pb2_grpc as pb_grpc
from scaler.config import Config, parse_config
from scaler.core.decision import Decision, ServiceDecision
from scaler.serve.grpc_api import ExternalScalerServicer
from scaler.serve.metrics import ScalerMetrics
from scaler.serve.snapshot import Snapshots
from tests.support.decisions import CONFIG, decision, svc


class Harness:
    def __init__(self, config: Config | None = None) -> None:
        self.snapshots = Snapshots()
        self.metrics = ScalerMetrics(CollectorRegistry())
        self.server = grpc.aio.server()
        self.now = 5000.0  # the control loop's clock, as the servicer reads it
        servicer = ExternalScalerServicer(
            self.snapshots,
            self.metrics,
            config=(lambda: config) if config is not None else None,
            clock=lambda: self.now,
        )
        pb_grpc.add_ExternalScalerServicer_to_server(servicer, self.server)
        self.health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.channel = grpc.aio.insecure_channel(f"127.0.0.1:{self.port}")
        self.stub = pb_grpc.ExternalScalerStub(self.channel)

    def open_streams(self) -> float:
        return self.metrics.registry.get_sample_value("gpu_pool_scaler_open_streams") or 0.0


@pytest.fixture
async def h() -> AsyncIterator[Harness]:
    harness = Harness()
    await harness.server.start()
    harness.snapshots.publish(decision(1, svc("chat", 3)))
    yield harness
    await harness.channel.close()
    await harness.server.stop(0)


def ref(**md: str) -> pb.ScaledObjectRef:
    return pb.ScaledObjectRef(name="so", namespace="serving", scalerMetadata=md)


KEDA_KEYS = {"scalerAddress": "gps.keda:50051", "enableTLS": "false", "unsafeSsl": "false"}


async def test_metric_spec_is_stable_and_sets_both_target_fields(h: Harness) -> None:
    for md, name in (
        ({"service": "chat"}, "inference-chat"),
        ({"researchClass": "eval"}, "research-eval"),
    ):
        for _ in range(2):  # HPA targets are rebuilt only on change: must be stable
            resp = await h.stub.GetMetricSpec(ref(**md, **KEDA_KEYS))
            assert [(s.metricName, s.targetSize, s.targetSizeFloat) for s in resp.metricSpecs] == [
                (name, 1, 1.0)
            ]


async def test_get_metrics_reports_desired_replicas_in_both_fields(h: Harness) -> None:
    resp = await h.stub.GetMetrics(
        pb.GetMetricsRequest(
            scaledObjectRef=ref(service="chat", **KEDA_KEYS), metricName="inference-chat"
        )
    )
    assert [(v.metricName, v.metricValue, v.metricValueFloat) for v in resp.metricValues] == [
        ("inference-chat", 3, 3.0)
    ]


async def test_get_metrics_reports_research_slots(h: Harness) -> None:
    resp = await h.stub.GetMetrics(
        pb.GetMetricsRequest(scaledObjectRef=ref(researchClass="eval"), metricName="research-eval")
    )
    assert (resp.metricValues[0].metricValue, resp.metricValues[0].metricValueFloat) == (5, 5.0)


async def test_keda_prefixed_metric_name_is_accepted(h: Harness) -> None:
    resp = await h.stub.GetMetrics(
        pb.GetMetricsRequest(scaledObjectRef=ref(service="chat"), metricName="s0-inference-chat")
    )
    assert resp.metricValues[0].metricValue == 3


@pytest.mark.parametrize(
    ("md", "threshold_active"),
    [
        pytest.param({"service": "chat"}, True, id="inference-3-above-default-0"),
        pytest.param(
            {"service": "chat", "activationThreshold": "3"}, False, id="inference-3-not-above-3"
        ),
        pytest.param(
            {"service": "chat", "activationThreshold": "2.5"}, True, id="inference-3-above-2.5"
        ),
        pytest.param(
            {"service": "chat", "activationThreshold": "0"}, True, id="inference-3-above-0-given"
        ),
        pytest.param({"researchClass": "eval"}, True, id="research-5-slots"),
        # research: always active, its 0 included (KEDA's ScaledJob `min` skips inactive ones)
        pytest.param({"researchClass": "train"}, True, id="research-0-slots-still-active"),
    ],
)
async def test_is_active_compares_value_with_activation_threshold(
    h: Harness, md: dict[str, str], threshold_active: bool
) -> None:
    assert (await h.stub.IsActive(ref(**md))).result is threshold_active


ERROR_CASES = [
    pytest.param(
        {},
        "GetMetricSpec",
        grpc.StatusCode.INVALID_ARGUMENT,
        ["'service'", "'researchClass'", "chat, code", "eval, train"],
        id="no-key",
    ),
    pytest.param(
        {"service": "nope"},
        "GetMetricSpec",
        grpc.StatusCode.INVALID_ARGUMENT,
        ["'service'", "'nope'", "known: chat, code"],
        id="unknown-service",
    ),
    pytest.param(
        {"researchClass": "nope"},
        "IsActive",
        grpc.StatusCode.INVALID_ARGUMENT,
        ["'researchClass'", "known: eval, train"],
        id="unknown-research-class",
    ),
    pytest.param(
        {"service": "chat", "researchClass": "eval"},
        "GetMetricSpec",
        grpc.StatusCode.INVALID_ARGUMENT,
        ["both"],
        id="both-keys",
    ),
    pytest.param(
        {"service": "chat", "activationThreshold": "lots"},
        "IsActive",
        grpc.StatusCode.INVALID_ARGUMENT,
        ["'activationThreshold'", "'lots'"],
        id="bad-activation",
    ),
    pytest.param(
        {"service": "chat", "activationThreshold": "-1"},
        "IsActive",
        grpc.StatusCode.INVALID_ARGUMENT,
        ["'activationThreshold'"],
        id="negative-activation",
    ),
    pytest.param(
        {"researchClass": "eval", "activationThreshold": "2"},
        "IsActive",
        grpc.StatusCode.INVALID_ARGUMENT,
        ["'activationThreshold'", "research trigger", "always active"],
        id="activation-on-research",
    ),
    pytest.param(
        {"service": "chat", "pool": "other"},
        "GetMetricSpec",
        grpc.StatusCode.INVALID_ARGUMENT,
        ["'pool'", "shared-h100"],
        id="wrong-pool",
    ),
    pytest.param(
        {"service": "nope"},
        "GetMetrics",
        grpc.StatusCode.INVALID_ARGUMENT,
        ["'service'"],
        id="get-metrics-unknown-service",
    ),
]


@pytest.mark.parametrize(("md", "method", "code", "needles"), ERROR_CASES)
async def test_bad_trigger_metadata_is_invalid_argument_naming_the_key(
    h: Harness, md: dict[str, str], method: str, code: grpc.StatusCode, needles: list[str]
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        if method == "GetMetrics":
            await h.stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref(**md), metricName="x"))
        else:
            await getattr(h.stub, method)(ref(**md))
    assert exc.value.code() == code
    for needle in needles:
        assert needle in (exc.value.details() or "")


async def test_unknown_metric_name_is_not_found(h: Harness) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await h.stub.GetMetrics(
            pb.GetMetricsRequest(scaledObjectRef=ref(service="chat"), metricName="inference-code")
        )
    assert exc.value.code() == grpc.StatusCode.NOT_FOUND
    assert "inference-chat" in (exc.value.details() or "")


@pytest.mark.parametrize(
    "chat",
    [
        pytest.param(None, id="no-decision-yet"),
        pytest.param(svc("chat", None, fresh=False, ready=0), id="never-had-data"),
        pytest.param(svc("chat", 4, fresh=False, ready=0), id="all-targets-stale"),
    ],
)
async def test_inference_without_fresh_data_is_unavailable_never_zero(
    h: Harness, chat: ServiceDecision | None
) -> None:
    h.snapshots.publish(decision(2, chat))
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await h.stub.GetMetrics(
            pb.GetMetricsRequest(scaledObjectRef=ref(service="chat"), metricName="inference-chat")
        )
    assert exc.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "chat" in (exc.value.details() or "")
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await h.stub.IsActive(ref(service="chat"))
    assert exc.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_partial_data_serves_the_held_value(h: Harness) -> None:
    # One target failed, the other is fresh: the policy held the target; KEDA gets it.
    h.snapshots.publish(decision(2, svc("chat", 4, fresh=False, ready=1)))
    resp = await h.stub.GetMetrics(
        pb.GetMetricsRequest(scaledObjectRef=ref(service="chat"), metricName="inference-chat")
    )
    assert resp.metricValues[0].metricValue == 4


async def test_research_fails_closed_with_zero_not_an_error(h: Harness) -> None:
    h.snapshots.publish(decision(2, svc("chat", 4, fresh=False, ready=0), eval_slots=0))
    resp = await h.stub.GetMetrics(
        pb.GetMetricsRequest(scaledObjectRef=ref(researchClass="eval"), metricName="research-eval")
    )
    assert resp.metricValues[0].metricValue == 0
    # Active at 0: KEDA's ScaledJob `min` leaves inactive triggers out (research is safe
    # only when its 0 is counted).
    assert (await h.stub.IsActive(ref(researchClass="eval"))).result is True


async def test_before_first_cycle_inference_unavailable_research_zero() -> None:
    harness = Harness()
    await harness.server.start()
    try:
        harness.snapshots.publish(Decision(seq=0, wall_time=0.0, config=CONFIG))
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await harness.stub.IsActive(ref(service="chat"))
        assert exc.value.code() == grpc.StatusCode.UNAVAILABLE
        assert (await harness.stub.IsActive(ref(researchClass="eval"))).result is True
        research = pb.GetMetricsRequest(
            scaledObjectRef=ref(researchClass="eval"), metricName="research-eval"
        )
        assert (await harness.stub.GetMetrics(research)).metricValues[0].metricValue == 0
    finally:
        await harness.channel.close()
        await harness.server.stop(0)


async def test_metric_spec_answers_from_the_config_before_the_first_cycle() -> None:
    """KEDA calls GetMetricSpec first on every reconcile: it needs only the config, so a
    restarting scaler answers it at once; the values still wait for data."""
    harness = Harness(config=CONFIG)
    await harness.server.start()
    try:
        assert harness.snapshots.latest().seq == 0 and harness.snapshots.latest().config is None
        for md, name in (
            ({"service": "chat"}, "inference-chat"),
            ({"researchClass": "eval"}, "research-eval"),
        ):
            spec = await harness.stub.GetMetricSpec(ref(**md))
            assert [(m.metricName, m.targetSize) for m in spec.metricSpecs] == [(name, 1)]
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await harness.stub.GetMetricSpec(ref(service="nope"))
        assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # still validated
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await harness.stub.GetMetrics(
                pb.GetMetricsRequest(
                    scaledObjectRef=ref(service="chat"), metricName="inference-chat"
                )
            )
        assert exc.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        await harness.channel.close()
        await harness.server.stop(0)


async def test_metric_spec_without_config_or_data_is_unavailable() -> None:
    harness = Harness()  # no config source wired: nothing to answer from
    await harness.server.start()
    try:
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await harness.stub.GetMetricSpec(ref(service="chat"))
        assert exc.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        await harness.channel.close()
        await harness.server.stop(0)


@pytest.mark.parametrize(
    ("age", "stale"),
    [
        pytest.param(29.0, False, id="within-staleAfterSeconds"),
        pytest.param(30.0, False, id="exactly-staleAfterSeconds"),  # as data: older is stale
        pytest.param(31.0, True, id="older"),
    ],
)
async def test_a_decision_older_than_stale_after_is_not_served_as_current(
    h: Harness, caplog: pytest.LogCaptureFixture, age: float, stale: bool
) -> None:
    """A control loop that stopped producing decisions (every cycle failing) must not keep
    serving its last one: inference UNAVAILABLE (KEDA's fallback), research 0 slots."""
    d = decision(7, svc("chat", 3), eval_slots=5)
    h.snapshots.publish(replace(d, made_at=h.now - age))  # staleAfterSeconds: default 30
    req = pb.GetMetricsRequest(scaledObjectRef=ref(service="chat"), metricName="inference-chat")
    research = pb.GetMetricsRequest(
        scaledObjectRef=ref(researchClass="eval"), metricName="research-eval"
    )
    if stale:
        for _ in range(2):
            with pytest.raises(grpc.aio.AioRpcError) as exc:
                await h.stub.GetMetrics(req)
            assert exc.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "31s old" in (exc.value.details() or "")
        assert (await h.stub.GetMetrics(research)).metricValues[0].metricValue == 0
        assert (await h.stub.IsActive(ref(researchClass="eval"))).result is True
        assert (
            h.metrics.registry.get_sample_value("gpu_pool_scaler_stale_decision_answers_total") == 4
        )
        logged = [r for r in caplog.records if "serving no current decision" in r.getMessage()]
        assert len(logged) == 1  # once per stuck decision, not per call
    else:
        assert (await h.stub.GetMetrics(req)).metricValues[0].metricValue == 3
        assert (await h.stub.GetMetrics(research)).metricValues[0].metricValue == 5


async def test_from_env_values_are_never_logged(
    h: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with pytest.raises(grpc.aio.AioRpcError):
        await h.stub.GetMetricSpec(ref(service="nope", tokenFromEnv="s3cr3t-value", **KEDA_KEYS))
    assert caplog.records, "a rejected request must be logged"
    text = " ".join(str(r.__dict__) for r in caplog.records)
    assert "s3cr3t-value" not in text
    assert "tokenFromEnv" in text  # the key is shown, the value is not


async def test_stream_is_active_sends_now_and_on_every_change(h: Harness) -> None:
    call = h.stub.StreamIsActive(ref(service="chat", activationThreshold="3"))
    it = call.__aiter__()
    first = await asyncio.wait_for(it.__anext__(), 5)
    assert first.result is False  # 3 is not above 3
    assert h.open_streams() == 1
    h.snapshots.publish(decision(2, svc("chat", 3)))  # unchanged: no message
    h.snapshots.publish(decision(3, svc("chat", 5)))  # 5 > 3: now active
    second = await asyncio.wait_for(it.__anext__(), 5)
    assert second.result is True
    h.snapshots.publish(decision(4, svc("chat", 1)))
    third = await asyncio.wait_for(it.__anext__(), 5)
    assert third.result is False
    h.snapshots.publish(decision(5, svc("chat", None)))  # no data: nothing is sent ...
    h.snapshots.publish(decision(6, svc("chat", 5)))
    fourth = await asyncio.wait_for(it.__anext__(), 5)
    assert fourth.result is True  # ... so the next message is this change, not a made-up false
    call.cancel()
    for _ in range(100):
        if h.open_streams() == 0:
            break
        await asyncio.sleep(0.02)
    assert h.open_streams() == 0


def _config_without(service: str | None = None, research: str | None = None) -> Config:
    d = CONFIG.model_dump(exclude_unset=True)
    d["inference"] = [s for s in d["inference"] if s["name"] != service]
    d["research"] = [r for r in d["research"] if r["name"] != research]
    return parse_config(d)


@pytest.mark.parametrize(
    ("md", "gone", "other"),
    [
        pytest.param(
            {"service": "chat"}, {"service": "chat"}, {"research": "eval"}, id="inference"
        ),
        pytest.param(
            {"researchClass": "eval"}, {"research": "eval"}, {"service": "chat"}, id="research"
        ),
    ],
)
async def test_a_stream_ends_when_its_own_trigger_leaves_the_config(
    h: Harness, md: dict[str, str], gone: dict[str, str], other: dict[str, str]
) -> None:
    call = h.stub.StreamIsActive(ref(**md))
    it = call.__aiter__()
    assert (await asyncio.wait_for(it.__anext__(), 5)).result is True
    # Another trigger's service or class removed by a reload: this stream goes on.
    h.snapshots.publish(replace(decision(2, svc("chat", 3)), config=_config_without(**other)))
    for _ in range(25):
        await asyncio.sleep(0.02)
        assert h.open_streams() == 1
    h.snapshots.publish(replace(decision(3, svc("chat", 3)), config=_config_without(**gone)))
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await asyncio.wait_for(it.__anext__(), 5)
    assert exc.value.code() == grpc.StatusCode.NOT_FOUND
    assert "was removed from the config" in (exc.value.details() or "")


async def test_stream_with_bad_metadata_fails_with_invalid_argument(h: Harness) -> None:
    call = h.stub.StreamIsActive(ref(service="nope"))
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await call.read()
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert h.open_streams() == 0


async def test_health_service_reports_status(h: Harness) -> None:
    hstub = health_pb2_grpc.HealthStub(h.channel)
    await h.health.set("externalscaler.ExternalScaler", health_pb2.HealthCheckResponse.SERVING)
    resp = await hstub.Check(health_pb2.HealthCheckRequest(service="externalscaler.ExternalScaler"))
    assert resp.status == health_pb2.HealthCheckResponse.SERVING
    await h.health.enter_graceful_shutdown()
    resp = await hstub.Check(health_pb2.HealthCheckRequest(service="externalscaler.ExternalScaler"))
    assert resp.status == health_pb2.HealthCheckResponse.NOT_SERVING


async def test_requests_are_counted_by_method_and_code(h: Harness) -> None:
    await h.stub.IsActive(ref(service="chat"))
    with pytest.raises(grpc.aio.AioRpcError):
        await h.stub.IsActive(ref(service="nope"))
    reg = h.metrics.registry
    ok = reg.get_sample_value(
        "gpu_pool_scaler_grpc_requests_total", {"method": "IsActive", "code": "OK"}
    )
    bad = reg.get_sample_value(
        "gpu_pool_scaler_grpc_requests_total", {"method": "IsActive", "code": "INVALID_ARGUMENT"}
    )
    assert (ok, bad) == (1.0, 1.0)
