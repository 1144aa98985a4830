# valgrind.mk - the core specs under valgrind: any memory error or definite leak fails the run.
VALGRIND_SPECS = spec/keys_spec.lua spec/store_spec.lua spec/store_list_spec.lua spec/delta_fifo_spec.lua \
                 spec/informer_spec.lua spec/workqueue_spec.lua spec/rest_spec.lua \
                 spec/decode_spec.lua spec/encode_spec.lua spec/shared_spec.lua \
                 spec/reentrancy_spec.lua spec/client_call_spec.lua
VALGRIND = valgrind --quiet --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite
.PHONY: check-valgrind
check-valgrind: all
	$(VALGRIND) $(BUSTED) --helper=spec/helper.lua -o utfTerminal $(VALGRIND_SPECS)
