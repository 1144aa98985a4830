-- The one rule for objects (docs/api.md, "Objects: numbers and mutability"), on every path that
-- hands objects out: an informer's cache and handlers (against the fake API server), REST results,
-- kinformer.store and a DeltaFIFO fed from Lua tables, the processor's sink and transform,
-- tombstones, the shared cache's reader, to_table.
-- Numbers: on Lua 5.4 a JSON number without a fraction and without an exponent that fits in
-- 64 bits is an integer, any other a float; on LuaJIT every number is a double.
-- Mutability: what a cache hands out is read-only (assigning a member it does not hold raises,
-- naming kinformer.to_table); REST results and to_table copies are plain mutable tables.
local kinformer = require "kinformer"
local core = require "kinformer.core"
local cjson = require "cjson.safe"
local fake = require "support.fake_apiserver"
local pump = require "support.pump"

local HAS_INTEGERS = math.type ~= nil -- Lua 5.4; LuaJIT has doubles only
local function kind(x) return math.type and math.type(x) or type(x) end

local WIDGETS = "/apis/example.com/v1/namespaces/default/widgets"
-- Sent as text: the fake server reads it with Python's json and writes 1e3 back as 1000.0 and
-- 1e300 as 1e+300, which keeps one float with a fraction and one with an exponent.
local WIDGET_JSON = '{"apiVersion":"example.com/v1","kind":"Widget",' ..
  '"metadata":{"name":"w","namespace":"default"},"spec":{"replicas":3,' ..
  '"big":9007199254740993,"neg":-4,"exp":1e3,"ratio":1.0,"huge":1e300,' ..
  '"over":9223372036854775808,"half":2.5,"ports":[80,443],"nothing":null}}'

-- The numbers of WIDGET_JSON's spec, read from an object made from that JSON; from_lua: from the
-- spec decoded into a Lua table and written again, where 1e3 and 1.0 are integral floats, which
-- kinformer writes without a fraction ("1000", "1"), so they read back as integers.
local function check_spec_numbers(spec, where, from_lua)
  where = where or ""
  if HAS_INTEGERS and from_lua then
    for name, want in pairs{ replicas = 3, big = 9007199254740993, neg = -4, exp = 1000,
                             ratio = 1 } do
      assert.equal("integer", math.type(spec[name]), where .. name)
      assert.equal(want, spec[name], where .. name)
    end
    for name, want in pairs{ half = 2.5, huge = 1e300, over = 2 ^ 63 } do
      assert.equal("float", math.type(spec[name]), where .. name)
      assert.equal(want, spec[name], where .. name)
    end
  elseif HAS_INTEGERS then
    for name, want in pairs{ replicas = 3, big = 9007199254740993, neg = -4 } do
      assert.equal("integer", math.type(spec[name]), where .. name)
      assert.equal(want, spec[name], where .. name)
    end
    assert.equal("3", tostring(spec.replicas))
    assert.equal("3", spec.replicas .. "")
    assert.equal("9007199254740993", tostring(spec.big)) -- 2^53 + 1: exact as an integer only
    assert.equal("-4", tostring(spec.neg))
    assert.equal("integer", math.type(spec.ports[1]))
    local t = {}
    t[spec.replicas] = "x"
    assert.equal("x", t[3])
    assert.equal("3", ("%d"):format(spec.replicas))
    for name, want in pairs{ exp = "1000.0", ratio = "1.0", half = "2.5", huge = "1e+300",
                             over = "9.2233720368548e+18" } do
      assert.equal("float", math.type(spec[name]), where .. name)
      assert.equal(want, tostring(spec[name]), where .. name)
    end
  else
    assert.equal("3", tostring(spec.replicas))
    assert.equal(2 ^ 53, spec.big) -- a double: 2^53 + 1 rounds to 2^53, as it always did
    assert.equal(-4, spec.neg)
    assert.equal("1000", tostring(spec.exp))
    assert.equal("1", tostring(spec.ratio))
    assert.equal(2.5, spec.half)
  end
end

-- assigning `field` on t raises kinformer's read-only error, which names the copy to make
local function check_read_only(t, field, what)
  local ok, err = pcall(function() t[field] = 1 end)
  assert.is_false(ok, what)
  assert.matches("read%-only", tostring(err), 1, false)
  assert.matches("kinformer.to_table", tostring(err), 1, true)
end

local function check_mutable(t)
  t.added = 1
  t.spec = t.spec or {}
  t.spec.replicas = 7
  assert.equal(1, t.added)
  assert.equal(7, t.spec.replicas)
end

