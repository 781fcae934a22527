-- leaky-queue: the leaky bucket as a queue of cap places drained one per T;
-- an admitted request departs after Delay. State: a, b = departure of the
-- last queued request (s, ns). Mirrors algorithm.LeakyQueue.
ALG['leaky-queue'] = function(t, _, cap, cost, ls, ln)
  cap = param(cap) -- p3 comes as a string (see fixed_window.lua)
  local gap = 0
  if ls ~= nil then gap = tsub(ls, ln, NOW_S, NOW_N) end
  if gap <= 0 then ls, ln, gap = NOW_S, NOW_N, 0 end
  -- Places taken: departures still ahead; one departing exactly now has left.
  local taken = quo(gap + t - 1, t)
  if taken + cost <= cap then
    ls, ln = tadd(ls, ln, cost * t)
    gap = gap + cost * t
    taken = taken + cost
    return true, cap - taken, 0, gap, gap, gap, ls, ln, 0
  end
  local rem = cap - taken -- taken can exceed cap after a clock step back
  if rem < 0 then rem = 0 end
  return false, rem, gap - (cap - cost) * t, gap, 0, gap, ls, ln, 0
end
