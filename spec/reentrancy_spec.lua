-- Closing an object from Lua code that one of its own methods runs: an index function during a
-- write, a metamethod of an argument, an options table, a poll handler, the logger. Each such
-- close is refused with an error or takes effect safely; the method never goes on with freed
-- memory (make check-spec-asan runs this file under AddressSanitizer, where a use after free
-- aborts). The rule is in csrc/lua_kinf.h; the behaviour users see is in docs/api.md.
local core = require "kinformer.core"
local kinformer = require "kinformer"

local REFUSED = "store:close called from inside one of its index functions"

local function pod(name, node)
  return { metadata = { namespace = "ns", name = name }, spec = { nodeName = node or "n1" } }
end

-- A pod whose metadata runs fn on every read of a member (the store reads name, namespace...).
local function pod_with_hook(name, fn)
  local md = setmetatable({}, { __index = function(_, k)
    fn()
    if k == "name" then return name end
    if k == "namespace" then return "ns" end
  end })
  return { metadata = md, spec = { nodeName = "n1" } }
end

describe("a store closed from inside an index function", function()
  local store, closing

  before_each(function()
    kinformer.set_logger(function() end) -- the refused closes are logged as index failures
    closing = false
    store = kinformer.store{ indexers = {
      by_node = function(p)
        if closing then store:close() end
        return { p.spec.nodeName }
      end } }
  end)

  after_each(function()
    store:close()
    kinformer.set_logger(nil)
  end)

  for _, method in ipairs{ "add", "update" } do
    it("during " .. method .. ": the close is refused, the write goes through without the index",
       function()
      closing = true
      local ok, err, code = store[method](store, pod("a"))
      assert.is_true(ok)
      assert.equal("EINDEX", code)
      assert.matches(REFUSED, err, 1, true)
      closing = false
      assert.equal(1, store:len())
      assert.equal("a", store:get("ns/a").metadata.name)
      assert.same({}, store:by_index("by_node", "n1"))
      assert.equal(1, store:status().index_errors)
    end)
  end

  it("during replace: refused for every item, every item stored", function()
    closing = true
    local ok, err, code = store:replace({ pod("a"), pod("b") }, "7")
    assert.is_true(ok)
    assert.equal("EINDEX", code)
    assert.matches(REFUSED, err, 1, true)
    closing = false
    assert.equal(2, store:len())
    assert.equal(2, store:status().index_errors)
  end)

  it("during add_indexers: refused while existing items are indexed", function()
    assert(store:add(pod("a", "n1")))
    assert(store:add(pod("b", "n2")))
    local ok, err, code = store:add_indexers{ by_name = function(p)
      store:close()
      return { p.metadata.name }
    end }
    assert.is_true(ok)
    assert.equal("EINDEX", code)
    assert.matches(REFUSED, err, 1, true)
    assert.equal(2, store:len())
    -- The new indexer is there and indexes later writes whose function does not close.
    assert.same({}, store:index_keys("by_name", "a"))
  end)

  it("during index: refused; the lookup fails with the index function's error", function()
    assert(store:add(pod("a", "n1")))
    closing = true
    local res, err, code = store:index("by_node", pod("x", "n1"))
    assert.is_nil(res)
    assert.equal("EINDEX", code)
    assert.matches(REFUSED, err, 1, true)
    closing = false
    assert.equal(1, #store:index("by_node", pod("x", "n1")))
  end)

  it("during an informer's dispatch: refused; the informer's store stays open", function()
    local fifo = kinformer.delta_fifo{ known_objects = store }
    local proc = core.processor(fifo, store)
    local seen = {}
    closing = true
    assert(fifo:add(pod("a")))
    assert(fifo:add(pod("b")))
    assert.equal(2, proc:dispatch(10, function(_, obj) seen[#seen + 1] = obj.metadata.name end))
    closing = false
    assert.same({ "a", "b" }, seen)
    assert.equal(2, store:len())
    assert.equal(2, store:status().index_errors)
    proc:close()
  end)

  it("from an informer's sink (no index function running): dispatch goes on", function()
    local fifo = kinformer.delta_fifo{ known_objects = store }
    local proc = core.processor(fifo, store)
    local seen = {}
    assert(fifo:add(pod("a")))
    assert(fifo:add(pod("b")))
    assert.equal(2, proc:dispatch(10, function(_, obj)
      seen[#seen + 1] = obj.metadata.name
      store:close()
    end))
    assert.same({ "a", "b" }, seen)
    assert.has_error(function() store:len() end, "kinformer: store is closed")
    assert.equal(2, proc:status().adds)
    proc:close()
  end)

  it("a close after the write returned works", function()
    assert(store:add(pod("a")))
    store:close()
    assert.has_error(function() store:len() end, "kinformer: store is closed")
  end)
end)

describe("a store closed by a metamethod of a method's argument", function()
  local store

  before_each(function()
    store = kinformer.store{ indexers = { by_node = function(p) return { p.spec.nodeName } end } }
    assert(store:add(pod("a")))
  end)

  after_each(function() store:close() end)

  local function closer() store:close() end

  local calls = {
    add = function() return store:add(pod_with_hook("b", closer)) end,
    update = function() return store:update(pod_with_hook("a", closer)) end,
    delete = function() return store:delete(pod_with_hook("a", closer)) end,
    get = function() return store:get(pod_with_hook("b", closer)) end,
    replace = function() return store:replace({ pod("c"), pod_with_hook("b", closer) }) end,
    index = function() return store:index("by_node", pod_with_hook("b", closer)) end,
  }
  for _, method in ipairs{ "add", "update", "delete", "get", "replace", "index" } do
    it(method .. " raises 'store is closed' instead of using the freed store", function()
      local ok, err = pcall(calls[method])
      assert.is_false(ok)
      assert.matches("kinformer: store is closed", err, 1, true)
      assert.has_error(function() store:len() end, "kinformer: store is closed")
    end)
  end

  it("list reads its options raw: an __index on them is never called", function()
    local called = false
    local opts = setmetatable({ namespace = "ns" }, { __index = function()
      called = true
      store:close()
    end })
    assert.equal(1, #store:list(opts))
    assert.equal(1, #store:list_keys(setmetatable({ index = { by_node = "n1" } },
                                                  getmetatable(opts))))
    assert.is_false(called)
    assert.equal(1, store:len())
  end)
end)

describe("a shared store reader closed from Lua code it runs", function()
  local seg, w, reader

  before_each(function()
    seg = core.shm(1024 * 1024)
    local store = kinformer.store{ indexers = { by_node = function(p) return { p.spec.nodeName } end } }
    local fifo = kinformer.delta_fifo{ known_objects = store, emit_replaced = true }
    local proc = core.processor(fifo, store)
    assert(proc:mirror(seg, 1))
    w = { proc = proc, fifo = fifo, store = store }
    for _, name in ipairs{ "a", "b", "c" } do assert(fifo:add(pod(name))) end
    assert.equal(3, proc:dispatch(100))
    reader = seg:store(1)
  end)

  after_each(function()
    reader:close()
    w.proc:close()
  end)

  it("list reads its options raw: an __index on them is never called", function()
    local called = false
    local opts = setmetatable({ namespace = "ns" }, { __index = function()
      called = true
      reader:close()
    end })
    assert.equal(3, #reader:list(opts))
    assert.equal(3, #reader:list_keys(setmetatable({ index = { by_node = "n1" } },
                                                   getmetatable(opts))))
    assert.is_false(called)
    assert.equal(3, reader:len())
  end)

  it("poll: a handler's close is refused, and the reader goes on", function()
    local got = {}
    assert.has_error(function()
      reader:poll(100, function(_, obj)
        got[#got + 1] = obj.metadata.name
        reader:close()
      end)
    end, "kinformer: shared store: close called from inside its poll handler")
    assert.equal(1, #got)
    assert.equal(3, reader:len())
    -- the rest of the snapshot comes with the next poll, before later changes
    assert(w.fifo:update(pod(got[1], "n2")))
    assert.equal(1, w.proc:dispatch(100))
    local seen = {}
    reader:poll(100, function(kind, obj, _, initial)
      seen[#seen + 1] = kind .. obj.metadata.name .. (initial and "!" or "")
    end)
    assert.equal(3, #seen)
    assert.equal("2" .. got[1], seen[3])
    for i = 1, 2 do
      assert.truthy(seen[i]:match("^1[abc]!$") and seen[i] ~= "1" .. got[1] .. "!", seen[i])
    end
    reader:close()
    assert.has_error(function() reader:len() end, "kinformer: shared store is closed")
  end)
end)

describe("a delta_fifo and its known objects closed from Lua code they run", function()
  it("pop's process function may close the known-objects store; the fifo goes on", function()
    local store = kinformer.store()
    local fifo = kinformer.delta_fifo{ known_objects = store }
    assert(store:add(pod("a")))
    assert(fifo:add(pod("b")))
    local deltas = fifo:pop(function() store:close() end)
    assert.equal("b", deltas[1].object.metadata.name)
    assert(fifo:replace({ pod("c") }, "2"))
    assert.is_true(fifo:resync())
    local keys = fifo:list_keys()
    table.sort(keys)
    assert.same({ "ns/a", "ns/c" }, keys) -- c replaced in, a deleted: it was known

  end)

  it("pop's process function cannot close the fifo (an error, the fifo stays open)", function()
    local fifo = kinformer.delta_fifo()
    assert(fifo:add(pod("a")))
    local ok, err = pcall(fifo.pop, fifo, function() fifo:close() end)
    assert.is_false(ok)
    assert.matches("fifo:close called from inside pop's process function", err, 1, true)
    assert.is_false(fifo:is_closed())
  end)

  it("a transform that closes the fifo: the add still queues (client-go's rule after Close)",
     function()
    local fifo
    fifo = kinformer.delta_fifo{ transform = function(o) fifo:close() return o end }
    assert.is_true(fifo:add(pod("a")))
    assert.is_true(fifo:is_closed())
    assert.same({ "ns/a" }, fifo:list_keys())
  end)
end)

describe("a reflector closed by the logger while it drains its log", function()
  after_each(function() kinformer.set_logger(nil) end)

  it("drain_log stops at the close; later calls raise 'reflector is closed'", function()
    local client = assert(core.client{ server = "http://127.0.0.1:1" })
    local fifo = kinformer.delta_fifo()
    local r = client:reflector{ path = "/api/v1/pods", fifo = fifo, backoff_initial = 0.05 }
    assert(r:start())
    local closed = false
    kinformer.set_logger(function()
      closed = true
      r:close()
    end)
    local deadline = core.now() + 5
    while not closed and core.now() < deadline do
      core.sleep(0.02)
      r:drain_log()
    end
    assert.is_true(closed)
    assert.has_error(function() r:status() end, "kinformer: reflector is closed")
    assert.has_error(function() r:drain_log() end, "kinformer: reflector is closed")
  end)
end)

describe("store methods name themselves in argument errors", function()
  local store = kinformer.store{ indexers = { by_node = function(p) return { p.spec.nodeName } end } }

  -- Called through pcall and in tail position: no debug name reaches the error message, so a
  -- message naming the method comes from the method itself.
  local cases = {
    { "get_by_key", { nil }, "bad argument #1 to 'get_by_key' (string expected, got nil)" },
    { "by_index", { nil, "x" }, "bad argument #1 to 'by_index' (string expected, got nil)" },
    { "by_index", { "by_node", {} }, "bad argument #2 to 'by_index' (string expected, got table)" },
    { "index_keys", { nil, "x" }, "bad argument #1 to 'index_keys' (string expected, got nil)" },
    { "replace", { nil }, "bad argument #1 to 'replace' (table expected, got nil)" },
    { "add_indexers", { 5 }, "bad argument #1 to 'add_indexers' (table expected, got number)" },
    { "index", { nil, {} }, "bad argument #1 to 'index' (string expected, got nil)" },
    { "list_index_func_values", { nil },
      "bad argument #1 to 'list_index_func_values' (string expected, got nil)" },
    { "add", { "x" }, "bad argument #1 to 'add' (object expected, got string)" },
    { "get", { 5 }, "bad argument #1 to 'get' (object expected, got number)" },
  }
  for _, c in ipairs(cases) do
    it(c[1] .. ": " .. c[3], function()
      local ok, err = pcall(store[c[1]], store, c[2][1], c[2][2])
      assert.is_false(ok)
      assert.equal(c[3], err)
      ok, err = pcall(function() return store[c[1]](store, c[2][1], c[2][2]) end)
      assert.is_false(ok)
      assert.matches(c[3], err, 1, true)
    end)
  end

  it("a method called on something else than a store names itself", function()
    for _, method in ipairs{ "get", "get_by_key", "add", "list", "len", "close" } do
      local ok, err = pcall(store[method], {}, "x")
      assert.is_false(ok)
      assert.equal("calling '" .. method .. "' on bad self (kinformer.store expected, got table)",
                   err)
    end
  end)

  it("the constructor names itself", function()
    local ok, err = pcall(core.store, 5)
    assert.is_false(ok)
    assert.equal("bad argument #1 to 'store' (table expected, got number)", err)
  end)
end)
