"""The bench's Kubernetes/KEDA emulation against the documented formulas.

HPA: replica_calculator.go (external AverageValue: keep current within tolerance, else
ceil(value / target); per-pod: ceil(ratio × ready)), behavior defaults (scale-down
stabilization 300 s = max of recommendations in the window; scale-up max(+4, +100 %) per
15 s). KEDA ScaledJob default strategy: create min(ceil(metric / target), max) − running.
kube-scheduler: preempt lower-priority pods, fewest victims, grace period, nominated node.
"""

from __future__ import annotations

import math

import pytest

from scaler.sim.kube import (
    INFERENCE_PRIORITY,
    RESEARCH_PRIORITY,
    Cluster,
    Hpa,
    HpaBehavior,
    JobState,
    Ledger,
    Pod,
    PodPhase,
    ResearchClassSpec,
    ResearchJob,
    ScaledJobController,
    complete_job,
    preempt_job,
    research_priorities,
)


@pytest.mark.parametrize(
    ("value", "current", "tol", "want"),
    [
        (13, 12, 0.1, 12),  # ratio 1.083: inside the 10 % tolerance, single step swallowed
        (14, 12, 0.1, 14),  # ratio 1.167: outside
        (11, 12, 0.1, 12),  # ratio 0.917: inside
        (10, 12, 0.1, 10),
        (13, 12, 0.0, 13),  # behavior tolerance 0: every step applies
        (0, 5, 0.1, 0),
        (7, 0, 0.1, 7),  # no replicas: plain ceil
        (2.2, 1, 0.1, 3),
    ],
    ids=["up-in-tol", "up-out", "down-in-tol", "down-out", "tol0", "zero", "from0", "ceil"],
)
def test_external_average_value(value: float, current: int, tol: float, want: int) -> None:
    hpa = Hpa(1, 100, HpaBehavior(tolerance=tol))
    assert hpa.recommend_average_value(value, 1.0, current) == want


def test_average_value_with_threshold_five() -> None:
    """production-stack's recipe: sum(waiting) = 23 over target 5 → ceil(4.6) = 5."""
    hpa = Hpa(1, 100, HpaBehavior())
    assert hpa.recommend_average_value(23.0, 5.0, 2) == 5


@pytest.mark.parametrize(
    ("avg", "ready", "current", "want"),
    [(0.9, 10, 10, 13), (0.35, 10, 10, 5), (0.72, 10, 10, 10)],
    ids=["up", "down", "in-tolerance"],
)
def test_per_pod_utilization(avg: float, ready: int, current: int, want: int) -> None:
    hpa = Hpa(1, 100, HpaBehavior())
    assert hpa.recommend_per_pod(avg, 0.7, ready, current) == want


def test_scale_down_waits_for_the_stabilization_window() -> None:
    hpa = Hpa(1, 100, HpaBehavior())
    cur = hpa.sync(0.0, 10, 10)
    assert cur == 10
    for t in range(15, 300, 15):
        cur = hpa.sync(float(t), cur, 4)
        assert cur == 10, t  # the 10 recommended at t=0 is still in the 300 s window
    assert hpa.sync(300.0, cur, 4) == 10  # t=0 is exactly 300 s old: still inside
    assert hpa.sync(315.0, cur, 4) == 4


def test_scale_down_goes_to_highest_recommendation_in_window() -> None:
    hpa = Hpa(1, 100, HpaBehavior(scale_down_stabilization_s=60.0))
    cur = hpa.sync(0.0, 10, 10)
    cur = hpa.sync(15.0, cur, 7)
    cur = hpa.sync(30.0, cur, 3)
    assert cur == 10
    assert hpa.sync(75.0, cur, 3) == 7  # window (15, 75]: max(7, 3, 3)


@pytest.mark.parametrize(
    ("current", "rec", "want"),
    [(2, 20, 6), (10, 40, 20), (1, 3, 3)],
    ids=["pods-policy", "percent-policy", "under-limit"],
)
def test_scale_up_rate_limit(current: int, rec: int, want: int) -> None:
    """Default scaleUp: max(4 pods, 100 %) per 15 s."""
    hpa = Hpa(1, 100, HpaBehavior())
    assert hpa.sync(0.0, current, rec) == want


def test_min_and_max_replicas_clamp() -> None:
    hpa = Hpa(2, 8, HpaBehavior(scale_down_stabilization_s=0.0))
    assert hpa.sync(0.0, 4, 0) == 2
    assert hpa.sync(15.0, 2, 50) == 6  # rate limit first: 2 + 4
    assert hpa.sync(30.0, 6, 50) == 8


