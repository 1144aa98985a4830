-- kinformer's JSON encoder (csrc/lua_encode.c: kinformer.encode and every write of a table a user
-- built): numbers come back exactly (lua-cjson writes 14 significant digits), tables encode as
-- lua-cjson encodes them, values JSON cannot hold fail with EINVAL naming what and where; and
-- end to end against the fake API server: get then update, patch, and an informer's transform
-- keep a 16-digit integer.
local kinformer = require "kinformer"
local core = require "kinformer.core"
local cjson = require "cjson"
local socket = require "socket"
local fake = require "support.fake_apiserver"

local BIG = 1234567890123456

-- The numbers that must survive encode then decode unchanged.
local EXACT = { BIG, -BIG, 2^53, -2^53, 2^53 + 2, 0.1, 1e300, 5e-324, 123.456, 1 / 3, -1.5e-7,
                2.2250738585072014e-308, 1.7976931348623157e308, 0.30000000000000004, 1e21,
                12, 0 }

describe("kinformer.encode", function()
  describe("numbers", function()
    it("round-trip exactly through encode and decode (kinformer's and lua-cjson's)", function()
      for _, v in ipairs(EXACT) do
        local json = assert(core.encode{ v = v })
        assert.equal(v, core.decode(json).v, json)
        assert.equal(v, cjson.decode(json).v, json)
      end
    end)

    it("writes integral floats below 2^53 as integers, without an exponent", function()
      assert.equal('{"v":1234567890123456}', core.encode{ v = BIG })
      assert.equal('{"v":-9007199254740991}', core.encode{ v = -(2^53 - 1) })
      assert.equal('{"v":1000000000000000}', core.encode{ v = 1e15 })
      assert.equal('[1,-0,0.5]', core.encode{ 1.0, -0.0, 0.5 })
    end)

    it("writes Lua 5.4 integers as integers (math.maxinteger too)", function()
      if not math.type then return end -- LuaJIT: numbers are all floats
      assert.equal('[9223372036854775807,-9223372036854775808,7]',
                   core.encode{ math.maxinteger, math.mininteger, 7 })
      assert.equal('{"v":9007199254740993}', core.encode{ v = math.tointeger(2^53) + 1 })
    end)

    it("round-trips a number's type by the rule: integers stay integers, 3.0 comes back 3", function()
      if not math.type then return end -- LuaJIT: numbers are all doubles
      local function back(v) return core.decode(assert(core.encode{ v = v })).v end
      for _, v in ipairs{ 3, -4, 0, math.maxinteger, math.mininteger, 9007199254740993 } do
        assert.equal(v, back(v))
        assert.equal("integer", math.type(back(v)))
      end
      -- integral floats are written without a fraction: integers when read back
      for _, case in ipairs{ { 3.0, 3 }, { 1e15, 1000000000000000 }, { 2^53, 9007199254740992 } } do
        local v, want = case[1], case[2]
        assert.equal("float", math.type(v))
        assert.equal(want, back(v))
        assert.equal("integer", math.type(back(v)), tostring(v))
      end
      assert.equal(0, back(-0.0))
      assert.equal("integer", math.type(back(-0.0)))
      -- the others stay floats: a fraction or an exponent
      for _, v in ipairs{ 1.5, 1 / 3, 1e300, 2^63, -2^60, 5e-324 } do
        assert.equal(v, back(v))
        assert.equal("float", math.type(back(v)), tostring(v))
      end
    end)

    it("writes number keys exactly, as strings", function()
      assert.same({ ["1234567890123456.5"] = "x" }, cjson.decode(core.encode{ [1234567890123456.5] = "x" }))
      assert.same({ ["0.1"] = 1 }, cjson.decode(core.encode{ [0.1] = 1 }))
    end)
  end)

  describe("tables, as lua-cjson encodes them", function()
    local cases = {
      { 1, 2, 3 },
      { "a", { "b", { "c" } } },
      {},
      { x = {}, y = { {}, {} } },
      { 1, nil, 3 },
      { 1, 2, 3, 4, 5, [12] = 12 },               -- sparse but within cjson's ratio: an array
      { [1] = 1, [2] = 2, x = "mixed" },           -- any other key: an object
      { [-1] = "neg", [0] = "zero", [1.5] = "frac" },
      { n = cjson.null, list = { cjson.null, 1 } },
      { t = true, f = false },
      { s = "quote \" backslash \\ slash / controls \b\f\n\r\t \0 \1 \31 del \127" },
      { utf8 = "h\195\169llo \226\156\147 \240\157\132\158", ["cl\195\169"] = "v" },
      { metadata = { name = "a", labels = { ["app.kubernetes.io/name"] = "web" } },
        spec = { replicas = 3, ratio = 0.5, containers = { { name = "c", ports = { { containerPort = 80 } } } } } },
    }

    it("give JSON that lua-cjson decodes to what it decodes from its own encoding", function()
      for i, t in ipairs(cases) do
        local json = assert(core.encode(t))
        assert.same(cjson.decode(cjson.encode(t)), cjson.decode(json), "case " .. i .. ": " .. json)
        assert.same(core.decode(cjson.encode(t)), core.decode(json), "case " .. i)
      end
    end)

    it("escapes control characters and quotes and passes UTF-8 through as bytes", function()
      assert.equal('["a\\"b\\\\c\\n\\u0001\\u001f\\u007f/d"]', core.encode{ 'a"b\\c\n\1\31\127/d' })
      assert.equal('["h\195\169llo"]', core.encode{ "h\195\169llo" })
    end)

    it("writes an empty table as {} and cjson.null as null", function()
      assert.equal("{}", core.encode{})
      assert.equal('{"a":[null,{}]}', core.encode{ a = { cjson.null, {} } })
    end)

    it("honours OpenResty's cjson.array_mt and cjson.empty_array_mt where cjson has them",
      function()
      -- A fresh interpreter whose cjson has the two metatables (Debian's has neither).
      local probe = [[
        local real = require "cjson"
        package.loaded.cjson = setmetatable({ array_mt = {}, empty_array_mt = {} }, { __index = real })
        local cj = package.loaded.cjson
        local core = require "kinformer.core"
        io.write(core.encode{ a = setmetatable({}, cj.array_mt),
                              b = setmetatable({ 1, 2, x = 3 }, cj.array_mt),
                              c = setmetatable({}, cj.empty_array_mt),
                              d = setmetatable({ x = 1 }, cj.empty_array_mt) })
      ]]
      local root = rawget(_G, "KINFORMER_ROOT") or "."
      local cmd = ("cd %q && LUA_PATH='lua/?.lua;;' LUA_CPATH='build/%s/?.so;;' %s -e %q"):format(
        root, jit and "luajit" or "lua5.4", jit and "luajit" or "lua5.4", probe)
      local f = assert(io.popen(cmd))
      local out = f:read("a")
      f:close()
      assert.same({ a = {}, b = { 1, 2 }, c = {}, d = { x = 1 } }, cjson.decode(out))
      assert.matches('"a":%[%]', out)
      assert.matches('"b":%[1,2%]', out)
      assert.matches('"c":%[%]', out)
      assert.matches('"d":{"x":1}', out)
    end)
  end)

  describe("values JSON cannot hold", function()
    local function fails(t, pattern)
      local json, err, code = core.encode(t)
      assert.is_nil(json)
      assert.equal("EINVAL", code)
      assert.matches(pattern, err)
    end

    it("return nil, err, EINVAL naming the value's type and where it is", function()
      fails({ spec = { template = { f = print } } }, "^cannot encode a function value at spec%.template%.f$")
      fails({ spec = { containers = { { name = "c" }, { x = io.stdout } } } },
            "^cannot encode a userdata value at spec%.containers%[2%]%.x$")
      fails({ a = { 0 / 0 } }, "^cannot encode NaN %(not a number%) at a%[1%]$")
      fails({ a = { b = math.huge } }, "^cannot encode an infinite number at a%.b$")
      fails({ a = { [true] = 1 } }, "^cannot encode a table key of type boolean at a$")
      fails({ s = { [20] = 1 } }, "^cannot encode an excessively sparse array %(1 of 20 indices set%) at s$")
      fails({ co = coroutine.create(print) }, "^cannot encode a thread value at co$")
    end)

    it("refuse a table that contains itself, and nesting deeper than 1000", function()
      local t = { spec = {} }
      t.spec.again = t
      fails(t, "^cannot encode a table that contains itself at spec%.again$")
      local deep = {}
      local c = deep
      for _ = 1, 1001 do c.x = {}; c = c.x end
      fails(deep, "^cannot encode a table nested deeper than 1000 tables at x%.x%.x")
      local ok = {}
      c = ok
      for _ = 1, 999 do c.x = {}; c = c.x end
      assert.is_string(core.encode(ok))
    end)

    it("make a store or queue write fail with EINVAL and that message", function()
      local store = kinformer.store{}
      local ok, err, code = store:add{ metadata = { name = "a" }, spec = { f = print } }
      assert.is_nil(ok)
      assert.equal("EINVAL", code)
      assert.equal("cannot encode a function value at spec.f", err)
      ok, err, code = store:replace({ { metadata = { name = "b" }, n = 0 / 0 } }, "1")
      assert.is_nil(ok)
      assert.equal("EINVAL", code)
      assert.equal("item #1: cannot encode NaN (not a number) at n", err)
      local fifo = kinformer.delta_fifo{}
      ok, err, code = fifo:add{ metadata = { name = "a" }, spec = { print } }
      assert.is_nil(ok)
      assert.equal("EINVAL", code)
      assert.equal("cannot encode a function value at spec[1]", err)
      -- an object without a name is still ENOKEY
      ok, err, code = store:add{ metadata = {} }
      assert.is_nil(ok)
      assert.equal("ENOKEY", code)
    end)
  end)

  describe("objects built from Lua tables", function()
    it("a store keeps a 16-digit integer exactly (to_table reads its JSON)", function()
      local store = kinformer.store{}
      assert(store:add{ metadata = { name = "a" }, spec = { n = BIG, f = 0.1 } })
      local copy = kinformer.to_table(store:get_by_key("a"))
      assert.equal(BIG, copy.spec.n)
      assert.equal(0.1, copy.spec.f)
    end)

    it("a queued record keeps it: popped after its table was collected", function()
      local fifo = kinformer.delta_fifo{}
      assert(fifo:add{ metadata = { name = "a" }, spec = { n = BIG, neg = -2^53 } })
      collectgarbage()
      collectgarbage()
      local deltas = assert(fifo:pop(nil, 1))
      assert.equal(BIG, deltas[1].object.spec.n)
      assert.equal(-2^53, deltas[1].object.spec.neg)
    end)
  end)

  describe("against the fake API server", function()
    local srv, client
    local PATH = "/apis/example.com/v1/namespaces/default/widgets"

    setup(function()
      srv = fake.start{ args = { "--widget-crd" }, quiet = true }
      client = assert(kinformer.client{ server = srv.url })
    end)
    teardown(function() if srv then srv:stop() end end)

    -- Creates widget `name` from JSON text (not through lua-cjson, which would round BIG).
    local function create_raw(name)
      local code = srv:request("POST", PATH, ('{"apiVersion":"example.com/v1","kind":"Widget",'
        .. '"metadata":{"name":"%s","namespace":"default"},'
        .. '"spec":{"size":1234567890123456,"ratio":0.1,"neg":-9007199254740992}}'):format(name))
      assert.equal(201, code)
    end

    -- The widget's JSON text as the server stores it.
    local function raw(name)
      local code, _, _, text = srv:request("GET", PATH .. "/" .. name)
      assert.equal(200, code)
      return text
    end

    it("get then update of an unchanged object writes the exact number back", function()
      create_raw("w1")
      local w = assert(client:get("widgets", "default/w1"))
      assert.equal(BIG, w.spec.size)
      assert(client:update("widgets", w))
      local text = raw("w1")
      assert.matches('"size":%s*1234567890123456[,}]', text)
      assert.matches('"neg":%s*%-9007199254740992[,}]', text)
      assert.matches('"ratio":%s*0%.1[,}]', text)
    end)

    it("create and patch from Lua tables write exact numbers", function()
      assert(client:create("widgets", { apiVersion = "example.com/v1", kind = "Widget",
        metadata = { name = "w2", namespace = "default" }, spec = { size = BIG + 1 } }))
      assert.matches('"size":%s*1234567890123457[,}]', raw("w2"))
      assert(client:patch("widgets", "default/w2", { spec = { size = 2^53 } }))
      assert.matches('"size":%s*9007199254740992[,}]', raw("w2"))
    end)

    it("an informer with an identity transform caches the exact value", function()
      create_raw("w3")
      local inf = assert(client:informer{ resource = "widgets", namespace = "default",
                                          transform = function(o) return o end })
      finally(function() inf:stop() end)
      inf:start()
      assert(inf:wait_for_sync(10))
      local deadline = socket.gettime() + 5
      local w
      repeat
        inf:dispatch(100)
        w = inf:store():get_by_key("default/w3")
      until w or socket.gettime() > deadline
      assert.is_table(w)
      assert.equal(BIG, w.spec.size)
      assert.equal(-2^53, w.spec.neg)
      assert.matches('"size":%s*1234567890123456[,}]', kinformer.encode(w))
    end)

    it("writes a cached object inside a table of the user's whole, members not read too", function()
      create_raw("w4")
      local inf = assert(client:informer{ resource = "widgets", namespace = "default" })
      finally(function() inf:stop() end)
      inf:start()
      assert(inf:wait_for_sync(10))
      local deadline = socket.gettime() + 5
      local w
      repeat
        inf:dispatch(100)
        w = inf:store():get_by_key("default/w4")
      until w or socket.gettime() > deadline
      assert.is_nil(rawget(w, "spec")) -- lazy: nothing read yet
      local json = kinformer.encode{ wrapped = { w }, meta = w.metadata }
      assert.is_string(json)
      local doc = cjson.decode(json)
      assert.equal("Widget", doc.wrapped[1].kind)
      assert.equal(BIG, doc.wrapped[1].spec.size)
      assert.equal("default", doc.meta.namespace)
      assert.is_string(doc.meta.uid)
    end)
  end)
end)
