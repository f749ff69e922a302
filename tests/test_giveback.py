"""Measured research give-back (scaler/core/giveback.py): pods being deleted, read from the
pod watch, become give-back samples; the plan never exceeds the configured grace; it
shortens the forecast's lead and the adaptive reserve's; it survives a restart; the bench
feeds it the same way (preempted research pods it holds)."""

from __future__ import annotations

import json
from types import MappingProxyType
from typing import Any

import kubernetes
import pytest

from scaler.config import Config, parse_config
from scaler.core import giveback, memory
from scaler.core.accounting import Capacity
from scaler.core.cycle import CycleInput, CycleState, step
from scaler.core.giveback import GiveBack, observe, planned
from scaler.core.load import EngineSample, TargetPhase, TargetState
from scaler.core.reserve import ReserveTracker, lead
from scaler.explain import render
from scaler.ingest.capacity import (
    NodeCapacityWatcher,
    capacity_from_nodes,
    research_deleting,
    research_watch_namespaces,
)
from scaler.sim.kube import Cluster, Pod, PodPhase
from scaler.sim.policies import Ours, PoolView
from tests.support.kubeapi import FakeKubeAPI, make_node, make_pod
from tests.test_capacity import FakeClock, ncfg, start_watcher

EPOCH = 1_715_299_200.0
POOL = "shared-h100"


def config(**pool: Any) -> Config:
    return parse_config(
        {
            "pool": {
                "name": POOL,
                "capacity": {"gpus": 64},
                "forecast": {"enabled": True, "researchGraceSeconds": 600},
                "adaptiveReserve": {"enabled": True, "leadTimeSeconds": 720},
                **pool,
            },
            "inference": [{"name": "chat", "gpusPerReplica": 4, "targets": {"static": ["h:1"]}}],
            "research": [{"name": "eval", "gpusPerJob": 1}],
        }
    )


# --- pure: observing deletions -----------------------------------------------------------

OBSERVE = {
    "a-pod-leaves": ({"a": 100.0, "b": 110.0}, {"b": 110.0}, 160.0, (60.0,)),
    "nothing-left-yet": ({"a": 100.0}, {"a": 100.0, "c": 150.0}, 160.0, ()),
    "all-leave": ({"a": 100.0, "b": 130.0}, {}, 160.0, (60.0, 30.0)),
    # a request time after our clock (skew between the API server and us): never negative
    "clock-skew": ({"a": 170.0}, {}, 160.0, (0.0,)),
}


def test_a_later_request_time_does_not_move_the_first_one() -> None:
    """The kubelet's final delete (grace 0) rewrites deletionTimestamp to now: the pod was
    asked to go at the first request, and that is what its give-back counts from."""
    gb = observe(GiveBack(), {"a": 100.0}, 105.0, keep=20)
    gb = observe(gb, {"a": 158.0}, 160.0, keep=20)
    assert dict(gb.pending) == {"a": 100.0}
    assert observe(gb, {}, 165.0, keep=20).samples == (65.0,)


@pytest.mark.parametrize(("pending", "deleting", "wall", "samples"), OBSERVE.values(), ids=OBSERVE)
def test_a_pod_that_leaves_the_deleting_set_is_measured(
    pending: dict[str, float], deleting: dict[str, float], wall: float, samples: tuple[float, ...]
) -> None:
    gb = observe(GiveBack(MappingProxyType(pending)), deleting, wall, keep=20)
    assert gb.samples == samples
    assert dict(gb.pending) == deleting


def test_unobserved_cycle_concludes_nothing_and_samples_are_bounded() -> None:
    gb = GiveBack(MappingProxyType({"a": 100.0}), (1.0, 2.0))
    assert observe(gb, None, 500.0, keep=20) is gb  # pods not seen: "a" has not left
    gb = GiveBack(MappingProxyType({"x": 0.0, "y": 0.0}), (5.0, 6.0, 7.0))
    assert observe(gb, {}, 10.0, keep=3).samples == (7.0, 10.0, 10.0)


