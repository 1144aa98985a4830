/* test_credentials.c - credentials.c alone: static token, basic auth, token files (re-read on
 * change and after a 401), exec plugins (small /bin/sh scripts written to a temporary folder:
 * caching until expirationTimestamp, invalidation by generation, client certificates, errors
 * with stderr minus secrets, timeouts) and redaction. */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "credentials.h"
#include "ctest.h"

static char dir[64];

static void setup(void);

static void write_file(const char *name, const char *text, int mode)
{
    char path[256];
    FILE *f;
    setup();
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "w");
    if (f == NULL) {
        perror(path);
        exit(2);
    }
    fputs(text, f);
    fclose(f);
    chmod(path, (mode_t)mode);
}

static const char *path_of(const char *name)
{
    static char buf[4][256];
    static int i;
    setup();
    i = (i + 1) % 4;
    snprintf(buf[i], sizeof(buf[i]), "%s/%s", dir, name);
    return buf[i];
}

static void teardown(void);

/* The temporary folder, made on first use and removed at exit. */
static void setup(void)
{
    if (dir[0])
        return;
    snprintf(dir, sizeof(dir), "/tmp/kinf-creds-XXXXXX");
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        exit(2);
    }
    atexit(teardown);
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

static kinf_creds *new_exec(const char *script, const char *const *args, const char *const *env,
                            double timeout, char *msg, size_t len)
{
    kinf_exec_config x = {0};
    kinf_creds_config cc = {0};
    kinf_err err;
    x.command = path_of(script);
    x.args = args;
    x.env = env;
    x.api_version = KINF_EXEC_API_V1;
    x.timeout = timeout;
    cc.exec = &x;
    return kinf_creds_new(&cc, &err, msg, len);
}

static void static_token_and_basic(void)
{
    kinf_creds_config cc = {0};
    kinf_creds *cr;
    kinf_cred c;
    kinf_err err;
    char msg[256];

    cc.token = "s3cr3t-token";
    cr = kinf_creds_new(&cc, &err, msg, sizeof(msg));
    CHECK(cr != NULL);
    CHECK(kinf_creds_get(cr, &c, msg, sizeof(msg)) == KINF_OK);
    CHECK_STR(c.token, "s3cr3t-token");
    CHECK(c.username == NULL && c.cert_pem == NULL);
    kinf_creds_invalidate(cr, c.generation); /* nothing to refresh */
    CHECK(kinf_creds_get(cr, &c, msg, sizeof(msg)) == KINF_OK);
    CHECK_STR(c.token, "s3cr3t-token");
    CHECK(!kinf_creds_refreshable(cr));
    kinf_creds_free(cr);

    memset(&cc, 0, sizeof(cc));
    cc.username = "alice";
    cc.password = "pa55word";
    cr = kinf_creds_new(&cc, &err, msg, sizeof(msg));
    CHECK(cr != NULL);
    CHECK(kinf_creds_get(cr, &c, msg, sizeof(msg)) == KINF_OK);
    CHECK_STR(c.username, "alice");
    CHECK_STR(c.password, "pa55word");
    CHECK(c.token == NULL);
    kinf_creds_free(cr);

    /* nothing at all */
    cr = kinf_creds_new(NULL, &err, msg, sizeof(msg));
    CHECK(cr != NULL);
    CHECK(kinf_creds_get(cr, &c, msg, sizeof(msg)) == KINF_OK && c.token == NULL);
    kinf_creds_free(cr);
}

