# openresty.mk - kinformer inside nginx: lua/kinformer/ngx.lua, kinformer.ngx.balancer,
# examples/openresty.
#
#   make test-openresty     spec/openresty_spec.lua, spec/openresty_balancer_spec.lua and
#                           spec/openresty_shared_spec.lua: the fake API server, backends on
#                           loopback and nginx with 2 or 4 workers in the three models: the
#                           example, every balancer algorithm, passive health, churn under wrk,
#                           the shared model under churn (~2 min; also part of `make test`,
#                           which runs every spec)
#   make bench-openresty    bench/openresty_bench.lua: nginx CPU per request of the balancer and
#                           the example against a static upstream block and the floor of a Lua
#                           balancer, Lua bytes allocated per request, and what each model costs
#                           (results: bench/README.md)
#                           [BENCH_OR_SECONDS=5 BENCH_OR_ROUNDS=7 BENCH_OR_SERVICES=2000
#                            BENCH_OR_EVENTS=20000]
#   make bench-shared       bench/shared_bench.lua: the shared model against the worker model
#                           with many workers: memory (PSS), lookups, propagation, CPU per event
#                           [BENCH_SH_PODS=100000 BENCH_SH_SLICES=2000 BENCH_SH_WORKERS=16
#                            BENCH_SH_EVENTS=20000]; the worker model's 16 caches of 100k pods
#                           take about 9 GB of RAM and several minutes to list

BENCH_OR_SECONDS ?= 5
BENCH_OR_ROUNDS ?= 7
BENCH_OR_SERVICES ?= 2000
BENCH_OR_EVENTS ?= 20000
BENCH_SH_PODS ?= 100000
BENCH_SH_SLICES ?= 2000
BENCH_SH_WORKERS ?= 16
BENCH_SH_EVENTS ?= 20000

.PHONY: test-openresty bench-openresty bench-shared

test-openresty: all
	$(BUSTED) --helper=spec/helper.lua -o utfTerminal spec/openresty_spec.lua spec/openresty_balancer_spec.lua \
	    spec/openresty_shared_spec.lua

bench-openresty: all
	@command -v wrk >/dev/null || $(MAKE) --no-print-directory deps
	LUA_PATH='lua/?.lua;lua/?/init.lua;spec/?.lua;;' $(LUA) bench/openresty_bench.lua \
	    $(BENCH_OR_SECONDS) $(BENCH_OR_ROUNDS) $(BENCH_OR_SERVICES) $(BENCH_OR_EVENTS)

bench-shared: all
	LUA_PATH='lua/?.lua;lua/?/init.lua;spec/?.lua;;' LUA_CPATH='$(BUILD)/lua5.4/?.so;;' $(LUA) \
	    bench/shared_bench.lua $(BENCH_SH_PODS) $(BENCH_SH_SLICES) $(BENCH_SH_WORKERS) $(BENCH_SH_EVENTS)
