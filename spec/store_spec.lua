-- docs/semantics.md, section 2: the indexed store (client-go ThreadSafeStore + Indexer), ported from
-- client-go tools/cache store_test.go, index_test.go and thread_safe_store_test.go, plus the
-- bad-input and decode-once guarantees of docs/api.md.
local kinformer = require "kinformer"

-- client-go's testStoreObject{id, val}: the key is the id.
local function mk(id, val)
  return { metadata = { name = id }, val = val }
end

local function pod(name, fields)
  local p = { metadata = { name = name } }
  for k, v in pairs(fields or {}) do p.metadata[k] = v end
  return p
end

local function sorted(list)
  local copy = {}
  for i, v in ipairs(list) do copy[i] = v end
  table.sort(copy)
  return copy
end

-- Sorted names (metadata.name) of a list of objects.
local function names(objs)
  local out = {}
  for i, o in ipairs(objs) do out[i] = o.metadata.name end
  table.sort(out)
  return out
end

local function vals(objs)
  local out = {}
  for i, o in ipairs(objs) do out[i] = o.val end
  table.sort(out)
  return out
end

local function split(s, sep)
  local out = {}
  for part in (s .. sep):gmatch("(.-)" .. sep) do out[#out + 1] = part end
  return out
end

-- Installs a logger that records every line; returns the list. Restored in after_each.
local function capture_logs()
  local lines = {}
  kinformer.set_logger(function(level, msg) lines[#lines + 1] = { level = level, msg = msg } end)
  return lines
end

describe("store", function()
  after_each(function() kinformer.set_logger(nil) end)

  -- store_test.go doTestStore, run against TestCache's plain store and an indexed one.
  for _, case in ipairs({
    { "plain (no indexers at all)", function() return kinformer.store{ namespace_index = false } end },
    { "default (built-in namespace index)", function() return kinformer.store() end },
    { "indexed", function()
        return kinformer.store{ indexers = { by_val = function(o) return { o.val } end } }
      end },
  }) do
    it("doTestStore: " .. case[1], function()
      local store = case[2]()
      assert.is_true(store:add(mk("foo", "bar")))
      local item = store:get(mk("foo", ""))
      assert.is_table(item)
      assert.equal("bar", item.val)

      assert.is_true(store:update(mk("foo", "baz")))
      item = store:get(mk("foo", ""))
      assert.is_table(item)
      assert.equal("baz", item.val)

      assert.is_true(store:delete(mk("foo", "")))
      assert.is_nil(store:get(mk("foo", "")))
      assert.is_nil(store:get_by_key("foo"))

      -- List
      store:add(mk("a", "b"))
      store:add(mk("c", "d"))
      store:add(mk("e", "e"))
      assert.same({ "b", "d", "e" }, vals(store:list()))
      assert.same({ "a", "c", "e" }, sorted(store:list_keys()))
      assert.equal(3, #store)
      assert.equal(3, store:len())

      -- Replace
      assert.is_true(store:replace({ mk("foo", "foo"), mk("bar", "bar") }, "0"))
      assert.same({ "bar", "foo" }, vals(store:list()))
      assert.same({ "bar", "foo" }, sorted(store:list_keys()))
      assert.is_nil(store:get_by_key("a"))
      assert.equal(2, store:status().items)
      store:close()
    end)
  end

  it("get_by_key's cache follows every write of the key", function()
    local s = kinformer.store()
    local a1 = { metadata = { namespace = "ns", name = "a" }, val = 1 }
    s:add(a1)
    local got = s:get_by_key("ns/a")
    assert.same(a1, kinformer.to_table(got)) -- the stored record's table, not a1 itself
    assert.is_false(rawequal(a1, got))
    assert.equal(got, s:get("ns/a"))
    local a2 = { metadata = { namespace = "ns", name = "a" }, val = 2 }
    s:update(a2)
    assert.equal(2, s:get_by_key("ns/a").val)
    s:delete(a2)
    assert.is_nil(s:get_by_key("ns/a"))
    s:add(a1)
    assert.equal(1, s:get_by_key("ns/a").val)
    local a3 = { metadata = { namespace = "ns", name = "a" }, val = 3 }
    s:replace({ a3 })
    assert.equal(3, s:get_by_key("ns/a").val)
    s:replace({})
    assert.is_nil(s:get_by_key("ns/a"))
  end)

  it("delete of an absent key does nothing; delete takes a tombstone's key", function()
    local store = kinformer.store()
    assert.is_true(store:delete(mk("nope")))
    assert.equal(0, #store)
    store:add(pod("p", { namespace = "ns" }))
    assert.is_true(store:delete(kinformer.tombstone("ns/p")))
    assert.equal(0, #store)
    assert.same({}, store:list_index_func_values("namespace"))
  end)

  -- store_test.go TestIndex / doTestIndex
  it("TestIndex", function()
    local store = kinformer.store{ indexers = { by_val = function(o) return { o.val } end } }
    store:add(mk("a", "b"))
    store:add(mk("c", "b"))
    store:add(mk("e", "f"))
    store:add(mk("g", "h"))
    local expected = { b = { "a", "c" }, f = { "e" }, h = { "g" }, z = {} }
    for value, ids in pairs(expected) do
      -- client-go indexes mkObj("", value); our objects need a name, which Index ignores.
      local found = store:index("by_val", mk("probe", value))
      assert.same(ids, names(found))
      assert.same(ids, names(store:by_index("by_val", value)))
      assert.same(ids, store:index_keys("by_val", value))
    end
  end)

  -- index_test.go TestGetIndexFuncValues
  it("TestGetIndexFuncValues", function()
    local store = kinformer.store{ indexers = {
      testmodes = function(p) return { p.metadata.labels.foo } end,
    } }
    store:add(pod("one", { labels = { foo = "bar" } }))
    store:add(pod("two", { labels = { foo = "bar" } }))
    store:add(pod("tre", { labels = { foo = "biz" } }))
    assert.same({ "bar", "biz" }, sorted(store:list_index_func_values("testmodes")))
  end)

  -- index_test.go TestMultiIndexKeys
  it("TestMultiIndexKeys", function()
    local store = kinformer.store{ indexers = {
      byUser = function(p) return split(p.metadata.annotations.users, ",") end,
    } }
    local pod1 = pod("one", { annotations = { users = "ernie,bert" } })
    local pod2 = pod("two", { annotations = { users = "bert,oscar" } })
    local pod3 = pod("tre", { annotations = { users = "ernie,elmo" } })
    store:add(pod1)
    store:add(pod2)
    store:add(pod3)

    local expected = {
      ernie = { "one", "tre" }, bert = { "one", "two" }, elmo = { "tre" }, oscar = { "two" },
      elmo1 = {},
    }
    for user, pods in pairs(expected) do
      assert.same(pods, names(store:by_index("byUser", user)))
    end
    -- Index(pod1): everything sharing ernie or bert, each once.
    assert.same({ "one", "tre", "two" }, names(store:index("byUser", pod1)))

    store:delete(pod3)
    assert.same({ "one" }, names(store:by_index("byUser", "ernie")))
    assert.same({}, store:by_index("byUser", "elmo"))

    local copy_of_pod2 = pod("two", { annotations = { users = "oscar" } })
    store:update(copy_of_pod2)
    assert.same({ "one" }, names(store:by_index("byUser", "bert")))
    assert.same({ "two" }, names(store:by_index("byUser", "oscar")))
  end)

  -- thread_safe_store_test.go TestThreadSafeStoreDeleteRemovesEmptySetsFromIndex
  it("ThreadSafeStore DeleteRemovesEmptySetsFromIndex", function()
    local store = kinformer.store{ namespace_index = false, indexers = {
      testIndexer = function(o) return { o.metadata.name } end,
    } }
    store:add(mk("testKey"))
    assert.same({ "testKey" }, store:index_keys("testIndexer", "testKey"))
    assert.same({ "testKey" }, store:list_index_func_values("testIndexer"))

    store:delete(mk("testKey"))
    assert.same({}, store:list_index_func_values("testIndexer"))
    assert.same({}, store:index_keys("testIndexer", "testKey"))
  end)

  -- thread_safe_store_test.go TestThreadSafeStoreAddKeepsNonEmptySetPostDeleteFromIndex
  it("ThreadSafeStore AddKeepsNonEmptySetPostDeleteFromIndex", function()
    local store = kinformer.store{ indexers = {
      testIndexer = function() return { "testIndex" } end,
    } }
    store:add(mk("retain"))
    store:add(mk("delete"))
    assert.same({ "delete", "retain" }, store:index_keys("testIndexer", "testIndex"))

    store:delete(mk("delete"))
    assert.same({ "testIndex" }, store:list_index_func_values("testIndexer"))
    assert.same({ "retain" }, store:index_keys("testIndexer", "testIndex"))
  end)

  -- thread_safe_store_test.go TestThreadSafeStoreIndexingFunctionsWithMultipleValues
  it("ThreadSafeStore IndexingFunctionsWithMultipleValues", function()
    local store = kinformer.store{ indexers = {
      testIndexer = function(o) return split(o.val, ",") end,
    } }
    local function compare(value, keys)
      assert.same(keys, store:index_keys("testIndexer", value))
      local present = false
      for _, v in ipairs(store:list_index_func_values("testIndexer")) do
        present = present or v == value
      end
      assert.equal(#keys > 0, present, "value " .. value .. " listed iff it has keys")
    end

    store:add(mk("key1", "foo"))
    store:add(mk("key2", "bar"))
    compare("foo", { "key1" })
    compare("bar", { "key2" })

    store:update(mk("key2", "foo,bar"))
    compare("foo", { "key1", "key2" })
    compare("bar", { "key2" })

    store:update(mk("key1", "foo,bar"))
    compare("foo", { "key1", "key2" })
    compare("bar", { "key1", "key2" })

    store:add(mk("key3", "foo,bar,baz"))
    compare("foo", { "key1", "key2", "key3" })
    compare("bar", { "key1", "key2", "key3" })
    compare("baz", { "key3" })

    store:update(mk("key1", "foo"))
    compare("foo", { "key1", "key2", "key3" })
    compare("bar", { "key2", "key3" })
    compare("baz", { "key3" })

    store:update(mk("key2", "bar"))
    compare("foo", { "key1", "key3" })
    compare("bar", { "key2", "key3" })
    compare("baz", { "key3" })

    store:delete(mk("key1"))
    compare("foo", { "key3" })
    compare("bar", { "key2", "key3" })
    compare("baz", { "key3" })

    store:delete(mk("key3"))
    compare("foo", {})
    compare("bar", { "key2" })
    compare("baz", {})
  end)

  it("index_keys is sorted; index() deduplicates objects sharing several values", function()
    local store = kinformer.store{ indexers = { tags = function(o) return o.tags end } }
    for _, id in ipairs({ "m", "c", "x", "a", "q" }) do
      store:add({ metadata = { name = id }, tags = { "t1", "t2" } })
    end
    assert.same({ "a", "c", "m", "q", "x" }, store:index_keys("tags", "t1"))
    local found = store:index("tags", { metadata = { name = "probe" }, tags = { "t1", "t2" } })
    assert.same({ "a", "c", "m", "q", "x" }, names(found))
  end)

  it("an index function returning nil or {} indexes the object under no value", function()
    local store = kinformer.store{ indexers = {
      opt = function(o) if o.val then return { o.val } end end,
      empty = function() return {} end,
    } }
    assert.is_true(store:add(mk("a")))
    assert.is_true(store:add(mk("b", "v")))
    assert.same({ "v" }, store:list_index_func_values("opt"))
    assert.same({}, store:list_index_func_values("empty"))
    assert.same({ "b" }, store:index_keys("opt", "v"))
    assert.same({}, store:index("opt", mk("probe")))
  end)

  it("built-in namespace index, and namespace_index = false", function()
    local store = kinformer.store()
    store:add(pod("a", { namespace = "ns1" }))
    store:add(pod("b", { namespace = "ns1" }))
    store:add(pod("c", { namespace = "ns2" }))
    store:add(pod("n"))
    assert.equal("namespace", kinformer.NAMESPACE_INDEX)
    assert.same({ "ns1/a", "ns1/b" }, store:index_keys("namespace", "ns1"))
    assert.same({ "n" }, store:index_keys("namespace", ""))
    assert.same({ "", "ns1", "ns2" }, sorted(store:list_index_func_values("namespace")))
    store:update(pod("c", { namespace = "ns2", labels = { x = "y" } }))
    assert.same({ "ns2/c" }, store:index_keys("namespace", "ns2"))

    local bare = kinformer.store{ namespace_index = false }
    bare:add(pod("a", { namespace = "ns1" }))
    assert.has_error(function() bare:by_index("namespace", "ns1") end)
    assert.same({}, bare:list_index_func_values("namespace"))
  end)

  -- client-go's rule: Index, ByIndex and IndexKeys fail for an index that does not exist,
  -- ListIndexFuncValues returns an empty list.
  it("unknown index: index, by_index and index_keys raise at the caller's line; list_index_func_values is empty", function()
    local store = kinformer.store()
    store:add(mk("a", "v"))
    -- The calls are statements, not `return f()`: LuaJIT's tail calls drop the caller's frame.
    local line = debug.getinfo(1, "l").currentline
    for i, case in ipairs({
      { "index", function() store:index("nope", mk("a")) end },
      { "by_index", function() store:by_index("nope", "v") end },
      { "index_keys", function() store:index_keys("nope", "v") end },
    }) do
      local ok, err = pcall(case[2])
      assert.is_false(ok)
      assert.matches("bad argument #1 to '" .. case[1] .. "'", err, 1, true)
      assert.matches("store_spec.lua:" .. line + 1 + i .. ":", err, 1, true)
    end
    assert.same({}, store:list_index_func_values("nope"))
    -- the same for an index the store had no values for yet, and one that exists
    store:add_indexers{ empty = function() return {} end }
    assert.same({}, store:list_index_func_values("empty"))
    assert.same({}, store:by_index("empty", "v"))
  end)

  it("list and list_keys take one options table: an unknown option raises instead of being ignored", function()
    local store = kinformer.store()
    for i = 1, 11 do store:add(pod("p" .. i, { namespace = i % 2 == 0 and "shop" or "other" })) end
    for _, method in ipairs({ "list", "list_keys" }) do
      local line = debug.getinfo(1, "l").currentline
      local ok, err = pcall(function() store[method](store, { namespace = "shop", label = "x" }) end)
      assert.is_false(ok)
      assert.matches("bad argument #1 to '" .. method .. "' (unknown option 'label')", err, 1, true)
      assert.matches("store_spec.lua:" .. line + 1 .. ":", err, 1, true)
      assert.has_error(function() store[method](store, "shop") end)
      assert.equal(11, #store[method](store))
      assert.equal(11, #store[method](store, nil))
      assert.equal(5, #store[method](store, { namespace = "shop" }))
    end
  end)

  it("replace rebuilds every index and drops values of the old content", function()
    local store = kinformer.store{ indexers = { by_val = function(o) return { o.val } end } }
    store:add(mk("a", "old"))
    store:add(mk("b", "old"))
    assert.is_true(store:replace({ mk("b", "new"), mk("c", "new"), mk("d", "other") }, "7"))
    assert.same({ "new", "other" }, sorted(store:list_index_func_values("by_val")))
    assert.same({}, store:by_index("by_val", "old"))
    assert.same({ "b", "c" }, store:index_keys("by_val", "new"))
    -- a later duplicate of a key wins
    assert.is_true(store:replace({ mk("x", "1"), mk("x", "2") }))
    assert.equal(1, #store)
    assert.equal("2", store:get_by_key("x").val)
    assert.same({ "2" }, store:list_index_func_values("by_val"))
  end)

  describe("add_indexers", function()
    it("indexes the existing items into the new indexer only", function()
      local first_calls, by_val_calls = 0, 0
      local store = kinformer.store{ indexers = {
        first = function() first_calls = first_calls + 1; return { "all" } end,
      } }
      store:add(mk("a", "x"))
      store:add(mk("b", "y"))
      store:add(mk("c", "x"))
      assert.equal(3, first_calls)

      assert.is_true(store:add_indexers{
        by_val = function(o) by_val_calls = by_val_calls + 1; return { o.val } end,
      })
      assert.equal(3, by_val_calls)
      assert.equal(3, first_calls) -- the existing indexer was not run again
      assert.same({ "a", "c" }, store:index_keys("by_val", "x"))
      assert.same({ "b" }, store:index_keys("by_val", "y"))
      assert.same({ "a", "b", "c" }, store:index_keys("first", "all"))

      -- later writes maintain the new index too
      store:update(mk("a", "y"))
      store:delete(mk("b"))
      assert.same({ "c" }, store:index_keys("by_val", "x"))
      assert.same({ "a" }, store:index_keys("by_val", "y"))
    end)

    it("returns nil, err, \"EEXIST\" for an existing name and registers nothing", function()
      local store = kinformer.store{ indexers = { by_val = function(o) return { o.val } end } }
      store:add(mk("a", "x"))
      local ok, err, code = store:add_indexers{ by_val = function() return { "z" } end }
      assert.is_nil(ok)
      assert.is_string(err)
      assert.equal("EEXIST", code)
      ok, err, code = store:add_indexers{ namespace = function() return {} end,
                                          fresh = function() return { "f" } end }
      assert.is_nil(ok)
      assert.equal("EEXIST", code)
      assert.has_error(function() store:by_index("fresh", "f") end)
      -- the original indexer is intact
      assert.same({ "a" }, store:index_keys("by_val", "x"))
      assert.same({}, store:by_index("by_val", "z"))
    end)

    it("the store's own indexers option may not take the namespace index's name", function()
      local line = debug.getinfo(1, "l").currentline
      local ok, err = pcall(function() kinformer.store{ indexers = { namespace = print } } end)
      assert.is_false(ok)
      assert.matches("bad argument #1 to 'store'", err, 1, true)
      assert.matches("store_spec.lua:" .. line + 1 .. ":", err, 1, true)
      local st = kinformer.store{ namespace_index = false,
                                  indexers = { namespace = function() return { "x" } end } }
      st:add(mk("a"))
      assert.same({ "a" }, st:index_keys("namespace", "x"))
    end)

    it("rejects non-function indexers and non-string names", function()
      local store = kinformer.store()
      assert.has_error(function() store:add_indexers{ bad = "not a function" } end)
      assert.has_error(function() store:add_indexers{ [1] = function() end } end)
      assert.has_error(function() store:add_indexers("x") end)
    end)
  end)

  describe("bad input", function()
    it("a non-table object raises naming the argument", function()
      local store = kinformer.store()
      for _, method in ipairs({ "add", "update", "delete", "get" }) do
        local ok, err = pcall(store[method], store, 42)
        assert.is_false(ok)
        assert.matches("bad argument #1 to '" .. method .. "'", err, 1, true)
        assert.matches("number", err, 1, true)
      end
      local ok, err = pcall(store.index, store, "namespace", "x")
      assert.is_false(ok)
      assert.matches("bad argument #2 to 'index'", err, 1, true)
      ok, err = pcall(store.replace, store, { mk("a"), 7 })
      assert.is_false(ok)
      assert.matches("item #2", err, 1, true)
      assert.has_error(function() store:replace("x") end)
      assert.has_error(function() store:get_by_key({}) end)
      assert.equal(0, #store)
    end)

    it("an object without metadata.name returns nil, err and changes nothing", function()
      local store = kinformer.store()
      store:add(mk("keep", "1"))
      for _, bad in ipairs({ { metadata = {} }, { metadata = { namespace = "ns" } }, { val = 1 } }) do
        for _, method in ipairs({ "add", "update", "delete", "get" }) do
          local res, err, code = store[method](store, bad)
          assert.is_nil(res)
          assert.is_string(err)
          assert.equal("ENOKEY", code)
        end
      end
      -- replace with one bad item: nil, err, code; old content kept
      local res, err, code = store:replace({ mk("x"), { metadata = {} } })
      assert.is_nil(res)
      assert.is_string(err)
      assert.equal("ENOKEY", code)
      assert.same({ "keep" }, store:list_keys())
    end)

    it("a key with two slashes: split_key returns nil, err; get_by_key finds nothing", function()
      local ns, err, code = kinformer.split_key("a/b/c")
      assert.is_nil(ns)
      assert.is_string(err)
      assert.equal("ENOKEY", code)
      local store = kinformer.store()
      assert.is_nil(store:get_by_key("a/b/c"))
    end)

    describe("an index function that fails during a write", function()
      local store, logs
      local function by_mode(o)
        if o.mode == "raise" then error("boom in by_mode") end
        if o.mode == "string" then return "just-a-string" end
        if o.mode == "nonstring" then return { "fine", 5 } end
        if o.mode == "number" then return 17 end
        return { o.mode }
      end

      before_each(function()
        logs = capture_logs()
        store = kinformer.store{ indexers = {
          by_mode = by_mode,
          by_val = function(o) return { o.val } end,
        } }
        assert.is_true(store:add({ metadata = { name = "other", namespace = "ns" }, mode = "a",
          val = "o" }))
        assert.is_true(store:add({ metadata = { name = "x", namespace = "ns" }, mode = "a",
          val = "1" }))
        assert.same({ "ns/other", "ns/x" }, store:index_keys("by_mode", "a"))
      end)

      local function check_consistent(mode, val, errors)
        -- the object is stored, with its new content
        local got = store:get_by_key("ns/x")
        assert.equal(mode, got.mode)
        assert.equal(val, got.val)
        assert.equal(2, #store)
        -- the other indexes are right
        assert.same({ "ns/x" }, store:index_keys("by_val", val))
        assert.same({ "1", "o" }, sorted(store:list_index_func_values("by_val")))
        assert.same({ "ns/other", "ns/x" }, store:index_keys("namespace", "ns"))
        -- the failing index left the object out, with no stale value of its previous version
        assert.same({ "ns/other" }, store:index_keys("by_mode", "a"))
        assert.same({ "a" }, store:list_index_func_values("by_mode"))
        assert.same({ "other" }, names(store:index("by_mode", { metadata = { name = "p" },
          mode = "a" })))
        -- counted and logged
        local st = store:status()
        assert.equal(errors, st.index_errors)
        assert.matches("by_mode", st.last_index_error, 1, true)
        assert.equal(errors, #logs)
        assert.matches("index 'by_mode'", logs[#logs].msg, 1, true)
        assert.equal("error", logs[#logs].level)
      end

      it("raises: the write returns true, err and the store stays consistent", function()
        local ok, err, code = store:update({ metadata = { name = "x", namespace = "ns" },
          mode = "raise", val = "1" })
        assert.is_true(ok)
        assert.equal("EINDEX", code)
        assert.matches("boom in by_mode", err, 1, true) -- the index function's own error
        check_consistent("raise", "1", 1)
      end)

      it("returns a string: true, err saying a list is expected", function()
        local ok, err, code = store:add({ metadata = { name = "x", namespace = "ns" },
          mode = "string", val = "1" })
        assert.is_true(ok)
        assert.is_string(err)
        assert.equal("EINDEX", code)
        check_consistent("string", "1", 1)
      end)

      it("returns a number: true, err naming the type", function()
        local ok, err, code = store:add({ metadata = { name = "x", namespace = "ns" },
          mode = "number", val = "1" })
        assert.is_true(ok)
        assert.is_string(err)
        assert.equal("EINDEX", code)
        check_consistent("number", "1", 1)
      end)

      it("returns a list with a non-string: true, err naming the value; no partial values", function()
        local ok, err, code = store:add({ metadata = { name = "x", namespace = "ns" },
          mode = "nonstring", val = "1" })
        assert.is_true(ok)
        assert.is_string(err)
        assert.equal("EINDEX", code)
        check_consistent("nonstring", "1", 1)
        assert.same({}, store:by_index("by_mode", "fine"))
      end)

      it("recovers on the next good write and counts every failure", function()
        store:add({ metadata = { name = "x", namespace = "ns" }, mode = "raise", val = "1" })
        assert.is_true(store:add({ metadata = { name = "x", namespace = "ns" }, mode = "b",
          val = "1" }))
        assert.same({ "ns/x" }, store:index_keys("by_mode", "b"))
        assert.same({ "a", "b" }, sorted(store:list_index_func_values("by_mode")))
        store:add({ metadata = { name = "x", namespace = "ns" }, mode = "string", val = "1" })
        assert.same({ "a" }, store:list_index_func_values("by_mode"))
        assert.equal(2, store:status().index_errors)
        assert.equal(2, #logs)
      end)

      it("during replace: true, err; every object stored, the failing one left out", function()
        local ok, err, code = store:replace({
          { metadata = { name = "other", namespace = "ns" }, mode = "a", val = "o" },
          { metadata = { name = "x", namespace = "ns" }, mode = "raise", val = "1" },
        }, "5")
        assert.is_true(ok)
        assert.equal("EINDEX", code)
        assert.matches("boom in by_mode", err, 1, true)
        check_consistent("raise", "1", 1)
      end)

      it("during add_indexers: true, err; the new index leaves the object out", function()
        local ok, err, code = store:add_indexers{ late = function(o)
          if o.metadata.name == "x" then error("late failure") end
          return { "v" }
        end }
        assert.is_true(ok)
        assert.equal("EINDEX", code)
        assert.matches("late failure", err, 1, true)
        assert.same({ "ns/other" }, store:index_keys("late", "v"))
        assert.equal(1, store:status().index_errors)
        assert.equal(1, #logs)
      end)

      it("store:index with a failing function returns nil, err", function()
        local res, err, code = store:index("by_mode", { metadata = { name = "p" }, mode = "raise" })
        assert.is_nil(res)
        assert.equal("EINDEX", code)
        assert.matches("boom in by_mode", err, 1, true)
      end)
    end)

    it("a store write from inside an index function raises a clear error", function()
      local store
      local inner_errors = {}
      store = kinformer.store{ indexers = { sneaky = function(o)
        if o.metadata.name == "outer" then
          for _, call in ipairs({
            function() return store:add(mk("inner")) end,
            function() return store:delete(mk("outer")) end,
            function() return store:replace({ mk("inner") }) end,
            function() return store:add_indexers{ more = function() return {} end } end,
          }) do
            local ok, err = pcall(call)
            inner_errors[#inner_errors + 1] = ok and "no error" or err
          end
          -- reads are allowed
          assert(store:get_by_key("before") ~= nil)
        end
        return { "v" }
      end } }
      store:add(mk("before"))
      local ok, err = store:add(mk("outer"))
      assert.is_true(ok)
      assert.is_nil(err)
      assert.equal(4, #inner_errors)
      for _, msg in ipairs(inner_errors) do
        assert.matches("inside an index function", msg, 1, true)
      end
      assert.same({ "before", "outer" }, sorted(store:list_keys()))
      assert.same({ "before", "outer" }, store:index_keys("sneaky", "v"))
      assert.has_error(function() store:by_index("more", "x") end)
    end)

    it("a closed store raises on use; close twice is fine", function()
      local store = kinformer.store()
      store:add(mk("a"))
      store:close()
      store:close()
      local ok, err = pcall(store.add, store, mk("b"))
      assert.is_false(ok)
      assert.matches("closed", err, 1, true)
      assert.has_error(function() store:get_by_key("a") end)
      assert.has_error(function() store:get("a") end, "kinformer: store is closed")
      local other = kinformer.store()
      assert.has_error(function() other.get({}, "a") end)
      assert.has_error(function() other.get(kinformer.delta_fifo(), "a") end)
    end)
  end)

  describe("arrays handed out again until they change", function()
    local function mkstore()
      local store = kinformer.store{ indexers = { by_val = function(o) return { o.val } end } }
      for _, o in ipairs{ mk("p", "1"), mk("q", "1"), mk("r", "2") } do store:add(o) end
      store:add(pod("a", { namespace = "x" }))
      store:add(pod("c", { namespace = "y" }))
      return store
    end

    it("by_index and index_keys: the same array until a write changes what it holds", function()
      local store = mkstore()
      local one, keys1, two = store:by_index("by_val", "1"), store:index_keys("by_val", "1"),
        store:by_index("by_val", "2")
      assert.same({ "p", "q" }, names(one))
      assert.is_true(rawequal(one, store:by_index("by_val", "1")))
      assert.is_true(rawequal(keys1, store:index_keys("by_val", "1")))
      -- A write under another value leaves them as they are.
      store:add(mk("s", "2"))
      assert.is_true(rawequal(one, store:by_index("by_val", "1")))
      assert.is_true(rawequal(keys1, store:index_keys("by_val", "1")))
      local two_now = store:by_index("by_val", "2")
      assert.is_false(rawequal(two, two_now))
      assert.same({ "r", "s" }, names(two_now))
      assert.same({ "r" }, names(two)) -- an array handed out never changes
      -- An object under the value replaced, its values the same: a new array holding its new
      -- table.
      local p1 = store:get_by_key("p")
      store:update(mk("p", "1"))
      local one_now = store:by_index("by_val", "1")
      assert.is_false(rawequal(one, one_now))
      local found = false
      for _, o in ipairs(one_now) do
        found = found or (o.metadata.name == "p" and not rawequal(o, p1))
      end
      assert.is_true(found)
      -- A key leaving the value, then deleted.
      store:update(mk("q", "3"))
      assert.same({ "p" }, names(store:by_index("by_val", "1")))
      assert.same({ "p" }, store:index_keys("by_val", "1"))
      store:delete(mk("p"))
      assert.same({}, store:by_index("by_val", "1"))
      assert.same({}, store:index_keys("by_val", "1"))
      -- The value comes back.
      store:add(mk("t", "1"))
      assert.same({ "t" }, store:index_keys("by_val", "1"))
    end)

    it("list and list_keys: the same array until any write; list{ namespace } as by_index", function()
      local store = mkstore()
      local all, keys = store:list(), store:list_keys()
      assert.is_true(rawequal(all, store:list()))
      assert.is_true(rawequal(all, store:list{}))
      assert.is_true(rawequal(keys, store:list_keys()))
      assert.is_true(rawequal(store:by_index("namespace", "x"), store:list{ namespace = "x" }))
      assert.is_true(rawequal(store:index_keys("namespace", "x"), store:list_keys{ namespace = "x" }))
      store:add(pod("b", { namespace = "x" }))
      assert.is_false(rawequal(all, store:list()))
      assert.equal(6, #store:list())
      assert.equal(6, #store:list_keys())
      assert.same({ "x/a", "x/b" }, store:list_keys{ namespace = "x" })
      -- A selector is answered afresh each time.
      assert.is_false(rawequal(store:list{ label_selector = "" }, store:list{ label_selector = "" }))
      -- replace: everything anew.
      local before = store:by_index("by_val", "2")
      store:replace({ mk("r", "2") })
      assert.is_false(rawequal(before, store:by_index("by_val", "2")))
      assert.same({ "r" }, store:list_keys())
    end)

    it("arrays are read-only: adding raises, a changed length is rebuilt, not handed out", function()
      local store = mkstore()
      local one = store:by_index("by_val", "1")
      local err = select(2, pcall(function() one[#one + 1] = "x" end))
      assert.matches("read-only", err, 1, true)
      assert.equal("kinformer: read-only", getmetatable(one))
      assert.has_error(function() setmetatable(one, nil) end)
      rawset(one, 3, "x")
      local again = store:by_index("by_val", "1")
      assert.is_false(rawequal(one, again))
      assert.same({ "p", "q" }, names(again))
      local keys = store:list_keys()
      table.remove(keys)
      assert.equal(5, #store:list_keys())
    end)

    it("keeps no array nobody holds: values never asked again cost nothing", function()
      local store = mkstore()
      local probe = setmetatable({}, { __mode = "v" })
      probe[1], probe[2], probe[3] = store:by_index("by_val", "1"), store:list(), store:index_keys("by_val", "2")
      collectgarbage("collect")
      collectgarbage("collect")
      assert.is_nil(probe[1])
      assert.is_nil(probe[2])
      assert.is_nil(probe[3])
      assert.same({ "p", "q" }, store:index_keys("by_val", "1"))
    end)
  end)

  describe("decode once", function()
    it("get_by_key returns the very same table twice, and get/list/by_index agree", function()
      local store = kinformer.store()
      store:replace({ pod("a", { namespace = "ns" }) })
      local t1 = store:get_by_key("ns/a")
      local t2 = store:get_by_key("ns/a")
      assert.is_table(t1)
      assert.is_true(rawequal(t1, t2))
      assert.is_true(rawequal(t1, store:get(pod("a", { namespace = "ns" }))))
      assert.is_true(rawequal(t1, store:list()[1]))
      assert.is_true(rawequal(t1, store:by_index("namespace", "ns")[1]))
    end)

    it("an object popped from a fifo and added to a store is the table get_by_key returns", function()
      local fifo = kinformer.delta_fifo()
      local store = kinformer.store()
      fifo:add(pod("a", { namespace = "ns", labels = { k = "v" } }))
      local deltas = fifo:pop()
      local popped = deltas[1].object
      assert.is_true(store:add(popped))
      assert.is_true(rawequal(popped, store:get_by_key("ns/a")))
      assert.is_true(rawequal(popped, store:get_by_key("ns/a")))
      assert.equal("v", store:get_by_key("ns/a").metadata.labels.k)
    end)

    it("a user table edited and re-added stores the new content", function()
      local by_val_seen = {}
      local a = kinformer.store{ indexers = { by_val = function(o)
        by_val_seen[#by_val_seen + 1] = o.val
        return { tostring(o.val) }
      end } }
      local t = { metadata = { name = "x" }, val = 1 }
      assert.is_true(a:add(t))
      t.val = 2
      assert.is_true(a:add(t))
      assert.same({ 1, 2 }, by_val_seen)
      assert.same({ "x" }, a:index_keys("by_val", "2"))
      assert.same({}, a:by_index("by_val", "1"))

      -- Read the stored record back through another path once t is linked to a newer record:
      -- a resync decodes a's record afresh.
      local b = kinformer.store()
      t.val = 3
      assert.is_true(b:add(t))
      local fifo = kinformer.delta_fifo{ known_objects = a }
      fifo:resync()
      local deltas = fifo:pop()
      assert.equal("Sync", deltas[1].type)
      assert.equal(2, deltas[1].object.val)
      assert.is_false(rawequal(t, deltas[1].object))
    end)

    it("a key read before: get after a write hands out the table the index functions read", function()
      local seen = setmetatable({}, { __mode = "v" }) -- tables the index function read
      local store = kinformer.store{ indexers = { by_val = function(o)
        seen[#seen + 1] = o
        return { tostring(o.val) }
      end } }
      assert.is_true(store:add({ metadata = { name = "read" }, val = 1 }))
      assert.is_true(store:add({ metadata = { name = "unread" }, val = 1 }))
      assert.equal(1, store:get_by_key("read").val)
      assert.is_true(store:update({ metadata = { name = "read" }, val = 2 }))
      local read_at = #seen
      assert.is_true(store:update({ metadata = { name = "unread" }, val = 3 }))
      local unread_at = #seen
      collectgarbage("collect")
      collectgarbage("collect")
      -- The store keeps the table of the key read before (and hands it out), not the other.
      assert.is_table(seen[read_at])
      assert.is_nil(seen[unread_at])
      local got = store:get_by_key("read")
      assert.equal(2, got.val)
      assert.is_true(rawequal(seen[read_at], got))
      assert.is_true(rawequal(got, store:by_index("by_val", "2")[1]))
      assert.equal(3, store:get_by_key("unread").val)
    end)
  end)
end)
