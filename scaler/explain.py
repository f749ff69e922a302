"""Human-readable rendering of a Decision (for `gpu-pool-scaler explain`). Pure."""

from __future__ import annotations

from scaler.decision import Decision


def render(d: Decision) -> str:
    lines: list[str] = []
    cfg = d.config
    pool_name = cfg.pool.name if cfg is not None else "?"
    lines.append(f"pool {pool_name}: decision #{d.seq} (config generation {d.config_generation})")
    lines.append("")
    for s in d.services.values():
        desired = "UNAVAILABLE" if s.desired is None else str(s.desired)
        state = "fresh" if s.fresh else "NOT FRESH"
        lines.append(
            f"service {s.name} (ns {s.namespace}): replicas now {s.current} "
            f"(ready {s.ready}, starting {s.starting}) -> desired {desired} [{state}]"
        )
        lines.append(f"  reason: {s.reason}")
        for v in s.signals:
            verdict = "asks for" if v.replicas else "abstains,"
            lines.append(
                f"  - {v.signal:<12} value {v.value:>10.3f}  target {v.target:>8.3f}  "
                f"{verdict} {v.replicas} replica(s)"
            )
    if d.pool is not None:
        p = d.pool
        cap = "unknown" if p.capacity is None else str(p.capacity)
        lines.append("")
        lines.append(
            f"pool split (GPUs): capacity {cap} = inference {p.inference_gpus} + reserve "
            f"{p.reserve_gpus} + foreign {p.foreign_gpus} + headroom {p.headroom_gpus}"
        )
        lines.append(f"  research uses {p.research_gpus} of the headroom")
        if p.fail_closed:
            lines.append(f"  research fails closed: {p.fail_closed}")
    for r in d.research.values():
        lines.append(f"research {r.name}: {r.slots} slot(s) × {r.gpus_per_job} GPU(s) — {r.reason}")
    return "\n".join(lines)
