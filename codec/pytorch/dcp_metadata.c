/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dcp_metadata: a DCP checkpoint's .metadata read (dcp_metadata.h).
 *
 * The dataclasses pickle as NEWOBJ(class, ()) then BUILD(state): the
 * state is the object's __dict__ (a dict of field name -> value), except
 * TensorProperties, whose __getstate__ gives the tuple (dtype, layout,
 * requires_grad, memory format, pin_memory).  torch.Size is REDUCE(Size,
 * (tuple of ints,)), a dtype the global torch.<name> itself.  Sources:
 * torch/distributed/checkpoint/metadata.py and filesystem.py.
 */
#define _GNU_SOURCE
#include "dcp_metadata.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/dir_name.h"
#include "../core/tensor_index.h"
#include "../pickle/pickle_vm.h"
#include "pt_pickle.h"

#define NONE_ID CK_PK_NONE_ID

enum {
    G_METADATA, G_TENSOR_META, G_BYTES_META, G_CHUNK, G_PROPERTIES, G_MEM_FORMAT,
    G_STORAGE_META, G_INDEX, G_STORAGE_INFO, G_SIZE, G_DTYPE, G_OTHER,
};

#define CP "torch.distributed.checkpoint.metadata"
#define SHARD "torch.distributed._shard.sharded_tensor.metadata" /* PyTorch 2.0 to 2.2 */
#define DTYPE(name) {"torch", name, G_DTYPE, false}

static const ck_pk_global allowed[] = {
    {CP, "Metadata", G_METADATA, false},
    {CP, "TensorStorageMetadata", G_TENSOR_META, false},
    {CP, "BytesStorageMetadata", G_BYTES_META, false},
    {CP, "ChunkStorageMetadata", G_CHUNK, false},
    {CP, "TensorProperties", G_PROPERTIES, false},
    {SHARD, "TensorProperties", G_PROPERTIES, false},
    {CP, "_MEM_FORMAT_ENCODING", G_MEM_FORMAT, false},
    {SHARD, "MEM_FORMAT_ENCODING", G_MEM_FORMAT, false},
    {CP, "StorageMeta", G_STORAGE_META, false},
    {CP, "MetadataIndex", G_INDEX, false},
    {"torch.distributed.checkpoint.filesystem", "_StorageInfo", G_STORAGE_INFO, false},
    {"torch", "Size", G_SIZE, false},
    /* a layout pickles as _get_layout("torch.strided") (copyreg in torch/serialization.py) */
    {"torch.serialization", "_get_layout", G_OTHER, false},
    {"torch", "strided", G_OTHER, false},
    /* an Enum member pickles as getattr(class, name) since Python 3.11
     * (before, as class(value)): recorded, never called */
    {"builtins", "getattr", G_OTHER, false},
    /* StorageMeta.checkpoint_id may be a path object: recorded, never made */
    {"pathlib", "PosixPath", G_OTHER, false},
    {"pathlib", "PurePosixPath", G_OTHER, false},
    {"collections", "OrderedDict", G_OTHER, true},
    DTYPE("float32"), DTYPE("float64"), DTYPE("float16"), DTYPE("bfloat16"),
    DTYPE("int64"), DTYPE("int32"), DTYPE("int16"), DTYPE("int8"), DTYPE("uint8"),
    DTYPE("bool"), DTYPE("complex64"), DTYPE("complex128"), DTYPE("uint16"),
    DTYPE("uint32"), DTYPE("uint64"), DTYPE("float8_e4m3fn"), DTYPE("float8_e5m2"),
};

/* About 30 nodes a chunk: 16M nodes (512 MiB of them at most) is half a
 * million chunks. */
static const ck_pk_rules rules = {
    .what = "a DCP checkpoint's metadata",
    .globals = allowed,
    .n_globals = sizeof allowed / sizeof *allowed,
    .persid = false,
    .max_nodes = 16u << 20,
    .max_entries = 1u << 22,
};

/* A storage_data entry: MetadataIndex(fqn, offset) -> _StorageInfo. */
typedef struct located {
    const char *fqn;            /* in the pickle's bytes */
    size_t fqn_len;
    const uint64_t *at;         /* the chunk's offsets; NULL: a byte value's */
    uint32_t ndim;
    ck_dcp_item item;
} located;

