/* SPDX-License-Identifier: Apache-2.0 */
/*
 * safetensors_writer: encode a tree back into a safetensors file.
 *
 * Two layouts, by what changed:
 *
 *   - Every tensor of the file still there under its name, none added,
 *     each with its dtype and shape: the file is written again as it is,
 *     its header byte for byte, each tensor's bytes at their place (the
 *     changed ones new, the others copied).  An unchanged tree therefore
 *     saves to an identical file, and an edit of some values changes only
 *     those bytes.
 *   - Anything else (a tensor added, removed, renamed, reshaped or
 *     retyped): a new header and data laid out as the reference writer
 *     (huggingface/safetensors, tensor.rs `prepare`) lays them out: tensors
 *     sorted by dtype in descending order of its `Dtype` list (U64 I64
 *     F64 C64 F32 ... I8 U8 ... BOOL), then by name;
 *     compact JSON, "__metadata__" first, each entry's members dtype, shape,
 *     data_offsets; the header padded with spaces to a multiple of 8.  The
 *     file's own order is not kept: any order reads the same, and this one
 *     is what safetensors itself would write for these tensors.  It is
 *     planned apart from the writing (ck_st_plan_new), so that the mount's
 *     safetensors view (-o as=safetensors) serves the very bytes written.
 *
 * Unchanged bytes are copied file to file (copy_file_range).  The header is
 * built and serialized by jansson (JSON_COMPACT, members in the order
 * added).  tests/bats/safetensors.bats checks the new layout byte for byte
 * against the oracle's writer (safetensors' own, tests/oracle).
 */
#include "safetensors_writer.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/le_bytes.h"
#include "../core/name_map.h"
#include "safetensors_reader.h"
#include "safetensors_set.h"

/* One tensor as it will be written. */
typedef struct item {
    const char *name;           /* NUL-ended: jansson's keys are */
    const char *dtype;          /* the safetensors name */
    unsigned rank;              /* its place in the reference's Dtype list */
    const int64_t *dims;
    uint32_t ndim;
    uint64_t nbytes;
    const ck_write_tensor *w;
    const ck_tensor *orig;      /* NULL: new */
} item;

typedef struct writer {
    const ck_model *m;
    const ck_st_file *file;     /* the file rewritten; NULL: a new one */
    const char *meta;           /* its "__metadata__" as compact JSON, or NULL */
    size_t n_orig;              /* its tensors in the model */
    const ck_write_tensor *tensors;
    size_t n;
    item *items;
    ck_sink *s;
    ck_error *err;
} writer;

static int nomem(writer *w)
{
    return ck_nomem(w->err, w->m->path);
}

/* What tree tensor i will be written as; its dtype refused, naming it,
 * when safetensors has none for it. */
static int describe(writer *w, size_t i)
{
    const ck_write_tensor *t = &w->tensors[i];
    const ck_tensor *o = t->orig_id == CK_WRITE_NEW ? NULL : &w->m->index.tensors[t->orig_id];
    item *it = &w->items[i];
    *it = (item){.w = t, .orig = o};
    if (t->unchanged) {
        it->name = o->name;
        it->dtype = o->type_name;
        it->nbytes = o->nbytes;
        if (ck_st_shape_of(w->m, t->orig_id, &it->dims, &it->ndim) < 0)
            return nomem(w);
    } else {
        char q[CK_QUOTE_BUF];
        if (memchr(t->name, '\0', t->name_len) != NULL)
            return ck_fail(w->err, EINVAL, "%s: tensor '%s': a name holding NUL cannot be "
                           "saved (the JSON library cannot hold it)", w->m->path,
                           ck_quote(q, t->name, t->name_len));
        it->name = t->name;
        it->dtype = ck_dtype_safetensors_name(t->dtype);
        it->dims = t->dims;
        it->ndim = t->ndim;
        it->nbytes = ck_pieces_len(t);
        if (it->dtype == NULL)
            return ck_fail(w->err, EINVAL, "%s: tensor '%s': type %s has no safetensors dtype",
                           w->m->path, ck_quote(q, t->name, t->name_len), t->dtype->of_name);
        /* Its own type and the shape shown: the file's shape (a sub-byte
         * tensor is shown flat). */
        if (o != NULL && t->dtype == o->dtype && t->ndim == o->ndim &&
            (t->ndim == 0 || memcmp(t->dims, o->dims, t->ndim * sizeof *t->dims) == 0) &&
            ck_st_shape_of(w->m, t->orig_id, &it->dims, &it->ndim) < 0)
            return nomem(w);
    }
    it->rank = ck_st_dtype_rank(it->dtype);
    return 0;
}

