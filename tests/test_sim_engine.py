"""Whole simulated pool, short: invariants and the server's own policy in the loop."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from scaler.core.load import EngineSample
from scaler.core.policy import PolicyState
from scaler.sim.engine import (
    REPLICAS_LOADING,
    REPLICAS_READY,
    REPLICAS_WAITING_FOR_GPUS,
    PolicyResult,
    ScrapeFaults,
    simulate_policy,
)
from scaler.sim.kube import Hpa
from scaler.sim.policies import LateAnswer, Oracle, Ours, PoolView, QueueThreshold
from scaler.sim.scenario import (
    Calibration,
    Scenario,
    expand_policies,
    initial_replicas,
    make_policies,
    oracle_name,
    pool_config,
)
from scaler.sim.workload import RateCurve, make_workload

# A quiet half hour, then a ramp to 8× the traffic: inference must take GPUs back.
STEP = RateCurve(
    "step",
    np.array([0.0, 3600.0, 5400.0, 6300.0, 9000.0]),
    np.array([0.5, 0.5, 0.5, 4.0, 4.0]),
    None,
    None,
    1800.0,
    "conv",
)
CAL = Calibration(per_replica_rps=1.0, replicas=4, attainment=0.99, mean_tokens=1366, seconds=0)


def run(name: str, scn: Scenario, **engine: Any) -> tuple[PolicyResult, object]:
    """`name` through the step curve; `engine`: more `simulate_policy` arguments."""
    w = make_workload(
        STEP,
        start_s=3600.0,
        duration_s=4500.0,
        peak_rps=4.0,
        rng=np.random.default_rng(1),
        lead_in_s=600.0,
    )
    cfg = pool_config(scn, CAL)
    pols, static_n = make_policies(scn, cfg, CAL, w, -600.0, 4500.0)
    p = pols[name]
    res = simulate_policy(
        p,
        w,
        spec=scn.spec,
        pool_gpus=scn.pool_gpus,
        gpus_per_node=scn.gpus_per_node,
        classes=list(scn.classes),
        t_start=-600.0,
        t_end=4500.0,
        initial_replicas=static_n if name == "static-peak" else 1,
        seed=1,
        **engine,
    )
    return res, p


SCN = Scenario(pool_gpus=32, gpus_per_replica=4, reserve_gpus=4, warmup_s=600)


@pytest.mark.parametrize("name", ["ours", "static-peak", "queue-threshold", "oracle"])
def test_pool_never_overcommits_and_accounts_consistently(name: str) -> None:
    res, _ = run(name, SCN)
    s = res.series
    inf, rsch = np.asarray(s.inference), np.asarray(s.research)
    assert np.all(inf + rsch <= SCN.pool_gpus)
    assert res.ledger.useful_gpu_s <= res.research_alloc_gpu_s + 1e-6
    assert res.ledger.lost_gpu_s <= res.research_alloc_gpu_s
    assert res.served > 0.95 * res.ttft.size
    # Every measured GPU-second is inference's, research's or idle (pool_gpus × the span).
    total = res.inference_gpu_s + res.research_alloc_gpu_s + res.idle_gpu_s
    assert total == pytest.approx(SCN.pool_gpus * 4500.0)
    assert 0.0 <= res.idle_research_pending_gpu_s <= res.idle_gpu_s
    if name == "static-peak":
        assert res.research_alloc_gpu_s == 0 and res.ledger.preemptions == 0
        assert set(s.replicas) == {4}  # ceil(4 req/s / 1 req/s per replica)


def test_spread_placement_strands_gpus_research_pods_wait_for() -> None:
    """kube-scheduler's default profile spreads pods (`placement="spread"`): the free GPUs
    end up in pieces on every node, and a created 4- or 8-GPU research pod waits while
    GPUs stand idle; packed, that hardly happens. The bench reports it as
    `idle_while_research_pending_gpu_hours` (docs/bench.md "Placement")."""
    stranded = {}
    for placement in ("pack", "spread"):
        res, _ = run("ours", SCN, placement=placement)
        stranded[placement] = res.idle_research_pending_gpu_s / 3600.0
    assert stranded["spread"] > 3 * stranded["pack"] and stranded["spread"] > 0.5, stranded


def test_ours_runs_the_server_policy_and_gives_gpus_back_on_the_ramp() -> None:
    res, pol = run("ours", SCN)
    assert isinstance(pol, Ours) and isinstance(pol.cycle.policy["chat"], PolicyState)
    s = res.series
    t = np.asarray(s.t)
    before = np.asarray(s.replicas)[(t > 600) & (t < 1800)]
    after = np.asarray(s.replicas)[t > 3600]
    assert before.min() <= 2 and before.max() < after.min()
    # Research held GPUs while it was quiet and lost some of them to inference on the ramp.
    assert np.asarray(s.research)[(t > 600) & (t < 1800)].max() >= 8
    assert res.ledger.preemptions > 0
    assert float(np.mean(res.ttft <= 2.0)) > 0.9


def test_each_request_records_what_the_replicas_were_doing_when_it_arrived() -> None:
    """Static peak never scales: every request finds every replica serving. Ours takes GPUs
    back from research on the ramp: requests arrive while a new replica waits out research's
    grace period, and on this ramp those are the ones that miss (the bench's
    misses_by_replicas_at_arrival)."""
    static, _ = run("static-peak", SCN)
    assert static.replicas_at_arrival is not None
    assert static.replicas_at_arrival.shape == static.ttft.shape
    assert set(np.unique(static.replicas_at_arrival)) == {REPLICAS_READY}
    ours, _ = run("ours", SCN)
    at = ours.replicas_at_arrival
    assert at is not None and at.shape == ours.ttft.shape
    assert {REPLICAS_WAITING_FOR_GPUS, REPLICAS_LOADING, REPLICAS_READY} <= set(np.unique(at))
    missed = at[ours.ttft > 2.0]
    assert missed.size > 0 and np.all(missed == REPLICAS_WAITING_FOR_GPUS), np.bincount(missed)
    # Waiting happens on the ramp (from 1800 s of the run), not in the quiet half hour.
    assert ours.arrival[at == REPLICAS_WAITING_FOR_GPUS].min() > 1800.0


def test_every_policy_starts_from_the_demand_not_the_first_headroom_swept() -> None:
    """`--oracle-headrooms 1.3` once made ours start with the oracle × 1.3's replicas, and ours'
    week then read 3920.9 harvested GPU-h instead of 3992.4: which oracles are swept must not
    change the other policies' runs."""
    w = make_workload(
        STEP, start_s=5400.0, duration_s=1800.0, peak_rps=4.0, rng=np.random.default_rng(1),
        lead_in_s=600.0,
    )  # fmt: skip
    starts = {}
    for headrooms in ((1.0,), (1.5,), (2.0, 1.0)):
        scn = replace(SCN, oracle_headrooms=headrooms)
        pols, _ = make_policies(scn, pool_config(scn, CAL), CAL, w, -600.0, 1800.0)
        assert set(expand_policies(scn, ("oracle",))) == {oracle_name(h) for h in headrooms}
        starts[headrooms] = initial_replicas(pols, -600.0)
        first = pols[oracle_name(headrooms[0])]
        assert isinstance(first, Oracle) and first.target(-600.0) >= starts[headrooms]
    # The ramp is ahead (the oracle looks one reclaim lead ahead): h = 2 asks more than h = 1.
    assert starts[(1.5,)] == starts[(1.0,)] == starts[(2.0, 1.0)]
    scn = replace(SCN, oracle_headrooms=(2.0,))
    pols, _ = make_policies(scn, pool_config(scn, CAL), CAL, w, -600.0, 1800.0)
    double = pols[oracle_name(2.0)]
    assert isinstance(double, Oracle) and double.target(-600.0) > initial_replicas(pols, -600.0)


