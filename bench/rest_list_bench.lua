-- The REST client's list of N pods (default 10k, about 90 MB of JSON with managedFields) from
-- the fake API server: client:list("pods") (every page, decoded), and one list body decoded
-- alone by lua-cjson and by kinformer's decoder (kinformer.core.decode, which rest.lua uses).
-- CPU seconds, best of REPS runs (default 5). Prints the first number of the first item and its
-- Lua type: an integer on Lua 5.4 where the JSON has no fraction or exponent.
-- Run: LUA_PATH='lua/?.lua;lua/?/init.lua;spec/?.lua;;' LUA_CPATH='build/lua5.4/?.so;;' \
--        lua5.4 bench/rest_list_bench.lua [N] [REPS]      (luajit with build/luajit)
local fake = require "support.fake_apiserver"
local kinformer = require "kinformer"
local core = require "kinformer.core"
local cjson = require "cjson.safe"

local N, REPS = tonumber(arg and arg[1]) or 10000, tonumber(arg and arg[2]) or 5

local function best(fn)
  local b = math.huge
  for _ = 1, REPS do
    collectgarbage("collect")
    local t0 = os.clock()
    fn()
    b = math.min(b, os.clock() - t0)
  end
  return b
end

local function first_number(t, path)
  for k, v in pairs(t) do
    if type(v) == "number" then return path .. "." .. tostring(k), v end
    if type(v) == "table" then
      local p, x = first_number(v, path .. "." .. tostring(k))
      if p then return p, x end
    end
  end
end

local srv = fake.start{ quiet = true, args = { "--pods", N } }
local client = assert(kinformer.client{ server = srv.url })
local _, _, _, body = srv:request("GET", "/api/v1/pods")
print(("REST list benchmark: %s, %d pods, one list body %.1f MB"):format(_VERSION, N, #body / 1e6))
print(("decode one body: lua-cjson %.3f s, kinformer.core.decode %.3f s (CPU, best of %d)"):format(
  best(function() assert(cjson.decode(body)) end), best(function() assert(core.decode(body)) end),
  REPS))
local list
local cpu = best(function() list = assert(client:list("pods")) end)
local path, x = first_number(list.items[1], "items[1]")
print(("client:list(\"pods\"), every page: %.3f s (CPU, best of %d), %d items; %s = %s (%s)"):format(
  cpu, REPS, #list.items, path, tostring(x), math.type and math.type(x) or "number"))
srv:stop()
