/* SPDX-License-Identifier: Apache-2.0 */
/*
 * progress: the one-line progress bar of a long operation: a write
 * (ckptfs-convert, a mount's save), a non-seekable zstd file decompressed
 * at open, the reads of ckptfs-stat and ckptfs-diff.  In codec/core so
 * that the formats' layers (codec/zstd) may count too, without including
 * the saving layer.
 *
 * The worker counts bytes as they are done (a writer's sink adds each
 * piece, ck_sink_piece; a reader each chunk), and the bar is redrawn on
 * stderr from that count, at most 10 times a second: bytes done of the
 * total, the rate and the time left.  ck_progress_start draws the first
 * line and ck_progress_end the final count, then clears the line, so a
 * bar that is on always shows both whatever the timing.  A progress that
 * is off (stderr is not a terminal, --quiet) counts and prints nothing.
 *
 * ck_progress_add may be called from several threads at once (the reader
 * threads of ckptfs-stat): the count is atomic, and of the threads that
 * find a redraw due, one draws and the others go on (a try-lock, an
 * atomic exchange), so the line is never drawn twice at once, no counting
 * thread waits on the terminal, and ThreadSanitizer sees no race;
 * ck_progress_end runs after the threads are joined.
 *
 * Who hands a progress on: a write's sink carries the one its commit group
 * or the snapshot writer gives it; an open's is ck_open_opts.progress (the
 * FILE * to draw on, which the tools' cli_open and the mount command's
 * first open set when stderr is a terminal), counting a zstd file's
 * plaintext when its frames declare it, else its compressed bytes against
 * the file's size.
 */
#ifndef CK_PROGRESS_H
#define CK_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

typedef struct ck_progress {
    bool on;
    FILE *out;                  /* stderr */
    uint64_t done, total;
    struct timespec start;
    int64_t last_ns;            /* the last draw, ns after start (atomic) */
    bool drawing;               /* a thread is drawing (atomic: the try-lock) */
    bool drawn;                 /* a line is on the terminal, to be cleared */
} ck_progress;

/* Start counting towards total bytes; on: count, and draw to out unless
 * it is NULL (pass ck_progress_wanted's answer).  A count without a bar
 * is read by another thread (ck_progress_read): a mount's save, shown in
 * an attribute while it runs.  Before the counting threads start. */
void ck_progress_start(ck_progress *p, uint64_t total, bool on, FILE *out);
/* From any thread: whether it counts, and the count so far. */
bool ck_progress_read(const ck_progress *p, uint64_t *done, uint64_t *total);
/* Whether a bar belongs on f: a terminal, and not quiet. */
bool ck_progress_wanted(FILE *f, bool quiet);
/* n more bytes done (p may be NULL), from any thread. */
void ck_progress_add(ck_progress *p, uint64_t n);
/* Draw the final count and clear the line; once the counting threads are
 * done.  A second call does nothing (p may be NULL). */
void ck_progress_end(ck_progress *p);

#endif
