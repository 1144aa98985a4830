-- The shared cache's readers across processes, in nginx (Debian's nginx with the lua module):
-- the master maps the segment, worker 0 writes every store (no API server: it feeds its own
-- FIFOs), every worker reads every store. One reader slot per process: 16 stores x 4 workers and
-- 4 stores x 16 workers all read. A reader opened in the master before fork is refused in the
-- workers. A fresh reader's first poll, while the writer churns, never hands out an update or a
-- delete for a key it did not hand out before.
local openresty = require "support.openresty"
local cjson = require "cjson"
local socket = require "socket"

local now, sleep = socket.gettime, socket.sleep

local available, why = openresty.available()
if not available then
  describe("shared readers in nginx", function() pending("skipped: " .. why) end)
  return
end

local PROBE = [[
local core = require "kinformer.core"
local kinformer = require "kinformer"
local cjson = require "cjson"
local NSTORES, NKEYS, TRIALS = %d, %d, %d
local M, seg, pre = {}, nil, nil
local report = { trials = 0, violations = {}, done = false }

local function pod(i, rv)
  return { apiVersion = "v1", kind = "Pod",
    metadata = { namespace = "ns", name = "p" .. i, resourceVersion = tostring(rv) } }
end

function M.init()
  seg = core.shm(32 * 1024 * 1024)
  pre = seg:store(1) -- made before fork: the workers must not share it
end

-- Worker 0: a writer per store, then churn on store 1 (adds, updates, deletes) forever.
local function write()
  local procs, fifos = {}, {}
  for i = 1, NSTORES do
    local store = kinformer.store{}
    fifos[i] = kinformer.delta_fifo{ known_objects = store, emit_replaced = true }
    procs[i] = core.processor(fifos[i], store)
    assert(procs[i]:mirror(seg, i))
    for k = 1, (i == 1 and NKEYS or 1) do fifos[i]:update(pod(k, 1)) end
    procs[i]:dispatch(100000)
  end
  local present, rv = {}, 1
  for k = 1, NKEYS do present[k] = true end
  if TRIALS == 0 then return end
  ngx.timer.at(0, function(premature)
    while not premature and not ngx.worker.exiting() do
      for _ = 1, 20 do
        local k = math.random(NKEYS)
        rv = rv + 1
        if present[k] then
          if math.random(2) == 1 then fifos[1]:delete(pod(k, rv)); present[k] = nil
          else fifos[1]:update(pod(k, rv)) end
        else
          fifos[1]:update(pod(k, rv)); present[k] = true
        end
        procs[1]:dispatch(1000)
      end
      ngx.sleep(0.001)
    end
  end)
end

-- Every other worker: first polls of fresh readers of store 1 while the writer churns.
local function first_polls(premature)
  if premature then return end
  for _ = 1, TRIALS do
    local r = seg:store(1)
    local given, bad = {}, nil
    local n, err = r:poll(NKEYS + 2000, function(kind, obj)
      local key = kinformer.key_of(obj)
      if kind ~= 1 and not given[key] then
        bad = bad or (({ "add", "update", "delete" })[kind] .. " " .. key)
      end
      given[key] = kind ~= 3 or nil
    end)
    r:close()
    if n then
      report.trials = report.trials + 1
      if bad then report.violations[#report.violations + 1] = bad end
    elseif err then
      report.poll_error = tostring(err)
    end
    ngx.sleep(0.001)
  end
  report.done = true
end

function M.init_worker()
  if ngx.worker.id() == 0 then
    write()
    report.done = true
  elseif TRIALS > 0 then
    ngx.timer.at(0.3, first_polls)
  else
    report.done = true
  end
end

function M.dump()
  local stores = {}
  for i = 1, NSTORES do
    local r = seg:store(i)
    local o, err, code = r:get("ns/p1")
    local st = r:status()
    stores[i] = { ok = o ~= nil and o.metadata.name == "p1", err = err and tostring(err),
                  code = code, slot = st.slot, status_error = st.error }
    r:close()
  end
  local ok, perr = pcall(pre.len, pre)
  ngx.say(cjson.encode{ pid = ngx.worker.pid(), id = ngx.worker.id(), stores = stores,
    pre_refused = not ok, pre_error = tostring(perr), readers = seg:stats().readers,
    report = report })
end
return M
]]

local running

local function start(workers, nstores, nkeys, trials)
  local dir = assert(io.popen("mktemp -d /tmp/kinformer-readers.XXXXXX")):read("*l")
  local f = assert(io.open(dir .. "/readers_probe.lua", "w"))
  f:write(PROBE:format(nstores, nkeys, trials))
  f:close()
  local port = openresty.free_port()
  running = openresty.start{ name = "readers",
    conf = openresty.lua_conf{ workers = workers, dir = dir, port = port, http = [[
    init_by_lua_block { require("readers_probe").init() }
    init_worker_by_lua_block { require("readers_probe").init_worker() }]],
      locations = [[
        location = /dump { content_by_lua_block { require("readers_probe").dump() } }]] } }
  running.port, running.workers = port, workers
  return running
end

-- One dump of each worker (requests until every worker answered), within timeout seconds.
local function dumps(inst, timeout, until_done)
  local seen, n, deadline = {}, 0, now() + (timeout or 10)
  repeat
    local code, body = openresty.get(inst.port, "localhost", "/dump")
    if code == 200 then
      local d = cjson.decode(body)
      if not seen[d.id] or (until_done and not seen[d.id].report.done) then
        if not seen[d.id] then n = n + 1 end
        seen[d.id] = d
      end
    end
    local done = n == inst.workers
    if until_done then
      for _, d in pairs(seen) do done = done and d.report.done end
    end
    if done then return seen end
    sleep(0.02)
  until now() > deadline
  local log = io.open(inst.prefix .. "/logs/error.log")
  local text = log and log:read("*a") or ""
  if log then log:close() end
  error(text:sub(-1500) .. "\nnot every worker answered" .. (until_done and " with its trials done" or "") ..
    " (" .. n .. " of " .. inst.workers .. "): " .. cjson.encode(seen):sub(1, 1500))
end

local function every_store_reads(workers, nstores)
  local inst = start(workers, nstores, 1, 0)
  local all, deadline = dumps(inst, 20), now() + 20
  local function every_ok()
    for _, d in pairs(all) do
      for _, s in ipairs(d.stores) do if not s.ok then return false end end
    end
    return true
  end
  while not every_ok() and now() < deadline do -- worker 0 may not have written them yet
    sleep(0.1)
    all = dumps(inst, 20)
  end
  for id, d in pairs(all) do
    for i, s in ipairs(d.stores) do
      assert.is_true(s.ok, ("worker %d store %d: %s (%s)"):format(id, i, tostring(s.err),
                                                                  tostring(s.code)))
      assert.is_true(s.slot >= 0)
    end
    -- the workers, the master (its reader made before fork): one slot each
    assert.is_true(d.readers <= workers + 1, "readers: " .. d.readers)
  end
end

describe("shared readers in nginx", function()
  after_each(function()
    if running then running:stop(); running = nil end
  end)

  it("16 stores x 4 workers: every worker reads every store (one slot per process)", function()
    every_store_reads(4, 16)
  end)

  it("4 stores x 16 workers: every worker reads every store", function()
    every_store_reads(16, 4)
  end)

  it("a reader opened before fork is refused in the workers, with a clear error", function()
    local inst = start(2, 1, 1, 0)
    for id, d in pairs(dumps(inst, 10)) do
      assert.is_true(d.pre_refused, "worker " .. id .. " used the master's reader")
      assert.matches("after fork", d.pre_error)
      assert.matches("open a reader in this process", d.pre_error)
    end
  end)

  it("a first poll under churn never hands out an update or delete of a key it did not give", function()
    local inst = start(3, 1, 3000, 100)
    local all = dumps(inst, 30, true)
    local trials = 0
    for id, d in pairs(all) do
      if id ~= 0 then
        assert.is_nil(d.report.poll_error)
        assert.same({}, d.report.violations)
        trials = trials + d.report.trials
      end
    end
    assert.equals(200, trials)
  end)
end)
