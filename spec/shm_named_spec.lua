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
  it("a program this process executes inherits the segment: the same memory, in a memfd", function()
    local seg, _, id = core.shm_named("spec.exec", 1048576)
    assert.equals(1, core.shm_flags(seg, 1) % 2)
    -- the segment is in a memfd, a file no path leads to, held open across exec
    local p = io.popen("ls -l /proc/self/fd/ 2>/dev/null")
    local links = p:read("a")
    p:close()
    assert.matches("/memfd:kinformer:spec%.exec %(deleted%)", links)
    local root = rawget(_G, "KINFORMER_ROOT") or "."
    local child = ([[
      package.cpath = %q .. "/build/lua5.4/?.so;" .. package.cpath
      local core = require "kinformer.core"
      local seg, reused, id, inherited = core.shm_named("spec.exec", SIZE)
      core.shm_flags(seg, 2)
      io.write(tostring(reused), " ", id, " ", tostring(inherited), " ", core.shm_flags(seg))
    ]]):format(root)
    local function run(size)
      local code = child:gsub("SIZE", tostring(size)):gsub("\n", " ")
      local f = io.popen(("lua5.4 -e %q"):format(code))
      local out = f:read("a")
      f:close()
      return out
    end
    -- the same size: attached, with its identity, what this process set and what the child set
    assert.equals("true " .. id .. " true 3", run(1048576))
    assert.equals(3, core.shm_flags(seg))
    -- another size: a new segment (the inherited one is closed in the child)
    local out = run(2097152)
    assert.matches("^false %x+ false 2$", out)
    assert.is_nil(out:find(id, 1, true))
    assert.equals(3, core.shm_flags(seg))
  end)
end)

describe("core.shm_named_private", function()
  local function children_see(name)
    local p = io.popen("ls -l /proc/self/fd/ 2>/dev/null")
    local out = p:read("a")
    p:close()
    return out:find("/memfd:kinformer:" .. name, 1, true) ~= nil
  end

  it("keeps a program this process runs from inheriting the segments", function()
    core.shm_named("spec.private", 1048576)
    assert.is_true(children_see("spec.private"))
    core.shm_named_private()
    assert.is_false(children_see("spec.private"))
    assert.is_false(children_see("spec.exec"))
    -- stdin, stdout and stderr stay as they were
    local p = io.popen("echo still")
    assert.equals("still\n", p:read("a"))
    p:close()
  end)
end)