PLANNED = {
    "learn-off": ({"learn": False}, (60.0,) * 9, 600.0, None, "learn off"),
    "too-few": ({}, (60.0,) * 4, 600.0, None, "4 of 5 research deletions measured"),
    "longest-of-recent": ({}, (40.0, 70.0, 60.0, 55.0, 50.0), 70.0, 70.0, "measured 70 s"),
    "only-the-last-samples-count": (
        {"samples": 5},
        (590.0, 40.0, 70.0, 60.0, 55.0, 50.0),
        70.0,
        70.0,
        "last 5",
    ),
    "capped-at-the-grace": ({}, (604.0, 601.0, 60.0, 60.0, 60.0), 600.0, 604.0, "whole grace"),
    # Exactly the grace is a measurement within it (a pod the kubelet killed on time).
    "exactly-the-grace": (
        {},
        (600.0, 60.0, 60.0, 60.0, 60.0),
        600.0,
        600.0,
        "measured 600 s (longest of the last 5)",
    ),
}


@pytest.mark.parametrize(
    ("gbcfg", "samples", "seconds", "measured", "note"), PLANNED.values(), ids=PLANNED
)
def test_planned_give_back(
    gbcfg: dict[str, Any],
    samples: tuple[float, ...],
    seconds: float,
    measured: float | None,
    note: str,
) -> None:
    p = planned(GiveBack(samples=samples), config(giveBack=gbcfg).pool)
    assert (p.seconds, p.measured) == (seconds, measured)
    assert note in p.note


def test_min_samples_above_samples_is_refused() -> None:
    with pytest.raises(Exception, match="minSamples \\(30\\) exceeds samples \\(20\\)"):
        config(giveBack={"minSamples": 30})


LEADS = {
    # leadTimeSeconds counts the grace: research back in 60 s instead of 600 takes 540 off
    "shortened": (720, 60.0, 180.0),
    "nothing-learned": (720, 600.0, 720.0),
    "never-below-the-give-back": (600, 60.0, 60.0),
    "a-lead-below-the-grace-is-never-lengthened": (300, 599.0, 300.0),
    "short-lead-shortened-to-the-give-back": (300, 60.0, 60.0),
    # research gone at once (a force delete) still leaves one second to cover
    "never-below-a-second": (300, 0.0, 1.0),
}


@pytest.mark.parametrize(("configured", "give_back", "expected"), LEADS.values(), ids=LEADS)
def test_reserve_lead(configured: float, give_back: float, expected: float) -> None:
    pool = config(adaptiveReserve={"enabled": True, "leadTimeSeconds": configured}).pool
    assert lead(pool, give_back) == expected


def test_a_shorter_lead_counts_only_the_rises_within_it() -> None:
    pool = config(adaptiveReserve={"enabled": True, "leadTimeSeconds": 720}).pool
    r = ReserveTracker(pool)
    r.observe(0.0, 8, 8)
    r.observe(300.0, 8, 8)
    r.observe(600.0, 20, 20)  # a ramp of 12 GPUs over 300 s
    assert r.reserve(600.0).gpus == 12
    assert r.reserve(600.0, lead_seconds=180.0).gpus == 0  # no rise within 180 s


# --- from Kubernetes pods --------------------------------------------------------------

RESEARCH = {"gpu-pool-scaler.io/pool": POOL, "gpu-pool-scaler.io/research-class": "eval"}


def deleting_pod(name: str, at: str | None, grace: Any = 600, **kw: Any) -> dict[str, Any]:
    pod = make_pod(name, namespace="research", node="gpu-1", gpus=1, **{"labels": RESEARCH, **kw})
    pod["metadata"]["uid"] = f"uid-{name}"
    if at is not None:
        pod["metadata"]["deletionTimestamp"] = at
        pod["metadata"]["deletionGracePeriodSeconds"] = grace
    return pod


