# openresty.mk - kinformer inside nginx: lua/kinformer/ngx.lua, examples/openresty.
#
#   make test-openresty     spec/openresty_spec.lua alone: the fake API server, three backends and
#                           the example's nginx (2 workers) on loopback, both models (~20 s; it is
#                           also part of `make test`, which runs every spec)
#   make bench-openresty    bench/openresty_bench.lua: wrk against the example vs a static upstream
#                           block, and what each model costs (results: bench/README.md)
#                           [BENCH_OR_SECONDS=5 BENCH_OR_ROUNDS=7 BENCH_OR_SERVICES=2000
#                            BENCH_OR_EVENTS=20000]

BENCH_OR_SECONDS ?= 5
BENCH_OR_ROUNDS ?= 7
BENCH_OR_SERVICES ?= 2000
BENCH_OR_EVENTS ?= 20000

.PHONY: test-openresty bench-openresty

test-openresty: all
	$(BUSTED) --helper=spec/helper.lua -o utfTerminal spec/openresty_spec.lua

bench-openresty: all
	@command -v wrk >/dev/null || $(MAKE) --no-print-directory deps
	LUA_PATH='lua/?.lua;lua/?/init.lua;spec/?.lua;;' $(LUA) bench/openresty_bench.lua \
	    $(BENCH_OR_SECONDS) $(BENCH_OR_ROUNDS) $(BENCH_OR_SERVICES) $(BENCH_OR_EVENTS)
