-- Load on an nginx probe's /serve?want=N location (the OpenResty specs of the shared model:
-- 200 when synced and the store holds N objects, 503 not synced, 409 synced but incomplete),
-- and what came back.
--
--   local load = require "support.serve_load"
--   local codes = load.hammer(inst, 11, 2)          -- one request after the other for 2 s
--   assert.equals(0, load.failures(codes), load.show(codes))
local openresty = require "support.openresty"
local cjson = require "cjson"
local socket = require "socket"

local now, sleep = socket.gettime, socket.sleep

local _M = {}

--- load.wait_serving(inst, want[, timeout]): until 40 requests in a row answered 200 (every
-- worker synced and complete); fails the spec after timeout seconds (10).
function _M.wait_serving(inst, want, timeout)
  local deadline, ok = now() + (timeout or 10), 0
  while ok < 40 and now() < deadline do
    local code = openresty.get(inst.port, "localhost", "/serve?want=" .. want)
    if code == 200 then ok = ok + 1 else ok = 0; sleep(0.02) end
  end
  if ok < 40 then error("the workers never served a complete cache", 2) end
end

--- load.hammer(inst, want, seconds[, codes]) -> codes: requests to /serve one after the other
-- (a new connection each) for seconds: code -> count, "transport" for no answer.
function _M.hammer(inst, want, seconds, codes)
  codes = codes or {}
  local t = now() + seconds
  while now() < t do
    local code = openresty.get(inst.port, "localhost", "/serve?want=" .. want)
    local k = code or "transport"
    codes[k] = (codes[k] or 0) + 1
  end
  return codes
end

function _M.show(codes)
  local t = {}
  for k, c in pairs(codes) do t[#t + 1] = tostring(k) .. ": " .. c end
  table.sort(t)
  return table.concat(t, ", ")
end

function _M.count(codes, pred)
  local n = 0
  for k, c in pairs(codes) do if pred(k) then n = n + c end end
  return n
end

--- load.failures(codes): answers other than 200 and requests with no answer.
function _M.failures(codes)
  return _M.count(codes, function(k) return k ~= 200 end)
end

--- load.http_failures(codes): answers other than 200 (no answer not counted).
function _M.http_failures(codes)
  return _M.count(codes, function(k) return type(k) == "number" and k ~= 200 end)
end

--- load.wrk_start(inst, want, seconds) -> handle: wrk, 8 connections with Connection: close,
-- in the background.
function _M.wrk_start(inst, want, seconds)
  return io.popen(("wrk -t2 -c8 -d%ds -H 'Connection: close' " ..
    "'http://127.0.0.1:%d/serve?want=%d' 2>&1"):format(seconds, inst.port, want))
end

--- load.wrk_result(handle) -> { out, total, non2xx, socket, connect }: socket counts read,
-- write and timeout errors; connect the requests that never reached nginx (on loopback under
-- this load: the client out of ports, its connections in TIME_WAIT), apart.
function _M.wrk_result(p)
  local out = p:read("a")
  p:close()
  local r = { out = out, total = tonumber(out:match("(%d+) requests in")),
              non2xx = tonumber(out:match("Non%-2xx or 3xx responses: (%d+)") or "0"),
              socket = 0, connect = 0 }
  local c, rd, w, t = out:match("Socket errors: connect (%d+), read (%d+), write (%d+), timeout (%d+)")
  if c then r.connect, r.socket = tonumber(c), tonumber(rd) + tonumber(w) + tonumber(t) end
  return r
end

--- load.get_json(inst, path) -> the decoded body of a 200 (fails the spec otherwise).
function _M.get_json(inst, path)
  local code, body = openresty.get(inst.port, "localhost", path)
  if code ~= 200 then
    error("GET " .. path .. ": " .. tostring(code) .. " " .. tostring(body), 2)
  end
  return cjson.decode(body)
end

return _M
