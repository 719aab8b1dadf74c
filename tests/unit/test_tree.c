/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tree: the mounted tree (mount/tree.h) driven directly, without FUSE or a
 * kernel, as the front-end drives it: open a .ckpt the way fuse/main.c does
 * (writer lock, the model's directory, leftovers cleaned), edit `out` and
 * `meta`, make, rename and remove tensor directories, and save in the
 * three steps of mount/saver.c.
 *
 * Every saved file is judged by an oracle independent of ckptfs's reader:
 * protobuf-c's code generated from checkpoint.proto decodes it, and what it
 * holds must equal a reference model the test keeps itself (names in
 * order, MindSpore type names, dims, bytes).  Inputs are encoded with
 * protobuf-c as well.  A safetensors file is built and read back with
 * jansson, not the codec's reader.  Last, seeded random sequences of
 * edits, renames, removals and saves (some with edits made while the save
 * runs) are checked against the reference model after every operation
 * (the tree's view) and every save (the file).
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "../../codec/core/model_dir.h"
#include "../../codec/registry.h"
#include "../../codec/io/commit_group.h"
#include "../../save/encoder.h"
#include "../../save/writer_lock.h"
#include "../../mount/tree.h"
#include "checkpoint.pb-c.h"
#include "unit.h"

/* ---- types, as MindSpore's file and OneFlow's meta spell them ---- */

typedef struct ttype {
    const char *ms, *of, *st; /* .ckpt's tensor_type, meta's data_type, safetensors' dtype */
    size_t size;
} ttype;

enum { F32, I32, F64, I64, U8, I8, F16, N_TYPES };

static const ttype TYPES[N_TYPES] = {
    [F32] = {"Float32", "kFloat", "F32", 4},   [I32] = {"Int32", "kInt32", "I32", 4},
    [F64] = {"Float64", "kDouble", "F64", 8},  [I64] = {"Int64", "kInt64", "I64", 8},
    [U8] = {"UInt8", "kUInt8", "U8", 1},       [I8] = {"Int8", "kInt8", "I8", 1},
    [F16] = {"Float16", "kFloat16", "F16", 2},
};

static int type_by_ms(const char *ms)
{
    for (int i = 0; i < N_TYPES; i++)
        if (strcmp(TYPES[i].ms, ms) == 0)
            return i;
    return -1;
}

static int type_by_st(const char *st)
{
    for (int i = 0; i < N_TYPES; i++)
        if (strcmp(TYPES[i].st, st) == 0)
            return i;
    return -1;
}

static int type_by_of(const char *of)
{
    for (int i = 0; i < N_TYPES; i++)
        if (strcmp(TYPES[i].of, of) == 0)
            return i;
    return -1;
}

/* ---- the reference model: what the tree shows and a save writes ---- */

#define REF_MAX 64
#define NAME_MAX_LEN 64

typedef struct rt {
    char name[NAME_MAX_LEN];
    int type;
    uint32_t ndim;
    int64_t dims[4];
    unsigned char *bytes;
    size_t len;
} rt;

typedef struct ref {
    rt v[REF_MAX];
    size_t n;
} ref;

/* memcpy, but of nothing from NULL too: protobuf-c leaves empty fields
 * NULL, and a 0-d tensor may come without dims. */
static void copy(void *to, const void *from, size_t n)
{
    if (n > 0)
        memcpy(to, from, n);
}

static size_t elems(const int64_t *dims, uint32_t ndim)
{
    size_t n = 1;
    for (uint32_t i = 0; i < ndim; i++)
        n *= (size_t)dims[i];
    return n;
}

static rt *ref_add(ref *r, const char *name, int type, const int64_t *dims, uint32_t ndim,
                   const void *bytes)
{
    rt *t = &r->v[r->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->type = type;
    t->ndim = ndim;
    copy(t->dims, dims, ndim * sizeof *dims);
    t->len = elems(dims, ndim) * TYPES[type].size;
    t->bytes = malloc(t->len ? t->len : 1);
    copy(t->bytes, bytes, t->len);
    return t;
}

static int ref_find(const ref *r, const char *name)
{
    for (size_t i = 0; i < r->n; i++)
        if (strcmp(r->v[i].name, name) == 0)
            return (int)i;
    return -1;
}

/* A tensor the test put in r itself: missing is the test's own bug. */
static rt *named(ref *r, const char *name)
{
    int i = ref_find(r, name);
    if (i < 0) {
        fprintf(stderr, "test_tree: no tensor '%s' in the reference\n", name);
        exit(2);
    }
    return &r->v[i];
}

static void ref_remove(ref *r, size_t i)
{
    free(r->v[i].bytes);
    memmove(&r->v[i], &r->v[i + 1], (r->n - i - 1) * sizeof r->v[0]);
    r->n--;
}

static void ref_drop(ref *r, const char *name)
{
    ref_remove(r, (size_t)(named(r, name) - r->v));
}

static void ref_free(ref *r)
{
    for (size_t i = 0; i < r->n; i++)
        free(r->v[i].bytes);
    r->n = 0;
}

static void ref_copy(ref *dst, const ref *src)
{
    dst->n = 0;
    for (size_t i = 0; i < src->n; i++) {
        const rt *t = &src->v[i];
        ref_add(dst, t->name, t->type, t->dims, t->ndim, t->bytes);
    }
}

/* Set a tensor's size, zero-filling a longer one as truncate(2) does. */
static void rt_resize(rt *t, size_t len)
{
    t->bytes = realloc(t->bytes, len ? len : 1);
    if (len > t->len)
        memset(t->bytes + t->len, 0, len - t->len);
    t->len = len;
}

static void fill(unsigned char *p, size_t n, uint64_t *rng)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(unit_xorshift(rng) >> 24);
}

/* Whether got equals want, tensor by tensor in order; why: the first
 * difference. */
static bool ref_same(const ref *want, const ref *got, char *why, size_t cap)
{
    snprintf(why, cap, "same");
    if (want->n != got->n) {
        snprintf(why, cap, "%zu tensors, expected %zu", got->n, want->n);
        return false;
    }
    for (size_t i = 0; i < want->n; i++) {
        const rt *w = &want->v[i], *g = &got->v[i];
        const char *what = strcmp(w->name, g->name) ? "name"
                           : w->type != g->type     ? "type"
                           : w->ndim != g->ndim ||
                                   memcmp(w->dims, g->dims, w->ndim * sizeof w->dims[0])
                               ? "dims"
                           : w->len != g->len || (w->len && memcmp(w->bytes, g->bytes, w->len))
                               ? "bytes"
                               : NULL;
        if (what != NULL) {
            snprintf(why, cap, "tensor %zu ('%s', expected '%s'): its %s differ", i, g->name,
                     w->name, what);
            return false;
        }
    }
    return true;
}

/* ---- the .ckpt, encoded and decoded with protobuf-c ---- */

static unsigned char *slurp(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    unsigned char *buf = malloc(st.st_size ? (size_t)st.st_size : 1);
    ssize_t n = pread(fd, buf, (size_t)st.st_size, 0);
    close(fd);
    if (n != st.st_size) {
        free(buf);
        return NULL;
    }
    *len = (size_t)n;
    return buf;
}

/* One Checkpoint message per tensor, as MindSpore writes them. */
static void ckpt_write(const char *path, const ref *r)
{
    FILE *f = fopen(path, "wb");
    for (size_t i = 0; f != NULL && i < r->n; i++) {
        const rt *t = &r->v[i];
        TensorProto tp = TENSOR_PROTO__INIT;
        tp.n_dims = t->ndim;
        tp.dims = (int64_t *)t->dims;
        tp.tensor_type = (char *)TYPES[t->type].ms;
        tp.tensor_content = (ProtobufCBinaryData){t->len, t->bytes};
        Checkpoint__Value v = CHECKPOINT__VALUE__INIT, *vp = &v;
        v.tag = (char *)t->name;
        v.value_case = CHECKPOINT__VALUE__VALUE_TENSOR;
        v.tensor = &tp;
        Checkpoint c = CHECKPOINT__INIT;
        c.n_value = 1;
        c.value = &vp;
        size_t k = checkpoint__get_packed_size(&c);
        unsigned char *buf = malloc(k);
        checkpoint__pack(&c, buf);
        if (fwrite(buf, 1, k, f) != k)
            perror(path);
        free(buf);
    }
    if (f == NULL || fclose(f) != 0) {
        perror(path);
        exit(2);
    }
}

/* The protobuf part of a saved file: all of it, or all but a "crc_num"
 * trailer whose CRC-32 (zlib's) must match. */
static size_t proto_len(const unsigned char *buf, size_t len, char *why, size_t cap)
{
    if (len < 17 || memcmp(buf + len - 17, "crc_num", 7) != 0)
        return len;
    uLong stored = 0;
    for (int i = 0; i < 10; i++)
        stored = stored << 8 | buf[len - 10 + i];
    if (crc32(0, buf, (uInt)(len - 17)) != stored) {
        snprintf(why, cap, "the CRC trailer does not match");
        return SIZE_MAX;
    }
    return len - 17;
}

/* Records of one name in a row are the slices of one tensor. */
static bool oracle_add(ref *out, const Checkpoint__Value *v, char *why, size_t cap)
{
    const TensorProto *tp = v->tensor;
    int type = tp ? type_by_ms(tp->tensor_type) : -1;
    if (v->value_case != CHECKPOINT__VALUE__VALUE_TENSOR || type < 0 || tp->n_dims > 4) {
        snprintf(why, cap, "record '%s' is not a tensor of a known type", v->tag);
        return false;
    }
    rt *last = out->n ? &out->v[out->n - 1] : NULL;
    if (last != NULL && strcmp(last->name, v->tag) == 0) {
        size_t at = last->len;
        last->bytes = realloc(last->bytes, at + tp->tensor_content.len + 1);
        copy(last->bytes + at, tp->tensor_content.data, tp->tensor_content.len);
        last->len += tp->tensor_content.len;
        return true;
    }
    if (ref_find(out, v->tag) >= 0 || out->n == REF_MAX || strlen(v->tag) >= NAME_MAX_LEN) {
        snprintf(why, cap, "tag '%s' repeated, too long, or too many tensors", v->tag);
        return false;
    }
    rt *t = &out->v[out->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", v->tag);
    t->type = type;
    t->ndim = (uint32_t)tp->n_dims;
    copy(t->dims, tp->dims, tp->n_dims * sizeof *tp->dims);
    t->len = tp->tensor_content.len;
    t->bytes = malloc(t->len + 1);
    copy(t->bytes, tp->tensor_content.data, t->len);
    return true;
}

/* The tensors of the file at path, as protobuf-c decodes them. */
static bool oracle_load(const char *path, ref *out, char *why, size_t cap)
{
    size_t len = 0, plen;
    unsigned char *buf = slurp(path, &len);
    out->n = 0;
    if (buf == NULL) {
        snprintf(why, cap, "cannot read %s", path);
        return false;
    }
    Checkpoint *c = NULL;
    if ((plen = proto_len(buf, len, why, cap)) != SIZE_MAX &&
        (c = checkpoint__unpack(NULL, plen, buf)) == NULL)
        snprintf(why, cap, "protobuf-c cannot decode the file");
    bool ok = c != NULL;
    for (size_t i = 0; ok && i < c->n_value; i++)
        ok = oracle_add(out, c->value[i], why, cap);
    if (c != NULL)
        checkpoint__free_unpacked(c, NULL);
    free(buf);
    return ok;
}

/* The model file holds exactly want. */
static bool file_holds(const char *path, const ref *want, char *why, size_t cap)
{
    ref got = {.n = 0};
    bool ok = oracle_load(path, &got, why, cap) && ref_same(want, &got, why, cap);
    ref_free(&got);
    return ok;
}

static void check_file(const char *path, const ref *want, const char *what)
{
    char why[300];
    bool ok = file_holds(path, want, why, sizeof why);
    check(ok, "tree: %s: the saved file, decoded by protobuf-c, holds the expected tensors (%s)",
          what, why);
}

/* ---- a mount without the kernel ---- */

typedef struct mount {
    tree tr;
    ck_writer_lock lock;
    char path[512];
    bool open;
} mount;

/* As fuse/main.c opens a single model: its lock, its directory, interrupted
 * saves finished and leftovers removed, then the tree. */
static int mount_open(mount *mt, const char *path, bool writable, ck_error *err)
{
    memset(mt, 0, sizeof *mt);
    mt->lock.fd = -1;
    snprintf(mt->path, sizeof mt->path, "%s", path);
    if (writable && ck_writer_lock_take(&mt->lock, path, "test_tree", err) < 0)
        return -1;
    ck_model_dir *dir = ck_dir_open(path, err);
    if (dir == NULL)
        return -1;
    ck_dir_watch_files(dir);
    ck_open_opts oo = {0};
    ck_model *m = ck_group_recover(dir, !writable, err) < 0 ? NULL
                                                            : ck_model_open_at(dir, path, &oo, err);
    ck_dir_unref(dir); /* the model holds it */
    if (m == NULL)
        return -1;
    if (writable)
        ck_encode_cleanup(m);
    if (tree_init(&mt->tr, m, &oo, writable, err) < 0) {
        ck_model_close(m);
        return -1;
    }
    mt->open = true;
    return 0;
}

static void mount_close(mount *mt)
{
    if (mt->open) {
        ck_model_close(mt->tr.model); /* a save may have replaced it */
        tree_free(&mt->tr);
    }
    ck_writer_lock_release(&mt->lock);
    mt->open = false;
}

/* The live entry of a directory name, or NULL.  Entries move when one is
 * made (realloc): looked up again after each mkdir. */
static entry *ent(mount *mt, const char *dir)
{
    int64_t pos = tree_lookup(&mt->tr, dir);
    return pos < 0 ? NULL : &mt->tr.entries[pos];
}

/* echo TEXT > meta: open with O_TRUNC, write, close.  A write refused
 * as it happens (text no later write could mend) still has its close;
 * its refusal is the one returned. */
static int meta_put(tree *tr, entry *e, const char *text, ck_error *err)
{
    if (entry_meta_begin(tr, e, true, err) < 0)
        return -1;
    if (entry_meta_write(e, text, strlen(text), 0, err) < 0) {
        ck_error at_close;
        entry_meta_finish(tr, e, &at_close);
        return -1;
    }
    return entry_meta_finish(tr, e, err);
}

/* The meta text of a type and shape, spelled as a person would write it
 * (not as the tree formats it). */
static const char *meta_text(int type, const int64_t *dims, uint32_t ndim, char *buf, size_t cap)
{
    size_t n = (size_t)snprintf(buf, cap, "shape {");
    for (uint32_t i = 0; i < ndim; i++)
        n += (size_t)snprintf(buf + n, cap - n, " dim: %lld", (long long)dims[i]);
    snprintf(buf + n, cap - n, " }\ndata_type: %s\n", TYPES[type].of);
    return buf;
}

/* mkdir, then meta and out made and written, as cp -r does. */
static int tensor_new(mount *mt, const char *dir, const char *meta, const void *bytes, size_t len,
                      ck_error *err)
{
    if (tree_mkdir(&mt->tr, dir, err) < 0)
        return -1;
    entry *e = ent(mt, dir);
    if (entry_create(&mt->tr, e, true, err) < 0 ||
        entry_meta_write(e, meta, strlen(meta), 0, err) < 0 ||
        entry_meta_finish(&mt->tr, e, err) < 0 || entry_create(&mt->tr, e, false, err) < 0)
        return -1;
    return len ? entry_out_write(&mt->tr, e, bytes, len, 0, err) : 0;
}

/* rm -r: meta, out, then the directory. */
static int tensor_remove(mount *mt, const char *dir, ck_error *err)
{
    entry *e = ent(mt, dir);
    if (e == NULL)
        return ck_fail(err, ENOENT, "%s: no such directory", dir);
    if (entry_unlink(&mt->tr, e, true, err) < 0 || entry_unlink(&mt->tr, e, false, err) < 0)
        return -1;
    return tree_rmdir(&mt->tr, e, err);
}

/* A save in mount/saver.c's three steps, the replaced model closed last.
 * *wrote: whether there was anything to save. */
static int save_all(tree *tr, bool *wrote, ck_error *err)
{
    tree_save *job = NULL;
    ck_model *old = NULL;
    int rc = tree_save_begin(tr, &job, false, err);
    *wrote = job != NULL;
    if (rc < 0 || job == NULL)
        return rc;
    rc = tree_save_run(job, err);
    rc = tree_save_end(tr, job, rc, &old, err);
    ck_model_close(old);
    rc = tree_save_finish(job, rc, err);
    tr->placing = false;
    return rc;
}

/* Bytes of an entry's `out` as the front-end reads them (mount/model_ops.c,
 * read_out): the spill file's range when edited, else the model's. */
static bool out_bytes(const tree *tr, const entry *e, unsigned char *buf, size_t len)
{
    if (e->edit != NULL && e->edit->overlay.used)
        return len == 0 || pread(tr->spill_fd, buf, len, (off_t)e->edit->overlay.base) ==
                               (ssize_t)len;
    ck_error err;
    const ck_tensor *t = entry_tensor(tr, e);
    return len == 0 || (t && ck_model_read(tr->model, t, buf, len, 0, &err) == (long)len);
}

/* What the tree shows, as a reference model: every live entry in order. */
static bool tree_view(const tree *tr, ref *out, char *why, size_t cap)
{
    out->n = 0;
    for (size_t i = 0; i < tr->n_entries; i++) {
        const entry *e = &tr->entries[i];
        if (e->deleted)
            continue;
        size_t nlen;
        const char *name = entry_name(tr, e, &nlen);
        const ck_dtype *dt = entry_dtype(tr, e);
        uint32_t ndim;
        const int64_t *dims = entry_dims(tr, e, &ndim);
        int type = dt ? type_by_of(dt->of_name) : -1;
        if (type < 0 || ndim > 4 || nlen >= NAME_MAX_LEN || out->n == REF_MAX) {
            snprintf(why, cap, "entry %zu: no known type, or too large", i);
            return false;
        }
        rt *t = &out->v[out->n++];
        memset(t, 0, sizeof *t);
        memcpy(t->name, name, nlen);
        t->type = type;
        t->ndim = ndim;
        copy(t->dims, dims, ndim * sizeof *dims);
        t->len = entry_out_size(tr, e);
        t->bytes = malloc(t->len + 1);
        if (!out_bytes(tr, e, t->bytes, t->len)) {
            snprintf(why, cap, "entry %zu: its out cannot be read", i);
            return false;
        }
    }
    return true;
}

static bool view_is(const tree *tr, const ref *want, char *why, size_t cap)
{
    ref got = {.n = 0};
    bool ok = tree_view(tr, &got, why, cap) && ref_same(want, &got, why, cap);
    ref_free(&got);
    return ok;
}

static void check_view(const tree *tr, const ref *want, const char *what)
{
    char why[300];
    bool ok = view_is(tr, want, why, sizeof why);
    check(ok, "tree: %s: the tree shows the expected tensors (%s)", what, why);
}

/* ---- the fixture ---- */

static int n_models;

/* A few tensors of several types and ranks, one 0-d. */
static void base_tensors(ref *base)
{
    static const struct { const char *name; int type; uint32_t ndim; int64_t dims[2]; } T[] = {
        {"conv.weight", F32, 2, {2, 3}}, {"conv.bias", F32, 1, {3}}, {"step", I64, 0, {0}},
        {"embed", F16, 2, {4, 2}},       {"mask", U8, 1, {5}},
    };
    uint64_t rng = 0x2545F4914F6CDD1Dull;
    unsigned char bytes[64];
    base->n = 0;
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++) {
        fill(bytes, sizeof bytes, &rng);
        ref_add(base, T[i].name, T[i].type, T[i].dims, T[i].ndim, bytes);
    }
}

/* The base tensors written with protobuf-c to a .ckpt of their own. */
static const char *fixture(ref *base, char *path, size_t cap)
{
    base_tensors(base);
    snprintf(path, cap, "%s/tree-%d.ckpt", tmpdir, n_models++);
    ckpt_write(path, base);
    return path;
}

static bool same_inode(const char *path, const struct stat *before)
{
    struct stat st;
    return stat(path, &st) == 0 && st.st_ino == before->st_ino && st.st_dev == before->st_dev;
}

static bool same_file(const char *path, const unsigned char *want, size_t len)
{
    size_t got_len = 0;
    unsigned char *got = slurp(path, &got_len);
    bool same = got != NULL && got_len == len && memcmp(got, want, len) == 0;
    free(got);
    return same;
}

/* Open the fixture's model, checking that it opens. */
static bool mounted(mount *mt, const char *path, bool writable)
{
    ck_error err = {0};
    int rc = mount_open(mt, path, writable, &err);
    check(rc == 0, "tree: %s opens as a tree (%s)", path, rc ? err.msg : "ok");
    return rc == 0;
}

/* ---- the cases ---- */

/* Nothing to save is no save; a tree re-encoded with every tensor as it
 * was (the same bytes written over out, a rename undone) is the same file,
 * byte for byte, under a new inode. */
static void test_unchanged(void)
{
    ref base;
    char path[512];
    mount mt;
    ck_error err = {0};
    bool wrote;
    if (!mounted(&mt, fixture(&base, path, sizeof path), true))
        goto out;
    size_t len = 0;
    unsigned char *orig = slurp(path, &len);
    struct stat st0;
    stat(path, &st0);
    check_view(&mt.tr, &base, "as opened");
    int rc = save_all(&mt.tr, &wrote, &err);
    check(rc == 0 && !wrote && !tree_dirty(&mt.tr) && same_inode(path, &st0) &&
          same_file(path, orig, len), "tree: a save with nothing changed writes nothing (%s)",
          rc ? err.msg : "ok");

    const rt *bias = named(&base, "conv.bias");
    rc = entry_out_write(&mt.tr, ent(&mt, "conv.bias"), bias->bytes, bias->len, 0, &err);
    rc = rc < 0 ? rc : tree_rename(&mt.tr, ent(&mt, "embed"), "embed.tmp", &err);
    rc = rc < 0 ? rc : tree_rename(&mt.tr, ent(&mt, "embed.tmp"), "embed", &err);
    check(rc == 0 && tree_dirty(&mt.tr), "tree: the same bytes written and a rename undone are "
          "edits (%s)", rc ? err.msg : "ok");
    rc = save_all(&mt.tr, &wrote, &err);
    check(rc == 0 && wrote && !same_inode(path, &st0) && same_file(path, orig, len),
          "tree: a tree re-encoded unchanged is the same file, byte for byte (%s)",
          rc ? err.msg : "ok");
    check(!tree_dirty(&mt.tr) && tree_equals_file(&mt.tr), "tree: clean after the save");
    check_view(&mt.tr, &base, "after a save of the same tensors");
    check(tree_numbered_as_file(&mt.tr), "tree: numbered as a tree opened afresh from the "
          "saved file would be (the same inode numbers)");
    free(orig);
out:
    mount_close(&mt);
    ref_free(&base);
}

/* Partial writes at an offset, a write past the end (the gap reads as
 * zeros), truncate shorter and longer, O_TRUNC then a whole new out; each
 * reshaped tensor with its meta. */
static void test_out_edits(void)
{
    ref base, want;
    char path[512], meta[128];
    mount mt;
    ck_error err = {0};
    bool wrote;
    uint64_t rng = 77;
    unsigned char patch[16];
    if (!mounted(&mt, fixture(&base, path, sizeof path), true))
        goto out;
    ref_copy(&want, &base);
    rt *w = named(&want, "conv.weight");
    fill(patch, sizeof patch, &rng);
    int rc = entry_out_write(&mt.tr, ent(&mt, "conv.weight"), patch, 8, 4, &err);
    memcpy(w->bytes + 4, patch, 8);
    /* conv.bias [3] -> [5]: four bytes past the end, then the meta */
    rt *b = named(&want, "conv.bias");
    rc = rc < 0 ? rc : entry_out_write(&mt.tr, ent(&mt, "conv.bias"), patch, 4, 16, &err);
    rt_resize(b, 20);
    memcpy(b->bytes + 16, patch, 4);
    b->dims[0] = 5;
    rc = rc < 0 ? rc : meta_put(&mt.tr, ent(&mt, "conv.bias"),
                                meta_text(F32, b->dims, 1, meta, sizeof meta), &err);
    check(rc == 0, "tree: out written at offsets, a meta reshaped (%s)", rc ? err.msg : "ok");
    check_view(&mt.tr, &want, "partial writes, before the save");
    rc = save_all(&mt.tr, &wrote, &err);
    check(rc == 0 && wrote, "tree: partial writes saved (%s)", rc ? err.msg : "ok");
    check_file(path, &want, "partial writes");
    check_view(&mt.tr, &want, "partial writes, after the save");

    /* mask [5] -> [1] -> [4] by truncate, then a byte written at 5: what
     * was cut off comes back as zeros, as does the gap.  embed [4,2] ->
     * [6,2] by truncate (zeros); conv.weight replaced whole after O_TRUNC. */
    rt *m = named(&want, "mask"), *e = named(&want, "embed");
    rc = entry_out_truncate(&mt.tr, ent(&mt, "mask"), 1, &err);
    rc = rc < 0 ? rc : entry_out_truncate(&mt.tr, ent(&mt, "mask"), 4, &err);
    rc = rc < 0 ? rc : entry_out_write(&mt.tr, ent(&mt, "mask"), patch, 1, 5, &err);
    rt_resize(m, 1);
    rt_resize(m, 6);
    m->bytes[5] = patch[0];
    m->dims[0] = 6;
    rc = rc < 0 ? rc : meta_put(&mt.tr, ent(&mt, "mask"), meta_text(U8, m->dims, 1, meta, 128),
                                &err);
    rc = rc < 0 ? rc : entry_out_truncate(&mt.tr, ent(&mt, "embed"), 24, &err);
    rt_resize(e, 24);
    e->dims[0] = 6;
    rc = rc < 0 ? rc : meta_put(&mt.tr, ent(&mt, "embed"), meta_text(F16, e->dims, 2, meta, 128),
                                &err);
    fill(w->bytes, w->len, &rng);
    rc = rc < 0 ? rc : entry_out_truncate(&mt.tr, ent(&mt, "conv.weight"), 0, &err);
    rc = rc < 0 ? rc : entry_out_write(&mt.tr, ent(&mt, "conv.weight"), w->bytes, 10, 0, &err);
    rc = rc < 0 ? rc : entry_out_write(&mt.tr, ent(&mt, "conv.weight"), w->bytes + 10, 14, 10,
                                       &err);
    rc = rc < 0 ? rc : save_all(&mt.tr, &wrote, &err);
    check(rc == 0 && wrote, "tree: truncated, extended and rewritten tensors saved (%s)",
          rc ? err.msg : "ok");
    check_file(path, &want, "truncate and O_TRUNC");
    check_view(&mt.tr, &want, "truncate and O_TRUNC, after the save");
    ref_free(&want);
out:
    mount_close(&mt);
    ref_free(&base);
}

/* Renames (one to a name that needs escaping, one over an emptied
 * directory), removals, new tensors (one 0-d), and the refusals around
 * them. */
static void test_directories(void)
{
    ref base, want;
    char path[512], meta[128];
    mount mt;
    ck_error err = {0};
    bool wrote;
    if (!mounted(&mt, fixture(&base, path, sizeof path), true))
        goto out;
    ref_copy(&want, &base);
    int rc = tree_rename(&mt.tr, ent(&mt, "conv.bias"), "x%2Fy", &err);
    snprintf(named(&want, "conv.bias")->name, NAME_MAX_LEN, "x/y");
    check(rc == 0 && ent(&mt, "conv.bias") == NULL && ent(&mt, "x%2Fy") != NULL,
          "tree: rename to x%%2Fy (%s)", rc ? err.msg : "ok");
    rc = tree_rmdir(&mt.tr, ent(&mt, "step"), &err);
    check(rc < 0 && err.errnum == ENOTEMPTY, "tree: rmdir of a tensor with files is refused");
    rc = tree_rename(&mt.tr, ent(&mt, "embed"), "mask", &err);
    check(rc < 0 && err.errnum == ENOTEMPTY, "tree: rename over a tensor with files is refused");
    rc = tree_mkdir(&mt.tr, "mask", &err);
    check(rc < 0 && err.errnum == EEXIST, "tree: mkdir of an existing tensor is refused");
    rc = tree_mkdir(&mt.tr, "bad%zz", &err);
    check(rc < 0 && err.errnum == EINVAL, "tree: mkdir of a name that is no escape is refused");

    rc = tensor_remove(&mt, "step", &err);
    ref_drop(&want, "step");
    /* mv embed mask over mask's emptied directory: embed's tensor is mask */
    rc = rc < 0 ? rc : entry_unlink(&mt.tr, ent(&mt, "mask"), true, &err);
    rc = rc < 0 ? rc : entry_unlink(&mt.tr, ent(&mt, "mask"), false, &err);
    rc = rc < 0 ? rc : tree_rename(&mt.tr, ent(&mt, "embed"), "mask", &err);
    ref_drop(&want, "mask");
    snprintf(named(&want, "embed")->name, NAME_MAX_LEN, "mask");
    check(rc == 0, "tree: rm -r and a rename over an emptied directory (%s)",
          rc ? err.msg : "ok");

    int32_t hw[4] = {1, -2, 3, -4};
    double lr = 0.125;
    int64_t d22[2] = {2, 2};
    rc = tensor_new(&mt, "head.w", meta_text(I32, d22, 2, meta, 128), hw, sizeof hw, &err);
    ref_add(&want, "head.w", I32, d22, 2, hw);
    rc = rc < 0 ? rc : tensor_new(&mt, "lr", "data_type: kDouble", &lr, sizeof lr, &err);
    ref_add(&want, "lr", F64, NULL, 0, &lr);
    check(rc == 0, "tree: two new tensors made (%s)", rc ? err.msg : "ok");
    check_view(&mt.tr, &want, "renamed, removed, made");
    rc = save_all(&mt.tr, &wrote, &err);
    check(rc == 0 && wrote, "tree: renames, removals and new tensors saved (%s)",
          rc ? err.msg : "ok");
    check_file(path, &want, "renamed, removed, made");
    check_view(&mt.tr, &want, "renamed, removed, made, after the save");
    check(!tree_numbered_as_file(&mt.tr), "tree: a tombstone and appended tensors, saved, are "
          "not numbered as a tree opened afresh from the file (a run keeps it open)");

    /* A name removed and made again is a new tensor: last in the file. */
    double again = -1.5;
    rc = tensor_remove(&mt, "lr", &err);
    rc = rc < 0 ? rc : tensor_remove(&mt, "conv.weight", &err);
    rc = rc < 0 ? rc : tensor_new(&mt, "conv.weight", "data_type: kDouble", &again, 8, &err);
    ref_drop(&want, "lr");
    ref_drop(&want, "conv.weight");
    ref_add(&want, "conv.weight", F64, NULL, 0, &again);
    rc = rc < 0 ? rc : save_all(&mt.tr, &wrote, &err);
    check(rc == 0 && wrote, "tree: a tensor removed and made again saved (%s)",
          rc ? err.msg : "ok");
    check_file(path, &want, "removed and made again");
    ref_free(&want);
out:
    mount_close(&mt);
    ref_free(&base);
}

/* A meta that does not parse is refused, naming the tensor, and changes
 * nothing: neither the meta shown, nor the tree, nor the file. */
static void test_bad_meta(void)
{
    static const char *const bad[] = {"shape { dim: -1 } data_type: kFloat", "data_type: kFoo",
                                      "garbage", "shape { dim: 3 }", ""};
    ref base;
    char path[512], before[512], after[512];
    mount mt;
    ck_error err = {0};
    bool wrote;
    if (!mounted(&mt, fixture(&base, path, sizeof path), true))
        goto out;
    size_t len = 0;
    unsigned char *orig = slurp(path, &len);
    entry *e = ent(&mt, "conv.weight");
    size_t nb = entry_meta_text(&mt.tr, e, before, sizeof before - 1);
    before[nb] = '\0'; /* written back as text below */
    int refused = 0;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = meta_put(&mt.tr, e, bad[i], &err);
        size_t na = entry_meta_text(&mt.tr, e, after, sizeof after);
        refused += rc < 0 && err.errnum == EINVAL &&
                   (strstr(err.msg, "'conv.weight'") || strstr(err.msg, "; not written")) &&
                   na == nb && memcmp(before, after, nb) == 0;
    }
    check(refused == 5, "tree: %d of 5 bad metas refused naming the tensor, the meta kept (%s)",
          refused, err.msg);
    /* A bad meta seen at a flush keeps its buffer: it can still be fixed
     * before the close. */
    char good[128];
    int64_t d[2] = {3, 2};
    int rc = entry_meta_begin(&mt.tr, e, true, &err);
    rc = rc < 0 ? rc : entry_meta_write(e, "oops", 4, 0, &err);
    int flushed = entry_meta_check(&mt.tr, e, &err);
    rc = rc < 0 ? rc : entry_meta_truncate(&mt.tr, e, 0, &err);
    meta_text(F32, d, 2, good, sizeof good);
    rc = rc < 0 ? rc : entry_meta_write(e, good, strlen(good), 0, &err);
    rc = rc < 0 ? rc : entry_meta_finish(&mt.tr, e, &err);
    uint32_t ndim;
    const int64_t *dims = entry_dims(&mt.tr, e, &ndim);
    check(flushed < 0 && rc == 0 && ndim == 2 && dims[0] == 3 && dims[1] == 2,
          "tree: a meta refused at a flush, fixed before the close, applies (%s)",
          rc ? err.msg : "ok");
    rc = meta_put(&mt.tr, e, "data_type: kNope", &err);
    dims = entry_dims(&mt.tr, e, &ndim);
    check(rc < 0 && ndim == 2 && dims[0] == 3 && dims[1] == 2,
          "tree: a bad meta over an edited one keeps the edited one");
    rc = meta_put(&mt.tr, e, before, &err); /* back to the file's own */
    check(rc == 0 && !tree_dirty(&mt.tr), "tree: the file's own meta again is no edit");
    rc = save_all(&mt.tr, &wrote, &err);
    check(rc == 0 && !wrote && same_file(path, orig, len),
          "tree: after refused metas there is nothing to save, the file is as it was");
    check_view(&mt.tr, &base, "after refused metas");

    /* A new directory whose meta never parsed cannot be saved. */
    rc = tree_mkdir(&mt.tr, "fresh", &err);
    e = ent(&mt, "fresh");
    rc = rc < 0 ? rc : entry_create(&mt.tr, e, true, &err);
    rc = rc < 0 ? rc : entry_meta_write(e, "nonsense", 8, 0, &err);
    int finished = entry_meta_finish(&mt.tr, e, &err);
    rc = rc < 0 ? rc : entry_create(&mt.tr, e, false, &err);
    check(rc == 0 && finished < 0 && entry_dtype(&mt.tr, e) == NULL,
          "tree: a new tensor's bad meta is refused, it has no type");
    rc = save_all(&mt.tr, &wrote, &err);
    check(rc < 0 && strstr(err.msg, "'fresh'") && strstr(err.msg, "nothing was saved") &&
          same_file(path, orig, len),
          "tree: a new tensor without a valid meta fails the save, naming it: %s", err.msg);
    free(orig);
out:
    mount_close(&mt);
    ref_free(&base);
}

/* An out whose size is not its meta's shape fails the save, naming the
 * tensor; the file is not touched and the edits stay, so fixing the one
 * tensor saves them all. */
static void test_size_mismatch(void)
{
    ref base, want;
    char path[512], meta[128];
    mount mt;
    ck_error err = {0};
    bool wrote;
    if (!mounted(&mt, fixture(&base, path, sizeof path), true))
        goto out;
    ref_copy(&want, &base);
    size_t len = 0;
    unsigned char *orig = slurp(path, &len);
    struct stat st0;
    stat(path, &st0);
    rt *b = named(&want, "conv.bias"), *m = named(&want, "mask");
    b->dims[0] = 4;
    int rc = meta_put(&mt.tr, ent(&mt, "conv.bias"), meta_text(F32, b->dims, 1, meta, 128), &err);
    unsigned char x[4] = {9, 8, 7, 6};
    rc = rc < 0 ? rc : entry_out_write(&mt.tr, ent(&mt, "mask"), x, 2, 0, &err);
    memcpy(m->bytes, x, 2);
    check(rc == 0, "tree: a meta of 4 elements over 3 accepted (%s)", rc ? err.msg : "ok");
    rc = save_all(&mt.tr, &wrote, &err);
    check(rc < 0 && strstr(err.msg, "tensor 'conv.bias'") && strstr(err.msg, "nothing was saved"),
          "tree: the mismatch fails the save, naming the tensor: %s", err.msg);
    check(same_inode(path, &st0) && same_file(path, orig, len) && tree_dirty(&mt.tr),
          "tree: the failed save left the file as it was and kept the edits");
    rc = entry_out_write(&mt.tr, ent(&mt, "conv.bias"), x, 4, 12, &err);
    rt_resize(b, 16);
    memcpy(b->bytes + 12, x, 4);
    rc = rc < 0 ? rc : save_all(&mt.tr, &wrote, &err);
    check(rc == 0 && wrote, "tree: fixed by writing the missing bytes, it saves (%s)",
          rc ? err.msg : "ok");
    check_file(path, &want, "after the mismatch was fixed");

    /* Past the end with no meta: too long; a new tensor with no out. */
    len = 0;
    free(orig);
    orig = slurp(path, &len);
    rc = entry_out_write(&mt.tr, ent(&mt, "mask"), x, 1, 5, &err);
    rc = rc < 0 ? rc : save_all(&mt.tr, &wrote, &err);
    check(rc < 0 && strstr(err.msg, "tensor 'mask': out is 6 bytes") && same_file(path, orig, len),
          "tree: an out one byte too long fails the save, naming it: %s", err.msg);
    rc = entry_out_truncate(&mt.tr, ent(&mt, "mask"), 5, &err);
    rc = rc < 0 ? rc : tree_mkdir(&mt.tr, "nothing", &err);
    rc = rc < 0 ? rc : entry_create(&mt.tr, ent(&mt, "nothing"), true, &err);
    rc = rc < 0 ? rc : entry_meta_write(ent(&mt, "nothing"), "data_type: kInt8", 16, 0, &err);
    rc = rc < 0 ? rc : entry_meta_finish(&mt.tr, ent(&mt, "nothing"), &err);
    int saved = save_all(&mt.tr, &wrote, &err);
    check(rc == 0 && saved < 0 && strstr(err.msg, "'nothing' has no out") &&
          same_file(path, orig, len), "tree: a new tensor with no out fails the save: %s",
          err.msg);
    ref_free(&want);
    free(orig);
out:
    mount_close(&mt);
    ref_free(&base);
}

/* A save asked by fsync (tree_save_ask.hold) saves around the tensors
 * that block it: their edits stay, shown and unsaved, and the file gets
 * the rest; unless the fsync'd tensor is one of them, when nothing is
 * saved.  Fixing them, the next save has everything. */
static int save_held(tree *tr, uint32_t need, ck_error *held, ck_error *err)
{
    tree_save *job = NULL;
    ck_model *old = NULL;
    tree_save_ask ask = {.hold = true, .need = &need, .n_need = 1};
    int rc = tree_save_begin_ask(tr, &job, &ask, held, err);
    if (rc < 0 || job == NULL)
        return rc;
    rc = tree_save_run(job, err);
    rc = tree_save_end(tr, job, rc, &old, err);
    ck_model_close(old);
    rc = tree_save_finish(job, rc, err);
    tr->placing = false;
    return rc;
}

static void test_hold_blocked(void)
{
    ref base, want;
    char path[512], meta[128];
    mount mt;
    ck_error err = {0}, held = {0};
    bool wrote;
    if (!mounted(&mt, fixture(&base, path, sizeof path), true))
        goto out;
    ref_copy(&want, &base);
    size_t len = 0;
    unsigned char *orig = slurp(path, &len);
    rt *b = named(&want, "conv.bias"), *m = named(&want, "mask");
    uint32_t mask_pos = (uint32_t)(ent(&mt, "mask") - mt.tr.entries);
    uint32_t bias_pos = (uint32_t)(ent(&mt, "conv.bias") - mt.tr.entries);
    int64_t four[1] = {4};
    unsigned char x[4] = {9, 8, 7, 6};
    /* conv.bias: a meta of 4 elements over 3; 'nothing': new, no out;
     * mask: a good edit. */
    int rc = meta_put(&mt.tr, ent(&mt, "conv.bias"), meta_text(F32, four, 1, meta, 128), &err);
    rc = rc < 0 ? rc : tree_mkdir(&mt.tr, "nothing", &err);
    rc = rc < 0 ? rc : meta_put(&mt.tr, ent(&mt, "nothing"), "data_type: kInt8", &err);
    rc = rc < 0 ? rc : entry_out_write(&mt.tr, ent(&mt, "mask"), x, 2, 0, &err);
    check(rc == 0, "tree hold: the edits are taken (%s)", rc ? err.msg : "ok");
    memcpy(m->bytes, x, 2);

    rc = save_held(&mt.tr, bias_pos, &held, &err);
    check(rc < 0 && strstr(err.msg, "2 tensors block the save") && same_file(path, orig, len),
          "tree hold: an fsync of a blocking tensor saves nothing: %s", err.msg);
    rc = save_held(&mt.tr, mask_pos, &held, &err);
    check(rc == 0 && strstr(held.msg, "saved all but 2 tensors, whose edits stay unsaved: ") &&
          strstr(held.msg, "tensor 'conv.bias': out is 12 bytes") &&
          strstr(held.msg, "tensor 'nothing' has no"),
          "tree hold: an fsync of another tensor saves around them, naming them: %s / %s",
          rc ? err.msg : "ok", held.msg);
    check_file(path, &want, "after a save that held two tensors back");
    uint32_t ndim = 0;
    const int64_t *dims = entry_dims(&mt.tr, ent(&mt, "conv.bias"), &ndim);
    check(tree_dirty(&mt.tr) && ndim == 1 && dims[0] == 4 && ent(&mt, "nothing") != NULL &&
          ent(&mt, "nothing")->tensor_id == ENTRY_NEW,
          "tree hold: the held edits are still shown, unsaved");

    /* Only held edits left: nothing to write, the fsync succeeds. */
    free(orig);
    orig = slurp(path, &len);
    rc = save_held(&mt.tr, mask_pos, &held, &err);
    check(rc == 0 && held.msg[0] != '\0' && same_file(path, orig, len),
          "tree hold: with only held edits left the file stays as it is (%s)",
          rc ? err.msg : held.msg);

    /* A held tensor is saved under its old name: taken by another
     * directory, nothing is held and nothing saved. */
    rc = tree_rename(&mt.tr, ent(&mt, "conv.bias"), "cb", &err);
    rc = rc < 0 ? rc : tree_mkdir(&mt.tr, "conv.bias", &err);
    rc = rc < 0 ? rc : entry_create(&mt.tr, ent(&mt, "conv.bias"), true, &err);
    rc = rc < 0 ? rc : entry_create(&mt.tr, ent(&mt, "conv.bias"), false, &err);
    rc = rc < 0 ? rc : meta_put(&mt.tr, ent(&mt, "conv.bias"), meta_text(U8, four, 1, meta, 128),
                                &err);
    rc = rc < 0 ? rc : entry_out_write(&mt.tr, ent(&mt, "conv.bias"), x, 4, 0, &err);
    int held_rc = rc < 0 ? rc : save_held(&mt.tr, mask_pos, &held, &err);
    check(rc == 0 && held_rc < 0 && strstr(err.msg, "2 tensors block") && strstr(err.msg, "tensor 'cb'") && same_file(path, orig, len),
          "tree hold: a held tensor's old name taken, the save fails as a whole: %s", err.msg);
    rc = entry_unlink(&mt.tr, ent(&mt, "conv.bias"), true, &err);
    rc = rc < 0 ? rc : entry_unlink(&mt.tr, ent(&mt, "conv.bias"), false, &err);
    rc = rc < 0 ? rc : tree_rmdir(&mt.tr, ent(&mt, "conv.bias"), &err);
    rc = rc < 0 ? rc : tree_rename(&mt.tr, ent(&mt, "cb"), "conv.bias", &err);
    check(rc == 0, "tree hold: the other directory removed, the name back (%s)",
          rc ? err.msg : "ok");

    rc = entry_out_write(&mt.tr, ent(&mt, "conv.bias"), x, 4, 12, &err);
    rc = rc < 0 ? rc : entry_unlink(&mt.tr, ent(&mt, "nothing"), true, &err);
    rc = rc < 0 ? rc : tree_rmdir(&mt.tr, ent(&mt, "nothing"), &err);
    b->dims[0] = 4;
    rt_resize(b, 16);
    memcpy(b->bytes + 12, x, 4);
    rc = rc < 0 ? rc : save_all(&mt.tr, &wrote, &err);
    check(rc == 0 && wrote && !tree_dirty(&mt.tr), "tree hold: fixed, the rest saves (%s)",
          rc ? err.msg : "ok");
    check_file(path, &want, "after the held tensors were fixed");
    ref_free(&want);
    free(orig);
out:
    mount_close(&mt);
    ref_free(&base);
}

/* Edits made between tree_save_begin and tree_save_end (single-threaded
 * here, as the front-end's requests are between the saver's steps) do not
 * reach the file being saved, and are the next save's. */
static void test_edits_during_save(void)
{
    ref base, want;
    char path[512], meta[128];
    mount mt;
    ck_error err = {0};
    uint64_t rng = 99;
    if (!mounted(&mt, fixture(&base, path, sizeof path), true))
        goto out;
    ref_copy(&want, &base);
    rt *w = named(&want, "conv.weight");
    fill(w->bytes, 8, &rng);
    int rc = entry_out_write(&mt.tr, ent(&mt, "conv.weight"), w->bytes, 8, 0, &err);
    tree_save *job = NULL;
    rc = rc < 0 ? rc : tree_save_begin(&mt.tr, &job, false, &err);
    check(rc == 0 && job != NULL && mt.tr.saving, "tree: a save begins (%s)", rc ? err.msg : "ok");
    if (job == NULL)
        goto out_ref;
    ref at_begin;
    ref_copy(&at_begin, &want);

    /* Meanwhile: the same tensor again (its frozen bytes must stay), an
     * untouched one, a rename, a removal, a new tensor, a reshape. */
    fill(w->bytes, 24, &rng);
    rc = entry_out_write(&mt.tr, ent(&mt, "conv.weight"), w->bytes, 24, 0, &err);
    rt *m = named(&want, "mask");
    fill(m->bytes + 1, 3, &rng);
    rc = rc < 0 ? rc : entry_out_write(&mt.tr, ent(&mt, "mask"), m->bytes + 1, 3, 1, &err);
    rc = rc < 0 ? rc : tree_rename(&mt.tr, ent(&mt, "embed"), "embed2", &err);
    snprintf(named(&want, "embed")->name, NAME_MAX_LEN, "embed2");
    rc = rc < 0 ? rc : tensor_remove(&mt, "step", &err);
    ref_drop(&want, "step");
    int8_t late[3] = {-1, 0, 1};
    int64_t d3 = 3;
    rc = rc < 0 ? rc : tensor_new(&mt, "late", meta_text(I8, &d3, 1, meta, 128), late, 3, &err);
    ref_add(&want, "late", I8, &d3, 1, late);
    rt *b = named(&want, "conv.bias");
    b->dims[0] = 1;
    rt_resize(b, 4);
    rc = rc < 0 ? rc : entry_out_truncate(&mt.tr, ent(&mt, "conv.bias"), 4, &err);
    rc = rc < 0 ? rc : meta_put(&mt.tr, ent(&mt, "conv.bias"), meta_text(F32, b->dims, 1, meta,
                                128), &err);
    check(rc == 0, "tree: edits taken while the save runs (%s)", rc ? err.msg : "ok");

    ck_model *old = NULL;
    rc = tree_save_run(job, &err);
    rc = tree_save_end(&mt.tr, job, rc, &old, &err);
    ck_model_close(old);
    rc = tree_save_finish(job, rc, &err);
    check(rc == 0 && !mt.tr.saving, "tree: the save ends (%s)", rc ? err.msg : "ok");
    check_file(path, &at_begin, "the tree as it was when the save began");
    check(tree_dirty(&mt.tr), "tree: the edits made meanwhile are pending");
    check_view(&mt.tr, &want, "edits made during the save, after it");
    bool wrote;
    rc = save_all(&mt.tr, &wrote, &err);
    check(rc == 0 && wrote && !tree_dirty(&mt.tr), "tree: the next save writes them (%s)",
          rc ? err.msg : "ok");
    check_file(path, &want, "the edits made during the previous save");
    check_view(&mt.tr, &want, "after the second save");
    ref_free(&at_begin);
out_ref:
    ref_free(&want);
out:
    mount_close(&mt);
    ref_free(&base);
}

/* Another program replaces the model while a save runs: its file wins,
 * the save fails saying so, and the tree keeps its edits. */
static void test_replaced_under_save(void)
{
    ref base, other;
    char path[512], tmp[600];
    mount mt;
    ck_error err = {0};
    if (!mounted(&mt, fixture(&base, path, sizeof path), true))
        goto out;
    int rc = tensor_remove(&mt, "step", &err);
    tree_save *job = NULL;
    rc = rc < 0 ? rc : tree_save_begin(&mt.tr, &job, false, &err);
    if (rc < 0 || job == NULL) {
        check(0, "tree: a save begins (%s)", err.msg);
        goto out;
    }
    ref_copy(&other, &base);
    snprintf(other.v[0].name, NAME_MAX_LEN, "someone.else");
    snprintf(tmp, sizeof tmp, "%s.other", path);
    ckpt_write(tmp, &other);
    rc = rename(tmp, path);
    size_t len = 0;
    unsigned char *theirs = slurp(path, &len);
    ck_model *old = NULL;
    rc = tree_save_run(job, &err);
    rc = tree_save_end(&mt.tr, job, rc, &old, &err);
    ck_model_close(old);
    rc = tree_save_finish(job, rc, &err);
    check(rc < 0 && strstr(err.msg, "the edits are kept") && same_file(path, theirs, len) &&
          tree_dirty(&mt.tr) && ent(&mt, "step") == NULL,
          "tree: a model replaced under the save is left alone, the edits kept: %s", err.msg);
    check_file(path, &other, "the other program's file");
    free(theirs);
    ref_free(&other);
out:
    mount_close(&mt);
    ref_free(&base);
}

/* A read-only tree refuses every edit. */
static void test_read_only(void)
{
    ref base;
    char path[512];
    mount mt;
    ck_error err = {0};
    if (!mounted(&mt, fixture(&base, path, sizeof path), false))
        goto out;
    entry *e = ent(&mt, "conv.bias");
    int refused = (entry_out_write(&mt.tr, e, "x", 1, 0, &err) < 0 && err.errnum == EROFS) +
                  (entry_meta_begin(&mt.tr, e, true, &err) < 0 && err.errnum == EROFS) +
                  (tree_mkdir(&mt.tr, "n", &err) < 0 && err.errnum == EROFS) +
                  (tree_rename(&mt.tr, e, "m", &err) < 0 && err.errnum == EROFS) +
                  (entry_unlink(&mt.tr, e, false, &err) < 0 && err.errnum == EROFS);
    check(refused == 5 && !tree_dirty(&mt.tr) && !entry_writable(&mt.tr, e),
          "tree: a read-only tree refuses %d of 5 edits with EROFS", refused);
    check_view(&mt.tr, &base, "read-only, after the refusals");
out:
    mount_close(&mt);
    ref_free(&base);
}

/* sed -i, rsync: a temporary file written beside meta or out and renamed
 * over it.  Its bytes become the new out; a meta that does not parse
 * refuses the rename. */
static void test_renamed_over(void)
{
    ref base, want;
    char path[512], meta[128];
    mount mt;
    ck_error err = {0};
    bool wrote;
    if (!mounted(&mt, fixture(&base, path, sizeof path), true))
        goto out;
    ref_copy(&want, &base);
    uint32_t pos = (uint32_t)tree_lookup(&mt.tr, "mask");
    rt *m = named(&want, "mask");
    m->dims[0] = 7;
    rt_resize(m, 7);
    memcpy(m->bytes, "rsynced", 7);
    int64_t id = tree_extra_create(&mt.tr, pos, ".out.XYZ", &err);
    int rc = id < 0 ? -1 : tree_extra_write(&mt.tr, (size_t)id, "rsynced", 7, 0, &err);
    rc = rc < 0 ? rc : tree_extra_replace_file(&mt.tr, (size_t)id, ent(&mt, "mask"), false, &err);
    id = tree_extra_create(&mt.tr, pos, ".meta.bad", &err);
    rc = rc < 0 || id < 0 ? -1 : tree_extra_write(&mt.tr, (size_t)id, "kFloat", 6, 0, &err);
    int bad = rc < 0 ? 0 : tree_extra_replace_file(&mt.tr, (size_t)id, ent(&mt, "mask"), true,
                                                    &err);
    check(rc == 0 && bad < 0 && strstr(err.msg, "'mask'"),
          "tree: out replaced by a renamed file; a bad meta renamed over is refused: %s", err.msg);
    id = tree_extra_create(&mt.tr, pos, ".meta.good", &err);
    meta_text(U8, m->dims, 1, meta, sizeof meta);
    rc = id < 0 ? -1 : tree_extra_write(&mt.tr, (size_t)id, meta, strlen(meta), 0, &err);
    rc = rc < 0 ? rc : tree_extra_replace_file(&mt.tr, (size_t)id, ent(&mt, "mask"), true, &err);
    rc = rc < 0 ? rc : save_all(&mt.tr, &wrote, &err);
    check(rc == 0 && wrote, "tree: meta and out renamed over, saved (%s)", rc ? err.msg : "ok");
    check_file(path, &want, "meta and out renamed over");
    ref_free(&want);
out:
    mount_close(&mt);
    ref_free(&base);
}

/* ---- safetensors, its header built and read with jansson ---- */

static int by_name(const void *a, const void *b)
{
    return strcmp(((const rt *)a)->name, ((const rt *)b)->name);
}

/* The same tensors, in any order: a safetensors header is an object. */
static bool same_set(const ref *want, const ref *got, char *why, size_t cap)
{
    ref a = {.n = 0}, b = {.n = 0};
    ref_copy(&a, want);
    ref_copy(&b, got);
    qsort(a.v, a.n, sizeof a.v[0], by_name);
    qsort(b.v, b.n, sizeof b.v[0], by_name);
    bool same = ref_same(&a, &b, why, cap);
    ref_free(&a);
    ref_free(&b);
    return same;
}

/* r as a safetensors file: the header's length (8 bytes, little-endian),
 * the header with a "__metadata__", then the tensors' bytes in r's order. */
static void st_write(const char *path, const ref *r)
{
    json_t *h = json_object();
    json_object_set_new(h, "__metadata__", json_pack("{s:s}", "format", "pt"));
    json_int_t off = 0;
    for (size_t i = 0; i < r->n; i++) {
        const rt *t = &r->v[i];
        json_t *shape = json_array();
        for (uint32_t k = 0; k < t->ndim; k++)
            json_array_append_new(shape, json_integer(t->dims[k]));
        json_object_set_new(h, t->name, json_pack("{s:s,s:o,s:[I,I]}", "dtype",
                                                  TYPES[t->type].st, "shape", shape,
                                                  "data_offsets", off, off + (json_int_t)t->len));
        off += (json_int_t)t->len;
    }
    char *text = json_dumps(h, JSON_COMPACT);
    size_t hl = strlen(text);
    unsigned char le[8];
    for (int k = 0; k < 8; k++)
        le[k] = (unsigned char)((uint64_t)hl >> (8 * k));
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(le, 1, 8, f) == 8 && fwrite(text, 1, hl, f) == hl;
    for (size_t i = 0; ok && i < r->n; i++)
        ok = r->v[i].len == 0 || fwrite(r->v[i].bytes, 1, r->v[i].len, f) == r->v[i].len;
    if (f == NULL || fclose(f) != 0 || !ok) {
        perror(path);
        exit(2);
    }
    free(text);
    json_decref(h);
}

/* One header entry into out, its data range into range. */
static bool st_add(ref *out, const char *name, json_t *v, size_t dlen, size_t range[2],
                   char *why, size_t cap)
{
    json_t *shape = json_object_get(v, "shape"), *offs = json_object_get(v, "data_offsets");
    int type = type_by_st(json_string_value(json_object_get(v, "dtype")) ?: "");
    json_int_t b = json_integer_value(json_array_get(offs, 0));
    json_int_t e = json_integer_value(json_array_get(offs, 1));
    if (type < 0 || !json_is_array(shape) || json_array_size(shape) > 4 ||
        json_array_size(offs) != 2 || b < 0 || e < b || (size_t)e > dlen ||
        strlen(name) >= NAME_MAX_LEN || out->n == REF_MAX) {
        snprintf(why, cap, "header entry '%s' is not a tensor inside the file", name);
        return false;
    }
    rt *t = &out->v[out->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->type = type;
    t->ndim = (uint32_t)json_array_size(shape);
    for (uint32_t k = 0; k < t->ndim; k++)
        t->dims[k] = json_integer_value(json_array_get(shape, k));
    t->len = (size_t)(e - b);
    range[0] = (size_t)b;
    range[1] = (size_t)e;
    return true;
}

static int by_start(const void *a, const void *b)
{
    const size_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* The data ranges, sorted, cover the data exactly: no hole, no overlap. */
static bool st_tiled(size_t (*range)[2], size_t n, size_t dlen, char *why, size_t cap)
{
    qsort(range, n, sizeof range[0], by_start);
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        if (range[i][0] != at) {
            snprintf(why, cap, "data range %zu starts at %zu, not %zu", i, range[i][0], at);
            return false;
        }
        at = range[i][1];
    }
    if (at != dlen)
        snprintf(why, cap, "the data is %zu bytes, the tensors cover %zu", dlen, at);
    return at == dlen;
}

/* The tensors of a safetensors file, with jansson; *format: the
 * metadata's "format", or NULL. */
static bool st_load(const char *path, ref *out, char **format, char *why, size_t cap)
{
    size_t len = 0, hl = 0;
    unsigned char *buf = slurp(path, &len);
    out->n = 0;
    *format = NULL;
    for (int k = 0; buf && len >= 8 && k < 8; k++)
        hl |= (size_t)buf[k] << (8 * k);
    json_t *h = buf && len >= 8 && hl <= len - 8 ? json_loadb((char *)buf + 8, hl, 0, NULL)
                                                 : NULL;
    bool ok = json_is_object(h);
    if (!ok)
        snprintf(why, cap, "no safetensors header that jansson reads");
    size_t dlen = ok ? len - 8 - hl : 0, (*range)[2] = calloc(REF_MAX, sizeof *range);
    const char *key;
    json_t *v;
    json_object_foreach(ok ? h : NULL, key, v) {
        if (strcmp(key, "__metadata__") == 0) {
            const char *f = json_string_value(json_object_get(v, "format"));
            *format = f ? strdup(f) : NULL;
        } else if (ok && (ok = st_add(out, key, v, dlen, range[out->n], why, cap))) {
            rt *t = &out->v[out->n - 1];
            t->bytes = malloc(t->len + 1);
            copy(t->bytes, buf + 8 + hl + range[out->n - 1][0], t->len);
        }
    }
    ok = ok && st_tiled(range, out->n, dlen, why, cap);
    free(range);
    json_decref(h);
    free(buf);
    return ok;
}

/* Values edited in place save as the same file with only those bytes
 * changed (the writer keeps the header byte for byte); a tensor renamed,
 * removed, added or retyped saves as a new layout that jansson reads back
 * as the tree, its metadata kept. */
static void test_safetensors(void)
{
    ref base, want, got = {.n = 0};
    char path[512], meta[128], why[300];
    mount mt;
    ck_error err = {0};
    bool wrote;
    base_tensors(&base);
    snprintf(path, sizeof path, "%s/tree-%d.safetensors", tmpdir, n_models++);
    st_write(path, &base);
    if (!mounted(&mt, path, true))
        goto out;
    ref_copy(&want, &base);
    ref view = {.n = 0};
    bool ok = tree_view(&mt.tr, &view, why, sizeof why) && same_set(&base, &view, why, sizeof why);
    ref_free(&view);
    check(ok, "tree: a safetensors file opens as its tensors (%s)", why);

    size_t len = 0;
    unsigned char *file = slurp(path, &len);
    size_t data = len - (base.v[0].len + base.v[1].len + base.v[2].len + base.v[3].len +
                         base.v[4].len); /* conv.weight's bytes come first */
    int rc = entry_out_write(&mt.tr, ent(&mt, "conv.weight"), "\x01\x02\x03\x04\x05", 5, 7, &err);
    memcpy(file + data + 7, "\x01\x02\x03\x04\x05", 5);
    rc = rc < 0 ? rc : save_all(&mt.tr, &wrote, &err);
    check(rc == 0 && wrote && same_file(path, file, len),
          "tree: safetensors values edited in place: the same file but those 5 bytes (%s)",
          rc ? err.msg : "ok");
    memcpy(named(&want, "conv.weight")->bytes + 7, "\x01\x02\x03\x04\x05", 5);
    free(file);

    rc = tree_rename(&mt.tr, ent(&mt, "conv.bias"), "bias2", &err);
    snprintf(named(&want, "conv.bias")->name, NAME_MAX_LEN, "bias2");
    rc = rc < 0 ? rc : tensor_remove(&mt, "step", &err);
    ref_drop(&want, "step");
    int32_t hw[4] = {5, 6, 7, 8};
    int64_t d22[2] = {2, 2};
    rc = rc < 0 ? rc : tensor_new(&mt, "head", meta_text(I32, d22, 2, meta, 128), hw, 16, &err);
    ref_add(&want, "head", I32, d22, 2, hw);
    rt *m = named(&want, "mask");
    m->type = I8;
    rc = rc < 0 ? rc : meta_put(&mt.tr, ent(&mt, "mask"), meta_text(I8, m->dims, 1, meta, 128),
                                &err);
    rc = rc < 0 ? rc : save_all(&mt.tr, &wrote, &err);
    check(rc == 0 && wrote, "tree: safetensors renamed, removed, made, retyped, saved (%s)",
          rc ? err.msg : "ok");
    char *format = NULL;
    ok = st_load(path, &got, &format, why, sizeof why) && same_set(&want, &got, why, sizeof why);
    check(ok && format && strcmp(format, "pt") == 0,
          "tree: the saved safetensors, read by jansson, holds the expected tensors and its "
          "metadata (%s)", why);
    free(format);
    ref_free(&got);
    ref_free(&want);
out:
    mount_close(&mt);
    ref_free(&base);
}

/* ---- random sequences against the reference model ---- */

typedef struct walk {
    mount mt;
    ref cur;                    /* what the tree must show */
    uint64_t rng;
    int next_name;
    /* Names given up (removed, renamed away), to be taken again: a name
     * reused at another position, over a tombstone. */
    char freed[16][NAME_MAX_LEN];
    unsigned n_freed;
    int ops, saves, failures;
    char why[400];              /* the first failure */
} walk;

static void walk_fail(walk *w, const char *what, const char *detail)
{
    if (w->failures++ == 0)
        snprintf(w->why, sizeof w->why, "op %d: %s: %.300s", w->ops, what, detail);
}

static uint64_t pick(walk *w, uint64_t n)
{
    return unit_xorshift(&w->rng) % n;
}

/* A tensor name's directory: the names made here escape only '/'. */
static const char *dir_of(const char *name, char *buf)
{
    size_t n = 0;
    for (const char *p = name; *p; p++)
        n += (size_t)(*p == '/' ? sprintf(buf + n, "%%2F") : sprintf(buf + n, "%c", *p));
    buf[n] = '\0';
    return buf;
}

static void give_up_name(walk *w, const char *name)
{
    char *to = w->freed[w->n_freed++ % 16];
    size_t n = strnlen(name, NAME_MAX_LEN - 1);
    memcpy(to, name, n);
    to[n] = '\0';
}

/* A name no live tensor has: one given up before, or a fresh one (some
 * with a '/', which the directory name escapes). */
static void some_name(walk *w, const char *prefix, char *out)
{
    if (w->n_freed > 0 && pick(w, 2)) {
        const char *old = w->freed[pick(w, w->n_freed < 16 ? w->n_freed : 16)];
        if (ref_find(&w->cur, old) < 0) {
            snprintf(out, NAME_MAX_LEN, "%s", old);
            return;
        }
    }
    snprintf(out, NAME_MAX_LEN, pick(w, 3) ? "%s%d" : "%s/%d", prefix, w->next_name++);
}

static entry *walk_entry(walk *w, size_t i)
{
    char dir[3 * NAME_MAX_LEN];
    return ent(&w->mt, dir_of(w->cur.v[i].name, dir));
}

static void random_shape(walk *w, int64_t *dims, uint32_t *ndim)
{
    *ndim = (uint32_t)pick(w, 3);
    for (uint32_t k = 0; k < *ndim; k++)
        dims[k] = (int64_t)pick(w, 5);
}

/* The op's result: a refusal is a failure of the walk. */
static void expect_ok(walk *w, int rc, const char *what, const ck_error *err)
{
    if (rc < 0)
        walk_fail(w, what, err->msg);
}

static void op_overwrite(walk *w)
{
    rt *t = &w->cur.v[pick(w, w->cur.n)];
    if (t->len == 0)
        return;
    size_t off = pick(w, t->len), n = 1 + pick(w, t->len - off);
    fill(t->bytes + off, n, &w->rng);
    ck_error err = {0};
    expect_ok(w, entry_out_write(&w->mt.tr, walk_entry(w, (size_t)(t - w->cur.v)),
                                 t->bytes + off, n, off, &err), "write", &err);
}

/* New shape (same type): meta and truncate in either order, then maybe
 * the new tail written. */
static void op_reshape(walk *w)
{
    size_t i = pick(w, w->cur.n);
    rt *t = &w->cur.v[i];
    char meta[128];
    random_shape(w, t->dims, &t->ndim);
    size_t len = elems(t->dims, t->ndim) * TYPES[t->type].size, old = t->len;
    rt_resize(t, len);
    meta_text(t->type, t->dims, t->ndim, meta, sizeof meta);
    ck_error err = {0};
    entry *e = walk_entry(w, i);
    bool meta_first = pick(w, 2);
    int rc = meta_first ? meta_put(&w->mt.tr, e, meta, &err) : 0;
    rc = rc < 0 ? rc : entry_out_truncate(&w->mt.tr, e, len, &err);
    rc = rc < 0 || meta_first ? rc : meta_put(&w->mt.tr, e, meta, &err);
    if (rc == 0 && len > old && pick(w, 2)) {
        fill(t->bytes + old, len - old, &w->rng);
        rc = entry_out_write(&w->mt.tr, e, t->bytes + old, len - old, old, &err);
    }
    expect_ok(w, rc, "reshape", &err);
}

/* Another type of the same size: out stays as it is. */
static void op_retype(walk *w)
{
    static const int twin[N_TYPES] = {[F32] = I32, [I32] = F32, [F64] = I64, [I64] = F64,
                                      [U8] = I8,   [I8] = U8,   [F16] = -1};
    size_t i = pick(w, w->cur.n);
    rt *t = &w->cur.v[i];
    if (twin[t->type] < 0)
        return;
    t->type = twin[t->type];
    char meta[128];
    ck_error err = {0};
    expect_ok(w, meta_put(&w->mt.tr, walk_entry(w, i),
                          meta_text(t->type, t->dims, t->ndim, meta, sizeof meta), &err),
              "retype", &err);
}

static void op_rename(walk *w)
{
    size_t i = pick(w, w->cur.n);
    entry *e = walk_entry(w, i);
    char dir[3 * NAME_MAX_LEN], name[NAME_MAX_LEN];
    some_name(w, "r", name);
    give_up_name(w, w->cur.v[i].name);
    snprintf(w->cur.v[i].name, NAME_MAX_LEN, "%s", name);
    ck_error err = {0};
    expect_ok(w, tree_rename(&w->mt.tr, e, dir_of(name, dir), &err), "rename", &err);
}

/* mv X Y over Y emptied of its files (rename(2) replaces an empty
 * directory): X's tensor, under Y's name, at X's place. */
static void op_rename_over(walk *w)
{
    size_t i = pick(w, w->cur.n), j = pick(w, w->cur.n);
    if (i == j)
        return;
    char dir[3 * NAME_MAX_LEN];
    entry *target = walk_entry(w, j);
    ck_error err = {0};
    int rc = entry_unlink(&w->mt.tr, target, true, &err);
    rc = rc < 0 ? rc : entry_unlink(&w->mt.tr, target, false, &err);
    rc = rc < 0 ? rc : tree_rename(&w->mt.tr, walk_entry(w, i),
                                   dir_of(w->cur.v[j].name, dir), &err);
    expect_ok(w, rc, "rename over an emptied directory", &err);
    give_up_name(w, w->cur.v[i].name);
    memcpy(w->cur.v[i].name, w->cur.v[j].name, NAME_MAX_LEN);
    ref_remove(&w->cur, j);
}

/* A .ckpt of no tensors is refused by its writer: one is always kept. */
static void op_remove(walk *w)
{
    if (w->cur.n < 2)
        return;
    size_t i = pick(w, w->cur.n);
    char dir[3 * NAME_MAX_LEN];
    ck_error err = {0};
    expect_ok(w, tensor_remove(&w->mt, dir_of(w->cur.v[i].name, dir), &err), "remove", &err);
    give_up_name(w, w->cur.v[i].name);
    ref_remove(&w->cur, i);
}

static void op_new(walk *w)
{
    if (w->cur.n >= REF_MAX - 4)
        return;
    char name[NAME_MAX_LEN], dir[3 * NAME_MAX_LEN], meta[128];
    int64_t dims[4];
    uint32_t ndim;
    int type = (int)pick(w, N_TYPES);
    random_shape(w, dims, &ndim);
    unsigned char bytes[16 * 8];
    size_t len = elems(dims, ndim) * TYPES[type].size;
    fill(bytes, len, &w->rng);
    some_name(w, "n", name);
    ref_add(&w->cur, name, type, dims, ndim, bytes);
    ck_error err = {0};
    meta_text(type, dims, ndim, meta, sizeof meta);
    expect_ok(w, tensor_new(&w->mt, dir_of(name, dir), meta, bytes, len, &err), "new tensor",
              &err);
}

/* A refused meta changes nothing the reference would see. */
static void op_bad_meta(walk *w)
{
    static const char *const bad[] = {"shape { dim: 2 } data_type: kNope", "shape { dim: 1",
                                      "data_type: kFloat data_type: kFloat"};
    ck_error err = {0};
    if (meta_put(&w->mt.tr, walk_entry(w, pick(w, w->cur.n)), bad[pick(w, 3)], &err) == 0)
        walk_fail(w, "bad meta", "accepted");
}

typedef void (*walk_op)(walk *w);

static const walk_op EDITS[] = {op_overwrite, op_overwrite, op_overwrite, op_reshape,
                                op_retype,    op_rename,    op_remove,    op_new,
                                op_new,       op_bad_meta,  op_rename_over};
#define N_EDITS (sizeof EDITS / sizeof EDITS[0])

/* The file holds want, the tree shows w->cur. */
static void walk_verify(walk *w, const ref *want, const char *what)
{
    char why[300];
    if (!file_holds(w->mt.path, want, why, sizeof why))
        walk_fail(w, what, why);
    else if (!view_is(&w->mt.tr, &w->cur, why, sizeof why))
        walk_fail(w, what, why);
}

static void op_save(walk *w)
{
    ck_error err = {0};
    bool wrote;
    int rc = save_all(&w->mt.tr, &wrote, &err);
    w->saves += wrote;
    if (rc < 0)
        walk_fail(w, "save", err.msg);
    else if (tree_dirty(&w->mt.tr))
        walk_fail(w, "save", "still dirty");
    walk_verify(w, &w->cur, "save");
}

/* A save with one to three edits between its begin and its end. */
static void op_save_during(walk *w)
{
    ck_error err = {0};
    tree_save *job = NULL;
    if (tree_save_begin(&w->mt.tr, &job, false, &err) < 0) {
        walk_fail(w, "save begin", err.msg);
        return;
    }
    ref at_begin = {.n = 0};
    ref_copy(&at_begin, &w->cur);
    for (uint64_t k = 1 + pick(w, 3); k > 0; k--)
        EDITS[pick(w, N_EDITS)](w);
    if (job != NULL) {
        ck_model *old = NULL;
        int rc = tree_save_run(job, &err);
        rc = tree_save_end(&w->mt.tr, job, rc, &old, &err);
        ck_model_close(old);
        if (tree_save_finish(job, rc, &err) < 0)
            walk_fail(w, "save with edits during it", err.msg);
        w->saves++;
    }
    walk_verify(w, &at_begin, "save with edits during it");
    ref_free(&at_begin);
}

static void random_walk(uint64_t seed, int n_ops)
{
    ref base;
    char path[512];
    walk w = {.rng = seed};
    if (!mounted(&w.mt, fixture(&base, path, sizeof path), true))
        goto out;
    ref_copy(&w.cur, &base);
    char why[300];
    for (w.ops = 0; w.ops < n_ops && w.failures == 0; w.ops++) {
        uint64_t r = pick(&w, 100);
        if (r < 8)
            op_save(&w);
        else if (r < 14)
            op_save_during(&w);
        else
            EDITS[pick(&w, N_EDITS)](&w);
        if (w.failures == 0 && !view_is(&w.mt.tr, &w.cur, why, sizeof why))
            walk_fail(&w, "the tree's view", why);
    }
    op_save(&w);
    check(w.failures == 0 && w.saves > 0,
          "tree: random walk (seed %llu): %d ops, %d saves, every saved file (protobuf-c) and "
          "the tree as the reference model says (%s)",
          (unsigned long long)seed, w.ops, w.saves, w.failures ? w.why : "ok");
    ref_free(&w.cur);
out:
    mount_close(&w.mt);
    ref_free(&base);
}

void test_tree(void)
{
    test_unchanged();
    test_out_edits();
    test_directories();
    test_bad_meta();
    test_size_mismatch();
    test_hold_blocked();
    test_edits_during_save();
    test_replaced_under_save();
    test_read_only();
    test_renamed_over();
    test_safetensors();
    static const uint64_t seeds[] = {1, 0x9E3779B97F4A7C15ull, 20240527, 0xDEADBEEFull};
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++)
        random_walk(seeds[i], 300);
}
