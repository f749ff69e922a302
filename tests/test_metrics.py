"""Decision gauges are read from the latest snapshot at scrape time (DecisionCollector)."""

from __future__ import annotations

from dataclasses import replace

from prometheus_client import CollectorRegistry, generate_latest

from scaler.core.decision import SignalVerdict, SloStatus
from scaler.core.giveback import Planned
from scaler.serve.metrics import ScalerMetrics
from scaler.serve.snapshot import Snapshots
from tests.support.decisions import decision, svc


def families(metrics: ScalerMetrics) -> dict[str, dict[tuple[str, ...], float]]:
    out: dict[str, dict[tuple[str, ...], float]] = {}
    for fam in metrics.registry.collect():
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(s.labels.values())] = s.value
    return out


def test_gauges_follow_the_latest_snapshot_and_drop_what_it_lacks() -> None:
    snapshots = Snapshots()
    m = ScalerMetrics(CollectorRegistry(), snapshots.latest)
    before = families(m)  # nothing decided yet: no value, and no cycle time (not 1970)
    assert "gpu_pool_scaler_desired_replicas" not in before
    assert "gpu_pool_scaler_last_cycle_timestamp_seconds" not in before
    queue = SignalVerdict("queue", 12.0, 5.0, 3)
    kv = SignalVerdict("kv-cache", 0.0, 0.8, 1, abstain=True)
    chat = replace(svc("chat", 3), signals=(queue, kv))
    snapshots.publish(decision(1, chat, eval_slots=5))
    f = families(m)
    assert f["gpu_pool_scaler_desired_replicas"] == {("chat",): 3, ("code",): 1}
    assert f["gpu_pool_scaler_research_slots"] == {("eval",): 5, ("train",): 0}
    assert f["gpu_pool_scaler_signal_value"] == {("chat", "queue"): 12.0}  # abstained: absent
    assert f["gpu_pool_scaler_pool_gpus"][("research",)] == 5
    assert f["gpu_pool_scaler_capacity_known"] == {(): 1}
    assert f["gpu_pool_scaler_last_cycle_timestamp_seconds"] == {(): 1001.0}
    assert f["gpu_pool_scaler_queue_unread"] == {("chat",): 0, ("code",): 0}
    unread = replace(chat, queue_note="20 request(s) wait (10 per ready replica) ...")
    snapshots.publish(decision(1, unread, eval_slots=5))
    assert families(m)["gpu_pool_scaler_queue_unread"] == {("chat",): 1, ("code",): 0}
    assert "gpu_pool_scaler_research_give_back_seconds" not in f  # the snapshot plans none

    # A cycle that planned the give-back it measured (core.giveback), then the grace alone.
    planned = Planned(64.0, 64.0, "measured 64 s (longest of the last 20)")
    snapshots.publish(replace(decision(2, chat, eval_slots=5), give_back=planned))
    give_back = families(m)["gpu_pool_scaler_research_give_back_seconds"]
    assert give_back == {("planned",): 64.0, ("measured",): 64.0}
    grace = Planned(600.0, None, "configured 600 s (2 of 5 research deletions measured)")
    snapshots.publish(replace(decision(3, chat, eval_slots=5), give_back=grace))
    give_back = families(m)["gpu_pool_scaler_research_give_back_seconds"]
    assert give_back == {("planned",): 600.0}  # nothing measured: no made-up value

    # Pods watched (subtractForeignPods): the free GPUs per node, and the replicas of each
    # service (4 GPUs) they hold: 8 free but split 3 + 3 + 2 hold none.
    d = decision(4, chat, eval_slots=5)
    assert d.pool is not None and "gpu_pool_scaler_replica_room" not in families(m)
    snapshots.publish(replace(d, pool=replace(d.pool, free_by_node=(3, 3, 2))))
    f = families(m)
    assert f["gpu_pool_scaler_pool_gpus"][("free",)] == 8
    assert f["gpu_pool_scaler_replica_room"] == {("chat",): 0, ("code",): 0}
    snapshots.publish(replace(d, pool=replace(d.pool, free_by_node=(8, 4))))
    assert families(m)["gpu_pool_scaler_replica_room"] == {("chat",): 3, ("code",): 3}

    # Next cycle: chat has no fresh data (desired None) and `code` was removed by a reload.
    d = decision(2, svc("chat", None, fresh=False))
    services = {k: v for k, v in d.services.items() if k != "code"}
    snapshots.publish(replace(d, services=services))
    f = families(m)
    assert "gpu_pool_scaler_desired_replicas" not in f  # never a made-up value
    assert f["gpu_pool_scaler_service_data_fresh"] == {("chat",): 0}
    assert ("code",) not in f["gpu_pool_scaler_current_replicas"]


def test_slo_gauges_show_what_was_measured_and_leave_out_what_was_not() -> None:
    snapshots = Snapshots()
    m = ScalerMetrics(CollectorRegistry(), snapshots.latest)
    status = SloStatus(
        ttft_s=2.0,
        objective=0.99,
        window_s=300.0,
        attainment=0.975,
        requests=1200.0,
        capacity_rps=2.25,
        requests_per_s=4.0,
        itl_s=0.1,
        itl_attainment=0.995,
    )
    slo = SignalVerdict("slo", 0.975, 0.99, 3)
    snapshots.publish(decision(1, replace(svc("chat", 3), slo=status, signals=(slo,))))
    f = families(m)
    assert f["gpu_pool_scaler_signal_value"] == {("chat", "slo"): 0.975}
    assert f["gpu_pool_scaler_slo_objective"] == {("chat",): 0.99}  # `code` states none
    assert f["gpu_pool_scaler_slo_ttft_seconds"] == {("chat",): 2.0}
    assert f["gpu_pool_scaler_slo_attainment"] == {("chat",): 0.975}
    assert f["gpu_pool_scaler_slo_itl_attainment"] == {("chat",): 0.995}
    assert f["gpu_pool_scaler_slo_capacity_requests_per_second"] == {("chat",): 2.25}
    # Too few requests to measure, nothing learned, no inter-token objective: left out,
    # never a 0 an alert would read as a miss.
    unmeasured = replace(
        status, attainment=None, capacity_rps=None, itl_s=None, itl_attainment=None
    )
    placeholder = SignalVerdict("slo", 1.0, 0.99, 0)  # (core.slo.verdict while unmeasured)
    chat = replace(svc("chat", 3), slo=unmeasured, signals=(placeholder,))
    snapshots.publish(decision(2, chat))
    f = families(m)
    assert f["gpu_pool_scaler_slo_objective"] == {("chat",): 0.99}
    assert "gpu_pool_scaler_signal_value" not in f  # not a 1.0 that reads as "met"
    assert f["gpu_pool_scaler_signal_replicas"] == {("chat", "slo"): 0}
    for name in ("attainment", "itl_attainment", "capacity_requests_per_second"):
        assert f"gpu_pool_scaler_slo_{name}" not in f, name
    # A cycle without fresh data (the policy holds, no slo status): all of it absent.
    snapshots.publish(decision(3, svc("chat", None, fresh=False)))
    assert "gpu_pool_scaler_slo_objective" not in families(m)


def test_exposition_keeps_the_metric_names() -> None:
    snapshots = Snapshots()
    m = ScalerMetrics(CollectorRegistry(), snapshots.latest)
    snapshots.publish(decision(1, svc("chat", 3)))
    body = generate_latest(m.registry).decode()
    assert 'gpu_pool_scaler_desired_replicas{service="chat"} 3.0' in body
    assert "# TYPE gpu_pool_scaler_desired_replicas gauge" in body
