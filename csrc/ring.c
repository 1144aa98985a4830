/*
 * ring.c - rendezvous hashing (ring.h), on the maps' word hash (map.h).
 */
#include "ring.h"

#include "map.h"

#define MEMBER_SEED 0x6b696e666f726d72ULL /* any fixed value: every replica must use the same */

uint64_t kinf_ring_member_seed(const char *member, size_t len)
{
    return kinf_hash_bytes(MEMBER_SEED, member, len);
}

size_t kinf_ring_owner(const uint64_t *seeds, size_t n, const char *key, size_t len)
{
    size_t best = (size_t)-1;
    uint64_t top = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t w = kinf_hash_bytes(seeds[i], key, len);
        if (best == (size_t)-1 || w > top) {
            best = i;
            top = w;
        }
    }
    return best;
}
