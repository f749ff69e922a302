"""Faults an SRE will meet, each a named test asserting the decision and what tells them.

Targets are real loopback HTTP servers (asyncio, raw sockets) that can misbehave in every
way a vLLM pod or the network can: hang, refuse, 500, garbage, truncation, 10 MB bodies,
trickled bytes, a restart that resets counters. The control loop is the real one (real
scraper, tracker, policy, accounting, metrics), with an injected clock so that staleness
and clock jumps are exact rather than slept for. What KEDA would see is read through the
gRPC servicer's own `resolve`/`value_of`, and, for the whole-scaler cases (all targets
down, scaler restarted), through the real gRPC server.

The rule under test (docs/architecture.md, "Invariants"; docs/operations.md, "Faults"):
missing data never shrinks inference (hold), a service with nothing fresh answers
UNAVAILABLE (KEDA's fallback), research fails closed (0 slots).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
import yaml
from prometheus_client import CollectorRegistry

from scaler._proto import externalscaler_pb2 as pb
from scaler.app import Options, Scaler
from scaler.config import Config, load_config
from scaler.core.accounting import Capacity
from scaler.core.decision import Decision, ServiceDecision
from scaler.ingest.discovery import StaticDiscovery
from scaler.ingest.scrape import Scraper, make_client
from scaler.ingest.state_store import StateStore
from scaler.loop import ControlLoop, LoopDeps
from scaler.reload import ConfigHolder
from scaler.serve.grpc_api import RequestError, resolve, too_old, value_of
from scaler.serve.metrics import ScalerMetrics
from scaler.serve.snapshot import Snapshots
from tests.support.exposition import vllm_exposition
from tests.support.scaler import Client, wait_for

BUSY = vllm_exposition(waiting=20, running=8, kv=0.6, prompt=1000, generation=5000)
IDLE = vllm_exposition(waiting=0, running=0, kv=0.0, prompt=1000, generation=5000)

# -- a target that misbehaves on demand ---------------------------------------------------


class FaultyTarget:
    """An HTTP/1.1 /metrics server on 127.0.0.1 (asyncio, keep-alive) with switchable faults."""

    def __init__(self, body: str) -> None:
        self.body = body.encode()
        self.mode = "ok"
        self._server: asyncio.Server | None = None
        self._conns: set[asyncio.StreamWriter] = set()
        self.port = 0
        self.requests = 0

    async def start(self) -> FaultyTarget:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def stop(self) -> None:
        """Stop listening and drop every connection: the port now refuses."""
        if self._server is not None:
            self._server.close()
            for w in list(self._conns):
                w.transport.abort()
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._conns.add(writer)
        try:
            while True:
                await reader.readuntil(b"\r\n\r\n")
                self.requests += 1
                if not await self._respond(writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            self._conns.discard(writer)
            writer.transport.abort()

    async def _respond(self, w: asyncio.StreamWriter) -> bool:
        """Answer one request per the mode; False closes the connection."""
        body, mode = self.body, self.mode

        def head(status: str = "200 OK", length: int | None = None, extra: str = "") -> bytes:
            h = f"HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\n{extra}"
            h += f"Content-Length: {length}\r\n" if length is not None else "Connection: close\r\n"
            return (h + "\r\n").encode()

        if mode == "ok":
            w.write(head(length=len(body)) + body)
        elif mode == "hang":
            await asyncio.sleep(3600)
        elif mode == "late":  # an engine too busy to answer /metrics on time, answering
            await asyncio.sleep(0.6)
            w.write(head(length=len(body)) + body)
        elif mode == "http-500":
            w.write(head("500 Internal Server Error", 15) + b"engine is dead\n")
        elif mode == "http-503-html":
            page = b"<html><body><h1>503 Service Unavailable</h1></body></html>\n"
            w.write(head("503 Service Unavailable", len(page)) + page)
        elif mode == "garbage-html":
            page = b"<!DOCTYPE html>\n<html><head><title>Login</title></head></html>\n"
            w.write(head(length=len(page)) + page)
        elif mode == "garbage-binary":
            junk = bytes(range(256)) * 64
            w.write(head(length=len(junk)) + junk)
        elif mode == "truncated-mid-line":
            # Close-delimited body cut inside the queue gauge's line: complete as HTTP.
            cut = body.index(b"vllm:num_requests_waiting{") + 40
            w.write(head() + body[:cut])
            await w.drain()
            return False
        elif mode == "truncated-short-body":
            w.write(head(length=len(body)) + body[: len(body) // 2])
            await w.drain()
            return False
        elif mode == "10MB-declared":
            w.write(head(length=10 * 1024 * 1024))
            for _ in range(160):
                w.write(b"#" * 65535 + b"\n")
                await w.drain()
        elif mode == "10MB-chunked":
            w.write(
                head(extra="Transfer-Encoding: chunked\r\n").replace(b"Connection: close\r\n", b"")
            )
            chunk = b"# padding" * 7000 + b"\n"
            for _ in range(10 * 1024 * 1024 // len(chunk) + 1):
                w.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                await w.drain()
            w.write(b"0\r\n\r\n")
        elif mode == "trickle":
            w.write(head(length=len(body)))
            for i in range(len(body)):
                w.write(body[i : i + 1])
                await w.drain()
                await asyncio.sleep(0.02)
        else:
            raise AssertionError(f"unknown mode {mode}")
        await w.drain()
        return True


@pytest.fixture
async def targets() -> AsyncIterator[Callable[[str], Any]]:
    made: list[FaultyTarget] = []

    async def make(body: str) -> FaultyTarget:
        t = await FaultyTarget(body).start()
        made.append(t)
        return t

    yield make
    for t in made:
        await t.stop()


# -- the real control loop with an injected clock -----------------------------------------


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def config_dict(addresses: list[str], **svc: Any) -> dict[str, Any]:
    service: dict[str, Any] = {
        "name": "chat",
        "namespace": "serving",
        "gpusPerReplica": 4,
        "minReplicas": 1,
        "maxReplicas": 16,
        "targets": {"static": addresses},
        "thresholds": {"waitingPerReplica": 5},
        # No stabilization: any wrong reading of the load would show as a scale-down at once.
        "scaleDown": {"stabilizationSeconds": 0, "stepSeconds": 0, "maxStepReplicas": 16},
        "coldStartSeconds": 0,
    }
    service.update(svc)
    return {
        "pool": {"name": "shared-h100", "capacity": {"gpus": 64}, "reserveGPUs": 4},
        "scrape": {"intervalSeconds": 5, "timeoutSeconds": 0.3, "staleAfterSeconds": 12},
        "inference": [service],
        "research": [{"name": "eval", "gpusPerJob": 1, "maxJobs": 100}],
    }


@dataclass
class Rig:
    loop: ControlLoop
    holder: ConfigHolder
    metrics: ScalerMetrics
    snapshots: Snapshots
    clock: Clock
    wall: Clock
    path: Path
    scraper: Scraper
    client: httpx.AsyncClient

    async def cycle(self, advance: float = 5.0) -> Decision:
        self.clock.t += advance
        self.wall.t += advance
        return await self.loop.run_once()

    def chat(self) -> ServiceDecision:
        return self.snapshots.latest().services["chat"]

    def keda(self, **md: str) -> int | grpc.StatusCode:
        """What GetMetrics answers KEDA now (same code as the servicer)."""
        d = self.snapshots.latest()
        try:
            return value_of(resolve(md, d.config), d, too_old(d, self.clock()))
        except RequestError as e:
            return e.code

    def sample(self, name: str, **labels: str) -> float | None:
        return self.metrics.registry.get_sample_value("gpu_pool_scaler_" + name, labels)


@pytest.fixture
async def rig_for(tmp_path: Path) -> AsyncIterator[Callable[..., Rig]]:
    made: list[Rig] = []

    def make(
        addresses: list[str],
        scrape: dict[str, Any] | None = None,
        server: dict[str, Any] | None = None,
        state: StateStore | None = None,
        **svc: Any,
    ) -> Rig:
        path = tmp_path / "pool.yaml"
        doc = config_dict(addresses, **svc)
        doc["scrape"] |= scrape or {}
        if server is not None:
            doc["server"] = server
        path.write_text(yaml.safe_dump(doc))
        cfg: Config = load_config(path)
        clock, wall = Clock(1000.0), Clock(1_800_000_000.0)
        snapshots = Snapshots()
        metrics = ScalerMetrics(CollectorRegistry(), snapshots.latest)
        holder = ConfigHolder(path, cfg, metrics)
        client = make_client(cfg.scrape)
        scraper = Scraper(
            client,
            timeout_s=cfg.scrape.timeoutSeconds,
            max_body_bytes=cfg.scrape.maxBodyBytes,
            clock=clock,
            late_answer_s=cfg.scrape.lateAnswerSeconds,
        )
        static = StaticDiscovery()
        loop = ControlLoop(
            holder.current,
            lambda svc: static,
            scraper,
            snapshots,
            LoopDeps(
                capacity=lambda c: Capacity(total_gpus=c.pool.capacity.gpus or 0),
                state=state,
            ),
            metrics,
            clock=clock,
            wall_clock=wall,
        )
        rig = Rig(loop, holder, metrics, snapshots, clock, wall, path, scraper, client)
        made.append(rig)
        return rig

    yield make
    for r in made:
        await r.client.aclose()


async def healthy_start(rig: Rig) -> int:
    """Two good cycles: a target, research lent, everything fresh. Returns the target."""
    await rig.cycle(0)
    await rig.cycle()
    chat = rig.chat()
    assert chat.fresh and chat.desired is not None and chat.desired > 1, chat.reason
    assert rig.keda(service="chat") == chat.desired
    assert rig.keda(researchClass="eval") == 64 - 4 - 4 * chat.desired
    return chat.desired


class FlakyStore:
    """A StateStore whose writes fail while `error` is set (say, the chart's Role for its
    ConfigMap not applied yet); the clock times of the writes that went through."""

    def __init__(self) -> None:
        self.clock: Callable[[], float] = lambda: 0.0
        self.error = ""
        self.saved: list[float] = []

    def load(self) -> str | None:
        return None

    def save(self, text: str) -> None:
        assert text.startswith("{")
        if self.error:
            raise OSError(self.error)
        self.saved.append(self.clock())

    def describe(self) -> str:
        return "ConfigMap serving/gps-state"


async def test_the_memory_is_written_at_most_every_state_write_seconds_and_a_failure_once(
    targets: Callable[[str], Any], rig_for: Callable[..., Rig], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "scaler")
    target = await targets(BUSY)
    store = FlakyStore()
    rig = rig_for([target.address], server={"stateWriteSeconds": 15}, state=store)
    store.clock = rig.clock

    def lines(words: str) -> list[str]:
        return [r.getMessage() for r in caplog.records if words in r.getMessage()]

    await rig.loop.save_state()  # no cycle yet: nothing learned, nothing written
    assert store.saved == []
    for _ in range(6):  # 5-s cycles: written at the first, then once 15 s have passed
        await rig.cycle()
    assert store.saved == [1005.0, 1020.0]
    store.error = "configmaps is forbidden"
    await rig.cycle()
    await rig.cycle()
    refused = ["state not saved to ConfigMap serving/gps-state: configmaps is forbidden"]
    assert lines("state not saved") == refused  # at the first refusal
    for _ in range(4):
        await rig.cycle()
    store.error = ""
    for _ in range(3):
        await rig.cycle()
    assert store.saved == [1005.0, 1020.0, 1065.0]  # tried at 1035 and 1050, then written
    assert lines("state not saved") == refused  # not again for the same refusal
    assert lines("again") == ["state saved to ConfigMap serving/gps-state again"]


# -- one target of two misbehaves ---------------------------------------------------------

TARGET_FAULTS = [
    # (mode, scrape outcome label, text the SRE sees in the decision reason)
    pytest.param("hang", "timeout", "timeout after 0.3s", id="times-out"),
    pytest.param("refuse", "connect_error", "ConnectError", id="refuses-connections"),
    pytest.param("http-500", "http_error", "HTTP 500", id="returns-500"),
    pytest.param("http-503-html", "http_error", "HTTP 503", id="returns-503-html"),
    pytest.param("garbage-html", "malformed", "not a Prometheus exposition", id="garbage-html"),
    pytest.param("garbage-binary", "malformed", "malformed", id="garbage-binary"),
    pytest.param(
        "truncated-mid-line", "malformed", "malformed sample line", id="truncated-mid-line"
    ),
    pytest.param(
        "truncated-short-body", "connect_error", "RemoteProtocolError", id="truncated-short-body"
    ),
    pytest.param("10MB-declared", "too_large", "larger than", id="sends-10MB-declared"),
    pytest.param("10MB-chunked", "too_large", "larger than", id="sends-10MB-chunked"),
    pytest.param("trickle", "timeout", "timeout", id="trickles-bytes-slowly"),
    pytest.param("no-engine-metrics", "no_data", "no engine metrics", id="disable-log-stats"),
]


@pytest.mark.parametrize(("mode", "outcome", "why"), TARGET_FAULTS)
async def test_one_target_faulty_holds_and_research_fails_closed(
    targets: Callable[[str], Any],
    rig_for: Callable[..., Rig],
    caplog: pytest.LogCaptureFixture,
    mode: str,
    outcome: str,
    why: str,
) -> None:
    caplog.set_level(logging.INFO, "scaler")
    good, bad = await targets(BUSY), await targets(BUSY)
    rig = rig_for([good.address, bad.address])
    desired = await healthy_start(rig)

    if mode == "refuse":
        await bad.stop()
    elif mode == "no-engine-metrics":  # vLLM --disable-log-stats: no vllm: families at all
        bad.body = "\n".join(
            ln
            for ln in BUSY.splitlines()
            if not ln.startswith(("vllm:", "# HELP vllm:", "# TYPE vllm:"))
        ).encode()
    else:
        bad.mode = mode
    # Within staleAfterSeconds the last good sample still stands: nothing changes yet,
    # but the failed scrape is counted at once.
    d = await rig.cycle()
    assert d.services["chat"].desired == desired
    assert rig.sample("scrape_total", service="chat", result=outcome) == 1.0

    # Past staleAfterSeconds, with the healthy target now idle: a reading of the good
    # target alone would scale down to 1. Partial data holds instead.
    good.body = IDLE.encode()
    d = await rig.cycle(10)
    chat = d.services["chat"]
    assert (chat.desired, chat.fresh, chat.ready) == (desired, False, 1), chat.reason
    assert bad.address in chat.reason and why in chat.reason
    assert rig.keda(service="chat") == desired  # KEDA keeps the held target
    assert rig.keda(researchClass="eval") == 0  # research fails closed
    assert d.pool is not None and d.pool.fail_closed and "chat" in d.pool.fail_closed
    # What the SRE sees: freshness 0, research slots 0, a log line naming target and cause.
    assert rig.sample("service_data_fresh", service="chat") == 0.0
    assert rig.sample("research_slots", research_class="eval") == 0.0
    assert rig.sample("desired_replicas", service="chat") == float(desired)
    logged = [r.getMessage() for r in caplog.records if r.name == "scaler.loop"]
    assert any(bad.address in m and why in m for m in logged), logged
    assert rig.sample("scrape_total", service="chat", result=outcome) == 2.0

    # The healthy target alone now shows more than is held (an overloaded engine is the one
    # most likely to answer /metrics late): partial data raises at once, never lowers, and
    # research stays closed.
    good.body = vllm_exposition(200, 8, 0.9, prompt=1000, generation=5000).encode()
    d = await rig.cycle()
    chat = d.services["chat"]
    assert chat.desired is not None and chat.desired > desired, chat.reason
    assert (chat.fresh, chat.ready, chat.decided_by) == (False, 1, "queue"), chat.reason
    assert "on the 1 of 2 serving replicas read" in chat.reason and bad.address in chat.reason
    assert rig.keda(service="chat") == chat.desired
    assert rig.keda(researchClass="eval") == 0

    # The target recovers: fresh again, the idle load is believed, research is lent again.
    if mode == "refuse":
        await bad.start()
    bad.mode, bad.body = "ok", IDLE.encode()
    good.body = IDLE.encode()
    d = await rig.cycle()
    assert d.services["chat"].fresh
    assert d.services["chat"].desired == 1
    assert rig.keda(researchClass="eval") == 64 - 4 - 4 * 2  # the 2 replicas that exist


@pytest.mark.parametrize(
    ("late_answer_s", "read"),
    [
        pytest.param(1.0, True, id="kept-open-read-next-cycle"),
        pytest.param(0.0, False, id="off-dropped-at-the-timeout"),
    ],
)
async def test_an_engine_answering_late_under_load_is_read_with_late_answers(
    targets: Callable[[str], Any], rig_for: Callable[..., Rig], late_answer_s: float, read: bool
) -> None:
    """An engine whose /metrics answers after `timeoutSeconds` (0.3 s; here 0.6 s), as a
    busy API server does: with `scrape.lateAnswerSeconds` its answer counts in the next
    cycle, so its deep queue raises the target with every replica read (fresh, research
    lent); without, every scrape is dropped and the service goes stale."""
    good, busy = await targets(BUSY), await targets(BUSY)
    rig = rig_for([good.address, busy.address], scrape={"lateAnswerSeconds": late_answer_s})
    desired = await healthy_start(rig)

    busy.mode = "late"
    busy.body = vllm_exposition(200, 8, 0.9, prompt=1000, generation=5000).encode()
    before = busy.requests
    for _ in range(3):
        await rig.cycle()  # the cycle ends on time: this cycle's request is not waited for
        await asyncio.sleep(0.8)  # the late answer comes between cycles
    d = await rig.cycle(10)  # past staleAfterSeconds (12 s) of the last good sample, if none
    chat = d.services["chat"]
    if read:
        assert chat.fresh and chat.ready == 2, chat.reason
        assert chat.desired is not None and chat.desired > desired, chat.reason
        assert d.pool is not None and not d.pool.fail_closed  # research is lent
        assert busy.requests - before == 2  # one request open at a time, not one per cycle
    else:
        assert (chat.fresh, chat.ready) == (False, 1), chat.reason
        assert rig.keda(researchClass="eval") == 0
        assert busy.requests - before == 4


async def test_target_restart_resets_counters_without_a_negative_rate(
    targets: Callable[[str], Any], rig_for: Callable[..., Rig]
) -> None:
    """vLLM restarted: counters fall to ~0 and process_start_time changes. The throughput
    signal must not see a negative (or huge) rate; it abstains for one cycle (hold, research
    0), then reads the new process's rate."""
    t = await targets(vllm_exposition(0, 4, 0.2, prompt=100_000, generation=400_000))
    rig = rig_for([t.address], thresholds={"tokensPerSecondPerReplica": 1000}, minReplicas=1)
    await rig.cycle(0)
    t.body = vllm_exposition(0, 4, 0.2, prompt=110_000, generation=440_000).encode()
    d = await rig.cycle()  # 50,000 tokens in 5 s = 10,000 tok/s -> 10 replicas
    assert d.services["chat"].desired == 10
    assert d.services["chat"].fresh

    restarted = vllm_exposition(0, 4, 0.2, prompt=50, generation=200)
    restarted = re.sub(
        r"^process_start_time_seconds .*$",
        "process_start_time_seconds 1.9e+09",
        restarted,
        flags=re.M,
    )
    t.body = restarted.encode()
    d = await rig.cycle()
    chat = d.services["chat"]
    tp = next(v for v in chat.signals if v.signal == "throughput")
    assert tp.abstain and chat.desired == 10, chat.reason  # no rate: hold, never negative
    assert rig.keda(service="chat") == 10
    assert rig.keda(researchClass="eval") == 0  # one signal blind: research fails closed
    t.body = re.sub(
        r"(vllm:generation_tokens_total\{[^}]*\}) \S+", r"\1 5200", restarted
    ).encode()  # 5,000 tokens in 5 s after the restart = 1,000 tok/s -> 1 replica
    d = await rig.cycle()
    tp = next(v for v in d.services["chat"].signals if v.signal == "throughput")
    assert not tp.abstain and tp.value == pytest.approx(1000.0)
    assert d.services["chat"].desired == 1 and d.services["chat"].fresh


