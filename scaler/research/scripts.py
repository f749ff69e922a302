"""Lua scripts of the work queue: every state change is one script, so it is atomic.

Keys are built inside the scripts from a prefix (ARGV[1]), so the queue runs on a single
Redis (standalone or Sentinel), not Redis Cluster. Time is Redis server time (TIME): lease
deadlines never depend on the clocks of worker machines.

Key layout (P = prefix, default "gps"):
  P:classes            SET    known research classes (the registry; submit checks it)
  P:seen-classes       SET    classes that ever had an item (status lists them too)
  P:item:<id>          HASH   one work item (fields: see model.Item.from_hash)
  P:q:<class>          LIST   waiting item ids; workers LPOP, submit RPUSHes
  P:leases:<class>     ZSET   id -> lease deadline (ms); its size = live leases of the class
  P:items:<class>      ZSET   id -> created ms; every item of the class, for status
  P:dead:<class>       LIST   dead-lettered ids
  P:completion:<id>    HASH   the completion record: token, worker, attempt, ms
  P:take:<token>       STRING id leased under token (short TTL): makes take idempotent
  P:events             STREAM audit log of every transition (capped, approximate)
"""

from __future__ import annotations

_PRELUDE = r"""
local P = ARGV[1]
local function k(...) return P .. ':' .. table.concat({...}, ':') end
local function s(x) return string.format('%d', x) end
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function hget(ik, f)
  local v = redis.call('HGET', ik, f)
  if v then return v end
  return ''
end
local function hnum(ik, f) return tonumber(hget(ik, f)) or 0 end
local function event(now, ev, id, cls, extra)
  local a = {'XADD', k('events'), 'MAXLEN', '~', '100000', '*',
             'event', ev, 'id', id, 'class', cls, 'ms', s(now)}
  for i = 1, #extra do a[#a + 1] = extra[i] end
  redis.call(unpack(a))
end
-- End the current attempt: bill GPU time up to `upto`, drop the lease.
local function release(ik, id, cls, token, outcome, now, upto)
  local dur = upto - hnum(ik, 'started_ms')
  if dur < 0 then dur = 0 end
  redis.call('HINCRBY', ik, 'gpu_ms', s(dur * hnum(ik, 'lease_gpus')))
  redis.call('ZREM', k('leases', cls), id)
  redis.call('HSET', ik, 'lease', '', 'worker', '', 'last_lease', token,
             'last_outcome', outcome, 'updated_ms', s(now))
end
local function requeue(ik, id, cls, front, now)
  redis.call('HSET', ik, 'state', 'requeued', 'updated_ms', s(now))
  if front then redis.call('LPUSH', k('q', cls), id) else redis.call('RPUSH', k('q', cls), id) end
end
local function dead(ik, id, cls, err, now)
  redis.call('HSET', ik, 'state', 'dead', 'last_error', err, 'finished_ms', s(now))
  redis.call('RPUSH', k('dead', cls), id)
end
local function cancelled(ik, now)
  redis.call('HSET', ik, 'state', 'cancelled', 'finished_ms', s(now))
end
-- Leases past their deadline: the worker stopped heartbeating (killed, node lost).
-- Requeued at the front like a preemption, but counted in `lost`; at max_lost the item
-- is dead-lettered so an item that kills its node cannot loop forever.
local function reap(cls, now)
  local lk = k('leases', cls)
  local expired = redis.call('ZRANGEBYSCORE', lk, '-inf', s(now))
  for _, id in ipairs(expired) do
    local ik = k('item', id)
    redis.call('ZREM', lk, id)
    if hget(ik, 'state') == 'running' then
      local token = hget(ik, 'lease')
      local worker = hget(ik, 'worker')
      release(ik, id, cls, token, 'lost', now, hnum(ik, 'hb_ms'))
      local lost = redis.call('HINCRBY', ik, 'lost', 1)
      local to = 'requeued'
      if hget(ik, 'cancel_requested') == '1' then
        cancelled(ik, now); to = 'cancelled'
      elseif lost >= hnum(ik, 'max_lost') then
        dead(ik, id, cls, 'lease expired ' .. lost .. ' times (worker or node lost each time; '
             .. 'max_lost=' .. hget(ik, 'max_lost') .. ')', now)
        to = 'dead'
      else
        requeue(ik, id, cls, true, now)
      end
      event(now, 'lost', id, cls, {'attempt', hget(ik, 'attempts'), 'token', token,
                                   'worker', worker, 'to', to})
    end
  end
  return #expired
end
"""

