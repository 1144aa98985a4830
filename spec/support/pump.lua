-- Drives an informer from a spec: dispatches it until a condition holds or time runs out.
--
--   local pump = require "support.pump"
--   assert.truthy(pump(inf, 5, function() return #seen == 3 end))
local core = require "kinformer.core"
local socket = require "socket"

--- pump(inf, seconds, cond) -> whether cond() held: dispatches inf until cond() holds or
-- seconds pass, waiting on the informer's fd in between (and dispatches once more at the end).
return function(inf, seconds, cond)
  local deadline = socket.gettime() + seconds
  repeat
    inf:dispatch(1000)
    if cond() then return true end
    core.wait({ inf:fd() }, 0.02)
  until socket.gettime() > deadline
  inf:dispatch(1000)
  return cond()
end