/* Whether the file can be written again as it is (see the top). */
static bool same_layout(const writer *w)
{
    if (w->file == NULL || w->n != w->n_orig)
        return false; /* a model created empty has no layout yet */
    for (size_t i = 0; i < w->n; i++) {
        const item *it = &w->items[i];
        if (it->orig == NULL || strcmp(it->name, it->orig->name) != 0 ||
            strcmp(it->dtype, it->orig->type_name) != 0 || it->nbytes != it->orig->nbytes)
            return false;
        const int64_t *dims;
        uint32_t ndim;
        if (it->w->unchanged)
            continue;
        if (ck_st_shape_of(w->m, it->w->orig_id, &dims, &ndim) < 0 || ndim != it->ndim ||
            (ndim && memcmp(dims, it->dims, ndim * sizeof *dims) != 0))
            return false;
    }
    return true;
}

static int write_item(writer *w, const item *it)
{
    if (it->w->unchanged) {
        const ck_tensor *o = it->orig;
        for (uint32_t k = 0; k < o->n_ext; k++) {
            const ck_extent *x = ck_tensor_ext(o, k);
            if (ck_sink_copy(w->s, w->m->sources[x->src], x->off, x->len) < 0)
                return -1;
        }
        return 0;
    }
    for (size_t k = 0; k < it->w->n_pieces; k++)
        if (ck_sink_piece(w->s, &it->w->pieces[k], 0, it->w->pieces[k].len) < 0)
            return -1;
    return 0;
}

static int by_offset(const void *a, const void *b)
{
    const item *x = *(const item *const *)a, *y = *(const item *const *)b;
    return x->orig->rec_off < y->orig->rec_off ? -1 : x->orig->rec_off > y->orig->rec_off;
}

/* The same layout: the header copied, each tensor where it was.  The data
 * is the tensors' bytes back to back in offset order (the reader checked
 * that they tile it), which need not be the header's order. */
static int write_in_place(writer *w)
{
    const item **by_off = malloc((w->n + 1) * sizeof *by_off);
    if (by_off == NULL)
        return nomem(w);
    for (size_t i = 0; i < w->n; i++)
        by_off[i] = &w->items[i];
    qsort(by_off, w->n, sizeof *by_off, by_offset);
    int rc = ck_sink_copy(w->s, w->m->sources[w->file->src], 0, 8 + w->file->header_len);
    for (size_t i = 0; rc == 0 && i < w->n; i++)
        rc = write_item(w, by_off[i]);
    free(by_off);
    return rc;
}

/* The reference writer's order: dtype descending, then name bytewise. */
static int by_writer_order(const void *a, const void *b)
{
    const item *x = *(const item *const *)a, *y = *(const item *const *)b;
    if (x->rank != y->rank)
        return x->rank > y->rank ? -1 : 1;
    return strcmp(x->name, y->name);
}

static json_t *entry(const item *it, uint64_t begin)
{
    json_t *shape = json_array(), *offsets = json_array(), *e = json_object();
    bool ok = shape && offsets && e;
    for (uint32_t d = 0; ok && d < it->ndim; d++)
        ok = json_array_append_new(shape, json_integer(it->dims[d])) == 0;
    ok = ok && json_array_append_new(offsets, json_integer((json_int_t)begin)) == 0 &&
         json_array_append_new(offsets, json_integer((json_int_t)(begin + it->nbytes))) == 0 &&
         json_object_set_new(e, "dtype", json_string(it->dtype)) == 0;
    if (ok && json_object_set_new(e, "shape", shape) == 0) {
        shape = NULL;
        if (json_object_set_new(e, "data_offsets", offsets) == 0)
            return e;
        offsets = NULL;
    }
    json_decref(shape);
    json_decref(offsets);
    json_decref(e);
    return NULL;
}

/* jansson writes the hex digits of a \u escape (a control character) in
 * capitals, serde_json (the reference writer) in small letters: the same
 * JSON, not the same bytes.  Every backslash in jansson's output starts
 * an escape, so pairs are skipped whole. */
void ck_st_lower_escapes(char *text)
{
    for (char *p = text; *p != '\0'; p++) {
        if (*p != '\\')
            continue;
        if (*++p == '\0')
            break;
        for (int k = 1; *p == 'u' && k <= 4 && p[k] != '\0'; k++)
            p[k] = (char)tolower((unsigned char)p[k]);
    }
}

/* The header of order[0..n): "__metadata__" first, then each tensor;
 * each tensor's offset in the data part into data_off (indexed as
 * w->items). */
