--- The floor of a Lua balancer (bench/openresty_bench.lua): balancer_by_lua* that hands nginx
-- one of a fixed list of peers, round robin, with retries allowed as a real balancer does. What
-- nginx and lua-nginx-module charge for running any Lua balancer; kinformer.ngx.balancer's
-- figures are compared with it and with a static upstream block.
local balancer = require "ngx.balancer"
local set_current_peer, set_more_tries, get_last_failure =
  balancer.set_current_peer, balancer.set_more_tries, balancer.get_last_failure

local _M = {}

local hosts, port, n, i = {}, 0, 0, 0

--- floor.init(hosts, port): the peers (init_worker_by_lua*)
function _M.init(h, p)
  hosts, port, n = h, p, #h
end

--- floor.balance() in balancer_by_lua*
function _M.balance()
  if not get_last_failure() then set_more_tries(n - 1) end
  i = i % n + 1
  set_current_peer(hosts[i], port)
end

return _M
