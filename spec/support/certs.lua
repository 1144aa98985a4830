-- Test certificates made with the `openssl` command (EC P-256, valid two days), in a fresh
-- temporary folder:
--
--   local certs = require "support.certs"
--   local c = certs.make()          -- c.dir, c.ca, c.ca_key, c.server, c.server_key,
--                                   -- c.named, c.named_key (server cert for DNS:kube.test only),
--                                   -- c.client, c.client_key (CN=tester, signed by c.ca),
--                                   -- c.other_ca (a CA nobody uses), c.read(name)
--   finally(function() c:remove() end)
local _M = {}

local function sh(cmd)
  local p = io.popen("(" .. cmd .. ") 2>&1")
  local out = p:read("a")
  local ok = p:close()
  return ok, out
end

local function quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

_M.quote = quote
_M.sh = sh

local Certs = {}
Certs.__index = Certs

function Certs:path(name) return self.dir .. "/" .. name end

function Certs:read(name)
  local f = assert(io.open(self:path(name), "rb"))
  local s = f:read("a")
  f:close()
  return s
end

function Certs:remove()
  if self.dir then sh("rm -rf " .. quote(self.dir)) end
end

function _M.make()
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir -m 700 " .. quote(dir)))
  local function openssl(args)
    local ok, out = sh("cd " .. quote(dir) .. " && openssl " .. args)
    assert(ok, "openssl " .. args .. ":\n" .. out)
  end
  local ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
  local function ca(name, cn)
    openssl("req -x509 " .. ec .. " -keyout " .. name .. ".key -out " .. name .. ".pem -days 2 -subj /CN=" .. cn)
  end
  local function leaf(name, cn, signer, ext)
    openssl("req " .. ec .. " -keyout " .. name .. ".key -out " .. name .. ".csr -subj /CN=" .. cn)
    local extopt = ""
    if ext then
      local f = assert(io.open(dir .. "/" .. name .. ".ext", "w"))
      f:write(ext, "\n")
      f:close()
      extopt = " -extfile " .. name .. ".ext"
    end
    openssl("x509 -req -in " .. name .. ".csr -CA " .. signer .. ".pem -CAkey " .. signer
      .. ".key -CAcreateserial -out " .. name .. ".pem -days 2" .. extopt)
  end
  ca("ca", "kinformer-test-ca")
  ca("other-ca", "someone-else")
  leaf("server", "127.0.0.1", "ca", "subjectAltName=IP:127.0.0.1,DNS:localhost")
  leaf("named", "kube.test", "ca", "subjectAltName=DNS:kube.test")
  leaf("client", "tester", "ca", "extendedKeyUsage=clientAuth")
  local c = setmetatable({ dir = dir }, Certs)
  for _, n in ipairs({ "ca", "other-ca", "server", "named", "client" }) do
    local key = n:gsub("-", "_")
    c[key] = dir .. "/" .. n .. ".pem"
    c[key .. "_key"] = dir .. "/" .. n .. ".key"
  end
  return c
end

return _M
