# jsonscan.mk - the streaming JSON scanner (csrc/jsonscan.c): core source, C test, bench.
# Its fuzzer, `make fuzz-jsonscan` (part of `make fuzz`), is in mk/fuzz.mk.
#
#   make bench-jsonscan           throughput of list / watch scanning (bench/jsonscan_bench.c)

# This fragment is included before the Makefile's `all:`; keep that the default goal.
_jsonscan_saved_goal := $(.DEFAULT_GOAL)

CORE_SRC += csrc/jsonscan.c
CTESTS   += jsonscan jsonscan_scalar

# The same tests against the scanner built without SSE2 (-DKINF_SCAN_SCALAR: the portable code
# other architectures get), so both ways of building the masks of a dropped value are tested.
$(BUILD)/asan/test_jsonscan_scalar: csrc/test/test_jsonscan.c $(wildcard csrc/test/*.h) $(CORE_SRC) $(CORE_HDR)
	@mkdir -p $(dir $@)
	$(SAN_CC) $(CTEST_CFLAGS) $(ASAN_FLAGS) -DKINF_SCAN_SCALAR -o $@ $< $(CORE_SRC) $(LIBS)
$(BUILD)/tsan/test_jsonscan_scalar: csrc/test/test_jsonscan.c $(wildcard csrc/test/*.h) $(CORE_SRC) $(CORE_HDR)
	@mkdir -p $(dir $@)
	$(SAN_CC) $(CTEST_CFLAGS) $(TSAN_FLAGS) -DKINF_SCAN_SCALAR -o $@ $< $(CORE_SRC) $(LIBS)

JSONSCAN_DEPS = csrc/jsonscan.c csrc/jsonscan.h csrc/kinf.c csrc/kinf.h csrc/object.h csrc/object.c

.PHONY: bench-jsonscan

$(BUILD)/bench/jsonscan_bench: bench/jsonscan_bench.c $(JSONSCAN_DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(DEFS) -O2 -g -Icsrc -o $@ bench/jsonscan_bench.c csrc/jsonscan.c csrc/kinf.c \
	    csrc/object.c

bench-jsonscan: $(BUILD)/bench/jsonscan_bench
	$(BUILD)/bench/jsonscan_bench

.DEFAULT_GOAL := $(_jsonscan_saved_goal)
