/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests of a file view's build (codec/view.h) without the mount or a
 * kernel: the safetensors view (codec/safetensors/safetensors_view.c),
 * looked up as -o as=safetensors looks it up, of a small .ckpt encoded
 * with protobuf-c.  Each file's segments are concatenated as the mount
 * serves them (the view's bytes copied, a tensor's run read with
 * ck_model_read) and judged by an independent parse: jansson reads the
 * header and the set's index, and every tensor's dtype, shape, data
 * offsets and bytes must be those encoded, each tensor segment where its
 * data_offsets put it.
 */
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../codec/core/model.h"
#include "../../codec/registry.h"
#include "../../codec/view.h"
#include "checkpoint.pb-c.h"
#include "unit.h"

/* The model: its tensors as encoded, and as safetensors must show them. */
typedef struct vt {
    const char *name, *ms, *st;
    int64_t dims[2];
    size_t ndim, len;
    unsigned char bytes[64];
} vt;

#define N_VT 5

static vt model[N_VT] = {
    {"fc.weight", "Float32", "F32", {3, 4}, 2, 48, {0}},
    {"fc.bias", "Float32", "F32", {3}, 1, 12, {0}},
    {"step", "Int64", "I64", {0}, 0, 8, {0}},
    {"emb", "Float16", "F16", {2, 5}, 2, 20, {0}},
    {"empty", "Float32", "F32", {0}, 1, 0, {0}},
};

/* The .ckpt of model, one Checkpoint message per value as MindSpore
 * writes it, at path; false when it cannot be written. */
static bool write_model(const char *path)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        return false;
    bool ok = true;
    for (size_t i = 0; ok && i < N_VT; i++) {
        vt *t = &model[i];
        for (size_t b = 0; b < t->len; b++)
            t->bytes[b] = (unsigned char)(17 * i + 3 * b + 1);
        size_t k;
        unsigned char *buf = unit_ckpt_value(t->name, t->ms, t->dims, t->ndim, t->bytes, t->len,
                                             &k);
        ok = buf != NULL && fwrite(buf, 1, k, f) == k;
        free(buf);
    }
    return fclose(f) == 0 && ok;
}

/* File f's bytes as the mount serves them, in a new buffer; NULL when a
 * segment does not follow the last, or a tensor's run cannot be read. */
static unsigned char *assemble(const ck_model *m, const ck_view_file *f)
{
    unsigned char *buf = malloc(f->size + 1);
    uint64_t at = 0;
    for (size_t k = 0; buf != NULL && k < f->n_segs; k++) {
        const ck_view_seg *s = &f->segs[k];
        ck_error err = {0};
        if (at + s->len > f->size) {
            free(buf);
            return NULL;
        }
        if (s->kind == CK_SEG_BYTES) {
            if (s->len > 0)
                memcpy(buf + at, s->bytes, s->len);
        } else if (s->tensor >= m->index.count ||
                   ck_model_read(m, &m->index.tensors[s->tensor], buf + at, s->len, s->off,
                                 &err) != (long)s->len) {
            free(buf);
            return NULL;
        }
        at += s->len;
    }
    if (buf != NULL && at != f->size) {
        free(buf);
        return NULL;
    }
    return buf;
}

static const vt *model_tensor(const char *name)
{
    for (size_t i = 0; i < N_VT; i++)
        if (strcmp(model[i].name, name) == 0)
            return &model[i];
    return NULL;
}

/* Whether entry e of a header describes t at data part offset off. */
static bool entry_is(json_t *e, const vt *t, uint64_t *off, uint64_t *end)
{
    json_t *shape = json_object_get(e, "shape"), *d = json_object_get(e, "data_offsets");
    if (!json_is_array(shape) || json_array_size(shape) != t->ndim || !json_is_array(d) ||
        json_array_size(d) != 2 || strcmp(json_string_value(json_object_get(e, "dtype")) ?: "",
                                          t->st) != 0)
        return false;
    for (size_t k = 0; k < t->ndim; k++)
        if (json_integer_value(json_array_get(shape, k)) != t->dims[k])
            return false;
    *off = (uint64_t)json_integer_value(json_array_get(d, 0));
    *end = (uint64_t)json_integer_value(json_array_get(d, 1));
    return *end >= *off && *end - *off == t->len;
}

/* Each tensor segment of f where its tensor's data_offsets (in hdr) put
 * it, from data (the data part's first byte in the file); counted. */
static bool segments_placed(const ck_model *m, const ck_view_file *f, json_t *hdr,
                            uint64_t data, size_t *n_tensors)
{
    uint64_t at = 0;
    *n_tensors = 0;
    for (size_t k = 0; k < f->n_segs; at += f->segs[k].len, k++) {
        if (f->segs[k].kind != CK_SEG_TENSOR)
            continue;
        json_t *e = json_object_get(hdr, m->index.tensors[f->segs[k].tensor].name);
        json_t *d = json_object_get(e, "data_offsets");
        if (d == NULL || f->segs[k].off != 0 ||
            (uint64_t)json_integer_value(json_array_get(d, 0)) + data != at)
            return false;
        (*n_tensors)++;
    }
    return true;
}

