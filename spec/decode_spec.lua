-- kinformer's JSON decoder for cached objects and REST bodies (csrc/lua_decode.c) must make what
-- lua-cjson makes but for numbers: same types otherwise (null is cjson.null), same strings after
-- every escape, the last of duplicate keys, tables of any size; and hand over to lua-cjson for
-- what it does not take (too deep, malformed), so errors read as before. Numbers follow
-- kinformer's rule: on Lua 5.4 a number without a fraction and without an exponent that fits in
-- 64 bits is an integer, any other a float (lua-cjson makes floats of all); on LuaJIT all are
-- doubles, as lua-cjson makes them. core.decode is the entry point the lazy objects use.
local core = require "kinformer.core"
local cjson = require "cjson"

-- Deep equality that tells floats from integers, -0.0 from 0.0 and cjson.null from everything.
local function same(a, b, path)
  path = path or "value"
  if type(a) ~= type(b) then return false, path .. ": " .. type(a) .. " vs " .. type(b) end
  if type(a) == "number" then
    if math.type and math.type(a) ~= math.type(b) then
      return false, path .. ": number types (" .. math.type(a) .. " vs " .. math.type(b) .. ")"
    end
    if a ~= b and not (a ~= a and b ~= b) then return false, path .. ": " .. a .. " vs " .. b end
    if a == 0 and 1 / a ~= 1 / b then return false, path .. ": signed zero" end
    return true
  end
  if type(a) ~= "table" then
    if a ~= b then return false, path .. ": " .. tostring(a) .. " vs " .. tostring(b) end
    return true
  end
  if getmetatable(a) ~= getmetatable(b) then return false, path .. ": metatables" end
  for k, v in pairs(a) do
    local ok, why = same(v, b[k], path .. "." .. tostring(k))
    if not ok then return false, why end
  end
  for k in pairs(b) do
    if a[k] == nil then return false, path .. "." .. tostring(k) .. ": missing" end
  end
  return true
end

