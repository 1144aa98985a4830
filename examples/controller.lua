-- controller.lua: a small, complete Kubernetes controller. In every namespace that has pods with
-- an `app` label it keeps a ConfigMap "ready-pods" whose data lists, per app, the names of its
-- ready pods (a sorted JSON array: `frontend: ["frontend-1","frontend-2"]`), and deletes it when
-- those pods are gone. ConfigMaps have no status subresource, so the controller's status (what
-- it observed: apps, ready pods, pods) goes in the annotation ready-pods.kinformer.io/status of
-- the same object, written in the same request as the data.
--
-- Built as client-go controllers are: informers (pods, and the ConfigMaps it manages) feed a
-- rate-limited work queue of namespaces; reconcile(namespace) compares what the caches say
-- with the ConfigMap and writes only when they differ; a failed write goes back to the queue
-- with backoff. Several replicas may run: the one holding a Lease writes, the others keep warm
-- caches and drop their work items until they lead.
--
--   lua5.4 examples/controller.lua [--seconds N] [--namespace NS] [--identity ID]
--       [--lease-name NAME] [--lease-namespace NS] [--lease-duration S] [--renew-deadline S]
--       [--retry-period S]
--
-- Cluster: $KINFORMER_SERVER (a URL) when set, else kinformer.client()'s default ($KUBECONFIG,
-- ~/.kube/config, in-cluster). Identity: --identity, else $POD_NAME, else hostname_pid. Lease:
-- default "kinformer-ready-pods" in the client's namespace; durations 15 / 10 / 2 s.
-- Output: one logfmt line per event on stdout (event=write for each write). Stops after
-- --seconds, or on SIGTERM / SIGINT, releasing the Lease; exit status 0 then, 1 if it cannot
-- start, 2 for bad arguments.

-- Find kinformer in this checkout (lua/ and build/), else wherever it is installed.
local dir = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
package.path = dir .. "/../lua/?.lua;" .. dir .. "/../lua/?/init.lua;" .. package.path
package.cpath = dir .. "/../build/" .. (rawget(_G, "jit") and "luajit" or "lua5.4") .. "/?.so;"
  .. package.cpath

local kinformer = require "kinformer"
local cjson = require "cjson"

local CM_NAME = "ready-pods"
local MANAGED_BY = "app.kubernetes.io/managed-by"
local MANAGER = "kinformer-ready-pods"
local STATUS = "ready-pods.kinformer.io/status"

-- ---- options ----
local function usage(msg)
  io.stderr:write("controller: ", msg, "\n", "usage: controller.lua [--seconds N] [--namespace NS]",
    " [--identity ID] [--lease-name NAME] [--lease-namespace NS] [--lease-duration S]",
    " [--renew-deadline S] [--retry-period S]\n")
  os.exit(2)
end
local NUMBERS = { seconds = true, lease_duration = true, renew_deadline = true, retry_period = true }
local STRINGS = { namespace = true, identity = true, lease_name = true, lease_namespace = true }
local opts = { lease_name = "kinformer-ready-pods", lease_duration = 15, renew_deadline = 10,
               retry_period = 2, identity = os.getenv("POD_NAME") }
for i = 1, #arg, 2 do
  local name, v = (arg[i]:match("^%-%-([%w-]+)$") or ""):gsub("-", "_"), arg[i + 1]
  if NUMBERS[name] then opts[name] = tonumber(v) or usage(arg[i] .. " needs a number")
  elseif STRINGS[name] then opts[name] = v or usage(arg[i] .. " needs a value")
  else usage("unknown argument " .. arg[i]) end
end
io.stdout:setvbuf("line")
kinformer.set_logger(nil, "info")   -- kinformer's own lines (lease transitions, watch errors): stderr
kinformer.catch_signals(true)       -- SIGTERM / SIGINT end queue:get instead of the process

