-- batch_clear: drop the endings of batch members once their batch has
-- counted them.
--
-- KEYS[1] -> ns:{q}:batched  HASH id -> "<batch id>\n<s|d>"
-- ARGV[1] -> now ms ("" = server TIME)
-- ARGV[2+2i], ARGV[3+2i] -> id and the record that was counted
--
-- A record is dropped only when it is still the one counted: an ending
-- written since (the member was redriven and ended again) stays for the
-- next move. Returns the number dropped.
local bad = expect({KEYS[1], 'hash'})
if bad then
  return bad
end
local n = 0
for i = 2, #ARGV, 2 do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i + 1] then
    n = n + redis.call('HDEL', KEYS[1], ARGV[i])
  end
end
return n
