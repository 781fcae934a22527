-- sliding-log: a sorted set of admitted units; the window is (t-W, t]. The
-- scores are exact ns offsets from a base instant kept in the set itself as
-- the member "#<s>:<n>" with score -inf (so the set is one key). A member is
-- "<offset>:<j>", j counting the units logged at the same offset; the
-- member "~" holds the latest instant decided at (which a clock that goes
-- back falls back to) and sorts last. The base moves to now when the log is
-- empty and is rebased when offsets would pass 2^51 ns. Mirrors
-- algorithm.SlidingLog, and the pending-units rule of storetest.Reference
-- for several hits on one key in one call.
local SL_REBASE = 2251799813685248 -- 2^51

-- fmt formats an integral number exactly (tostring would round to 14 digits).
local function fmt(x)
  return string.format('%.0f', x)
end

-- expire sets key to expire ttl ns from now (rounded up to a millisecond),
-- or at least MIN_TTL ms from now.
local function expire(key, ttl)
  local ms = math.ceil(ttl / 1000000)
  if ms < MIN_TTL then ms = MIN_TTL end
  if ms <= 0 then
    redis.call('DEL', key)
  else
    redis.call('PEXPIRE', key, ms)
  end
end

-- The log is not three numbers: the driver calls it apart from the other
-- algorithms, with the pending units of earlier hits on the key, and it
-- returns a decision table, the new pending state and a commit function.
LOGS['sliding-log'] = true

ALG['sliding-log'] = function(hit, key, w, limit, _, cost, st)
  local pending = 0
  if st then pending = st.units end
  local card = rcall(hit, 'ZCARD', key)
  local bs, bn, latest
  local n = 0
  if card > 0 then
    local head = rcall(hit, 'ZRANGE', key, 0, 0)
    local s, ns = string.match(head[1] or '', '^#(-?%d+):(%d+)$')
    local tail = rcall(hit, 'ZRANGE', key, -1, -1, 'WITHSCORES')
    if not s or tail[1] ~= '~' then
      error({ hit = hit, msg = 'sorted set without the Portero base and latest members' })
    end
    bs, bn, latest = tonumber(s), tonumber(ns), tonumber(tail[2])
    n = card - 2
  end
  local off, realoff = 0, 0
  local offstr -- off formatted, once (string.format costs about as much as a command)
  if n > 0 then
    realoff = tsub(NOW_S, NOW_N, bs, bn)
    off = realoff
    if off < latest then off = latest end -- time went back: the latest instant stands
    -- Prune: an entry exactly W old has expired. Pruning and moving the
    -- latest instant are part of deciding, done even when the call is
    -- refused (as algorithm.SlidingLog.Decide does).
    local removed = rcall(hit, 'ZREMRANGEBYSCORE', key, '(-inf', fmt(off - w))
    if latest <= off - w then removed = removed - 1 end -- "~" went too
    n = n - removed
    latest = off
    offstr = fmt(off)
    redis.call('ZADD', key, offstr, '~')
  end
  local fresh = n == 0
  if fresh then
    -- An empty log equals no log: start a new base at now.
    bs, bn, off, realoff, offstr = NOW_S, NOW_N, 0, 0, nil
  elseif off > SL_REBASE then
    -- Move the base to the oldest entry so offsets stay far below 2^53.
    local ttl = redis.call('PTTL', key)
    local all = redis.call('ZRANGE', key, 1, -2, 'WITHSCORES')
    local shift = tonumber(all[2])
    redis.call('DEL', key)
    bs, bn = tadd(bs, bn, shift)
    redis.call('ZADD', key, '-inf', '#' .. fmt(bs) .. ':' .. fmt(bn))
    local last, j = nil, 0
    for i = 1, #all, 2 do
      local sc = tonumber(all[i + 1]) - shift
      if sc == last then j = j + 1 else last, j = sc, 0 end
      redis.call('ZADD', key, fmt(sc), fmt(sc) .. ':' .. j)
    end
    off, realoff, offstr = off - shift, realoff - shift, nil
    redis.call('ZADD', key, fmt(off), '~')
    if ttl > 0 then redis.call('PEXPIRE', key, ttl) end
  end
  -- lag > 0 when the caller's clock is behind the log's latest instant:
  -- waits are measured from the caller's now.
  local lag = off - realoff
  -- at returns the offset of the i-th oldest entry (0-based).
  local function at(i)
    local r = redis.call('ZRANGE', key, i + 1, i + 1, 'WITHSCORES')
    return tonumber(r[2])
  end
  local allowed, retry, reset, remaining = false, 0, 0, 0
  if pending == 0 then
    local m = n
    if n + cost <= limit then
      allowed = true
      m = n + cost
    else
      retry = at(n + cost - limit - 1) + w - off + lag
    end
    remaining = limit - m
    if m > 0 then
      -- The newest entry: at off when this call logs one, else the
      -- newest kept (a refusal, or a look at cost 0).
      local newest = off
      if not allowed or cost == 0 then newest = at(n - 1) end
      reset = newest + w - off + lag
    end
  elseif pending + cost > limit then
    -- Only the pending units could make room; they expire one window on.
    remaining = limit - n - pending
    if remaining < 0 then remaining = 0 end
    retry, reset = w + lag, w + lag
  else
    local c = pending + cost
    if n + c <= limit then
      allowed = true
      remaining = limit - n - c
    else
      retry = at(n + c - limit - 1) + w - off + lag
      remaining = limit - n - pending
      if remaining < 0 then remaining = 0 end
    end
    reset = w + lag
  end
  local newstate = { units = pending + cost }
  local ttl = off + w - realoff
  return { allowed = allowed, rem = remaining, retry = retry, reset = reset, delay = 0 }, newstate, function()
    if fresh then
      -- Only the base and latest members are left: replace the base.
      redis.call('ZREMRANGEBYSCORE', key, '-inf', '-inf')
      redis.call('ZADD', key, '-inf', '#' .. fmt(bs) .. ':' .. fmt(bn))
    end
    local score = offstr or fmt(off)
    -- j counts the units logged at off already, "~" aside. Alone on the
    -- key (no pending units) that is none in a fresh log, and otherwise
    -- ZCOUNT less "~", which deciding moved to off; after earlier hits of
    -- the call, which may have logged at off, ask.
    local j = 0
    if pending > 0 then
      j = redis.call('ZCOUNT', key, score, score)
      if tonumber(redis.call('ZSCORE', key, '~')) == off then j = j - 1 end
    elseif not fresh then
      j = redis.call('ZCOUNT', key, score, score) - 1
    end
    local i = 0
    while i < cost do -- in batches, since unpack has a limit
      local args = {}
      while i < cost and #args < 1000 do
        args[#args + 1] = score
        args[#args + 1] = score .. ':' .. fmt(j + i)
        i = i + 1
      end
      if i == cost then -- the latest instant, with the last batch
        args[#args + 1] = score
        args[#args + 1] = '~'
      end
      redis.call('ZADD', key, unpack(args))
    end
    expire(key, ttl)
  end
end
