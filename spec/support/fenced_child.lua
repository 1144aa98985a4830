-- A manager replica for spec/manager_fencing_spec.lua, run as a child process:
--   lua5.4 fenced_child.lua ROOT SERVER_URL IDENTITY TOKEN NAMESPACE
-- Leader election on the Lease "fence-spec" of NAMESPACE (lease 3 s, renew deadline 2 s,
-- retry 0.5 s), a metrics server on a free port, one controller over the ConfigMaps of
-- NAMESPACE whose reconcile PATCHes an annotation of its primary (the replica's identity and a
-- counter), records an Event, and requeues after 0.2 s. Prints "metrics ADDRESS", "leading",
-- "stopped leading", and "reason REASON" when run returns.
local root, url, id, token, ns = arg[1], arg[2], arg[3], arg[4], arg[5]
package.path = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. package.path
package.cpath = root .. "/build/lua5.4/?.so;" .. package.cpath
local kinformer = require "kinformer"
io.stdout:setvbuf("line")
kinformer.set_logger(function() end)
local client = assert(kinformer.client{ server = url, token = token })
local mgr = kinformer.manager{ client = client, metrics_address = "127.0.0.1:0",
  leader_election = { lease_name = "fence-spec", namespace = ns, identity = id,
    lease_duration = 3, renew_deadline = 2, retry_period = 0.5,
    on_started_leading = function() print("leading") end,
    on_stopped_leading = function() print("stopped leading") end } }
local n = 0
mgr:controller{ name = "c", resource = "configmaps", namespace = ns,
  reconcile = function(req, ctx)
    n = n + 1
    local ok, err = ctx.client:patch("configmaps", req.key,
      { metadata = { annotations = { ["fence.example.com/by"] = id .. "-" .. n } } })
    if not ok then return nil, err end
    ctx:event(ok, "Normal", "Touched", "by " .. id)
    return 0.2
  end }
print("metrics " .. mgr:metrics_address())
print("reason " .. tostring(mgr:run{ timeout = 60 }))
