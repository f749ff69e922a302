"""The pool's pod lifecycle (`scaler.sim.pods`), shared by the bench's engine and the demo:
ReplicaSet scale-down order, priority preemption of research pods, the Job controller
re-creating evicted pods, cold starts and drains, on nodes of 8 GPUs."""

from __future__ import annotations

import math

import pytest

from scaler.sim.kube import INFERENCE_PRIORITY, JobState, Ledger, PodPhase, ResearchClassSpec
from scaler.sim.pods import InfReplica, Lifecycle, Pods, RepState

CLASSES = (
    ResearchClassSpec("eval", 1, median_hours=100.0, sigma=0.0, checkpoint_s=600.0),
    ResearchClassSpec("finetune", 4, median_hours=100.0, sigma=0.0, checkpoint_s=600.0),
    ResearchClassSpec("pretrain", 8, median_hours=100.0, sigma=0.0, checkpoint_s=600.0),
    ResearchClassSpec("short", 4, median_hours=0.1, sigma=0.0, checkpoint_s=600.0),  # 360 s
)
COLD_S, STARTUP_S, HOLD_S = 100.0, 10.0, 60.0


def make_pods(
    pool_gpus: int = 16,
    *,
    cold_s: float = COLD_S,
    hold_s: float = HOLD_S,
    checkpoint_on_sigterm: bool = False,
    worker_slot_check: bool = False,
) -> Pods:
    lc = Lifecycle(4, cold_s, STARTUP_S, hold_s, checkpoint_on_sigterm, worker_slot_check)
    return Pods(
        pool_gpus=pool_gpus,
        gpus_per_node=8,
        lifecycle=lc,
        classes=CLASSES,
        seed=0,
        ledger=Ledger(0.0, math.inf),
    )


def busy(row: int) -> bool:
    return False


def idle(row: int) -> bool:
    return True


def uids(reps: list[InfReplica]) -> list[int]:
    return [r.uid for r in reps]


# ---- scale-down: which replica goes first ---------------------------------------------------
def mixed_states() -> Pods:
    """12 GPUs (3 replicas): uid 0 Ready (created 0), 1 Ready (10), 2 Loading (300),
    3 Pending (300, no GPUs left)."""
    p = make_pods(12)
    assert uids(p.start_ready(1, 0.0)) == [0]
    p.scale(2, 10.0)
    p.step(10.0, busy)
    assert uids(p.step(200.0, busy).ready) == [1]
    p.scale(4, 300.0)
    p.step(300.0, busy)
    assert [r.state for r in p.replicas] == [
        RepState.READY,
        RepState.READY,
        RepState.LOADING,
        RepState.PENDING,
    ]
    return p


@pytest.mark.parametrize(
    ("to", "deleted", "draining"),
    [
        pytest.param(3, [3], [], id="pending-first"),
        pytest.param(2, [3, 2], [], id="then-loading"),
        pytest.param(1, [3, 2], [1], id="then-newest-ready"),
        pytest.param(0, [3, 2], [1, 0], id="all"),
        pytest.param(4, [], [], id="no-change"),
    ],
)
def test_scale_down_removes_unscheduled_then_loading_then_newest_ready(
    to: int, deleted: list[int], draining: list[int]
) -> None:
    p = mixed_states()
    before = set(uids(p.replicas))
    out = p.scale(to, 400.0)
    assert uids(out) == draining
    assert before - set(uids(p.replicas)) == set(deleted)
    assert {r.uid for r in p.replicas if r.state is RepState.DRAINING} == set(draining)
    # Deleted pods free their GPUs at once; draining ones hold theirs until idle.
    bound = sum(1 for r in p.replicas if r.state is not RepState.PENDING)
    assert p.cluster.held["inference"] == 4 * bound
    gone = p.step(401.0, idle).gone
    assert set(uids(gone)) == set(draining)
    assert p.cluster.held["inference"] == 4 * (bound - len(draining))


def test_draining_replica_holds_gpus_and_row_until_idle_then_row_is_reused() -> None:
    p = make_pods(8)
    (a,) = p.start_ready(1, 0.0)
    p.scale(2, 1.0)
    p.step(1.0, busy)
    (b,) = p.step(1.0 + COLD_S, busy).ready
    assert (a.row, b.row) == (0, 1)
    assert p.scale(1, 200.0) == [b]  # the newest Ready one
    for t in (201.0, 202.0):
        assert p.step(t, busy).gone == []
        assert p.cluster.held["inference"] == 8 and b.state is RepState.DRAINING
    p.scale(2, 203.0)  # a new replica is Pending: the draining one still holds the GPUs
    assert p.step(203.0, busy).ready == [] and p.count(RepState.PENDING) == 1
    assert p.step(204.0, idle).gone == [b]
    assert p.cluster.held["inference"] == 4 and p.count(RepState.PENDING) == 1
    p.step(205.0, idle)  # the next scheduling pass sees the freed GPUs
    assert p.count(RepState.LOADING) == 1
    (c,) = p.step(205.0 + COLD_S, idle).ready
    assert c.row == 1  # the lowest free row: the one the drained replica gave back


