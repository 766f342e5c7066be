"""Every Lua script of the frontier, and the rules they share, written once.

The frontier's structures (host queues, the ready schedule, leases, the
delayed ZSET, write-ahead batches, the poison list, dead letters, the spill's
counters) and the per-host record are written by the scripts of this module
and by no other Lua: the Python modules beside it (:mod:`.frontier`,
:mod:`.hostrecord`, :mod:`.deadletters`, :mod:`.spill`) run them through the
one registry (:func:`extensions.connection.scripts.script`). So each rule is
written once: the queue score (:data:`LUA_SCORE`), the host record's fields
and its spacing and park rules (:data:`LUA_RECORD`), queueing, requeueing
and setting malformed entries aside (:data:`LUA_SCHEDULE_HOST`), and dead
letters (:data:`LUA_DLQ`). Every script has a header naming its KEYS, ARGV
and reply. The protocols: ``docs/frontier.md``, ``docs/host-record.md``,
``docs/spill.md``, ``docs/dead-letters.md``.
"""

from __future__ import annotations

from extensions.connection.scripts import LUA_NOW_MS

# --- The queue score -----------------------------------------------------------
# A queued request's score is ``(32768 - priority) * SEQ_SPAN + seq``: lower
# pops first, so a higher ``request.priority`` comes first, and ``seq`` (the
# crawl's arrival counter, modulo SEQ_SPAN) keeps FIFO order within a
# priority (a ZSET alone orders equal scores by member bytes). Both parts fit
# a double exactly (2**52 < 2**53).
PRIORITY_MIN = -(2**15)
PRIORITY_MAX = 2**15 - 1
SEQ_SPAN = 2**36


def clamp_priority(priority: int) -> int:
    """A priority the score can hold.

    >>> clamp_priority(10**9), clamp_priority(-(10**9)), clamp_priority(5)
    (32767, -32768, 5)
    """
    return max(PRIORITY_MIN, min(PRIORITY_MAX, int(priority)))


def priority_from_score(score: float) -> int:
    """The priority a frontier score was made from.

    >>> priority_from_score((32768 - 7) * SEQ_SPAN + 12345)
    7
    """
    return 32768 - int(score) // SEQ_SPAN


LUA_SCORE = f"""
local SEQ_SPAN = {SEQ_SPAN}
local function clamp_priority(prio)
  return math.max({PRIORITY_MIN}, math.min({PRIORITY_MAX}, math.floor(prio)))
end
-- The score of a request of priority `prio` arriving now (`seq`: the
-- arrival counter's key).
local function score_of(prio, seq)
  local s = redis.call('INCR', seq) % SEQ_SPAN
  return (32768 - prio) * SEQ_SPAN + s
end
local function priority_of(score)
  return 32768 - math.floor(score / SEQ_SPAN)
end
"""

# --- The host record -------------------------------------------------------------
# Its fields (docs/host-record.md says what each holds and who writes it).
NEXT = "next"
DELAY = "delay"
BACKOFF = "backoff"
BACKOFF_AT = "backoff_at"
PARK = "park"
FAILS = "fails"
BREAKER = "breaker"
FAILING_SINCE = "failing_since"
DOWN = "down"
DOWN_REASON = "down_reason"
SPILLED = "spilled"
SPILLING = "spilling"
SPILL_LOW = "spill_low"
THROTTLE = "throttle"
IP = "ip"

# The fields the scripts read as numbers (host_record below): the spill's
# counters, ``down_reason`` and ``ip`` are read by the scripts that need them.
RECORD_FIELDS = (NEXT, DELAY, BACKOFF, BACKOFF_AT, PARK, FAILS, BREAKER,
                 FAILING_SINCE, DOWN, THROTTLE)  # fmt: skip
# Every field of the record.
FIELDS = (*RECORD_FIELDS, DOWN_REASON, SPILLED, SPILLING, SPILL_LOW, IP)

