# jsonscan.mk - the streaming JSON scanner (csrc/jsonscan.c): its scalar C test and its bench.
# Its fuzzer, `make fuzz-jsonscan` (part of `make fuzz`), is in mk/fuzz.mk.
#
#   make bench-jsonscan           throughput of list / watch scanning (bench/jsonscan_bench.c)

# The scanner's tests again against the scanner built without SSE2 (-DKINF_SCAN_SCALAR: the
# portable code other architectures get), so both ways of building the masks of a dropped value
# are tested (the Makefile's CTESTS names it). Only jsonscan.c and the test differ; the rest of
# the core is the sanitizer's.

define scalar_test
$(BUILD)/$1/obj/jsonscan_scalar.o: csrc/jsonscan.c
	@mkdir -p $$(@D)
	$$(COMPILE_$1) -DKINF_SCAN_SCALAR -MMD -MP -c -o $$@ $$<
$(BUILD)/$1/test_jsonscan_scalar: csrc/test/test_jsonscan.c $(BUILD)/$1/obj/jsonscan_scalar.o \
                                  $(filter-out %/jsonscan.o,$(call objects,$1,$(CORE_SRC))) mk/sources.mk
	$$(COMPILE_$1) -DKINF_SCAN_SCALAR -MMD -MP -o $$@ $$(inputs) $$(LIBS)
endef
$(foreach v,asan tsan,$(eval $(call scalar_test,$v)))

.PHONY: bench-jsonscan
bench-jsonscan: $(BUILD)/bench/jsonscan_bench
	$(BUILD)/bench/jsonscan_bench
