-- enqueue: store new jobs and schedule them.
--
-- KEYS[1] -> ns:{q}:scheduled   ZSET id -> ready ms
-- KEYS[2] -> ns:{q}:jobs        HASH id -> envelope
-- ARGV[1] -> now ms ("" = server TIME)
-- ARGV[2] -> wake channel
-- ARGV[3+4i .. 6+4i] -> id, envelope, at ms (0 = use delay), delay ms
--
-- Returns one integer per job: its ready time in ms, or -1 when a job with
-- that id is still pending (the stored one is left unchanged).
local now = now_ms()
local out = {}
for i = 3, #ARGV, 4 do
  local id, body = ARGV[i], ARGV[i + 1]
  local at, delay = tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3])
  if redis.call('HSETNX', KEYS[2], id, body) == 0 then
    out[#out + 1] = -1
  else
    local ready = at
    if ready <= 0 then
      ready = now + delay
    end
    wake_if_earliest(KEYS[1], ARGV[2], ready, now)
    redis.call('ZADD', KEYS[1], ready, id)
    out[#out + 1] = ready
  end
end
return out
