# bench-informer.mk - the shared informer's benchmarks (bench/informer_bench.lua, and
# bench/metadata_bench.lua below).
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

# Full versus metadata-only informers (bench/metadata_bench.lua): sync time, peak RSS, JSON kept.
#   make bench-metadata                       100k pods
#   make bench-metadata BENCH_PODS=10000
# Results: bench/README.md, section "Metadata-only informers".
.PHONY: bench-metadata
bench-metadata: lua54
	LUA_PATH='lua/?.lua;lua/?/init.lua;;' LUA_CPATH='$(BUILD)/lua5.4/?.so;;' $(LUA) \
	    bench/metadata_bench.lua $(BENCH_PODS) $(BENCH_REPEAT)