async def test_counter_reset_without_start_time_is_not_a_negative_rate(
    targets: Callable[[str], Any], rig_for: Callable[..., Rig]
) -> None:
    """Same restart, but the exposition has no process_start_time_seconds (e.g. a proxy
    strips process_*): the decrease alone must read as a reset."""
    strip = lambda s: "\n".join(  # noqa: E731
        ln for ln in s.splitlines() if not ln.startswith("process_start_time_seconds")
    )
    t = await targets(strip(vllm_exposition(0, 4, 0.2, prompt=100_000, generation=400_000)))
    rig = rig_for([t.address], thresholds={"tokensPerSecondPerReplica": 1000})
    await rig.cycle(0)
    t.body = strip(vllm_exposition(0, 4, 0.2, prompt=110_000, generation=440_000)).encode()
    assert (await rig.cycle()).services["chat"].desired == 10
    t.body = strip(vllm_exposition(0, 4, 0.2, prompt=50, generation=200)).encode()
    chat = (await rig.cycle()).services["chat"]
    tp = next(v for v in chat.signals if v.signal == "throughput")
    assert tp.abstain and chat.desired == 10


def local(path: Path) -> Options:
    """Options for a whole scaler on loopback with ephemeral ports and a short drain."""
    return Options(str(path), grpc_port=0, metrics_port=0, host="127.0.0.1", drain_seconds=0.1)