static char *header_text(writer *w, const item **order, uint64_t *data_off, size_t *len)
{
    json_t *root = json_object();
    const char *meta = w->meta;
    bool ok = root != NULL;
    if (ok && meta != NULL) {
        json_t *mv = json_loads(meta, 0, NULL);
        ok = mv != NULL && json_object_set_new(root, "__metadata__", mv) == 0;
    }
    uint64_t off = 0;
    for (size_t i = 0; ok && i < w->n; i++) {
        json_t *e = entry(order[i], off);
        ok = e != NULL && json_object_set_new(root, order[i]->name, e) == 0;
        data_off[order[i] - w->items] = off;
        off += order[i]->nbytes;
    }
    char *text = ok ? json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(root);
    if (text == NULL)
        return NULL;
    ck_st_lower_escapes(text);
    *len = strlen(text);
    return text;
}

void ck_st_layout_free(ck_st_layout *lay)
{
    free(lay->header);
    free(lay->order);
    free(lay->data_off);
    *lay = (ck_st_layout){0};
}

/* The reference writer's layout of w's items (see the top). */
static int plan_new_layout(writer *w, ck_st_layout *lay)
{
    *lay = (ck_st_layout){0};
    const item **order = malloc((w->n + 1) * sizeof *order);
    lay->order = malloc((w->n + 1) * sizeof *lay->order);
    lay->data_off = malloc((w->n + 1) * sizeof *lay->data_off);
    size_t len = 0;
    char *text = NULL;
    if (order != NULL && lay->order != NULL && lay->data_off != NULL) {
        for (size_t i = 0; i < w->n; i++)
            order[i] = &w->items[i];
        qsort(order, w->n, sizeof *order, by_writer_order);
        text = header_text(w, order, lay->data_off, &len);
    }
    size_t pad = (8 - len % 8) % 8;
    if (text != NULL && (lay->header = malloc(8 + len + pad)) != NULL) {
        ck_put_le64(lay->header, len + pad);
        memcpy(lay->header + 8, text, len);
        memset(lay->header + 8 + len, ' ', pad);
        lay->header_len = 8 + len + pad;
        lay->size = lay->header_len;
        for (size_t i = 0; i < w->n; i++) {
            lay->order[i] = (size_t)(order[i] - w->items);
            lay->size += order[i]->nbytes;
        }
        lay->n = w->n;
    }
    free(text);
    free(order);
    if (lay->header != NULL)
        return 0;
    ck_st_layout_free(lay);
    return nomem(w);
}

static int write_new_layout(writer *w)
{
    ck_st_layout lay;
    if (plan_new_layout(w, &lay) < 0)
        return -1;
    int rc = ck_sink_write(w->s, lay.header, lay.header_len) < 0 ? -1 : 0;
    for (size_t i = 0; rc == 0 && i < w->n; i++)
        rc = write_item(w, &w->items[lay.order[i]]);
    ck_st_layout_free(&lay);
    return rc;
}

/* Names a header can hold: UTF-8 (as jansson checks it), not the
 * metadata's key, each once. */
static int check_names(writer *w)
{
    ck_name_map seen;
    ck_name_map_init(&seen);
    int rc = 0;
    char q[CK_QUOTE_BUF];
    for (size_t i = 0; rc == 0 && i < w->n; i++) {
        const char *name = w->items[i].name;
        size_t len = strlen(name);
        json_t *utf8 = json_stringn(name, len);
        if (utf8 == NULL)
            rc = ck_fail(w->err, EINVAL, "%s: tensor '%s': safetensors names are UTF-8, this "
                         "one is not", w->m->path, ck_quote(q, name, len));
        else if (strcmp(name, "__metadata__") == 0)
            rc = ck_fail(w->err, EINVAL, "%s: a tensor cannot be named '__metadata__' (the "
                         "header's metadata key)", w->m->path);
        else if (ck_name_map_get(&seen, name, len) != CK_NAME_MAP_NONE)
            rc = ck_fail(w->err, EINVAL, "%s: two tensors are named '%s'", w->m->path,
                         ck_quote(q, name, len));
        else if (ck_name_map_put(&seen, name, len, (uint32_t)i) < 0)
            rc = nomem(w);
        json_decref(utf8);
    }
    ck_name_map_free(&seen);
    return rc;
}

/* The items of tensors[0..n), checked: a type, a name safetensors cannot
 * hold refused naming the tensor. */
static int describe_all(writer *w)
{
    w->items = calloc(w->n + 1, sizeof *w->items);
    int rc = w->items == NULL ? nomem(w) : 0;
    for (size_t i = 0; rc == 0 && i < w->n; i++)
        rc = describe(w, i);
    return rc == 0 ? check_names(w) : rc;
}

