"""Kubernetes discovery: pure pod/EndpointSlice tables, then the real `kubernetes` client
against tests/support/kubeapi.py's fake API server (list + watch, 410 re-list, failures)."""

from __future__ import annotations

import copy
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from scaler.config import InferenceService, ScrapeConfig
from scaler.core.aggregate import aggregate
from scaler.core.load import Endpoint, ScrapeJob, ServiceLoad, TargetPhase
from scaler.core.tracker import TargetTracker
from scaler.ingest.kube_discovery import KubeDiscovery, pod_endpoints, slice_endpoints
from scaler.ingest.scrape import Scraper, make_client
from tests.support.exposition import vllm_exposition
from tests.support.kubeapi import FakeKubeAPI, make_endpoint_slice, make_pod

S, ST = TargetPhase.SERVING, TargetPhase.STARTING
LABELS = {"app": "vllm-chat"}


def _pod(name: str, ip: str | None, **kw: Any) -> dict[str, Any]:
    return make_pod(name, namespace="serving", labels=LABELS, ip=ip, **kw)


def _deleting(pod: dict[str, Any]) -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    pod["metadata"]["deletionTimestamp"] = "2026-11-30T12:00:00Z"
    return pod


@pytest.mark.parametrize(
    ("pods", "expected"),
    [
        pytest.param([_pod("a", "10.0.0.1")], [Endpoint("10.0.0.1:8000", S)], id="ready"),
        pytest.param(
            [_pod("a", "10.0.0.1", ready=False)],
            [Endpoint("10.0.0.1:8000", ST)],
            id="not-ready-is-starting",
        ),
        pytest.param(
            [_pod("a", None, phase="Pending", ready=False)],
            [Endpoint("serving/a", ST)],
            id="pending-without-ip",
        ),
        pytest.param(
            [_pod("a", "10.0.0.1", phase="Pending")],
            [Endpoint("10.0.0.1:8000", ST)],
            id="pending-never-serving",
        ),
        pytest.param([_pod("a", "10.0.0.1", phase="Succeeded")], [], id="succeeded-dropped"),
        pytest.param([_pod("a", "10.0.0.1", phase="Failed")], [], id="failed-dropped"),
        pytest.param([_deleting(_pod("a", "10.0.0.1"))], [], id="terminating-dropped"),
        pytest.param([_pod("a", "fd00::5")], [Endpoint("[fd00::5]:8000", S)], id="ipv6"),
        pytest.param(
            [_pod("b", "10.0.0.2"), _pod("a", "10.0.0.1", ready=False)],
            [Endpoint("10.0.0.1:8000", ST), Endpoint("10.0.0.2:8000", S)],
            id="sorted-mixed",
        ),
    ],
)
def test_pod_endpoints(pods: list[dict[str, Any]], expected: list[Endpoint]) -> None:
    assert pod_endpoints(pods, 8000) == expected


def _slice(*eps: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "s"}, "endpoints": list(eps)}


@pytest.mark.parametrize(
    ("slices", "expected"),
    [
        pytest.param(
            [make_endpoint_slice("s1", service="chat", endpoints=[("10.0.0.1", True)])],
            [Endpoint("10.0.0.1:9000", S)],
            id="ready",
        ),
        pytest.param(
            [make_endpoint_slice("s1", service="chat", endpoints=[("10.0.0.1", False)])],
            [Endpoint("10.0.0.1:9000", ST)],
            id="not-ready",
        ),
        pytest.param(
            [_slice({"addresses": ["10.0.0.1"], "conditions": {}})],
            [Endpoint("10.0.0.1:9000", S)],
            id="ready-absent-means-ready",
        ),
        pytest.param(
            [
                _slice(
                    {
                        "addresses": ["10.0.0.1"],
                        "conditions": {"ready": False, "serving": True, "terminating": True},
                    }
                )
            ],
            [],
            id="terminating-dropped",
        ),
        pytest.param(
            [
                make_endpoint_slice("s1", service="chat", endpoints=[("10.0.0.1", False)]),
                make_endpoint_slice("s2", service="chat", endpoints=[("10.0.0.1", True)]),
            ],
            [Endpoint("10.0.0.1:9000", S)],
            id="duplicate-across-slices-ready-wins",
        ),
        pytest.param(
            [_slice({"addresses": [], "conditions": {}}), {"metadata": {}, "endpoints": None}],
            [],
            id="empty",
        ),
    ],
)
def test_slice_endpoints(slices: list[dict[str, Any]], expected: list[Endpoint]) -> None:
    assert slice_endpoints(slices, 9000) == expected


# --- the real client against the fake API ---------------------------------------------


