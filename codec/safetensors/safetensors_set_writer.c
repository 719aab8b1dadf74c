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
 *   indent=2, sort_keys=True) + "\n", non-ASCII escaped: jansson's
 *   JSON_INDENT(2) | JSON_SORT_KEYS | JSON_ENSURE_ASCII gives the same
 *   bytes, which the tests check against Python's), its members other
 *   than "weight_map" kept and "metadata"."total_size" set to the bytes of
 *   all tensors.
 *
 * A new set (ckptfs-convert's OUT, -o create) is cut into shards as
 * huggingface_hub's split_state_dict_into_shards cuts a state dict:
 * tensors in order, each added to the current shard unless that would take
 * it past the largest size (-o max_shard_size, 5 GB by default), which
 * then closes and takes the next number; a tensor larger than that alone,
 * numbered at once, before the shard still open (so shards are labelled
 * as they open and numbered as they close).  Shards are named
 * "<stem>-00001-of-00003.safetensors" after the index,
 * "<stem>.safetensors.index.json", each written as a new safetensors file
 * (the reference writer's layout, the model's new_metadata as its
 * "__metadata__": what ckptfs-convert's IN had), and the index with
 * "metadata": {"total_size": ...} and the weight map, as above.  An
 * existing file of a shard's name is replaced only when the caller says it
 * may be (ck_commit_group.data_replace: ckptfs-convert -f).  The new shards
 * are new files of the commit group (ck_group_add); the read-back check
 * finds them through overrides by name, as it finds any file a save
 * creates, and so does ck_model_open_data_file a shard that does not exist
 * yet.  The index's text (ck_st_shards_index) is the same dump_index as a
 * rewritten index's.
 *
 * The shards and the index are files of one commit group: the set is
 * replaced as one, the index last (commit_group.h), so a crash leaves the
 * old set or, once the next writable mount rolls the journal forward, the
 * new one.
 */
#include "safetensors_set_writer.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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

/* Tensor t's bytes, as written. */
static uint64_t tensor_bytes(const ck_model *m, const ck_write_tensor *t)
{
    return t->unchanged ? m->index.tensors[t->orig_id].nbytes : ck_pieces_len(t);
}

/* Tensor t's name, as written. */
static const char *name_of(const ck_model *m, const ck_write_tensor *t, size_t *len)
{
    const ck_tensor *o = t->unchanged ? &m->index.tensors[t->orig_id] : NULL;
    *len = o != NULL ? o->name_len : t->name_len;
    return o != NULL ? o->name : t->name;
}

/* What the tree's tensors take in bytes: the index's "total_size". */
static uint64_t total_size(const set_writer *w)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < w->n; i++)
        sum += tensor_bytes(w->m, &w->tensors[i]);
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
        size_t len;
        const char *name = name_of(w->m, &w->tensors[i], &len);
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

/* An index as transformers' save_pretrained writes it: json.dumps(index,
 * indent=2, sort_keys=True) + "\n", non-ASCII escaped as Python does. */
static char *dump_index(const json_t *root)
{
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_ENSURE_ASCII);
    if (text == NULL)
        return NULL;
    ck_st_lower_escapes(text);
    size_t len = strlen(text);
    char *out = realloc(text, len + 2);
    if (out == NULL) {
        free(text);
        return NULL;
    }
    memcpy(out + len, "\n", 2);
    return out;
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
        out = dump_index(root);
    json_decref(root);
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
    int rc = ck_sink_write(&s, text, strlen(text));
    free(text);
    return rc;
}

/* ---- a new set ---- */

