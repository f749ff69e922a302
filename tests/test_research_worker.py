"""gpu-pool-worker against a real redis-server, real commands and a real gRPC scaler.

The command is a small Python program that checkpoints its progress to GPS_CHECKPOINT_DIR,
resumes from it, and finishes its current step on SIGTERM before exiting 143.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import math
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
import redis
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from scaler._proto import externalscaler_pb2 as pb
from scaler._proto import externalscaler_pb2_grpc as pb_grpc
from scaler.research.model import InputError
from scaler.research.queue import WorkQueue
from scaler.research.slots import (
    GrpcSlotChecker,
    ScalerEndpoint,
    SlotCheckError,
    research_metric_name,
    slots_from_reply,
)
from scaler.research.worker import (
    RedisGaveUp,
    Worker,
    WorkerOptions,
    _options,
    build_parser,
    setup_logging,
)
from scaler.research.worker import log as worker_log
from tests.support.redisserver import RedisServer, registered_queue, running_redis

REPO = Path(__file__).resolve().parent.parent
PASSWORD = "hunter2-not-for-logs"

COMMAND = r"""
import json, os, signal, sys, time
ck = os.environ["GPS_CHECKPOINT_DIR"]
attempt = os.environ["GPS_ATTEMPT"]
mode = os.environ.get("MODE", "steps")
with open(os.path.join(ck, f"env-{attempt}.json"), "w") as f:
    json.dump(dict(os.environ, PID=str(os.getpid())), f)
if mode == "fail":
    print("it broke at step 0", file=sys.stderr)
    sys.exit(3)
term = False
def on_term(signum, frame):
    global term
    term = True
handlers = {"ignore-term": signal.SIG_IGN, "no-handler": signal.SIG_DFL}
signal.signal(signal.SIGTERM, handlers.get(mode, on_term))
steps, step_s = int(os.environ.get("STEPS", "1")), float(os.environ.get("STEP_S", "0"))
progress = os.path.join(ck, "progress")
done = int(open(progress).read()) if os.path.exists(progress) else 0
log = open(os.path.join(ck, "steps.log"), "a")
for k in range(done + 1, steps + 1):
    log.write(f"{k} {attempt}\n")
    log.flush()
    time.sleep(step_s)
    with open(progress + ".tmp", "w") as f:
        f.write(str(k))
    os.replace(progress + ".tmp", progress)
    if term:  # finish the step, checkpoint, stop: nothing is redone on resume
        open(os.path.join(ck, f"sigterm-{attempt}"), "w").close()
        sys.exit(143)
