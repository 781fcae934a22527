-- leaky-queue: the leaky bucket as a queue of cap places drained one per T;
-- an admitted request departs after Delay. bound (p2, ns; 0 for none) is the
-- hit's MaxDelay: a later departure is refused. State: a, b = departure of
-- the last queued request (s, ns). Mirrors algorithm.LeakyQueue.DecideWithin.
ALG['leaky-queue'] = function(t, bound, cap, cost, ls, ln)
  cap = param(cap) -- p3 comes as a string (see fixed_window.lua)
  local gap = 0
  if ls ~= nil then gap = tsub(ls, ln, NOW_S, NOW_N) end
  if gap <= 0 then ls, ln, gap = NOW_S, NOW_N, 0 end
  -- Places taken: departures still ahead; one departing exactly now has left.
  local taken = quo(gap + t - 1, t)
  local wait = gap - (cap - cost) * t
  if bound > 0 and gap + cost * t - bound > wait then wait = gap + cost * t - bound end
  if wait <= 0 then
    ls, ln = tadd(ls, ln, cost * t)
    gap = gap + cost * t
    taken = taken + cost
    return true, cap - taken, 0, gap, gap, gap, ls, ln, 0
  end
  local rem = cap - taken -- taken can exceed cap after a clock step back
  if rem < 0 then rem = 0 end
  return false, rem, wait, gap, 0, gap, ls, ln, 0
end
