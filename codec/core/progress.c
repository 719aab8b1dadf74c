/* SPDX-License-Identifier: Apache-2.0 */
/*
 * progress: the bar of progress.h.  Redrawing is rate-limited by the
 * monotonic clock so that a copy in small pieces does not flood the
 * terminal; the count itself is exact.
 */
#include "progress.h"

#include <unistd.h>

#define REDRAW_NS 100000000ll /* 10 a second */
#define BAR_COLS 24

static long long ns_between(const struct timespec *a, const struct timespec *b)
{
    return (b->tv_sec - a->tv_sec) * 1000000000ll + (b->tv_nsec - a->tv_nsec);
}

/* "12.3 MiB" into out. */
static void human(double v, char *out, size_t cap)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    unsigned u = 0;
    while (v >= 1024 && u + 1 < sizeof unit / sizeof unit[0]) {
        v /= 1024;
        u++;
    }
    snprintf(out, cap, u == 0 ? "%.0f %s" : "%.1f %s", v, unit[u]);
}

/* One line, by one thread at a time (the try-lock in ck_progress_add, or
 * start and end, which run before and after the counting threads). */
static void draw(ck_progress *p, const struct timespec *now)
{
    long long ns = ns_between(&p->start, now);
    double secs = (double)ns / 1e9;
    uint64_t done = __atomic_load_n(&p->done, __ATOMIC_RELAXED);
    uint64_t total = __atomic_load_n(&p->total, __ATOMIC_RELAXED);
    double frac = total ? (double)done / (double)total : 1.0;
    if (frac > 1)
        frac = 1;
    char bar[BAR_COLS + 1], dtext[32], ttext[32], rate[32], eta[32];
    int fill = (int)(frac * BAR_COLS);
    for (int i = 0; i < BAR_COLS; i++)
        bar[i] = i < fill ? '#' : '-';
    bar[BAR_COLS] = '\0';
    human((double)done, dtext, sizeof dtext);
    human((double)total, ttext, sizeof ttext);
    double bps = secs > 0 ? (double)done / secs : 0;
    human(bps, rate, sizeof rate);
    if (bps > 0 && done < total) {
        long left = (long)((double)(total - done) / bps + 0.5);
        snprintf(eta, sizeof eta, "ETA %ld:%02ld", left / 60, left % 60);
    } else {
        snprintf(eta, sizeof eta, done < total ? "ETA --:--" : "ETA 0:00");
    }
    fprintf(p->out, "\r[%s] %3d%% %s / %s  %s/s  %s\033[K", bar, (int)(frac * 100), dtext,
            ttext, rate, eta);
    fflush(p->out);
    p->drawn = true;
    __atomic_store_n(&p->last_ns, (int64_t)ns, __ATOMIC_RELAXED);
}

bool ck_progress_wanted(FILE *f, bool quiet)
{
    return !quiet && isatty(fileno(f));
}

/* done, total and on are stored atomically: ck_progress_read may look
 * from another thread while the writer counts. */
void ck_progress_start(ck_progress *p, uint64_t total, bool on, FILE *out)
{
    __atomic_store_n(&p->on, false, __ATOMIC_RELEASE);
    p->out = out;
    p->drawn = false;
    p->drawing = false;
    __atomic_store_n(&p->done, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&p->total, total, __ATOMIC_RELAXED);
    clock_gettime(CLOCK_MONOTONIC, &p->start);
    p->last_ns = 0;
    __atomic_store_n(&p->on, on, __ATOMIC_RELEASE);
    if (on && out != NULL)
        draw(p, &p->start);
}

void ck_progress_add(ck_progress *p, uint64_t n)
{
    if (p == NULL || !__atomic_load_n(&p->on, __ATOMIC_ACQUIRE))
        return;
    __atomic_add_fetch(&p->done, n, __ATOMIC_RELAXED);
    if (p->out == NULL)
        return;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (ns_between(&p->start, &now) - __atomic_load_n(&p->last_ns, __ATOMIC_RELAXED) <
        REDRAW_NS)
        return;
    /* Another thread drawing has it in hand: this one goes on counting. */
    if (__atomic_exchange_n(&p->drawing, true, __ATOMIC_ACQUIRE))
        return;
    draw(p, &now);
    __atomic_store_n(&p->drawing, false, __ATOMIC_RELEASE);
}

void ck_progress_end(ck_progress *p)
{
    if (p == NULL || !__atomic_load_n(&p->on, __ATOMIC_ACQUIRE))
        return;
    if (p->out != NULL) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        draw(p, &now);
        fprintf(p->out, "\r\033[K");
        fflush(p->out);
    }
    __atomic_store_n(&p->on, false, __ATOMIC_RELEASE);
}

bool ck_progress_read(const ck_progress *p, uint64_t *done, uint64_t *total)
{
    if (!__atomic_load_n(&p->on, __ATOMIC_ACQUIRE))
        return false;
    *total = __atomic_load_n(&p->total, __ATOMIC_RELAXED);
    *done = __atomic_load_n(&p->done, __ATOMIC_RELAXED);
    return true;
}
