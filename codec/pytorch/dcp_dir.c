/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dcp_dir: a DCP checkpoint directory opened as one model (dcp_dir.h).
 *
 * The model's sources are `.metadata` (source 0) and each data file that
 * storage_data names, opened once beneath the directory with no link
 * followed.  Each item is parsed as a torch.save archive of its own
 * through a slice of its file (ck_source_slice: bytes [offset, offset +
 * length), fd -1 so nothing splices through it), read by pt_reader's own
 * parts (pt_zip.c, pt_pickle.c with a bare root allowed, pt_leaf.c), and
 * its tensor's extents are then placed back at file offsets, so that reads
 * go straight to the data files (splice included).  A chunk's archive
 * must hold one tensor of the metadata's dtype and the chunk's sizes.  A
 * data file is opened by ck_model_open_data_file (a FIFO, or a hard link
 * to another, is refused), and is_data_file makes it watched for other
 * programs' writes as any model's file is.
 *
 * PyTorch's SerializationFormat.SAFETENSORS writes nothing for a tensor
 * chunk at its item and records offset = where the blob will start,
 * length = its bytes; the blob (a safetensors header and the data of every
 * chunk of the file, keyed by fqn) follows the byte values.  Such a chunk,
 * an item that does not start as a ZIP, is read from that header, parsed
 * once per file (ck_st_parse_json, 100 MB at most): the fqn's entry must
 * have the metadata's dtype and the chunk's shape and lie inside the file,
 * and DCP_SHARDING_INFO's saved_offsets, when present, must be the chunk's
 * (a blob keyed by name holds one chunk of a tensor).
 *
 * Assembly: one chunk is the tensor, its view strided or not.  Several
 * must each be contiguous.  Chunks of whole rows (cut along dimension 0,
 * any sizes, empty ones skipped) are sorted by their first row and must
 * follow each other exactly: a gap or an overlap is refused.  Any other
 * cut must be a grid: along each dimension the chunks' distinct offsets
 * are the cuts, each chunk fills one cell and each cell has one.  It is
 * placed by ck_grid_place, the distributed merge's interleaving; a
 * dimension cut unevenly before the last one cut (FSDP's torch.chunk rows
 * beside tensor parallelism's even columns) keeps its cuts in the gather
 * (tensor_index.h).  The last dimension cut must be even, so that every
 * run has one length; an uneven one is refused by name.
 *
 * The directory is a collection (`dcp`, probed by a .metadata that starts
 * with a pickle's PROTO, protocol 2 to 5).  Mounting reads .metadata and,
 * per item, the archive's last 42 bytes, its central directory, the local
 * headers of byteorder, data.pkl and the storage, and data.pkl: never a
 * tensor's bytes.
 */
#define _GNU_SOURCE
#include "dcp_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "../collections/model_set.h"
#include "../collections/tensor_grid.h"
#include "../core/dir_name.h"
#include "../core/model_dir.h"
#include "../core/le_bytes.h"
#include "../core/model.h"
#include "../safetensors/safetensors_reader.h"
#include "dcp_metadata.h"
#include "pt_leaf.h"
#include "pt_pickle.h"
#include "pt_reader.h"
#include "pt_zip.h"

#define METADATA ".metadata"

/* What ckptfs-dump adds about the model (ck_model.state). */
typedef struct dcp_state {
    char notes[CK_QUOTE_BUF + 128];
    uint32_t n_files;           /* sources 1 .. n_files are the data files */
} dcp_state;

/* A data file storage_data names: its model source, and the header of its
 * safetensors blob when PyTorch wrote it so (SerializationFormat.SAFETENSORS:
 * byte values first, then one blob of every tensor chunk, which each
 * chunk's item points at by its offset). */
typedef struct data_file {
    const char *name;
    uint32_t src;
    json_t *st;                 /* the blob's header, parsed once; NULL: none */
    json_t *sharding;           /* its DCP_SHARDING_INFO (fqn -> saved_offsets), or NULL */
    uint64_t st_at, st_data;    /* where the blob and its data start */
} data_file;

typedef struct opener {
    const char *path;           /* the directory, for messages */
    ck_model *m;
    ck_dcp_meta meta;
    data_file *files;           /* sorted by name */
    size_t n_files;
    ck_pt_numbers nums;         /* byte values that are numbers */
    size_t chunks;              /* for the notes */
    size_t skipped;             /* byte values neither tensors nor numbers */
    char *first_skipped;
    ck_error *err;
} opener;

/* One item being read: its archive, through a slice of its file. */
typedef struct item {
    opener *o;
    const ck_dcp_item *it;
    uint32_t src;               /* its data file's source */
    ck_source *slice;
    ck_zip z;
    char where[PATH_MAX + 64];  /* "DIR/FILE: item at offset N" */
} item;

static int nomem(opener *o)
{
    return ck_nomem(o->err, o->path);
}

/* ---- data files ---------------------------------------------------------- */

static int cmp_name(const void *a, const void *b)
{
    return strcmp(((const data_file *)a)->name, ((const data_file *)b)->name);
}

static data_file *file_named(const opener *o, const char *name)
{
    data_file key = {.name = name};
    return bsearch(&key, o->files, o->n_files, sizeof key, cmp_name);
}

/* Every data file storage_data names, opened once (beneath the directory,
 * a regular file, no link followed: ck_model_open_data_file). */
static int open_files(opener *o)
{
    size_t n = 0;
    for (size_t i = 0; i < o->meta.n; i++)
        n += o->meta.v[i].bytes ? 1 : o->meta.v[i].n_chunks;
    if ((o->files = calloc(n ? n : 1, sizeof *o->files)) == NULL)
        return nomem(o);
    for (size_t i = 0; i < o->meta.n; i++) {
        const ck_dcp_entry *e = &o->meta.v[i];
        if (e->bytes)
            o->files[o->n_files++].name = e->item.file;
        for (uint32_t c = 0; !e->bytes && c < e->n_chunks; c++)
            o->files[o->n_files++].name = e->chunks[c].item.file;
    }
    if (o->n_files == 0)
        return 0;
    qsort(o->files, o->n_files, sizeof *o->files, cmp_name);
    size_t u = 0;
    for (size_t i = 0; i < o->n_files; i++)
        if (u == 0 || strcmp(o->files[u - 1].name, o->files[i].name) != 0)
            o->files[u++] = o->files[i];
    o->n_files = u;
    for (size_t i = 0; i < o->n_files; i++) {
        long id = ck_model_open_data_file(o->m, o->files[i].name, o->err);
        if (id < 0)
            return -1;
        o->files[i].src = (uint32_t)id;
    }
    return 0;
}

/* ---- items --------------------------------------------------------------- */

static int item_open(opener *o, const ck_dcp_item *it, item *x)
{
    *x = (item){.o = o, .it = it};
    const data_file *f = file_named(o, it->file);
    ck_source *file = o->m->sources[f->src];
    x->src = f->src;
    snprintf(x->where, sizeof x->where, "%s/%s: item at offset %" PRIu64, o->path, it->file,
             it->off);
    if (it->off > file->size || it->len > file->size - it->off)
        return ck_fail(o->err, EINVAL, "%s: %" PRIu64 " bytes, past the end of the file "
                       "(%" PRIu64 " bytes)", x->where, it->len, file->size);
    if ((x->slice = ck_source_slice(file, it->off, it->len, x->where, o->err)) == NULL)
        return -1;
    unsigned char head[4] = {0};
    size_t n = it->len < sizeof head ? (size_t)it->len : sizeof head;
    if (ck_source_read(x->slice, head, n, 0, o->err) < 0)
        return -1;
    if (!ck_zip_magic(head, n))
        return ck_fail(o->err, EINVAL, "%s: not a torch.save archive", x->where);
    return ck_zip_read(x->slice, x->where, &x->z, o->err);
}

static void item_close(item *x)
{
    ck_zip_free(&x->z);
    ck_source_close(x->slice);
    x->slice = NULL;
}

/* Where record name's bytes start in the data file. */
static int record_at(item *x, const ck_zip_entry *e, uint64_t *off)
{
    uint64_t rel = 0;
    if (ck_zip_data(x->slice, x->where, &x->z, e, &rel, x->o->err) < 0)
        return -1;
    *off = x->it->off + rel;
    return 0;
}

/* A small record read whole (byteorder, data.pkl); *buf malloc'd. */
static int read_record(item *x, const char *name, size_t max, unsigned char **buf, size_t *len)
{
    const ck_zip_entry *e = ck_zip_find(&x->z, name, strlen(name));
    uint64_t off = 0;
    *buf = NULL;
    *len = 0;
    if (e == NULL)
        return 0;
    if (e->size > max)
        return ck_fail(x->o->err, EFBIG, "%s: %s: %" PRIu64 " bytes, more than ckptfs reads "
                       "(%zu)", x->where, name, e->size, max);
    if (record_at(x, e, &off) < 0)
        return -1;
    if ((*buf = malloc(e->size ? (size_t)e->size : 1)) == NULL)
        return nomem(x->o);
    *len = (size_t)e->size;
    return ck_source_read(x->o->m->sources[x->src], *buf, *len, off, x->o->err);
}

/* Run the item's data.pkl, calling fn for each leaf. */
static int item_walk(item *x, ck_pt_leaf_fn fn, void *ctx, ck_pt_walk *w)
{
    unsigned char *b = NULL;
    size_t n = 0;
    int rc = read_record(x, "byteorder", 16, &b, &n);
    if (rc == 0)
        rc = ck_zip_check_byteorder(b, n, x->where, x->o->err);
    free(b);
    if (rc == 0)
        rc = read_record(x, "data.pkl", CK_PT_PICKLE_MAX_BYTES, &b, &n);
    if (rc == 0 && b == NULL)
        rc = ck_fail(x->o->err, EINVAL, "%s: no data.pkl record: a ZIP archive, but not one "
                     "torch.save wrote", x->where);
    char file[sizeof x->where + 16];
    snprintf(file, sizeof file, "%s: data.pkl", x->where);
    if (rc == 0)
        rc = ck_pt_pickle_walk(b, n, file, true, fn, ctx, w, x->o->err);
    free(b);
    return rc;
}

/* A tensor's nbytes before place(): the view's, whatever it is (a value
 * saved as bytes has no metadata to compare with). */
#define SIZE_OF_VIEW UINT64_MAX

/* Leaf l, a tensor of item x, placed in t at file offsets; t's nbytes is
 * what the metadata gives, or SIZE_OF_VIEW. */
static int place(item *x, ck_tensor *t, const ck_pt_leaf *l, const char *name)
{
    char rec[8 + 256], q[CK_QUOTE_BUF];
    int rn = snprintf(rec, sizeof rec, "data/%.*s", (int)l->key_len, l->key);
    const ck_zip_entry *e = ck_zip_find(&x->z, rec, (size_t)rn);
    const char *why = e == NULL ? "its storage's record is not in the archive" : NULL;
    uint64_t nbytes = 0, data = 0;
    if (why == NULL)
        why = ck_pt_view_check(l, e->size, &nbytes);
    if (why == NULL && t->nbytes == SIZE_OF_VIEW)
        t->nbytes = nbytes;
    if (why == NULL && nbytes != t->nbytes)
        why = "another size than the metadata gives it";
    if (why == NULL) {
        if (record_at(x, e, &data) < 0)
            return -1;
        if (ck_pt_place_view(&x->o->m->index.arena, t, l, x->src, data, &why) == 0)
            return 0;
        if (why == NULL)
            return nomem(x->o);
    }
    return ck_fail(x->o->err, EINVAL, "%s: tensor '%s': %s", x->where,
                   ck_quote(q, name, strlen(name)), why);
}

/* ---- tensors ------------------------------------------------------------- */

/* A new tensor of the index named name (len bytes). */
static ck_tensor *new_tensor(opener *o, const char *name, size_t len)
{
    ck_index *ix = &o->m->index;
    long id = ix->count >= CK_MAX_TENSORS ? -1 : ck_index_add(ix);
    char *copy = id < 0 ? NULL : ck_arena_strndup(&ix->arena, name, len);
    if (copy == NULL) {
        nomem(o);
        return NULL;
    }
    ck_tensor *t = &ix->tensors[id];
    t->name = copy;
    t->name_len = (uint32_t)len;
    return t;
}

/* What a chunk's archive must hold: one tensor of the chunk's type and
 * shape, placed into t. */
typedef struct chunk_read {
    item *x;
    const ck_dcp_entry *e;
    const ck_dcp_chunk *c;
    ck_tensor *t;
    int leaves;
} chunk_read;

static int bad_chunk(const chunk_read *r, const char *what)
{
    char q[CK_QUOTE_BUF];
    return ck_fail(r->x->o->err, EINVAL, "%s: tensor '%s': %s", r->x->where,
                   ck_quote(q, r->e->fqn, r->e->fqn_len), what);
}

static int on_chunk_leaf(void *ctx, const ck_pt_leaf *l, ck_error *err)
{
    (void)err;
    chunk_read *r = ctx;
    if (l->kind != CK_PT_TENSOR || l->name_len != 0 || r->leaves++ > 0)
        return bad_chunk(r, "a chunk's archive that holds other than one tensor");
    if (l->dtype != r->e->dtype)
        return bad_chunk(r, "a chunk of another dtype than the metadata's");
    if (l->ndim != r->e->ndim)
        return bad_chunk(r, "a chunk of another shape than the metadata's");
    for (uint32_t d = 0; d < l->ndim; d++)
        if ((uint64_t)l->sizes[d] != r->c->sizes[d])
            return bad_chunk(r, "a chunk of another shape than the metadata's");
    return place(r->x, r->t, l, r->e->fqn);
}

/* Chunk c of e from its torch.save archive into t. */
static int read_archived(opener *o, const ck_dcp_entry *e, const ck_dcp_chunk *c, ck_tensor *t)
{
    item x;
    ck_pt_walk w = {0};
    chunk_read r = {.x = &x, .e = e, .c = c, .t = t};
    int rc = item_open(o, &c->item, &x);
    if (rc == 0)
        rc = item_walk(&x, on_chunk_leaf, &r, &w);
    if (rc == 0 && r.leaves == 0)
        rc = bad_chunk(&r, "a chunk's archive that holds no tensor");
    ck_pt_walk_free(&w);
    item_close(&x);
    return rc;
}

/* The header of f's safetensors blob at offset at, parsed once. */
static int blob_header(opener *o, data_file *f, uint64_t at, const char *where)
{
    ck_source *src = o->m->sources[f->src];
    unsigned char n8[8];
    if (f->st != NULL)
        return f->st_at == at ? 0 : ck_fail(o->err, EINVAL, "%s: a second safetensors blob "
                                            "in one data file (the first at offset %" PRIu64
                                            ")", where, f->st_at);
    if (at > src->size || src->size - at < 8)
        return ck_fail(o->err, EINVAL, "%s: past the end of the file (%" PRIu64 " bytes)", where,
                       src->size);
    if (ck_source_read(src, n8, 8, at, o->err) < 0)
        return -1;
    uint64_t n = ck_le64(n8);
    if (n > CK_ST_MAX_HEADER || n > src->size - at - 8)
        return ck_fail(o->err, EINVAL, "%s: a safetensors header of %" PRIu64 " bytes, past "
                       "the end of the file or over the limit of %u", where, n,
                       CK_ST_MAX_HEADER);
    char *text = malloc(n ? (size_t)n : 1);
    if (text == NULL)
        return nomem(o);
    int rc = ck_source_read(src, text, (size_t)n, at + 8, o->err);
    if (rc == 0 && (f->st = ck_st_parse_json(text, (size_t)n, at + 8, where,
                                             "the safetensors header", o->err)) == NULL)
        rc = -1;
    if (rc == 0 && !json_is_object(f->st))
        rc = ck_fail(o->err, EINVAL, "%s: a safetensors header that is not an object", where);
    /* the chunks' offsets, as a JSON text in the metadata: the tensors are
     * keyed by fqn alone */
    json_t *info = rc == 0 ? json_object_get(json_object_get(f->st, "__metadata__"),
                                             "DCP_SHARDING_INFO") : NULL;
    if (json_is_string(info) &&
        (f->sharding = ck_st_parse_json(json_string_value(info), json_string_length(info),
                                        at + 8, where, "DCP_SHARDING_INFO", o->err)) == NULL)
        rc = -1;
    free(text);
    f->st_at = at;
    f->st_data = at + 8 + n;
    return rc;
}

/* Whether a safetensors header entry has e's dtype and c's sizes; its data
 * offsets in [*begin, *end). */
static bool blob_entry_fits(const ck_dcp_entry *e, const ck_dcp_chunk *c, json_t *v,
                            uint64_t *begin, uint64_t *end)
{
    json_t *dt = json_object_get(v, "dtype"), *shape = json_object_get(v, "shape");
    json_t *offs = json_object_get(v, "data_offsets");
    unsigned bits = 0;
    const ck_dtype *d = json_is_string(dt) ? ck_dtype_from_safetensors(
                            json_string_value(dt), json_string_length(dt), &bits) : NULL;
    if (d == NULL || strcmp(d->ms_name, e->dtype->ms_name) != 0 || !json_is_array(shape) ||
        json_array_size(shape) != e->ndim || !json_is_array(offs) || json_array_size(offs) != 2)
        return false;
    for (uint32_t k = 0; k < e->ndim; k++) {
        json_t *x = json_array_get(shape, k);
        if (!json_is_integer(x) || (uint64_t)json_integer_value(x) != c->sizes[k])
            return false;
    }
    json_t *b = json_array_get(offs, 0), *n = json_array_get(offs, 1);
    if (!json_is_integer(b) || !json_is_integer(n) || json_integer_value(b) < 0 ||
        json_integer_value(n) < json_integer_value(b))
        return false;
    *begin = (uint64_t)json_integer_value(b);
    *end = (uint64_t)json_integer_value(n);
    return true;
}

/* Whether the blob's sharding info, when it has one, says c's offsets for
 * e: a blob keys its tensors by fqn, so it holds one chunk of each. */
static bool blob_chunk_is(const data_file *f, const ck_dcp_entry *e, const ck_dcp_chunk *c)
{
    if (f->sharding == NULL)
        return true;
    json_t *at = json_object_get(json_object_get(f->sharding, e->fqn), "saved_offsets");
    if (!json_is_array(at) || json_array_size(at) != e->ndim)
        return false;
    for (uint32_t k = 0; k < e->ndim; k++) {
        json_t *x = json_array_get(at, k);
        if (!json_is_integer(x) || (uint64_t)json_integer_value(x) != c->offsets[k])
            return false;
    }
    return true;
}

/* Chunk c of e from its data file's safetensors blob (keyed by the fqn)
 * into t: one extent. */
static int read_blob(opener *o, const ck_dcp_entry *e, const ck_dcp_chunk *c, ck_tensor *t,
                     data_file *f)
{
    char where[PATH_MAX + 64], q[CK_QUOTE_BUF];
    uint64_t begin = 0, end = 0;
    snprintf(where, sizeof where, "%s/%s: item at offset %" PRIu64, o->path, f->name,
             c->item.off);
    if (blob_header(o, f, c->item.off, where) < 0)
        return -1;
    json_t *v = json_object_get(f->st, e->fqn);
    if (!blob_chunk_is(f, e, c))
        return ck_fail(o->err, EINVAL, "%s: tensor '%s': the safetensors blob holds another "
                       "chunk of it (DCP_SHARDING_INFO's saved_offsets)", where,
                       ck_quote(q, e->fqn, e->fqn_len));
    if (!json_is_object(v) || !blob_entry_fits(e, c, v, &begin, &end) ||
        end - begin != t->nbytes || end > o->m->sources[f->src]->size - f->st_data)
        return ck_fail(o->err, EINVAL, "%s: tensor '%s': not in the safetensors blob with the "
                       "metadata's dtype and the chunk's shape, inside the file", where,
                       ck_quote(q, e->fqn, e->fqn_len));
    if (t->nbytes > 0 && ck_tensor_add_extent(t, f->src, f->st_data + begin, t->nbytes) < 0)
        return nomem(o);
    return 0;
}

/* Chunk c of e read into t (its nbytes the chunk's): a torch.save archive,
 * or a tensor of a safetensors blob, by the item's first bytes. */
static int read_chunk(opener *o, const ck_dcp_entry *e, const ck_dcp_chunk *c, ck_tensor *t)
{
    data_file *f = file_named(o, c->item.file);
    ck_source *src = o->m->sources[f->src];
    unsigned char head[9] = {0};
    size_t n = c->item.off >= src->size ? 0 : src->size - c->item.off < sizeof head
                                                  ? (size_t)(src->size - c->item.off)
                                                  : sizeof head;
    o->chunks++;
    if (ck_source_read(src, head, n, c->item.off, o->err) < 0)
        return -1;
    if (n == sizeof head && !ck_zip_magic(head, n) && head[8] == '{')
        return read_blob(o, e, c, t, f);
    return read_archived(o, e, c, t);
}

static uint64_t chunk_bytes(const ck_dcp_entry *e, const ck_dcp_chunk *c)
{
    uint64_t n = e->dtype->itemsize;
    for (uint32_t d = 0; d < e->ndim; d++)
        n *= c->sizes[d]; /* inside the tensor, whose bytes were bounded */
    return n;
}

static int bad_tiling(opener *o, const ck_dcp_entry *e, const char *what)
{
    char q[CK_QUOTE_BUF];
    return ck_fail(o->err, EINVAL, "%s/" METADATA ": tensor '%s': %s", o->path,
                   ck_quote(q, e->fqn, e->fqn_len), what);
}

/* Whether every chunk holds whole rows: cut along dimension 0 only. */
static bool rows_only(const ck_dcp_entry *e)
{
    for (uint32_t i = 0; i < e->n_chunks; i++)
        for (uint32_t d = 1; d < e->ndim; d++)
            if (e->chunks[i].offsets[d] != 0 || e->chunks[i].sizes[d] != (uint64_t)e->size[d])
                return false;
    return e->ndim > 0;
}

static int by_value(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The place of x among the n sorted values of c, or -1. */
static long place_of(const uint64_t *c, uint64_t n, uint64_t x)
{
    const uint64_t *p = bsearch(&x, c, n, sizeof *c, by_value);
    return p != NULL ? (long)(p - c) : -1;
}

static bool empty_chunk(const ck_dcp_entry *e, const ck_dcp_chunk *c)
{
    for (uint32_t d = 0; d < e->ndim; d++)
        if (c->sizes[d] == 0)
            return true;
    return false;
}

/* The grid e's chunks tile: along each dimension d, cut at the chunks'
 * distinct offsets, the tensor's size closing them (cuts[d][0 .. grid[d]],
 * each cuts[d] room for n_chunks + 1), and each chunk's cell, row-major,
 * in cell[] (UINT32_MAX for a chunk with no element, which holds
 * nothing).  0, or -1 when the chunks are not such a grid: a chunk that
 * does not fill its cell, or cells left without one (counted: two chunks
 * in one cell are found by the caller). */
static int chunk_grid(const ck_dcp_entry *e, uint64_t *grid, uint64_t *const *cuts,
                      uint32_t *cell)
{
    uint64_t cells = 1, n = 0;
    for (uint32_t d = 0; d < e->ndim; d++) {
        uint64_t k = 0;
        for (uint32_t i = 0; i < e->n_chunks; i++)
            if (!empty_chunk(e, &e->chunks[i]))
                cuts[d][k++] = e->chunks[i].offsets[d];
        qsort(cuts[d], k, sizeof *cuts[d], by_value);
        uint64_t u = 0;
        for (uint64_t i = 0; i < k; i++)
            if (u == 0 || cuts[d][u - 1] != cuts[d][i])
                cuts[d][u++] = cuts[d][i];
        if (u == 0 || cuts[d][0] != 0)
            return -1;
        cuts[d][u] = (uint64_t)e->size[d];
        grid[d] = u;
        if (__builtin_mul_overflow(cells, grid[d], &cells))
            return -1;
    }
    for (uint32_t i = 0; i < e->n_chunks; i++) {
        const ck_dcp_chunk *c = &e->chunks[i];
        cell[i] = UINT32_MAX;
        if (empty_chunk(e, c))
            continue;
        uint64_t at = 0;
        for (uint32_t d = 0; d < e->ndim; d++) {
            long j = place_of(cuts[d], grid[d], c->offsets[d]);
            if (j < 0 || c->sizes[d] != cuts[d][j + 1] - cuts[d][j])
                return -1;
            at = at * grid[d] + (uint64_t)j;
        }
        cell[i] = (uint32_t)at; /* < cells == the chunks holding elements */
        n++;
    }
    return n == cells ? 0 : -1;
}

/* Whether dimension d of the grid is cut into equal slices. */
static bool even_along(const uint64_t *grid, uint64_t *const *cuts, uint32_t d)
{
    for (uint64_t j = 1; j < grid[d]; j++)
        if (cuts[d][j + 1] - cuts[d][j] != cuts[d][1])
            return false;
    return true;
}

static int by_first_row(const void *a, const void *b, void *ctx)
{
    const ck_dcp_entry *e = ctx;
    uint64_t x = e->chunks[*(const uint32_t *)a].offsets[0];
    uint64_t y = e->chunks[*(const uint32_t *)b].offsets[0];
    return x < y ? -1 : x > y;
}

/* Chunks cut along dimension 0: their rows one after the other, each
 * row once. */
static int assemble_rows(opener *o, const ck_dcp_entry *e, ck_tensor *t, ck_tensor *piece,
                         uint32_t *order)
{
    for (uint32_t i = 0; i < e->n_chunks; i++)
        order[i] = i;
    qsort_r(order, e->n_chunks, sizeof *order, by_first_row, (void *)e);
    uint64_t next = 0;
    for (uint32_t k = 0; k < e->n_chunks; k++) {
        const ck_dcp_chunk *c = &e->chunks[order[k]];
        if (c->sizes[0] == 0)
            continue; /* an empty shard holds nothing to place */
        if (c->offsets[0] != next)
            return bad_tiling(o, e, c->offsets[0] < next ? "chunks that overlap"
                                                        : "chunks that leave rows out");
        next += c->sizes[0];
        const ck_tensor *p = &piece[order[k]];
        if (p->n_ext > 0 &&
            ck_tensor_add_extent(t, p->ext0.src, p->ext0.off, p->ext0.len) < 0)
            return nomem(o);
    }
    if (next != (uint64_t)e->size[0])
        return bad_tiling(o, e, "chunks that leave rows out");
    return 0;
}

/* The cuts of a grid along its dimensions before the last one cut into
 * several, when one of them is uneven (rows cut by FSDP, which need not
 * divide): NULL when all are even.  The last one cut must be even
 * (ck_gather: every run one length); -1 when it is not. */
static int uneven_cuts(const ck_dcp_entry *e, const uint64_t *grid, uint64_t *const *cuts,
                       const uint64_t *const **out)
{
    int last = -1;
    bool even = true;
    for (uint32_t d = 0; d < e->ndim; d++)
        if (grid[d] > 1)
            last = (int)d;
    for (int d = 0; d <= last; d++)
        if (!even_along(grid, cuts, (uint32_t)d)) {
            if (d == last)
                return -1;
            even = false;
        }
    *out = even ? NULL : (const uint64_t *const *)cuts;
    return 0;
}

/* Chunks of a grid: ck_grid_place interleaves them. */
static int assemble_grid(opener *o, const ck_dcp_entry *e, ck_tensor *t, ck_tensor *piece,
                         uint32_t *cell)
{
    uint64_t grid[CK_MAX_DIMS];
    uint64_t *cuts[CK_MAX_DIMS];
    uint64_t *room = calloc((size_t)e->ndim * (e->n_chunks + 1) + 1, sizeof *room);
    ck_grid_piece *pieces = calloc(e->n_chunks, sizeof *pieces);
    const uint64_t *const *uneven = NULL;
    char q[CK_QUOTE_BUF], what[CK_QUOTE_BUF + PATH_MAX + 32];
    int rc = room == NULL || pieces == NULL ? nomem(o) : 0;
    for (uint32_t d = 0; rc == 0 && d < e->ndim; d++)
        cuts[d] = room + (size_t)d * (e->n_chunks + 1);
    if (rc == 0 && chunk_grid(e, grid, cuts, cell) < 0)
        rc = bad_tiling(o, e, "chunks that do not tile it as a grid, which ckptfs does not "
                        "assemble");
    if (rc == 0 && uneven_cuts(e, grid, cuts, &uneven) < 0)
        rc = bad_tiling(o, e, "chunks cut unevenly along the last dimension cut, which "
                        "ckptfs does not interleave");
    for (uint32_t i = 0; rc == 0 && i < e->n_chunks; i++) {
        if (cell[i] == UINT32_MAX)
            continue;
        if (pieces[cell[i]].t != NULL)
            rc = bad_tiling(o, e, "chunks that overlap");
        pieces[cell[i]].t = &piece[i];
    }
    snprintf(what, sizeof what, "%s: tensor '%s'", o->path, ck_quote(q, e->fqn, e->fqn_len));
    if (rc == 0)
        rc = ck_grid_place(&o->m->index.arena, t, grid, uneven, pieces, what, o->err);
    free(pieces);
    free(room);
    return rc;
}

/* Several chunks: each read into a piece of its own (one extent: a chunk
 * must be contiguous to be cut into rows or interleaved), then placed. */
static int assemble(opener *o, const ck_dcp_entry *e, ck_tensor *t)
{
    ck_tensor *piece = calloc(e->n_chunks, sizeof *piece);
    uint32_t *order = calloc(e->n_chunks, sizeof *order);
    int rc = piece == NULL || order == NULL ? nomem(o) : 0;
    for (uint32_t i = 0; rc == 0 && i < e->n_chunks; i++) {
        ck_tensor *p = &piece[i];
        p->dtype = e->dtype;
        p->ndim = e->ndim;
        p->dims = (const int64_t *)e->chunks[i].sizes; /* <= INT64_MAX: read_size */
        p->nbytes = chunk_bytes(e, &e->chunks[i]);
        rc = read_chunk(o, e, &e->chunks[i], p);
        if (rc == 0 && p->gather != NULL)
            rc = bad_tiling(o, e, "a chunk that is not contiguous, among several");
    }
    if (rc == 0)
        rc = rows_only(e) ? assemble_rows(o, e, t, piece, order)
                          : assemble_grid(o, e, t, piece, order);
    for (uint32_t i = 0; piece != NULL && i < e->n_chunks; i++)
        free(piece[i].ext_more);
    free(piece);
    free(order);
    return rc;
}

static bool whole(const ck_dcp_entry *e, const ck_dcp_chunk *c)
{
    for (uint32_t d = 0; d < e->ndim; d++)
        if (c->offsets[d] != 0 || c->sizes[d] != (uint64_t)e->size[d])
            return false;
    return true;
}

static int add_tensor(opener *o, const ck_dcp_entry *e)
{
    ck_tensor *t = new_tensor(o, e->fqn, e->fqn_len);
    if (t == NULL)
        return -1;
    /* the metadata's arena goes with the open: the index keeps its own */
    int64_t *dims = ck_arena_alloc(&o->m->index.arena, (e->ndim ? e->ndim : 1) * sizeof *dims);
    if (dims == NULL)
        return nomem(o);
    memcpy(dims, e->size, e->ndim * sizeof *dims);
    t->dtype = e->dtype;
    t->type_name = e->type_name;
    t->ndim = e->ndim;
    t->dims = dims;
    t->read_only = true;
    uint64_t nbytes = 0;
    ck_shape_product(&ck_shape_pb, e->dtype, e->size, e->ndim, &nbytes); /* checked */
    t->nbytes = nbytes;
    if (e->n_chunks == 1 && whole(e, &e->chunks[0]))
        return read_chunk(o, e, &e->chunks[0], t); /* its view, whatever its strides */
    if (nbytes == 0)
        return 0;
    if (e->n_chunks == 0)
        return bad_tiling(o, e, "no chunks");
    return assemble(o, e, t);
}

/* ---- values saved as bytes ----------------------------------------------- */

typedef struct value_read {
    item *x;
    const ck_dcp_entry *e;
} value_read;

static int on_value_leaf(void *ctx, const ck_pt_leaf *l, ck_error *err)
{
    value_read *v = ctx;
    opener *o = v->x->o;
    char *name = NULL;
    int n = l->name_len == 0 ? asprintf(&name, "%s", v->e->fqn)
                             : asprintf(&name, "%s.%s", v->e->fqn, l->name);
    if (n < 0)
        return nomem(o);
    ck_tensor *t = new_tensor(o, name, (size_t)n);
    int64_t *dims = NULL;
    int rc = t == NULL ? -1 : 0;
    if (rc == 0 && l->kind != CK_PT_TENSOR) {
        rc = ck_pt_number_add(&o->nums, o->m, t, l, err);
    } else if (rc == 0 && (dims = ck_arena_alloc(&o->m->index.arena, (l->ndim ? l->ndim : 1) *
                                                                        sizeof *dims)) == NULL) {
        rc = nomem(o);
    } else if (rc == 0) {
        memcpy(dims, l->sizes, l->ndim * sizeof *dims);
        t->dtype = l->dtype;
        t->type_name = l->type_name;
        t->dims = dims;
        t->ndim = l->ndim;
        t->nbytes = SIZE_OF_VIEW;
        t->read_only = true;
        rc = place(v->x, t, l, name);
    }
    free(name);
    return rc;
}

static int add_value(opener *o, const ck_dcp_entry *e)
{
    item x;
    ck_pt_walk w = {0};
    value_read v = {.x = &x, .e = e};
    int rc = item_open(o, &e->item, &x);
    if (rc == 0)
        rc = item_walk(&x, on_value_leaf, &v, &w);
    if (rc == 0 && w.skipped > 0) {
        if (o->skipped++ == 0 && (o->first_skipped = strdup(e->fqn)) == NULL)
            rc = nomem(o);
    }
    ck_pt_walk_free(&w);
    item_close(&x);
    return rc;
}

/* ---- the model ----------------------------------------------------------- */

static int read_metadata(opener *o)
{
    long id = ck_model_open_data_file(o->m, METADATA, o->err);
    if (id < 0)
        return -1;
    ck_source *src = o->m->sources[id];
    char file[PATH_MAX + 16];
    snprintf(file, sizeof file, "%s/" METADATA, o->path);
    if (src->size > CK_DCP_METADATA_MAX_BYTES)
        return ck_fail(o->err, EFBIG, "%s: %" PRIu64 " bytes, more than the .metadata ckptfs "
                       "reads (%u)", file, src->size, CK_DCP_METADATA_MAX_BYTES);
    unsigned char *buf = malloc(src->size ? (size_t)src->size : 1);
    if (buf == NULL)
        return nomem(o);
    int rc = ck_source_read(src, buf, (size_t)src->size, 0, o->err);
    if (rc == 0)
        rc = ck_dcp_meta_parse(buf, (size_t)src->size, file, &o->meta, o->err);
    free(buf);
    return rc;
}

/* The model's attributes: .metadata's, with every data file's size
 * added, the newest mtime, and only the permissions every file grants (a
 * tensor holds bytes of several). */
static int model_stat(opener *o)
{
    ck_model *m = o->m;
    if (fstat(m->sources[0]->fd, &m->st) < 0)
        return ck_fail_errno(o->err, errno, "%s/" METADATA ": cannot stat", o->path);
    for (uint32_t i = 1; i <= o->n_files; i++) {
        struct stat st;
        if (fstat(m->sources[i]->fd, &st) < 0)
            return ck_fail_errno(o->err, errno, "%s: cannot stat", m->sources[i]->path);
        ck_mset_stat_join(&m->st, &st);
    }
    return 0;
}

static void make_notes(opener *o, dcp_state *s)
{
    char q[CK_QUOTE_BUF];
    int n = snprintf(s->notes, sizeof s->notes, ", a PyTorch distributed checkpoint of %zu "
                     "chunk%s in %zu data file%s", o->chunks, o->chunks == 1 ? "" : "s",
                     o->n_files, o->n_files == 1 ? "" : "s");
    if (o->skipped > 0 && n > 0 && (size_t)n < sizeof s->notes)
        snprintf(s->notes + n, sizeof s->notes - (size_t)n, ", %zu value%s neither tensors "
                 "nor numbers not shown (the first: '%s')", o->skipped,
                 o->skipped == 1 ? "" : "s",
                 ck_quote(q, o->first_skipped, strlen(o->first_skipped)));
}

static int build(opener *o)
{
    int rc = read_metadata(o);
    if (rc == 0)
        rc = open_files(o);
    for (size_t i = 0; rc == 0 && i < o->meta.n; i++)
        rc = o->meta.v[i].bytes ? add_value(o, &o->meta.v[i]) : add_tensor(o, &o->meta.v[i]);
    if (rc == 0)
        rc = model_stat(o);
    if (rc == 0)
        rc = ck_pt_numbers_bind(&o->nums, o->m, o->err);
    if (rc == 0)
        rc = ck_index_finalize(&o->m->index, o->path, o->err);
    return rc;
}

static void dcp_free_state(void *state)
{
    free(state);
}

/* Watched for other programs' writes as the model file is (the numbers'
 * scratch file, last, is not one). */
static bool dcp_is_data_file(const ck_model *m, uint32_t i)
{
    const dcp_state *s = m->state;
    return s != NULL && i <= s->n_files;
}

static const char *dcp_notes(const ck_model *m)
{
    const dcp_state *s = m->state;
    return s != NULL ? s->notes : "";
}

/* Registered nowhere as a file format: nothing is recognised, created or
 * saved as one, and with no writer it mounts read-only. */
static const ck_format dcp_format = {
    .name = "dcp", .title = "PyTorch distributed checkpoint", .extension = "",
    .free_state = dcp_free_state, .type_name = ck_pt_model_type_name,
    .is_data_file = dcp_is_data_file, .notes = dcp_notes,
};

/* The DCP directory d as one model named shown (both the caller's). */
static ck_model *open_in(ck_model_dir *d, const char *shown, bool watch, ck_error *err)
{
    dcp_state *s = calloc(1, sizeof *s);
    ck_model *m = s == NULL ? NULL : ck_model_assembled(d, shown, &dcp_format, err);
    if (s == NULL)
        ck_nomem(err, shown);
    if (m == NULL) {
        free(s);
        return NULL;
    }
    m->state = s;
    opener o = {.path = shown, .m = m, .nums = CK_PT_NUMBERS_INIT, .err = err};
    if (watch)
        ck_dir_watch_files(d);
    if (build(&o) == 0) {
        s->n_files = (uint32_t)o.n_files;
        make_notes(&o, s);
        if (watch)
            ck_model_watch_files(m);
    } else {
        ck_model_close(m);
        m = NULL;
    }
    ck_pt_numbers_close(&o.nums);
    ck_dcp_meta_free(&o.meta);
    for (size_t i = 0; i < o.n_files; i++) {
        json_decref(o.files[i].st);
        json_decref(o.files[i].sharding);
    }
    free(o.files);
    free(o.first_skipped);
    return m;
}

static ck_model *open_dcp(const char *path, const ck_collection_opts *co, ck_error *err)
{
    char *shown = ck_path_trimmed(path);
    struct stat st;
    ck_model_dir *d = shown == NULL ? NULL : ck_dir_itself(shown, &st, err);
    if (shown == NULL)
        ck_nomem(err, path);
    ck_model *m = d == NULL ? NULL : open_in(d, shown, co->watch, err);
    ck_dir_unref(d); /* the model holds it */
    free(shown);
    return m;
}

ck_model *ck_dcp_open_at(int root_fd, const char *below, const char *path, bool watch,
                         ck_error *err)
{
    ck_model_dir *d = ck_dir_beneath(root_fd, below, path, err);
    ck_model *m = d == NULL ? NULL : open_in(d, path, watch, err);
    ck_dir_unref(d); /* the model holds it */
    return m;
}

/* Whether the file name beneath dfd is a regular file starting with a
 * pickle's PROTO opcode (0x80, protocol 2 to 5): DCP's .metadata.  flags:
 * O_NOFOLLOW, or 0; a FIFO does not block (ck_open_regular). */
static bool pickle_at(int dfd, const char *name, int flags)
{
    struct stat st;
    unsigned char head[2];
    int fd = ck_open_regular(dfd, name, O_RDONLY | flags, 0, &st);
    if (fd < 0)
        return false;
    bool yes = pread(fd, head, 2, 0) == 2 && head[0] == 0x80 && head[1] >= 2 && head[1] <= 5;
    close(fd);
    return yes;
}

bool ck_dcp_dir_at(int dfd, const char *dir)
{
    if (dir[0] == '.')
        return false;
    int fd = openat(dfd, dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return false; /* not a directory (no link is followed), or gone */
    bool yes = pickle_at(fd, METADATA, O_NOFOLLOW);
    close(fd);
    return yes;
}

bool ck_dcp_dir_path(const char *path)
{
    char file[PATH_MAX];
    if (snprintf(file, sizeof file, "%s/" METADATA, path) >= (int)sizeof file)
        return false;
    return pickle_at(AT_FDCWD, file, 0); /* a model given by path: resolved once, here */
}

static ck_model *open_dcp_at(int dfd, const char *below, const char *path,
                             const ck_collection_opts *o, ck_error *err)
{
    return ck_dcp_open_at(dfd, below, path, o->watch, err);
}

/* Whether name is a DCP data file's: "*.distcp", as FileSystemWriter
 * names them (__<rank>_<n>.distcp). */
static bool distcp_name(const char *name)
{
    size_t n = strlen(name);
    return n > 7 && strcmp(name + n - 7, ".distcp") == 0;
}

/* .metadata's attributes and its data files' together, as the model
 * opened gives them when .metadata names every *.distcp file there; the
 * owner is .metadata's. */
static int stat_dcp(int dfd, const char *name, struct stat *all)
{
    int ifd = openat(dfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (ifd < 0 || fstatat(ifd, METADATA, all, AT_SYMLINK_NOFOLLOW) < 0 ||
        !S_ISREG(all->st_mode)) {
        if (ifd >= 0)
            close(ifd);
        return -1; /* gone or replaced since the probe */
    }
    DIR *d = ck_list_dir(ifd);
    close(ifd);
    if (d == NULL)
        return -1; /* unreadable: not shown */
    struct stat st;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        if (distcp_name(de->d_name) &&
            fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
            ck_mset_stat_join(all, &st);
    closedir(d);
    return 0;
}

/* FileSystemWriter writes the data files first and .metadata last: a
 * directory without it is not one yet, and one with it is complete as a
 * file is (read-only, or settled), judged by all its files together.
 * Its name is free (torchtitan's step-<N>/): no number. */
static const ck_collection_done dcp_done = {
    .marker = METADATA,
    .stat_at = stat_dcp,
};

const ck_collection ck_collection_dcp = {
    .name = "dcp", .title = "a PyTorch distributed checkpoint", .probe = ck_dcp_dir_path,
    .open = open_dcp, .probe_at = ck_dcp_dir_at, .open_at = open_dcp_at, .done = &dcp_done,
};
