-- kinformer.workqueue priorities (controller-runtime's priority queue as the model) and
-- next_due: order by priority, FIFO within one, promotion and no demotion, the anti-starvation
-- ratio, priorities through add_after / add_rate_limited, the dirty / processing rule with
-- priorities, depth per priority, next_due against a fake clock, and a random run against a
-- plain model of the rules.
local workqueue = require "kinformer.workqueue"

local function fake_clock(start)
  local c = { t = start or 0 }
  function c.now() return c.t end
  function c.step(d) c.t = c.t + d end
  function c.wait(_, seconds) c.t = c.t + seconds return "timeout" end
  return c
end

-- Every item get(0) hands out (done at once) until the queue is empty.
local function drain(q)
  local out = {}
  while true do
    local item = q:get(0)
    if not item then return out end
    out[#out + 1] = item
    q:done(item)
  end
end

-- Asserts that fn raises a message matching pattern, reported at this file's line.
local function raises(fn, pattern)
  local ok, err = pcall(fn)
  assert.is_false(ok, "did not raise")
  assert.is_truthy(tostring(err):match("^[^\n]-workqueue_priority_spec%.lua:%d+: " .. pattern),
    "error " .. tostring(err) .. " does not match " .. pattern)
end

describe("workqueue priorities", function()
  it("hands out the highest priority first, FIFO within one priority", function()
    local q = workqueue{ anti_starvation = false }
    q:add("a")
    q:add("b", -100)
    q:add("c", 5)
    q:add("d", 0)
    q:add("e", -100)
    q:add("f", 5)
    q:add("g")
    assert.equals(7, q:len())
    assert.same({ "c", "f", "a", "d", "g", "b", "e" }, drain(q))
  end)

  it("the default anti-starvation changes nothing within 10 items handed out", function()
    local q = workqueue()
    for i = 1, 3 do q:add("low" .. i, -100) end
    for i = 1, 9 do q:add("high" .. i) end
    local out = drain(q)
    assert.same({ "high1", "high2", "high3", "high4", "high5", "high6", "high7", "high8",
                  "high9", "low1", "low2", "low3" }, out)
  end)

  it("an add at a higher priority promotes a queued item to the end of that priority", function()
    local q = workqueue()
    q:add("a", -100)
    q:add("b", -100)
    q:add("c", -100)
    q:add("x")
    q:add("b") -- a real change of an object from the initial list
    q:add("y")
    assert.equals(5, q:len())
    assert.equals(5, q:status().depth)
    assert.equals(5, q:status().adds, "a promotion is not an add")
    assert.same({ [0] = 3, [-100] = 2 }, q:status().depth_by_priority)
    assert.same({ "x", "b", "y", "a", "c" }, drain(q))
  end)

  it("priority never goes down: a lower or equal add of a queued item changes nothing", function()
    local q = workqueue()
    q:add("a", 5)
    q:add("b")
    q:add("c")
    q:add("a", -100)
    q:add("b", 0) -- same priority: keeps its place, not moved behind c
    q:add("a")
    assert.same({ [5] = 1, [0] = 2 }, q:status().depth_by_priority)
    assert.same({ "a", "b", "c" }, drain(q))
  end)

  it("promotes again and again; left-behind entries are skipped, then nothing is kept", function()
    local q = workqueue{ anti_starvation = 2 }
    for round = 1, 3 do
      q:add("k", -1)
      q:add("k", 0)
      q:add("k", 1)
      q:add("other", -1)
      assert.equals(2, q:len())
      assert.same({ "k", "other" }, drain(q), "round " .. round)
    end
    q:add("k", -1)
    assert.same({ "k" }, drain(q))
    local r = q._ready
    assert.equals(0, r.n)
    assert.equals(0, r.stale_n)
    assert.same({}, (function()
      local live = {}
      for k, v in pairs(r.stale.t) do if v then live[#live + 1] = k end end
      return live
    end)())
    for _, L in ipairs(r.levels) do
      assert.equals(0, L.n)
      assert.equals(0, L.live)
    end
  end)

  describe("anti-starvation", function()
    -- n gets while a new high-priority item arrives before each: the handed-out sequence as
    -- "H" / the low item's name.
    local function saturate(q, n)
      local out, h = {}, 0
      for _ = 1, n do
        h = h + 1
        q:add("h" .. h, 10)
        local item = q:get(0)
        out[#out + 1] = item:match("^h%d+$") and "H" or item
        q:done(item)
      end
      return table.concat(out, " ")
    end

    it("hands out one lower-priority item in every N = 3 while higher ones keep coming", function()
      local q = workqueue{ anti_starvation = 3 }
      q:add("l1", -100)
      q:add("l2")
      q:add("l3", -100)
      -- the oldest lower item each time, whatever its priority: l1 (-100) before l2 (0)
      assert.equals("H H l1 H H l2 H H l3 H H H H", saturate(q, 13))
    end)

    it("default N is 10: 9 higher-priority items, then the oldest lower one", function()
      local q = workqueue()
      q:add("l1", -100)
      q:add("l2", -100)
      local want = ("H "):rep(9) .. "l1 " .. ("H "):rep(9) .. "l2 H H"
      assert.equals(want, saturate(q, 22))
    end)

    it("counts only items handed out while a lower one waited", function()
      local q = workqueue{ anti_starvation = 3 }
      q:add("a", 10)
      q:add("b", 10)
      assert.equals("a", q:get(0)) -- nothing lower waits: the count stays 0
      q:done("a")
      q:add("low", -1)
      q:add("c", 10)
      assert.same({ "b", "c", "low" }, drain(q))
    end)

    it("anti_starvation = false is strict: a low item waits while high ones come", function()
      local q = workqueue{ anti_starvation = false }
      q:add("low", -100)
      assert.equals(("H "):rep(49) .. "H", saturate(q, 50))
      assert.same({ "low" }, drain(q))
    end)

    it("with N = 2 a lower item alternates with the higher ones", function()
      local q = workqueue{ anti_starvation = 2 }
      for i = 1, 3 do q:add("l" .. i, -5) end
      assert.equals("H l1 H l2 H l3 H H", saturate(q, 8))
    end)
  end)

  describe("delayed items", function()
    it("add_after carries the priority into the queue when due", function()
      local c = fake_clock(100)
      local q = workqueue{ clock = c.now, wait = c.wait }
      q:add_after("late", 1, 5)
      q:add("b")
      q:add("c")
      c.step(1)
      assert.same({ "late", "b", "c" }, drain(q))
    end)

    it("a waiting item keeps the earlier time and the higher priority of two add_after", function()
      local c = fake_clock(0)
      local q = workqueue{ clock = c.now, wait = c.wait, anti_starvation = false }
      q:add_after("x", 5, 1)
      q:add_after("x", 2, -3) -- earlier, lower: due at 2, still at 1
      q:add_after("y", 2)
      q:add_after("y", 9, 7)  -- later, higher: due at 2, at 7
      assert.equals(2, q:status().waiting)
      q:add("z")
      c.step(2)
      assert.same({ "y", "x", "z" }, drain(q))
    end)

    it("a queued item's priority goes up only when its delayed add is due", function()
      local c = fake_clock(0)
      local q = workqueue{ clock = c.now, wait = c.wait }
      q:add("a", -100)
      q:add("b", -100)
      q:add_after("b", 1, 10)
      assert.same({ [-100] = 2 }, q:status().depth_by_priority)
      c.step(1)
      assert.same({ [10] = 1, [-100] = 1 }, q:status().depth_by_priority)
      assert.same({ "b", "a" }, drain(q))
    end)

    it("add_rate_limited carries the priority into the queue when the backoff is over", function()
      local c = fake_clock(0)
      local q = workqueue{ clock = c.now, wait = c.wait }
      q:add_rate_limited("retry", 3) -- the default limiter: 5 ms
      q:add("plain")
      q:add("other")
      assert.equals("plain", q:get(0))
      c.step(0.005)
      assert.same({ "retry", "other" }, drain(q))
      assert.equals(1, q:num_requeues("retry"))
    end)
  end)

  describe("the dirty / processing rule with priorities", function()
    it("an item re-added while processed is queued at done with the highest priority", function()
      local q = workqueue()
      q:add("a")
      assert.equals("a", q:get(0))
      q:add("a", -100)
      q:add("a", 5)
      q:add("a", 1)
      assert.equals(0, q:len())
      assert.same({ nil, "timeout" }, { q:get(0) }, "never handed to a second worker")
      assert.same({ [5] = 1 }, q:status().depth_by_priority)
      q:add("b", 2)
      q:done("a")
      assert.same({ "a", "b" }, drain(q))
    end)

    it("re-added at a low priority while processed, it is queued behind higher ones", function()
      local q = workqueue()
      q:add("a")
      q:add("b")
      assert.equals("a", q:get(0))
      q:add("a", -100)
      q:add("c")
      q:done("a")
      assert.same({ [0] = 2, [-100] = 1 }, q:status().depth_by_priority)
      assert.same({ "b", "c", "a" }, drain(q))
    end)

    it("depth per priority sums to depth; in-flight items that are not dirty do not count",
      function()
      local q = workqueue()
      q:add("a", 3)
      q:add("b", 3)
      q:add("c", -1)
      assert.equals("a", q:get(0))
      assert.equals("b", q:get(0))
      q:add("b", -2)
      local st = q:status()
      assert.same({ [-1] = 1, [-2] = 1 }, st.depth_by_priority)
      assert.equals(2, st.depth)
      assert.equals(1, st.length)
      assert.equals(2, st.in_flight)
    end)
  end)
end)

describe("workqueue next_due", function()
  it("is math.huge when nothing is queued or waiting, 0 with an item ready", function()
    local c = fake_clock(10)
    local q = workqueue{ clock = c.now, wait = c.wait }
    assert.equals(math.huge, q:next_due())
    q:add("a")
    assert.equals(0, q:next_due())
    assert.equals("a", q:get(0))
    assert.equals(math.huge, q:next_due(), "an item in flight is not due")
    q:add("a")
    assert.equals(math.huge, q:next_due(), "nor one that comes back at its done")
    q:done("a")
    assert.equals(0, q:next_due())
  end)

  it("is the time until the earliest delayed item; that item is handed out at that time", function()
    local c = fake_clock(10)
    local q = workqueue{ clock = c.now, wait = c.wait }
    q:add_after("a", 2)
    q:add_after("b", 1.5)
    assert.equals(1.5, q:next_due())
    c.step(0.5)
    assert.equals(1, q:next_due())
    q:add("now")
    assert.equals(0, q:next_due())
    q:done(q:get(0))
    assert.equals(1, q:next_due())
    c.step(1)
    assert.equals(0, q:next_due())
    assert.equals("b", q:get(0))
    assert.equals(0.5, q:next_due())
    c.step(0.25)
    assert.same({ nil, "timeout" }, { q:get(0) })
    c.step(0.25)
    assert.equals("a", q:get(0), "due at t: handed out by a get at t")
    assert.equals(math.huge, q:next_due())
  end)

  it("the default rate limiter's backoffs: 5 ms, then 10 ms", function()
    local c = fake_clock(0)
    local q = workqueue{ clock = c.now, wait = c.wait }
    q:add_rate_limited("x")
    assert.equals(0.005, q:next_due())
    c.step(q:next_due())
    assert.equals("x", q:get(0))
    q:add_rate_limited("x")
    q:done("x")
    local d = q:next_due()
    assert.is_true(math.abs(d - 0.01) < 1e-12, d)
    c.step(d)
    assert.equals("x", q:get(0))
  end)

  it("rounds up: sleeping exactly next_due() always finds the item due", function()
    -- added at 0.1 for 0.601 s; asked at 0.2: 0.701 - 0.2 rounds so that 0.2 + it < 0.701
    local t0, s, t1 = 0.1, 0.601, 0.2
    local at = t0 + s
    assert.is_true(t1 + (at - t1) < at, "the example must round down")
    local c = fake_clock(t0)
    local q = workqueue{ clock = c.now, wait = c.wait }
    q:add_after("a", s)
    c.t = t1
    local d = q:next_due()
    assert.is_true(d >= at - t1 and d < at - t1 + 1e-12)
    c.step(d)
    assert.equals("a", q:get(0))
  end)

  it("get's own wait is rounded up the same way: one wait, not a second tiny one", function()
    local t0, s, t1 = 0.001, 0.021, 0.006
    local at = t0 + s
    assert.is_true(t1 + (at - t1) < at, "the example must round down")
    local c = fake_clock(t0)
    local waits = {}
    local q = workqueue{ clock = c.now, wait = function(fds, seconds)
      waits[#waits + 1] = seconds
      return c.wait(fds, seconds)
    end }
    q:add_after("a", s)
    c.t = t1
    local d = q:next_due()
    assert.equals("a", q:get(1))
    assert.same({ d }, waits)
  end)

  it("after shut_down: delayed items are dropped, ready ones still count", function()
    local c = fake_clock(0)
    local q = workqueue{ clock = c.now, wait = c.wait }
    q:add_after("later", 3)
    q:add("now")
    q:shut_down()
    assert.equals(0, q:next_due())
    assert.equals("now", q:get(0))
    assert.equals(math.huge, q:next_due())
  end)
end)

describe("workqueue priorities against a model", function()
  -- The rules, with a list in order of becoming ready (O(n), obviously right).
  local function model(every)
    local m = { list = {}, dirty = {}, processing = {}, streak = 0 }
    local function ready(item, p) m.list[#m.list + 1] = { item = item, prio = p } end
    function m.add(item, p)
      local cur = m.dirty[item]
      if cur then
        if p > cur then
          m.dirty[item] = p
          if not m.processing[item] then
            for i, e in ipairs(m.list) do
              if e.item == item then table.remove(m.list, i) break end
            end
            ready(item, p)
          end
        end
        return
      end
      m.dirty[item] = p
      if not m.processing[item] then ready(item, p) end
    end
    function m.get()
      if #m.list == 0 then return nil end
      local top = -math.huge
      for _, e in ipairs(m.list) do if e.prio > top then top = e.prio end end
      local lower = false
      for _, e in ipairs(m.list) do if e.prio < top then lower = true end end
      local want -- the first entry of the top priority, or the first lower one
      if lower and every and m.streak >= every - 1 then
        m.streak = 0
        want = function(e) return e.prio < top end
      else
        m.streak = lower and m.streak + 1 or 0
        want = function(e) return e.prio == top end
      end
      for i, e in ipairs(m.list) do
        if want(e) then
          table.remove(m.list, i)
          m.processing[e.item] = true
          m.dirty[e.item] = nil
          return e.item
        end
      end
    end
    function m.done(item)
      if not m.processing[item] then return end
      m.processing[item] = nil
      if m.dirty[item] then ready(item, m.dirty[item]) end
    end
    function m.depth()
      local by = {}
      for _, p in pairs(m.dirty) do by[p] = (by[p] or 0) + 1 end
      return by
    end
    return m
  end

  local cases = {
    { "two priorities, N = 3", 3, { -100, 0, 0 } },
    { "many priorities (past 16 levels), default N", nil, nil },
    { "strict priority", false, { -100, -1, 0, 0, 7 } },
  }
  for _, case in ipairs(cases) do
    local name, every, prios = case[1], case[2], case[3]
    it("matches it over 20000 random operations: " .. name, function()
      local q = workqueue{ anti_starvation = every }
      local m = model(every == nil and 10 or every)
      math.randomseed(7)
      local held = {}
      for step = 1, 20000 do
        local r = math.random()
        local grow = (step % 4000) < 2000
        if r < (grow and 0.6 or 0.3) then
          local item = "k" .. math.random(1, 300)
          local p = prios and prios[math.random(#prios)] or math.random(-20, 20)
          if p == 0 and math.random() < 0.5 then q:add(item) else q:add(item, p) end
          m.add(item, p)
        elseif r < 0.85 then
          local a, b = q:get(0), m.get()
          assert.equals(b, a, "step " .. step)
          if a then held[#held + 1] = a end
        elseif #held > 0 then
          local item = table.remove(held, math.random(1, #held))
          q:done(item)
          m.done(item)
        end
        assert.equals(#m.list, q:len())
        if step % 97 == 0 then assert.same(m.depth(), q:status().depth_by_priority) end
      end
    end)
  end

  it("keeps at most 16 levels when priorities come and go", function()
    local q = workqueue()
    for p = 1, 40 do
      q:add("k" .. p, p % 2 == 0 and p or -p)
      q:add("zero")
      assert.same({ p % 2 == 0 and "k" .. p or "zero", p % 2 == 0 and "zero" or "k" .. p },
        drain(q))
      assert.is_true(#q._ready.levels <= 16, #q._ready.levels .. " levels")
    end
  end)
end)

describe("workqueue priority arguments", function()
  local q = workqueue()

  it("raise at the caller's line for a priority that is not an integer", function()
    for _, bad in ipairs({ 1.5, "1", {}, true, math.huge, 0 / 0, 2 ^ 60 }) do
      raises(function() q:add("a", bad) end,
        "bad argument #2 to 'add' %(priority must be an integer, got ")
      raises(function() q:add_after("a", 1, bad) end,
        "bad argument #3 to 'add_after' %(priority must be an integer")
      raises(function() q:add_rate_limited("a", bad) end,
        "bad argument #2 to 'add_rate_limited' %(priority must be an integer")
    end
    assert.equals(0, q:num_requeues("a"), "a refused add_rate_limited counts no failure")
    assert.equals(0, q:len())
    q:add("a", 3.0) -- an integral float is an integer
    assert.same({ [3] = 1 }, q:status().depth_by_priority)
  end)

  it("workqueue{ anti_starvation = ... } takes an integer >= 2 or false", function()
    for _, bad in ipairs({ 1, 2.5, "3", true, 0 }) do
      raises(function() workqueue{ anti_starvation = bad } end,
        "bad argument #1 to 'workqueue' %(option 'anti_starvation' must be an integer >= 2")
    end
    assert.is_table(workqueue{ anti_starvation = false })
    assert.is_table(workqueue{ anti_starvation = 2 })
  end)
end)
