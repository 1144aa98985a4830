--- kinformer.ngx.status (internal): what kngx.status() reports, and the samples behind it.
--
-- Contract: every process that runs informers samples itself (publish, each status_interval,
-- from the dispatch timer): a snapshot of its informers' status() plus what the timer saw,
-- logged transitions (new list/watch errors, recovery) and, with a status dict, the snapshot
-- stored there under the process's key with a TTL, so that collect() answers for every process
-- whichever worker serves the request. collect() never blocks; it decodes what the dict holds.
local ngx = ngx
local nprocess = require "kinformer.ngx.process"
local all_views = require("kinformer.ngx.view").all

local json = require("cjson").new() -- our own instance: a user's cjson settings stay theirs
local json_encode, json_decode = json.encode, json.decode

local type, ipairs, pcall, tostring = type, ipairs, pcall, tostring
local math_max = math.max
local ngx_now = ngx.now
local worker_pid, worker_count = ngx.worker.pid, ngx.worker.count
local shared = ngx.shared
local S, log, status_dict = nprocess.state, nprocess.log, nprocess.status_dict
local process_name = nprocess.name

local _M = {}

-- Other parts of kinformer.ngx that report in kngx.status(): { name =, collect = fn() -> value },
-- whose value collect() puts under status[name] (the balancer's samples, say).
_M.extras = {}

--- status.set_synced_flag(value): in the agent model, tells the workers whether the process
-- running the informers synced (the shared model keeps a flag per segment: ngx/shared.lua).
function _M.set_synced_flag(value)
  local d = status_dict()
  if d and S.model == "agent" then d:set("agent/synced", value) end
end

-- A snapshot of this process: informers' status() plus what the timer saw.
local function snapshot(t)
  local role = S.role
  local infs, views = {}, {}
  for i, name in ipairs(S.names) do
    local st = S.list[i]:status()
    st.resource_version_age = t - S.rv_at[i]
    infs[name] = st
  end
  for _, v in ipairs(all_views) do
    local vs = { keys = v.keys, errors = v.errors }
    if S.model == "agent" then
      local d = shared[v.dict_name]
      vs.dict = v.dict_name
      if d and d.capacity then vs.capacity, vs.free_space = d:capacity(), d:free_space() end
    end
    views[v.name] = vs
  end
  local readers
  if S.model == "shared" then
    readers = {}
    for _, name in ipairs(S.shared_names) do readers[name] = S.readers[name]:status() end
  end
  return {
    shared = readers,
    pid = worker_pid(), process = process_name(role), role = role, model = S.model,
    time = t, started = S.started_at, stopped = S.stopped,
    -- what it reads is complete, and so are its own informers where it runs some
    synced = (S.synced and (not S.runs or S.informers_synced)) == true,
    ticks = S.ticks, items = S.items, dispatch_errors = S.dispatch_errors,
    view_errors = S.view_errors, max_dispatch_seconds = S.max_tick,
    informers = infs, views = views,
  }
end

-- Logs what changed since the last sample: new list/watch errors, recovery.
local function log_transitions(snap)
  for i, name in ipairs(S.names) do
    local st, prev = snap.informers[name], S.prev[i]
    if prev then
      if (st.errors or 0) > (prev.errors or 0) then
        log("warn", "informer ", name, " (", st.resource, "): ", tostring(st.last_error),
          " (phase ", tostring(st.phase), ", ", st.errors, " errors)")
      elseif prev.phase ~= "watching" and st.phase == "watching" and (st.errors or 0) > 0 then
        log("notice", "informer ", name, " (", st.resource, "): watching again at ",
          "resourceVersion ", tostring(st.resource_version))
      end
    end
    S.prev[i] = { errors = st.errors, phase = st.phase }
  end
end

--- status.publish(t): samples this process (at ngx.now() t), logs, stores the sample.
function _M.publish(t)
  local snap = snapshot(t)
  log_transitions(snap)
  local d = status_dict()
  if d then
    -- flags = pid: stop() deletes the entry only if it is still this process's (after a reload
    -- the new worker with the same id may have written it already)
    local ok, err = d:set(S.status_key, json_encode(snap), S.status_ttl, worker_pid())
    if not ok then log("warn", "cannot publish status to ", S.status_dict, ": ", err) end
    if S.model == "agent" and S.runs then d:set("agent/synced", S.informers_synced) end
  end
end

local function process_keys()
  local keys = { "status/agent", "status/single" }
  for i = 0, worker_count() - 1 do keys[#keys + 1] = "status/worker/" .. i end
  return keys
end

--- status.collect(), kngx.status() -> { model =, served_by = pid, processes = { snapshot, ... } }
-- One snapshot per process that runs informers (from the status dict; this process's own is
-- fresh): pid, process ("worker-0", "agent"), role, synced, age (seconds since the sample),
-- ticks, items, dispatch_errors, view_errors, max_dispatch_seconds, informers = { name =
-- informer:status() plus resource_version_age } (docs/informer.md, docs/openresty.md).
function _M.collect()
  local out = { model = S.model, served_by = worker_pid(), processes = {} }
  local t = ngx_now()
  local own = S.runs and not S.stopped and snapshot(t) or nil
  local d = status_dict()
  if d then
    for _, key in ipairs(process_keys()) do
      local snap
      if own and key == S.status_key then
        snap = own
        own = nil
      else
        local raw = d:get(key)
        if raw then
          local ok, v = pcall(json_decode, raw)
          if ok and type(v) == "table" then snap = v end
        end
      end
      if snap then
        snap.age = math_max(0, t - (snap.time or t))
        out.processes[#out.processes + 1] = snap
      end
    end
  end
  if own then
    own.age = 0
    out.processes[#out.processes + 1] = own
  end
  for _, x in ipairs(_M.extras) do out[x.name] = x.collect() end
  return out
end

return _M
