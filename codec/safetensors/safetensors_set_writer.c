/* SPDX-License-Identifier: Apache-2.0 */
/*
 * safetensors_set_writer: save a sharded set (codec/safetensors/safetensors_set.c).
 *
 * - Each tensor stays in its shard, renamed or not; a new tensor goes to
 *   the last shard, as a loader reading the weight map finds it anywhere.
 * - A shard whose tensors are all unchanged, none added or removed, is not
 *   written at all.  Any other shard is written again by the safetensors
 *   writer (safetensors_writer.c): in its own layout when its tensors kept
 *   their names, dtypes and shapes, else in the reference writer's, its
 *   "__metadata__" kept either way.  A shard left with no tensor is
 *   written empty and leaves the weight map, so the set no longer lists it.
 * - The index is copied byte for byte while it stays true: the same names
 *   in the same shards and the same total size.  Otherwise it is written
 *   as transformers' save_pretrained writes it (json.dumps(index,
 *   indent=2, sort_keys=True) + "\n", non-ASCII escaped), its members
 *   other than "weight_map" kept and "metadata"."total_size" set to the
 *   bytes of all tensors.
 *
 * The shards and the index are files of one commit group: the set is
 * replaced as one, the index last (commit_group.h).
 */
#include "safetensors_set_writer.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors_reader.h"
#include "safetensors_set.h"
#include "safetensors_writer.h"

typedef struct set_writer {
    const ck_model *m;
    const ck_st_info *info;
    const ck_write_tensor *tensors;
    size_t n;
    uint32_t *file_of;          /* per tree tensor: its shard, an index of info->files */
    size_t *n_orig;             /* per shard: its tensors in the model */
    ck_commit_group *g;
    ck_error *err;
} set_writer;

static int nomem(set_writer *w)
{
    return ck_nomem(w->err, w->m->path);
}

static uint32_t shard_of(const set_writer *w, uint32_t id)
{
    return (uint32_t)(ck_st_file_of(w->m, id) - w->info->files);
}

/* Which shard each tree tensor goes to, and what each shard held. */
static int assign(set_writer *w)
{
    uint32_t n_files = w->info->n_files;
    if (n_files == 0 && w->n > 0)
        return ck_fail(w->err, EINVAL, "%s: the set has no shard to put new tensors in",
                       w->m->path);
    w->file_of = malloc((w->n + 1) * sizeof *w->file_of);
    w->n_orig = calloc(n_files + 1, sizeof *w->n_orig);
    if (w->file_of == NULL || w->n_orig == NULL)
        return nomem(w);
    const ck_index *ix = &w->m->index;
    for (size_t k = 0; k < ix->n_live; k++)
        w->n_orig[shard_of(w, ix->live[k])]++;
    for (size_t i = 0; i < w->n; i++) {
        const ck_write_tensor *t = &w->tensors[i];
        w->file_of[i] = t->orig_id == CK_WRITE_NEW ? n_files - 1 : shard_of(w, t->orig_id);
    }
    return 0;
}

/* Shard f's tensors, in tree order, into out; their count. */
static size_t gather(const set_writer *w, uint32_t f, ck_write_tensor *out)
{
    size_t k = 0;
    for (size_t i = 0; i < w->n; i++)
        if (w->file_of[i] == f)
            out[k++] = w->tensors[i];
    return k;
}

static bool all_unchanged(const ck_write_tensor *t, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!t[i].unchanged)
            return false;
    return true;
}

static int write_shard(set_writer *w, uint32_t f, ck_write_tensor *mine, unsigned char *buf)
{
    size_t k = gather(w, f, mine);
    if (k == w->n_orig[f] && all_unchanged(mine, k))
        return 0;
    const ck_st_file *file = &w->info->files[f];
    const char *path = w->m->sources[file->src]->path;
    int fd = ck_group_add(w->g, path, w->err);
    if (fd < 0)
        return -1;
    ck_sink s = {.fd = fd, .path = path, .buf = buf, .err = w->err};
    return ck_st_encode_file(w->m, file, w->n_orig[f], mine, k, &s);
}

/* What the tree's tensors take in bytes: the index's "total_size". */
static uint64_t total_size(const set_writer *w)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < w->n; i++) {
        const ck_write_tensor *t = &w->tensors[i];
        sum += t->unchanged ? w->m->index.tensors[t->orig_id].nbytes : ck_pieces_len(t);
    }
    return sum;
}

/* Whether the index still tells the truth: the same names, in the same
 * shards (tensors never move), and the same bytes in all. */