# ARGV: P, id, class, params_json, submitter, gpus, max_attempts, max_lost
SUBMIT = (
    _PRELUDE
    + r"""
local id, cls = ARGV[2], ARGV[3]
if redis.call('SISMEMBER', k('classes'), cls) == 0 then return 'unknown-class' end
local ik = k('item', id)
if redis.call('EXISTS', ik) == 1 then return 'exists' end
local now = now_ms()
redis.call('HSET', ik, 'id', id, 'class', cls, 'params', ARGV[4], 'submitter', ARGV[5],
           'gpus', ARGV[6], 'max_attempts', ARGV[7], 'max_lost', ARGV[8], 'state', 'queued',
           'attempts', '0', 'failures', '0', 'preemptions', '0', 'lost', '0', 'gpu_ms', '0',
           'created_ms', s(now), 'updated_ms', s(now))
redis.call('RPUSH', k('q', cls), id)
redis.call('ZADD', k('items', cls), s(now), id)
redis.call('SADD', k('seen-classes'), cls)
event(now, 'submit', id, cls, {'submitter', ARGV[5]})
return 'ok'
"""
)

# ARGV: P, class, slots (-1 = no limit), lease_ms, token, worker, gpus (0 = the item's)
# -> {'ok', item-hash-flat} | {'empty', live} | {'full', live} | {'lost'}
TAKE = (
    _PRELUDE
    + r"""
local cls, slots, ttl = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local token, worker, gpus_override = ARGV[5], ARGV[6], tonumber(ARGV[7])
local now = now_ms()
-- A retried take (reply lost) returns the lease it already made instead of a second one.
local tk = k('take', token)
local prev = redis.call('GET', tk)
if prev then
  local ik = k('item', prev)
  if hget(ik, 'lease') == token and hget(ik, 'state') == 'running' then
    return {'ok', redis.call('HGETALL', ik)}
  end
  return {'lost'}
end
reap(cls, now)
local live = redis.call('ZCARD', k('leases', cls))
if slots >= 0 and live >= slots then return {'full', s(live)} end
local qk = k('q', cls)
while true do
  local id = redis.call('LPOP', qk)
  if not id then return {'empty', s(live)} end
  local ik = k('item', id)
  local st = hget(ik, 'state')
  if st == 'queued' or st == 'requeued' then
    local attempt = redis.call('HINCRBY', ik, 'attempts', 1)
    local gpus = gpus_override
    if gpus <= 0 then gpus = hnum(ik, 'gpus') end
    if gpus <= 0 then gpus = 1 end
    redis.call('HSET', ik, 'state', 'running', 'lease', token, 'worker', worker,
               'started_ms', s(now), 'hb_ms', s(now), 'lease_gpus', s(gpus), 'updated_ms', s(now))
    redis.call('ZADD', k('leases', cls), s(now + ttl), id)
    redis.call('SET', tk, id, 'PX', s(math.max(ttl * 4, 600000)))
    event(now, 'take', id, cls, {'attempt', s(attempt), 'token', token, 'worker', worker})
    return {'ok', redis.call('HGETALL', ik)}
  end
  -- Any other state is a stale queue entry (cancel removes ids itself): drop it.
end
"""
)

# ARGV: P, id, token, lease_ms -> 'ok' | 'cancel' | 'lost'
HEARTBEAT = (
    _PRELUDE
    + r"""
local id, token, ttl = ARGV[2], ARGV[3], tonumber(ARGV[4])
local ik = k('item', id)
-- The token, not the clock, says who owns the item: a lease past its deadline that no
-- reaper has taken yet still belongs to its worker.
if hget(ik, 'state') ~= 'running' or hget(ik, 'lease') ~= token then return 'lost' end
local now = now_ms()
redis.call('ZADD', k('leases', hget(ik, 'class')), s(now + ttl), id)
redis.call('HSET', ik, 'hb_ms', s(now))
if hget(ik, 'cancel_requested') == '1' then return 'cancel' end
return 'ok'
"""
)

