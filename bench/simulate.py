"""Replay a diurnal trace through a simulated GPU pool under each scaling policy.

    python -m bench.simulate [--trace NAME] [--days N] [--pool-gpus N]
                             [--gpus-per-replica N] [--seed N] [--out DIR]

Writes DIR/report.md, DIR/results.json and DIR/pool.png (see docs/bench.md).
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import sys
import time
from pathlib import Path

from scaler.config import ConfigError
from scaler.sim.engine import PoolTiming, ScrapeFaults
from scaler.sim.kube import PLACEMENTS
from scaler.sim.policies import POLICY_NAMES
from scaler.sim.report import write
from scaler.sim.scenario import Scenario, run_scenario
from scaler.sim.workload import TRACES


class Bar:
    """A one-line progress bar on stderr (one bar per policy)."""

    def __init__(self, width: int = 30) -> None:
        self.width = width
        self.tty = sys.stderr.isatty()
        self._last: dict[str, int] = {}
        self.t0 = time.monotonic()

    def __call__(self, name: str, frac: float) -> None:
        pct = int(frac * 100)
        if self._last.get(name) == pct or (not self.tty and pct % 25 and pct != 100):
            return
        self._last[name] = pct
        filled = int(frac * self.width)
        line = (
            f"{name:>16} [{'#' * filled}{'.' * (self.width - filled)}] {pct:3d}% "
            f"{time.monotonic() - self.t0:5.0f} s"
        )
        if self.tty:
            sys.stderr.write("\r" + line + ("\n" if pct == 100 else ""))
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()


def machine() -> str:
    u = platform.uname()
    return (
        f"`{u.system} {u.node} {u.release} {u.version} {u.machine}`, "
        f"nproc {os.cpu_count()}, Python {platform.python_version()}"
    )


def _threshold(kv: str) -> tuple[str, float | str]:
    key, sep, val = kv.partition("=")
    if not sep:
        raise ValueError(f"{kv!r} is not key=value")
    return key.strip(), "auto" if val.strip() == "auto" else float(val)


def parse_args(argv: list[str] | None) -> tuple[Scenario, argparse.Namespace]:
    """The scenario the command line asks for (exits with a usage error on bad input)."""
    p = argparse.ArgumentParser(prog="python -m bench.simulate", description=__doc__.split("\n")[1])
    p.add_argument("--trace", default="azure-code-week", choices=sorted(TRACES))
    p.add_argument("--days", type=float, default=1.0)
    p.add_argument("--start-day", type=float, default=0.0, help="offset into the trace (days)")
    p.add_argument("--pool-gpus", type=int, default=64)
    p.add_argument("--gpus-per-replica", type=int, default=4, choices=(1, 2, 4, 8))
    p.add_argument("--model", default="llama3-70b")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--slo", type=float, default=2.0, help="TTFT SLO (s)")
    p.add_argument("--reserve-gpus", type=int, default=4)
    p.add_argument(
        "--placement",
        choices=PLACEMENTS,
        default="pack",
        help="where the scheduler binds pods: pack = the fewest GPUs left over "
        "(kube-scheduler with a MostAllocated profile on nvidia.com/gpu, docs/install.md); "
        "spread = the most GPUs free (kube-scheduler's default LeastAllocated)",
    )
    sigterm = p.add_mutually_exclusive_group()
    sigterm.add_argument(
        "--checkpoint-on-sigterm",
        type=float,
        default=None,
        metavar="SECONDS",
        help="preempted research pods write a checkpoint on SIGTERM taking SECONDS (the "
        "chart's contract); default: they lose the work since their last checkpoint",
    )
    sigterm.add_argument(
        "--exit-on-sigterm",
        type=float,
        default=None,
        metavar="SECONDS",
        help="preempted research pods exit on SIGTERM after SECONDS, losing the work since "
        "their last checkpoint (a command without a SIGTERM handler); default: they hold "
        "their GPUs for the whole grace period",
    )
    p.add_argument(
        "--research-grace",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="a preempted research pod holds its GPUs this long (the chart's research Job "
        "terminationGracePeriodSeconds, default 600)",
    )
    p.add_argument(
        "--worker-slot-check",
        action="store_true",
        help="research runs under the chart's queue worker: a pod that starts when its "
        "class's running Jobs fill the scaler's slots takes nothing and exits (default: a "
        "bound research pod always runs)",
    )
    p.add_argument(
        "--unread-when-waiting",
        type=int,
        default=None,
        metavar="N",
        help="a ready replica with at least N requests waiting does not answer /metrics in "
        "time (ours and the queue baseline's Prometheus miss it; default: every replica "
        "answers)",
    )
    p.add_argument(
        "--unread-probability",
        type=float,
        default=1.0,
        metavar="P",
        help="with --unread-when-waiting: the chance, per scrape, that such a replica does "
        "not answer (default 1)",
    )
    p.add_argument(
        "--unread-answers-after",
        type=float,
        default=None,
        metavar="SECONDS",
        help="with --unread-when-waiting: such a replica answers this long after the "
        "request (default: never)",
    )
    p.add_argument(
        "--ours-late-answer",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="ours' scrape.lateAnswerSeconds (default 0: a request is dropped at the 2-s timeout)",
    )
    p.add_argument("--no-slo", action="store_true", help="ours without an `slo:` objective")
    p.add_argument("--no-forecast", action="store_true", help="ours without pool.forecast")
    p.add_argument(
        "--shuffle-days",
        action="store_true",
        help="the trace's days in a seeded random order (control: no daily pattern)",
    )
    p.add_argument(
        "--score-from-day",
        type=float,
        default=None,
        help="measure from this day on (default: 1 for runs longer than a day, else 0)",
    )
    p.add_argument(
        "--oracle-headrooms",
        default="1,1.15,1.3,1.5",
        help="the oracle is run at each headroom (replicas = demand x h / capacity)",
    )
    p.add_argument(
        "--burst",
        choices=("empirical", "poisson"),
        default="empirical",
        help="gaps inside a minute: resampled from the real trace, or Poisson",
    )
    p.add_argument(
        "--thresholds",
        default="",
        help="ours' thresholds as config keys, e.g. waitingPerReplica=5,kvCacheUsage=0.8,"
        "tokensPerSecondPerReplica=auto (auto: sized from the calibrated capacity); "
        "default: none given, i.e. the product's defaults",
    )
    p.add_argument("--ours-hpa-tolerance", type=float, default=0.0)
    p.add_argument(
        "--ours-scale-down",
        type=float,
        default=None,
        metavar="SECONDS",
        help="ours' scaleDown.stabilizationSeconds (default: the product's default)",
    )
    p.add_argument(
        "--adaptive-reserve",
        type=int,
        default=0,
        metavar="MAX_GPUS",
        help="enable pool.adaptiveReserve with this maxGPUs (ours only; default off)",
    )
    p.add_argument("--policies", default=",".join(POLICY_NAMES))
    p.add_argument("--jobs", type=int, default=1, help="policies simulated in parallel")
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args(argv)
    if a.days <= 0 or a.pool_gpus < a.gpus_per_replica:
        p.error("--days must be > 0 and --pool-gpus >= --gpus-per-replica")
    try:
        th = tuple(_threshold(kv) for kv in a.thresholds.split(",") if kv)
    except ValueError as e:
        p.error(f"--thresholds: {e}")
    try:
        headrooms = tuple(float(x) for x in a.oracle_headrooms.split(",") if x)
    except ValueError as e:
        p.error(f"--oracle-headrooms: {e}")
    if not headrooms or min(headrooms) <= 0:
        p.error("--oracle-headrooms: at least one headroom, each > 0")
    if a.score_from_day is not None and not 0 <= a.score_from_day < a.days:
        p.error("--score-from-day must be in [0, --days)")
    try:
        timing = PoolTiming(
            research_grace_s=a.research_grace,
            research_sigterm_checkpoint_s=a.checkpoint_on_sigterm,
            research_sigterm_exit_s=a.exit_on_sigterm,
            research_worker_slot_check=a.worker_slot_check,
        )
    except ValueError as e:
        p.error(f"--research-grace / SIGTERM: {e}")
    if a.unread_when_waiting is None and (
        a.unread_probability != 1.0 or a.unread_answers_after is not None
    ):
        p.error("--unread-probability and --unread-answers-after need --unread-when-waiting")
    try:
        faults = ScrapeFaults(a.unread_when_waiting, a.unread_probability, a.unread_answers_after)
    except ValueError as e:
        p.error(f"--unread-when-waiting / --unread-probability / --unread-answers-after: {e}")
    scn = Scenario(
        scrape_faults=faults,
        timing=timing,
        ours_thresholds=th,
        ours_hpa_tolerance=a.ours_hpa_tolerance,
        adaptive_reserve_max_gpus=a.adaptive_reserve,
        ours_scale_down_s=a.ours_scale_down,
        ours_late_answer_s=a.ours_late_answer,
        trace=a.trace,
        days=a.days,
        start_day=a.start_day,
        pool_gpus=a.pool_gpus,
        gpus_per_replica=a.gpus_per_replica,
        model=a.model,
        seed=a.seed,
        slo_ttft_s=a.slo,
        reserve_gpus=a.reserve_gpus,
        placement=a.placement,
        burst=a.burst,
        ours_slo=not a.no_slo,
        ours_forecast=not a.no_forecast,
        shuffle_days=a.shuffle_days,
        score_from_day=a.score_from_day,
        oracle_headrooms=headrooms,
    )
    return scn, a


def main(argv: list[str] | None = None) -> int:
    scn, a = parse_args(argv)
    out = a.out or Path("bench/results") / f"{a.trace}-{a.days:g}d-{a.pool_gpus}gpu"
    command = "python -m bench.simulate " + shlex.join(argv if argv is not None else sys.argv[1:])
    t0 = time.monotonic()
    policies = tuple(x for x in a.policies.split(",") if x)
    try:
        run = run_scenario(scn, policies, progress=Bar(), jobs=a.jobs)
    except (ValueError, RuntimeError, ConfigError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    data = write(run, out, command.strip(), machine())
    print((out / "report.md").read_text())
    print(f"wrote {out}/report.md, results.json, pool.png in {time.monotonic() - t0:.0f} s")
    del data
    return 0


if __name__ == "__main__":
    sys.exit(main())
