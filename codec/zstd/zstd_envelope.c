/* SPDX-License-Identifier: Apache-2.0 */
/*
 * zstd_envelope: the envelope kind of zstd compression (zstd_envelope.h):
 * which files it is, what a save keeps of the file (seek table checksums,
 * the level), and the seekable writer a save uses.
 *
 * What a model keeps (zstd_state) and what the user gave (zstd_opts: -o
 * zstd_level) are private to this file, held by the rest as void pointers
 * (envelope_kind.h).
 */
#include "zstd_envelope.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "../core/le_bytes.h"
#include "zstd_source.h"
#include "zstd_writer.h"

/* What a model wrapped in this kind keeps (ck_envelope.state). */
typedef struct zstd_state {
    bool seekable;              /* the file has a seek table */
    bool sums;                  /* the seek table has checksums (a save keeps them) */
    int level;                  /* the level a save uses */
} zstd_state;

/* What the user gave (ck_envelope_args). */
typedef struct zstd_opts {
    int level;                  /* -o zstd_level (0: the default) */
} zstd_opts;

static int zstd_detect(const unsigned char *head, size_t n, const char *path, ck_error *err)
{
    (void)path, (void)err;
    if (n < 4)
        return 0;
    uint32_t magic = ck_le32(head);
    /* pzstd and others may start with a skippable frame */
    return magic == CK_ZSTD_MAGIC ||
           (magic & CK_ZSTD_SKIPPABLE_MASK) == CK_ZSTD_SKIPPABLE_MAGIC;
}

static int level_of(const ck_envelope_opts *o)
{
    const zstd_opts *zo = ck_envelope_args_of(o->args, &ck_envelope_zstd);
    return zo != NULL && zo->level ? zo->level : CK_ZSTD_LEVEL_DEFAULT;
}

static zstd_state *state_of(const ck_envelope *env)
{
    return env->state;
}

static void zstd_close(void *state)
{
    free(state);
}

static ck_source *zstd_open(ck_source *file, const ck_envelope_opts *o, ck_envelope *env,
                            ck_error *err)
{
    zstd_state *s = calloc(1, sizeof *s);
    if (s == NULL) {
        ck_nomem(err, file->path);
        ck_source_close(file);
        return NULL;
    }
    env->state = s;
    s->level = level_of(o);
    return ck_zstd_source_open(file, o->cache, o->tmp_max, o->progress, &s->seekable, err);
}

/* What another kind's options given cannot apply to this file ("-o
 * enc_mode", "a key"), as that kind says (its foreign), or NULL. */
static const char *foreign_option(const ck_envelope_opts *o)
{
    for (size_t i = 0; o->args != NULL && i < o->args->n; i++) {
        const ck_envelope_kind *k = o->args->kind[i];
        const char *what = k != &ck_envelope_zstd && k->foreign != NULL
                               ? k->foreign(o->args->own[i], o) : NULL;
        if (what != NULL)
            return what;
    }
    return NULL;
}

/* A key or a mode asked for is refused only here, once the content is
 * known to be no encrypted model inside the compression (which says more). */
static int zstd_opened(ck_source *plain, const ck_envelope_opts *o, ck_envelope *env,
                       ck_error *err)
{
    const char *given = foreign_option(o);
    if (given != NULL)
        return ck_fail(err, EINVAL, "%s: zstd-compressed, not encrypted, but %s was given "
                       "(MindSpore does not read compressed encrypted models)", plain->path,
                       given);
    ck_zstd_frames frames;
    state_of(env)->sums = ck_zstd_frames_of(plain, &frames) && frames.sums != NULL;
    return 0;
}

static int zstd_fresh(const ck_envelope_opts *o, ck_envelope *env, const char *path,
                      ck_error *err)
{
    zstd_state *s = calloc(1, sizeof *s);
    if (s == NULL)
        return ck_nomem(err, path);
    s->level = level_of(o);
    *env = (ck_envelope){.kind = &ck_envelope_zstd, .state = s, .fresh = true};
    return 0;
}

static struct ck_wrap_writer *zstd_new_writer(const ck_envelope *env, int fd, const char *path,
                                              ck_error *err)
{
    const zstd_state *s = state_of(env);
    return ck_zstd_writer_new(fd, path, s->level, s->sums, err);
}

/* -o zstd_level=N: one of zstd's levels, negative ones too. */
static int zstd_option(const char *name, const char *value, void **own, ck_error *err)
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
    if (*own == NULL && (*own = calloc(1, sizeof(zstd_opts))) == NULL)
        return ck_nomem(err, name);
    ((zstd_opts *)*own)->level = (int)level;
    return 1;
}

/* The level is the user's whatever the model (a read-back keeps it). */
static int zstd_copy_options(const void *from, const ck_envelope *env, void **to,
                             ck_error *err)
{
    (void)env;
    if (from == NULL)
        return 0;
    if ((*to = malloc(sizeof(zstd_opts))) == NULL)
        return ck_nomem(err, "the envelope's options");
    memcpy(*to, from, sizeof(zstd_opts));
    return 0;
}

static void zstd_free_options(void *own)
{
    free(own);
}

static const char *zstd_describe(const ck_envelope *env)
{
    return state_of(env)->seekable ? "seekable zstd" : "zstd";
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
    .close = zstd_close,
    .option = zstd_option,
    .copy_options = zstd_copy_options,
    .free_options = zstd_free_options,
    .describe = zstd_describe,
};
