/*
 * ring.h - rendezvous hashing (highest random weight): which of n members owns a key.
 *
 * Contract:
 * - kinf_ring_owner(seeds, n, key, len) returns the index of the member whose weight for key
 *   is the highest (seeds[i] = kinf_ring_member_seed of member i's name); the weight of (member, key) is a 64-bit hash of the key seeded with a hash
 *   of the member's name, ties broken by the lower index. The answer depends only on the names
 *   and the key, never on the order of members (but for exact ties) nor on the process: every
 *   replica that sees the same members computes the same owner (the hash reads 8-byte words in
 *   the machine's byte order: replicas on little-endian machines agree, which all of
 *   Kubernetes' architectures are).
 * - When a member leaves, only its keys move (each to the member with its next highest
 *   weight); when one joins, it takes about 1/n of every other member's keys. Keys spread
 *   evenly: n members each own 1/n of the keys within the binomial spread.
 * - n == 0 returns (size_t)-1.
 *
 * Threads: any; nothing is kept.
 */
#ifndef KINF_RING_H
#define KINF_RING_H

#include <stddef.h>
#include <stdint.h>

/* The seed of a member's weights, from its name (computed once per member). */
uint64_t kinf_ring_member_seed(const char *member, size_t len);

/* The index in seeds[0..n) of the member that owns key. */
size_t kinf_ring_owner(const uint64_t *seeds, size_t n, const char *key, size_t len);

#endif
