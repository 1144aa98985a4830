# bench-scale.mk - growth to a million objects, many informers on one client, and the list
# against a replay server (bench/scale_bench.lua; pages served with sendfile by
# bench/list_replay.py, so the figures are the client's and not the Python fake server's).
#
#   make bench-scale                              10k and 100k ConfigMaps, 50 idle informers,
#                                                 the list floor at 100k pods (about 1 min)
#   make bench-scale BENCH_SCALE_SIZES=10000,100000,1000000
#                                                 a million too (about 4 GB of RAM at once:
#                                                 1.8 GB for the fake server while it records,
#                                                 1.4 GB for the client; 1.2 GB of pages on disk)
#   BENCH_SCALE_ARGS='--runs=3 --parts=growth'    passed to the script (its header lists them)
# Results and how to read them: bench/README.md, sections "Growth: a million objects and 50
# informers" and "The list against a replay server".

BENCH_SCALE_SIZES ?= 10000,100000
BENCH_SCALE_ARGS ?= --runs=3

.PHONY: bench-scale
bench-scale: lua54
	LUA_PATH='lua/?.lua;lua/?/init.lua;;' LUA_CPATH='$(BUILD)/lua5.4/?.so;;' $(LUA) \
	    bench/scale_bench.lua --sizes=$(BENCH_SCALE_SIZES) --dir=$(BUILD)/bench/scale $(BENCH_SCALE_ARGS)
