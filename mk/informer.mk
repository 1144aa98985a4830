# The informer's processing step, the wake-up fd and lazy decoding spans (issue 5).
CORE_SRC += csrc/jsonspan.c csrc/informer.c
BIND_SRC += csrc/lua_informer.c
CTESTS += jsonspan informer
