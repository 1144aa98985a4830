-- The time of one complete controller test case with kinformer.testing.
--
--   lua5.4 bench/testing_bench.lua [cases=20]
--
-- Each case does what a controller spec does (docs/testing.md): start the fake API server with
-- a CRD (YAML) and three Widgets, build a manager with the widget operator's controller
-- (examples/widget_controller.lua), run it until every Widget has its ConfigMap and a Ready
-- status, assert on the objects, the request log and the Events, stop the manager and the
-- server (waiting for its exit). Cases run one after the other in one process, as the cases of
-- a spec file do. Prints the time per case (min, median, max) and its phases' medians.
local root = (arg[0]:match("^(.*)/bench/[^/]*$")) or "."
package.path = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. package.path
package.cpath = root .. "/build/lua5.4/?.so;" .. package.cpath

local kinformer = require "kinformer"
local testing = require "kinformer.testing"
local now = require("kinformer.core").now

local CASES = tonumber(arg[1] or 20)
local register = dofile(root .. "/examples/widget_controller.lua")

local CRD = [[
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wd]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
]]
local WIDGETS = {}
for i = 1, 3 do
  WIDGETS[i] = ("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w%d, namespace: "
    .. "default}\nspec: {message: hello %d, replicas: %d}\n"):format(i, i, i)
end

local dir = os.tmpname()
os.remove(dir)
assert(os.execute("mkdir -p '" .. dir .. "'"))
kinformer.set_logger(function() end)

local function one_case()
  local t0 = now()
  local env = testing.server{ crds = { CRD }, objects = WIDGETS }
  local t1 = now()
  local mgr = kinformer.manager{ client = env.client, log_level = false }
  register(mgr, { dir = dir })
  testing.run_until(mgr, function()
    for i = 1, 3 do
      local w = env:get("widgets.v1.example.com", "default/w" .. i)
      if not (w.status and w.status.observedGeneration == w.metadata.generation) then
        return false
      end
    end
    return true
  end)
  local t2 = now()
  for i = 1, 3 do
    local cm = assert(env:get("configmaps", "default/w" .. i .. "-config"))
    assert(cm.data.message == "hello " .. i and cm.data.replicas == tostring(i))
  end
  assert(#env:requests{ verb = "create", resource = "configmaps" } == 3)
  local w1 = env:get("widgets.v1.example.com", "default/w1")
  testing.run_until(mgr, function() return #env:events(w1) > 0 end)
  local t3 = now()
  mgr:stop()
  env:stop()
  local t4 = now()
  return { total = t4 - t0, start = t1 - t0, converge = t2 - t1, assert = t3 - t2,
           stop = t4 - t3 }
end

local function median(list, field)
  local v = {}
  for i, r in ipairs(list) do v[i] = r[field] end
  table.sort(v)
  return v[(#v + 1) // 2], v[1], v[#v]
end

one_case() -- warm-up: the first Python start reads its files from disk
local runs = {}
for i = 1, CASES do runs[i] = one_case() end
os.execute("rm -rf '" .. dir .. "'")

local med, min, max = median(runs, "total")
print(("kinformer.testing: one controller test case, %d cases: median %.3f s (min %.3f, max %.3f)")
  :format(CASES, med, min, max))
print(("  phases (medians): server start with CRD and 3 objects %.3f s, manager converge %.3f s, "
  .. "assertions and Events %.3f s, stop %.3f s"):format(median(runs, "start"),
  median(runs, "converge"), median(runs, "assert"), median(runs, "stop")))
