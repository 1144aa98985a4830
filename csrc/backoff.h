/*
 * backoff.h - the reflector's backoff manager (client-go's exponential backoff with jitter) and
 * the small random source it draws from.
 *
 * Contract:
 * - kinf_backoff_next(b, now) returns how long to wait before the next try: the current step
 *   plus a random jitter of up to 100% of it (d + rand * d), the step doubling after each use up
 *   to `max`, and starting over from `initial` when the previous use is more than 2 minutes old.
 * - Each backoff has its own random state, seeded from the operating system (kinf_random_seed):
 *   reflectors created at the same moment draw different numbers, so their retries after a
 *   shared outage spread out.
 * - kinf_rand01 is the generator itself (xorshift64), for other jitter (the watch's
 *   timeoutSeconds): not for anything secret.
 *
 * Threads: a backoff (and a random state) belongs to one thread at a time; no locking.
 */
#ifndef KINF_BACKOFF_H
#define KINF_BACKOFF_H

#include <stdint.h>

typedef struct kinf_backoff {
    double initial, max;
    double step;    /* the next wait before jitter */
    double used_at; /* when it was last used, 0: never */
    uint64_t rng;
} kinf_backoff;

/* A uniform double in [0, 1); *state must not be 0 (kinf_rand_seed gives one). */
double kinf_rand01(uint64_t *state);
/* A fresh random state from the operating system. */
uint64_t kinf_rand_seed(void);

void kinf_backoff_init(kinf_backoff *b, double initial, double max);
/* The wait before the next try (seconds), at `now` (monotonic seconds). */
double kinf_backoff_next(kinf_backoff *b, double now);

#endif
