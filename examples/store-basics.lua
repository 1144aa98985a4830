-- The store and DeltaFIFO basics from the README. Run from the repository root:
-- LUA_PATH='lua/?.lua;lua/?/init.lua;;' LUA_CPATH='build/lua5.4/?.so;;' lua5.4 examples/store-basics.lua
local kinformer = require "kinformer"
local pods = kinformer.store{
  indexers = { by_node = function(pod) return { pod.spec.nodeName } end },
}
pods:add{ metadata = { namespace = "web", name = "a" }, spec = { nodeName = "n1" } }
pods:add{ metadata = { namespace = "web", name = "b" }, spec = { nodeName = "n1" } }
pods:add{ metadata = { namespace = "db",  name = "c" }, spec = { nodeName = "n2" } }
print(table.concat(pods:index_keys("by_node", "n1"), " "))
print(#pods:by_index("namespace", "db"))
print(pods:get_by_key("web/a").spec.nodeName)
local fifo = kinformer.delta_fifo{ known_objects = pods, emit_replaced = true }
fifo:replace({ pods:get_by_key("web/a") }, "10")
while #fifo > 0 do
  local deltas = fifo:pop()
  local d = deltas[#deltas]
  print(d.type, kinformer.key_of(d.object), kinformer.is_tombstone(d.object))
end
