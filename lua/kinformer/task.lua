--- kinformer.task (internal): cooperative tasks, the way a manager runs reconciles at once on
-- one Lua thread. A task is a coroutine whose REST calls (kinformer.rest) do not block the
-- thread: each call goes to the client's I/O thread (core_client:call) and the task yields
-- until it finished; its waits (throttling, Retry-After) yield too. The scheduler resumes a task
-- when what it waits for is there. docs/controller.md ("Concurrency").
--
-- Contract:
-- - scheduler(core_client) -> sched. sched:spawn(fn, opts) runs fn() in a new task at once,
--   up to its first wait, and returns the task (or nil when fn already returned). opts.guard,
--   opts.on_write and opts.on_done are the task's hooks (below); opts.name names it in logs.
-- - task.current() -> the task running now, or nil (outside any task, or inside a coroutine
--   the task's own code created: its calls then block, as outside a task).
-- - In a task: t:await(call) -> what call:result() returns once the call finished;
--   t:sleep(seconds). Both yield to the scheduler and come back only through sched:step().
-- - guard(method, path) -> true | nil, why is asked before every request a task's REST call
--   sends (retries included); a refusal fails that call with err.reason "Fenced" and nothing
--   is sent. on_write(method, path, obj) runs after every successful write (any verb but GET)
--   that returned an object. on_done(ok, err_or_result, task) runs when fn returned or raised
--   (not after cancel).
-- - sched:step() resumes every task whose call finished or whose sleep ended (once each) and
--   returns the seconds until the nearest sleep ends (math.huge: only calls, or nothing, are
--   waited for; their completions make sched:fd() readable). It drains the fd first.
-- - sched:cancel(t): the task's call in flight is cancelled (the connection is cut: the server
--   sees the client go) and the task never runs again (its to-be-closed variables are closed
--   on Lua 5.4). cancel of a finished task does nothing.
-- - A task that yields anything but a kinformer wait (its code called coroutine.yield itself)
--   is ended as if it raised.
-- - Tasks run on worker coroutines that are kept (up to POOL_MAX idle ones) for the next task:
--   no coroutine is made per task in the steady state.
local core = require "kinformer.core"
local clock = require "kinformer.clock"

local coroutine_running, coroutine_create, coroutine_resume, coroutine_yield,
  coroutine_status = coroutine.running, coroutine.create, coroutine.resume, coroutine.yield,
  coroutine.status
local coroutine_close = coroutine.close -- nil on LuaJIT
local setmetatable, next, pairs, math_huge = setmetatable, next, pairs, math.huge

local _M = {}

local by_co = setmetatable({}, { __mode = "k" }) -- coroutine -> task
local WAIT = {} -- what a task yields: nothing else may
local DONE = {} -- what a worker coroutine yields when its function returned
local POOL_MAX = 64
local pool, pooled = {}, 0 -- idle worker coroutines: a task costs no new coroutine

-- A worker runs one function after another: spawn resumes it with the next.
local function worker(fn, a, b)
  while true do
    local ok, res = pcall(fn, a, b)
    fn, a, b = coroutine_yield(DONE, ok, res)
  end
end

local Task = {}
Task.__index = Task

local Sched = {}
Sched.__index = Sched

--- task.current() -> the running task or nil
function _M.current()
  local co = coroutine_running()
  return co and by_co[co] or nil
end

--- t:await(call) -> call:result() once the call finished
function Task:await(call)
  if not call:done() then
    self.call = call
    self.sched.waiting[self] = true
    coroutine_yield(WAIT)
    self.call = nil
  end
  return call:result()
end

--- t:sleep(seconds): yields until seconds passed
function Task:sleep(seconds)
  self.wake_at = clock.now() + (seconds > 0 and seconds or 0)
  self.sched.sleeping[self] = true
  coroutine_yield(WAIT)
  self.wake_at = nil
end

--- t:may_send(method, path) -> true | nil, why (the guard)
function Task:may_send(method, path)
  local g = self.guard
  if not g then return true end
  return g(method, path)
end

local function finish(sched, t, ok, res, reuse)
  sched.live[t] = nil
  sched.waiting[t] = nil
  sched.sleeping[t] = nil
  by_co[t.co] = nil
  t.dead = true
  if reuse and pooled < POOL_MAX then
    pooled = pooled + 1
    pool[pooled] = t.co
  end
  if t.on_done then t.on_done(ok, res, t) end
end

local function resume(sched, t, fn, a, b)
  local alive, what, ok, res = coroutine_resume(t.co, fn, a, b)
  if not alive then -- the worker itself failed (out of memory): not reused
    finish(sched, t, false, what, false)
  elseif what == DONE then
    finish(sched, t, ok, res, true)
  elseif what ~= WAIT then
    sched:cancel(t)
    if t.on_done then
      t.on_done(false, "the task yielded (coroutine.yield) outside a kinformer wait", t)
    end
  end
end

--- task.scheduler(core_client) -> sched
function _M.scheduler(core_client)
  return setmetatable({ client = core_client, live = {}, waiting = {}, sleeping = {},
                        count = 0 }, Sched)
end

--- sched:spawn(fn, { guard =, on_write =, on_done =, name = } [, a, b]) -> task | nil
-- (finished at once): fn(a, b) runs in the task; t.a, t.b and t.started (clock.now()) stay on
-- it for the hooks, which get the task as their last argument. opts may be shared by tasks.
function Sched:spawn(fn, opts, a, b)
  opts = opts or {}
  local co
  if pooled > 0 then
    co = pool[pooled]
    pool[pooled] = nil
    pooled = pooled - 1
  else
    co = coroutine_create(worker)
  end
  local t = setmetatable({ sched = self, co = co, guard = opts.guard,
                           on_write = opts.on_write, on_done = opts.on_done,
                           name = opts.name, a = a, b = b, started = clock.now() }, Task)
  by_co[co] = t
  self.live[t] = true
  resume(self, t, fn, a, b)
  if t.dead then return nil end
  return t
end

--- sched:step() -> seconds until the nearest sleep ends (math.huge: none)
function Sched:step()
  local c = self.client
  if next(self.waiting) then c:calls_drain() end
  local ready = {}
  for t in pairs(self.waiting) do
    if t.call:done() then ready[#ready + 1] = t end
  end
  local now = clock.now()
  for t in pairs(self.sleeping) do
    if t.wake_at <= now then ready[#ready + 1] = t end
  end
  for i = 1, #ready do
    local t = ready[i]
    if not t.dead then
      self.waiting[t] = nil
      self.sleeping[t] = nil
      resume(self, t)
    end
  end
  local nearest = math_huge
  now = clock.now()
  for t in pairs(self.sleeping) do
    local d = t.wake_at - now
    if d < nearest then nearest = d > 0 and d or 0 end
  end
  return nearest
end

--- sched:cancel(t): see the contract (its coroutine is not reused)
function Sched:cancel(t)
  if t.dead then return end
  t.dead = true
  if t.call then t.call:cancel() end
  self.live[t] = nil
  self.waiting[t] = nil
  self.sleeping[t] = nil
  by_co[t.co] = nil
  if coroutine_close and coroutine_status(t.co) == "suspended" then
    local ok, err = coroutine_close(t.co)
    if not ok then core.log("error", "task " .. (t.name or "?") .. ": closing: " .. tostring(err)) end
  end
end

--- sched:fd() -> the fd readable when a call of its client finished
function Sched:fd() return self.client:calls_fd() end

--- sched:busy() -> whether any task is live
function Sched:busy() return next(self.live) ~= nil end

return _M
