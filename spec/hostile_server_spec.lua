-- What kinformer does with hostile or broken input on its I/O side: token files that are not
-- regular files or are too large, huge response headers, bad watch lines on a stream that then
-- goes quiet, list responses that are not lists, exec plugins that hang (with children), and
-- transforms that raise values that are not strings. Each case must fail loudly (an error in
-- status, a log line, nil + err) and promptly, never hang and never empty the cache.
local kinformer = require "kinformer"
local core = require "kinformer.core"
local cjson = require "cjson"
local socket = require "socket"
local fake = require "support.fake_apiserver"
local proc = require "support.proc"

local quote = proc.quote

local function tmpdir()
  local d = os.tmpname()
  os.remove(d)
  assert(os.execute("mkdir -p " .. quote(d)))
  return d
end

local function rmtree(d)
  if d and d:match("^/tmp/") then os.execute("rm -rf " .. quote(d)) end
end

local function write(path, data)
  local f = assert(io.open(path, "wb"))
  f:write(data)
  f:close()
end

local pump = require "support.pump"

local function configmap(name)
  return { apiVersion = "v1", kind = "ConfigMap",
           metadata = { namespace = "default", name = name }, data = { k = "v" } }
end

local function create_cm(srv, name)
  local code = srv:request("POST", "/api/v1/namespaces/default/configmaps", configmap(name))
  assert(code == 201, "create " .. name .. ": " .. tostring(code))
end

