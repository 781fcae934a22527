-- one is the driver of a call of one hit, for every algorithm but the
-- sliding log (decide_one is what it shares with hit, below): read the
-- state, decide, write it when admitted. No loop, no pcall, no table but the
-- reply. KEYS[1] is the hit's key; ARGV is laid out
-- as for driver.lua (one hit): clock, s, n, commit, TTL floor, then
-- algorithm, cost, p1, p2, p3. Reply: the same six integers as driver.lua's.
-- A key of the wrong type fails with Redis's own WRONGTYPE error, which the store reports
-- naming the hit.
local function decide_one(key, alg, cost, p1, p2, p3, commit)
  local f = ALG[alg]
  if f == nil then
    return redis.error_reply('ERR portero hit 1: algorithm ' .. tostring(alg) .. ' is not in this script')
  end
  local raw = redis.call('GET', key)
  local a, b, c
  if raw then
    if #raw ~= STATE_LEN then
      return redis.error_reply('ERR portero hit 1: ' .. NOT_STATE)
    end
    a, b, c = struct.unpack('ddd', raw)
  end
  local allowed, rem, retry, reset, delay, ttl, na, nb, nc = f(p1, p2, p3, cost, a, b, c)
  if retry < 0 then retry = 0 end
  if reset < 0 then reset = 0 end
  if allowed then
    if commit then save(key, ttl, na, nb, nc) end
    return { 1, 1, rem, 0, reset, delay }
  end
  return { 0, 0, rem, retry, reset, 0 } -- a refusal writes nothing
end

local function one(KEYS, ARGV)
  begin(ARGV)
  return decide_one(KEYS[1], ARGV[6], num(ARGV[7]), param(ARGV[8]), param(ARGV[9]), ARGV[10], ARGV[4] == '1')
end

-- hit is one for the common call, the server's clock, counted, with no TTL
-- floor, given only what varies: ARGV is algorithm, cost, p1, p2 and, for
-- the leaky queue alone, p3. Each argument costs Redis about a thousand
-- instructions (an object, then a Lua string), as much as a strtod.
local function hit(KEYS, ARGV)
  local t = redis.call('TIME')
  NOW_S, NOW_N, MIN_TTL = tonumber(t[1]), tonumber(t[2]) * 1000, 0
  return decide_one(KEYS[1], ARGV[1], num(ARGV[2]), param(ARGV[3]), param(ARGV[4]), ARGV[5], true)
end
