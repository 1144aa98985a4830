-- Where the time of store:get(key) goes: ns per call of a loop over random keys of a store of N
-- pods (default 20k), warm (every key was asked for once), for variants that add one piece at a
-- time: the loop and key pick, a Lua table lookup, a near no-op C call with (store, key), get
-- from a local, store:get, store:get_by_key. Each variant runs ROUNDS times, interleaved; the
-- best and the median round are reported (rounds move a lot on a shared machine).
--   LUA_PATH='lua/?.lua;lua/?/init.lua;;' LUA_CPATH='build/lua5.4/?.so;;' \
--     lua5.4 bench/get_breakdown.lua [N] [rounds] [only]
--   (LuaJIT: luajit and build/luajit; only: run one variant by letter, for perf record)
local kinformer = require "kinformer"

local N = tonumber(arg and arg[1]) or 20000
local ROUNDS = tonumber(arg and arg[2]) or 7
local ONLY = arg and arg[3]
local M = 1048576 -- calls per round
local NAMESPACES = 10

local function pod(i)
  return {
    apiVersion = "v1", kind = "Pod",
    metadata = {
      namespace = "ns-" .. (i % NAMESPACES), name = "pod-" .. i, uid = "uid-" .. i,
      resourceVersion = "1", labels = { app = "app-" .. (i % 200) },
    },
    spec = { nodeName = "node-" .. (i % 1000), containers = { { name = "c", image = "nginx" } } },
    status = { phase = "Running", podIP = "10.0." .. (i % 250) .. "." .. (i % 200) },
  }
end

local store = kinformer.store{}
for i = 1, N do store:add(pod(i)) end
local keys, plain = {}, {}
for i = 1, N do
  keys[i] = "ns-" .. (i % NAMESPACES) .. "/pod-" .. i
  plain[keys[i]] = store:get(keys[i]) -- warm: every key handed out once
end
math.randomseed(42)
local pick = {}
for i = 1, M do pick[i] = keys[math.random(N)] end

-- A near no-op C function taking (store, key): rawequal on Lua 5.4 (a lua_CFunction there);
-- LuaJIT compiles rawequal inline, so there a library C function without a fast path:
-- debug.getregistry (ignores its arguments, pushes one value).
local noop = jit and debug.getregistry or rawequal

local variants = {
  { "a", "loop + random key pick", function()
      local c = 0
      for i = 1, M do local k = pick[i]; if k then c = c + 1 end end
      return c
    end },
  { "b", "plain Lua table t[k]", function()
      local c, t = 0, plain
      for i = 1, M do if t[pick[i]] then c = c + 1 end end
      return c
    end },
  { "c", "no-op C call f(store, k)", function()
      local c, f, s = 0, noop, store
      for i = 1, M do if f(s, pick[i]) ~= nil then c = c + 1 end end
      return c
    end },
  { "d", "local get; get(store, k)", function()
      local c, get, s = 0, store.get, store
      for i = 1, M do if get(s, pick[i]) then c = c + 1 end end
      return c
    end },
  { "e", "store:get(k)", function()
      local c, s = 0, store
      for i = 1, M do if s:get(pick[i]) then c = c + 1 end end
      return c
    end },
  { "f", "store:get_by_key(k)", function()
      local c, s = 0, store
      for i = 1, M do if s:get_by_key(pick[i]) then c = c + 1 end end
      return c
    end },
  -- What a get whose hit path is Lua would cost: a per-store key cache found in a weak table
  -- by the store, the C get only on a miss (a model: the cache here is the plain table).
  { "g", "model: Lua-side hit path", function()
      local caches = setmetatable({ [store] = plain }, { __mode = "k" })
      local cget = store.get
      local function lget(self, k)
        local kc = caches[self]
        local v = kc and kc[k]
        if v ~= nil then return v end
        return cget(self, k)
      end
      local c, s = 0, store
      for i = 1, M do if lget(s, pick[i]) then c = c + 1 end end
      return c
    end },
}

local times = {}
for _, v in ipairs(variants) do times[v[1]] = {} end
for _ = 1, ROUNDS do
  for _, v in ipairs(variants) do
    if not ONLY or ONLY == v[1] then
      collectgarbage("collect")
      local t0 = os.clock()
      local c = v[3]()
      local dt = os.clock() - t0
      assert(c == M, v[1])
      local ts = times[v[1]]
      ts[#ts + 1] = dt * 1e9 / M
    end
  end
end

print(string.format("%s, N=%d, %d calls x %d rounds (ns per call: best, median; M calls/s at best)",
  jit and jit.version or _VERSION, N, M, ROUNDS))
for _, v in ipairs(variants) do
  local ts = times[v[1]]
  if #ts > 0 then
    table.sort(ts)
    print(string.format("(%s) %-28s %7.1f %7.1f %7.1f", v[1], v[2], ts[1], ts[math.floor((#ts + 1) / 2)],
      1e3 / ts[1]))
  end
end
