-- pause: pause or resume a queue (one shard of it) or a job type in it.
--
-- KEYS[1] -> ns:{q}:controls      HASH "*" -> paused at ms (the queue),
--                               "t:<type>" -> paused at ms (a type)
-- KEYS[2] -> ns:{q}:parked      ZSET id -> ready ms: due jobs of paused
--                               types, set aside by claim
-- KEYS[3] -> ns:{q}:scheduled   ZSET id -> ready ms
-- KEYS[4] -> ns:{q}:jobs        HASH id -> envelope
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
-- O(1). A parked job whose type cannot be read goes back too.
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
redis.call('HDEL', KEYS[1], field)
local moved = 0
if what ~= '*' then
  local parked = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
  local ids = {}
  for i = 1, #parked, 2 do
    ids[#ids + 1] = parked[i]
  end
  local bodies = hmget(KEYS[4], ids)
  local back, gone = {}, {}
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
      end
    end
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
