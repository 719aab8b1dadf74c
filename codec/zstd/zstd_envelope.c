/* SPDX-License-Identifier: Apache-2.0 */
/*
 * zstd_envelope: the envelope kind of zstd compression (zstd_envelope.h):
 * which files it is, what a save keeps of the file (seek table checksums,
 * the level), and the seekable writer a save uses.
 */
#include "zstd_envelope.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "../core/le_bytes.h"
#include "zstd_source.h"
#include "zstd_writer.h"

static int zstd_detect(const unsigned char *head, size_t n, const char *path,
                       ck_envelope *env, ck_error *err)
{
    (void)path, (void)env, (void)err;
    if (n < 4)
        return 0;
    uint32_t magic = ck_le32(head);
    /* pzstd and others may start with a skippable frame */
    return magic == CK_ZSTD_MAGIC ||
           (magic & CK_ZSTD_SKIPPABLE_MASK) == CK_ZSTD_SKIPPABLE_MAGIC;
}

static ck_source *zstd_open(ck_source *file, const ck_envelope_opts *o, ck_envelope *env,
                            ck_error *err)
{
    return ck_zstd_source_open(file, o->cache, o->tmp_max, o->progress, &env->seekable, err);
}

static int level_of(const ck_envelope_opts *o)
{
    return o->zstd_level ? o->zstd_level : CK_ZSTD_LEVEL_DEFAULT;
}

/* A key or a mode asked for is refused only here, once the content is
 * known to be no encrypted model inside the compression (which says more). */
static int zstd_opened(ck_source *plain, const ck_envelope_opts *o, ck_envelope *env,
                       ck_error *err)
{
    bool key = o->key != NULL && o->key->len > 0;
    if (o->encrypt || (key && !o->key_if_encrypted))
        return ck_fail(err, EINVAL, "%s: zstd-compressed, not encrypted, but %s was given "
                       "(MindSpore does not read compressed encrypted models)", plain->path,
                       o->encrypt ? "-o enc_mode" : "a key");
    ck_zstd_frames frames;
    env->zstd_sums = ck_zstd_frames_of(plain, &frames) && frames.sums != NULL;
    env->zstd_level = level_of(o);
    return 0;
}

static void zstd_fresh(const ck_envelope_opts *o, ck_envelope *env)
{
    *env = (ck_envelope){.kind = &ck_envelope_zstd, .fresh = true, .zstd_level = level_of(o)};
}

static struct ck_wrap_writer *zstd_new_writer(const ck_envelope *env, int fd, const char *path,
                                              ck_error *err)
{
    return ck_zstd_writer_new(fd, path, env->zstd_level, env->zstd_sums, err);
}

/* -o zstd_level=N: one of zstd's levels, negative ones too. */
static int zstd_option(const char *name, const char *value, ck_envelope_opts *o, ck_error *err)
{
    if (strcmp(name, "zstd_level") != 0)
        return 0;
    char *end;
    errno = 0;
    long level = strtol(value, &end, 10);
    if (errno != 0 || end == value || *end != '\0' || level < ZSTD_minCLevel() ||
        level > ZSTD_maxCLevel())
        return ck_fail(err, EINVAL, "-o zstd_level=%s: zstd levels are %d to %d", value,
                       ZSTD_minCLevel(), ZSTD_maxCLevel());
    o->zstd_level = (int)level;
    return 1;
}

static const char *zstd_describe(const ck_envelope *env)
{
    return env->seekable ? "seekable zstd" : "zstd";
}

const ck_envelope_kind ck_envelope_zstd = {
    .name = "zstd",
    .adjective = "zstd-compressed",
    .plaintext = "decompressed",
    .extension = ".zst",
    .detect = zstd_detect,
    .open = zstd_open,
    .opened = zstd_opened,
    .fresh = zstd_fresh,
    .new_writer = zstd_new_writer,
    .option = zstd_option,
    .describe = zstd_describe,
};
