-- kinformer.testing, used the way a controller author uses it: the server and its helpers, the
-- clean-up when a spec forgets or crashes, run_until and the fake clock, misuse; and the example
-- spec of docs/testing.md, run as it is written there.
local kinformer = require "kinformer"
local testing = require "kinformer.testing"

local function alive(pid)
  local f = io.open("/proc/" .. pid .. "/stat")
  if not f then return false end
  local state = (f:read("a") or ""):match("%)%s+(%a)")
  f:close()
  return state ~= nil and state ~= "Z"
end

local CRD = {
  apiVersion = "apiextensions.k8s.io/v1", kind = "CustomResourceDefinition",
  metadata = { name = "gadgets.example.com" },
  spec = { group = "example.com", scope = "Namespaced",
           names = { plural = "gadgets", singular = "gadget", kind = "Gadget" },
           versions = { { name = "v1", served = true, storage = true,
                          schema = { openAPIV3Schema = { type = "object",
                            ["x-kubernetes-preserve-unknown-fields"] = true } } } } },
}

describe("kinformer.testing", function()
  describe("server", function()
    local env
    setup(function()
      env = testing.server{ crds = { CRD }, objects = {
        [[
apiVersion: v1
kind: ConfigMap
metadata: {name: from-yaml, namespace: default}
data: {n: "1"}
---
apiVersion: example.com/v1
kind: Gadget
metadata: {name: g1, namespace: default}
spec: {size: 3}
]],
        '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"from-json"},"data":{"n":"2"}}',
        { apiVersion = "v1", kind = "Secret", metadata = { name = "s", namespace = "other" } },
      } }
    end)
    teardown(function() env:stop() end)

    it("serves the CRD and the objects, with a ready client and an empty request log", function()
      assert.matches("^http://127%.0%.0%.1:%d+$", env.url)
      assert.same({}, env:requests())
      assert.equals("1", env:get("configmaps", "default/from-yaml").data.n)
      assert.equals("2", env:get("configmaps", "default/from-json").data.n)
      local g = env:get("gadgets.v1.example.com", "default/g1")
      assert.equals(3, g.spec.size)
      assert.equals(1, g.metadata.generation) -- created through the API
      assert.equals(1, #env:list("secrets", { namespace = "other" }))
      assert.is_nil(env:get("configmaps", "default/nope"))
      local list = assert(env.client:list("gadgets.example.com"))
      assert.equals(1, #list.items)
    end)

    it("applies (create, then update), deletes, and names the verbs of the request log", function()
      env:clear_requests()
      local cm = env:apply{ apiVersion = "v1", kind = "ConfigMap",
                            metadata = { name = "applied", namespace = "default" },
                            data = { v = "1" } }
      assert.equals("1", cm.data.v)
      cm = env:apply("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: applied, namespace: default}\n"
        .. "data: {v: '2'}\n")
      assert.equals("2", cm.data.v)
      assert.truthy(env:delete("configmaps", "default/applied"))
      assert.is_nil(env:get("configmaps", "default/applied"))
      assert(env.client:list("configmaps", { namespace = "default" }))
      local verbs = {}
      for _, q in ipairs(env:requests{ resource = "configmaps" }) do verbs[#verbs + 1] = q.verb end
      assert.same({ "create", "create", "get", "update", "delete", "list" }, verbs)
      local del = env:requests{ verb = "delete" }
      assert.equals(1, #del)
      assert.same({ "configmaps", "default", "applied" }, { del[1].resource, del[1].namespace,
                                                             del[1].name })
      assert.equals(1, #env:requests{ path = "/configmaps/applied$", verb = "update" })
    end)

    it("injects faults and clears them", function()
      env:fault{ path = "/configmaps/from-json$", times = -1, action = { status = 500 } }
      local _, err = env.client:get("configmaps", "default/from-json")
      assert.equals(500, err.code)
      env:clear_faults()
      assert.truthy(env.client:get("configmaps", "default/from-json"))
    end)

    it("finds the Events of an object", function()
      local cm = env:get("configmaps", "default/from-yaml")
      local rec = kinformer.events.recorder{ client = env.client }
      rec:record(cm, "Normal", "Checked", "looked at it")
      env:wait_for(function()
        rec:flush()
        return #env:events(cm) == 1
      end)
      assert.equals("Checked", env:events(cm)[1].reason)
      assert.same({}, env:events(env:get("configmaps", "default/from-json")))
    end)
  end)

  it("authenticates users, and the request log says who did what", function()
    local env <close> = testing.server{ users = { alice = "token-a", bob = "token-b" } }
    assert(env:client_for("alice"):create("configmaps", { apiVersion = "v1", kind = "ConfigMap",
      metadata = { name = "a", namespace = "default" } }))
    assert(env:client_for("bob"):get("configmaps", "default/a"))
    assert(env.client:get("configmaps", "default/a"))
    kinformer.set_logger(function() end) -- the anonymous client's discovery warns of its 401
    finally(function() kinformer.set_logger(nil, "warn") end)
    local anon = assert(kinformer.client{ server = env.url })
    local _, err = anon:get("configmaps", "default/a")
    assert.equals(401, err.code)
    assert.equals(1, #env:requests{ user = "alice", verb = "create" })
    assert.equals(1, #env:requests{ user = "bob", verb = "get", resource = "configmaps" })
    assert.equals(1, #env:requests{ user = "testing-admin", verb = "get", resource = "configmaps" })
    assert.has_error(function() env:client_for("carol") end,
      "bad argument #1 to 'client_for' (unknown user 'carol')")
  end)

  it("stops once however often it is asked, and when the env is closed or collected", function()
    local env = testing.server{}
    local pid = env.pid
    assert.is_true(alive(pid))
    env:stop()
    env:stop()
    assert.is_false(alive(pid))
    assert.has_error(function() env:list("pods") end, "kinformer.testing: the server was stopped")
    do
      local closed <close> = testing.server{}
      pid = closed.pid
    end
    assert.is_false(alive(pid))
    pid = testing.server{}.pid
    collectgarbage()
    collectgarbage()
    assert.is_false(alive(pid))
  end)

  it("leaves no server behind when the spec process dies (kill -9)", function()
    local script = os.tmpname()
    finally(function() os.remove(script) end)
    local f = assert(io.open(script, "w"))
    f:write(("package.path = %q\npackage.cpath = %q\n"):format(package.path, package.cpath), [[
      local env = require("kinformer.testing").server{}
      print(env.pid)
      io.stdout:flush()
      os.execute("kill -KILL $PPID") -- the shell's parent: this Lua process
    ]])
    f:close()
    local p = assert(io.popen("exec lua5.4 " .. script))
    local pid = tonumber(p:read("l"))
    p:close()
    assert.truthy(pid)
    testing.wait_for(function() return not alive(pid) end, 5)
  end)

  it("wait_for returns fn's values, raises on timeout with fn's last error", function()
    local n = 0
    assert.equals("done", testing.wait_for(function()
      n = n + 1
      return n >= 3 and "done"
    end))
    local ok, err = pcall(testing.wait_for, function() error("not yet", 0) end, 0.1)
    assert.is_false(ok)
    assert.matches("wait_for: the condition did not hold within 0.1 s (last error: not yet)", err,
      1, true)
  end)

  it("raises at the caller's line for wrong arguments", function()
    local line = debug.getinfo(1, "l").currentline
    local ok, err = pcall(function() testing.server{ crd = {} } end)
    assert.is_false(ok)
    assert.matches("testing_spec.lua:" .. (line + 1) .. ": bad argument #1 to 'server' "
      .. "(unknown option 'crd')", err, 1, true)
    assert.has_error(function() testing.server{ objects = { 42 } } end,
      "bad argument #1 to 'server' (item 1: a table or a YAML / JSON string expected, got number)")
    assert.has_error(function() testing.run_until({}, function() end) end,
      "bad argument #1 to 'run_until' (a kinformer.manager expected)")
    local clk = testing.fake_clock()
    finally(function() clk:restore() end)
    assert.has_error(function() clk:advance(-1) end,
      "bad argument #1 to 'advance' (seconds must be a number >= 0)")
  end)

  it("run_until drives a manager; the fake clock brings a requeue-after forward", function()
    local env <close> = testing.server{ objects = { { apiVersion = "v1", kind = "ConfigMap",
      metadata = { name = "c", namespace = "default" } } } }
    local clk = testing.fake_clock()
    finally(function() clk:restore() end)
    local clock = require "kinformer.clock"
    local mgr = kinformer.manager{ client = env.client, log_level = false }
    local calls = 0
    mgr:controller{ name = "cms", resource = "configmaps", reconcile = function()
      calls = calls + 1
      return 300 -- again in five minutes
    end }
    testing.run_until(mgr, function() return calls == 1 end)
    local t0 = require("kinformer.core").now()
    assert.equals(1000, clock.now())
    clk:advance(299)
    for _ = 1, 5 do mgr:step() end
    assert.equals(1, calls)
    clk:advance(1)
    testing.run_until(mgr, function() return calls == 2 end)
    assert.is_true(require("kinformer.core").now() - t0 < 2)
    -- a timeout names the manager's state
    local ok, err = pcall(testing.run_until, mgr, function() return false end, 0.2)
    assert.is_false(ok)
    assert.matches("run_until: the condition did not hold within 0.2 s; manager: synced=true "
      .. "leader=true cms{reconciles=2 errors=0", err, 1, true)
    mgr:stop()
    clk:restore()
    clk:restore()
    assert.equals(require("kinformer.core").now, clock.now)
    assert.has_error(function() testing.run_until(mgr, function() end) end)
  end)

  it("finds its server in the checkout", function()
    local path = assert(testing.server_path())
    assert.matches("tools/fake%-apiserver/server%.py$", path)
  end)
end)

-- docs/testing.md's example spec, as a user would copy it.
do
  local f = assert(io.open(KINFORMER_ROOT .. "/docs/testing.md"))
  local text = f:read("a")
  f:close()
  local code = text:match("<!%-%- testing%.md: the example spec %-%->\n```lua\n(.-)\n```")
  assert(code, "docs/testing.md has no example spec")
  assert(load(code, "@docs/testing.md (example spec)", "t", _ENV))() -- busted's describe, it, ...
end
