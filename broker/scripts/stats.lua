-- stats: the state of one queue, read at one instant.
-- read-only
--
-- KEYS[1] -> ns:{q}:scheduled   ZSET id -> ready ms
-- KEYS[2] -> ns:{q}:processing  ZSET id -> lease deadline ms
-- KEYS[3] -> ns:{q}:dead:index  ZSET id -> died-at ms
-- KEYS[4] -> ns:{q}:counts      HASH counter -> n (expired_dropped, the
--                               dead_trimmed_* counters)
-- KEYS[5] -> ns:{q}:controls    HASH "*" / "t:<type>" -> paused at ms,
--                               "r" / "r:<type>" -> rate limit
-- KEYS[6] -> ns:{q}:parked      ZSET id -> ready ms (jobs of paused types)
-- KEYS[7] -> ns:{q}:held:       prefix of the per-type ZSETs of jobs held
--                               back by their type's concurrency cap or
--                               rate limit
-- KEYS[8] -> ns:{q}:keyheld     ZSET key -> how many of its jobs its
--                               per-key cap or pause holds (in KEYS[7] ..
--                               '#' .. key), '#' -> their total
-- KEYS[9] -> ns:{q}:parkedtypes HASH type -> its jobs in KEYS[6] (read only
--                               when some job is parked)
-- ARGV[1] -> now ms ("" = server TIME)
--
-- Returns {now, scheduled, due, processing, dead, oldest due ready ms (-1 when
-- none is due), next ready ms in the future (-1 when none), expired jobs
-- dropped, paused (1 or 0), parked jobs, {paused types}, {type ("" for
-- the queue), rate limit, ...}, {type ("" for the queue), "share/total",
-- ...}, held jobs (by caps), {type, jobs held by its rate limit, ...},
-- {dead records trimmed by the cap, by age, trimmed but not kept for the
-- workers' hook}, {type, jobs held by its cap, ...}, jobs held by per-key
-- caps (counted in held too), {type, its parked jobs, ...}, fair turns
-- between keys on (1 or 0)}.
-- Jobs held by a rate limit count in scheduled and due, and the oldest of
-- them in the oldest due ready time. Every count is O(1) or O(log N) (one
-- ZCARD per capped type, a ZCARD and a ZRANGE per rate-limited type), but
-- the jobs held by per-key caps and pauses, counted in held: their total,
-- member '#' of KEYS[8] (one ZSCORE); and the parked jobs by type, one
-- HGETALL of KEYS[9], O(paused types), when some job is parked.
local bad = expect({KEYS[1], 'zset', KEYS[2], 'zset', KEYS[3], 'zset', KEYS[4], 'hash', KEYS[5], 'hash', KEYS[6], 'zset'})
if bad then
  return bad
end
local now = now_ms()
local scheduled = redis.call('ZCARD', KEYS[1])
local due = redis.call('ZCOUNT', KEYS[1], '-inf', now)
local oldest, next = -1, -1
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if first[2] and tonumber(first[2]) <= now then
  oldest = finite(first[2], now)
end
local upcoming = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
if upcoming[2] then
  next = finite(upcoming[2], -1)
end
local counters = redis.call('HMGET', KEYS[4], 'expired_dropped', 'dead_trimmed_cap', 'dead_trimmed_age', 'dead_trimmed_unarchived')
for i = 1, 4 do
  if counters[i] and is_int(counters[i]) then
    counters[i] = tonumber(counters[i])
  else
    counters[i] = 0
  end
end
local dropped = counters[1]
local paused, types, rates, caps, held, fair = 0, {}, {}, {}, 0, 0
local controls = redis.call('HGETALL', KEYS[5])
local capped, limited = {}, {}
for i = 1, #controls, 2 do
  local f = controls[i]
  if f == '*' then
    paused = 1
  elseif f == 'r' or string.sub(f, 1, 2) == 'r:' then
    rates[#rates + 1] = string.sub(f, 3)
    rates[#rates + 1] = controls[i + 1]
    if f ~= 'r' then
      limited[string.sub(f, 3)] = true
    end
  elseif f == 'k' or f == 'kp' or f == 'kr' or f == 'kw' then
    -- A per-key cap, paused keys or per-key rate limits: their held jobs
    -- are counted below, from KEYS[8]. Key weights hold nothing.
  elseif f == 'kf' then
    fair = 1
  elseif f == 'c' or string.sub(f, 1, 2) == 'c:' then
    local t = string.sub(f, 3)
    caps[#caps + 1] = t
    caps[#caps + 1] = controls[i + 1]
    if t ~= '' then
      capped[#capped + 1] = t
    end
  else
    types[#types + 1] = string.sub(f, 3)
  end
end
-- Jobs held by a type's rate limit are due and waiting (counted in
-- scheduled and due, the oldest in the lateness); a held set of a type
-- with both a cap and a rate limit counts here. Those held by a cap only
-- are counted apart.
local by_rate = {}
for t in pairs(limited) do
  if expect({KEYS[7] .. t, 'zset'}) == nil then
    local c = redis.call('ZCARD', KEYS[7] .. t)
    if c > 0 then
      scheduled = scheduled + c
      due = due + c
      by_rate[#by_rate + 1] = t
      by_rate[#by_rate + 1] = c
      local head = redis.call('ZRANGE', KEYS[7] .. t, 0, 0, 'WITHSCORES')
      local at = finite(head[2], now)
      if at <= now and (oldest < 0 or at < oldest) then
        oldest = at
      end
    end
  end
end
local by_cap = {}
for _, t in ipairs(capped) do
  if not limited[t] and expect({KEYS[7] .. t, 'zset'}) == nil then
    local c = redis.call('ZCARD', KEYS[7] .. t)
    held = held + c
    if c > 0 then
      by_cap[#by_cap + 1] = t
      by_cap[#by_cap + 1] = c
    end
  end
end
local by_key = 0
if expect({KEYS[8], 'zset'}) == nil then
  by_key = tonumber(redis.call('ZSCORE', KEYS[8], '#')) or 0
end
held = held + by_key
local parked, by_type = redis.call('ZCARD', KEYS[6]), {}
if parked > 0 and expect({KEYS[9], 'hash'}) == nil then
  local all = redis.call('HGETALL', KEYS[9])
  for i = 1, #all, 2 do
    if is_int(all[i + 1]) and tonumber(all[i + 1]) > 0 then
      by_type[#by_type + 1] = all[i]
      by_type[#by_type + 1] = tonumber(all[i + 1])
    end
  end
end
return {now, scheduled, due, redis.call('ZCARD', KEYS[2]), redis.call('ZCARD', KEYS[3]), oldest, next, tonumber(dropped),
  paused, parked, types, rates, caps, held, by_rate, {counters[2], counters[3], counters[4]}, by_cap, by_key, by_type, fair}
