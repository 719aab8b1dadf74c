/* SPDX-License-Identifier: Apache-2.0 */
#define _GNU_SOURCE /* copy_file_range */
#include "ckpt_writer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "ckpt_reader.h"
#include "ckpt_str.h"
#include "../core/dir_name.h"
#include "../io/byte_sink.h"

static size_t put_len_field(unsigned char *p, unsigned field, uint64_t len)
{
    p[0] = (unsigned char)(field << 3 | 2);
    return 1 + ck_put_varint(p + 1, len);
}

/* The header of one record: everything up to the content bytes.  Layout as
 * MindSpore writes it: Checkpoint{1: Value{1: tag, 2: TensorProto{1: dims
 * (unpacked), 2: tensor_type, 3: content}}}. */
static size_t encode_header(unsigned char *p, const char *name, size_t name_len,
                            const char *type, const int64_t *dims, uint32_t ndim,
                            uint64_t content_len)
{
    size_t type_len = strlen(type);
    uint64_t tp_len = 0;
    for (uint32_t i = 0; i < ndim; i++)
        tp_len += 1 + ck_varint_len((uint64_t)dims[i]);
    tp_len += 1 + ck_varint_len(type_len) + type_len;
    tp_len += 1 + ck_varint_len(content_len) + content_len;
    uint64_t value_len = 1 + ck_varint_len(name_len) + name_len + 1 + ck_varint_len(tp_len) + tp_len;

    size_t n = put_len_field(p, 1, value_len);
    n += put_len_field(p + n, 1, name_len);
    memcpy(p + n, name, name_len);
    n += name_len;
    n += put_len_field(p + n, 2, tp_len);
    for (uint32_t i = 0; i < ndim; i++) {
        p[n++] = 1 << 3; /* dims, varint */
        n += ck_put_varint(p + n, (uint64_t)dims[i]);
    }
    n += put_len_field(p + n, 2, type_len);
    memcpy(p + n, type, type_len);
    n += type_len;
    n += put_len_field(p + n, 3, content_len);
    return n;
}

#define HEADER_MAX (CK_CKPT_MAX_TAG + 64 + CK_MAX_DIMS * 11 + CK_CKPT_MAX_TYPE)

/* UTF-8 text -> UTF-32LE, as MindSpore stores `str` (an empty string is one
 * U+0000, numpy's <U1; ckpt_str.h).  Returns a malloc'ed buffer. */
static unsigned char *utf8_to_utf32(ck_sink *s, const ck_write_tensor *t, uint64_t *out_len)
{
    char q[CK_QUOTE_BUF];
    uint64_t total = 0;
    for (size_t i = 0; i < t->n_pieces; i++)
        total += t->pieces[i].len;
    if (total > CK_CKPT_MAX_STR / 4) {
        ck_fail(s->err, EFBIG, "%s: tensor '%s': str value of %llu bytes is over the limit",
                s->path, ck_quote(q, t->name, t->name_len), (unsigned long long)total);
        return NULL;
    }
    unsigned char *u8 = malloc(total + 1);
    unsigned char *u32 = malloc(4 * (total + 1));
    if (u8 == NULL || u32 == NULL) {
        free(u8);
        free(u32);
        ck_nomem(s->err, s->path);
        return NULL;
    }
    uint64_t at = 0;
    for (size_t i = 0; i < t->n_pieces; i++) {
        const ck_piece *p = &t->pieces[i];
        if (p->mem != NULL)
            memcpy(u8 + at, p->mem, p->len);
        else if (ck_source_read(p->src, u8 + at, p->len, p->off, s->err) < 0)
            goto fail;
        at += p->len;
    }
    if (ck_ckpt_str_encode(u8, total, u32, out_len)) {
        free(u8);
        return u32;
    }
    ck_fail(s->err, EINVAL, "%s: tensor '%s': str content is not valid UTF-8", s->path,
            ck_quote(q, t->name, t->name_len));
fail:
    free(u8);
    free(u32);
    return NULL;
}

/* Write the bytes [off, off + len) of a tensor given as pieces. */
static int write_range(ck_sink *s, const ck_piece *pieces, size_t n_pieces, uint64_t off,
                       uint64_t len)
{
    uint64_t base = 0;
    for (size_t i = 0; i < n_pieces && len > 0; i++) {
        const ck_piece *p = &pieces[i];
        if (off < base + p->len) {
            uint64_t within = off - base;
            uint64_t n = p->len - within < len ? p->len - within : len;
            if (ck_sink_piece(s, p, within, n) < 0)
                return -1;
            off += n;
            len -= n;
        }
        base += p->len;
    }
    return 0;
}

