"""Loopback /metrics servers and expositions derived from the real vLLM captures."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.support.paths import FIXTURES


class ExpositionServer:
    """A real HTTP server on 127.0.0.1:0 whose /metrics body can be changed at any time."""

    def __init__(self, body: str | Callable[[], tuple[int, bytes]]) -> None:
        self.set(body)
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                status, payload = outer._produce()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: object) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        self.requests = 0

    def set(self, body: str | Callable[[], tuple[int, bytes]]) -> None:
        if callable(body):
            self._produce_fn = body
        else:
            data = body.encode()
            self._produce_fn = lambda: (200, data)

    def _produce(self) -> tuple[int, bytes]:
        self.requests += 1
        return self._produce_fn()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self._httpd.server_address[1]}"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def vllm_exposition(
    waiting: float,
    running: float,
    kv: float,
    *,
    model: str = "tiny-llama",
    engines: int = 1,
    prompt: float = 0.0,
    generation: float = 0.0,
    ttft: tuple[float, float] | None = None,
) -> str:
    """The real idle capture with the load gauges rewritten (keeps every other family).

    `ttft` (fast, slow): cumulative requests whose first token came within 0.5 s and after
    2.5-5 s, written into the capture's own `vllm:time_to_first_token_seconds` buckets."""
    base = (FIXTURES / "metrics_idle.txt").read_text()
    lines = []
    for line in base.splitlines():
        if ttft is not None and line.startswith(_TTFT):
            line = _ttft_line(line, *ttft)
        for name, value in (
            ("vllm:num_requests_waiting{", waiting),
            ("vllm:num_requests_running{", running),
            ("vllm:kv_cache_usage_perc{", kv),
            ("vllm:prompt_tokens_total{", prompt),
            ("vllm:generation_tokens_total{", generation),
        ):
            if line.startswith(name):
                labels = line[len(name) - 1 : line.index("}") + 1]
                line = f"{name[:-1]}{labels} {value}"
        lines.append(line)
    return "\n".join(lines) + "\n"


_TTFT = "vllm:time_to_first_token_seconds_"


def _ttft_line(line: str, fast: float, slow: float) -> str:
    head = line[: line.index("}") + 1]
    if line.startswith(_TTFT + "bucket{"):
        le = float(head.split('le="', 1)[1].split('"', 1)[0])  # "+Inf" parses as inf
        value = 0.0 if le < 0.5 else fast if le < 5.0 else fast + slow
    elif line.startswith(_TTFT + "count{"):
        value = fast + slow
    elif line.startswith(_TTFT + "sum{"):
        value = 0.4 * fast + 4.0 * slow
    else:
        return line
    return f"{head} {value}"


# SGLang's default TTFT and inter-token latency bounds (python/sglang/srt/metrics/
# collector.py, TokenizerMetricsCollector, sgl-project/sglang at 00ae9c1, Apache-2.0; the
# same in 0.5.23's capture, tests/data/sglang-0.5.23/, which test_exposition checks).
SGLANG_TTFT_BOUNDS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
SGLANG_ITL_BOUNDS = (0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04,
                     0.06, 0.08, 0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8)  # fmt: skip


def _sglang_histogram(
    name: str, bounds: tuple[float, ...], counts: tuple[float, float], edges: tuple[float, float]
) -> list[str]:
    """`counts` (fast, slow) observations: fast ones at or below edges[0], slow ones in the
    bucket that ends at edges[1]."""
    (fast, slow), (lo, hi) = counts, edges
    label = 'model_name="qwen"'
    lines = [f"# TYPE {name} histogram"]
    for b in bounds:
        at = 0.0 if b < lo else fast if b < hi else fast + slow
        lines.append(f'{name}_bucket{{le="{float(b)}",{label}}} {at}')
    lines += [f'{name}_bucket{{le="+Inf",{label}}} {fast + slow}']
    return [*lines, f"{name}_count{{{label}}} {fast + slow}", f"{name}_sum{{{label}}} 0.0"]


def sglang_exposition(
    waiting: float,
    running: float,
    token_usage: float,
    *,
    ttft: tuple[float, float] = (0.0, 0.0),
    itl: tuple[float, float] = (0.0, 0.0),
) -> str:
    """An SGLang (--enable-metrics) /metrics body in the families and format its collector
    writes. `ttft` (fast, slow): cumulative requests whose first token came within 0.4 s and
    after 2-4 s; `itl` (fast, slow): tokens within 20 ms and after 0.1-0.2 s."""
    lines = []
    for name, value in (
        ("sglang:num_queue_reqs", waiting),
        ("sglang:num_running_reqs", running),
        ("sglang:token_usage", token_usage),
    ):
        lines += [f"# TYPE {name} gauge", f'{name}{{model_name="qwen"}} {value}']
    lines += _sglang_histogram(
        "sglang:time_to_first_token_seconds", SGLANG_TTFT_BOUNDS, ttft, (0.4, 4)
    )
    lines += _sglang_histogram(
        "sglang:inter_token_latency_seconds", SGLANG_ITL_BOUNDS, itl, (0.02, 0.2)
    )
    for name in ("sglang:prompt_tokens_total", "sglang:generation_tokens_total"):
        lines += [f"# TYPE {name} counter", f'{name}{{model_name="qwen"}} 0.0']
    return "\n".join(lines) + "\n"
