-- index-by-node.lua: a Lua index on a shared informer. The index "by_node" maps each pod to the
-- node it runs on (spec.nodeName); the script prints, per node, the pods scheduled there, and
-- prints the table again whenever pods arrive on or leave a node (at most once per --every).
--
--   lua5.4 examples/index-by-node.lua [--seconds N] [--every S] [--namespace NS]
--     --seconds N     stop after N seconds (default: run until Ctrl-C)
--     --every S       at most one table per S seconds (default 1)
--     --namespace NS  one namespace only (default: all)
--
-- Which cluster: $KINFORMER_SERVER (a URL) when set, else kinformer.client()'s default.
-- Exit status: 0 after --seconds or on Ctrl-C / SIGTERM, 1 when the cluster cannot be watched.

-- Find kinformer in this checkout (lua/ and build/), else wherever it is installed.
local dir = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
package.path = dir .. "/../lua/?.lua;" .. dir .. "/../lua/?/init.lua;" .. package.path
package.cpath = dir .. "/../build/" .. (rawget(_G, "jit") and "luajit" or "lua5.4") .. "/?.so;"
  .. package.cpath

local kinformer = require "kinformer"

local function usage(msg)
  io.stderr:write("index-by-node: ", msg, "\n",
    "usage: index-by-node.lua [--seconds N] [--every S] [--namespace NS]\n")
  os.exit(2)
end

local opts = { every = 1 }
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
io.stdout:setvbuf("line")

local server = os.getenv("KINFORMER_SERVER")
local client, err
if server and server ~= "" then
  client, err = kinformer.client{ server = server }
else
  client, err = kinformer.client()
end
if not client then
  io.stderr:write("index-by-node: no cluster to watch: ", tostring(err), "\n")
  os.exit(1)
end

local pods = assert(client:informer{ resource = "pods", namespace = opts.namespace })

-- An index function returns the list of values an object is filed under: here one node, or
-- none for a pod the scheduler has not placed yet.
assert(pods:add_indexers{
  by_node = function(pod)
    local node = pod.spec and pod.spec.nodeName
    if node and node ~= "" then return { node } end
    return {}
  end,
})

-- The handlers only note what moved; the table is printed from the index.
local moves = {}
local function moved(what) moves[#moves + 1] = what end
local function node_of(pod) return pod and pod.spec and pod.spec.nodeName or "(unscheduled)" end
pods:add_handler{
  on_add = function(pod, is_in_initial_list)
    if not is_in_initial_list then moved("+" .. kinformer.key_of(pod) .. " on " .. node_of(pod)) end
  end,
  on_update = function(old, new)
    if node_of(old) ~= node_of(new) then
      moved(kinformer.key_of(new) .. " " .. node_of(old) .. " -> " .. node_of(new))
    end
  end,
  on_delete = function(pod)
    local obj = kinformer.is_tombstone(pod) and pod.obj or pod
    moved("-" .. kinformer.key_of(pod) .. " from " .. node_of(obj))
  end,
}

local store = pods:store()
local function is_ready(pod)
  for _, c in ipairs(pod.status and pod.status.conditions or {}) do
    if c.type == "Ready" then return c.status == "True" end
  end
  return false
end

local function print_table(title)
  print(("%s  %s"):format(os.date("%H:%M:%S"), title))
  local nodes = store:list_index_func_values("by_node")
  table.sort(nodes)
  for _, node in ipairs(nodes) do
    local keys = store:index_keys("by_node", node)   -- sorted keys of the pods on that node
    if #keys > 0 then
      local ready = 0
      for _, pod in ipairs(store:by_index("by_node", node)) do
        if is_ready(pod) then ready = ready + 1 end
      end
      print(("  %-10s %2d pods, %2d ready: %s"):format(node, #keys, ready, table.concat(keys, " ")))
    end
  end
end

assert(pods:start())
local synced, werr = pods:wait_for_sync(30)
if not synced then
  io.stderr:write("index-by-node: ", werr, "\n")
  pods:stop()
  os.exit(1)
end
print_table(("synced: %d pods"):format(store:len()))

local next_print = 0
local function print_changes()
  print_table("changed: " .. table.concat(moves, ", "))
  moves = {}
  next_print = os.time() + opts.every
end
local reason = kinformer.run({ pods }, {
  timeout = opts.seconds,
  done = function()
    if #moves > 0 and os.time() >= next_print then print_changes() end
    return false
  end,
})
if #moves > 0 then print_changes() end
print(("stopped (%s)"):format(reason))
pods:stop()
if reason == "stopped" then os.exit(1) end
