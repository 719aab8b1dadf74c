/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests of the saved index (codec/core/saved_index.h): an index
 * loaded from its file is field for field the one the reader makes (and,
 * for ONNX and MindIR, the layout frame by frame), on the real fixtures
 * and on a crafted .ckpt of every record kind (slices, superseded records, a
 * map parameter, a pre-2.3 scalar, a CRC trailer); a truncated, bit-flipped
 * or re-signed-after-mutation index (2000 mutations each, of a .ckpt's, an
 * ONNX and a MindIR model's) is refused or harmless; a file replaced under an
 * index that still matches its size, mtime and first bytes gives EIO on the
 * changed tensor, never its bytes.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "../../codec/ckpt/ckpt_reader.h"
#include "../../codec/core/model.h"
#include "../../codec/registry.h"
#include "../../codec/core/saved_index.h"
#include "../../codec/onnx_mindir/onnx_mindir_reader.h"
#include "../../codec/pb/pb_layout.h"
#include "unit.h"

static char store_dir[300];
static ck_index_store store = {.dir = store_dir};
static ck_open_opts with_index = {.index = &store};

/* ---- a small .ckpt encoder: every record kind the reader keeps ---- */

typedef struct bytes {
    unsigned char p[1 << 16];
    size_t n;
} bytes;

static void varint(bytes *b, uint64_t v)
{
    do {
        b->p[b->n++] = (unsigned char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
}

static void field(bytes *b, unsigned num, const void *data, size_t len)
{
    varint(b, num << 3 | 2);
    varint(b, len);
    memcpy(b->p + b->n, data, len);
    b->n += len;
}

static void tensor(bytes *out, const char *type, const int64_t *dims, int ndim,
                   const void *data, size_t len)
{
    bytes t = {.n = 0};
    for (int i = 0; i < ndim; i++) {
        varint(&t, 1 << 3);
        varint(&t, (uint64_t)dims[i]);
    }
    field(&t, 2, type, strlen(type));
    field(&t, 3, data, len);
    memcpy(out->p + out->n, t.p, t.n);
    out->n += t.n;
}

static void record(bytes *file, const char *tag, const char *type, const int64_t *dims,
                   int ndim, const void *data, size_t len)
{
    bytes v = {.n = 0}, t = {.n = 0};
    field(&v, 1, tag, strlen(tag));
    tensor(&t, type, dims, ndim, data, len);
    field(&v, 2, t.p, t.n);
    field(file, 1, v.p, v.n);
}

static void map_record(bytes *file, const char *tag)
{
    bytes v = {.n = 0}, map = {.n = 0};
    int64_t k[] = {2}, val[] = {2, 3}, st[] = {2};
    int64_t keys[2] = {7, 9};
    float vals[6] = {1, 2, 3, 4, 5, 6};
    int32_t status[2] = {0, 1};
    bytes t1 = {.n = 0}, t2 = {.n = 0}, t3 = {.n = 0};
    tensor(&t1, "int64", k, 1, keys, sizeof keys);
    tensor(&t2, "float32", val, 2, vals, sizeof vals);
    tensor(&t3, "int32", st, 1, status, sizeof status);
    field(&map, 1, t1.p, t1.n);
    field(&map, 1, t2.p, t2.n);
    field(&map, 1, t3.p, t3.n);
    field(&v, 1, tag, strlen(tag));
    field(&v, 3, map.p, map.n);
    field(file, 1, v.p, v.n);
}

static void crc_trailer(bytes *b)
{
    uLong crc = crc32(0L, b->p, (uInt)b->n);
    memcpy(b->p + b->n, "crc_num", 7);
    memset(b->p + b->n + 7, 0, 6);
    for (int i = 0; i < 4; i++)
        b->p[b->n + 13 + i] = (unsigned char)(crc >> (8 * (3 - i)));
    b->n += 17;
}

/* Records of every kind: a pre-2.3 scalar, slices joined, a record
 * replaced later (superseded), a map parameter, 4 KiB of padding first so
 * that a later record lies past the sampled bytes; a CRC trailer. */
static const char *crafted(const char *name, const char *late_tag, float late_value)
{
    static bytes b;
    static char path[512];
    float big[1100], w[6] = {1, 2, 3, 4, 5, 6};
    double lr = 0.5;
    int64_t d_big[] = {1100}, d_w[] = {2, 3}, d_zero[] = {0}, d_half[] = {1, 3};
    for (int i = 0; i < 1100; i++)
        big[i] = (float)i;
    b.n = 0;
    record(&b, "pad", "Float32", d_big, 1, big, sizeof big);
    record(&b, "fc.weight", "Float32", d_w, 2, w, sizeof w);
    record(&b, "learning_rate", "Float64", d_zero, 1, &lr, sizeof lr);
    record(&b, "sliced", "Float32", d_w, 2, w, 12);
    record(&b, "sliced", "Float32", d_w, 2, w + 3, 12);
    map_record(&b, "emb");
    record(&b, "fc.weight", "Float32", d_half, 2, w, 12);
    float late[3] = {late_value, late_value, late_value};
    record(&b, late_tag, "Float32", d_half, 2, late, sizeof late);
    crc_trailer(&b);
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(b.p, 1, b.n, f) != b.n)
        exit(2);
    fclose(f);
    return path;
}

/* ---- comparing two indexes ---- */

static bool same_str(const char *a, const char *b)
{
    return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

static const char *tensor_diff(const ck_tensor *a, const ck_tensor *b)
{
    if (a->name_len != b->name_len || memcmp(a->name, b->name, a->name_len) != 0)
        return "name";
    if (!same_str(a->dir_name, b->dir_name) || !same_str(a->dir_suffix, b->dir_suffix))
        return "directory name";
    if (a->dir_src_len != b->dir_src_len || (a->dir_src == NULL) != (b->dir_src == NULL) ||
        (a->dir_src && memcmp(a->dir_src, b->dir_src, a->dir_src_len) != 0))
        return "dir_src";
    if (!same_str(a->type_name, b->type_name) || a->dtype != b->dtype)
        return "type";
    if (a->ndim != b->ndim || memcmp(a->dims, b->dims, a->ndim * sizeof *a->dims) != 0)
        return "dims";
    if (a->nbytes != b->nbytes || a->n_ext != b->n_ext || a->gather || b->gather)
        return "size or extents";
    for (uint32_t k = 0; k < a->n_ext; k++) {
        const ck_extent *x = ck_tensor_ext(a, k), *y = ck_tensor_ext(b, k);
        if (x->off != y->off || x->len != y->len || x->src != y->src)
            return "an extent";
    }
    if (a->rec_off != b->rec_off || a->rec_end != b->rec_end)
        return "record span";
    if (a->part != b->part || a->superseded != b->superseded ||
        a->scalar_dims_zero != b->scalar_dims_zero || a->read_only != b->read_only)
        return "flags";
    return NULL;
}

static const char *ckpt_state_diff(const ck_model *a, const ck_model *b)
{
    const ck_ckpt_info *x = ck_ckpt_info_of(a), *y = ck_ckpt_info_of(b);
    if (x->has_crc != y->has_crc || x->crc_verified != y->crc_verified ||
        x->records_end != y->records_end || x->n_records != y->n_records ||
        x->n_unknown != y->n_unknown)
        return "reader state";
    return NULL;
}

/* An ONNX or MindIR layout, field by field (the holders by their text). */
static const char *pb_state_diff(const ck_model *a, const ck_model *b)
{
    const ck_pb_layout *x = ck_pb_layout_of(a), *y = ck_pb_layout_of(b);
    if (x->mindir != y->mindir || memcmp(&x->fields, &y->fields, sizeof x->fields) != 0)
        return "layout format";
    if (x->n_frames != y->n_frames)
        return "frame count";
    for (size_t i = 0; i < x->n_frames; i++) {
        const ck_pb_frame *f = &x->frames[i], *g = &y->frames[i];
        if (f->key_off != g->key_off || f->len_off != g->len_off ||
            f->body_off != g->body_off || f->body_end != g->body_end || f->parent != g->parent)
            return "a frame";
    }
    if (x->main_graph != y->main_graph || x->new_pbfile != y->new_pbfile ||
        x->insert_off != y->insert_off || x->inputs_end != y->inputs_end ||
        x->ir_version != y->ir_version || x->decoded_src != y->decoded_src)
        return "layout";
    if (x->graph_name_len != y->graph_name_len ||
        (x->graph_name_len && memcmp(x->graph_name, y->graph_name, x->graph_name_len) != 0))
        return "graph name";
    for (size_t i = 0; i < a->index.count; i++) {
        const ck_pb_tensor *s = &x->tensors[i], *t = &y->tensors[i];
        if (s->key_off != t->key_off || s->len_off != t->len_off || s->frame != t->frame ||
            s->storage != t->storage || s->role != t->role ||
            s->typed_field != t->typed_field || s->ext_src != t->ext_src ||
            s->pbfile != t->pbfile || !same_str(s->holder, t->holder))
            return "a tensor's layout";
    }
    return NULL;
}

/* NULL when the two models are indexed alike, else what differs. */
static const char *model_diff(const ck_model *a, const ck_model *b)
{
    if (a->index.count != b->index.count || a->index.n_live != b->index.n_live)
        return "count";
    if (memcmp(a->index.live, b->index.live, a->index.n_live * sizeof *a->index.live) != 0)
        return "live list";
    for (size_t i = 0; i < a->index.count; i++) {
        const char *why = tensor_diff(&a->index.tensors[i], &b->index.tensors[i]);
        if (why != NULL)
            return why;
    }
    if (a->format != b->format)
        return "format";
    const char *why = a->format == &ck_format_ckpt ? ckpt_state_diff(a, b) : pb_state_diff(a, b);
    if (why != NULL)
        return why;
    if (a->n_sources != b->n_sources)
        return "sources";
    return NULL;
}

static void index_file(const char *model, char *out, size_t cap)
{
    char real[PATH_MAX];
    unsigned char h[32];
    unsigned int len;
    if (realpath(model, real) == NULL)
        exit(2);
    EVP_Digest(real, strlen(real), h, &len, EVP_sha256(), NULL);
    int n = snprintf(out, cap, "%s/", store_dir);
    for (int i = 0; i < 32; i++)
        n += snprintf(out + n, cap - (size_t)n, "%02x", h[i]);
    snprintf(out + n, cap - (size_t)n, ".ckidx");
}

/* Open path read in full (no index) and through the store twice: the
 * second open must load the index the first wrote, equal to the full
 * read.  1: loaded and equal; 0: not kept (a model that does not
 * qualify); -1: a difference, said. */
static int round_trip(const char *path, bool *kept)
{
    ck_error err;
    char file[PATH_MAX];
    index_file(path, file, sizeof file);
    unlink(file);
    ck_model *full = ck_model_open(path, NULL, &err);
    if (full == NULL)
        return 0; /* refused alike either way */
    ck_model *first = ck_model_open(path, &with_index, &err);
    ck_model *second = first ? ck_model_open(path, &with_index, &err) : NULL;
    int rc = -1;
    *kept = access(file, F_OK) == 0;
    const char *why = first == NULL || second == NULL ? "an open failed" : NULL;
    if (why == NULL && first->saved != NULL)
        why = "the first open loaded an index";
    if (why == NULL && *kept != (second->saved != NULL))
        why = "the kept index was not loaded";
    if (why == NULL && (why = model_diff(full, first)) == NULL &&
        (why = model_diff(full, second)) == NULL)
        rc = *kept ? 1 : 0;
    if (why != NULL)
        check(0, "%s: %s", path, why);
    ck_model_close(full);
    ck_model_close(first);
    ck_model_close(second);
    return rc;
}

/* Round trips of the files matching pattern: how many kept an index,
 * -1 when one differs (said) or none match. */
static int round_trips(const char *pattern, size_t *n)
{
    glob_t g;
    if (glob(pattern, 0, NULL, &g) != 0)
        return -1;
    int kept = 0, bad = 0;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        bool k;
        int rc = round_trip(g.gl_pathv[i], &k);
        kept += rc == 1;
        bad += rc < 0;
    }
    *n = g.gl_pathc;
    globfree(&g);
    return bad ? -1 : kept;
}

static void test_fixtures(void)
{
    size_t n = 0;
    int kept = round_trips("../shared/fixtures/mindspore/*.ckpt", &n);
    check(kept >= 4, "%d of %zu real checkpoints keep an index that loads equal to the "
          "reader's, field by field", kept, n);
    kept = round_trips("../shared/fixtures/onnx/*.onnx", &n);
    check(kept >= 4, "%d of %zu real ONNX models keep an index whose layout loads equal to "
          "the reader's, frame by frame", kept, n);
    kept = round_trips("../shared/fixtures/mindspore/*.mindir", &n);
    check(kept >= 2, "%d of %zu real MindIR models keep an index whose layout loads equal to "
          "the reader's, frame by frame", kept, n);
    bool k;
    const char *path = crafted("crafted.ckpt", "late", 1);
    ck_error err;
    ck_model *m = ck_model_open(path, NULL, &err);
    check(m != NULL, "the crafted checkpoint opens (%s)", m ? "ok" : err.msg);
    ck_model_close(m);
    check(round_trip(path, &k) == 1, "slices, a superseded record, a pre-2.3 scalar, a map "
          "parameter and a CRC trailer load equal from the saved index");
}

/* ---- refused indexes ---- */

static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    rewind(f);
    unsigned char *buf = malloc(*len ? *len : 1);
    if (fread(buf, 1, *len, f) != *len)
        exit(2);
    fclose(f);
    return buf;
}

static void spill(const char *path, const unsigned char *buf, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || write(fd, buf, len) != (ssize_t)len)
        exit(2);
    close(fd);
}

