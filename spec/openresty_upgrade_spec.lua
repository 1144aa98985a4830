-- The shared model inside nginx (Debian's nginx, 4 workers) when processes are replaced under
-- load: a binary upgrade (USR2, then WINCH and QUIT to the old master) and workers killed with
-- SIGKILL and respawned by the master (the writer, then a reader). Every request must be
-- answered from a complete cache; the writer's list takes 2 s, so a generation that started
-- from an empty segment could not.
--
-- How failures are counted: an HTTP answer other than 200 (503 not synced, 409 synced but
-- incomplete, 500) is the cache's failure and must not happen. A connection closed or reset
-- without an answer while a worker is killed is nginx's: the killed process held it (accepted,
-- not answered yet). Those are counted apart, must stay within the connections in flight at the
-- kill, and must not happen at all in the upgrade, where no process is killed. wrk's connect
-- errors are requests that never reached nginx (the client's ports run out under this load) and
-- count for neither.
local fake = require "support.fake_apiserver"
local openresty = require "support.openresty"
local load = require "support.serve_load"
local socket = require "socket"

local now, sleep = socket.gettime, socket.sleep
local wait_serving, hammer, show, count = load.wait_serving, load.hammer, load.show, load.count
local http_failures, wrk_start, wrk_result = load.http_failures, load.wrk_start, load.wrk_result
local get_json = load.get_json

local available, why = openresty.available()
if not available then
  describe("kinformer.ngx shared model: upgrade and respawn", function() pending("skipped: " .. why) end)
  return
end

-- /serve answers 200 with the store's len when synced and complete (len = ?want), 503 when not
-- synced, 409 when synced but incomplete; each worker logs the code of the first /serve it
-- answered. /seg: the segment's writer pid and this worker's view.
local PROBE = [[
local kngx = require "kinformer.ngx"
local cjson = require "cjson"
local M = {}
local first = true
function M.init(size)
  kngx.shared_memory(size)
end
function M.init_worker()
  local ok, err = kngx.start{
    model = "shared", client = { server = os.getenv("KINFORMER_SERVER") }, interval = 0.05,
    informers = { pods = { resource = "pods", backoff_max = 1 } },
  }
  if not ok then ngx.log(ngx.WARN, "probe: start: ", err) end
end
local function answer(code)
  if first then
    first = false
    ngx.log(ngx.NOTICE, "probe: first request ", code)
  end
  if code ~= 200 then return ngx.exit(code) end
end
function M.serve()
  local st = kngx.store("pods")
  local want = tonumber(ngx.var.arg_want)
  if not kngx.synced() then return answer(503) end
  local n = st:len()
  if n ~= want then return answer(409) end -- synced, but not the whole cache
  answer(200)
  ngx.say(n)
end
function M.seg()
  local st = kngx.store("pods")
  local status = st:status()
  ngx.say(cjson.encode{ writer = status.segment.writer, pid = ngx.worker.pid(),
                        synced = kngx.synced(), len = st:len() })
end
return M
]]

local function read_file(path)
  local f = io.open(path)
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

local function start_nginx(dir, server)
  local f = assert(io.open(dir .. "/upgrade_probe.lua", "w"))
  f:write(PROBE)
  f:close()
  local port = openresty.free_port()
  local conf = openresty.lua_conf{ workers = 4, dir = dir, port = port,
    env = { "KINFORMER_SERVER" }, http = [[
    lua_shared_dict kinformer 1m;
    init_by_lua_block { require("upgrade_probe").init("16m") }
    init_worker_by_lua_block { require("upgrade_probe").init_worker() }]],
    locations = [[
        location = /serve { content_by_lua_block { require("upgrade_probe").serve() } }
        location = /seg { content_by_lua_block { require("upgrade_probe").seg() } }]] }
  -- One listening socket, handed from one generation to the next (as the reload spec does).
  conf = conf:gsub(" reuseport;", ";")
  local inst = openresty.start{ name = "upgrade_probe", env = { KINFORMER_SERVER = server },
                                conf = conf }
  inst.port = port
  return inst
end

local function figures(what, w, codes)
  if os.getenv("KINFORMER_UPGRADE_FIGURES") then
    io.stderr:write(("%s: wrk: %s requests, %d non-2xx, %d socket errors; loop: %s\n")
      :format(what, tostring(w.total), w.non2xx, w.socket, show(codes)))
  end
end

-- The pids of the children of pid.
local function children(pid)
  local p = io.popen("ps -o pid= --ppid " .. pid)
  local out = {}
  for c in p:read("a"):gmatch("%d+") do
    if openresty.alive(c) then out[#out + 1] = tonumber(c) end
  end
  p:close()
  return out
end

-- pid -> the code of the first /serve it answered, from the log's "probe: first request" lines.
local function first_requests(log)
  local t = {}
  for line in log:gmatch("[^\n]+") do
    local pid, code = line:match(" (%d+)#%d+: [^\n]*probe: first request (%d+)")
    if pid then t[tonumber(pid)] = tonumber(code) end
  end
  return t
end

local function assert_clean_log(log)
  assert.is_nil(log:match("[^\n]*%[error%][^\n]*"))
  assert.is_nil(log:match("[^\n]*%[crit%][^\n]*"))
  assert.is_nil(log:match("[^\n]*%[emerg%][^\n]*"))
end

describe("kinformer.ngx shared model under load", function()
  local srv, dir, want

  setup(function()
    srv = fake.start{ args = { "--sample-cluster" }, quiet = true }
    -- Every list of pods takes 2 s: a writer that starts over cannot have the content sooner.
    srv:fault{ path = "/pods$", watch = false, times = -1, action = { type = "stall", seconds = 2 } }
    want = #srv:state("pods").items
    dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir " .. dir))
  end)

  teardown(function()
    if srv then srv:stop() end
    if dir then os.execute("rm -rf " .. dir) end
  end)

  it("a binary upgrade (USR2, WINCH, QUIT) serves every request from a complete cache", function()
    local inst = start_nginx(dir, srv.url)
    local old_master = inst.pid
    finally(function()
      if openresty.alive(old_master) then os.execute("kill -KILL " .. old_master .. " 2>/dev/null") end
      for _, c in ipairs(children(old_master)) do os.execute("kill -KILL " .. c .. " 2>/dev/null") end
      inst:stop()
    end)
    wait_serving(inst, want, 10)
    local wrk = wrk_start(inst, want, 8)
    local codes = hammer(inst, want, 0.5)
    -- nginx renames the pid file to nginx.pid.oldbin and execs the same binary, which writes
    -- its own pid file and starts its workers; both generations accept on the same socket.
    assert(os.execute("kill -USR2 " .. old_master))
    local new_master
    local deadline = now() + 5
    repeat
      hammer(inst, want, 0.05, codes)
      local pid = tonumber(read_file(inst.prefix .. "/logs/nginx.pid") or "")
      if pid and pid ~= old_master and #children(pid) == 4 then new_master = pid end
    until new_master or now() > deadline
    assert(new_master, "no new master with 4 workers 5 s after USR2")
    inst.pid = new_master -- stop() stops the new generation
    local new_workers = children(new_master)
    hammer(inst, want, 1, codes) -- both generations serve
    -- The old workers quit (the old writer with them), the new writer takes the segment over,
    -- lists (2 s) and writes what changed, while the new workers serve.
    assert(os.execute("kill -WINCH " .. old_master))
    hammer(inst, want, 3.5, codes)
    -- the new master is a child of the old one (forked, then executed)
    assert.same({ new_master }, children(old_master), "old workers still run 3.5 s after WINCH")
    assert(os.execute("kill -QUIT " .. old_master))
    hammer(inst, want, 1, codes)
    local w = wrk_result(wrk)
    figures("upgrade", w, codes)
    assert.is_false(openresty.alive(old_master))
    local served = count(codes, function() return true end)
    assert.is_true(w.total and w.total > 1000, "wrk sent too few requests: " .. w.out)
    assert.is_true(served > 300, "too few requests: " .. show(codes))
    assert.equals(0, http_failures(codes), "failed requests: " .. show(codes))
    assert.is_nil(codes.transport, "connections closed without an answer: " .. show(codes))
    assert.equals(0, w.non2xx, "wrk: " .. w.out)
    assert.equals(0, w.socket, "wrk: " .. w.out)
    -- Every new worker that answered answered 200 from its first request, and some did while
    -- both generations ran, before the new writer could have listed.
    local log = inst:log()
    local first = first_requests(log)
    local answered = 0
    for _, pid in ipairs(new_workers) do
      if first[pid] then
        answered = answered + 1
        assert.equals(200, first[pid], "new worker " .. pid .. "'s first request")
      end
    end
    assert.is_true(answered >= 1, "no new worker answered")
    assert.matches("shared memory kept from the previous binary", log)
    assert.matches("took the shared memory over", log)
    assert_clean_log(log)
    -- the new generation's writer holds the role, and the content is complete
    local d = get_json(inst, "/seg")
    assert.is_true(d.synced)
    assert.equals(want, d.len)
    assert.equals(new_workers[1], math.tointeger(d.writer))
  end)

  it("workers killed with SIGKILL (the writer, then a reader) are respawned without a failed answer",
    function()
      local inst = start_nginx(dir, srv.url)
      finally(function() inst:stop() end)
      wait_serving(inst, want, 10)
      local writer = math.tointeger(get_json(inst, "/seg").writer)
      local workers = children(inst.pid)
      assert.equals(4, #workers)
      local reader
      for _, pid in ipairs(workers) do if pid ~= writer then reader = pid end end
      assert.is_number(writer)
      assert.is_true(writer > 0)
      local wrk = wrk_start(inst, want, 7)
      local codes = hammer(inst, want, 0.5)
      local transport_before = codes.transport or 0
      assert(os.execute("kill -KILL " .. writer))
      -- the respawned writer takes over from a dead writer, recovers, lists (2 s), retains
      hammer(inst, want, 4, codes)
      local d = get_json(inst, "/seg")
      d.writer = math.tointeger(d.writer)
      assert.is_not.equals(writer, d.writer, "the writer was not replaced")
      assert.is_true(openresty.alive(d.writer))
      assert(os.execute("kill -KILL " .. reader))
      hammer(inst, want, 2, codes)
      local w = wrk_result(wrk)
      figures("respawn", w, codes)
      local served = count(codes, function() return true end)
      assert.is_true(w.total and w.total > 1000, "wrk sent too few requests: " .. w.out)
      assert.is_true(served > 300, "too few requests: " .. show(codes))
      assert.equals(0, http_failures(codes), "failed requests: " .. show(codes))
      assert.equals(0, w.non2xx, "wrk: " .. w.out)
      -- Connections the killed workers held: at most one of this loop's per kill, and wrk's 8.
      assert.equals(0, transport_before)
      assert.is_true((codes.transport or 0) <= 2, show(codes))
      assert.is_true(w.socket <= 16, "wrk: " .. w.out)
      -- both respawned workers answered 200 from their first request
      local after = children(inst.pid)
      assert.equals(4, #after)
      local first = first_requests(inst:log())
      local before, respawned = {}, 0
      for _, pid in ipairs(workers) do before[pid] = true end
      for _, pid in ipairs(after) do
        if not before[pid] and first[pid] then
          respawned = respawned + 1
          assert.equals(200, first[pid], "respawned worker " .. pid .. "'s first request")
        end
      end
      assert.equals(2, respawned, "both respawned workers answered")
      -- the respawned writer took the dead one's role over at once, listed and synced
      local log = inst:log()
      assert.matches(" " .. d.writer .. "#%d+: [^\n]*informers synced in", log)
      assert_clean_log(log)
      d = get_json(inst, "/seg")
      assert.is_true(d.synced)
      assert.equals(want, d.len)
    end)
end)
