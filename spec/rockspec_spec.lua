-- The rockspec builds offline from the checkout, the installed rock works on its own, and the
-- rockspec lists the same C sources and Lua modules as the checkout (it cannot read
-- mk/sources.mk, so these cases keep the two from drifting apart).
local ROCKSPEC = "rockspec/kinformer-scm-1.rockspec"

local function run(cmd)
  local p = assert(io.popen(cmd .. " 2>&1"))
  local out = p:read("a")
  local ok = p:close()
  return ok, out
end

local function sorted(t)
  table.sort(t)
  return t
end

local function rockspec()
  local f = assert(io.open(KINFORMER_ROOT .. "/" .. ROCKSPEC))
  local text = f:read("a")
  f:close()
  local spec = {}
  assert(load(text, "@" .. ROCKSPEC, "t", spec))()
  return spec
end

-- A copy of what the rock is built from, so that luarocks' objects stay out of the checkout.
local function copy_of_checkout(dir)
  assert(os.execute(("mkdir -p '%s/tools' && cd '%s' && cp -r csrc lua rockspec bin '%s' && "
    .. "cp -r tools/fake-apiserver '%s/tools'"):format(dir, KINFORMER_ROOT, dir, dir)))
end

describe("rockspec/kinformer-scm-1.rockspec", function()
  it("installs with `luarocks make --deps-mode=none` into a temporary tree, required from there", function()
    local tmp = os.tmpname()
    os.remove(tmp)
    finally(function() os.execute("rm -rf '" .. tmp .. "'") end)
    local src, tree = tmp .. "/src", tmp .. "/tree"
    copy_of_checkout(src)
    local ok, out = run(("cd '%s' && luarocks --lua-version=5.4 make --tree '%s' --deps-mode=none %s")
      :format(src, tree, ROCKSPEC))
    assert.is_true(ok, "luarocks make failed:\n" .. out)

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

    -- The fake API server came with it: the installed kinformer.testing starts the rock's copy
    -- (no checkout in sight: KINFORMER_ROOT unset, run from /tmp), and bin has the command.
    local kit = ([[
      local testing = require "kinformer.testing"
      local env = testing.server{ objects = { { apiVersion = "v1", kind = "ConfigMap",
        metadata = { name = "x", namespace = "default" } } } }
      local cm = assert(env.client:get("configmaps", "default/x"))
      io.write(testing.server_path(), " ", cm.metadata.name)
      env:stop()
    ]]):gsub("\n", " ")
    p = io.popen((cmd:gsub("lua5%.4 %-e '.-' 2>&1$", function()
      return "env -u KINFORMER_ROOT -u KINFORMER_FAKE_APISERVER lua5.4 -e '" .. kit .. "' 2>&1"
    end)))
    result = p:read("a")
    p:close()
    assert.matches("^" .. tree:gsub("%p", "%%%0")
      .. "/lib/luarocks/rocks%-5%.4/kinformer/scm%-1/tools/fake%-apiserver/server%.py x$", result)
    local help = select(2, run(("'%s/bin/kinformer-fake-apiserver' --help"):format(tree)))
    assert.matches("--exit-with-parent", help, 1, true)
  end)

  it("stops with LuaRocks' message naming CURL when libcurl is not where it looks", function()
    local tmp = os.tmpname()
    os.remove(tmp)
    finally(function() os.execute("rm -rf '" .. tmp .. "'") end)
    copy_of_checkout(tmp .. "/src")
    assert(os.execute(("mkdir -p '%s/empty'"):format(tmp)))
    local ok, out = run(("cd '%s/src' && luarocks --lua-version=5.4 make --tree '%s/tree' "
      .. "--deps-mode=none %s CURL_DIR='%s/empty'"):format(tmp, tmp, ROCKSPEC, tmp))
    assert.is_falsy(ok)
    assert.matches("Could not find library file for CURL", out, 1, true)
  end)

  it("builds kinformer.core from exactly the C sources of mk/sources.mk", function()
    local ok, out = run(("cd '%s' && env -u MAKEFLAGS -u MAKELEVEL -u MFLAGS make -s -f mk/sources.mk "
      .. "--eval 'print: ; @echo $(CORE_SRC) $(BIND_SRC)' print"):format(KINFORMER_ROOT))
    assert.is_true(ok, out)
    local listed = {}
    for file in out:gmatch("%S+") do listed[#listed + 1] = file end
    assert.is_true(#listed > 10, out)
    local core = rockspec().build.modules["kinformer.core"]
    assert.same(sorted(listed), sorted(core.sources))
  end)

  it("installs every lua/kinformer module, and only those, each from its own file", function()
    local ok, out = run(("cd '%s' && find lua/kinformer -name '*.lua'"):format(KINFORMER_ROOT))
    assert.is_true(ok, out)
    local files = {}
    for file in out:gmatch("[^\n]+") do
      local name = file:gsub("^lua/", ""):gsub("%.lua$", ""):gsub("/init$", ""):gsub("/", ".")
      files[name] = file
    end
    local modules = {}
    for name, file in pairs(rockspec().build.modules) do
      if name ~= "kinformer.core" then modules[name] = file end
    end
    assert.same(files, modules)
  end)
end)