static void bad_configs(void)
{
    kinf_creds_config cc = {0};
    kinf_exec_config x = {0};
    kinf_err err;
    char msg[256];

    cc.token = "a";
    cc.username = "b";
    CHECK(kinf_creds_new(&cc, &err, msg, sizeof(msg)) == NULL && err == KINF_EINVAL);
    CHECK(strstr(msg, "only one of") != NULL);
    memset(&cc, 0, sizeof(cc));
    cc.token = "line\r\nX-Injected: 1";
    CHECK(kinf_creds_new(&cc, &err, msg, sizeof(msg)) == NULL && err == KINF_EINVAL);
    CHECK(strstr(msg, "Injected") == NULL);
    memset(&cc, 0, sizeof(cc));
    cc.password = "p";
    CHECK(kinf_creds_new(&cc, &err, msg, sizeof(msg)) == NULL && err == KINF_EINVAL);
    memset(&cc, 0, sizeof(cc));
    cc.exec = &x;
    CHECK(kinf_creds_new(&cc, &err, msg, sizeof(msg)) == NULL && err == KINF_EINVAL);
    CHECK(strstr(msg, "command") != NULL);
    x.command = "true";
    x.api_version = "client.authentication.k8s.io/v1alpha1";
    CHECK(kinf_creds_new(&cc, &err, msg, sizeof(msg)) == NULL && err == KINF_EINVAL);
    CHECK(strstr(msg, "apiVersion") != NULL);
    {
        static const char *const env[] = {"NOEQUALS", NULL};
        x.api_version = KINF_EXEC_API_V1BETA1;
        x.env = env;
        CHECK(kinf_creds_new(&cc, &err, msg, sizeof(msg)) == NULL && err == KINF_EINVAL);
    }
}

static void token_file(void)
{
    kinf_creds_config cc = {0};
    kinf_creds *cr;
    kinf_cred c;
    kinf_err err;
    unsigned long g1, g2;
    char msg[256];

    cc.token_file = path_of("missing");
    CHECK(kinf_creds_new(&cc, &err, msg, sizeof(msg)) == NULL && err == KINF_EIO);
    CHECK(strstr(msg, "missing: No such file or directory") != NULL);
    write_file("empty", " \n", 0600);
    cc.token_file = path_of("empty");
    CHECK(kinf_creds_new(&cc, &err, msg, sizeof(msg)) == NULL && err == KINF_EIO);
    CHECK(strstr(msg, "is empty") != NULL);

    write_file("token", "first-token\n", 0600);
    cc.token_file = path_of("token");
    cr = kinf_creds_new(&cc, &err, msg, sizeof(msg));
    CHECK(cr != NULL && kinf_creds_refreshable(cr));
    CHECK(kinf_creds_get(cr, &c, msg, sizeof(msg)) == KINF_OK);
    CHECK_STR(c.token, "first-token");
    g1 = c.generation;

    /* rotated (a different size, so the change is seen even within one mtime tick) */
    write_file("token", "second-token-longer\n", 0600);
    CHECK(kinf_creds_get(cr, &c, msg, sizeof(msg)) == KINF_OK);
    CHECK_STR(c.token, "second-token-longer");
    g2 = c.generation;
    CHECK(g2 != g1);

    /* rewritten with the same content: same credential, same generation */
    write_file("token", "second-token-longer", 0600);
    CHECK(kinf_creds_get(cr, &c, msg, sizeof(msg)) == KINF_OK);
    CHECK(c.generation == g2);

    /* a 401 with an old generation changes nothing; with the current one forces a re-read */
    kinf_creds_invalidate(cr, g1);
    CHECK(kinf_creds_get(cr, &c, msg, sizeof(msg)) == KINF_OK && c.generation == g2);
    {
        /* same size and (possibly) same mtime: only the forced re-read can see it */
        char path[256];
        struct stat st;
        struct timespec times[2];
        snprintf(path, sizeof(path), "%s", path_of("token"));
        stat(path, &st);
        write_file("token", "second-token-LONGER", 0600);
        times[0] = st.st_atim;
        times[1] = st.st_mtim;
        utimensat(AT_FDCWD, path, times, 0);
        CHECK(kinf_creds_get(cr, &c, msg, sizeof(msg)) == KINF_OK);
        /* the inode is the same and size/mtime were restored: not re-read yet */
        CHECK_STR(c.token, "second-token-longer");
        kinf_creds_invalidate(cr, c.generation);
        CHECK(kinf_creds_get(cr, &c, msg, sizeof(msg)) == KINF_OK);
        CHECK_STR(c.token, "second-token-LONGER");
    }

    /* the file disappears: the last good token stays */
    unlink(path_of("token"));
    CHECK(kinf_creds_get(cr, &c, msg, sizeof(msg)) == KINF_OK);
    CHECK_STR(c.token, "second-token-LONGER");
    kinf_creds_free(cr);
}

