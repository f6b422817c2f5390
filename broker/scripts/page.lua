-- page: one page of the scheduled or the processing set, in score order
-- (ready time or lease deadline), with each job's envelope and attempts.
-- read-only
--
-- KEYS[1] -> ns:{q}:scheduled or ns:{q}:processing  ZSET id -> ms
-- KEYS[2] -> ns:{q}:jobs        HASH id -> envelope
-- KEYS[3] -> ns:{q}:attempts    HASH id -> attempts spent
-- ARGV[1] -> now ms ("" = server TIME)
-- ARGV[2] -> cursor score in ms ("" = start at the first job)
-- ARGV[3] -> cursor id: the page starts after (score, id) in (score, id)
--            order, the order Redis keeps equal scores in
-- ARGV[4] -> the most jobs to return (> 0)
--
-- Returns {now, more, jobs}: more is 1 when jobs follow this page; jobs is a
-- flat list of id, score ms, attempts, envelope ("" when it is missing).
-- O(log N + page) when the cursor's job has not moved; otherwise the jobs
-- that share the cursor's score are stepped over as well. Nothing changes.
-- Redis orders equal scores by memcmp of the members; Lua's own string
-- comparison follows the server's locale, so compare bytes here.
local bad = expect({KEYS[1], 'zset', KEYS[2], 'hash', KEYS[3], 'hash'})
if bad then
  return bad
end
local function at_or_before(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x < y
    end
  end
  return #a <= #b
end

local now = now_ms()
local limit = tonumber(ARGV[4])
local start = 0
if ARGV[2] ~= '' then
  local score, after = tonumber(ARGV[2]), ARGV[3]
  local current = redis.call('ZSCORE', KEYS[1], after)
  if current and tonumber(current) == score then
    start = redis.call('ZRANK', KEYS[1], after) + 1
  else
    -- The cursor's job moved or left: start at the first job of its score
    -- and step over those that sort before the cursor.
    start = redis.call('ZCOUNT', KEYS[1], '-inf', '(' .. score)
    local done = false
    while not done do
      local batch = redis.call('ZRANGE', KEYS[1], start, start + 99, 'WITHSCORES')
      if #batch == 0 then
        break
      end
      for i = 1, #batch, 2 do
        if tonumber(batch[i + 1]) == score and at_or_before(batch[i], after) then
          start = start + 1
        else
          done = true
          break
        end
      end
    end
  end
end
local entries = redis.call('ZRANGE', KEYS[1], start, start + limit, 'WITHSCORES')
local more = 0
if #entries > 2 * limit then
  more = 1
end
local jobs = {}
for i = 1, math.min(#entries, 2 * limit), 2 do
  local id = entries[i]
  jobs[#jobs + 1] = id
  jobs[#jobs + 1] = tonumber(entries[i + 1])
  jobs[#jobs + 1] = tonumber(redis.call('HGET', KEYS[3], id) or '0')
  jobs[#jobs + 1] = redis.call('HGET', KEYS[2], id) or ''
end
return {now, more, jobs}
