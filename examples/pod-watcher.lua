-- pod-watcher.lua: watch every pod of a cluster with a shared informer. Prints each add, update
-- and delete as it happens, and every few seconds a per-namespace summary read from the
-- informer's cache (the built-in "namespace" index). `make demo` runs it against the bundled
-- fake API server.
--
--   lua5.4 examples/pod-watcher.lua [--seconds N] [--every S] [--namespace NS]
--     --seconds N     stop after N seconds (default: run until Ctrl-C)
--     --every S       print the summary every S seconds (default 5)
--     --namespace NS  watch one namespace only (default: all)
--
-- Which cluster: $KINFORMER_SERVER (a URL, e.g. `kubectl proxy`'s http://127.0.0.1:8001) when
-- set, else kinformer.client()'s default configuration. Exit status: 0 after --seconds or on
-- Ctrl-C / SIGTERM, 1 when the cluster cannot be watched, 2 for bad arguments.

-- Find kinformer in this checkout (lua/ and build/), else wherever it is installed.
local dir = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
package.path = dir .. "/../lua/?.lua;" .. dir .. "/../lua/?/init.lua;" .. package.path
package.cpath = dir .. "/../build/" .. (rawget(_G, "jit") and "luajit" or "lua5.4") .. "/?.so;"
  .. package.cpath

local kinformer = require "kinformer"

local function usage(msg)
  io.stderr:write("pod-watcher: ", msg, "\n",
    "usage: pod-watcher.lua [--seconds N] [--every S] [--namespace NS]\n")
  os.exit(2)
end

local opts = { every = 5 }
local i = 1
while arg and arg[i] do
  local a, v = arg[i], arg[i + 1]
  if a == "--seconds" or a == "--every" then
    opts[a:sub(3)] = tonumber(v) or usage(a .. " needs a number")
  elseif a == "--namespace" then
    opts.namespace = v or usage("--namespace needs a name")
  else
    usage("unknown argument " .. a)
  end
  i = i + 2
end

io.stdout:setvbuf("line") -- one line per event, also through a pipe

-- ---- how a pod is shown ----

local function is_ready(pod)
  local status = pod.status
  for _, c in ipairs(status and status.conditions or {}) do
    if c.type == "Ready" then return c.status == "True" end
  end
  return false
end

local function phase(pod) return pod.status and pod.status.phase or "-" end
local function node(pod) return pod.spec and pod.spec.nodeName or "-" end

local function line(event, key, pod, note)
  local fields = { os.date("%H:%M:%S"), ("%-7s"):format(event), ("%-40s"):format(key) }
  if pod then
    fields[#fields + 1] = ("%-9s %-8s %-9s"):format(phase(pod), node(pod),
      is_ready(pod) and "ready" or "not-ready")
  end
  if note and note ~= "" then fields[#fields + 1] = note end
  print((table.concat(fields, "  "):gsub("%s+$", "")))
end

-- What an update changed, in words: phase, node, readiness, labels.
local function changes(old, new)
  local out = {}
  if phase(old) ~= phase(new) then out[#out + 1] = "phase " .. phase(old) .. "->" .. phase(new) end
  if node(old) ~= node(new) then out[#out + 1] = "node " .. node(old) .. "->" .. node(new) end
  if is_ready(old) ~= is_ready(new) then
    out[#out + 1] = is_ready(new) and "became ready" or "became not-ready"
  end
  local ol, nl = old.metadata.labels or {}, new.metadata.labels or {}
  for k, v in pairs(nl) do
    if ol[k] ~= v then out[#out + 1] = "label " .. k .. "=" .. v end
  end
  for k in pairs(ol) do
    if nl[k] == nil then out[#out + 1] = "label " .. k .. " removed" end
  end
  if #out == 0 then
    if old.metadata.resourceVersion == new.metadata.resourceVersion then
      return "(unchanged: relist or resync)"
    end
    return "(other fields)"
  end
  table.sort(out)
  return table.concat(out, ", ")
end

-- ---- the informer ----

local server = os.getenv("KINFORMER_SERVER")
local client, err
if server and server ~= "" then
  client, err = kinformer.client{ server = server }
else
  client, err = kinformer.client()
end
if not client then
  io.stderr:write("pod-watcher: no cluster to watch: ", tostring(err), "\n")
  os.exit(1)
end

local pods = assert(client:informer{ resource = "pods", namespace = opts.namespace })

pods:add_handler{
  on_add = function(pod, is_in_initial_list)
    line("added", kinformer.key_of(pod), pod, is_in_initial_list and "(initial list)" or nil)
  end,
  on_update = function(old, new)
    line("updated", kinformer.key_of(new), new, changes(old, new))
  end,
  on_delete = function(pod)
    -- A delete noticed only by a relist (the watch was down) comes as a tombstone holding the
    -- last state the cache knew.
    if kinformer.is_tombstone(pod) then
      line("deleted", pod.key, pod.obj, "(noticed at relist)")
    else
      line("deleted", kinformer.key_of(pod), pod)
    end
  end,
}

-- The summary reads the cache only: namespaces from the namespace index, their pods by_index.
local store = pods:store()
local function summary()
  local namespaces = store:list_index_func_values("namespace")
  table.sort(namespaces)
  local rows, total, shown = {}, 0, 0
  for _, ns in ipairs(namespaces) do
    local in_ns = store:by_index("namespace", ns)
    if #in_ns > 0 then
      local ready, phases = 0, {}
      for _, pod in ipairs(in_ns) do
        if is_ready(pod) then ready = ready + 1 end
        phases[phase(pod)] = (phases[phase(pod)] or 0) + 1
      end
      local ph = {}
      for p, n in pairs(phases) do ph[#ph + 1] = p .. " " .. n end
      table.sort(ph)
      rows[#rows + 1] = ("%s  summary  %-12s %3d pods  %3d ready   %s"):format(os.date("%H:%M:%S"),
        ns, #in_ns, ready, table.concat(ph, ", "))
      total, shown = total + #in_ns, shown + 1
    end
  end
  print(("%s  summary  %d pods in %d namespaces (resourceVersion %s)"):format(os.date("%H:%M:%S"),
    total, shown, pods:status().resource_version or "?"))
  for _, r in ipairs(rows) do print(r) end
end

local ok, serr = pods:start()
if not ok then
  io.stderr:write("pod-watcher: ", serr, "\n")
  os.exit(1)
end
print(("watching pods in %s at %s"):format(opts.namespace or "all namespaces", client.server))
local synced, werr = pods:wait_for_sync(30)  -- the initial list goes through the handlers
if not synced then
  io.stderr:write("pod-watcher: ", werr, "\n")
  pods:stop()
  os.exit(1)
end
print(("synced: %d pods"):format(store:len()))
summary()

-- Runs the handlers as events arrive; done() prints the summary when it is due.
local next_summary = os.time() + opts.every
local reason = kinformer.run({ pods }, {
  timeout = opts.seconds,
  done = function()
    if os.time() >= next_summary then
      summary()
      next_summary = os.time() + opts.every
    end
    return false
  end,
})
summary()
local st = pods:status()
print(("stopped (%s): %d adds, %d updates, %d deletes seen"):format(reason, st.adds, st.updates,
  st.deletes))
pods:stop()
if reason == "stopped" then os.exit(1) end -- the informer ended by itself
