-- dead_delete: remove dead records.
--
-- KEYS[1] -> ns:{q}:dead        HASH id -> dead record
-- KEYS[2] -> ns:{q}:dead:index  ZSET id -> died-at ms
-- KEYS[3] -> ns:{q}:c:          prefix of the call records: KEYS[3] .. call
--                               id -> the call's first answer
-- ARGV[1] -> now ms (unused)
-- ARGV[2] -> call id, chosen by the caller for this call
-- ARGV[3] -> resend window ms: how long the answer is kept under the call
--            id (0: not kept)
-- ARGV[4..] -> ids
--
-- Returns one integer per id: 1 deleted, 0 not found. A call whose id has
-- a record (sent before: go-redis re-sent it after a lost reply, or the
-- caller resent it) gets the recorded answer and changes nothing.
local bad = expect({KEYS[1], 'hash', KEYS[2], 'zset'})
if bad then
  return bad
end
local cid, window = ARGV[2], tonumber(ARGV[3])
local before = recorded(KEYS[3] .. cid, window)
if type(before) == 'table' then
  return before
elseif before then
  local out = {}
  for i = 1, #before do
    out[i] = tonumber(string.sub(before, i, i))
  end
  return out
end
local out = {}
for i = 4, #ARGV do
  redis.call('ZREM', KEYS[2], ARGV[i])
  out[#out + 1] = redis.call('HDEL', KEYS[1], ARGV[i])
end
record(KEYS[3] .. cid, window, table.concat(out))
return out
