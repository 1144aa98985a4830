-- An exec credential plugin for specs: `cat` of a file the spec rewrites, so the spec decides
-- which token the plugin hands out next. The credential has no expiry: a client keeps it until
-- a 401 makes it stale, then runs the plugin again.
--
--   local plugin = exec_plugin.new("token-1")
--   finally(function() plugin:remove() end)
--   local client = kinformer.client{ server = url, exec = plugin.exec }
--   plugin:issue("token-2") -- what the next run hands out
local _M = { _VERSION = "0.1" }

local Plugin = {}
Plugin.__index = Plugin

--- exec_plugin.new(token) -> plugin: plugin.exec is the client's exec option
function _M.new(token)
  local p = setmetatable({ path = os.tmpname() }, Plugin)
  p.exec = { command = "cat", args = { p.path }, api_version = "client.authentication.k8s.io/v1" }
  p:issue(token)
  return p
end

--- plugin:issue(token): the plugin's next run hands out this token
function Plugin:issue(token)
  local f = assert(io.open(self.path, "w"))
  f:write(('{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential",'
    .. '"status":{"token":"%s"}}'):format(token))
  f:close()
end

function Plugin:remove() os.remove(self.path) end

return _M
