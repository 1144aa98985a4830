/* grow_ahead.c - a thread's malloc arena grown in big steps (contract in grow_ahead.h).
 *
 * Why: glibc gives each thread that allocates an arena of its own, whose heap grows only by what
 * each malloc lacks, with one mprotect per growth: one syscall (and VMA update) per record while
 * a list or a burst of events fills memory, which was 12% of a 100k-pod list's CPU
 * (docs/reflector.md). The freed block rejoins the arena's top (below glibc's 128 KiB trim
 * threshold, so it is kept) and the next allocations are carved from it.
 *
 * Its pages are faulted in at once (MADV_POPULATE_WRITE, Linux 5.14): a list fills hundreds of
 * MB of fresh pages, and one page fault per 4 KiB page cost more than the kernel zeroing them.
 * Where the kernel does not know the advice the thread stops asking.
 */
#include "grow_ahead.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#define GROW_AHEAD_EVERY (96u * 1024u)
#define GROW_AHEAD_BYTES (120u * 1024u)
#define HUGE_PAGE ((uintptr_t)2 << 20)
#define HUGE_MIN ((size_t)4 << 20)

void kinf_populate(void *block, size_t len)
{
#ifdef MADV_HUGEPAGE
    if (len >= HUGE_MIN) {
        /* Big and probed at random (a map's slots): 2 MiB pages where the kernel has them for
         * whoever asks (transparent_hugepage "madvise" or "always") spare a TLB miss per
         * probe. Failure changes nothing. */
        uintptr_t hs = ((uintptr_t)block + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1);
        uintptr_t he = ((uintptr_t)block + len) & ~(uintptr_t)(HUGE_PAGE - 1);
        if (he > hs)
            (void)madvise((void *)hs, he - hs, MADV_HUGEPAGE);
    }
#endif
#ifdef MADV_POPULATE_WRITE
    static _Thread_local int refused;
    static _Thread_local size_t page;
    uintptr_t start, end;

    if (refused)
        return;
    if (page == 0) {
        long ps = sysconf(_SC_PAGESIZE);
        page = ps > 0 ? (size_t)ps : 4096;
    }
    start = ((uintptr_t)block + page - 1) & ~(uintptr_t)(page - 1);
    end = ((uintptr_t)block + len) & ~(uintptr_t)(page - 1);
    /* EINVAL: a kernel without the advice (before 5.14). Anything else (ENOMEM, EINTR) only
     * means these pages fault in one by one, as they would have. */
    if (end > start && madvise((void *)start, end - start, MADV_POPULATE_WRITE) != 0 &&
        errno == EINVAL)
        refused = 1;
#else
    (void)block;
    (void)len;
#endif
}

void kinf_grow_ahead(size_t size)
{
    static _Thread_local size_t since;
    void *volatile block; /* volatile: the compiler may not drop the malloc + free pair */

    since += size;
    if (since < GROW_AHEAD_EVERY)
        return;
    since = 0;
    block = malloc(GROW_AHEAD_BYTES);
    if (block != NULL)
        kinf_populate(block, GROW_AHEAD_BYTES);
    free(block);
}
