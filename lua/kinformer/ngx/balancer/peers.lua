--- kinformer.ngx.balancer.peers (internal): the balancer's endpoints as one worker knows them:
-- counters, passive health and the response-time EWMA of each "ip:port", shared by every target
-- that lists it.
--
-- Contract: hold(id) gives the endpoint's state and counts one more target holding it;
-- release(e) undoes that, and the state goes (counters included) when no target holds it. A
-- failure (record_failure) counts within a window of fail_timeout seconds; max_fails of them
-- put the endpoint in cool-down for cool_down seconds (is_down() true), logged once when it
-- starts and once when a later pick finds it over. state.ndown counts the endpoints in
-- cool-down, so a pick can skip the checks while it is 0. Per worker, no locking: only this
-- worker's Lua runs here.
local ngx = ngx
local nprocess = require "kinformer.ngx.process"

local math_exp = math.exp
local ngx_now = ngx.now
local log = nprocess.log

local _M = {}

local H = {
  max_fails = 1, fail_timeout = 10, cool_down = 10,
  ndown = 0,                -- endpoints in cool-down (any target)
}
_M.state = H

local eps = {} -- "ip:port" -> { id, requests, failures, fails, window, down_until, ewma,
               --               ewma_at, inflight, skips, refs }
_M.eps = eps

-- The state of endpoint id, held by one more target (refs: targets listing it; at 0 it goes).
function _M.hold(id)
  local e = eps[id]
  if e == nil then
    e = { id = id, requests = 0, failures = 0, fails = 0, window = 0, down_until = 0,
          ewma = 0, ewma_at = 0, inflight = 0, skips = 0, refs = 0 }
    eps[id] = e
  end
  e.refs = e.refs + 1
  return e
end

function _M.release(e)
  e.refs = e.refs - 1
  if e.refs == 0 then
    eps[e.id] = nil
    if e.down_until ~= 0 then H.ndown = H.ndown - 1 end
  end
end

-- Whether endpoint e is in cool-down now (ends it when its time has come).
function _M.is_down(e)
  local d = e.down_until
  if d == 0 then return false end
  if ngx_now() < d then return true end
  e.down_until = 0
  H.ndown = H.ndown - 1
  log("notice", "balancer: endpoint ", e.id, " is used again after its cool-down")
  return false
end

function _M.record_failure(e)
  e.failures = e.failures + 1
  local max = H.max_fails
  if max == 0 or e.down_until ~= 0 then return end
  local t = ngx_now()
  if t - e.window > H.fail_timeout then e.window, e.fails = t, 0 end
  e.fails = e.fails + 1
  if e.fails >= max then
    e.fails = 0
    e.down_until = t + H.cool_down
    e.skips = e.skips + 1
    H.ndown = H.ndown + 1
    log("warn", "balancer: endpoint ", e.id, " failed ", max, " time(s) within ",
      H.fail_timeout, " s: skipped for ", H.cool_down, " s")
  end
end

-- The EWMA of e's response times, decayed to now (ingress-nginx's: a 10 s decay time).
local DECAY = 10
function _M.ewma_now(e, t)
  local dt = t - e.ewma_at
  if dt <= 0 then return e.ewma end
  return e.ewma * math_exp(-dt / DECAY)
end

function _M.ewma_observe(e, rtt)
  local t = ngx_now()
  local dt = t - e.ewma_at
  local w = dt > 0 and math_exp(-dt / DECAY) or 1
  if e.ewma_at == 0 then w = 0 end
  e.ewma = e.ewma * w + rtt * (1 - w)
  e.ewma_at = t
end

return _M