def test_measure_from_scores_only_the_later_part() -> None:
    w = make_workload(
        STEP, start_s=3600.0, duration_s=4500.0, peak_rps=4.0, rng=np.random.default_rng(1),
        lead_in_s=600.0,
    )  # fmt: skip
    scn = SCN
    pols, _ = make_policies(scn, pool_config(scn, CAL), CAL, w, -600.0, 4500.0)

    def sim(measure_from: float) -> PolicyResult:
        return simulate_policy(
            pols["static-peak"], w, spec=scn.spec, pool_gpus=scn.pool_gpus,
            gpus_per_node=scn.gpus_per_node, classes=list(scn.classes), t_start=-600.0,
            t_end=4500.0, initial_replicas=4, seed=1, measure_from=measure_from,
        )  # fmt: skip

    whole, later = sim(0.0), sim(1800.0)
    assert later.arrival.min() >= 1800.0 and whole.arrival.min() < 1800.0
    assert later.arrival.size == np.count_nonzero(whole.arrival >= 1800.0)
    assert later.ledger.t0 == 1800.0
    # Static: the inference GPUs are held all along, so the GPU-seconds scale with the span.
    assert later.inference_gpu_s == pytest.approx(whole.inference_gpu_s * 2700 / 4500)


def _view(
    samples: dict[int, EngineSample], unread: set[int], now: float, after: float | None = None
) -> PoolView:
    """Replicas in `unread` show 50 waiting, answered `after` s late (None: never)."""
    late = {row: LateAnswer(_sample(50.0), after) for row in unread}
    ready = len(samples) + len(late)
    return PoolView(now, samples, {}, 0, ready, ready, {}, late)


def _sample(waiting: float) -> EngineSample:
    return EngineSample(waiting=waiting, running=8.0, kv_usage_mean=0.5, kv_usage_max=0.5)