int ck_st_shards_cut(const ck_model *m, const char *stem, const ck_write_tensor *tensors,
                     size_t n, uint64_t max, ck_st_shards *s, ck_error *err)
{
    *s = (ck_st_shards){0};
    /* A shard's number is given when it closes, and a large tensor's shard
     * closes at once, before the one still open: tensors are labelled by
     * their shard first, labels numbered as they close. */
    uint32_t *number = malloc((n + 1) * sizeof *number);
    s->shard_of = malloc((n + 1) * sizeof *s->shard_of);
    if (number == NULL || s->shard_of == NULL) {
        free(number);
        return ck_nomem(err, m->path);
    }
    uint32_t labels = 0, open = UINT32_MAX;
    uint64_t open_size = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t size = tensor_bytes(m, &tensors[i]);
        if (__builtin_add_overflow(s->total, size, &s->total) || s->total > INT64_MAX) {
            free(number);
            return ck_fail(err, EOVERFLOW, "%s: the tensors' bytes pass 2^63-1, more than "
                           "an index's total_size holds", m->path);
        }
        if (size > max) {
            number[labels] = (uint32_t)s->n++;
            s->shard_of[i] = labels++;
            continue;
        }
        if (open != UINT32_MAX && size > max - open_size) {
            number[open] = (uint32_t)s->n++;
            open = UINT32_MAX;
        }
        if (open == UINT32_MAX) {
            open = labels++;
            open_size = 0;
        }
        s->shard_of[i] = open;
        open_size += size;
    }
    if (open != UINT32_MAX)
        number[open] = (uint32_t)s->n++;
    for (size_t i = 0; i < n; i++)
        s->shard_of[i] = number[s->shard_of[i]];
    free(number);
    if (s->n >= CK_MAX_SOURCES)
        return ck_fail(err, EINVAL, "%s: %zu shards of at most %llu bytes, more than the %d "
                       "a set may have: give a larger max_shard_size", m->path, s->n,
                       (unsigned long long)max, CK_MAX_SOURCES - 1);
    if ((s->names = calloc(s->n + 1, sizeof *s->names)) == NULL)
        return ck_nomem(err, m->path);
    size_t cap = strlen(stem) + 64; /* "-%05zu-of-%05zu.safetensors": 2 * 20 digits */
    for (size_t f = 0; f < s->n; f++) {
        if ((s->names[f] = malloc(cap)) == NULL)
            return ck_nomem(err, m->path);
        snprintf(s->names[f], cap, "%s-%05zu-of-%05zu.safetensors", stem, f + 1, s->n);
    }
    return 0;
}

void ck_st_shards_free(ck_st_shards *s)
{
    for (size_t f = 0; s->names != NULL && f < s->n; f++)
        free(s->names[f]);
    free(s->names);
    free(s->shard_of);
    *s = (ck_st_shards){0};
}

char *ck_st_shards_index(const ck_model *m, const ck_st_shards *s,
                         const ck_write_tensor *tensors, size_t n, ck_error *err)
{
    json_t *map = json_object();
    json_t *root = json_pack("{s:{s:I},s:o}", "metadata", "total_size",
                             (json_int_t)s->total, "weight_map", map);
    bool ok = root != NULL;
    for (size_t i = 0; ok && i < n; i++) {
        size_t len;
        const char *name = name_of(m, &tensors[i], &len);
        ok = json_object_setn_new(map, name, len, json_string(s->names[s->shard_of[i]])) == 0;
    }
    char *text = ok ? dump_index(root) : NULL;
    json_decref(root);
    if (text == NULL)
        ck_nomem(err, m->path);
    return text;
}

/* The shards' names start as the index's: "model" of
 * "model.safetensors.index.json" (of another name given --to: without
 * ".json"). */
static void stem_of(const char *index, char *stem, size_t cap)
{
    static const char *const suffixes[] = {".safetensors.index.json", ".json"};
    size_t len = strlen(index);
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
        size_t k = strlen(suffixes[i]);
        if (len > k && strcmp(index + len - k, suffixes[i]) == 0) {
            len -= k;
            break;
        }
    }
    snprintf(stem, cap, "%.*s", (int)len, index);
}