@pytest.mark.parametrize(
    ("metric", "running", "max_count", "want"),
    [(5, 3, 10, 2), (2, 3, 10, 0), (20, 3, 10, 7), (2.5, 0, 10, 3), (0, 0, 10, 0)],
    ids=["fill", "never-delete", "capped", "ceil", "zero"],
)
def test_scaled_job_default_strategy(
    metric: float, running: int, max_count: int, want: int
) -> None:
    cls = ResearchClassSpec("eval", 1, 1.0, 0.5, 600)
    ctl = ScaledJobController("eval", max_count)
    ctl.jobs = [ResearchJob(cls, 3600.0, 0.0) for _ in range(running)]
    ctl.jobs[0:1] = [ResearchJob(cls, 3600.0, 0.0, state=JobState.PENDING)] if running else []
    assert ctl.to_create(metric) == want


def test_scaled_job_counts_pending_jobs_as_running() -> None:
    cls = ResearchClassSpec("eval", 1, 1.0, 0.5, 600)
    ctl = ScaledJobController("eval", 10)
    ctl.jobs = [ResearchJob(cls, 3600.0, 0.0) for _ in range(4)]  # all pending
    assert ctl.to_create(4) == 0
    ctl.jobs[0].state = JobState.DONE
    assert ctl.to_create(4) == 1


def research_pod(gpus: int, t: float) -> Pod:
    return Pod("research", gpus, RESEARCH_PRIORITY, t)


def bind_all(c: Cluster, now: float) -> None:
    c.schedule(now, 30.0)
    assert not c.pending


def place(c: Cluster, pods: list[Pod], now: float) -> list[Pod]:
    """Submit `pods` and bind them all at `now`."""
    for p in pods:
        c.submit(p)
    bind_all(c, now)
    return pods


def test_preemption_evicts_newest_research_pods_then_binds_after_grace() -> None:
    c = Cluster(8, 8)
    place(c, [research_pod(1, 0.0) for _ in range(4)], 0.0)
    news = place(c, [research_pod(1, 10.0) for _ in range(4)], 10.0)
    inf = Pod("inference", 4, INFERENCE_PRIORITY, 20.0)
    c.submit(inf)
    bound, evicted = c.schedule(20.0, 30.0)
    assert bound == []
    assert {e.victim for e in evicted} == set(news)  # the 4 newest, none of the old ones
    assert all(p.phase is PodPhase.TERMINATING for p in news)
    assert inf.nominated == 0
    # Research pods cannot take the GPUs being freed for the nominated pod.
    c.submit(research_pod(1, 21.0))
    c.release_due(49.0)
    assert c.schedule(49.0, 30.0) == ([], [])
    c.release_due(50.0)
    bound, evicted = c.schedule(50.0, 30.0)
    assert bound == [inf] and evicted == []
    assert c.held == {"inference": 4, "research": 4}


def test_nominated_pod_binds_where_room_appears_before_its_victims_are_gone() -> None:
    """KEP-1923, checked against kube-scheduler in e2e scenario 13: the nominated node is
    tried first, then every node. Before, the simulated replica waited out the grace
    period of its victims though another node had room."""
    c = Cluster(16, 8)
    keep = place(c, [Pod("inference", 4, INFERENCE_PRIORITY, float(i)) for i in range(2)], 0.0)
    research = place(c, [research_pod(1, 10.0) for _ in range(8)], 10.0)
    assert {p.node for p in keep} == {0} and {p.node for p in research} == {1}
    inf = Pod("inference", 4, INFERENCE_PRIORITY, 20.0)
    c.submit(inf)
    _, evicted = c.schedule(20.0, 600.0)
    assert len(evicted) == 4 and inf.nominated == 1
    # No room anywhere yet: it waits, and does not preempt again while its victims terminate.
    assert c.schedule(30.0, 600.0) == ([], [])
    c.delete(keep[1], 40.0)  # a scale-down frees node 0
    bound, evicted = c.schedule(40.0, 600.0)
    assert bound == [inf] and evicted == [] and inf.node == 0 and inf.bound_at == 40.0
    assert inf.nominated == -1 and c.reserved.tolist() == [0, 0]
    # Its victims still leave at the end of their grace period, and their GPUs are free then.
    assert sum(p.phase is PodPhase.TERMINATING for p in research) == 4
    c.release_due(620.0)
    assert c.free.tolist() == [0, 4]


