-- kinformer.metrics: the registry and its Prometheus text (checked by promtool), the
-- /metrics /healthz /readyz server (never blocked by a client), the standard collectors, and a
-- real Prometheus server scraping a metrics server in a child process.
local metrics = require "kinformer.metrics"
local workqueue = require "kinformer.workqueue"
local kinformer = require "kinformer"
local core = require "kinformer.core"
local socket = require "socket"
local http = require "socket.http"
local cjson = require "cjson"
local fake = require "support.fake_apiserver"
local proc = require "support.proc"

local ROOT = KINFORMER_ROOT
local quote, alive = proc.quote, proc.alive

local function tmpdir()
  local p = assert(io.popen("mktemp -d /tmp/kinformer-metrics.XXXXXX"))
  local dir = p:read("l")
  p:close()
  return dir
end

local function write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

-- promtool check metrics on text -> ok, output
local function promtool(text)
  local dir = tmpdir()
  write(dir .. "/metrics.txt", text)
  local p = assert(io.popen("promtool check metrics < " .. quote(dir .. "/metrics.txt")
    .. " 2>&1; echo \"exit=$?\""))
  local out = p:read("a")
  p:close()
  os.execute("rm -rf " .. quote(dir))
  local code = tonumber(out:match("exit=(%d+)%s*$"))
  return code == 0, out
end

