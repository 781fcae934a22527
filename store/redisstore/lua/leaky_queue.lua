-- leaky-queue: the leaky bucket as a queue of cap places drained one per T;
-- an admitted request departs after Delay. Hash fields: s, n (departure of
-- the last queued request). Mirrors algorithm.LeakyQueue.
ALG['leaky-queue'] = function(hit, key, t, tau, cap, cost, st)
  if st == nil then
    local v = readhash(hit, key, 's', 'n')
    if v then st = { s = v[1], n = v[2] } end
  end
  local ls, ln = NOW_S, NOW_N
  if st and tsub(st.s, st.n, NOW_S, NOW_N) > 0 then ls, ln = st.s, st.n end
  local gap = tsub(ls, ln, NOW_S, NOW_N)
  -- Places taken: departures still ahead; one departing exactly now has left.
  local taken = quo(gap + t - 1, t)
  local allowed, retry, delay = false, 0, 0
  if taken + cost <= cap then
    ls, ln = tadd(ls, ln, cost * t)
    gap = gap + cost * t
    taken = taken + cost
    allowed = true
    delay = gap
  else
    retry = gap - (cap - cost) * t
  end
  local ns = { s = ls, n = ln }
  return decision(allowed, cap - taken, retry, gap, delay), ns, function()
    redis.call('HSET', key, 's', fmt(ls), 'n', fmt(ln))
    expire(key, gap)
  end
end