PODS = {
    # requested at 12:00:00: the API server put deletionTimestamp at request + grace
    "preempted": ([deleting_pod("r", "2026-12-04T12:10:00Z")], {"uid-r": 1_796_385_600.0}),
    "running": ([deleting_pod("r", None)], {}),
    "inference-pod": (
        [deleting_pod("i", "2026-12-04T12:10:00Z", labels={"gpu-pool-scaler.io/pool": POOL})],
        {},
    ),
    "other-pool": (
        [
            deleting_pod(
                "o",
                "2026-12-04T12:10:00Z",
                labels={"gpu-pool-scaler.io/pool": "x", "gpu-pool-scaler.io/research-class": "e"},
            )
        ],
        {},
    ),
    "already-failed": ([deleting_pod("f", "2026-12-04T12:10:00Z", phase="Failed")], {}),
    # deleted while still starting: it leaves at once, no measure of a running job's exit
    "still-starting": ([deleting_pod("s", "2026-12-04T12:10:00Z", phase="Pending")], {}),
    "no-grace": ([deleting_pod("g", "2026-12-04T12:10:00Z", grace=None)], {}),
    # a force delete (grace 0): requested at the deletionTimestamp itself
    "zero-grace": (
        [deleting_pod("g", "2026-12-04T12:10:00Z", grace=0)],
        {"uid-g": 1_796_386_200.0},
    ),
    "negative-grace": ([deleting_pod("g", "2026-12-04T12:10:00Z", grace=-1)], {}),
    "boolean-grace": ([deleting_pod("g", "2026-12-04T12:10:00Z", grace=True)], {}),
    "bad-timestamp": ([deleting_pod("b", "soon")], {}),
    "no-timezone": ([deleting_pod("z", "2026-12-04T12:10:00")], {}),
}


@pytest.mark.parametrize(("pods", "expected"), PODS.values(), ids=PODS)
def test_research_deleting_from_pods(
    pods: list[dict[str, Any]], expected: dict[str, float]
) -> None:
    assert research_deleting(pods, "gpu-pool-scaler.io/pool", POOL) == expected


def test_capacity_reports_deletions_only_when_it_watches_pods() -> None:
    nodes = [make_node("gpu-1")]
    pods = [deleting_pod("r", "2026-12-04T12:10:00Z")]
    watched = capacity_from_nodes(nodes, pods, ncfg(subtractForeignPods=True), pool_name=POOL)
    assert watched.research_deleting == {"uid-r": 1_796_385_600.0}
    assert watched.foreign_gpus == 0  # a pool pod: not foreign
    assert capacity_from_nodes(nodes, pods, ncfg(), pool_name=POOL).research_deleting is None


@pytest.fixture
def api() -> Any:
    with FakeKubeAPI() as a:
        yield a


def test_watcher_sees_a_research_pod_deleted_then_gone(api: FakeKubeAPI) -> None:
    api.put("nodes", make_node("gpu-1"))
    api.put("pods", deleting_pod("r", None))
    w = start_watcher(api, FakeClock(), subtractForeignPods=True)
    try:

        def deleting() -> Any:
            c = w.current()
            return None if c is None else c.research_deleting

        api.wait_for(lambda: deleting() == {}, what="research pod running")
        api.put("pods", deleting_pod("r", "2026-12-04T12:10:00Z"))  # preempted
        api.wait_for(lambda: deleting() == {"uid-r": 1_796_385_600.0}, what="deletion seen")
        api.delete("pods", "r", namespace="research")  # its GPUs are back
        api.wait_for(lambda: deleting() == {}, what="pod gone")
    finally:
        w.stop()


# --- through the cycle -----------------------------------------------------------------


def targets(now: float) -> list[TargetState]:
    s = EngineSample(0.0, 10.0, 0.3, 0.3, 1e3, 1e3, 0.0, 1.0)
    return [TargetState(f"r{k}", TargetPhase.SERVING, s, now) for k in range(2)]


def test_cycle_learns_the_give_back_and_explain_shows_it() -> None:
    cfg = config()
    st = CycleState()
    decisions = []
    for i in range(20):
        now = 15.0 * i
        # one research pod deleted each cycle; each gone four cycles (60 s) later
        deleting = {f"p{k}": EPOCH + 15.0 * k for k in range(max(0, i - 3), i + 1)}
        cap = Capacity(64, research_deleting=deleting)
        d, st = step(CycleInput(cfg, {"chat": targets(now)}, cap, now, EPOCH + now), st)
        decisions.append(d)
    assert decisions[0].give_back is not None and decisions[0].give_back.seconds == 600.0
    last = decisions[-1].give_back
    assert last is not None and (last.seconds, last.measured) == (60.0, 60.0)
    assert st.give_back.samples == (60.0,) * 16
    assert "research give-back planned: measured 60 s (longest of the last 16)" in render(
        decisions[-1]
    )
    # A cycle without a pod view (capacity unknown) measures nothing and forgets nothing.
    d, st2 = step(CycleInput(cfg, {"chat": targets(300.0)}, None, 300.0, EPOCH + 900.0), st)
    assert st2.give_back == st.give_back