describe("transform errors that are not strings", function()
  local srv, inf
  after_each(function()
    if inf then inf:stop() end
    inf = nil
    if srv then srv:stop() end
    srv = nil
    kinformer.set_logger(nil)
  end)

  local function fifo_error(value)
    local fifo = kinformer.delta_fifo{ transform = function() error(value) end }
    local ok, err = fifo:add(configmap("a"))
    assert.is_nil(ok)
    return err
  end

  it("a delta_fifo transform raising a table, a __tostring table or a bad __tostring", function()
    assert.same("transform failed: (error object of type table)", fifo_error({}))
    assert.same("transform failed: custom text",
      fifo_error(setmetatable({}, { __tostring = function() return "custom text" end })))
    assert.same("transform failed: (error object of type table: its __tostring failed)",
      fifo_error(setmetatable({}, { __tostring = function() error("nested") end })))
    assert.same("transform failed: (error object of type table: its __tostring failed)",
      fifo_error(setmetatable({}, { __tostring = function() return {} end })))
    assert.same("transform failed: 42", fifo_error(42))
    assert.same("transform failed: (error object of type boolean)", fifo_error(true))
    assert.matches("transform failed: .*plain text", fifo_error("plain text"))
  end)

  it("an informer transform raising a table is reported with a description of the value", function()
    srv = fake.start{ args = { "--no-default-namespaces" }, quiet = true }
    srv:request("POST", "/api/v1/namespaces", { metadata = { name = "default" } })
    create_cm(srv, "good")
    create_cm(srv, "bad")
    local logged = {}
    kinformer.set_logger(function(level, msg) logged[#logged + 1] = level .. ": " .. msg end)
    local client = assert(kinformer.client{ server = srv.url })
    inf = assert(client:informer{ resource = "configmaps", transform = function(obj)
      if obj.metadata.name == "bad" then error({ code = 1 }) end
      return obj
    end })
    assert(inf:start())
    assert(inf:wait_for_sync(5))
    assert.is_nil(inf:store():get("default/bad"))
    local all = table.concat(logged, "\n")
    assert.matches("transform failed for default/bad: raised: (error object of type table)", all,
      1, true)
    assert.is_nil(all:find("(null)", 1, true))
  end)
end)

-- Runs a Lua 5.4 script in a child process bounded by `timeout`, so a hang fails the spec
-- instead of stopping the run. -> its stdout, whether it exited 0
local function run_child(script, args, seconds)
  local root = rawget(_G, "KINFORMER_ROOT") or "."
  local path = os.tmpname()
  write(path, "package.path = arg[1] .. '/lua/?.lua;' .. arg[1] .. '/lua/?/init.lua;' .. "
    .. "arg[1] .. '/spec/?.lua;' .. package.path\n"
    .. "package.cpath = arg[1] .. '/build/lua5.4/?.so;' .. package.cpath\n" .. script)
  local words = { "timeout", "-s", "KILL", tostring(seconds), "lua5.4", quote(path), quote(root) }
  for _, a in ipairs(args) do words[#words + 1] = quote(a) end
  local p = assert(io.popen(table.concat(words, " ") .. " 2>&1", "r"))
  local out = p:read("a")
  local ok = p:close()
  os.remove(path)
  return out, ok
end

describe("token files that are not token files", function()
  local srv, dir
  before_each(function()
    dir = tmpdir()
    srv = fake.start{ args = { "--token", "secret-token-1" }, quiet = true }
  end)
  after_each(function()
    if srv then srv:stop() end
    rmtree(dir)
  end)

  it("a FIFO or an oversized file at token_file: nil, err at once, nothing hangs", function()
    assert(os.execute("mkfifo " .. quote(dir .. "/fifo")))
    write(dir .. "/big", string.rep("a", 64 * 1024 + 1))
    local out, ok = run_child([[
      local kinformer = require "kinformer"
      for _, f in ipairs({ arg[3] .. "/fifo", arg[3] .. "/big" }) do
        local c, err, code = kinformer.client{ server = arg[2], token_file = f }
        print(tostring(c), err, code)
      end
    ]], { srv.url, dir }, 10)
    assert.is_true(ok, out)
    assert.matches("nil\ttoken file [^\n]*/fifo: not a regular file\tEIO", out)
    assert.matches("nil\ttoken file [^\n]*/big: larger than 64 KiB\tEIO", out)
  end)

  it("replaced by a FIFO while informers run: the error shows in status and stop returns", function()
    write(dir .. "/token", "secret-token-1\n")
    local out, ok = run_child([[
      local kinformer = require "kinformer"
      local core = require "kinformer.core"
      local logged = {}
      kinformer.set_logger(function(level, msg) logged[#logged + 1] = msg end)
      local c = assert(kinformer.client{ server = arg[2], token_file = arg[3] .. "/token" })
      local inf = assert(c:informer{ resource = "configmaps", watch_timeout = 1,
                                     backoff_initial = 0.1, backoff_max = 0.5 })
      assert(inf:start())
      assert(inf:wait_for_sync(5))
      os.remove(arg[3] .. "/token")
      assert(os.execute("mkfifo '" .. arg[3] .. "/token'"))
      local deadline = core.now() + 8
      while core.now() < deadline do
        inf:dispatch(100)
        local e = inf:status().last_error
        if e and e:find("not a regular file", 1, true) then break end
        core.wait({ inf:fd() }, 0.05)
      end
      -- Retried with backoff meanwhile: still one log line, several errors counted.
      local until_t = core.now() + 1.5
      while core.now() < until_t do inf:dispatch(100); core.wait({ inf:fd() }, 0.05) end
      local st = inf:status()
      print("last_error: " .. tostring(st.last_error))
      print("errors: " .. tostring(st.errors))
      local n = 0
      for _, m in ipairs(logged) do if m:find("not a regular file", 1, true) then n = n + 1 end end
      print("logged: " .. n)
      local t0 = core.now()
      inf:stop()
      print(string.format("stop took %.2f", core.now() - t0))
    ]], { srv.url, dir }, 25)
    assert.is_true(ok, out)
    assert.matches("last_error: [^\n]*token file [^\n]*/token: not a regular file", out)
    assert.matches("errors: %d%d?", out)
    assert.is_true(tonumber(out:match("errors: (%d+)")) >= 2, out)
    assert.matches("logged: 1\n", out) -- once, not once per retry
    assert.is_nil(out:find("secret-token-1", 1, true))
    local took = tonumber(out:match("stop took ([%d.]+)"))
    assert.is_truthy(took and took < 2, out)
  end)
end)

-- A scripted API server for bytes the fake API server does not send. It serves configmaps in
-- "default" and answers by a script given as JSON:
--   header_bytes = N      every response carries a header line of N bytes
--   lists = { body, ... } the Nth list request gets the Nth body (the last one repeats)
--   watches = { lines, ... } the Nth watch gets those lines, then stays open and silent (a
--                         line "CLOSE" ends the stream there instead)
-- It exits with its parent (the spec) and is stopped by stop().
local SCRIPTED = [[
import json, os, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
script = json.loads(sys.argv[1])
counts = {"list": 0, "watch": 0}
lock = threading.Lock()
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a):
        pass
    def big(self):
        n = script.get("header_bytes")
        if n:
            self.send_header("X-Big", "a" * n)
    def do_GET(self):
        watch = "watch=true" in self.path or "watch=1" in self.path
        kind = "watch" if watch else "list"
        with lock:
            counts[kind] += 1
            i = counts[kind]
        seq = script.get("watches" if watch else "lists") or [[] if watch else {"kind": "ConfigMapList", "apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": []}]
        item = seq[min(i, len(seq)) - 1]
        if not watch:
            body = (item if isinstance(item, str) else json.dumps(item)).encode()
            self.send_response(200)
            self.big()
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(200)
        self.big()
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for line in item:
                if line == "CLOSE":  # the end of the stream
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                    return
                data = (line if isinstance(line, str) else json.dumps(line)).encode() + b"\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
            while True:  # open and silent until the client goes
                time.sleep(0.2)
                self.connection.settimeout(0.01)
                try:
                    if self.connection.recv(1) == b"":
                        return
                except OSError as e:
                    if "timed out" not in str(e):
                        return
        except OSError:
            return
class S(ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        pass  # a client that hangs up mid-answer is what some cases do
srv = S(("127.0.0.1", 0), H)
srv.daemon_threads = True
print("http://127.0.0.1:%d" % srv.server_address[1], flush=True)
parent = os.getppid()
def watchdog():
    while os.getppid() == parent:
        time.sleep(0.2)
    os._exit(0)
threading.Thread(target=watchdog, daemon=True).start()
srv.serve_forever()
]]

local function scripted_server(script)
  local path = os.tmpname()
  write(path, SCRIPTED)
  local p = assert(io.popen("echo $$; exec python3 " .. quote(path) .. " "
    .. quote(cjson.encode(script)), "r"))
  local pid = tonumber(p:read("l"))
  local url = p:read("l")
  os.remove(path)
  assert(url and url:match("^http://127%.0%.0%.1:%d+$"), "scripted server did not start")
  return { url = url, pid = pid, stop = function()
    os.execute("kill -KILL " .. pid .. " 2>/dev/null")
    p:close()
  end }
end

local CONFIGMAPS = { group = "", version = "v1", resource = "configmaps", namespaced = true }

local function cm_list(rv, names)
  local items = {}
  for i, n in ipairs(names) do
    local o = configmap(n)
    o.metadata.resourceVersion = tostring(i)
    o.metadata.uid = "uid-" .. n
    items[i] = o
  end
  return { kind = "ConfigMapList", apiVersion = "v1", metadata = { resourceVersion = rv },
           items = items }
end

describe("a response header line of 1 MiB", function()
  local srv
  after_each(function() if srv then srv:stop() end srv = nil end)

  it("is reported as too large, not as out of memory, by the REST client and the informer", function()
    srv = scripted_server{ header_bytes = 1024 * 1024 }
    local client = assert(kinformer.client{ server = srv.url })
    local obj, err = client:get(CONFIGMAPS, "default/x")
    assert.is_nil(obj)
    local msg = type(err) == "table" and tostring(err.message or err) or tostring(err)
    assert.matches("header", msg)
    assert.matches("too large", msg)
    assert.is_nil(msg:lower():find("out of memory", 1, true))

    kinformer.set_logger(function() end)
    finally(function() kinformer.set_logger(nil) end)
    local inf = assert(client:informer{ resource = CONFIGMAPS, backoff_initial = 0.1 })
    finally(function() inf:stop() end)
    assert(inf:start())
    local ok = pump(inf, 5, function() return inf:status().last_error ~= nil end)
    assert.is_true(ok)
    local e = inf:status().last_error
    assert.matches("header", e)
    assert.matches("too large", e)
    assert.is_nil(e:lower():find("out of memory", 1, true))
  end)
end)

describe("a relist answered with something that is not a list", function()
  local srv, inf
  after_each(function()
    if inf then inf:stop() end
    inf = nil
    if srv then srv:stop() end
    srv = nil
    kinformer.set_logger(nil)
  end)

  local EXPIRED = { type = "ERROR", object = { kind = "Status", apiVersion = "v1", code = 410,
                                               reason = "Expired", status = "Failure" } }
  local shapes = {
    ['"items": {...}'] = [[{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"20"},"items":{"a":{}}}]],
    ["a Namespace object"] = [[{"kind":"Namespace","apiVersion":"v1","metadata":{"name":"default","resourceVersion":"20"}}]],
    ["{}"] = "{}",
  }
  for what, body in pairs(shapes) do
    it(what .. ": the cache is kept, nothing deleted, the error counted and logged", function()
      srv = scripted_server{ lists = { cm_list("10", { "a", "b", "c" }), body },
                             watches = { { EXPIRED, "CLOSE" } } }
      local logged = {}
      kinformer.set_logger(function(level, msg) logged[#logged + 1] = msg end)
      local client = assert(kinformer.client{ server = srv.url })
      inf = assert(client:informer{ resource = CONFIGMAPS, backoff_initial = 0.1,
                                    backoff_max = 0.2 })
      local deleted = 0
      inf:add_handler{ on_delete = function() deleted = deleted + 1 end }
      assert(inf:start())
      assert(inf:wait_for_sync(5))
      assert.same(3, #inf:store():list())
      local ok = pump(inf, 5, function()
        local e = inf:status().last_error
        return e ~= nil and e:find("not a list", 1, true) ~= nil and inf:status().errors >= 3
      end)
      assert.is_true(ok, tostring(inf:status().last_error))
      assert.same(0, deleted)
      assert.same(3, #inf:store():list())
      assert.same(1, inf:status().lists) -- the bad relists did not complete
      local n = 0
      for _, m in ipairs(logged) do if m:find("not a list", 1, true) then n = n + 1 end end
      assert.same(1, n) -- once, not once per retry
    end)
  end

  it('"items": null is an empty list, as client-go decodes it', function()
    srv = scripted_server{ lists = { cm_list("10", { "a", "b" }),
      [[{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"20"},"items":null}]] },
      watches = { { EXPIRED, "CLOSE" } } }
    kinformer.set_logger(function() end)
    local client = assert(kinformer.client{ server = srv.url })
    inf = assert(client:informer{ resource = CONFIGMAPS, backoff_initial = 0.1 })
    local deleted = 0
    inf:add_handler{ on_delete = function() deleted = deleted + 1 end }
    assert(inf:start())
    assert(inf:wait_for_sync(5))
    assert.is_true(pump(inf, 5, function() return deleted == 2 end))
    assert.same(0, #inf:store():list())
  end)
end)

describe("a bad watch line on a stream that then goes quiet", function()
  local srv, inf
  after_each(function()
    if inf then inf:stop() end
    inf = nil
    if srv then srv:stop() end
    srv = nil
    kinformer.set_logger(nil)
  end)

  it("a malformed line from the fake API server: reported and relisted at once", function()
    srv = fake.start{ args = { "--bookmark-interval", "3600",
      "--fault", [[{"watch":true,"path":"/configmaps$","action":"malformed_line"}]] }, quiet = true }
    kinformer.set_logger(function() end)
    local client = assert(kinformer.client{ server = srv.url })
    inf = assert(client:informer{ resource = "configmaps", namespace = "default",
                                  backoff_initial = 0.1, backoff_max = 0.2 })
    assert(inf:start())
    assert(inf:wait_for_sync(5))
    -- Nothing else is sent on that watch (no bookmark, no event): only the line itself can
    -- have made the informer act.
    local t0 = socket.gettime()
    assert.is_true(pump(inf, 3, function() return inf:status().relists >= 1 end))
    assert.is_true(socket.gettime() - t0 < 2)
    local st = inf:status()
    assert.is_true(st.errors >= 1)
    assert.matches("bad event", st.last_error)
    create_cm(srv, "later")
    assert.is_true(pump(inf, 3, function() return inf:store():get("default/later") ~= nil end))
  end)

  local OBJ = { kind = "ConfigMap", apiVersion = "v1",
                metadata = { namespace = "default", name = "x", resourceVersion = "11" } }
  local lines = {
    ["an unknown event type"] = { type = "WHATEVER", object = OBJ },
    ["an ERROR event without an object"] = { type = "ERROR" },
    ["garbage"] = "}{ not json at all",
  }
  for what, line in pairs(lines) do
    it(what .. ": the error is counted at once and the relist brings what came after", function()
      srv = scripted_server{ lists = { cm_list("10", { "a" }), cm_list("20", { "a", "later" }) },
                             watches = { { line } } }
      local logged = {}
      kinformer.set_logger(function(level, msg) logged[#logged + 1] = msg end)
      local client = assert(kinformer.client{ server = srv.url })
      inf = assert(client:informer{ resource = CONFIGMAPS, backoff_initial = 0.1,
                                    backoff_max = 0.2 })
      assert(inf:start())
      assert(inf:wait_for_sync(5))
      local t0 = socket.gettime()
      assert.is_true(pump(inf, 3, function() return inf:store():get("default/later") ~= nil end))
      assert.is_true(socket.gettime() - t0 < 2)
      local st = inf:status()
      assert.is_true(st.errors >= 1)
      assert.matches("watch /api/v1/configmaps: bad event", st.last_error)
      assert.same(1, st.relists)
      local n = 0
      for _, m in ipairs(logged) do if m:find("bad event", 1, true) then n = n + 1 end end
      assert.same(1, n)
    end)
  end
end)

describe("an exec credential plugin that hangs", function()
  local srv, dir
  before_each(function()
    dir = tmpdir()
    srv = fake.start{ quiet = true }
  end)
  after_each(function()
    -- Whatever the outcome, nothing the plugin started outlives the spec.
    for _, f in ipairs({ "plugin.pid", "child.pid" }) do
      local h = io.open(dir .. "/" .. f)
      local pid = h and tonumber(h:read("l"))
      if h then h:close() end
      if pid then os.execute("kill -9 " .. pid .. " 2>/dev/null") end
    end
    if srv then srv:stop() end
    rmtree(dir)
  end)

  it("informer:stop() does not wait for it; the plugin and its child are killed", function()
    write(dir .. "/hang.sh", "#!/bin/sh\nsleep 60 &\necho $! > " .. dir .. "/child.pid\n"
      .. "echo $$ > " .. dir .. "/plugin.pid\nexec sleep 60\n")
    assert(os.execute("chmod 700 " .. quote(dir .. "/hang.sh")))
    write(dir .. "/kubeconfig", table.concat({
      "apiVersion: v1", "kind: Config",
      "clusters:", "- name: c", "  cluster:", "    server: " .. srv.url,
      "contexts:", "- name: x", "  context:", "    cluster: c", "    user: u",
      "current-context: x",
      "users:", "- name: u", "  user:", "    exec:",
      "      apiVersion: client.authentication.k8s.io/v1",
      "      command: " .. dir .. "/hang.sh",
      "      interactiveMode: Never", "" }, "\n"))
    local out, ok = run_child([[
      local kinformer = require "kinformer"
      local core = require "kinformer.core"
      kinformer.set_logger(function() end)
      local c = assert(kinformer.client{ kubeconfig = arg[2] .. "/kubeconfig" })
      local inf = assert(c:informer{ resource = { group = "", version = "v1",
        resource = "configmaps", namespaced = true } })
      assert(inf:start())
      local deadline = core.now() + 5
      repeat -- until the plugin runs (on the I/O thread) and has started its child
        local f = io.open(arg[2] .. "/child.pid")
        if f then f:close() break end
        core.wait({}, 0.05)
      until core.now() > deadline
      core.wait({}, 0.2)
      local t0 = core.now()
      inf:stop()
      print(string.format("stop took %.2f", core.now() - t0))
      c = nil
      collectgarbage()
    ]], { dir }, 25)
    assert.is_true(ok, out)
    local took = tonumber(out:match("stop took ([%d.]+)"))
    assert.is_truthy(took and took < 2, out)
    for _, f in ipairs({ "plugin.pid", "child.pid" }) do
      local h = assert(io.open(dir .. "/" .. f))
      local pid = assert(tonumber(h:read("l")))
      h:close()
      local deadline = socket.gettime() + 2
      while proc.alive(pid) and socket.gettime() < deadline do socket.sleep(0.05) end
      assert.is_false(proc.alive(pid), f .. " " .. pid .. " still runs")
    end
  end)
end)
