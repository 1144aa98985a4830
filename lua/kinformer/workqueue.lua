--- kinformer.workqueue: client-go's rate-limited work queue (util/workqueue) for one Lua thread.
--
-- Contract (client-go semantics, docs/workqueue.md):
-- - Items are strings (object keys). An item is queued at most once: it is "dirty" from add until
--   a worker gets it. An item added while a worker processes it is not handed to a second worker;
--   it is queued again when that worker calls done(item). add of a queued item is a no-op but
--   for its priority (below).
-- - add_after(item, s) holds the item in a min-heap of ready times (kinformer.workqueue.heap);
--   a second add_after of a waiting item only ever moves it earlier. add_rate_limited(item) is
--   add_after(item, limiter:when(item)); forget / num_requeues ask the rate limiter.
-- - Priorities, after controller-runtime's priority queue (pkg/controller/priorityqueue): every
--   add takes an integer priority, default 0 (controller-runtime uses -100 for the keys of an
--   initial list or a resync). get hands out the highest priority first, FIFO within one
--   priority (by when the item became ready there). A dirty item has one priority, the highest
--   it was added with since it became dirty: an add at a higher priority promotes a queued item
--   (to the end of its new priority), a lower one changes nothing. An item added while it is
--   processed is queued at done() with that priority. A delayed item keeps the highest priority
--   of its add_after calls and is added with it when due. Anti-starvation (the `anti_starvation`
--   option, N, default 10): while an item of lower priority than the highest is ready, at least
--   one in every N items get hands out is the lower-priority item that became ready first
--   (kinformer.workqueue.ready has the exact rule). With priority 0 only, this is client-go's
--   FIFO, at its cost.
-- - shut_down(): adds are ignored and waiting (delayed) items dropped; get still hands out what is
--   queued and returns nil, "shutdown" once the queue is empty. shut_down_with_drain() also waits
--   until every item handed out is done.
--
-- Threads: none. Everything runs on the caller's thread. Delayed items move to the queue lazily,
-- when an operation looks at the queue (add, get, done, len, status, next_due, ...), so the
-- order is the one client-go's timer goroutine would produce; an item due at t is ready for any
-- operation whose clock reads >= t, and next_due() says how long to sleep until one is. get()
-- blocks only while it waits for the next delayed item, the timeout, or the informers it
-- dispatches (their handlers may add items); it waits with core.wait on the informers' fds, or
-- with the `wait` option (e.g. a coroutine yield).
--
-- The rate limiters live in kinformer.workqueue.ratelimiter; this module re-exports their
-- constructors under client-go's names.
local core = require "kinformer.core"
local argcheck = require "kinformer.argcheck"
local map = require "kinformer.workqueue.map"
local heap = require "kinformer.workqueue.heap"
local ready = require "kinformer.workqueue.ready"
local ratelimiter = require "kinformer.workqueue.ratelimiter"

local type, pairs, ipairs, setmetatable, tostring = type, pairs, ipairs, setmetatable, tostring
local math_huge, math_floor, string_format = math.huge, math.floor, string.format

local core_now, core_wait, core_take_signal = core.now, core.wait, core.take_signal
local raise, fail = argcheck.raise, argcheck.fail
local map_new, map_put, map_del = map.new, map.put, map.del
local heap_up, heap_pop = heap.up, heap.pop
local ready_new, ready_push, ready_pop = ready.new, ready.push, ready.pop
local ready_promote, ready_counts = ready.promote, ready.counts
local is_limiter = ratelimiter.is_limiter

local MAX_WAIT = 0.1   -- longest single wait: bounds how late an add from elsewhere is seen
local BATCH = 100      -- informer:dispatch batch per look at the queue
local MAX_PRIORITY = 2^53 -- priorities are integers of at most this size (exact in LuaJIT too)
local ANTI_STARVATION = 10

local _M = { _VERSION = core._VERSION }

