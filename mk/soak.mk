# A long run with churn and random faults (issue 9): `make soak SOAK_SECONDS=600`.
_soak_saved_goal := $(.DEFAULT_GOAL)
SOAK_SECONDS ?= 600
SOAK_PODS ?= 2000
SOAK_WATCH_LIST ?=
.PHONY: soak
soak: all
	$(LUA) tools/soak.lua $(SOAK_SECONDS) $(SOAK_PODS) $(if $(SOAK_WATCH_LIST),watchlist)
.DEFAULT_GOAL := $(_soak_saved_goal)
