-- tools/soak.lua SECONDS [PODS]: a long run of one informer against the fake API server with churn
-- and random faults. At the end the churn stops and the faults are cleared; the run
-- passes when the cache and every handler's view equal the server's objects, RSS after warm-up
-- grew less than 5%, and no file descriptor or thread leaked. Prints a report and exits 0 / 1.
-- Usage: make soak SOAK_SECONDS=600   (or: lua5.4 tools/soak.lua 600)
--        make soak SOAK_WATCH_LIST=1  (the informer lists through WatchList: every relist too)
local root = (arg and arg[0] or ""):match("^(.*)/tools/soak%.lua$") or "."
local version = _VERSION == "Lua 5.4" and "lua5.4" or "luajit"
package.path = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. root .. "/spec/?.lua;"
  .. package.path
package.cpath = root .. "/build/" .. version .. "/?.so;" .. package.cpath
_G.KINFORMER_ROOT = root

local kinformer = require "kinformer"
local core = require "kinformer.core"
local fake = require "support.fake_apiserver"
local history = require "support.history"

local SECONDS = tonumber(arg[1]) or 60
local PODS = tonumber(arg[2]) or 2000
local WATCH_LIST = arg[3] == "watchlist"
local CHURN = 50             -- writes/s while faults fly
local SAMPLE_EVERY = math.max(1, math.min(10, SECONDS / 30))
local WARMUP = math.max(20, SECONDS * 0.2)

local function status_field(name)
  local f = io.open("/proc/self/status")
  local text = f:read("a")
  f:close()
  return tonumber(text:match(name .. ":%s*(%d+)"))
end

local pid = io.open("/proc/self/stat"):read("l"):match("^(%d+)")
local function fd_count()
  local p = io.popen("ls /proc/" .. pid .. "/fd | wc -l")
  local n = tonumber(p:read("l"))
  p:close()
  return n - 1 -- the pipe to ls
end

local function log(fmt, ...) io.stderr:write(string.format("[soak] " .. fmt .. "\n", ...)) end

-- Faults drawn at random, one every few seconds; each hits the next watch or list.
local FAULTS = {
  { name = "watch drop", rule = { path = "/pods$", watch = true, action = "drop", after_events = 3 } },
  { name = "watch drop mid-line", rule = { path = "/pods$", watch = true, action = "drop_mid_line",
    after_events = 2 } },
  { name = "watch 410", rule = { path = "/pods$", watch = true, after_events = 1,
    action = { type = "error_event", code = 410, reason = "Expired", message = "too old" } } },
  { name = "watch 500", rule = { path = "/pods$", watch = true, action = { status = 500 } } },
  { name = "watch 429", rule = { path = "/pods$", watch = true,
    action = { status = 429, retry_after = 1 } } },
  { name = "list 500", rule = { path = "/pods$", watch = false, action = { status = 500 } } },
  { name = "malformed line", rule = { path = "/pods$", watch = true, action = "malformed_line" } },
  { name = "stall 3 s", rule = { path = "/pods$", watch = true, after_events = 1,
    action = { type = "stall", seconds = 3 } } },
  { name = "compaction", compact = true },
}

local srv = fake.start{ args = { "--pods", PODS, "--history", "2000", "--bookmark-interval", "1" },
                        quiet = true }