def test_give_back_samples_survive_a_restart_and_garbage_is_refused() -> None:
    cfg = config()
    st = CycleState(give_back=GiveBack(samples=(60.0, 65.0, 70.0, 62.0, 61.0)))
    text = memory.dump(st, cfg, 100.0, EPOCH)
    restored, why = memory.restore(text, cfg, 5.0, EPOCH + 30.0)
    assert restored is not None and restored.give_back.samples == st.give_back.samples
    assert "5 research give-back(s)" in why
    assert giveback.planned(restored.give_back, cfg.pool).seconds == 70.0
    doc = json.loads(text)
    doc["giveBack"]["samples"] = [60.0, -1.0]
    bad, why = memory.restore(json.dumps(doc), cfg, 5.0, EPOCH + 30.0)
    assert bad is None and "giveBack.samples[] is not a number >= 0" in why


# --- the bench: preempted research pods are what the scaler's pod watch sees --------------


def test_sim_cluster_records_when_a_research_pod_was_deleted() -> None:
    c = Cluster(8)
    pod = Pod("research", 1, -100, 0.0)
    c.submit(pod)
    c.schedule(0.0, 600.0)
    assert pod.phase is PodPhase.BOUND
    c.delete(pod, 50.0, grace_s=60.0)
    assert pod.phase is PodPhase.TERMINATING and pod.deleted_at == 50.0
    assert pod in c.terminating
    c.release_due(110.0)
    assert pod.phase is PodPhase.GONE and pod not in c.terminating


def test_bench_policy_measures_the_give_back_of_the_pods_it_is_shown() -> None:
    ours = Ours("ours", config(giveBack={"minSamples": 1}), 64, calendar_offset=EPOCH)
    s = EngineSample(0.0, 10.0, 0.3, 0.3, 1e3, 1e3, 0.0, 1.0)
    for now, deleting in ((0.0, {}), (5.0, {"p": 3.0}), (60.0, {"p": 3.0}), (65.0, {})):
        ours.control(PoolView(now, {0: s, 1: s}, {}, 0, 2, 2, deleting))
    assert ours.decision is not None and ours.decision.give_back is not None
    assert ours.decision.give_back.seconds == 62.0  # deleted at 3 s, seen gone at 65 s


# --- research pods watched per namespace (no subtractForeignPods: least privilege) --------


def pool_cfg(capacity: dict[str, Any], **give_back: Any) -> Any:
    return config(capacity=capacity, giveBack=give_back).pool


WATCH_NAMESPACES = {
    "nodes-with-namespaces": (
        {"nodes": {}},
        {"namespaces": ["research", "batch"]},
        ("batch", "research"),
    ),
    "nodes-without-namespaces": ({"nodes": {}}, {}, ()),
    # every pod is watched already: research_deleting comes from that watch
    "subtract-foreign-pods": (
        {"nodes": {"subtractForeignPods": True}},
        {"namespaces": ["research"]},
        (),
    ),
    "learn-off": ({"nodes": {}}, {"learn": False, "namespaces": ["research"]}, ()),
    "static-capacity": ({"gpus": 64}, {"namespaces": ["research"]}, ()),
}


@pytest.mark.parametrize(
    ("capacity", "give_back", "expected"), WATCH_NAMESPACES.values(), ids=WATCH_NAMESPACES
)
def test_which_namespaces_are_watched(
    capacity: dict[str, Any], give_back: dict[str, Any], expected: tuple[str, ...]
) -> None:
    assert research_watch_namespaces(pool_cfg(capacity, **give_back)) == expected


RESEARCH_PODS = {
    "deleting": ([deleting_pod("r", "2026-12-04T12:10:00Z")], {"uid-r": 1_796_385_600.0}),
    "none-deleting": ([deleting_pod("r", None)], {}),
    "no-pods": ([], {}),
    "unknown": (None, None),
}


@pytest.mark.parametrize(("research", "expected"), RESEARCH_PODS.values(), ids=RESEARCH_PODS)
def test_capacity_takes_research_pods_without_subtracting_them(
    research: list[dict[str, Any]] | None, expected: dict[str, float] | None
) -> None:
    nodes = [make_node("gpu-1")]
    cap = capacity_from_nodes(nodes, None, ncfg(), pool_name=POOL, research_pods=research)
    assert cap.research_deleting == expected
    # research pods hold the pool's own GPUs: never foreign, the counts are the nodes'
    assert (cap.total_gpus, cap.foreign_gpus) == (8, 0)