typedef struct parser {
    ck_pickle pk;
    ck_dcp_meta *out;
    located *loc;
    size_t n_loc;
    ck_error *err;
} parser;

static const ck_pk_node *nd(const parser *p, uint32_t id)
{
    return ck_pk_at(&p->pk, id);
}

static int fail_at(parser *p, uint32_t id, const char *what)
{
    return ck_pk_fail(&p->pk, id == NONE_ID ? 0 : nd(p, id)->off, p->err, what);
}

static int nomem(parser *p)
{
    return ck_nomem(p->err, p->pk.file);
}

/* Whether node id is an object of class g (a call of it). */
static bool is_object(const parser *p, uint32_t id, int g)
{
    return id != NONE_ID && nd(p, id)->kind == CK_PK_CALL && (int)nd(p, id)->x == g;
}

/* The value of field name in object id's state dict (NONE_ID: absent, as a
 * field left at its class default is). */
static uint32_t field(const parser *p, uint32_t id, const char *name)
{
    uint32_t state = nd(p, id)->b;
    if (state == NONE_ID || nd(p, state)->kind != CK_PK_DICT)
        return NONE_ID;
    for (uint32_t c = nd(p, state)->a; c != NONE_ID; c = p->pk.cells[c].next)
        if (ck_pk_str_is(&p->pk, p->pk.cells[c].key, name))
            return p->pk.cells[c].val;
    return NONE_ID;
}

static bool is_none(const parser *p, uint32_t id)
{
    return id == NONE_ID || nd(p, id)->kind == CK_PK_NONE;
}

/* A torch.Size (or a plain tuple or list) of at most CK_MAX_DIMS
 * non-negative ints into v; their count in *n. */
static int read_size(parser *p, uint32_t id, uint64_t *v, uint32_t *n, const char *what)
{
    if (is_object(p, id, G_SIZE)) {
        const ck_pk_node *args = nd(p, nd(p, id)->a);
        id = args->n == 1 ? ck_pk_item(&p->pk, nd(p, id)->a, 0) : NONE_ID;
    }
    if (id == NONE_ID || (nd(p, id)->kind != CK_PK_TUPLE && nd(p, id)->kind != CK_PK_LIST))
        return fail_at(p, id, what);
    if (nd(p, id)->n > CK_MAX_DIMS)
        return fail_at(p, id, "more dimensions than ckptfs reads (64)");
    *n = 0;
    for (uint32_t c = nd(p, id)->a; c != NONE_ID; c = p->pk.cells[c].next) {
        const ck_pk_node *x = nd(p, p->pk.cells[c].val);
        if (x->kind != CK_PK_INT || (int64_t)x->x < 0)
            return fail_at(p, p->pk.cells[c].val, "a size or offset that is not an int >= 0");
        v[(*n)++] = x->x;
    }
    return 0;
}

static uint64_t *arena_dims(parser *p, const uint64_t *v, uint32_t n)
{
    uint64_t *d = ck_arena_alloc(&p->out->arena, (n ? n : 1) * sizeof *d);
    if (d != NULL)
        memcpy(d, v, n * sizeof *d);
    return d;
}

static int read_int(parser *p, uint32_t id, uint64_t *v, const char *what)
{
    if (id == NONE_ID || nd(p, id)->kind != CK_PK_INT || (int64_t)nd(p, id)->x < 0)
        return fail_at(p, id, what);
    *v = nd(p, id)->x;
    return 0;
}

/* ---- storage_data ---------------------------------------------------------- */

/* relative_path: one plain name in the checkpoint's directory, so that
 * nothing outside it can be named. */
static int read_file_name(parser *p, uint32_t id, const char **name)
{
    const ck_pk_node *s = id == NONE_ID ? NULL : nd(p, id);
    if (s == NULL || s->kind != CK_PK_STR)
        return fail_at(p, id, "a _StorageInfo without its relative_path");
    const char *b = (const char *)p->pk.buf + s->x;
    if (s->n == 0 || s->n > 255 || memchr(b, '/', s->n) != NULL ||
        memchr(b, '\0', s->n) != NULL || (s->n == 1 && b[0] == '.') ||
        (s->n == 2 && b[0] == '.' && b[1] == '.') || (s->n == 9 && memcmp(b, ".metadata", 9) == 0))
        return fail_at(p, id, "a relative_path that is not a data file's name in the "
                       "checkpoint's directory");
    return (*name = ck_arena_strndup(&p->out->arena, b, s->n)) == NULL ? nomem(p) : 0;
}

