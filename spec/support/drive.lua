-- Driving a kinformer.manager from a spec, and fresh namespace names for specs that share one
-- fake API server.
--
--   local drive = require "support.drive"
--   local new_ns = drive.namespaces("mgr-")
--   assert.truthy(drive.steps(mgr, 5, function() return done end))
local core = require "kinformer.core"

local _M = {}

--- drive.steps(mgr, seconds [, cond]) -> whether cond() became true within seconds (without
-- cond: true after seconds): mgr:step() in a loop, waiting on mgr:fds() between steps.
function _M.steps(mgr, seconds, cond)
  local deadline = core.now() + seconds
  while true do
    if cond and cond() then return true end
    local w = assert(mgr:step())
    if core.now() >= deadline then return cond == nil end
    core.wait(mgr:fds(), math.min(w, 0.02))
  end
end

--- drive.namespaces(prefix) -> fn() returning prefix .. 1, prefix .. 2, ...: a fresh namespace
-- per test (tests share the server, never their objects)
function _M.namespaces(prefix)
  local n = 0
  return function()
    n = n + 1
    return prefix .. n
  end
end

return _M