# ARGV: P, id, token, outcome (done|failed|preempted|cancelled), error, checkpoint, worker
# -> {'ok', new_state} | {'duplicate', why} | {'lost', state} | {'missing', ''}
FINISH = (
    _PRELUDE
    + r"""
local id, token, outcome, err, ckpt, worker = ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local ik = k('item', id)
local cls = hget(ik, 'class')
if cls == '' then return {'missing', ''} end
local now = now_ms()
local ck = k('completion', id)
local function refuse(why)
  redis.call('HINCRBY', ik, 'dup_refused', 1)
  event(now, 'duplicate_refused', id, cls, {'token', token, 'worker', worker, 'why', why})
  return {'duplicate', why}
end
if outcome == 'done' then
  local rec = redis.call('HGET', ck, 'token')
  if rec then
    if rec == token then return {'ok', 'done'} end  -- our own completion, retried
    return refuse('already completed by attempt ' .. hget(ck, 'attempt'))
  end
end
local st = hget(ik, 'state')
if st ~= 'running' or hget(ik, 'lease') ~= token then
  if hget(ik, 'last_lease') == token and hget(ik, 'last_outcome') == outcome then
    return {'ok', st}  -- our own call, retried after a lost reply
  end
  if outcome == 'done' then
    return refuse('lease lost: the lease expired and was reaped (state ' .. st .. ')')
  end
  return {'lost', st}
end
release(ik, id, cls, token, outcome, now, now)
if ckpt ~= '' then redis.call('HSET', ik, 'checkpoint', ckpt) end
local attempt = hget(ik, 'attempts')
local cancel = hget(ik, 'cancel_requested') == '1'
local to
if outcome == 'done' then
  redis.call('HSET', ck, 'token', token, 'worker', worker, 'attempt', attempt, 'ms', s(now))
  redis.call('HSET', ik, 'state', 'done', 'finished_ms', s(now))
  to = 'done'
elseif outcome == 'failed' then
  local f = redis.call('HINCRBY', ik, 'failures', 1)
  redis.call('HSET', ik, 'last_error', err)
  if f >= hnum(ik, 'max_attempts') then
    dead(ik, id, cls, err, now); to = 'dead'
  elseif cancel then
    cancelled(ik, now); to = 'cancelled'
  else
    requeue(ik, id, cls, false, now); to = 'requeued'  -- a failing item goes to the back
  end
elseif outcome == 'preempted' then
  redis.call('HINCRBY', ik, 'preemptions', 1)
  if cancel then
    cancelled(ik, now); to = 'cancelled'
  else
    requeue(ik, id, cls, true, now); to = 'requeued'  -- resumes first: it has a checkpoint
  end
elseif outcome == 'cancelled' then
  cancelled(ik, now); to = 'cancelled'
else
  return redis.error_reply('unknown outcome ' .. outcome)
end
event(now, outcome, id, cls, {'attempt', attempt, 'token', token, 'worker', worker, 'to', to,
                              'error', err})
return {'ok', to}
"""
)

# ARGV: P, id -> 'cancelled' | 'cancelling' | 'missing' | 'already:<terminal state>'
CANCEL = (
    _PRELUDE
    + r"""
local id = ARGV[2]
local ik = k('item', id)
local st = hget(ik, 'state')
if st == '' then return 'missing' end
local cls = hget(ik, 'class')
local now = now_ms()
if st == 'queued' or st == 'requeued' then
  redis.call('LREM', k('q', cls), 0, id)
  redis.call('HSET', ik, 'cancel_requested', '1')
  cancelled(ik, now)
  event(now, 'cancel', id, cls, {'was', st})
  return 'cancelled'
end
if st == 'running' then
  -- The worker sees this at its next heartbeat and stops the command.
  redis.call('HSET', ik, 'cancel_requested', '1', 'updated_ms', s(now))
  event(now, 'cancel_requested', id, cls, {})
  return 'cancelling'
end
return 'already:' .. st
"""
)

# ARGV: P, class... -> number of expired leases handled
REAP = (
    _PRELUDE
    + r"""
local now = now_ms()
local n = 0
for i = 2, #ARGV do n = n + reap(ARGV[i], now) end
return n
"""
)
