-- token-bucket: lazy refill, credit = tokens*T in ns, a new key starts
-- full. Hash fields: c (credit), s, n (last update). Mirrors
-- algorithm.TokenBucket.
ALG['token-bucket'] = function(hit, key, t, tau, cap, cost, st)
  if st == nil then
    local v = readhash(hit, key, 'c', 's', 'n')
    if v then st = { c = v[1], s = v[2], n = v[3] } end
  end
  local credit, ls, ln = tau, NOW_S, NOW_N
  if st then
    credit, ls, ln = st.c, st.s, st.n
    -- Refill; a clock that went back refills nothing and moves nothing.
    local e = nonneg(tsub(NOW_S, NOW_N, ls, ln))
    if e >= tau - credit then credit = tau else credit = credit + e end
    if e > 0 then ls, ln = NOW_S, NOW_N end
  end
  local need = cost * t
  local allowed, retry = false, 0
  if credit >= need then
    credit = credit - need
    allowed = true
  else
    retry = need - credit
  end
  local ns = { c = credit, s = ls, n = ln }
  local ttl = tsub(ls, ln, NOW_S, NOW_N) + (tau - credit)
  return decision(allowed, quo(credit, t), retry, tau - credit), ns, function()
    redis.call('HSET', key, 'c', fmt(credit), 's', fmt(ls), 'n', fmt(ln))
    expire(key, ttl)
  end
end
