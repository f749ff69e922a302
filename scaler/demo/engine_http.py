"""One simulated vLLM replica's /metrics over real HTTP on loopback.

The body is rendered by prometheus_client (which vLLM itself uses), from a callback that
returns the replica's current `EngineSample`, with vLLM's family names and labels
(`engine`, `model_name`): the scaler scrapes it exactly as it scrapes a real pod. The
server is a minimal HTTP/1.1 handler on `asyncio.start_server` (keep-alive, GET only):
dozens of replicas cost one listening socket each and no thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from scaler.core.load import EngineSample

CONTENT_TYPE = b"text/plain; version=0.0.4; charset=utf-8"


class EngineCollector(Collector):
    """vLLM's engine families for one engine (rank 0), read from `sample()` at scrape time."""

    def __init__(
        self, sample: Callable[[], EngineSample], model_name: str, started_at: float
    ) -> None:
        self._sample = sample
        self._model = model_name
        self._started_at = started_at  # unix time: counters restart with the process

    def collect(self) -> Iterator[Metric]:
        s = self._sample()
        labels = ["engine", "model_name"]
        values = ["0", self._model]
        start = GaugeMetricFamily(
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds.",
        )
        start.add_metric([], self._started_at)
        yield start
        for name, doc, value in (
            (
                "vllm:num_requests_running",
                "Number of requests in model execution batches.",
                s.running,
            ),
            ("vllm:num_requests_waiting", "Number of requests waiting to be processed.", s.waiting),
            (
                "vllm:kv_cache_usage_perc",
                "KV-cache usage. 1 means 100 percent usage.",
                s.kv_usage_mean,
            ),
        ):
            g = GaugeMetricFamily(name, doc, labels=labels)
            g.add_metric(values, value)
            yield g
        for name, doc, total in (
            (
                "vllm:num_preemptions",
                "Cumulative number of preemption from the engine.",
                s.preemptions_total,
            ),
            ("vllm:prompt_tokens", "Number of prefill tokens processed.", s.prompt_tokens_total),
            (
                "vllm:generation_tokens",
                "Number of generation tokens processed.",
                s.generation_tokens_total,
            ),
        ):
            c = CounterMetricFamily(name, doc, labels=labels)
            c.add_metric(values, total or 0.0, created=self._started_at)
            yield c
        if s.ttft_buckets is not None:
            h = HistogramMetricFamily(
                "vllm:time_to_first_token_seconds",
                "Histogram of time to first token in seconds.",
                labels=labels,
            )
            # No `_sum`: the simulated replica keeps per-bucket counts only (the scaler
            # reads the buckets).
            h.add_metric(values, [(floatToGoString(le), c) for le, c in s.ttft_buckets], None)
            yield h


class EngineServer:
    """Serves GET /metrics for one replica; anything else gets 404."""

    def __init__(self, registry: CollectorRegistry, host: str = "127.0.0.1", port: int = 0) -> None:
        self._registry = registry
        # Bind now (the port is known synchronously), serve once `start` runs. `host`: any
        # 127.x address works without configuring an interface (cluster/e2e.py binds pod IPs).
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, port))
        self._sock.listen(64)
        self.port: int = self._sock.getsockname()[1]
        self.address = f"{host}:{self.port}"
        self._server: asyncio.Server | None = None
        self._conns: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[Any]] = set()
        self.requests = 0
        # Seconds each /metrics answer waits first: an engine's API server busy with its
        # streams answers late (cluster/e2e.py makes one replica unreadable with it).
        self.answer_after_s = 0.0
        self._closing = asyncio.Event()  # wakes a late answer's wait when the server stops

    @classmethod
    def for_engine(
        cls,
        sample: Callable[[], EngineSample],
        model_name: str,
        started_at: float,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> EngineServer:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(EngineCollector(sample, model_name, started_at))
        return cls(registry, host, port)

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, sock=self._sock)

    async def stop(self) -> None:
        self._closing.set()
        if self._server is not None:
            self._server.close()
            for w in list(self._conns):
                w.close()
            # Python 3.11's wait_closed does not wait for connection handlers; one still
            # reading a keep-alive connection when the loop ends is cancelled there and logged
            # as "Exception in callback ... CancelledError". Closed above, each sees EOF.
            if self._handlers:
                await asyncio.wait(set(self._handlers), timeout=2.0)
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
        else:
            self._sock.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._conns.add(writer)
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                request_line, *header_lines = head.decode("latin-1").split("\r\n")
                parts = request_line.split(" ")
                headers = {
                    k.strip().lower(): v.strip()
                    for k, _, v in (h.partition(":") for h in header_lines if h)
                }
                close = headers.get("connection", "").lower() == "close"
                if len(parts) == 3 and parts[0] == "GET" and parts[1].split("?")[0] == "/metrics":
                    self.requests += 1
                    if self.answer_after_s > 0:
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(self._closing.wait(), self.answer_after_s)
                        if self._closing.is_set():
                            return
                    status, ctype, body = b"200 OK", CONTENT_TYPE, generate_latest(self._registry)
                else:
                    status, ctype, body = b"404 Not Found", b"text/plain", b"not found\n"
                writer.write(
                    b"HTTP/1.1 "
                    + status
                    + b"\r\nContent-Type: "
                    + ctype
                    + b"\r\nContent-Length: "
                    + str(len(body)).encode()
                    + (b"\r\nConnection: close" if close else b"")
                    + b"\r\n\r\n"
                    + body
                )
                await writer.drain()
                if close:
                    return
        except ConnectionError:
            return
        finally:
            self._conns.discard(writer)
            if task is not None:
                self._handlers.discard(task)
            writer.close()
