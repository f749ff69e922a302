"""The scaler reads the work queue (real redis-server): a queue-fed class gets no more
slots than items waiting or leased, an empty queue gets none, and an unread queue gets 0
with the reason, never a made-up count. Then the same through the whole scaler: gRPC
answers and explain."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from scaler.app import Options, Running, Scaler
from scaler.config import Config, load_config, parse_config
from scaler.core.decision import QueueRead
from scaler.ingest.kube_secret import SecretUnreadable
from scaler.research.depth import SECRET_REFRESH_S, SECRET_RETRY_S, RedisQueueDepth
from scaler.research.queue import WorkQueue
from scaler.research.redisconn import connect
from tests.support.exposition import ExpositionServer
from tests.support.kubeapi import FakeKubeAPI, make_secret
from tests.support.paths import FIXTURES
from tests.support.redisserver import RedisServer, registered_queue, running_redis
from tests.support.scaler import Client, wait_for, write_config

PASSWORD = "depth-pw-1"


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    yield from running_redis(tmp_path, password=PASSWORD)


@pytest.fixture
def queue(redis_server: RedisServer) -> Iterator[WorkQueue]:
    yield from registered_queue(redis_server, ["train", "eval"])


def url_file(tmp_path: Path, url: str) -> Path:
    p = tmp_path / "queue-url"
    p.write_text(url + "\n")
    return p


def cfg_with(url_path: Path, prefix: str = "gps", database: int | None = None) -> Config:
    q: dict[str, Any] = {"urlFile": str(url_path), "prefix": prefix}
    if database is not None:
        q["database"] = database
    return parse_config(
        {
            "pool": {"name": "p", "capacity": {"gpus": 8}},
            "research": [
                {
                    "name": "train",
                    "gpusPerJob": 1,
                    "queue": q,
                },
                {"name": "plain", "gpusPerJob": 1},
            ],
        }
    )


async def test_counts_waiting_and_leased_items_of_the_class(
    tmp_path: Path, redis_server: RedisServer, queue: WorkQueue
) -> None:
    depth = RedisQueueDepth()
    cfg = cfg_with(url_file(tmp_path, redis_server.url))
    assert (await depth.read(cfg))["train"].items == 0
    for n in range(3):
        queue.submit("train", {"N": str(n)})
    queue.submit("eval", {"N": "x"})  # another class's item does not count
    lease = queue.take("train", token="t1", worker="w1", lease_ms=60_000, slots=None).lease
    assert lease is not None
    reads = await depth.read(cfg)
    assert set(reads) == {"train"}  # the class without a queue is not read
    assert (reads["train"].items, reads["train"].error) == (3, None)  # 2 waiting + 1 leased
    assert queue.finish(lease, "done").status == "ok"
    assert (await depth.read(cfg))["train"].items == 2
    depth.close()


async def test_another_prefix_is_another_queue(
    tmp_path: Path, redis_server: RedisServer, queue: WorkQueue
) -> None:
    queue.submit("train", {"N": "1"})
    depth = RedisQueueDepth()
    reads = await depth.read(cfg_with(url_file(tmp_path, redis_server.url), prefix="other"))
    assert reads["train"].items == 0
    depth.close()


# (what the URL file holds or None for no file, words in the error)
UNREAD_CASES = [
    pytest.param("wrong-password", "refused the credentials", id="wrong-password"),
    pytest.param("stopped", "cannot reach Redis", id="server-down"),
    pytest.param(None, "queue.urlFile", id="no-url-file"),
    pytest.param("", "is empty", id="empty-url-file"),
    pytest.param("http://example.com", "is not a Redis URL", id="not-a-redis-url"),
    # redis-py alone would read database 0 (the workers' here: a count, of the wrong queue).
    pytest.param("path:/O", "'/O' is not a database number", id="database-path-not-a-number"),
    pytest.param(b"\xff\xfe", "cannot read: 'utf-8' codec", id="url-file-not-utf-8"),
]


@pytest.mark.parametrize(("case", "words"), UNREAD_CASES)
async def test_an_unread_queue_gives_the_reason_never_a_count(
    tmp_path: Path,
    redis_server: RedisServer,
    queue: WorkQueue,
    case: str | bytes | None,
    words: str,
) -> None:
    queue.submit("train", {"N": "1"})
    url = redis_server.url
    if case == "wrong-password":
        url = url.replace(PASSWORD, "nope")
    elif case == "stopped":
        redis_server.stop()
    elif isinstance(case, str) and case.startswith("path:"):
        url = url.rsplit("/", 1)[0] + case.removeprefix("path:")
    elif isinstance(case, str):
        url = case
    path = url_file(tmp_path, url) if case is not None else tmp_path / "missing"
    if isinstance(case, bytes):
        path.write_bytes(case)
    depth = RedisQueueDepth()
    read = (await depth.read(cfg_with(path)))["train"]
    assert read.items is None
    assert read.error is not None and words in read.error
    assert PASSWORD not in read.error and "nope" not in read.error
    depth.close()


async def test_an_unread_queue_is_logged_once_per_reason_and_when_read_again(
    tmp_path: Path, redis_server: RedisServer, queue: WorkQueue, caplog: pytest.LogCaptureFixture
) -> None:
    queue.submit("train", {"N": "1"})
    path = url_file(tmp_path, redis_server.url.replace(PASSWORD, "nope"))
    depth = RedisQueueDepth()
    cfg = cfg_with(path)
    with caplog.at_level(logging.INFO, logger="scaler.research.depth"):
        for _ in range(3):  # every cycle unread, one line
            assert (await depth.read(cfg))["train"].items is None
        url_file(tmp_path, redis_server.url)
        for _ in range(2):
            assert (await depth.read(cfg))["train"].items == 1
        url_file(tmp_path, "")
        assert (await depth.read(cfg))["train"].items is None
    lines = [r.getMessage() for r in caplog.records if "work queue" in r.getMessage()]
    assert len(lines) == 3, lines
    assert lines[0].startswith("work queue unread, class gets 0 slots: ")
    assert "refused the credentials" in lines[0] and "nope" not in lines[0]
    assert lines[1] == "work queue read again (1 items)"
    assert lines[2].startswith("work queue unread") and "is empty" in lines[2]
    depth.close()


# (how the URL selects its database, queue.database, the items read or words in the error)
DATABASE_CASES = [
    pytest.param("/0", 0, 1, None, id="path-matches"),
    pytest.param("", 0, 1, None, id="no-database-is-0"),
    pytest.param("/3", 0, None, "selects database 3", id="path-differs"),
    pytest.param("?db=3", 0, None, "selects database 3", id="query-differs"),
    # Unchecked, the other database is read, and its queue looks empty: what the check stops.
    pytest.param("/3", None, 0, None, id="unchecked-reads-another-database"),
]


@pytest.mark.parametrize(("select", "database", "items", "words"), DATABASE_CASES)
async def test_a_url_on_another_database_than_the_workers_is_unread(
    tmp_path: Path,
    redis_server: RedisServer,
    queue: WorkQueue,
    select: str,
    database: int | None,
    items: int | None,
    words: str | None,
) -> None:
    queue.submit("train", {"N": "1"})  # the workers' queue, in database 0
    url = redis_server.url.removesuffix("/0") + select
    cfg = cfg_with(url_file(tmp_path, url), database=database)
    depth = RedisQueueDepth()
    read = (await depth.read(cfg))["train"]
    assert read.items == items
    if words is None:
        assert read.error is None
    else:
        assert read.error is not None and words in read.error
        assert "database 0" in read.error and PASSWORD not in read.error
    depth.close()


async def test_a_rotated_url_file_is_used_on_the_next_read(
    tmp_path: Path, redis_server: RedisServer, queue: WorkQueue
) -> None:
    made: list[tuple[str, redis.Redis]] = []

    def client_for(url: str, timeout_s: float) -> redis.Redis:
        made.append((url, connect(url, timeout_s=timeout_s)))
        return made[-1][1]

    depth = RedisQueueDepth(client_for)
    path = url_file(tmp_path, redis_server.url.replace(PASSWORD, "old"))
    cfg = cfg_with(path)
    assert (await depth.read(cfg))["train"].error is not None
    assert (await depth.read(cfg))["train"].error is not None
    assert len(made) == 1  # one client per URL, kept between reads
    path.write_text(redis_server.url)
    assert (await depth.read(cfg))["train"].items == 0
    assert [u for u, _ in made] == [redis_server.url.replace(PASSWORD, "old"), redis_server.url]
    depth.close()


async def test_classes_on_one_redis_share_one_client(
    tmp_path: Path, redis_server: RedisServer, queue: WorkQueue
) -> None:
    made: list[str] = []

    def client_for(url: str, timeout_s: float) -> redis.Redis:
        made.append(url)
        return connect(url, timeout_s=timeout_s)

    url = str(url_file(tmp_path, redis_server.url))
    cfg = parse_config(
        {
            "pool": {"name": "p", "capacity": {"gpus": 8}},
            "research": [
                {"name": n, "gpusPerJob": 1, "queue": {"urlFile": url}} for n in ("train", "eval")
            ],
        }
    )
    queue.submit("eval", {"N": "1"})
    depth = RedisQueueDepth(client_for)
    for _ in range(3):
        reads = await depth.read(cfg)
        assert {n: r.items for n, r in reads.items()} == {"train": 0, "eval": 1}
    assert made == [redis_server.url]  # read concurrently, built once
    depth.close()


@pytest.mark.parametrize(
    ("queue_timeout", "want"), [(None, 0.7), (0.3, 0.3)], ids=["scrape-timeout", "own-timeout"]
)
async def test_a_read_waits_no_longer_than_its_timeout(
    tmp_path: Path, redis_server: RedisServer, queue_timeout: float | None, want: float
) -> None:
    timeouts: list[float] = []

    def client_for(url: str, timeout_s: float) -> redis.Redis:
        timeouts.append(timeout_s)
        return connect(url, timeout_s=timeout_s)

    q: dict[str, Any] = {"urlFile": str(url_file(tmp_path, redis_server.url))}
    if queue_timeout is not None:
        q["timeoutSeconds"] = queue_timeout
    cfg = parse_config(
        {
            "pool": {"name": "p", "capacity": {"gpus": 8}},
            "scrape": {"intervalSeconds": 1, "timeoutSeconds": 0.7},
            "research": [{"name": "train", "gpusPerJob": 1, "queue": q}],
        }
    )
    depth = RedisQueueDepth(client_for)
    assert (await depth.read(cfg))["train"].items == 0
    assert timeouts == [want]
    depth.close()


# -- the workers' Secret through the Kubernetes API (queue.secret) ----------------------


def secret_cfg(redis_server: RedisServer, **secret: Any) -> Config:
    q: dict[str, Any] = {
        "secret": {"namespace": "research", "name": "research-redis", **secret},
        "address": f"127.0.0.1:{redis_server.port}",
    }
    return parse_config(
        {
            "pool": {"name": "p", "capacity": {"gpus": 8}},
            "research": [{"name": "train", "gpusPerJob": 1, "queue": q}],
        }
    )


class Secrets:
    """A SecretGetter over a dict (the seam the scaler's Kubernetes client fills)."""

    def __init__(self, data: dict[str, str] | Exception) -> None:
        self.data = data
        self.calls = 0

    def __call__(self, namespace: str, name: str, timeout_s: float) -> dict[str, str]:
        assert (namespace, name) == ("research", "research-redis")
        self.calls += 1
        if isinstance(self.data, Exception):
            raise self.data
        return self.data


# (the Secret's data or the getter's error, queue.secret's keys, items read or error words)
SECRET_CASES = [
    pytest.param({"password": PASSWORD}, {}, 1, id="url-built-from-the-password"),
    pytest.param(
        {"user": "default", "password": PASSWORD},
        {"usernameKey": "user"},
        1,
        id="with-a-user-name",
    ),
    pytest.param({"url": "URL"}, {"urlKey": "url"}, 1, id="the-workers-full-url"),
    pytest.param({"pass": PASSWORD}, {}, "has no key 'password'", id="missing-key"),
    pytest.param({"password": "nope"}, {}, "refused the credentials", id="wrong-password"),
    pytest.param(
        SecretUnreadable("Secret research/research-redis: forbidden (the scaler's ...)"),
        {},
        "Secret research/research-redis: forbidden",
        id="api-refuses",
    ),
    pytest.param(None, {}, "no Kubernetes API client", id="no-api-client"),
]


@pytest.mark.parametrize(("data", "keys", "want"), SECRET_CASES)
async def test_the_workers_secret_gives_the_url(
    redis_server: RedisServer,
    queue: WorkQueue,
    data: dict[str, str] | Exception | None,
    keys: dict[str, str],
    want: int | str,
) -> None:
    queue.submit("train", {"N": "1"})
    if isinstance(data, dict) and data.get("url") == "URL":
        data = {"url": redis_server.url}
    depth = RedisQueueDepth(secrets=Secrets(data) if data is not None else None)
    read = (await depth.read(secret_cfg(redis_server, **keys)))["train"]
    if isinstance(want, int):
        assert (read.items, read.error) == (want, None)
    else:
        assert read.items is None and read.error is not None and want in read.error
        assert PASSWORD not in read.error
    depth.close()


async def test_a_password_that_is_not_url_safe_is_quoted(tmp_path: Path) -> None:
    # The chart's worker URL needs a URL-safe password; the scaler builds its own, quoted.
    password = "p@ss:/w#rd%?"
    for server in running_redis(tmp_path, password=password):
        q = WorkQueue(server.client())  # not through its URL: that password is not URL-safe
        q.update_classes(add=["train"])
        q.submit("train", {"N": "1"})
        depth = RedisQueueDepth(secrets=Secrets({"password": password}))
        read = (await depth.read(secret_cfg(server)))["train"]
        assert (read.items, read.error) == (1, None)
        depth.close()


async def test_the_secret_is_read_again_each_minute_and_kept_when_that_fails(
    redis_server: RedisServer, queue: WorkQueue, caplog: pytest.LogCaptureFixture
) -> None:
    now = [0.0]
    secrets = Secrets({"password": PASSWORD})
    # A monotonic clock does not start at 0 (the warning's age is a difference).
    depth = RedisQueueDepth(secrets=secrets, clock=lambda: 1000.0 + now[0])
    cfg = secret_cfg(redis_server)
    queue.submit("train", {"N": "1"})

    async def read_at(t: float) -> QueueRead:
        now[0] = t
        return (await depth.read(cfg))["train"]

    for t in (0.0, 10.0, SECRET_REFRESH_S - 1):
        assert (await read_at(t)).items == 1
    assert secrets.calls == 1  # read once within the minute
    # The API refuses the next read: the credentials read before still count the items
    # (the count is live from Redis), and the refusal is logged once.
    secrets.data = SecretUnreadable("Secret research/research-redis: forbidden")
    assert (await read_at(SECRET_REFRESH_S - 1)).warning is None

    def warned() -> list[str]:
        return [r.getMessage() for r in caplog.records if "credentials unread" in r.getMessage()]

    with caplog.at_level(logging.WARNING, logger="scaler.research.depth"):
        assert (await read_at(SECRET_REFRESH_S)).items == 1
        first = warned()
        kept = await read_at(SECRET_REFRESH_S + 5)  # read again (backing off), refused again
    assert secrets.calls == 3
    # explain says the count rests on credentials that no longer read.
    assert (kept.items, kept.warning) == (
        1,
        "read 65 s ago, reading them again fails: Secret research/research-redis: forbidden "
        "(counted with the credentials read then, until the password rotates)",
    )
    # Logged at the first refusal, not again for the same one.
    assert (
        first
        == warned()
        == [
            "work queue credentials unread: Secret research/research-redis: forbidden "
            "(keeping the credentials read before)"
        ]
    )
    # Rotated: Redis takes a new password and the Secret holds it; within the next minute
    # the old one is refused, then the new one is read and used.
    redis_server.client().config_set("requirepass", "rotated-pw-2")
    secrets.data = {"password": "rotated-pw-2"}
    healed = await read_at(2 * SECRET_REFRESH_S + 5)
    assert (healed.items, healed.warning) == (1, None)
    depth.close()


async def test_a_failing_secret_read_backs_off_to_once_a_minute(
    redis_server: RedisServer, queue: WorkQueue
) -> None:
    # The Role not applied yet: every read is refused. Each cycle (5 s) the class is
    # unread (0 slots, never a count), but the API is asked 5, 10, 20, 40 s apart, then
    # once a minute, not once per cycle.
    now = [0.0]
    secrets = Secrets(SecretUnreadable("Secret research/research-redis: forbidden"))
    depth = RedisQueueDepth(secrets=secrets, clock=lambda: now[0])
    cfg = secret_cfg(redis_server)
    queue.submit("train", {"N": "1"})

    async def cycle(t: float) -> tuple[QueueRead, bool]:
        now[0], before = t, secrets.calls
        return (await depth.read(cfg))["train"], secrets.calls > before

    asked = []
    for t in range(0, 300, 5):
        read, called = await cycle(t)
        assert (read.items, read.error) == (None, "Secret research/research-redis: forbidden")
        asked += [t] if called else []
    assert SECRET_RETRY_S == 5 and SECRET_REFRESH_S == 60
    assert asked == [0, 5, 15, 35, 75, 135, 195, 255]
    # Put right: read at its next try (within a minute), then every minute again.
    secrets.data = {"password": PASSWORD}
    assert [(await cycle(t))[0].items for t in (300, 310, 315)] == [None, None, 1]
    assert [(await cycle(t))[1] for t in (320, 370, 375)] == [False, False, True]
    # Failing again after a good read backs off from the start, keeping the credentials.
    secrets.data = SecretUnreadable("Secret research/research-redis: forbidden")
    got = [await cycle(t) for t in (435, 440, 445, 450)]
    assert [(r.items, called) for r, called in got] == [(1, True), (1, True), (1, False), (1, True)]
    depth.close()


# -- the whole scaler ------------------------------------------------------------------


@pytest.fixture
async def scaler_env(
    tmp_path: Path,
    exposition_server: Callable[[str], ExpositionServer],
    redis_server: RedisServer,
) -> AsyncIterator[tuple[Client, Path, Running]]:
    target = exposition_server((FIXTURES / "metrics_after_load.txt").read_text())
    path = write_config(tmp_path / "pool.yaml", [target.address])
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    url = url_file(tmp_path, redis_server.url)
    data["research"] = [
        {"name": "train", "gpusPerJob": 1, "maxJobs": 100, "queue": {"urlFile": str(url)}},
        {"name": "eval", "gpusPerJob": 1, "maxJobs": 100},
    ]
    path.write_text(yaml.safe_dump(data))
    scaler = Scaler(
        load_config(path),
        Options(str(path), grpc_port=0, metrics_port=0, host="127.0.0.1", reload_seconds=0.1),
    )
    running = await scaler.start()
    client = Client(running.grpc_port)
    yield client, path, running
    await client.channel.close()
    await scaler.shutdown(running)


async def answers(client: Client, train: int, eval_: int) -> None:
    """Wait until KEDA's two GetMetrics calls answer (train, eval_); name the last answers."""
    seen: list[tuple[int, int]] = []

    async def check() -> bool:
        seen.append(
            (await client.value(researchClass="train"), await client.value(researchClass="eval"))
        )
        return seen[-1] == (train, eval_)

    try:
        await wait_for(check)
    except AssertionError:
        raise AssertionError(f"wanted (train, eval) = {(train, eval_)}, got {seen[-3:]}") from None


async def test_keda_is_told_the_items_not_the_free_slots(
    scaler_env: tuple[Client, Path, Running], queue: WorkQueue, redis_server: RedisServer
) -> None:
    client, path, _ = scaler_env
    # 64 GPUs − 1 replica × 4 − reserve 4 = 56 one-GPU slots. An empty queue: none for
    # train, so KEDA starts no Job that would find nothing; eval (no queue) gets them all.
    await answers(client, 0, 56)
    for n in range(3):
        queue.submit("train", {"N": str(n)})
    await answers(client, 3, 53)
    # The explain of the running config says why (a one-shot: reads Redis itself).
    explain = [sys.executable, "-m", "scaler", "explain", "--config", str(path)]
    done = await asyncio.to_thread(
        subprocess.run, explain, capture_output=True, text=True, timeout=60, check=True
    )
    out = done.stdout
    assert "research train: 3 slot(s) × 1 GPU(s)" in out, out
    assert "capped at 3 queued item(s) (waiting + leased)" in out, out
    assert "work queue: 3 item(s) waiting or leased" in out, out
    # Redis goes away: train fails closed (never a count kept from before), eval unchanged.
    redis_server.stop()
    await answers(client, 0, 56)


async def test_the_queue_read_is_in_the_metrics(
    scaler_env: tuple[Client, Path, Running], queue: WorkQueue, redis_server: RedisServer
) -> None:
    client, _, running = scaler_env
    queue.submit("train", {"N": "1"})
    await answers(client, 1, 55)

    def metric() -> str:
        url = f"http://127.0.0.1:{running.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as r:
            return str(r.read().decode())

    await wait_for(
        lambda: 'gpu_pool_scaler_research_queue_items{research_class="train"} 1.0' in metric()
    )
    assert 'research_queue_items{research_class="eval"}' not in metric()
    assert 'gpu_pool_scaler_research_queue_unread{research_class="train"} 0.0' in metric()
    assert 'research_queue_unread{research_class="eval"}' not in metric()
    # Unread: flagged (the alert GpuPoolScalerResearchQueueUnread), and no count at all.
    redis_server.stop()
    await wait_for(
        lambda: 'gpu_pool_scaler_research_queue_unread{research_class="train"} 1.0' in metric()
    )
    assert 'research_queue_items{research_class="train"}' not in metric()


async def test_the_scaler_reads_the_workers_secret_through_its_kubernetes_client(
    tmp_path: Path,
    exposition_server: Callable[[str], ExpositionServer],
    redis_server: RedisServer,
    queue: WorkQueue,
) -> None:
    """The serve wiring: queue.secret read with the scaler's own API client (a real HTTP
    server in the API's place), then the count from Redis in KEDA's answers; the reads'
    outcomes in the metrics."""
    target = exposition_server((FIXTURES / "metrics_after_load.txt").read_text())
    path = write_config(tmp_path / "pool.yaml", [target.address])
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    q = {
        "secret": {"namespace": "research", "name": "research-redis"},
        "address": f"127.0.0.1:{redis_server.port}",
        "database": 0,
    }
    data["research"] = [
        {"name": "train", "gpusPerJob": 1, "maxJobs": 100, "queue": q},
        {"name": "eval", "gpusPerJob": 1, "maxJobs": 100},
    ]
    path.write_text(yaml.safe_dump(data))
    with FakeKubeAPI() as api:
        api.put(
            "secrets", make_secret("research", "research-redis", {"password": PASSWORD.encode()})
        )
        scaler = Scaler(
            load_config(path),
            Options(str(path), grpc_port=0, metrics_port=0, host="127.0.0.1", kube_api=api.client),
        )
        # No Role yet: the API refuses the Secret, so train's queue is unread (0 slots).
        api.fail(403, resources=("secrets",))
        running = await scaler.start()
        client = Client(running.grpc_port)
        reg = running.metrics.registry

        def reads(result: str) -> float:
            name = "gpu_pool_scaler_research_queue_secret_reads_total"
            return reg.get_sample_value(name, {"result": result}) or 0.0

        try:
            for n in range(3):
                queue.submit("train", {"N": str(n)})
            await answers(client, 0, 56)
            assert reads("error") >= 1 and reads("ok") == 0
            api.heal()  # the Role is there: read on the next cycle, then counted
            await answers(client, 3, 53)
            # Read once since, not once per cycle (SECRET_REFRESH_S).
            assert reads("ok") == 1
        finally:
            await client.channel.close()
            await scaler.shutdown(running)