/* The index's own checksum and length again, after a mutation. */
static void resign(unsigned char *buf, size_t len)
{
    unsigned int n;
    for (int i = 0; i < 8; i++)
        buf[16 + i] = (unsigned char)((uint64_t)len >> (8 * i));
    EVP_Digest(buf, len - 32, buf + len - 32, &n, EVP_sha256(), NULL);
}

/* Open path with the index file holding buf: whether it was loaded, and
 * whether every tensor then reads whole or fails cleanly. */
static bool open_with(const char *path, const char *file, const unsigned char *buf, size_t len,
                      bool *loaded)
{
    spill(file, buf, len);
    ck_error err;
    ck_model *m = ck_model_open(path, &with_index, &err);
    if (m == NULL)
        return false;
    *loaded = m->saved != NULL;
    unsigned char out[8192];
    for (size_t i = 0; i < m->index.n_live; i++) {
        const ck_tensor *t = &m->index.tensors[m->index.live[i]];
        for (uint64_t off = 0; off < t->nbytes; off += sizeof out)
            if (ck_model_read(m, t, out, sizeof out, off, &err) < 0)
                break;
    }
    /* What a save checks first: every record, and the format's layout. */
    bool one_line = ck_model_check_unchanged(m, &err) == 0 || strchr(err.msg, '\n') == NULL;
    ck_model_close(m);
    return one_line;
}

