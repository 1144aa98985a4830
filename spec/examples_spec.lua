-- Every example runs and prints what the docs say it prints.
local function run(script)
  local root = KINFORMER_ROOT
  local cmd = ("cd '%s' && LUA_PATH='lua/?.lua;lua/?/init.lua;;' LUA_CPATH='build/lua5.4/?.so;;' "
    .. "lua5.4 %s 2>&1; echo \"exit=$?\""):format(root, script)
  local p = io.popen(cmd)
  local out = p:read("a")
  p:close()
  return out
end

describe("examples", function()
  it("store-basics.lua prints the README's output", function()
    local out = run("examples/store-basics.lua")
    assert.matches("exit=0", out, 1, true)
    local lines = {}
    for line in out:gmatch("[^\n]+") do lines[#lines + 1] = line end
    assert.equals("web/a web/b", lines[1])
    assert.equals("1", lines[2])
    assert.equals("n1", lines[3])
    assert.equals("Replaced\tweb/a\tfalse", lines[4])
    -- the two deletions come in the store's (unspecified) order
    local rest = { lines[5], lines[6] }
    table.sort(rest)
    assert.same({ "Deleted\tdb/c\ttrue", "Deleted\tweb/b\ttrue" }, rest)
  end)
end)
