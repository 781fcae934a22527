-- take is the driver of a leased budget (store/budget): take between need
-- and want units of one key in one step. It mirrors algorithm.Take: what
-- stands now is the algorithm's decision of cost 0; the grant is
-- algorithm.Grant (at least need, at most want, beyond need at most an
-- eighth of what is left; 0 when fewer than need are left); the state
-- after is the algorithm's after one request of the units granted.
--
-- KEYS[1] is the key. ARGV 1-10 as for one.lua, the cost being need, then
-- 11 want (the Go side has cut it to the rule's largest cost). Reply: the
-- units taken, then remaining, retry-after, reset-after and delay (a
-- calendar quota's time left in its period) as one.lua's: of the request
-- of the units taken, or of need when nothing was taken.
local function take(KEYS, ARGV)
  begin(ARGV)
  local key, f = KEYS[1], ALG[ARGV[6]]
  if f == nil then
    return redis.error_reply('ERR portero hit 1: algorithm ' .. tostring(ARGV[6]) .. ' is not in this script')
  end
  local err, a, b, c = read_state(key)
  if err then return err end
  local need, want = tonumber(ARGV[7]), tonumber(ARGV[11])
  local p1, p2, p3 = param(ARGV[8]), param(ARGV[9]), ARGV[10]
  local _, rem = f(p1, p2, p3, 0, a, b, c)
  local k = 0
  if rem >= need then
    k = math.floor(rem / 8)
    if k > want then k = want end
    if k < need then k = need end
  end
  if k == 0 then
    local _, left, retry, reset, delay = f(p1, p2, p3, need, a, b, c)
    if retry < 0 then retry = 0 end
    if reset < 0 then reset = 0 end
    if delay < 0 then delay = 0 end
    return { 0, left, retry, reset, delay }
  end
  local _, left, _, reset, delay, ttl, na, nb, nc = f(p1, p2, p3, k, a, b, c)
  save(key, ttl, na, nb, nc)
  if reset < 0 then reset = 0 end
  if delay < 0 then delay = 0 end
  return { k, left, 0, reset, delay }
end
