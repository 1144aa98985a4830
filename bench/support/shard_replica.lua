-- One replica of a sharded manager for bench/manager_shards_bench.lua, run as a child process:
--   lua5.4 shard_replica.lua ROOT URL IDENTITY TOKEN NAMESPACE MEMBERS MODE LEASE CONCURRENCY
-- Sharding group "bench" in NAMESPACE, LEASE = "duration,renew_deadline,retry_period,margin"
-- (seconds), one controller over the ConfigMaps of NAMESPACE with max_concurrent_reconciles =
-- CONCURRENCY and no client-side throttle (qps = -1): bench/support/writer.lua's controller,
-- writing bench.kinformer.io/data-bytes (MODE "throughput") or bench.kinformer.io/touched, the
-- object's fake.kinformer.io/touched-at (MODE "failover": a POST /_fake/modify makes work).
-- Prints, times on the wall clock (core.wall_time):
--   "ready T"        once: its acknowledgement is published, the ring has MEMBERS members and
--                    every other member acknowledged that ring (the group is working)
--   "w NAME T V"     each write that succeeded, V the value written
--   "f NAME T ERR"   each write that failed
--   "members K T"    (MODE "failover") each change of the ring's size, looked at every 0.1 s
--   "reason R"       at the end (SIGTERM from the parent)
local root, url, id, token, ns, members, mode, lease, conc = table.unpack(arg, 1, 9)
package.path = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. root .. "/?.lua;"
  .. package.path
package.cpath = root .. "/build/lua5.4/?.so;" .. package.cpath
local kinformer = require "kinformer"
local core = require "kinformer.core"
local writer = require "bench.support.writer"

members = tonumber(members)
local l = {}
for x in lease:gmatch("[^,]+") do l[#l + 1] = tonumber(x) end
io.stdout:setvbuf("line")
kinformer.set_logger(function() end)

local client = assert(kinformer.client{ server = url, token = token, qps = -1 })
local mgr = kinformer.manager{ client = client, sharding = { group = "bench", namespace = ns,
  identity = id, lease_duration = l[1], renew_deadline = l[2], retry_period = l[3],
  margin = l[4] } }
local failover = mode == "failover"
local annotation = failover and writer.TOUCHED or writer.DATA_BYTES
local value = failover and writer.touched or writer.data_bytes
mgr:controller{ name = "writer", resource = "configmaps", namespace = ns,
  max_concurrent_reconciles = tonumber(conc),
  reconcile = writer.reconcile{ annotation = annotation, value = value,
    on_write = function(req, v)
      print(("w %s %.6f %s"):format(req.name, core.wall_time(), v))
    end,
    on_fail = function(req, err)
      print(("f %s %.6f %s"):format(req.name, core.wall_time(), tostring(err):gsub("%s", "_")))
    end } }

-- The group works once every member acknowledged the ring of MEMBERS members.
local function all_acknowledged(st)
  if not st.published or st.members ~= members then return false end
  for _, ack in pairs(st.others) do
    if ack:match("^%d+:(.*)$") ~= st.ring then return false end
  end
  return true
end

local ready, size, last = false, nil, -1
local function look()
  -- status() counts the keys this replica owns (a pass over the cache): not on every step
  local now = core.now()
  if now - last < 0.1 or (ready and not failover) then return end
  last = now
  local st = mgr:status().sharding
  if failover and st.members ~= size then
    size = st.members
    print(("members %d %.6f"):format(size, core.wall_time()))
  end
  if not ready and all_acknowledged(st) then
    ready = true
    print(("ready %.6f"):format(core.wall_time()))
  end
end

core.catch_signals(true)
local reason
while true do
  local w, err = mgr:step()
  if not w then
    reason = err
    break
  end
  look()
  local r, sig = core.wait(mgr:fds(), math.min(w, 0.1))
  if r == "signal" then
    reason = sig
    mgr:stop(sig)
    break
  end
end
print("reason " .. tostring(reason))