def _svc(**targets: Any) -> InferenceService:
    return InferenceService.model_validate(
        {
            "name": "chat",
            "namespace": "serving",
            "gpusPerReplica": 1,
            "targets": {"kubernetes": targets},
        }
    )


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI() as a:
        yield a


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def discovery(api: FakeKubeAPI, clock: Clock) -> Iterator[KubeDiscovery]:
    d = KubeDiscovery(
        api.client(),
        clock=clock,
        stale_after_s=30,
        watch_timeout_seconds=5,
        retry_seconds=0.05,
        max_retry_seconds=0.2,
    )
    yield d
    d.close()


def _eventually(d: KubeDiscovery, svc: InferenceService, expected: list[Endpoint]) -> None:
    FakeKubeAPI.wait_for(lambda: d.endpoints(svc) == expected, 15, f"endpoints {expected}")


def test_pods_by_label_selector_follow_the_watch(
    api: FakeKubeAPI, discovery: KubeDiscovery
) -> None:
    api.put("pods", _pod("a", "10.0.0.1"))
    api.put("pods", _pod("b", None, phase="Pending", ready=False))
    api.put("pods", make_pod("other", namespace="serving", labels={"app": "x"}, ip="10.0.0.9"))
    api.put("pods", make_pod("elsewhere", namespace="prod", labels=LABELS, ip="10.0.0.8"))
    svc = _svc(labelSelector="app=vllm-chat", port=8000)

    # Before the first list: unknown, not empty. The list is held back (a 503) so that the
    # watch thread cannot finish it between starting and the answer (it did, once, on a
    # busy machine: the assertion raced the thread).
    api.fail(503, resources=("pods",))
    assert discovery.endpoints(svc) is None
    api.heal()
    _eventually(discovery, svc, [Endpoint("10.0.0.1:8000", S), Endpoint("serving/b", ST)])

    api.wait_for(lambda: api.open_watches("pods") == 1, what="watch open")
    lists = api.list_requests("pods")
    api.put("pods", _pod("b", "10.0.0.2", ready=False))  # scheduled, model loading
    _eventually(discovery, svc, [Endpoint("10.0.0.1:8000", S), Endpoint("10.0.0.2:8000", ST)])
    api.put("pods", _pod("b", "10.0.0.2"))  # Ready
    _eventually(discovery, svc, [Endpoint("10.0.0.1:8000", S), Endpoint("10.0.0.2:8000", S)])
    api.put("pods", _deleting(_pod("a", "10.0.0.1")))  # scale-down begins
    _eventually(discovery, svc, [Endpoint("10.0.0.2:8000", S)])
    api.delete("pods", "a", "serving")
    api.put("pods", make_pod("c", namespace="serving", labels={"app": "x"}, ip="10.0.0.3"))
    _eventually(discovery, svc, [Endpoint("10.0.0.2:8000", S)])
    assert api.list_requests("pods") == lists  # all of that came through the watch


def test_watch_expiry_410_relists(api: FakeKubeAPI, discovery: KubeDiscovery) -> None:
    svc = _svc(labelSelector="app=vllm-chat")
    api.put("pods", _pod("a", "10.0.0.1"))
    _eventually(discovery, svc, [Endpoint("10.0.0.1:8000", S)])
    api.wait_for(lambda: api.open_watches("pods") == 1, what="watch open")
    lists = api.list_requests("pods")

    api.expire()  # compacted history: the open watch gets ERROR 410
    api.wait_for(lambda: api.list_requests("pods") > lists, 15, "re-list after 410")
    api.put("pods", _pod("b", "10.0.0.2"))
    _eventually(discovery, svc, [Endpoint("10.0.0.1:8000", S), Endpoint("10.0.0.2:8000", S)])


def test_service_endpoint_slices(api: FakeKubeAPI, discovery: KubeDiscovery) -> None:
    api.put(
        "endpointslices",
        make_endpoint_slice(
            "chat-abc",
            service="chat",
            namespace="serving",
            endpoints=[("10.0.0.1", True), ("10.0.0.2", False)],
        ),
    )
    api.put(
        "endpointslices",
        make_endpoint_slice(
            "other-x", service="other", namespace="serving", endpoints=[("10.0.0.7", True)]
        ),
    )
    svc = _svc(service="chat", port=8000)
    _eventually(discovery, svc, [Endpoint("10.0.0.1:8000", S), Endpoint("10.0.0.2:8000", ST)])
    api.put(
        "endpointslices",
        make_endpoint_slice(
            "chat-def", service="chat", namespace="serving", endpoints=[("10.0.0.3", True)]
        ),
    )
    api.delete("endpointslices", "chat-abc", "serving")
    _eventually(discovery, svc, [Endpoint("10.0.0.3:8000", S)])