static int read_info(parser *p, uint32_t id, ck_dcp_item *it)
{
    if (!is_object(p, id, G_STORAGE_INFO))
        return fail_at(p, id, "a storage_data value that is not a _StorageInfo");
    uint32_t tr = field(p, id, "transform_descriptors");
    if (!is_none(p, tr) && nd(p, tr)->n > 0)
        return ck_fail(p->err, ENOTSUP, "%s: offset %u: an item saved through transforms "
                       "(transform_descriptors: compressed or otherwise encoded), which "
                       "ckptfs does not read", p->pk.file, nd(p, tr)->off);
    if (read_file_name(p, field(p, id, "relative_path"), &it->file) < 0 ||
        read_int(p, field(p, id, "offset"), &it->off, "a _StorageInfo without its offset") < 0 ||
        read_int(p, field(p, id, "length"), &it->len, "a _StorageInfo without its length") < 0)
        return -1;
    if (it->off > UINT64_MAX - it->len)
        return fail_at(p, id, "an item whose offset and length overflow");
    return 0;
}

static int read_located(parser *p, uint32_t key, uint32_t val, located *l)
{
    uint64_t at[CK_MAX_DIMS];
    if (!is_object(p, key, G_INDEX))
        return fail_at(p, key, "a storage_data key that is not a MetadataIndex");
    uint32_t fqn = field(p, key, "fqn"), off = field(p, key, "offset");
    if (fqn == NONE_ID || nd(p, fqn)->kind != CK_PK_STR)
        return fail_at(p, key, "a MetadataIndex without its fqn");
    l->fqn = (const char *)p->pk.buf + nd(p, fqn)->x;
    l->fqn_len = nd(p, fqn)->n;
    if (!is_none(p, off)) {
        if (read_size(p, off, at, &l->ndim, "a MetadataIndex offset that is not a size") < 0)
            return -1;
        if ((l->at = arena_dims(p, at, l->ndim)) == NULL)
            return nomem(p);
    }
    return read_info(p, val, &l->item);
}

static int cmp_key(const char *fa, size_t la, const uint64_t *a, uint32_t na, const char *fb,
                   size_t lb, const uint64_t *b, uint32_t nb)
{
    int c = memcmp(fa, fb, la < lb ? la : lb);
    if (c != 0 || la != lb)
        return c != 0 ? c : la < lb ? -1 : 1;
    if ((a == NULL) != (b == NULL))
        return a == NULL ? -1 : 1;
    for (uint32_t d = 0; a != NULL && d < na && d < nb; d++)
        if (a[d] != b[d])
            return a[d] < b[d] ? -1 : 1;
    return a == NULL || na == nb ? 0 : na < nb ? -1 : 1;
}

static int cmp_located(const void *x, const void *y)
{
    const located *a = x, *b = y;
    return cmp_key(a->fqn, a->fqn_len, a->at, a->ndim, b->fqn, b->fqn_len, b->at, b->ndim);
}

static int read_storage_data(parser *p, uint32_t id)
{
    if (id == NONE_ID || nd(p, id)->kind != CK_PK_DICT)
        return fail_at(p, id, "a Metadata whose storage_data is not a dict (a storage "
                       "layer other than FileSystemWriter's)");
    if ((p->loc = calloc(nd(p, id)->n ? nd(p, id)->n : 1, sizeof *p->loc)) == NULL)
        return nomem(p);
    for (uint32_t c = nd(p, id)->a; c != NONE_ID; c = p->pk.cells[c].next)
        if (read_located(p, p->pk.cells[c].key, p->pk.cells[c].val, &p->loc[p->n_loc++]) < 0)
            return -1;
    if (p->n_loc > 0)
        qsort(p->loc, p->n_loc, sizeof *p->loc, cmp_located);
    return 0;
}

