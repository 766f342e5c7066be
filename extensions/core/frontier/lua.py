"""The frontier's shared Lua: the helpers every frontier script includes.

The scripts that read or write a frontier structure are built from these
chunks, so each rule is written once: :data:`LUA_RECORD` reads the host
record (:mod:`extensions.core.frontier.hostrecord` names its fields) and
applies the spacing and park rules; :data:`LUA_SCHEDULE_HOST` encodes the
queue score (priority, then arrival order: :data:`PRIORITY_MIN` ..
:data:`PRIORITY_MAX`), queues, requeues and delays requests, sets malformed
entries aside (the poison list) and spills past a host's cap;
:data:`LUA_DLQ` writes dead letters. The protocols are described in
``docs/frontier.md``.
"""

from __future__ import annotations

from extensions.connection.scripts import LUA_NOW_MS

# The Lua helpers of every script that reads or writes the host record: the
# Redis clock, the record as numbers, the spacing rule and the park rule.
LUA_RECORD = (
    LUA_NOW_MS
    + """
-- The host record at `hkey` as numbers: absent fields are 0, but `delay` is
-- nil when absent (the default delay applies). `call` (default redis.call)
-- runs the read: the frontier passes its `on_key`, which sets a key of the
-- wrong type aside rather than fail.
local function host_record(hkey, call)
  local r = (call or redis.call)('HMGET', hkey, 'next', 'delay', 'backoff',
                                 'backoff_at', 'park', 'fails', 'breaker',
                                 'failing_since', 'down')
  return {next = tonumber(r[1]) or 0, delay = tonumber(r[2]),
          backoff = tonumber(r[3]) or 0, backoff_at = tonumber(r[4]) or 0,
          park = tonumber(r[5]) or 0, fails = tonumber(r[6]) or 0,
          breaker = tonumber(r[7]) or 0, failing_since = tonumber(r[8]) or 0,
          down = tonumber(r[9]) or 0}
end
-- The back-off still in force at `now`: one raised longer than `quiet` ms
-- ago is forgiven.
local function effective_backoff(rec, now, quiet)
  if rec.backoff > 0 and now - rec.backoff_at < quiet then return rec.backoff end
  return 0
end
-- The host's spacing: max(delay or the default, the back-off in force).
local function spacing(rec, default_ms, now, quiet)
  return math.max(rec.delay or default_ms, effective_backoff(rec, now, quiet))
end
-- Move the park deadline to `deadline` if that is later (never earlier);
-- returns the deadline in force.
local function park_until(hkey, rec, deadline)
  if deadline > rec.park then
    redis.call('HSET', hkey, 'park', deadline)
    rec.park = deadline
  end
  return rec.park
end
"""
)


PRIORITY_MIN = -(2**15)
PRIORITY_MAX = 2**15 - 1


# Poison records kept (the newest); an entry is cut to POISON_ENTRY_KEEP bytes.
POISON_KEEP = 10_000
POISON_ENTRY_KEEP = 4096


