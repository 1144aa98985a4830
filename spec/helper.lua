-- Loaded by busted before every spec (make test-spec): finds the freshly built C module and the
-- pure-Lua modules in this checkout, whichever directory busted was started from.
local root = debug.getinfo(1, "S").source:match("^@(.*)/spec/helper%.lua$") or "."
local version = _VERSION == "Lua 5.4" and "lua5.4" or "luajit"
package.path = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. root .. "/spec/?.lua;" .. package.path
package.cpath = root .. "/build/" .. version .. "/?.so;" .. package.cpath
_G.KINFORMER_ROOT = root
