/* SPDX-License-Identifier: Apache-2.0 */
#include "wrap_writer.h"

#include <errno.h>
#include <unistd.h>

#include "../codec/cipher/cipher_writer.h"
#include "../codec/zstd/zstd_writer.h"

ck_wrap_writer *ck_wrap_writer_new(const ck_envelope *env, int fd, const char *path,
                                   ck_error *err)
{
    ck_error_clear(err);
    if (env == NULL || env->wrap == CK_WRAP_NONE)
        return NULL;
    if (env->wrap == CK_WRAP_ZSTD)
        return ck_zstd_writer_new(fd, path, env->zstd_level, env->zstd_sums, err);
    if (env->legacy) {
        ck_fail(err, EROFS, "%s: encrypted in MindSpore 1.3-1.6's layout (no GCM tag), which "
                "ckptfs reads but does not write", path);
        return NULL;
    }
    return ck_cipher_writer_new(fd, path, env->mode, &env->key, err);
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