static bool index_unchanged(const set_writer *w)
{
    const ck_index *ix = &w->m->index;
    if (w->n != ix->n_live)
        return false;
    uint64_t before = 0;
    for (size_t k = 0; k < ix->n_live; k++)
        before += ix->tensors[ix->live[k]].nbytes;
    for (size_t i = 0; i < w->n; i++) {
        const ck_write_tensor *t = &w->tensors[i];
        if (t->unchanged)
            continue;
        const ck_tensor *o = t->orig_id == CK_WRITE_NEW ? NULL : &ix->tensors[t->orig_id];
        if (o == NULL || t->name_len != o->name_len || memcmp(t->name, o->name, o->name_len) != 0)
            return false;
    }
    return total_size(w) == before;
}

/* The new weight map: each tree tensor's name to its shard's name. */
static json_t *weight_map(set_writer *w)
{
    json_t *map = json_object();
    if (map == NULL)
        return NULL;
    for (size_t i = 0; i < w->n; i++) {
        const ck_write_tensor *t = &w->tensors[i];
        const ck_tensor *o = t->orig_id == CK_WRITE_NEW ? NULL : &w->m->index.tensors[t->orig_id];
        const char *name = t->unchanged ? o->name : t->name;
        size_t len = t->unchanged ? o->name_len : t->name_len;
        char q[CK_QUOTE_BUF];
        /* The shards' encodes checked new names: NUL-free UTF-8. */
        if (json_object_getn(map, name, len) != NULL) {
            ck_fail(w->err, EINVAL, "%s: two tensors are named '%s'", w->m->path,
                    ck_quote(q, name, len));
            json_decref(map);
            return NULL;
        }
        const char *shard = w->info->files[w->file_of[i]].rel;
        if (json_object_setn_new(map, name, len, json_string(shard)) < 0) {
            nomem(w);
            json_decref(map);
            return NULL;
        }
    }
    return map;
}

/* The original index with the new weight map and total size, as text. */
static char *index_text(set_writer *w, json_t *map)
{
    ck_source *src = w->m->sources[0];
    char *text = malloc(src->size + 1);
    if (text == NULL)
        return NULL;
    json_t *root = NULL;
    if (ck_source_read(src, text, (size_t)src->size, 0, w->err) == 0)
        root = json_loadb(text, (size_t)src->size, 0, NULL);
    free(text);
    json_t *meta = root ? json_object_get(root, "metadata") : NULL;
    if (root != NULL && !json_is_object(meta)) {
        meta = json_object();
        if (json_object_set_new(root, "metadata", meta) < 0)
            meta = NULL;
    }
    char *out = NULL;
    if (meta != NULL &&
        json_object_set_new(meta, "total_size", json_integer((json_int_t)total_size(w))) == 0 &&
        json_object_set(root, "weight_map", map) == 0)
        out = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_ENSURE_ASCII);
    json_decref(root);
    if (out != NULL)
        ck_st_lower_escapes(out);
    return out;
}

static int write_index(set_writer *w, unsigned char *buf)
{
    ck_sink s = {.fd = w->g->files[0].fd, .path = w->g->files[0].target, .buf = buf, .err = w->err};
    if (index_unchanged(w))
        return ck_sink_copy(&s, w->m->sources[0], 0, w->m->sources[0]->size);
    json_t *map = weight_map(w);
    if (map == NULL)
        return -1;
    char *text = index_text(w, map);
    json_decref(map);
    if (text == NULL)
        return w->err->errnum != 0 ? -1 : nomem(w);
    int rc = ck_sink_write(&s, text, strlen(text)) < 0 || ck_sink_write(&s, "\n", 1) < 0 ? -1 : 0;
    free(text);
    return rc;
}

static int set_encode(const ck_model *m, const ck_write_tensor *tensors, size_t n,
                      ck_commit_group *g, ck_error *err)
{
    set_writer w = {.m = m, .info = ck_st_info_of(m), .tensors = tensors, .n = n, .g = g,
                    .err = err};
    unsigned char *buf = malloc(CK_SINK_BUF);
    ck_write_tensor *mine = malloc((n + 1) * sizeof *mine);
    int rc = buf == NULL || mine == NULL ? nomem(&w) : assign(&w);
    for (uint32_t f = 0; rc == 0 && f < w.info->n_files; f++)
        rc = write_shard(&w, f, mine, buf);
    if (rc == 0)
        rc = write_index(&w, buf);
    free(mine);
    free(buf);
    free(w.file_of);
    free(w.n_orig);
    return rc;
}

const ck_writer ck_safetensors_set_writer = {
    .encode = set_encode,
    .own_order = true,
    .same_type = ck_st_same_type,
    .shape = &ck_shape_st,
};
