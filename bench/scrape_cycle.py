"""One scrape cycle over many loopback vLLM targets: wall time and the scaler's CPU time.

    python -m bench.scrape_cycle [--targets 500] [--concurrency 64] [--cycles 5]
                                 [--file EXPOSITION] [--out bench/results/scrape_cycle.txt]

The targets are real HTTP/1.1 servers on 127.0.0.1 (one port each), run by a separate
process so that their CPU is not counted; each serves the real vLLM capture (~50 KB). The
scaler side is what production runs: `make_client(ScrapeConfig)` + `Scraper.scrape_all`
(HTTP, parse with `read_sample`). CPU time is this process's user+system time.
The first cycle opens every connection; later cycles reuse them (keep-alive).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from bench import CAPTURES
from scaler.config import ScrapeConfig
from scaler.core.load import ScrapeJob
from scaler.ingest.scrape import TRANSPORTS, Scraper, make_client

DEFAULT_FILE = CAPTURES

_SERVER = r"""
import asyncio, sys
body = open(sys.argv[1], "rb").read()
n = int(sys.argv[2])
resp = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)

class P(asyncio.Protocol):
    def connection_made(self, t):
        self.t, self.buf = t, b""
    def data_received(self, data):
        self.buf += data
        while b"\r\n\r\n" in self.buf:
            _, self.buf = self.buf.split(b"\r\n\r\n", 1)
            self.t.write(resp)

async def main():
    loop = asyncio.get_running_loop()
    servers = [await loop.create_server(P, "127.0.0.1", 0, backlog=1024) for _ in range(n)]
    print(" ".join(str(s.sockets[0].getsockname()[1]) for s in servers), flush=True)
    await loop.run_in_executor(None, sys.stdin.read)  # until the parent closes stdin

asyncio.run(main())
"""


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


async def run(args: argparse.Namespace, ports: list[int]) -> list[tuple[float, float, int]]:
    cfg = ScrapeConfig(
        intervalSeconds=5, timeoutSeconds=args.timeout, maxConcurrency=args.concurrency
    )
    jobs = [ScrapeJob(f"127.0.0.1:{p}") for p in ports]
    out = []
    async with make_client(cfg, args.transport) as client:
        scraper = Scraper.from_config(client, cfg)
        for _ in range(args.cycles):
            c0, w0 = _cpu(), time.perf_counter()
            results = await scraper.scrape_all(jobs)
            wall, cpu = time.perf_counter() - w0, _cpu() - c0
            ok = sum(1 for r in results if r.sample is not None)
            out.append((wall, cpu, ok))
            await asyncio.sleep(0.2)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", type=int, default=500)
    ap.add_argument("--concurrency", type=int, default=64, help="scrape.maxConcurrency")
    ap.add_argument("--timeout", type=float, default=2.0, help="scrape.timeoutSeconds")
    ap.add_argument("--cycles", type=int, default=5)
    ap.add_argument(
        "--transport",
        choices=TRANSPORTS,
        default="lean",
        help="lean = scaler/ingest/http1.py (what the scaler uses); the others are httpx alone",
    )
    ap.add_argument("--file", type=Path, default=DEFAULT_FILE / "metrics_after_load.txt")
    ap.add_argument("--out", type=Path, default=None, help="also write the report here")
    args = ap.parse_args(argv)

    server = subprocess.Popen(
        [sys.executable, "-c", _SERVER, str(args.file), str(args.targets)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        ports = [int(p) for p in server.stdout.readline().split()]
        if len(ports) != args.targets:
            print("target server failed to start", file=sys.stderr)
            return 1
        cycles = asyncio.run(run(args, ports))
    finally:
        if server.stdin is not None:
            server.stdin.close()
        server.wait(10)

    size = args.file.stat().st_size
    load_before = " ".join(f"{x:.1f}" for x in os.getloadavg())
    lines = [
        f"command: python -m bench.scrape_cycle --targets {args.targets} "
        f"--concurrency {args.concurrency} --cycles {args.cycles} --transport {args.transport}",
        f"machine: {platform.machine()}, {os.cpu_count()} cores, "
        f"{platform.python_implementation()} {platform.python_version()}, {platform.system()}",
        f"targets: {args.targets} loopback HTTP servers, {size} bytes each ({args.file.name})",
    ]
    lines.append(f"load average before the run: {load_before}")
    for i, (wall, cpu, ok) in enumerate(cycles):
        kind = "cold (new connections)" if i == 0 else "warm (keep-alive)"
        lines.append(
            f"cycle {i + 1} {kind}: wall {wall:.3f} s, cpu {cpu:.3f} s, ok {ok}/{len(ports)}"
        )
    warm = cycles[1:] or cycles
    lines.append(
        f"warm median: wall {sorted(w for w, _, _ in warm)[len(warm) // 2]:.3f} s, "
        f"cpu {sorted(c for _, c, _ in warm)[len(warm) // 2]:.3f} s"
    )
    report = "\n".join(lines)
    print(report)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(report + "\n")
    return 0 if all(ok == len(ports) for _, _, ok in cycles) else 1


if __name__ == "__main__":
    sys.exit(main())
