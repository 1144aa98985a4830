# fuzz.mk - libFuzzer targets (clang -fsanitize=fuzzer,address,undefined), one per input format.
#
#   make fuzz [FUZZ_SECONDS=30] [FUZZ_RUNS=N]   every target below, one after the other, each for
#                                 FUZZ_SECONDS (or N executions, whichever comes first)
#   make fuzz-jsonscan            the streaming JSON scanner (csrc/fuzz/fuzz_jsonscan.c)
#   make fuzz-reflector           the reflector's list / watch framing through a scripted
#                                 transport (csrc/fuzz/fuzz_reflector.c)
#   make fuzz-labelselector       label selectors: the parser, and the matcher on any labels
#                                 bytes (csrc/fuzz/fuzz_labelselector.c)
#   make fuzz-coverage            replays each target's corpora (no fuzzing) in a build with
#                                 clang source coverage and prints the line / branch coverage
#                                 of the core files it exercises (llvm-cov report)
# Each runs over its seed corpus csrc/fuzz/corpus/<target> plus build/fuzz/corpus-<target> (new
# inputs go there), writes crashes to csrc/fuzz/crash-*, logs to build/fuzz/<target>.log and
# prints the executions, time and final coverage line. FUZZ_NICE (default 10) lowers the priority.

FUZZ_SECONDS ?= 30
FUZZ_RUNS    ?=
FUZZ_NICE    ?= 10
FUZZ_CC      ?= clang
FUZZ_FLAGS    = -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined \
                -fno-sanitize-recover=all
FUZZ_TARGETS  = jsonscan reflector labelselector
# Per-target libFuzzer options: the reflector's inputs are response sequences, whose cost grows
# with their length; 2 KiB holds several list pages and watch streams.
FUZZ_ARGS_jsonscan  =
FUZZ_ARGS_reflector = -max_len=2048
FUZZ_ARGS_labelselector = -max_len=1024

.PHONY: fuzz fuzz-coverage $(FUZZ_TARGETS:%=fuzz-%)

fuzz: $(FUZZ_TARGETS:%=fuzz-%)

# build/fuzz/fuzz_NAME: csrc/fuzz/fuzz_NAME.c linked with the core built for fuzzing (the scanner's
# target brings in only the scanner and what it uses).
COMPILE_fuzz = $(FUZZ_CC) $(WARN) $(DEFS) -Icsrc $(FUZZ_FLAGS)
$(eval $(call compile_rule,fuzz))
$(eval $(call core_archive,fuzz))
$(FUZZ_TARGETS:%=$(BUILD)/fuzz/fuzz_%): $(BUILD)/fuzz/fuzz_%: csrc/fuzz/fuzz_%.c $(BUILD)/fuzz/libkinf.a
	$(COMPILE_fuzz) -MMD -MP -o $@ $(inputs) $(LIBS)

# fuzz-NAME: runs build/fuzz/fuzz_NAME; the exit status is the fuzzer's (non-zero on a finding).
$(FUZZ_TARGETS:%=fuzz-%): fuzz-%: $(BUILD)/fuzz/fuzz_%
	@mkdir -p $(BUILD)/fuzz/corpus-$*
	@echo "fuzzing $* for $(FUZZ_SECONDS) s$(if $(FUZZ_RUNS), or $(FUZZ_RUNS) runs) (log: $(BUILD)/fuzz/$*.log)"
	@start=$$(date +%s); \
	ASAN_OPTIONS=detect_leaks=1 nice -n $(FUZZ_NICE) $(BUILD)/fuzz/fuzz_$* \
	    -max_total_time=$(FUZZ_SECONDS) $(if $(FUZZ_RUNS),-runs=$(FUZZ_RUNS)) $(FUZZ_ARGS_$*) \
	    -reload=0 -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 -artifact_prefix=csrc/fuzz/ \
	    $(BUILD)/fuzz/corpus-$* csrc/fuzz/corpus/$* > $(BUILD)/fuzz/$*.log 2>&1; \
	rc=$$?; secs=$$(( $$(date +%s) - start )); \
	grep -E '^#[0-9]+.*(DONE|cov:)' $(BUILD)/fuzz/$*.log | tail -n 1 || true; \
	execs=$$(sed -n 's/^stat::number_of_executed_units: *//p' $(BUILD)/fuzz/$*.log); \
	rate=$$(sed -n 's/^stat::average_exec_per_sec: *//p' $(BUILD)/fuzz/$*.log); \
	echo "$* fuzz: $${execs:-?} executions in $$secs s ($${rate:-?} exec/s), exit $$rc"; \
	if [ $$rc -ne 0 ]; then grep -m1 -A30 'ERROR\|invariant' $(BUILD)/fuzz/$*.log; fi; \
	exit $$rc

# Coverage: the same targets built with -fprofile-instr-generate (no sanitizers), run once over
# the seeds and what the fuzzer kept.
FUZZ_COV_FLAGS = -O1 -g -fsanitize=fuzzer -fprofile-instr-generate -fcoverage-mapping
FUZZ_COV_FILES_jsonscan  = csrc/jsonscan.c
FUZZ_COV_FILES_reflector = csrc/reflector.c csrc/reflector_list.c csrc/reflector_watch.c \
                           csrc/reflector_report.c csrc/jsonscan.c csrc/delta_fifo.c csrc/object.c
FUZZ_COV_FILES_labelselector = csrc/labelselector.c csrc/labelmatch.c csrc/jsonspan.c

COMPILE_fuzz-cov = $(FUZZ_CC) $(WARN) $(DEFS) -Icsrc $(FUZZ_COV_FLAGS)
$(eval $(call compile_rule,fuzz-cov))
$(eval $(call core_archive,fuzz-cov))
$(FUZZ_TARGETS:%=$(BUILD)/fuzz/cov_%): $(BUILD)/fuzz/cov_%: csrc/fuzz/fuzz_%.c $(BUILD)/fuzz-cov/libkinf.a
	@mkdir -p $(@D)
	$(COMPILE_fuzz-cov) -MMD -MP -o $@ $(inputs) $(LIBS)

fuzz-coverage: $(FUZZ_TARGETS:%=$(BUILD)/fuzz/cov_%)
	@set -e; for t in $(FUZZ_TARGETS); do \
	    mkdir -p $(BUILD)/fuzz/corpus-$$t; rm -f $(BUILD)/fuzz/cov-$$t.profraw; \
	    LLVM_PROFILE_FILE=$(BUILD)/fuzz/cov-$$t.profraw nice -n $(FUZZ_NICE) \
	        $(BUILD)/fuzz/cov_$$t -runs=0 $(BUILD)/fuzz/corpus-$$t csrc/fuzz/corpus/$$t \
	        > $(BUILD)/fuzz/cov-$$t.log 2>&1; \
	    llvm-profdata merge -sparse -o $(BUILD)/fuzz/cov-$$t.profdata $(BUILD)/fuzz/cov-$$t.profraw; \
	    echo "== $$t: $$(ls $(BUILD)/fuzz/corpus-$$t csrc/fuzz/corpus/$$t | wc -l) inputs"; \
	    files="$(FUZZ_COV_FILES_jsonscan)"; [ $$t = reflector ] && files="$(FUZZ_COV_FILES_reflector)"; \
	    [ $$t = labelselector ] && files="$(FUZZ_COV_FILES_labelselector)"; \
	    llvm-cov report $(BUILD)/fuzz/cov_$$t -instr-profile=$(BUILD)/fuzz/cov-$$t.profdata $$files; \
	done
