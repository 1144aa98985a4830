--- kinformer.events: an Event recorder like client-go's (tools/record with its EventCorrelator).
-- docs/controller.md, "Events".
--
-- Contract:
-- - recorder:record(obj, type, reason, message) never does I/O and never blocks: it checks its
--   arguments (wrong ones raise at the caller's line), applies the per-object rate limit and
--   queues the Event. recorder:flush(max) writes queued Events (blocking REST calls, each with
--   a short timeout); the manager calls it from its loop between reconciles, never inside one.
-- - Events are core v1 Events (what `kubectl describe` lists) on the object: involvedObject
--   with kind, apiVersion, namespace, name, uid, resourceVersion; source.component and
--   reportingComponent are the recorder's component, reportingInstance its instance.
-- - Aggregation: an Event identical to one recorded before (same object, type, reason, message,
--   component) is not a new Event: the existing one gets count + 1 and a new lastTimestamp
--   (one merge patch of count and lastTimestamp; repeats recorded before it is written coalesce
--   into one write). The identities are remembered for the last `cache_size` distinct Events.
-- - Rate limit (client-go's spam filter): a token bucket per component + object, `burst` (25)
--   tokens refilled one per `refill` (300) seconds; an Event without a token is dropped
--   (status().rate_limited).
-- - Bounded: at most `max_queue` (1000) Events wait; more are dropped (status().dropped). A write
--   that fails is tried again at later flushes, at most `max_attempts` (3) times, then dropped;
--   after a transport failure (server unreachable) writes pause for a second. Nothing is ever
--   retried inside flush.
-- Threads: none; one recorder belongs to one Lua thread.
local argcheck = require "kinformer.argcheck"
local clock = require "kinformer.clock"
local core = require "kinformer.core"
local errtext = require "kinformer.errtext"

local type, tostring, setmetatable, pairs = type, tostring, setmetatable, pairs
local os_date, string_format, math_min, math_random = os.date, string.format, math.min,
  math.random
local raise = argcheck.raise

local _M = {}

local Recorder = {}
Recorder.__index = Recorder

local KNOWN = { client = true, component = true, instance = true, max_queue = true,
  burst = true, refill = true, max_attempts = true, cache_size = true, timeout = true }

--- events.recorder{ client, component = "kinformer", instance = hostname, max_queue = 1000,
--   burst = 25, refill = 300, max_attempts = 3, cache_size = 4096, timeout = 2 } -> recorder
function _M.recorder(opts)
  local F = "recorder"
  opts = argcheck.options(opts, KNOWN, F)
  local client = opts.client
  if type(client) ~= "table" or type(client.create) ~= "function" then
    raise(1, F, "option 'client' (a kinformer client) required")
  end
  local component = argcheck.string(opts, "component", F) or "kinformer"
  local instance = argcheck.string(opts, "instance", F) or os.getenv("HOSTNAME") or ""
  return setmetatable({
    client = client, component = component, instance = instance,
    max_queue = argcheck.number(opts, "max_queue", F, 1000, 1, false, true),
    burst = argcheck.number(opts, "burst", F, 25, 1),
    refill = argcheck.number(opts, "refill", F, 300, 0, true),
    max_attempts = argcheck.number(opts, "max_attempts", F, 3, 1, false, true),
    cache_size = argcheck.number(opts, "cache_size", F, 4096, 1, false, true),
    timeout = argcheck.number(opts, "timeout", F, 2, 0, true),
    _known = {}, _known_n = 0,   -- identity -> entry (aggregation cache)
    _buckets = {}, _buckets_n = 0, -- component + object -> { tokens, at }
    _queue = {}, _qfirst = 1, _qlast = 0, -- entries waiting for a write, in order
    _pause_until = 0,
    _recorded = 0, _written = 0, _aggregated = 0, _dropped = 0, _rate_limited = 0,
    _failed = 0,
  }, Recorder)
end

local function stamp() return os_date("!%Y-%m-%dT%H:%M:%SZ") end

local function take_token(self, key, t)
  local b = self._buckets[key]
  if not b then
    if self._buckets_n >= self.cache_size then self._buckets, self._buckets_n = {}, 0 end
    b = { tokens = self.burst, at = t }
    self._buckets[key] = b
    self._buckets_n = self._buckets_n + 1
  else
    b.tokens = math_min(self.burst, b.tokens + (t - b.at) / self.refill)
    b.at = t
  end
  if b.tokens < 1 then return false end
  b.tokens = b.tokens - 1
  return true
end

local function queued(self) return self._qlast - self._qfirst + 1 end

local function enqueue(self, e)
  self._qlast = self._qlast + 1
  self._queue[self._qlast] = e
  e.queued = true
end

--- recorder:record(obj, type, reason, message) -> true | false, why ("rate limited", "queue
-- full"). obj: a Kubernetes object (cached or not) with apiVersion, kind and metadata.name;
-- type: "Normal" or "Warning".
function Recorder:record(obj, etype, reason, message)
  local md = type(obj) == "table" and obj.metadata
  if type(md) ~= "table" or type(md.name) ~= "string" then
    raise(1, "event", "object with metadata.name expected")
  end
  if etype ~= "Normal" and etype ~= "Warning" then
    raise(2, "event", "type must be \"Normal\" or \"Warning\", got " .. tostring(etype))
  end
  if type(reason) ~= "string" or reason == "" then raise(3, "event", "reason (string) expected") end
  if message ~= nil and type(message) ~= "string" then
    raise(4, "event", "message must be a string")
  end
  message = message or ""
  self._recorded = self._recorded + 1
  local kind, api = obj.kind or "", obj.apiVersion or ""
  local ns, name, uid = md.namespace or "", md.name, md.uid or ""
  local object_key = self.component .. "\0" .. kind .. "\0" .. ns .. "\0" .. name .. "\0" .. uid
  if not take_token(self, object_key, clock.now()) then
    self._rate_limited = self._rate_limited + 1
    return false, "rate limited"
  end
  local id = object_key .. "\0" .. etype .. "\0" .. reason .. "\0" .. message
  local e = self._known[id]
  local now = stamp()
  if e then
    e.count = e.count + 1
    e.last = now
    self._aggregated = self._aggregated + 1
    if e.queued then return true end
  else
    if self._known_n >= self.cache_size then self._known, self._known_n = {}, 0 end
    e = { count = 1, first = now, last = now, type = etype, reason = reason, message = message,
          attempts = 0,
          involved = { kind = obj.kind, apiVersion = obj.apiVersion,
                       namespace = md.namespace, name = name, uid = md.uid,
                       resourceVersion = md.resourceVersion },
          namespace = (md.namespace and md.namespace ~= "") and md.namespace or "default",
          name = string_format("%s.%x%05x", name, os.time(), math_random(0, 0xfffff)) }
    self._known[id] = e
    self._known_n = self._known_n + 1
  end
  if queued(self) >= self.max_queue then
    self._dropped = self._dropped + 1
    return false, "queue full"
  end
  enqueue(self, e)
  return true
end

-- One write of entry e -> true | nil, err
function Recorder:_write(e)
  local c, opts = self.client, { timeout = self.timeout, namespace = e.namespace }
  local res, err
  if not e.created then
    res, err = c:create("events", {
      apiVersion = "v1", kind = "Event",
      metadata = { name = e.name, namespace = e.namespace },
      involvedObject = e.involved, reason = e.reason, message = e.message, type = e.type,
      count = e.count, firstTimestamp = e.first, lastTimestamp = e.last,
      source = { component = self.component },
      reportingComponent = self.component, reportingInstance = self.instance,
    }, opts)
    if not res and type(err) == "table" and err.code == 409 then -- created by a lost answer
      e.created = true
      return self:_write(e)
    end
  else
    res, err = c:patch("events", e.name, { count = e.count, lastTimestamp = e.last }, opts)
    if not res and type(err) == "table" and err.code == 404 then -- expired: a new one
      e.created = false
      return self:_write(e)
    end
  end
  if res then e.created = true end
  return res, err
end

--- recorder:discard() -> n: drops every queued Event, counted as dropped (a replica that lost
-- its lease writes none of what it recorded while it led).
function Recorder:discard()
  local n = queued(self)
  for i = self._qfirst, self._qlast do
    local e = self._queue[i]
    self._queue[i] = nil
    e.queued = false
  end
  self._qfirst, self._qlast = 1, 0
  self._dropped = self._dropped + n
  return n
end

--- recorder:flush([max]) -> how many Events it wrote (at most max, default 10). Writes each
-- queued Event once (its latest count); a failed one goes back to the queue's end until it
-- failed max_attempts times.
function Recorder:flush(max)
  max = max or 10
  local written = 0
  local n = queued(self)
  if n == 0 or clock.now() < self._pause_until then return 0 end
  for _ = 1, math_min(n, max) do
    local i = self._qfirst
    local e = self._queue[i]
    self._queue[i] = nil
    self._qfirst = i + 1
    e.queued = false
    local sent = e.count
    local ok, err = self:_write(e)
    if ok then
      written = written + 1
      self._written = self._written + 1
      e.attempts = 0
      if e.count ~= sent then enqueue(self, e) end -- repeats recorded meanwhile
    else
      e.attempts = e.attempts + 1
      self._failed = self._failed + 1
      if e.attempts >= self.max_attempts then
        self._dropped = self._dropped + 1
        core.log("debug", "events: dropped " .. e.reason .. " on " .. e.involved.name .. ": "
          .. errtext(err))
      else
        enqueue(self, e)
      end
      if type(err) ~= "table" or err.code == 0 then -- unreachable: pause
        self._pause_until = clock.now() + 1
        break
      end
    end
  end
  return written
end

--- recorder:pending() -> how many Events wait for a write.
function Recorder:pending() return queued(self) end

--- recorder:status() -> { recorded, written, aggregated, dropped, rate_limited, failed, pending }
function Recorder:status()
  return { recorded = self._recorded, written = self._written, aggregated = self._aggregated,
           dropped = self._dropped, rate_limited = self._rate_limited, failed = self._failed,
           pending = queued(self) }
end

_M.Recorder = Recorder
return _M
