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
-- the manager serves /metrics, /healthz and /readyz there (examples/deploy/ probes them). The
-- controller itself is in widget_controller.lua (next to this file), which specs load alone.
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

local register = dofile(dir .. "/widget_controller.lua")
register(mgr, { dir = opts.dir, namespace = opts.namespace, say = say })
local reason, rerr = mgr:run{ timeout = opts.seconds }
if not reason then io.stderr:write("widget-operator: ", tostring(rerr), "\n") os.exit(1) end
say("stopped", reason)