/* Shard f of the new set, written into its file of the group. */
static int write_new_shard(set_writer *w, const ck_st_shards *s, uint32_t f,
                           ck_write_tensor *mine, unsigned char *buf)
{
    size_t k = 0;
    for (size_t i = 0; i < w->n; i++)
        if (s->shard_of[i] == f)
            mine[k++] = w->tensors[i];
    char path[PATH_MAX];
    const ck_model_dir *d = w->m->dir;
    if (ck_dir_join(d, s->names[f], path, sizeof path) == NULL)
        return ck_fail(w->err, ENAMETOOLONG, "%s/%s: path too long", d->path, s->names[f]);
    struct stat st;
    if (!w->g->data_replace && (ck_dir_stat(d, s->names[f], &st) == 0 || errno != ENOENT))
        return ck_fail(w->err, EEXIST, "%s: exists (give -f to replace it)", path);
    int fd = ck_group_add(w->g, path, w->err);
    if (fd < 0)
        return -1;
    ck_sink sink = {.fd = fd, .path = path, .buf = buf, .err = w->err,
                    .progress = w->g->progress};
    return ck_st_encode_file(w->m, NULL, 0, mine, k, &sink);
}

/* A set that has no shard yet, created empty or given its first tensors:
 * cut, and written whole.  (An index that lists none and stays so is
 * copied as it is, by update_set.) */
static int encode_new_set(set_writer *w, ck_write_tensor *mine, unsigned char *buf)
{
    const ck_model *m = w->m;
    if (ck_envelope_is_wrapped(&m->env))
        return ck_fail(w->err, EINVAL, "%s: a sharded set's index is plain JSON, neither "
                       "compressed nor encrypted", m->path);
    char stem[PATH_MAX];
    stem_of(m->dir->base, stem, sizeof stem);
    uint64_t max = m->max_shard_size ? m->max_shard_size : CK_ST_SHARD_DEFAULT;
    ck_st_shards s;
    int rc = ck_st_shards_cut(m, stem, w->tensors, w->n, max, &s, w->err);
    for (uint32_t f = 0; rc == 0 && f < s.n; f++)
        rc = write_new_shard(w, &s, f, mine, buf);
    char *text = rc == 0 ? ck_st_shards_index(m, &s, w->tensors, w->n, w->err) : NULL;
    if (rc == 0 && text == NULL)
        rc = -1;
    if (rc == 0) {
        ck_sink sink = {.fd = w->g->files[0].fd, .path = w->g->files[0].target, .buf = buf,
                        .err = w->err};
        rc = ck_sink_write(&sink, text, strlen(text));
    }
    free(text);
    ck_st_shards_free(&s);
    return rc;
}

/* A set with shards: each changed one written again, then the index. */
static int update_set(set_writer *w, ck_write_tensor *mine, unsigned char *buf)
{
    int rc = assign(w);
    for (uint32_t f = 0; rc == 0 && f < w->info->n_files; f++)
        rc = write_shard(w, f, mine, buf);
    return rc == 0 ? write_index(w, buf) : -1;
}

static int set_encode(const ck_model *m, const ck_write_tensor *tensors, size_t n,
                      ck_commit_group *g, ck_error *err)
{
    set_writer w = {.m = m, .info = ck_st_info_of(m), .tensors = tensors, .n = n, .g = g,
                    .err = err};
    unsigned char *buf = malloc(CK_SINK_BUF);
    ck_write_tensor *mine = malloc((n + 1) * sizeof *mine);
    bool fresh = w.info == NULL || (w.info->n_files == 0 && n > 0);
    int rc = buf == NULL || mine == NULL ? nomem(&w)
             : fresh ? encode_new_set(&w, mine, buf) : update_set(&w, mine, buf);
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

const ck_target ck_safetensors_set_target = {
    .holder = "a sharded safetensors set",
    .type_refusal = ck_st_type_refusal,
    .name_refusal = ck_st_name_refusal,
    .shape = &ck_shape_st,
    .empty_refusal = "a set of no tensors has no shard",
    .sharded = true,
};
