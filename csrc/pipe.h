/*
 * pipe.h - a bounded queue of received bytes and the thread that consumes them.
 *
 * Why: the client's I/O thread receives response bodies (libcurl) and the reflectors scan them
 * (jsonscan + object records + DeltaFIFO). Done on one thread the two costs add up; through a
 * pipe, receiving the next bytes overlaps with scanning the previous ones.
 *
 * Contract:
 * - A writer (one thread: the client's I/O thread) hands bytes for a `target` (a reflector) with
 *   kinf_pipe_write; the pipe copies them into fixed-size blocks and its consumer thread calls
 *   the block's `fn(target, bytes, len)` in write order. Bytes of one target are delivered in
 *   order and never merged with another target's; they may be split anywhere (consumers are
 *   streaming scanners: any split is fine; a block goes to fn in steps of 16 KiB).
 * - Memory is bounded: at most max_blocks blocks of block_size bytes. A write that finds every
 *   block in use waits until the consumer returns one (the consumer never waits for the writer,
 *   so this wait is bounded by the time to consume one block).
 * - kinf_pipe_flush(target) returns once everything written for target has been consumed:
 *   afterwards the writer may read and reset what the consumer wrote (the pipe's mutex orders
 *   the accesses). kinf_pipe_cancel(target) drops what was not consumed yet and waits until fn
 *   no longer runs for target.
 * - The consumer thread starts at the first write (never at creation, so creating a client
 *   before nginx forks starts no thread) and is joined by kinf_pipe_free.
 *
 * Threads: write / flush / cancel from the writer thread only; new / free from the owner (free
 * after the writer thread has ended). fn runs on the consumer thread, never while the pipe's
 * mutex is held, and must not call into the pipe.
 *
 * Ownership: the pipe owns its blocks; bytes passed to write are copied (the caller keeps its
 * buffer). Targets are not owned: the writer guarantees a target outlives its queued bytes
 * (cancel before freeing one).
 */
#ifndef KINF_PIPE_H
#define KINF_PIPE_H

#include <stddef.h>

#include "kinf.h"

typedef struct kinf_pipe kinf_pipe;
typedef void (*kinf_pipe_fn)(void *target, const char *buf, size_t len);

/* block_size >= 4096 and max_blocks >= 2, else KINF_EINVAL. */
kinf_pipe *kinf_pipe_new(size_t block_size, size_t max_blocks, kinf_err *err);

/* Copies len bytes for target (fn consumes them). KINF_ENOMEM when a block or the thread cannot
 * be created; nothing of this call is queued then (bytes of earlier calls stay queued). */
kinf_err kinf_pipe_write(kinf_pipe *p, kinf_pipe_fn fn, void *target, const char *buf,
                         size_t len);

void kinf_pipe_flush(kinf_pipe *p, void *target);
void kinf_pipe_cancel(kinf_pipe *p, void *target);

/* Joins the consumer (queued bytes are dropped, not consumed) and frees; accepts NULL. */
void kinf_pipe_free(kinf_pipe *p);

#endif