local ok, err = pcall(function()
  local client = assert(kinformer.client{ server = srv.url })
  local pods = assert(client:informer{ resource = "pods", watch_timeout = 5, idle_timeout = 2,
                                       backoff_initial = 0.1, backoff_max = 1,
                                       watch_list = WATCH_LIST })
  local hist = history.new{ monotonic = true, events = false } -- spec/support/history.lua
  local live, problems = hist.live, hist.problems
  pods:add_handler(hist.handler)
  assert(pods:start())
  assert(pods:wait_for_sync(60))
  srv:churn(CHURN)
  math.randomseed(42)
  local t0 = core.now()
  local samples, faults_sent = {}, {}
  local next_sample, next_fault = t0, t0 + 2
  kinformer.run({ pods }, { timeout = SECONDS, done = function()
    local t = core.now()
    if t >= next_fault then
      local f = FAULTS[math.random(#FAULTS)]
      if f.compact then srv:compact() else srv:fault(f.rule) end
      faults_sent[f.name] = (faults_sent[f.name] or 0) + 1
      next_fault = t + 1 + math.random() * 3
    end
    if t >= next_sample then
      collectgarbage("collect")
      samples[#samples + 1] = { t = t - t0, rss = status_field("VmRSS"), fds = fd_count(),
                                lua_kb = collectgarbage("count"),
                                threads = status_field("Threads"),
                                queue = pods:status().queue_length }
      next_sample = t + SAMPLE_EVERY
    end
    return false
  end })

  -- Quiesce: no more writes or faults, then the cache must catch up with the server.
  srv:churn(0)
  srv:clear_faults()
  local want = srv:versions("pods")
  local converged = kinformer.run({ pods }, { timeout = 60, done = function()
    return fake.same_versions(fake.versions(pods:store()), want) and fake.same_versions(live, want)
  end }) == "done"
  local st = pods:status()
  pods:stop()

  -- Steady state: the median of the samples just after warm-up against the last ones.
  local function median(list)
    table.sort(list)
    return list[math.floor((#list + 1) / 2)]
  end
  local early, late = {}, {}
  for _, s in ipairs(samples) do
    if s.t >= WARMUP and #early < 5 then early[#early + 1] = s.rss end
  end
  for i = math.max(1, #samples - 4), #samples do late[#late + 1] = samples[i].rss end
  local rss_early, rss_late = median(early) or 0, median(late) or 0
  local growth = rss_early > 0 and (rss_late - rss_early) / rss_early * 100 or 0
  local first, last = samples[1], samples[#samples]
  local fault_list = {}
  for name, n in pairs(faults_sent) do fault_list[#fault_list + 1] = name .. " x" .. n end
  table.sort(fault_list)

  print(string.format("soak: %d s, %d pods%s, churn %d writes/s, %d faults (%s)", SECONDS, PODS,
    WATCH_LIST and " (WatchList)" or "",
    CHURN, #fault_list > 0 and (function() local n = 0 for _, c in pairs(faults_sent) do n = n + c end return n end)() or 0,
    table.concat(fault_list, ", ")))
  print("| measure | value |")
  print("|---|---:|")
  print(string.format("| objects at the end | %d |", st.objects))
  print(string.format("| notifications (adds / updates / deletes) | %d / %d / %d |", st.adds,
    st.updates, st.deletes))
  print(string.format("| lists / relists / watch restarts / errors | %d / %d / %d / %d |", st.lists,
    st.relists, st.watch_restarts, st.errors))
  do -- how the lists were made, from the server's request log
    local streams, pages = 0, 0
    for _, q in ipairs(srv:requests()) do
      if q.method == "GET" and q.path == "/api/v1/pods" then
        if q.query.sendInitialEvents == "true" then streams = streams + 1
        elseif q.query.watch ~= "true" then pages = pages + 1 end
      end
    end
    print(string.format("| list requests: WatchList streams / paginated pages | %d / %d |", streams,
      pages))
  end
  print(string.format("| RSS after warm-up (%.0f s) -> end, KiB | %d -> %d (%+.1f%%) |", WARMUP,
    rss_early, rss_late, growth))
  print(string.format("| file descriptors first -> last sample | %d -> %d |", first.fds, last.fds))
  print(string.format("| threads first -> last sample | %d -> %d |", first.threads, last.threads))
  print(string.format("| largest queue seen | %d |", (function()
    local m = 0 for _, s in ipairs(samples) do if s.queue > m then m = s.queue end end return m end)()))
  print(string.format("| cache and handler view equal the server | %s |", converged and "yes" or "NO"))
  print(string.format("| handler history problems | %d |", #problems))
  local failures = {}
  if not converged then failures[#failures + 1] = "cache did not converge" end
  if #problems > 0 then failures[#failures + 1] = "history: " .. problems[1] end
  if growth >= 5 then failures[#failures + 1] = string.format("RSS grew %.1f%%", growth) end
  -- A watch connection may be open or not at a sample: compare medians, allow that one.
  local fds_early, fds_late = {}, {}
  for i, smp in ipairs(samples) do
    if i <= 5 then fds_early[#fds_early + 1] = smp.fds end
    if i > #samples - 5 then fds_late[#fds_late + 1] = smp.fds end
  end
  if median(fds_late) > median(fds_early) + 1 then
    failures[#failures + 1] = "file descriptors leaked"
  end
  if last.threads > first.threads then failures[#failures + 1] = "threads leaked" end
  if os.getenv("SOAK_TRACE") then
    for _, s in ipairs(samples) do
      print(string.format("t=%.0f rss=%d lua_heap=%.0f fds=%d threads=%d queue=%d", s.t, s.rss,
        s.lua_kb, s.fds, s.threads, s.queue))
    end
  end
  if #failures > 0 then error(table.concat(failures, "; "), 0) end
  print("soak: PASS")
end)
srv:stop()
if not ok then
  print("soak: FAIL: " .. tostring(err))
  os.exit(1)
end
