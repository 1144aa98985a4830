--- settings: the example's settings, from the environment (each declared with `env` in nginx.conf).
--
--   KINFORMER_SERVER       API server URL (unset: $KUBECONFIG, ~/.kube/config or in-cluster)
--   KINFORMER_MODEL        "shared" (default: one watch, one cache in shared memory), "worker"
--                          (informers in every worker) or "agent"
--   KINFORMER_SHARED_SIZE  the shared model's memory (default "64m")
--   KINFORMER_NAMESPACE    watch one namespace (default: all)
--   KINFORMER_PORT_NAME    the EndpointSlice port to send to, by name or number (default: the
--                          Service's only port)
--   KINFORMER_INTERVAL     dispatch interval in seconds (default 0.1)
--   KINFORMER_BACKOFF_MAX  reflector backoff cap in seconds (default 30)
--
-- The routing itself is kinformer.ngx.balancer's (docs/openresty.md); nginx.conf's map turns the
-- Host into "namespace/name", and target() adds the port.
local kngx = require "kinformer.ngx"
local balancer = require "kinformer.ngx.balancer"

local ngx = ngx
local tonumber, os_getenv = tonumber, os.getenv

local _M = {}

local function env(name, default)
  local v = os_getenv(name)
  if v == nil or v == "" then return default end
  return v
end

local function model()
  return env("KINFORMER_MODEL", "shared")
end

--- init_by_lua*: in the master (again on every reload).
function _M.init()
  local m = model()
  if m == "agent" or m == "shared" then kngx.enable_agent() end
  if m == "shared" then kngx.shared_memory(env("KINFORMER_SHARED_SIZE", "64m")) end
end

local suffix = "" -- ":<port>" when KINFORMER_PORT_NAME is set

--- init_worker_by_lua*: in every worker and in the privileged agent.
function _M.init_worker()
  local port = env("KINFORMER_PORT_NAME", nil)
  suffix = port and ":" .. port or ""
  local server = env("KINFORMER_SERVER", nil)
  local ok, err = balancer.start{
    model = model(),
    client = server and { server = server } or nil,
    endpointslices = {
      namespace = env("KINFORMER_NAMESPACE", nil),
      backoff_max = tonumber(env("KINFORMER_BACKOFF_MAX", "30")),
    },
    interval = tonumber(env("KINFORMER_INTERVAL", "0.1")),
  }
  if not ok then ngx.log(ngx.ERR, "kinformer did not start: ", err) end
end

local targets, ntargets = {}, 0 -- per worker: "namespace/name" -> "namespace/name:port"

--- target(service) -> the balancer's target for "namespace/name" ("" stays "": no route).
-- With a port name, a per-worker table keeps the strings, so a request allocates none; it is
-- bounded because the Host comes from the client.
function _M.target(service)
  if suffix == "" or service == nil or service == "" then return service end
  local t = targets[service]
  if t then return t end
  if ntargets >= 10000 then targets, ntargets = {}, 0 end
  t = service .. suffix
  targets[service], ntargets = t, ntargets + 1
  return t
end

return _M
