--- router: routes each request by its Host to the ready endpoints of a Kubernetes Service.
--
-- Host "<service>.<namespace>" (also followed by ".svc" or ".svc.<cluster domain>") selects the
-- Service namespace/service. An EndpointSlice informer keeps a Lua index service -> slices
-- (label kubernetes.io/service-name); its handlers mark the services whose slices changed, and
-- after each dispatch tick the ready endpoints of those services ("ip:port", from every slice,
-- ready unless conditions.ready is false) are recomputed into the view `routes`. A request reads
-- the view, picks the next endpoint round-robin (per worker) and balancer_by_lua* connects to it;
-- a failed connection retries the next one. No ready endpoint: 503 with a body saying why.
-- In the shared model (the default) one process watches and every worker reads the slices from
-- shared memory: the same handlers run in every worker and keep that worker's routes.
--
-- Settings come from the environment (declared with `env` in nginx.conf):
--   KINFORMER_SERVER       API server URL (unset: $KUBECONFIG, ~/.kube/config or in-cluster)
--   KINFORMER_MODEL        "shared" (default: one watch, one cache in shared memory), "worker"
--                          (informers in every worker) or "agent"
--   KINFORMER_SHARED_SIZE  the shared model's memory (default "64m")
--   KINFORMER_NAMESPACE    watch one namespace (default: all)
--   KINFORMER_PORT_NAME    which port of the slices to use (default: the first)
--   KINFORMER_INTERVAL     dispatch interval in seconds (default 0.1)
--   KINFORMER_BACKOFF_MAX  reflector backoff cap in seconds (default 30)
local kngx = require "kinformer.ngx"
local kinformer = require "kinformer"
local balancer = require "ngx.balancer"

local ngx = ngx
local type, ipairs, pairs, tonumber, os_getenv = type, ipairs, pairs, tonumber, os.getenv
local string_format, string_match, string_sub, table_sort =
  string.format, string.match, string.sub, table.sort

local SERVICE_LABEL = "kubernetes.io/service-name"

local _M = {}

-- "namespace/service" -> { "ip:port", ... } (sorted; empty: slices exist, none ready)
local routes = kngx.view{ name = "routes" }
local position = {}        -- per worker: service -> last endpoint index used (round robin)
local slice_service = {}   -- handlers' process: slice key -> its service key
local dirty = {}           -- handlers' process: services to recompute after this tick
local store                -- the EndpointSlice cache (shared model: in every worker)

local function env(name, default)
  local v = os_getenv(name)
  if v == nil or v == "" then return default end
  return v
end

local function model()
  return env("KINFORMER_MODEL", "shared")
end

--- init_by_lua*: runs in the master (also on every reload).
function _M.init()
  local m = model()
  if m == "agent" or m == "shared" then kngx.enable_agent() end
  if m == "shared" then kngx.shared_memory(env("KINFORMER_SHARED_SIZE", "64m")) end
end

-- ---- the informer side ----

local function service_of(slice)
  local md = slice.metadata
  local labels = md and md.labels
  local svc = type(labels) == "table" and labels[SERVICE_LABEL]
  if type(svc) ~= "string" or type(md.namespace) ~= "string" then return nil end
  return md.namespace .. "/" .. svc
end

local function service_index(slice)
  local svc = service_of(slice)
  return svc and { svc } or nil
end

local port_name = nil

local function slice_port(slice)
  local ports = slice.ports
  if type(ports) ~= "table" then return nil end
  for _, p in ipairs(ports) do
    if type(p) == "table" and type(p.port) == "number" and (port_name == nil or p.name == port_name) then
      return p.port
    end
  end
  return nil
end

