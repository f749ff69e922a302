"""`python -m bench.simulate` command line: every option reaches the scenario."""

from __future__ import annotations

import dataclasses
import json
import shlex
from pathlib import Path

import pytest

from bench.simulate import main, parse_args
from scaler.sim.engine import ScrapeFaults
from scaler.sim.report import _on_sigterm
from scaler.sim.scenario import Calibration, pool_config


def test_defaults_are_the_documented_default_scenario() -> None:
    scn, a = parse_args([])
    assert (scn.trace, scn.days, scn.pool_gpus, scn.gpus_per_replica) == (
        "azure-code-week",
        1.0,
        64,
        4,
    )
    assert scn.spec.model.name == "Meta-Llama-3-70B" and scn.cold_start_s == 120.0
    assert scn.ours_thresholds == ()  # the product's defaults
    assert scn.placement == "pack"  # kube-scheduler with GPU bin packing (docs/install.md)
    assert scn.timing.research_sigterm_checkpoint_s is None
    assert scn.timing.research_sigterm_exit_s is None
    assert a.policies.split(",") == [
        "ours",
        "static-peak",
        "queue-threshold",
        "gpu-util-hpa",
        "oracle",
    ]


def test_every_option_is_applied() -> None:
    scn, a = parse_args(
        shlex.split(
            "--trace servegen-mid --days 2 --start-day 3 --pool-gpus 32 --gpus-per-replica 8 "
            "--seed 9 --slo 1.5 --reserve-gpus 8 --checkpoint-on-sigterm 60 --burst poisson "
            "--thresholds waitingPerReplica=2,tokensPerSecondPerReplica=auto "
            "--ours-hpa-tolerance 0.1 --ours-scale-down 900 "
            "--adaptive-reserve 16 --placement spread --jobs 2 --out /tmp/x"
        )
    )
    assert (scn.trace, scn.days, scn.start_day, scn.pool_gpus, scn.gpus_per_replica) == (
        "servegen-mid",
        2.0,
        3.0,
        32,
        8,
    )
    assert (scn.seed, scn.slo_ttft_s, scn.reserve_gpus, scn.burst) == (9, 1.5, 8, "poisson")
    assert scn.timing.research_sigterm_checkpoint_s == 60.0
    assert scn.ours_thresholds == (
        ("waitingPerReplica", 2.0),
        ("tokensPerSecondPerReplica", "auto"),
    )
    assert (scn.ours_hpa_tolerance, scn.ours_scale_down_s) == (0.1, 900.0)
    assert scn.adaptive_reserve_max_gpus == 16 and a.jobs == 2
    assert scn.placement == "spread"
    assert scn.scrape_faults == ScrapeFaults()  # every replica answers unless asked
    assert scn.ours_late_answer_s == 0.0
    faults = parse_args(
        shlex.split(
            "--unread-when-waiting 12 --unread-probability 0.25 --unread-answers-after 4 "
            "--ours-late-answer 10"
        )
    )[0]
    assert faults.scrape_faults == ScrapeFaults(12, probability=0.25, answer_after_s=4.0)
    assert faults.ours_late_answer_s == 10.0
    assert pool_config(faults, Calibration(1.0, 1, 0.99, 1.0, 0.0)).scrape.lateAnswerSeconds == 10


def test_exit_on_sigterm_frees_the_gpus_and_keeps_the_loss() -> None:
    scn, _ = parse_args(["--exit-on-sigterm", "5"])
    assert scn.timing.research_sigterm_exit_s == 5.0
    lc = scn.timing.lifecycle(4, 120.0)
    assert (lc.research_hold_s, lc.checkpoint_on_sigterm) == (5.0, False)
    worst = parse_args([])[0].timing.lifecycle(4, 120.0)
    assert (worst.research_hold_s, worst.checkpoint_on_sigterm) == (600.0, False)


def test_worker_slot_check_reaches_the_pods_lifecycle_and_the_report() -> None:
    scn, _ = parse_args(["--worker-slot-check", "--exit-on-sigterm", "5"])
    assert scn.timing.lifecycle(4, 120.0).worker_slot_check
    assert not parse_args([])[0].timing.lifecycle(4, 120.0).worker_slot_check
    timing = dataclasses.asdict(scn.timing)
    assert "takes nothing and exits" in _on_sigterm(timing)
    assert "takes nothing" not in _on_sigterm(dataclasses.asdict(parse_args([])[0].timing))


@pytest.mark.parametrize(
    "argv",
    [
        ["--days", "0"],
        ["--pool-gpus", "2"],
        ["--thresholds", "waiting"],
        ["--trace", "x"],
        ["--checkpoint-on-sigterm", "60", "--exit-on-sigterm", "5"],
        ["--exit-on-sigterm", "700"],
        ["--placement", "random"],
        ["--unread-probability", "0.5"],
        ["--unread-when-waiting", "0"],
        ["--unread-when-waiting", "5", "--unread-probability", "0"],
        ["--unread-when-waiting", "5", "--unread-probability", "1.5"],
        ["--unread-answers-after", "4"],
        ["--unread-when-waiting", "5", "--unread-answers-after", "0"],
    ],
    ids=[
        "days",
        "pool",
        "thresholds",
        "trace",
        "checkpoint-and-exit",
        "exit-after-grace",
        "placement",
        "unread-probability-alone",
        "unread-at-zero-waiting",
        "unread-probability-zero",
        "unread-probability-above-one",
        "answers-after-alone",
        "answers-after-zero",
    ],
)
def test_bad_arguments_are_usage_errors(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as e:
        parse_args(argv)
    assert e.value.code == 2


def test_parallel_jobs_give_the_same_results_as_one_process(tmp_path: Path) -> None:
    # `make bench-objective` runs policies in worker processes (`--jobs 2`): every policy,
    # ours with its objective, forecast, reserve and give-back state, must pickle, and a
    # worker must decide exactly as the parent would.
    argv = ["--days", "0.01", "--slo", "2.5", "--adaptive-reserve", "16"]
    argv += ["--policies", "ours,static-peak"]
    for jobs in ("1", "2"):
        assert main([*argv, "--jobs", jobs, "--out", str(tmp_path / jobs)]) == 0
    one, two = (json.loads((tmp_path / j / "results.json").read_text()) for j in ("1", "2"))
    assert one["policies"] == two["policies"]
    assert one["policies"]["ours"]["inference_gpu_hours"] > 0


@pytest.mark.parametrize(
    ("argv", "placement", "words"),
    [
        pytest.param([], "pack", "pods packed", id="default-pack"),
        pytest.param(["--placement", "spread"], "spread", "pods spread", id="spread"),
    ],
)
def test_placement_reaches_the_results_and_the_report(
    tmp_path: Path, argv: list[str], placement: str, words: str
) -> None:
    out = tmp_path / placement
    assert main(["--days", "0.01", "--policies", "static-peak", *argv, "--out", str(out)]) == 0
    assert json.loads((out / "results.json").read_text())["scenario"]["placement"] == placement
    assert f"Nodes of 8 GPUs, {words}" in (out / "report.md").read_text()
