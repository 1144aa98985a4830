--- kinformer.httpserver: the small HTTP server behind metrics.server: GET /metrics (a registry's
-- Prometheus text), /healthz and /readyz, on the caller's Lua thread. docs/metrics.md.
--
-- Contract:
-- - new{ address, registry, healthz, readyz, read_timeout, max_connections } binds a TCP
--   listener (lua-socket, Debian's lua-socket; port 0 picks a free port) and returns the server,
--   or nil, err when the address cannot be bound. Wrong options raise at the caller's line.
-- - Nothing happens between calls: step() accepts the connections waiting, reads what each one
--   has sent so far (never waiting for more: a partial request is kept with its connection for
--   the next step) and answers every complete request in full, at most max_requests per step.
--   Sockets are non-blocking: a step costs the handling of the requests that are complete (the
--   registry's text, a health function) plus a few non-blocking system calls per connection,
--   whatever a client does. An answer the client does not read at once is kept and sent on
--   by later steps.
-- - One request per connection (Connection: close). A connection that has not sent a complete
--   request within read_timeout seconds, or not taken its answer within read_timeout, is
--   closed; beyond max_connections the oldest connection is closed. Requests: GET and HEAD;
--   other methods 405; a request head over 8 KiB 431; a body (which nothing here reads) over
--   64 KiB 413.
-- - fd() is the listener's descriptor (readable when a connection waits: for core.wait);
--   fds() adds the open connections' (readable when they sent more). A loop that waits on
--   fd() alone still serves a slow client's request at its next step.
-- - healthz / readyz: fn() -> ok [, text]. 200 with text (default "ok") when ok, else 503 (text
--   default "not ok" / "not ready"). Without a function the answer is 200 "ok". A function
--   that raises answers 503 and is logged; it never stops the server.
--
-- Threads: none. The caller's thread, the one that calls step().
local argcheck = require "kinformer.argcheck"
local clock = require "kinformer.clock"
local errtext = require "kinformer.errtext"

local type, tostring, tonumber, pcall, setmetatable, ipairs =
  type, tostring, tonumber, pcall, setmetatable, ipairs
local string_format, string_find, string_lower, table_concat, table_remove =
  string.format, string.find, string.lower, table.concat, table.remove

local raise = argcheck.raise
local now = clock.now

local MAX_HEAD = 8192        -- bytes of request line and headers
local MAX_BODY = 65536       -- bytes of a request body we read (and drop) before answering
local READ_CHUNK = 16384

local _M = {}

local Server = {}
Server.__index = Server

local STATUS_TEXT = {
  [200] = "OK", [400] = "Bad Request", [404] = "Not Found", [405] = "Method Not Allowed",
  [413] = "Content Too Large", [431] = "Request Header Fields Too Large",
  [500] = "Internal Server Error", [503] = "Service Unavailable",
}

local METRICS_TYPE = "text/plain; version=0.0.4; charset=utf-8"
local PLAIN = "text/plain; charset=utf-8"

local function log(level, msg)
  local ok, core = pcall(require, "kinformer.core")
  if ok and core.log then core.log(level, "metrics server: " .. msg) end
end

-- "host:port", "[v6]:port" or ":port" (every interface) -> host, port | nil
local function parse_address(s)
  local host, port = s:match("^%[([^%]]+)%]:(%d+)$")
  if not host then host, port = s:match("^([^:]*):(%d+)$") end
  port = tonumber(port)
  if not port or port > 65535 then return nil end
  if host == "" then host = "0.0.0.0" end
  return host, port
end

local KNOWN = { address = true, registry = true, healthz = true, readyz = true,
                read_timeout = true, max_connections = true, max_requests = true }

--- httpserver.new{ address = "127.0.0.1:8080", registry = reg, healthz = fn, readyz = fn,
--    read_timeout = 5, max_connections = 32, max_requests = 8 } -> server | nil, err
function _M.new(opts)
  local F = "server"
  if type(opts) ~= "table" then raise(1, F, "options table expected, got " .. type(opts)) end
  argcheck.options(opts, KNOWN, F)
  local address = opts.address
  if type(address) ~= "string" then raise(1, F, "option 'address' must be \"host:port\"") end
  local host, port = parse_address(address)
  if not host then raise(1, F, "option 'address' must be \"host:port\", got " .. address) end
  local reg = opts.registry
  if reg ~= nil and (type(reg) ~= "table" or type(reg.text) ~= "function") then
    raise(1, F, "option 'registry' must be a metrics registry")
  end
  local healthz = argcheck.func(opts, "healthz", F)
  local readyz = argcheck.func(opts, "readyz", F)
  local read_timeout = argcheck.number(opts, "read_timeout", F, 5, 0, true)
  local max_conns = argcheck.number(opts, "max_connections", F, 32, 1, false, true)
  local max_requests = argcheck.number(opts, "max_requests", F, 8, 1, false, true)
  local ok, socket = pcall(require, "socket")
  if not ok then
    return nil, "metrics server: lua-socket is not installed (Debian: lua-socket): "
      .. tostring(socket)
  end
  local listener, err = socket.bind(host, port, 64)
  if not listener then
    return nil, string_format("metrics server: cannot listen on %s: %s", address, tostring(err))
  end
  listener:settimeout(0)
  local _, bound_port = listener:getsockname()
  local shown = host:find(":", 1, true) and "[" .. host .. "]" or host
  return setmetatable({
    _listener = listener, _address = shown .. ":" .. tostring(bound_port or port),
    _registry = reg, _healthz = healthz, _readyz = readyz,
    _read_timeout = read_timeout, _max_conns = max_conns, _max_requests = max_requests,
    _conns = {}, -- oldest first: { sock, buf, since, out, sent }
    _closed = false,
    _served = 0, _dropped = 0,
  }, Server)
end

local function check_open(self, fname)
  if self._closed then argcheck.fail("server:" .. fname .. "(): the server is closed") end
end

--- server:address() -> "host:port" (the port the system picked for port 0)
function Server:address()
  return self._address
end

--- server:fd() -> the listener's file descriptor (readable when a connection waits)
function Server:fd()
  check_open(self, "fd")
  return self._listener:getfd()
end

--- server:fds() -> { listener fd, each open connection's fd }
function Server:fds()
  check_open(self, "fds")
  local list = { self._listener:getfd() }
  for _, c in ipairs(self._conns) do list[#list + 1] = c.sock:getfd() end
  return list
end

local function response(code, ctype, body, head_only, extra)
  local lines = {
    string_format("HTTP/1.1 %d %s", code, STATUS_TEXT[code] or "Unknown"),
    "Content-Type: " .. ctype,
    "Content-Length: " .. #body,
    "Connection: close",
  }
  if extra then lines[#lines + 1] = extra end
  lines[#lines + 1] = ""
  lines[#lines + 1] = head_only and "" or body
  return table_concat(lines, "\r\n")
end

local function check(self, fn, bad_text)
  if not fn then return 200, "ok" end
  local ok, good, text = pcall(fn)
  if not ok then
    log("error", "a health check raised: " .. errtext(good))
    return 503, bad_text
  end
  if good then return 200, text ~= nil and tostring(text) or "ok" end
  return 503, text ~= nil and tostring(text) or bad_text
end

-- The answer to one request head.
local function answer(self, method, target)
  local path = target:match("^[^?#]*")
  if method ~= "GET" and method ~= "HEAD" then
    return response(405, PLAIN, "method not allowed\n", false, "Allow: GET, HEAD")
  end
  local head_only = method == "HEAD"
  if path == "/metrics" then
    local reg = self._registry
    if not reg then return response(404, PLAIN, "no registry\n", head_only) end
    local ok, text = pcall(reg.text, reg)
    if not ok then
      log("error", "the registry's text failed: " .. errtext(text))
      return response(500, PLAIN, "metrics failed\n", head_only)
    end
    return response(200, METRICS_TYPE, text, head_only)
  elseif path == "/healthz" or path == "/readyz" then
    local code, text
    if path == "/healthz" then
      code, text = check(self, self._healthz, "not ok")
    else
      code, text = check(self, self._readyz, "not ready")
    end
    return response(code, PLAIN, text .. "\n", head_only)
  end
  return response(404, PLAIN, "not found\n", head_only)
end

-- Looks at a connection's buffer: the answer once a request is complete, else nil.
local function parse(self, c)
  local buf = c.buf
  local head_end = string_find(buf, "\r\n\r\n", 1, true)
  if not head_end then
    if #buf > MAX_HEAD then return response(431, PLAIN, "request head too large\n") end
    return nil
  end
  if head_end > MAX_HEAD then return response(431, PLAIN, "request head too large\n") end
  local method, target = buf:match("^(%u+) (%S+) HTTP/%d%.%d\r\n")
  if not method then return response(400, PLAIN, "bad request\n") end
  local head = string_lower(buf:sub(1, head_end))
  local length = tonumber(head:match("\r\ncontent%-length:%s*(%d+)") or "0")
  if head:find("\r\ntransfer%-encoding:") or length > MAX_BODY then
    return response(413, PLAIN, "request body not accepted\n")
  end
  -- the body (nothing here uses one) is read before answering, so that closing the
  -- connection does not reset it under the client's feet
  if #buf < head_end + 3 + length then return nil end
  return answer(self, method, target)
end

local function close_conn(self, i)
  local c = table_remove(self._conns, i)
  c.sock:close()
end

-- Sends what the socket takes now; true once all is sent.
local function flush(c)
  local i, err, last = c.sock:send(c.out, c.sent + 1)
  if i then return true end
  if err == "timeout" then
    c.sent = last or c.sent
    return false
  end
  return true -- the client went away: nothing more to send
end

-- Reads what a connection has now; false when it closed.
local function fill(c)
  while true do
    local data, err, partial = c.sock:receive(READ_CHUNK)
    local got = data or partial
    if got and got ~= "" then c.buf = c.buf .. got end
    if err == "closed" then return false end
    if not data then return true end
    if #c.buf > MAX_HEAD + MAX_BODY then return true end
  end
end

--- server:step() -> number of requests answered in this step
-- Never blocks: see the contract above.
function Server:step()
  check_open(self, "step")
  local conns, t = self._conns, now()
  for _ = 1, self._max_conns do
    local sock = self._listener:accept()
    if not sock then break end
    sock:settimeout(0)
    if #conns >= self._max_conns then
      close_conn(self, 1)
      self._dropped = self._dropped + 1
    end
    conns[#conns + 1] = { sock = sock, buf = "", since = t, sent = 0 }
  end
  local answered, i = 0, 1
  while i <= #conns do
    local c = conns[i]
    local done = false
    if c.out then
      done = flush(c)
    elseif answered < self._max_requests then
      local open = fill(c)
      local out = parse(self, c)
      if out then
        answered = answered + 1
        self._served = self._served + 1
        c.out, c.buf, c.since = out, "", now()
        done = flush(c)
      elseif not open then
        done = true
      end
    end
    if not done and t - c.since > self._read_timeout then done = true end
    if done then close_conn(self, i) else i = i + 1 end
  end
  return answered
end

--- server:status() -> { address, connections, served, dropped }
function Server:status()
  return { address = self._address, connections = #self._conns, served = self._served,
           dropped = self._dropped }
end

--- server:close(): closes the listener and every connection; a second close does nothing
function Server:close()
  if self._closed then return end
  self._closed = true
  for i = #self._conns, 1, -1 do close_conn(self, i) end
  self._listener:close()
end

return _M
