-- The rockspec builds offline from the checkout and the installed rock works on its own.
describe("rockspec/kinformer-scm-1.rockspec", function()
  it("installs with `luarocks make` into a temporary tree and is required from there", function()
    local root = KINFORMER_ROOT
    local tree = os.tmpname()
    os.remove(tree)
    finally(function() os.execute("rm -rf '" .. tree .. "'") end)
    local log = tree .. ".log"
    local ok = os.execute(("cd '%s' && luarocks --lua-version=5.4 make --tree '%s' "
      .. "rockspec/kinformer-scm-1.rockspec > '%s' 2>&1"):format(root, tree, log))
    local f = io.open(log)
    local out = f and f:read("a") or ""
    if f then f:close() end
    os.remove(log)
    assert.is_true(ok == true or ok == 0, "luarocks make failed:\n" .. out)

    -- A fresh interpreter that sees only the tree (and the system paths for lua-cjson).
    local probe = ([[
      local k = require "kinformer"
      local core = package.searchpath("kinformer.core", package.cpath)
      local s = k.store()
      assert(s:add({ metadata = { namespace = "a", name = "b" } }))
      io.write(core, " ", #s, " ", k.key_of(s:list()[1]))
    ]]):gsub("\n", " ")
    local cmd = ("cd /tmp && LUA_PATH='%s/share/lua/5.4/?.lua;%s/share/lua/5.4/?/init.lua;;' "
      .. "LUA_CPATH='%s/lib/lua/5.4/?.so;;' lua5.4 -e '%s' 2>&1"):format(tree, tree, tree, probe)
    local p = io.popen(cmd)
    local result = p:read("a")
    p:close()
    assert.equals(tree .. "/lib/lua/5.4/kinformer/core.so 1 a/b", result)
  end)
end)
