-- widget-operator.lua: a CRD operator on kinformer.manager. For each Widget
-- (widgets.v1.example.com: spec.message, spec.replicas) it keeps
--   - a ConfigMap "<widget>-config" owned by the Widget (controller ownerReference: deleted with
--     it by the garbage collector) whose data holds the message and replicas;
--   - a file <dir>/<namespace>_<name>.widget outside the cluster with the message, removed by
--     `finalize` when the Widget is deleted (the finalizer example.com/widget-file keeps the
--     Widget until then);
--   - status.observedGeneration and a Ready condition, written only when they change;
--   - Events on the Widget ("ConfigMapCreated", "ConfigMapUpdated", "FileRemoved").
-- Several replicas may run: the Lease "widget-operator" (in --lease-namespace, default the
-- client's namespace: in a pod, its own) picks the one that reconciles. With --metrics-address
-- the manager serves /metrics, /healthz and /readyz there (examples/deploy/ probes them).
--
--   lua5.4 examples/widget-operator.lua [--seconds N] [--dir DIR] [--identity ID]
--       [--namespace NS] [--lease-namespace NS] [--metrics-address HOST:PORT]
--
-- Its RBAC: bin/kinformer-rbac examples/widget-operator.lua (examples/deploy/rbac.yaml).
--
-- Cluster: $KINFORMER_SERVER (a URL) when set, else kinformer.client()'s default. Output: one
-- line per action on stdout ("reconciled ns/name", "configmap created ns/name-config", "status
-- ns/name", "finalized ns/name", "stopped REASON"). Exit status 0 after --seconds or SIGTERM /
-- SIGINT, 1 if it cannot start, 2 for bad arguments.
local dir = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
package.path = dir .. "/../lua/?.lua;" .. dir .. "/../lua/?/init.lua;" .. package.path
package.cpath = dir .. "/../build/" .. (rawget(_G, "jit") and "luajit" or "lua5.4") .. "/?.so;"
  .. package.cpath
local kinformer = require "kinformer"

local WIDGETS = "widgets.v1.example.com"
local opts = { dir = "/tmp" }
for i = 1, #arg, 2 do
  local name, v = (arg[i]:match("^%-%-([%w-]+)$") or ""), arg[i + 1]
  if name == "seconds" then opts.seconds = tonumber(v)
  elseif name == "dir" or name == "identity" or name == "namespace" then opts[name] = v
  elseif name == "lease-namespace" then opts.lease_namespace = v
  elseif name == "metrics-address" then opts.metrics_address = v
  else io.stderr:write("widget-operator: unknown argument ", arg[i], "\n") os.exit(2) end
  if v == nil or (name == "seconds" and not opts.seconds) then
    io.stderr:write("widget-operator: ", arg[i], " needs a value\n") os.exit(2)
  end
end
io.stdout:setvbuf("line")
local function say(...) print(table.concat({ ... }, " ")) end

local server = os.getenv("KINFORMER_SERVER")
local client, err = kinformer.client(server and server ~= "" and { server = server } or nil)
if not client then io.stderr:write("widget-operator: ", tostring(err), "\n") os.exit(1) end

local mgr = kinformer.manager{ client = client, metrics_address = opts.metrics_address,
  leader_election = {
    lease_name = "widget-operator", namespace = opts.lease_namespace or client.namespace,
    identity = opts.identity, on_started_leading = function() say("leading") end } }

local function file_of(w) return ("%s/%s_%s.widget"):format(opts.dir, w.metadata.namespace,
  w.metadata.name) end

-- The status this reconcile wants; written only when it differs from the Widget's (a status
-- rewritten with the same content would wake every other watcher of Widgets).
local function write_status(w, ready, reason, message)
  local gen = w.metadata.generation
  local old = ((w.status or {}).conditions or {})[1]
  local since = old and old.status == ready and old.lastTransitionTime
    or os.date("!%Y-%m-%dT%H:%M:%SZ")
  local res, written = client:update_status_if_changed(WIDGETS, w, {
    observedGeneration = gen,
    conditions = { { type = "Ready", status = ready, reason = reason, message = message,
                     observedGeneration = gen, lastTransitionTime = since } },
  })
  if written then say("status", kinformer.key_of(w), ready) end
  return res, written
end

local function reconcile(req, ctx)
  local w = ctx:get()
  if not w then return end -- deleted: the garbage collector removes its ConfigMap
  local spec = w.spec or {}
  local n = tonumber(spec.replicas) or 1 -- "replicas": 2 is the integer 2 on Lua 5.4 (docs/api.md)
  local message = tostring(spec.message or "")
  -- "2", not "2.0", also for a double (LuaJIT) or a float (JSON 2.0 or 2e0)
  local replicas = n == math.floor(n) and ("%d"):format(n) or tostring(n)
  -- The file outside the cluster (rewritten only when its content differs).
  local path = file_of(w)
  local f = io.open(path)
  local old = f and f:read("a")
  if f then f:close() end
  if old ~= message then
    f = assert(io.open(path, "w"))
    f:write(message)
    f:close()
  end
  -- The owned ConfigMap: created or updated only when it differs (read from the cache).
  local name = w.metadata.name .. "-config"
  local cm, op = ctx:create_or_update("configmaps", { apiVersion = "v1", kind = "ConfigMap",
    metadata = { name = name, namespace = req.namespace } }, function(obj)
      obj.data = { message = message, replicas = replicas }
      return ctx:set_controller_reference(obj) -- refuses a ConfigMap another controller owns
    end)
  if not cm then
    write_status(w, "False", "ConfigMapFailed", tostring(op))
    return nil, op -- a 409 is retried quietly with backoff
  end
  if op ~= "unchanged" then
    say("configmap " .. op, req.namespace .. "/" .. name)
    ctx:event(w, "Normal", op == "created" and "ConfigMapCreated" or "ConfigMapUpdated",
      op .. " ConfigMap " .. name)
  end
  local ok, serr = write_status(w, "True", "ConfigMapReady", "ConfigMap " .. name .. " is current")
  if not ok then return nil, serr end
  say("reconciled", req.key)
end

mgr:controller{
  name = "widgets", resource = WIDGETS, namespace = opts.namespace,
  owns = { "configmaps" },
  -- spec changes (generation) on Widgets; any change of an owned ConfigMap repairs it
  predicates = { kinformer.predicates.generation_changed },
  finalizer = "example.com/widget-file",
  finalize = function(w, ctx)
    local ok, rerr = os.remove(file_of(w))
    if not ok and not tostring(rerr):find("No such file", 1, true) then return nil, rerr end
    ctx:event(w, "Normal", "FileRemoved", "removed " .. file_of(w))
    say("finalized", kinformer.key_of(w))
  end,
  reconcile = reconcile,
  -- client:update_status_if_changed writes the status subresource: a call the manager cannot see
  rbac = { { apiGroups = { "example.com" }, resources = { "widgets/status" },
             verbs = { "update", "patch" } } },
}
local reason, rerr = mgr:run{ timeout = opts.seconds }
if not reason then io.stderr:write("widget-operator: ", tostring(rerr), "\n") os.exit(1) end
say("stopped", reason)
