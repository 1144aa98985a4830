/* test_shm_readers.c - the reader table's liveness (shm.c): a reader that exited and was not
 * waited for (a zombie) and a slot whose pid now belongs to another process (a reused pid) are
 * reaped and hold nothing back; a reader stopped (SIGSTOP) inside its read section holds back
 * what was retired since, and only that, until it resumes or dies, while the writer goes on. */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ctest.h"
#include "shm.h"

static kinf_shm *new_shm(size_t size)
{
    kinf_err err;
    kinf_shm *shm = kinf_shm_create(size, &err);
    CHECK(shm != NULL && err == KINF_OK);
    return shm;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The state letter of /proc/PID/stat ('?' when unreadable). */
static char proc_state(pid_t pid)
{
    char path[64], buf[512], *p;
    FILE *f;
    size_t n;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    f = fopen(path, "r");
    if (f == NULL)
        return '?';
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    p = strrchr(buf, ')');
    return p != NULL && p[1] == ' ' ? p[2] : '?';
}

/* Waits (at most 10 s) until pid's state is `state`. */
static int wait_state(pid_t pid, char state)
{
    double end = now() + 10;
    while (proc_state(pid) != state) {
        if (now() > end)
            return 0;
        usleep(1000);
    }
    return 1;
}

/* A forked reader: opens a slot, enters a read section, sets its bit in *holders, tells the
 * parent (one byte on fd), then does `then` ('x': exits inside the section, 's': stops itself
 * and, once continued, leaves the section and exits). */
static pid_t fork_reader(kinf_shm *shm, _Atomic uint64_t *holders, int fd, char then)
{
    pid_t child = fork();
    if (child != 0)
        return child;
    int slot = kinf_shm_reader_open(shm, getpid());
    if (slot < 0)
        _exit(1);
    kinf_shm_read_begin(shm, slot);
    atomic_fetch_or(holders, 1ull << slot);
    if (write(fd, "r", 1) != 1)
        _exit(2);
    if (then == 's') {
        raise(SIGSTOP);
        atomic_fetch_and(holders, ~(1ull << slot));
        kinf_shm_read_end(shm, slot);
        kinf_shm_reader_close(shm, slot);
    }
    _exit(0);
}

static int await_byte(int fd)
{
    char c;
    return read(fd, &c, 1) == 1;
}

static void a_zombie_reader_is_reaped_and_holds_nothing_back(void)
{
    kinf_shm *shm = new_shm(1 << 20);
    kinf_shm_off held = kinf_shm_alloc(shm, 100), plain = kinf_shm_alloc(shm, 100);
    _Atomic uint64_t *holders = kinf_shm_root(shm, 0);
    kinf_shm_stats st;
    int fds[2], status;
    pid_t child;

    CHECK(pipe(fds) == 0);
    child = fork_reader(shm, holders, fds[1], 'x');
    CHECK(await_byte(fds[0]));
    CHECK(wait_state(child, 'Z')); /* exited, not waited for: kill(pid, 0) still succeeds */
    CHECK(kill(child, 0) == 0);
    CHECK(atomic_load(holders) != 0);
    CHECK(kinf_shm_retire_held(shm, held, holders) == KINF_OK);
    CHECK(kinf_shm_retire(shm, plain) == KINF_OK);
    CHECK(kinf_shm_reclaim(shm) == 0); /* its section and its bit go with it */
    CHECK(atomic_load(holders) == 0);
    kinf_shm_stats_get(shm, &st);
    CHECK(st.readers == 0);
    CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0);

    /* reap_readers (the writer's periodic sweep) frees a zombie's slot too */
    child = fork_reader(shm, holders, fds[1], 'x');
    CHECK(await_byte(fds[0]));
    CHECK(wait_state(child, 'Z'));
    CHECK(kinf_shm_reap_readers(shm) == 1);
    kinf_shm_stats_get(shm, &st);
    CHECK(st.readers == 0);
    CHECK(waitpid(child, &status, 0) == child);
    close(fds[0]);
    close(fds[1]);
    kinf_shm_close(shm);
}

