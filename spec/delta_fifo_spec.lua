-- docs/semantics.md, section 3: the DeltaFIFO, ported test by test from client-go tools/cache
-- delta_fifo_test.go (TestDeltaFIFO_*). client-go's testFifoObject{name, val} is
-- { metadata = { name = name }, val = val }; its literalListerGetter (KnownObjects) is a
-- kinformer.store holding the same objects. Deltas are compared by type and object content;
-- tombstones by kinformer.is_tombstone, .key and the content of .obj.
local kinformer = require "kinformer"

local REQUEUE = kinformer.REQUEUE
local tombstone = kinformer.tombstone
local is_tombstone = kinformer.is_tombstone

local function mk(name, val)
  return { metadata = { name = name }, val = val }
end

-- A known-objects store (client-go's literalListerGetter) holding objs.
local function known(objs)
  local store = kinformer.store()
  for _, o in ipairs(objs) do assert(store:add(o)) end
  return store
end

local function fifo_with(opts)
  return kinformer.delta_fifo(opts)
end

local function describe_delta(d)
  local o = d.object
  if is_tombstone(o) then
    return ("%s(DFSU %s %s)"):format(d.type, o.key, o.obj and tostring(o.obj.val) or "nil")
  end
  return ("%s(%s %s)"):format(d.type, o.metadata and o.metadata.name, tostring(o.val))
end

local function describe_all(deltas)
  local out = {}
  for i, d in ipairs(deltas) do out[i] = describe_delta(d) end
  return "{" .. table.concat(out, ", ") .. "}"
end

-- expected: { { "Added", obj }, { "Deleted", tombstone(key, obj) }, ... }
local function assert_deltas(expected, actual)
  assert.is_table(actual, "expected deltas, got " .. tostring(actual))
  local want = {}
  for i, e in ipairs(expected) do want[i] = { type = e[1], object = e[2] } end
  local msg = "expected " .. describe_all(want) .. ", got " .. describe_all(actual)
  assert.equal(#expected, #actual, msg)
  for i, e in ipairs(expected) do
    local a = actual[i]
    assert.equal(e[1], a.type, msg)
    if is_tombstone(e[2]) then
      assert.is_true(is_tombstone(a.object), msg)
      assert.equal(e[2].key, a.object.key, msg)
      if e[2].obj == nil then
        assert.is_nil(a.object.obj, msg)
      else
        assert.is_false(is_tombstone(a.object.obj), msg)
        assert.same(e[2].obj, a.object.obj, msg)
      end
    else
      assert.is_false(is_tombstone(a.object), msg)
      assert.same(e[2], a.object, msg)
    end
  end
end

-- Pop with a bounded wait so a missing item fails the test instead of hanging it.
local function pop(f)
  local deltas, initial = f:pop(nil, 1)
  assert(deltas, "pop failed: " .. tostring(initial))
  return deltas, initial
end

-- client-go's testPop: the newest object of the popped deltas.
local function test_pop(f)
  local deltas = pop(f)
  return deltas[#deltas].object
end

local function now()
  local ok, socket = pcall(require, "socket")
  if ok and socket.gettime then return socket.gettime() end
  return os.time()
end

describe("DeltaFIFO", function()
  it("basic: two producers keep per-producer order", function()
    -- client-go runs two goroutines; here two coroutines add 500 items each, interleaved at
    -- random with a consumer that pops whenever something is queued. (The multi-threaded
    -- version is a C test.)
    local f = fifo_with()
    local amount = 500
    local function producer(prefix)
      return coroutine.create(function()
        for i = 1, amount do
          assert(f:add({ metadata = { name = prefix .. i }, producer = prefix, val = i }))
          coroutine.yield()
        end
      end)
    end
    local producers = { producer("a"), producer("b") }
    local last = { a = 0, b = 0 }
    local popped = 0
    math.randomseed(20240601)
    while popped < amount * 2 do
      local pick = math.random(3)
      local co = producers[pick]
      if co and coroutine.status(co) ~= "dead" then
        assert(coroutine.resume(co))
      elseif #f > 0 then
        local deltas = f:pop(nil, 0)
        local o = deltas[#deltas].object
        assert.is_true(o.val > last[o.producer],
          ("got %s%d out of order, last was %d"):format(o.producer, o.val, last[o.producer]))
        last[o.producer] = o.val
        popped = popped + 1
      end
    end
    assert.same({ a = amount, b = amount }, last)
    assert.equal(0, #f)
  end)

  it("requeueOnPop", function()
    local f = fifo_with()
    f:add(mk("foo", 10))

    local deltas = f:pop(function(d)
      assert.equal("foo", d[1].object.metadata.name)
      return REQUEUE
    end)
    assert.is_table(deltas)
    assert.equal("foo", deltas[1].object.metadata.name)
    assert.is_table(f:get_by_key("foo"), "object should have been requeued")

    -- client-go's second case requeues with an error (ErrRequeue{Err}); our process cannot
    -- return an error with REQUEUE, so requeue once more and check nothing was duplicated.
    f:pop(function(d)
      assert.equal("foo", d[1].object.metadata.name)
      return REQUEUE
    end)
    local again = f:get_by_key("foo")
    assert.is_table(again, "object should have been requeued")
    assert_deltas({ { "Added", mk("foo", 10) } }, again)
    assert.equal(1, #f)

    f:pop(function(d)
      assert.equal("foo", d[1].object.metadata.name)
      return nil
    end)
    assert.is_nil(f:get_by_key("foo"), "object should have been removed")
    assert.equal(0, #f)
  end)

  it("requeueOnPop: a process that raises makes pop raise the same error and drops the item", function()
    local f = fifo_with()
    f:add(mk("foo", 10))
    local ok, err = pcall(f.pop, f, function() error("test error") end)
    assert.is_false(ok)
    assert.matches("test error", err, 1, true)
    assert.is_nil(f:get_by_key("foo"))
    -- the queue still works
    f:add(mk("bar", 1))
    assert.equal(1, test_pop(f).val)
  end)

  it("addUpdate", function()
    local f = fifo_with()
    f:add(mk("foo", 10))
    f:update(mk("foo", 12))
    f:delete(mk("foo", 15))

    local list = f:list()
    assert.equal(1, #list)
    assert.same(mk("foo", 15), list[1])
    assert.same({ "foo" }, f:list_keys())

    local first = test_pop(f)
    assert.equal(15, first.val)
    local none, err, code = f:pop(nil, 0.05)
    assert.is_nil(none, "got a second value")
    assert.equal("ETIMEDOUT", code)
    assert.is_string(err)
    assert.is_nil(f:get(mk("foo", "")), "item did not get removed")
  end)

  it("enqueueingNoLister", function()
    local f = fifo_with()
    f:add(mk("foo", 10))
    f:update(mk("bar", 15))
    f:add(mk("qux", 17))
    f:delete(mk("qux", 18))
    -- This delete does not enqueue anything because baz doesn't exist.
    f:delete(mk("baz", 20))

    for _, expect in ipairs({ 10, 15, 18 }) do
      assert.equal(expect, test_pop(f).val)
    end
    assert.equal(0, #f)
  end)

  it("enqueueingWithLister", function()
    local f = fifo_with{ known_objects = known{ mk("foo", 5), mk("bar", 6), mk("baz", 7) } }
    f:add(mk("foo", 10))
    f:update(mk("bar", 15))
    -- This delete does enqueue the deletion, because "baz" is in the known objects.
    f:delete(mk("baz", 20))

    for _, expect in ipairs({ 10, 15, 20 }) do
      assert.equal(expect, test_pop(f).val)
    end
    assert.equal(0, #f)
  end)

  it("addReplace", function()
    local f = fifo_with()
    f:add(mk("foo", 10))
    f:replace({ mk("foo", 15) }, "0")

    local first = test_pop(f)
    assert.equal(15, first.val)
    local none, err, code = f:pop(nil, 0.05)
    assert.is_nil(none, "got a second value")
    assert.equal("ETIMEDOUT", code)
    assert.is_string(err)
    assert.is_nil(f:get(mk("foo", "")), "item did not get removed")
  end)

  it("ResyncNonExisting", function()
    local f = fifo_with{ known_objects = known{ mk("foo", 5) } }
    f:delete(mk("foo", 10))
    f:resync()

    local deltas = f:get_by_key("foo")
    assert.equal(1, #deltas)
    assert.equal("Deleted", deltas[1].type)
  end)

  it("Resync", function()
    local f = fifo_with{ known_objects = known{ mk("foo", 5) } }
    assert.is_true(f:resync())

    local deltas = f:get_by_key("foo")
    assert.equal(1, #deltas)
    assert.equal("Sync", deltas[1].type)
    assert.equal(5, deltas[1].object.val)
  end)

  it("Resync: without known objects it does nothing; it never marks the queue populated", function()
    local plain = fifo_with()
    assert.is_true(plain:resync())
    assert.equal(0, #plain)
    assert.is_false(plain:has_synced())

    local f = fifo_with{ known_objects = known{ mk("foo", 5) } }
    f:resync()
    assert.is_false(f:has_synced())
  end)

  it("DeleteExistingNonPropagated", function()
    local f = fifo_with{ known_objects = known{} }
    f:add(mk("foo", 5))
    f:delete(mk("foo", 6))

    local deltas = f:get_by_key("foo")
    assert.equal(2, #deltas)
    assert.equal("Deleted", deltas[#deltas].type)
  end)

  describe("ReplaceMakesDeletions", function()
    local function three() return known{ mk("foo", 5), mk("bar", 6), mk("baz", 7) } end

    it("with a pre-existing Delete", function()
      local f = fifo_with{ known_objects = three() }
      f:delete(mk("baz", 10))
      f:replace({ mk("foo", 5) }, "0")
      assert_deltas({ { "Deleted", mk("baz", 10) } }, pop(f))
      assert_deltas({ { "Sync", mk("foo", 5) } }, pop(f))
      -- bar had no delete event and was not listed: a tombstone with its known object
      assert_deltas({ { "Deleted", tombstone("bar", mk("bar", 6)) } }, pop(f))
      assert.equal(0, #f)
    end)

    it("starting with an Add instead of a Delete", function()
      local f = fifo_with{ known_objects = three() }
      f:add(mk("baz", 10))
      f:replace({ mk("foo", 5) }, "0")
      assert_deltas({ { "Added", mk("baz", 10) },
                      { "Deleted", tombstone("baz", mk("baz", 10)) } }, pop(f))
      assert_deltas({ { "Sync", mk("foo", 5) } }, pop(f))
      assert_deltas({ { "Deleted", tombstone("bar", mk("bar", 6)) } }, pop(f))
      assert.equal(0, #f)
    end)

    it("deleting and recreating the object in the queue, then deleting it by a Replace", function()
      local f = fifo_with{ known_objects = three() }
      f:delete(mk("bar", 6))
      f:add(mk("bar", 100))
      f:replace({ mk("foo", 5) }, "0")
      -- bar's tombstone carries the newest object from the queue, not the known one
      assert_deltas({ { "Deleted", mk("bar", 6) }, { "Added", mk("bar", 100) },
                      { "Deleted", tombstone("bar", mk("bar", 100)) } }, pop(f))
      assert_deltas({ { "Sync", mk("foo", 5) } }, pop(f))
      assert_deltas({ { "Deleted", tombstone("baz", mk("baz", 7)) } }, pop(f))
      assert.equal(0, #f)
    end)

    it("syncing it first so the delete uses the latest version", function()
      local f = fifo_with{ known_objects = three() }
      f:replace({ mk("bar", 100), mk("foo", 5) }, "0")
      f:replace({ mk("foo", 5) }, "0")
      assert_deltas({ { "Sync", mk("bar", 100) },
                      { "Deleted", tombstone("bar", mk("bar", 100)) } }, pop(f))
      assert_deltas({ { "Sync", mk("foo", 5) }, { "Sync", mk("foo", 5) } }, pop(f))
      assert_deltas({ { "Deleted", tombstone("baz", mk("baz", 7)) } }, pop(f))
      assert.equal(0, #f)
    end)

    it("without known objects", function()
      local f = fifo_with()
      f:add(mk("baz", 10))
      f:replace({ mk("foo", 5) }, "0")
      assert_deltas({ { "Added", mk("baz", 10) },
                      { "Deleted", tombstone("baz", mk("baz", 10)) } }, pop(f))
      assert_deltas({ { "Sync", mk("foo", 5) } }, pop(f))
      assert.equal(0, #f)
    end)
  end)

  it("ReplaceMakesDeletionsReplaced", function()
    local f = fifo_with{ known_objects = known{ mk("foo", 5), mk("bar", 6), mk("baz", 7) },
                         emit_replaced = true }
    f:delete(mk("baz", 10))
    f:replace({ mk("foo", 6) }, "0")
    assert_deltas({ { "Deleted", mk("baz", 10) } }, pop(f))
    assert_deltas({ { "Replaced", mk("foo", 6) } }, pop(f))
    assert_deltas({ { "Deleted", tombstone("bar", mk("bar", 6)) } }, pop(f))
    assert.equal(0, #f)
  end)

  it("ReplaceDeltaType", function()
    local f = fifo_with{ known_objects = known{ mk("foo", 5) }, emit_replaced = true }
    f:replace({ mk("foo", 5) }, "0")
    assert_deltas({ { "Replaced", mk("foo", 5) } }, pop(f))
    assert.equal(0, #f)
  end)

  it("UpdateResyncRace", function()
    local f = fifo_with{ known_objects = known{ mk("foo", 5) } }
    f:update(mk("foo", 6))
    f:resync()
    assert_deltas({ { "Updated", mk("foo", 6) } }, pop(f))
    assert.equal(0, #f)
  end)

  describe("HasSynced", function()
    local cases = {
      { "no actions", {}, false },
      { "Add", { function(f) f:add(mk("a", 1)) end }, true },
      { "Replace of nothing", { function(f) f:replace({}, "0") end }, true },
      { "Replace of a, b", { function(f) f:replace({ mk("a", 1), mk("b", 2) }, "0") end }, false },
      { "Replace of a, b; Pop", {
          function(f) f:replace({ mk("a", 1), mk("b", 2) }, "0") end,
          function(f) pop(f) end,
        }, false },
      { "Replace of a, b; Pop; Pop", {
          function(f) f:replace({ mk("a", 1), mk("b", 2) }, "0") end,
          function(f) pop(f) end,
          function(f) pop(f) end,
        }, true },
      -- Cannot happen with a Reflector (a list never repeats a key), but the count is of
      -- distinct keys.
      { "Replace of a, a (duplicate keys); Pop", {
          function(f) f:replace({ mk("a", 1), mk("a", 2) }, "0") end,
          function(f) pop(f) end,
        }, true },
    }
    for i, case in ipairs(cases) do
      it(("case %d: %s -> %s"):format(i - 1, case[1], tostring(case[3])), function()
        local f = fifo_with()
        for _, action in ipairs(case[2]) do action(f) end
        assert.equal(case[3], f:has_synced())
      end)
    end

    it("a Delete before the first Replace marks the queue populated, even when ignored", function()
      local f = fifo_with()
      assert.is_true(f:delete(mk("ghost", 1)))
      assert.equal(0, #f)
      assert.is_true(f:has_synced())
    end)
  end)

  it("HasSyncedCorrectOnDeletion", function()
    local f = fifo_with{ known_objects = known{ mk("foo", 5), mk("bar", 6), mk("baz", 7) } }
    f:replace({ mk("foo", 5) }, "0")

    local popped = {}
    for _ = 1, 3 do
      assert.is_false(f:has_synced(), "expected has_synced to be false")
      local seen_initial
      local deltas, initial = f:pop(function(d, is_initial) seen_initial = is_initial end, 1)
      assert.is_table(deltas)
      assert.is_true(seen_initial, "expected an initial list item")
      assert.is_true(initial)
      popped[#popped + 1] = deltas
    end
    assert.is_true(f:has_synced(), "expected has_synced to be true")

    assert_deltas({ { "Sync", mk("foo", 5) } }, popped[1])
    -- client-go lists known keys in a fixed order; a store lists them unordered, so the two
    -- tombstones may come either way round.
    table.sort(popped, function(a, b)
      local ka = is_tombstone(a[1].object) and a[1].object.key or ""
      local kb = is_tombstone(b[1].object) and b[1].object.key or ""
      return ka < kb
    end)
    assert_deltas({ { "Sync", mk("foo", 5) } }, popped[1])
    assert_deltas({ { "Deleted", tombstone("bar", mk("bar", 6)) } }, popped[2])
    assert_deltas({ { "Deleted", tombstone("baz", mk("baz", 7)) } }, popped[3])

    -- after the initial list, pops are no longer initial
    f:add(mk("later", 1))
    local _, initial = pop(f)
    assert.is_false(initial)
  end)

  it("detectLineJumpers", function()
    local f = fifo_with()
    f:add(mk("foo", 10))
    f:add(mk("bar", 1))
    f:add(mk("foo", 11))
    f:add(mk("foo", 13))
    f:add(mk("zab", 30))

    assert.equal(13, test_pop(f).val)
    f:add(mk("foo", 14)) -- ensure foo doesn't jump back in line
    assert.equal(1, test_pop(f).val)
    assert.equal(30, test_pop(f).val)
    assert.equal(14, test_pop(f).val)
  end)

  it("addIfNotPresent", function()
    local f = fifo_with()
    local ok, err = pcall(f.add_if_not_present, f, {})
    assert.is_false(ok, "empty deltas must be refused")
    assert.matches("empty", err, 1, true)

    f:add(mk("b", 3))
    local b3 = pop(f)
    f:add(mk("c", 4))
    local c4 = pop(f)
    assert.equal(0, #f)

    f:add(mk("a", 1))
    f:add(mk("b", 2))
    assert.is_true(f:add_if_not_present(b3))
    assert.is_true(f:add_if_not_present(c4))
    assert.equal(3, #f)

    for _, expected in ipairs({ 1, 2, 4 }) do
      assert.equal(expected, test_pop(f).val)
    end
  end)

  it("KeyOf", function()
    -- client-go's DeltaFIFO.KeyOf: an object, a tombstone, and Deltas (keyed by the newest
    -- object, itself an object or a tombstone).
    assert.equal("A", kinformer.key_of(mk("A")))
    assert.equal("B", kinformer.key_of(tombstone("B")))

    local f = fifo_with()
    f:add(mk("C"))
    local deltas = pop(f)
    assert.equal("C", kinformer.key_of(deltas[#deltas].object))

    f:add_if_not_present({ { type = "Deleted", object = tombstone("D") } })
    assert.same({ "D" }, f:list_keys())
    deltas = pop(f)
    assert.equal("D", kinformer.key_of(deltas[#deltas].object))
    assert.is_nil(deltas[#deltas].object.obj)
  end)

  describe("PopShouldUnblockWhenClosed", function()
    -- client-go blocks 10 goroutines in Pop and closes the queue; the threaded version is a
    -- C test. From Lua: a pop on a closed empty queue returns "closed" at once, however long
    -- its timeout, and queued items drain first.
    it("a pop with a timeout on a closed empty queue returns 'closed' at once", function()
      local f = fifo_with{ known_objects = known{ mk("foo", 5) } }
      assert.is_false(f:is_closed())
      f:close()
      assert.is_true(f:is_closed())
      local called = false
      for _ = 1, 10 do
        local start = now()
        local deltas, err, code = f:pop(function() called = true end, 2)
        assert.is_nil(deltas)
        assert.equal("ECLOSED", code)
        assert.is_true(now() - start < 0.5)
      end
      assert.is_false(called)
      -- without a timeout too
      local deltas, err, code = f:pop()
      assert.is_nil(deltas)
      assert.equal("ECLOSED", code)
    end)

    it("pops drain the queued items after close, then return 'closed'", function()
      local f = fifo_with()
      f:add(mk("a", 1))
      f:add(mk("b", 2))
      f:close()
      f:close() -- a second close does nothing
      assert.equal(1, test_pop(f).val)
      assert.equal(2, f:pop(nil, 1)[1].object.val)
      local deltas, err, code = f:pop(nil, 1)
      assert.is_nil(deltas)
      assert.equal("ECLOSED", code)
    end)

    it("an open empty queue times out instead", function()
      local f = fifo_with()
      local deltas, err, code = f:pop(nil, 0.02)
      assert.is_nil(deltas)
      assert.equal("ETIMEDOUT", code)
      assert.is_string(err)
      assert.has_error(function() f:pop(nil, -1) end)
    end)
  end)

  it("replaceWithDeleteDeltaIn", function()
    local old_obj, new_obj = mk("foo", 1), mk("foo", 2)
    local f = fifo_with{ known_objects = known{ old_obj } }
    f:delete(old_obj)
    f:replace({ new_obj }, "")
    assert_deltas({ { "Deleted", old_obj }, { "Sync", new_obj } }, pop(f))
  end)

  describe("transformer", function()
    local calls
    local function xfrm(o)
      calls[#calls + 1] = o.metadata.name .. ":" .. tostring(o.rv)
      o.xfrm = (o.xfrm or 0) + 1
      return o
    end
    local function mkrv(name, rv) return { metadata = { name = name }, rv = rv } end
    before_each(function() calls = {} end)

    it("transformer: every object is transformed exactly once, tombstones never", function()
      local f = fifo_with{ transform = xfrm }
      assert.is_true(f:add(mkrv("foo", 10)))
      assert.is_true(f:add(mkrv("bar", 11)))
      assert.is_true(f:update(mkrv("foo", 12)))
      assert.is_true(f:delete(mkrv("foo", 15)))
      assert.is_true(f:replace({}, ""))
      assert.is_true(f:add(mkrv("bar", 16)))
      assert.is_true(f:replace({}, ""))

      assert.same({ "foo", "bar" }, f:list_keys())
      assert.same({ "foo:10", "bar:11", "foo:12", "foo:15", "bar:16" }, calls)

      -- foo: a regular deletion, its last message transformed once
      local deltas = pop(f)
      local o = deltas[#deltas].object
      assert.is_false(is_tombstone(o))
      assert.equal("foo", o.metadata.name)
      assert.equal(15, o.rv)
      assert.equal(1, o.xfrm)
      for _, d in ipairs(deltas) do assert.equal(1, d.object.xfrm) end

      -- bar: a tombstone deletion carrying its last message, transformed once (not again as
      -- part of the tombstone)
      deltas = pop(f)
      o = deltas[#deltas].object
      assert.is_true(is_tombstone(o))
      assert.equal("bar", o.key)
      assert.equal("bar", o.obj.metadata.name)
      assert.equal(16, o.obj.rv)
      assert.equal(1, o.obj.xfrm)
      assert.equal(0, #f)
    end)

    it("transformer: applies to replace items, not to resync's Sync nor a deleted tombstone", function()
      local store = known{ mkrv("a", 1) }
      local f = fifo_with{ known_objects = store, transform = xfrm }
      f:resync()
      local deltas = pop(f)
      assert.equal("Sync", deltas[1].type)
      assert.is_nil(deltas[1].object.xfrm)
      assert.same({}, calls)

      f:replace({ mkrv("b", 2) }, "1")
      assert.same({ "b:2" }, calls)
      f:delete(tombstone("b", mkrv("b", 9)))
      assert.same({ "b:2" }, calls)

      deltas = pop(f) -- b: Sync (transformed), then the tombstone as given
      assert_deltas({ { "Sync", { metadata = { name = "b" }, rv = 2, xfrm = 1 } },
                      { "Deleted", tombstone("b", mkrv("b", 9)) } }, deltas)
      deltas = pop(f) -- a: known but not listed
      assert_deltas({ { "Deleted", tombstone("a", mkrv("a", 1)) } }, deltas)
      assert.same({ "b:2" }, calls)
    end)

    it("transformer: a failing transform returns nil, err and enqueues nothing", function()
      local f = fifo_with{ transform = function(o)
        if o.val == "raise" then error("xfrm exploded") end
        return "not a table"
      end }
      local ok, err, code = f:add(mk("a", "raise"))
      assert.is_nil(ok)
      assert.equal("EINVAL", code)
      assert.matches("xfrm exploded", err, 1, true) -- the transform's own error is carried
      ok, err, code = f:add(mk("a", "other"))
      assert.is_nil(ok)
      assert.is_string(err)
      assert.equal("EINVAL", code)
      assert.equal(0, #f)
    end)
  end)

  describe("ReplaceMakesDeletionsForObjectsOnlyInQueue", function()
    local obj, obj_v2 = mk("foo", 2), mk("foo", 3)
    local cases = {
      { "Added object should be deleted on Replace", false,
        function(f)
          f:add(obj)
          f:replace({}, "0")
        end,
        { { "Added", obj }, { "Deleted", tombstone("foo", obj) } } },
      { "Replaced object should have only a single Delete", true,
        function(f)
          f:add(obj)
          f:replace({ obj }, "0")
          f:replace({}, "0")
        end,
        { { "Added", obj }, { "Replaced", obj }, { "Deleted", tombstone("foo", obj) } } },
      { "Deleted object should have only a single Delete", false,
        function(f)
          f:add(obj)
          f:delete(obj)
          f:replace({}, "0")
        end,
        { { "Added", obj }, { "Deleted", obj } } },
      { "Synced objects should have a single delete", false,
        function(f)
          f:add(obj)
          f:replace({ obj }, "0")
          f:replace({ obj }, "0")
          f:replace({}, "0")
        end,
        { { "Added", obj }, { "Sync", obj }, { "Sync", obj }, { "Deleted", tombstone("foo", obj) } } },
      { "Added objects should have a single delete on multiple Replaces", false,
        function(f)
          f:add(obj)
          f:replace({}, "0")
          f:replace({}, "1")
        end,
        { { "Added", obj }, { "Deleted", tombstone("foo", obj) } } },
      { "Added and deleted and added object should be deleted", false,
        function(f)
          f:add(obj)
          f:delete(obj)
          f:add(obj_v2)
          f:replace({}, "0")
        end,
        { { "Added", obj }, { "Deleted", obj }, { "Added", obj_v2 },
          { "Deleted", tombstone("foo", obj_v2) } } },
    }
    for i, case in ipairs(cases) do
      local name, emit_replaced, operations, expected = case[1], case[2], case[3], case[4]
      it(("ReplaceMakesDeletionsForObjectsOnlyInQueue: case %d %s"):format(i, name), function()
        -- with (empty) known objects
        local f = fifo_with{ known_objects = known{}, emit_replaced = emit_replaced }
        operations(f)
        assert_deltas(expected, pop(f))
        assert.equal(0, #f, "expected no extra deltas")

        -- without known objects
        f = fifo_with{ emit_replaced = emit_replaced }
        operations(f)
        assert_deltas(expected, pop(f))
        assert.equal(0, #f, "expected no extra deltas")
      end)
    end
  end)

  describe("misuse", function()
    it("a fifo method called from inside pop's process raises a clear error", function()
      local store = known{ mk("k", 1) }
      local f = fifo_with{ known_objects = store }
      f:add(mk("x", 1))
      local results = {}
      local calls = {
        add = function() return f:add(mk("y", 1)) end,
        update = function() return f:update(mk("y", 1)) end,
        delete = function() return f:delete(mk("x", 1)) end,
        replace = function() return f:replace({ mk("y", 1) }, "1") end,
        resync = function() return f:resync() end,
        pop = function() return f:pop(nil, 0) end,
        add_if_not_present = function()
          return f:add_if_not_present({ { type = "Added", object = mk("y", 1) } })
        end,
        list = function() return f:list() end,
        list_keys = function() return f:list_keys() end,
        get = function() return f:get(mk("x")) end,
        get_by_key = function() return f:get_by_key("x") end,
        has_synced = function() return f:has_synced() end,
        len = function() return f:len() end,
        close = function() return f:close() end,
        is_closed = function() return f:is_closed() end,
      }
      f:pop(function()
        for name, call in pairs(calls) do
          local ok, err = pcall(call)
          results[name] = ok and "no error" or err
        end
        -- the known-objects store is a different lock: reading it is fine
        assert(store:get_by_key("k"))
      end, 1)
      for name in pairs(calls) do
        assert.matches("inside pop's process", results[name], 1, true)
      end
      -- nothing happened to the queue
      assert.equal(0, #f)
      assert.is_false(f:is_closed())
      assert.is_nil(f:get_by_key("y"))
    end)

    it("bad arguments raise naming the argument; bad objects return nil, err", function()
      local f = fifo_with()
      for _, method in ipairs({ "add", "update", "delete" }) do
        local ok, err = pcall(f[method], f, 42)
        assert.is_false(ok)
        assert.matches("bad argument #1 to '" .. method .. "'", err, 1, true)
        local res, msg, code = f[method](f, { metadata = {} })
        assert.is_nil(res)
        assert.is_string(msg)
        assert.equal("ENOKEY", code)
      end
      local ok, err = pcall(f.replace, f, { mk("a"), 7 })
      assert.is_false(ok)
      assert.matches("item #2", err, 1, true)
      local res, msg, code = f:replace({ mk("a"), { metadata = {} } })
      assert.is_nil(res)
      assert.is_string(msg)
      assert.equal("ENOKEY", code)
      assert.equal(0, #f)
      assert.has_error(function() f:pop("not a function") end)
      assert.has_error(function() kinformer.delta_fifo{ known_objects = {} } end)
      assert.has_error(function() kinformer.delta_fifo{ unknown_option = true } end)
    end)
  end)
end)