# Shared Lua helpers: put a host back in the ready schedule, at the later of
# its next allowed fetch time and its park time (circuit breaker, Retry-After);
# queue a request; requeue a lease; move a malformed entry to the poison list.
# Each script sets `pkey` (the poison LIST, one of its KEYS) before use;
# `poisoned` counts the entries set aside, for the script's return value.
LUA_SCHEDULE_HOST = (
    LUA_RECORD
    + f"""
local POISON_KEEP, POISON_ENTRY_KEEP = {POISON_KEEP}, {POISON_ENTRY_KEEP}
"""
    + """
local pkey
local poisoned = 0
local function poison(key, field, entry, reason)
  poisoned = poisoned + 1
  redis.call('RPUSH', pkey, cjson.encode({key = key, field = field,
    entry = string.sub(entry, 1, POISON_ENTRY_KEEP), length = #entry,
    reason = reason}))
  redis.call('LTRIM', pkey, -POISON_KEEP, -1)
end
-- redis.call(cmd, key, ...), except that a key of the wrong type is renamed
-- aside (to <poison key>:<key>, with a poison record) and the call made again
-- on the now empty key: one spoiled key must not fail every script run.
local function on_key(cmd, key, ...)
  local r = redis.pcall(cmd, key, ...)
  if type(r) == 'table' and r.err then
    if not string.find(r.err, 'WRONGTYPE', 1, true) then error(r) end
    local aside = pkey .. ':' .. key
    redis.call('RENAME', key, aside)
    poison(key, '', '', 'renamed to ' .. aside .. ': ' .. r.err)
    r = redis.call(cmd, key, ...)
  end
  return r
end
local function schedule_host(ready, hkey, host, now)
  if redis.call('ZSCORE', ready, host) then return end
  local rec = host_record(hkey, on_key)
  redis.call('ZADD', ready, math.max(rec.next, rec.park, now), host)
end
local function score_of(prio, seq)
  local s = redis.call('INCR', seq) % 68719476736
  return (32768 - prio) * 68719476736 + s
end
local function queue_request(qprefix, host, prio, member, seq)
  return on_key('ZADD', qprefix .. host, 'NX', score_of(prio, seq), member)
end
-- The frontier spill (extensions.core.frontier.spill). A script that caps queues sets
-- `spill` = {cap = most queued per host, low = refill below this length,
-- refill = the refill SET, out = {}}; nil: no cap. A host over its cap, or
-- with requests already spilled, refuses a new request: it is appended to
-- spill.out as (host, score, member, priority) for the worker to write to
-- the spill store, and counted in the host record (`spilled`, `spilling`).
-- Every queued request of a host scores below every spilled one: a new
-- request that scores below the queue's last takes that one's place, and
-- the last is spilled instead. Returns nil when the host takes the request
-- as usual, else 1 (refused and spilled) or 0 (already queued).
local spill = nil
local function spill_request(qprefix, hprefix, host, prio, member, seq)
  local q, hkey = qprefix .. host, hprefix .. host
  local len = on_key('ZCARD', q)
  local spilled = tonumber(redis.call('HGET', hkey, 'spilled')) or 0
  if len < spill.cap and spilled <= 0 then return nil end
  if redis.call('ZSCORE', q, member) then return 0 end
  local score = score_of(prio, seq)
  local tail = redis.call('ZRANGE', q, -1, -1, 'WITHSCORES')
  if #tail > 0 and score < tonumber(tail[2]) then
    redis.call('ZREM', q, tail[1])
    redis.call('ZADD', q, score, member)
    member, score = tail[1], tonumber(tail[2])
    prio = 32768 - math.floor(score / 68719476736)
  end
  local out = spill.out
  out[#out + 1] = host
  out[#out + 1] = string.format('%.0f', score)
  out[#out + 1] = member
  out[#out + 1] = prio
  redis.call('HINCRBY', hkey, 'spilled', 1)
  redis.call('HINCRBY', hkey, 'spilling', 1)
  local low = tonumber(redis.call('HGET', hkey, 'spill_low'))
  if not low or score < low then
    redis.call('HSET', hkey, 'spill_low', string.format('%.0f', score))
  end
  if len < spill.low then redis.call('SADD', spill.refill, host) end
  return 1
end
-- Put back a spilled request a dead worker never confirmed written (its
-- write-ahead entry kept it), with its original score.
local function unspill(qprefix, hprefix, host, score, member, now, ready)
  local hkey = hprefix .. host
  for _, f in ipairs({'spilled', 'spilling'}) do
    if redis.call('HINCRBY', hkey, f, -1) < 0 then redis.call('HSET', hkey, f, 0) end
  end
  local n = on_key('ZADD', qprefix .. host, 'NX', score, member)
  schedule_host(ready, hkey, host, now)
  return n
end
-- End lease `id` and put its request back in its host's queue with its
-- original score (an expired lease, or one handed back). Returns 1 when a
-- request was put back, 0 when the lease was already gone (or its record
-- was malformed: then it goes to the poison list).
local function requeue_lease(ready, leases, ldata, qprefix, hprefix, id, now)
  local data = redis.call('HGET', ldata, id)
  local removed = redis.call('ZREM', leases, id)
  redis.call('HDEL', ldata, id)
  if not data or removed == 0 then return 0 end
  local host, score, member = string.match(data, '^([^\\n]+)\\n([^\\n]*)\\n(.*)$')
  score = tonumber(score)
  if not host or not score or score ~= score then
    poison(ldata, id, data, 'malformed lease record')
    return 0
  end
  on_key('ZADD', qprefix .. host, 'NX', score, member)
  schedule_host(ready, hprefix .. host, host, now)
  return 1
end
-- Queue a request now, or (delay > 0) put it in the delayed ZSET until due.
local function queue_or_delay(delayed, ready, qprefix, hprefix, host, prio, member,
                              delay, seq, now)
  if delay > 0 then
    redis.call('ZADD', delayed, now + delay, host .. '\\n' .. prio .. '\\n' .. member)
    return 1
  end
  if spill then
    local refused = spill_request(qprefix, hprefix, host, prio, member, seq)
    if refused then return refused end
  end
  local n = queue_request(qprefix, host, prio, member, seq)
  schedule_host(ready, hprefix .. host, host, now)
  return n
end
-- Move up to `limit` due entries of the delayed ZSET into their queues.
local function promote_delayed(delayed, ready, qprefix, hprefix, seq, now, limit)
  local due = redis.call('ZRANGEBYSCORE', delayed, '-inf', now, 'LIMIT', 0, limit)
  for _, entry in ipairs(due) do
    redis.call('ZREM', delayed, entry)
    local host, prio, member = string.match(entry, '^([^\\n]+)\\n([^\\n]*)\\n(.*)$')
    prio = tonumber(prio)
    if not host or not prio then
      poison(delayed, '', entry, 'malformed delayed entry')
    else
      queue_request(qprefix, host, prio, member, seq)
      schedule_host(ready, hprefix .. host, host, now)
    end
  end
  return #due
end
"""
)