-- The ready endpoints of a service from all its slices; nil when it has no slice at all.
local function ready_endpoints(svc)
  local slices = store:by_index("service", svc)
  if #slices == 0 then return nil end
  local out, seen = {}, {}
  for _, cached in ipairs(slices) do
    -- A copy, garbage once the routes are computed: reading cached.endpoints would keep the
    -- decoded endpoints in the cached object for as long as the slice is cached.
    local slice = kinformer.to_table(cached)
    local port = slice_port(slice)
    local family = slice.addressType
    if port and (family == "IPv4" or family == "IPv6") and type(slice.endpoints) == "table" then
      for _, ep in ipairs(slice.endpoints) do
        local c = ep.conditions
        -- The API: a nil "ready" means unknown, to be treated as ready.
        local ready = type(c) ~= "table" or c.ready ~= false
        local addr = type(ep.addresses) == "table" and ep.addresses[1]
        if ready and type(addr) == "string" then
          local peer = string_format(family == "IPv6" and "[%s]:%d" or "%s:%d", addr, port)
          if not seen[peer] then
            seen[peer] = true
            out[#out + 1] = peer
          end
        end
      end
    end
  end
  table_sort(out)
  return out
end

local function mark(svc)
  if svc then dirty[svc] = true end
end

local handlers = {
  on_add = function(slice)
    local svc = service_of(slice)
    slice_service[kinformer.key_of(slice)] = svc
    mark(svc)
  end,
  on_update = function(_, slice)
    local key = kinformer.key_of(slice)
    local svc = service_of(slice)
    mark(slice_service[key]) -- the label may have moved the slice to another service
    slice_service[key] = svc
    mark(svc)
  end,
  on_delete = function(slice) -- may be a tombstone: key_of gives its key
    local key = kinformer.key_of(slice)
    mark(slice_service[key])
    slice_service[key] = nil
  end,
}

-- After each dispatch tick: recompute the services whose slices changed (once each), at most
-- PUBLISH_MAX per call so a big change (the initial list) does not hold the worker for long;
-- returning true has kinformer.ngx call again at once, after pending requests.
local PUBLISH_MAX = 100
local function publish()
  local n = 0
  for svc in pairs(dirty) do
    if n == PUBLISH_MAX then return true end
    n = n + 1
    dirty[svc] = nil
    local peers = ready_endpoints(svc)
    if peers then routes:set(svc, peers) else routes:delete(svc) end
  end
  return false
end

--- init_worker_by_lua*: runs in every worker and in the privileged agent.
function _M.init_worker()
  port_name = env("KINFORMER_PORT_NAME", nil)
  local server = env("KINFORMER_SERVER", nil)
  local m = model()
  local ok, err = kngx.start{
    model = m,
    client = server and { server = server } or nil,
    informers = {
      endpointslices = {
        resource = "endpointslices.discovery.k8s.io",
        namespace = env("KINFORMER_NAMESPACE", nil),
        backoff_max = tonumber(env("KINFORMER_BACKOFF_MAX", "30")),
      },
    },
    setup = function(informers) -- in the process(es) that run the informer
      local slices = informers.endpointslices
      assert(slices:add_indexers{ service = service_index })
      if m ~= "shared" then assert(slices:add_handler(handlers)) end
    end,
    handlers = m == "shared" and { endpointslices = handlers } or nil, -- every worker
    after_dispatch = publish,
    interval = tonumber(env("KINFORMER_INTERVAL", "0.1")),
  }
  if not ok then ngx.log(ngx.ERR, "router: kinformer did not start: ", err) end
  store = kngx.store("endpointslices")
end

-- ---- the request side ----

local host_service, host_count = {}, 0

-- "web.shop", "web.shop.svc", "web.shop.svc.cluster.local" -> "shop/web"; anything else false.
local function service_of_host(host)
  local svc = host_service[host]
  if svc ~= nil then return svc end
  local name, ns, rest = string_match(host, "^([^.]+)%.([^.]+)(.*)$")
  if name and (rest == "" or rest == ".svc" or string_sub(rest, 1, 5) == ".svc.") then
    svc = ns .. "/" .. name
  else
    svc = false
  end
  if host_count >= 10000 then host_service, host_count = {}, 0 end -- Host is client input
  host_service[host] = svc
  host_count = host_count + 1
  return svc
end

--- balancer_by_lua*: picks the next ready endpoint of the Host's Service, round-robin; a retry
-- after a failed connection takes the one after. No endpoint: the balancer fails the request,
-- which stock nginx turns into a 500 (only OpenResty's patched core lets a balancer choose the
-- code), and `error_page 500 = @no_endpoint` renders the real answer with explain().
-- All the routing happens here, in the one Lua call nginx makes for the proxied request anyway.
function _M.balance()
  local svc = service_of_host(ngx.var.host)
  local peers = svc and routes:get(svc)
  local n = peers and #peers or 0
  if n == 0 then return ngx.exit(ngx.ERROR) end
  local i = (position[svc] or 0) % n + 1
  position[svc] = i
  if n > 1 and not balancer.get_last_failure() then balancer.set_more_tries(n - 1) end
  local ok, err = balancer.set_current_peer(peers[i])
  if not ok then
    ngx.log(ngx.ERR, "router: cannot use endpoint ", peers[i], ": ", err)
    return ngx.exit(502)
  end
end

--- content_by_lua* of the error_page for 500: why no endpoint was chosen, as plain text: 404
-- (the Host names no Service) or 503 (no ready endpoint, no slice, not synced yet).
function _M.explain()
  local host = ngx.var.host
  local svc = service_of_host(host)
  local status, body
  if not svc then
    status, body = 404, "kinformer router: Host '" .. host ..
      "' does not name a Service (use <service>.<namespace>)\n"
  else
    local peers = routes:get(svc)
    status = 503
    if peers and #peers > 0 then -- not ours: some other internal error
      status, body = 500, "kinformer router: internal error (see the error log)\n"
    elseif not kngx.synced() then
      body = "kinformer router: no endpoints for Service " .. svc ..
        " yet: the EndpointSlice cache has not synced\n"
    elseif not peers then
      body = "kinformer router: Service " .. svc .. " has no EndpointSlice\n"
    else
      body = "kinformer router: Service " .. svc .. " has no ready endpoint\n"
    end
  end
  ngx.status = status
  ngx.header["Content-Type"] = "text/plain"
  if status == 503 then ngx.header["Retry-After"] = "1" end
  ngx.print(body)
end

--- content_by_lua* of /kinformer/status: every process's informers as JSON.
function _M.status()
  ngx.header["Content-Type"] = "application/json"
  ngx.say(require("cjson").encode(kngx.status()))
end

--- content_by_lua* of /metrics: the Prometheus text format.
function _M.metrics()
  ngx.header["Content-Type"] = "text/plain; version=0.0.4"
  ngx.print(kngx.metrics())
end

return _M