# -- every target down --------------------------------------------------------------------


async def test_all_targets_down_unavailable_to_keda_and_research_zero(
    targets: Callable[[str], Any], rig_for: Callable[..., Rig], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "scaler")
    ts = [await targets(BUSY) for _ in range(3)]
    rig = rig_for([t.address for t in ts])
    desired = await healthy_start(rig)
    for t in ts:
        await t.stop()
    d = await rig.cycle()  # last samples still within staleAfterSeconds
    assert d.services["chat"].desired == desired
    d = await rig.cycle(10)
    chat = d.services["chat"]
    assert (chat.ready, chat.fresh, chat.desired) == (0, False, desired)
    # Nothing fresh at all: KEDA gets UNAVAILABLE and applies the ScaledObject's fallback
    # (after fallback.failureThreshold); the held value is not echoed as if it were live.
    assert rig.keda(service="chat") == grpc.StatusCode.UNAVAILABLE
    assert rig.keda(researchClass="eval") == 0
    assert rig.sample("service_data_fresh", service="chat") == 0.0
    assert rig.sample("ready_replicas", service="chat") == 0.0
    assert rig.sample("scrape_total", service="chat", result="connect_error") == 6.0
    assert any("never lower without data" in r.getMessage() for r in caplog.records)
    # The research side reserves the held inference GPUs: nothing is lent meanwhile.
    assert d.pool is not None and d.pool.inference_gpus == 4 * max(desired, 3)