describe("the object rule against the API server", function()
  local srv, client

  setup(function()
    srv = fake.start{ quiet = true, args = { "--widget-crd" } }
    client = assert(kinformer.client{ server = srv.url })
    local code = srv:request("POST", WIDGETS, WIDGET_JSON)
    assert.equal(201, code)
  end)
  teardown(function() srv:stop() end)

  it("REST get and list: numbers by the rule, plain mutable tables, null is cjson.null", function()
    local w = assert(client:get("widgets.example.com", "default/w"))
    check_spec_numbers(w.spec, "get: ")
    assert.equal(1, w.metadata.generation)
    assert.equal(kind(1), kind(w.metadata.generation))
    assert.is_nil(getmetatable(w))
    check_mutable(w)
    local list = assert(client:list("widgets.example.com", { namespace = "default" }))
    check_spec_numbers(list.items[1].spec, "list: ")
    check_mutable(list.items[1])
    list.items[2] = "mine"
    assert.equal("mine", list.items[2])
    -- JSON null is cjson.null, as REST callers compare it
    assert.equal(cjson.null, w.spec.nothing)
    assert.equal(cjson.null, list.items[1].spec.nothing)
    -- a written integer comes back an integer; an integral float comes back an integer too
    local put = assert(client:patch("widgets.example.com", "default/w",
                                    { spec = { replicas = 5, ratio = 2.0, half = 0.25 } }))
    assert.equal(5, put.spec.replicas)
    assert.equal(kind(1), kind(put.spec.replicas))
    assert.equal(2, put.spec.ratio)
    assert.equal(kind(1), kind(put.spec.ratio)) -- written "2": an integer on Lua 5.4
    assert.equal(0.25, put.spec.half)
    if HAS_INTEGERS then assert.equal("float", math.type(put.spec.half)) end
    -- the object as it was, for the cases below
    assert.equal(200, (srv:request("PUT", WIDGETS .. "/w", WIDGET_JSON)))
  end)

  it("an informer's cache and handlers: numbers by the rule, read-only objects", function()
    local inf = assert(client:informer{ resource = "widgets.example.com", namespace = "default" })
    local seen = {}
    inf:add_handler{ on_add = function(obj) seen[#seen + 1] = obj end }
    assert(inf:start())
    assert(inf:wait_for_sync(5))
    assert.is_true(pump(inf, 5, function() return #seen == 1 end))
    local store = inf:store()
    local w = store:get("default/w")
    check_spec_numbers(w.spec, "cache: ")
    check_spec_numbers(seen[1].spec, "handler: ")
    assert.equal(cjson.null, w.spec.nothing)
    check_read_only(w, "extra", "a member never read")
    check_read_only(w, "status", "an absent member")
    check_read_only(w.metadata, "extra", "metadata")
    check_read_only(seen[1], "extra", "a handler's object")
    check_read_only(store:list()[1], "extra", "list")
    -- to_table: a plain mutable copy with the same numbers
    local copy = kinformer.to_table(w)
    check_spec_numbers(copy.spec, "to_table: ")
    check_mutable(copy)
    assert.equal(3, w.spec.replicas)
    inf:stop()
  end)
end)

describe("the object rule on objects built in Lua", function()
  -- WIDGET_JSON's spec as a Lua table: 1e3 and 1.0 are integral floats here.
  local function widget(name)
    return { apiVersion = "example.com/v1", kind = "Widget",
             metadata = { name = name, namespace = "default" },
             spec = core.decode(WIDGET_JSON).spec }
  end

  it("kinformer.store: get hands out the record's read-only table, numbers by the rule", function()
    local s = kinformer.store{ indexers = { by_replicas = function(o)
      check_read_only(o, "extra", "an index function's object")
      return { tostring(o.spec.replicas) }
    end } }
    local mine = widget("a")
    mine.spec.exact = 1.0     -- written "1": an integer when read back
    mine.spec.third = 1 / 3
    assert(s:add(mine))
    local got = s:get_by_key("default/a")
    assert.is_false(rawequal(mine, got))
    assert.equal(got, s:get_by_key("default/a")) -- the same table until the object changes
    assert.same({ "default/a" }, s:index_keys("by_replicas", "3"))
    assert.equal(3, got.spec.replicas)
    assert.equal(kind(1), kind(got.spec.replicas))
    assert.equal(9007199254740993, got.spec.big)
    assert.equal(kind(1), kind(got.spec.big))
    assert.equal(-4, got.spec.neg)
    -- floats with integral values are written without a fraction and read back as integers;
    -- the others stay floats
    assert.equal(1000, got.spec.exp)
    assert.equal(kind(1), kind(got.spec.exp))
    assert.equal(1, got.spec.exact)
    assert.equal(kind(1), kind(got.spec.exact))
    assert.equal(2.5, got.spec.half)
    assert.equal(1 / 3, got.spec.third)
    if HAS_INTEGERS then
      assert.equal("float", math.type(got.spec.half))
      assert.equal("float", math.type(got.spec.huge))
      assert.equal("float", math.type(got.spec.over))
      assert.equal("1000", tostring(got.spec.exp))
    end
    check_read_only(got, "extra", "store:get")
    check_read_only(got.metadata, "labels", "store:get metadata")
    check_read_only(s:list()[1], "extra", "store:list")
    check_read_only(s:by_index("namespace", "default")[1], "extra", "store:by_index")
    -- the table written stays the caller's: mutable, its numbers as written, and writing it
    -- again stores the new content
    mine.spec.replicas = 4
    assert.equal(3, s:get_by_key("default/a").spec.replicas)
    assert(s:update(mine))
    assert.equal(4, s:get_by_key("default/a").spec.replicas)
    assert.same({ "default/a" }, s:index_keys("by_replicas", "4"))
    if HAS_INTEGERS then assert.equal("float", math.type(mine.spec.exact)) end
    -- a table kinformer made, handed back, is kept as it is
    local again = s:get_by_key("default/a")
    assert(s:update(again))
    assert.equal(again, s:get_by_key("default/a"))
    local copy = kinformer.to_table(again)
    check_mutable(copy)
    assert.equal(kind(1), kind(copy.spec.big))
  end)

  it("store:replace with Lua tables hands out read-only tables too", function()
    local s = kinformer.store()
    assert(s:replace({ widget("a"), widget("b") }, "1"))
    for _, o in ipairs(s:list()) do check_read_only(o, "extra", "after replace") end
    assert.equal(kind(1), kind(s:get_by_key("default/b").spec.replicas))
  end)

  it("a DeltaFIFO: popped objects and tombstones are read-only; delta tables are plain", function()
    local known = kinformer.store()
    assert(known:add(widget("gone")))
    local fifo = kinformer.delta_fifo{ known_objects = known }
    assert(fifo:add(widget("a")))
    local deltas = fifo:pop()
    check_read_only(deltas[1].object, "extra", "a popped object")
    check_spec_numbers(deltas[1].object.spec, "fifo: ", true)
    deltas.mine = true -- the deltas array is the caller's
    assert(fifo:replace({}, "2"))
    local del = fifo:pop()
    assert.equal("Deleted", del[1].type)
    local tomb = del[1].object
    assert.is_true(kinformer.is_tombstone(tomb))
    assert.equal("default/gone", tomb.key)
    check_read_only(tomb, "extra", "a tombstone")
    check_read_only(tomb.obj, "extra", "a tombstone's object")
    assert.equal(kind(1), kind(tomb.obj.spec.replicas))
    local copy = kinformer.to_table(tomb) -- a plain { key, obj }
    copy.extra = 1
    copy.obj.spec.replicas = 9
    assert.is_nil(getmetatable(copy))
    -- a tombstone the caller builds stays the caller's
    local mine = kinformer.tombstone("default/x", nil)
    mine.note = "mine"
    assert.equal("mine", mine.note)
  end)

  it("the processor: the sink's objects and tombstones are read-only, the transform's argument is not",
     function()
    local store = kinformer.store()
    local fifo = kinformer.delta_fifo{ known_objects = store }
    local transformed = 0
    local proc = core.processor(fifo, store, function(o)
      assert.equal(kind(1), kind(o.spec.replicas))
      o.spec.added = 1.0 -- mutable; an integral float, read back as an integer
      transformed = transformed + 1
      return o
    end)
    local got = {}
    local function sink(k, obj) got[#got + 1] = { k, obj } end
    assert(fifo:update(widget("a")))
    proc:dispatch(100, sink)
    assert.equal(1, transformed)
    local obj = got[1][2]
    check_read_only(obj, "extra", "the sink's object")
    check_spec_numbers(obj.spec, "processor: ", true)
    assert.equal(1, obj.spec.added)
    assert.equal(kind(1), kind(obj.spec.added))
    check_read_only(store:get_by_key("default/a"), "extra", "the processor's store")
    assert(fifo:replace({}, "2"))
    proc:dispatch(100, sink)
    local deleted = got[#got][2]
    assert.equal(3, got[#got][1])
    if kinformer.is_tombstone(deleted) then
      check_read_only(deleted, "extra", "the sink's tombstone")
      deleted = deleted.obj
    end
    check_read_only(deleted, "extra", "the sink's deleted object")
    proc:close()
  end)

  it("the shared cache's reader: numbers by the rule, read-only objects", function()
    local seg = core.shm(4 * 1024 * 1024)
    local reader = seg:store(1)
    local store = kinformer.store()
    local fifo = kinformer.delta_fifo{ known_objects = store }
    local proc = core.processor(fifo, store)
    assert(proc:mirror(seg, 1))
    assert(fifo:update(widget("a")))
    proc:dispatch(100)
    local w = reader:get("default/a")
    check_spec_numbers(w.spec, "shared: ", true)
    check_read_only(w, "extra", "the shared reader's object")
    check_read_only(w.metadata, "extra", "the shared reader's metadata")
    local copy = kinformer.to_table(w)
    check_mutable(copy)
    proc:close()
  end)
end)
