--- kinformer.workqueue: client-go's rate-limited work queue (util/workqueue) for one Lua thread.
--
-- Contract (client-go semantics, docs/workqueue.md):
-- - Items are strings (object keys). An item is queued at most once: it is "dirty" from add until
--   a worker gets it. An item added while a worker processes it is not handed to a second worker;
--   it is queued again when that worker calls done(item). add of a queued item is a no-op.
-- - add_after(item, s) holds the item in a min-heap of ready times; a second add_after of a
--   waiting item only ever moves it earlier. add_rate_limited(item) is add_after(item,
--   limiter:when(item)); forget / num_requeues ask the rate limiter.
-- - shut_down(): adds are ignored and waiting (delayed) items dropped; get still hands out what is
--   queued and returns nil, "shutdown" once the queue is empty. shut_down_with_drain() also waits
--   until every item handed out is done.
--
-- Threads: none. Everything runs on the caller's thread. Delayed items move to the queue lazily,
-- when an operation looks at the queue (add, get, done, len, status, ...), so the order is the
-- one client-go's timer goroutine would produce. get() blocks only while it waits for the next
-- delayed item, the timeout, or the informers it dispatches (their handlers may add items); it
-- waits with core.wait on the informers' fds, or with the `wait` option (e.g. a coroutine yield).
local core = require "kinformer.core"

local type, error, tostring, pairs, ipairs, setmetatable = type, error, tostring, pairs, ipairs,
  setmetatable
local math_huge, math_floor, string_format = math.huge, math.floor, string.format

local core_now, core_wait, core_take_signal = core.now, core.wait, core.take_signal

local MAX_WAIT = 0.1   -- longest single wait: bounds how late an add from elsewhere is seen
local BATCH = 100      -- informer:dispatch batch per look at the queue

local _M = { _VERSION = core._VERSION }