# ---- priority preemption ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("jobs", "victims"),
    [
        # Replica on node 0, twelve 1-GPU Jobs fill both nodes: 4 victims either way, the
        # first node wins the tie.
        pytest.param({"eval": 12}, ["eval"] * 4, id="four-1-gpu"),
        pytest.param({"finetune": 3}, ["finetune"], id="one-4-gpu"),
        # An 8-GPU Job alone on node 1, four 1-GPU Jobs beside the replica on node 0: one
        # victim beats four.
        pytest.param({"pretrain": 1, "eval": 4}, ["pretrain"], id="fewest-victims"),
        pytest.param({"finetune": 2}, [], id="fits"),
    ],
)
def test_scale_up_preempts_lowest_priority_fewest_pods_freeing_enough(
    jobs: dict[str, int], victims: list[str]
) -> None:
    p = make_pods(16)
    (first,) = p.start_ready(1, 0.0)
    for name, n in jobs.items():
        assert p.create_jobs(name, float(n), 0.0) == n
    p.step(1.0, busy)
    assert p.jobs_in(JobState.RUNNING) == sum(jobs.values())

    p.scale(2, 100.0)
    ch = p.step(100.0, busy)
    assert sorted(j.cls.name for j, _ in ch.preempted) == sorted(victims)
    # Never the other replica (higher priority); the victims' pods are terminating.
    assert first.state is RepState.READY and first.pod.priority == INFERENCE_PRIORITY
    assert all(j.pod is not None and j.pod.phase is PodPhase.TERMINATING for j, _ in ch.preempted)
    new = p.replicas[-1]
    if not victims:
        assert new.state is RepState.LOADING
        return
    # The victims free enough GPUs on the nominated node, and no more pods than needed.
    node = new.pod.nominated
    assert node >= 0 and new.state is RepState.PENDING
    freed = sum(j.cls.gpus for j, _ in ch.preempted)
    assert p.cluster.free[node] + freed >= 4
    assert p.cluster.free[node] + freed - min(j.cls.gpus for j, _ in ch.preempted) < 4
    assert p.research_gpus(JobState.EVICTED) == freed
    # It binds when their grace period ends, not before.
    p.step(100.0 + HOLD_S - 1, busy)
    assert new.state is RepState.PENDING
    p.step(100.0 + HOLD_S, busy)
    assert new.state is RepState.LOADING and new.pod.node == node
    assert p.cluster.held["inference"] + p.cluster.held["research"] <= 16


# ---- the Job controller re-creates evicted pods ------------------------------------------
@pytest.mark.parametrize(
    "hold_s",
    [
        pytest.param(HOLD_S, id="grace-period"),
        # A pod that exits at once (its SIGTERM checkpoint takes no time) is re-created too.
        pytest.param(0.0, id="exits-at-once"),
    ],
)
def test_evicted_job_is_recreated_pending_and_runs_again_when_gpus_free(hold_s: float) -> None:
    p = make_pods(8, hold_s=hold_s)
    p.start_ready(1, 0.0)
    p.create_jobs("finetune", 1.0, 0.0)
    p.step(1.0, busy)
    (job,) = p.running
    old_pod = job.pod
    assert job.state is JobState.RUNNING and job.run_from == 1.0 + STARTUP_S

    p.scale(2, 1000.0)
    ((victim, lost),) = p.step(1000.0, busy).preempted
    assert victim is job and job.state is JobState.EVICTED
    assert lost == pytest.approx(4 * (1000.0 - 11.0 - 600.0))  # since its 600 s checkpoint
    assert job.saved_s == 600.0

    p.step(1000.0 + max(hold_s, 1.0), busy)  # pod gone: re-created, but no GPUs left
    assert old_pod is not None and old_pod.phase is PodPhase.GONE
    assert job.state is JobState.PENDING and job.pod is not old_pod
    assert job.pod is not None and job.pod.phase is PodPhase.PENDING
    assert p.unfinished("finetune") == 1  # never deleted: KEDA creates no replacement
    assert p.create_jobs("finetune", 1.0, 1100.0) == 0

    assert uids(p.step(1500.0, busy).ready) == [1]
    assert uids(p.scale(1, 2000.0)) == [1]  # inference gives the GPUs back
    p.step(2000.0, idle)
    assert job.state is JobState.PENDING  # the drained GPUs were freed after this pass
    p.step(2001.0, idle)
    assert job.state is JobState.RUNNING and job.run_from == 2001.0 + STARTUP_S
    assert job.preemptions == 1 and p.cluster.held == {"inference": 4, "research": 4}
    # It finishes after the work it had not checkpointed.
    assert job.finish_at() == pytest.approx(2011.0 + job.work_s - 600.0)


def test_checkpoint_on_sigterm_loses_nothing() -> None:
    p = make_pods(8, checkpoint_on_sigterm=True)
    p.start_ready(1, 0.0)
    p.create_jobs("finetune", 1.0, 0.0)
    p.step(1.0, busy)
    p.scale(2, 1000.0)
    ((job, lost),) = p.step(1000.0, busy).preempted
    assert lost == 0.0 and job.saved_s == pytest.approx(1000.0 - 11.0)
    assert p.ledger.lost_gpu_s == 0.0


