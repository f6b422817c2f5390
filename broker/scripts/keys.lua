-- keys: the keys of one shard holding the most jobs back, and why.
-- read-only
--
-- KEYS[1] -> ns:{q}:controls    HASH "k" -> the default key cap
--                               "share/total" ("-" when none)
-- KEYS[2] -> ns:{q}:keyheld     ZSET key -> how many of its jobs its cap or
--                               pause holds, '#' -> their total
-- KEYS[3] -> ns:{q}:keyrun      HASH key -> its jobs leased under its cap
-- KEYS[4] -> ns:{q}:keycaps     HASH key -> its own cap "share/total"
-- KEYS[5] -> ns:{q}:keypaused   HASH key -> paused at ms
-- KEYS[6] -> ns:{q}:keyrates    HASH key -> its own rate limit
-- KEYS[7] -> ns:{q}:keywait     ZSET key -> ms of its next token (keys
--                               holding jobs for want of one)
-- KEYS[8] -> ns:{q}:keyturn     ZSET key -> its place in the fair turns
-- KEYS[9] -> ns:{q}:keyweights  HASH key -> its weight in the fair turns
--                               (only keys not of weight 1)
-- ARGV[1] -> now ms (unused)
-- ARGV[2] -> n: how many of the keys holding the most to list (0: none)
-- ARGV[3..] -> keys to report as well (another shard's top keys)
--
-- Returns {default cap or "", keys holding jobs, paused keys, rows,
-- default rate limit or ""}: rows is a flat list of key, held, running,
-- own cap ("" none), paused (1/0), own rate limit ("" none), next token
-- ms (-1 when it waits for none), waiting for a turn (1/0), weight in
-- the fair turns (1 unless set),
-- for the n keys of KEYS[2] with the highest counts (ZREVRANGE, ties by
-- key, last first), the keys of ARGV[3..], and, while fewer than n were
-- listed, paused keys holding nothing (one HSCAN page of n). Cost:
-- O(log K + n) for K keys holding, plus O(1) per key reported (five
-- HMGET and three ZMSCORE): bounded by n, whatever K is.
local bad = expect({KEYS[1], 'hash', KEYS[2], 'zset', KEYS[3], 'hash', KEYS[4], 'hash', KEYS[5], 'hash', KEYS[6], 'hash', KEYS[7], 'zset', KEYS[8], 'zset', KEYS[9], 'hash'})
if bad then
  return bad
end
local n = tonumber(ARGV[2]) or 0
local list, seen = {}, {}
local function add(key)
  if not seen[key] then
    seen[key] = true
    list[#list + 1] = key
  end
end
-- '#' is the total, the highest score: one more, skipped.
if n > 0 then
  for _, key in ipairs(redis.call('ZREVRANGE', KEYS[2], 0, n)) do
    if key ~= '#' and #list < n then
      add(key)
    end
  end
end
for i = 3, #ARGV do
  add(ARGV[i])
end
local paused_n = redis.call('HLEN', KEYS[5])
if n > 0 and #list < n and paused_n > 0 then
  local page = redis.call('HSCAN', KEYS[5], 0, 'COUNT', n)
  local fields = page[2]
  for i = 1, #fields, 2 do
    if #list < n then
      add(fields[i])
    end
  end
end
local rows = {}
if #list > 0 then
  local held, wait, turn = {}, {}, {}
  for i = 1, #list, CHUNK do
    local last = math.min(i + CHUNK - 1, #list)
    local h = redis.call('ZMSCORE', KEYS[2], unpack(list, i, last))
    local w = redis.call('ZMSCORE', KEYS[7], unpack(list, i, last))
    local u = redis.call('ZMSCORE', KEYS[8], unpack(list, i, last))
    for j = 1, #h do
      held[i + j - 1] = h[j]
      wait[i + j - 1] = w[j]
      turn[i + j - 1] = u[j]
    end
  end
  local run, own, paused, rate = hmget(KEYS[3], list), hmget(KEYS[4], list), hmget(KEYS[5], list), hmget(KEYS[6], list)
  local weight = hmget(KEYS[9], list)
  for j, key in ipairs(list) do
    rows[#rows + 1] = key
    rows[#rows + 1] = tonumber(held[j]) or 0
    rows[#rows + 1] = tonumber(run[j]) or 0
    rows[#rows + 1] = own[j] or ''
    rows[#rows + 1] = paused[j] and 1 or 0
    rows[#rows + 1] = rate[j] or ''
    rows[#rows + 1] = tonumber(wait[j]) or -1
    rows[#rows + 1] = turn[j] and 1 or 0
    rows[#rows + 1] = tonumber(weight[j]) or 1
  end
end
local default = redis.call('HGET', KEYS[1], 'k')
if not default or default == '-' then
  default = ''
end
local holding = redis.call('ZCARD', KEYS[2])
if holding > 0 then
  holding = holding - 1 -- the total
end
local rate_default = redis.call('HGET', KEYS[1], 'kr')
if not rate_default or rate_default == '-' then
  rate_default = ''
end
return {default, holding, paused_n, rows, rate_default}