def test_preemption_picks_node_with_fewest_victims() -> None:
    c = Cluster(16, 8)
    for _ in range(8):
        c.submit(research_pod(1, 0.0))  # node 0: eight 1-GPU pods
    bind_all(c, 0.0)
    c.submit(research_pod(8, 1.0))  # node 1: one 8-GPU pod
    bind_all(c, 1.0)
    inf = Pod("inference", 4, INFERENCE_PRIORITY, 2.0)
    c.submit(inf)
    _, evicted = c.schedule(2.0, 30.0)
    assert [e.victim.gpus for e in evicted] == [8]
    assert inf.nominated == 1


# Nodes of 8 GPUs, each a list of research pods (gpus, priority, bound_at); a 4-GPU
# inference pod arrives and fits nowhere. Expected: the node it is nominated to and its
# victims as (gpus, priority, bound_at). kube-scheduler's default preemption: on each node
# all lower pods out, the most important reprieved first; then the node whose highest
# victim is lowest, the smallest sum of (shifted) priorities, the fewest victims.
PREEMPTIONS = {
    "cheaper-class-on-another-node-beats-fewer-victims": (
        [[(8, -100, 0.0)], [(1, -120, 0.0)] * 8],
        1,
        [(1, -120, 0.0)] * 4,
    ),
    "within-a-node-the-lowest-class-goes": (
        [[(4, -110, 0.0), (1, -120, 5.0), (1, -120, 5.0), (1, -120, 5.0), (1, -120, 5.0)]],
        0,
        [(1, -120, 5.0)] * 4,
    ),
    "equal-priority-the-newest-go": (
        [[(2, -100, 0.0), (2, -100, 1.0), (2, -100, 2.0), (2, -100, 3.0)]],
        0,
        [(2, -100, 2.0), (2, -100, 3.0)],
    ),
    "a-higher-class-only-when-nothing-lower-suffices": (
        [[(4, -100, 0.0), (2, -120, 0.0), (2, -110, 0.0)], [(8, -100, 0.0)]],
        0,
        [(2, -120, 0.0), (2, -110, 0.0)],
    ),
    "equal-priority-fewest-victims": (
        [[(1, -100, 0.0)] * 8, [(8, -100, 1.0)]],
        1,
        [(8, -100, 1.0)],
    ),
}


@pytest.mark.parametrize(
    ("nodes", "node", "victims"), list(PREEMPTIONS.values()), ids=list(PREEMPTIONS)
)
def test_preemption_picks_victims_as_kube_scheduler_does(
    nodes: list[list[tuple[int, int, float]]], node: int, victims: list[tuple[int, int, float]]
) -> None:
    c = Cluster(8 * len(nodes), 8)
    for i, pods in enumerate(nodes):
        for gpus, prio, t in pods:
            p = Pod("research", gpus, prio, t)
            c.submit(p)
            c.schedule(t, 30.0)
            assert p.node == i, "test layout: pods fill the nodes in order"
    inf = Pod("inference", 4, INFERENCE_PRIORITY, 10.0)
    c.submit(inf)
    _, evicted = c.schedule(10.0, 30.0)
    assert inf.nominated == node
    got = sorted((e.victim.gpus, e.victim.priority, e.victim.bound_at) for e in evicted)
    assert got == sorted(victims)


@pytest.mark.parametrize(
    ("classes", "values"),
    [
        pytest.param(
            [("eval", 1, 600.0, 0), ("finetune", 4, 1200.0, 0), ("pretrain", 8, 1800.0, 0)],
            {"pretrain": -100, "finetune": -110, "eval": -120},
            id="by-work-a-preemption-loses",
        ),
        pytest.param(
            [("big", 8, 1800.0, 0), ("urgent", 1, 60.0, 1)],
            {"urgent": -100, "big": -110},
            id="config-priority-first",
        ),
        pytest.param(
            [("b", 2, 600.0, 0), ("a", 2, 600.0, 0)], {"a": -100, "b": -110}, id="ties-by-name"
        ),
    ],
)
def test_research_priorities(
    classes: list[tuple[str, int, float, int]], values: dict[str, int]
) -> None:
    assert research_priorities(classes) == values


# A 4-GPU inference pod, then 1-GPU research pods, then a 4-GPU one, on two 8-GPU nodes:
# where each binds. "spread" matches kube-scheduler's default profile, "pack" its
# MostAllocated profile on nvidia.com/gpu (both checked on the real one: e2e scenario 11).
@pytest.mark.parametrize(
    ("placement", "nodes"),
    [
        pytest.param("pack", [0, 0, 0, 0, 0, 1], id="pack-fills-the-first-node"),
        pytest.param("spread", [0, 1, 1, 1, 1, 0], id="spread-to-the-emptier-node"),
    ],
)
def test_placement(placement: str, nodes: list[int]) -> None:
    c = Cluster(16, 8, placement)
    pods = [Pod("inference", 4, INFERENCE_PRIORITY, 0.0)]
    pods += [research_pod(1, 1.0 + i) for i in range(4)]
    pods += [Pod("inference", 4, INFERENCE_PRIORITY, 5.0)]
    for i, p in enumerate(pods):
        c.submit(p)
        assert c.schedule(float(i), 30.0) == ([p], [])
    assert [p.node for p in pods] == nodes