--- workqueue.exponential_rate_limiter, fast_slow_rate_limiter, bucket_rate_limiter,
-- max_of_rate_limiter, with_max_wait_rate_limiter, default_rate_limiter (docs/workqueue.md).
_M.exponential_rate_limiter = ratelimiter.exponential
_M.fast_slow_rate_limiter = ratelimiter.fast_slow
_M.bucket_rate_limiter = ratelimiter.bucket
_M.max_of_rate_limiter = ratelimiter.max_of
_M.with_max_wait_rate_limiter = ratelimiter.with_max_wait
_M.default_rate_limiter = ratelimiter.default

local function check_item(item, fname)
  if type(item) ~= "string" then raise(1, fname, "string expected, got " .. type(item)) end
end

-- The priority argument n of fname: nil is 0; an integral float becomes an integer on Lua 5.4.
local function check_priority(p, n, fname)
  if p == nil then return 0 end
  local i = type(p) == "number" and math_floor(p)
  if i ~= p or i < -MAX_PRIORITY or i > MAX_PRIORITY then
    raise(n, fname, "priority must be an integer, got "
      .. (type(p) == "number" and tostring(p) or type(p)))
  end
  return i
end

local function check_timeout(t, fname)
  if t ~= nil and (type(t) ~= "number" or not (t >= 0)) then
    raise(1, fname, "timeout must be nil or a number of seconds >= 0")
  end
end

-- ---- the queue ----

local Queue = {}
Queue.__index = Queue
_M.Queue = Queue