# The Lua helpers of every script that reads or writes the host record: the
# Redis clock, the record as numbers, the spacing rule and the park rule.
LUA_RECORD = (
    LUA_NOW_MS
    + f"""
local RECORD_FIELDS = {{{", ".join(repr(f) for f in RECORD_FIELDS)}}}
"""
    + """
-- The host record at `hkey` as numbers: absent fields are 0, but `delay` and
-- `throttle` are nil when absent. `call` (default redis.call) runs the read:
-- the frontier passes its `on_key`, which sets a key of the wrong type aside
-- rather than fail.
local function host_record(hkey, call)
  local r = (call or redis.call)('HMGET', hkey, unpack(RECORD_FIELDS))
  local rec = {}
  for i, f in ipairs(RECORD_FIELDS) do rec[f] = tonumber(r[i]) or 0 end
  rec.delay = tonumber(r[2])
  rec.throttle = tonumber(r[10])
  return rec
end
-- The back-off still in force at `now`: one raised longer than `quiet` ms
-- ago is forgiven.
local function effective_backoff(rec, now, quiet)
  if rec.backoff > 0 and now - rec.backoff_at < quiet then return rec.backoff end
  return 0
end
-- The host's AutoThrottle delay: its record's, else `start` (no response
-- seen yet); 0 when AutoThrottle is off (`start` < 0).
local function throttle_of(rec, start)
  if start < 0 then return 0 end
  return rec.throttle or start
end
-- The spacing rule. `default_ms` is the host's own delay (an operator's
-- override, else DOWNLOAD_SLOTS, else DOWNLOAD_DELAY: host_conf below);
-- `start` the AutoThrottle start delay (-1: AutoThrottle off). The static
-- part, counted from a response: max(the robots.txt delay, the host's own
-- delay, the back-off in force). The spacing: max(static, the throttle).
local function static_spacing(rec, default_ms, now, quiet)
  return math.max(rec.delay or 0, default_ms, effective_backoff(rec, now, quiet))
end
local function spacing(rec, default_ms, now, quiet, start)
  return math.max(static_spacing(rec, default_ms, now, quiet),
                  throttle_of(rec, start or -1))
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


# --- Per-host settings ----------------------------------------------------------
# An operator's override of a host (``scrapy hosts set``), one JSON object per
# host name in each partition's overrides HASH: ``delay`` (seconds: the host's
# own delay, in DOWNLOAD_DELAY's place), ``concurrency`` (requests of the host
# in flight at once, fleet-wide), ``max_pages`` (HOST_MAX_PAGES of the host).
# docs/host-record.md, "Per-host settings".
OVERRIDE_DELAY = "delay"
OVERRIDE_CONCURRENCY = "concurrency"
OVERRIDE_MAX_PAGES = "max_pages"
OVERRIDE_FIELDS = (OVERRIDE_DELAY, OVERRIDE_CONCURRENCY, OVERRIDE_MAX_PAGES)

# The Lua helpers of the scripts that read a host's own settings (the lease
# script, the download lock): ``host_name`` of a host key, and ``host_conf``:
# the host's own delay (ms) and concurrency from the override in ``conf``
# (the overrides HASH of the host's partition), else from the worker's
# DOWNLOAD_SLOTS entry (``slot_delay``, ``slot_conc``: nil when none), else
# ``default_ms`` and 1. A malformed override counts as none.
LUA_HOST_CONF = f"""
local OVERRIDE_DELAY = '{OVERRIDE_DELAY}'
local OVERRIDE_CONCURRENCY = '{OVERRIDE_CONCURRENCY}'
"""
LUA_HOST_CONF += """
local function host_name(host)
  return string.match(host, '^[^:]+://%[?(.-)%]?:%d+$') or host
end
local function host_conf(conf, name, slot_delay, slot_conc, default_ms)
  local delay, conc
  local raw = redis.call('HGET', conf, name)
  if raw then
    local ok, o = pcall(cjson.decode, raw)
    if ok and type(o) == 'table' then
      local d, c = o[OVERRIDE_DELAY], o[OVERRIDE_CONCURRENCY]
      if type(d) == 'number' and d >= 0 then delay = math.floor(d * 1000) end
      if type(c) == 'number' and c >= 1 then conc = math.floor(c) end
    end
  end
  return delay or slot_delay or default_ms, conc or slot_conc or 1
end
"""


# --- The IP schedule ------------------------------------------------------------
# With POLITENESS_KEY naming ``ip``, each partition keeps a ZSET of addresses
# -> until when (ms) each is busy, so that its lease script can pass over a
# host whose address another host is using (the record's ``ip`` field says a
# host's address). Written by the lease script (a lease marks its host's
# address busy for the IP delay) and by the download lock (``IP_BUSY_LUA``:
# when it cuts an address's lock, and when a request waits for one, in every
# partition). A hint for
# the schedule only: the IP's download lock is the guarantee. Entries in the
# past are dropped at each write, so the ZSET holds the addresses busy now.
LUA_IP_SCHEDULE = """
local function ip_free_at(sched, ip)
  return tonumber(redis.call('ZSCORE', sched, ip)) or 0
end
local function ip_busy(sched, ip, until_ms, now)
  redis.call('ZREMRANGEBYSCORE', sched, '-inf', now)
  if until_ms > ip_free_at(sched, ip) then
    redis.call('ZADD', sched, until_ms, ip)
  end
end
"""


# --- Queues, leases, poison ---------------------------------------------------
# Hosts with a future ready time the lease script looks at to find one that
# waits out its spacing rather than a park (breaker, Retry-After).
SPACED_LOOKAHEAD = 16
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
    + LUA_SCORE
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
    prio = priority_of(score)
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


# --- Dead letters -------------------------------------------------------------
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


# --- The frontier's scripts ---------------------------------------------------
# commit: push new requests and acknowledge finished leases, atomically, so a
# redirect or retry hands its parent's lease over to the child with no window
# in which neither is in Redis; and drop the batch's write-ahead entry.
# A request of a host judged down (its record's ``down`` in the future, see
# extensions.core.frontier.deadletters.HOST_DOWN_LUA) is dead-lettered as ``host_down``
# instead.
# KEYS[1] ready ZSET, KEYS[2] seq counter, KEYS[3] leases ZSET,
# KEYS[4] lease data HASH, KEYS[5] the worker's write-ahead HASH,
# KEYS[6] poison LIST, KEYS[7] delayed ZSET, KEYS[8] dlq HASH,
# KEYS[9] dlq reasons HASH, KEYS[10] refill SET, KEYS[11] dlq unrecorded LIST
# ARGV[1] queue key prefix, ARGV[2] host record key prefix (per-host keys are
# built from these two, under the frontier's hash tag: one slot),
# ARGV[3] number of requests n, ARGV[4] write-ahead entry id ('' for none),
# ARGV[5] most requests queued per host (0: no cap, nothing spilled),
# ARGV[6] refill a host whose queue is shorter than this,
# then n quadruples (host, priority, member, delay ms: 0 = queue now, else
# wait in the delayed ZSET), then the lease ids to acknowledge.
# Requests refused by the cap are returned for the spill store; the
# write-ahead entry then stays, holding them (with their scores) until the
# worker confirms them written (SPILLED_LUA), so a worker that dies first
# loses none: recovery queues them again. A down host's requests go to the
# DLQ, never to the spill.
# Returns {requests added or spilled, leases acknowledged,
#          requests dead-lettered,
#          then (host, score, member, priority) per refused request}.
COMMIT_LUA = (
    LUA_SCHEDULE_HOST
    + LUA_DLQ
    + """
local ready, seq, leases, ldata = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
pkey = KEYS[6]
local qprefix, hprefix = ARGV[1], ARGV[2]
local n = tonumber(ARGV[3])
local now = now_ms()
local added, dead = 0, 0
if tonumber(ARGV[5]) > 0 then
  spill = {cap = tonumber(ARGV[5]), low = tonumber(ARGV[6]), refill = KEYS[10],
           out = {}}
end
for i = 0, n - 1 do
  local host = ARGV[7 + i * 4]
  local prio = tonumber(ARGV[8 + i * 4])
  local member = ARGV[9 + i * 4]
  local delay = tonumber(ARGV[10 + i * 4])
  local down = tonumber(on_key('HGET', hprefix .. host, 'down') or '0') or 0
  if down > now then
    dead = dead + dlq_member(KEYS[8], KEYS[9], KEYS[11], hprefix .. host, host,
                             prio, member, 'host_down',
                             'host down (HOST_DOWN_AFTER): not queued')
  else
    added = added + queue_or_delay(KEYS[7], ready, qprefix, hprefix, host, prio,
                                   member, delay, seq, now)
  end
end
local acked = 0
for i = 7 + n * 4, #ARGV do
  acked = acked + redis.call('ZREM', leases, ARGV[i])
  redis.call('HDEL', ldata, ARGV[i])
end
local res = {added, acked, dead}
local out = spill and spill.out or {}
if ARGV[4] ~= '' then
  if #out > 0 then
    local kept = {}
    for i = 1, #out, 4 do
      kept[#kept + 1] = {out[i], out[i + 3], out[i + 2], out[i + 1]}
    end
    redis.call('HSET', KEYS[5], ARGV[4], cjson.encode(kept))
  else
    redis.call('HDEL', KEYS[5], ARGV[4])
  end
end
for _, v in ipairs(out) do res[#res + 1] = v end
return res
"""
)

# recover: requeue the write-ahead batches of workers that stopped beating
# (killed between marking a batch seen in the dupefilter and queueing it).
# Every request of such a batch is queued (ZADD NX): whether the dupefilter
# called it new is unknown, and a re-crawl beats a lost URL. A request with
# a score (a fourth element: refused by the spill cap, maybe never written
# to the spill store) goes back to its queue with that score, uncounted
# from its host's spill counters. A batch that is
# not JSON, or holds requests not shaped [host, priority, member], goes to
# the poison list (its well-formed requests are still queued).
# The leases of such workers go back to their queues at once, rather than
# after the lease timeout.
# KEYS[1] workers ZSET, KEYS[2] ready ZSET, KEYS[3] seq counter,
# KEYS[4] poison LIST, KEYS[5] leases ZSET, KEYS[6] lease data HASH
# ARGV[1] queue key prefix, ARGV[2] host record key prefix,
# ARGV[3] write-ahead key prefix, ARGV[4] silence (ms) after which a worker
# is dead. Returns {requests queued again, entries poisoned, leases reclaimed}.
RECOVER_LUA = (
    LUA_SCHEDULE_HOST
    + """
local workers, ready, seq = KEYS[1], KEYS[2], KEYS[3]
pkey = KEYS[4]
local qprefix, hprefix, wprefix = ARGV[1], ARGV[2], ARGV[3]
local now = now_ms()
local dead = redis.call('ZRANGEBYSCORE', workers, '-inf', now - tonumber(ARGV[4]))
local n = 0
local reclaimed = 0
if #dead > 0 then
  -- Lease ids are "<worker>:<seq>": one pass over the leases finds theirs.
  local gone = {}
  for _, worker in ipairs(dead) do gone[worker] = true end
  for _, id in ipairs(redis.call('ZRANGE', KEYS[5], 0, -1)) do
    local owner = string.match(id, '^(.*):[0-9]+$')
    if owner and gone[owner] then
      reclaimed = reclaimed + requeue_lease(ready, KEYS[5], KEYS[6], qprefix,
                                            hprefix, id, now)
    end
  end
end
for _, worker in ipairs(dead) do
  local wal = wprefix .. worker
  local all = redis.pcall('HGETALL', wal)
  if all.err then
    poison(wal, '', '', all.err)
    all = {}
  end
  for i = 1, #all, 2 do
    local ok, batch = pcall(cjson.decode, all[i + 1])
    if not ok or type(batch) ~= 'table' or (#batch == 0 and next(batch)) then
      poison(wal, all[i], all[i + 1], 'write-ahead batch is not a JSON list')
    else
      local bad = 0
      for _, r in ipairs(batch) do
        if type(r) == 'table' and type(r[1]) == 'string' and r[1] ~= ''
            and type(r[2]) == 'number' and r[2] == r[2]
            and type(r[3]) == 'string' then
          local score = type(r[4]) == 'string' and tonumber(r[4])
          if score then
            n = n + unspill(qprefix, hprefix, r[1], score, r[3], now, ready)
          else
            local prio = clamp_priority(r[2])
            n = n + queue_request(qprefix, r[1], prio, r[3], seq)
            schedule_host(ready, hprefix .. r[1], r[1], now)
          end
        else
          bad = bad + 1
        end
      end
      if bad > 0 then
        poison(wal, all[i], all[i + 1],
               bad .. ' malformed requests in a write-ahead batch')
      end
    end
  end
  redis.call('DEL', wal)
  redis.call('ZREM', workers, worker)
end
return {n, poisoned, reclaimed}
"""
)

# lease: reclaim expired leases, then lease up to `count` ready requests.
# KEYS[1] ready ZSET, KEYS[2] leases ZSET, KEYS[3] lease data HASH,
# KEYS[4] seq counter, KEYS[5] poison LIST, KEYS[6] pause flag STRING (exists:
# the fleet is paused, nothing is leased; expired leases are still reclaimed),
# KEYS[7] delayed ZSET, KEYS[8] refill SET
# ARGV[1] queue key prefix, ARGV[2] host record key prefix, ARGV[3] count,
# ARGV[4] lease time ms, ARGV[5] worker id, ARGV[6] default delay ms,
# ARGV[7] most expired leases to reclaim in this call, ARGV[8] back-off quiet
# period ms (a back-off raised longer ago than that is forgiven),
# ARGV[9] refill a host with spilled requests whose queue is shorter than
# this (0: no spill): it joins the refill SET,
# ARGV[10] AutoThrottle start delay ms (-1: AutoThrottle off),
# ARGV[11] the IP delay ms (0: no IP schedule: POLITENESS_KEY names no ip),
# ARGV[12] the worker's DOWNLOAD_SLOTS as JSON, {host name: [delay ms,
# concurrency]} (-1: not set), '' for none
# KEYS[9] overrides HASH, KEYS[10] IP schedule ZSET (ip -> busy until, ms)
# Due entries of the delayed ZSET are moved into their queues first.
# A host is leased at most once per spacing (host_conf, spacing); with an IP
# schedule, not while its address (the record's ``ip``) is busy for more
# than half an IP delay: the host then waits in ``ready`` until then, so
# another host is leased instead, and each lease marks its address busy for
# the IP delay. (So a partition leases an address's hosts at most twice per
# IP delay; a request that then waits for the address marks it busy until
# after its own turn, in every partition: see the download lock.)
# Returns {reclaimed, ms until the next host or delayed retry is ready
#          (-1: none queued),
#          hosts ready, leases outstanding, entries poisoned, paused (0/1),
#          spaced (1: a host not parked waits out its spacing),
#          id1, request1, id2, request2, ...}
LEASE_LUA = (
    LUA_SCHEDULE_HOST
    + LUA_HOST_CONF
    + LUA_IP_SCHEDULE
    + f"""
local SPACED_LOOKAHEAD = {SPACED_LOOKAHEAD}
"""
    + """
local ready, leases, ldata, seq = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
pkey = KEYS[5]
local qprefix, hprefix = ARGV[1], ARGV[2]
local count, lease_ms = tonumber(ARGV[3]), tonumber(ARGV[4])
local worker, default_delay = ARGV[5], tonumber(ARGV[6])
local quiet = tonumber(ARGV[8])
local refill_below = tonumber(ARGV[9] or '0') or 0
local start = tonumber(ARGV[10] or '-1') or -1
local ip_ms = tonumber(ARGV[11] or '0') or 0
local lead = math.floor(ip_ms / 2)
local slots = {}
if ARGV[12] and ARGV[12] ~= '' then slots = cjson.decode(ARGV[12]) end
local conf, ipsched = KEYS[9], KEYS[10]
local function slot_value(v)
  if type(v) == 'number' and v >= 0 then return v end
  return nil
end
local now = now_ms()

local reclaimed = 0
local expired = redis.call('ZRANGEBYSCORE', leases, '-inf', now, 'LIMIT', 0,
                           tonumber(ARGV[7]))
for _, id in ipairs(expired) do
  reclaimed = reclaimed
    + requeue_lease(ready, leases, ldata, qprefix, hprefix, id, now)
end
promote_delayed(KEYS[7], ready, qprefix, hprefix, seq, now, count * 4 + 8)

local out = {}
local paused = redis.call('EXISTS', KEYS[6])
local guard = count * 4 + 8
if paused == 1 then guard = 0 end
while #out < count * 2 and guard > 0 do
  guard = guard - 1
  local top = redis.call('ZRANGE', ready, 0, 0, 'WITHSCORES')
  if #top == 0 or tonumber(top[2]) > now then break end
  local host = top[1]
  local hkey = hprefix .. host
  local rec = host_record(hkey, on_key)
  local ip = ip_ms > 0 and redis.call('HGET', hkey, 'ip')
  -- Half an IP delay early: the request reaches its worker's lock as the
  -- address frees, rather than a lease round and a download pipeline late.
  local ip_free = ip and ip_free_at(ipsched, ip) - lead or 0
  if rec.park > now then
    redis.call('ZADD', ready, rec.park, host)
  elseif ip_free > now then
    redis.call('ZADD', ready, ip_free, host)
  else
    local q = qprefix .. host
    local popped = on_key('ZPOPMIN', q)
    if #popped == 0 then
      redis.call('ZREM', ready, host)
    else
      local name = host_name(host)
      local slot = slots[name] or {}
      local own = host_conf(conf, name, slot_value(slot[1]), slot_value(slot[2]),
                            default_delay)
      local nxt = now + spacing(rec, own, now, quiet, start)
      if ip then ip_busy(ipsched, ip, now + ip_ms, now) end
      redis.call('HSET', hkey, 'next', nxt)
      local left = redis.call('ZCARD', q)
      if left < refill_below
          and (tonumber(redis.call('HGET', hkey, 'spilled')) or 0) > 0 then
        redis.call('SADD', KEYS[8], host)
      end
      if left > 0 then
        redis.call('ZADD', ready, nxt, host)
      else
        redis.call('ZREM', ready, host)
      end
      local id = worker .. ':' .. redis.call('INCR', seq)
      redis.call('HSET', ldata, id, host .. '\\n' .. popped[2] .. '\\n' .. popped[1])
      redis.call('ZADD', leases, now + lease_ms, id)
      out[#out + 1] = id
      out[#out + 1] = popped[1]
    end
  end
end

local wait = -1
for _, zset in ipairs({ready, KEYS[7]}) do
  local top = redis.call('ZRANGE', zset, 0, 0, 'WITHSCORES')
  if #top > 0 then
    local w = math.max(0, tonumber(top[2]) - now)
    if wait < 0 or w < wait then wait = w end
  end
end
-- A host waiting out only its spacing (not parked: its score is its `next`)
-- is work about to come, however far its crawl delay; the soonest few
-- hosts are looked at, parked ones skipped.
local spaced = 0
local soon = redis.call('ZRANGEBYSCORE', ready, '(' .. now, '+inf', 'WITHSCORES',
                        'LIMIT', 0, SPACED_LOOKAHEAD)
for i = 1, #soon, 2 do
  local rec = host_record(hprefix .. soon[i], on_key)
  if rec.park < tonumber(soon[i + 1]) then
    spaced = 1
    break
  end
end
local res = {reclaimed, wait, redis.call('ZCARD', ready), redis.call('ZCARD', leases),
             poisoned, paused, spaced}
for _, v in ipairs(out) do res[#res + 1] = v end
return res
"""
)

# release: hand leases back to their queues now (a graceful stop returns the
# requests it has not started), keeping their original scores.
# KEYS[1] ready ZSET, KEYS[2] leases ZSET, KEYS[3] lease data HASH,
# KEYS[4] poison LIST
# ARGV[1] queue key prefix, ARGV[2] host record key prefix, ARGV[3..] lease ids
# Returns the number of requests put back.
RELEASE_LUA = (
    LUA_SCHEDULE_HOST
    + """
local ready, leases, ldata = KEYS[1], KEYS[2], KEYS[3]
pkey = KEYS[4]
local qprefix, hprefix = ARGV[1], ARGV[2]
local now = now_ms()
local n = 0
for i = 3, #ARGV do
  n = n + requeue_lease(ready, leases, ldata, qprefix, hprefix, ARGV[i], now)
end
return n
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


# --- Dead-letter scripts ------------------------------------------------------
# add: store or replace one entry and keep the per-reason counts in step.
# KEYS[1] dlq HASH, KEYS[2] reasons HASH, KEYS[3] unrecorded LIST
# ARGV[1] URL, ARGV[2] reason (the entry's), ARGV[3] entry JSON,
# ARGV[4] '1' when no page record exists for it (the URL is then listed in
# KEYS[3], see unrecorded below), else '0'.
# Returns 1 if the URL was new (see dlq_put).
DLQ_ADD_LUA = (
    LUA_DLQ
    + """
local new = dlq_put(KEYS[1], KEYS[2], ARGV[1], cjson.decode(ARGV[3]))
if ARGV[4] == '1' then redis.call('RPUSH', KEYS[3], ARGV[1]) end
return new
"""
)

# unrecorded: take a page of the dead letters written with no page record in
# the store (by the scheduler, or by a script: the host-down sweep, the
# commit's diversion of a down host's URLs), oldest first.
# KEYS[1] dlq HASH, KEYS[2] unrecorded LIST; ARGV[1] page size
# Returns {URLs still listed after this page, entry JSON...}: a URL whose
# entry is gone meanwhile (re-queued, purged) is skipped. A page, not the
# whole list: a sweep of a big host never builds one giant reply.
DLQ_UNRECORDED_LUA = """
local urls = redis.call('LPOP', KEYS[2], tonumber(ARGV[1]))
local out = {0}
if urls then
  for _, url in ipairs(urls) do
    local entry = redis.call('HGET', KEYS[1], url)
    if entry then out[#out + 1] = entry end
  end
end
out[1] = redis.call('LLEN', KEYS[2])
return out
"""

# host down: the verdict on a host that has been failing (no response at all)
# for ``HOST_DOWN_AFTER``, and the sweep of its waiting requests into the
# dead-letter queue, in one step. Single-slot: every key is the frontier's
# (one host's queue and record, and the frontier's ready, delayed and DLQ).
# KEYS[1] host record HASH, KEYS[2] host queue ZSET, KEYS[3] ready ZSET,
# KEYS[4] delayed ZSET, KEYS[5] dlq HASH, KEYS[6] reasons HASH,
# KEYS[7] dlq unrecorded LIST
# ARGV[1] host key, ARGV[2] HOST_DOWN_AFTER (or DNS_DOWN_AFTER) ms,
# ARGV[3] HOST_DOWN_TTL ms, ARGV[4] the error to record, ARGV[5] the
# verdict's reason: 'host_down', or 'dns' (a name that does not resolve)
# When a verdict is in force (``down`` in the future): nothing to do. Else,
# when the record's ``failing_since`` is at least ARGV[2] ms old: ``down`` =
# now + ARGV[3] and ``down_reason`` = ARGV[5] (the commit's dead letters of
# the host take that reason, see dlq_member), the host parked as long
# (nothing of it is leased), every request of its queue and of the delayed
# ZSET dead-lettered with reason ARGV[5] (the delayed ZSET is read whole: a
# verdict is rare, and it holds retries only). Returns {requests
# dead-lettered, the verdict's end in ms (0: none in force), 1 if this call
# made the verdict else 0}.
HOST_DOWN_LUA = (
    LUA_DLQ
    + LUA_RECORD
    + LUA_SCORE
    + """
local hkey, q, ready, delayed = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local dlq, reasons, unrecorded = KEYS[5], KEYS[6], KEYS[7]
local host, err, why = ARGV[1], ARGV[4], ARGV[5]
local now = now_ms()
local rec = host_record(hkey)
if rec.down > now then return {0, rec.down, 0} end
local since = rec.failing_since
if since == 0 or now - since < tonumber(ARGV[2]) then return {0, 0, 0} end
local down = now + tonumber(ARGV[3])
redis.call('HSET', hkey, 'down', down, 'down_reason', why)
park_until(hkey, rec, down)
local n = 0
local queued = redis.call('ZRANGE', q, 0, -1, 'WITHSCORES')
for i = 1, #queued, 2 do
  local prio = priority_of(tonumber(queued[i + 1]))
  n = n + dlq_member(dlq, reasons, unrecorded, hkey, host, prio, queued[i], why,
                     err)
end
redis.call('DEL', q)
redis.call('ZREM', ready, host)
local head = host .. '\\n'
for _, entry in ipairs(redis.call('ZRANGE', delayed, 0, -1)) do
  if string.sub(entry, 1, #head) == head then
    local prio, member = string.match(entry, '^[^\\n]+\\n([^\\n]*)\\n(.*)$')
    if member then
      n = n + dlq_member(dlq, reasons, unrecorded, hkey, host,
                         tonumber(prio) or 0, member, why, err)
    end
    redis.call('ZREM', delayed, entry)
  end
end
return {n, down, 1}
"""
)

# remove: delete entries and keep the per-reason counts in step.
# KEYS[1] dlq HASH, KEYS[2] reasons HASH; ARGV: pairs of a URL and the entry
# expected ('': any): an entry that changed meanwhile (the URL failed again,
# or a requeue put it straight back) is kept.
# Returns the number of entries deleted.
DLQ_REMOVE_LUA = """
local n = 0
for i = 1, #ARGV, 2 do
  local url, expected = ARGV[i], ARGV[i + 1]
  local old = redis.call('HGET', KEYS[1], url)
  if old and (expected == '' or old == expected) then
    local reason = cjson.decode(old)['reason']
    if redis.call('HINCRBY', KEYS[2], reason, -1) <= 0 then
      redis.call('HDEL', KEYS[2], reason)
    end
    redis.call('HDEL', KEYS[1], url)
    n = n + 1
  end
end
return n
"""


# --- Spill scripts ------------------------------------------------------------
# refill start: a refill of one host may read the store only when every
# request spilled so far is written there; it clears `spill_low`, so the
# commit script records the lowest score spilled from now on.
# KEYS[1] the host record. Returns 1 to go on, 0 (requests on their way).
REFILL_START_LUA = """
if (tonumber(redis.call('HGET', KEYS[1], 'spilling')) or 0) > 0 then return 0 end
redis.call('HDEL', KEYS[1], 'spill_low')
return 1
"""

# refill: put the next spilled requests of one host back in its queue, with
# their original scores: those the worker read from the store (after
# REFILL_START_LUA) that score below every request spilled since. While the
# host is judged down (its record's ``down`` in the future, see
# extensions.core.frontier.deadletters.HOST_DOWN_LUA) they are dead-lettered as
# ``host_down``
# instead, as the commit script does with its new requests: the store drains
# into the DLQ rather than into fetches of a host that is down.
# KEYS[1] ready ZSET, KEYS[2] refill SET, KEYS[3] poison LIST,
# KEYS[4] dlq HASH, KEYS[5] dlq reasons HASH, KEYS[6] dlq unrecorded LIST,
# KEYS[7] the host's record HASH, KEYS[8] the host's queue ZSET
# ARGV[1] host, ARGV[2] 1 if the store holds more of the host than these,
# ARGV[3] the refill threshold, then (score, member) pairs in score order.
# Returns the number n of pairs moved out of the store (queued back or
# dead-lettered): the first n (the worker deletes them from the store).
REFILL_LUA = (
    LUA_SCHEDULE_HOST
    + LUA_DLQ
    + """
local ready, refill = KEYS[1], KEYS[2]
pkey = KEYS[3]
local host, hkey, q = ARGV[1], KEYS[7], KEYS[8]
local now = now_ms()
local low = tonumber(redis.call('HGET', hkey, 'spill_low'))
local down = (tonumber(redis.call('HGET', hkey, 'down')) or 0) > now
local n, queued = 0, 0
for i = 4, #ARGV, 2 do
  if low and tonumber(ARGV[i]) >= low then break end
  if down then
    local prio = priority_of(tonumber(ARGV[i]))
    dlq_member(KEYS[4], KEYS[5], KEYS[6], hkey, host, prio, ARGV[i + 1],
               'host_down', 'host down (HOST_DOWN_AFTER): spilled, not queued')
  else
    on_key('ZADD', q, 'NX', ARGV[i], ARGV[i + 1])
    queued = queued + 1
  end
  n = n + 1
end
local more = ARGV[2] == '1' or n < (#ARGV - 3) / 2
local left
if not more and not low then
  left = 0  -- the store held these only, and nothing was spilled since
else
  left = math.max((tonumber(redis.call('HGET', hkey, 'spilled')) or 0) - n, 0)
  if more then left = math.max(left, 1) end
end
redis.call('HSET', hkey, 'spilled', left)
if queued > 0 then schedule_host(ready, hkey, host, now) end
if left == 0 or redis.call('ZCARD', q) >= tonumber(ARGV[3]) then
  redis.call('SREM', refill, host)
end
return n
"""
)

# spilled: the worker wrote refused requests to the spill store: they are no
# longer on their way, and its write-ahead entry holding them goes.
# KEYS[1] the worker's write-ahead HASH
# ARGV[1] host record key prefix, ARGV[2] write-ahead entry id ('' for none),
# then (host, count) pairs: any number of hosts, so their record keys are
# built from ARGV[1] (per-host keys under the frontier's hash tag, the slot
# of KEYS[1], as the frontier's scripts build theirs). Returns the number of
# hosts.
SPILLED_LUA = """
for i = 3, #ARGV, 2 do
  local hkey = ARGV[1] .. ARGV[i]
  if redis.call('HINCRBY', hkey, 'spilling', -tonumber(ARGV[i + 1])) < 0 then
    redis.call('HSET', hkey, 'spilling', 0)
  end
end
if ARGV[2] ~= '' then redis.call('HDEL', KEYS[1], ARGV[2]) end
return (#ARGV - 2) / 2
"""


# --- Host record scripts ------------------------------------------------------
# KEYS[1] the host record. ARGV[1] ms to park the host from now.
# Moves ``park`` later, never earlier. Returns the park deadline (epoch ms).
PARK_LUA = (
    LUA_RECORD
    + """
local rec = host_record(KEYS[1])
return park_until(KEYS[1], rec, now_ms() + tonumber(ARGV[1]))
"""
)

# KEYS[1] the host record.
# ARGV[1] initial back-off ms, ARGV[2] cap ms, ARGV[3] quiet period ms,
# ARGV[4] jitter factor (1 +- BACKOFF_JITTER), ARGV[5] Retry-After ms (-1: none).
# With a Retry-After: park = max(park, now + ARGV[5]). Without: the back-off
# starts at ARGV[1] (or after a quiet period), doubles when raised again once
# the current window has passed (a burst of 429s from requests sent before the
# raise counts once), is capped at ARGV[2]; park = max(park, now + back-off).
# Returns {back-off ms now in force, park deadline ms, 1 if raised else 0}.
RAISE_BACKOFF_LUA = (
    LUA_RECORD
    + """
local now = now_ms()
local rec = host_record(KEYS[1])
local cur = effective_backoff(rec, now, tonumber(ARGV[3]))
local raised = 0
local retry_after = tonumber(ARGV[5])
local until_ms
if retry_after >= 0 then
  until_ms = now + retry_after
else
  if cur > 0 and now - rec.backoff_at < cur then
    return {cur, rec.park, 0}
  end
  local new = tonumber(ARGV[1])
  if cur > 0 then
    new = cur * 2
  end
  new = math.floor(math.min(tonumber(ARGV[2]), new * tonumber(ARGV[4])))
  redis.call('HSET', KEYS[1], 'backoff', new, 'backoff_at', now)
  cur = new
  raised = 1
  until_ms = now + new
end
return {cur, park_until(KEYS[1], rec, until_ms), raised}
"""
)

# KEYS[1] the host record.
# ARGV[1] threshold (failures), ARGV[2] cool-down ms, ARGV[3] max cool-down ms.
# Counts a connection failure (``fails``; the first of a run sets
# ``failing_since``). When the count reaches the
# threshold and the breaker is not already open (park in the future), opens
# it: park = now + cool-down * 2^(times opened in a row), capped; ``breaker``
# counts the openings. Returns {fails, park ms if opened by this call else 0}.
FAIL_LUA = (
    LUA_RECORD
    + """
local now = now_ms()
local fails = redis.call('HINCRBY', KEYS[1], 'fails', 1)
redis.call('HSETNX', KEYS[1], 'failing_since', now)
if fails < tonumber(ARGV[1]) then
  return {fails, 0}
end
local rec = host_record(KEYS[1])
if rec.park > now then
  return {fails, 0}
end
local opened = redis.call('HINCRBY', KEYS[1], 'breaker', 1)
local cool = tonumber(ARGV[2]) * 2 ^ math.min(opened - 1, 30)
cool = math.floor(math.min(cool, tonumber(ARGV[3])))
redis.call('HSET', KEYS[1], 'park', now + cool)
return {fails, now + cool}
"""
)

# KEYS[1] the host record. No ARGV.
# Closes the breaker after a response: clears ``fails``, ``breaker``,
# ``failing_since`` and a ``down`` verdict (the host answers again), with
# the park the verdict set (``park`` = ``down``: a later park, a Retry-After
# say, is kept). Returns the number of openings it had (0: it was closed).
SUCCESS_LUA = """
local r = redis.call('HMGET', KEYS[1], 'breaker', 'down', 'park')
local opened = tonumber(r[1] or '0') or 0
if r[2] and r[2] == r[3] then redis.call('HDEL', KEYS[1], 'park') end
redis.call('HDEL', KEYS[1], 'fails', 'breaker', 'failing_since', 'down',
           'down_reason')
return opened
"""

# KEYS[1] the host record. ARGV[1] the robots.txt delay ms ('': none).
# Returns nothing.
SET_DELAY_LUA = """
if ARGV[1] == '' then
  redis.call('HDEL', KEYS[1], 'delay')
else
  redis.call('HSET', KEYS[1], 'delay', ARGV[1])
end
"""

# AutoThrottle, fleet-wide: one response's latency moves the host's
# ``throttle`` as Scrapy's AutoThrottle moves a download slot's delay
# (scrapy/extensions/throttle.py): towards latency / target concurrency, at
# once when that is higher, else halfway; within [min, max]; a response that
# is not a 200 may raise it, never lower it (error pages are fast).
# KEYS[1] the host record.
# ARGV[1] latency ms, ARGV[2] AUTOTHROTTLE_TARGET_CONCURRENCY,
# ARGV[3] the lowest delay ms (DOWNLOAD_DELAY), ARGV[4] AUTOTHROTTLE_MAX_DELAY ms,
# ARGV[5] the start delay ms (the throttle of a host with none yet),
# ARGV[6] 1 if the response was a 200, else 0.
# Returns {throttle ms before, throttle ms now}.
THROTTLE_LUA = (
    LUA_RECORD
    + """
local rec = host_record(KEYS[1])
local old = rec.throttle or tonumber(ARGV[5])
local target = tonumber(ARGV[1]) / tonumber(ARGV[2])
local new = math.max(target, (old + target) / 2)
new = math.floor(math.min(math.max(tonumber(ARGV[3]), new), tonumber(ARGV[4])))
if ARGV[6] ~= '1' and new <= old then return {old, old} end
redis.call('HSET', KEYS[1], 'throttle', new)
return {old, new}
"""
)

# KEYS[1] the host record. ARGV[1] the address the host's name resolves to.
# Sets ``ip`` (the lease script's IP schedule reads it). Returns 1 if it changed.
SET_IP_LUA = """
local ip = ARGV[1]
if redis.call('HGET', KEYS[1], 'ip') == ip then return 0 end
redis.call('HSET', KEYS[1], 'ip', ip)
return 1
"""

# KEYS[1] one partition's IP schedule ZSET. ARGV[1] the address, ARGV[2] ms
# from now it stays busy. Marks it busy until then (never earlier than it
# already is). Returns nothing.
IP_BUSY_LUA = (
    LUA_NOW_MS
    + LUA_IP_SCHEDULE
    + """
local now = now_ms()
ip_busy(KEYS[1], ARGV[1], now + tonumber(ARGV[2]), now)
"""
)

# KEYS[1] one partition's overrides HASH. ARGV[1] the host name, then (field,
# value) pairs of OVERRIDE_FIELDS: a number sets the field, '' removes it.
# A host left with no field is removed. Returns the override's JSON ('': none).
SET_OVERRIDE_LUA = """
local raw = redis.call('HGET', KEYS[1], ARGV[1])
local o = {}
if raw then
  local ok, v = pcall(cjson.decode, raw)
  if ok and type(v) == 'table' then o = v end
end
for i = 2, #ARGV, 2 do
  if ARGV[i + 1] == '' then o[ARGV[i]] = nil else o[ARGV[i]] = tonumber(ARGV[i + 1]) end
end
if next(o) == nil then
  redis.call('HDEL', KEYS[1], ARGV[1])
  return ''
end
local out = cjson.encode(o)
redis.call('HSET', KEYS[1], ARGV[1], out)
return out
"""