/* A token file of n bytes of 'a' (no newline). */
static void write_big(const char *name, size_t n)
{
    char *text = malloc(n + 1);
    if (text == NULL)
        exit(2);
    memset(text, 'a', n);
    text[n] = '\0';
    write_file(name, text, 0600);
    free(text);
}

/* A FIFO, a device or an oversized file at the token path is refused at once: open never
 * blocks for a writer (SIGALRM would end the test), and no cut token is ever handed out. */
static void token_file_not_a_token_file(void)
{
    kinf_creds_config cc = {0};
    kinf_creds *cr;
    kinf_cred c;
    kinf_err err;
    char msg[256];

    alarm(10);
    setup();
    CHECK(mkfifo(path_of("fifo"), 0600) == 0);
    cc.token_file = path_of("fifo");
    CHECK(kinf_creds_new(&cc, &err, msg, sizeof(msg)) == NULL && err == KINF_EIO);
    CHECK(strstr(msg, "fifo: not a regular file") != NULL);
    cc.token_file = "/dev/zero";
    CHECK(kinf_creds_new(&cc, &err, msg, sizeof(msg)) == NULL && err == KINF_EIO);
    CHECK(strstr(msg, "not a regular file") != NULL);

    write_big("big", 64 * 1024 + 1);
    cc.token_file = path_of("big");
    CHECK(kinf_creds_new(&cc, &err, msg, sizeof(msg)) == NULL && err == KINF_EIO);
    CHECK(strstr(msg, "big: larger than 64 KiB") != NULL);
    write_big("big", 64 * 1024); /* the limit itself is fine */
    cr = kinf_creds_new(&cc, &err, msg, sizeof(msg));
    CHECK(cr != NULL);
    CHECK(kinf_creds_get(cr, &c, msg, sizeof(msg)) == KINF_OK && strlen(c.token) == 64 * 1024);
    kinf_creds_free(cr);

    /* Replaced while in use: the request fails with the cause (the old token is not sent on
     * as if nothing happened), and a token file put back is used again. */
    write_file("tok", "good-token\n", 0600);
    cc.token_file = path_of("tok");
    cr = kinf_creds_new(&cc, &err, msg, sizeof(msg));
    CHECK(cr != NULL);
    CHECK(kinf_creds_get(cr, &c, msg, sizeof(msg)) == KINF_OK);
    CHECK_STR(c.token, "good-token");
    unlink(path_of("tok"));
    CHECK(mkfifo(path_of("tok"), 0600) == 0);
    CHECK(kinf_creds_get(cr, &c, msg, sizeof(msg)) == KINF_EIO && c.token == NULL);
    CHECK(strstr(msg, "tok: not a regular file") != NULL);
    unlink(path_of("tok"));
    write_big("tok", 100 * 1024);
    CHECK(kinf_creds_get(cr, &c, msg, sizeof(msg)) == KINF_EIO && c.token == NULL);
    CHECK(strstr(msg, "tok: larger than 64 KiB") != NULL);
    write_file("tok", "next-token\n", 0600);
    CHECK(kinf_creds_get(cr, &c, msg, sizeof(msg)) == KINF_OK);
    CHECK_STR(c.token, "next-token");
    kinf_creds_free(cr);
    alarm(0);
}

#define CRED(tok, exp)                                                                        \
    "{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\","        \
    "\"status\":{\"token\":\"" tok "\",\"expirationTimestamp\":\"" exp "\"}}"

