"""Replica model of the bench against hand-computed cases.

Expected times are computed here from the profile rows themselves
(scaler/sim/data/profiles/per_forward_ms.csv, A100
Llama-3-70B TP4: 1024 tokens -> 218.912 ms, 32 tokens -> 29.926 ms) and the documented
analytical terms, not by calling the model's own step-time function.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from scaler.sim.profile import ReplicaSpec
from scaler.sim.replica import TTFT_BOUNDS, Replica, ReplicaPool, RequestLog, Router

# Llama-3-70B: 80 layers, hidden 8192, 8 KV heads × 128 dims, bf16.
LAYERS, HIDDEN, TP = 80, 8192, 4
KV_BYTES_PER_TOKEN = 2 * LAYERS * 8 * 128 * 2  # 327,680
A100_FLOPS, A100_BW = 312e12 * 0.5, 2.039e12 * 0.7  # peak × the documented efficiencies
OVERHEAD = 0.003


def prefill_pass_s(tokens: int, lin_ms: float) -> float:
    """One pass prefilling a whole prompt of `tokens` (attends to tokens/2 on average)."""
    attn = 4 * LAYERS * tokens * (tokens / 2) * HIDDEN / TP / A100_FLOPS
    return lin_ms / 1000 + attn + OVERHEAD


def decode_pass_s(lin_ms: float, ctx_tokens: float) -> float:
    return lin_ms / 1000 + ctx_tokens * KV_BYTES_PER_TOKEN / TP / A100_BW + OVERHEAD


def test_kv_capacity_is_hbm_minus_weights_over_bytes_per_token() -> None:
    spec = ReplicaSpec()
    free = 80e9 * 0.9 * 4 - 70.6e9 * 2 - 3e9 * 4
    assert spec.kv_capacity_tokens == int(free // KV_BYTES_PER_TOKEN)
    assert 400_000 < spec.kv_capacity_tokens < 420_000


@pytest.mark.parametrize("arrival", [0.0, 0.3], ids=["at-step-start", "mid-step"])
def test_single_request_ttft_is_one_prefill_pass(arrival: float) -> None:
    rep = Replica(ReplicaSpec())
    i = rep.submit(prompt=1024, output=1, arrival=arrival)
    rep.step(1.0)
    ttft = rep.log.first_token[i] - rep.log.arrival[i]
    assert ttft == pytest.approx(prefill_pass_s(1024, 218.912), rel=1e-6)
    assert rep.log.finished[i] == 1.0  # one output token: done with the prefill
    s = rep.sample()
    assert (s.running, s.waiting, s.prompt_tokens_total, s.generation_tokens_total) == (
        0,
        0,
        1024,
        1,
    )


def test_second_prompt_waits_for_the_first_fifo() -> None:
    rep = Replica(ReplicaSpec())
    a = rep.submit(prompt=1024, output=1)
    b = rep.submit(prompt=1024, output=1)
    rep.step(1.0)
    ta, tb = rep.log.first_token[a], rep.log.first_token[b]
    assert ta < tb
    # Fluid chunked prefill: both prompts share 2048-token passes; together they take one.
    assert tb == pytest.approx(2 * ta, rel=1e-9)


def test_batch_decode_step_time_from_profile() -> None:
    """32 sequences decoding: tokens per second = 32 / (linear(32) + KV read + overhead)."""
    rep = Replica(ReplicaSpec())
    ids = [rep.submit(prompt=100, output=5000) for _ in range(32)]
    rep.step(1.0)  # prefills (one 3200-token chunk budget: two passes) and starts decoding
    ctx = float(np.sum(rep.pool.ctx[0]))
    before = rep.sample().generation_tokens_total
    assert before is not None
    rep.step(1.0)
    after = rep.sample().generation_tokens_total
    assert after is not None
    expected_per_seq = 1.0 / decode_pass_s(29.926, ctx)
    assert (after - before) == pytest.approx(32 * expected_per_seq, rel=0.01)
    assert all(np.isfinite(rep.log.first_token[i]) for i in ids)


def small_kv_spec(tokens: int) -> ReplicaSpec:
    """A replica whose KV cache holds about `tokens` tokens (activations eat the rest)."""
    free_wanted = tokens * KV_BYTES_PER_TOKEN
    act = (80e9 * 0.9 * 4 - 70.6e9 * 2 - free_wanted) / 4
    spec = ReplicaSpec(activation_bytes_per_gpu=act)
    assert abs(spec.kv_capacity_tokens - tokens) <= 1
    return spec


def test_kv_admission_request_waits_until_it_fits() -> None:
    rep = Replica(small_kv_spec(5000))
    a = rep.submit(prompt=3000, output=20)  # 20 decode tokens ≈ 0.6 s
    b = rep.submit(prompt=3000, output=1)
    rep.step(1.0)
    assert not math.isnan(rep.log.first_token[a])  # a's prefill is done: budget is free
    s = rep.sample()
    assert (s.running, s.waiting) == (1, 1)  # b still waits: 3000 + 3020 > 0.99 × 5000
    assert s.kv_usage_mean == pytest.approx(float(np.sum(rep.pool.ctx[0])) / 5000, rel=1e-3)
    for _ in range(3):
        rep.step(1.0)
    assert not math.isnan(rep.log.finished[a])
    assert rep.log.admitted[b] == pytest.approx(rep.log.finished[a])  # next step after a
    assert rep.log.first_token[b] > rep.log.finished[a]


def test_prefill_backlog_stays_waiting_like_vllm_v1() -> None:
    """A burst of 10 × 2000-token prompts: only what one second of 2048-token chunks can
    start is scheduled (running); the rest shows in num_requests_waiting."""
    rep = Replica(ReplicaSpec())
    for _ in range(10):
        rep.submit(prompt=2000, output=50)
    chunk_s = prefill_pass_s(2048, 389.473)  # profile row: 2048 tokens -> 389.473 ms
    rep.pool._admit(0.0, 1.0)
    s = rep.sample()
    startable = 2048 / chunk_s  # prefill tokens one second can start
    assert s.running == math.ceil(startable / 2000)
    assert s.waiting == 10 - s.running
    assert rep.log.admitted[0] == 0.0 and math.isnan(rep.log.admitted[9])


def test_prompt_larger_than_the_kv_cache_is_an_error() -> None:
    rep = Replica(small_kv_spec(1000))
    rep.submit(prompt=2000, output=1)
    with pytest.raises(ValueError, match="KV tokens"):
        rep.step(1.0)


def test_kv_overflow_during_decode_preempts_the_newest() -> None:
    rep = Replica(small_kv_spec(2000))
    old = rep.submit(prompt=900, output=150)  # 2 × (900 + 150) > 2000 while decoding
    new = rep.submit(prompt=900, output=150)
    for _ in range(20):
        rep.step(1.0)
    s = rep.sample()
    assert s.preemptions_total is not None and s.preemptions_total >= 1
    assert rep.log.finished[old] < rep.log.finished[new]
    assert rep.log.need[new] > 900  # recomputes prompt + what it had generated


def test_max_num_seqs_caps_the_batch() -> None:
    rep = Replica(ReplicaSpec(max_num_seqs=4))
    for _ in range(6):
        rep.submit(prompt=10, output=1000)
    rep.step(1.0)
    assert (rep.sample().running, rep.sample().waiting) == (4, 2)


def test_router_sends_to_least_loaded_ready_replica() -> None:
    log = RequestLog()
    pool = ReplicaPool(ReplicaSpec(), 3, log)
    pool.start(0, 0.0)
    pool.start(1, 0.0)  # row 2 is not up: never chosen
    router = Router()
    pool.enqueue(0, [log.add(0.0, 10, 10) for _ in range(3)])
    ids = [log.add(0.0, 10, 10) for _ in range(5)]
    router.route(pool, ids)
    assert [len(q) for q in pool.queues] == [4, 4, 0]


def test_router_holds_requests_while_no_replica_is_ready() -> None:
    log = RequestLog()
    pool = ReplicaPool(ReplicaSpec(), 1, log)
    router = Router()
    router.route(pool, [log.add(0.0, 10, 10)])
    assert list(router.held) == [0]
    pool.start(0, 5.0)
    router.route(pool, [])
    assert list(pool.queues[0]) == [0] and not router.held


def test_restart_resets_counters_and_process_start() -> None:
    log = RequestLog()
    pool = ReplicaPool(ReplicaSpec(), 1, log)
    pool.start(0, 0.0)
    pool.enqueue(0, [log.add(0.0, 100, 1)])
    pool.step(0.0, 1.0)
    pool.drain(0)
    pool.stop(0)
    pool.start(0, 50.0)
    s = pool.sample(0)
    assert (s.prompt_tokens_total, s.process_start_seconds) == (0.0, 50.0)


def test_ttft_histogram_counts_each_first_token_once_in_its_bucket() -> None:
    log = RequestLog()
    pool = ReplicaPool(ReplicaSpec(), 1, log)
    pool.start(0, 0.0)
    pool.enqueue(0, [log.add(0.0, 4000, 50) for _ in range(40)])  # a backlog: TTFTs spread
    for k in range(30):
        pool.step(float(k), 1.0)
    s = pool.sample(0).ttft_buckets
    assert s is not None and [le for le, _ in s] == list(TTFT_BOUNDS)
    counts = [c for _, c in s]
    assert counts == sorted(counts)  # cumulative
    first = log.first_token[: log.n]
    ttft = first[~np.isnan(first)] - log.arrival[: log.n][~np.isnan(first)]
    assert 0 < ttft.size < 40 and counts[-1] == ttft.size  # still-queued ones not observed
    for le, c in s:
        assert c == np.count_nonzero(ttft <= le)


def test_ttft_histogram_restarts_with_the_process() -> None:
    log = RequestLog()
    pool = ReplicaPool(ReplicaSpec(), 1, log)
    pool.start(0, 0.0)
    pool.enqueue(0, [log.add(0.0, 100, 1)])
    pool.step(0.0, 1.0)
    pool.step(1.0, 1.0)
    before = pool.sample(0).ttft_buckets
    assert before is not None and before[-1][1] == 1.0
    pool.drain(0)
    pool.stop(0)
    pool.start(0, 50.0)
    after = pool.sample(0).ttft_buckets
    assert after is not None and after[-1][1] == 0.0
