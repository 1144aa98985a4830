-- The examples tested with kinformer.testing, the way a controller author tests a controller:
-- the widget operator's controller (examples/widget_controller.lua) loaded into a manager this
-- spec drives, and examples/controller.lua run as a process against the kit's server.
local kinformer = require "kinformer"
local testing = require "kinformer.testing"

local function quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

-- The checkout's absolute path (KINFORMER_ROOT may be relative; the process runs from /tmp).
local ROOT
do
  local p = assert(io.popen("cd " .. quote(KINFORMER_ROOT) .. " && pwd"))
  ROOT = p:read("l")
  p:close()
end

local function read(path)
  local f = io.open(path)
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

describe("examples with kinformer.testing", function()
  it("widget_controller.lua: owned ConfigMap, status, Events, file, finalizer", function()
    local env <close> = testing.server{ args = { "--widget-crd" }, objects = { [[
apiVersion: example.com/v1
kind: Widget
metadata: {name: w1, namespace: default}
spec: {message: hello, replicas: 2}
]] } }
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. quote(dir)))
    local mgr = kinformer.manager{ client = env.client, log_level = false }
    finally(function()
      mgr:stop()
      os.execute("rm -rf " .. quote(dir))
    end)
    local said = {}
    dofile(KINFORMER_ROOT .. "/examples/widget_controller.lua")(mgr, { dir = dir,
      say = function(...) said[#said + 1] = table.concat({ ... }, " ") end })

    local w = testing.run_until(mgr, function()
      local w = env:get("widgets.v1.example.com", "default/w1")
      return w.status and w.status.observedGeneration and w
    end)
    local cm = env:get("configmaps", "default/w1-config")
    assert.same({ message = "hello", replicas = "2" }, cm.data)
    assert.same({ "Widget", "w1", w.metadata.uid, true }, { cm.metadata.ownerReferences[1].kind,
      cm.metadata.ownerReferences[1].name, cm.metadata.ownerReferences[1].uid,
      cm.metadata.ownerReferences[1].controller })
    assert.equals("True", w.status.conditions[1].status)
    assert.same({ "example.com/widget-file" }, w.metadata.finalizers)
    assert.equals("hello", read(dir .. "/default_w1.widget"))
    testing.run_until(mgr, function() return #env:events(w) > 0 end)
    assert.equals("ConfigMapCreated", env:events(w)[1].reason)

    -- A spec change reaches the ConfigMap with one update; an edit of the ConfigMap is undone.
    env:clear_requests()
    w.spec.message = "changed"
    env:apply(w)
    testing.run_until(mgr, function()
      return env:get("configmaps", "default/w1-config").data.message == "changed"
    end)
    assert.equals(1, #env:requests{ verb = "update", resource = "configmaps" })
    cm = env:get("configmaps", "default/w1-config")
    cm.data.message = "someone else"
    env:apply(cm)
    testing.run_until(mgr, function()
      return env:get("configmaps", "default/w1-config").data.message == "changed"
    end)

    -- Deleted: finalize removes the file, then the Widget goes and the garbage collector takes
    -- its ConfigMap.
    assert(env:delete("widgets.v1.example.com", "default/w1"))
    testing.run_until(mgr, function()
      return not env:get("widgets.v1.example.com", "default/w1")
        and not env:get("configmaps", "default/w1-config")
    end)
    assert.is_nil(read(dir .. "/default_w1.widget"))
    assert.truthy(table.concat(said, "\n"):find("finalized default/w1", 1, true))
  end)

  it("controller.lua, run as a process, keeps the ready-pods ConfigMap of each namespace",
    function()
    local function pod(ns, name, app, ready)
      return { apiVersion = "v1", kind = "Pod", metadata = { namespace = ns, name = name,
        labels = { app = app } }, spec = { containers = { { name = "c", image = "busybox" } } },
        status = { conditions = { { type = "Ready", status = ready and "True" or "False" } } } }
    end
    local env <close> = testing.server{ objects = { pod("shop", "web-1", "web", true),
      pod("shop", "web-2", "web", false), pod("shop", "db-1", "db", true) } }
    local out = os.tmpname()
    -- The shell's pid is the controller's (exec): SIGTERM reaches it.
    local p = assert(io.popen(("echo $$; cd /tmp && exec env -u LUA_PATH -u LUA_CPATH "
      .. "KINFORMER_SERVER=%s lua5.4 %s --seconds 60 --retry-period 1 >%s 2>&1"):format(
      quote(env.url), quote(ROOT .. "/examples/controller.lua"), quote(out))))
    local pid = tonumber(p:read("l"))
    finally(function()
      os.execute("kill -TERM " .. pid .. " 2>/dev/null")
      p:close()
      os.remove(out)
    end)
    local ok, cm = pcall(env.wait_for, env, function()
      return env:get("configmaps", "shop/ready-pods")
    end, 20)
    assert(ok, tostring(cm) .. "\n" .. tostring(read(out)))
    assert.same({ web = '["web-1"]', db = '["db-1"]' }, cm.data)
    assert.equals("apps=2 ready=2 pods=3", cm.metadata.annotations["ready-pods.kinformer.io/status"])

    env:apply(pod("shop", "web-2", "web", true))
    env:wait_for(function()
      return env:get("configmaps", "shop/ready-pods").data.web == '["web-1","web-2"]'
    end)
    for _, name in ipairs{ "web-1", "web-2", "db-1" } do env:delete("pods", "shop/" .. name) end
    ok = pcall(env.wait_for, env, function() return not env:get("configmaps", "shop/ready-pods") end)
    assert(ok, read(out))
    -- only the writes needed: a create, an update for web-2, updates while the pods go one by
    -- one (coalesced or not), a delete
    local writes = {}
    for _, q in ipairs(env:requests{ resource = "configmaps" }) do
      if q.verb ~= "list" and q.verb ~= "watch" and q.verb ~= "get" then
        writes[#writes + 1] = q.verb
      end
    end
    assert.same({ "create", "update" }, { writes[1], writes[2] })
    assert.equals("delete", writes[#writes])
    assert.is_true(#writes <= 5, table.concat(writes, " "))
    os.execute("kill -TERM " .. pid)
    local _, _, code = p:close()
    p = { close = function() end }
    assert.equals(0, code)
    assert.matches("event=stopped", read(out))
  end)
end)
