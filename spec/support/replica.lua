-- A child process of a spec (a manager replica): its output in a file, waits for a line,
-- signals, and a kill at clean-up.
--
--   local replica = require "support.replica"
--   local c = replica.start("spec/support/manager_child.lua", { url, "a", ns, "busy" })
--   finally(function() c:close() end)
--   assert.truthy(c:wait_for("leading"), c:output())
local proc = require "support.proc"
local socket = require "socket"

local _M = {}

local Child = {}
Child.__index = Child

--- replica.start(script, args) -> child: lua5.4 KINFORMER_ROOT/script KINFORMER_ROOT args...
function _M.start(script, args)
  local c = setmetatable({ out = os.tmpname() }, Child)
  local quoted = { proc.quote(KINFORMER_ROOT .. "/" .. script), proc.quote(KINFORMER_ROOT) }
  for _, a in ipairs(args) do quoted[#quoted + 1] = proc.quote(a) end
  c.p = assert(io.popen(("echo $$; exec lua5.4 %s >%s 2>&1"):format(table.concat(quoted, " "),
    proc.quote(c.out))))
  c.pid = tonumber(c.p:read("l"))
  return c
end

--- child:output() -> everything it printed so far
function Child:output()
  local f = io.open(self.out)
  local s = f and f:read("a") or ""
  if f then f:close() end
  return s
end

--- child:wait_for(pattern [, seconds = 10]) -> whether its output matched within seconds
function Child:wait_for(pattern, seconds)
  local deadline = socket.gettime() + (seconds or 10)
  while socket.gettime() < deadline do
    if self:output():find(pattern) then return true end
    socket.sleep(0.05)
  end
  return false
end

--- child:signal(sig) -> exit code, after sending sig and waiting for the exit
function Child:signal(sig)
  os.execute("kill -" .. sig .. " " .. self.pid)
  local _, _, code = self.p:close()
  self.closed = true
  return code
end

--- child:close(): kills it if it runs, removes its output
function Child:close()
  if not self.closed then
    if proc.alive(self.pid) then os.execute("kill -KILL " .. self.pid) end
    self.p:close()
    self.closed = true
  end
  os.remove(self.out)
end

return _M
