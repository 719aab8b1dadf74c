/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests of the progress bar (codec/core/progress.h) as the reader
 * threads of ckptfs-stat and ckptfs-diff use it: several threads adding at
 * once count every byte, whatever draws; the bar's first and last lines
 * are always drawn, whole, and the line is cleared at the end; a progress
 * that is off, or NULL, prints nothing.  Nothing here depends on timing:
 * the lines drawn in between are only checked to be whole.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../codec/core/progress.h"
#include "unit.h"

#define THREADS 4
#define ADDS 20000u

static void *adder(void *arg)
{
    ck_progress *p = arg;
    for (unsigned i = 0; i < ADDS; i++)
        ck_progress_add(p, 3);
    return NULL;
}

/* What f holds, NUL-terminated (free it). */
static char *contents(FILE *f, size_t *n)
{
    fflush(f);
    long len = ftell(f);
    char *s = malloc(len > 0 ? (size_t)len + 1 : 1);
    rewind(f);
    *n = len > 0 ? fread(s, 1, (size_t)len, f) : 0;
    s[*n] = '\0';
    return s;
}

static bool starts_with(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* Every drawing is "\r[" ... "\033[K", and the text ends with the clear. */
static int whole_lines(const char *s)
{
    const char *clear = "\r\033[K";
    size_t n = strlen(s), c = strlen(clear);
    if (n < c || strcmp(s + n - c, clear) != 0)
        return 0;
    for (const char *p = s; p < s + n - c;) {
        const char *end = strstr(p, "\033[K");
        if (strncmp(p, "\r[", 2) != 0 || end == NULL)
            return 0;
        p = end + 3;
    }
    return 1;
}

static void threads_count_every_byte(void)
{
    FILE *out = tmpfile();
    ck_progress p;
    uint64_t total = (uint64_t)THREADS * ADDS * 3, done = 0, of = 0;
    ck_progress_start(&p, total, true, out);
    pthread_t tid[THREADS];
    for (int i = 0; i < THREADS; i++)
        pthread_create(&tid[i], NULL, adder, &p);
    for (int i = 0; i < THREADS; i++)
        pthread_join(tid[i], NULL);
    bool counting = ck_progress_read(&p, &done, &of);
    check(counting && done == total && of == total,
          "progress: %d threads adding at once count every byte (%llu of %llu)", THREADS,
          (unsigned long long)done, (unsigned long long)of);
    ck_progress_end(&p);
    ck_progress_end(&p); /* a second end: nothing more */
    check(!ck_progress_read(&p, &done, &of), "progress: ended, it no longer counts");
    size_t n;
    char *s = contents(out, &n);
    check(starts_with(s, "\r[------------------------]   0% 0 B / 234.4 KiB  0 B/s  ETA "),
          "progress: the first line, drawn at start, is 0%% of the total");
    const char *last = NULL;
    for (const char *q = s; (q = strstr(q, "\r[")) != NULL; q++)
        last = q;
    check(last != NULL &&
              starts_with(last, "\r[########################] 100% 234.4 KiB / 234.4 KiB  ") &&
              strstr(last, "ETA 0:00\033[K\r\033[K") != NULL,
          "progress: the last line, drawn at the end, is the whole total");
    check(whole_lines(s), "progress: every line drawn is whole, and the line is cleared last");
    free(s);
    fclose(out);
}

static void off_prints_nothing(void)
{
    FILE *out = tmpfile();
    ck_progress p;
    ck_progress_start(&p, 100, false, out);
    ck_progress_add(&p, 50);
    ck_progress_end(&p);
    ck_progress_add(NULL, 5);
    ck_progress_end(NULL);
    size_t n;
    char *s = contents(out, &n);
    check(n == 0, "progress: off (not a terminal, -q), and NULL: nothing printed");
    free(s);
    fclose(out);
}

void test_progress(void)
{
    threads_count_every_byte();
    off_prints_nothing();
}
