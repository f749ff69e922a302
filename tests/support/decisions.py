"""Hand-made Decision snapshots for tests of the readers (gRPC, HTTP, metrics)."""

from __future__ import annotations

from scaler.config import Config, parse_config
from scaler.core.decision import Decision, PoolSplit, ResearchDecision, ServiceDecision

CONFIG: Config = parse_config(
    {
        "pool": {"name": "shared-h100", "capacity": {"gpus": 64}, "reserveGPUs": 4},
        "inference": [
            {"name": "chat", "gpusPerReplica": 4, "targets": {"static": ["127.0.0.1:1"]}},
            {"name": "code", "gpusPerReplica": 4, "targets": {"static": ["127.0.0.1:2"]}},
        ],
        "research": [{"name": "eval", "gpusPerJob": 1}, {"name": "train", "gpusPerJob": 8}],
    }
)


def svc(name: str, desired: int | None, *, fresh: bool = True, ready: int = 2) -> ServiceDecision:
    return ServiceDecision(
        name=name,
        namespace="serving",
        desired=desired,
        current=ready,
        ready=ready,
        starting=0,
        reason="test",
        fresh=fresh,
        gpus_per_replica=4,
    )


def decision(seq: int, chat: ServiceDecision | None, eval_slots: int = 5) -> Decision:
    services = {"chat": chat} if chat is not None else {}
    services["code"] = svc("code", 1)
    return Decision(
        seq=seq,
        wall_time=1000.0 + seq,
        config=CONFIG,
        config_generation=1,
        services=services,
        research={
            "eval": ResearchDecision("eval", eval_slots, 1, "test"),
            "train": ResearchDecision("train", 0, 8, "test"),
        },
        pool=PoolSplit(64, 12, 4, 0, 48, eval_slots, None),
    )
