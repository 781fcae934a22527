-- Settlement after the fact: one adjustment of one key, assembled after the
-- prelude alone. It mirrors algorithm.Adjuster (and SlidingLog.Charge for
-- the log): a charge (delta > 0) adds delta units at now unconditionally,
-- never leaving more than twice the limit used; a refund (delta < 0) gives
-- back -delta units (a queue's places) taken by the decision at instant AT
-- while they still count. It decides nothing and returns 1.
--
-- KEYS[1] is the key. ARGV: 1, 2, 3 and 5 as for the drivers (clock,
-- caller's instant, TTL floor); 6 the script function (an algorithm, or
-- fixed-window-calendar); 7 delta (the Go side has cut it to twice the
-- limit, so that delta * T stays below 2^53); 8 the age of the refunded
-- decision in ns by the caller's clock (AT = now - age: the two clocks'
-- offset does not matter); 9, 10, 11 the rule's p1, p2, p3 as for the
-- drivers (for a calendar quota, the periods around the store's clock).

begin(ARGV)
local AGE = tonumber(ARGV[8])
local AT_S, AT_N = tadd(NOW_S, NOW_N, -AGE)

local function charge(used, delta, most)
  local room = most - used
  if room <= 0 then return 0 end
  if delta < room then return delta end
  return room
end

local function count(c, delta, limit)
  if delta > 0 then return c + charge(c, delta, 2 * limit) end
  c = c + delta
  if c < 0 then c = 0 end
  return c
end

-- Each function takes (p1, p2, p3, delta, a, b, c) and returns the TTL in ns
-- and the new state a, b, c, or nil when nothing changes.
local ADJ = {}

ADJ['fixed-window'] = function(w, limit, _, delta, sk, sc)
  local k, rem = tdiv(NOW_S, NOW_N, w)
  if delta > 0 then
    if sk == nil or sk < k then sk, sc = k, 0 end
  else
    if sk == nil or tdiv(AT_S, AT_N, w) ~= sk then return nil end
  end
  sc = count(sc, delta, limit)
  return (sk - k) * w + (w - rem), sk, sc, 0
end

ADJ['fixed-window-anchored'] = function(w, limit, _, delta, ss, sn, sc)
  local live = ss ~= nil and tsub(NOW_S, NOW_N, ss, sn) < w
  if delta > 0 then
    if not live then ss, sn, sc = NOW_S, NOW_N, 0 end
  else
    if not live or tsub(AT_S, AT_N, ss, sn) < 0 then return nil end
  end
  sc = count(sc, delta, limit)
  return w - tsub(NOW_S, NOW_N, ss, sn), ss, sn, sc
end

ADJ['fixed-window-calendar'] = function(limit, x0, spans, delta, se, sc)
  local d1 = spans % 4194304
  local x1 = x0 + d1
  local x2 = x1 + (spans - d1) / 4194304
  local function period_end(s)
    if s < x0 or s >= x2 then return nil end
    if s < x1 then return x1 end
    return x2
  end
  if delta > 0 then
    local e = period_end(NOW_S)
    if e == nil then
      error('portero: calendar quota: the instant ' .. string.format('%d', NOW_S) .. ' s is outside the periods computed by Portero: its clock and Redis\'s differ by more than half a period', 0)
    end
    if se == nil or se < e then se, sc = e, 0 end
  else
    if se == nil or period_end(AT_S) ~= se then return nil end
  end
  sc = count(sc, delta, limit)
  return tsub(se, 0, NOW_S, NOW_N), se, sc, 0
end

ADJ['sliding-counter'] = function(w, limit, _, delta, ck, prev, cur)
  local k = tdiv(NOW_S, NOW_N, w)
  if ck == nil then
    if delta < 0 then return nil end
    ck, prev, cur = k, 0, 0
  elseif k == ck + 1 then
    ck, prev, cur = k, cur, 0
  elseif k > ck + 1 then
    ck, prev, cur = k, 0, 0
  end
  if delta > 0 then
    local most = 2 * limit
    if most > 4294967295 then most = 4294967295 end
    cur = cur + charge(cur, delta, most)
  else
    local ka = tdiv(AT_S, AT_N, w)
    if ka == ck then
      cur = count(cur, delta, limit)
    elseif ka == ck - 1 then
      prev = count(prev, delta, limit)
    else
      return nil
    end
  end
  -- By the end of the next window the estimate is 0: the state is no state.
  local _, rem = tdiv(NOW_S, NOW_N, w)
  return (ck - k) * w + 2 * w - rem, ck, prev, cur
end

ADJ['token-bucket'] = function(t, tau, b, delta, credit, ls, ln)
  if credit == nil then
    if delta < 0 then return nil end
    credit, ls, ln = tau, NOW_S, NOW_N
  end
  local e = tsub(NOW_S, NOW_N, ls, ln)
  if e > 0 then
    if e >= tau - credit then credit = tau else credit = credit + e end
    ls, ln = NOW_S, NOW_N
  elseif credit > tau then
    credit = tau
  end
  if delta > 0 then
    credit = credit - charge(quo(tau - credit, t), delta, 2 * b) * t
  else
    local back = -delta
    if back > 2 * b then back = 2 * b end
    back = back * t
    if back >= tau - credit then credit = tau else credit = credit + back end
  end
  return tsub(ls, ln, NOW_S, NOW_N) + (tau - credit), credit, ls, ln
end

ADJ['leaky-meter'] = function(t, tau, b, delta, level, ls, ln)
  if level == nil then
    if delta < 0 then return nil end
    level, ls, ln = 0, NOW_S, NOW_N
  end
  local e = tsub(NOW_S, NOW_N, ls, ln)
  if e > 0 then
    if e >= level then level = 0 else level = level - e end
    ls, ln = NOW_S, NOW_N
  elseif level <= 0 then
    level = 0
  end
  if delta > 0 then
    level = level + charge(quo(level + t - 1, t), delta, 2 * b) * t
  else
    local back = -delta
    if back > 2 * b then back = 2 * b end
    back = back * t
    if back >= level then level = 0 else level = level - back end
  end
  return tsub(ls, ln, NOW_S, NOW_N) + level, level, ls, ln
end

ADJ['gcra'] = function(t, tau, b, delta, ts, tn)
  local level = 0
  if ts ~= nil then level = tsub(ts, tn, NOW_S, NOW_N) end
  if level <= 0 then ts, tn, level = NOW_S, NOW_N, 0 end
  if delta > 0 then
    local add = charge(quo(level + t - 1, t), delta, 2 * b) * t
    ts, tn = tadd(ts, tn, add)
    level = level + add
  else
    if level == 0 then return nil end
    local back = -delta
    if back > 2 * b then back = 2 * b end
    back = back * t
    if back >= level then
      ts, tn, level = NOW_S, NOW_N, 0
    else
      ts, tn = tadd(ts, tn, -back)
      level = level - back
    end
  end
  return level, ts, tn, 0
end

-- A queue place given back (a refund only: the Go side refuses charges):
-- the last departure moves back by the places, never before now; a place
-- taken cap intervals ago or more has departed.
ADJ['leaky-queue'] = function(t, tau, cap, delta, ls, ln)
  if delta > 0 or ls == nil then return nil end
  local gap = tsub(ls, ln, NOW_S, NOW_N)
  if gap <= 0 or tsub(NOW_S, NOW_N, AT_S, AT_N) >= tau then return nil end
  local back = -delta
  if back > cap then back = cap end
  back = back * t
  if back >= gap then return 0, NOW_S, NOW_N, 0 end
  ls, ln = tadd(ls, ln, -back)
  return gap - back, ls, ln, 0
end

local function fmt(x)
  return string.format('%.0f', x)
end

-- The sliding log (see sliding_log.lua for the layout of its sorted set):
-- prune as a decision does, log delta units at now (at the latest instant
-- when the clock went back), and keep at most L entries, dropping the
-- oldest. Dropping rewrites the set, so that the members at each score
-- stay numbered 0, 1, 2... as the decision script expects.
local function charge_log(key, w, limit, delta)
  if delta > limit then delta = limit end
  local card = redis.call('ZCARD', key)
  local bs, bn, latest
  local n = 0
  if card > 0 then
    local head = redis.call('ZRANGE', key, 0, 0)
    local s, ns = string.match(head[1] or '', '^#(-?%d+):(%d+)$')
    local tail = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    if not s or tail[1] ~= '~' then
      return redis.error_reply('ERR portero hit 1: sorted set without the Portero base and latest members')
    end
    bs, bn, latest = tonumber(s), tonumber(ns), tonumber(tail[2])
    n = card - 2
  end
  local off, realoff = 0, 0
  if n > 0 then
    realoff = tsub(NOW_S, NOW_N, bs, bn)
    off = realoff
    if off < latest then off = latest end
    local removed = redis.call('ZREMRANGEBYSCORE', key, '(-inf', fmt(off - w))
    if latest <= off - w then removed = removed - 1 end
    n = n - removed
  end
  if n == 0 then
    redis.call('DEL', key)
    bs, bn, off, realoff = NOW_S, NOW_N, 0, 0
    redis.call('ZADD', key, '-inf', '#' .. fmt(bs) .. ':' .. fmt(bn))
  end
  local scores = {}
  if n + delta > limit then
    local all = redis.call('ZRANGE', key, 1, n, 'WITHSCORES')
    for i = 2, #all, 2 do scores[#scores + 1] = tonumber(all[i]) end
    redis.call('DEL', key)
    redis.call('ZADD', key, '-inf', '#' .. fmt(bs) .. ':' .. fmt(bn))
    local keep = {}
    for i = n + delta - limit + 1, #scores do keep[#keep + 1] = scores[i] end
    local last, j = nil, 0
    for _, sc in ipairs(keep) do
      if sc == last then j = j + 1 else last, j = sc, 0 end
      redis.call('ZADD', key, fmt(sc), fmt(sc) .. ':' .. j)
    end
  end
  local score = fmt(off)
  local j = redis.call('ZCOUNT', key, score, score)
  if tonumber(redis.call('ZSCORE', key, '~')) == off then j = j - 1 end
  for i = 0, delta - 1 do
    redis.call('ZADD', key, score, score .. ':' .. fmt(j + i))
  end
  redis.call('ZADD', key, score, '~')
  local ms = math.ceil((off + w - realoff) / 1000000)
  if ms < MIN_TTL then ms = MIN_TTL end
  redis.call('PEXPIRE', key, ms)
  return 1
end

local key, name, delta = KEYS[1], ARGV[6], tonumber(ARGV[7])
local p1, p2, p3 = tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11])
if name == 'sliding-log' then
  return charge_log(key, p1, p2, delta)
end
local f = ADJ[name]
if f == nil then
  return redis.error_reply('ERR portero hit 1: algorithm ' .. tostring(name) .. ' cannot be adjusted')
end
local err, a, b, c = read_state(key)
if err then return err end
local ttl, na, nb, nc = f(p1, p2, p3, delta, a, b, c)
if ttl ~= nil then save(key, ttl, na, nb, nc) end
return 1
