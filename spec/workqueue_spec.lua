-- kinformer.workqueue: ports of client-go util/workqueue queue_test.go, delaying_queue_test.go,
-- rate_limiting_queue_test.go and default_rate_limiters_test.go (named after the originals),
-- then the Lua contract: get's waiting (fake clock, informers), shut down, status, bad arguments.
--
-- Goroutines become coroutines: the queue's `wait` option yields, so a worker blocked in get()
-- or shut_down_with_drain() lets the others run, round-robin and deterministically. Fake clocks
-- are the `clock` option; a fake `wait` lets fake time pass instead of sleeping.
local workqueue = require "kinformer.workqueue"

-- Asserts that fn raises a message matching pattern, reported at the caller's line (this file).
local function raises(fn, pattern)
  local ok, err = pcall(fn)
  assert.is_false(ok, "did not raise")
  assert.is_string(err)
  assert.is_truthy(err:match("^[^\n]-workqueue_spec%.lua:%d+: " .. pattern),
    "error " .. err .. " does not match " .. pattern)
end

-- A plain string as a pattern.
local function lit(s)
  return (s:gsub("[%^%$%(%)%%%.%[%]%*%+%-%?]", "%%%0"))
end

-- client-go's testingclock.FakeClock, plus a wait that advances it instead of sleeping.
local function fake_clock(start)
  local c = { t = start or 0, waits = {} }
  function c.now() return c.t end
  function c.step(d) c.t = c.t + d end
  function c.wait(fds, seconds)
    c.waits[#c.waits + 1] = seconds
    c.t = c.t + seconds
    return "timeout"
  end
  return c
end

-- Coroutines in place of goroutines: go(fn) starts one, run() resumes them round-robin until
-- all returned; yield_wait is the queue `wait` option that lets the others run.
local function scheduler()
  local s = { tasks = {} }
  function s.go(fn)
    local co = coroutine.create(fn)
    s.tasks[#s.tasks + 1] = co
    return co
  end
  function s.yield_wait()
    coroutine.yield()
    return "timeout"
  end
  -- One round: resumes every live task once; returns how many are still live.
  function s.step()
    local live = 0
    for _, co in ipairs(s.tasks) do
      if coroutine.status(co) == "suspended" then
        local ok, err = coroutine.resume(co)
        if not ok then error(debug.traceback(co, tostring(err)), 0) end
        if coroutine.status(co) ~= "dead" then live = live + 1 end
      end
    end
    return live
  end
  function s.run(max_rounds)
    for _ = 1, max_rounds or 100000 do
      if s.step() == 0 then return end
    end
    error("the coroutines did not finish")
  end
  function s.sleep(rounds)
    for _ = 1, rounds do coroutine.yield() end
  end
  return s
end

local function keys(t)
  local out = {}
  for k, v in pairs(t) do
    if v then out[#out + 1] = k end -- the queue's maps keep deleted keys as false
  end
  table.sort(out)
  return out
end

describe("workqueue", function()
  -- ---------------------------------------------------------------- queue_test.go
  describe("queue", function()
    for _, how in ipairs({ "shut_down", "shut_down_with_drain" }) do
      it("TestBasic (" .. how .. "): 50 producers, 10 consumers, nothing after shut down", function()
        local s = scheduler()
        local q = workqueue{ wait = s.yield_wait }
        local producers_left = 50
        local processing = {} -- item -> consumer: the same item is never held by two consumers
        local seen = {}
        for i = 1, 50 do
          s.go(function()
            for _ = 1, 50 do
              q:add(tostring(i))
              s.sleep(1)
            end
            producers_left = producers_left - 1
          end)
        end
        local consumers_left = 10
        for c = 1, 10 do
          s.go(function()
            while true do
              local item, err = q:get()
              assert.are_not.equal("added after shutdown!", item)
              if not item then
                assert.equals("shutdown", err)
                break
              end
              assert.is_nil(processing[item], "handed to two consumers at once")
              processing[item] = c
              seen[item] = true
              s.sleep(3)
              processing[item] = nil
              q:done(item)
            end
            consumers_left = consumers_left - 1
          end)
        end
        local drained
        s.go(function()
          while producers_left > 0 do coroutine.yield() end
          drained = q[how](q)
          q:add("added after shutdown!")
        end)
        s.run()
        assert.equals(0, consumers_left)
        assert.equals(0, q:len())
        assert.equals(50, #keys(seen))
        if how == "shut_down_with_drain" then assert.is_true(drained) end
        assert.equals(0, q:status().in_flight)
      end)

      it("TestAddWhileProcessing (" .. how .. "): every worker re-adds each item once", function()
        local s = scheduler()
        local q = workqueue{ wait = s.yield_wait }
        local producers_left = 50
        for i = 1, 50 do
          s.go(function()
            q:add(tostring(i))
            producers_left = producers_left - 1
          end)
        end
        local processing, gets = {}, 0
        for _ = 1, 10 do
          s.go(function()
            local counters = {}
            while true do
              local item = q:get()
              if not item then return end
              assert.is_nil(processing[item], "handed to two consumers at once")
              processing[item] = true
              gets = gets + 1
              counters[item] = (counters[item] or 0) + 1
              if counters[item] < 2 then q:add(item) end
              coroutine.yield()
              processing[item] = nil
              q:done(item)
            end
          end)
        end
        s.go(function()
          while producers_left > 0 do coroutine.yield() end
          q[how](q)
        end)
        s.run()
        assert.equals(0, q:len())
        assert.is_true(gets >= 50)
      end)
    end

    it("TestLen", function()
      local q = workqueue()
      q:add("foo")
      assert.equals(1, q:len())
      q:add("bar")
      assert.equals(2, q:len())
      q:add("foo") -- should not increase the queue length
      assert.equals(2, q:len())
    end)

    it("TestReinsert", function()
      local q = workqueue()
      q:add("foo")
      local i = q:get()
      assert.equals("foo", i)
      q:add(i) -- add it back while processing
      assert.equals(0, q:len(), "not handed out again while processing")
      q:done(i)
      assert.equals("foo", q:get()) -- it is back on the queue
      q:done(i)
      assert.equals(0, q:len())
    end)

    it("FIFO order and dedupe: items come out in the order they were first added", function()
      local q = workqueue()
      for _, k in ipairs({ "a", "b", "a", "c", "b", "d" }) do q:add(k) end
      local out = {}
      for _ = 1, 4 do out[#out + 1] = q:get(0) end
      assert.same({ "a", "b", "c", "d" }, out)
      assert.same({ nil, "timeout" }, { q:get(0) })
      assert.equals(4, q:status().adds)
    end)

    it("TestQueueDrainageUsingShutDownWithDrain", function()
      local s = scheduler()
      local q = workqueue{ wait = s.yield_wait }
      q:add("foo")
      q:add("bar")
      local first, second = q:get(), q:get()
      local result
      s.go(function() result = { q:shut_down_with_drain() } end)
      s.step() -- shut_down_with_drain has started and waits
      assert.is_nil(result)
      -- as the original: Get until it says shutdown, before marking the items done
      local item, err = q:get()
      assert.is_nil(item)
      assert.equals("shutdown", err)
      q:done(first)
      s.step()
      assert.is_nil(result, "still one item in flight")
      q:done(second)
      s.run()
      assert.same({ true }, result)
    end)

    it("TestNoQueueDrainageUsingShutDown", function()
      local q = workqueue()
      q:add("foo")
      q:add("bar")
      q:get()
      q:get()
      q:shut_down() -- returns at once although nothing is done
      assert.is_true(q:shutting_down())
      assert.same({ nil, "shutdown" }, { q:get() })
      assert.equals(2, q:status().in_flight)
    end)

    it("TestForceQueueShutdownUsingShutDown", function()
      local s = scheduler()
      local q = workqueue{ wait = s.yield_wait }
      q:add("foo")
      q:add("bar")
      q:get()
      q:get()
      local result
      s.go(function() result = { q:shut_down_with_drain() } end)
      s.step()
      assert.same({ nil, "shutdown" }, { q:get() })
      -- ShutDown forces the drain to end (a caller's second SIGTERM) without any done
      q:shut_down()
      s.run()
      assert.same({ nil, "forced" }, result)
    end)

    it("TestQueueDrainageUsingShutDownWithDrainWithDirtyItem", function()
      local s = scheduler()
      local q = workqueue{ wait = s.yield_wait }
      q:add("foo")
      local gotten = q:get()
      q:add("foo")
      local result
      s.go(function() result = { q:shut_down_with_drain() } end)
      s.step()
      assert.same({ nil, "shutdown" }, { q:get() })
      q:done(gotten) -- finish "working": the dirty item goes back into the queue
      local again, err = q:get()
      assert.equals("foo", again, err)
      q:done(again)
      assert.same({ nil, "shutdown" }, { q:get() }) -- now we are really done
      s.run()
      assert.same({ true }, result)
    end)

    it("TestGarbageCollection: nothing is kept for an item once it is done", function()
      local q = workqueue()
      q:add("big")
      q:done(q:get())
      q:add_after("later", 0)
      q:done(q:get())
      for _, m in ipairs({ q._dirty, q._processing, q._added_at, q._waiting }) do
        assert.same({}, keys(m.t))
        assert.equals(0, m.live)
      end
      local r = q._ready
      assert.same({}, keys(r.levels[1].ring))
      assert.equals(0, r.n)
      assert.same({}, q._heap)
      -- deleted keys linger as false only until they outnumber the live ones
      for i = 1, 1000 do q:add("k" .. i) end
      for _ = 1, 1000 do q:done(q:get(0)) end
      local n = 0
      for _ in pairs(q._dirty.t) do n = n + 1 end
      assert.is_true(n <= 65, n .. " keys left in the dirty set's table")
      assert.equals(2 * 16, #r.levels[1].ring, "the ring shrank back")
    end)

    it("matches a plain model of client-go's queue over 20000 random operations", function()
      -- the model: client-go's Typed[T] with a list for the queue (O(n), obviously right)
      local m = { queue = {}, dirty = {}, processing = {} }
      function m.add(item)
        if m.dirty[item] then return end
        m.dirty[item] = true
        if not m.processing[item] then m.queue[#m.queue + 1] = item end
      end
      function m.get()
        local item = table.remove(m.queue, 1)
        if item then
          m.processing[item] = true
          m.dirty[item] = nil
        end
        return item
      end
      function m.done(item)
        if not m.processing[item] then return end
        m.processing[item] = nil
        if m.dirty[item] then m.queue[#m.queue + 1] = item end
      end
      local q = workqueue()
      math.randomseed(42)
      local held = {}
      for step = 1, 20000 do
        local r = math.random()
        -- phases: grow to a few hundred (the ring grows and wraps), then shrink (it halves)
        local grow = (step % 4000) < 2000
        if r < (grow and 0.6 or 0.3) then
          local item = "k" .. math.random(1, 400)
          q:add(item)
          m.add(item)
        elseif r < 0.85 then
          local a, b = q:get(0), m.get()
          assert.equals(b, a)
          if a then held[#held + 1] = a end
        elseif #held > 0 then
          local item = table.remove(held, math.random(1, #held))
          q:done(item)
          m.done(item)
        end
        assert.equals(#m.queue, q:len())
      end
    end)

    it("done of an item that is not being processed is ignored (never queued twice)", function()
      local q = workqueue()
      q:add("foo")
      q:done("foo") -- client-go would push foo a second time
      q:done("never-seen")
      assert.equals(1, q:len())
      assert.equals("foo", q:get(0))
      assert.same({ nil, "timeout" }, { q:get(0) })
    end)
  end)

  -- ---------------------------------------------------------------- delaying_queue_test.go
  describe("delaying queue", function()
    it("TestSimpleQueue", function()
      local c = fake_clock(1000)
      local q = workqueue{ clock = c.now, wait = c.wait }
      q:add_after("foo", 0.05)
      assert.equals(1, q:status().waiting)
      assert.equals(0, q:len(), "should not have added")
      c.step(0.06)
      assert.equals(1, q:len(), "should have added")
      assert.equals(0, q:status().waiting)
      q:done(q:get())
      c.step(10) -- step past the next heartbeat
      assert.equals(0, q:len(), "should not have added")
    end)

    it("TestDeduping", function()
      local c = fake_clock(1000)
      local q = workqueue{ clock = c.now, wait = c.wait }
      q:add_after("foo", 0.05)
      q:add_after("foo", 0.07)
      assert.equals(1, q:status().waiting)
      assert.equals(0, q:len())
      c.step(0.06) -- past the first block: we receive now
      assert.equals(1, q:len())
      assert.equals(0, q:status().waiting)
      q:done(q:get())
      c.step(0.02) -- past the second add: nothing
      assert.equals(0, q:len())

      -- again, but this time the earlier should override
      q:add_after("foo", 0.05)
      q:add_after("foo", 0.03)
      assert.equals(1, q:status().waiting)
      assert.equals(0, q:len())
      c.step(0.04)
      assert.equals(1, q:len())
      assert.equals(0, q:status().waiting)
      q:done(q:get())
      c.step(0.02)
      assert.equals(0, q:len())
    end)

    it("TestAddTwoFireEarly", function()
      local c = fake_clock(1000)
      local q = workqueue{ clock = c.now, wait = c.wait }
      q:add_after("foo", 1)
      q:add_after("bar", 0.05)
      assert.equals(2, q:status().waiting)
      assert.equals(0, q:len())
      c.step(0.06)
      assert.equals(1, q:len())
      assert.equals(1, q:status().waiting)
      assert.equals("bar", q:get())
      q:add_after("baz", 2)
      c.step(1)
      assert.equals(1, q:len())
      assert.equals(1, q:status().waiting)
      assert.equals("foo", q:get())
      c.step(2)
      assert.equals(1, q:len())
      assert.equals(0, q:status().waiting)
      assert.equals("baz", q:get())
    end)

    it("TestCopyShifting", function()
      local c = fake_clock(1000)
      local q = workqueue{ clock = c.now, wait = c.wait }
      q:add_after("foo", 1)
      q:add_after("bar", 0.5)
      q:add_after("baz", 0.25)
      assert.equals(3, q:status().waiting)
      assert.equals(0, q:len())
      c.step(2)
      assert.equals(3, q:len())
      assert.equals(0, q:status().waiting)
      assert.equals("baz", q:get())
      assert.equals("bar", q:get())
      assert.equals("foo", q:get())
    end)

    it("BenchmarkDelayingQueue_AddAfter as a check: 2000 random delays come out in time order", function()
      local c = fake_clock(0)
      local q = workqueue{ clock = c.now, wait = c.wait }
      math.randomseed(7)
      local at = {}
      for n = 1, 2000 do
        local d = math.random() * 600
        at[tostring(n)] = d
        q:add_after(tostring(n), d)
      end
      c.step(660)
      local prev = -1
      for _ = 1, 2000 do
        local item = q:get(0)
        assert.is_true(at[item] >= prev)
        prev = at[item]
      end
      assert.same({ nil, "timeout" }, { q:get(0) })
    end)

    it("a delayed item that became ready keeps its place before later adds", function()
      local c = fake_clock(0)
      local q = workqueue{ clock = c.now, wait = c.wait }
      q:add_after("early", 1)
      c.step(2)
      q:add("late") -- client-go's timer would have added "early" at t = 1
      assert.equals("early", q:get(0))
      assert.equals("late", q:get(0))
    end)

    it("add_after of 0 or less adds at once; an item may be queued and waiting at the same time", function()
      local c = fake_clock(0)
      local q = workqueue{ clock = c.now, wait = c.wait }
      q:add_after("now", 0)
      q:add_after("past", -5)
      assert.equals(2, q:len())
      q:add_after("now", 1) -- queued and waiting: it fires as a no-op add while still queued
      c.step(1)
      assert.equals(2, q:len())
      assert.equals("now", q:get(0))
      assert.equals("past", q:get(0))
      assert.equals(3, q:status().retries)
    end)
  end)

  -- ---------------------------------------------------------------- rate limiting
  describe("rate limiting queue", function()
    it("TestRateLimitingQueue", function()
      local c = fake_clock(0)
      local q = workqueue{ clock = c.now, wait = c.wait,
        rate_limiter = workqueue.exponential_rate_limiter{ base_delay = 0.001, max_delay = 1 } }
      local delays = {} -- what the delaying queue was asked (the original reads waitingForAddCh)
      local add_after = q.add_after
      q.add_after = function(self, item, s)
        delays[#delays + 1] = item .. " " .. s
        return add_after(self, item, s)
      end
      q:add_rate_limited("one")
      q:add_rate_limited("one")
      assert.equals(2, q:num_requeues("one"))
      q:add_rate_limited("two")
      q:add_rate_limited("two")
      q:forget("one")
      assert.equals(0, q:num_requeues("one"))
      q:add_rate_limited("one")
      assert.same({ "one 0.001", "one 0.002", "two 0.001", "two 0.002", "one 0.001" }, delays)
      -- the second add_rate_limited of a waiting item did not push it later
      assert.equals(0.001, q._waiting.t.one.at)
      assert.equals(5, q:status().retries)
    end)

    it("TestItemExponentialFailureRateLimiter", function()
      local l = workqueue.exponential_rate_limiter{ base_delay = 0.001, max_delay = 1 }
      for _, want in ipairs({ 0.001, 0.002, 0.004, 0.008, 0.016 }) do
        assert.equals(want, l:when("one"))
      end
      assert.equals(5, l:num_requeues("one"))
      assert.equals(0.001, l:when("two"))
      assert.equals(0.002, l:when("two"))
      assert.equals(2, l:num_requeues("two"))
      l:forget("one")
      assert.equals(0, l:num_requeues("one"))
      assert.equals(0.001, l:when("one"))
    end)

    it("TestItemExponentialFailureRateLimiterOverFlow", function()
      local l = workqueue.exponential_rate_limiter{ base_delay = 0.001, max_delay = 1000 }
      for _ = 1, 5 do l:when("one") end
      assert.equals(0.032, l:when("one"))
      for _ = 1, 1000 do l:when("overflow1") end
      assert.equals(1000, l:when("overflow1"))

      l = workqueue.exponential_rate_limiter{ base_delay = 60, max_delay = 1000 * 3600 }
      for _ = 1, 2 do l:when("two") end
      assert.equals(4 * 60, l:when("two"))
      for _ = 1, 1000 do l:when("overflow2") end
      assert.equals(1000 * 3600, l:when("overflow2"))
    end)

    it("TestItemFastSlowRateLimiter", function()
      local l = workqueue.fast_slow_rate_limiter{ fast_delay = 0.005, slow_delay = 10,
        max_fast_attempts = 3 }
      for _, want in ipairs({ 0.005, 0.005, 0.005, 10, 10 }) do
        assert.equals(want, l:when("one"))
      end
      assert.equals(5, l:num_requeues("one"))
      assert.equals(0.005, l:when("two"))
      assert.equals(0.005, l:when("two"))
      assert.equals(2, l:num_requeues("two"))
      l:forget("one")
      assert.equals(0, l:num_requeues("one"))
      assert.equals(0.005, l:when("one"))
    end)

    it("TestMaxOfRateLimiter", function()
      local l = workqueue.max_of_rate_limiter{
        workqueue.fast_slow_rate_limiter{ fast_delay = 0.005, slow_delay = 3, max_fast_attempts = 3 },
        workqueue.exponential_rate_limiter{ base_delay = 0.001, max_delay = 1 },
      }
      for _, want in ipairs({ 0.005, 0.005, 0.005, 3, 3 }) do
        assert.equals(want, l:when("one"))
      end
      assert.equals(5, l:num_requeues("one"))
      assert.equals(0.005, l:when("two"))
      assert.equals(0.005, l:when("two"))
      assert.equals(2, l:num_requeues("two"))
      l:forget("one")
      assert.equals(0, l:num_requeues("one"))
      assert.equals(0.005, l:when("one"))
    end)

    it("TestWithMaxWaitRateLimiter (with a rate limiter written in Lua)", function()
      -- the original's StepRateLimiter: any object with when / num_requeues / forget
      local step = { count = 0 }
      function step:when()
        self.count = self.count + 1
        return self.count <= 100 and 0.005 or 1000
      end
      function step:num_requeues() return 0 end
      function step:forget() end
      local l = workqueue.with_max_wait_rate_limiter{ limiter = step, max_wait = 500 }
      for i = 0, 99 do assert.equals(0.005, l:when(i)) end
      for i = 100, 199 do assert.equals(500, l:when(i)) end
    end)

    it("bucket rate limiter: starts full (burst), then one token per 1/qps", function()
      local c = fake_clock(50)
      local l = workqueue.bucket_rate_limiter{ qps = 10, burst = 100, clock = c.now }
      for i = 1, 100 do assert.equals(0, l:when(tostring(i))) end
      assert.near(0.1, l:when("x"), 1e-9)
      assert.near(0.2, l:when("y"), 1e-9)
      c.step(1) -- 10 tokens more: -2 + 10
      for _ = 1, 8 do assert.equals(0, l:when("z")) end
      assert.near(0.1, l:when("z"), 1e-9)
      assert.equals(0, l:num_requeues("z"))
      l:forget("z") -- nothing to forget
      c.step(100)
      for _ = 1, 100 do assert.equals(0, l:when("w")) end -- refilled to burst, never above
      assert.near(0.1, l:when("w"), 1e-9)
    end)

    it("bucket rate limiter: a clock that goes back adds no tokens", function()
      local c = fake_clock(100)
      local l = workqueue.bucket_rate_limiter{ qps = 1, burst = 1, clock = c.now }
      assert.equals(0, l:when("a"))
      c.step(-10)
      assert.near(1, l:when("a"), 1e-9)
    end)

    it("DefaultControllerRateLimiter: per-item exponential from 5 ms, overall 10 qps burst 100", function()
      local c = fake_clock(0)
      local l = workqueue.default_rate_limiter{ clock = c.now }
      assert.equals(0.005, l:when("one"))
      assert.equals(0.01, l:when("one"))
      assert.equals(0.02, l:when("one"))
      assert.equals(3, l:num_requeues("one"))
      for i = 1, 97 do assert.equals(0.005, l:when("k" .. i)) end -- 100 tokens used
      assert.near(0.1, l:when("k-101"), 1e-9) -- the bucket is the worst now
      for _ = 1, 30 do l:when("two") end
      assert.equals(1000, l:when("two")) -- capped at 1000 s
      l:forget("two")
      assert.equals(0, l:num_requeues("two"))
    end)

    it("the queue's default rate limiter is the default controller one, on the queue's clock", function()
      local c = fake_clock(0)
      local q = workqueue{ clock = c.now, wait = c.wait }
      for i = 1, 100 do q:add_rate_limited("k" .. i) end
      q:add_rate_limited("k0")
      assert.near(0.1, q._waiting.t.k0.at, 1e-9)
      q:add_rate_limited("k1")
      assert.equals(0.005, q._waiting.t.k1.at) -- max(0.01, bucket 0.2), but k1 already waits less
      c.step(0.005)
      assert.equals(100, q:len())
      assert.equals(1, q:status().waiting)
      assert.equals(2, q:num_requeues("k1"))
    end)

    it("a rate-limited item is handed out once its delay passed (get waits for it)", function()
      local c = fake_clock(0)
      local q = workqueue{ clock = c.now, wait = c.wait }
      q:add("key")
      local item = q:get(0)
      q:add_rate_limited(item) -- the reconcile failed: retry after 5 ms
      q:done(item)
      assert.same({ nil, "timeout" }, { q:get(0) })
      assert.equals("key", q:get(1))
      assert.equals(0.005, c.t)
      q:forget("key")
      q:done("key")
      assert.equals(0, q:num_requeues("key"))
    end)
  end)

  -- ---------------------------------------------------------------- get, informers, shut down
  describe("get", function()
    it("waits exactly until the next delayed item is ready, in slices of at most 0.1 s", function()
      local c = fake_clock(0)
      local q = workqueue{ clock = c.now, wait = c.wait }
      q:add_after("a", 0.25)
      assert.equals("a", q:get(10))
      assert.equals(0.25, c.t)
      for _, w in ipairs(c.waits) do assert.is_true(w <= 0.1 + 1e-12) end
    end)

    it("returns nil, 'timeout' once the timeout passed; get(0) never waits", function()
      local c = fake_clock(0)
      local q = workqueue{ clock = c.now, wait = c.wait }
      q:add_after("a", 5)
      assert.same({ nil, "timeout" }, { q:get(0) })
      assert.equals(0, c.t)
      assert.same({ nil, "timeout" }, { q:get(1) })
      assert.near(1, c.t, 1e-9)
      assert.equals("a", q:get()) -- no timeout: until the item is ready
      assert.near(5, c.t, 1e-9)
    end)

    it("after shut_down it hands out what is queued, then returns nil, 'shutdown'", function()
      local c = fake_clock(0)
      local q = workqueue{ clock = c.now, wait = c.wait }
      q:add("a")
      q:add("b")
      q:add_after("later", 1)
      q:shut_down()
      q:add("c")
      q:add_after("d", 0)
      assert.equals(0, q:status().waiting, "delayed items are dropped")
      assert.equals("a", q:get())
      assert.equals("b", q:get())
      assert.same({ nil, "shutdown" }, { q:get() })
      c.step(2)
      assert.same({ nil, "shutdown" }, { q:get(5) })
      assert.equals(2, c.t, "did not wait")
      assert.equals(1, q:status().retries, "add_after after shut down is not a retry")
    end)

    it("raises instead of blocking forever when nothing could add an item", function()
      local q = workqueue()
      raises(function() q:get() end,
        "get would wait forever: the queue is empty, nothing is delayed")
      q:add("x")
      assert.equals("x", q:get()) -- an item: no wait at all
    end)

    it("dispatches its informers once per call and while it waits, waiting on their fds", function()
      local c = fake_clock(0)
      local q
      local calls = 0
      local inf = {
        dispatch = function(self, max)
          assert.equals(100, max)
          calls = calls + 1
          if calls == 3 then q:add("default/web-1") end -- a handler adds a key
          return calls == 3 and 1 or 0
        end,
        fd = function() return 42 end,
      }
      local seen_fds
      q = workqueue{ informers = { inf }, clock = c.now,
        wait = function(fds, s) seen_fds = fds; return c.wait(fds, s) end }
      assert.equals("default/web-1", q:get())
      assert.equals(3, calls)
      assert.same({ 42 }, seen_fds)
      q:add("x")
      assert.equals("x", q:get())
      assert.equals(4, calls, "dispatched even though an item was queued")
    end)

    it("with informers, get() without timeout may wait (their handlers can add)", function()
      local c = fake_clock(0)
      local stopped = false
      local inf = {
        dispatch = function() return 0 end,
        fd = function() return 7 end,
        is_stopped = function() return stopped end,
      }
      local q = workqueue{ informers = { inf }, clock = c.now,
        wait = function(fds, s)
          assert.same(stopped and {} or { 7 }, fds) -- a stopped informer's fd is not polled
          c.wait(fds, s)
          if c.t > 1 then stopped = true end
          return "timeout"
        end }
      assert.same({ nil, "timeout" }, { q:get(2) })
      assert.is_true(stopped)
    end)

    it("an informer that stays busy is dispatched again without waiting", function()
      local c = fake_clock(0)
      local q
      local calls = 0
      local inf = {
        dispatch = function(self, max)
          calls = calls + 1
          if calls == 5 then q:add("k") end
          return max -- a full batch: more is pending
        end,
        fd = function() return 3 end,
      }
      q = workqueue{ informers = { inf }, clock = c.now, wait = c.wait }
      assert.equals("k", q:get(1))
      assert.same({ 0, 0, 0, 0 }, c.waits)
    end)

    it("a signal caught while it waits ends the wait: nil, signal name", function()
      local q = workqueue{ wait = function() return "signal", "SIGTERM" end }
      assert.same({ nil, "SIGTERM" }, { q:get(5) })
    end)

    it("a signal caught while items are ready ends get too (a busy worker loop still stops)",
      function()
      local kinformer = require "kinformer"
      local pid = io.open("/proc/self/stat"):read("*l"):match("^(%d+)")
      local q = workqueue()
      q:add("a")
      q:add("b")
      local was = kinformer.catch_signals(true)
      finally(function() kinformer.catch_signals(was) end)
      os.execute("kill -TERM " .. pid)
      require("socket").sleep(0.05) -- in case another thread took the signal
      assert.same({ nil, "SIGTERM" }, { q:get(1) })
      -- reported once; the items are still there
      assert.equals("a", q:get(0))
      q:done("a")
      assert.equals("b", q:get(0))
    end)

    it("a signal caught but not reported before catching stops is not reported later",
      function()
      local kinformer = require "kinformer"
      local pid = io.open("/proc/self/stat"):read("*l"):match("^(%d+)")
      local was = kinformer.catch_signals(true)
      finally(function() kinformer.catch_signals(was) end)
      os.execute("kill -TERM " .. pid)
      require("socket").sleep(0.05)
      kinformer.catch_signals(false)
      local q = workqueue()
      assert.same({ nil, "timeout" }, { q:get(0.05) })
      q:add("a")
      assert.equals("a", q:get(0))
    end)
  end)

  describe("shut_down_with_drain", function()
    it("returns true at once when nothing is in flight", function()
      local q = workqueue()
      q:add("queued")
      assert.is_true(q:shut_down_with_drain())
      assert.is_true(q:shutting_down())
      assert.equals("queued", q:get())
    end)

    it("returns nil, 'timeout' when items stay in flight; the queue stays shut down", function()
      local c = fake_clock(0)
      local q = workqueue{ clock = c.now, wait = c.wait }
      q:add("a")
      q:get()
      assert.same({ nil, "timeout" }, { q:shut_down_with_drain(3) })
      assert.near(3, c.t, 1e-9)
      assert.is_true(q:shutting_down())
      q:done("a")
      assert.is_true(q:shut_down_with_drain())
    end)

    it("raises instead of waiting forever when nothing could call done", function()
      local q = workqueue()
      q:add("a")
      q:get()
      raises(function() q:shut_down_with_drain() end,
        "shut_down_with_drain would wait forever: 1 item%(s%) in flight")
    end)

    it("dispatches informers while it waits: a handler may finish the work", function()
      local c = fake_clock(0)
      local q
      local inf = {
        dispatch = function()
          if c.t >= 0.5 and q:status().in_flight > 0 then q:done("a") end
          return 0
        end,
        fd = function() return 9 end,
      }
      q = workqueue{ informers = { inf }, clock = c.now, wait = c.wait }
      q:add("a")
      assert.equals("a", q:get())
      assert.is_true(q:shut_down_with_drain())
      assert.near(0.5, c.t, 1e-9)
    end)
  end)

  describe("status", function()
    it("reports client-go's workqueue metrics", function()
      local c = fake_clock(100)
      local q = workqueue{ name = "pods", clock = c.now, wait = c.wait }
      q:add("a")
      q:add("b")
      q:add("a")
      q:add_after("c", 10)
      c.step(2)
      assert.equals("a", q:get())
      c.step(1)
      assert.equals("b", q:get())
      q:add("a") -- dirty while processing
      c.step(4)
      local st = q:status()
      assert.same({
        name = "pods", length = 0, depth = 1, depth_by_priority = { [0] = 1 }, waiting = 1,
        in_flight = 2,
        adds = 3, retries = 1, gets = 2, dones = 0,
        queue_seconds_total = 2 + 3, work_seconds_total = 0,
        unfinished_work_seconds = 5 + 4, longest_running_processor_seconds = 5,
        shutting_down = false,
      }, st)
      q:done("a")
      st = q:status()
      assert.equals(1, st.length)
      assert.equals(1, st.dones)
      assert.equals(5, st.work_seconds_total)
      assert.equals(4, st.longest_running_processor_seconds)
    end)
  end)

  describe("bad arguments raise, naming the argument", function()
    local q = workqueue()
    for _, m in ipairs({ "add", "add_after", "add_rate_limited", "done", "forget", "num_requeues" }) do
      it(m .. " with a non-string item", function()
        for _, bad in ipairs({ 1, true, {} }) do
          raises(function() q[m](q, bad, 1) end,
            "bad argument #1 to '" .. m .. "' %(string expected, got " .. type(bad))
        end
        assert.error_matches(function() q[m](q) end, "string expected, got nil")
      end)
    end

    it("add_after with seconds that are not a number", function()
      raises(function() q:add_after("a", "1") end,
        "bad argument #2 to 'add_after' %(number of seconds expected")
      assert.error_matches(function() q:add_after("a", 0 / 0) end, "bad argument #2 to 'add_after'")
    end)

    it("get and shut_down_with_drain with a bad timeout", function()
      for _, bad in ipairs({ -1, "1", 0 / 0 }) do
        raises(function() q:get(bad) end,
          "bad argument #1 to 'get' %(timeout must be nil or a number")
        assert.error_matches(function() q:shut_down_with_drain(bad) end,
          "bad argument #1 to 'shut_down_with_drain'")
      end
    end)

    it("workqueue{...} with bad options", function()
      local cases = {
        { 5, "table expected, got number" },
        { { bogus = 1 }, "unknown option 'bogus'" },
        { { name = 5 }, "option 'name' must be a string" },
        { { clock = 5 }, "option 'clock' must be a function" },
        { { wait = "x" }, "option 'wait' must be a function" },
        { { rate_limiter = {} }, "option 'rate_limiter' must be a rate limiter" },
        { { informers = 5 }, "option 'informers' must be a list of informers" },
        { { informers = { {} } }, "option 'informers': item 1 is not an informer" },
        { { informers = { x = 1 } }, "option 'informers' must be a list of informers" },
      }
      for _, case in ipairs(cases) do
        raises(function() workqueue(case[1]) end,
          lit("bad argument #1 to 'workqueue' (" .. case[2]))
        raises(function() workqueue.new(case[1]) end, "bad argument #1 to 'workqueue'")
      end
    end)

    it("rate limiter constructors with bad options", function()
      local cases = {
        { "exponential_rate_limiter", { base_delay = -1 }, "option 'base_delay' must be a number >= 0" },
        { "exponential_rate_limiter", { max = 1 }, "unknown option 'max'" },
        { "fast_slow_rate_limiter", nil, "table expected, got nil" },
        { "fast_slow_rate_limiter", { fast_delay = 1, slow_delay = 2 },
          "option 'max_fast_attempts' is required" },
        { "fast_slow_rate_limiter", { fast_delay = 1, slow_delay = 2, max_fast_attempts = 1.5 },
          "option 'max_fast_attempts' must be an integer >= 0" },
        { "bucket_rate_limiter", { qps = 0 }, "option 'qps' must be a number > 0" },
        { "bucket_rate_limiter", { burst = 0 }, "option 'burst' must be an integer >= 1" },
        { "bucket_rate_limiter", { clock = 1 }, "option 'clock' must be a function" },
        { "max_of_rate_limiter", {}, "list of rate limiters expected" },
        { "max_of_rate_limiter", { {} }, "item 1 is not a rate limiter" },
        { "with_max_wait_rate_limiter", { max_wait = 1 }, "option 'limiter' must be a rate limiter" },
        { "default_rate_limiter", { qps = 1 }, "unknown option 'qps'" },
      }
      for _, case in ipairs(cases) do
        raises(function() workqueue[case[1]](case[2]) end,
          lit("bad argument #1 to '" .. case[1] .. "' (" .. case[3]))
      end
    end)

    it("rate limiter methods with a nil item", function()
      local l = workqueue.exponential_rate_limiter()
      assert.error_matches(function() l:when(nil) end, "bad argument #1 to 'when'")
      assert.error_matches(function() l:forget() end, "bad argument #1 to 'forget'")
    end)
  end)

  it("is kinformer.workqueue once lua/kinformer/init.lua exports it", function()
    local kinformer = require "kinformer"
    if kinformer.workqueue == nil then
      pending("init.lua does not export kinformer.workqueue yet")
      return
    end
    local q = kinformer.workqueue{}
    q:add("a")
    assert.equals("a", q:get(0))
    assert.is_function(kinformer.workqueue.default_rate_limiter)
  end)
end)

-- ---------------------------------------------------------------- end to end
describe("workqueue with a real informer", function()
  local fake = require "support.fake_apiserver"
  local kinformer = require "kinformer"
  local core = require "kinformer.core"

  it("get wakes as soon as a handler adds the key of a new pod", function()
    local srv = fake.start{ quiet = true, args = { "--pods", "3" } }
    local pods
    finally(function() -- busted keeps one finally per test
      if pods then pods:stop() end
      srv:stop()
    end)
    local client = assert(kinformer.client{ server = srv.url })
    pods = assert(client:informer{ resource = "pods" })
    local q = workqueue{ informers = { pods } }
    local function enqueue(obj) q:add(assert(kinformer.key_of(obj))) end
    pods:add_handler{ on_add = enqueue, on_update = function(_, new) enqueue(new) end,
                      on_delete = enqueue }
    assert(pods:start())
    local initial = {}
    for _ = 1, 3 do
      local key = assert(q:get(10))
      initial[#initial + 1] = key
      q:done(key)
    end
    assert.equals(3, #initial)
    assert.is_true(pods:has_synced())

    local code = srv:request("POST", "/api/v1/namespaces/default/pods",
      { apiVersion = "v1", kind = "Pod", metadata = { name = "late", namespace = "default" },
        spec = { containers = { { name = "c", image = "nginx" } } } })
    assert.equals(201, code)
    local t0 = core.now()
    assert.equals("default/late", q:get(10))
    assert.is_true(core.now() - t0 < 2, "woken by the informer's fd")
    q:done("default/late")
    assert.same({ nil, "timeout" }, { q:get(0.2) })
    q:shut_down()
    assert.same({ nil, "shutdown" }, { q:get(1) })
  end)
end)

describe("workqueue argument errors", function()
  -- Each raise names the line of the call that made the mistake, however deep the library
  -- found it (the queue's constructor builds its default rate limiter, get checks its timeout).
  local function raised_at(fn, line)
    local ok, err = pcall(fn)
    assert.is_false(ok)
    assert.matches("^[^:]*workqueue_spec%.lua:" .. line .. ": ", err)
    return err
  end

  it("names the caller's line", function()
    local line = debug.getinfo(1, "l").currentline
    raised_at(function() workqueue{ colour = 1 } end, line + 1)
    raised_at(function() workqueue.new{ clock = 1 } end, line + 2)
    raised_at(function() workqueue.default_rate_limiter{ clock = 1 } end, line + 3)
    raised_at(function() workqueue.max_of_rate_limiter{ {} } end, line + 4)
    local q = workqueue{}
    raised_at(function() q:add(1) end, line + 6)
    raised_at(function() q:get(-1) end, line + 7)
    local err = raised_at(function() q:get() end, line + 8)
    assert.matches("get would wait forever", err, 1, true)
  end)
end)
