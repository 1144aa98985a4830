-- controller.lua: a small, complete Kubernetes controller on kinformer.manager. In every
-- namespace that has pods with an `app` label it keeps a ConfigMap "ready-pods" whose data lists,
-- per app, the names of its ready pods (a sorted JSON array: `frontend: ["frontend-1"]`), and
-- deletes it when those pods are gone. Its status (apps, ready pods, pods) goes in the
-- annotation ready-pods.kinformer.io/status, written in the same request as the data.
--
-- The primary resource is the managed ConfigMap (key "ns/ready-pods", whether it exists or not);
-- pods map to it. reconcile compares the caches with the ConfigMap and writes only when they
-- differ; a failure is retried with backoff. Several replicas may run: the one holding the Lease
-- reconciles, the others keep warm caches and queues; or, with --shard-group, every replica
-- reconciles its share of the namespaces (docs/controller.md, "Sharding").
--
--   lua5.4 examples/controller.lua [--seconds N] [--namespace NS] [--identity ID]
--       [--lease-name NAME] [--lease-namespace NS] [--lease-duration S] [--renew-deadline S]
--       [--retry-period S] [--shard-group GROUP]
--
-- Cluster: $KINFORMER_SERVER (a URL) when set, else kinformer.client()'s default. Identity:
-- --identity, else $POD_NAME, else hostname_pid. Output: one logfmt line per event on stdout.
-- Stops after --seconds, or on SIGTERM / SIGINT, releasing the Lease; exit status 0 then, 1 if
-- it cannot start, 2 for bad arguments.
local dir = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
package.path = dir .. "/../lua/?.lua;" .. dir .. "/../lua/?/init.lua;" .. package.path
package.cpath = dir .. "/../build/" .. (rawget(_G, "jit") and "luajit" or "lua5.4") .. "/?.so;"
  .. package.cpath
local kinformer = require "kinformer"
local cjson = require "cjson"

local CM_NAME, STATUS = "ready-pods", "ready-pods.kinformer.io/status"
local MANAGED = "app.kubernetes.io/managed-by=kinformer-ready-pods"

local function usage(msg)
  io.stderr:write("controller: ", msg, "\nusage: controller.lua [--seconds N] [--namespace NS]",
    " [--identity ID] [--lease-name NAME] [--lease-namespace NS] [--lease-duration S]",
    " [--renew-deadline S] [--retry-period S] [--shard-group GROUP]\n")
  os.exit(2)
end
local NUMBERS = { seconds = true, lease_duration = true, renew_deadline = true, retry_period = true }
local STRINGS = { namespace = true, identity = true, lease_name = true, lease_namespace = true,
                  shard_group = true }
local opts = { lease_name = "kinformer-ready-pods", lease_duration = 15, renew_deadline = 10,
               retry_period = 2, identity = os.getenv("POD_NAME") }
for i = 1, #arg, 2 do
  local name, v = (arg[i]:match("^%-%-([%w-]+)$") or ""):gsub("-", "_"), arg[i + 1]
  if NUMBERS[name] then opts[name] = tonumber(v) or usage(arg[i] .. " needs a number")
  elseif STRINGS[name] then opts[name] = v or usage(arg[i] .. " needs a value")
  else usage("unknown argument " .. arg[i]) end
end
io.stdout:setvbuf("line")
kinformer.set_logger(nil, "info")
kinformer.catch_signals(true) -- a SIGTERM while the caches sync ends the run too

