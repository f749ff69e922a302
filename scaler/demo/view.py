"""What a person sees: the live terminal view, plain log lines, the summary table and the
pool-split plot. Reads a `Frame` (plain data); never touches the simulation."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from scaler.demo.queue import QueueCounts
from scaler.demo.world import QueueSample, Sample


@dataclass(frozen=True, slots=True)
class ClassRow:
    name: str
    gpus_per_job: int
    slots: int | None  # latest answer through gRPC
    running: int
    pending: int
    terminating: int


@dataclass(frozen=True, slots=True)
class Frame:
    clock: str  # time of day, HH:MM
    day_fraction: float
    rps: float
    waiting: float
    service: str
    ready: int
    starting: int
    pending: int
    draining: int
    desired: int | None
    scaler_error: str | None
    classes: tuple[ClassRow, ...]
    capacity: int
    reserve: int
    inference_gpus: int
    research_gpus: int
    terminating_gpus: int
    preemptions: int
    research_gpu_hours: float
    slo: float | None
    slo_ttft_s: float
    grpc_calls: int
    real_s: float
    stretched_s: float  # real seconds the day was stretched because the CPU was busy
    queue: tuple[QueueCounts, ...] = ()  # the simulated work queue, per class (empty: off)


def pool_bar(f: Frame, width: int = 60) -> Text:
    """One character per GPU group: inference, research, preempted (grace), free."""
    scale = width / max(f.capacity, 1)
    parts = [
        (f.inference_gpus, "█", "bold blue"),
        (f.research_gpus, "█", "green"),
        (f.terminating_gpus, "▒", "yellow"),
    ]
    text = Text()
    used = 0
    for gpus, ch, style in parts:
        n = round(gpus * scale)
        n = min(n, width - used)
        text.append(ch * n, style=style)
        used += n
    text.append("·" * (width - used), style="dim")
    return text


def render(f: Frame) -> Panel:
    head = Text.assemble(
        (f.clock, "bold"),
        ("  requests ", "dim"),
        (f"{f.rps:5.1f}/s", "bold"),
        ("  queued ", "dim"),
        (f"{f.waiting:4.0f}", ""),
        (f"  SLO TTFT≤{f.slo_ttft_s:g}s ", "dim"),
        ("–" if f.slo is None else f"{100 * f.slo:5.1f} %", "bold"),
    )
    inf = Table(box=None, pad_edge=False, show_edge=False, expand=False)
    for col in ("inference", "ready", "starting", "pending", "draining", "desired (gRPC)"):
        inf.add_column(col, justify="right" if col != "inference" else "left")
    inf.add_row(
        f.service,
        str(f.ready),
        str(f.starting),
        str(f.pending),
        str(f.draining),
        ("–" if f.desired is None else str(f.desired)) + (" ⚠" if f.scaler_error else ""),
    )
    res = Table(box=None, pad_edge=False, show_edge=False, expand=False)
    for col in ("research Jobs", "GPUs/Job", "slots (gRPC)", "running", "pending", "preempted"):
        res.add_column(col, justify="right" if col != "research Jobs" else "left")
    for c in f.classes:
        res.add_row(
            c.name,
            str(c.gpus_per_job),
            "–" if c.slots is None else str(c.slots),
            str(c.running),
            str(c.pending),
            str(c.terminating),
        )
    parts: list[Table | Text] = [head, Text(), inf, Text(), res, Text()]
    if f.queue:
        parts += [queue_table(f.queue), Text()]
    free = f.capacity - f.inference_gpus - f.research_gpus - f.terminating_gpus
    legend = Text.assemble(
        ("█ inference ", "bold blue"),
        (f"{f.inference_gpus}", "bold"),
        ("  █ research ", "green"),
        (f"{f.research_gpus}", "bold"),
        ("  ▒ in grace ", "yellow"),
        (f"{f.terminating_gpus}", "bold"),
        ("  · free ", "dim"),
        (f"{free}", "bold"),
        (f"  reserve {f.reserve}", "dim"),
    )
    foot = Text.assemble(
        ("research GPU-h ", "dim"),
        (f"{f.research_gpu_hours:6.1f}", "bold green"),
        ("  preemptions ", "dim"),
        (f"{f.preemptions}", "bold yellow"),
        ("  gRPC calls ", "dim"),
        (f"{f.grpc_calls}", "bold"),
        ("  real ", "dim"),
        (f"{f.real_s:4.0f} s", ""),
    )
    if f.stretched_s >= 1:
        foot.append(f"\nCPU busy: the day stretched by {f.stretched_s:.0f} s", style="yellow")
    if f.scaler_error:
        foot.append(f"\nscaler: {f.scaler_error}", style="red")
    body = Group(*parts, pool_bar(f), legend, Text(), foot)
    return Panel(
        body,
        title=f"gpu-pool-scaler demo — {f.capacity} GPUs — time of day {f.clock}",
        subtitle=f"{100 * f.day_fraction:3.0f} % of the day — Ctrl-C stops, summary still written",
        width=78,
    )


QUEUE_COLUMNS = (
    "work queue (simulated)",
    "queued",
    "requeued",
    "running",
    "done",
    "seeded",
    "preempted",
)


def queue_table(rows: tuple[QueueCounts, ...]) -> Table:
    """Per class: items waiting (never started / again after preemption), taken, done, of
    how many seeded, and preempted-and-requeued transitions so far."""
    t = Table(box=None, pad_edge=False, show_edge=False, expand=False)
    for col in QUEUE_COLUMNS:
        t.add_column(col, justify="right" if col != QUEUE_COLUMNS[0] else "left")
    for q in rows:
        t.add_row(
            q.name,
            str(q.queued),
            str(q.requeued),
            str(q.running),
            str(q.done),
            str(q.submitted),
            str(q.requeue_events),
        )
    return t


def plain_line(f: Frame) -> str:
    classes = " ".join(
        f"{c.name}={c.running}r/{c.pending}p(slots {'-' if c.slots is None else c.slots})"
        for c in f.classes
    )
    slo = "-" if f.slo is None else f"{100 * f.slo:.1f}%"
    queue = ""
    if f.queue:
        queue = " | queue (simulated) " + " ".join(
            f"{q.name}={q.queued}q/{q.requeued}rq/{q.running}r/{q.done}d" for q in f.queue
        )
    return (
        f"{f.clock} rps={f.rps:.1f} {f.service}: ready={f.ready} starting={f.starting} "
        f"pending={f.pending} desired={'-' if f.desired is None else f.desired} | research "
        f"{classes} | GPUs inference={f.inference_gpus} research={f.research_gpus} "
        f"preempted={f.terminating_gpus} | preemptions={f.preemptions} slo={slo} "
        f"grpc={f.grpc_calls}{queue}"
    )


def summary_table(summary: dict[str, object]) -> Table:
    t = Table(title="gpu-pool-scaler demo: summary", show_header=False)
    t.add_column("what")
    t.add_column("value", justify="right")
    queue = summary.get("research_queue")
    # With the queue a Job is a worker: it takes item after item and leaves when a take
    # gets nothing (no item waits, or the items running fill its class's slots). Its count
    # is not the items done: one worker may do many, and with the queue empty KEDA still
    # starts the free slots' worth of Jobs, which do none (docs/demo.md). The label fits
    # the first column of an 80-column terminal.
    jobs = "research Jobs (workers) completed" if queue else "research Jobs completed"
    for key, label in (
        ("sim_hours", "simulated hours"),
        ("requests", "requests"),
        ("slo_attainment", "SLO attainment (TTFT)"),
        ("min_inference_replicas", "inference replicas, min"),
        ("max_inference_replicas", "inference replicas, max"),
        ("research_gpu_hours", "research GPU-hours harvested"),
        ("research_gpu_hours_lost", "research GPU-hours lost to preemption"),
        ("research_jobs_completed", jobs),
        ("preemptions", "preemptions"),
        ("grpc_calls", "gRPC calls (driver)"),
        ("scaler_grpc_requests", "gRPC requests (scaler's /metrics)"),
        ("real_seconds", "real seconds"),
    ):
        v = summary.get(key)
        if isinstance(v, float):
            s = f"{100 * v:.1f} %" if key == "slo_attainment" else f"{v:,.1f}"
        else:
            s = "–" if v is None else f"{v:,}" if isinstance(v, int) else str(v)
        t.add_row(label, s)
    if isinstance(queue, dict) and isinstance(queue.get("classes"), dict):
        t.add_row("work queue (simulated)", "done/seeded wait run requeued")
        for name, c in queue["classes"].items():
            done = f"{c['done']}/{c['submitted']}"
            t.add_row(
                f"  {name}",
                f"{done:>11} {c['queued'] + c['requeued']:>4} {c['running']:>3} "
                f"{c['preempted_requeued']:>8}",
            )
    return t


def plot_pool(
    records: Sequence[Sample],
    capacity: int,
    reserve: int,
    start_hour: float,
    path: Path,
    title: str,
    queue_records: Sequence[QueueSample] = (),
) -> None:
    """Stacked pool split over the day, request rate on a second axis; with the simulated
    work queue, a second panel: items waiting per class (share of the class's seed)."""
    import logging

    import matplotlib

    logging.getLogger("matplotlib").setLevel(logging.WARNING)  # font cache notices
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hours = [start_hour + r.t / 3600.0 for r in records]
    inf = [r.inference_gpus for r in records]
    res = [r.research_gpus for r in records]
    term = [r.research_terminating_gpus for r in records]
    if queue_records:
        fig, (ax, axq) = plt.subplots(
            2,
            1,
            figsize=(10, 7.0),
            dpi=110,
            sharex=True,
            gridspec_kw={"height_ratios": [3, 1.3]},
        )
    else:
        fig, ax = plt.subplots(figsize=(10, 4.8), dpi=110)
    if records:
        ax.stackplot(
            hours,
            inf,
            res,
            term,
            labels=["inference (vLLM replicas)", "research Jobs", "research, preempted (grace)"],
            colors=["#2f5fb3", "#3aa655", "#e8b83a"],
            step="post",
        )
    ax.axhline(capacity, color="black", lw=1)
    ax.axhline(capacity - reserve, color="grey", lw=0.8, ls="--", label="capacity − reserve")
    if not queue_records:
        ax.set_xlabel("hour of day (trace time)")
    ax.set_ylabel("GPUs")
    ax.set_ylim(0, capacity * 1.05)
    if hours:
        ax.set_xlim(hours[0] - (records[0].t / 3600.0 if records else 0), hours[-1])
    ax2 = ax.twinx()
    ax2.plot(hours, [r.rps for r in records], color="#c0392b", lw=1.2, label="requests/s")
    ax2.set_ylabel("requests/s", color="#c0392b")
    ax2.set_ylim(bottom=0)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    below = -0.05 if queue_records else -0.13  # no tick labels above the queue panel
    ax.legend(h1 + h2, l1 + l2, loc="upper center", bbox_to_anchor=(0.5, below), ncol=5, fontsize=8)
    ax.set_title(title, fontsize=10)
    if queue_records:
        by_class: dict[str, list[QueueSample]] = {}
        for q in queue_records:
            by_class.setdefault(q.research_class, []).append(q)
        marked = False
        for name, qs in by_class.items():
            xs = [start_hour + q.t / 3600.0 for q in qs]
            ys = [100.0 * (q.queued + q.requeued) / max(q.submitted, 1) for q in qs]
            (line,) = axq.plot(
                xs, ys, drawstyle="steps-post", lw=1.3, label=f"{name} ({qs[0].submitted} items)"
            )
            # ▲ where items came back after a preemption (the refill).
            back = [i for i in range(1, len(qs)) if qs[i].requeue_events > qs[i - 1].requeue_events]
            if back:
                axq.scatter(
                    [xs[i] for i in back],
                    [ys[i] for i in back],
                    marker="^",
                    s=36,
                    color=line.get_color(),
                    edgecolors="black",
                    linewidths=0.5,
                    zorder=3,
                    label=None if marked else "requeued after preemption",
                )
                marked = True
        axq.set_ylabel("items waiting\n(% of seeded)")
        axq.set_ylim(0, 135)  # the legend sits above 100 %
        axq.set_yticks([0, 25, 50, 75, 100])
        axq.set_xlabel("hour of day (trace time)")
        axq.set_title(
            "research work queue (simulated): queued + requeued after preemption", fontsize=9
        )
        axq.legend(loc="upper center", ncol=4, fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
