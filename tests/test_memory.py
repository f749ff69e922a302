"""The control loop's memory survives a restart (scaler/core/memory.py, ingest/state_store.py):
a dumped and restored state decides exactly like the uninterrupted one; a document that
cannot be trusted is ignored with a reason; the stores write atomically."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from scaler.config import Config, parse_config
from scaler.core import memory
from scaler.core.accounting import Capacity
from scaler.core.cycle import CycleInput, CycleState, step
from scaler.core.decision import Decision
from scaler.core.load import EngineSample, TargetPhase, TargetState
from scaler.core.slo import MAX_BIN
from scaler.ingest.state_store import KEY, ConfigMapStateStore, FileStateStore
from tests.support.kubeapi import FakeKubeAPI

EPOCH = 1_715_299_200.0


def config(
    pool: str = "sim",
    slot: float = 600,
    min_swing: float = 0.1,
    zone: str = "UTC",
    calendar: dict[str, Any] | None = None,
) -> Config:
    forecast = {
        "enabled": True,
        "minHistoryDays": 0.25,
        "slotSeconds": slot,
        "minRateSwing": min_swing,
        "timeZone": zone,
    }
    return parse_config(
        {
            "pool": {"name": pool, "capacity": {"gpus": 64}, "forecast": forecast},
            "inference": [
                {
                    "name": "chat",
                    "gpusPerReplica": 4,
                    "targets": {"static": ["h:1"]},
                    "scaleDown": {"stabilizationSeconds": 600},
                    "slo": {"attainment": 0.95, "windowSeconds": 120},
                    "calendar": calendar,
                }
            ],
            "research": [{"name": "eval", "gpusPerJob": 1, "checkpointIntervalSeconds": 600}],
        }
    )


def targets(i: int, mono0: float) -> list[TargetState]:
    """A daily ramp on 4 replicas (one cycle a minute); TTFT misses the objective at its top
    (deltas per cycle, as the tracker hands them over)."""
    rps = 2 + 6 * math.sin(math.pi * (i % 720) / 720) ** 2
    slow = 0.2 if rps > 6 else 0.0
    n = rps * 60 / 4  # per replica and cycle
    ttft = ((1.0, n * (1 - slow)), (5.0, n), (math.inf, n))
    waiting = max(0.0, (rps - 4) * 8)
    s = EngineSample(waiting, rps * 3, 0.3, 0.3, 1e3 * i, 1e3 * i, 0.0, 1.0)
    at = mono0 + 60.0 * i
    return [
        TargetState(f"r{k}", TargetPhase.SERVING, s, at, ttft_delta=ttft, delta_s=60.0)
        for k in range(4)
    ]


def run(
    cfg: Config, i0: int, i1: int, state: CycleState, mono0: float
) -> tuple[list[Decision], CycleState]:
    out = []
    for i in range(i0, i1):
        tt = targets(i, mono0)
        inp = CycleInput(cfg, {"chat": tt}, Capacity(64), mono0 + 60.0 * i, calendar=EPOCH + 60 * i)
        d, state = step(inp, state)
        out.append(d)
    return out, state


@pytest.mark.parametrize(
    "min_swing",
    [
        pytest.param(0.0, id="the-forecast-raises"),
        # The ramp is smooth: the forecast stands aside because of the persisted rate swing
        # (without it, the restarted process would let the forecast raise for an hour).
        pytest.param(0.1, id="the-forecast-stands-aside-for-a-smooth-rate"),
    ],
)
def test_restored_memory_decides_like_the_uninterrupted_one(min_swing: float) -> None:
    """Two days, one cycle a minute; a restart at 30 h with another monotonic clock."""
    cfg = config(min_swing=min_swing)
    whole, _ = run(cfg, 0, 2880, CycleState(), 0.0)
    _, st = run(cfg, 0, 1800, CycleState(), 0.0)
    text = memory.dump(st, cfg, mono_now=60.0 * 1799, wall_now=EPOCH + 60.0 * 1799)
    mono0 = 5_000_000.0  # the new process: its monotonic clock has another origin
    restored, why = memory.restore(
        text, cfg, mono_now=mono0 + 60.0 * 1799, wall_now=EPOCH + 60.0 * 1799
    )
    assert restored is not None, why
    assert "policy memory of 1 service(s), forecast history of 1 service(s)" in why
    # The tracker is rebuilt by the new process too: deltas resume from its next scrape.
    after, _ = run(cfg, 1800, 2880, restored, mono0)
    for a, b in zip(whole[1800:], after, strict=True):
        sa, sb = a.services["chat"], b.services["chat"]
        assert (sa.desired, sa.decided_by, sa.reason) == (sb.desired, sb.decided_by, sb.reason)
        assert sa.slo == sb.slo and a.research == b.research
    # The parts that make the restart matter were in use.
    if min_swing:
        got, want = restored.policy["chat"].rate_swing, st.policy["chat"].rate_swing
        assert got is not None and want is not None
        assert got.typical == pytest.approx(want.typical)
        assert got.at - got.since == pytest.approx(want.at - want.since)
        assert any("the request rate is smooth" in d.services["chat"].forecast_note for d in after)
    else:
        assert any(d.services["chat"].decided_by == "forecast" for d in after)
    assert any(d.services["chat"].decided_by == "stabilization" for d in after)
    assert restored.policy["chat"].learned.capacity_rps is not None
    # Where the capacity was read comes back with it (explain shows it).
    source = restored.policy["chat"].learned.source
    assert source is not None and source == st.policy["chat"].learned.source
    assert not restored.had_complete_cycle  # research still waits for fresh data


def saved(**patch: Any) -> str:
    cfg = config()
    _, st = run(cfg, 0, 30, CycleState(), 0.0)
    doc = json.loads(memory.dump(st, cfg, 60.0 * 29, EPOCH + 60.0 * 29))
    for path, value in patch.items():
        cur = doc
        keys = path.split("__")
        for k in keys[:-1]:
            cur = cur[int(k)] if k.isdigit() else cur[k]
        cur[keys[-1]] = value
    return json.dumps(doc)


NOW_WALL = EPOCH + 60.0 * 30  # restore's wall clock in these tables; saved 60 s before
IGNORED = {
    "not-json": ("{oops", "not JSON"),
    "foreign-kind": (saved(kind="something/else"), "kind 'something/else'"),
    "newer-version": (saved(version=2), "version 2, this scaler reads 1"),
    "other-pool": (saved(pool="other"), "written for pool 'other'"),
    "from-the-future": (saved(savedAt=EPOCH + 86400), "in the future"),
    "desired-negative": (saved(services__chat__policy__desired=-3), "desired is not a count"),
    "window-garbage": (saved(services__chat__policy__window=[["x", 1]]), "not a number"),
    # (a null time was an AssertionError that escaped restore and stopped the scaler)
    "window-time-null": (
        saved(services__chat__policy__window=[[None, 1]]),
        "chat.window[0] has no time",
    ),
    "slo-window-rate-garbage": (
        saved(services__chat__policy__sloWindow=[[EPOCH, 1.0, 2.0, "x", 1, 0.0, 0.0]]),
        "chat.sloWindow[0] rps is not a number",
    ),
    "raised-in-the-future": (
        saved(services__chat__policy__raisedAt=EPOCH + 86400),
        "chat.raisedAt is in the future",
    ),
    "window-row-shape": (
        saved(services__chat__policy__window=[[1.0]]),
        "window[0] is not [time, replicas]",
    ),
    "slo-window-row-short": (
        saved(services__chat__policy__sloWindow=[[1.0, 2.0]]),
        "sloWindow[0] is not [time, good, total, rps, ready, itl good, itl total]",
    ),
    "nan-batch": (
        saved(services__chat__policy__batchPerReplica="NaN"),
        "batchPerReplica is not a number",
    ),
    "forecast-row-short": (
        saved(services__chat__forecast__days={str(int(EPOCH // 86400)): [1, 2]}),
        "slots, not 144",
    ),
    "forecast-zone-not-a-string": (
        saved(services__chat__forecast__timeZone=1),
        "chat.forecast.timeZone is not a string",
    ),
    "top-level-list": ("[1, 2]", "document is not an object"),
    "load-bin-out-of-range": (
        saved(services__chat__policy__learned__bins=[[999, 1.0, 1.0]]),
        "bins[0] is out of range",
    ),
    "load-bin-more-within-than-requests": (
        saved(services__chat__policy__learned__bins=[[10, 5.0, 1.0]]),
        "bins[0] is out of range",
    ),
    "capacity-source-not-a-string": (
        saved(services__chat__policy__learned__source=12),
        "learned.source is not a printable string",
    ),
    # explain prints it to a terminal: no escape sequences from a document.
    "capacity-source-with-an-escape": (
        saved(services__chat__policy__learned__source="\x1b[2Jload bin"),
        "learned.source is not a printable string",
    ),
    "capacity-source-too-long": (
        saved(services__chat__policy__learned__source="x" * 501),
        "learned.source is not a printable string of at most 500",
    ),
    # one past each edge that AT_THE_EDGE below reads
    "load-bin-past-the-highest": (
        saved(services__chat__policy__learned__bins=[[MAX_BIN + 1, 1.0, 1.0]]),
        "bins[0] is out of range",
    ),
    "rate-swing-weight-above-1": (
        saved(services__chat__policy__rateSwing=[NOW_WALL - 60, NOW_WALL - 60, 0.0, 1.01]),
        "rateSwing is out of range",
    ),
    "rate-swing-ends-before-it-begins": (
        saved(services__chat__policy__rateSwing=[NOW_WALL - 60, NOW_WALL - 61, 0.0, 1.0]),
        "rateSwing is out of range",
    ),
    "raised-more-than-a-second-ahead": (
        saved(services__chat__policy__raisedAt=NOW_WALL + 1.01),
        "chat.raisedAt is in the future",
    ),
    "saved-past-the-clock-skew-allowed": (saved(savedAt=NOW_WALL + 301.0), "in the future"),
    "forecast-slot-below-unobserved": (
        saved(services__chat__forecast__days={str(int(EPOCH // 86400)): [-2] * 144}),
        "holds -2",
    ),
    "forecast-slot-a-boolean": (
        saved(services__chat__forecast__days={str(int(EPOCH // 86400)): [True] * 144}),
        "holds True",
    ),
}


@pytest.mark.parametrize(("text", "why"), IGNORED.values(), ids=IGNORED.keys())
def test_untrusted_state_is_ignored_with_a_reason(text: str, why: str) -> None:
    st, line = memory.restore(text, config(), 100.0, NOW_WALL)
    assert st is None
    assert line.startswith("state ignored: ") and why in line


# Values at the edge of what the loader accepts: read, not refused (one past each edge is
# in IGNORED above). (document, words in the restore line)
AT_THE_EDGE = {
    "highest-load-bin-all-within": (
        saved(services__chat__policy__learned__bins=[[MAX_BIN, 3.0, 3.0]]),
        "policy memory of 1 service(s)",
    ),
    "lowest-load-bin-no-requests": (
        saved(services__chat__policy__learned__bins=[[0, 0.0, 0.0]]),
        "policy memory of 1 service(s)",
    ),
    "capacity-source-of-500": (
        saved(services__chat__policy__learned__source="x" * 500),
        "policy memory of 1 service(s)",
    ),
    "window-asked-zero": (
        saved(services__chat__policy__window=[[NOW_WALL - 90, 0]]),
        "policy memory of 1 service(s)",
    ),
    "rate-swing-weight-1-begun-just-now": (
        saved(services__chat__policy__rateSwing=[NOW_WALL - 60, NOW_WALL - 60, 0.0, 1.0]),
        "policy memory of 1 service(s)",
    ),
    "raised-one-second-ahead": (  # clocks of two processes may differ by that much
        saved(services__chat__policy__raisedAt=NOW_WALL + 1.0),
        "policy memory of 1 service(s)",
    ),
    "saved-at-the-clock-skew-allowed": (
        saved(savedAt=NOW_WALL + 300.0),
        "policy memory of 1 service(s)",
    ),
    "policy-exactly-an-hour-old": (
        saved(savedAt=NOW_WALL - 3600.0),
        "policy memory of 1 service(s)",
    ),
    "policy-an-hour-and-a-second-old": (
        saved(savedAt=NOW_WALL - 3601.0),
        "policy memory too old (3601 s > 3600 s), not used",
    ),
}


@pytest.mark.parametrize(("text", "why"), AT_THE_EDGE.values(), ids=AT_THE_EDGE.keys())
def test_state_at_the_edge_of_the_accepted_is_read(text: str, why: str) -> None:
    st, line = memory.restore(text, config(), 100.0, NOW_WALL)
    assert st is not None, line
    assert line.startswith("state restored") and why in line


def test_the_forecast_history_restores_the_days_it_keeps() -> None:
    """The days within historyDays up to today; older ones and days ahead of the clock
    (a document from another clock) are dropped, as `forecast.record` would."""
    cfg = config()
    today, keep = int(NOW_WALL // 86400), cfg.pool.forecast.historyDays
    days = [today - keep, today - keep + 1, today, today + 1]
    text = saved(services__chat__forecast__days={str(d): [-1] * 143 + [3] for d in days})
    st, line = memory.restore(text, cfg, 100.0, NOW_WALL)
    assert st is not None, line
    assert sorted(st.forecast["chat"].days) == [today - keep + 1, today]


def test_keys_of_earlier_versions_are_ignored() -> None:
    """breachRps/breachAt (version 1 wrote them until the capacity was read off load bins)."""
    text = saved(services__chat__policy__learned__breachRps=1.5)
    doc = json.loads(text)
    doc["services"]["chat"]["policy"]["learned"]["breachAt"] = EPOCH
    st, line = memory.restore(json.dumps(doc), config(), 100.0, EPOCH + 60.0 * 30)
    assert st is not None, line
    want, _ = memory.restore(saved(), config(), 100.0, EPOCH + 60.0 * 30)
    assert want is not None and st.policy["chat"] == want.policy["chat"]


def test_a_capacity_saved_without_its_source_restores_without_one() -> None:
    """State written before the source was kept: the capacity restores, its source unknown."""
    doc = json.loads(saved(services__chat__policy__learned__capacityRps=2.5))
    del doc["services"]["chat"]["policy"]["learned"]["source"]
    st, line = memory.restore(json.dumps(doc), config(), 100.0, EPOCH + 60.0 * 30)
    assert st is not None, line
    got = st.policy["chat"].learned
    assert got.capacity_rps == 2.5 and got.source is None


def test_old_policy_memory_is_dropped_but_the_forecast_kept() -> None:
    st, line = memory.restore(saved(), config(), 100.0, EPOCH + 60.0 * 29 + 2 * 3600)
    assert st is not None and "too old" in line
    assert "chat" not in st.policy and "chat" in st.forecast


@pytest.mark.parametrize(
    "cfg",
    [
        pytest.param(config(slot=300), id="slot-length"),
        pytest.param(config(zone="Europe/Berlin"), id="time-zone"),
        pytest.param(config(calendar={"timeZone": "Europe/Berlin"}), id="the-services-zone"),
    ],
)
def test_changed_slots_or_zone_start_the_history_over(cfg: Config) -> None:
    st, _ = memory.restore(saved(), cfg, 100.0, EPOCH + 60.0 * 30)
    assert st is not None and "chat" in st.policy and "chat" not in st.forecast


def test_the_history_keeps_its_zone_across_a_restart() -> None:
    cfg = config(zone="America/New_York")
    _, st = run(cfg, 0, 30, CycleState(), 0.0)
    text = memory.dump(st, cfg, 60.0 * 29, EPOCH + 60.0 * 29)
    back, line = memory.restore(text, cfg, 100.0, EPOCH + 60.0 * 30)
    assert back is not None, line
    assert back.forecast["chat"] == st.forecast["chat"]
    # EPOCH is Friday 10 May 2024 00:00 UTC: Thursday 20:00 in New York.
    (day,) = back.forecast["chat"].days
    assert back.forecast["chat"].tz == "America/New_York" and day == math.floor(EPOCH / 86400) - 1


def test_a_service_calendar_keeps_its_zone_across_a_restart() -> None:
    cfg = config(calendar={"timeZone": "Asia/Tokyo"})
    _, st = run(cfg, 0, 30, CycleState(), 0.0)
    text = memory.dump(st, cfg, 60.0 * 29, EPOCH + 60.0 * 29)
    back, line = memory.restore(text, cfg, 100.0, EPOCH + 60.0 * 30)
    assert back is not None and back.forecast["chat"] == st.forecast["chat"], line
    assert back.forecast["chat"].tz == "Asia/Tokyo"
    st2, _ = memory.restore(text, config(), 100.0, EPOCH + 60.0 * 30)  # calendar removed
    assert st2 is not None and "chat" not in st2.forecast


def test_a_history_saved_before_the_zone_setting_reads_as_utc() -> None:
    doc = json.loads(saved())
    del doc["services"]["chat"]["forecast"]["timeZone"]
    st, line = memory.restore(json.dumps(doc), config(), 100.0, EPOCH + 60.0 * 30)
    assert st is not None and st.forecast["chat"].tz == "UTC", line


def test_removed_service_starts_that_part_over() -> None:
    st, _ = memory.restore(saved(services={"gone": {}}), config(), 100.0, EPOCH + 60.0 * 30)
    assert st is not None and not st.policy


def test_file_store_round_trip_and_atomic_replace(tmp_path: Path) -> None:
    store = FileStateStore(tmp_path / "sub" / "state.json")
    assert store.load() is None
    store.save("one")
    store.save("two")
    assert store.load() == "two"
    assert [p.name for p in (tmp_path / "sub").iterdir()] == ["state.json"]  # no temp left


def test_configmap_store_creates_then_updates_over_the_api() -> None:
    """The official client against an HTTP API server: 404 → None, the first save creates
    (PUT 404 → POST), later saves replace; labels mark the object as the scaler's."""
    with FakeKubeAPI() as api:
        store = ConfigMapStateStore(api.client(), "gpu-pool/scaler-state")
        assert store.load() is None
        store.save("v1")
        store.save("v2")
        assert store.load() == "v2"
        calls = [r.method for r in api.requests if r.resource == "configmaps"]
        assert calls == ["GET", "PUT", "POST", "PUT", "GET"]
        body = api.get("configmaps", "scaler-state", "gpu-pool")
        assert body is not None and body["data"] == {KEY: "v2"}
        assert body["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpu-pool-scaler"


@pytest.mark.parametrize("status", [403, 500])
def test_configmap_store_turns_api_errors_into_oserror(status: int) -> None:
    with FakeKubeAPI() as api:
        store = ConfigMapStateStore(api.client(), "gpu-pool/scaler-state")
        api.fail(status)
        with pytest.raises(OSError, match=f"HTTP {status}"):
            store.load()
        with pytest.raises(OSError, match=f"HTTP {status}"):
            store.save("v1")


def test_configmap_store_unreachable_api_is_an_oserror() -> None:
    with FakeKubeAPI() as api:
        client = api.client()
    client.configuration.retries = 0  # the port is closed now
    store = ConfigMapStateStore(client, "gpu-pool/scaler-state")
    with pytest.raises(OSError, match="scaler-state"):
        store.load()
    with pytest.raises(OSError, match="scaler-state"):
        store.save("v1")
