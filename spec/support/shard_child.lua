-- A replica of a sharded manager for spec/manager_sharding_spec.lua, run as a child process:
--   lua5.4 shard_child.lua ROOT SERVER_URL IDENTITY TOKEN NAMESPACE
-- Sharding group "spec" in NAMESPACE (lease 3 s, renew deadline 2 s, retry 0.5 s, margin 1 s),
-- one controller over the ConfigMaps of NAMESPACE, 4 reconciles at once. A reconcile prints
-- "b NAME TIME" (wall clock), PATCHes its ConfigMap's annotation sharding.example.com/by =
-- IDENTITY and prints "e NAME TIME" when it ends, also when it is cancelled (a to-be-closed
-- variable). Prints "member", "owned N of M, members K at TIME" every 0.2 s, "reason REASON" at the end.
local root, url, id, token, ns = arg[1], arg[2], arg[3], arg[4], arg[5]
package.path = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. package.path
package.cpath = root .. "/build/lua5.4/?.so;" .. package.cpath
local kinformer = require "kinformer"
local clock = require "kinformer.clock"
local core = require "kinformer.core"
io.stdout:setvbuf("line")
kinformer.set_logger(function() end)
local client = assert(kinformer.client{ server = url, token = token })
local mgr = kinformer.manager{ client = client, grace_period = 1, sharding = { group = "spec",
  namespace = ns, identity = id, lease_duration = 3, renew_deadline = 2, retry_period = 0.5,
  margin = 1 } }
mgr:controller{ name = "c", resource = "configmaps", namespace = ns, max_concurrent_reconciles = 4,
  reconcile = function(req, ctx)
    print(("b %s %.6f"):format(req.name, core.wall_time()))
    -- closed when the reconcile returns, raises, or is cancelled (a handover, a lost lease)
    local span <close> = setmetatable({}, { __close = function()
      print(("e %s %.6f"):format(req.name, core.wall_time()))
    end })
    local ok, err = ctx.client:patch("configmaps", req.key,
      { metadata = { annotations = { ["sharding.example.com/by"] = id } } })
    if not ok then return nil, err end
  end }
local last = 0
local was_member = false
local run = mgr.run
local function report()
  local now = clock.now()
  if now - last < 0.2 then return end
  last = now
  local st = mgr:status().sharding
  if st.published and not was_member then
    was_member = true
    print("member")
  end
  print(("owned %d of %d, members %d at %.3f"):format(st.keys_owned, st.keys, st.members,
    core.wall_time()))
end
local orig_step = mgr.step
mgr.step = function(self)
  local w, err = orig_step(self)
  if w then report() end
  return w, err
end
print("reason " .. tostring(run(mgr, { timeout = 120 })))
