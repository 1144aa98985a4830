-- Process helpers the spec supports share: shell quoting, whether a pid still runs, and a
-- clean-up that runs when the Lua state closes (also on LuaJIT, whose tables have no __gc).
local _M = {}

--- quote(s) -> s as one single-quoted shell word
function _M.quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

--- alive(pid) -> true while the process exists and has not exited (an exited child stays a
-- zombie until its parent reaps it)
function _M.alive(pid)
  local f = io.open("/proc/" .. pid .. "/stat", "r")
  if not f then return false end
  local stat = f:read("a") or ""
  f:close()
  local state = stat:match("%)%s+(%a)")
  return state ~= nil and state ~= "Z" and state ~= "X"
end

--- at_exit(fn) -> a sentinel: keep it referenced (e.g. in a module table); fn runs when the Lua
-- state closes and collects it.
function _M.at_exit(fn)
  if rawget(_G, "newproxy") then -- LuaJIT / 5.1
    local p = newproxy(true)
    getmetatable(p).__gc = fn
    return p
  end
  return setmetatable({}, { __gc = fn })
end

--- proc.luajit_missing(root) -> nil when luajit and root's LuaJIT build are there, else why not
function _M.luajit_missing(root)
  local so = io.open(root .. "/build/luajit/kinformer/core.so")
  if so then so:close() end
  if not so or not os.execute("command -v luajit >/dev/null") then
    return "LuaJIT or build/luajit/kinformer/core.so not available"
  end
end

return _M
