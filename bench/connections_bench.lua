-- Connections a client opens: Debian's nginx in front of the fake API server, once as a TLS
-- HTTP/2 proxy (`listen ... ssl http2`) and once as a plain HTTP/1.1 one; nginx's access log
-- ($connection, $connection_requests, $server_protocol, $ssl_session_reused) tells which TCP
-- connection carried each request.
--
--   make bench-connections
--   LUA_PATH='lua/?.lua;lua/?/init.lua;spec/?.lua;;' LUA_CPATH='build/lua5.4/?.so;;' \
--     lua5.4 bench/connections_bench.lua
--
-- Scenario, per protocol: one client starts six informers together (pods, services,
-- deployments, endpointslices, nodes, namespaces) and waits for their sync; the TCP
-- connections it holds open to the proxy are counted from /proc/net/tcp while they watch; then
-- ten blocking REST calls (client:get) one after the other; then the informers stop, and after
-- 2 s the client is closed. The kinformer measured is whichever LUA_PATH / LUA_CPATH name
-- (another checkout's for "before").
_G.KINFORMER_ROOT = _G.KINFORMER_ROOT or "."
local kinformer = require "kinformer"
local socket = require "socket"
local fake = require "support.fake_apiserver"
local certs = require "support.certs"
local h2proxy = require "support.h2proxy"

local RESOURCES = { "pods", "services", "deployments", "endpointslices", "nodes", "namespaces" }

-- ESTABLISHED TCP connections to 127.0.0.1:port (the client's ends: remote port = port).
local function open_to(port)
  local n = 0
  for line in io.lines("/proc/net/tcp") do
    local rport, st = line:match("^%s*%d+: %x+:%x+ %x+:(%x+) (%x+)")
    if rport and tonumber(rport, 16) == port and st == "01" then n = n + 1 end
  end
  return n
end

local function distinct(lines, pred)
  local set, n = {}, 0
  for _, r in ipairs(lines) do
    if pred(r) and not set[r.conn] then
      set[r.conn] = true
      n = n + 1
    end
  end
  return n
end

local function scenario(proxy, which)
  local url = proxy.urls[which]
  local port = tonumber(url:match(":(%d+)$"))
  local from = #proxy:requests() + 1
  local c = assert(kinformer.client{ server = url, ca_file = proxy.o.certs.ca })
  local infs = {}
  for i, res in ipairs(RESOURCES) do infs[i] = assert(c:informer{ resource = res }) end
  for _, inf in ipairs(infs) do assert(inf:start()) end
  for _, inf in ipairs(infs) do assert(inf:wait_for_sync(10)) end
  socket.sleep(0.5)
  local open_watching = open_to(port)
  for _ = 1, 10 do assert(c:get("namespaces", "default")) end
  local open_after_rest = open_to(port)
  for _, inf in ipairs(infs) do inf:stop() end
  local lines, watches
  local function collect(seconds)
    local deadline = socket.gettime() + seconds
    repeat
      socket.sleep(0.1)
      lines = {}
      for i, r in ipairs(proxy:requests()) do
        if i >= from and r.port == port then lines[#lines + 1] = r end
      end
      watches = 0
      for _, r in ipairs(lines) do if r.watch then watches = watches + 1 end end
    until watches >= #RESOURCES or socket.gettime() > deadline
  end
  -- nginx logs a request when it ends: a watch still open at the server 2 s after stop() shows
  -- only once the client is closed (its connections with it).
  collect(2)
  local left_open = #RESOURCES - watches
  infs, c = nil, nil
  collectgarbage()
  collectgarbage()
  collect(5)
  local rest = function(r) return r.path == "/api/v1/namespaces/default" end
  local list = function(r) return not rest(r) and not r.watch end
  local watch = function(r) return r.watch end
  local all = function() return true end
  local resumed = 0
  local seen = {}
  for _, r in ipairs(lines) do
    if not seen[r.conn] then
      seen[r.conn] = true
      if r.reused then resumed = resumed + 1 end
    end
  end
  return { lists = distinct(lines, list), watches = distinct(lines, watch),
           rest = distinct(lines, rest), total = distinct(lines, all), resumed = resumed,
           open_watching = open_watching, open_after_rest = open_after_rest, left_open = left_open,
           proto = lines[1] and lines[1].proto or "?" }
end

local tls = certs.make()
local srv = fake.start{ args = { "--sample-cluster", "--pods", "200" }, quiet = true }
local proxy = h2proxy.start{ upstream = srv.url, certs = tls,
                             servers = { { max_streams = 128 }, { plain = true } } }
local ok, err = pcall(function()
  print(("connections benchmark: one client, 6 informers started together, then 10 REST calls; "
    .. "nginx %s in front of the fake API server, %s"):format(
    (io.popen("nginx -v 2>&1"):read("l") or ""):match("nginx/(%S+)") or "?", os.date("!%Y-%m-%d")))
  print()
  print("| proxy | protocol | connections for the 6 lists | for the 6 watches | open while watching "
    .. "| for 10 REST calls | open after them | connections in all (TLS handshakes; resumed) "
    .. "| watches still open at the server 2 s after stop() |")
  print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
  for which, name in ipairs{ "TLS, http2", "plain HTTP/1.1" } do
    local f = scenario(proxy, which)
    print(("| %s | %s | %d | %d | %d | %d | %d | %d%s | %d |"):format(name, f.proto, f.lists,
      f.watches, f.open_watching, f.rest, f.open_after_rest, f.total,
      which == 1 and ("; " .. f.resumed .. " resumed") or "", f.left_open))
  end
end)
proxy:stop()
srv:stop()
tls:remove()
if not ok then error(err, 0) end