local identity   -- set once the elector exists
-- log("write", { namespace = "shop", ... }): one logfmt line, fields sorted, values quoted if needed
local function log(event, fields)
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

-- ---- client, informers, queue ----
local server = os.getenv("KINFORMER_SERVER")
local client, err = kinformer.client(server and server ~= "" and { server = server } or nil)
if not client then io.stderr:write("controller: ", tostring(err), "\n") os.exit(1) end

local pods = assert(client:informer{ resource = "pods", namespace = opts.namespace })
-- Only the ConfigMaps this controller manages: the label keeps the cache small.
local cms = assert(client:informer{ resource = "configmaps", namespace = opts.namespace,
                                    label_selector = MANAGED_BY .. "=" .. MANAGER })
-- Keys are namespaces: every change in one coalesces into a single reconcile of it. get()
-- dispatches both informers while it waits, so their handlers below fill the queue.
local queue = kinformer.workqueue{ name = "ready-pods", informers = { pods, cms } }

local function is_ready(pod)
  if pod.metadata.deletionTimestamp then return false end  -- terminating: not serving
  for _, c in ipairs(pod.status and pod.status.conditions or {}) do
    if c.type == "Ready" then return c.status == "True" end
  end
  return false
end
local function app_of(pod) return pod.metadata.labels and pod.metadata.labels.app end

local function enqueue(obj)   -- obj may be a tombstone (a delete seen only by a relist)
  queue:add((kinformer.split_key(kinformer.key_of(obj))))
end
pods:add_handler{
  on_add = enqueue, on_delete = enqueue,
  -- Most pod updates (status details, other labels) change nothing we publish: skip them.
  on_update = function(old, new)
    if app_of(old) ~= app_of(new) or is_ready(old) ~= is_ready(new) then enqueue(new) end
  end,
}
-- Our own writes come back here (and reconcile finds nothing to do); someone else's edit or
-- delete of a managed ConfigMap is repaired.
cms:add_handler{ on_add = enqueue, on_update = function(_, new) enqueue(new) end,
                 on_delete = enqueue }

-- ---- reconcile: desired state from the caches, one write when it differs ----
local stats = { reconciles = 0, writes = 0, errors = 0, dropped = 0 }

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
    local quoted = {}
    for i, name in ipairs(list) do quoted[i] = cjson.encode(name) end
    data[app] = "[" .. table.concat(quoted, ",") .. "]"
    n_apps, n_ready = n_apps + 1, n_ready + #list
  end
  return data, ("apps=%d ready=%d pods=%d"):format(n_apps, n_ready, total)
end

local function same_data(a, b)
  for k, v in pairs(a) do if b[k] ~= v then return false end end
  for k in pairs(b) do if a[k] == nil then return false end end
  return true
end

-- Each write carries the timeout of the elector's own requests: a write still in flight when
-- leadership ends outlives it by at most retry_period (hence lease_duration > renew_deadline
-- + retry_period, so that no successor writes meanwhile).
local write_opts = { timeout = math.max(1, opts.retry_period) }

