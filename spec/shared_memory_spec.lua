-- The shared cache's memory under pressure, from Lua: a segment that fills while a reader
-- holds every object recovers once the reader lets go, the writes that failed meanwhile
-- (updates and a delete) reach the readers, and status() shows the keys that wait; an object
-- bigger than the segment has its own error. The bounds under churn are pinned in C
-- (csrc/test/test_shm_bound.c) and measured by `make soak-shared`.
local core = require "kinformer.core"
local kinformer = require "kinformer"

local big = string.rep("x", 4000)

local function pod(name, rv, node)
  return {
    apiVersion = "v1", kind = "Pod",
    metadata = { namespace = "ns", name = name, resourceVersion = tostring(rv),
                 annotations = { big = big } },
    spec = { nodeName = node or "n1" },
  }
end

local function writer(seg)
  local store = kinformer.store{ indexers = {
    by_node = function(p) return { p.spec.nodeName } end } }
  local fifo = kinformer.delta_fifo{ known_objects = store, emit_replaced = true }
  local proc = core.processor(fifo, store)
  assert(proc:mirror(seg, 1))
  return {
    put = function(o) fifo:update(o); proc:dispatch(1000) end,
    delete = function(o) fifo:delete(o); proc:dispatch(1000) end,
    proc = proc, store = store,
  }
end

-- name -> resourceVersion of every object in a store (local or shared).
local function content(store)
  local out = {}
  for _, o in ipairs(store:list()) do out[o.metadata.name] = o.metadata.resourceVersion end
  return out
end

local function index_names(store, node)
  local out = {}
  for _, o in ipairs(store:by_index("by_node", node)) do out[#out + 1] = o.metadata.name end
  table.sort(out)
  return out
end

describe("shared memory", function()
  it("a segment that filled recovers: failed updates and deletes are written again", function()
    kinformer.set_logger(function() end, "error")
    finally(function() kinformer.set_logger(nil) end)
    local seg = core.shm(1024 * 1024)
    local w = writer(seg)
    local reader = seg:store(1)
    -- What a worker's handlers keep, applying each event: a reader that fell behind (its
    -- events were dropped to make room) is handed what changed, deletions included.
    local seen = {}
    local function poll()
      reader:poll(100000, function(kind, obj)
        seen[obj.metadata.name] = kind ~= 3 and obj.metadata.resourceVersion or nil
      end)
    end
    for i = 1, 120 do w.put(pod("p" .. i, 1)) end
    poll()
    assert.equal(0, w.proc:status().shared.failures)
    -- The reader holds every object: nothing an update replaces can be freed.
    local held = reader:list()
    assert.equal(120, #held)
    for i = 1, 120 do w.put(pod("p" .. i, 2, i % 2 == 0 and "n2" or "n1")) end
    w.delete(pod("p1", 2))
    local st = w.proc:status().shared
    assert.is_true(st.failures > 0, "the segment never filled")
    assert.is_true(st.dirty > 0)
    assert.matches("the segment is full", st.last_error, 1, true)
    assert.are_not.same(content(w.store), content(reader))
    -- The reader lets go; the next dispatches (nothing new to pop) write the dirty keys again.
    held = nil
    collectgarbage()
    collectgarbage()
    local function settle()
      for _ = 1, 10 do
        poll()
        collectgarbage()
        w.proc:dispatch(10)
      end
      poll()
    end
    settle()
    st = w.proc:status().shared
    assert.equal(0, st.dirty)
    assert.is_true(st.retried > 0)
    assert.is_nil(reader:get("ns/p1"))
    assert.equal(119, reader:len())
    assert.same(content(w.store), content(reader))
    assert.same(content(w.store), seen)
    assert.same(index_names(w.store, "n1"), index_names(reader, "n1"))
    assert.same(index_names(w.store, "n2"), index_names(reader, "n2"))
    -- And it keeps converging: more rounds of updates (the reader's tables hold the previous
    -- version of every object, so a round may fill the segment again until the reader polls).
    for r = 3, 6 do
      for i = 2, 120 do w.put(pod("p" .. i, r)) end
      settle()
    end
    st = w.proc:status().shared
    assert.equal(0, st.dirty)
    assert.same(content(w.store), content(reader))
    assert.same(content(w.store), seen)
  end)

  it("an object bigger than the segment: its own error, not a full segment", function()
    kinformer.set_logger(function() end, "error")
    finally(function() kinformer.set_logger(nil) end)
    local seg = core.shm(256 * 1024)
    local w = writer(seg)
    local huge = pod("huge", 1)
    huge.metadata.annotations.big = string.rep("y", 300 * 1024)
    w.put(huge)
    local st = w.proc:status().shared
    assert.equal(1, st.failures)
    assert.matches("^shared store: ns/huge: object of %d+ bytes cannot fit a segment of " ..
      seg:stats().size .. " bytes$", st.last_error)
    assert.equal(0, st.dirty)
    w.put(pod("small", 1))
    assert.equal(1, seg:store(1):len())
  end)
end)