-- ---- argument checks (misuse raises at the caller's level) ----

local function argerror(n, fname, msg, level)
  error(string_format("bad argument #%d to '%s' (%s)", n, fname, msg), level + 1)
end

local function check_item(item, fname)
  if type(item) ~= "string" then
    argerror(1, fname, "string expected, got " .. type(item), 3)
  end
end

local function check_any_item(item, fname)
  if item == nil then argerror(1, fname, "item expected, got nil", 3) end
end

local function check_timeout(t, fname, n)
  if t ~= nil and (type(t) ~= "number" or not (t >= 0)) then
    argerror(n or 1, fname, "timeout must be nil or a number of seconds >= 0", 3)
  end
end

-- Checks an options table against the names it may hold; returns it ({} for nil).
local function check_opts(opts, fname, known, level)
  if opts == nil then return {} end
  if type(opts) ~= "table" then
    argerror(1, fname, "table expected, got " .. type(opts), level + 1)
  end
  for k in pairs(opts) do
    if not known[k] then
      argerror(1, fname, "unknown option '" .. tostring(k) .. "'", level + 1)
    end
  end
  return opts
end

-- A number option >= min (or > min when strict); default when absent.
local function opt_number(opts, name, default, min, strict, fname, level, integer)
  local v = opts[name]
  if v == nil then
    if default == nil then argerror(1, fname, "option '" .. name .. "' is required", level + 1) end
    return default
  end
  local ok = type(v) == "number" and v == v and (strict and v > min or not strict and v >= min)
  if ok and integer then ok = v == math_floor(v) end
  if not ok then
    argerror(1, fname, string_format("option '%s' must be %s %s %g", name,
      integer and "an integer" or "a number", strict and ">" or ">=", min), level + 1)
  end
  return v
end

local function opt_function(opts, name, fname, level)
  local v = opts[name]
  if v ~= nil and type(v) ~= "function" then
    argerror(1, fname, "option '" .. name .. "' must be a function", level + 1)
  end
  return v
end

local function is_limiter(l)
  local t = type(l)
  if t ~= "table" and t ~= "userdata" then return false end
  return type(l.when) == "function" and type(l.num_requeues) == "function"
    and type(l.forget) == "function"
end

-- ---- maps under churn ----
-- Lua rehashes a table when a new key finds no free slot, and sizes it from the keys still
-- present: a table holding about 2^k keys while keys come and go would be rebuilt (O(n)) every
-- few inserts (measured: 0.9 ms per add+get+done with 65530 items queued). So a deleted key
-- stays as `false` (adding it again needs no new slot), and the table is rebuilt without them
-- once they outnumber the live keys: O(1) amortized, at most about twice the live keys' memory.
-- m.t[k] reads (a false value means absent); map_put's value must not be false or nil.

local MAP_MIN_DEAD = 64

local function map_new()
  return { t = {}, live = 0, dead = 0 }
end

local function map_put(m, k, v)
  local t = m.t
  local old = t[k]
  if not old then
    m.live = m.live + 1
    if old == false then m.dead = m.dead - 1 end
  end
  t[k] = v
end

local function map_del(m, k)
  local t = m.t
  if not t[k] then return end
  t[k] = false
  local live, dead = m.live - 1, m.dead + 1
  if dead > MAP_MIN_DEAD and dead > live then
    local fresh = {}
    for key, v in pairs(t) do
      if v then fresh[key] = v end
    end
    m.t = fresh
    dead = 0
  end
  m.live, m.dead = live, dead
end

-- ---- rate limiters (client-go default_rate_limiters.go) ----
-- A rate limiter is any object with when(item) -> seconds, num_requeues(item) -> n and
-- forget(item). They are plain Lua state owned by whoever holds them; share one between queues
-- only on purpose (client-go does the same).

local Exponential = {}
Exponential.__index = Exponential

--- workqueue.exponential_rate_limiter{ base_delay = 0.005, max_delay = 1000 }
-- Per item: base_delay * 2^failures, capped at max_delay (ItemExponentialFailureRateLimiter).
function _M.exponential_rate_limiter(opts)
  local F = "exponential_rate_limiter"
  opts = check_opts(opts, F, { base_delay = true, max_delay = true }, 2)
  return setmetatable({
    base = opt_number(opts, "base_delay", 0.005, 0, false, F, 2),
    max = opt_number(opts, "max_delay", 1000, 0, false, F, 2),
    failures = map_new(),
  }, Exponential)
end

function Exponential:when(item)
  check_any_item(item, "when")
  local failures = self.failures
  local n = failures.t[item] or 0
  map_put(failures, item, n + 1)
  if self.base == 0 then return 0 end
  local d = self.base * 2 ^ n -- inf once 2^n overflows: capped below, as client-go's overflow check
  if d > self.max then return self.max end
  return d
end

function Exponential:num_requeues(item)
  check_any_item(item, "num_requeues")
  return self.failures.t[item] or 0
end

function Exponential:forget(item)
  check_any_item(item, "forget")
  map_del(self.failures, item)
end

local FastSlow = {}
FastSlow.__index = FastSlow

--- workqueue.fast_slow_rate_limiter{ fast_delay = s, slow_delay = s, max_fast_attempts = n }
-- Per item: fast_delay for the first max_fast_attempts failures, slow_delay after
-- (ItemFastSlowRateLimiter).
function _M.fast_slow_rate_limiter(opts)
  local F = "fast_slow_rate_limiter"
  if opts == nil then argerror(1, F, "table expected, got nil", 2) end
  opts = check_opts(opts, F, { fast_delay = true, slow_delay = true, max_fast_attempts = true }, 2)
  return setmetatable({
    fast = opt_number(opts, "fast_delay", nil, 0, false, F, 2),
    slow = opt_number(opts, "slow_delay", nil, 0, false, F, 2),
    max_fast = opt_number(opts, "max_fast_attempts", nil, 0, false, F, 2, true),
    failures = map_new(),
  }, FastSlow)
end

function FastSlow:when(item)
  check_any_item(item, "when")
  local n = (self.failures.t[item] or 0) + 1
  map_put(self.failures, item, n)
  if n <= self.max_fast then return self.fast end
  return self.slow
end

FastSlow.num_requeues = Exponential.num_requeues
FastSlow.forget = Exponential.forget

local Bucket = {}
Bucket.__index = Bucket

--- workqueue.bucket_rate_limiter{ qps = 10, burst = 100, clock = fn }
-- One token bucket for all items (BucketRateLimiter over golang.org/x/time/rate): it starts
-- full; each when() takes a token, and a call that finds none reserves the next one and returns
-- how long until it is there. Never counts requeues.
function _M.bucket_rate_limiter(opts)
  local F = "bucket_rate_limiter"
  opts = check_opts(opts, F, { qps = true, burst = true, clock = true }, 2)
  local burst = opt_number(opts, "burst", 100, 1, false, F, 2, true)
  return setmetatable({
    qps = opt_number(opts, "qps", 10, 0, true, F, 2),
    burst = burst,
    tokens = burst,
    last = -math_huge, -- the first when() refills to burst whatever the clock reads
    now = opt_function(opts, "clock", F, 2) or core_now,
  }, Bucket)
end

function Bucket:when(item)
  local t = self.now()
  local last = self.last
  if t < last then last = t end -- a clock that went back refills nothing (x/time/rate)
  local tokens = self.tokens + (t - last) * self.qps
  if tokens > self.burst then tokens = self.burst end
  tokens = tokens - 1
  self.tokens, self.last = tokens, t
  if tokens >= 0 then return 0 end
  return -tokens / self.qps
end

function Bucket:num_requeues(item)
  return 0
end

function Bucket:forget(item)
end

local MaxOf = {}
MaxOf.__index = MaxOf

--- workqueue.max_of_rate_limiter{ limiter, ... } -> the worst (longest) answer of them all
-- (MaxOfRateLimiter). when() asks every limiter, so each one counts the failure.
function _M.max_of_rate_limiter(limiters)
  local F = "max_of_rate_limiter"
  if type(limiters) ~= "table" or limiters[1] == nil then
    argerror(1, F, "list of rate limiters expected", 2)
  end
  local list = {}
  for k, l in pairs(limiters) do
    if type(k) ~= "number" or k ~= math_floor(k) or k < 1 or k > #limiters then
      argerror(1, F, "list of rate limiters expected (key '" .. tostring(k) .. "')", 2)
    end
    if not is_limiter(l) then
      argerror(1, F, "item " .. k .. " is not a rate limiter (when, num_requeues, forget)", 2)
    end
    list[k] = l
  end
  return setmetatable({ limiters = list }, MaxOf)
end

function MaxOf:when(item)
  local worst = 0
  for _, l in ipairs(self.limiters) do
    local d = l:when(item)
    if d > worst then worst = d end
  end
  return worst
end

function MaxOf:num_requeues(item)
  local most = 0
  for _, l in ipairs(self.limiters) do
    local n = l:num_requeues(item)
    if n > most then most = n end
  end
  return most
end

function MaxOf:forget(item)
  for _, l in ipairs(self.limiters) do l:forget(item) end
end

local MaxWait = {}
MaxWait.__index = MaxWait

--- workqueue.with_max_wait_rate_limiter{ limiter = l, max_wait = s }
-- l's answer, never longer than max_wait (WithMaxWaitRateLimiter).
function _M.with_max_wait_rate_limiter(opts)
  local F = "with_max_wait_rate_limiter"
  if opts == nil then argerror(1, F, "table expected, got nil", 2) end
  opts = check_opts(opts, F, { limiter = true, max_wait = true }, 2)
  if not is_limiter(opts.limiter) then
    argerror(1, F, "option 'limiter' must be a rate limiter (when, num_requeues, forget)", 2)
  end
  return setmetatable({ limiter = opts.limiter,
    max_wait = opt_number(opts, "max_wait", nil, 0, false, F, 2) }, MaxWait)
end

function MaxWait:when(item)
  local d = self.limiter:when(item)
  if d > self.max_wait then return self.max_wait end
  return d
end

function MaxWait:num_requeues(item)
  return self.limiter:num_requeues(item)
end

function MaxWait:forget(item)
  self.limiter:forget(item)
end

--- workqueue.default_rate_limiter{ clock = fn } -> client-go's DefaultControllerRateLimiter:
-- the max of a per-item exponential backoff (5 ms * 2^failures, at most 1000 s) and an overall
-- token bucket (10 qps, burst 100).
function _M.default_rate_limiter(opts)
  opts = check_opts(opts, "default_rate_limiter", { clock = true }, 2)
  local clock = opt_function(opts, "clock", "default_rate_limiter", 2)
  return _M.max_of_rate_limiter{
    _M.exponential_rate_limiter{ base_delay = 0.005, max_delay = 1000 },
    _M.bucket_rate_limiter{ qps = 10, burst = 100, clock = clock },
  }
end

-- ---- the delayed items: a binary min-heap on (ready time, insertion order) ----
-- Entries are { item, at, seq, pos }; pos is the entry's index in the heap (heap.Fix needs it).

local function heap_less(a, b)
  return a.at < b.at or (a.at == b.at and a.seq < b.seq)
end

local function heap_up(h, i)
  local e = h[i]
  while i > 1 do
    local p = math_floor(i / 2)
    local pe = h[p]
    if not heap_less(e, pe) then break end
    h[i] = pe
    pe.pos = i
    i = p
  end
  h[i] = e
  e.pos = i
end

local function heap_down(h, i)
  local n = #h
  local e = h[i]
  while true do
    local c = 2 * i
    if c > n then break end
    if c < n and heap_less(h[c + 1], h[c]) then c = c + 1 end
    local ce = h[c]
    if not heap_less(ce, e) then break end
    h[i] = ce
    ce.pos = i
    i = c
  end
  h[i] = e
  e.pos = i
end

local function heap_pop(h)
  local top = h[1]
  local n = #h
  local last = h[n]
  h[n] = nil
  if n > 1 then
    h[1] = last
    heap_down(h, 1)
  end
  return top
end

-- ---- the queue ----

local RING_MIN = 16 -- slots; the ring doubles when full and halves below a quarter full

-- Slots hold false when empty, so every index stays in the table's array part.
local function new_ring(cap)
  local r = {}
  for i = 1, cap do r[i] = false end
  return r
end

local Queue = {}
Queue.__index = Queue
_M.Queue = Queue

--- workqueue.new{ name = "...", rate_limiter = limiter, informers = { inf, ... },
--                 clock = fn, wait = fn } -> queue
-- Also callable as kinformer.workqueue{ ... } (the module table is callable).
-- rate_limiter: default workqueue.default_rate_limiter (on the queue's clock).
-- informers: dispatched by get() and shut_down_with_drain() while they wait (and once per get).
-- clock: fn() -> seconds (monotonic; default core.now). wait: fn(fds, seconds) waits up to
-- seconds for one of the fds to be readable (default core.wait); a wait that yields a coroutine
-- lets other coroutines add and call done while get() waits.
function _M.new(opts)
  local F = "workqueue"
  opts = check_opts(opts, F, { name = true, rate_limiter = true, informers = true, clock = true,
    wait = true }, 2)
  if opts.name ~= nil and type(opts.name) ~= "string" then
    argerror(1, F, "option 'name' must be a string", 2)
  end
  local clock = opt_function(opts, "clock", F, 2)
  local wait = opt_function(opts, "wait", F, 2)
  local limiter = opts.rate_limiter
  if limiter == nil then
    limiter = _M.default_rate_limiter{ clock = clock }
  elseif not is_limiter(limiter) then
    argerror(1, F, "option 'rate_limiter' must be a rate limiter (when, num_requeues, forget)", 2)
  end
  local informers = opts.informers
  if informers ~= nil then
    if type(informers) ~= "table" then
      argerror(1, F, "option 'informers' must be a list of informers", 2)
    end
    local list = {}
    for i, inf in ipairs(informers) do
      if type(inf) ~= "table" or type(inf.dispatch) ~= "function" or type(inf.fd) ~= "function" then
        argerror(1, F, "option 'informers': item " .. i .. " is not an informer", 2)
      end
      list[i] = inf
    end
    for k in pairs(informers) do
      if list[k] == nil then argerror(1, F, "option 'informers' must be a list of informers", 2) end
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
    -- the FIFO of ready items, a ring: _n items from _ring[_first], wrapping at _cap; every
    -- item in it is dirty and not processing
    _ring = new_ring(RING_MIN), _first = 1, _n = 0, _cap = RING_MIN,
    _dirty = map_new(),      -- item -> true: needs processing (queued, or queued again at done)
    _processing = map_new(), -- item -> time get() handed it out
    _added_at = map_new(),   -- item -> time it became dirty (queue latency)
    _heap = {},              -- delayed entries, earliest first
    _waiting = map_new(),    -- item -> its heap entry
    _seq = 0,
    _shutting_down = false, _drain = false,
    _adds = 0, _retries = 0, _gets = 0, _dones = 0, _queue_seconds = 0, _work_seconds = 0,
  }, Queue)
