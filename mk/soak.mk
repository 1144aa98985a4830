# soak.mk - a long run of an informer against the fake API server with churn and random faults
# (tools/soak.lua): `make soak SOAK_SECONDS=600`.
SOAK_SECONDS ?= 600
SOAK_PODS ?= 2000
SOAK_WATCH_LIST ?=
.PHONY: soak
soak: all
	$(LUA) tools/soak.lua $(SOAK_SECONDS) $(SOAK_PODS) $(if $(SOAK_WATCH_LIST),watchlist)
