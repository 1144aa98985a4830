-- The shared cache from Lua, in one process: an informer's processor mirrors its store into a
-- segment (processor:mirror) and a reader handle (seg:store) reads it: lookups, lazily decoded
-- objects whose JSON stays in the segment, holds released with the tables, events with the
-- initial snapshot and a resync after falling behind, and a full segment. Several processes
-- (fork, a killed writer) are covered by the C tests (csrc/test/test_shm*.c).
local core = require "kinformer.core"
local kinformer = require "kinformer"

local function pod(name, node, rv)
  return {
    apiVersion = "v1", kind = "Pod",
    metadata = { namespace = "ns", name = name, resourceVersion = tostring(rv or 1),
                 labels = { app = "web" } },
    spec = { nodeName = node, containers = { { name = "c", image = "nginx" } } },
  }
end

-- A writer: a store with a by_node index, its FIFO and processor, mirrored into slot 1.
local function writer(seg)
  local store = kinformer.store{ indexers = {
    by_node = function(p) return { p.spec.nodeName } end } }
  local fifo = kinformer.delta_fifo{ known_objects = store, emit_replaced = true }
  local proc = core.processor(fifo, store)
  assert(proc:mirror(seg, 1))
  return {
    put = function(...) for _, o in ipairs{ ... } do fifo:update(o) end; proc:dispatch(1000) end,
    delete = function(o) fifo:delete(o); proc:dispatch(1000) end,
    proc = proc, store = store, fifo = fifo,
  }
end