-- The reference: what lua-cjson makes of json (which it must take), with the number rule applied
-- on Lua 5.4. Every number token with only a sign and digits becomes a marked string before
-- lua-cjson reads the text, and Lua's own tonumber then makes the value: an integer when it fits
-- in 64 bits, else a float, as Lua's lexer does. Text with a NUL byte is not JSON: kinformer
-- leaves it to lua-cjson (which stops reading there), floats and all.
local MARK = "\1\2int:"
local function reference(json)
  if not math.type or json:find("\0", 1, true) then return cjson.decode(json) end
  local out, i, n = {}, 1, #json
  while i <= n do
    local c = json:sub(i, i)
    if c == '"' then
      local j = i + 1
      while j <= n and json:sub(j, j) ~= '"' do j = j + (json:sub(j, j) == "\\" and 2 or 1) end
      out[#out + 1] = json:sub(i, j)
      i = j + 1
    elseif c:match("[-+%d]") then
      local run = json:match("^[-+.%w]+", i) -- "0x10" is one token: lua-cjson reads hex
      out[#out + 1] = run:match("^[-+]?%d+$") and cjson.encode(MARK .. run) or run
      i = i + #run
    else
      out[#out + 1] = c
      i = i + 1
    end
  end
  local function unmark(v)
    if type(v) == "string" and v:sub(1, #MARK) == MARK then return tonumber(v:sub(#MARK + 1)) end
    if type(v) == "table" then
      for k, x in pairs(v) do v[k] = unmark(x) end
    end
    return v
  end
  return unmark(cjson.decode(table.concat(out)))
end

local function check(json)
  local want = reference(json)
  local got, err = core.decode(json)
  assert(got ~= nil, err)
  local ok, why = same(want, got)
  if not ok then error(why .. " in " .. json:sub(1, 200), 2) end
end

describe("JSON decoding of cached objects", function()
  it("makes what lua-cjson makes for every kind of value", function()
    for _, json in ipairs{
      '{}', '[]', '""', '0', '-0', '1', '-1', '1.5', '1e3', '1E-3', '-2.5e+10', '123456789012345678',
      '9007199254740993', '1e400', '-1e400', '4.9e-324', '0.1', 'true', 'false', 'null',
      '{"a":null,"b":[null,null],"c":{}}', '[[],[[]],{},[{}]]',
      ' \t\r\n{ "a" : [ 1 , 2 ] , "b" : { } } \n',
      '{"a":1,"a":2,"b":{"c":1,"c":{"d":3}}}',
      '"\\" \\\\ \\/ \\b \\f \\n \\r \\t"', '"\\u0000x\\u001f"', '"caf\\u00e9 \\u20ac \\u2028"',
      '"\\ud83d\\ude00 and \\uD83D\\uDE00"', '"raw é € 😀"', '"a\\u0041b"',
      '{"\\u006b":1,"k":2}', '{"k":2,"\\u006b":1}', '{"":""}',
    } do
      check(json)
    end
  end)

  it("makes integers of numbers without a fraction or an exponent that fit in 64 bits", function()
    local function kind(json)
      local v = core.decode(json)
      return math.type and math.type(v) or "float", v
    end
    local int = math.type and "integer" or "float" -- LuaJIT: every number is a double
    for json, want in pairs{ ["3"] = 3, ["-4"] = -4, ["0"] = 0, ["-0"] = 0,
                             ["9223372036854775807"] = math.maxinteger or 2 ^ 63,
                             ["-9223372036854775808"] = math.mininteger or -2 ^ 63 } do
      local k, v = kind(json)
      assert.equal(int, k, json)
      assert.equal(want, v, json)
    end
    for _, json in ipairs{ "1.0", "1e3", "1E3", "-2.5", "0.0", "1e400", "9223372036854775808",
                           "-9223372036854775809", "123456789012345678901234567890" } do
      assert.equal("float", (kind(json)), json)
    end
    if math.type then
      -- 2^53 + 1 has no double: exact only as an integer
      assert.equal(9007199254740993, core.decode("9007199254740993"))
      assert.equal("9007199254740993", tostring(core.decode("9007199254740993")))
      assert.equal("3", tostring(core.decode("3")))
      assert.equal("1000.0", tostring(core.decode("1e3")))
      assert.equal("1.0", tostring(core.decode("1.0")))
    else
      assert.equal("3", tostring(core.decode("3")))
    end
    local t = core.decode('{"a":[1,2.5,-3],"b":{"c":40}}')
    assert.equal(int, math.type and math.type(t.a[1]) or "float")
    assert.equal("float", math.type and math.type(t.a[2]) or "float")
    assert.equal(int, math.type and math.type(t.b.c) or "float")
  end)

  it("sizes big tables right and keeps the last of duplicate keys across batches", function()
    local parts = {}
    for i = 1, 1000 do parts[i] = tostring(i) end
    check("[" .. table.concat(parts, ",") .. "]")
    parts = {}
    for i = 1, 300 do parts[i] = ('"k%d":%d'):format(i % 97, i) end
    check("{" .. table.concat(parts, ",") .. "}")
    parts = {}
    for i = 1, 200 do parts[i] = ('{"i":%d,"l":[%d,"%d"]}'):format(i, i, i) end
    check('{"items":[' .. table.concat(parts, ",") .. '],"n":200}')
  end)

  it("takes nesting up to lua-cjson's limit (1000) and leaves deeper to lua-cjson's error", function()
    check(("["):rep(150) .. ("]"):rep(150))
    check(('{"a":'):rep(300) .. "1" .. ("}"):rep(300))
    check(("["):rep(999) .. "7" .. ("]"):rep(999)) -- the number by the rule, also this deep
    check(('{"a":'):rep(999) .. "[7]" .. ("}"):rep(999))
    local v, err = core.decode(("["):rep(1001) .. ("]"):rep(1001))
    assert.is_nil(v)
    assert.matches("too many nested", err)
    for _, bad in ipairs{ "", "{", "[1,]", '{"a"}', '"\\ud83d"', '"\\x"', "nul", "1 2", "[1]x" } do
      v, err = core.decode(bad)
      assert.is_nil(v, bad)
      assert.is_string(err, bad)
    end
  end)

  it("takes or refuses what lua-cjson takes or refuses, lenient numbers included", function()
    for _, s in ipairs{ "+1", "01", "1.", ".5", "-.5", "1e", "1e+", "-", "-0.0e-0", "[01]", "[+1]",
                        '"a\nb"', '"a\1b"', '"\\u00zz"', "[1,]", '{"a":1,}', "  ", "[1 2]", "tru",
                        '"\\q"', "-01", "0.e1", "[-]", "NaN", "nan", "Infinity", "-Infinity",
                        "0x10", "[0x10]", "\f1", "1\f", '{"a" :1 }', "[\v1]" } do
      local ok = pcall(cjson.decode, s)
      local got, err = core.decode(s)
      if ok then
        local same_value, why = same(reference(s), got)
        assert(same_value, ("%q: %s"):format(s, tostring(why or err)))
      else
        assert(got == nil and type(err) == "string", ("%q: lua-cjson refuses it, core.decode gave %s"):format(s, tostring(got)))
      end
    end
  end)

  it("agrees with lua-cjson on 3000 random documents and 3000 damaged ones", function()
    local rng = 20261121
    local function rand(n) rng = rng * 16807 % 2147483647; return rng % n end
    local alphabet = { "a", "b", "Z", "0", " ", '"', "\\", "/", "\n", "\t", "\1", "\31", "é",
                       "€", "😀", "{", "}", "[", "]", ":", "," }
    local function str()
      local t = {}
      for i = 1, rand(12) do t[i] = alphabet[rand(#alphabet) + 1] end
      return table.concat(t)
    end
    local function gen(depth)
      local k = rand(depth > 3 and 5 or 8)
      if k == 0 then return str()
      elseif k == 1 then return rand(2000000) - 1000000
      elseif k == 2 then return (rand(2000000) - 1000000) / (rand(999) + 1) * 10 ^ (rand(40) - 20)
      elseif k == 3 then return rand(2) == 0
      elseif k == 4 then return cjson.null
      elseif k == 5 or k == 6 then
        local t = {}
        for i = 1, rand((k == 5 or depth > 0) and 8 or 90) do t[str() .. i] = gen(depth + 1) end
        return t
      else
        local t = {}
        for i = 1, rand(depth > 0 and 8 or 80) do t[i] = gen(depth + 1) end
        return t
      end
    end
    for _ = 1, 3000 do
      check(cjson.encode(gen(0)))
    end
    -- The same documents cut short or with a byte changed: taken or refused as lua-cjson does.
    local bytes = { "", '"', "\\", "{", "}", "[", "]", ",", ":", "0", "-", "e", ".", "u", "n", " ", "\0",
                    "\255" }
    for _ = 1, 3000 do
      local json = cjson.encode(gen(0))
      local at = rand(#json) + 1
      if rand(3) == 0 then
        json = json:sub(1, at - 1)
      else
        json = json:sub(1, at - 1) .. bytes[rand(#bytes) + 1] .. json:sub(at + 1)
      end
      local ok = pcall(cjson.decode, json)
      local got, err = core.decode(json)
      if ok then
        local same_value, why = same(reference(json), got)
        if not same_value then error(tostring(why or err) .. " in " .. json:sub(1, 200)) end
      elseif got ~= nil or type(err) ~= "string" then
        error("lua-cjson refuses, core.decode took: " .. json:sub(1, 200))
      end
    end
  end)
end)

-- Cached objects are lazy tables on every runtime (Lua 5.4 and LuaJIT alike): members are
-- decoded on first read and kept in the table; kinformer.pairs decodes the rest.
describe("lazily decoded objects (every runtime)", function()
  local kinformer = require "kinformer"

  -- An object table as the cache hands it out: the table of the record made from t (never t).
  local function cached(t)
    local fifo = kinformer.delta_fifo{}
    assert(fifo:add(t))
    local o = fifo:pop()[1].object
    assert(not rawequal(o, t))
    return o
  end

  local function sample()
    return {
      apiVersion = "discovery.k8s.io/v1", kind = "EndpointSlice", addressType = "IPv4",
      metadata = { name = "web-abc", namespace = "demo", uid = "u1", labels = { app = "web" } },
      ports = { { name = "http", port = 8080 } },
      endpoints = { { addresses = { "10.0.0.1" }, conditions = { ready = true } },
                    { addresses = { "10.0.0.2" }, conditions = { ready = false } } },
    }
  end

  local function sorted_keys(t, iter)
    local keys = {}
    for k in (iter or kinformer.pairs)(t) do keys[#keys + 1] = k end
    table.sort(keys)
    return keys
  end

  it("decode a member on its first read and keep it: rawget sees what was read", function()
    local o = cached(sample())
    assert.is_nil(rawget(o, "endpoints"))
    assert.is_nil(next(o))
    local eps = o.endpoints
    assert.equal("10.0.0.2", eps[2].addresses[1])
    assert.equal(eps, rawget(o, "endpoints")) -- the next read is a plain table read
    assert.equal(eps, o.endpoints)
    assert.is_nil(rawget(o, "ports"))
    assert.is_nil(o.nothing)
    assert.equal(8080, o.ports[1].port)
    assert.equal(8080, rawget(o, "ports")[1].port)
  end)

  it("metadata is lazy and read-only too; name and namespace need no decoding", function()
    local o = cached(sample())
    local md = o.metadata
    assert.equal(md, o.metadata)
    assert.is_nil(next(md))
    assert.equal("web-abc", md.name)
    assert.equal("demo", md.namespace)
    assert.is_nil(rawget(md, "labels"))
    assert.equal("web", md.labels.app)
    assert.has_error(function() md.extra = 1 end)
    assert.has_error(function() o.extra = 1 end)
    assert.same(cjson.decode(kinformer.encode(o)).metadata, cjson.decode(kinformer.encode(md)))
  end)

  it("kinformer.pairs sees every member, completes the table and keeps what was read", function()
    local o = cached(sample())
    local eps = o.endpoints
    local all = { "addressType", "apiVersion", "endpoints", "kind", "metadata", "ports" }
    assert.same(all, sorted_keys(o))
    assert.equal(eps, o.endpoints)
    -- complete now: next and rawget see every member, on every runtime
    assert.same(all, sorted_keys(o, function(t) return next, t, nil end))
    assert.equal("IPv4", rawget(o, "addressType"))
    assert.same(kinformer.to_table(o), (function()
      local c = {}
      for k, v in kinformer.pairs(o) do c[k] = v == o.metadata and kinformer.to_table(v) or v end
      return c
    end)())
    -- metadata reached through pairs is the same lazy read-only table a read gives
    assert.has_error(function() o.metadata.extra = 1 end)
    assert.same({ "labels", "name", "namespace", "uid" }, sorted_keys(o.metadata))
    assert.same({ "labels", "name", "namespace", "uid" },
                sorted_keys(o.metadata, function(t) return next, t, nil end))
    assert.has_error(function() o.extra = 1 end)
  end)

  it("plain pairs sees every member only where the runtime honours __pairs", function()
    local honours = false
    for _ in pairs(setmetatable({}, { __pairs = function() return next, { 1 }, nil end })) do
      honours = true
    end
    assert.equal(not rawget(_G, "jit") or honours, honours) -- Lua 5.4 always honours it
    local o = cached(sample())
    local _ = o.kind
    assert.same(honours and { "addressType", "apiVersion", "endpoints", "kind", "metadata", "ports" }
                or { "kind" }, sorted_keys(o, pairs))
  end)

  it("kinformer.pairs is pairs for other tables, __pairs honoured, and checks its argument", function()
    assert.same({ "a", "b" }, sorted_keys({ a = 1, b = 2 }))
    local proxy = setmetatable({}, { __pairs = function() return next, { x = 1, y = 2 }, nil end })
    assert.same({ "x", "y" }, sorted_keys(proxy))
    assert.has_error(function() kinformer.pairs("x") end)
    assert.has_error(function() kinformer.pairs() end)
  end)

  it("decodes right when a top-level key has escapes (the whole object is decoded then)", function()
    local t = sample()
    t["a/b"] = "slash" -- lua-cjson writes the key as "a\/b"
    local o = cached(t)
    assert.equal("10.0.0.1", o.endpoints[1].addresses[1])
    assert.equal("slash", o["a/b"])
    assert.equal("web-abc", o.metadata.name)
    assert.same(kinformer.to_table(o).endpoints, o.endpoints)
    local keys = sorted_keys(o)
    assert.same({ "a/b", "addressType", "apiVersion", "endpoints", "kind", "metadata", "ports" }, keys)
  end)
end)