async def test_all_targets_down_through_the_real_grpc_server(tmp_path: Path) -> None:
    """Whole scaler, real gRPC: targets that never answered -> UNAVAILABLE + research 0."""
    path = tmp_path / "pool.yaml"
    cfg = config_dict(["127.0.0.1:9", "127.0.0.1:19"])  # discard/chargen: closed here
    cfg["scrape"] = {"intervalSeconds": 0.2, "timeoutSeconds": 0.2, "staleAfterSeconds": 1}
    path.write_text(yaml.safe_dump(cfg))
    scaler = Scaler(
        load_config(path),
        local(path),
    )
    running = await scaler.start()
    client = Client(running.grpc_port)
    try:
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await client.value(service="chat")
        assert exc.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "no fresh data" in (exc.value.details() or "")
        assert await client.value(researchClass="eval") == 0
        active = await client.stub.IsActive(
            pb.ScaledObjectRef(name="j", namespace="r", scalerMetadata={"researchClass": "eval"})
        )
        # 0 slots, and active: KEDA's ScaledJob `min` must count that 0 (it skips inactive
        # triggers, which would let a queue trigger start Jobs on its own).
        assert active.result is True
    finally:
        await client.channel.close()
        await scaler.shutdown(running)


# -- the scaler itself restarts -----------------------------------------------------------