static int encode_tensor(ck_sink *s, const ck_write_tensor *t, uint64_t slice_bytes)
{
    char q[CK_QUOTE_BUF];
    if (t->name_len > CK_CKPT_MAX_TAG)
        return ck_fail(s->err, ENAMETOOLONG, "%s: tensor '%s': name longer than %d bytes",
                       s->path, ck_quote(q, t->name, t->name_len), CK_CKPT_MAX_TAG);
    ck_piece str_piece = {0};
    const ck_piece *pieces = t->pieces;
    size_t n_pieces = t->n_pieces;
    const int64_t *dims = t->dims;
    uint32_t ndim = t->ndim;
    static const int64_t zero_dim[1] = {0};
    unsigned char *u32 = NULL;
    if (t->dtype->kind == CK_KIND_STR) {
        if ((u32 = utf8_to_utf32(s, t, &str_piece.len)) == NULL)
            return -1;
        str_piece.mem = u32;
        pieces = &str_piece;
        n_pieces = 1;
        dims = zero_dim; /* MindSpore writes str values with dims [0] */
        ndim = 1;
    } else if (t->dtype->kind == CK_KIND_OPAQUE) {
        ndim = 0; /* random_op state is stored with dims [] */
    } else if (ndim == 0 && t->scalar_dims_zero) {
        dims = zero_dim;
        ndim = 1;
    }
    uint64_t total = 0;
    for (size_t i = 0; i < n_pieces; i++)
        total += pieces[i].len;

    /* One record per slice; an empty tensor still gets one record, or it
     * would vanish from the file. */
    unsigned char header[HEADER_MAX];
    int rc = 0;
    uint64_t off = 0;
    do {
        uint64_t len = total - off < slice_bytes ? total - off : slice_bytes;
        size_t h = encode_header(header, t->name, t->name_len, t->dtype->ms_name, dims, ndim,
                                 len);
        if (ck_sink_write(s, header, h) < 0 || ck_sink_payload(s, len) < 0 ||
            write_range(s, pieces, n_pieces, off, len) < 0) {
            rc = -1;
            break;
        }
        off += len;
    } while (off < total);
    free(u32);
    return rc;
}

/* ---- the walk over the original file ---- */

typedef struct writer {
    const ck_model *m;
    const ck_write_tensor *tensors;
    size_t n;
    uint32_t *entry_of;         /* original id -> index in tensors, or UINT32_MAX */
    ck_name_map live_by_dir;    /* built only when the file has replaced records */
    bool *keep_old;             /* per id of a replaced record: written again */
    uint64_t slice_bytes;
    ck_sink s;
} writer;

static const ck_write_tensor *entry(const writer *w, uint32_t id)
{
    uint32_t e = w->entry_of[id];
    return e == UINT32_MAX ? NULL : &w->tensors[e];
}

/* A replaced record is kept only while the tensor that replaced it is
 * written unchanged after it; otherwise it would come back or be noise. */
static bool keep_superseded(const writer *w, const ck_tensor *old)
{
    char dir[CK_DIR_NAME_MAX + 1];
    static const char *const suffix[] = {NULL, "%map.key", "%map.value", "%map.status"};
    size_t n = ck_dir_name(old->name, old->name_len, suffix[old->part], dir);
    uint32_t live = ck_name_map_get(&w->live_by_dir, dir, n);
    if (live == CK_NAME_MAP_NONE)
        return false;
    const ck_write_tensor *e = entry(w, live);
    return e != NULL && e->unchanged;
}

/* Map parameters are written back only unchanged (all three parts) or not
 * at all. */
static int map_group_state(writer *w, uint32_t key_id, bool *keep)
{
    int present = 0, unchanged = 0;
    for (uint32_t i = key_id; i < key_id + 3; i++) {
        const ck_write_tensor *e = entry(w, i);
        present += e != NULL;
        unchanged += e != NULL && e->unchanged;
    }
    if (present != 0 && unchanged != 3) {
        char q[CK_QUOTE_BUF];
        const ck_tensor *t = &w->m->index.tensors[key_id];
        return ck_fail(w->s.err, EPERM, "%s: map parameter '%s' can only be kept or deleted "
                       "as a whole, not edited", w->s.path, ck_quote(q, t->name, t->name_len));
    }
    *keep = present == 3;
    return 0;
}

/* One group of records as it will be written: its name and whether it is
 * a map parameter, the two things the reader joins adjacent records by. */
typedef struct out_group {
    const char *name;
    size_t name_len;
    bool map, old;              /* old: a replaced record kept */
    uint32_t id;
} out_group;