"""


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    yield from running_redis(tmp_path, password=PASSWORD)


@pytest.fixture
def queue(redis_server: RedisServer) -> Iterator[WorkQueue]:
    yield from registered_queue(redis_server, ["eval"])


@pytest.fixture
def command(tmp_path: Path) -> list[str]:
    p = tmp_path / "command.py"
    p.write_text(COMMAND)
    return [sys.executable, str(p)]


def worker_argv(root: Path, command: list[str], *flags: str) -> list[str]:
    base = [sys.executable, "-m", "scaler.research.worker", "--class", "eval"]
    base += ["--checkpoint-root", str(root), "--log-format", "text", "--lease-seconds", "1"]
    if not any(f.startswith("--scaler") for f in flags):
        base.append("--no-scaler-check")
    return [*base, *flags, "--", *command]


def start_worker(url: str, root: Path, command: list[str], *flags: str) -> subprocess.Popen[str]:
    env = dict(os.environ, GPS_REDIS_URL=url)  # the password never on the command line
    return subprocess.Popen(
        worker_argv(root, command, *flags),
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(p: subprocess.Popen[str], timeout: float = 20) -> tuple[int, str]:
    out, err = p.communicate(timeout=timeout)
    return p.returncode, out + err


def wait_for(cond: Callable[[], bool], timeout: float = 10.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def progress(d: Path) -> int:
    try:
        return int((d / "progress").read_text())
    except (OSError, ValueError):
        return 0


def steps_run(d: Path) -> list[tuple[int, int]]:
    lines = (d / "steps.log").read_text().split()
    return [(int(lines[i]), int(lines[i + 1])) for i in range(0, len(lines), 2)]


# ---------------------------------------------------------------------- running items


def test_runs_item_with_its_parameters_and_exits_on_empty_queue(
    queue: WorkQueue, redis_server: RedisServer, command: list[str], tmp_path: Path
) -> None:
    item_id = queue.submit("eval", {"FOO": "bar baz", "STEPS": "2"}, submitter="ada")
    root = tmp_path / "ck"
    rc, out = finish(start_worker(redis_server.url, root, command))
    assert rc == 0, out
    ck = root / "eval" / item_id
    env = json.loads((ck / "env-1.json").read_text())
    assert env["FOO"] == "bar baz"
    assert (env["GPS_ITEM_ID"], env["GPS_ATTEMPT"], env["GPS_RESEARCH_CLASS"]) == (
        item_id, "1", "eval",
    )  # fmt: skip
    assert env["GPS_CHECKPOINT_DIR"] == str(ck)
    assert "GPS_REDIS_URL" not in env  # the password stays with the worker
    assert steps_run(ck) == [(1, 1), (2, 1)]
    it = queue.get(item_id)
    assert it is not None and (it.state, it.attempts, it.checkpoint) == ("done", 1, str(ck))
    for event in ("took item", "command started", "item done", "queue of class eval is empty"):
        assert event in out
    done = re.search(r"item done after (\d+\.\d) s", out)
    assert done is not None and float(done[1]) < 20, out  # the item's own time
    assert PASSWORD not in out and "***" in out


def test_failing_command_is_retried_then_dead_lettered_with_its_last_error(
    queue: WorkQueue, redis_server: RedisServer, command: list[str], tmp_path: Path
) -> None:
    item_id = queue.submit("eval", {"MODE": "fail"}, max_attempts=2)
    rc, out = finish(start_worker(redis_server.url, tmp_path / "ck", command))
    assert rc == 0, out  # the worker did its job; the item failed
    it = queue.get(item_id)
    assert it is not None
    assert (it.state, it.failures, it.attempts) == ("dead", 2, 2)
    assert it.last_error == "command exit code 3: it broke at step 0"
    assert queue.dead_letters("eval") == [item_id]
    # The log counts the failures as the item's record does.
    assert "command exit code 3: it broke at step 0; failure 1 of 2: item requeued" in out, out
    assert "command exit code 3: it broke at step 0; failure 2 of 2: dead-lettered" in out, out


def test_a_command_that_cannot_start_fails_the_item_with_the_reason(
    queue: WorkQueue, redis_server: RedisServer, tmp_path: Path
) -> None:
    item_id = queue.submit("eval", {}, max_attempts=1)
    missing = str(tmp_path / "no-such-command")
    rc, out = finish(start_worker(redis_server.url, tmp_path / "ck", [missing]))
    assert rc == 0, out
    it = queue.get(item_id)
    assert it is not None and it.state == "dead"
    assert it.last_error == f"cannot start command {missing!r}: No such file or directory"


def test_sigterm_is_forwarded_item_returned_and_resumed_from_checkpoint(
    queue: WorkQueue, redis_server: RedisServer, command: list[str], tmp_path: Path
) -> None:
    item_id = queue.submit("eval", {"STEPS": "8", "STEP_S": "0.15"}, max_attempts=1)
    root = tmp_path / "ck"
    ck = root / "eval" / item_id
    w = start_worker(redis_server.url, root, command)
    wait_for(lambda: progress(ck) >= 2, what="two steps")
    w.send_signal(signal.SIGTERM)
    rc, out = finish(w)
    assert rc == 143, out
    assert (ck / "sigterm-1").exists()  # the command itself got SIGTERM
    it = queue.get(item_id)
    assert it is not None
    assert (it.state, it.preemptions, it.failures, it.checkpoint) == ("requeued", 1, 0, str(ck))
    stopped_at = progress(ck)
    assert 2 <= stopped_at < 8
    assert "item returned to the queue (preempted" in out

    rc, out = finish(start_worker(redis_server.url, root, command))
    assert rc == 0, out
    env2 = json.loads((ck / "env-2.json").read_text())
    assert env2["GPS_ATTEMPT"] == "2" and env2["GPS_CHECKPOINT_DIR"] == str(ck)
    runs = steps_run(ck)
    assert [s for s, _ in runs] == list(range(1, 9)), runs  # every step exactly once
    assert {a for s, a in runs if s > stopped_at} == {2}
    it = queue.get(item_id)
    assert it is not None and (it.state, it.attempts, it.failures) == ("done", 2, 0)


def test_command_ignoring_sigterm_is_killed_after_the_grace_period(
    queue: WorkQueue, redis_server: RedisServer, command: list[str], tmp_path: Path
) -> None:
    item_id = queue.submit("eval", {"MODE": "ignore-term", "STEPS": "1000", "STEP_S": "0.05"})
    root = tmp_path / "ck"
    w = start_worker(redis_server.url, root, command, "--grace-seconds", "0.5")
    wait_for(lambda: progress(root / "eval" / item_id) >= 1, what="a step")
    t0 = time.monotonic()
    w.send_signal(signal.SIGTERM)
    rc, out = finish(w)
    assert rc == 143, out
    assert time.monotonic() - t0 < 3.0
    assert "grace period over: SIGKILL" in out
    it = queue.get(item_id)
    assert it is not None and (it.state, it.preemptions, it.failures) == ("requeued", 1, 0)


def test_command_without_a_sigterm_handler_frees_the_pod_at_once(
    queue: WorkQueue, redis_server: RedisServer, command: list[str], tmp_path: Path
) -> None:
    # The bench's `--exit-on-sigterm`: the signal's default action ends the command at
    # once, the worker exits without waiting out the grace period and the item goes back
    # with the progress of its last checkpoint (the work after it is lost).
    item_id = queue.submit("eval", {"MODE": "no-handler", "STEPS": "1000", "STEP_S": "0.05"})
    root = tmp_path / "ck"
    ck = root / "eval" / item_id
    w = start_worker(redis_server.url, root, command, "--grace-seconds", "60")
    wait_for(lambda: progress(ck) >= 2, what="two steps")
    t0 = time.monotonic()
    w.send_signal(signal.SIGTERM)
    rc, out = finish(w)
    assert rc == 143, out
    assert time.monotonic() - t0 < 3.0  # not the 60-s grace period
    assert "SIGKILL" not in out and not (ck / "sigterm-1").exists()
    it = queue.get(item_id)
    assert it is not None and (it.state, it.preemptions, it.failures) == ("requeued", 1, 0)
    assert 2 <= progress(ck) < 1000


@pytest.mark.parametrize(
    ("mode", "step_s", "killed"),
    [
        # Steps of 0.3 s in a 1-s grace period: it finishes its step and checkpoints.
        pytest.param("steps", "0.3", False, id="the-command-checkpoints-on-sigterm"),
        pytest.param("ignore-term", "0.05", True, id="ignored-sigkill-after-the-grace-period"),
    ],
)
def test_cancel_stops_the_running_command_at_the_next_heartbeat(
    queue: WorkQueue,
    redis_server: RedisServer,
    command: list[str],
    tmp_path: Path,
    mode: str,
    step_s: str,
    killed: bool,
) -> None:
    item_id = queue.submit("eval", {"MODE": mode, "STEPS": "1000", "STEP_S": step_s})
    ck = tmp_path / "ck" / "eval" / item_id
    w = start_worker(redis_server.url, tmp_path / "ck", command, "--grace-seconds", "1")
    wait_for(lambda: progress(ck) >= 1, what="a step")
    assert queue.cancel(item_id) == "cancelling"
    rc, out = finish(w, timeout=6)
    assert rc == 0, out
    assert "item cancelled" in out
    assert ("grace period over: SIGKILL" in out) is killed, out
    assert (ck / "sigterm-1").exists() is not killed
    it = queue.get(item_id)
    assert it is not None and it.state == "cancelled" and queue.live_leases("eval") == 0


def test_worker_that_cannot_renew_kills_its_command_before_the_lease_expires(
    queue: WorkQueue, redis_server: RedisServer, command: list[str], tmp_path: Path
) -> None:
    item_id = queue.submit("eval", {"STEPS": "1000", "STEP_S": "0.05"})
    root = tmp_path / "ck"
    w = start_worker(redis_server.url, root, command, "--redis-retry-seconds", "1")
    ck = root / "eval" / item_id
    wait_for(lambda: progress(ck) >= 1, what="a step")
    pid = int(json.loads((ck / "env-1.json").read_text())["PID"])
    redis_server.stop()
    t0 = time.monotonic()

    def gone() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    wait_for(gone, timeout=3, what="the command to be killed")
    assert time.monotonic() - t0 < 1.0  # lease 1 s, renewed at most 1 s before the stop
    rc, out = finish(w)
    assert rc == 3, out
    assert "could not renew the lease" in out and "giving up" in out


@pytest.mark.parametrize(
    ("flags", "use_url", "want_rc", "want"),
    [
        pytest.param(["--class", "nope"], "ok", 2, "unknown research class 'nope'", id="unknown"),
        pytest.param([], "wrong-password", 2, "refused the credentials", id="wrong-password"),
        pytest.param(
            ["--redis-retry-seconds", "0.3"], "unreachable", 3, "cannot reach Redis", id="no-redis"
        ),
        pytest.param(
            ["--scaler-ca", "x"], "ok", 2, "--scaler HOST:PORT is required", id="no-scaler"
        ),
        pytest.param(["--lease-seconds", "0"], "ok", 2, "--lease-seconds", id="bad-lease"),
        pytest.param(
            ["--scaler", "127.0.0.1:1", "--scaler-ca", "/no/ca.pem"],
            "ok",
            2,
            "--scaler-ca /no/ca.pem: cannot read: No such file or directory\n",
            id="unreadable-ca",
        ),
    ],
)
def test_configuration_errors(
    queue: WorkQueue,
    redis_server: RedisServer,
    command: list[str],
    tmp_path: Path,
    flags: list[str],
    use_url: str,
    want_rc: int,
    want: str,
) -> None:
    url = {
        "ok": redis_server.url,
        "wrong-password": redis_server.url.replace(PASSWORD, "wrong-" + PASSWORD[::-1]),
        "unreachable": f"redis://:{PASSWORD}@127.0.0.1:1/0",
    }[use_url]
    argv = worker_argv(tmp_path, command)
    if flags and flags[0] == "--class":
        argv[argv.index("eval")] = flags[1]
        flags = []
    if "--scaler-ca" in flags:
        argv.remove("--no-scaler-check")
    cut = argv.index("--")
    argv[cut:cut] = flags
    p = subprocess.run(
        argv, env=dict(os.environ, GPS_REDIS_URL=url), cwd=REPO, capture_output=True, text=True
    )
    assert p.returncode == want_rc, p.stderr
    assert want in p.stderr
    assert PASSWORD not in p.stderr + p.stdout


# ---------------------------------------------------------------------- fail closed


class FakeSlots:
    def __init__(self, answer: int | Exception) -> None:
        self.answer = answer
        self.asked: list[str] = []

    def slots(self, research_class: str) -> int:
        self.asked.append(research_class)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer

    def close(self) -> None:
        pass


@pytest.mark.parametrize(
    ("answer", "held", "takes"),
    [
        pytest.param(
            SlotCheckError("scaler 10.0.0.1:50051: UNAVAILABLE"), 0, False, id="no-answer"
        ),
        pytest.param(0, 0, False, id="zero-slots"),
        pytest.param(1, 1, False, id="leases-equal-slots"),
        pytest.param(2, 2, False, id="leases-above-slots-after-a-shrink"),
        pytest.param(2, 1, True, id="control-a-free-slot-is-taken"),
    ],
)
def test_fail_closed(
    queue: WorkQueue, tmp_path: Path, answer: int | Exception, held: int, takes: bool
) -> None:
    for n in range(held):  # Jobs already running items of the class
        queue.submit("eval", {})
        assert queue.take("eval", token=f"h{n}", worker="other", lease_ms=60000, slots=None).lease
    item_id = queue.submit("eval", {})
    slots = FakeSlots(answer)
    opts = WorkerOptions(
        research_class="eval",
        command=[sys.executable, "-c", "pass"],
        checkpoint_root=tmp_path / "ck",
        worker_id="test",
        lease_s=5,
        max_items=1,
    )
    rc = Worker(queue, opts, slots).run()
    assert rc == 0
    assert slots.asked == ["eval"]
    it = queue.get(item_id)
    assert it is not None
    if takes:
        assert (it.state, it.attempts) == ("done", 1)
    else:
        assert (it.state, it.attempts) == ("queued", 0)
        assert queue.queued_ids("eval") == [item_id]
        assert queue.live_leases("eval") == held


# ---------------------------------------------------------------------- real gRPC scaler


@dataclass
class Pem:
    cert: bytes
    key: bytes


def _issue(
    cn: str, ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None, server: bool
) -> tuple[Pem, x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    now = datetime.datetime.now(datetime.UTC)
    b = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(ca[0].subject if ca else name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca is None, path_length=None), critical=True)
    )
    if server:
        b = b.add_extension(x509.SubjectAlternativeName([x509.DNSName("scaler.test")]), False)
    cert = b.sign(ca[1] if ca else key, hashes.SHA256())
    pem = Pem(
        cert.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )
    return pem, cert, key


class FakeScaler(pb_grpc.ExternalScalerServicer):
    """GetMetrics like the real scaler's research trigger: `slots` per class, or an error.
    (The other three methods keep the generated UNIMPLEMENTED answers.)"""

    def __init__(self) -> None:
        self.slots: dict[str, int] = {}
        self.fail: grpc.StatusCode | None = None
        self.metric_override: str | None = None
        self.requests: list[tuple[str, dict[str, str]]] = []

    async def GetMetrics(
        self, request: pb.GetMetricsRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetMetricsResponse:
        md = dict(request.scaledObjectRef.scalerMetadata)
        self.requests.append((request.metricName, md))
        if self.fail is not None:
            await context.abort(self.fail, "no fresh data")
        name = md.get("researchClass", "")
        v = self.slots.get(name, 0)
        metric = self.metric_override or f"research-{name}"
        return pb.GetMetricsResponse(
            metricValues=[pb.MetricValue(metricName=metric, metricValue=v, metricValueFloat=v)]
        )


@dataclass
class ScalerServer:
    servicer: FakeScaler
    address: str
    tls: dict[str, str]  # file paths: ca, client cert/key, other-ca


@pytest.fixture
async def scaler_server(tmp_path: Path) -> AsyncIterator[ScalerServer]:
    """Two ports of one real grpc.aio server: plaintext and mTLS (client cert required)."""
    ca_pem, ca_cert, ca_key = _issue("test-ca", None, False)
    srv_pem, _, _ = _issue("scaler.test", (ca_cert, ca_key), True)
    cli_pem, _, _ = _issue("gpu-pool-worker", (ca_cert, ca_key), False)
    other_pem, _, _ = _issue("other-ca", None, False)
    files = {
        "ca": ca_pem.cert, "cert": cli_pem.cert, "key": cli_pem.key, "other-ca": other_pem.cert,
    }  # fmt: skip
    paths = {}
    for k, v in files.items():
        (tmp_path / f"{k}.pem").write_bytes(v)
        paths[k] = str(tmp_path / f"{k}.pem")
    servicer = FakeScaler()  # type: ignore[abstract]  # only GetMetrics is used
    server = grpc.aio.server()
    pb_grpc.add_ExternalScalerServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    creds = grpc.ssl_server_credentials(
        [(srv_pem.key, srv_pem.cert)], root_certificates=ca_pem.cert, require_client_auth=True
    )
    paths["address"] = f"127.0.0.1:{server.add_secure_port('127.0.0.1:0', creds)}"
    await server.start()
    yield ScalerServer(servicer, f"127.0.0.1:{port}", paths)
    await server.stop(None)


def _closed_port() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


@pytest.mark.parametrize(
    ("setup", "want"),
    [
        pytest.param({"slots": 3}, 3, id="plaintext-slots"),
        pytest.param({"slots": 0}, 0, id="plaintext-zero"),
        pytest.param({"fail": grpc.StatusCode.UNAVAILABLE}, "UNAVAILABLE", id="scaler-error"),
        pytest.param({"metric": "research-other"}, "no single metric", id="wrong-metric"),
        pytest.param({"down": True}, "UNAVAILABLE", id="scaler-unreachable"),
        pytest.param({"slots": 2, "mtls": True}, 2, id="mtls-accepted"),
        pytest.param({"mtls": True, "no_client_cert": True}, "UNAVAILABLE", id="mtls-no-cert"),
        pytest.param({"mtls": True, "wrong_ca": True}, "UNAVAILABLE", id="mtls-untrusted-server"),
    ],
)
async def test_slot_checker_against_a_real_grpc_server(
    scaler_server: ScalerServer, setup: dict[str, Any], want: int | str
) -> None:
    s = scaler_server
    s.servicer.slots["eval"] = setup.get("slots", 0)
    s.servicer.fail = setup.get("fail")
    s.servicer.metric_override = setup.get("metric")
    ep = ScalerEndpoint(address=s.address, timeout_s=2)
    if setup.get("down"):
        ep = ScalerEndpoint(address=_closed_port(), timeout_s=1)
    if setup.get("mtls"):
        ep = ScalerEndpoint(
            address=s.tls["address"],
            ca_file=s.tls["other-ca" if setup.get("wrong_ca") else "ca"],
            cert_file=None if setup.get("no_client_cert") else s.tls["cert"],
            key_file=None if setup.get("no_client_cert") else s.tls["key"],
            server_name="scaler.test",
            timeout_s=2,
        )
    checker = GrpcSlotChecker(ep)
    try:
        if isinstance(want, int):
            assert await asyncio.to_thread(checker.slots, "eval") == want
            assert s.servicer.requests[-1] == ("research-eval", {"researchClass": "eval"})
        else:
            with pytest.raises(SlotCheckError, match=want):
                await asyncio.to_thread(checker.slots, "eval")
    finally:
        checker.close()


# The class's metric in a GetMetrics reply as (metricValue, metricValueFloat) -> slots or error.
REPLIES = {
    "float-wins-when-above-0": ((1, 2.7), 2),
    "the-integer-when-float-is-0": ((3, 0.0), 3),
    "zero": ((0, 0.0), 0),
    "an-infinite-float": ((0, math.inf), "is inf, not a number >= 0"),
    "a-negative-integer": ((-2, 0.0), "is -2.0, not a number >= 0"),
}


@pytest.mark.parametrize(("value", "want"), REPLIES.values(), ids=REPLIES.keys())
def test_slots_from_reply(value: tuple[int, float], want: int | str) -> None:
    m = pb.MetricValue(metricName="research-eval", metricValue=value[0], metricValueFloat=value[1])
    reply = pb.GetMetricsResponse(metricValues=[m])
    if isinstance(want, int):
        assert slots_from_reply(reply, "eval") == want
    else:
        with pytest.raises(SlotCheckError, match=re.escape(want)):
            slots_from_reply(reply, "eval")
    twice = pb.GetMetricsResponse(metricValues=[m, m])
    with pytest.raises(SlotCheckError, match="no single metric 'research-eval'"):
        slots_from_reply(twice, "eval")


# Redis down for (seconds) with --redis-retry-seconds (budget): (answered?, warnings logged).
REDIS_OUTAGES = {
    "a-blip-is-retried-after-one-warning": (0.3, 60.0, True, 1),
    "a-restart-of-12-s-warns-every-5-s": (12.0, 60.0, True, 3),
    "longer-than-the-budget-gives-up-at-its-end": (12.0, 10.0, False, 2),
}


@pytest.mark.parametrize(
    ("outage", "budget", "answered", "warnings"), REDIS_OUTAGES.values(), ids=REDIS_OUTAGES.keys()
)
def test_redis_outages_are_retried_with_backoff(
    queue: WorkQueue,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    outage: float,
    budget: float,
    answered: bool,
    warnings: int,
) -> None:
    """Each call retried 0.05, 0.1, 0.2, ... 1 s apart (never sleeping past the budget),
    one warning per 5 s, then RedisGaveUp."""
    now, sleeps = [1000.0], []

    def sleep(s: float) -> None:
        assert s > 0  # a zero sleep on this clock would spin for ever
        sleeps.append(s)
        now[0] += s

    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    monkeypatch.setattr(time, "sleep", sleep)
    up_at = now[0] + outage

    def call() -> str:
        if now[0] < up_at:
            raise redis.exceptions.ConnectionError("Connection refused")
        return "ok"

    opts = WorkerOptions("eval", ["true"], tmp_path, "w", redis_retry_s=budget)
    worker = Worker(queue, opts, None)
    with caplog.at_level(logging.WARNING, logger="gpu-pool-worker"):
        if answered:
            assert worker._redis("take", call) == "ok"
        else:
            with pytest.raises(RedisGaveUp, match=r"^take: cannot reach Redis"):
                worker._redis("take", call)
    assert sleeps[:6] == pytest.approx([0.05, 0.1, 0.2, 0.4, 0.8, 1.0][: len(sleeps)])
    assert max(sleeps) <= 1.0
    if not answered:
        assert sum(sleeps) == pytest.approx(budget)  # the last sleep ends at the budget
    warned = [r for r in caplog.records if "Redis unavailable, retrying" in r.getMessage()]
    assert len(warned) == warnings


# Flags checked before anything connects: (flags, the error or None for accepted).
OPTIONS = {
    "lease-at-its-least": (["--lease-seconds", "0.5"], None),
    "lease-below": (["--lease-seconds", "0.49"], "--lease-seconds must be >= 0.5"),
    "no-grace": (["--grace-seconds", "0"], None),
    "negative-grace": (["--grace-seconds", "-1"], "other durations >= 0"),
    "no-redis-retry": (["--redis-retry-seconds", "0"], None),
    "negative-redis-retry": (["--redis-retry-seconds", "-0.1"], "other durations >= 0"),
    "no-gpus-no-limit": (["--gpus", "0", "--max-items", "0"], None),
    "negative-gpus": (["--gpus", "-1"], "--gpus and --max-items must be >= 0"),
    "negative-max-items": (["--max-items", "-1"], "--gpus and --max-items must be >= 0"),
}


@pytest.mark.parametrize(("flags", "error"), OPTIONS.values(), ids=OPTIONS.keys())
def test_the_worker_s_numbers_are_checked_at_their_edges(
    flags: list[str], error: str | None
) -> None:
    args = build_parser().parse_args(
        ["--redis", "redis://127.0.0.1:1/0", "--class", "eval", "--no-scaler-check", *flags]
    )
    if error is None:
        _options(args, ["true"])
    else:
        with pytest.raises(InputError, match=re.escape(error)):
            _options(args, ["true"])


# --log-format, in a pod (KUBERNETES_SERVICE_HOST set) or not -> JSON lines?
LOG_FORMATS = {
    "auto-in-a-pod-is-json": ("auto", True, True),
    "auto-elsewhere-is-text": ("auto", False, False),
    "json-anywhere": ("json", False, True),
    "text-even-in-a-pod": ("text", True, False),
}


@pytest.mark.parametrize(("fmt", "in_pod", "is_json"), LOG_FORMATS.values(), ids=LOG_FORMATS.keys())
def test_log_format(
    fmt: str,
    in_pod: bool,
    is_json: bool,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if in_pod:
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    else:
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    before = (worker_log.handlers[:], worker_log.level, worker_log.propagate)
    try:
        setup_logging(fmt, "info")
        worker_log.info("took item", extra={"research_class": "eval", "fields": {"item": "i-1"}})
    finally:
        worker_log.handlers[:], worker_log.level, worker_log.propagate = before
    line = capsys.readouterr().err.strip()
    if is_json:
        got = json.loads(line)
        assert (got["level"], got["msg"], got["research_class"], got["item"]) == (
            "info",
            "took item",
            "eval",
            "i-1",
        )
    else:
        assert line.endswith("took item  [research_class=eval item=i-1]"), line


def test_metric_name_matches_the_scaler() -> None:
    from scaler.serve.grpc_api import metric_name_for

    assert research_metric_name("eval") == metric_name_for("research", "eval")


@pytest.mark.parametrize(
    ("slots", "want_done"),
    [pytest.param(1, 2, id="one-slot-runs-items-one-after-another"), pytest.param(0, 0, id="zero")],
)
async def test_worker_asks_the_real_scaler_over_mtls(
    scaler_server: ScalerServer,
    queue: WorkQueue,
    redis_server: RedisServer,
    command: list[str],
    tmp_path: Path,
    slots: int,
    want_done: int,
) -> None:
    s = scaler_server
    s.servicer.slots["eval"] = slots
    ids = [queue.submit("eval", {}) for _ in range(2)]
    tls = s.tls
    argv = worker_argv(
        tmp_path / "ck",
        command,
        *("--scaler", tls["address"], "--scaler-ca", tls["ca"], "--scaler-cert", tls["cert"]),
        *("--scaler-key", tls["key"], "--scaler-server-name", "scaler.test"),
    )
    proc = await asyncio.create_subprocess_exec(
        *argv,
        env=dict(os.environ, GPS_REDIS_URL=redis_server.url),
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, out.decode()
    states = [it.state for it in (queue.get(i) for i in ids) if it is not None]
    assert states.count("done") == want_done
    assert len(s.servicer.requests) >= 1
    if slots == 0:
        assert "scaler grants 0 slots" in out.decode()
        assert all(it.attempts == 0 for it in (queue.get(i) for i in ids) if it is not None)


@pytest.mark.parametrize("secret", ["GPS_REDIS_URL", "GPS_REDIS_PASSWORD", "GPS_REDIS_USERNAME"])
def test_redis_credentials_never_reach_the_command(secret: str, tmp_path: Path) -> None:
    """The chart hands the worker its Redis password as env vars; the command gets none."""
    from scaler.research.model import Item
    from scaler.research.worker import command_env

    base = {"PATH": "/usr/bin", secret: "s3cr3t"}
    env = command_env(base, Item("0123456789abcdef", "eval", {"K": "v"}), tmp_path, "eval")
    assert secret not in env and "s3cr3t" not in env.values()
    assert env["K"] == "v" and env["PATH"] == "/usr/bin"