async def test_scaler_restarted_mid_run_does_not_scale_down(
    tmp_path: Path, targets: Callable[[str], Any]
) -> None:
    """A scaler that restarts forgets its stabilization window. With load gone but 4
    replicas still running, the new process must start from the replicas that exist and
    wait out stabilization again, not drop to minReplicas on its first answer."""
    ts = [await targets(BUSY) for _ in range(4)]
    path = tmp_path / "pool.yaml"
    cfg = config_dict(
        [t.address for t in ts],
        scaleDown={"stabilizationSeconds": 300, "stepSeconds": 60, "maxStepReplicas": 1},
    )
    cfg["scrape"] = {"intervalSeconds": 0.2, "timeoutSeconds": 0.2, "staleAfterSeconds": 5}
    path.write_text(yaml.safe_dump(cfg))

    async def run_scaler() -> tuple[Scaler, Any, Client]:
        s = Scaler(
            load_config(path),
            local(path),
        )
        r = await s.start()
        return s, r, Client(r.grpc_port)

    first, running, client = await run_scaler()
    try:
        await wait_for(lambda: running.snapshots.latest().services["chat"].desired == 16)
        for t in ts:
            t.body = IDLE.encode()
        await wait_for(
            lambda: "stabilization" in running.snapshots.latest().services["chat"].reason
        )
        assert await client.value(service="chat") == 16
    finally:
        await client.channel.close()
        await first.shutdown(running)

    second, running, client = await run_scaler()  # a new process: no memory at all
    try:
        chat = running.snapshots.latest().services["chat"]
        # Its very first answer: 4 replicas exist, load is idle -> hold 4, not 1.
        assert chat.desired == 4 and chat.current == 4, chat.reason
        assert await client.value(service="chat") == 4
        assert await client.value(researchClass="eval") == 64 - 4 - 16
        await asyncio.sleep(1.0)  # a few more cycles: still inside the new window
        assert await client.value(service="chat") == 4
    finally:
        await client.channel.close()
        await second.shutdown(running)


