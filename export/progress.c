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

static void draw(ck_progress *p, const struct timespec *now)
{
    double secs = (double)ns_between(&p->start, now) / 1e9;
    double frac = p->total ? (double)p->done / (double)p->total : 1.0;
    if (frac > 1)
        frac = 1;
    char bar[BAR_COLS + 1], done[32], total[32], rate[32], eta[32];
    int fill = (int)(frac * BAR_COLS);
    for (int i = 0; i < BAR_COLS; i++)
        bar[i] = i < fill ? '#' : '-';
    bar[BAR_COLS] = '\0';
    human((double)p->done, done, sizeof done);
    human((double)p->total, total, sizeof total);
    double bps = secs > 0 ? (double)p->done / secs : 0;
    human(bps, rate, sizeof rate);
    if (bps > 0 && p->done < p->total) {
        long left = (long)((double)(p->total - p->done) / bps + 0.5);
        snprintf(eta, sizeof eta, "ETA %ld:%02ld", left / 60, left % 60);
    } else {
        snprintf(eta, sizeof eta, p->done < p->total ? "ETA --:--" : "ETA 0:00");
    }
    fprintf(p->out, "\r[%s] %3d%% %s / %s  %s/s  %s\033[K", bar, (int)(frac * 100), done,
            total, rate, eta);
    fflush(p->out);
    p->drawn = true;
    p->last = *now;
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
    __atomic_store_n(&p->done, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&p->total, total, __ATOMIC_RELAXED);
    clock_gettime(CLOCK_MONOTONIC, &p->start);
    p->last = p->start;
    __atomic_store_n(&p->on, on, __ATOMIC_RELEASE);
    if (on && out != NULL)
        draw(p, &p->start);
}

void ck_progress_add(ck_progress *p, uint64_t n)
{
    if (p == NULL || !p->on)
        return;
    __atomic_add_fetch(&p->done, n, __ATOMIC_RELAXED);
    if (p->out == NULL)
        return;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (ns_between(&p->last, &now) >= REDRAW_NS)
        draw(p, &now);
}

void ck_progress_end(ck_progress *p)
{
    if (!p->on)
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