-- -> true, or nil, err (an API error: err.code, err.reason, err.retry_after)
local function reconcile(ns)
  stats.reconciles = stats.reconciles + 1
  local key = ns .. "/" .. CM_NAME
  local current = cms:store():get_by_key(key)      -- the cache: never a GET per reconcile
  local data, status = desired(ns)
  local res, err, op
  if not data then
    if not current then return true end
    op = "delete"
    -- Preconditions: delete only the version we looked at (a 409 if it changed meanwhile).
    res, err = client:delete("configmaps", key, { timeout = write_opts.timeout,
      preconditions = { uid = current.metadata.uid,
                        resourceVersion = current.metadata.resourceVersion } })
    if not res and err.code == 404 then return true end
  elseif not current then
    op = "create"   -- a 409 AlreadyExists means our cache is behind: retried via the queue
    res, err = client:create("configmaps", { apiVersion = "v1", kind = "ConfigMap",
      metadata = { name = CM_NAME, namespace = ns, labels = { [MANAGED_BY] = MANAGER },
                   annotations = { [STATUS] = status } },
      data = data }, write_opts)
  else
    local annotations = current.metadata.annotations or {}
    if same_data(data, current.data or {}) and annotations[STATUS] == status then return true end
    op = "update"
    -- A mutable copy of the cached object, with its resourceVersion: if the cache was stale
    -- the server answers 409 Conflict and the namespace is retried once the cache caught up.
    local cm = kinformer.to_table(current)
    cm.data = data
    cm.metadata.annotations = cm.metadata.annotations or {}
    cm.metadata.annotations[STATUS] = status
    res, err = client:update("configmaps", cm, write_opts)
  end
  if not res then return nil, err end
  stats.writes = stats.writes + 1
  log("write", { op = op, namespace = ns, configmap = CM_NAME, status = status or "deleted",
                 resourceVersion = res.metadata and res.metadata.resourceVersion or "-" })
  return true
end

-- ---- leader election ----
local le, stopping
le = kinformer.leader_election{
  client = client, identity = opts.identity, lease_name = opts.lease_name,
  namespace = opts.lease_namespace, lease_duration = opts.lease_duration,
  renew_deadline = opts.renew_deadline, retry_period = opts.retry_period,
  -- Followers dropped their items: the new leader looks at every namespace once.
  on_started_leading = function()
    log("leading", { lease = le:status().lease })
    for _, store in ipairs{ pods:store(), cms:store() } do
      for _, ns in ipairs(store:list_index_func_values("namespace")) do queue:add(ns) end
    end
  end,
  -- client-go programs usually exit here; with one thread nothing is in flight, so this one
  -- goes back to following with warm caches (or it is stopping: le:stop() released the Lease).
  on_stopped_leading = function()
    log(stopping and "released" or "following", { lease = le:status().lease })
  end,
  on_new_leader = function(id) log("leader", { leader = id }) end,
}
identity = le:status().identity

-- ---- run ----
for _, inf in ipairs{ pods, cms } do
  local ok, serr = inf:start()
  if ok then ok, serr = inf:wait_for_sync(30) end
  -- A leader with half a cache would delete ConfigMaps of namespaces it has not seen yet.
  if not ok then io.stderr:write("controller: ", tostring(serr), "\n") os.exit(1) end
end
log("started", { server = client.server, pods = pods:store():len(), configmaps = cms:store():len() })

local deadline = opts.seconds and kinformer.now() + opts.seconds or math.huge
local reason
while true do
  local due = le:tick()                         -- acquire or renew the Lease when due
  local left = deadline - kinformer.now()
  if left <= 0 then reason = "timeout" break end
  local ns, gerr = queue:get(math.min(due, left, 1))
  if ns then
    if le:is_leader() then
      local ok, res, rerr = pcall(reconcile, ns)
      if ok and res then
        queue:forget(ns)                        -- success: reset its backoff
      else
        stats.errors = stats.errors + 1
        rerr = ok and rerr or res               -- an API error, or what reconcile raised
        local retry_after = type(rerr) == "table" and rerr.retry_after
        if retry_after then queue:add_after(ns, retry_after) else queue:add_rate_limited(ns) end
        log("error", { namespace = ns, error = tostring(rerr),
                       retry_in = retry_after or "backoff", requeues = queue:num_requeues(ns) })
      end
    else
      stats.dropped = stats.dropped + 1         -- not the leader: the leader handles it
      queue:forget(ns)
    end
    queue:done(ns)                              -- always, whatever happened
  elseif gerr == "SIGTERM" or gerr == "SIGINT" then
    reason = gerr
    break
  end
end

stopping = true
le:stop()                                       -- releases the Lease: a successor starts now
queue:shut_down()
pods:stop()
cms:stop()
stats.reason = reason
log("stopped", stats)
