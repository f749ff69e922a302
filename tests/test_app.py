"""The whole scaler, in-process and as `gpu-pool-scaler serve`: real gRPC, real HTTP, real
loopback targets serving the real vLLM captures from tests/data."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

from scaler._proto import externalscaler_pb2 as pb
from scaler._proto import externalscaler_pb2_grpc as pb_grpc
from scaler.app import Options, Running, Scaler
from scaler.config import load_config
from scaler.core.decision import ServiceDecision
from scaler.explain import render
from tests.support.exposition import ExpositionServer, sglang_exposition, vllm_exposition
from tests.support.paths import FIXTURES
from tests.support.scaler import Client, ask_once, wait_for, write_config


async def settle(env: Env, cycles: int = 5) -> int:
    """Wait until the service's target has stayed the same for `cycles` cycles."""
    history: dict[int, int | None] = {}  # decision seq -> desired

    def stable() -> bool:
        d = env.running.snapshots.latest()
        history[d.seq] = d.services["chat"].desired
        last = [history[k] for k in sorted(history)[-cycles:]]
        return len(last) == cycles and len(set(last)) == 1

    await wait_for(stable)
    desired = env.chat().desired
    assert desired is not None
    return desired


@dataclass
class Env:
    scaler: Scaler
    running: Running
    target: ExpositionServer
    client: Client
    path: Path

    def chat(self) -> ServiceDecision:
        return self.running.snapshots.latest().services["chat"]


@pytest.fixture
async def env(
    tmp_path: Path, exposition_server: Callable[[str], ExpositionServer]
) -> AsyncIterator[Env]:
    target = exposition_server((FIXTURES / "metrics_after_load.txt").read_text())
    path = write_config(tmp_path / "pool.yaml", [target.address])
    scaler = Scaler(
        load_config(path),
        Options(str(path), grpc_port=0, metrics_port=0, host="127.0.0.1", reload_seconds=0.1),
    )
    running = await scaler.start()
    client = Client(running.grpc_port)
    yield Env(scaler, running, target, client, path)
    await client.channel.close()
    await scaler.shutdown(running)


async def test_reads_real_capture_and_answers_keda(env: Env) -> None:
    d = env.running.snapshots.latest()
    client = env.client
    chat = d.services["chat"]
    # The real capture: one engine, nothing waiting, so the target is minReplicas.
    assert (chat.ready, chat.fresh, chat.desired) == (1, True, 1)
    assert await client.value(service="chat") == 1
    # 64 GPUs − 1 replica × 4 − reserve 4 = 56 one-GPU research slots.
    assert await client.value(researchClass="eval") == 56


async def test_queue_raises_the_target_and_it_comes_back(env: Env) -> None:
    target, client = env.target, env.client
    target.set(vllm_exposition(waiting=40, running=8, kv=0.5))
    # 40 waiting on one replica with threshold 5: the queue signal scales up (the exact
    # count is the policy's business, tests/test_policy.py); KEDA sees what was decided.
    desired = await settle(env)
    assert desired > 1 and env.chat().decided_by == "queue"
    assert await client.value(service="chat") == desired
    assert await client.value(researchClass="eval") == 64 - desired * 4 - 4
    target.set(vllm_exposition(waiting=0, running=0, kv=0.0))
    await wait_for(lambda: env.chat().desired == 1)


async def test_garbage_metrics_mark_target_failed_and_hold(env: Env) -> None:
    running, target, client = env.running, env.target, env.client
    target.set(vllm_exposition(waiting=40, running=8, kv=0.5))
    desired = await settle(env)
    target.set('vllm:num_requests_waiting{engine="0" 12\n}}} not metrics\n')
    await wait_for(lambda: "malformed" in env.chat().reason)
    chat = env.chat()
    assert chat.desired == desired and not chat.fresh  # held, never a silent scale-down
    assert await client.value(researchClass="eval") == 0  # research fails closed
    failed = running.metrics.registry.get_sample_value(
        "gpu_pool_scaler_scrape_total", {"service": "chat", "result": "malformed"}
    )
    assert failed and failed >= 1


async def test_an_sglang_service_is_sized_by_its_objective(
    tmp_path: Path, exposition_server: Callable[..., ExpositionServer]
) -> None:
    """engine: sglang with `slo:` reads SGLang's own TTFT histogram: every first token after
    2 s breaches the objective and raises the target, though the queue and the token usage
    alone keep one replica. Served over real HTTP; the metric and `explain` say so."""
    t0 = time.monotonic()

    def body() -> tuple[int, bytes]:  # 200 slow first tokens a second, cumulative
        slow = round(200 * (time.monotonic() - t0))
        return 200, sglang_exposition(0, 2, 0.1, ttft=(0, slow)).encode()

    target = exposition_server(body)
    path = write_config(
        tmp_path / "pool.yaml",
        [target.address],
        engine="sglang",
        slo={"ttftSeconds": 2, "attainment": 0.99, "windowSeconds": 30},
    )
    scaler = Scaler(load_config(path), Options(str(path), metrics_port=0, host="127.0.0.1"))
    running = await scaler.start()
    try:

        def chat() -> ServiceDecision:
            return running.snapshots.latest().services["chat"]

        await wait_for(lambda: (chat().desired or 0) >= 2)
        d = chat()
        assert d.slo is not None and d.slo.attainment == 0.0 and d.slo.requests > 0
        assert d.slo.bucket is None  # 2 s is one of SGLang's bounds: measured exactly
        assert d.decided_by == "slo", d.reason
        assert all(v.replicas <= 1 for v in d.signals if v.signal != "slo"), d.signals
        reg = running.metrics.registry
        assert reg.get_sample_value("gpu_pool_scaler_slo_attainment", {"service": "chat"}) == 0
        shown = render(running.snapshots.latest())
        assert "objective 99.00% of requests with TTFT <= 2 s over 30 s; measured 0.00%" in shown
    finally:
        await scaler.shutdown(running)