/* File f of the view parses as safetensors holding model's tensors (those
 * of names `names` when not NULL: a shard's), their bytes as encoded;
 * what it holds counted in *held. */
static void check_file(const ck_model *m, const ck_view_file *f, const char *what,
                       size_t *held)
{
    unsigned char *buf = assemble(m, f);
    check(buf != NULL, "view: %s: its segments follow one another and are read", what);
    if (buf == NULL)
        return;
    uint64_t n = 0;
    for (int b = 7; b >= 0; b--)
        n = n << 8 | buf[b];
    json_error_t je;
    json_t *hdr = 8 + n <= f->size ? json_loadb((char *)buf + 8, n, 0, &je) : NULL;
    check(hdr != NULL && json_is_object(hdr) && (8 + n) % 8 == 0,
          "view: %s: a header jansson parses, its length %llu aligned", what,
          (unsigned long long)n);
    bool ok = hdr != NULL;
    size_t count = 0;
    uint64_t last = 0;
    const char *key;
    json_t *e;
    json_object_foreach(hdr, key, e) {
        if (strcmp(key, "__metadata__") == 0) {
            ok = ok && strcmp(json_string_value(json_object_get(e, "format")) ?: "", "pt") == 0;
            continue;
        }
        const vt *t = model_tensor(key);
        uint64_t off = 0, end = 0;
        ok = ok && t != NULL && entry_is(e, t, &off, &end) && 8 + n + end <= f->size &&
             (t->len == 0 || memcmp(buf + 8 + n + off, t->bytes, t->len) == 0);
        last = end > last ? end : last;
        count++;
    }
    size_t segs = 0;
    check(ok && 8 + n + last == f->size && segments_placed(m, f, hdr, 8 + n, &segs) &&
              segs == count,
          "view: %s: each tensor's dtype, shape, offsets and bytes as encoded, one segment each"
          " (%zu tensors)", what, count);
    *held += count;
    json_decref(hdr);
    free(buf);
}

/* The set's index (file 0): every tensor mapped to one of the shards,
 * total_size their bytes. */
static void check_index(const ck_model *m, const ck_view_files *v)
{
    const ck_view_file *ix = &v->files[0];
    unsigned char *buf = assemble(m, ix);
    json_error_t je;
    json_t *j = buf != NULL ? json_loadb((char *)buf, ix->size, 0, &je) : NULL;
    json_t *map = json_object_get(j, "weight_map");
    uint64_t total = 0;
    bool ok = json_is_object(map) && json_object_size(map) == N_VT && ix->shows_all;
    for (size_t i = 0; ok && i < N_VT; i++) {
        const char *shard = json_string_value(json_object_get(map, model[i].name));
        bool found = false;
        for (size_t f = 1; shard != NULL && f < v->n; f++)
            found = found || strcmp(v->files[f].name, shard) == 0;
        ok = found;
        total += model[i].len;
    }
    json_t *meta = json_object_get(j, "metadata");
    ok = ok && (uint64_t)json_integer_value(json_object_get(meta, "total_size")) == total;
    check(ok, "view: the set's index names every tensor's shard, total_size %llu, shown all",
          (unsigned long long)total);
    json_decref(j);
    free(buf);
}

void test_view(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/view.ckpt", tmpdir);
    check(write_model(path), "view: the .ckpt written");
    ck_error err = {0};
    ck_open_opts oo = {0};
    ck_model *m = ck_model_open(path, &oo, &err);
    check(m != NULL && m->index.n_live == N_VT, "view: the .ckpt opens (%s)", err.msg);
    const ck_format *st = ck_format_by_name("safetensors");
    const ck_view *view = st != NULL ? ck_format_view(st) : NULL;
    check(view != NULL && ck_format_view(ck_format_by_name("onnx")) == NULL,
          "view: safetensors has a view, ONNX none");
    if (m == NULL || view == NULL) {
        ck_model_close(m);
        return;
    }
    ck_view_files v;
    int rc = view->build(m, &(ck_view_opts){.in = path}, &v, &err);
    check(rc == 0 && v.n == 1 && strcmp(v.files[0].name, "model.safetensors") == 0,
          "view: one file, model.safetensors (%s)", err.msg);
    size_t held = 0;
    if (rc == 0 && v.n == 1)
        check_file(m, &v.files[0], "model.safetensors", &held);
    check(held == N_VT, "view: model.safetensors holds every tensor");
    view->free(&v);

    /* 48 bytes a shard: fc.weight alone, the rest after it */
    rc = view->build(m, &(ck_view_opts){.in = path, .max_shard = 48}, &v, &err);
    check(rc == 0 && v.n > 2 && strcmp(v.files[0].name, "model.safetensors.index.json") == 0,
          "view: a set, its index first (%s)", err.msg);
    held = 0;
    for (size_t f = 1; rc == 0 && f < v.n; f++)
        check_file(m, &v.files[f], v.files[f].name, &held);
    if (rc == 0 && v.n > 2)
        check_index(m, &v);
    check(held == N_VT, "view: the shards hold every tensor once (%zu)", held);
    view->free(&v);
    ck_model_close(m);
}