def test_placement_spread_leaves_no_node_whole_for_the_next_replica() -> None:
    """The cost the bench measures: after a replica and six 1-GPU research pods, 6 GPUs
    are free either way; packed, one node keeps 6 and the next replica binds; spread,
    no node has 4 and it preempts."""
    got = {}
    for placement in ("pack", "spread"):
        c = Cluster(16, 8, placement)
        for p in [Pod("inference", 4, INFERENCE_PRIORITY, 0.0)] + [
            research_pod(1, 1.0 + i) for i in range(6)
        ]:
            c.submit(p)
            c.schedule(p.created, 30.0)
        inf = Pod("inference", 4, INFERENCE_PRIORITY, 10.0)
        c.submit(inf)
        bound, evicted = c.schedule(10.0, 30.0)
        got[placement] = ([int(x) for x in c.free], len(bound), len(evicted))
    assert got == {"pack": ([0, 2], 1, 0), "spread": ([3, 3], 0, 1)}


def test_unknown_placement_is_refused() -> None:
    with pytest.raises(ValueError, match="placement must be one of"):
        Cluster(16, 8, "random")


def test_no_preemption_when_gpus_fit_and_none_for_research() -> None:
    c = Cluster(8, 8)
    c.submit(research_pod(4, 0.0))
    bind_all(c, 0.0)
    inf = Pod("inference", 4, INFERENCE_PRIORITY, 1.0)
    c.submit(inf)
    assert c.schedule(1.0, 30.0) == ([inf], [])
    c.submit(research_pod(1, 2.0))
    assert c.schedule(2.0, 30.0) == ([], [])  # research never preempts


def test_preempted_job_keeps_whole_checkpoints_and_loses_the_rest() -> None:
    cls = ResearchClassSpec("finetune", 4, 4.0, 0.5, checkpoint_s=600)
    job = ResearchJob(cls, work_s=36000.0, created=0.0)
    job.state, job.run_from = JobState.RUNNING, 100.0
    ledger = Ledger(0.0, 1e9)
    lost = preempt_job(job, 100.0 + 25 * 60, ledger)  # 25 min of work, checkpoints at 10, 20
    assert lost == pytest.approx(4 * 5 * 60)
    assert ledger.lost_gpu_s == pytest.approx(4 * 300)
    assert ledger.useful_gpu_s == pytest.approx(4 * 1200)
    assert (job.saved_s, ledger.preemptions, job.state) == (1200.0, 1, JobState.EVICTED)
    # Re-created and run again: finishes after the remaining work only.
    job.state, job.run_from = JobState.RUNNING, 5000.0
    assert job.finish_at() == pytest.approx(5000.0 + 36000.0 - 1200.0)
    complete_job(job, job.finish_at(), ledger)
    assert ledger.useful_gpu_s == pytest.approx(4 * 36000.0)
    assert ledger.completed == 1


def test_ledger_counts_only_the_measured_window() -> None:
    cls = ResearchClassSpec("eval", 1, 1.0, 0.5, checkpoint_s=600)
    job = ResearchJob(cls, 1e6, 0.0)
    job.state, job.run_from = JobState.RUNNING, -1000.0  # started in the warm-up
    ledger = Ledger(0.0, 1e9)
    preempt_job(job, 1300.0, ledger)  # 2300 s of work: 1800 kept (from -1000 to 800)
    assert ledger.useful_gpu_s == pytest.approx(800.0)
    assert ledger.lost_gpu_s == pytest.approx(500.0)
    assert math.isinf(job.run_from)


def test_checkpoint_on_sigterm_keeps_all_work() -> None:
    cls = ResearchClassSpec("pretrain", 8, 12.0, 0.5, checkpoint_s=1800)
    job = ResearchJob(cls, work_s=36000.0, created=0.0)
    job.state, job.run_from = JobState.RUNNING, 0.0
    ledger = Ledger(0.0, 1e9)
    assert preempt_job(job, 1500.0, ledger, checkpoint_on_sigterm=True) == 0.0
    assert (job.saved_s, ledger.lost_gpu_s, ledger.useful_gpu_s) == (1500.0, 0.0, 8 * 1500.0)
