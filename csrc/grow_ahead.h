/*
 * grow_ahead.h - makes a thread's malloc arena grow in big steps, its pages faulted in at once.
 *
 * Contract: a thread that makes many allocations in a row which stay alive for a while (the
 * scanner thread's records, the I/O thread's queue entries during a list) calls
 * kinf_grow_ahead(size) before each malloc of size. Every GROW_AHEAD_EVERY bytes, a malloc +
 * free of GROW_AHEAD_BYTES grows the thread's arena by that much at once and faults the block's
 * pages in with one call, instead of one mprotect (glibc's non-main arenas grow by what each
 * malloc lacks) and one page fault per 4 KiB page. RSS runs at most GROW_AHEAD_BYTES ahead of
 * what the thread uses. A hint: nothing fails, other allocators just serve and take back one
 * block. State is per thread; no lock.
 */
#ifndef KINF_GROW_AHEAD_H
#define KINF_GROW_AHEAD_H

#include <stddef.h>

void kinf_grow_ahead(size_t size);
/* Faults in the whole pages of [block, block + len) at once, as written (MADV_POPULATE_WRITE):
 * for a big fresh allocation about to be written all over. A hint: nothing fails. */
void kinf_populate(void *block, size_t len);

#endif
