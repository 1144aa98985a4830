--- kinformer.manager.lifecycle (internal): how a manager runs and how it stops: mgr:run(),
-- mgr:stop() and the graceful shutdown both end with (kinformer.manager installs them as its
-- methods run, stop and _shut_down).
--
-- Contract:
-- - run(mgr, opts) starts the informers and steps the manager (mgr:step(), waiting on
--   mgr:fds() in between) until a signal, the timeout or a stop. It catches SIGINT / SIGTERM
--   (kinformer.catch_signals) for as long as it runs; a signal found while reconciles start
--   (kinformer.manager.schedule) or by mgr:wait_for_sync is kept in mgr._signal.
-- - shut_down(mgr, reason): the reconciles in flight are cancelled (their calls cut), the
--   queues shut down, queued Events are written for up to grace_period seconds (by the leader
--   only), the Lease is released (one GET and one update, each within max(1, retry_period)
--   seconds), the controllers and the informers stop and the metrics server closes: run returns
--   within grace_period + 2 x max(1, retry_period) seconds of the signal whatever the API server
--   does. Does nothing once stopped; sets mgr._stopping, then mgr._stopped and mgr._reason.
-- - stop(mgr, reason) does the same from user code; from inside a step (a reconcile) it only
--   records mgr._stop_requested, and mgr:step() shuts down when the step ends.
local core = require "kinformer.core"
local argcheck = require "kinformer.argcheck"
local errtext = require "kinformer.errtext"
local clock = require "kinformer.clock"
local schedule = require "kinformer.manager.schedule"

local ipairs, pcall, error = ipairs, pcall, error
local math_min, math_huge = math.min, math.huge
local cancel_reconciles, flush_events = schedule.cancel_reconciles, schedule.flush_events

local _M = {}

local function log(level, msg) core.log(level, "manager: " .. msg) end

-- Runs the scheduler until fn() is true or the deadline passed (shutdown only).
local function drive_until(self, fn, deadline)
  while not fn() and clock.now() < deadline do
    local w = self._sched:step()
    if fn() then break end
    local left = deadline - clock.now()
    if left <= 0 then break end
    core.wait({ self._sched:fd() }, math_min(w, left, 0.05))
  end
end

--- lifecycle.shut_down(mgr, reason): the graceful shutdown (mgr:_shut_down).
function _M.shut_down(self, reason)
  if self._stopped then return end
  self._stopping = true
  cancel_reconciles(self, "shutting down")
  if self._elector_task then
    self._sched:cancel(self._elector_task)
    self._elector_task = nil
  end
  for _, name in ipairs(self._order) do self.controllers[name].queue:shut_down() end
  local deadline = clock.now() + self.grace_period
  if self:is_leader() then
    while self._recorder:pending() > 0 and clock.now() < deadline do
      flush_events(self)
      drive_until(self, function() return self._events_task == nil end, deadline)
      if self._recorder:pending() > 0 and self._events_task == nil then
        break -- nothing written: the server is unreachable
      end
    end
  end
  if self._events_task then self._sched:cancel(self._events_task) end
  if self._elector then self._elector:stop() end
  for _, name in ipairs(self._order) do self.controllers[name]:_shut_down() end
  for _, inf in ipairs(self._informers) do inf:stop() end
  if self._metrics_server then self._metrics_server:close() end
  self._stopped = true
  self._reason = reason
  log("info", "stopped (" .. errtext(reason) .. ")")
end

--- lifecycle.stop(mgr[, reason]): mgr:stop (documented in kinformer.manager).
function _M.stop(self, reason)
  reason = reason or "stopped"
  if self._in_step then
    self._stop_requested = self._stop_requested or reason
    return
  end
  self:_shut_down(reason)
end

--- lifecycle.run(mgr, opts) -> reason | nil, err: mgr:run (documented in kinformer.manager).
function _M.run(self, opts)
  opts = argcheck.options(opts, { timeout = true }, "run")
  local timeout = argcheck.number(opts, "timeout", "run", math_huge, 0)
  if self._stopped then return nil, "the manager has stopped" end
  local ok, err, code = self:start()
  if not ok then return nil, err, code end
  local was = core.catch_signals(true)
  self._catching = true
  local deadline = clock.now() + timeout
  local function loop()
    if self._signal then return self._signal end
    while true do
      local w, serr = self:step()
      if self._stopped then return self._reason end
      if not w then return nil, serr end
      if self._signal then return self._signal end
      local left = deadline - clock.now()
      if left <= 0 then return "timeout" end
      local r, sig = core.wait(self:fds(), math_min(w, left))
      if r == "signal" then return sig end
    end
  end
  local pok, reason, rerr = pcall(loop)
  self._catching = false
  if pok and reason then self:_shut_down(reason) end
  if not was then core.catch_signals(false) end
  if not pok then error(reason, 0) end
  return reason, rerr
end

return _M