def test_ours_reads_an_unanswered_scrape_as_the_server_does() -> None:
    """A replica that does not answer /metrics in time reaches ours as a timed-out scrape:
    the server's rule then applies (the replicas read may raise the target, never lower
    it; nothing fresh, no research), and with no replica read KEDA gets UNAVAILABLE, as
    from the gRPC servicer (`ServiceDecision.keda_value`)."""
    ours = Ours("ours", pool_config(SCN, CAL), SCN.pool_gpus)
    hpa = Hpa(1, SCN.max_replicas, ours.behavior)
    ours.control(_view({0: _sample(0.0), 1: _sample(0.0)}, set(), 0.0))
    assert ours.decision is not None and ours.decision.services["chat"].fresh
    held = ours.desired
    assert held is not None

    # One replica answers with a deep queue; the other has not answered for longer than
    # scrape.staleAfterSeconds (30 s): until then its last reading stands.
    for now in (5.0, 20.0):
        ours.control(_view({0: _sample(0.0)}, {1}, now))
        assert ours.decision.services["chat"].fresh
    ours.control(_view({0: _sample(40.0)}, {1}, 40.0))
    sd = ours.decision.services["chat"]
    assert not sd.fresh and sd.ready == 1
    assert sd.desired is not None and sd.desired > held
    assert "unread: replica-1: read timeout after 2 s" in sd.reason
    assert all(r.slots == 0 for r in ours.decision.research.values())
    assert ours.hpa_recommendation(_view({0: _sample(40.0)}, {1}, 40.0), hpa) == (sd.desired)

    # Neither answers: the servicer's UNAVAILABLE, so the HPA keeps what it has.
    ours.control(_view({}, {0, 1}, 45.0))
    nothing = _view({}, {0, 1}, 75.0)
    ours.control(nothing)
    assert ours.decision.services["chat"].ready == 0
    assert ours.hpa_recommendation(nothing, hpa) is None


def test_prometheus_sums_only_the_pods_that_answered() -> None:
    """The queue baseline's Prometheus marks a failed scrape's series stale at once, so
    `sum(vllm:num_requests_waiting)` covers the pods that answered: under load it reads
    less than is waiting."""
    cfg = pool_config(SCN, CAL)
    q = QueueThreshold("queue-threshold", cfg, SCN.pool_gpus)
    q.control(_view({0: _sample(4.0)}, {1, 2}, 0.0))
    assert q._prom_value == 4.0
    assert q.hpa_recommendation(_view({}, set(), 0.0), Hpa(1, 8, q.behavior)) == 1


@pytest.mark.parametrize(
    ("faults", "unread"),
    [
        pytest.param(ScrapeFaults(), False, id="every-replica-answers"),
        pytest.param(ScrapeFaults(waiting_at_least=2, probability=0.5), True, id="loaded-half"),
    ],
)
def test_replicas_too_busy_to_answer_are_unread_and_ours_still_takes_gpus_back(
    faults: ScrapeFaults, unread: bool
) -> None:
    """On the ramp the replicas' queues pass the fault's threshold and some scrapes go
    unanswered; ours still raises on the ramp from the replicas it reads."""
    res, _ = run("ours", SCN, scrape_faults=faults)
    assert res.scrapes > 900  # ≥ 1 ready replica × 900 scrapes over the measured 4500 s
    if unread:
        assert 0 < res.unread_scrapes < res.scrapes
    else:
        assert res.unread_scrapes == 0
    t = np.asarray(res.series.t)
    replicas = np.asarray(res.series.replicas)
    assert replicas[t > 3600].min() > replicas[(t > 600) & (t < 1800)].max()
    assert float(np.mean(res.ttft <= 2.0)) > 0.85


@pytest.mark.parametrize(
    ("late_answer_s", "after_s", "read"),
    [
        pytest.param(10.0, 4.0, True, id="kept-open-read-next-cycle"),
        pytest.param(0.0, 4.0, False, id="off-dropped-at-the-timeout"),
        pytest.param(1.0, 4.0, False, id="answer-later-than-kept-open"),
        pytest.param(10.0, None, False, id="never-answers"),
    ],
)
def test_ours_reads_a_late_answer_as_the_scraper_does(
    late_answer_s: float, after_s: float | None, read: bool
) -> None:
    """A busy replica answering 4 s after the request (past the 2-s timeout): with
    `scrape.lateAnswerSeconds` ≥ 2 s the request stays open and the answer counts in the
    next cycle, stamped when it came, so the replica stays read and its queue counts;
    otherwise it goes stale after `staleAfterSeconds` (30 s)."""
    ours = Ours("ours", pool_config(replace(SCN, ours_late_answer_s=late_answer_s), CAL), 32)
    assert ours.cfg.scrape.lateAnswerSeconds == late_answer_s
    ours.control(_view({0: _sample(0.0), 1: _sample(0.0)}, set(), 0.0))
    idle = ours.desired
    for now in range(5, 45, 5):
        ours.control(_view({0: _sample(0.0)}, {1}, float(now), after_s))
    assert ours.decision is not None
    sd = ours.decision.services["chat"]
    if read:
        assert (sd.fresh, sd.ready) == (True, 2), sd.reason
        assert sd.desired is not None and idle is not None and sd.desired > idle
    else:
        assert (sd.fresh, sd.ready) == (False, 1), sd.reason