def test_with_subtract_foreign_pods_the_all_pods_watch_decides() -> None:
    nodes = [make_node("gpu-1")]
    cap = capacity_from_nodes(
        nodes,
        [],
        ncfg(subtractForeignPods=True),
        pool_name=POOL,
        research_pods=[deleting_pod("r", "2026-12-04T12:10:00Z")],
    )
    assert cap.research_deleting == {}


def research_pod(name: str, namespace: str, at: str | None = None, **kw: Any) -> dict[str, Any]:
    pod = deleting_pod(name, at, **kw)
    pod["metadata"]["namespace"] = namespace
    return pod


def deleting_of(w: NodeCapacityWatcher) -> Any:
    c = w.current()
    return "capacity unknown" if c is None else c.research_deleting


def test_research_pods_watched_per_namespace_server_side_filtered(api: FakeKubeAPI) -> None:
    api.put("nodes", make_node("gpu-1"))
    api.put("pods", research_pod("r", "research"))
    api.put("pods", research_pod("b", "batch"))
    api.put("pods", research_pod("x", "elsewhere", "2026-12-04T12:10:00Z"))  # not watched
    w = start_watcher(api, FakeClock(), ("research", "batch"))
    try:
        api.wait_for(lambda: deleting_of(w) == {}, what="research pods listed")
        lists = sorted(
            (r.path, r.query.get("labelSelector"), r.query.get("fieldSelector"))
            for r in api.requests
            if r.resource == "pods" and not r.watch
        )
        selector = f"gpu-pool-scaler.io/research-class,gpu-pool-scaler.io/pool={POOL}"
        assert lists == [
            ("/api/v1/namespaces/batch/pods", selector, "status.phase=Running"),
            ("/api/v1/namespaces/research/pods", selector, "status.phase=Running"),
        ]
        assert [s.resource for s in w.status()] == [
            "nodes",
            "research-pods/batch",
            "research-pods/research",
        ]

        api.put("pods", research_pod("r", "research", "2026-12-04T12:10:00Z"))  # preempted
        api.put("pods", research_pod("b", "batch", "2026-12-04T12:20:00Z"))
        want = {"uid-r": 1_796_385_600.0, "uid-b": 1_796_386_200.0}
        api.wait_for(lambda: deleting_of(w) == want, what="both deletions seen")
        # The kubelet killed it: phase Failed leaves the field selector (arrives as DELETED),
        # the moment research_deleting stops counting it (phase Running only) either way.
        api.put("pods", research_pod("b", "batch", "2026-12-04T12:20:00Z", phase="Failed"))
        api.wait_for(lambda: deleting_of(w) == {"uid-r": 1_796_385_600.0}, what="b left")
        api.delete("pods", "r", namespace="research")
        api.wait_for(lambda: deleting_of(w) == {}, what="r gone")
        cap = w.current()
        assert cap is not None and (cap.total_gpus, cap.foreign_gpus) == (8, 0)
    finally:
        w.stop()
    api.wait_for(lambda: api.open_watches() == 0, what="all watches closed after stop()")


def test_no_research_watch_with_subtract_foreign_pods(api: FakeKubeAPI) -> None:
    api.put("nodes", make_node("gpu-1"))
    api.put("pods", research_pod("r", "research", "2026-12-04T12:10:00Z"))
    w = start_watcher(api, FakeClock(), ("research",), subtractForeignPods=True)
    try:
        api.wait_for(lambda: deleting_of(w) == {"uid-r": 1_796_385_600.0}, what="from all pods")
        assert {r.path for r in api.requests if r.resource == "pods"} == {"/api/v1/pods"}
    finally:
        w.stop()


def test_a_forbidden_research_watch_leaves_capacity_known(api: FakeKubeAPI) -> None:
    """RBAC missing (403) from the start: capacity is the nodes' as always, the give-back
    is simply not observed (None), and it starts as soon as the pods can be listed."""
    api.put("nodes", make_node("gpu-1"))
    api.put("pods", research_pod("r", "research", "2026-12-04T12:10:00Z"))
    api.fail(403, resources=("pods",))
    w = start_watcher(api, FakeClock(), ("research",))
    try:
        api.wait_for(lambda: (c := w.current()) is not None and c.total_gpus == 8, what="nodes")
        api.wait_for(lambda: "403" in (w.status()[1].last_error or ""), what="pods refused")
        cap = w.current()
        assert cap is not None and cap.research_deleting is None
        assert (cap.total_gpus, cap.foreign_gpus) == (8, 0)
        api.heal()
        api.wait_for(lambda: deleting_of(w) == {"uid-r": 1_796_385_600.0}, what="listed")
    finally:
        w.stop()