async def test_http_side_port(env: Env) -> None:
    running = env.running
    base = f"http://127.0.0.1:{running.metrics_port}"

    def get(path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(base + path, timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    status, body = await asyncio.to_thread(get, "/metrics")
    assert status == 200
    assert 'gpu_pool_scaler_desired_replicas{service="chat"} 1.0' in body
    assert 'gpu_pool_scaler_research_slots{research_class="eval"} 56.0' in body
    assert (await asyncio.to_thread(get, "/healthz"))[0] == 200
    status, body = await asyncio.to_thread(get, "/readyz")
    assert status == 200 and json.loads(body)["ok"] is True


async def test_grpc_health_serving_after_first_cycle(env: Env) -> None:
    client = env.client
    stub = health_pb2_grpc.HealthStub(client.channel)
    for service in ("", "externalscaler.ExternalScaler"):
        resp = await stub.Check(health_pb2.HealthCheckRequest(service=service))
        assert resp.status == health_pb2.HealthCheckResponse.SERVING


async def test_reload_valid_file_takes_effect(env: Env) -> None:
    running, target, client, path = env.running, env.target, env.client, env.path
    target.set(vllm_exposition(waiting=40, running=8, kv=0.5))
    before = await settle(env)
    write_config(path, [target.address], thresholds={"waitingPerReplica": 10}, maxReplicas=2)
    await wait_for(lambda: running.snapshots.latest().config_generation == 2)
    await wait_for(lambda: env.chat().desired == 2)  # the new maxReplicas clamps it
    assert before > 2
    assert await client.value(service="chat") == 2


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param("pool: [unclosed\n", id="invalid-yaml"),
        pytest.param(None, id="semantically-invalid"),
    ],
)
async def test_reload_invalid_file_keeps_old_config(env: Env, bad: str | None) -> None:
    running, target, client, path = env.running, env.target, env.client, env.path
    if bad is None:
        write_config(path, [target.address], minReplicas=20)  # min > max
    else:
        path.write_text(bad)
    reg = running.metrics.registry
    await wait_for(
        lambda: (
            reg.get_sample_value("gpu_pool_scaler_config_reloads_total", {"result": "invalid"}) == 1
        )  # exported at 0 from start
    )
    assert running.holder.current()[1] == 1
    assert running.holder.last_error and "pool.yaml" in running.holder.last_error
    seq = running.snapshots.latest().seq
    await wait_for(lambda: running.snapshots.latest().seq > seq + 1)  # still deciding
    assert await client.value(service="chat") == 1


async def test_reload_applies_scrape_limits_to_the_next_cycle(env: Env) -> None:
    """`scrape:` settings (limits, timeouts, TLS) follow a reload: a new scrape client is
    built before the next cycle. Here the body limit drops below the 52 KB capture, the
    target fails as too large, and comes back when the limit is raised again."""
    running, path = env.running, env.path
    reg = running.metrics.registry

    def too_large() -> float:
        return (
            reg.get_sample_value(
                "gpu_pool_scaler_scrape_total", {"service": "chat", "result": "too_large"}
            )
            or 0.0
        )

    def set_limit(max_body: int) -> None:
        cfg = yaml.safe_load(path.read_text())
        cfg["scrape"]["maxBodyBytes"] = max_body
        path.write_text(yaml.safe_dump(cfg))

    assert too_large() == 0 and env.chat().fresh
    set_limit(4096)
    await wait_for(lambda: too_large() > 0)
    await wait_for(lambda: not env.chat().fresh)
    assert running.holder.current()[1] == 2
    set_limit(8 * 1024 * 1024)
    await wait_for(lambda: env.chat().fresh)
    seen = too_large()
    seq = running.snapshots.latest().seq
    await wait_for(lambda: running.snapshots.latest().seq > seq + 2)
    assert too_large() == seen  # the old limit is gone, not half-applied


