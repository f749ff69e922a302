"""Capacity: pure node/pod tables, and the watcher with the real `kubernetes` client against
the fake API server in tests/support/kubeapi.py (real HTTP on 127.0.0.1, list + chunked watch)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest

from scaler.config import CapacityConfig, ConfigError, NodeCapacity, parse_config
from scaler.core.accounting import Capacity
from scaler.ingest.capacity import (
    NodeCapacityWatcher,
    StaticCapacity,
    capacity_from_nodes,
    capacity_source,
    pod_request,
)
from scaler.selector import LabelSelector
from tests.support.kubeapi import FakeKubeAPI, make_endpoint_slice, make_node, make_pod

POOL = "shared-h100"
IN_POOL = {"gpu-pool-scaler.io/pool": POOL}


def ncfg(**kw: Any) -> NodeCapacity:
    return NodeCapacity.model_validate({"labelSelector": "gpu-pool=shared", **kw})


def taint(key: str, effect: str, value: str | None = None) -> dict[str, str]:
    t = {"key": key, "effect": effect}
    if value is not None:
        t["value"] = value
    return t


# --- pure: nodes -----------------------------------------------------------------------

NODE_CASES = [
    pytest.param([make_node("a")], {}, 8, 1, id="ready-node"),
    pytest.param([make_node("a"), make_node("b", gpus=4)], {}, 12, 2, id="sum-of-nodes"),
    pytest.param([make_node("a", ready=False)], {}, 0, 0, id="not-ready"),
    pytest.param([make_node("a", ready="Unknown")], {}, 0, 0, id="ready-unknown"),
    pytest.param([make_node("a", unschedulable=True)], {}, 0, 0, id="cordoned"),
    pytest.param(
        [make_node("a", taints=[taint("node.kubernetes.io/unschedulable", "NoSchedule")])],
        {},
        0,
        0,
        id="unschedulable-taint",
    ),
    pytest.param(
        [make_node("a", taints=[taint("node.kubernetes.io/not-ready", "NoSchedule")])],
        {},
        0,
        0,
        id="not-ready-taint",
    ),
    pytest.param(
        [make_node("a", taints=[taint("maintenance", "NoExecute", "true")])],
        {},
        0,
        0,
        id="noexecute-taint",
    ),
    pytest.param(
        [make_node("a", taints=[taint("nvidia.com/gpu", "NoSchedule", "present")])],
        {},
        8,
        1,
        id="dedicated-noschedule-taint-counts",
    ),
    pytest.param(
        [make_node("a", taints=[taint("spot", "PreferNoSchedule")])],
        {},
        8,
        1,
        id="prefer-noschedule-counts",
    ),
    pytest.param([make_node("a", gpus=None)], {}, 0, 0, id="missing-gpu-resource"),
    pytest.param([make_node("a", gpus=0)], {}, 0, 0, id="zero-gpus"),
    pytest.param([make_node("a", gpus="eight")], {}, 0, 0, id="garbage-quantity"),
    pytest.param([make_node("a", gpus="-2")], {}, 0, 0, id="negative-quantity"),
    pytest.param([make_node("a", gpus="1500m")], {}, 1, 1, id="milli-quantity-floored"),
    pytest.param([make_node("a", gpus="1k")], {}, 1000, 1, id="si-suffix"),
    pytest.param([make_node("a", labels={"gpu-pool": "other"})], {}, 0, 0, id="other-pool"),
    pytest.param([make_node("a", labels={})], {}, 0, 0, id="no-labels"),
    pytest.param(
        [make_node("a", labels={"x": "1"}), make_node("b", labels={})],
        {"labelSelector": ""},
        16,
        2,
        id="empty-selector-all-nodes",
    ),
    pytest.param(
        [
            make_node("a", labels={"gpu-pool": "shared"}),
            make_node("b", labels={"gpu-pool": "spare"}),
            make_node("c", labels={"gpu-pool": "spare", "drain": "1"}),
            make_node("d", labels={"gpu-pool": "other"}),
        ],
        {"labelSelector": "gpu-pool in (shared, spare),!drain"},
        16,
        2,
        id="set-based-selector",
    ),
    pytest.param(
        [make_node("a", gpus=4, resource="amd.com/gpu"), make_node("b", gpus=8)],
        {"resource": "amd.com/gpu"},
        4,
        1,
        id="custom-resource-name",
    ),
]


@pytest.mark.parametrize(("nodes", "overrides", "gpus", "counted"), NODE_CASES)
def test_capacity_from_nodes(
    nodes: list[dict[str, Any]], overrides: dict[str, Any], gpus: int, counted: int
) -> None:
    cap = capacity_from_nodes(nodes, None, ncfg(**overrides), pool_name=POOL, observed_at=5.0)
    assert (cap.total_gpus, cap.nodes, cap.foreign_gpus) == (gpus, counted, 0)
    assert cap.source == "nodes" and cap.observed_at == 5.0


def test_capacity_detail_names_excluded_nodes() -> None:
    nodes = [make_node("ok"), make_node("down", ready=False), make_node("cord", unschedulable=True)]
    cap = capacity_from_nodes(nodes, None, ncfg(), pool_name=POOL)
    assert "1 node(s), 8 nvidia.com/gpu" in cap.detail
    assert "NotReady: down" in cap.detail and "cordoned: cord" in cap.detail


# --- pure: foreign pods ----------------------------------------------------------------

NODES = [make_node("n1"), make_node("n2", gpus=4), make_node("down", ready=False)]
FOREIGN_CASES = [
    pytest.param([make_pod("sys", node="n1", gpus=2)], 2, id="foreign-pod"),
    pytest.param([make_pod("inf", node="n1", gpus=4, labels=IN_POOL)], 0, id="pool-pod"),
    pytest.param(
        [make_pod("x", node="n1", gpus=2, labels={"gpu-pool-scaler.io/pool": "another"})],
        2,
        id="other-pool-is-foreign",
    ),
    pytest.param([make_pod("p", node="down", gpus=2)], 0, id="on-uncounted-node"),
    pytest.param([make_pod("p", gpus=2, phase="Pending")], 0, id="unscheduled"),
    pytest.param([make_pod("p", node="n1", gpus=2, phase="Pending")], 2, id="bound-pending"),
    pytest.param([make_pod("p", node="n1", gpus=2, phase="Succeeded")], 0, id="succeeded"),
    pytest.param([make_pod("p", node="n1", gpus=2, phase="Failed")], 0, id="failed"),
    pytest.param([make_pod("p", node="n1", gpus=3, limits_only=True)], 3, id="limit-only"),
    pytest.param([make_pod("p", node="n1", gpus=1, init_gpus=4)], 4, id="init-container-peak"),
    pytest.param([make_pod("p", node="n1")], 0, id="cpu-only-pod"),
    pytest.param([make_pod("p", node="n2", gpus=16)], 4, id="clamped-to-node"),
    pytest.param(
        [
            make_pod("a", node="n1", gpus=1),
            make_pod("b", node="n2", gpus=2, namespace="kube-system"),
            make_pod("c", node="n1", gpus=4, labels=IN_POOL),
        ],
        3,
        id="mixed",
    ),
]


@pytest.mark.parametrize(("pods", "foreign"), FOREIGN_CASES)
def test_foreign_pods(pods: list[dict[str, Any]], foreign: int) -> None:
    cap = capacity_from_nodes(NODES, pods, ncfg(subtractForeignPods=True), pool_name=POOL)
    assert cap.total_gpus == 12
    assert cap.foreign_gpus == foreign


# Free GPUs per counted node (n1: 8, n2: 4; "down" not counted), largest first: what
# every pod bound there and not terminated leaves, the pool's own pods included.
FREE_CASES = [
    pytest.param([], (8, 4), id="empty-nodes"),
    pytest.param(
        [
            make_pod("inf", node="n1", gpus=4, labels=IN_POOL),
            make_pod("eval-1", node="n1", gpus=1, labels=IN_POOL),
            make_pod("eval-2", node="n2", gpus=1, labels=IN_POOL),
        ],
        (3, 3),
        id="pool-pods-count-too",
    ),
    pytest.param([make_pod("sys", node="n2", gpus=2)], (8, 2), id="foreign-pods-count"),
    pytest.param(
        [make_pod("done", node="n1", gpus=8, phase="Succeeded"), make_pod("p", gpus=4)],
        (8, 4),
        id="terminated-and-unscheduled-hold-nothing",
    ),
    pytest.param([make_pod("big", node="n2", gpus=16)], (8, 0), id="never-below-zero"),
]


@pytest.mark.parametrize(("pods", "free"), FREE_CASES)
def test_free_gpus_by_node(pods: list[dict[str, Any]], free: tuple[int, ...]) -> None:
    cap = capacity_from_nodes(NODES, pods, ncfg(subtractForeignPods=True), pool_name=POOL)
    assert cap.free_by_node == free


def test_free_gpus_by_node_unknown_without_the_pod_list() -> None:
    assert capacity_from_nodes(NODES, None, ncfg(), pool_name=POOL).free_by_node is None


def test_foreign_pods_ignored_when_off_and_required_when_on() -> None:
    pods = [make_pod("sys", node="n1", gpus=2)]
    assert capacity_from_nodes(NODES, pods, ncfg(), pool_name=POOL).foreign_gpus == 0
    with pytest.raises(ValueError, match="pod list"):
        capacity_from_nodes(NODES, None, ncfg(subtractForeignPods=True), pool_name=POOL)


@pytest.mark.parametrize(
    ("app", "sidecar", "init", "effective"),
    [
        pytest.param(1, 1, 2, 3, id="init-with-the-sidecar-before-it-dominates"),  # 1 + 2
        pytest.param(4, 1, 2, 5, id="app-with-the-sidecar-dominates"),  # 4 + 1
    ],
)
def test_pod_request_with_sidecars(app: int, sidecar: int, init: int, effective: int) -> None:
    """max(Σ app + Σ sidecars, max over init containers of its request + the sidecars
    started before it), as kube-scheduler computes it."""
    pod = make_pod("p", node="n1", gpus=app)
    pod["spec"]["initContainers"] = [
        {
            "name": "side",
            "restartPolicy": "Always",
            "resources": {"requests": {"nvidia.com/gpu": str(sidecar)}},
        },
        {"name": "init", "resources": {"requests": {"nvidia.com/gpu": str(init)}}},
    ]
    assert pod_request(pod, "nvidia.com/gpu") == effective


# --- label selectors -------------------------------------------------------------------

SELECTOR_CASES = [
    pytest.param("", {}, True, id="empty-matches-all"),
    pytest.param("a=b", {"a": "b"}, True, id="eq"),
    pytest.param("a==b", {"a": "c"}, False, id="double-eq-mismatch"),
    pytest.param("a!=b", {}, True, id="neq-absent-key"),
    pytest.param("a!=b", {"a": "b"}, False, id="neq"),
    pytest.param("a in (x, y)", {"a": "y"}, True, id="in"),
    pytest.param("a notin (x,y)", {"a": "x"}, False, id="notin"),
    pytest.param("a notin (x,y)", {}, True, id="notin-absent"),
    pytest.param("a notin (x,y)", {"a": "z"}, True, id="notin-another-value"),
    pytest.param("a!=b", {"a": "c"}, True, id="neq-another-value"),
    pytest.param("a", {"a": ""}, True, id="exists"),
    pytest.param("!a", {"a": "1"}, False, id="not-exists"),
    pytest.param("a=b, c in (d), !e", {"a": "b", "c": "d"}, True, id="combined"),
]


@pytest.mark.parametrize(("text", "labels", "match"), SELECTOR_CASES)
def test_label_selector(text: str, labels: dict[str, str], match: bool) -> None:
    assert LabelSelector.parse(text).matches(labels) is match


@pytest.mark.parametrize("text", ["a=b,", "a in (x", "=b", "a=b=c", ",a"])
def test_label_selector_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="label selector"):
        LabelSelector.parse(text)


# --- sources ---------------------------------------------------------------------------


def test_static_capacity() -> None:
    assert StaticCapacity(64).current() == Capacity(64, detail="static 64 GPUs")
    assert StaticCapacity(0).current().total_gpus == 0  # a pool emptied on purpose
    with pytest.raises(ValueError):
        StaticCapacity(-1)


def test_capacity_source_from_config() -> None:
    built: list[int] = []

    def factory() -> kubernetes.client.ApiClient:
        built.append(1)
        return kubernetes.client.ApiClient(kubernetes.client.Configuration(host="http://x"))

    src = capacity_source(CapacityConfig(gpus=8), pool_name=POOL, api_client_factory=factory)
    assert isinstance(src, StaticCapacity) and built == []
    nodes = CapacityConfig(nodes=ncfg())
    w = capacity_source(nodes, pool_name=POOL, api_client_factory=factory)
    assert isinstance(w, NodeCapacityWatcher) and built == [1]
    assert w.current() is None  # not started: unknown, never a zero


def test_config_rejects_bad_selector() -> None:
    doc = {
        "pool": {"name": "p", "capacity": {"nodes": {"labelSelector": "gpu-pool in (a"}}},
        "research": [{"name": "r", "gpusPerJob": 1}],
    }
    with pytest.raises(ConfigError, match=r"pool\.capacity\.nodes\.labelSelector: invalid"):
        parse_config(doc)


def test_watcher_rejects_bad_selector() -> None:
    client = kubernetes.client.ApiClient(kubernetes.client.Configuration(host="http://x"))
    with pytest.raises(ValueError, match="label selector"):
        # model_construct skips config validation: the watcher guards on its own.
        bad = NodeCapacity.model_construct(labelSelector="a in (b")
        NodeCapacityWatcher(client, bad, pool_name=POOL)


# --- the watcher against a real HTTP server, with the real client -----------------------


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self.t

    def advance(self, s: float) -> None:
        with self._lock:
            self.t += s


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI() as a:
        yield a


def start_watcher(
    api: FakeKubeAPI, clock: FakeClock, research_namespaces: tuple[str, ...] = (), **cfg: Any
) -> NodeCapacityWatcher:
    w = NodeCapacityWatcher(
        api.client(),
        ncfg(**cfg),
        pool_name=POOL,
        research_namespaces=research_namespaces,
        clock=clock,
        watch_timeout_seconds=30,
        request_timeout_seconds=5,
        retry_seconds=0.05,
        max_retry_seconds=0.2,
    )
    w.start()
    return w


def wait_gpus(api: FakeKubeAPI, w: NodeCapacityWatcher, gpus: int, foreign: int = 0) -> Capacity:
    def ok() -> bool:
        c = w.current()
        return c is not None and (c.total_gpus, c.foreign_gpus) == (gpus, foreign)

    api.wait_for(ok, 15.0, f"capacity {gpus} GPUs, {foreign} foreign; last {w.current()}")
    c = w.current()
    assert c is not None
    return c


def test_watcher_follows_node_changes(api: FakeKubeAPI) -> None:
    clock = FakeClock()
    api.put("nodes", make_node("gpu-1"))
    api.put("nodes", make_node("gpu-2"))
    api.put("nodes", make_node("cpu-1", gpus=None, labels={"role": "cpu"}))
    w = start_watcher(api, clock)
    try:
        cap = wait_gpus(api, w, 16)
        assert cap.nodes == 2 and cap.observed_at == 1000.0
        api.wait_for(lambda: api.open_watches("nodes") == 1, what="watch open")
        lists = [r for r in api.requests if r.resource == "nodes" and not r.watch]
        watches = [r for r in api.requests if r.resource == "nodes" and r.watch]
        assert lists[0].query["labelSelector"] == "gpu-pool=shared"
        assert watches[0].query["resourceVersion"] == str(api.resource_version)
        assert watches[0].query["allowWatchBookmarks"] == "true"

        api.put("nodes", make_node("gpu-3", gpus=4))  # node added
        wait_gpus(api, w, 20)
        api.put("nodes", make_node("gpu-1", ready=False))  # goes NotReady
        wait_gpus(api, w, 12)
        api.put("nodes", make_node("gpu-2", unschedulable=True))  # cordoned
        wait_gpus(api, w, 4)
        api.put("nodes", make_node("gpu-2"))  # uncordoned
        wait_gpus(api, w, 12)
        taints = [taint("node.kubernetes.io/unreachable", "NoExecute")]
        api.put("nodes", make_node("gpu-2", taints=taints))
        wait_gpus(api, w, 4)
        api.delete("nodes", "gpu-3")  # deleted
        wait_gpus(api, w, 0)
        api.put("nodes", make_node("gpu-1"))  # Ready again
        wait_gpus(api, w, 8)
        api.put("nodes", make_node("gpu-1", labels={"gpu-pool": "elsewhere"}))  # relabelled out
        wait_gpus(api, w, 0)
        # All of it through one list and the watch: no re-list was needed.
        assert api.list_requests("nodes") == 1
        clock.advance(7)
        api.bookmark()
        api.wait_for(lambda: (c := w.current()) is not None and c.observed_at == 1007.0)
        # A bookmark confirms the view: no error, no re-list.
        st = w.status()[0]
        assert (st.lists, st.last_error, api.list_requests("nodes")) == (1, None, 1)
    finally:
        w.stop()
    api.wait_for(lambda: api.open_watches() == 0, what="watch closed after stop()")


def test_watcher_relists_after_410(api: FakeKubeAPI) -> None:
    clock = FakeClock()
    api.put("nodes", make_node("gpu-1"))
    w = start_watcher(api, clock)
    try:
        wait_gpus(api, w, 8)
        api.wait_for(lambda: api.open_watches("nodes") == 1, what="watch open")
        # History compacted: the open watch gets ERROR 410, and watching again from the
        # resourceVersion it knows would get 410 too: only a re-list can catch up.
        api.expire()
        api.put("nodes", make_node("gpu-2", gpus=4))
        api.wait_for(lambda: w.status()[0].lists == 2, 15, "re-list after 410")
        wait_gpus(api, w, 12)
        st = w.status()[0]
        assert st.lists == 2 and st.failing_since is None and st.last_error is None

        # A watch closed cleanly (timeoutSeconds) resumes from its resourceVersion: no list.
        api.close_watches()
        api.put("nodes", make_node("gpu-3", gpus=2))
        wait_gpus(api, w, 14)
        api.wait_for(lambda: api.open_watches("nodes") == 1, what="watch re-opened")
        assert api.list_requests("nodes") == 2
        # ...and a reconnect from a compacted resourceVersion is answered 410 → re-list.
        api.close_watches()
        api.expire()
        api.wait_for(lambda: w.status()[0].lists == 3, 15, "re-list after 410 on resume")
        wait_gpus(api, w, 14)
    finally:
        w.stop()


def test_watcher_goes_unknown_when_failing_too_long(api: FakeKubeAPI) -> None:
    clock = FakeClock()
    api.put("nodes", make_node("gpu-1"))
    w = start_watcher(api, clock, staleAfterSeconds=60)
    try:
        wait_gpus(api, w, 8)
        api.fail(503)  # every request from now on
        api.close_watches()
        api.wait_for(lambda: w.status()[0].failing_since == 1000.0, what="failure noticed")
        assert "503" in (w.status()[0].last_error or "")
        clock.advance(59)
        cap = w.current()
        assert cap is not None and cap.total_gpus == 8  # within the bound: last known view
        clock.advance(2)
        assert w.current() is None  # failing > 60 s: unknown, research fails closed
        api.heal()
        api.put("nodes", make_node("gpu-2"))
        wait_gpus(api, w, 16)
        assert w.status()[0].failing_since is None
    finally:
        w.stop()


def test_watcher_unknown_until_first_list(api: FakeKubeAPI) -> None:
    clock = FakeClock()
    api.put("nodes", make_node("gpu-1"))
    api.fail(500)
    w = start_watcher(api, clock)
    try:
        api.wait_for(lambda: w.status()[0].last_error is not None, what="first list failed")
        assert w.current() is None
        assert not w.status()[0].synced
        api.heal()
        wait_gpus(api, w, 8)
    finally:
        w.stop()


def test_watcher_unknown_when_server_unreachable() -> None:
    with FakeKubeAPI() as gone:
        client = gone.client()
    # The server is stopped: connection refused.
    w = NodeCapacityWatcher(client, ncfg(), pool_name=POOL, retry_seconds=0.05)
    w.start()
    try:
        FakeKubeAPI.wait_for(lambda: w.status()[0].last_error is not None, what="error")
        assert w.current() is None
    finally:
        w.stop()


def test_watcher_subtracts_foreign_pods(api: FakeKubeAPI) -> None:
    clock = FakeClock()
    api.put("nodes", make_node("gpu-1"))
    api.put("nodes", make_node("gpu-2"))
    api.put("pods", make_pod("vllm-0", namespace="serving", node="gpu-1", gpus=4, labels=IN_POOL))
    api.put("pods", make_pod("dcgm", namespace="kube-system", node="gpu-2", gpus=1))
    w = start_watcher(api, clock, subtractForeignPods=True)
    try:
        wait_gpus(api, w, 16, foreign=1)
        cap = w.current()
        assert cap is not None and cap.free_by_node == (7, 4)  # the pool's pods hold GPUs too
        pod_lists = [r for r in api.requests if r.resource == "pods" and not r.watch]
        assert pod_lists[0].path == "/api/v1/pods"
        assert "status.phase!=Succeeded" in pod_lists[0].query["fieldSelector"]

        api.put("pods", make_pod("other-team", namespace="ml", node="gpu-1", gpus=2))
        wait_gpus(api, w, 16, foreign=3)
        # Finished: leaves the server-side field selector (arrives as DELETED).
        api.put(
            "pods", make_pod("other-team", namespace="ml", node="gpu-1", gpus=2, phase="Succeeded")
        )
        wait_gpus(api, w, 16, foreign=1)
        api.put("pods", make_pod("pending", namespace="ml", gpus=2, phase="Pending"))
        api.put("nodes", make_node("gpu-2", ready=False))  # its foreign pod no longer counts
        wait_gpus(api, w, 8, foreign=0)
        api.delete("pods", "dcgm", namespace="kube-system")
        api.put("nodes", make_node("gpu-2"))
        wait_gpus(api, w, 16, foreign=0)
    finally:
        w.stop()


def test_watcher_needs_both_lists_when_subtracting_pods(api: FakeKubeAPI) -> None:
    clock = FakeClock()
    api.put("nodes", make_node("gpu-1"))
    api.fail(503, resources=("pods",))
    w = start_watcher(api, clock, subtractForeignPods=True)
    try:
        # The two lists run concurrently: the pod list can fail before the node list is in.
        api.wait_for(
            lambda: w.status()[1].last_error is not None and w.status()[0].synced,
            what="pod list failed, node list synced",
        )
        assert w.current() is None  # foreign GPUs unknown → capacity unknown
        api.heal()
        wait_gpus(api, w, 8)
    finally:
        w.stop()


def test_watcher_stop_is_prompt(api: FakeKubeAPI) -> None:
    api.put("nodes", make_node("gpu-1"))
    w = start_watcher(api, FakeClock())
    wait_gpus(api, w, 8)
    api.wait_for(lambda: api.open_watches("nodes") == 1, what="watch open")
    t0 = time.monotonic()
    w.stop()
    assert time.monotonic() - t0 < 2.0
    api.wait_for(lambda: api.open_watches() == 0, what="server saw the watch end")


# --- the fake API server itself (reused by discovery tests): real client, other resources -


def test_fake_api_endpointslices_pagination_and_errors(api: FakeKubeAPI) -> None:
    disc: Any = kubernetes.client.DiscoveryV1Api(api.client())  # untyped model access
    core: Any = kubernetes.client.CoreV1Api(api.client())
    for i in range(3):
        api.put(
            "endpointslices",
            make_endpoint_slice(
                f"chat-{i}", service="chat", namespace="serving", endpoints=[(f"10.0.0.{i}", True)]
            ),
        )
    api.put("endpointslices", make_endpoint_slice("other", service="other", namespace="serving"))
    api.put("endpointslices", make_endpoint_slice("chat-x", service="chat", namespace="elsewhere"))

    sel = "kubernetes.io/service-name=chat"
    page = disc.list_namespaced_endpoint_slice("serving", label_selector=sel, limit=2)
    assert [s.metadata.name for s in page.items] == ["chat-0", "chat-1"]
    assert page.items[0].endpoints[0].addresses == ["10.0.0.0"]
    assert page.items[0].endpoints[0].conditions.ready is True
    rest = disc.list_namespaced_endpoint_slice(
        "serving", label_selector=sel, limit=2, _continue=page.metadata._continue
    )
    assert [s.metadata.name for s in rest.items] == ["chat-2"] and not rest.metadata._continue
    everywhere = disc.list_endpoint_slice_for_all_namespaces(label_selector=sel)
    assert len(everywhere.items) == 4

    with pytest.raises(kubernetes.client.ApiException) as e:
        core.read_namespaced_pod("nope", "serving")
    assert e.value.status == 404
    api.fail(500, count=1)
    with pytest.raises(kubernetes.client.ApiException) as e:
        core.list_node()
    assert e.value.status == 500
    assert core.list_node().items == []  # count=1: the next request succeeds


def test_fake_api_watch_namespace_and_selector_transitions(api: FakeKubeAPI) -> None:
    disc: Any = kubernetes.client.DiscoveryV1Api(api.client())  # untyped model access
    sel = "kubernetes.io/service-name=chat"
    api.put("endpointslices", make_endpoint_slice("a", service="chat", namespace="serving"))
    rv = disc.list_namespaced_endpoint_slice(
        "serving", label_selector=sel
    ).metadata.resource_version
    api.put("endpointslices", make_endpoint_slice("b", service="chat", namespace="serving"))
    api.put("endpointslices", make_endpoint_slice("c", service="chat", namespace="other-ns"))
    api.put("endpointslices", make_endpoint_slice("a", service="moved", namespace="serving"))
    api.put("endpointslices", make_endpoint_slice("a", service="chat", namespace="serving"))
    api.delete("endpointslices", "b", namespace="serving")
    w = kubernetes.watch.Watch()
    got = [
        (ev["type"], ev["object"].metadata.name)
        for ev in w.stream(
            disc.list_namespaced_endpoint_slice,
            "serving",
            label_selector=sel,
            resource_version=rv,
            timeout_seconds=1,
        )
    ]
    # Replayed from rv: b added; a relabelled out (DELETED) and back in (ADDED); b deleted.
    assert got == [("ADDED", "b"), ("DELETED", "a"), ("ADDED", "a"), ("DELETED", "b")]