/* How the original group at id is written (false: it is not). */
static int out_group_of(writer *w, uint32_t id, out_group *g, bool *written)
{
    const ck_tensor *t = &w->m->index.tensors[id];
    *g = (out_group){.name = t->name, .name_len = t->name_len,
                     .map = t->part != CK_PART_WHOLE, .old = t->superseded, .id = id};
    if (t->superseded) {
        *written = keep_superseded(w, t);
        return 0;
    }
    if (g->map)
        return map_group_state(w, id, written);
    const ck_write_tensor *e = entry(w, id);
    *written = e != NULL;
    if (e != NULL && !e->unchanged) {
        g->name = e->name;
        g->name_len = e->name_len;
    }
    return 0;
}

static bool joins(const out_group *a, const out_group *b)
{
    return a->map == b->map && a->name_len == b->name_len &&
           memcmp(a->name, b->name, a->name_len) == 0;
}

/* Which replaced records are written again.  The reader joins adjacent
 * records of one name as slices of one tensor, so a kept replaced record
 * must never end up next to another record of its name: [v, w, v] with w
 * deleted would read back as one v of both contents.  Such a record is
 * dropped (it is invisible to the reader either way).  In the original
 * file two neighbouring groups never join (the reader would have made them
 * one), so an unchanged tree keeps every record and stays byte-identical.
 * The record before a dropped one never has the name of the record after
 * it: a replaced record comes before every other record of its name, and
 * a record of that name before it was dropped in its turn. */
static int plan_superseded(writer *w)
{
    const ck_index *ix = &w->m->index;
    out_group prev = {0}, cur;
    bool have_prev = false, written;
    for (uint32_t id = 0; id < ix->count;) {
        const ck_tensor *t = &ix->tensors[id];
        uint32_t next = id + (t->part == CK_PART_WHOLE ? 1 : 3);
        if (out_group_of(w, id, &cur, &written) < 0)
            return -1;
        w->keep_old[id] = t->superseded && written;
        id = next;
        if (!written)
            continue;
        if (have_prev && prev.old && joins(&prev, &cur))
            w->keep_old[prev.id] = false;
        prev = cur;
        have_prev = true;
    }
    /* New tensors follow; a kept replaced record cannot share a name with
     * one (its live tensor holds the name), but the rule is the same. */
    for (size_t i = 0; i < w->n && have_prev && prev.old; i++)
        if (w->tensors[i].orig_id == CK_WRITE_NEW) {
            cur = (out_group){.name = w->tensors[i].name, .name_len = w->tensors[i].name_len};
            if (joins(&prev, &cur))
                w->keep_old[prev.id] = false;
            break;
        }
    return 0;
}

static int write_original(writer *w, uint32_t id, uint32_t *next)
{
    const ck_index *ix = &w->m->index;
    const ck_tensor *t = &ix->tensors[id];
    ck_source *file = w->m->sources[0];
    *next = id + 1;
    if (t->part != CK_PART_WHOLE) {
        *next = id + 3;
        bool keep = false;
        if (t->superseded)
            keep = w->keep_old[id];
        else if (map_group_state(w, id, &keep) < 0)
            return -1;
        return keep ? ck_sink_copy(&w->s, file, t->rec_off, t->rec_end - t->rec_off) : 0;
    }
    if (t->superseded)
        return w->keep_old[id] ? ck_sink_copy(&w->s, file, t->rec_off, t->rec_end - t->rec_off)
                               : 0;
    const ck_write_tensor *e = entry(w, id);
    if (e == NULL)
        return 0; /* deleted */
    if (e->unchanged)
        return ck_sink_copy(&w->s, file, t->rec_off, t->rec_end - t->rec_off);
    return encode_tensor(&w->s, e, w->slice_bytes);
}

static int write_crc_trailer(ck_sink *s)
{
    unsigned char tr[17] = "crc_num";
    uLong crc = s->crc;
    for (int i = 16; i >= 13; i--, crc >>= 8)
        tr[i] = (unsigned char)crc;
    s->crc_on = false;
    return ck_sink_write(s, tr, sizeof tr);
}

static int walk(writer *w)
{
    const ck_index *ix = &w->m->index;
    ck_source *file = w->m->n_sources ? w->m->sources[0] : NULL; /* NULL: -o create */
    uint64_t pos = 0; /* end of what has been handled in the original */
    for (uint32_t id = 0; id < ix->count;) {
        const ck_tensor *t = &ix->tensors[id];
        /* Bytes between records (unknown fields) are kept as they are. */
        if (t->rec_off > pos && ck_sink_copy(&w->s, file, pos, t->rec_off - pos) < 0)
            return -1;
        if (write_original(w, id, &id) < 0)
            return -1;
        pos = t->rec_end;
    }
    uint64_t end = ck_ckpt_info_of(w->m)->records_end;
    if (end > pos && ck_sink_copy(&w->s, file, pos, end - pos) < 0)
        return -1;
    for (size_t i = 0; i < w->n; i++)
        if (w->tensors[i].orig_id == CK_WRITE_NEW &&
            encode_tensor(&w->s, &w->tensors[i], w->slice_bytes) < 0)
            return -1;
    return ck_ckpt_info_of(w->m)->has_crc ? write_crc_trailer(&w->s) : 0;
}