-- Every event poll hands out, as "kind:name[:old name rv]" strings.
local function poll_all(reader)
  local got = {}
  local n = reader:poll(100000, function(kind, obj, old, initial)
    local s = ({ "add", "update", "delete" })[kind] .. ":" .. obj.metadata.name .. "@" ..
      obj.metadata.resourceVersion
    if old then s = s .. "<" .. old.metadata.resourceVersion end
    if initial then s = s .. "!" end
    got[#got + 1] = s
  end)
  assert(n == #got)
  return got
end

describe("shared store", function()
  it("reads what the writer mirrored: get, by_index sorted, list, index values, len", function()
    local seg = core.shm(4 * 1024 * 1024)
    local reader = seg:store(1)
    local none, err, code = reader:get("ns/a")
    assert.is_nil(none)
    assert.equal("ENOTFOUND", code, err)
    local w = writer(seg)
    w.put(pod("b", "n1"), pod("a", "n1"), pod("c", "n2"))
    assert.equal(3, reader:len())
    assert.equal("n1", reader:get("ns/a").spec.nodeName)
    assert.is_nil(reader:get("ns/zz"))
    assert.same({ "ns/a", "ns/b" }, reader:index_keys("by_node", "n1"))
    local on_n1 = reader:by_index("by_node", "n1")
    assert.equal(2, #on_n1)
    assert.equal("a", on_n1[1].metadata.name)
    assert.is_true(rawequal(on_n1[1], reader:get("ns/a"))) -- one table per record version
    -- The same read-only array while the value is unchanged, also across other writes.
    assert.is_true(rawequal(on_n1, reader:by_index("by_node", "n1")))
    w.put(pod("c", "n2", 2))
    assert.is_true(rawequal(on_n1, reader:by_index("by_node", "n1")))
    assert.has_error(function() on_n1[3] = 1 end)
    local keys = reader:list_keys()
    table.sort(keys)
    assert.same({ "ns/a", "ns/b", "ns/c" }, keys)
    assert.equal(3, #reader:list())
    local nodes = reader:list_index_func_values("by_node")
    table.sort(nodes)
    assert.same({ "n1", "n2" }, nodes)
    assert.same({ "ns" }, reader:list_index_func_values("namespace"))
    assert.same({}, reader:list_index_func_values("nope"))
    assert.has_error(function() reader:by_index("nope", "x") end)
    -- Objects are the usual lazy, read-only tables, decoded from the segment.
    local a = reader:get("ns/a")
    assert.equal("web", a.metadata.labels.app)
    assert.equal("nginx", a.spec.containers[1].image)
    local members = {}
    for k in kinformer.pairs(a) do members[#members + 1] = k end
    table.sort(members)
    assert.same({ "apiVersion", "kind", "metadata", "spec" }, members)
    assert.has_error(function() a.extra = 1 end)
    -- A move between index values and a delete.
    w.put(pod("a", "n2", 2))
    w.delete(pod("b", "n1"))
    assert.same({}, reader:index_keys("by_node", "n1"))
    assert.same({ "ns/a", "ns/c" }, reader:index_keys("by_node", "n2"))
    assert.equal(2, reader:get("ns/a").metadata.resourceVersion + 0)
    assert.is_false(rawequal(on_n1, reader:by_index("by_node", "n1")))
    -- list's options, as on a local store.
    local function sorted(t) table.sort(t) return t end
    assert.same({ "ns/a", "ns/c" }, sorted(reader:list_keys{ index = { by_node = "n2" } }))
    assert.same({}, reader:list_keys{ label_selector = "app=db" })
    assert.same({ "ns/a", "ns/c" },
      sorted(reader:list_keys{ namespace = "ns", label_selector = "app in (web), !canary" }))
    assert.same({}, reader:list_keys{ namespace = "other" })
    assert.same({ "ns/a", "ns/c" }, sorted(reader:list_keys{ namespace = "ns",
      index = { by_node = "n2", namespace = "ns" }, label_selector = "app=web" }))
    assert.same({}, reader:list_keys{ index = { by_node = "n2", namespace = "other" } })
    assert.equal(2, #reader:list{ label_selector = "app" })
    assert.is_true(rawequal(reader:get("ns/a"), reader:list{ index = { by_node = "n2" } }[1]) or
                   rawequal(reader:get("ns/a"), reader:list{ index = { by_node = "n2" } }[2]))
    assert.has_error(function() reader:list{ bogus = 1 } end)
    assert.has_error(function() reader:list{ label_selector = "app in (" } end)
    assert.has_error(function() reader:list{ index = { nope = "x" } } end)
    -- Several changes of one key popped together: the segment gets the last one.
    w.put(pod("x", "n1", 7), pod("x", "n3", 8))
    assert.same({ "ns/x" }, reader:index_keys("by_node", "n3"))
    w.fifo:update(pod("y", "n1", 9)) -- added and deleted before the writer dispatched
    w.fifo:delete(pod("y", "n1"))
    w.fifo:delete(pod("x", "n3"))
    w.proc:dispatch(100)
    assert.is_nil(reader:get("ns/x"))
    assert.is_nil(reader:get("ns/y"))
    local st = w.proc:status().shared
    assert.equal(0, st.failures)
    assert.equal(2, st.items)
    assert.equal(9, st.writes)
    assert.equal(0, st.failures)
    -- The writer's own store keeps no second copy: its records are borrowed from the segment
    -- (6 adds and updates), and it reads as before.
    assert.equal(6, st.borrowed)
    assert.equal("n2", w.store:get("ns/a").spec.nodeName)
    assert.same({ "ns/a", "ns/c" }, w.store:index_keys("by_node", "n2"))
  end)

  it("the writer's store stays borrowed when a relist brings the same objects again", function()
    local seg = core.shm(4 * 1024 * 1024)
    local w = writer(seg)
    local a, b = pod("a", "n1"), pod("b", "n2")
    w.put(a, b)
    local held = w.store:get("ns/a") -- a table of the borrowed record, alive through the relist
    local st = w.proc:status().shared
    local head = st.log_head
    assert.equal(2, st.borrowed)
    w.put(a, b) -- new local copies of the same objects
    st = w.proc:status().shared
    assert.equal(head, st.log_head) -- the segment is unchanged
    assert.equal(4, st.borrowed) -- and the store swapped its copies for the segment's records
    assert.equal("n1", held.spec.nodeName)
    held = nil
    collectgarbage()
    collectgarbage()
    w.put(pod("a", "n3", 2)) -- a real change after the old tables went
    assert.same({ "ns/a" }, seg:store(1):index_keys("by_node", "n3"))
    assert.equal("n3", w.store:get("ns/a").spec.nodeName)
    assert.equal(5, w.proc:status().shared.borrowed)
  end)

  it("poll: the content as initial adds, then every change in order with the old object", function()
    local seg = core.shm(4 * 1024 * 1024)
    local w = writer(seg)
    local reader = seg:store(1)
    w.put(pod("a", "n1"), pod("b", "n1"))
    local first = poll_all(reader)
    table.sort(first)
    assert.same({ "add:a@1!", "add:b@1!" }, first)
    assert.same({}, poll_all(reader))
    local before = reader:get("ns/a")
    w.put(pod("a", "n2", 2), pod("c", "n1", 3))
    w.delete(pod("b", "n1"))
    local old
    reader:poll(100, function(kind, obj, o) if kind == 2 then old = o end end)
    assert.is_true(rawequal(before, old)) -- the table handed out before is the old object
    w.put(pod("d", "n1", 4))
    assert.same({ "add:d@4" }, poll_all(reader))
    local s = reader:status()
    assert.equal(1, s.resyncs)
    assert.equal(3, s.items)
  end)

  it("a reader that fell behind the log gets what changed from the content, as a relist",
    function()
    local seg = core.shm(16 * 1024 * 1024)
    local w = writer(seg)
    local reader = seg:store(1)
    w.put(pod("a", "n1"), pod("c", "n1"), pod("d", "n2"))
    local before
    reader:poll(100, function(_, obj) if obj.metadata.name == "a" then before = obj end end)
    for rv = 2, 4200 do w.put(pod("a", "n1", rv)) end -- more than the log's 4096 events
    w.put(pod("b", "n1", 4201))
    w.delete(pod("c", "n1"))
    local got, old = {}, nil
    reader:poll(100000, function(kind, obj, o, initial)
      got[#got + 1] = ({ "add", "update", "delete" })[kind] .. ":" .. obj.metadata.name .. "@" ..
        obj.metadata.resourceVersion .. (initial and "!" or "")
      if kind == 2 then old = o end
    end)
    table.sort(got)
    -- a changed (with the table handed before), b new, c gone, d unchanged: nothing for it
    assert.same({ "add:b@4201", "delete:c@1", "update:a@4200" }, got)
    assert.is_true(rawequal(before, old))
    assert.equal(2, reader:status().resyncs)
    assert.same({}, poll_all(reader))
  end)

  it("a poll without a handler lets the tables of replaced and deleted objects go, makes none",
    function()
    local seg = core.shm(4 * 1024 * 1024)
    local w = writer(seg)
    local reader = seg:store(1)
    w.put(pod("a", "n1"), pod("b", "n1"), pod("c", "n1"))
    assert.equal(0, reader:poll(100)) -- no snapshot: it starts at the log's head
    local a, b = reader:get("ns/a"), reader:get("ns/b")
    assert.equal(2, reader:status().held)
    w.put(pod("a", "n2", 2))
    w.delete(pod("b", "n1"))
    a, b = nil, nil -- luacheck: ignore
    assert.equal(2, reader:poll(100))
    collectgarbage()
    collectgarbage()
    assert.equal(0, reader:status().held)
    assert.equal("2", reader:get("ns/a").metadata.resourceVersion)
    assert.is_nil(reader:get("ns/b"))
  end)

  it("holds records while their tables live, and releases them with the tables", function()
    local seg = core.shm(4 * 1024 * 1024)
    local w = writer(seg)
    local reader = seg:store(1)
    w.put(pod("a", "n1"), pod("b", "n1"))
    local kept = reader:get("ns/a")
    reader:list()
    assert.equal(2, reader:status().held)
    for rv = 2, 50 do w.put(pod("a", "n1", rv)) end
    assert.equal("1", kept.metadata.resourceVersion) -- the old version, still readable
    assert.equal("n1", kept.spec.nodeName)
    poll_all(reader) -- follows the changes: the cache lets the old tables go
    kept = nil
    collectgarbage()
    collectgarbage()
    assert.equal(2, reader:status().held) -- a@50 (the snapshot's table) and b
    w.put(pod("c", "n1", 99)) -- the writer frees what no one holds
    assert.equal(0, seg:stats().retired)
    reader:close()
    collectgarbage()
    collectgarbage()
  end)

  it("a full segment: the write fails, is counted and logged in status, the content stays", function()
    local lines = {}
    kinformer.set_logger(function(level, msg) lines[#lines + 1] = level .. ": " .. msg end, "info")
    finally(function() kinformer.set_logger(nil) end)
    local seg = core.shm(256 * 1024)
    local w = writer(seg)
    local reader = seg:store(1)
    local big = string.rep("x", 4000)
    local n = 0
    for i = 1, 200 do
      local p = pod("p" .. i, "n1")
      p.metadata.annotations = { big = big }
      w.put(p)
    end
    local st = w.proc:status().shared
    assert.is_true(st.failures > 0)
    assert.matches("the segment is full", st.last_error, 1, true)
    n = reader:len()
    assert.equal(st.items, n)
    assert.equal(n, #reader:index_keys("by_node", "n1"))
    assert.is_true(seg:stats().alloc_failures > 0)
    -- Logged once (not once per failed write), then recovery once writes succeed again.
    local errors = 0
    for _, l in ipairs(lines) do
      if l:find("the segment is full", 1, true) then errors = errors + 1 end
    end
    assert.equal(1, errors)
    w.delete(pod("p1", "n1"))
    local recovered = false
    for _, l in ipairs(lines) do recovered = recovered or l == "info: shared store: writes succeed again" end
    assert.is_true(recovered, table.concat(lines, "\n"))
    -- A segment at its limit, failing some dispatches and passing others: counted, and still
    -- one error line within the minute.
    local failures = w.proc:status().shared.failures
    for i = 1, 4 do
      local p = pod("q" .. i, "n1")
      p.metadata.annotations = { big = big .. big }
      w.put(p)
      w.delete(pod("p" .. (i + 1), "n1"))
    end
    assert.is_true(w.proc:status().shared.failures >= failures + 4)
    errors = 0
    for _, l in ipairs(lines) do
      if l:find("the segment is full", 1, true) then errors = errors + 1 end
    end
    assert.equal(1, errors, table.concat(lines, "\n"))
  end)

  it("wrong arguments raise at the caller's line", function()
    assert.has_error(function() core.shm(10) end)
    local seg = core.shm(1024 * 1024)
    assert.has_error(function() seg:store(0) end)
    assert.has_error(function() seg:store(17) end)
    local reader = seg:store(1)
    reader:close()
    assert.has_error(function() reader:len() end, "kinformer: shared store is closed")
  end)
end)
