-- pause: pause or resume a queue (one shard of it) or a job type in it.
--
-- KEYS[1] -> ns:{q}:controls      HASH "*" -> paused at ms (the queue),
--                               "t:<type>" -> paused at ms (a type)
-- KEYS[2] -> ns:{q}:parked      ZSET id -> ready ms: due jobs of paused
--                               types, set aside by claim
-- KEYS[3] -> ns:{q}:scheduled   ZSET id -> ready ms
-- KEYS[4] -> ns:{q}:jobs        HASH id -> envelope
-- KEYS[5] -> ns:{q}:parkedtypes HASH type -> its jobs in KEYS[2] (rewritten
--                               by a resume of a type that finds parked
--                               jobs, from the bodies it reads)
-- ARGV[1] -> now ms ("" = server TIME)
-- ARGV[2] -> "*" for the queue, or the type name
-- ARGV[3] -> "1" pause, "0" resume
-- ARGV[4] -> wake channel
--
-- Returns the number of parked jobs moved back to the schedule (a resumed
-- type's), or 0. Resuming publishes a wake-up notice, so that workers that
-- found the queue paused claim at once. Pausing and resuming are
-- idempotent. Resuming a type costs O(P log N) for P parked jobs of the
-- queue (each body's type is read from its header, type_of); pausing is
-- O(1). A parked job whose type cannot be read goes back too, and one
-- whose body is gone is dropped. The resume counts the parked jobs left by
-- type as it reads them and writes KEYS[5] anew (an HKEYS, an HDEL of the
-- types with none left, and one HSET), so
-- the counts are exact after it whatever came before (jobs parked by an
-- older version, which did not count them).
local bad = expect({KEYS[1], 'hash', KEYS[2], 'zset', KEYS[3], 'zset', KEYS[4], 'hash'})
if bad then
  return bad
end
local now = now_ms()
local what, on = ARGV[2], ARGV[3] == '1'
local field = '*'
if what ~= '*' then
  field = 't:' .. what
end
if on then
  redis.call('HSETNX', KEYS[1], field, string.format('%d', now))
  return 0
end
-- The parked jobs, read before the first write so that KEYS[5]'s type is
-- checked first when there are some.
local parked = {}
if what ~= '*' then
  parked = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
  if #parked > 0 then
    bad = expect({KEYS[5], 'hash'})
    if bad then
      return bad
    end
  end
end
redis.call('HDEL', KEYS[1], field)
local moved = 0
if #parked > 0 then
  local ids = {}
  for i = 1, #parked, 2 do
    ids[#ids + 1] = parked[i]
  end
  local bodies = hmget(KEYS[4], ids)
  local back, gone, left, counts = {}, {}, {}, {}
  for k = 1, #ids do
    local body = bodies[k]
    if not body then
      gone[#gone + 1] = ids[k]
    else
      local t = type_of(body)
      if not t or t == what then
        back[#back + 1] = finite(parked[2 * k], now)
        back[#back + 1] = ids[k]
        gone[#gone + 1] = ids[k]
      else
        if not left[t] then
          left[t] = 0
          counts[#counts + 1] = t
        end
        left[t] = left[t] + 1
      end
    end
  end
  local stale = {}
  for _, t in ipairs(redis.call('HKEYS', KEYS[5])) do
    if not left[t] then
      stale[#stale + 1] = t
    end
  end
  if #stale > 0 then
    call_chunked('HDEL', KEYS[5], stale)
  end
  local fields = {}
  for _, t in ipairs(counts) do
    fields[#fields + 1] = t
    fields[#fields + 1] = string.format('%d', left[t])
  end
  if #fields > 0 then
    call_chunked('HSET', KEYS[5], fields)
  end
  if #gone > 0 then
    call_chunked('ZREM', KEYS[2], gone)
  end
  if #back > 0 then
    call_chunked('ZADD', KEYS[3], back)
    moved = #back / 2
  end
end
redis.call('PUBLISH', ARGV[4], now)
return moved
