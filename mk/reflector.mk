CORE_SRC += csrc/pipe.c csrc/client.c csrc/client_transport.c csrc/request.c csrc/reflector.c \
            csrc/reflector_list.c csrc/reflector_watch.c csrc/reflector_report.c csrc/backoff.c \
            csrc/query.c
EXTRA_LIBS += $(CURL_LIBS)
BIND_SRC += csrc/lua_client.c
CTESTS += pipe reflector reflector_body
