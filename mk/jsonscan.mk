# jsonscan.mk - the streaming JSON scanner (csrc/jsonscan.c): core source, C test, fuzzing, bench.
#
#   make fuzz [FUZZ_SECONDS=30]   libFuzzer (clang -fsanitize=fuzzer,address,undefined) over the
#                                 seed corpus csrc/fuzz/corpus/jsonscan; new inputs go to
#                                 build/fuzz/corpus-jsonscan, crashes to csrc/fuzz/crash-*;
#                                 prints the number of executions.
#   make bench-jsonscan           throughput of list / watch scanning (bench/jsonscan_bench.c)

# This fragment is included before the Makefile's `all:`; keep that the default goal.
_jsonscan_saved_goal := $(.DEFAULT_GOAL)

CORE_SRC += csrc/jsonscan.c
CTESTS   += jsonscan

FUZZ_SECONDS ?= 30
FUZZ_CC      ?= clang
FUZZ_FLAGS    = -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined \
                -fno-sanitize-recover=all
JSONSCAN_DEPS = csrc/jsonscan.c csrc/jsonscan.h csrc/kinf.c csrc/kinf.h csrc/object.h csrc/object.c

.PHONY: fuzz fuzz-jsonscan bench-jsonscan

fuzz: fuzz-jsonscan

$(BUILD)/fuzz/fuzz_jsonscan: csrc/fuzz/fuzz_jsonscan.c $(JSONSCAN_DEPS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(WARN) $(DEFS) -Icsrc $(FUZZ_FLAGS) -o $@ csrc/fuzz/fuzz_jsonscan.c \
	    csrc/jsonscan.c csrc/kinf.c

fuzz-jsonscan: $(BUILD)/fuzz/fuzz_jsonscan
	@mkdir -p $(BUILD)/fuzz/corpus-jsonscan
	@echo "fuzzing jsonscan for $(FUZZ_SECONDS) s (log: $(BUILD)/fuzz/jsonscan.log)"
	@ASAN_OPTIONS=detect_leaks=1 $(BUILD)/fuzz/fuzz_jsonscan -max_total_time=$(FUZZ_SECONDS) \
	    -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 -artifact_prefix=csrc/fuzz/ \
	    $(BUILD)/fuzz/corpus-jsonscan csrc/fuzz/corpus/jsonscan > $(BUILD)/fuzz/jsonscan.log 2>&1; \
	rc=$$?; tail -n 3 $(BUILD)/fuzz/jsonscan.log | grep -v '^stat::' || true; \
	execs=$$(sed -n 's/^stat::number_of_executed_units: *//p' $(BUILD)/fuzz/jsonscan.log); \
	echo "jsonscan fuzz: $${execs:-?} executions in $(FUZZ_SECONDS) s, exit $$rc"; \
	if [ $$rc -ne 0 ]; then grep -m1 -A30 'ERROR\|invariant' $(BUILD)/fuzz/jsonscan.log; fi; \
	exit $$rc

$(BUILD)/bench/jsonscan_bench: bench/jsonscan_bench.c $(JSONSCAN_DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(DEFS) -O2 -g -Icsrc -o $@ bench/jsonscan_bench.c csrc/jsonscan.c csrc/kinf.c \
	    csrc/object.c

bench-jsonscan: $(BUILD)/bench/jsonscan_bench
	$(BUILD)/bench/jsonscan_bench

.DEFAULT_GOAL := $(_jsonscan_saved_goal)