end

setmetatable(_M, { __call = function(_, opts) return _M.new(opts) end })

-- Moves the ring's items, in order, to a new ring of cap slots.
local function resize(self, cap)
  local ring, first, old_cap = self._ring, self._first, self._cap
  local fresh = new_ring(cap)
  for j = 1, self._n do
    local i = first + j - 1
    if i > old_cap then i = i - old_cap end
    fresh[j] = ring[i]
  end
  self._ring, self._first, self._cap = fresh, 1, cap
end

local function push(self, item)
  local n, cap = self._n, self._cap
  if n == cap then
    cap = cap * 2
    resize(self, cap)
  end
  local i = self._first + n
  if i > cap then i = i - cap end
  self._ring[i] = item
  self._n = n + 1
end

local function pop(self)
  local ring, first, cap = self._ring, self._first, self._cap
  local item = ring[first]
  ring[first] = false
  first = first + 1
  if first > cap then first = 1 end
  self._first = first
  local n = self._n - 1
  self._n = n
  if cap > RING_MIN and n < cap / 4 then resize(self, math_floor(cap / 2)) end
  return item
end

-- client-go Add: the item becomes dirty and, unless a worker holds it, queued.
local function insert(self, item, t)
  local dirty = self._dirty
  if self._shutting_down or dirty.t[item] then return end
  self._adds = self._adds + 1
  map_put(dirty, item, true)
  local added_at = self._added_at
  if not added_at.t[item] then map_put(added_at, item, t) end
  if self._processing.t[item] then return end
  push(self, item)
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
    insert(self, e.item, t)
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
  if h[1] and h[1].at - t < w then w = h[1].at - t end
  if w > MAX_WAIT then w = MAX_WAIT end
  if w < 0 then w = 0 end
  local r, sig = self._wait(fds(self), w)
  if r == "signal" then return sig end
