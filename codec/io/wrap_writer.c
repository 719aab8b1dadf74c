/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wrap_writer: a save's envelope writer, made by the envelope's kind
 * (its folder's new_writer), and what every writer shares (wrap_writer.h).
 */
#include "wrap_writer.h"

#include <errno.h>
#include <unistd.h>

ck_wrap_writer *ck_wrap_writer_new(const ck_envelope *env, int fd, const char *path,
                                   ck_error *err)
{
    ck_error_clear(err);
    if (env == NULL || !ck_envelope_is_wrapped(env))
        return NULL;
    return env->kind->new_writer(env, fd, path, err);
}

void ck_wrap_writer_free(ck_wrap_writer *w)
{
    if (w != NULL)
        w->ops->destroy(w);
}

int ck_wrap_pwrite(ck_wrap_writer *w, const void *buf, size_t len, uint64_t off, ck_error *err)
{
    const unsigned char *p = buf;
    while (len > 0) {
        ssize_t n = pwrite(w->fd, p, len, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return ck_fail_errno(err, n < 0 ? errno : EIO, "%s: writing the new version "
                                 "failed at offset %llu", w->path, (unsigned long long)off);
        p += n;
        off += (uint64_t)n;
        len -= (size_t)n;
    }
    return 0;
}
