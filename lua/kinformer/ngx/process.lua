--- kinformer.ngx.process (internal): this nginx process as kinformer.ngx sees it: its role,
-- its name in status and metrics, the error-log writer, and the state the parts of kinformer.ngx
-- share (kinformer.ngx, .view, .status).
--
-- Contract: `state` is one table per process. `agent` is set in the master by enable_agent()
-- and reaches the workers and the agent through fork; everything else is set by start() in each
-- process and read by the timer, status() and the views. Only code running in nginx's Lua VM of
-- this process touches it (no threads).
local ngx = ngx
local process = require "ngx.process"

local tostring = tostring
local ngx_log, worker_id = ngx.log, ngx.worker.id
local shared = ngx.shared
local NGX_LEVEL = { debug = ngx.DEBUG, info = ngx.INFO, notice = ngx.NOTICE, warn = ngx.WARN,
  error = ngx.ERR }

local _M = {}

_M.state = {
  agent = nil,            -- "privileged" (an agent process exists) or "worker" (worker 0 runs)
  segment = nil,          -- shared model: the segment, mapped by shared_memory() in the master
  model = nil,            -- "worker" | "agent" | "shared" once start() ran
  segment_id = nil,       -- shared model: the segment's identity (core.shm_named's id)
  shared_names = {}, readers = {}, handlers = {}, -- shared model: every process's readers
  created = {}, opened = {}, standins = {}, -- per store: it exists; requests read it; stand-in
  started = false, runs = false, stopped = false, synced = false,
  informers_synced = false,               -- this process's informers synced
  claiming = false, mirrored = {},        -- shared model: waiting to become the writer; per slot
  names = {}, list = {}, by_name = {},    -- informers: sorted names, same order, name -> informer
  rv = {}, rv_at = {},                    -- per informer: last resourceVersion and when it moved
  prev = {},                              -- per informer: the previous status sample (for logs)
  ticks = 0, items = 0, dispatch_errors = 0, view_errors = 0, max_tick = 0,
  continuing = false,
}
local S = _M.state

--- process.log(level, ...): one line in the nginx error log, "kinformer: " first.
function _M.log(level, ...)
  ngx_log(NGX_LEVEL[level] or ngx.ERR, "kinformer: ", ...)
end

--- process.logger(level, msg): kinformer's logger inside nginx (kinformer.set_logger).
function _M.logger(level, msg)
  ngx_log(NGX_LEVEL[level] or ngx.ERR, "kinformer: ", msg)
end

--- process.role() -> "worker", "agent", "single" (master_process off), "master", "signaller"
-- or "helper".
function _M.role()
  local t = process.type()
  if t == "privileged agent" then return "agent" end
  return t
end

--- process.name(role) -> this process's name in status and metrics: "worker-0", "agent",
-- "single".
function _M.name(role)
  if role == "worker" then return "worker-" .. tostring(worker_id()) end
  return role
end

--- process.status_key(role) -> its key in the status dict
function _M.status_key(role)
  if role == "worker" then return "status/worker/" .. tostring(worker_id()) end
  return "status/" .. role
end

--- process.status_dict() -> the status lua_shared_dict, or nil
function _M.status_dict()
  return S.status_dict and shared[S.status_dict]
end

return _M
