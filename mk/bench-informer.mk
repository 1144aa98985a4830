# bench-informer.mk - the shared informer's benchmark (bench/informer_bench.lua).
#
#   make bench-informer                       100k pods: sync, MODIFIED events/s, store lookups
#   make bench-informer BENCH_PODS=2000       smoke size (a few seconds; spec/bench_smoke_spec.lua)
#   BENCH_INFORMER_EVENTS=N                   MODIFIED events per run (default: BENCH_PODS)
#   BENCH_REPEAT=K                            fresh processes per measurement, fastest reported
# Results and analysis: bench/README.md, section "Informer".

BENCH_PODS ?= 100000
BENCH_INFORMER_EVENTS ?= $(BENCH_PODS)
BENCH_REPEAT ?= 1

.PHONY: bench-informer
bench-informer: lua54
	LUA_PATH='lua/?.lua;lua/?/init.lua;;' LUA_CPATH='$(BUILD)/lua5.4/?.so;;' $(LUA) \
	    bench/informer_bench.lua $(BENCH_PODS) $(BENCH_INFORMER_EVENTS) $(BENCH_REPEAT)
