-- take_trimmed: remove and return the oldest dead records that trims kept
-- for the workers' hook (trim_dead in the prelude).
--
-- KEYS[1] -> ns:{q}:dead:trimmed LIST "<cap|age>\n<died ms>\n<trimmed
--                                ms>\n<record>", oldest first
-- ARGV[1] -> now ms ("" = server TIME; unused)
-- ARGV[2] -> the most records to take
--
-- Returns the records taken, oldest first. A record is returned by one call
-- only: what a call took is gone from the list, whatever becomes of the
-- reply (at most once).
local bad = expect({KEYS[1], 'list'})
if bad then
  return bad
end
local n = tonumber(ARGV[2])
if not n or n < 1 then
  return redis.error_reply('ERR delayq: take_trimmed: count ' .. tostring(ARGV[2]) .. ' is not positive; nothing was changed')
end
local out = redis.call('LRANGE', KEYS[1], 0, n - 1)
if #out > 0 then
  redis.call('LTRIM', KEYS[1], #out, -1)
end
return out
