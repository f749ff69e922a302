"""Hostile and malformed gRPC requests against the real scaler (scaler.app.Scaler with its
production server options), each answered with a definite status code; afterwards the
server still answers a normal KEDA call and nothing leaks (open-stream gauge back to 0).

Raw cases build the protobuf wire bytes by hand and send them with a generic call
(identity serializers), because the generated stubs refuse to encode invalid UTF-8.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
import pytest
import pytest_asyncio

from scaler._proto import externalscaler_pb2 as pb
from scaler._proto import externalscaler_pb2_grpc as pb_grpc
from scaler.app import Options, Running, Scaler
from scaler.config import load_config
from tests.support.exposition import ExpositionServer, vllm_exposition
from tests.support.scaler import wait_for, write_config

SERVICE = "/externalscaler.ExternalScaler/"
INVALID = grpc.StatusCode.INVALID_ARGUMENT


@dataclass
class Env:
    scaler: Scaler
    running: Running
    channel: grpc.aio.Channel
    stub: pb_grpc.ExternalScalerAsyncStub

    def open_streams(self) -> float:
        reg = self.running.metrics.registry
        return reg.get_sample_value("gpu_pool_scaler_open_streams") or 0.0

    def raw(self, method: str) -> grpc.aio.UnaryUnaryMultiCallable[bytes, bytes]:
        return self.channel.unary_unary(SERVICE + method)  # bytes in, bytes out

    async def healthy(self) -> None:
        """A normal KEDA poll still works: the hostile request left no damage."""
        ref = pb.ScaledObjectRef(name="so", namespace="serving", scalerMetadata={"service": "chat"})
        spec = await self.stub.GetMetricSpec(ref, timeout=5)
        resp = await self.stub.GetMetrics(
            pb.GetMetricsRequest(scaledObjectRef=ref, metricName=spec.metricSpecs[0].metricName),
            timeout=5,
        )
        assert resp.metricValues[0].metricValue == 2  # 10 waiting / 5 per replica


# One scaler for the whole module (starting and draining one per case would cost ~1 s
# each); every case leaves it as it found it, which `healthy()` checks.
pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def env(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    target = ExpositionServer(vllm_exposition(waiting=10, running=4, kv=0.3))
    path = write_config(tmp_path_factory.mktemp("hostile") / "pool.yaml", [target.address])
    scaler = Scaler(
        load_config(path),
        Options(str(path), grpc_port=0, metrics_port=0, host="127.0.0.1", drain_seconds=0.5),
    )
    running = await scaler.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{running.grpc_port}")
    e = Env(scaler, running, channel, pb_grpc.ExternalScalerStub(channel))
    await wait_for(lambda: running.snapshots.latest().services["chat"].desired == 2)
    yield e
    await channel.close()
    await scaler.shutdown(running)
    target.close()


# -- protobuf wire format by hand ---------------------------------------------------------


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (strings, bytes, messages, map entries)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def ref_bytes(md: dict[bytes, bytes], name: bytes = b"so", namespace: bytes = b"serving") -> bytes:
    """ScaledObjectRef{name=1, namespace=2, map<string,string> scalerMetadata=3}."""
    entries = b"".join(field(3, field(1, k) + field(2, v)) for k, v in md.items())
    return field(1, name) + field(2, namespace) + entries


def metrics_request_bytes(ref: bytes, metric: bytes) -> bytes:
    """GetMetricsRequest{ScaledObjectRef scaledObjectRef=1; string metricName=2}."""
    return field(1, ref) + field(2, metric)


CHAT = {b"service": b"chat"}
RAW_CASES = [
    # (method, wire bytes, expected code, text the status details must contain)
    pytest.param(
        "IsActive", ref_bytes({b"service": b"ch\xffat"}), INVALID, "UTF-8", id="non-utf8-value"
    ),
    pytest.param(
        "GetMetricSpec", ref_bytes({b"serv\xc3\x28": b"chat"}), INVALID, "UTF-8", id="non-utf8-key"
    ),
    pytest.param(
        "IsActive", ref_bytes(CHAT, name=b"\xed\xa0\x80"), INVALID, "UTF-8", id="utf8-surrogate"
    ),
    pytest.param(
        "GetMetrics",
        metrics_request_bytes(ref_bytes(CHAT), b"inference-\xfe"),
        INVALID,
        "UTF-8",
        id="non-utf8-metric-name",
    ),
    pytest.param(
        "StreamIsActive", ref_bytes(CHAT, namespace=b"\x80"), INVALID, "UTF-8", id="stream-non-utf8"
    ),
    pytest.param("IsActive", b"\xff\xff\xff\xff", INVALID, "IsActive", id="corrupt-wire-format"),
    pytest.param(
        "GetMetrics", field(1, b"\x0a\x10short"), INVALID, "GetMetrics", id="truncated-nested"
    ),
    pytest.param("GetMetricSpec", b"", INVALID, "'service'", id="empty-message"),
    pytest.param(
        "IsActive", ref_bytes(CHAT) + field(99, b"from the future"), None, "", id="unknown-field-ok"
    ),
    pytest.param(
        "StreamMetricSpec",
        ref_bytes(CHAT),
        grpc.StatusCode.UNIMPLEMENTED,
        "",
        id="rpc-not-implemented",
    ),
    pytest.param("NoSuchMethod", b"", grpc.StatusCode.UNIMPLEMENTED, "", id="unknown-method"),
]


@pytest.mark.parametrize(("method", "wire", "code", "needle"), RAW_CASES)
async def test_raw_malformed_requests(
    env: Env, method: str, wire: bytes, code: grpc.StatusCode | None, needle: str
) -> None:
    if method == "StreamIsActive":
        stream: grpc.aio.UnaryStreamMultiCallable[bytes, bytes]
        stream = env.channel.unary_stream(SERVICE + method)
        call = stream(wire, timeout=5)
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await call.read()
    elif code is None:
        assert await env.raw(method)(wire, timeout=5) == b"\x08\x01"  # result: true
        await env.healthy()
        return
    else:
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await env.raw(method)(wire, timeout=5)
    assert exc.value.code() == code, exc.value.details()
    assert needle in (exc.value.details() or "")
    await env.healthy()
    assert env.open_streams() == 0


async def test_undecodable_request_is_logged_with_its_size(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "scaler.grpc")
    with pytest.raises(grpc.aio.AioRpcError):
        await env.raw("IsActive")(ref_bytes({b"service": b"\xff"}), timeout=5)
    assert any("undecodable request" in r.getMessage() for r in caplog.records)


def ref(**md: str) -> pb.ScaledObjectRef:
    return pb.ScaledObjectRef(name="so", namespace="serving", scalerMetadata=md)


BIG = 900 * 1024  # under the 1 MiB receive limit
METADATA_CASES = [
    # (scalerMetadata, expected: int value or a status code)
    pytest.param({}, INVALID, id="empty-metadata"),
    pytest.param({"service": ""}, INVALID, id="empty-service"),
    pytest.param({"service": " chat "}, 2, id="padded-service-is-trimmed"),
    pytest.param({"service": "x" * BIG}, INVALID, id="huge-service-value"),
    pytest.param({"service": "chat", "k" * BIG: "v"}, 2, id="huge-unknown-key"),
    pytest.param(
        {"service": "chat", **{f"junk{i}": "v" * 32 for i in range(15_000)}},
        2,
        id="15000-unknown-keys",
    ),
    pytest.param({"service": "chat\x00"}, INVALID, id="nul-in-service"),
    pytest.param({"service": "chat\n"}, 2, id="trailing-newline-trimmed"),
    pytest.param({"service": "ChAt"}, INVALID, id="wrong-case-service"),
    pytest.param({"service": "../chat"}, INVALID, id="path-like-service"),
    pytest.param({"service": "chat", "activationThreshold": "NaN"}, INVALID, id="nan-activation"),
    pytest.param({"service": "chat", "activationThreshold": "1e999"}, INVALID, id="inf-activation"),
    pytest.param(
        {"service": "chat", "activationThreshold": "9" * BIG}, INVALID, id="huge-activation"
    ),
    pytest.param({"researchClass": "eval", "service": "chat"}, INVALID, id="both-kinds"),
    pytest.param({"researchClass": "eval" * 100}, INVALID, id="long-research-class"),
]


@pytest.mark.parametrize(("md", "expected"), METADATA_CASES)
async def test_hostile_trigger_metadata(
    env: Env, md: dict[str, str], expected: int | grpc.StatusCode
) -> None:
    if isinstance(expected, int):
        resp = await env.stub.GetMetrics(
            pb.GetMetricsRequest(scaledObjectRef=ref(**md), metricName="inference-chat"), timeout=5
        )
        assert resp.metricValues[0].metricValue == expected
        assert (await env.stub.IsActive(ref(**md), timeout=5)).result is True
    else:
        for call in (
            env.stub.GetMetricSpec(ref(**md), timeout=5),
            env.stub.IsActive(ref(**md), timeout=5),
            env.stub.GetMetrics(
                pb.GetMetricsRequest(scaledObjectRef=ref(**md), metricName="inference-chat"),
                timeout=5,
            ),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as exc:
                await call
            assert exc.value.code() == expected
            # The error names the problem but never echoes a huge value back.
            assert 0 < len(exc.value.details() or "") < 1024
    await env.healthy()


@pytest.mark.parametrize(
    ("metric", "code"),
    [
        pytest.param("inference-code", grpc.StatusCode.NOT_FOUND, id="other-services-metric"),
        pytest.param("research-eval", grpc.StatusCode.NOT_FOUND, id="research-metric-on-service"),
        pytest.param("", grpc.StatusCode.NOT_FOUND, id="empty-metric-name"),
        pytest.param("s0-", grpc.StatusCode.NOT_FOUND, id="bare-keda-prefix"),
        pytest.param("x" * BIG, grpc.StatusCode.NOT_FOUND, id="huge-metric-name"),
        pytest.param("S0-inference-chat", grpc.StatusCode.NOT_FOUND, id="uppercase-prefix"),
        pytest.param("s12345678901234567890-inference-chat", None, id="long-keda-index-ok"),
    ],
)
async def test_unknown_metric_names(env: Env, metric: str, code: grpc.StatusCode | None) -> None:
    request = pb.GetMetricsRequest(scaledObjectRef=ref(service="chat"), metricName=metric)
    if code is None:
        assert (await env.stub.GetMetrics(request, timeout=5)).metricValues[0].metricValue == 2
        return
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await env.stub.GetMetrics(request, timeout=5)
    assert exc.value.code() == code
    assert "inference-chat" in (exc.value.details() or "")  # tells the right name
    assert len(exc.value.details() or "") < 1024
    await env.healthy()


@pytest.mark.parametrize(
    "case",
    [
        pytest.param("message-over-1MiB", id="message-over-1MiB"),
        pytest.param("stream-request-over-1MiB", id="stream-request-over-1MiB"),
        pytest.param("call-headers-100KB", id="call-headers-100KB"),
    ],
)
async def test_oversized_requests_are_resource_exhausted(env: Env, case: str) -> None:
    huge = ref(service="chat", padding="p" * (2 * 1024 * 1024))
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        if case == "message-over-1MiB":
            await env.stub.IsActive(huge, timeout=5)
        elif case == "stream-request-over-1MiB":
            await env.stub.StreamIsActive(huge, timeout=5).read()
        else:
            await env.stub.IsActive(
                ref(service="chat"), metadata=(("x-padding", "p" * 100_000),), timeout=5
            )
    assert exc.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    await env.healthy()


async def test_many_streams_opened_and_dropped_leave_no_streams_open(env: Env) -> None:
    """300 KEDA-like StreamIsActive calls on separate connections, dropped in three rude ways."""
    n = 100
    channels = [
        grpc.aio.insecure_channel(
            f"127.0.0.1:{env.running.grpc_port}", options=[("grpc.use_local_subchannel_pool", 1)]
        )
        for _ in range(3)
    ]
    calls = []
    for i in range(3 * n):
        stub = pb_grpc.ExternalScalerStub(channels[i % 3])
        md = {"service": "chat"} if i % 2 else {"researchClass": "eval"}
        calls.append((i % 3, stub.StreamIsActive(ref(**md))))
    # Every stream answers at once with the current state, then stays open.
    firsts = await asyncio.gather(*(asyncio.wait_for(c.read(), 10) for _, c in calls))
    assert all(isinstance(f, pb.IsActiveResponse) for f in firsts)
    assert env.open_streams() == 3 * n
    # Bad streams mixed in fail at once and are never counted as open.
    bad = [env.stub.StreamIsActive(ref(service="nope")) for _ in range(20)]
    for b in bad:
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await b.read()
        assert exc.value.code() == INVALID
    assert env.open_streams() == 3 * n

    # 1) cancelled by the client, 2) deadline expiry, 3) the whole connection dropped.
    for k, c in calls:
        if k == 0:
            c.cancel()
    await wait_for(lambda: env.open_streams() == 2 * n)
    await channels[2].close(grace=None)  # abrupt: no per-call cancel
    await wait_for(lambda: env.open_streams() == n)
    await channels[1].close(grace=None)
    await wait_for(lambda: env.open_streams() == 0)
    await channels[0].close()

    # Short deadlines on streams that would otherwise stay open.
    timed = [env.stub.StreamIsActive(ref(service="chat"), timeout=0.3) for _ in range(50)]
    await asyncio.gather(*(c.read() for c in timed))
    await wait_for(lambda: env.open_streams() == 0)
    for c in timed:
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await c.read()
        assert exc.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    await env.healthy()
