-- Turning an error value into text never raises (kinformer.errtext, and kl_error_text on the C
-- side): handlers, transforms, index functions and reconciles may raise any value, including a
-- table whose __tostring raises; the loop that caught it logs it and goes on.
local kinformer = require "kinformer"
local core = require "kinformer.core"
local errtext = require "kinformer.errtext"
local socket = require "socket"
local fake = require "support.fake_apiserver"

-- Error values whose text cannot be had the ordinary way.
local function raising() return setmetatable({}, { __tostring = function() error("boom") end }) end
local function not_a_string() return setmetatable({}, { __tostring = function() return {} end }) end
local function custom() return setmetatable({}, { __tostring = function() return "custom text" end }) end
local FAILED = "(error object of type table: its __tostring failed)"

describe("error text", function()
  it("errtext gives text for any value and never raises", function()
    assert.equal("msg", errtext("msg"))
    assert.equal("42", errtext(42))
    assert.equal("custom text", errtext(custom()))
    assert.equal(FAILED, errtext(raising()))
    assert.equal(FAILED, errtext(not_a_string()))
    assert.equal("(error object of type table)", errtext({}))
    assert.equal("(error object of type nil)", errtext(nil))
    assert.equal("(error object of type boolean)", errtext(false))
    assert.equal("(error object of type function)", errtext(print))
  end)

  describe("C callbacks", function()
    it("a transform raising such a value fails the write with its text, not (null)", function()
      local fifo = kinformer.delta_fifo{ transform = function() error(raising()) end }
      local ok, err, code = fifo:add{ metadata = { name = "a" } }
      assert.is_nil(ok)
      assert.equal("EINVAL", code)
      assert.equal("transform failed: " .. FAILED, err)
      fifo = kinformer.delta_fifo{ transform = function() error(custom()) end }
      ok, err = fifo:add{ metadata = { name = "a" } }
      assert.is_nil(ok)
      assert.equal("transform failed: custom text", err)
    end)

    it("an index function raising such a value: the write reports its text", function()
      local logged = {}
      kinformer.set_logger(function(_, msg) logged[#logged + 1] = msg end)
      finally(function() kinformer.set_logger(nil) end)
      local store = kinformer.store{ indexers = { a = function() error(custom()) end } }
      local ok, err, code = store:add{ metadata = { name = "x" } }
      assert.is_true(ok)
      assert.equal("EINDEX", code)
      assert.equal("index 'a' failed for x: raised: custom text", err)
      store = kinformer.store{ indexers = { b = function() error(raising()) end } }
      ok, err = store:add{ metadata = { name = "x" } }
      assert.is_true(ok)
      assert.equal("index 'b' failed for x: raised: " .. FAILED, err)
      assert.matches("raised: " .. FAILED, table.concat(logged, "\n"), 1, true)
    end)
  end)

  describe("against the fake API server", function()
    local srv, client
    setup(function()
      srv = fake.start{ quiet = true }
      client = assert(kinformer.client{ server = srv.url })
    end)
    teardown(function()
      kinformer.set_logger(nil)
      if srv then srv:stop() end
    end)

    local function configmaps(ns, n)
      for i = 1, n do
        assert(client:create("configmaps", { apiVersion = "v1", kind = "ConfigMap",
          metadata = { namespace = ns, name = "cm-" .. i }, data = { v = "1" } }))
      end
    end

    it("an informer's other handler still gets every event; the error is counted and logged",
      function()
      configmaps("errtext-a", 11)
      local logged = {}
      kinformer.set_logger(function(_, msg) logged[#logged + 1] = msg end)
      local inf = assert(client:informer{ resource = "configmaps", namespace = "errtext-a" })
      finally(function() inf:stop(); kinformer.set_logger(nil) end)
      local adds = 0
      inf:add_handler{ on_add = function() error(raising()) end }
      inf:add_handler{ on_add = function() adds = adds + 1 end }
      inf:start()
      local deadline = socket.gettime() + 10
      while adds < 11 and socket.gettime() < deadline do
        inf:dispatch(100) -- raised out of dispatch before
        core.wait({ inf:fd() }, 0.02)
      end
      assert.equal(11, adds)
      local st = inf:status()
      assert.equal(11, st.handler_errors)
      assert.matches("handler #1 on_add raised: " .. FAILED, st.last_handler_error, 1, true)
      assert.matches(FAILED, table.concat(logged, "\n"), 1, true)
    end)

    it("a manager whose reconcile raises such a value retries, counts it and shuts down",
      function()
      configmaps("errtext-b", 1)
      kinformer.set_logger(function() end)
      local mgr = kinformer.manager{ client = client }
      local calls, returned = 0, 0
      mgr:controller{ name = "bad", resource = "configmaps", namespace = "errtext-b",
        reconcile = function()
          calls = calls + 1
          if calls % 2 == 1 then error(raising()) end
          returned = returned + 1
          return nil, not_a_string() -- a failure returned, not raised
        end }
      local ok, reason = pcall(mgr.run, mgr, { timeout = 1 })
      assert.is_true(ok, tostring(reason))
      assert.equal("timeout", reason)
      assert.is_true(calls >= 3, "reconciles: " .. calls)
      assert.is_true(returned >= 1)
      local st = mgr:status()
      assert.is_true(st.stopped) -- the graceful shutdown ran
      local c = st.controllers.bad
      assert.equal(calls, c.errors)
      assert.equal("errtext-b/cm-1: " .. FAILED, c.last_error)
    end)
  end)
end)