# -- a config that cannot see the backlog ---------------------------------------------------

SATURATED = vllm_exposition(waiting=10, running=5, kv=0.3, prompt=1000, generation=5000)


@pytest.mark.parametrize(
    ("thresholds", "warned"),
    [
        pytest.param({"waitingPerReplica": 0, "runningPerReplica": 8}, True, id="queue-off"),
        pytest.param({"waitingPerReplica": 5, "runningPerReplica": 8}, False, id="queue-on"),
    ],
)
async def test_a_decision_made_with_an_unread_backlog_is_logged_as_a_warning(
    targets: Callable[[str], Any],
    rig_for: Callable[..., Rig],
    caplog: pytest.LogCaptureFixture,
    thresholds: dict[str, float],
    warned: bool,
) -> None:
    """Two saturated replicas (5 running, 10 waiting each) and no signal that reads the
    queue: the concurrency target (8) holds 2 replicas with 20 requests waiting. The log
    line of that decision is a warning naming the cause; explain shows the same note."""
    caplog.set_level(logging.INFO, "scaler")
    a, b = await targets(SATURATED), await targets(SATURATED)
    rig = rig_for([a.address, b.address], thresholds=thresholds)
    await rig.cycle(0)
    chat = rig.chat()
    logged = [r for r in caplog.records if r.name == "scaler.loop" and "desired" in r.getMessage()]
    assert logged, [r.getMessage() for r in caplog.records]
    warnings = [r.getMessage() for r in logged if r.levelno == logging.WARNING]
    if warned:
        assert chat.desired == 2, chat.reason
        assert "runningPerReplica 8" in chat.queue_note
        assert any("queue unread: 20 request(s) wait" in m for m in warnings), warnings
        assert rig.sample("queue_unread", service="chat") == 1.0
    else:
        assert chat.desired is not None and chat.desired > 2, chat.reason
        assert chat.queue_note == "" and warnings == []
        assert rig.sample("queue_unread", service="chat") == 0.0


# -- config reloads -----------------------------------------------------------------------

BAD_CONFIGS = [
    # (file content or a mutation of the good config, text the log must contain)
    pytest.param("pool: [unclosed\n", "invalid YAML", id="invalid-yaml"),
    pytest.param("", "top level must be a mapping", id="empty-file"),
    pytest.param(b"pool:\n  name: \xff\xfe\n", "not UTF-8", id="not-utf8"),
    pytest.param({"minReplicas": 20}, "minReplicas (20) is greater than maxReplicas", id="min>max"),
    pytest.param({"gpusPerReplica": 0}, "inference[0].gpusPerReplica", id="zero-gpus"),
    pytest.param({"thresholds": {"waitingPerReplicas": 5}}, "waitingPerReplicas", id="typo-key"),
    pytest.param(
        {"thresholds": {"waitingPerReplica": 0}}, "at least one threshold", id="all-signals-off"
    ),
    pytest.param("scrape-timeout", "timeoutSeconds must not exceed", id="timeout>interval"),
]


async def test_a_reload_that_moves_a_port_says_it_needs_a_restart(
    targets: Callable[[str], Any], rig_for: Callable[..., Rig], caplog: pytest.LogCaptureFixture
) -> None:
    """The listeners are bound once: a new port or address in the file takes effect on the
    next start, and the reload says so; a reload that changes only the policy does not."""
    caplog.set_level(logging.INFO, "scaler")
    t = await targets(BUSY)
    rig = rig_for([t.address], server={"grpcPort": 6000, "metricsPort": 8080})

    def reload(**server: Any) -> list[str]:
        caplog.clear()
        # maxReplicas from the generation: every reload changes the policy too.
        doc = config_dict([t.address], maxReplicas=rig.holder.current()[1] + 8)
        doc["server"] = {"grpcPort": 6000, "metricsPort": 8080, **server}
        rig.path.write_text(yaml.safe_dump(doc))
        assert rig.holder.check() is True
        return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]

    assert reload() == []
    assert reload(grpcPort=6001) == [
        "server.grpcPort changed in the config; takes effect on restart"
    ]
    assert reload(grpcPort=6001, metricsPort=8081, listenAddress="127.0.0.1") == [
        "server.listenAddress, server.metricsPort changed in the config; takes effect on restart"
    ]


