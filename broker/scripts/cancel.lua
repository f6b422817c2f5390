-- cancel: remove a job that is still scheduled; optionally ask the worker
-- that runs a job to stop it.
--
-- KEYS[1] -> ns:{q}:scheduled   ZSET id -> ready ms
-- KEYS[2] -> ns:{q}:processing  ZSET id -> lease deadline ms
-- KEYS[3] -> ns:{q}:jobs        HASH id -> envelope
-- KEYS[4] -> ns:{q}:attempts    HASH id -> attempts spent
-- KEYS[5] -> ns:{q}:parked      ZSET id -> ready ms (jobs of paused types)
-- KEYS[6] -> ns:{q}:leases      HASH id -> fencing token
-- KEYS[7] -> ns:{q}:cancels     HASH id -> token of a running job asked to stop
-- KEYS[8] -> ns:{q}:held:       prefix of the per-type ZSETs of jobs held
--                               back by their type's concurrency cap
-- KEYS[9] -> ns:{q}:c:          prefix of the call records: KEYS[9] .. call
--                               id -> the call's first answer
-- KEYS[10] -> ns:{q}:batched   HASH id -> "<batch id>\n<ending>": a batch
--                               member's ending, until its batch counted it
-- KEYS[11] -> ns:{q}:unique     ZSET id -> remembered until ms (job.Unique)
-- KEYS[12] -> ns:{q}:keyheld    ZSET key -> its jobs held by its cap or
--                               pause (touched only for a job held there)
-- KEYS[13] -> ns:{q}:parkedtypes HASH type -> its jobs in KEYS[5] (touched
--                               only for a parked job)
-- ARGV[1] -> now ms ("" = server TIME)
-- ARGV[2] -> id
-- ARGV[3] -> cancel channel
-- ARGV[4] -> call id, chosen by the caller for this call
-- ARGV[5] -> resend window ms: how long the answer is kept under the call
--            id (0: not kept)
--
-- A job removed here ends (end_job in the prelude, ending 'x'): a batch
-- member's ending is recorded in KEYS[10] for its batch to count, and a
-- job of job.Unique with job.UniqueIncludeDead is remembered in KEYS[11].
--
-- Returns 1 cancelled (it was scheduled, parked or held: removed), 2 running and
-- asked to stop (KEYS[7][id] = its token, "<id>\n<token>" published; the
-- worker's heartbeat reads the mark when the notice is missed), -1
-- processing without a lease to tell (nothing changed), 0 not found. A call whose
-- id has a record (sent before: go-redis re-sent it after a lost reply, or
-- the caller resent it) gets the recorded answer and changes nothing.
local bad = expect({KEYS[1], 'zset', KEYS[2], 'zset', KEYS[3], 'hash', KEYS[4], 'hash', KEYS[5], 'zset',
  KEYS[6], 'hash', KEYS[7], 'hash', KEYS[10], 'hash', KEYS[11], 'zset'})
if bad then
  return bad
end
local id, cid, window = ARGV[2], ARGV[4], tonumber(ARGV[5])
local before = recorded(KEYS[9] .. cid, window)
if type(before) == 'table' then
  return before
elseif before then
  return tonumber(before)
end
local function answer(code)
  record(KEYS[9] .. cid, window, code)
  return code
end
-- Removes the job's envelope (body, when already read) and attempts, and
-- records its ending.
local function remove(body)
  local e = endings(KEYS[10], KEYS[11], now_ms())
  if body == nil then
    body = redis.call('HGET', KEYS[3], id)
  end
  local batch, u, ud = ending_of(body)
  end_job(e, id, 'x', batch, u, ud)
  redis.call('HDEL', KEYS[3], id)
  redis.call('HDEL', KEYS[4], id)
  flush_endings(e)
end
if redis.call('ZREM', KEYS[1], id) == 1 then
  remove()
  return answer(1)
end
-- Parked: counted out of its type's parked jobs (a ZSCORE first, where a
-- ZREM was before, so that KEYS[13]'s type is checked before any write
-- and a job that is not parked costs no more command).
if redis.call('ZSCORE', KEYS[5], id) then
  bad = expect({KEYS[13], 'hash'})
  if bad then
    return bad
  end
  local body = redis.call('HGET', KEYS[3], id)
  redis.call('ZREM', KEYS[5], id)
  parked_add(KEYS[13], type_of(body), -1)
  remove(body or false)
  return answer(1)
end
if redis.call('ZSCORE', KEYS[2], id) then
  local token = redis.call('HGET', KEYS[6], id)
  if not token then
    return answer(-1)
  end
  redis.call('HSET', KEYS[7], id, token)
  redis.call('PUBLISH', ARGV[3], id .. '\n' .. token)
  return answer(2)
end
-- Held by its type's cap or rate limit, or by its key's cap.
local body = redis.call('HGET', KEYS[3], id)
local t, key = type_of(body), key_of(body)
if t then
  bad = expect({KEYS[8] .. t, 'zset'})
  if bad then
    return bad
  end
end
if key then
  bad = expect({KEYS[8] .. '#' .. key, 'zset', KEYS[12], 'zset'})
  if bad then
    return bad
  end
end
if t and redis.call('ZREM', KEYS[8] .. t, id) == 1 then
  remove()
  return answer(1)
end
if key and redis.call('ZREM', KEYS[8] .. '#' .. key, id) == 1 then
  held_add(KEYS[12], key, -1)
  remove()
  return answer(1)
end
return answer(0)