@pytest.mark.parametrize(
    ("check", "granted", "runs"),
    [
        pytest.param(True, {"finetune": 1}, True, id="slot-free"),
        # KEDA created the Job on an older, higher answer; the worker asks again and exits.
        pytest.param(True, {"finetune": 0}, False, id="no-slot"),
        pytest.param(True, {}, False, id="class-unknown-to-the-scaler"),
        pytest.param(False, {"finetune": 0}, True, id="bare-command-no-worker"),
    ],
)
def test_worker_takes_an_item_only_when_its_class_has_a_free_slot(
    check: bool, granted: dict[str, int], runs: bool
) -> None:
    p = make_pods(8, worker_slot_check=check)
    p.granted = granted
    p.create_jobs("finetune", 1.0, 0.0)
    (job,) = p.jobs("finetune")
    p.step(0.0, busy)
    assert (job.state is JobState.RUNNING) is runs
    assert p.ledger.declined == (0 if runs else 1)
    assert p.unfinished("finetune") == (1 if runs else 0)  # a declined Job succeeded
    p.step(1.0, busy)
    assert p.cluster.held["research"] == (4 if runs else 0)  # its pod exited at once


def test_declined_item_keeps_its_checkpoint_for_the_next_job() -> None:
    """Preempted by a short burst, its re-created pod starts on the GPUs the burst no
    longer needs while the scaler still grants its class nothing: the worker takes
    nothing; the next Job KEDA creates takes the same item, checkpoint and all, before
    any new one."""
    p = make_pods(16, hold_s=5.0, worker_slot_check=True)
    p.granted = {"finetune": 1}
    p.start_ready(2, 0.0)
    p.create_jobs("finetune", 1.0, 0.0)
    p.step(1.0, busy)
    (job,) = p.running
    p.scale(4, 1000.0)
    p.granted = {"finetune": 0}  # the burst took the class's GPUs
    ((victim, _),) = p.step(1000.0, busy).preempted
    assert victim is job and job.saved_s == 600.0
    p.scale(3, 1002.0)  # the burst is over: the replica still waiting for them is deleted
    # Gone after 5 s; re-created; binds on the 4 GPUs nobody holds; declines.
    p.step(1005.0, busy)
    assert p.ledger.declined == 1 and job.state is JobState.PENDING and job.pod is None
    assert p.unfinished("finetune") == 0
    p.step(1006.0, busy)
    assert p.cluster.held == {"inference": 12, "research": 0}

    p.granted = {"finetune": 1}
    assert p.create_jobs("finetune", 1.0, 2000.0) == 1
    assert p.jobs("finetune") == [job] and job.saved_s == 600.0
    p.step(2000.0, busy)
    assert job.state is JobState.RUNNING and job.preemptions == 1
    assert job.finish_at() == pytest.approx(2000.0 + STARTUP_S + job.work_s - 600.0)


def test_completed_job_frees_its_gpus_and_is_done() -> None:
    p = make_pods(8)
    p.create_jobs("short", 1.0, 0.0)
    p.step(0.0, busy)
    (job,) = p.running
    assert job.finish_at() == STARTUP_S + 360.0
    assert p.step(STARTUP_S + 359.0, busy).completed == []
    assert p.step(STARTUP_S + 360.0, busy).completed == [job]
    assert job.state is JobState.DONE and p.cluster.held["research"] == 0
    assert p.ledger.useful_gpu_s == pytest.approx(4 * 360.0) and p.ledger.completed == 1
    assert p.create_jobs("short", 1.0, 400.0) == 1  # done Jobs no longer count


# ---- cold start ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("cold_s", "dt", "busy_gpus", "ready_at"),
    [
        pytest.param(100.0, 1.0, 0, 110.0, id="bound-at-once"),
        pytest.param(100.0, 30.0, 0, 130.0, id="first-step-after-load"),
        pytest.param(0.0, 1.0, 0, 10.0, id="no-cold-start"),
        # The pool is full of research: bound only after the victims' grace period.
        pytest.param(100.0, 1.0, 8, 10.0 + HOLD_S + 100.0, id="after-preemption"),
    ],
)
def test_cold_start_ready_after_bind_plus_model_load(
    cold_s: float, dt: float, busy_gpus: int, ready_at: float
) -> None:
    p = make_pods(8, cold_s=cold_s)
    if busy_gpus:
        p.create_jobs("pretrain", busy_gpus / 8, 0.0)
        p.step(0.0, busy)
    p.scale(1, 10.0)
    t = 10.0
    while t < 1000.0:
        ready = p.step(t, busy).ready
        if ready:
            break
        assert p.count(RepState.READY) == 0
        t += dt
    assert t == ready_at
    (rep,) = ready
    assert rep.state is RepState.READY and rep.row == 0 and rep.ready_at <= t
