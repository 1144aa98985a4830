-- store:list(opts) / store:list_keys(opts): reading the cache like controller-runtime's client
-- (docs/api.md, "Indexed store"; docs/semantics.md, section 2): namespace narrowing, index
-- values, kubectl's label selector syntax matched in C, the errors a bad selector or option
-- raises at the caller's line, and an informer's cache checked against the fake API server's
-- own answer to the same selector.
local kinformer = require "kinformer"
local core = require "kinformer.core"
local socket = require "socket"
local fake = require "support.fake_apiserver"

local function pod(ns, name, labels, node)
  return { apiVersion = "v1", kind = "Pod",
           metadata = { namespace = ns, name = name, labels = labels },
           spec = { nodeName = node or "node-1" } }
end

local function sorted(list)
  local copy = {}
  for i, v in ipairs(list) do copy[i] = v end
  table.sort(copy)
  return copy
end

local function keys(objs)
  local out = {}
  for i, o in ipairs(objs) do out[i] = kinformer.key_of(o) end
  table.sort(out)
  return out
end

-- A store with pods in three namespaces, on two nodes, and one cluster-scoped object.
local function fixture(opts)
  local store = kinformer.store(opts or { indexers = {
    by_node = function(p) return p.spec and { p.spec.nodeName } end,
  } })
  for _, p in ipairs{
    pod("shop", "web-1", { app = "web", tier = "front" }, "n1"),
    pod("shop", "web-2", { app = "web", tier = "front", canary = "" }, "n2"),
    pod("shop", "db-1", { app = "db", tier = "back" }, "n1"),
    pod("blog", "web-1", { app = "web", tier = "front" }, "n2"),
    pod("blog", "cache-1", { app = "cache" }, "n1"),
    pod("ops", "job-1", nil, "n1"),
    { metadata = { name = "node-a", labels = { app = "web", ["kubernetes.io/os"] = "linux" } },
      spec = { nodeName = "n1" } },
  } do
    assert(store:add(p))
  end
  return store
end

-- Every way of asking, checked against the keys expected; list_keys must agree with list.
local function check(store, opts, want)
  assert.same(want, keys(store:list(opts)))
  assert.same(want, sorted(store:list_keys(opts)))
end

