CORE_SRC += csrc/pipe.c csrc/client.c csrc/request.c csrc/reflector.c
EXTRA_LIBS += $(CURL_LIBS)
BIND_SRC += csrc/lua_client.c
CTESTS += pipe reflector reflector_body
