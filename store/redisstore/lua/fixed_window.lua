-- fixed-window: clock-aligned windows [kW, (k+1)W); admit while count +
-- cost <= L. Hash fields: k (window index), c (count). Mirrors
-- algorithm.FixedWindow.
ALG['fixed-window'] = function(hit, key, w, limit, _, cost, st)
  local k, rem = tdiv(NOW_S, NOW_N, w)
  if st == nil then
    local v = readhash(hit, key, 'k', 'c')
    if v then st = { k = v[1], c = v[2] } end
  end
  local sk, sc = k, 0
  -- A clock that went back into an earlier window stays in the last one.
  if st and st.k >= k then sk, sc = st.k, st.c end
  local toend = (sk - k) * w + (w - rem)
  local allowed, retry, reset = false, 0, 0
  if sc + cost <= limit then
    sc = sc + cost
    allowed = true
  else
    retry = toend
  end
  if sc > 0 then reset = toend end
  local ns = { k = sk, c = sc }
  return decision(allowed, limit - sc, retry, reset), ns, function()
    redis.call('HSET', key, 'k', fmt(sk), 'c', fmt(sc))
    expire(key, toend)
  end
end
