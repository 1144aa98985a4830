# config.mk - client configuration: credentials (token file, basic auth, exec plugins) in C.
# Its C test runs exec plugins (small /bin/sh scripts written at test time).
CORE_SRC += csrc/credentials.c csrc/exec_credential.c
CTESTS   += credentials