async def test_listen_address_ipv6(
    tmp_path: Path, exposition_server: Callable[[str], ExpositionServer]
) -> None:
    """server.listenAddress "::1" (as "::" would in an IPv6-only cluster): gRPC and the
    HTTP side port both answer on the IPv6 address."""
    target = exposition_server((FIXTURES / "metrics_idle.txt").read_text())
    path = write_config(tmp_path / "pool.yaml", [target.address])
    cfg = yaml.safe_load(path.read_text())
    cfg["server"] = {"listenAddress": "::1"}
    path.write_text(yaml.safe_dump(cfg))
    scaler = Scaler(load_config(path), Options(str(path), grpc_port=0, metrics_port=0))
    running = await scaler.start()
    try:
        channel = grpc.aio.insecure_channel(f"[::1]:{running.grpc_port}")
        stub = pb_grpc.ExternalScalerStub(channel)
        spec = await stub.GetMetricSpec(
            pb.ScaledObjectRef(name="so", namespace="serving", scalerMetadata={"service": "chat"})
        )
        assert spec.metricSpecs[0].metricName == "inference-chat"
        await channel.close()
        url = f"http://[::1]:{running.metrics_port}/readyz"
        status = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=5).status)
        assert status == 200
    finally:
        await scaler.shutdown(running)


# -- the real command line ----------------------------------------------------------------


def _serve(path: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "scaler",
            "serve",
            "--config",
            str(path),
            "--log-format",
            "text",
            "--grpc-port",
            "0",
            "--metrics-port",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def test_serve_exits_2_on_bad_config_naming_the_key(tmp_path: Path) -> None:
    path = write_config(tmp_path / "pool.yaml", ["127.0.0.1:1"], gpusPerReplica=0)
    proc = _serve(path)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "pool.yaml" in out and "inference[0].gpusPerReplica" in out


def test_sigterm_drains_and_exits_0(
    tmp_path: Path, exposition_server: Callable[[str], ExpositionServer]
) -> None:
    target = exposition_server((FIXTURES / "metrics_idle.txt").read_text())
    path = write_config(tmp_path / "pool.yaml", [target.address])
    proc = _serve(path)
    lines: list[str] = []
    assert proc.stdout is not None
    port = None
    deadline = time.monotonic() + 60
    while port is None and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        m = re.search(r"gRPC on [\d.]+:(\d+)", line)
        port = int(m.group(1)) if m else None
    assert port, "".join(lines)

    assert ask_once(port, service="chat") == 1
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, "".join(lines) + out
    assert "draining" in out and "stopped cleanly" in out


def test_explain_prints_each_decision_and_the_pool_split(
    tmp_path: Path, exposition_server: Callable[[str], ExpositionServer]
) -> None:
    target = exposition_server(vllm_exposition(waiting=40, running=8, kv=0.5))
    path = write_config(tmp_path / "pool.yaml", [target.address])
    out = subprocess.run(
        [sys.executable, "-m", "scaler", "explain", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "serving/chat: desired 8 [queue], now 1 (ready 1, starting 0), fresh" in out
    assert re.search(r"queue\s+40\s+5\s+8", out), out  # value, target, replicas asked
    assert "capacity 64 = inference 32 + reserve 4 + foreign 0 + headroom 28" in out
    assert re.search(r"research eval: 28 slot\(s\) × 1 GPU", out), out


def _descendants(pid: int) -> set[int]:
    """Every live process below `pid` (children of all its threads, recursively)."""
    out: set[int] = set()
    todo = [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                kids = (task / "children").read_text().split()
            except OSError:
                continue
            for k in map(int, kids):
                if k not in out:
                    out.add(k)
                    todo.append(k)
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has exited; only its parent's wait is missing


def test_sigkill_of_the_server_leaves_no_orphans(
    tmp_path: Path, exposition_server: Callable[[str], ExpositionServer]
) -> None:
    """`kill -9` of `serve` runs no cleanup; its scrape worker and multiprocessing's
    resource tracker must still go within seconds, not run on as orphans."""
    target = exposition_server((FIXTURES / "metrics_idle.txt").read_text())
    path = write_config(tmp_path / "pool.yaml", [target.address])
    proc = _serve(path)
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        lines.append(line)
        if not line or "gRPC on" in line:
            break
    assert "gRPC on" in lines[-1], "".join(lines)  # first cycle done: the worker exists
    children = _descendants(proc.pid)
    assert children, "the scrape worker process should be running"
    proc.kill()
    proc.wait(10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(c) for c in children):
        time.sleep(0.1)
    left = [c for c in children if _alive(c)]
    for c in left:  # do not leak them from the test either
        os.kill(c, signal.SIGKILL)
    assert not left, f"orphans still running 10 s after SIGKILL: {left}"


def test_demo_without_the_sim_extra_says_what_to_install(tmp_path: Path) -> None:
    """The server installs without numpy; `demo` then fails with one clear line, exit 2."""
    blocker = tmp_path / "sitecustomize.py"  # makes numpy unimportable in the child only
    blocker.write_text("import sys\nsys.modules['numpy'] = None\n")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}:{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run(
        [sys.executable, "-m", "scaler", "demo", "--no-live", "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert "pip install 'gpu-pool-scaler[sim]'" in proc.stderr and "numpy" in proc.stderr
