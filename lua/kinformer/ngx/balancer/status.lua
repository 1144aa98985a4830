--- kinformer.ngx.balancer.status (internal): what the balancer reports: each worker's sample
-- (its targets and endpoints), published to the status dict, collected by kngx.status() under
-- `balancer` and rendered by kngx.metrics().
--
-- Contract: sample() reads the worker's state (handed over by watch()) and allocates; it runs
-- from the balancer's timer every status interval, never on a request. collect() never blocks:
-- the samples in the dict plus this worker's own, fresh. render() is a pure function of a status.
local ngx = ngx
local nprocess = require "kinformer.ngx.process"
local nstatus = require "kinformer.ngx.status"
local nmetrics = require "kinformer.ngx.metrics"
local metrics = require "kinformer.metrics"

local json = require("cjson").new()
local json_encode, json_decode = json.encode, json.decode

local type, pairs, ipairs, pcall, tostring = type, pairs, ipairs, pcall, tostring
local string_format, table_sort = string.format, table.sort
local ngx_now = ngx.now
local worker_pid, worker_count, worker_id = ngx.worker.pid, ngx.worker.count, ngx.worker.id
local S, log, status_dict = nprocess.state, nprocess.log, nprocess.status_dict
local label_value, format_value = metrics.escape_label_value, metrics.format_value

local _M = {}

local B -- the balancer's state: { policies =, eps =, S = }

--- status.watch(state): the balancer's state, read by sample().
function _M.watch(state)
  B = state
end

local function key()
  if nprocess.role() == "worker" then return "balancer/worker/" .. tostring(worker_id()) end
  return "balancer/" .. nprocess.role()
end

--- status.sample() -> this worker's sample
function _M.sample()
  local t = ngx_now()
  local targets = {}
  for pname, p in pairs(B.policies) do
    for target, tg in pairs(p.targets) do
      local skipped = 0
      for i = 1, tg.n do
        local d = tg.ep[i].down_until
        if d ~= 0 and d > t then skipped = skipped + 1 end
      end
      local name = target
      if pname ~= "round_robin" then name = target .. " (" .. pname .. ")" end
      targets[name] = {
        target = target, policy = pname, algorithm = p.algorithm,
        known = tg.known or 0, ready = tg.ready or 0, peers = tg.n, skipped = skipped,
        terminating = tg.terminating or false, reason = tg.reason,
      }
    end
  end
  local eps = {}
  for id, e in pairs(B.eps) do
    eps[id] = { requests = e.requests, failures = e.failures, skips = e.skips,
                skipped = e.down_until ~= 0 and e.down_until > t,
                ewma = e.ewma, inflight = e.inflight }
  end
  return { pid = worker_pid(), process = nprocess.name(nprocess.role()), time = t,
           targets = targets, endpoints = eps }
end

--- status.publish(): stores this worker's sample in the status dict.
function _M.publish()
  local d = status_dict()
  if not d then return end
  local ok, err = d:set(key(), json_encode(_M.sample()), S.status_ttl or 5, worker_pid())
  if not ok then log("warn", "balancer: cannot publish status: ", err) end
end

--- status.collect() -> { processes = { sample, ... } } (every worker's, this one's fresh)
function _M.collect()
  if not B then return nil end
  local out = { processes = {} }
  local own_key = key()
  local own = _M.sample()
  local d = status_dict()
  if d then
    local keys = { "balancer/single" }
    for i = 0, worker_count() - 1 do keys[#keys + 1] = "balancer/worker/" .. i end
    for _, k in ipairs(keys) do
      if k == own_key then
        out.processes[#out.processes + 1] = own
        own = nil
      else
        local raw = d:get(k)
        if raw then
          local ok, v = pcall(json_decode, raw)
          if ok and type(v) == "table" then out.processes[#out.processes + 1] = v end
        end
      end
    end
  end
  if own then out.processes[#out.processes + 1] = own end
  return out
end

local function sorted_keys(t)
  local out = {}
  for k in pairs(t) do out[#out + 1] = k end
  table_sort(out)
  return out
end

local TARGET_GAUGES = {
  { "kinformer_balancer_endpoints", "Endpoints of the target's port in its EndpointSlices",
    "known" },
  { "kinformer_balancer_ready_endpoints", "Ready endpoints of the target", "ready" },
  { "kinformer_balancer_peers", "Endpoints the balancer picks from (ready, or the serving " ..
    "terminating ones when none is ready)", "peers" },
  { "kinformer_balancer_skipped_endpoints", "Peers skipped by passive health (cool-down)",
    "skipped" },
}

local ENDPOINT_METRICS = {
  { "kinformer_balancer_requests_total", "counter", "Tries sent to the endpoint", "requests" },
  { "kinformer_balancer_failures_total", "counter",
    "Tries of the endpoint that failed (no connection, no response)", "failures" },
  { "kinformer_balancer_skips_total", "counter", "Times passive health benched the endpoint",
    "skips" },
}

--- status.render(out, status): the balancer's lines of kngx.metrics()
function _M.render(out, st)
  local b = st.balancer
  if type(b) ~= "table" or type(b.processes) ~= "table" then return end
  local procs = b.processes
  for _, m in ipairs(TARGET_GAUGES) do
    metrics.header(out, m[1], "gauge", m[2])
    for _, p in ipairs(procs) do
      local targets = type(p.targets) == "table" and p.targets or {}
      for _, name in ipairs(sorted_keys(targets)) do
        local tg = targets[name]
        out[#out + 1] = string_format('%s{target="%s",policy="%s",process="%s"} %s', m[1],
          label_value(tg.target or name), label_value(tg.policy or ""),
          label_value(p.process or ""), format_value(tg[m[3]] or 0))
      end
    end
  end
  for _, m in ipairs(ENDPOINT_METRICS) do
    metrics.header(out, m[1], m[2], m[3])
    for _, p in ipairs(procs) do
      local e = type(p.endpoints) == "table" and p.endpoints or {}
      for _, id in ipairs(sorted_keys(e)) do
        out[#out + 1] = string_format('%s{endpoint="%s",process="%s"} %s', m[1],
          label_value(id), label_value(p.process or ""), format_value(e[id][m[4]] or 0))
      end
    end
  end
end

nstatus.extras[#nstatus.extras + 1] = { name = "balancer", collect = _M.collect }
nmetrics.extras[#nmetrics.extras + 1] = _M.render

return _M