@pytest.mark.parametrize(("bad", "why"), BAD_CONFIGS)
async def test_invalid_config_reload_keeps_the_old_config(
    targets: Callable[[str], Any],
    rig_for: Callable[..., Rig],
    caplog: pytest.LogCaptureFixture,
    bad: str | bytes | dict[str, Any],
    why: str,
) -> None:
    caplog.set_level(logging.INFO, "scaler")
    t = await targets(BUSY)
    rig = rig_for([t.address])
    desired = await healthy_start(rig)
    if isinstance(bad, dict):
        rig.path.write_text(yaml.safe_dump(config_dict([t.address], **bad)))
    elif bad == "scrape-timeout":
        cfg = config_dict([t.address])
        cfg["scrape"]["timeoutSeconds"] = 60
        rig.path.write_text(yaml.safe_dump(cfg))
    elif isinstance(bad, bytes):
        rig.path.write_bytes(bad)
    else:
        rig.path.write_text(bad)

    assert rig.holder.check() is False
    assert rig.holder.check() is False  # the same bad file is reported once, not per poll
    assert rig.sample("config_reloads_total", result="invalid") == 1.0
    assert rig.sample("config_generation") == 1.0
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    msg = errors[0].getMessage()
    assert "keeping generation 1" in msg and "pool.yaml" in msg and why in msg, msg
    assert rig.holder.last_error is not None and why in rig.holder.last_error
    # Decisions go on under the old config.
    d = await rig.cycle()
    assert d.config_generation == 1 and d.services["chat"].desired == desired
    assert rig.keda(service="chat") == desired

    # Fixing the file takes effect on the next check.
    rig.path.write_text(yaml.safe_dump(config_dict([t.address], maxReplicas=3)))
    assert rig.holder.check() is True
    assert rig.sample("config_reloads_total", result="ok") == 1.0
    d = await rig.cycle()
    assert d.config_generation == 2 and d.services["chat"].desired == 3


async def test_config_file_vanishing_keeps_the_old_config(
    targets: Callable[[str], Any], rig_for: Callable[..., Rig]
) -> None:
    """A ConfigMap update swaps a symlink; for a moment the file may be missing."""
    t = await targets(BUSY)
    rig = rig_for([t.address])
    await healthy_start(rig)
    rig.path.unlink()
    assert rig.holder.check() is False
    assert rig.holder.current()[1] == 1
    assert (await rig.cycle()).services["chat"].fresh


# -- the clock jumps ----------------------------------------------------------------------


async def test_monotonic_clock_jumps_forward_mid_cycle(
    targets: Callable[[str], Any], rig_for: Callable[..., Rig]
) -> None:
    """The process was frozen (VM pause, CPU starvation) between the scrape and the
    decision: the samples look an hour old. Hold and fail research closed for that cycle;
    the next scrape is fresh and everything resumes."""
    t = await targets(BUSY)
    rig = rig_for([t.address])
    desired = await healthy_start(rig)
    t.body = IDLE.encode()

    real_scrape_all = rig.scraper.scrape_all

    async def scrape_then_jump(jobs: Any) -> Any:
        out = await real_scrape_all(jobs)
        rig.clock.t += 3600
        return out

    rig.scraper.scrape_all = scrape_then_jump  # type: ignore[method-assign]
    d = await rig.cycle()
    chat = d.services["chat"]
    assert (chat.desired, chat.fresh) == (desired, False), chat.reason  # idle not believed
    assert "stale" in chat.reason
    assert rig.keda(service="chat") == grpc.StatusCode.UNAVAILABLE  # nothing fresh
    assert rig.keda(researchClass="eval") == 0
    rig.scraper.scrape_all = real_scrape_all  # type: ignore[method-assign]
    d = await rig.cycle()
    assert d.services["chat"].fresh and d.services["chat"].desired == 1


