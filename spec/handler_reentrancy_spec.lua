-- Calls into an informer from inside its own handlers: a handler that removes itself or another
-- handler, adds one, stops the informer or dispatches. Whatever a handler does, dispatch must not
-- raise, the other handlers keep their events, and a removed handler or a stopped informer
-- delivers nothing more.
local kinformer = require "kinformer"
local core = require "kinformer.core"
local fake = require "support.fake_apiserver"

local function pod(name)
  return { apiVersion = "v1", kind = "Pod", metadata = { namespace = "default", name = name },
           spec = { containers = { { name = "c", image = "nginx" } } } }
end

local function create(srv, name)
  local code = srv:request("POST", "/api/v1/namespaces/default/pods", pod(name))
  assert(code == 201, "create " .. name .. ": " .. tostring(code))
end

local pump = require "support.pump"

-- A handler counting its adds; `also(obj)` runs after the count.
local function counter(also)
  local c = { adds = 0 }
  c.handler = { on_add = function(obj)
    c.adds = c.adds + 1
    if also then also(obj) end
  end }
  return c
end

describe("informer re-entrancy", function()
  local srv, client
  local informers = {}
  local logs = {}
  local function new_informer()
    local inf = assert(client:informer{ resource = "pods", namespace = "default",
                                        backoff_initial = 0.05, backoff_max = 0.2 })
    informers[#informers + 1] = inf
    return inf
  end

  setup(function()
    srv = fake.start{ args = { "--no-default-namespaces", "--bookmark-interval", "0.2" },
                      quiet = true }
    client = assert(kinformer.client{ server = srv.url })
    for i = 1, 3 do create(srv, "p" .. i) end
  end)
  teardown(function() if srv then srv:stop() end end)
  before_each(function()
    logs = {}
    kinformer.set_logger(function(level, msg) logs[#logs + 1] = level .. ": " .. msg end)
  end)
  after_each(function()
    for _, inf in ipairs(informers) do inf:stop() end
    informers = {}
    kinformer.set_logger(nil)
  end)

  describe("remove_handler from inside a handler", function()
    it("a handler that removes itself: the handlers after it still get every event", function()
      local inf = new_informer()
      local a
      a = counter(function() inf:remove_handler(a.reg) end)
      a.reg = inf:add_handler(a.handler)
      local b = counter()
      inf:add_handler(b.handler)
      assert(inf:start())
      assert.is_true(inf:wait_for_sync(5))
      assert.equal(1, a.adds)
      assert.equal(3, b.adds)
      assert.equal(0, inf:status().handler_errors)
      assert.equal(1, inf:status().handlers)
    end)

    it("a handler that removes an earlier one: the handlers after it still get every event",
      function()
      local inf = new_informer()
      local a = counter()
      a.reg = inf:add_handler(a.handler)
      local b = counter(function() inf:remove_handler(a.reg) end)
      inf:add_handler(b.handler)
      local c = counter()
      inf:add_handler(c.handler)
      assert(inf:start())
      assert.is_true(inf:wait_for_sync(5))
      assert.equal(1, a.adds)
      assert.equal(3, b.adds)
      assert.equal(3, c.adds)
    end)

    it("a handler removed by an earlier one gets nothing more, not even the event in flight",
      function()
      local inf = new_informer()
      local b = counter()
      local a = counter(function() inf:remove_handler(b.reg) end)
      inf:add_handler(a.handler)
      b.reg = inf:add_handler(b.handler)
      assert(inf:start())
      assert.is_true(inf:wait_for_sync(5))
      assert.equal(3, a.adds)
      assert.equal(0, b.adds)
      assert.is_false(b.reg:has_synced())
    end)
  end)

  it("a handler added from inside a handler gets the cache once, then live events", function()
    local inf = new_informer()
    local late = counter()
    local a
    a = counter(function()
      if a.adds == 1 then late.reg = assert(inf:add_handler(late.handler)) end
    end)
    inf:add_handler(a.handler)
    assert(inf:start())
    assert.is_true(inf:wait_for_sync(5))
    assert.is_true(pump(inf, 5, function() return late.reg:has_synced() end))
    assert.equal(3, a.adds)
    assert.equal(3, late.adds)
    create(srv, "p4")
    assert.is_true(pump(inf, 5, function() return late.adds == 4 end))
    assert.equal(4, a.adds)
    srv:request("DELETE", "/api/v1/namespaces/default/pods/p4")
  end)

  it("stop from inside a handler: no handler gets anything after stop returned", function()
    local inf = new_informer()
    local stopped, after = false, 0
    local function note() if stopped then after = after + 1 end end
    local a = counter(function()
      note()
      inf:stop()
      stopped = true
    end)
    inf:add_handler(a.handler)
    inf:add_handler(counter(note).handler)
    assert(inf:start())
    local ok, err, code = inf:wait_for_sync(5)
    assert.is_nil(ok)
    assert.equal("ECLOSED", code, err)
    assert.is_true(stopped)
    assert.equal(0, after)
    assert.equal(1, a.adds)
  end)

  describe("dispatch from inside a handler", function()
    it("is refused with a clear error during the replay, and no event comes twice", function()
      local inf = new_informer()
      assert(inf:start())
      assert.is_true(inf:wait_for_sync(5))
      local seen, errs = {}, {}
      inf:add_handler{ on_add = function(obj)
        seen[#seen + 1] = obj.metadata.name
        local ok, err = pcall(inf.dispatch, inf)
        if not ok then errs[#errs + 1] = tostring(err) end
      end }
      assert.is_true(pump(inf, 5, function() return #seen >= 3 end))
      table.sort(seen)
      assert.same({ "p1", "p2", "p3" }, seen)
      assert.equal(3, #errs)
      for _, e in ipairs(errs) do
        assert.matches("dispatch called from inside a handler", e, 1, true)
      end
      assert.equal(0, inf:status().handler_errors)
    end)

    it("is refused before it delivers anything to the other handlers", function()
      local inf = new_informer()
      local late = counter()
      local during, err
      local a
      a = counter(function()
        if a.adds ~= 1 then return end
        late.reg = assert(inf:add_handler(late.handler)) -- its replay is now pending
        local ok
        ok, err = pcall(inf.dispatch, inf)
        assert(not ok)
        during = late.adds
      end)
      inf:add_handler(a.handler)
      assert(inf:start())
      assert.is_true(inf:wait_for_sync(5))
      assert.equal(0, during)
      assert.matches("dispatch called from inside a handler", err, 1, true)
      assert.is_true(pump(inf, 5, function() return late.reg:has_synced() end))
      assert.equal(3, late.adds)
    end)

    it("wait_for_sync from inside a handler is refused the same way", function()
      local inf = new_informer()
      local err
      inf:add_handler{ on_add = function()
        if err == nil then
          local ok
          ok, err = pcall(inf.wait_for_sync, inf, 1)
          err = ok and "returned" or tostring(err)
        end
      end }
      assert(inf:start())
      assert.is_true(inf:wait_for_sync(5))
      assert.matches("dispatch called from inside a handler", err, 1, true)
    end)
  end)
end)

describe("shared store reader re-entrancy", function()
  local function pod(name, rv)
    return { apiVersion = "v1", kind = "Pod",
             metadata = { namespace = "ns", name = name, resourceVersion = tostring(rv) },
             spec = { containers = { { name = "c", image = "nginx" } } } }
  end

  -- A writer mirroring a store into slot 1 of seg; put(rv, names...) writes and dispatches.
  local function writer(seg)
    local store = kinformer.store{}
    local fifo = kinformer.delta_fifo{ known_objects = store, emit_replaced = true }
    local proc = core.processor(fifo, store)
    assert(proc:mirror(seg, 1))
    return function(rv, ...)
      for _, name in ipairs{ ... } do fifo:update(pod(name, rv)) end
      proc:dispatch(1000)
    end
  end

  it("poll from inside its handler is refused, so no change comes before the snapshot's add",
    function()
    local seg = core.shm(4 * 1024 * 1024)
    local put = writer(seg)
    put(1, "a", "b", "c")
    local reader = seg:store(1)
    local got, nested = {}, {}
    local ok, err
    local function record(list)
      return function(kind, obj, _, initial)
        list[#list + 1] = obj.metadata.name .. "@" .. obj.metadata.resourceVersion ..
          (kind == 1 and (initial and " add!" or " add") or kind == 2 and " update" or " delete")
      end
    end
    local outer = record(got)
    local n = reader:poll(100, function(...)
      outer(...)
      if #got == 1 then
        put(2, "a", "b", "c")
        ok, err = pcall(reader.poll, reader, 100, record(nested))
      end
    end)
    assert.is_false(ok)
    assert.matches("poll called from inside its handler", err, 1, true)
    assert.same({}, nested)
    -- The snapshot was taken before the writes: three initial adds at 1, then the updates.
    assert.equal(6, n)
    assert.equal(0, reader:poll(100, record(got)))
    local last = {}
    for i, e in ipairs(got) do
      local name, rv, what = e:match("^(%w+)@(%d+) (.*)$")
      if i <= 3 then assert.equal("add!", what) end
      assert.is_true(last[name] == nil or tonumber(rv) > last[name], e)
      last[name] = tonumber(rv)
    end
    assert.same({ a = 2, b = 2, c = 2 }, last)
  end)

  it("close from inside its poll handler is refused; the reader stays usable", function()
    local seg = core.shm(4 * 1024 * 1024)
    local put = writer(seg)
    put(1, "a", "b")
    local reader = seg:store(1)
    assert.equal(2, reader:poll(100, function() end))
    put(2, "a", "b")
    local seen, ok, err = 0, nil, nil
    assert.equal(2, reader:poll(100, function()
      seen = seen + 1
      if seen == 1 then ok, err = pcall(reader.close, reader) end
    end))
    assert.is_false(ok)
    assert.matches("close called from inside its poll handler", err, 1, true)
    assert.equal("2", reader:get("ns/a").metadata.resourceVersion)
    reader:close()
  end)

  it("a handler that raises leaves poll usable: nested-call protection does not stick",
    function()
    local seg = core.shm(4 * 1024 * 1024)
    local put = writer(seg)
    put(1, "a")
    local reader = seg:store(1)
    assert.equal(1, reader:poll(100, function() end))
    put(2, "a")
    local ok, err = pcall(reader.poll, reader, 100, function() error("boom") end)
    assert.is_false(ok)
    assert.matches("boom", err, 1, true)
    put(3, "a")
    local got
    assert.equal(1, reader:poll(100, function(_, obj) got = obj.metadata.resourceVersion end))
    assert.equal("3", got)
  end)
end)