/* Truncated, flipped and mutated copies of path's index. */
static void refused(const char *path)
{
    char file[PATH_MAX];
    size_t len = 0;
    ck_error err;
    index_file(path, file, sizeof file);
    ck_model *m = ck_model_open(path, &with_index, &err);
    ck_model_close(m);
    unsigned char *good = slurp(file, &len), *buf = malloc(len ? len : 1);
    bool loaded = false, all = good != NULL;
    int refused = 0, tries = 0;
    for (size_t cut = 0; all && cut < len; cut += 1 + cut / 4, tries++) {
        all = open_with(path, file, good, cut, &loaded);
        refused += !loaded;
    }
    check(all && refused == tries, "%s: %d truncations of the index are refused, the model "
          "read in full", path, tries);
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    tries = refused = 0;
    for (int i = 0; all && i < 300; i++, tries++) {
        memcpy(buf, good, len);
        size_t at = unit_xorshift(&seed) % len;
        buf[at] ^= (unsigned char)(1u << (unit_xorshift(&seed) % 8));
        all = open_with(path, file, buf, len, &loaded);
        refused += !loaded;
    }
    check(all && refused == tries, "%s: %d bit flips in the index are refused by its "
          "checksum", path, tries);
    /* Past the checksum: the parser's own bounds. */
    int accepted = 0;
    for (int i = 0; all && i < 2000; i++) {
        memcpy(buf, good, len);
        for (int k = 0, n = 1 + (int)(unit_xorshift(&seed) % 4); k < n; k++) {
            size_t at = 24 + unit_xorshift(&seed) % (len - 56);
            buf[at] = (unsigned char)unit_xorshift(&seed);
        }
        resign(buf, len);
        all = open_with(path, file, buf, len, &loaded);
        accepted += loaded;
    }
    check(all, "%s: 2000 mutated and re-signed indexes are refused or read safely (%d "
          "loaded)", path, accepted);
    check(open_with(path, file, good, len, &loaded) && loaded, "%s: the intact index loads",
          path);
    free(buf);
    free(good);
}

