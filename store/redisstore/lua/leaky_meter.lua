-- leaky-meter: the leaky bucket as a meter, level*T in ns draining at r.
-- Hash fields: l (level), s, n (last update). Mirrors algorithm.LeakyMeter.
ALG['leaky-meter'] = function(hit, key, t, tau, cap, cost, st)
  if st == nil then
    local v = readhash(hit, key, 'l', 's', 'n')
    if v then st = { l = v[1], s = v[2], n = v[3] } end
  end
  local level, ls, ln = 0, NOW_S, NOW_N
  if st then
    level, ls, ln = st.l, st.s, st.n
    local e = nonneg(tsub(NOW_S, NOW_N, ls, ln))
    if e >= level then level = 0 else level = level - e end
    if e > 0 then ls, ln = NOW_S, NOW_N end
  end
  local need = cost * t
  local allowed, retry = false, 0
  if level <= tau - need then
    level = level + need
    allowed = true
  else
    retry = level - (tau - need)
  end
  local ns = { l = level, s = ls, n = ln }
  local ttl = tsub(ls, ln, NOW_S, NOW_N) + level
  return decision(allowed, quo(tau - level, t), retry, level), ns, function()
    redis.call('HSET', key, 'l', fmt(level), 's', fmt(ls), 'n', fmt(ln))
    expire(key, ttl)
  end
end