describe("store:list(opts)", function()
  it("without options (or with an empty table) lists everything, as before", function()
    local store = fixture()
    local all = { "blog/cache-1", "blog/web-1", "node-a", "ops/job-1", "shop/db-1", "shop/web-1",
                  "shop/web-2" }
    assert.same(all, keys(store:list()))
    check(store, nil, all)
    check(store, {}, all)
    check(store, { namespace = "" }, all) -- "" is every namespace, as client-go's NamespaceAll
    check(store, { label_selector = "" }, all)
    check(store, { label_selector = "  " }, all)
    check(store, { index = {} }, all)
  end)

  it("narrows to a namespace", function()
    local store = fixture()
    check(store, { namespace = "shop" }, { "shop/db-1", "shop/web-1", "shop/web-2" })
    check(store, { namespace = "nowhere" }, {})
  end)

  it("filters by label selector, every operator", function()
    local store = fixture()
    check(store, { label_selector = "app=web" }, { "blog/web-1", "node-a", "shop/web-1", "shop/web-2" })
    check(store, { label_selector = "app==db" }, { "shop/db-1" })
    check(store, { label_selector = "app!=web" }, { "blog/cache-1", "ops/job-1", "shop/db-1" })
    check(store, { label_selector = "app in (db, cache)" }, { "blog/cache-1", "shop/db-1" })
    check(store, { label_selector = "app notin (web,db)" }, { "blog/cache-1", "ops/job-1" })
    check(store, { label_selector = "canary" }, { "shop/web-2" })
    check(store, { label_selector = "!app" }, { "ops/job-1" })
    check(store, { label_selector = "canary=" }, { "shop/web-2" }) -- the empty value
    check(store, { label_selector = "app=web,tier=front,!canary" }, { "blog/web-1", "shop/web-1" })
    check(store, { label_selector = "app=web, app=db" }, {}) -- requirements are ANDed
    -- a prefixed key (lua-cjson writes it as "kubernetes.io\/os" in the record)
    check(store, { label_selector = "kubernetes.io/os in (linux)" }, { "node-a" })
  end)

  it("narrows through an index, several indexes intersect, and everything combines", function()
    local store = fixture()
    check(store, { index = { by_node = "n1" } },
          { "blog/cache-1", "node-a", "ops/job-1", "shop/db-1", "shop/web-1" })
    check(store, { index = { by_node = "n1", namespace = "shop" } }, { "shop/db-1", "shop/web-1" })
    check(store, { index = { by_node = "n9" } }, {})
    check(store, { namespace = "shop", index = { by_node = "n1" }, label_selector = "tier=front" },
          { "shop/web-1" })
    check(store, { namespace = "blog", index = { by_node = "n2" }, label_selector = "app=web" },
          { "blog/web-1" })
    check(store, { namespace = "blog", index = { by_node = "n1" }, label_selector = "app=web" }, {})
  end)

  it("returns the store's tables: the same ones get and list hand out", function()
    local store = fixture()
    local got = store:list{ namespace = "shop", label_selector = "app=db" }
    assert.equal(1, #got)
    assert.equal(store:get_by_key("shop/db-1"), got[1])
    assert.equal(got[1], store:list{ label_selector = "tier=back" }[1])
  end)

  it("sees writes: an update moves an object in and out of a selection", function()
    local store = fixture()
    check(store, { label_selector = "app=db" }, { "shop/db-1" })
    assert(store:update(pod("shop", "db-1", { app = "cache" }, "n1")))
    check(store, { label_selector = "app=db" }, {})
    check(store, { label_selector = "app=cache" }, { "blog/cache-1", "shop/db-1" })
    assert(store:delete(pod("blog", "cache-1")))
    check(store, { label_selector = "app=cache" }, { "shop/db-1" })
  end)

  it("works on a store without the namespace index (compares each object's namespace)", function()
    local store = fixture{ namespace_index = false }
    check(store, { namespace = "shop", label_selector = "app=web" }, { "shop/web-1", "shop/web-2" })
    local ok, err = pcall(function() store:list{ index = { namespace = "shop" } } end)
    assert.is_false(ok)
    assert.matches("bad argument #1 to 'list' (index 'namespace' does not exist)", err, 1, true)
  end)

  it("agrees with a Lua filter over list() on generated labels and selectors", function()
    -- A reference for the operators on string labels: requirement(labels) -> boolean.
    local ops = {
      function(k, v) return k .. "=" .. v, function(l) return l[k] == v end end,
      function(k, v) return k .. "!=" .. v, function(l) return l[k] ~= v end end,
      function(k, v, w)
        return ("%s in (%s,%s)"):format(k, v, w), function(l) return l[k] == v or l[k] == w end
      end,
      function(k, v, w)
        return ("%s notin (%s,%s)"):format(k, v, w),
               function(l) return l[k] ~= v and l[k] ~= w end
      end,
      function(k) return k, function(l) return l[k] ~= nil end end,
      function(k) return "!" .. k, function(l) return l[k] == nil end end,
    }
    local names, vals = { "a", "b", "x.io/c" }, { "1", "2", "3" }
    local seed = 20261125
    local function rand(n) seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n + 1 end
    local store = kinformer.store()
    for i = 1, 300 do
      local labels = {}
      for _, k in ipairs(names) do if rand(3) > 1 then labels[k] = vals[rand(3)] end end
      store:add(pod("ns" .. rand(3), "p" .. i, labels))
    end
    local all = store:list()
    for _ = 1, 200 do
      local parts, preds = {}, {}
      for j = 1, rand(3) do
        local text, pred = ops[rand(#ops)](names[rand(3)], vals[rand(3)], vals[rand(3)])
        parts[j], preds[j] = text, pred
      end
      local ns = rand(4) == 4 and "ns2" or nil
      local want = {}
      for _, o in ipairs(all) do
        local ok = ns == nil or o.metadata.namespace == ns
        for _, pred in ipairs(preds) do ok = ok and pred(o.metadata.labels or {}) end
        if ok then want[#want + 1] = kinformer.key_of(o) end
      end
      table.sort(want)
      local sel = table.concat(parts, ",")
      assert.same(want, keys(store:list{ namespace = ns, label_selector = sel }), sel)
    end
  end)
end)

describe("store:list(opts) misuse raises at the caller's line", function()
  -- Calls fn (which calls the store on its first line) and returns the error, checking the line.
  local function raised(fn)
    local line = debug.getinfo(fn, "S").linedefined
    local ok, err = pcall(fn)
    assert.is_false(ok)
    assert.matches("store_list_spec.lua:" .. line .. ":", err, 1, true)
    return err
  end

  it("reports a bad selector with kubectl's message and the position", function()
    local store = fixture()
    for _, method in ipairs{ "list", "list_keys" } do
      local err = raised(function() local _ = store[method](store, { label_selector = "app in (a" }) end)
      assert.matches("bad argument #1 to '" .. method .. "' (label_selector \"app in (a\" at "
        .. "position 10: unable to parse requirement: found '', expected: ',' or ')')", err, 1, true)
    end
    local cases = {
      { "app=web,", "position 9: found '', expected: identifier after ','" },
      { "app web", "position 5: unable to parse requirement: found 'web', expected: in, notin, =, "
        .. "==, !=, gt, lt" },
      { "x=y z", "position 5: found 'z', expected: ',' or 'end of string'" },
      { "-bad", "position 1: unable to parse requirement: <nil>: Invalid value: \"-bad\": name part "
        .. "must consist of alphanumeric characters" },
      { "app in (ok, -no)", "position 13: unable to parse requirement: values[0][app]: Invalid "
        .. "value: \"-no\": a valid label must be an empty string" },
    }
    for _, case in ipairs(cases) do
      local err = raised(function() local _ = store:list{ label_selector = case[1] } end)
      assert.matches(case[2], err, 1, true)
    end
    -- a long selector is quoted up to 120 bytes
    local long = ("a=b,"):rep(40) .. "!"
    local err = raised(function() local _ = store:list{ label_selector = long } end)
    assert.matches('"' .. long:sub(1, 117) .. '..." at position 162:', err, 1, true)
  end)

  it("raises for unknown options, wrong types, unknown indexes and extra arguments", function()
    local store = fixture()
    local function check_raise(fn, text)
      local err = raised(fn)
      assert.matches(text, err, 1, true)
    end
    check_raise(function() local _ = store:list{ label = "x" } end,
                "bad argument #1 to 'list' (unknown option 'label')")
    check_raise(function() local _ = store:list_keys{ namespaces = "x" } end,
                "bad argument #1 to 'list_keys' (unknown option 'namespaces')")
    check_raise(function() local _ = store:list{ "shop" } end,
                "bad argument #1 to 'list' (option names must be strings, got number)")
    check_raise(function() local _ = store:list("shop") end,
                "bad argument #1 to 'list' (options table expected, got string)")
    check_raise(function() local _ = store:list{ namespace = 1 } end,
                "option 'namespace' must be a string, got number")
    check_raise(function() local _ = store:list{ label_selector = { app = "web" } } end,
                "option 'label_selector' must be a string, got table")
    check_raise(function() local _ = store:list{ index = "by_node" } end,
                "option 'index' must be a table { name = value }, got string")
    check_raise(function() local _ = store:list{ index = { by_node = 1 } } end,
                "option 'index': the value for 'by_node' must be a string, got number")
    check_raise(function() local _ = store:list{ index = { "n1" } } end,
                "option 'index': index names must be strings, got number")
    check_raise(function() local _ = store:list{ index = { nope = "x" } } end,
                "bad argument #1 to 'list' (index 'nope' does not exist)")
    check_raise(function() local _ = store:list({}, {}) end,
                "bad argument #2 to 'list' (no more arguments expected, got table)")
    assert.equal(7, #store:list(nil, nil)) -- trailing nils pass
    local plain = kinformer.store{ namespace_index = false }
    check_raise(function() local _ = plain:list{ label_selector = "!" } end,
                "found '', expected: identifier")
  end)
end)

describe("an informer's store:list(opts)", function()
  local srv
  teardown(function() if srv then srv:stop() end end)

  it("filters the cache as the API server filters a list, and follows changes", function()
    srv = fake.start{ args = { "--no-default-namespaces", "--bookmark-interval", "0.2" }, quiet = true }
    local client = assert(kinformer.client{ server = srv.url })
    local function create(ns, name, labels)
      local code = srv:request("POST", "/api/v1/namespaces/" .. ns .. "/pods", pod(ns, name, labels))
      assert(code == 201, "create " .. name .. ": " .. tostring(code))
    end
    for i = 1, 30 do
      create(i % 3 == 0 and "shop" or "blog", "p" .. i,
             { app = i % 2 == 0 and "web" or "db", tier = ({ "a", "b", "c", "d" })[i % 4 + 1],
               ["example.com/canary"] = i % 5 == 0 and "true" or nil })
    end
    local inf = assert(client:informer{ resource = "pods" })
    finally(function() inf:stop() end)
    assert(inf:start())
    assert(inf:wait_for_sync(10))
    local store = inf:store()

    -- The server's answer to the same selector, as keys.
    local function server_keys(ns, selector)
      local path = (ns and "/api/v1/namespaces/" .. ns .. "/pods" or "/api/v1/pods")
        .. "?labelSelector=" .. selector:gsub("[^%w._~-]", function(c)
          return ("%%%02X"):format(c:byte()) end)
      local code, body = srv:request("GET", path)
      assert(code == 200, path .. ": " .. tostring(code))
      local out = {}
      for i, o in ipairs(body.items) do out[i] = o.metadata.namespace .. "/" .. o.metadata.name end
      table.sort(out)
      return out
    end
    for _, case in ipairs{
      { nil, "app=web" }, { "shop", "app=web" }, { "blog", "tier in (a,c),app!=web" },
      { nil, "example.com/canary" }, { "shop", "!example.com/canary,tier notin (d)" },
      { nil, "app=nope" }, { "blog", "" },
    } do
      local want = server_keys(case[1], case[2])
      assert.same(want, keys(store:list{ namespace = case[1], label_selector = case[2] }),
                  tostring(case[1]) .. " " .. case[2])
    end
    assert.same(keys(store:by_index("namespace", "shop")), keys(store:list{ namespace = "shop" }))

    -- A label change on the server reaches the selection once dispatched.
    local code = srv:request("PATCH", "/api/v1/namespaces/shop/pods/p3",
      { metadata = { labels = { app = "web", tier = "z" } } },
      { ["Content-Type"] = "application/merge-patch+json" })
    assert.equal(200, code)
    local deadline = socket.gettime() + 5
    local got
    repeat
      inf:dispatch(1000)
      got = keys(store:list{ namespace = "shop", label_selector = "tier=z" })
      if #got == 1 then break end
      core.wait({ inf:fd() }, 0.02)
    until socket.gettime() > deadline
    assert.same({ "shop/p3" }, got)
    assert.same(server_keys("shop", "tier=z"), got)
  end)
end)

describe("docs/api.md", function()
  it("shows the errors a bad selector raises, character for character", function()
    local root = rawget(_G, "KINFORMER_ROOT") or "."
    local f = assert(io.open(root .. "/docs/api.md", "r"))
    local doc = f:read("a")
    f:close()
    local store = kinformer.store()
    local seen = 0
    for line in doc:gmatch("[^\n]+") do
      local sel = line:match("^bad argument #1 to 'list' %(label_selector \"(.-)\" at position")
      if sel then
        local ok, err = pcall(store.list, store, { label_selector = sel })
        assert.is_false(ok)
        assert.equal(line, err)
        seen = seen + 1
      end
    end
    assert.is_true(seen >= 2, "docs/api.md shows no selector errors")
  end)
end)
