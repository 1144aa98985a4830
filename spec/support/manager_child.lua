-- A manager replica for spec/manager_spec.lua, run as a child process:
--   lua5.4 manager_child.lua ROOT SERVER_URL IDENTITY NAMESPACE MODE
-- One controller over the ConfigMaps of NAMESPACE, leader election on the Lease "mgr-spec".
-- Each reconcile GETs ".../marker.IDENTITY.begin" and ".../marker.IDENTITY.end" (404s that the
-- server's request log records with their times). MODE "busy": requeue every 50 ms; "slow":
-- one reconcile of 1 s, printing "begin KEY" and "end KEY". Prints "leading", and
-- "reason REASON" when run returns.
local root, url, id, ns, mode = arg[1], arg[2], arg[3], arg[4], arg[5]
package.path = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. package.path
package.cpath = root .. "/build/lua5.4/?.so;" .. package.cpath
local kinformer = require "kinformer"
local core = require "kinformer.core"
io.stdout:setvbuf("line")
kinformer.set_logger(function() end)
local client = assert(kinformer.client{ server = url })
local mgr = kinformer.manager{ client = client, grace_period = 5, leader_election = {
  lease_name = "mgr-spec", namespace = ns, identity = id, lease_duration = 2,
  renew_deadline = 1.5, retry_period = 0.25,
  on_started_leading = function() print("leading") end } }
local function marker(what) client:get("configmaps", ns .. "/marker." .. id .. "." .. what) end
mgr:controller{ name = "c", resource = "configmaps", namespace = ns,
  reconcile = function(req)
    marker("begin")
    if mode == "slow" then
      print("begin " .. req.key)
      core.sleep(1)
      print("end " .. req.key)
      marker("end")
      return
    end
    core.sleep(0.01)
    marker("end")
    return 0.05
  end }
print("reason " .. tostring(mgr:run{ timeout = 30 }))