static void exec_caches_until_expiry_and_invalidation(void)
{
    kinf_creds *cr;
    kinf_cred c;
    unsigned long g;
    char msg[512];

    write_file("future.sh",
               "#!/bin/sh\n"
               "cat <<'EOF'\n" CRED("exec-token-1", "2999-01-01T00:00:00+01:00") "\nEOF\n",
               0700);
    cr = new_exec("future.sh", NULL, NULL, 0, msg, sizeof(msg));
    CHECK(cr != NULL);
    CHECK(kinf_creds_exec_runs(cr) == 0); /* not run before it is needed */
    CHECK(kinf_creds_get(cr, &c, msg, sizeof(msg)) == KINF_OK);
    CHECK_STR(c.token, "exec-token-1");
    g = c.generation;
    CHECK(kinf_creds_get(cr, &c, msg, sizeof(msg)) == KINF_OK);
    CHECK(kinf_creds_exec_runs(cr) == 1);
    kinf_creds_invalidate(cr, g - 1); /* an older generation: ignored */
    CHECK(kinf_creds_get(cr, &c, msg, sizeof(msg)) == KINF_OK);
    CHECK(kinf_creds_exec_runs(cr) == 1);
    kinf_creds_invalidate(cr, g);
    kinf_creds_invalidate(cr, g); /* twice for the same 401 generation: one re-run */
    CHECK(kinf_creds_get(cr, &c, msg, sizeof(msg)) == KINF_OK);
    CHECK(kinf_creds_get(cr, &c, msg, sizeof(msg)) == KINF_OK);
    CHECK(kinf_creds_exec_runs(cr) == 2);
    CHECK(c.generation != g);
    kinf_creds_free(cr);

    write_file("past.sh",
               "#!/bin/sh\n"
               "printf '%s' '" CRED("exec-token-2", "2000-01-01T00:00:00.5Z") "'\n",
               0700);
    cr = new_exec("past.sh", NULL, NULL, 0, msg, sizeof(msg));
    CHECK(kinf_creds_get(cr, &c, msg, sizeof(msg)) == KINF_OK);
    CHECK_STR(c.token, "exec-token-2");
    CHECK(kinf_creds_get(cr, &c, msg, sizeof(msg)) == KINF_OK);
    CHECK(kinf_creds_exec_runs(cr) == 2); /* expired: run each time */
    kinf_creds_free(cr);
}

static void exec_args_env_and_certificates(void)
{
    static const char *const args[] = {"--user", "bob", NULL};
    static const char *const env[] = {"KINF_TEST_SUFFIX=from-env", "HOME=/nowhere", NULL};
    kinf_creds *cr;
    kinf_cred c;
    char msg[512];

    write_file("args.sh",
               "#!/bin/sh\n"
               "[ \"$1\" = --user ] || exit 3\n"
               "[ -r /dev/stdin ] && [ -z \"$(cat)\" ] || exit 4\n" /* stdin is /dev/null */
               "printf '{\"kind\":\"ExecCredential\",\"apiVersion\":"
               "\"client.authentication.k8s.io/v1\",\"spec\":{\"interactive\":false},"
               "\"status\":{\"token\":\"%s-%s-%s\"}}' \"$2\" \"$KINF_TEST_SUFFIX\" \"$HOME\"\n",
               0700);
    cr = new_exec("args.sh", args, env, 0, msg, sizeof(msg));
    CHECK(kinf_creds_get(cr, &c, msg, sizeof(msg)) == KINF_OK);
    CHECK_STR(c.token, "bob-from-env-/nowhere");
    kinf_creds_free(cr);

    write_file("cert.sh",
               "#!/bin/sh\n"
               "cat <<'EOF'\n"
               "{ \"apiVersion\" : \"client.authentication.k8s.io/v1\", \"kind\": \"ExecCredential\",\n"
               "  \"status\": { \"clientCertificateData\": \"-----BEGIN CERTIFICATE-----\\nMIIB\\n"
               "-----END CERTIFICATE-----\\n\", \"clientKeyData\": \"-----BEGIN PRIVATE KEY-----"
               "\\nMIIE\\u0041\\n-----END PRIVATE KEY-----\\n\", \"expirationTimestamp\": null,\n"
               "  \"extra\": [1, 2.5e3, true, false, null, {\"a\": [\"\\ud83d\\ude00\"]}] } }\n"
               "EOF\n",
               0700);
    cr = new_exec("cert.sh", NULL, NULL, 0, msg, sizeof(msg));
    CHECK(kinf_creds_get(cr, &c, msg, sizeof(msg)) == KINF_OK);
    CHECK(c.token == NULL);
    CHECK_STR(c.cert_pem, "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n");
    CHECK_STR(c.key_pem, "-----BEGIN PRIVATE KEY-----\nMIIEA\n-----END PRIVATE KEY-----\n");
    CHECK(kinf_creds_get(cr, &c, msg, sizeof(msg)) == KINF_OK);
    CHECK(kinf_creds_exec_runs(cr) == 1); /* no expiry: cached */
    kinf_creds_free(cr);
}