/* Live tensors by directory name, to pair replaced records with the tensor
 * that replaced them; only files that have such records need it. */
static int index_live(writer *w)
{
    const ck_index *ix = &w->m->index;
    if (ix->n_live == ix->count)
        return 0;
    for (size_t i = 0; i < ix->n_live; i++) {
        const ck_tensor *t = &ix->tensors[ix->live[i]];
        if (ck_name_map_put(&w->live_by_dir, t->dir_name, strlen(t->dir_name), ix->live[i]) < 0)
            return -1;
    }
    return 0;
}

int ck_ckpt_write(const ck_model *m, const ck_write_tensor *tensors, size_t n,
                  const ck_write_opts *opts, int out_fd, ck_error *err)
{
    writer w = {.m = m, .tensors = tensors, .n = n};
    w.slice_bytes = opts && opts->slice_bytes ? opts->slice_bytes : CK_CKPT_SLICE_BYTES;
    w.s = (ck_sink){.fd = out_fd, .path = opts && opts->out ? opts->out : m->path,
                    .crc_on = ck_ckpt_info_of(m)->has_crc, .crc = crc32(0, NULL, 0),
                    .err = err, .progress = opts ? opts->progress : NULL};
    w.s.buf = malloc(CK_SINK_BUF);
    w.entry_of = malloc((m->index.count ? m->index.count : 1) * sizeof *w.entry_of);
    w.keep_old = calloc(m->index.count ? m->index.count : 1, sizeof *w.keep_old);
    ck_name_map_init(&w.live_by_dir);
    int rc = -1;
    if (w.s.buf == NULL || w.entry_of == NULL || w.keep_old == NULL || index_live(&w) < 0) {
        ck_nomem(err, m->path);
        goto out;
    }
    for (size_t i = 0; i < m->index.count; i++)
        w.entry_of[i] = UINT32_MAX;
    for (size_t i = 0; i < n; i++) {
        uint32_t id = tensors[i].orig_id;
        if (id == CK_WRITE_NEW)
            continue;
        if (id >= m->index.count || m->index.tensors[id].superseded ||
            w.entry_of[id] != UINT32_MAX) {
            ck_fail(err, EINVAL, "%s: internal error: bad tensor list for the writer", m->path);
            goto out;
        }
        w.entry_of[id] = (uint32_t)i;
    }
    if (plan_superseded(&w) < 0)
        goto out;
    if (ck_sink_wrap(&w.s, &m->env) == 0 && (rc = walk(&w)) == 0)
        rc = ck_sink_end(&w.s);
out:
    ck_sink_drop(&w.s);
    free(w.s.buf);
    free(w.entry_of);
    free(w.keep_old);
    ck_name_map_free(&w.live_by_dir);
    return rc;
}

/* ---- the writer ---- */

static int ckpt_encode(const ck_model *m, const ck_write_tensor *tensors, size_t n,
                       ck_commit_group *g, ck_error *err)
{
    /* An empty file is what no tensors encode to, and MindSpore's
     * load_checkpoint raises on it (as ckptfs's reader refuses it): said
     * before anything is written rather than by the read-back check. */
    if (n == 0)
        return ck_fail(err, EINVAL, "%s: no tensors to save, and MindSpore loads no empty "
                       "checkpoint; nothing was saved", m->path);
    ck_write_opts opts = {.progress = g->progress, .out = g->files[0].target};
    return ck_ckpt_write(m, tensors, n, &opts, g->files[0].fd, err);
}

/* A type is its MindSpore name in a checkpoint. */
static bool ckpt_same_type(const ck_dtype *a, const ck_dtype *b)
{
    return strcmp(a->ms_name, b->ms_name) == 0;
}

const ck_writer ck_ckpt_writer = {
    .encode = ckpt_encode,
    .in_tree_order = true,
    .same_type = ckpt_same_type,
    .shape = &ck_shape_ckpt,
};

/* A checkpoint holds every type with a MindSpore name, str too. */
static const char *ckpt_type_refusal(const ck_dtype *dt, char *buf, size_t cap)
{
    if (ck_dtype_from_mindspore(dt->ms_name, strlen(dt->ms_name), 0) != NULL)
        return NULL;
    snprintf(buf, cap, "type %s has no MindSpore checkpoint type", ck_dtype_canonical_name(dt));
    return buf;
}

const ck_target ck_ckpt_target = {
    .holder = "a MindSpore checkpoint",
    .type_refusal = ckpt_type_refusal,
    .shape = &ck_shape_ckpt,
    .empty_refusal = "MindSpore reads no empty checkpoint",
};