static void a_slot_whose_pid_was_reused_is_reaped(void)
{
    kinf_shm *shm = new_shm(1 << 20);
    kinf_shm_off a = kinf_shm_alloc(shm, 100), b = kinf_shm_alloc(shm, 100);
    uint64_t start;
    kinf_shm_stats st;
    int slot, status;
    pid_t other = fork();

    if (other == 0) { /* a live process that is not the slot's */
        for (;;)
            pause();
    }
    CHECK(wait_state(other, 'S'));
    start = kinf_shm_process_start(other);
    CHECK(start != 0);
    /* The slot of a process that had other's pid before: it started at another time. It died in
     * its read section; other, alive, now has the pid. */
    slot = kinf_shm_reader_open_as(shm, other, start + 7);
    CHECK(slot >= 0);
    kinf_shm_read_begin(shm, slot);
    CHECK(kinf_shm_retire(shm, a) == KINF_OK);
    CHECK(kinf_shm_reclaim(shm) == 0);
    kinf_shm_stats_get(shm, &st);
    CHECK(st.readers == 0);

    /* The same pid with its own start time is the live process: it holds its section. */
    slot = kinf_shm_reader_open_as(shm, other, start);
    CHECK(slot >= 0);
    kinf_shm_read_begin(shm, slot);
    CHECK(kinf_shm_retire(shm, b) == KINF_OK);
    CHECK(kinf_shm_reclaim(shm) == 1);
    CHECK(kinf_shm_reap_readers(shm) == 0);
    kill(other, SIGKILL);
    CHECK(waitpid(other, &status, 0) == other);
    CHECK(kinf_shm_reclaim(shm) == 0); /* gone for good: reaped */
    kinf_shm_stats_get(shm, &st);
    CHECK(st.readers == 0);
    kinf_shm_close(shm);
}

/* The bound on a reader stopped inside its section (shm.h, Limit): everything retired since it
 * began waits, nothing is freed under it, the writer is never blocked and fails its
 * allocations cleanly once the segment is full; it resumes and everything goes, or it is killed
 * and reaped. */
static void a_stopped_reader_holds_back_what_was_retired_until_it_moves_on(void)
{
    for (int round = 0; round < 2; round++) {
        kinf_shm *shm = new_shm(1 << 20);
        _Atomic uint64_t *holders = kinf_shm_root(shm, 0);
        kinf_shm_off blocks[64];
        kinf_shm_stats st;
        int fds[2], status;
        double t0;
        pid_t child;

        CHECK(pipe(fds) == 0);
        child = fork_reader(shm, holders, fds[1], 's');
        CHECK(await_byte(fds[0]));
        CHECK(waitpid(child, &status, WUNTRACED) == child && WIFSTOPPED(status));
        for (int i = 0; i < 64; i++) {
            blocks[i] = kinf_shm_alloc(shm, 100);
            memset(kinf_shm_ptr(shm, blocks[i]), 'a' + i % 26, 100);
            CHECK(kinf_shm_retire(shm, blocks[i]) == KINF_OK);
        }
        t0 = now();
        CHECK(kinf_shm_reclaim(shm) == 64);
        CHECK(kinf_shm_reap_readers(shm) == 0); /* stopped is alive */
        CHECK(now() - t0 < 1.0);                /* and never waited for */
        /* Nothing retired was handed out again: the stopped reader may be reading any of it. */
        for (;;) {
            kinf_shm_off off = kinf_shm_alloc(shm, 100);
            if (off == 0)
                break;
            for (int i = 0; i < 64; i++)
                CHECK(off != blocks[i]);
        }
        kinf_shm_stats_get(shm, &st);
        CHECK(st.alloc_failures >= 1 && st.retired == 64);
        for (int i = 0; i < 64; i++) {
            const unsigned char *p = kinf_shm_ptr(shm, blocks[i]);
            CHECK(p[0] == 'a' + i % 26 && p[99] == 'a' + i % 26);
        }
        if (round == 0) {
            kill(child, SIGCONT);
            CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) &&
                  WEXITSTATUS(status) == 0);
        } else {
            kill(child, SIGKILL);
            CHECK(waitpid(child, &status, 0) == child);
        }
        CHECK(kinf_shm_reclaim(shm) == 0);
        kinf_shm_stats_get(shm, &st);
        CHECK(st.readers == 0 && st.retired == 0);
        close(fds[0]);
        close(fds[1]);
        kinf_shm_close(shm);
    }
}

static void the_start_time_is_the_processs_own(void)
{
    uint64_t mine = kinf_shm_process_start(getpid());
    CHECK(mine != 0);
    CHECK(kinf_shm_process_start(getpid()) == mine);
    CHECK(kinf_shm_process_start(0) == 0);
    CHECK(kinf_shm_process_start(-1) == 0);
}

TEST_MAIN(TEST(a_zombie_reader_is_reaped_and_holds_nothing_back),
          TEST(a_slot_whose_pid_was_reused_is_reaped),
          TEST(a_stopped_reader_holds_back_what_was_retired_until_it_moves_on),
          TEST(the_start_time_is_the_processs_own))
