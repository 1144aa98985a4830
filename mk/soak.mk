# A long run with churn and random faults (issue 9): `make soak SOAK_SECONDS=600`.
SOAK_SECONDS ?= 600
SOAK_PODS ?= 2000
.PHONY: soak
soak: all
	$(LUA) tools/soak.lua $(SOAK_SECONDS) $(SOAK_PODS)
