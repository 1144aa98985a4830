-- The shared cache when its writer changes, in one process: the writer's role belongs to the
-- process and goes with its last mirror, and a new writer recovers the segment and sends every
-- reader back to the content (a RESYNCED event: each hands what differs from what its handlers
-- were told), then its relist and retain bring the changes.
-- A writer killed mid-write is covered by csrc/test/test_shm_crash.c.
local core = require "kinformer.core"
local kinformer = require "kinformer"

local function pod(name, node, rv)
  return {
    apiVersion = "v1", kind = "Pod",
    metadata = { namespace = "ns", name = name, resourceVersion = tostring(rv or 1) },
    spec = { nodeName = node },
  }
end

local function writer(seg, slot)
  local store = kinformer.store{ indexers = {
    by_node = function(p) return { p.spec.nodeName } end } }
  local fifo = kinformer.delta_fifo{ known_objects = store, emit_replaced = true }
  local proc = core.processor(fifo, store)
  assert(proc:mirror(seg, slot))
  return {
    put = function(...) for _, o in ipairs{ ... } do fifo:update(o) end; proc:dispatch(1000) end,
    proc = proc,
  }
end

local function poll_all(reader)
  local got = {}
  reader:poll(100000, function(kind, obj, _, initial)
    got[#got + 1] = ({ "add", "update", "delete" })[kind] .. ":" .. obj.metadata.name .. "@" ..
      obj.metadata.resourceVersion .. (initial and "!" or "")
  end)
  table.sort(got)
  return got
end

describe("shared store, a new writer", function()
  it("keeps the role while another informer of the process still mirrors", function()
    local seg = core.shm(4 * 1024 * 1024)
    local a, b = writer(seg, 1), writer(seg, 2)
    assert.is_true(seg:stats().writer > 0)
    a.proc:close()
    assert.is_true(seg:stats().writer > 0)
    b.put(pod("x", "n1"))
    b.proc:close()
    assert.equal(0, seg:stats().writer)
  end)

  it("sends every reader back to the content, then hands the relist's changes", function()
    local seg = core.shm(4 * 1024 * 1024)
    local w = writer(seg, 1)
    local reader = seg:store(1)
    w.put(pod("a", "n1"), pod("b", "n1"), pod("c", "n2"))
    assert.same({ "add:a@1!", "add:b@1!", "add:c@1!" }, poll_all(reader))
    w.proc:close()
    -- The successor lists a changed, b unchanged, c gone, d new. Its takeover sends the reader
    -- back to the content, which is what the handlers were told: nothing to hand.
    local w2 = writer(seg, 1)
    assert.same({}, poll_all(reader))
    assert.equal(2, reader:status().resyncs)
    w2.put(pod("a", "n2", 2), pod("b", "n1"), pod("d", "n2", 3))
    assert(w2.proc:mirror_retain())
    assert.same({ "add:d@3", "delete:c@1", "update:a@2" }, poll_all(reader))
    local ids = {}
    for _, p in ipairs(reader:by_index("by_node", "n2")) do ids[#ids + 1] = p.metadata.name end
    table.sort(ids)
    assert.same({ "a", "d" }, ids)
    assert.is_true(seg:stats().swept_blocks >= 0)
    w2.proc:close()
  end)
end)
