"""vLLM replica model: continuous batching with chunked prefill, KV capacity, gauges.

Time-stepped and vectorised: `ReplicaPool` holds every replica's batch as (replica × slot)
numpy arrays (slot = one of `max_num_seqs` sequences) and advances all of them by `dt`
(1 s in the bench) in a handful of array operations. Within a step the engine is a fluid
model of vLLM's scheduler:

* Admission (start of step, FIFO), as vLLM V1 schedules: a waiting request becomes
  running when its prefill can start within this step's token budget, a batch slot is
  free and its prompt fits in the free KV cache (prompt tokens are reserved at admission;
  the cache then grows by one token per generated token). Otherwise it waits: queue time
  and `num_requests_waiting` show prefill backlog as in vLLM.
* Each forward pass carries one token per decoding sequence plus a prefill chunk of up to
  `max_num_batched_tokens − decoders` tokens (chunked prefill), prompts served FIFO. Pass
  time comes from `ReplicaSpec.iteration_s` (measured linear layers + analytic attention).
* A prompt's first token appears when its last chunk is done (TTFT = that − arrival); a
  request that arrived inside the step cannot start before it arrived (FIFO with release
  times, computed in closed form with a running maximum).
* Decoders get one token per pass: passes in the step = mixed time / mixed pass time +
  the rest / decode-only pass time.
* If generated tokens overflow the KV cache, the newest sequence is preempted (vLLM V1
  recompute): back to the front of the queue, counted in `num_preemptions_total`.

Resolution: admission and queue times are quantised to the step (1 s); TTFT of admitted
requests is continuous. The gauges/counters are the ones vLLM exports (`sample`), with the
`vllm:time_to_first_token_seconds` histogram on vLLM's default bounds: as in vLLM, a
request is observed only when its first token appears (one still queued is not in it).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable, Sequence
from itertools import islice

import numpy as np
import numpy.typing as npt

from scaler.core.load import EngineSample
from scaler.sim.profile import ReplicaSpec

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
_EPS = 1e-9
# vLLM's default `vllm:time_to_first_token_seconds` bucket bounds (+Inf last), as in the
# vendored vLLM 0.32 capture (tests/data/vllm-0.32.0-cpu).
TTFT_BOUNDS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0, float("inf"),
)  # fmt: skip
_TTFT_LE = np.asarray(TTFT_BOUNDS)


class RequestLog:
    """Per-request state and outcome, shared by the replicas of one simulated pool."""

    _FIELDS = (
        ("arrival", np.nan, np.float64),
        ("prompt", 0, np.int64),
        ("output", 0, np.int64),
        ("need", 0.0, np.float64),  # tokens to (re)compute at admission: prompt (+ generated)
        ("out_left", 0.0, np.float64),  # output tokens still to generate
        ("admitted", np.nan, np.float64),  # first admission into a batch
        ("first_token", np.nan, np.float64),
        ("finished", np.nan, np.float64),
    )
    arrival: FloatArray
    prompt: IntArray
    output: IntArray
    need: FloatArray
    out_left: FloatArray
    admitted: FloatArray
    first_token: FloatArray
    finished: FloatArray

    def __init__(self, capacity: int = 1024) -> None:
        self.n = 0
        self.cap = 0
        self._alloc(max(capacity, 1))

    def _alloc(self, cap: int) -> None:
        for name, fill, dtype in self._FIELDS:
            new = np.full(cap, fill, dtype=dtype)
            if self.cap:
                new[: self.n] = getattr(self, name)[: self.n]
            setattr(self, name, new)
        self.cap = cap

    @classmethod
    def of(cls, arrival: FloatArray, prompt: IntArray, output: IntArray) -> RequestLog:
        log = cls(arrival.size)
        log.n = int(arrival.size)
        log.arrival[: log.n] = arrival
        log.prompt[: log.n] = prompt
        log.output[: log.n] = output
        log.need[: log.n] = prompt
        log.out_left[: log.n] = output
        return log

    def add(self, arrival: float, prompt: int, output: int) -> int:
        """Append one request (live use, e.g. the demo); returns its id."""
        if prompt < 1 or output < 1:
            raise ValueError(f"prompt and output must be >= 1 token, got {prompt}, {output}")
        if self.n == self.cap:
            self._alloc(self.cap * 2)
        i = self.n
        self.arrival[i], self.prompt[i], self.output[i] = arrival, prompt, output
        self.need[i], self.out_left[i] = prompt, output
        self.n += 1
        return i


class ReplicaPool:
    """`rows` replica slots (engines); a row serves only while `serving[row]` is set."""

    def __init__(self, spec: ReplicaSpec, rows: int, log: RequestLog) -> None:
        self.spec = spec
        self.log = log
        self.rows = rows
        s = spec.max_num_seqs
        self.kv_cap = float(spec.kv_capacity_tokens)
        self.act = np.zeros((rows, s), dtype=bool)
        self.pre = np.zeros((rows, s))  # prompt tokens still to prefill
        self.out = np.zeros((rows, s))  # output tokens still to generate
        self.ctx = np.zeros((rows, s))  # KV tokens held (reserved prompt + generated)
        self.seq = np.full((rows, s), np.inf)  # admission order (FIFO for prefill)
        self.rel = np.zeros((rows, s))  # earliest prefill start (arrival or admission)
        self.rid = np.full((rows, s), -1, dtype=np.int64)
        self.nact = np.zeros(rows, dtype=np.int64)
        self.queues: list[deque[int]] = [deque() for _ in range(rows)]
        self.serving = np.zeros(rows, dtype=bool)  # Ready: the router may send requests
        self.up = np.zeros(rows, dtype=bool)  # process running (serving or draining)
        self.prompt_total = np.zeros(rows)
        self.gen_total = np.zeros(rows)
        self.preempt_total = np.zeros(rows)
        self.busy_s = np.zeros(rows)  # cumulative seconds with a forward pass running
        self.ttft_hist = np.zeros((rows, len(TTFT_BOUNDS)))  # first tokens per bucket (not cum.)
        self.started_at = np.zeros(rows)
        self._order = 0.0
        self._hr = 0  # rows [0, _hr) may be up
        self._hc = 0  # columns [0, _hc) may hold a sequence

    # ---- lifecycle -------------------------------------------------------------------
    def start(self, row: int, now: float) -> None:
        """A new engine process on `row` becomes Ready (counters start at 0)."""
        if self.up[row]:
            raise ValueError(f"replica row {row} is already up")
        self.up[row] = self.serving[row] = True
        self._hr = max(self._hr, row + 1)
        self.prompt_total[row] = self.gen_total[row] = self.preempt_total[row] = 0.0
        self.busy_s[row] = 0.0
        self.ttft_hist[row] = 0.0
        self.started_at[row] = now

    def drain(self, row: int) -> list[int]:
        """Stop routing to `row`; returns its queued request ids (for the router to resend)."""
        self.serving[row] = False
        q = list(self.queues[row])
        self.queues[row].clear()
        return q

    def idle(self, row: int) -> bool:
        return self.nact[row] == 0 and not self.queues[row]

    def stop(self, row: int) -> None:
        if not self.idle(row):
            raise ValueError(f"replica row {row} still has requests")
        self.up[row] = self.serving[row] = False
        up = np.flatnonzero(self.up)
        self._hr = int(up[-1]) + 1 if up.size else 0

    # ---- observation -----------------------------------------------------------------
    def kv_used(self) -> FloatArray:
        return np.asarray(self.ctx.sum(axis=1))

    def outstanding(self) -> IntArray:
        return self.nact + np.fromiter((len(q) for q in self.queues), np.int64, self.rows)

    def sample(self, row: int) -> EngineSample:
        """The gauges and counters vLLM's /metrics would show for this replica now."""
        kv = float(self.ctx[row].sum()) / self.kv_cap
        return EngineSample(
            waiting=float(len(self.queues[row])),
            running=float(self.nact[row]),
            kv_usage_mean=kv,
            kv_usage_max=kv,
            prompt_tokens_total=float(self.prompt_total[row]),
            generation_tokens_total=float(self.gen_total[row]),
            preemptions_total=float(self.preempt_total[row]),
            process_start_seconds=float(self.started_at[row]),
            ttft_buckets=tuple(
                zip(TTFT_BOUNDS, np.cumsum(self.ttft_hist[row]).tolist(), strict=True)
            ),
        )

    # ---- dynamics --------------------------------------------------------------------
    def enqueue(self, row: int, rids: Iterable[int]) -> None:
        if not self.up[row]:
            raise ValueError(f"replica row {row} is not running")
        self.queues[row].extend(rids)

    def _admit(self, now: float, dt: float) -> None:
        """Waiting -> running, FIFO, as vLLM V1's scheduler does: a request is scheduled
        (counted as running) only once its prefill can start within this step's token
        budget, and only if a batch slot is free and its prompt fits in the KV cache.
        Everything behind it stays waiting (`num_requests_waiting`, queue time)."""
        log = self.log
        s = self.spec.max_num_seqs
        hr = self._hr
        rows = [r for r in range(hr) if self.queues[r] and self.nact[r] < s]
        if not rows:
            return
        room = self.kv_cap * 0.99  # vLLM keeps a 1 % watermark of blocks free
        rows_a = np.asarray(rows)
        kv_free = room - self.ctx[rows_a, : self._hc].sum(axis=1)
        counts = [min(len(self.queues[r]), s - int(self.nact[r])) for r in rows]
        cand = np.fromiter(
            (i for r, c in zip(rows, counts, strict=True) for i in islice(self.queues[r], c)),
            np.int64,
            sum(counts),
        )
        need = log.need[cand]
        seg = np.repeat(np.arange(len(rows)), counts)
        cum = np.cumsum(need)
        first = np.concatenate(([0], np.cumsum(counts)[:-1]))
        cum_in_row = cum - np.repeat(cum[first] - need[first], counts)
        # Prefill tokens this step can start: (budget - decoders) per full-chunk pass.
        hc = self._hc
        tok = float(self.spec.max_num_batched_tokens)
        n_dec = (self.act[rows_a, :hc] & (self.pre[rows_a, :hc] <= 0)).sum(axis=1)
        p_before = self.pre[rows_a, :hc].sum(axis=1)
        room_tok = np.maximum(tok - n_dec, 1.0)
        t_full = self.spec.iteration_s(n_dec + room_tok, 0.0, room_tok, tok / 2)
        budget = room_tok * dt / t_full
        starts = p_before[seg] + cum_in_row - need < budget[seg]
        # FIFO: the first request that does not fit (KV) or cannot start (budget) blocks.
        ok = (cum_in_row <= kv_free[seg]) & starts
        k = np.bincount(seg[ok], minlength=len(rows))
        blocked = (k == 0) & (self.nact[rows_a] == 0) & (need[first] > room)  # never fits
        if blocked.any():
            i = int(cand[first[np.flatnonzero(blocked)[0]]])
            raise ValueError(f"request {i} needs {log.need[i]:.0f} KV tokens > {room:.0f}")
        if not ok.any():
            return
        for j in np.flatnonzero(k):
            q = self.queues[rows[j]]
            for _ in range(int(k[j])):
                q.popleft()
        ids = cand[ok]
        rr = rows_a[seg[ok]]
        # Lowest free columns of each row (False sorts first), in FIFO order.
        pos = np.arange(ids.size) - np.repeat(np.cumsum(k) - k, k)
        free_order = np.argsort(self.act[rows_a], axis=1, kind="stable")
        cc = free_order[seg[ok], pos]
        arr = log.arrival[ids]
        self.act[rr, cc] = True
        self.pre[rr, cc] = need[ok]
        self.ctx[rr, cc] = need[ok]
        self.out[rr, cc] = log.out_left[ids]
        self.seq[rr, cc] = self._order + np.arange(ids.size)
        self._order += ids.size
        self.rel[rr, cc] = np.maximum(arr, now)
        self.rid[rr, cc] = ids
        adm = log.admitted[ids]
        log.admitted[ids] = np.where(np.isnan(adm), np.maximum(arr, now), adm)
        self.nact[rows_a] += k
        self._hc = max(self._hc, int(cc.max()) + 1)

    def step(self, now: float, dt: float) -> None:
        """Advance every running replica from `now` to `now + dt`."""
        self._admit(now, dt)
        if not self.nact.any():
            return
        spec, log = self.spec, self.log
        hr, hc = self._hr, self._hc
        # Views on the occupied corner: rows and columns beyond it are empty.
        act = self.act[:hr, :hc]
        pre, out, ctx = self.pre[:hr, :hc], self.out[:hr, :hc], self.ctx[:hr, :hc]
        seq, rel, rid = self.seq[:hr, :hc], self.rel[:hr, :hc], self.rid[:hr, :hc]
        nact = self.nact[:hr]
        pending = pre > 0
        dec = act & ~pending
        b = dec.sum(axis=1).astype(float)
        p_tot = pre.sum(axis=1)
        npend = pending.sum(axis=1)
        ctx_dec = ctx * dec
        k_dec = ctx_dec.sum(axis=1)
        chunk = np.minimum(np.maximum(spec.max_num_batched_tokens - b, 0.0), p_tot)
        pctx = np.where(npend > 0, (ctx.sum(axis=1) - k_dec) / np.maximum(npend, 1) / 2, 0.0)
        t_mix = spec.iteration_s(b + chunk, k_dec, chunk, pctx)
        t_dec = spec.iteration_s(b, k_dec, 0.0, 0.0)
        busy_p = np.zeros(hr)

        prows = np.flatnonzero(p_tot > 0)
        new_rows: IntArray = np.empty(0, dtype=np.int64)
        new_cols: IntArray = np.empty(0, dtype=np.int64)
        new_extra: FloatArray = np.empty(0)
        if prows.size:
            kmax = int(npend[prows].max())
            sp = pre[prows]
            key = np.where(sp > 0, seq[prows], np.inf)
            order = np.argsort(key, axis=1)[:, :kmax]
            ps = np.take_along_axis(sp, order, axis=1)
            rs = np.maximum(np.take_along_axis(rel[prows], order, axis=1) - now, 0.0)
            rate = (chunk[prows] / t_mix[prows])[:, None]
            p = ps / rate
            cum = np.cumsum(p, axis=1)
            done_at = cum + np.maximum.accumulate(rs - (cum - p), axis=1)
            start = done_at - p
            valid = ps > 0
            spent = np.minimum(np.maximum(dt - start, 0.0), p) * valid
            done = valid & (done_at <= dt + _EPS)
            busy_p[prows] = np.minimum(spent.sum(axis=1), dt)
            left = np.where(done, 0.0, np.maximum(ps - spent * rate, 0.0))
            self.prompt_total[prows] += (ps - left).sum(axis=1)
            np.put_along_axis(sp, order, left, axis=1)
            pre[prows] = sp
            if done.any():
                di, dj = np.nonzero(done)
                new_rows = prows[di]
                new_cols = order[di, dj]
                t_first = now + done_at[di, dj]
                rids = rid[new_rows, new_cols]
                first = log.first_token[rids]
                log.first_token[rids] = np.where(np.isnan(first), t_first, first)
                # The engine's TTFT histogram: each request once (a recompute-preempted one
                # keeps its first token), measured from its arrival.
                new = np.isnan(first)
                le = np.searchsorted(_TTFT_LE, t_first[new] - log.arrival[rids[new]], side="left")
                np.add.at(self.ttft_hist, (new_rows[new], le), 1.0)
                # First token with the last chunk; then decode passes for the rest of the step.
                new_extra = 1.0 + (now + dt - t_first) / t_dec[new_rows]

        # Decoders: one token per pass; passes = mixed time / t_mix + rest / t_dec.
        passes = np.where(b > 0, busy_p / t_mix + (dt - busy_p) / t_dec, 0.0)
        out_before = out * dec
        gen = np.minimum(out_before, passes[:, None])
        dec_time = np.minimum(out_before.max(axis=1) * t_dec, dt)
        out -= gen
        ctx += gen
        gen_rows = gen.sum(axis=1)
        if new_rows.size:
            g2 = np.minimum(out[new_rows, new_cols], new_extra)
            out[new_rows, new_cols] -= g2
            ctx[new_rows, new_cols] += g2
            np.add.at(gen_rows, new_rows, g2)
        self.gen_total[:hr] += gen_rows
        self.busy_s[:hr] += np.where(nact > 0, np.maximum(busy_p, dec_time), 0.0)

        fin = act & ~(pre > 0) & (out <= _EPS)
        if fin.any():
            fr, fc = np.nonzero(fin)
            log.finished[rid[fr, fc]] = now + dt
            act[fr, fc] = False
            pre[fr, fc] = 0.0
            out[fr, fc] = 0.0
            ctx[fr, fc] = 0.0
            seq[fr, fc] = np.inf
            rid[fr, fc] = -1
            nact -= np.bincount(fr, minlength=hr)
            used = np.flatnonzero(act.any(axis=0))
            self._hc = int(used[-1]) + 1 if used.size else 0
        over = np.flatnonzero(ctx.sum(axis=1) > self.kv_cap)
        for r in over:
            self._preempt_newest(int(r))

    def _preempt_newest(self, r: int) -> None:
        """KV cache full: recompute-preempt the newest sequences until the rest fit."""
        log = self.log
        while self.ctx[r].sum() > self.kv_cap and self.nact[r] > 0:
            c = int(np.argmax(np.where(self.act[r], self.seq[r], -np.inf)))
            i = int(self.rid[r, c])
            done = float(log.output[i]) - float(self.out[r, c])
            log.need[i] = float(log.prompt[i]) + done  # recompute prompt + generated tokens
            log.out_left[i] = float(self.out[r, c])
            self.act[r, c] = False
            self.pre[r, c] = self.out[r, c] = self.ctx[r, c] = 0.0
            self.seq[r, c] = np.inf
            self.rid[r, c] = -1
            self.nact[r] -= 1
            self.preempt_total[r] += 1
            self.queues[r].appendleft(i)