static const located *find(const parser *p, const ck_dcp_entry *e, const uint64_t *at,
                           uint32_t ndim)
{
    size_t lo = 0, hi = p->n_loc;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const located *l = &p->loc[mid];
        int c = cmp_key(e->fqn, e->fqn_len, at, ndim, l->fqn, l->fqn_len, l->at, l->ndim);
        if (c == 0)
            return l;
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

/* ---- state_dict_metadata --------------------------------------------------- */

static int fail_entry(parser *p, const ck_dcp_entry *e, uint32_t id, const char *what)
{
    char q[CK_QUOTE_BUF];
    return ck_fail(p->err, EINVAL, "%s: offset %u: '%s': %s", p->pk.file,
                   id == NONE_ID ? (unsigned)e->off : nd(p, id)->off,
                   ck_quote(q, e->fqn, e->fqn_len), what);
}

static int read_dtype(parser *p, ck_dcp_entry *e, uint32_t props)
{
    if (!is_object(p, props, G_PROPERTIES))
        return fail_entry(p, e, props, "its properties are not a TensorProperties");
    uint32_t state = nd(p, props)->b, dt = NONE_ID;
    if (state != NONE_ID && nd(p, state)->kind == CK_PK_TUPLE)
        dt = ck_pk_item(&p->pk, state, 0); /* __getstate__: (dtype, layout, ...) */
    else if (state != NONE_ID)
        dt = field(p, props, "dtype");
    if (dt == NONE_ID || nd(p, dt)->kind != CK_PK_GLOBAL || allowed[nd(p, dt)->x].id != G_DTYPE)
        return fail_entry(p, e, dt, "its properties name no dtype");
    const char *name = allowed[nd(p, dt)->x].name;
    if ((e->dtype = ck_pt_dtype_named(name, &e->type_name)) == NULL)
        return fail_entry(p, e, dt, "a dtype ckptfs does not show");
    return 0;
}

static int read_chunk(parser *p, ck_dcp_entry *e, uint32_t id, ck_dcp_chunk *c)
{
    uint64_t at[CK_MAX_DIMS], sz[CK_MAX_DIMS];
    uint32_t na = 0, ns = 0;
    if (!is_object(p, id, G_CHUNK))
        return fail_entry(p, e, id, "a chunk that is not a ChunkStorageMetadata");
    if (read_size(p, field(p, id, "offsets"), at, &na, "a chunk without its offsets") < 0 ||
        read_size(p, field(p, id, "sizes"), sz, &ns, "a chunk without its sizes") < 0)
        return -1;
    if (na != e->ndim || ns != e->ndim)
        return fail_entry(p, e, id, "a chunk of another number of dimensions than its tensor");
    for (uint32_t d = 0; d < e->ndim; d++)
        if (at[d] > (uint64_t)e->size[d] || sz[d] > (uint64_t)e->size[d] - at[d])
            return fail_entry(p, e, id, "a chunk reaching past its tensor");
    const located *l = find(p, e, at, na);
    if (l == NULL)
        return fail_entry(p, e, id, "a chunk that storage_data does not place in a data file");
    c->item = l->item;
    if ((c->offsets = arena_dims(p, at, na)) == NULL || (c->sizes = arena_dims(p, sz, ns)) == NULL)
        return nomem(p);
    return 0;
}

static int read_tensor(parser *p, ck_dcp_entry *e, uint32_t id)
{
    uint64_t size[CK_MAX_DIMS], nbytes = 0;
    if (read_dtype(p, e, field(p, id, "properties")) < 0 ||
        read_size(p, field(p, id, "size"), size, &e->ndim, "a tensor without its size") < 0)
        return -1;
    int64_t *dims = ck_arena_alloc(&p->out->arena, (e->ndim ? e->ndim : 1) * sizeof *dims);
    if (dims == NULL)
        return nomem(p);
    for (uint32_t d = 0; d < e->ndim; d++)
        dims[d] = (int64_t)size[d]; /* read_size: <= INT64_MAX */
    e->size = dims;
    if (ck_shape_product(&ck_shape_pb, e->dtype, dims, e->ndim, &nbytes) >= 0)
        return fail_entry(p, e, id, "a size that makes more bytes than a file holds");
    uint32_t chunks = field(p, id, "chunks");
    if (chunks == NONE_ID || nd(p, chunks)->kind != CK_PK_LIST)
        return fail_entry(p, e, id, "no list of chunks");
    if (nd(p, chunks)->n > CK_DCP_MAX_CHUNKS)
        return fail_entry(p, e, chunks, "more chunks than ckptfs assembles (65536)");
    e->n_chunks = nd(p, chunks)->n;
    e->chunks = ck_arena_alloc(&p->out->arena, (e->n_chunks ? e->n_chunks : 1) * sizeof *e->chunks);
    if (e->chunks == NULL)
        return nomem(p);
    uint32_t i = 0;
    for (uint32_t c = nd(p, chunks)->a; c != NONE_ID; c = p->pk.cells[c].next, i++)
        if (read_chunk(p, e, p->pk.cells[c].val, &e->chunks[i]) < 0)
            return -1;
    return 0;
}

static int read_entry(parser *p, uint32_t key, uint32_t val, ck_dcp_entry *e)
{
    const ck_pk_node *k = key == NONE_ID ? NULL : nd(p, key);
    if (k == NULL || k->kind != CK_PK_STR)
        return fail_at(p, key, "a state_dict_metadata key that is not a string");
    const char *fqn = (const char *)p->pk.buf + k->x;
    if (k->n == 0 || memchr(fqn, '\0', k->n) != NULL || !ck_utf8_valid(fqn, k->n))
        return fail_at(p, key, "a name that is empty, holds a NUL or is not UTF-8");
    if ((e->fqn = ck_arena_strndup(&p->out->arena, fqn, k->n)) == NULL)
        return nomem(p);
    e->fqn_len = k->n;
    e->off = k->off;
    if (is_object(p, val, G_TENSOR_META))
        return read_tensor(p, e, val);
    if (!is_object(p, val, G_BYTES_META))
        return fail_entry(p, e, val, "neither a TensorStorageMetadata nor a "
                          "BytesStorageMetadata");
    e->bytes = true;
    const located *l = find(p, e, NULL, 0);
    if (l == NULL)
        return fail_entry(p, e, val, "a value that storage_data does not place in a data file");
    e->item = l->item;
    return 0;
}

static int read_metadata(parser *p)
{
    uint32_t root = p->pk.root;
    if (!is_object(p, root, G_METADATA))
        return fail_at(p, root, "not a torch.distributed.checkpoint Metadata");
    uint32_t sdm = field(p, root, "state_dict_metadata");
    if (read_storage_data(p, field(p, root, "storage_data")) < 0)
        return -1;
    if (sdm == NONE_ID || nd(p, sdm)->kind != CK_PK_DICT)
        return fail_at(p, root, "a Metadata without its state_dict_metadata dict");
    ck_dcp_meta *out = p->out;
    if ((out->v = calloc(nd(p, sdm)->n ? nd(p, sdm)->n : 1, sizeof *out->v)) == NULL)
        return nomem(p);
    for (uint32_t c = nd(p, sdm)->a; c != NONE_ID; c = p->pk.cells[c].next)
        if (read_entry(p, p->pk.cells[c].key, p->pk.cells[c].val, &out->v[out->n++]) < 0)
            return -1;
    return 0;
}

int ck_dcp_meta_parse(const void *buf, size_t len, const char *file, ck_dcp_meta *out,
                      ck_error *err)
{
    *out = (ck_dcp_meta){0};
    ck_arena_init(&out->arena);
    if (len > CK_DCP_METADATA_MAX_BYTES)
        return ck_fail(err, EFBIG, "%s: %zu bytes, more than the .metadata ckptfs reads (%u)",
                       file, len, CK_DCP_METADATA_MAX_BYTES);
    parser p = {.out = out, .err = err};
    int rc = ck_pickle_run(buf, len, file, &rules, &p.pk, err);
    if (rc == 0)
        rc = read_metadata(&p);
    ck_pickle_free(&p.pk);
    free(p.loc);
    return rc;
}

void ck_dcp_meta_free(ck_dcp_meta *m)
{
    free(m->v);
    ck_arena_free(&m->arena);
    *m = (ck_dcp_meta){0};
}