local function sample(text, series)
  for line in text:gmatch("[^\n]+") do
    if line:sub(1, #series + 1) == series .. " " then return tonumber(line:sub(#series + 2)) end
  end
end

local function host_port(address)
  local h, p = address:match("^(.*):(%d+)$")
  return h, tonumber(p)
end

-- One request to srv, stepping it (same thread) until the answer is complete.
-- -> code, headers (lowercase names), body
local function request(srv, method, path, raw)
  local c = assert(socket.connect(host_port(srv:address())))
  c:settimeout(0)
  assert(c:send(raw or (method .. " " .. path .. " HTTP/1.1\r\nHost: x\r\n\r\n")))
  local buf, deadline = "", socket.gettime() + 5
  while socket.gettime() < deadline do
    srv:step()
    local d, err, part = c:receive(65536)
    buf = buf .. (d or part or "")
    if err == "closed" then break end
    if not d then socket.select({ c }, nil, 0.01) end
  end
  c:close()
  local head, body = buf:match("^(.-)\r\n\r\n(.*)$")
  assert(head, "no complete answer: " .. buf)
  local code = tonumber(head:match("^HTTP/1%.1 (%d+)"))
  local headers = {}
  for k, v in head:gmatch("\r\n([^:]+):%s*([^\r]*)") do headers[k:lower()] = v end
  return code, headers, body
end

describe("metrics registry", function()
  it("writes the Prometheus text format: families sorted, labels escaped, histograms", function()
    local reg = metrics.registry()
    local c = reg:counter("demo_requests_total", "Requests\nby \\ code", { "code", "path" })
    c:inc({ code = 200, path = '/a"b\\c\nd' })
    c:inc({ code = 500, path = "/" }, 2.5)
    reg:gauge("demo_ratio", "A ratio"):set(nil, 0.1 + 0.2)
    local h = reg:histogram("demo_latency_seconds", "Latency", { "verb" }, { 0.1, 1 })
    h:observe({ verb = "GET" }, 0.05)
    h:observe({ verb = "GET" }, 0.1) -- on a bound: that bucket (le is <=)
    h:observe({ verb = "GET" }, 5)
    reg:collector(function(emit)
      emit("demo_things", "gauge", "Things", { z = "1", a = "2" }, 1 / 0)
      emit("demo_things", "gauge", "Things", { z = "1", a = "2" }, 7) -- same series: dropped
    end)
    assert.equals(table.concat({
      '# HELP demo_latency_seconds Latency',
      '# TYPE demo_latency_seconds histogram',
      'demo_latency_seconds_bucket{verb="GET",le="0.1"} 2',
      'demo_latency_seconds_bucket{verb="GET",le="1"} 2',
      'demo_latency_seconds_bucket{verb="GET",le="+Inf"} 3',
      'demo_latency_seconds_sum{verb="GET"} 5.15',
      'demo_latency_seconds_count{verb="GET"} 3',
      '# HELP demo_ratio A ratio',
      '# TYPE demo_ratio gauge',
      'demo_ratio 0.30000000000000004',
      '# HELP demo_requests_total Requests\\nby \\\\ code',
      '# TYPE demo_requests_total counter',
      'demo_requests_total{code="200",path="/a\\"b\\\\c\\nd"} 1',
      'demo_requests_total{code="500",path="/"} 2.5',
      '# HELP demo_things Things',
      '# TYPE demo_things gauge',
      'demo_things{a="2",z="1"} +Inf',
      '',
    }, "\n"), reg:text())
    local ok, out = promtool(reg:text())
    assert.is_true(ok, out)
  end)

  it("returns the same metric for the same definition and raises for a different one", function()
    local reg = metrics.registry()
    local a = reg:counter("x_total", "X", { "k" })
    assert.equals(a, reg:counter("x_total", "X", { "k" }))
    assert.has_error(function() reg:gauge("x_total", "X", { "k" }) end,
      "bad argument #1 to 'gauge' (x_total is already defined as a counter with labels {k})")
    assert.has_error(function() reg:counter("x_total", "X", { "j" }) end)
  end)

  it("raises at the caller's line for misuse", function()
    local reg = metrics.registry()
    local c = reg:counter("c_total", "C", { "k" })
    local g = reg:gauge("g", "G")
    local h = reg:histogram("h_seconds", "H", nil, { 1, 2 })
    local line = debug.getinfo(1, "l").currentline
    local cases = {
      { function() reg:counter("bad-name", "x") end, "invalid metric name bad%-name" },
      { function() reg:counter("ok_total", "x", { "__reserved" }) end, "invalid label name" },
      { function() reg:histogram("h2", "x", { "le" }) end, "cannot have label le" },
      { function() reg:histogram("h3", "x", nil, { 2, 1 }) end, "increasing" },
      { function() c:inc() end, "needs labels k" },
      { function() c:inc({ k = 1, j = 2 }) end, "unknown label 'j'" },
      { function() c:inc({ j = 2 }) end, "label 'k' missing" },
      { function() c:inc({ k = 1 }, -1) end, "only goes up" },
      { function() g:set(nil, "x") end, "number expected" },
      { function() h:inc() end, "is a histogram" },
      { function() g:observe(nil, 1) end, "not a histogram" },
      { function() reg:collector(42) end, "function expected" },
    }
    for i, case in ipairs(cases) do
      local ok, err = pcall(case[1])
      assert.is_false(ok, "case " .. i)
      assert.matches(case[2], err)
      assert.matches("metrics_spec.lua:" .. (line + 1 + i) .. ":", err, 1, true)
    end
  end)

  it("shows a failing collector's absence, logs it, and the others' samples", function()
    local reg = metrics.registry()
    local logged = {}
    kinformer.set_logger(function(level, msg) logged[#logged + 1] = level .. " " .. msg end)
    finally(function() kinformer.set_logger(nil) end)
    reg:collector(function() error("boom") end)
    reg:collector(function(emit) emit("up_things", "gauge", "Things", nil, 3) end)
    local text = reg:text()
    assert.equals(3, sample(text, "up_things"))
    assert.equals(1, #logged)
    assert.matches("^error metrics: a collector failed: .*boom", logged[1])
  end)

  it("formats numbers exactly and briefly", function()
    local f = metrics.format_value
    assert.equals("3", f(3))
    assert.equals("3", f(3.0))
    assert.equals("-2", f(-2))
    assert.equals("0.1", f(0.1))
    assert.equals("1e-08", f(1e-8))
    assert.equals("+Inf", f(math.huge))
    assert.equals("-Inf", f(-math.huge))
    assert.equals("NaN", f(0 / 0))
    assert.equals("1", f(true))
    assert.equals("9007199254740993", f(9007199254740993))
  end)
end)

describe("metrics server", function()
  local srv, reg, ready, healthy, logged
  before_each(function()
    logged = {}
    kinformer.set_logger(function(level, msg) logged[#logged + 1] = level .. " " .. msg end)
    reg = metrics.registry()
    reg:counter("served_total", "Served"):inc(nil, 4)
    ready, healthy = false, true
    srv = assert(metrics.server{ address = "127.0.0.1:0", registry = reg,
      readyz = function() return ready end,
      healthz = function()
        if healthy == "raise" then error("check broke") end
        return healthy, healthy and "fine" or nil
      end, read_timeout = 0.3 })
  end)
  after_each(function()
    srv:close()
    kinformer.set_logger(nil)
  end)

  it("binds port 0 to a free port and answers /metrics, /healthz, /readyz, 404 and 405", function()
    local host, port = host_port(srv:address())
    assert.equals("127.0.0.1", host)
    assert.is_true(port > 0)
    local code, h, body = request(srv, "GET", "/metrics")
    assert.equals(200, code)
    assert.equals("text/plain; version=0.0.4; charset=utf-8", h["content-type"])
    assert.equals(#body, tonumber(h["content-length"]))
    assert.equals(reg:text(), body)
    code, _, body = request(srv, "GET", "/metrics?x=1")
    assert.equals(200, code)
    assert.equals(4, sample(body, "served_total"))
    code, _, body = request(srv, "GET", "/healthz")
    assert.same({ 200, "fine\n" }, { code, body })
    code, _, body = request(srv, "GET", "/readyz")
    assert.same({ 503, "not ready\n" }, { code, body })
    ready = true
    code, _, body = request(srv, "GET", "/readyz")
    assert.same({ 200, "ok\n" }, { code, body })
    healthy = false
    assert.equals(503, (request(srv, "GET", "/healthz")))
    healthy = "raise"
    assert.equals(503, (request(srv, "GET", "/healthz")))
    assert.matches("^error metrics server: a health check raised: .*check broke", logged[1])
    assert.equals(200, (request(srv, "GET", "/readyz"))) -- the server goes on
    assert.equals(404, (request(srv, "GET", "/nothing")))
    code, h, body = request(srv, "HEAD", "/metrics")
    assert.same({ 200, "" }, { code, body })
    assert.equals(#reg:text(), tonumber(h["content-length"]))
    code, h = request(srv, "POST", "/metrics", "POST /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello")
    assert.same({ 405, "GET, HEAD" }, { code, h.allow })
    assert.equals(400, (request(srv, nil, nil, "garbage\r\n\r\n")))
  end)

  it("has an fd for core.wait: readable while a connection waits", function()
    assert.equals("timeout", core.wait({ srv:fd() }, 0))
    local c = assert(socket.connect(host_port(srv:address())))
    finally(function() c:close() end)
    assert.equals("ready", core.wait({ srv:fd() }, 1))
    srv:step() -- accepted: the listener is quiet again, the connection is in fds()
    assert.equals("timeout", core.wait({ srv:fd() }, 0))
    assert.equals(2, #srv:fds())
    assert.equals("timeout", core.wait(srv:fds(), 0))
    assert(c:send("GET /healthz HTTP/1.1\r\n\r\n"))
    assert.equals("ready", core.wait(srv:fds(), 1))
    assert.equals(1, srv:step())
  end)

  it("is not delayed by a silent client nor a slow one, and keeps partial requests", function()
    local host, port = host_port(srv:address())
    local idle = assert(socket.connect(host, port))
    local slow = assert(socket.connect(host, port))
    slow:settimeout(0)
    assert(slow:send("GET /metr"))
    for _ = 1, 5 do
      local t0 = core.now()
      srv:step()
      assert.is_true(core.now() - t0 < 0.05, "step took " .. (core.now() - t0) .. " s")
    end
    assert.equals(2, srv:status().connections)
    -- a complete request is answered while both wait
    assert.equals(200, (request(srv, "GET", "/healthz")))
    -- the slow client's request completes: answered in full
    assert(slow:send("ics HTTP/1.1\r\nHost: x\r\n\r\n"))
    local buf, deadline = "", core.now() + 2
    repeat
      srv:step()
      local d, err, part = slow:receive(65536)
      buf = buf .. (d or part or "")
      if err == "closed" then break end
      socket.select({ slow }, nil, 0.01)
    until core.now() > deadline
    slow:close()
    assert.matches("^HTTP/1.1 200 OK\r\n", buf)
    assert.matches("\r\n\r\n" .. reg:text():gsub("%p", "%%%0") .. "$", buf)
    -- the silent one is closed after read_timeout
    socket.sleep(0.35)
    srv:step()
    assert.equals(0, srv:status().connections)
    idle:settimeout(1)
    local _, err = idle:receive(1)
    assert.equals("closed", err)
    idle:close()
  end)

  it("sends a large answer to a client that reads late, without blocking a step", function()
    reg:collector(function(emit)
      for i = 1, 40000 do emit("big_series", "gauge", "Big", { i = i, pad = ("x"):rep(30) }, i) end
    end)
    local c = assert(socket.connect(host_port(srv:address())))
    c:settimeout(0)
    assert(c:send("GET /metrics HTTP/1.1\r\n\r\n"))
    srv:step() -- the answer (about 2.5 MB) goes out as far as the socket takes it
    local t0 = core.now()
    srv:step()
    assert.is_true(core.now() - t0 < 0.05)
    local buf, deadline = {}, core.now() + 10
    repeat
      local d, err, part = c:receive(1 << 20)
      buf[#buf + 1] = d or part or ""
      if err == "closed" then break end
      srv:step()
    until core.now() > deadline
    c:close()
    local all = table.concat(buf)
    local head, body = all:match("^(.-)\r\n\r\n(.*)$")
    assert.equals(tonumber(head:match("Content%-Length: (%d+)")), #body)
    assert.equals(40000, sample(body, 'big_series{i="40000",pad="' .. ("x"):rep(30) .. '"}'))
  end)

  it("raises for bad options and returns nil, err when the address is taken", function()
    assert.has_error(function() metrics.server{ address = "nowhere" } end,
      'bad argument #1 to \'server\' (option \'address\' must be "host:port", got nowhere)')
    assert.has_error(function() metrics.server{ address = "127.0.0.1:0", bogus = 1 } end)
    local again, err = metrics.server{ address = srv:address() }
    assert.is_nil(again)
    assert.matches("cannot listen on " .. srv:address(), err, 1, true)
  end)
end)

describe("metrics collectors", function()
  it("observes a work queue's latency and work duration (controller-runtime names)", function()
    local t = 100
    local q = workqueue{ name = "widgets", clock = function() return t end,
                         wait = function(_, s) t = t + s end }
    local reg = metrics.registry()
    metrics.collect_workqueue(reg, "widgets", q)
    metrics.collect_workqueue(reg, "widgets", q) -- a second time adds nothing
    q:add("a")
    q:add("b")
    t = t + 2
    assert.equals("a", q:get())
    t = t + 3
    q:done("a")
    assert.equals("b", q:get())
    t = t + 0.5
    q:add_after("c", 10)
    q:add("d")
    local text = reg:text()
    local L = '{controller="widgets",name="widgets"}'
    -- d ("b" is in flight, "c" waits); the depth has controller-runtime's label priority
    assert.equals(1, sample(text, 'workqueue_depth{controller="widgets",name="widgets",priority="0"}'))
    assert.is_nil(sample(text, "workqueue_depth" .. L))
    assert.equals(3, sample(text, "workqueue_adds_total" .. L))
    assert.equals(1, sample(text, "workqueue_retries_total" .. L))
    assert.equals(0.5, sample(text, "workqueue_unfinished_work_seconds" .. L))
    assert.equals(0.5, sample(text, "workqueue_longest_running_processor_seconds" .. L))
    local B = 'workqueue_queue_duration_seconds_bucket{controller="widgets",name="widgets",le="%s"}'
    assert.equals(0, sample(text, B:format("1")))
    assert.equals(2, sample(text, B:format("10")))
    assert.equals(7, sample(text, "workqueue_queue_duration_seconds_sum" .. L)) -- a 2, b 5
    assert.equals(1, sample(text, "workqueue_work_duration_seconds_count" .. L))
    assert.equals(3, sample(text, "workqueue_work_duration_seconds_sum" .. L))
    local ok, out = promtool(text)
    assert.is_true(ok, out)
  end)

  it("shows a work queue's depth per priority, series kept once seen, at most 25 of them", function()
    local t = 0
    local q = workqueue{ name = "jobs", clock = function() return t end }
    local reg = metrics.registry()
    metrics.collect_workqueue(reg, "jobs", q)
    local function depth(prio)
      return sample(reg:text(), 'workqueue_depth{controller="jobs",name="jobs",priority="'
        .. prio .. '"}')
    end
    assert.equals(0, depth("0"))
    assert.is_nil(depth("-100"))
    q:add("a", -100)
    q:add("b", -100)
    q:add("c")
    q:add("d", 7)
    q:add("b", 7) -- promoted: counts at 7 only
    assert.equals(1, depth("-100"))
    assert.equals(1, depth("0"))
    assert.equals(2, depth("7"))
    for _ = 1, 4 do q:done(q:get(0)) end
    assert.equals(0, depth("-100"), "a priority seen once stays, at 0")
    assert.equals(0, depth("7"))
    local ok, out = promtool(reg:text())
    assert.is_true(ok, out)
    -- 0, -100 and 7 are shown: 22 more priorities get a series, the rest are summed
    for p = 1, 30 do q:add("p" .. p, 100 + p) end
    q:add("x", 101) -- one more at a priority past the limit
    local text = reg:text()
    local series = 0
    for _ in text:gmatch("\nworkqueue_depth{") do series = series + 1 end
    assert.equals(25 + 1, series)
    -- the highest priorities new at one scrape are shown first
    assert.equals(1, depth("130"))
    assert.equals(1, depth("109"))
    assert.is_nil(depth("108"))
    assert.equals(8 + 1, depth("exceeded_cardinality_limit"))
    ok, out = promtool(text)
    assert.is_true(ok, out)
  end)

  describe("against the fake API server", function()
    local srv
    setup(function()
      srv = fake.start{ quiet = true, args = { "--pods", "3" } }
      kinformer.set_logger(function() end)
    end)
    teardown(function()
      kinformer.set_logger(nil)
      srv:stop()
    end)

    it("collects informers, REST requests by code and method, and leader election", function()
      local client = assert(kinformer.client{ server = srv.url })
      local pods = assert(client:informer{ resource = "pods" })
      assert(pods:start())
      finally(function() pods:stop() end)
      assert(pods:wait_for_sync(5))
      local reg = metrics.registry()
      metrics.collect_informer(reg, pods)
      metrics.collect_client(reg, client)
      assert(client:list("pods"))
      assert.is_nil(client:get("pods", "default/nope"))
      local elector = kinformer.leader_election{ client = client, lease_name = "ctl",
        namespace = "default", identity = "me" }
      metrics.collect_leader(reg, elector)
      local text = reg:text()
      assert.equals(0, sample(text, 'leader_election_master_status{name="ctl"}'))
      elector:tick()
      finally(function() elector:stop() end)
      text = reg:text()
      local host = srv.url:match("//(.*)$")
      assert.equals(1, sample(text, 'leader_election_master_status{name="ctl"}'))
      -- our get of "nope" and the elector's first GET of its Lease; then it created it
      assert.equals(2, sample(text, ('rest_client_requests_total{code="404",method="GET",host="%s"}')
        :format(host)))
      assert.equals(1, sample(text, ('rest_client_requests_total{code="201",method="POST",host="%s"}')
        :format(host)))
      assert.equals(1, sample(text, ('rest_client_requests_total{code="200",method="GET",host="%s"}')
        :format(host))) -- the list
      assert.is_true(sample(text, ('rest_client_request_duration_seconds_count{verb="GET",host="%s"}')
        :format(host)) >= 3)
      local I = '{informer="pods",namespace="",resource="pods"}'
      assert.equals(1, sample(text, "kinformer_informer_synced" .. I))
      assert.equals(3, sample(text, "kinformer_informer_objects" .. I))
      assert.equals(1, sample(text, "kinformer_informer_lists_total" .. I))
      assert.is_not_nil(sample(text, "kinformer_informer_watch_restarts_total" .. I))
      assert.is_not_nil(sample(text, "kinformer_informer_relists_total" .. I))
      -- a request without an answer
      local gone = assert(kinformer.client{ server = "http://127.0.0.1:1" })
      metrics.collect_client(reg, gone)
      assert.is_nil(gone:get("pods", "default/x", { timeout = 1 }))
      assert.equals(1, sample(reg:text(),
        'rest_client_requests_total{code="<error>",method="GET",host="127.0.0.1:1"}'))
      local ok, out = promtool(reg:text())
      assert.is_true(ok, out)
    end)

    it("is scraped by a real Prometheus server", function()
      local dir = tmpdir()
      local child, prom
      finally(function()
        for _, p in ipairs{ child, prom } do
          if p then
            os.execute("kill -TERM " .. p.pid .. " 2>/dev/null")
            local deadline = core.now() + 5
            while alive(p.pid) and core.now() < deadline do socket.sleep(0.05) end
            if alive(p.pid) then os.execute("kill -KILL " .. p.pid .. " 2>/dev/null") end
            p.fh:close()
          end
        end
        os.execute("rm -rf " .. quote(dir))
      end)
      -- the child: an informer, a queue its handler feeds, a client, and the server
      write(dir .. "/child.lua", [[
local root, url = arg[1], arg[2]
package.path = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. package.path
package.cpath = root .. "/build/lua5.4/?.so;" .. package.cpath
local kinformer = require "kinformer"
local metrics = require "kinformer.metrics"
local core = require "kinformer.core"
kinformer.set_logger(function() end)
local client = assert(kinformer.client{ server = url })
local pods = assert(client:informer{ resource = "pods" })
local q = kinformer.workqueue{ name = "pods" }
pods:add_handler{ on_add = function(p) q:add(kinformer.key_of(p)) end }
local reg = metrics.registry()
metrics.collect_informer(reg, pods)
metrics.collect_workqueue(reg, "pods", q)
metrics.collect_client(reg, client)
local srv = assert(metrics.server{ address = "127.0.0.1:0", registry = reg,
  readyz = function() return pods:has_synced() end })
assert(pods:start())
assert(client:list("pods"))
io.stdout:write(srv:address(), "\n")
io.stdout:flush()
core.catch_signals(true)
local stop = core.now() + 60
while core.now() < stop do
  srv:step()
  pods:dispatch(100)
  while q:len() > 0 do q:done(q:get(0)) end
  local fds = srv:fds()
  fds[#fds + 1] = pods:fd()
  if core.wait(fds, 0.1) == "signal" then break end
end
srv:close()
pods:stop()
]])
      local fh = assert(io.popen("echo $$; exec lua5.4 " .. quote(dir .. "/child.lua") .. " "
        .. quote(ROOT) .. " " .. quote(srv.url), "r"))
      child = { fh = fh, pid = tonumber(fh:read("l")) }
      local target = fh:read("l")
      assert.matches("^127%.0%.0%.1:%d+$", target)
      -- Prometheus on a free port, its storage in the temp dir
      local probe = assert(socket.bind("127.0.0.1", 0))
      local _, prom_port = probe:getsockname()
      probe:close()
      write(dir .. "/prometheus.yml", ([[
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: kinformer
    static_configs:
      - targets: ['%s']
]]):format(target))
      local pfh = assert(io.popen("echo $$; exec prometheus --config.file=" .. quote(dir ..
        "/prometheus.yml") .. " --storage.tsdb.path=" .. quote(dir .. "/data") ..
        " --web.listen-address=127.0.0.1:" .. prom_port .. " 2>" .. quote(dir .. "/prom.log"),
        "r"))
      prom = { fh = pfh, pid = tonumber(pfh:read("l")) }
      local function query(q)
        local body, code = http.request(("http://127.0.0.1:%d/api/v1/query?query=%s")
          :format(prom_port, q:gsub("[^%w]", function(ch) return ("%%%02X"):format(ch:byte()) end)))
        if code ~= 200 then return nil end
        local r = cjson.decode(body).data.result
        return r[1] and tonumber(r[1].value[2])
      end
      local up, synced, adds, requests
      local deadline = core.now() + 15
      repeat
        socket.sleep(0.25)
        up = query('up{job="kinformer"}')
        synced = query('kinformer_informer_synced{resource="pods"}')
        adds = query('workqueue_adds_total{name="pods"}')
        requests = query('sum(rest_client_requests_total{code="200",method="GET"})')
      until (up == 1 and synced == 1 and adds and requests) or core.now() > deadline
      local log = io.open(dir .. "/prom.log")
      local tail = log and log:read("a"):sub(-2000) or ""
      if log then log:close() end
      assert.equals(1, up, tail)
      assert.equals(1, synced)
      assert.equals(3, adds)
      assert.is_true(requests >= 1)
    end)
  end)
end)