class Router:
    """Sends each request to the ready replica with the fewest outstanding requests.

    Requests that arrive while no replica is ready wait here (the gateway's queue).
    """

    def __init__(self) -> None:
        self.held: deque[int] = deque()

    def route(self, pool: ReplicaPool, rids: Sequence[int] | IntArray) -> None:
        rows = np.flatnonzero(pool.serving)
        if self.held:
            rids = [*self.held, *(int(x) for x in rids)]
            self.held.clear()
        if len(rids) == 0:
            return
        if rows.size == 0:
            self.held.extend(int(x) for x in rids)
            return
        load = pool.outstanding()
        heap = [(int(load[r]), int(r)) for r in rows]
        heapq.heapify(heap)
        batches: dict[int, list[int]] = {}
        for i in rids:
            n, r = heap[0]
            batches.setdefault(r, []).append(int(i))
            heapq.heapreplace(heap, (n + 1, r))
        for r, ids in batches.items():
            pool.enqueue(r, ids)


class Replica:
    """One replica with its own clock, for live use (`gpu-pool-scaler demo`).

    rep = Replica(ReplicaSpec(), now=0.0)
    rep.submit(prompt=1000, output=200)
    rep.step(1.0)
    rep.sample()  # EngineSample: waiting, running, kv usage, token counters
    """

    def __init__(self, spec: ReplicaSpec, now: float = 0.0, log: RequestLog | None = None):
        self.log = log or RequestLog()
        self.pool = ReplicaPool(spec, 1, self.log)
        self.now = now
        self.pool.start(0, now)

    def submit(self, prompt: int, output: int, arrival: float | None = None) -> int:
        i = self.log.add(self.now if arrival is None else arrival, prompt, output)
        self.pool.enqueue(0, (i,))
        return i

    def step(self, dt: float) -> None:
        self.pool.step(self.now, dt)
        self.now += dt

    def sample(self) -> EngineSample:
        return self.pool.sample(0)