local identity
local function log(event, fields) -- one logfmt line, fields sorted, values quoted if needed
  local out = { "time=" .. os.date("!%Y-%m-%dT%H:%M:%SZ"), "identity=" .. tostring(identity),
                "event=" .. event }
  local keys = {}
  for k in pairs(fields or {}) do keys[#keys + 1] = k end
  table.sort(keys)
  for _, k in ipairs(keys) do
    local v = tostring(fields[k]):gsub("\n", " ")
    out[#out + 1] = k .. "=" .. (v:find('[%s"=]') and ("%q"):format(v) or v)
  end
  print(table.concat(out, " "))
end

local server = os.getenv("KINFORMER_SERVER")
local client, err = kinformer.client(server and server ~= "" and { server = server } or nil)
if not client then io.stderr:write("controller: ", tostring(err), "\n") os.exit(1) end

local mgr
local leases = { namespace = opts.lease_namespace, identity = opts.identity,
  lease_duration = opts.lease_duration, renew_deadline = opts.renew_deadline,
  retry_period = opts.retry_period }
if opts.shard_group then -- every replica works, on its share of the keys
  leases.group = opts.shard_group
  mgr = kinformer.manager{ client = client, sharding = leases }
else
  mgr = kinformer.manager{ client = client, leader_election = {
    lease_name = opts.lease_name, namespace = leases.namespace, identity = leases.identity,
    lease_duration = leases.lease_duration, renew_deadline = leases.renew_deadline,
    retry_period = leases.retry_period,
    on_started_leading = function()
      log("leading", { lease = mgr:elector():status().lease,
                       queued = mgr:status().controllers["ready-pods"].queue.depth })
    end,
    on_stopped_leading = function(why)
      log(why == "shutdown" and "released" or "following", { lease = mgr:elector():status().lease })
    end,
    on_new_leader = function(id) log("leader", { leader = id }) end,
  } }
end
identity = mgr:elector():status().identity

local function is_ready(pod)
  if pod.metadata.deletionTimestamp then return false end -- terminating: not serving
  for _, c in ipairs(pod.status and pod.status.conditions or {}) do
    if c.type == "Ready" then return c.status == "True" end
  end
  return false
end
local function app_of(pod) return pod.metadata.labels and pod.metadata.labels.app end

local pods -- the pods informer (the manager's, shared through the client)
local stats = { reconciles = 0, writes = 0, errors = 0 }

-- -> data, status for namespace ns (nil when it has no pod with an app label)
local function desired(ns)
  local ready, total = {}, 0
  for _, pod in ipairs(pods:store():by_index("namespace", ns)) do
    local app = app_of(pod)
    if app then
      total = total + 1
      ready[app] = ready[app] or {}
      if is_ready(pod) then table.insert(ready[app], pod.metadata.name) end
    end
  end
  if total == 0 then return nil end
  local data, n_apps, n_ready = {}, 0, 0
  for app, list in pairs(ready) do
    table.sort(list)
    for i, name in ipairs(list) do list[i] = cjson.encode(name) end
    data[app] = "[" .. table.concat(list, ",") .. "]"
    n_apps, n_ready = n_apps + 1, n_ready + #list
  end
  return data, ("apps=%d ready=%d pods=%d"):format(n_apps, n_ready, total)
end

local function same_data(a, b)
  for k, v in pairs(a) do if b[k] ~= v then return false end end
  for k in pairs(b) do if a[k] == nil then return false end end
  return true
end

-- A write still in flight when leadership ends outlives it by at most retry_period.
local write_opts = { timeout = math.max(1, opts.retry_period) }

local function reconcile(req, ctx)
  stats.reconciles = stats.reconciles + 1
  local current, ns = ctx:get(), req.namespace
  local data, status = desired(ns)
  local res, rerr, op
  if not data then
    if not current then return end
    op = "delete" -- only the version we looked at (409 if it changed meanwhile)
    res, rerr = client:delete("configmaps", req.key, { timeout = write_opts.timeout,
      preconditions = { uid = current.metadata.uid,
                        resourceVersion = current.metadata.resourceVersion } })
    if not res and rerr.code == 404 then return end
  elseif not current then
    op = "create" -- 409 AlreadyExists: the cache is behind, retried with backoff
    res, rerr = client:create("configmaps", { apiVersion = "v1", kind = "ConfigMap",
      metadata = { name = CM_NAME, namespace = ns,
                   labels = { ["app.kubernetes.io/managed-by"] = "kinformer-ready-pods" },
                   annotations = { [STATUS] = status } }, data = data }, write_opts)
  else
    local annotations = current.metadata.annotations or {}
    if same_data(data, current.data or {}) and annotations[STATUS] == status then return end
    op = "update" -- the cached resourceVersion: 409 Conflict if the cache was stale
    local cm = kinformer.to_table(current)
    cm.data = data
    cm.metadata.annotations = cm.metadata.annotations or {}
    cm.metadata.annotations[STATUS] = status
    res, rerr = client:update("configmaps", cm, write_opts)
  end
  if not res then
    stats.errors = stats.errors + 1
    log("error", { namespace = ns, error = tostring(rerr), retry_in = "backoff" })
    return nil, rerr
  end
  stats.writes = stats.writes + 1
  log("write", { op = op, namespace = ns, configmap = CM_NAME, status = status or "deleted",
                 resourceVersion = res.metadata and res.metadata.resourceVersion or "-" })
end

mgr:controller{
  name = "ready-pods", resource = "configmaps", label_selector = MANAGED,
  namespace = opts.namespace,
  -- Pods map to their namespace's ConfigMap; most pod updates change nothing it publishes.
  watches = { { resource = "pods", namespace = opts.namespace,
    map = function(pod) return { pod.metadata.namespace .. "/" .. CM_NAME } end,
    predicates = { function(ev)
      return ev.type ~= "update" or app_of(ev.old) ~= app_of(ev.object)
        or is_ready(ev.old) ~= is_ready(ev.object)
    end } } },
  reconcile = reconcile,
  -- The reconcile writes the ConfigMaps itself (client:create / update / delete): declared for
  -- mgr:rbac, which sees only what the manager does (bin/kinformer-rbac examples/controller.lua).
  rbac = { { apiGroups = { "" }, resources = { "configmaps" },
             verbs = { "create", "update", "delete" } } },
}
pods = assert(client:informer{ resource = "pods", namespace = opts.namespace })

-- A leader with half a cache would delete ConfigMaps of namespaces it has not seen yet: the
-- manager competes for the lease only once synced; "started" is logged before that.
local ok, serr, code = mgr:wait_for_sync(30)
if not ok and code ~= "SIGTERM" and code ~= "SIGINT" then
  io.stderr:write("controller: ", tostring(serr), "\n")
  os.exit(1)
end
if ok then
  log("started", { server = client.server, pods = pods:store():len(),
    configmaps = client:informer{ resource = "configmaps", namespace = opts.namespace,
                                  label_selector = MANAGED }:store():len() })
end
stats.reason = mgr:run{ timeout = opts.seconds }
stats.dropped = mgr:status().controllers["ready-pods"].queue.depth -- keys left unreconciled
log("stopped", stats)
