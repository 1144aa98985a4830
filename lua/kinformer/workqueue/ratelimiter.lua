--- kinformer.workqueue.ratelimiter: client-go's rate limiters (default_rate_limiters.go).
--
-- Contract: a rate limiter is any object with when(item) -> seconds, num_requeues(item) -> n and
-- forget(item). They are plain Lua state owned by whoever holds them; share one between queues
-- only on purpose (client-go does the same). The constructors are public as
-- kinformer.workqueue.<name>_rate_limiter (docs/workqueue.md); this module only holds them.
local core = require "kinformer.core"
local argcheck = require "kinformer.argcheck"
local map = require "kinformer.workqueue.map"

local type, tostring, pairs, ipairs, setmetatable = type, tostring, pairs, ipairs, setmetatable
local math_huge, math_floor = math.huge, math.floor
local raise, check_opts, opt_number, opt_function = argcheck.raise, argcheck.options,
  argcheck.number, argcheck.func
local map_new, map_put, map_del = map.new, map.put, map.del

local _M = {}

--- ratelimiter.is_limiter(x) -> true for an object with when, num_requeues and forget.
function _M.is_limiter(l)
  local t = type(l)
  if t ~= "table" and t ~= "userdata" then return false end
  return type(l.when) == "function" and type(l.num_requeues) == "function"
    and type(l.forget) == "function"
end
local is_limiter = _M.is_limiter

local function check_any_item(item, fname)
  if item == nil then raise(1, fname, "item expected, got nil") end
end

local Exponential = {}
Exponential.__index = Exponential

--- exponential{ base_delay = 0.005, max_delay = 1000 }
-- Per item: base_delay * 2^failures, capped at max_delay (ItemExponentialFailureRateLimiter).
function _M.exponential(opts)
  local F = "exponential_rate_limiter"
  opts = check_opts(opts, { base_delay = true, max_delay = true }, F)
  return setmetatable({
    base = opt_number(opts, "base_delay", F, 0.005, 0),
    max = opt_number(opts, "max_delay", F, 1000, 0),
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

--- fast_slow{ fast_delay = s, slow_delay = s, max_fast_attempts = n }
-- Per item: fast_delay for the first max_fast_attempts failures, slow_delay after
-- (ItemFastSlowRateLimiter).
function _M.fast_slow(opts)
  local F = "fast_slow_rate_limiter"
  if opts == nil then raise(1, F, "table expected, got nil") end
  opts = check_opts(opts, { fast_delay = true, slow_delay = true, max_fast_attempts = true }, F)
  return setmetatable({
    fast = opt_number(opts, "fast_delay", F, nil, 0),
    slow = opt_number(opts, "slow_delay", F, nil, 0),
    max_fast = opt_number(opts, "max_fast_attempts", F, nil, 0, false, true),
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

--- bucket{ qps = 10, burst = 100, clock = fn }
-- One token bucket for all items (BucketRateLimiter over golang.org/x/time/rate): it starts
-- full; each when() takes a token, and a call that finds none reserves the next one and returns
-- how long until it is there. Never counts requeues.
function _M.bucket(opts)
  local F = "bucket_rate_limiter"
  opts = check_opts(opts, { qps = true, burst = true, clock = true }, F)
  local burst = opt_number(opts, "burst", F, 100, 1, false, true)
  return setmetatable({
    qps = opt_number(opts, "qps", F, 10, 0, true),
    burst = burst,
    tokens = burst,
    last = -math_huge, -- the first when() refills to burst whatever the clock reads
    now = opt_function(opts, "clock", F) or core.now,
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

--- max_of{ limiter, ... } -> the worst (longest) answer of them all (MaxOfRateLimiter).
-- when() asks every limiter, so each one counts the failure.
function _M.max_of(limiters)
  local F = "max_of_rate_limiter"
  if type(limiters) ~= "table" or limiters[1] == nil then
    raise(1, F, "list of rate limiters expected")
  end
  local list = {}
  for k, l in pairs(limiters) do
    if type(k) ~= "number" or k ~= math_floor(k) or k < 1 or k > #limiters then
      raise(1, F, "list of rate limiters expected (key '" .. tostring(k) .. "')")
    end
    if not is_limiter(l) then
      raise(1, F, "item " .. k .. " is not a rate limiter (when, num_requeues, forget)")
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

--- with_max_wait{ limiter = l, max_wait = s }: l's answer, never longer than max_wait
-- (WithMaxWaitRateLimiter).
function _M.with_max_wait(opts)
  local F = "with_max_wait_rate_limiter"
  if opts == nil then raise(1, F, "table expected, got nil") end
  opts = check_opts(opts, { limiter = true, max_wait = true }, F)
  if not is_limiter(opts.limiter) then
    raise(1, F, "option 'limiter' must be a rate limiter (when, num_requeues, forget)")
  end
  return setmetatable({ limiter = opts.limiter,
    max_wait = opt_number(opts, "max_wait", F, nil, 0) }, MaxWait)
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

--- default{ clock = fn } -> client-go's DefaultControllerRateLimiter: the max of a per-item
-- exponential backoff (5 ms * 2^failures, at most 1000 s) and an overall token bucket (10 qps,
-- burst 100).
function _M.default(opts)
  opts = check_opts(opts, { clock = true }, "default_rate_limiter")
  local clock = opt_function(opts, "clock", "default_rate_limiter")
  return _M.max_of{
    _M.exponential{ base_delay = 0.005, max_delay = 1000 },
    _M.bucket{ qps = 10, burst = 100, clock = clock },
  }
end

return _M
