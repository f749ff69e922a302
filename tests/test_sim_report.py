"""Report files: results.json in the issue's schema, report.md table, pool.png."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from scaler.sim.engine import (
    REPLICAS_LOADING,
    REPLICAS_READY,
    REPLICAS_WAITING_FOR_GPUS,
    PolicyResult,
    ScrapeFaults,
    simulate_policy,
)
from scaler.sim.policies import Oracle
from scaler.sim.report import (
    misses_by_replicas,
    oracle_at,
    policy_metrics,
    share_bound,
    write,
)
from scaler.sim.scenario import Calibration, Scenario, ScenarioRun, make_policies, pool_config
from scaler.sim.workload import RateCurve, make_workload

SCN = Scenario(pool_gpus=16, gpus_per_replica=4, reserve_gpus=4, warmup_s=300)
CAL = Calibration(per_replica_rps=1.0, replicas=3, attainment=0.99, mean_tokens=1366, seconds=0)
FLAT = RateCurve("flat", np.array([0.0, 7200.0]), np.array([1.0, 2.0]), None, None, 600.0, "conv")


def run(name: str, scn: Scenario = SCN) -> PolicyResult:
    w = make_workload(
        FLAT,
        start_s=0.0,
        duration_s=1800.0,
        peak_rps=2.0,
        rng=np.random.default_rng(3),
        lead_in_s=300.0,
    )
    pols, _ = make_policies(scn, pool_config(scn, CAL), CAL, w, -300.0, 1800.0)
    return simulate_policy(
        pols[name],
        w,
        spec=scn.spec,
        pool_gpus=16,
        gpus_per_node=8,
        classes=list(SCN.classes),
        t_start=-300.0,
        t_end=1800.0,
        initial_replicas=2,
        seed=1,
        scrape_faults=scn.scrape_faults,
    )


KEYS = {
    "slo_attainment",
    "ttft_p50_s",
    "ttft_p99_s",
    "queue_p99_s",
    "inference_gpu_hours",
    "harvested_gpu_hours",
    "slo_attainment_as_histogram_reads_it",
    "oracle_share",
    "oracle_harvest_at_equal_attainment_gpu_hours",
    "share_of_oracle_at_equal_attainment",
    "share_of_oracle_at_equal_attainment_bound",
    "lost_gpu_hours",
    "idle_gpu_hours",
    "idle_while_research_pending_gpu_hours",
    "misses_by_replicas_at_arrival",
    "preemptions",
    "declined_starts",
    "give_back_planned",
    "replica_changes",
    "target_set_by",
    "unread_scrape_share",
}


def test_replicas_too_busy_to_answer_are_reported(tmp_path: Path) -> None:
    scn = replace(SCN, scrape_faults=ScrapeFaults(1, 0.5, 4.0), ours_late_answer_s=10.0)
    sr = ScenarioRun(scn, CAL, 4.0, 12345, {"ours": run("ours", scn)}, 4, pool_config(scn, CAL))
    data = write(sr, tmp_path, "python -m bench.simulate --x", "test machine")
    share = data["policies"]["ours"]["unread_scrape_share"]
    assert 0.0 < share < 1.0
    assert data["scenario"]["scrape_faults"] == {
        "waiting_at_least": 1,
        "probability": 0.5,
        "answer_after_s": 4.0,
    }
    md = (tmp_path / "report.md").read_text()
    assert (
        "Replicas with at least 1 requests waiting did not answer /metrics in time with "
        "probability 0.5 per scrape, answering 4 s late" in md
    )
    assert "ours keeps a request open 10 s past its timeout" in md
    assert f"share of replica scrapes unread: ours {share:.2%}." in md


def test_write_produces_the_three_files_in_schema(tmp_path: Path) -> None:
    results = {n: run(n) for n in ("ours", "oracle")}
    sr = ScenarioRun(SCN, CAL, 4.0, 12345, results, 4, pool_config(SCN, CAL))
    data = write(sr, tmp_path, "python -m bench.simulate --x", "test machine")
    on_disk = json.loads((tmp_path / "results.json").read_text())
    assert on_disk == data
    assert set(on_disk) == {"scenario", "policies"}
    assert set(on_disk["policies"]) == {"ours", "oracle"}
    for m in on_disk["policies"].values():
        assert set(m) == KEYS
        assert isinstance(m["preemptions"], int) and isinstance(m["replica_changes"], int)
        assert m["declined_starts"] == 0  # the worker's slot check is off by default
        assert 0.0 <= m["slo_attainment"] <= 1.0
    assert on_disk["policies"]["oracle"]["oracle_share"] == 1.0
    md = (tmp_path / "report.md").read_text()
    assert "`python -m bench.simulate --x`" in md and "test machine" in md
    assert md.count("\n| ours |") == 1 and md.count("\n| oracle |") == 1
    assert "took nothing" not in md  # no declines: no line
    assert m["unread_scrape_share"] == 0.0 and "did not answer /metrics" not in md  # no faults
    # Ours plans a research give-back (the configured grace until deletions are measured).
    assert on_disk["policies"]["oracle"]["give_back_planned"] == ""
    planned = on_disk["policies"]["ours"]["give_back_planned"]
    assert planned.startswith("configured ") or planned.startswith("measured "), planned
    assert f"Research give-back planned at the end: ours {planned}." in md
    # Which signal set ours' target, as shares of the measured time; none for the oracle.
    shares = on_disk["policies"]["ours"]["target_set_by"]
    assert shares and sum(shares.values()) == pytest.approx(1.0)
    signals = {"queue", "kv-cache", "concurrency", "throughput", "slo", "forecast"}
    held = {f"{by} ({sig})" for by in ("min", "max", "stabilization") for sig in signals}
    assert set(shares) <= signals | held, shares
    assert on_disk["policies"]["oracle"]["target_set_by"] == {}
    assert "ours's target set by (share of measured time): " in md
    # The misses by what the replicas were doing add up to the misses.
    for name, m in on_disk["policies"].items():
        causes = m["misses_by_replicas_at_arrival"]
        assert set(causes) == {"waiting_for_gpus", "loading", "all_ready"}
        assert sum(causes.values()) == pytest.approx(1.0 - m["slo_attainment"]), name
    assert "Requests that missed the objective, by what the replicas were doing" in md
    png = (tmp_path / "pool.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_worker_declines_are_counted_and_named_in_the_report(tmp_path: Path) -> None:
    results = {n: run(n) for n in ("ours", "oracle")}
    results["ours"].ledger.declined = 7
    sr = ScenarioRun(SCN, CAL, 4.0, 12345, results, 4, pool_config(SCN, CAL))
    data = write(sr, tmp_path, "python -m bench.simulate --x", "test machine")
    assert data["policies"]["ours"]["declined_starts"] == 7
    assert data["policies"]["oracle"]["declined_starts"] == 0
    md = (tmp_path / "report.md").read_text()
    assert "took nothing (queue worker): ours 7, oracle 0." in md


def test_unserved_requests_count_as_misses_with_a_lower_bound() -> None:
    res = run("static-peak")
    res.ttft = np.array([0.5, 3.0, 100.0, 1.0])  # 100: no first token, end − arrival
    res.arrival = np.array([0.0, 10.0, 1700.0, 1799.5])  # the last arrived < SLO before end
    res.replicas_at_arrival = np.zeros(4, dtype=np.int8)
    m = policy_metrics(res, 2.0, 1.0, (np.array([0.9]), np.array([1.0])))
    assert m["slo_attainment"] == 1 / 3  # the last one is not decided yet
    assert m["ttft_p99_s"] > 90.0


W, L, R = REPLICAS_WAITING_FOR_GPUS, REPLICAS_LOADING, REPLICAS_READY
# (ttft s, state at arrival) per request, SLO 2 s -> share of the decided requests that
# missed, by state. The run ends at 1800 s; arrivals are 0, 10, 20, ...
MISS_CASES = [
    ("every-miss-waited-for-gpus", [(3.0, W), (5.0, W), (0.5, R), (0.5, R)], (0.5, 0.0, 0.0)),
    ("met-requests-count-nowhere", [(0.5, W), (1.0, L), (2.0, R), (0.1, R)], (0.0, 0.0, 0.0)),
    ("one-of-each", [(9.0, W), (3.0, L), (2.5, R), (0.1, R)], (0.25, 0.25, 0.25)),
    ("too-few-asked", [(3.0, R), (0.5, W), (0.5, L), (0.5, R)], (0.0, 0.0, 0.25)),
]


@pytest.mark.parametrize(
    ("ttft_state", "want"), [c[1:] for c in MISS_CASES], ids=[c[0] for c in MISS_CASES]
)
def test_misses_are_split_by_what_the_replicas_were_doing(
    ttft_state: list[tuple[float, int]], want: tuple[float, float, float]
) -> None:
    res = run("static-peak")
    res.ttft = np.array([t for t, _ in ttft_state])
    res.arrival = np.arange(len(ttft_state), dtype=np.float64) * 10.0
    res.replicas_at_arrival = np.array([s for _, s in ttft_state], dtype=np.int8)
    got = misses_by_replicas(res, 2.0)
    assert got == pytest.approx(
        dict(zip(("waiting_for_gpus", "loading", "all_ready"), want, strict=True))
    )


def test_misses_by_replicas_refuses_states_that_do_not_match_the_requests() -> None:
    res = run("static-peak")
    res.replicas_at_arrival = np.zeros(res.ttft.size + 1, dtype=np.int8)
    with pytest.raises(ValueError, match="arrival states for"):
        misses_by_replicas(res, 2.0)
    res.replicas_at_arrival = None
    assert misses_by_replicas(res, 2.0) is None


# The oracle swept over headrooms: (attainment, harvest) points -> its harvest at a given
# attainment. Points are (attainment, GPU-h).
FRONTIER_CASES = [
    ("between-two-headrooms-linear", [(0.95, 100.0), (0.99, 80.0)], 0.97, 90.0),
    ("above-the-best-attainment-clamps-high", [(0.95, 100.0), (0.99, 80.0)], 0.995, 80.0),
    ("below-the-worst-attainment-clamps", [(0.95, 100.0), (0.99, 80.0)], 0.90, 100.0),
    # A point with more attainment AND more harvest dominates the one before it.
    ("dominated-point-lifted", [(0.95, 70.0), (0.97, 90.0), (0.99, 80.0)], 0.95, 90.0),
    ("no-oracle-run", [], 0.97, 0.0),
]


@pytest.mark.parametrize(
    ("points", "at", "want"),
    [pytest.param(p, a, w, id=i) for i, p, a, w in FRONTIER_CASES],
)
def test_oracle_harvest_at_equal_attainment(
    points: list[tuple[float, float]], at: float, want: float
) -> None:
    att = np.asarray([a for a, _ in points])
    h = np.asarray([x for _, x in points])
    env = np.maximum.accumulate(h[::-1])[::-1] if h.size else h
    assert oracle_at((att, env), at) == pytest.approx(want)


# (oracle attainments swept, a policy's attainment) -> whether its share is a bound.
BOUND_CASES = [
    ("inside-the-sweep", [0.95, 0.99], 0.97, None),
    ("at-either-end-is-inside", [0.95, 0.99], 0.99, None),
    ("above-the-best-oracle-a-lower-bound", [0.95, 0.99], 0.995, "lower"),
    ("below-the-worst-oracle-an-upper-bound", [0.95, 0.99], 0.90, "upper"),
    ("no-oracle-run", [], 0.97, None),
]


@pytest.mark.parametrize(
    ("swept", "at", "want"),
    [pytest.param(sw, a, w, id=i) for i, sw, a, w in BOUND_CASES],
)
def test_a_share_outside_the_oracle_sweep_is_marked_a_bound(
    swept: list[float], at: float, want: str | None
) -> None:
    att = np.asarray(swept)
    assert share_bound((att, np.linspace(100.0, 80.0, att.size)), at) == want


def test_oracle_frontier_from_a_run_is_non_increasing() -> None:
    from scaler.sim.report import oracle_frontier

    scn = Scenario(
        pool_gpus=16, gpus_per_replica=4, reserve_gpus=4, warmup_s=300, oracle_headrooms=(1.0, 2.0)
    )
    w = make_workload(
        FLAT, start_s=0.0, duration_s=1800.0, peak_rps=2.0, rng=np.random.default_rng(3),
        lead_in_s=300.0,
    )  # fmt: skip
    pols, _ = make_policies(scn, pool_config(scn, CAL), CAL, w, -300.0, 1800.0)
    assert set(pols) >= {"oracle", "oracle×2"}
    lo, hi = pols["oracle"], pols["oracle×2"]
    assert isinstance(lo, Oracle) and isinstance(hi, Oracle)
    assert hi.target(900.0) >= 2 * lo.target(900.0) - 1  # twice the demand, rounded up
    results = {n: run(n, scn) for n in ("oracle", "oracle×2")}
    att, env = oracle_frontier(ScenarioRun(scn, CAL, 4.0, 1, results, 4, pool_config(scn, CAL)))
    assert att.size == 2 and np.all(np.diff(att) >= 0) and np.all(np.diff(env) <= 0)


@pytest.mark.parametrize(
    ("ttft", "slo", "want"),
    [
        # 2 s inside (1, 2.5]: 2 of 4 are within 2 s, the histogram has 1 at <= 1 s and 3
        # in (1, 2.5] -> 1 + 3 x 2/3 = 3 of 4: it overstates here (it can understate too).
        pytest.param([0.5, 1.1, 2.2, 2.4], 2.0, 3 / 4, id="interpolated"),
        pytest.param([0.5, 1.2, 1.9, 3.0], 2.5, 3 / 4, id="on-a-bound-exact"),
    ],
)
def test_attainment_as_vllms_histogram_reads_it(ttft: list[float], slo: float, want: float) -> None:
    from scaler.sim.report import histogram_attainment

    res = run("static-peak")
    res.ttft = np.asarray(ttft)
    res.arrival = np.zeros(len(ttft))
    assert histogram_attainment(res, slo) == pytest.approx(want)


def test_the_report_marks_a_share_outside_the_oracle_sweep(tmp_path: Path) -> None:
    """A policy below every oracle attainment gets its share as an upper bound ("≤ "); the
    oracle itself, on its own frontier, as a number."""
    results = {n: run(n) for n in ("ours", "oracle")}
    results["ours"].ttft = np.full_like(results["ours"].ttft, 60.0)  # every request missed
    sr = ScenarioRun(SCN, CAL, 4.0, 12345, results, 4, pool_config(SCN, CAL))
    data = write(sr, tmp_path, "python -m bench.simulate --x", "test machine")
    ours, oracle = data["policies"]["ours"], data["policies"]["oracle"]
    assert ours["share_of_oracle_at_equal_attainment_bound"] == "upper"
    assert oracle["share_of_oracle_at_equal_attainment_bound"] is None
    rows = {ln.split(" | ")[0]: ln for ln in (tmp_path / "report.md").read_text().splitlines()}
    share = ours["share_of_oracle_at_equal_attainment"]
    assert f"| ≤ {share:.1%} |" in rows["| ours"]
    assert f"| {oracle['share_of_oracle_at_equal_attainment']:.1%} |" in rows["| oracle"]
    assert "≤" not in rows["| oracle"] and "≥" not in rows["| oracle"]
