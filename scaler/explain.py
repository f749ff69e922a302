"""Human-readable rendering of a Decision (for `gpu-pool-scaler explain`). Pure."""

from __future__ import annotations

from scaler.config import Config
from scaler.core.decision import Decision, PoolSplit, replica_room
from scaler.core.policy import format_decision


def render(d: Decision) -> str:
    cfg = d.config
    pool_name = cfg.pool.name if cfg is not None else "?"
    lines = [f"pool {pool_name}: decision #{d.seq} (config generation {d.config_generation})"]
    for s in d.services.values():
        lines += ["", format_decision(s)]
    if d.pool is not None:
        p = d.pool
        cap = "unknown" if p.capacity is None else str(p.capacity)
        lines += [
            "",
            f"pool split (GPUs): capacity {cap} = inference {p.inference_gpus} + reserve "
            f"{p.reserve_gpus} + foreign {p.foreign_gpus} + headroom {p.headroom_gpus}",
            f"  research uses {p.research_gpus} of the headroom",
        ]
        if p.reserve_held_gpus:
            lines.append(
                f"  the reserve keeps {p.reserve_held_gpus} GPU(s) its window no longer asks "
                f"while the smooth rate of {', '.join(p.reserve_held_for)} rises (a ramp under "
                "way needs them)"
            )
        if p.fail_closed:
            lines.append(f"  research fails closed: {p.fail_closed}")
        if p.forecast_withheld_gpus:
            lines.append(
                f"  forecast withholds {p.forecast_withheld_gpus} GPU(s) of the headroom from "
                "research (inference needs them back within the classes' checkpoint intervals)"
            )
        if p.free_by_node is not None and cfg is not None:
            lines += _free_lines(p, cfg)
        gb = d.give_back
        if gb is not None and cfg is not None and _plans_give_back(cfg):
            lines.append(
                f"  research give-back planned: {gb.note} (forecast lead = cold start + "
                "this; the adaptive reserve's lead shortened by what it saves on the grace)"
            )
    for r in d.research.values():
        lines.append(f"research {r.name}: {r.slots} slot(s) × {r.gpus_per_job} GPU(s) — {r.reason}")
        if r.queue_error is not None:
            if r.queue_error not in r.reason:  # else the reason already says it (accounting)
                lines.append(f"  work queue unread: {r.queue_error} (0 slots until it is read)")
        elif r.queued_items is not None:
            lines.append(
                f"  work queue: {r.queued_items} item(s) waiting or leased; no more Jobs than "
                "that (an empty queue starts none)"
            )
            if r.queue_warning is not None:
                lines.append(f"  work queue credentials: {r.queue_warning}")
    return "\n".join(lines)


def _free_lines(p: PoolSplit, cfg: Config) -> list[str]:
    """Where the free GPUs are, and how many replicas of each service they hold: free GPUs
    split across nodes fit no replica (the scheduler spreads pods)."""
    free = p.free_by_node or ()
    total = sum(free)
    shown = ", ".join(str(f) for f in free[:8]) + (", …" if len(free) > 8 else "")
    lines = [f"  free on the nodes: {total} GPU(s) ({shown} per node, largest first)"]
    for svc in cfg.inference:
        g = svc.gpusPerReplica
        room = replica_room(free, g)
        line = f"  room for {room} more replica(s) of {svc.name} ({g} GPUs on one node)"
        if room < total // g:
            line += (
                f": fragmented, {total} free GPUs would hold {total // g}; kube-scheduler "
                'spreads pods unless it packs GPUs (docs/install.md "Pack GPUs"; the '
                "chart's binpackScheduler)"
            )
        lines.append(line)
    return lines


def _plans_give_back(cfg: Config) -> bool:
    """The give-back matters only where something looks ahead by it."""
    return cfg.pool.forecast.enabled or cfg.pool.adaptiveReserve.enabled