static void test_refused(void)
{
    refused(crafted("refused.ckpt", "late", 1));
    /* the layouts of an ONNX and a MindIR model */
    refused("../shared/fixtures/onnx/silero_vad_legacy.onnx");
    refused("../shared/fixtures/mindspore/mindspore_ori_net.mindir");
}

/* ---- a file replaced under its index ---- */

static void test_replaced(void)
{
    const char *path = crafted("replaced.ckpt", "late", 1);
    char file[PATH_MAX];
    ck_error err;
    struct stat st;
    index_file(path, file, sizeof file);
    ck_model_close(ck_model_open(path, &with_index, &err));
    stat(path, &st);
    /* The same size, first 4 KiB and mtime: another tag of one length,
     * other values. */
    crafted("replaced.ckpt", "LATE", 2);
    struct timespec times[2] = {st.st_atim, st.st_mtim};
    utimensat(AT_FDCWD, path, times, 0);
    ck_model *m = ck_model_open(path, &with_index, &err);
    check(m != NULL && m->saved != NULL, "a replaced file that matches size, mtime and first "
          "bytes loads the index");
    if (m == NULL)
        return;
    const ck_tensor *late = NULL, *w = NULL;
    for (size_t i = 0; i < m->index.n_live; i++) {
        const ck_tensor *t = &m->index.tensors[m->index.live[i]];
        late = strcmp(t->name, "late") == 0 ? t : late;
        w = strcmp(t->name, "fc.weight") == 0 ? t : w;
    }
    float out[3];
    check(late != NULL && ck_model_read(m, late, out, sizeof out, 0, &err) < 0 &&
              err.errnum == EIO && strstr(err.msg, "was replaced since its index") != NULL &&
              strstr(err.msg, "'late'") != NULL,
          "its changed tensor fails with EIO and says so (%s)", err.msg);
    check(access(file, F_OK) != 0, "and the index is removed");
    check(w != NULL && ck_model_read(m, w, out, sizeof out, 0, &err) == sizeof out &&
              out[0] == 1, "a tensor whose record is unchanged reads");
    check(ck_model_check_unchanged(m, &err) < 0 && err.errnum == EIO,
          "a save is refused before it copies a record");
    ck_model_close(m);
    m = ck_model_open(path, &with_index, &err);
    check(m != NULL && m->saved == NULL && access(file, F_OK) == 0,
          "the next open reads the file and keeps a new index");
    ck_model_close(m);
}

void test_saved_index(void)
{
    snprintf(store_dir, sizeof store_dir, "%s/index", tmpdir);
    test_fixtures();
    test_refused();
    test_replaced();
}