int ck_st_encode_file(const ck_model *m, const ck_st_file *file, size_t n_orig,
                      const ck_write_tensor *tensors, size_t n, ck_sink *s)
{
    /* A new file of a model created empty carries what its tensors' model
     * had (m->new_metadata, set by convert); a rewritten one keeps its own. */
    writer w = {.m = m, .file = file, .meta = file != NULL ? file->metadata : m->new_metadata,
                .n_orig = n_orig, .tensors = tensors, .n = n, .s = s, .err = s->err};
    int rc = describe_all(&w);
    if (rc == 0)
        rc = same_layout(&w) ? write_in_place(&w) : write_new_layout(&w);
    free(w.items);
    return rc;
}

int ck_st_plan_new(const ck_model *m, const ck_write_tensor *tensors, size_t n,
                   const char *meta, ck_st_layout *lay, ck_error *err)
{
    writer w = {.m = m, .meta = meta, .tensors = tensors, .n = n, .err = err};
    *lay = (ck_st_layout){0};
    int rc = describe_all(&w);
    if (rc == 0)
        rc = plan_new_layout(&w, lay);
    free(w.items);
    return rc;
}

static int st_encode(const ck_model *m, const ck_write_tensor *tensors, size_t n,
                     ck_commit_group *g, ck_error *err)
{
    const ck_st_info *info = ck_st_info_of(m);
    ck_sink s = {.fd = g->files[0].fd, .path = g->files[0].target, .err = err, .progress = g->progress};
    s.buf = malloc(CK_SINK_BUF);
    int rc = s.buf == NULL ? ck_nomem(err, m->path) : 0;
    if (rc == 0 && (rc = ck_sink_wrap(&s, &m->env)) == 0) {
        rc = ck_st_encode_file(m, info != NULL ? &info->files[0] : NULL, m->index.n_live,
                               tensors, n, &s);
        if (rc == 0)
            rc = ck_sink_end(&s);
    }
    ck_sink_drop(&s);
    free(s.buf);
    return rc;
}

int ck_st_metadata_for(const ck_model *src, char **out, ck_error *err)
{
    *out = NULL;
    const bool st = src->format == &ck_format_safetensors ||
                    src->format == &ck_format_safetensors_set;
    if (st) {
        /* Exactly what the file had, or nothing: a set's shards are written
         * by one save_pretrained, so its first shard speaks for them all. */
        const ck_st_info *info = ck_st_info_of(src);
        const char *meta = info != NULL && info->n_files > 0 ? info->files[0].metadata : NULL;
        if (meta != NULL && (*out = strdup(meta)) == NULL)
            return ck_nomem(err, src->path);
        return 0;
    }
    /* Any other format's tensors are PyTorch's to load: transformers'
     * save_pretrained marks such a file {"format":"pt"}, and its loader
     * checks for a format (pt, tf, flax or mlx), taking a file without one
     * as not saved by save_pretrained. */
    json_t *root = json_pack("{s:s}", "format", "pt");
    *out = root != NULL ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    return *out == NULL ? ck_nomem(err, src->path) : 0;
}

/* A type is its safetensors name. */
bool ck_st_same_type(const ck_dtype *a, const ck_dtype *b)
{
    const char *x = ck_dtype_safetensors_name(a), *y = ck_dtype_safetensors_name(b);
    return x != NULL && y != NULL && strcmp(x, y) == 0;
}

const ck_writer ck_safetensors_writer = {
    .encode = st_encode,
    .own_order = true,
    .same_type = ck_st_same_type,
    .shape = &ck_shape_st,
};

const char *ck_st_type_refusal(const ck_dtype *dt, char *buf, size_t cap)
{
    if (dt->kind == CK_KIND_STR)
        return "a str value has no place in it";
    if (ck_dtype_safetensors_name(dt) != NULL)
        return NULL;
    snprintf(buf, cap, "type %s has no safetensors dtype", ck_dtype_canonical_name(dt));
    return buf;
}

/* The header is a JSON object of C strings, one key its own. */
const char *ck_st_name_refusal(const char *name, size_t len)
{
    if (memchr(name, '\0', len) != NULL)
        return "safetensors cannot hold a name with a NUL byte";
    if (len == strlen("__metadata__") && memcmp(name, "__metadata__", len) == 0)
        return "safetensors keeps that name for its metadata";
    return NULL;
}

const ck_target ck_safetensors_target = {
    .holder = "safetensors",
    .type_refusal = ck_st_type_refusal,
    .name_refusal = ck_st_name_refusal,
    .shape = &ck_shape_st,
};