def test_a_stale_research_watch_only_pauses_the_measuring(api: FakeKubeAPI) -> None:
    clock = FakeClock()
    api.put("nodes", make_node("gpu-1"))
    api.put("pods", research_pod("r", "research", "2026-12-04T12:10:00Z"))
    api.put("pods", research_pod("b", "batch"))
    w = start_watcher(api, clock, ("batch", "research"), staleAfterSeconds=60)
    try:
        api.wait_for(lambda: deleting_of(w) == {"uid-r": 1_796_385_600.0}, what="deletion seen")
        api.fail(503, resources=("pods",))
        api.close_watches()
        api.wait_for(lambda: all(s.failing_since == 1000.0 for s in w.status()[1:]), what="failing")
        clock.advance(59)  # within the bound: the last known pods (r has not left)
        assert deleting_of(w) == {"uid-r": 1_796_385_600.0}
        clock.advance(2)  # failing > 60 s: give-back unknown, capacity still known
        cap = w.current()
        assert cap is not None and cap.research_deleting is None and cap.total_gpus == 8
        api.heal()
        api.delete("pods", "r", namespace="research")
        api.wait_for(lambda: deleting_of(w) == {}, what="re-listed: r gone")
    finally:
        w.stop()


def test_one_namespace_refused_makes_the_whole_view_unknown(
    api: FakeKubeAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pod missing only because its namespace cannot be listed must not read as "left":
    with one namespace refused, research_deleting is None, not the other namespaces' pods."""
    real = kubernetes.client.CoreV1Api.list_namespaced_pod
    refused = {"ghost"}

    def list_namespaced_pod(self: Any, namespace: str, **kw: Any) -> Any:
        if namespace in refused:
            raise kubernetes.client.ApiException(status=403, reason="Forbidden")
        return real(self, namespace, **kw)

    monkeypatch.setattr(kubernetes.client.CoreV1Api, "list_namespaced_pod", list_namespaced_pod)
    api.put("nodes", make_node("gpu-1"))
    api.put("pods", research_pod("r", "research", "2026-12-04T12:10:00Z"))
    w = start_watcher(api, FakeClock(), ("ghost", "research"))
    try:
        api.wait_for(lambda: w.status()[2].synced, what="research listed")
        api.wait_for(lambda: "403" in (w.status()[1].last_error or ""), what="ghost refused")
        cap = w.current()
        assert cap is not None and cap.total_gpus == 8 and cap.research_deleting is None
        refused.clear()  # the Role is created
        api.wait_for(lambda: deleting_of(w) == {"uid-r": 1_796_385_600.0}, what="both listed")
    finally:
        w.stop()


def test_the_cycle_learns_from_the_research_watch(api: FakeKubeAPI) -> None:
    """End to end in process: pods deleted and gone in a watched namespace become samples."""
    api.put("nodes", make_node("gpu-1"))
    w = start_watcher(api, FakeClock(), ("research",))
    cfg = config(giveBack={"minSamples": 1, "namespaces": ["research"]})
    st = CycleState()
    try:
        api.put("pods", research_pod("r", "research"))
        api.wait_for(lambda: deleting_of(w) == {}, what="listed")
        api.put("pods", research_pod("r", "research", "2026-12-04T12:10:00Z"))
        api.wait_for(lambda: deleting_of(w) == {"uid-r": 1_796_385_600.0}, what="deleting")
        wall = 1_796_385_600.0 + 30
        _, st = step(CycleInput(cfg, {"chat": targets(0.0)}, w.current(), 0.0, wall), st)
        api.delete("pods", "r", namespace="research")
        api.wait_for(lambda: deleting_of(w) == {}, what="gone")
        d, st = step(CycleInput(cfg, {"chat": targets(15.0)}, w.current(), 15.0, wall + 15), st)
    finally:
        w.stop()
    assert st.give_back.samples == (45.0,)
    assert d.give_back is not None and d.give_back.seconds == 45.0
