-- gcra: one timestamp, the theoretical arrival time. Hash fields: s, n
-- (TAT). Mirrors algorithm.GCRA.
ALG['gcra'] = function(hit, key, t, tau, cap, cost, st)
  if st == nil then
    local v = readhash(hit, key, 's', 'n')
    if v then st = { s = v[1], n = v[2] } end
  end
  local ts, tn = NOW_S, NOW_N
  if st and tsub(st.s, st.n, NOW_S, NOW_N) > 0 then ts, tn = st.s, st.n end
  local level = tsub(ts, tn, NOW_S, NOW_N)
  local need = cost * t
  local allowed, retry = false, 0
  if level <= tau - need then
    ts, tn = tadd(ts, tn, need)
    level = level + need
    allowed = true
  else
    retry = level - (tau - need)
  end
  local ns = { s = ts, n = tn }
  return decision(allowed, quo(tau - level, t), retry, level), ns, function()
    redis.call('HSET', key, 's', fmt(ts), 'n', fmt(tn))
    expire(key, level)
  end
end
