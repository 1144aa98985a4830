-- The widget operator as its ServiceAccount, against a fake API server that enforces RBAC
-- (--rbac): with exactly the rules examples/deploy/rbac.yaml holds (bin/kinformer-rbac's
-- output) it converges; with one rule taken away it does not, and its log names the forbidden
-- verb and resource.
local cjson = require "cjson"
local lyaml = require "lyaml"
local fake = require "support.fake_apiserver"
local socket = require "socket"

local ROOT = KINFORMER_ROOT
local DEPLOY = ROOT .. "/examples/deploy"
local SA_USER = "system:serviceaccount:widget-system:widget-operator"

local function quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

local function read(path)
  local f = assert(io.open(path))
  local s = f:read("a")
  f:close()
  return s
end

local function docs(path)
  local out = {}
  for _, d in ipairs(lyaml.load(read(path), { all = true })) do
    if type(d) == "table" then out[#out + 1] = d end
  end
  return out
end

-- The objects of rbac.yaml, created as the admin; drop(rule) may remove a rule first.
local function install_rbac(srv, drop)
  for _, obj in ipairs(docs(DEPLOY .. "/rbac.yaml")) do
    if drop and obj.rules then
      local kept = {}
      for _, r in ipairs(obj.rules) do if not drop(r) then kept[#kept + 1] = r end end
      obj.rules = kept
    end
    local group = "/apis/rbac.authorization.k8s.io/v1"
    local ns = obj.metadata.namespace
    local plural = obj.kind:lower():gsub("y$", "ie") .. "s"
    local path = group .. (ns and ("/namespaces/" .. ns) or "") .. "/" .. plural
    local code, body = srv:request("POST", path, cjson.encode(obj),
      { Authorization = "Bearer admin" })
    assert.equals(201, code, cjson.encode(body))
  end
end

-- Runs the operator as the ServiceAccount for `seconds`; -> its output
local function run_operator(srv, seconds)
  local kubeconfig = fake.kubeconfig(srv, { namespace = "default", token = "sa-token" })
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir " .. quote(dir)))
  local out = os.tmpname()
  os.execute(("env -u KINFORMER_SERVER KUBECONFIG=%s timeout 20 lua5.4 %s --dir %s "
    .. "--seconds %d --lease-namespace widget-system >%s 2>&1"):format(quote(kubeconfig),
    quote(ROOT .. "/examples/widget-operator.lua"), quote(dir), seconds, quote(out)))
  local text = read(out)
  os.remove(out)
  os.remove(kubeconfig)
  os.execute("rm -rf " .. quote(dir))
  return text
end

local function start_server()
  local srv = fake.start{ quiet = true, args = { "--widget-crd", "--rbac", "--token", "admin",
                                                 "--user-token", SA_USER .. "=sa-token" } }
  local code = srv:request("POST", "/api/v1/namespaces", cjson.encode{ metadata = {
    name = "widget-system" } }, { Authorization = "Bearer admin" })
  assert.is_true(code == 201 or code == 409)
  code = srv:request("POST", "/apis/example.com/v1/namespaces/default/widgets",
    cjson.encode{ apiVersion = "example.com/v1", kind = "Widget", metadata = { name = "w1" },
                  spec = { message = "hello", replicas = 2 } }, { Authorization = "Bearer admin" })
  assert.equals(201, code)
  return srv
end

describe("the widget operator under RBAC", function()
  it("converges with exactly the generated rules", function()
    local srv = start_server()
    finally(function() srv:stop() end)
    install_rbac(srv)
    local out = run_operator(srv, 3)
    local code, cm = srv:request("GET", "/api/v1/namespaces/default/configmaps/w1-config", nil,
      { Authorization = "Bearer admin" })
    assert.equals(200, code, out)
    assert.equals("hello", cm.data.message)
    local _, w = srv:request("GET", "/apis/example.com/v1/namespaces/default/widgets/w1", nil,
      { Authorization = "Bearer admin" })
    assert.equals("True", w.status.conditions[1].status, out)
    local forbidden = 0
    for _, r in ipairs(srv:requests()) do
      if r.forbidden and r.user == SA_USER then forbidden = forbidden + 1 end
    end
    assert.equals(0, forbidden, out)
  end)

  it("without the ConfigMap create rule it does not converge, and says what is forbidden",
    function()
    local srv = start_server()
    finally(function() srv:stop() end)
    install_rbac(srv, function(r) -- the ConfigMaps rule loses "create"
      if r.resources[1] == "configmaps" then
        local verbs = {}
        for _, v in ipairs(r.verbs) do if v ~= "create" then verbs[#verbs + 1] = v end end
        r.verbs = verbs
      end
    end)
    local out = run_operator(srv, 3)
    local code = srv:request("GET", "/api/v1/namespaces/default/configmaps/w1-config", nil,
      { Authorization = "Bearer admin" })
    assert.equals(404, code)
    assert.truthy(out:find('User "' .. SA_USER .. '" cannot create resource "configmaps" in API '
      .. 'group "" in the namespace "default"', 1, true), out)
  end)
end)
