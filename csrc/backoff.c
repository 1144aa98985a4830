/*
 * backoff.c - backoff manager and xorshift random source (contract in backoff.h).
 */
#include "backoff.h"

#include "kinf.h"

/* A backoff not used for this long starts over from its initial step (client-go's
 * backoff manager resets after 2 minutes without a failure). */
#define BACKOFF_RESET 120.0

double kinf_rand01(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    return (double)(x >> 11) / (double)(1ULL << 53);
}

uint64_t kinf_rand_seed(void)
{
    return (uint64_t)kinf_random_seed(); /* never 0 */
}

void kinf_backoff_init(kinf_backoff *b, double initial, double max)
{
    b->initial = initial;
    b->max = max;
    b->step = initial;
    b->used_at = 0;
    b->rng = kinf_rand_seed();
}

double kinf_backoff_next(kinf_backoff *b, double now)
{
    double d;
    if (b->used_at > 0 && now - b->used_at > BACKOFF_RESET)
        b->step = b->initial;
    d = b->step;
    b->step = b->step * 2 > b->max ? b->max : b->step * 2;
    b->used_at = now;
    return d + kinf_rand01(&b->rng) * d;
}