def test_failing_api_turns_targets_unknown_after_stale_window(
    api: FakeKubeAPI, discovery: KubeDiscovery, clock: Clock
) -> None:
    svc = _svc(labelSelector="app=vllm-chat")
    api.put("pods", _pod("a", "10.0.0.1"))
    _eventually(discovery, svc, [Endpoint("10.0.0.1:8000", S)])
    api.wait_for(lambda: api.open_watches("pods") == 1, what="watch open")

    api.fail(503)
    api.close_watches()
    api.wait_for(
        lambda: any(s.failing_since is not None for s in discovery.status().values()),
        what="failure noticed",
    )
    assert discovery.endpoints(svc) == [Endpoint("10.0.0.1:8000", S)]  # recent: keep
    clock.now += 30
    assert discovery.endpoints(svc) == [Endpoint("10.0.0.1:8000", S)]  # exactly 30 s: keep
    clock.now += 1
    assert discovery.endpoints(svc) is None  # failing too long: unknown, never "empty"
    api.heal()
    _eventually(discovery, svc, [Endpoint("10.0.0.1:8000", S)])


def test_close_stops_watches_and_answers_unknown(
    api: FakeKubeAPI, discovery: KubeDiscovery
) -> None:
    svc = _svc(labelSelector="app=vllm-chat")
    api.put("pods", _pod("a", "10.0.0.1"))
    _eventually(discovery, svc, [Endpoint("10.0.0.1:8000", S)])
    api.wait_for(lambda: api.open_watches("pods") == 1, what="watch open")
    discovery.close()
    api.wait_for(lambda: api.open_watches() == 0, what="watch closed")
    assert discovery.endpoints(svc) is None


def test_idle_watch_is_stopped_after_a_selector_change(
    api: FakeKubeAPI, discovery: KubeDiscovery, clock: Clock
) -> None:
    old, new = _svc(labelSelector="app=vllm-chat"), _svc(labelSelector="app=x")
    api.put("pods", _pod("a", "10.0.0.1"))
    _eventually(discovery, old, [Endpoint("10.0.0.1:8000", S)])
    api.wait_for(lambda: api.open_watches("pods") == 1, what="first watch open")
    clock.now += 601  # a reload moved the service to another selector long ago
    _eventually(discovery, new, [])
    api.wait_for(lambda: api.open_watches("pods") == 1, 15, "only the new watch left")
    assert len(discovery.status()) == 1


def test_static_service_is_not_ours(discovery: KubeDiscovery) -> None:
    svc = InferenceService.model_validate(
        {"name": "s", "gpusPerReplica": 1, "targets": {"static": ["10.0.0.1:8000"]}}
    )
    assert discovery.endpoints(svc) is None


# --- discovery -> scrape -> tracker -> aggregate, pods on loopback addresses ------------


def _serve_on(ip: str, port: int, body: bytes) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer((ip, port), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def _common_free_port(ips: list[str]) -> int:
    for _ in range(50):
        with socket.socket() as s:
            s.bind((ips[0], 0))
            port = int(s.getsockname()[1])
        try:
            for ip in ips[1:]:
                with socket.socket() as s:
                    s.bind((ip, port))
            return port
        except OSError:
            continue
    raise RuntimeError("no common free port")


async def test_discovered_pods_are_scraped_and_aggregated(
    api: FakeKubeAPI, discovery: KubeDiscovery
) -> None:
    """Pods are 127.0.0.2 and 127.0.0.3 (all of 127/8 is loopback), one metrics port."""
    ips = ["127.0.0.2", "127.0.0.3"]
    port = _common_free_port(ips)
    servers = [
        _serve_on(ip, port, vllm_exposition(waiting=w, running=2, kv=0.5).encode())
        for ip, w in zip(ips, (7, 11), strict=True)
    ]
    svc = _svc(labelSelector="app=vllm-chat", port=port)
    api.put("pods", _pod("a", ips[0]))
    api.put("pods", _pod("b", ips[1], ready=False))  # loading its model
    api.put("pods", _pod("c", None, phase="Pending", ready=False))
    tracker = TargetTracker()
    try:
        async with make_client(ScrapeConfig()) as client:
            scraper = Scraper(client, timeout_s=2)

            async def cycle() -> ServiceLoad:
                eps = discovery.endpoints(svc)
                assert eps is not None
                results = await scraper.scrape_all([ScrapeJob(e.address) for e in eps])
                states = tracker.update(svc.name, eps, {r.job.address: r for r in results})
                return aggregate(svc.name, states, time.monotonic(), 30.0)

            FakeKubeAPI.wait_for(lambda: discovery.endpoints(svc) is not None, 15, "synced")
            load = await cycle()
            assert (load.ready, load.starting, load.unhealthy, load.waiting) == (1, 2, 0, 7)
            assert load.complete and load.current == 3

            api.put("pods", _pod("b", ips[1]))  # Ready: now serving capacity
            FakeKubeAPI.wait_for(
                lambda: Endpoint(f"{ips[1]}:{port}", S) in (discovery.endpoints(svc) or []),
                15,
                "b ready",
            )
            load = await cycle()
            assert (load.ready, load.starting, load.waiting, load.running) == (2, 1, 18, 4)
    finally:
        for s in servers:
            s.shutdown()
            s.server_close()
