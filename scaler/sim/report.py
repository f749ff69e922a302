"""Results of a scenario run: results.json (the issue's schema), report.md, pool.png."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from scaler.core import histogram
from scaler.sim.engine import (
    REPLICAS_LOADING,
    REPLICAS_READY,
    REPLICAS_WAITING_FOR_GPUS,
    PolicyResult,
)
from scaler.sim.replica import TTFT_BOUNDS
from scaler.sim.scenario import ScenarioRun, oracle_name, scenario_dict


def _decided_mask(r: PolicyResult, slo_s: float) -> np.ndarray:
    """The requests that had their chance: those arriving in the last `slo_s` seconds may
    not have yet."""
    return r.arrival < r.ledger.t1 - slo_s


def _decided(r: PolicyResult, slo_s: float) -> np.ndarray:
    """TTFTs of the decided requests (`_decided_mask`)."""
    return r.ttft[_decided_mask(r, slo_s)]


def attainment(r: PolicyResult, slo_s: float) -> float:
    decided = _decided(r, slo_s)
    return float(np.mean(decided <= slo_s)) if decided.size else 0.0


MISS_CAUSES = {
    REPLICAS_WAITING_FOR_GPUS: "waiting_for_gpus",
    REPLICAS_LOADING: "loading",
    REPLICAS_READY: "all_ready",
}


def misses_by_replicas(r: PolicyResult, slo_s: float) -> dict[str, float] | None:
    """Share of the decided requests that missed the objective, by what the Deployment was
    doing when they arrived (engine.REPLICAS_*): a replica waiting for GPUs (research held
    them through its grace period, or none were free), one loading, or all asked-for
    replicas serving (too few asked). They add up to 1 − attainment. None: not recorded."""
    if r.replicas_at_arrival is None:
        return None
    if r.replicas_at_arrival.shape != r.ttft.shape:
        raise ValueError(
            f"{r.name}: {r.replicas_at_arrival.size} arrival states for {r.ttft.size} requests"
        )
    keep = _decided_mask(r, slo_s)
    n = int(np.count_nonzero(keep))
    missed = r.replicas_at_arrival[keep][r.ttft[keep] > slo_s]
    return {
        name: (float(np.count_nonzero(missed == code)) / n if n else 0.0)
        for code, name in MISS_CAUSES.items()
    }


def _placement(s: dict[str, Any]) -> str:
    """Where the simulated scheduler binds pods (results from before `placement` existed
    were packed)."""
    how = {
        "pack": "packed (the fewest GPUs left over: kube-scheduler with GPU bin packing)",
        "spread": "spread (the most GPUs free: kube-scheduler's default profile)",
    }[s.get("placement", "pack")]
    return f"Nodes of {s['gpus_per_node']} GPUs, pods {how}."


def _on_sigterm(timing: dict[str, Any]) -> str:
    """What a preempted research pod does in the bench (report header sentence)."""
    ck = timing["research_sigterm_checkpoint_s"]
    ex = timing.get("research_sigterm_exit_s")  # absent in results written before it
    if ck is not None:
        s = f"Preempted research pods checkpoint on SIGTERM in {ck:g} s (GPUs held meanwhile)."
    elif ex is not None:
        s = (
            f"Preempted research pods exit on SIGTERM after {ex:g} s (no handler) and lose "
            "the work since their last checkpoint."
        )
    else:
        s = (
            "Preempted research pods lose the work since their last checkpoint and hold "
            f"their GPUs {timing['research_grace_s']:g} s."
        )
    if timing["research_worker_slot_check"]:
        s += (
            " Research runs under the queue worker: a pod that starts with no free slot for "
            "its class takes nothing and exits."
        )
    return s


def oracle_frontier(run: ScenarioRun) -> tuple[np.ndarray, np.ndarray]:
    """(attainment, harvested GPU-h) of the oracle at each headroom, by attainment, the
    harvest made non-increasing in attainment (the upper envelope: a point with more
    attainment and more harvest dominates)."""
    slo = run.scenario.slo_ttft_s
    pts = sorted(
        (attainment(run.results[n], slo), run.results[n].ledger.useful_gpu_s / 3600.0)
        for n in (oracle_name(h) for h in run.scenario.oracle_headrooms)
        if n in run.results
    )
    att = np.asarray([a for a, _ in pts])
    env = np.maximum.accumulate(np.asarray([h for _, h in pts])[::-1])[::-1]
    return att, env


def oracle_at(frontier: tuple[np.ndarray, np.ndarray], a: float) -> float:
    """The oracle's harvest at attainment `a`, linear between the swept headrooms. Beyond
    the frontier's ends it is clamped: above the best oracle attainment this overstates the
    oracle (it would need more GPUs for more attainment), which only makes the share
    harder to reach; below the lowest (headroom 1) it understates the oracle (a headroom
    below 1 would harvest more), so a share read there is an upper bound."""
    att, env = frontier
    if att.size == 0:
        return 0.0
    return float(np.interp(a, att, env))


def share_bound(frontier: tuple[np.ndarray, np.ndarray], a: float) -> str | None:
    """Whether a share read off the frontier at attainment `a` is a bound, not a number:
    "lower" above the best oracle attainment (the clamped oracle harvest is too high),
    "upper" below the lowest (too low), None inside it or without an oracle. Two shares
    quoted as numbers were such bounds (coding `--seed 2`, ServeGen `--seed 3`, docs/bench.md)."""
    att, _ = frontier
    if att.size == 0 or att[0] <= a <= att[-1]:
        return None
    return "lower" if a > att[-1] else "upper"


def histogram_attainment(r: PolicyResult, slo_s: float) -> float:
    """The attainment the scaler reads off vLLM's TTFT histogram (interpolated when `slo_s`
    is not a bucket bound): how far its measurement is from the truth above."""
    decided = _decided(r, slo_s)
    if not decided.size:
        return 0.0
    s = np.sort(decided)
    b = tuple((le, float(np.searchsorted(s, le, side="right"))) for le in TTFT_BOUNDS)
    return histogram.within(b, slo_s) / decided.size


_BOUND_MARK = {None: "", "lower": "≥ ", "upper": "≤ "}


def policy_metrics(
    r: PolicyResult, slo_s: float, oracle_harvest: float, frontier: tuple[np.ndarray, np.ndarray]
) -> dict[str, Any]:
    ttft = r.ttft
    h = r.ledger.useful_gpu_s / 3600.0
    att = attainment(r, slo_s)
    at_equal = oracle_at(frontier, att)
    return {
        "slo_attainment": att,
        "slo_attainment_as_histogram_reads_it": histogram_attainment(r, slo_s),
        "ttft_p50_s": _pct(ttft, 50),
        "ttft_p99_s": _pct(ttft, 99),
        "queue_p99_s": _pct(r.queue, 99),
        "inference_gpu_hours": r.inference_gpu_s / 3600.0,
        "harvested_gpu_hours": h,
        "oracle_share": h / oracle_harvest if oracle_harvest > 0 else 0.0,
        # The oracle's harvest at this policy's attainment (its headroom frontier).
        "oracle_harvest_at_equal_attainment_gpu_hours": at_equal,
        "share_of_oracle_at_equal_attainment": h / at_equal if at_equal > 0 else 0.0,
        # "lower" / "upper": this policy's attainment lies outside the oracle's sweep and
        # the share is a bound (`share_bound`); None: a number.
        "share_of_oracle_at_equal_attainment_bound": share_bound(frontier, att),
        "lost_gpu_hours": r.ledger.lost_gpu_s / 3600.0,
        # GPU-hours no pod held; of them, while a created research pod waited for a node
        # with room (placement: the free GPUs were in pieces too small for it).
        "idle_gpu_hours": r.idle_gpu_s / 3600.0,
        "idle_while_research_pending_gpu_hours": r.idle_research_pending_gpu_s / 3600.0,
        # Requests that missed, by what the replicas were doing when they arrived.
        "misses_by_replicas_at_arrival": misses_by_replicas(r, slo_s),
        "preemptions": int(r.ledger.preemptions),
        # Research pods whose queue worker found no free slot and took nothing
        # (`--worker-slot-check`; always 0 without it).
        "declined_starts": int(r.ledger.declined),
        # ours: the research give-back planned at the end (core.giveback), "" for others
        "give_back_planned": r.give_back,
        "replica_changes": int(r.replica_changes),
        "target_set_by": decided_shares(r),
        # Measured replica scrapes the replica did not answer in time (ScrapeFaults).
        "unread_scrape_share": r.unread_scrapes / r.scrapes if r.scrapes else 0.0,
    }


def decided_shares(r: PolicyResult) -> dict[str, float]:
    """Share of the measured time each signal (or stabilization, min/max) set the target."""
    total = sum(r.decided_by.values())
    return {k: v / total for k, v in sorted(r.decided_by.items(), key=lambda kv: -kv[1])}


def _pct(x: np.ndarray, q: float) -> float:
    return float(np.percentile(x, q)) if x.size else 0.0


def results_json(run: ScenarioRun) -> dict[str, Any]:
    slo = run.scenario.slo_ttft_s
    oracle = run.results.get("oracle")
    oh = oracle.ledger.useful_gpu_s / 3600.0 if oracle else 0.0
    frontier = oracle_frontier(run)
    return {
        "scenario": scenario_dict(run),
        "policies": {n: policy_metrics(r, slo, oh, frontier) for n, r in run.results.items()},
    }


def markdown(run: ScenarioRun, data: dict[str, Any], command: str, machine: str) -> str:
    s = data["scenario"]
    slo = run.scenario.slo_ttft_s
    lines = [
        f"# Bench: {s['trace']}, {s['days']:g} day(s), {s['pool_gpus']} GPUs",
        "",
        f"Command: `{command}`  ",
        f"Machine: {machine}",
        "",
        f"Replica: {s['replica']['model']} on {s['replica']['tp']} × {s['replica']['gpu']} "
        f"(TP{s['replica']['tp']}), max_num_seqs {s['replica']['max_num_seqs']}, "
        f"KV {s['replica']['kv_capacity_tokens']:,} tokens, cold start {s['cold_start_s']:g} s. "
        f"Capacity at the SLO (≥ {s['attainment']:.0%} of requests with TTFT ≤ {slo:g} s, "
        f"this trace's bursts): {s['capacity_per_replica_rps']:.3f} req/s per replica; "
        f"trace peak scaled to {s['peak_rps']:.2f} req/s "
        f"(= {s['peak_fraction']:.0%} of the pool); {s['requests']:,} requests "
        f"(incl. {s['warmup_s']:g} s warm-up, not measured). Reserve {s['reserve_gpus']} GPUs; "
        f"static peak = {s['static_peak_replicas']} replicas. " + _placement(s),
        "",
        "Ours: thresholds "
        + ", ".join(
            f"{k}={v:g}" for k, v in s["ours_thresholds"].items() if isinstance(v, float) and v
        )
        + f"; scaleDown.stabilizationSeconds {s['ours_scale_down_s']:g}"
        + (f" (smoothingSeconds {s['ours_smoothing_s']:g})" if "ours_smoothing_s" in s else "")
        + "; HPA tolerance "
        f"{s['ours_hpa_tolerance']:g} (chart), no HPA scale-down window; the server's cycle step "
        "(tokens/s between consecutive scrapes); adaptive reserve "
        + (f"≤ {s['adaptive_reserve_max_gpus']} GPUs" if s["adaptive_reserve_max_gpus"] else "off")
        + ". Baselines: Kubernetes HPA defaults (tolerance 0.1, scale-down window 300 s). "
        + _on_sigterm(s["timing"]),
        "",
        "Ours' objective: "
        + (
            f"`slo: {{ttftSeconds: {slo:g}, attainment: {s['attainment']:g}}}`"
            if s["ours_slo"]
            else "none (reactive signals only)"
        )
        + "; forecast "
        + ("on" if s["ours_forecast"] else "off")
        + (f"; days shuffled ({s['trace_name']})" if s["shuffle_days"] else "")
        + f". Scored from {s['score_from_s'] / 86400:g} day(s) in (earlier: history, not "
        "measured). Oracle headrooms (demand × h): "
        + ", ".join(f"{h:g}" for h in s["oracle_headrooms"])
        + '; "at equal attainment" reads the oracle\'s harvest off that frontier at the '
        "policy's own attainment (≥ / ≤: the attainment lies above / below the swept ones, "
        "the oracle's harvest there is clamped to the nearest end and the share is a bound; "
        "`--oracle-headrooms` extends the sweep).",
        "",
        "| policy | requests served | TTFT p50 (s) | TTFT p99 (s) | within SLO "
        f"({slo:g} s) | as vLLM's histogram reads it | queue p99 (s) | inference GPU-h "
        "| research harvested GPU-h "
        "| share of oracle | share of oracle at equal attainment "
        "| research lost GPU-h (% of harvested) | preemptions | replica changes "
        "| idle GPU-h (of it, research pods waiting for a node) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in run.results.items():
        m = data["policies"][name]
        h = m["harvested_gpu_hours"]
        lost_pct = f"{m['lost_gpu_hours'] / h:.1%}" if h > 0 else "–"
        lines.append(
            f"| {name} | {r.served:,} | {m['ttft_p50_s']:.2f} | {m['ttft_p99_s']:.2f} "
            f"| {m['slo_attainment']:.2%} | {m['slo_attainment_as_histogram_reads_it']:.2%} "
            f"| {m['queue_p99_s']:.2f} "
            f"| {m['inference_gpu_hours']:.1f} | {h:.1f} | {m['oracle_share']:.1%} "
            f"| {_BOUND_MARK[m['share_of_oracle_at_equal_attainment_bound']]}"
            f"{m['share_of_oracle_at_equal_attainment']:.1%} "
            f"| {m['lost_gpu_hours']:.1f} ({lost_pct}) | {m['preemptions']} "
            f"| {m['replica_changes']} "
            f"| {m['idle_gpu_hours']:.1f} ({m['idle_while_research_pending_gpu_hours']:.1f}) |"
        )
    for name in run.results:
        shares = data["policies"][name]["target_set_by"]
        if shares:
            lines += [
                "",
                f"{name}'s target set by (share of measured time): "
                + ", ".join(f"{k} {v:.0%}" for k, v in shares.items())
                + ".",
            ]
    causes = {n: m["misses_by_replicas_at_arrival"] for n, m in data["policies"].items()}
    if any(causes.values()):
        lines += [
            "",
            "Requests that missed the objective, by what the replicas were doing when they "
            "arrived (% of requests: one waiting for GPUs / one loading / all asked-for "
            "serving): "
            + "; ".join(
                f"{n} {c['waiting_for_gpus']:.2%} / {c['loading']:.2%} / {c['all_ready']:.2%}"
                for n, c in causes.items()
                if c
            )
            + ".",
        ]
    faults = s.get("scrape_faults") or {}
    if faults.get("waiting_at_least") is not None:
        after = faults.get("answer_after_s")
        lines += [
            "",
            f"Replicas with at least {faults['waiting_at_least']} requests waiting did not "
            f"answer /metrics in time with probability {faults['probability']:g} per scrape, "
            + ("never answering" if after is None else f"answering {after:g} s late")
            + " (ours and the queue baseline's Prometheus miss them; ours keeps a request "
            f"open {s.get('ours_late_answer_s', 0.0):g} s past its timeout, "
            "`scrape.lateAnswerSeconds`); share of replica scrapes unread: "
            + ", ".join(
                f"{n} {data['policies'][n]['unread_scrape_share']:.2%}"
                for n, r in run.results.items()
                if r.scrapes  # the policies that read /metrics
            )
            + ".",
        ]
    planned = {n: m["give_back_planned"] for n, m in data["policies"].items()}
    if any(planned.values()):
        lines += [
            "",
            "Research give-back planned at the end: "
            + "; ".join(f"{n} {v}" for n, v in planned.items() if v)
            + ".",
        ]
    declined = {n: m["declined_starts"] for n, m in data["policies"].items()}
    if any(declined.values()):
        lines += [
            "",
            "Research pods that started with no free slot for their class and took nothing "
            "(queue worker): " + ", ".join(f"{n} {k}" for n, k in declined.items()) + ".",
        ]
    lines += [
        "",
        "Harvested = useful research work (checkpointed or completed, plus progress of Jobs "
        "still running at the end); lost = work since the last checkpoint of preempted pods. "
        "Simulation wall time per policy: "
        + ", ".join(f"{n} {r.wall_s:.0f} s" for n, r in run.results.items())
        + ".",
        "",
        "![pool split](pool.png)",
        "",
    ]
    return "\n".join(lines)


def plot(run: ScenarioRun, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(run.results)
    fig, axes = plt.subplots(len(names), 1, figsize=(12, 2.4 * len(names)), sharex=True)
    axes = np.atleast_1d(axes)
    cap = run.scenario.pool_gpus
    for ax, name in zip(axes, names, strict=True):
        s = run.results[name].series
        t = np.asarray(s.t) / 3600.0
        inf = np.asarray(s.inference)
        res = np.asarray(s.research)
        free = np.maximum(cap - inf - res, 0)
        reserve = np.minimum(np.asarray(s.reserve), free)
        idle = free - reserve
        ax.stackplot(
            t,
            inf,
            res,
            reserve,
            idle,
            labels=["inference", "research", "reserve (free)", "idle"],
            colors=["#1f77b4", "#2ca02c", "#ff7f0e", "#d9d9d9"],
            step="post",
        )
        ax.set_ylim(0, cap)
        ax.set_ylabel("GPUs")
        ax.set_title(name, loc="left", fontsize=10)
        ax2 = ax.twinx()
        ax2.plot(t, s.arrivals_per_s, color="black", linewidth=0.7, label="requests/s")
        ax2.set_ylabel("req/s")
        ax2.set_ylim(bottom=0)
    axes[0].legend(loc="upper left", fontsize=8, ncol=4)
    axes[-1].set_xlabel("hours")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def write(run: ScenarioRun, out: Path, command: str, machine: str) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    data = results_json(run)
    text = json.dumps(data, indent=2, default=_json_default, allow_nan=False)
    (out / "results.json").write_text(text + "\n")
    (out / "report.md").write_text(markdown(run, data, command, machine))
    plot(run, out / "pool.png")
    return data


def _json_default(o: object) -> object:
    if isinstance(o, np.generic):
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o)}")
