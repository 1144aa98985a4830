--- kinformer.flowcontrol (internal): client-side flow control of one client's REST calls, as
-- client-go's rest client does it: a token bucket every request takes a token from (QPS and
-- Burst, util/flowcontrol), and retries after the server's Retry-After (rest/with_retry.go),
-- with the counts client:status() shows.
--
-- Contract:
-- - new(o) takes `qps`, `burst` and `max_retries` out of the client options table o (removing
--   them: kinformer.core.client does not know them) and raises an argument error of 'client'
--   for a bad value. qps nil, 0 or < 0: no throttling (client-go and controller-runtime read a
--   negative QPS so; controller-runtime's default since v0.21); burst nil or 0: 1.5 x qps;
--   max_retries nil: DEFAULT_MAX_RETRIES, 0: never retry.
-- - One state per client, used on the Lua thread that owns the client (a Lua state is single
--   threaded: no lock). throttle() is called before every HTTP request of a REST call, retries
--   included; it takes a token, sleeping until there is one (a reservation: x/time/rate's Wait).
-- - retry_wait(code, retry_after, retries, left) -> seconds | nil: client-go's checkWait, i.e.
--   a 429 or a 5xx that carries Retry-After, for any verb, at most max_retries times per call,
--   and only when the call's remaining time (left) exceeds the wait by MIN_ATTEMPT; a
--   Retry-After above
--   MAX_RETRY_WAIT is not waited for here (the error goes back to the caller, with
--   err.retry_after for its work queue): a REST call never blocks on one wait longer than that.
-- - Waits go through kinformer.clock (now and sleep, read at each use: a spec may fake them).
--   Only the REST calls are throttled: reflectors' lists and watches are not (they have their
--   own backoff, per informer).
local clock = require "kinformer.clock"
local core = require "kinformer.core"
local argcheck = require "kinformer.argcheck"
local ratelimiter = require "kinformer.workqueue.ratelimiter"
local task = require "kinformer.task"

local type, setmetatable = type, setmetatable
local floor = math.floor
local format = string.format

local _M = {
  -- No client-side limit unless qps is set: controller-runtime (since v0.21) leaves the limit
  -- to the server's API Priority and Fairness, whose 429s with Retry-After are retried here.
  DEFAULT_QPS = -1,
  BURST_PER_QPS = 1.5,       -- burst when only qps is set: controller-runtime's old 20 / 30
  DEFAULT_MAX_RETRIES = 10,  -- client-go's rest client maxRetries
  MAX_RETRY_WAIT = 10,       -- seconds: a longer Retry-After is left to the caller
  LONG_THROTTLE = 1,         -- seconds: a throttle wait this long is logged (client-go: 1 s)
  MIN_ATTEMPT = 0.1,         -- seconds a retry must have left of the call's timeout
}

local Flow = {}
Flow.__index = Flow

local function bad(msg) argcheck.raise(1, "client", msg) end

local function now() return clock.now() end

-- Waits d seconds: inside a task (kinformer.task) the task yields and the thread goes on.
local function sleep(d)
  local t = task.current()
  if t then return t:sleep(d) end
  clock.sleep(d)
end

--- flowcontrol.new(o) -> state (takes o.qps, o.burst, o.max_retries out of o)
function _M.new(o)
  local qps, burst, max_retries = o.qps, o.burst, o.max_retries
  o.qps, o.burst, o.max_retries = nil, nil, nil
  if qps ~= nil and not (qps > -math.huge and qps < math.huge) then
    bad("option 'qps' must be a finite number")
  end
  if burst ~= nil and not (burst >= 0 and burst == floor(burst)) then
    bad("option 'burst' must be a whole number >= 0")
  end
  if max_retries ~= nil and not (max_retries >= 0 and max_retries == floor(max_retries)) then
    bad("option 'max_retries' must be a whole number >= 0")
  end
  if qps == nil or qps == 0 then qps = _M.DEFAULT_QPS end
  if burst == nil or burst == 0 then burst = qps > 0 and math.ceil(qps * _M.BURST_PER_QPS) or 0 end
  local bucket
  if qps > 0 then
    bucket = ratelimiter.bucket{ qps = qps, burst = burst, clock = now }
  end
  return setmetatable({
    qps = qps, burst = burst, bucket = bucket,
    max_retries = max_retries or _M.DEFAULT_MAX_RETRIES,
    requests = 0, throttled = 0, throttle_wait_total = 0, retries = 0, retry_wait_total = 0,
  }, Flow)
end

--- flow:throttle(method, path): counts the request and waits for its token.
function Flow:throttle(method, path)
  self.requests = self.requests + 1
  local bucket = self.bucket
  if bucket == nil then return end
  local d = bucket:when()
  if d <= 0 then return end
  self.throttled = self.throttled + 1
  self.throttle_wait_total = self.throttle_wait_total + d
  sleep(d)
  if d >= _M.LONG_THROTTLE then
    core.log("info", format("waited %.2f s for client-side throttling (qps %g, burst %d) "
      .. "before %s %s", d, self.qps, self.burst, method, path))
  end
end

--- flow:retry_wait(code, retry_after, retries, left) -> seconds to wait before sending again,
-- or nil; left: seconds the call may still take (its timeout less what it took so far), which
-- must leave time for the wait and a request after it.
function Flow:retry_wait(code, retry_after, retries, left)
  if retry_after == nil or retries >= self.max_retries then return nil end
  if code ~= 429 and code < 500 then return nil end
  if retry_after > _M.MAX_RETRY_WAIT then return nil end
  if retry_after < 0 then retry_after = 0 end
  if left - retry_after < _M.MIN_ATTEMPT then return nil end
  return retry_after
end

--- flow:before_retry(seconds, code, method, path, retries): counts the retry and sleeps.
function Flow:before_retry(d, code, method, path, retries)
  self.retries = self.retries + 1
  self.retry_wait_total = self.retry_wait_total + d
  core.log("debug", format("%s %s: %d with Retry-After %g s, retry %d of %d", method, path, code,
    d, retries, self.max_retries))
  if d > 0 then sleep(d) end
end

--- flow:status(t) -> t with the REST counts added
function Flow:status(t)
  t = type(t) == "table" and t or {}
  t.requests = self.requests              -- HTTP requests of REST calls, retries included
  t.retries = self.retries                -- of them, retries after a Retry-After
  t.retry_wait_seconds = self.retry_wait_total
  t.throttled = self.throttled            -- requests that waited for a token
  t.throttle_wait_seconds = self.throttle_wait_total
  t.qps, t.burst, t.max_retries = self.qps, self.burst, self.max_retries
  return t
end

return _M
