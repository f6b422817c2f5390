-- reschedule: move a scheduled job to a new ready time.
--
-- KEYS[1] -> ns:{q}:scheduled   ZSET id -> ready ms
-- KEYS[2] -> ns:{q}:processing  ZSET id -> lease deadline ms
-- KEYS[3] -> ns:{q}:parked      ZSET id -> ready ms (jobs of paused types:
--                               they move there, and stay parked)
-- KEYS[4] -> ns:{q}:held:       prefix of the per-type ZSETs of jobs held
--                               back by their type's concurrency cap (a
--                               held job moved goes back to KEYS[1])
-- KEYS[5] -> ns:{q}:jobs        HASH id -> envelope (read for a held job's
--                               type)
-- KEYS[6] -> ns:{q}:c:          prefix of the call records: KEYS[6] .. call
--                               id -> the call's first answer
-- KEYS[7] -> ns:{q}:keyheld     ZSET key -> its jobs held by its cap or
--                               pause (touched only for a job held there)
-- ARGV[1] -> now ms ("" = server TIME)
-- ARGV[2] -> id
-- ARGV[3] -> at ms (0 = use the delay)
-- ARGV[4] -> delay µs
-- ARGV[5] -> wake channel
-- ARGV[6] -> call id, chosen by the caller for this call
-- ARGV[7] -> resend window ms: how long the answer is kept under the call
--            id (0: not kept)
--
-- Returns {now µs, code}: code is the new ready time in ms, -1 in progress
-- (nothing changed), 0 not found. A call whose id has a record (sent
-- before: go-redis re-sent it after a lost reply, or the caller resent it)
-- gets the recorded code and changes nothing.
local bad = expect({KEYS[1], 'zset', KEYS[2], 'zset', KEYS[3], 'zset', KEYS[5], 'hash'})
if bad then
  return bad
end
local now = now_us()
local id, cid, window = ARGV[2], ARGV[6], tonumber(ARGV[7])
local before = recorded(KEYS[6] .. cid, window)
if type(before) == 'table' then
  return before
elseif before then
  return {now, tonumber(before)}
end
local function answer(code)
  record(KEYS[6] .. cid, window, code)
  return {now, code}
end
if redis.call('ZSCORE', KEYS[1], id) then
  local ready = tonumber(ARGV[3])
  if ready <= 0 then
    ready = ready_after(now, tonumber(ARGV[4]))
  end
  wake_if_earliest(KEYS[1], ARGV[5], ready, ms_of(now))
  redis.call('ZADD', KEYS[1], 'XX', ready, id)
  return answer(ready)
end
if redis.call('ZSCORE', KEYS[3], id) then
  local ready = tonumber(ARGV[3])
  if ready <= 0 then
    ready = ready_after(now, tonumber(ARGV[4]))
  end
  redis.call('ZADD', KEYS[3], 'XX', ready, id)
  return answer(ready)
end
if redis.call('ZSCORE', KEYS[2], id) then
  return answer(-1)
end
-- Held by its type's cap or rate limit, or by its key's cap.
local body = redis.call('HGET', KEYS[5], id)
local t, key = type_of(body), key_of(body)
if t then
  bad = expect({KEYS[4] .. t, 'zset'})
  if bad then
    return bad
  end
end
if key then
  bad = expect({KEYS[4] .. '#' .. key, 'zset', KEYS[7], 'zset'})
  if bad then
    return bad
  end
end
local moved = false
if t and redis.call('ZREM', KEYS[4] .. t, id) == 1 then
  moved = true
elseif key and redis.call('ZREM', KEYS[4] .. '#' .. key, id) == 1 then
  moved = true
  held_add(KEYS[7], key, -1)
end
if moved then
  do
    local ready = tonumber(ARGV[3])
    if ready <= 0 then
      ready = ready_after(now, tonumber(ARGV[4]))
    end
    wake_if_earliest(KEYS[1], ARGV[5], ready, ms_of(now))
    redis.call('ZADD', KEYS[1], ready, id)
    return answer(ready)
  end
end
return answer(0)
