/* SPDX-License-Identifier: Apache-2.0 */
/*
 * progress: the one-line progress bar of a long write (ckptfs-convert).
 *
 * The writer counts the bytes of tensor content as they reach the output
 * (ck_sink_piece adds them when a sink carries a progress), and the bar is
 * redrawn on stderr from that count, at most 10 times a second: bytes done
 * of the total, the rate and the time left.  ck_progress_end draws the
 * final count once and clears the line.  A progress that is off (stderr is
 * not a terminal, --quiet) counts and prints nothing.
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
    struct timespec start, last;
    bool drawn;                 /* a line is on the terminal, to be cleared */
} ck_progress;

/* Start counting towards total bytes; on: count, and draw to out unless
 * it is NULL (pass ck_progress_wanted's answer).  A count without a bar
 * is read by another thread (ck_progress_read): a mount's save, shown in
 * an attribute while it runs. */
void ck_progress_start(ck_progress *p, uint64_t total, bool on, FILE *out);
/* From any thread: whether it counts, and the count so far. */
bool ck_progress_read(const ck_progress *p, uint64_t *done, uint64_t *total);
/* Whether a bar belongs on f: a terminal, and not quiet. */
bool ck_progress_wanted(FILE *f, bool quiet);
/* n more bytes written (p may be NULL). */
void ck_progress_add(ck_progress *p, uint64_t n);
/* Draw the final count and clear the line. */
void ck_progress_end(ck_progress *p);

#endif
