-- Loaded by busted before every spec (make test-spec): finds the freshly built C module and the
-- pure-Lua modules in this checkout, whichever directory busted was started from.
-- KINFORMER_BUILD names another directory of build/ to load kinformer.core from (make
-- check-spec-asan sets it to the sanitized build, asan-lua5.4); child processes that specs start
-- pick their own build.
local root = debug.getinfo(1, "S").source:match("^@(.*)/spec/helper%.lua$") or "."
local version = _VERSION == "Lua 5.4" and "lua5.4" or "luajit"
local build = os.getenv("KINFORMER_BUILD")
if build == nil or build == "" then build = version end
package.path = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. root .. "/spec/?.lua;" .. package.path
package.cpath = root .. "/build/" .. build .. "/?.so;" .. package.cpath
_G.KINFORMER_ROOT = root
