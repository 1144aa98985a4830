-- core.shm_named(name, size): one mapping per process and name, handed again to every later
-- call with that name and size, whatever Lua state asks (nginx's master asks from a new state on
-- every reload); another size maps a new segment with a new identity.
local core = require "kinformer.core"
local kinformer = require "kinformer"

describe("core.shm_named", function()
  it("hands the same segment for the same name and size, a new one for another size", function()
    local a, reused_a, id_a = core.shm_named("spec.named", 1048576)
    assert.is_false(reused_a)
    assert.is_string(id_a)
    local b, reused_b, id_b = core.shm_named("spec.named", 1048576)
    assert.is_true(reused_b)
    assert.equals(id_a, id_b)
    -- the same memory: a store created through one is there through the other
    local store = kinformer.store()
    local proc = core.processor(kinformer.delta_fifo{ known_objects = store }, store)
    assert(proc:mirror(a, 1))
    assert.is_true(b:store(1):status().created)
    local c, reused_c, id_c = core.shm_named("spec.named", 2097152)
    assert.is_false(reused_c)
    assert.is_not.equals(id_a, id_c)
    assert.is_false(c:store(1):status().created)
    assert.equals(2097152, c:stats().size)
    local _, reused_d, id_d = core.shm_named("spec.other", 65536)
    assert.is_false(reused_d)
    assert.is_not.equals(id_a, id_d)
  end)

  it("raises on a bad name or size", function()
    assert.has_error(function() core.shm_named("", 65536) end)
    assert.has_error(function() core.shm_named(("x"):rep(64), 65536) end)
    assert.has_error(function() core.shm_named("spec.small", 4096) end)
    assert.has_error(function() core.shm_named(nil, 65536) end)
  end)
end)