/* The plugin's error must be clear, carry its stderr, and no secret. */
static void exec_failures(void)
{
    kinf_exec_config x = {0};
    kinf_creds_config cc = {0};
    kinf_creds *cr;
    kinf_cred c;
    kinf_err err;
    char msg[512];

    x.command = "kinformer-no-such-plugin";
    x.api_version = KINF_EXEC_API_V1;
    x.install_hint = "install it with: apt install kinformer-plugin";
    cc.exec = &x;
    cr = kinf_creds_new(&cc, &err, msg, sizeof(msg));
    CHECK(kinf_creds_get(cr, &c, msg, sizeof(msg)) == KINF_EIO);
    CHECK(strncmp(msg, "exec plugin: executable \"kinformer-no-such-plugin\" not found", 60) == 0);
    CHECK(strstr(msg, "; install it with: apt install kinformer-plugin") != NULL);
    CHECK(c.token == NULL);
    kinf_creds_free(cr);

    /* First run gives a token; the second fails, printing that token and the one it would
     * have returned to stderr: both are redacted, the rest of stderr is kept. */
    write_file("flaky.sh",
               "#!/bin/sh\n"
               "if [ -e \"$0.ran\" ]; then\n"
               "  printf '%s' '" CRED("new-secret-tok", "2999-01-01T00:00:00Z") "'\n"
               "  echo 'refresh failed for old-secret-tok and new-secret-tok' >&2\n"
               "  echo 'Authorization: Bearer abcdefgh1234 rejected' >&2\n"
               "  exit 7\n"
               "fi\n"
               "touch \"$0.ran\"\n"
               "printf '%s' '" CRED("old-secret-tok", "2999-01-01T00:00:00Z") "'\n",
               0700);
    cr = new_exec("flaky.sh", NULL, NULL, 0, msg, sizeof(msg));
    CHECK(kinf_creds_get(cr, &c, msg, sizeof(msg)) == KINF_OK);
    CHECK_STR(c.token, "old-secret-tok");
    kinf_creds_invalidate(cr, c.generation);
    CHECK(kinf_creds_get(cr, &c, msg, sizeof(msg)) == KINF_EIO);
    CHECK(strstr(msg, "failed with exit code 7: refresh failed for [redacted] and [redacted] "
                      "Authorization: Bearer [redacted] rejected") != NULL);
    CHECK(strstr(msg, "secret-tok") == NULL && strstr(msg, "abcdefgh") == NULL);
    kinf_creds_free(cr);

    write_file("badjson.sh", "#!/bin/sh\necho '{\"kind\":\"ExecCredential\",'\n", 0700);
    cr = new_exec("badjson.sh", NULL, NULL, 0, msg, sizeof(msg));
    CHECK(kinf_creds_get(cr, &c, msg, sizeof(msg)) == KINF_EPARSE);
    CHECK(strstr(msg, "malformed JSON at byte") != NULL);
    kinf_creds_free(cr);

    write_file("wrongver.sh",
               "#!/bin/sh\necho '{\"kind\":\"ExecCredential\",\"apiVersion\":"
               "\"client.authentication.k8s.io/v1beta1\",\"status\":{\"token\":\"abcd1234\"}}'\n",
               0700);
    cr = new_exec("wrongver.sh", NULL, NULL, 0, msg, sizeof(msg));
    CHECK(kinf_creds_get(cr, &c, msg, sizeof(msg)) == KINF_EPARSE);
    CHECK(strstr(msg, "plugin returned version \"client.authentication.k8s.io/v1beta1\"") != NULL);
    kinf_creds_free(cr);

    write_file("nostatus.sh",
               "#!/bin/sh\necho '{\"kind\":\"ExecCredential\",\"apiVersion\":"
               "\"client.authentication.k8s.io/v1\"}'\n",
               0700);
    cr = new_exec("nostatus.sh", NULL, NULL, 0, msg, sizeof(msg));
    CHECK(kinf_creds_get(cr, &c, msg, sizeof(msg)) == KINF_EPARSE);
    CHECK(strstr(msg, "didn't return a status") != NULL);
    kinf_creds_free(cr);

    write_file("certonly.sh",
               "#!/bin/sh\necho '{\"kind\":\"ExecCredential\",\"apiVersion\":"
               "\"client.authentication.k8s.io/v1\",\"status\":{\"clientCertificateData\":\"x\"}}'\n",
               0700);
    cr = new_exec("certonly.sh", NULL, NULL, 0, msg, sizeof(msg));
    CHECK(kinf_creds_get(cr, &c, msg, sizeof(msg)) == KINF_EPARSE);
    CHECK(strstr(msg, "only a certificate or a key") != NULL);
    kinf_creds_free(cr);

    write_file("badexp.sh",
               "#!/bin/sh\necho '" CRED("abcd1234", "tomorrow") "'\n", 0700);
    cr = new_exec("badexp.sh", NULL, NULL, 0, msg, sizeof(msg));
    CHECK(kinf_creds_get(cr, &c, msg, sizeof(msg)) == KINF_EPARSE);
    CHECK(strstr(msg, "bad expirationTimestamp \"tomorrow\"") != NULL);
    kinf_creds_free(cr);

    write_file("silent.sh", "#!/bin/sh\nexit 0\n", 0700);
    cr = new_exec("silent.sh", NULL, NULL, 0, msg, sizeof(msg));
    CHECK(kinf_creds_get(cr, &c, msg, sizeof(msg)) == KINF_EPARSE);
    CHECK(strstr(msg, "wrote nothing") != NULL);
    kinf_creds_free(cr);

    write_file("noexec.sh", "#!/bin/sh\nexit 0\n", 0600);
    cr = new_exec("noexec.sh", NULL, NULL, 0, msg, sizeof(msg));
    CHECK(kinf_creds_get(cr, &c, msg, sizeof(msg)) == KINF_EIO);
    /* glibc reports the exec failure; emulations (valgrind) show the child's exit 127 */
    CHECK(strstr(msg, "Permission denied") != NULL || strstr(msg, "not executable") != NULL);
    kinf_creds_free(cr);

    write_file("slow.sh", "#!/bin/sh\nexec sleep 10\n", 0700);
    cr = new_exec("slow.sh", NULL, NULL, 0.3, msg, sizeof(msg));
    {
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        CHECK(kinf_creds_get(cr, &c, msg, sizeof(msg)) == KINF_EIO);
        clock_gettime(CLOCK_MONOTONIC, &b);
        CHECK((double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9 < 3.0);
        CHECK(strstr(msg, "did not finish within 0.3 s") != NULL);
    }
    kinf_creds_free(cr);

    write_file("killed.sh", "#!/bin/sh\nkill -9 $$\n", 0700);
    cr = new_exec("killed.sh", NULL, NULL, 0, msg, sizeof(msg));
    CHECK(kinf_creds_get(cr, &c, msg, sizeof(msg)) == KINF_EIO);
    CHECK(strstr(msg, "killed by signal 9") != NULL);
    kinf_creds_free(cr);
}

static double mono_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* The pid a script wrote to file `name` in the folder (0: none yet). */
static long pid_in(const char *name)
{
    long pid = 0;
    FILE *f = fopen(path_of(name), "r");
    if (f != NULL) {
        if (fscanf(f, "%ld", &pid) != 1)
            pid = 0;
        fclose(f);
    }
    return pid;
}

/* Whether pid runs (a zombie or a gone process does not), within a second of grace. */
static int runs(long pid)
{
    for (int i = 0; i < 100; i++) {
        char path[64], buf[512], *rp;
        FILE *f;
        size_t n;
        snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
        if ((f = fopen(path, "r")) == NULL)
            return 0;
        n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = '\0';
        if ((rp = strrchr(buf, ')')) != NULL && (rp[2] == 'Z' || rp[2] == 'X'))
            return 0;
        {
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    return 1;
}

static void *interrupt_soon(void *cr)
{
    struct timespec ts = {0, 300 * 1000 * 1000};
    nanosleep(&ts, NULL);
    kinf_creds_interrupt(cr, 1);
    return NULL;
}

/* A plugin that starts a child (holding its stdout) and hangs: a timeout, and an interrupt from
 * another thread, end the run promptly and kill the plugin's whole process group. */
static void exec_hanging_plugin_and_its_children(void)
{
    kinf_creds *cr;
    kinf_cred c;
    pthread_t t;
    char script[512], msg[512];
    double t0;

    setup();
    snprintf(script, sizeof(script),
             "#!/bin/sh\nsleep 60 &\necho $! > %s/child.pid\necho $$ > %s/plugin.pid\n"
             "exec sleep 60\n", dir, dir);
    write_file("hang.sh", script, 0700);

    cr = new_exec("hang.sh", NULL, NULL, 0.5, msg, sizeof(msg));
    t0 = mono_now();
    CHECK(kinf_creds_get(cr, &c, msg, sizeof(msg)) == KINF_EIO);
    CHECK(mono_now() - t0 < 3.0);
    CHECK(strstr(msg, "did not finish within 0.5 s") != NULL);
    CHECK(pid_in("plugin.pid") > 0 && !runs(pid_in("plugin.pid")));
    CHECK(pid_in("child.pid") > 0 && !runs(pid_in("child.pid")));
    kinf_creds_free(cr);
    unlink(path_of("plugin.pid"));
    unlink(path_of("child.pid"));

    cr = new_exec("hang.sh", NULL, NULL, 30, msg, sizeof(msg));
    CHECK(pthread_create(&t, NULL, interrupt_soon, cr) == 0);
    t0 = mono_now();
    CHECK(kinf_creds_get(cr, &c, msg, sizeof(msg)) == KINF_EIO);
    CHECK(mono_now() - t0 < 2.0);
    pthread_join(t, NULL);
    CHECK(strstr(msg, "was stopped before it finished") != NULL);
    CHECK(pid_in("plugin.pid") > 0 && !runs(pid_in("plugin.pid")));
    CHECK(pid_in("child.pid") > 0 && !runs(pid_in("child.pid")));
    /* Still interrupted: a new run ends at once. */
    t0 = mono_now();
    CHECK(kinf_creds_get(cr, &c, msg, sizeof(msg)) == KINF_EIO);
    CHECK(mono_now() - t0 < 1.0);
    kinf_creds_interrupt(cr, 0);
    kinf_creds_free(cr);
}

/* Another thread keeps opening descriptors while plugins run: none of them may be closed
 * under it (a descriptor closed twice by the spawn code would be one of these). */
static atomic_int churn_stop;
static atomic_int churn_failures;

static void *churn(void *arg)
{
    (void)arg;
    while (!atomic_load(&churn_stop)) {
        int fds[2];
        if (pipe(fds) != 0)
            continue;
        for (int i = 0; i < 50; i++) {
            if (fcntl(fds[0], F_GETFD) < 0 || fcntl(fds[1], F_GETFD) < 0)
                atomic_fetch_add(&churn_failures, 1);
        }
        close(fds[0]);
        close(fds[1]);
    }
    return NULL;
}

static void exec_never_closes_foreign_descriptors(void)
{
    kinf_creds *cr;
    kinf_cred c;
    pthread_t t;
    char msg[512];

    write_file("quick.sh",
               "#!/bin/sh\nprintf '%s' '" CRED("quick-token", "2000-01-01T00:00:00Z") "'\n"
               "echo done >&2\n",
               0700);
    cr = new_exec("quick.sh", NULL, NULL, 0, msg, sizeof(msg));
    atomic_store(&churn_stop, 0);
    atomic_store(&churn_failures, 0);
    CHECK(pthread_create(&t, NULL, churn, NULL) == 0);
    for (int i = 0; i < 40; i++)
        CHECK(kinf_creds_get(cr, &c, msg, sizeof(msg)) == KINF_OK);
    atomic_store(&churn_stop, 1);
    pthread_join(t, NULL);
    CHECK(atomic_load(&churn_failures) == 0);
    kinf_creds_free(cr);
}

static void redaction(void)
{
    kinf_creds_config cc = {0};
    kinf_creds *cr;
    kinf_err err;
    char msg[256], small[24];

    cc.token = "tok-ABCDEFGH";
    cr = kinf_creds_new(&cc, &err, msg, sizeof(msg));
    snprintf(msg, sizeof(msg), "sent tok-ABCDEFGH twice: tok-ABCDEFGH; Bearer other-token-9 done; "
             "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEE\n-----END EC PRIVATE KEY----- end");
    kinf_creds_redact(cr, msg, sizeof(msg));
    CHECK_STR(msg, "sent [redacted] twice: [redacted]; Bearer [redacted] done; [redacted] end");
    CHECK(kinf_creds_add_secret(cr, "proxy-pw-1234") == KINF_OK);
    CHECK(kinf_creds_add_secret(cr, "") == KINF_OK);
    snprintf(msg, sizeof(msg), "via http://bob:proxy-pw-1234@proxy failed");
    kinf_creds_redact(cr, msg, sizeof(msg));
    CHECK_STR(msg, "via http://bob:[redacted]@proxy failed");
    kinf_creds_free(cr);
    /* not enough room for the longer marker: the message is cut, never left with the secret */
    cc.token = "abcdefg";
    cr = kinf_creds_new(&cc, &err, msg, sizeof(msg));
    snprintf(small, sizeof(small), "x abcdefg yz");
    kinf_creds_redact(cr, small, 13);
    CHECK_STR(small, "x [redacted]");
    snprintf(small, sizeof(small), "x abcdefg");
    kinf_creds_redact(cr, small, 10);
    CHECK_STR(small, "x ");
    kinf_creds_free(cr);
    /* a short password is not treated as a secret word (it would blank out ordinary text) */
    snprintf(msg, sizeof(msg), "Bearer abc");
    kinf_creds_redact(NULL, msg, sizeof(msg));
    CHECK_STR(msg, "Bearer abc");
}

TEST_MAIN(TEST(static_token_and_basic), TEST(bad_configs), TEST(token_file),
          TEST(token_file_not_a_token_file),
          TEST(exec_caches_until_expiry_and_invalidation), TEST(exec_args_env_and_certificates),
          TEST(exec_failures), TEST(exec_hanging_plugin_and_its_children),
          TEST(exec_never_closes_foreign_descriptors), TEST(redaction))
