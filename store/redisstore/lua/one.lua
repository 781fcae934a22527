-- The driver of a call of one hit, for every algorithm but the sliding log:
-- read the state, decide, write it when admitted. No loop, no pcall, no
-- table but the reply. KEYS[1] is the hit's key; ARGV is laid out as for
-- driver.lua (one hit): clock, s, n, commit, TTL floor, then algorithm,
-- cost, p1, p2, p3. Reply: the same six integers as driver.lua's (and five
-- more on a refusal of a stored state, below). A key of the wrong type fails with Redis's own
-- WRONGTYPE error, which the store reports naming the hit.
local key = KEYS[1]
local f = ALG[ARGV[6]]
if f == nil then
  return redis.error_reply('ERR portero hit 1: algorithm ' .. tostring(ARGV[6]) .. ' is not in this script')
end
local raw = redis.call('GET', key)
local a, b, c
if raw then
  if #raw ~= STATE_LEN then
    return redis.error_reply('ERR portero hit 1: WRONGTYPE the key holds a string that is not Portero state')
  end
  a, b, c = struct.unpack('ddd', raw)
end
local allowed, rem, retry, reset, delay, ttl, na, nb, nc = f(tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[7]), a, b, c)
if retry < 0 then retry = 0 end
if reset < 0 then reset = 0 end
if allowed then
  if ARGV[4] == '1' then save(key, ttl, na, nb, nc) end
  return { 1, 1, rem, 0, reset, delay }
end
-- A refusal writes nothing. It also returns the state as stored (not
-- brought up to date: a clock that goes back later must see what Redis
-- holds) and the instant of the decision, from which the store's
-- over-limit cache decides later calls locally as this script would.
if raw then
  return { 0, 0, rem, retry, reset, 0, a, b, c, NOW_S, NOW_N }
end
return { 0, 0, rem, retry, reset, 0 }