# The Lua helpers of every script that writes dead letters (this module's
# scripts, the frontier's commit and the host-down sweep below):
# ``dlq_put`` stores or replaces one entry (a table, the fields of
# :class:`DeadLetter`) and keeps the per-reason counts in step; its
# ``last_failure`` is set from the Redis clock (seconds), and
# ``first_failure`` too when the entry has none. Returns 1 if the URL was new.
# ``dlq_member`` dead-letters a request as the frontier queues it (``member``:
# its serialization, the URL on the first line) with no failure record, and
# lists its URL in ``unrecorded`` (the dlq's unrecorded LIST), whence
# :meth:`DeadLetters.unrecorded` hands it to the page store's record. Every
# key it touches is its caller's: ``dlq``, ``reasons`` and ``unrecorded`` are
# the caller's KEYS, ``rkey`` is the host's record (a KEYS entry, or a
# per-host key the commit builds from its host record prefix under the
# frontier's hash tag: the same slot, see extensions.core.frontier.frontier).
LUA_DLQ = (
    LUA_NOW_MS
    + """
local function dlq_put(dlq, reasons, url, entry)
  local now = now_ms() / 1000
  entry['last_failure'] = now
  if entry['first_failure'] == nil or entry['first_failure'] == cjson.null then
    entry['first_failure'] = now
  end
  local old = redis.call('HGET', dlq, url)
  if old then
    local ok, prev = pcall(cjson.decode, old)
    local reason = ok and type(prev) == 'table' and prev['reason']
    if type(reason) == 'string' and redis.call('HINCRBY', reasons, reason, -1) <= 0 then
      redis.call('HDEL', reasons, reason)
    end
  end
  redis.call('HSET', dlq, url, cjson.encode(entry))
  redis.call('HINCRBY', reasons, entry['reason'], 1)
  if old then return 0 end
  return 1
end
local function dlq_member(dlq, reasons, unrecorded, rkey, host, prio, member,
                          reason, err)
  local url = string.match(member, '^[^\\n]*')
  if reason == 'host_down' then
    -- The frontier's commit names every verdict host_down: a verdict made
    -- for another reason (dns) keeps it in the host record beside 'down'.
    local why = redis.call('HGET', rkey, 'down_reason')
    if why == 'dns' then
      reason, err = 'dns', 'name does not resolve (DNS_DOWN_AFTER): not queued'
    end
  end
  dlq_put(dlq, reasons, url, {url = url, host = host, reason = reason,
    request = member, priority = prio, status = cjson.null, error = err,
    attempts = 0, first_failure = cjson.null})
  redis.call('RPUSH', unrecorded, url)
  return 1
end
"""
)


# beat: record a worker's heartbeat in a partition's registry, stamped with
# the clock of the master that holds the registry (the clock recovery reads
# it with: on a cluster each master has its own).
# KEYS[1] workers ZSET. ARGV[1] worker id. Returns the stamp (epoch ms).
BEAT_LUA = (
    LUA_NOW_MS
    + """
local now = now_ms()
redis.call('ZADD', KEYS[1], now, ARGV[1])
return now
"""
)