end

--- queue:add(item): marks item as needing processing (no-op if it is queued already, or after
-- shut_down).
function Queue:add(item)
  check_item(item, "add")
  insert(self, item, fire(self) or self._now())
end

--- queue:add_after(item, seconds): adds item once seconds have passed (at once if seconds <= 0).
-- An item already waiting keeps the earlier of its two times.
function Queue:add_after(item, seconds)
  check_item(item, "add_after")
  if type(seconds) ~= "number" or seconds ~= seconds then
    argerror(2, "add_after", "number of seconds expected, got " .. type(seconds), 2)
  end
  if self._shutting_down then return end
  self._retries = self._retries + 1
  local t = fire(self) or self._now()
  if seconds <= 0 then
    insert(self, item, t)
    return
  end
  local at = t + seconds
  local e = self._waiting.t[item]
  if e then
    if at < e.at then
      e.at = at
      heap_up(self._heap, e.pos)
    end
    return
  end
  self._seq = self._seq + 1
  e = { item = item, at = at, seq = self._seq }
  local h = self._heap
  h[#h + 1] = e
  heap_up(h, #h)
  map_put(self._waiting, item, e)
end

--- queue:add_rate_limited(item): add_after(item, rate_limiter:when(item)); the limiter counts a
-- failure of item (even after shut_down, as client-go).
function Queue:add_rate_limited(item)
  check_item(item, "add_rate_limited")
  return self:add_after(item, self._limiter:when(item))
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
  return self._n
end

--- queue:get([timeout]) -> item | nil, "shutdown" | nil, "timeout"
-- Hands out the next item (call done(item) when finished with it). While the queue is empty it
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
    if self._n > 0 then
      local item = pop(self)
      map_put(self._processing, item, t)
      map_del(self._dirty, item)
      self._gets = self._gets + 1
      local added = self._added_at.t[item]
      if added then
        self._queue_seconds = self._queue_seconds + (t - added)
        map_del(self._added_at, item)
      end
      return item
    end
    if self._shutting_down then return nil, "shutdown" end
    if not deadline then
      deadline = timeout and t + timeout or math_huge
      if timeout == nil and not informers and not self._custom_wait and not self._heap[1] then
        error("get would wait forever: the queue is empty, nothing is delayed and nothing can "
          .. "add while it waits (give a timeout, informers or a wait function)", 2)
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
  if self._dirty.t[item] then push(self, item) end
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
    error(string_format("shut_down_with_drain would wait forever: %d item(s) in flight and "
      .. "nothing can call done while it waits (give a timeout, informers or a wait function)",
      self._processing.live), 2)
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

--- queue:status() -> table: client-go's workqueue metrics, right now (see docs/workqueue.md).
function Queue:status()
  local t = fire(self) or self._now()
  local unfinished, longest = 0, 0
  for _, started in pairs(self._processing.t) do
    local age = started and t - started or 0
    unfinished = unfinished + age
    if age > longest then longest = age end
  end
  return {
    name = self.name,
    length = self._n,
    depth = self._dirty.live,
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
