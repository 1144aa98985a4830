# bench-manager.mk - kinformer.manager's benchmark (bench/manager_bench.lua): reconciles/s with a
# no-op reconcile, the manager's overhead per reconcile, peak RSS with three controllers.
#
#   make bench-manager                        10k pods as primaries
#   make bench-manager BENCH_MANAGER_PODS=1000
# Results: bench/README.md, section "Manager".

BENCH_MANAGER_PODS ?= 10000

.PHONY: bench-manager
bench-manager: lua54
	$(LUA) bench/manager_bench.lua $(BENCH_MANAGER_PODS)