async def test_process_suspended_for_an_hour_between_cycles(
    targets: Callable[[str], Any], rig_for: Callable[..., Rig]
) -> None:
    """The monotonic clock jumps an hour between two cycles (VM suspended). The load fell
    meanwhile; the first reading after the gap must not count the gap as an hour of low
    load (no instant scale-down), and no rate is made up over the gap."""
    # KV 0.6 on one replica vs target 0.5 asks for exactly 2: a steady hold at 2.
    t = await targets(vllm_exposition(0, 8, 0.6, prompt=1000, generation=5000))
    rig = rig_for(
        [t.address],
        thresholds={"kvCacheUsage": 0.5, "tokensPerSecondPerReplica": 100_000},
        scaleDown={"stabilizationSeconds": 60, "stepSeconds": 0, "maxStepReplicas": 16},
    )
    desired = await healthy_start(rig)
    assert desired == 2 and rig.chat().reason.startswith("hold 2")
    t.body = vllm_exposition(0, 0, 0.0, prompt=2000, generation=9000).encode()
    d = await rig.cycle(3600)
    chat = d.services["chat"]
    assert chat.desired == desired, chat.reason  # the low period starts now, not an hour ago
    assert "stabilization" in chat.reason
    tp = next(v for v in chat.signals if v.signal == "throughput")
    assert tp.value == pytest.approx(5000 / 3600) or tp.abstain  # never negative, never huge
    d = await rig.cycle(30)
    assert d.services["chat"].desired == desired  # 30 s of 60 s
    d = await rig.cycle(35)
    assert d.services["chat"].desired == 1  # now the window has passed with fresh data


async def test_a_failing_control_loop_stops_serving_its_last_decision(
    targets: Callable[[str], Any], rig_for: Callable[..., Rig]
) -> None:
    """Every cycle fails (a bug): the last decision is kept, but once it is older than
    scrape.staleAfterSeconds KEDA gets UNAVAILABLE for inference and 0 research slots."""
    t = await targets(BUSY)
    rig = rig_for([t.address])
    desired = await healthy_start(rig)
    slots = rig.keda(researchClass="eval")
    assert rig.keda(service="chat") == desired and isinstance(slots, int) and slots > 0
    stale_after = rig.holder.current()[0].scrape.staleAfterSeconds
    rig.clock.t += stale_after - 1  # no cycle ran meanwhile
    assert rig.keda(service="chat") == desired
    rig.clock.t += 2
    assert rig.keda(service="chat") == grpc.StatusCode.UNAVAILABLE
    assert rig.keda(researchClass="eval") == 0
    await rig.cycle(0)  # the loop recovers: current answers again
    assert rig.keda(service="chat") == desired


async def test_monotonic_clock_goes_backwards(
    targets: Callable[[str], Any], rig_for: Callable[..., Rig]
) -> None:
    """An injected clock that steps back an hour (time.monotonic never does; a bad clock
    source or a test could): no crash, no negative rate, no scale-down."""
    t = await targets(vllm_exposition(20, 8, 0.6, prompt=1000, generation=5000))
    rig = rig_for(
        [t.address],
        thresholds={"waitingPerReplica": 5, "tokensPerSecondPerReplica": 100_000},
        scaleDown={"stabilizationSeconds": 60, "stepSeconds": 0, "maxStepReplicas": 16},
    )
    desired = await healthy_start(rig)
    t.body = vllm_exposition(0, 0, 0.0, prompt=2000, generation=9000).encode()
    for advance in (-3600, 5, 5, 5):
        chat = (await rig.cycle(advance)).services["chat"]
        assert chat.desired == desired, chat.reason
        tp = next(v for v in chat.signals if v.signal == "throughput")
        assert tp.abstain or tp.value >= 0


async def test_wall_clock_jumps_do_not_change_decisions(
    targets: Callable[[str], Any], rig_for: Callable[..., Rig]
) -> None:
    """NTP steps the wall clock by a day either way: decisions use the monotonic clock
    only; the wall clock is a label on the snapshot and the last-cycle metric."""
    t = await targets(BUSY)
    rig = rig_for([t.address])
    desired = await healthy_start(rig)
    for jump in (-86_400, +86_400 * 2):
        rig.wall.t += jump
        d = await rig.cycle()
        assert d.services["chat"].desired == desired and d.services["chat"].fresh
        assert d.wall_time == rig.wall.t
        assert rig.sample("last_cycle_timestamp_seconds") == rig.wall.t
    assert rig.keda(researchClass="eval") == 64 - 4 - 4 * desired


async def test_the_loop_survives_a_cadence_overrun(
    targets: Callable[[str], Any], tmp_path: Path
) -> None:
    """A cycle slower than the interval (all targets hanging to the deadline) does not
    pile cycles up: the cadence restarts and the loop keeps deciding."""
    t = await targets(BUSY)
    t.mode = "hang"
    path = tmp_path / "pool.yaml"
    cfg = config_dict([t.address])
    cfg["scrape"] = {"intervalSeconds": 0.1, "timeoutSeconds": 0.1, "staleAfterSeconds": 1}
    path.write_text(yaml.safe_dump(cfg))
    scaler = Scaler(
        load_config(path),
        local(path),
    )
    running = await scaler.start()
    try:
        seq = running.snapshots.latest().seq
        await asyncio.sleep(0.8)
        ran = running.snapshots.latest().seq - seq
        assert 3 <= ran <= 9, ran  # ~0.1 s per cycle bounded by the scrape deadline
        reg = running.metrics.registry
        assert (reg.get_sample_value("gpu_pool_scaler_cycles_total") or 0) >= ran
    finally:
        with contextlib.suppress(Exception):
            await scaler.shutdown(running)
