-- fixed-window-anchored: a window of W starts at the first request of an
-- absent or expired key (the INCR + EXPIRE form). Hash fields: s, n (start),
-- c (count). Mirrors algorithm.AnchoredWindow.
ALG['fixed-window-anchored'] = function(hit, key, w, limit, _, cost, st)
  if st == nil then
    local v = readhash(hit, key, 's', 'n', 'c')
    if v then st = { s = v[1], n = v[2], c = v[3] } end
  end
  local ss, sn, sc = NOW_S, NOW_N, 0
  if st and tsub(NOW_S, NOW_N, st.s, st.n) < w then ss, sn, sc = st.s, st.n, st.c end
  local toend = w - tsub(NOW_S, NOW_N, ss, sn)
  local allowed, retry, reset = false, 0, 0
  if sc + cost <= limit then
    sc = sc + cost
    allowed = true
  else
    retry = toend
  end
  if sc > 0 then reset = toend end
  local ns = { s = ss, n = sn, c = sc }
  return decision(allowed, limit - sc, retry, reset), ns, function()
    redis.call('HSET', key, 's', fmt(ss), 'n', fmt(sn), 'c', fmt(sc))
    expire(key, toend)
  end
end