--- workqueue.new{ name = "...", rate_limiter = limiter, informers = { inf, ... },
--                 clock = fn, wait = fn, anti_starvation = N } -> queue
-- Also callable as kinformer.workqueue{ ... } (the module table is callable).
-- rate_limiter: default workqueue.default_rate_limiter (on the queue's clock).
-- informers: dispatched by get() and shut_down_with_drain() while they wait (and once per get).
-- clock: fn() -> seconds (monotonic; default core.now). wait: fn(fds, seconds) waits up to
-- seconds for one of the fds to be readable (default core.wait); a wait that yields a coroutine
-- lets other coroutines add and call done while get() waits. anti_starvation: N, an integer
-- >= 2 (default 10), or false for strict priority order (the contract above).
function _M.new(opts)
  local F = "workqueue"
  opts = argcheck.options(opts, { name = true, rate_limiter = true, informers = true,
    clock = true, wait = true, anti_starvation = true }, F)
  argcheck.string(opts, "name", F)
  local clock = argcheck.func(opts, "clock", F)
  local wait = argcheck.func(opts, "wait", F)
  local every = false
  if opts.anti_starvation ~= false then
    every = argcheck.number(opts, "anti_starvation", F, ANTI_STARVATION, 2, false, true)
  end
  local limiter = opts.rate_limiter
  if limiter == nil then
    limiter = _M.default_rate_limiter{ clock = clock }
  elseif not is_limiter(limiter) then
    raise(1, F, "option 'rate_limiter' must be a rate limiter (when, num_requeues, forget)")
  end
  local informers = opts.informers
  if informers ~= nil then
    if type(informers) ~= "table" then
      raise(1, F, "option 'informers' must be a list of informers")
    end
    local list = {}
    for i, inf in ipairs(informers) do
      if type(inf) ~= "table" or type(inf.dispatch) ~= "function" or type(inf.fd) ~= "function" then
        raise(1, F, "option 'informers': item " .. i .. " is not an informer")
      end
      list[i] = inf
    end
    for k in pairs(informers) do
      if list[k] == nil then raise(1, F, "option 'informers' must be a list of informers") end
    end
    informers = list[1] and list or nil
  end
  return setmetatable({
    name = opts.name,
    _limiter = limiter,
    _informers = informers,
    _now = clock or core_now,
    _wait = wait or core_wait,
    _custom_wait = wait ~= nil,
    -- the ready items by priority (kinformer.workqueue.ready); every item in it is dirty and
    -- not processing, at its dirty priority
    _ready = ready_new(every),
    _dirty = map_new(),      -- item -> its priority: needs processing (queued, or at done)
    _processing = map_new(), -- item -> time get() handed it out
    _added_at = map_new(),   -- item -> time it became dirty (queue latency)
    _heap = {},              -- delayed entries, earliest first
    _waiting = map_new(),    -- item -> its heap entry { item, at, seq, prio, pos }
    _seq = 0,
    _shutting_down = false, _drain = false,
    _adds = 0, _retries = 0, _gets = 0, _dones = 0, _queue_seconds = 0, _work_seconds = 0,
  }, Queue)
end

setmetatable(_M, { __call = function(_, opts) return _M.new(opts) end })

-- client-go Add: the item becomes dirty at priority prio and, unless a worker holds it,
-- queued. A dirty item only takes the higher priority.
local function insert(self, item, t, prio)
  if self._shutting_down then return end
  local dirty = self._dirty
  local cur = dirty.t[item]
  if cur then
    if prio > cur then
      dirty.t[item] = prio
      if not self._processing.t[item] then ready_promote(self._ready, item, cur, prio) end
    end
    return
  end
  self._adds = self._adds + 1
  map_put(dirty, item, prio)
  local added_at = self._added_at
  if not added_at.t[item] then map_put(added_at, item, t) end
  if self._processing.t[item] then return end
  ready_push(self._ready, item, prio)
end

-- Seconds from t until at, rounded up so that a clock reading t + the result finds at passed
-- (at - t can round down, and a caller that sleeps exactly that long must find the item due).
local function due_in(at, t)
  local d = at - t
  local step = at - (t + d)
  while t + d < at do
    d = d + step
    step = step * 2
  end
  return d
end

-- Moves every delayed item whose time has come into the queue, earliest first. Returns the
-- current time when it read the clock (only when something waits).
local function fire(self, t)
  local h = self._heap
  if h[1] == nil then return t end
  t = t or self._now()
  while h[1] and h[1].at <= t do
    local e = heap_pop(h)
    map_del(self._waiting, e.item)
    insert(self, e.item, t, e.prio)
  end
  return t
end

-- Dispatches every live informer once; true when one of them had more than a batch.
local function dispatch(self)
  local busy = false
  for _, inf in ipairs(self._informers) do
    if not (inf.is_stopped and inf:is_stopped()) then
      if inf:dispatch(BATCH) >= BATCH then busy = true end
    end
  end
  return busy
end

local function fds(self)
  local list = {}
  for _, inf in ipairs(self._informers or {}) do
    if not (inf.is_stopped and inf:is_stopped()) then list[#list + 1] = inf:fd() end
  end
  return list
end

-- One wait of get / shut_down_with_drain: until the deadline, the next delayed item, or (at
-- most) MAX_WAIT. Returns the signal name if core.wait was interrupted by a caught signal.
local function wait_once(self, t, deadline, busy)
  local w = busy and 0 or deadline - t
  local h = self._heap
  if h[1] and h[1].at - t < w then w = due_in(h[1].at, t) end
  if w > MAX_WAIT then w = MAX_WAIT end
  if w < 0 then w = 0 end
  local r, sig = self._wait(fds(self), w)
  if r == "signal" then return sig end
end

--- queue:add(item [, priority]): marks item as needing processing at priority (an integer,
-- default 0; higher is served first). If item is queued already, only a higher priority
-- changes something: the item moves to it. No-op after shut_down.
function Queue:add(item, priority)
  check_item(item, "add")
  local p = 0
  if priority ~= nil then p = check_priority(priority, 2, "add") end
  insert(self, item, fire(self) or self._now(), p)
end

--- queue:add_after(item, seconds [, priority]): adds item at priority (default 0) once seconds
-- have passed (at once if seconds <= 0). An item already waiting keeps the earlier of its two
-- times and the higher of its two priorities.
function Queue:add_after(item, seconds, priority)
  check_item(item, "add_after")
  if type(seconds) ~= "number" or seconds ~= seconds then
    raise(2, "add_after", "number of seconds expected, got " .. type(seconds))
  end
  local p = 0
  if priority ~= nil then p = check_priority(priority, 3, "add_after") end
  if self._shutting_down then return end
  self._retries = self._retries + 1
  local t = fire(self) or self._now()
  if seconds <= 0 then
    insert(self, item, t, p)
    return
  end
  local at = t + seconds
  local e = self._waiting.t[item]
  if e then
    if at < e.at then
      e.at = at
      heap_up(self._heap, e.pos)
    end
    if p > e.prio then e.prio = p end
    return
  end
  self._seq = self._seq + 1
  e = { item = item, at = at, seq = self._seq, prio = p }
  local h = self._heap
  h[#h + 1] = e
  heap_up(h, #h)
  map_put(self._waiting, item, e)
end

--- queue:add_rate_limited(item [, priority]): add_after(item, rate_limiter:when(item),
-- priority); the limiter counts a failure of item (even after shut_down, as client-go).
function Queue:add_rate_limited(item, priority)
  check_item(item, "add_rate_limited")
  local p = 0
  if priority ~= nil then p = check_priority(priority, 2, "add_rate_limited") end
  return self:add_after(item, self._limiter:when(item), p)
end

--- queue:forget(item): the rate limiter stops tracking item (its failures go back to 0). It does
-- not call done.
function Queue:forget(item)
  check_item(item, "forget")
  self._limiter:forget(item)
end

--- queue:num_requeues(item) -> how many failures the rate limiter counts for item.
function Queue:num_requeues(item)
  check_item(item, "num_requeues")
  return self._limiter:num_requeues(item)
end

--- queue:len() -> number of items ready to be handed out.
function Queue:len()
  fire(self)
  return self._ready.n
end

--- queue:next_due() -> seconds until get can hand out an item that is not ready yet: 0 when one
-- is ready now, the time until the earliest delayed item is due, math.huge when nothing is
-- ready or delayed (items in flight that were added again come back at their done). A loop
-- that sleeps this long (with nothing else to wait for) finds that item ready: the result is
-- rounded up, never down, against the queue's clock.
function Queue:next_due()
  local t = fire(self)
  if self._ready.n > 0 then return 0 end
  local h = self._heap
  if h[1] == nil then return math_huge end
  return due_in(h[1].at, t)
end

--- queue:get([timeout]) -> item | nil, "shutdown" | nil, "timeout"
-- Hands out the next item: the highest priority first, FIFO within one, anti-starvation aside
-- (the contract above); call done(item) when finished with it. While the queue is empty it
-- waits up to timeout seconds (nil: until an item or shut down) for a delayed item to become
-- ready or for the informers' handlers to add one; after shut_down it still hands out what is
-- queued, then returns nil, "shutdown". Raises if nothing could ever end the wait (no timeout,
-- nothing delayed, no informers, the default wait). Returns nil, "SIGINT" / "SIGTERM" (once per
-- signal, before any item) if a signal was caught since the last get or wait while kinformer
-- catches signals (inside kinformer.run, or after kinformer.catch_signals(true)).
function Queue:get(timeout)
  check_timeout(timeout, "get")
  -- A signal caught while the worker was busy (a write, a slow reconcile) ends get even with
  -- items ready: otherwise a loop that never empties the queue would never see it.
  if not self._custom_wait then
    local sig = core_take_signal()
    if sig then return nil, sig end
  end
  local informers = self._informers
  local deadline
  while true do
    local busy = informers and dispatch(self)
    local t = self._now()
    fire(self, t)
    local r = self._ready
    if r.n > 0 then
      local item = ready_pop(r)
      map_put(self._processing, item, t)
      map_del(self._dirty, item)
      self._gets = self._gets + 1
      local added = self._added_at.t[item]
      if added then
        self._queue_seconds = self._queue_seconds + (t - added)
        map_del(self._added_at, item)
        local m = self._metrics
        if m then m.queue_latency(t - added) end
      end
      return item
    end
    if self._shutting_down then return nil, "shutdown" end
    if not deadline then
      deadline = timeout and t + timeout or math_huge
      if timeout == nil and not informers and not self._custom_wait and not self._heap[1] then
        fail("get would wait forever: the queue is empty, nothing is delayed and nothing can "
          .. "add while it waits (give a timeout, informers or a wait function)")
      end
    end
    if t >= deadline then return nil, "timeout" end
    local sig = wait_once(self, t, deadline, busy)
    if sig then return nil, sig end
  end
end

--- queue:done(item): item's processing is finished; if it was added meanwhile it is queued
-- again. An item that is not being processed is ignored.
function Queue:done(item)
  check_item(item, "done")
  local started = self._processing.t[item]
  if not started then return end
  local t = fire(self) or self._now()
  map_del(self._processing, item)
  self._dones = self._dones + 1
  self._work_seconds = self._work_seconds + (t - started)
  local m = self._metrics
  if m then m.work_duration(t - started) end
  local p = self._dirty.t[item]
  if p then ready_push(self._ready, item, p) end
end

local function stop(self, drain)
  fire(self)
  self._drain = drain
  self._shutting_down = true
  self._heap, self._waiting = {}, map_new()
end

--- queue:shut_down(): ignores later adds and drops the delayed items; get hands out what is
-- queued, then returns nil, "shutdown". Ends a shut_down_with_drain wait.
function Queue:shut_down()
  stop(self, false)
end

--- queue:shut_down_with_drain([timeout]) -> true | nil, "timeout" | nil, "forced"
-- As shut_down, then waits (dispatching the informers) until every item handed out by get is
-- done: true. nil, "timeout" if timeout seconds passed first (the queue stays shut down);
-- nil, "forced" if shut_down() was called meanwhile. Raises if items are in flight and nothing
-- could call done while it waits (no timeout, no informers, the default wait).
function Queue:shut_down_with_drain(timeout)
  check_timeout(timeout, "shut_down_with_drain")
  stop(self, true)
  if self._processing.live == 0 then return true end
  if timeout == nil and not self._informers and not self._custom_wait then
    fail(string_format("shut_down_with_drain would wait forever: %d item(s) in flight and "
      .. "nothing can call done while it waits (give a timeout, informers or a wait function)",
      self._processing.live))
  end
  local deadline = timeout and self._now() + timeout or math_huge
  while true do
    if self._processing.live == 0 then return true end
    if not self._drain then return nil, "forced" end
    local busy = self._informers and dispatch(self)
    if self._processing.live == 0 then return true end
    local t = self._now()
    if t >= deadline then return nil, "timeout" end
    local sig = wait_once(self, t, deadline, busy)
    if sig then return nil, sig end
  end
end

--- queue:shutting_down() -> true once shut_down or shut_down_with_drain was called.
function Queue:shutting_down()
  return self._shutting_down
end

--- queue:set_metrics(hooks | nil): hooks.queue_latency(seconds) runs as get() hands out an
-- item (seconds it waited since it became dirty), hooks.work_duration(seconds) as done() ends
-- one (seconds since get). For histograms (kinformer.metrics.collect_workqueue); the hooks
-- must not raise. nil removes them.
function Queue:set_metrics(hooks)
  if hooks ~= nil and (type(hooks) ~= "table" or type(hooks.queue_latency) ~= "function"
      or type(hooks.work_duration) ~= "function") then
    raise(1, "set_metrics", "table with functions queue_latency and work_duration expected")
  end
  self._metrics = hooks
end

--- queue:status() -> table: client-go's workqueue metrics, right now (see docs/workqueue.md).
function Queue:status()
  local t = fire(self) or self._now()
  local unfinished, longest = 0, 0
  local by_prio = ready_counts(self._ready)
  local dirty = self._dirty.t
  for item, started in pairs(self._processing.t) do
    if started then
      local age = t - started
      unfinished = unfinished + age
      if age > longest then longest = age end
      local p = dirty[item]
      if p then by_prio[p] = (by_prio[p] or 0) + 1 end
    end
  end
  return {
    name = self.name,
    length = self._ready.n,
    depth = self._dirty.live,
    depth_by_priority = by_prio,
    waiting = #self._heap,
    in_flight = self._processing.live,
    adds = self._adds,
    retries = self._retries,
    gets = self._gets,
    dones = self._dones,
    queue_seconds_total = self._queue_seconds,
    work_seconds_total = self._work_seconds,
    unfinished_work_seconds = unfinished,
    longest_running_processor_seconds = longest,
    shutting_down = self._shutting_down,
  }
end

return _M
