/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target: any byte string given to the model opener must be
 * refused with a message or indexed into tensors whose every byte can be
 * read back — never a crash, a hang or an out-of-bounds access (built with
 * AddressSanitizer and UBSan by `make fuzz`).  Every accepted input must
 * also re-encode, unchanged, to exactly its own bytes.  An ONNX, MindIR or
 * PyTorch model must also survive its every editable tensor being
 * rewritten with its own bytes (the path a commit takes; a torch.save file
 * is then patched in place, or laid out again when a tensor is not its
 * storage alone): the result reads back as the same tensors.
 *
 * CKPTFS_FUZZ_FORMAT (a format's name: ckpt, onnx, mindir, safetensors,
 * safetensors-set, pytorch; ckpt when unset) picks the format; one ckptfs does not
 * save yet is only read.  ck_model_open goes by the file name, so the input
 * is written to "fuzz" plus the format's extension in a private directory,
 * through the same path-based entry point the mount uses; external data
 * may name that file too.  For ckpt the same bytes also go through the
 * meta parser.  For a sharded set the input is the index, and two small
 * shards it may name, a.safetensors and b.safetensors, are written beside
 * it first.
 *
 * "strategy" fuzzes the merge of a distributed checkpoint: the input is a
 * parallel strategy file, applied to four small rank checkpoints written
 * at start (rank_<r>/c.ckpt, each the same tensors, of every rank count's
 * slice shapes); an accepted merge must read back whole.
 *
 * "iteration" fuzzes an iteration directory's metadata.json: the input is
 * that file, beside two shard files written at start
 * (iteration_00000001/model-000000<r>-0000002.safetensors, the same
 * tensors of slice shapes); an accepted directory must read back whole.
 *
 * "oneflow" fuzzes a OneFlow snapshot's pickled_data (oneflow_pickle.c):
 * the input is that file, beside tensor_5/{meta,out} (float32 [3,3,3,3])
 * and tensor_6/{meta,out} (float32 [3]) written at start, the shapes of
 * the real fixture; an accepted snapshot must read back whole.
 *
 * "map" fuzzes the map language (codec/map/): the input is a map's text,
 * parsed, then applied to a fixed list of names, and so is its reverse.
 *
 * "dcp" fuzzes a PyTorch Distributed Checkpoint's .metadata (dcp_metadata.c)
 * and the assembly of its tensors (dcp_dir.c): the input is that file,
 * beside the data files of the checkpoint CKPTFS_FUZZ_DCP names (run.sh:
 * one the test oracle wrote, chunks cut by rows and by a grid, values
 * saved as bytes), copied at start; an accepted one must read back whole.
 *
 * "saved-index" fuzzes the parser of a saved index (saved_index.c): the
 * input is an index file's body, framed with its length and SHA-256 as the
 * writer frames one (ck_saved_index_frame), so that mutations reach what
 * the checksum guards.  It is decoded against a small checkpoint written
 * at start (fuzz.ckpt: tensors of several types, a superseded record,
 * slices joined, a map parameter, a CRC trailer), with the identity the
 * input itself claims (ck_saved_index_claimed: path, size, mtime, first
 * bytes), so that the decoder goes past its identity check; an accepted
 * index is finalized and every tensor read, through the per-tensor check
 * of its record header, into bytes or a one-line refusal.  With
 * CKPTFS_FUZZ_MODEL_TO=FILE it only writes that checkpoint to FILE and
 * exits (run.sh indexes it, with ckptfs-dump, for its seeds).
 * "saved-index-onnx" does the same for an ONNX model's index, whose
 * reader state is the message layout (onnx_mindir_state.c), decoded
 * against a copy of the ONNX model CKPTFS_FUZZ_ONNX names (run.sh: a
 * fixture); an accepted one also passes the layout's own check before a
 * save (check_state through ck_saved_index_check_all) or fails it in one
 * line.
 *
 * FORMAT.enc and FORMAT.zst fuzz the envelopes: the input is opened with
 * the key "0123456789ABCDEF", or named fuzz.FORMAT.zst.  A wrapped model
 * cannot re-encode to its own bytes (fresh IVs; the seekable format), so
 * instead the unchanged tree is saved, wrapped again, and must reopen as
 * the same tensors.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "../../codec/ckpt/ckpt_reader.h"
#include "../../codec/collections/dist_merge.h"
#include "../../codec/collections/iteration_dir.h"
#include "../../codec/core/model.h"
#include "../../codec/core/saved_index.h"
#include "../../codec/oneflow/oneflow_dir.h"
#include "../../codec/oneflow/oneflow_meta.h"
#include "../../codec/pytorch/dcp_dir.h"
#include "../../codec/onnx_mindir/onnx_mindir_reader.h"
#include "../../codec/registry.h"
#include "../../codec/pytorch/pt_reader.h"
#include "../../codec/map/map.h"
#include "../../codec/safetensors/safetensors_set.h"
#include "../../save/encoder.h"

static char dir[PATH_MAX - 32];
static char path[PATH_MAX], rewritten[PATH_MAX];
static int fd = -1;
static bool ckpt, wrapped, strategy, iteration, oneflow, dcp, saved_index, map_text;
static const ck_format *saved_format; /* the format of the model a saved index is of */
/* The envelopes' options of a .enc input: the key "0123456789ABCDEF", in
 * hex as CKPTFS_KEY_HEX gives it (the envelopes read it once, at init). */
#define FUZZ_KEY_HEX "30313233343536373839414243444546"
static ck_envelope_args key;
static ck_open_opts opts;

static void read_everything(const ck_model *m)
{
    static unsigned char buf[65536];
    ck_error err;
    for (size_t i = 0; i < m->index.n_live; i++) {
        const ck_tensor *t = &m->index.tensors[m->index.live[i]];
        char meta[CK_META_MAX];
        if (ck_meta_of_tensor(t, meta, sizeof meta) == 0)
            abort();
        for (uint64_t off = 0; off < t->nbytes; off += sizeof buf)
            if (ck_model_read(m, t, buf, sizeof buf, off, &err) <= 0)
                abort(); /* extents were checked against the file at open */
    }
}

/* A varint, then a field's tag or length: enough protobuf to write the
 * rank checkpoints of the strategy fuzzing. */
static size_t put_varint(unsigned char *p, uint64_t v)
{
    size_t n = 0;
    for (; v >= 0x80; v >>= 7)
        p[n++] = (unsigned char)(v | 0x80);
    p[n++] = (unsigned char)v;
    return n;
}

static size_t put_bytes(unsigned char *p, unsigned field, const void *b, size_t len)
{
    size_t n = put_varint(p, field << 3 | 2);
    n += put_varint(p + n, len);
    memcpy(p + n, b, len);
    return n + len;
}

/* One checkpoint tensor: dims, type, and len bytes of a pattern. */
static size_t put_tensor(unsigned char *p, const int64_t *dims, unsigned ndim,
                         const char *type, size_t len, unsigned char seed)
{
    unsigned char content[512];
    size_t n = 0;
    for (unsigned d = 0; d < ndim; d++) {
        n += put_varint(p + n, 1 << 3);
        n += put_varint(p + n, (uint64_t)dims[d]);
    }
    n += put_bytes(p + n, 2, type, strlen(type));
    for (size_t i = 0; i < len; i++)
        content[i] = (unsigned char)(seed + i);
    return n + put_bytes(p + n, 3, content, len);
}

/* One checkpoint value: tag and tensor. */
static size_t put_value(unsigned char *p, const char *tag, const int64_t *dims, unsigned ndim,
                        const char *type, size_t len, unsigned char seed)
{
    unsigned char tensor[1024];
    size_t n = put_tensor(tensor, dims, ndim, type, len, seed);
    unsigned char value[1200];
    size_t v = put_bytes(value, 1, tag, strlen(tag));
    v += put_bytes(value + v, 2, tensor, n);
    return put_bytes(p, 1, value, v);
}

/* dir/dist/rank_<r>/c.ckpt for r < 4: tensors of slice shapes that a
 * strategy over 1, 2 or 4 devices may cut from any dimension. */
static void write_ranks(void)
{
    static const struct { const char *tag, *type; int64_t dims[3]; unsigned ndim, size; } v[] = {
        {"w", "Float32", {4, 6}, 2, 4}, {"b", "Float16", {2, 4, 2}, 3, 2},
        {"v", "Int32", {8}, 1, 4}, {"s", "Float32", {0}, 0, 4}, {"e", "Int8", {3, 0}, 2, 1},
    };
    for (unsigned r = 0; r < 4; r++) {
        char p[PATH_MAX];
        unsigned char buf[8192];
        size_t n = 0;
        for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
            size_t elems = 1;
            for (unsigned d = 0; d < v[i].ndim; d++)
                elems *= (size_t)v[i].dims[d];
            n += put_value(buf + n, v[i].tag, v[i].dims, v[i].ndim, v[i].type,
                           elems * v[i].size, (unsigned char)(r * 64 + i * 8));
        }
        snprintf(p, sizeof p, "%s/dist", dir);
        mkdir(p, 0700);
        snprintf(p, sizeof p, "%s/dist/rank_%u", dir, r);
        mkdir(p, 0700);
        snprintf(p, sizeof p, "%s/dist/rank_%u/c.ckpt", dir, r);
        int rfd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (rfd < 0 || write(rfd, buf, n) != (ssize_t)n || close(rfd) < 0)
            abort();
    }
}

/* A map parameter's value: its key, value and status tensors in one
 * record (the saved index groups the tensors of a record), their types
 * numpy's names as MindSpore writes them there. */
static size_t put_map(unsigned char *p, const char *tag)
{
    static const int64_t keys[] = {2}, values[] = {2, 3}, status[] = {2};
    unsigned char map[512], t[256];
    size_t n = put_bytes(map, 1, t, put_tensor(t, keys, 1, "int64", 16, 1));
    n += put_bytes(map + n, 1, t, put_tensor(t, values, 2, "float32", 24, 2));
    n += put_bytes(map + n, 1, t, put_tensor(t, status, 1, "int32", 8, 3));
    unsigned char value[600];
    size_t v = put_bytes(value, 1, tag, strlen(tag));
    v += put_bytes(value + v, 3, map, n);
    return put_bytes(p, 1, value, v);
}

/* The checkpoint whose saved index the "saved-index" input is, written to
 * file: a record of each layout the index keeps, and a CRC trailer. */
static void write_indexed_model(const char *file)
{
    static const int64_t w[] = {2, 3}, b[] = {4}, none[] = {0}, e[] = {3, 0}, half[] = {1, 3};
    unsigned char buf[4096];
    size_t n = put_value(buf, "w", w, 2, "Float32", 24, 0);
    n += put_value(buf + n, "b", b, 1, "Float16", 8, 24);
    n += put_value(buf + n, "lr", none, 1, "Float64", 8, 32); /* a pre-2.3 scalar */
    n += put_value(buf + n, "s", none, 0, "Int32", 4, 40);
    n += put_value(buf + n, "e", e, 2, "Int8", 0, 0);
    n += put_value(buf + n, "sliced", w, 2, "Float32", 12, 44); /* two halves, joined */
    n += put_value(buf + n, "sliced", w, 2, "Float32", 12, 56);
    n += put_map(buf + n, "emb");
    n += put_value(buf + n, "w", half, 2, "Float32", 12, 68); /* the first w superseded */
    uLong crc = crc32(0L, buf, (uInt)n);
    memcpy(buf + n, "crc_num\0\0\0\0\0\0", 13);
    for (int i = 0; i < 4; i++)
        buf[n + 13 + i] = (unsigned char)(crc >> (8 * (3 - i)));
    n += 17;
    int mfd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (mfd < 0 || write(mfd, buf, n) != (ssize_t)n || close(mfd) < 0)
        abort();
}

/* dir/iteration_00000001/model-000000<r>-0000002.safetensors for r < 2,
 * whose metadata.json is the input (written to path). */
static void write_shards_of_iteration(void)
{
    static const char header[] =
        "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
        "\"v\":{\"dtype\":\"I32\",\"shape\":[4],\"data_offsets\":[24,40]},"
        "\"s\":{\"dtype\":\"F16\",\"shape\":[],\"data_offsets\":[40,42]}}";
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/iteration_00000001", dir);
    mkdir(p, 0700);
    for (unsigned r = 0; r < 2; r++) {
        unsigned char buf[512] = {0};
        uint64_t hl = sizeof header - 1;
        for (int i = 0; i < 8; i++)
            buf[i] = (unsigned char)(hl >> (8 * i));
        memcpy(buf + 8, header, hl);
        for (size_t i = 0; i < 42; i++)
            buf[8 + hl + i] = (unsigned char)(r * 64 + i);
        snprintf(p, sizeof p, "%s/iteration_00000001/model-000000%u-0000002.safetensors", dir,
                 r);
        int sfd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (sfd < 0 || write(sfd, buf, 8 + hl + 42) != (ssize_t)(8 + hl + 42) || close(sfd) < 0)
            abort();
    }
}

/* dir/oneflow/tensor_{5,6}/{meta,out}, whose pickled_data is the input. */
static void write_oneflow_tensors(void)
{
    static const struct { const char *name, *meta; size_t bytes; } t[] = {
        {"tensor_5", "shape {\n  dim: 3\n  dim: 3\n  dim: 3\n  dim: 3\n}\ndata_type: kFloat\n",
         324},
        {"tensor_6", "shape {\n  dim: 3\n}\ndata_type: kFloat\n", 12},
    };
    static const unsigned char zeros[324];
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/oneflow", dir);
    mkdir(p, 0700);
    for (size_t i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "%s/oneflow/%s", dir, t[i].name);
        mkdir(p, 0700);
        snprintf(p, sizeof p, "%s/oneflow/%s/meta", dir, t[i].name);
        int mfd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        size_t ml = strlen(t[i].meta);
        if (mfd < 0 || write(mfd, t[i].meta, ml) != (ssize_t)ml || close(mfd) < 0)
            abort();
        snprintf(p, sizeof p, "%s/oneflow/%s/out", dir, t[i].name);
        int ofd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (ofd < 0 || write(ofd, zeros, t[i].bytes) != (ssize_t)t[i].bytes || close(ofd) < 0)
            abort();
    }
}

static void remove_oneflow_tensors(void)
{
    char p[PATH_MAX];
    for (int i = 5; i <= 6; i++) {
        snprintf(p, sizeof p, "%s/oneflow/tensor_%d/meta", dir, i);
        unlink(p);
        snprintf(p, sizeof p, "%s/oneflow/tensor_%d/out", dir, i);
        unlink(p);
        snprintf(p, sizeof p, "%s/oneflow/tensor_%d", dir, i);
        rmdir(p);
    }
    snprintf(p, sizeof p, "%s/oneflow/pickled_data", dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/oneflow", dir);
    rmdir(p);
}

static void remove_shards_of_iteration(void)
{
    char p[PATH_MAX];
    for (unsigned r = 0; r < 2; r++) {
        snprintf(p, sizeof p, "%s/iteration_00000001/model-000000%u-0000002.safetensors", dir,
                 r);
        unlink(p);
    }
    snprintf(p, sizeof p, "%s/iteration_00000001/metadata.json", dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/iteration_00000001", dir);
    rmdir(p);
}

static void remove_ranks(void)
{
    char p[PATH_MAX];
    for (unsigned r = 0; r < 4; r++) {
        snprintf(p, sizeof p, "%s/dist/rank_%u/c.ckpt", dir, r);
        unlink(p);
        snprintf(p, sizeof p, "%s/dist/rank_%u", dir, r);
        rmdir(p);
    }
    snprintf(p, sizeof p, "%s/dist", dir);
    rmdir(p);
}

/* Encode into fd, as the model's one file: what the fuzzer rewrites never
 * goes to an external data file. */
static int encode_to_fd(const ck_model *m, const ck_write_tensor *w, size_t n, int fd,
                        ck_error *err)
{
    ck_commit_group g = {.files = calloc(1, sizeof *g.files), .n = 1, .cap = 1};
    if (g.files == NULL)
        abort();
    g.files[0].fd = fd;
    int rc = ck_encode(m, w, n, &g, err);
    if (g.n != 1)
        abort();
    free(g.files);
    return rc;
}

/* The encoder with every tensor unchanged must give back the input. */
static void check_identity(const ck_model *m, const uint8_t *data, size_t size)
{
    static int out = -1;
    if (out < 0 && (out = memfd_create("fuzz.out", 0)) < 0)
        abort();
    const ck_index *ix = &m->index;
    ck_write_tensor *w = calloc(ix->n_live + 1, sizeof *w);
    for (size_t i = 0; i < ix->n_live; i++)
        w[i] = (ck_write_tensor){.orig_id = ix->live[i], .unchanged = true};
    ck_error err;
    if (ftruncate(out, 0) < 0 || lseek(out, 0, SEEK_SET) < 0 ||
        encode_to_fd(m, w, ix->n_live, out, &err) < 0)
        abort();
    free(w);
    unsigned char *back = malloc(size + 1);
    if (pread(out, back, size + 1, 0) != (ssize_t)size || memcmp(back, data, size) != 0)
        abort();
    free(back);
}

/* The tensors an edit through the mount may change: numeric, in the model
 * file or decoded (models with external data mount read-only); a PyTorch
 * file's tensors (not its numbers): patched in place when each is its
 * storage alone, else the file laid out again (pt_writer.h). */
static bool editable(const ck_model *m, uint32_t id)
{
    const ck_tensor *t = &m->index.tensors[id];
    if (m->format == &ck_format_pytorch)
        return !t->read_only;
    bool graph = m->format == &ck_format_onnx || m->format == &ck_format_mindir;
    return !t->read_only && graph && ck_pb_layout_of(m)->tensors[id].storage != CK_STORE_EXTERNAL;
}

/* Every editable tensor given as new bytes: its own, from its extents. */
static ck_write_tensor *rewrite_all(const ck_model *m, ck_piece *pieces)
{
    const ck_index *ix = &m->index;
    ck_write_tensor *w = calloc(ix->n_live + 1, sizeof *w);
    for (size_t i = 0; i < ix->n_live; i++) {
        uint32_t id = ix->live[i];
        const ck_tensor *t = &ix->tensors[id];
        w[i] = (ck_write_tensor){.orig_id = id, .unchanged = !editable(m, id),
                                 .name = t->name, .name_len = t->name_len, .dtype = t->dtype,
                                 .dims = t->dims, .ndim = t->ndim};
        if (w[i].unchanged || t->n_ext == 0)
            continue;
        if (t->n_ext > 1)
            abort(); /* ONNX and MindIR tensors are one extent */
        pieces[i] = (ck_piece){.src = m->sources[t->ext0.src], .off = t->ext0.off,
                               .len = t->ext0.len};
        w[i].pieces = &pieces[i];
        w[i].n_pieces = 1;
    }
    return w;
}

static void same_bytes(const ck_model *a, const ck_tensor *ta, const ck_model *b,
                       const ck_tensor *tb)
{
    static unsigned char x[65536], y[65536];
    ck_error err;
    if (ta->nbytes != tb->nbytes)
        abort();
    for (uint64_t off = 0; off < ta->nbytes; off += sizeof x) {
        long n = ck_model_read(a, ta, x, sizeof x, off, &err);
        if (n <= 0 || ck_model_read(b, tb, y, sizeof y, off, &err) != n ||
            memcmp(x, y, (size_t)n) != 0)
            abort();
    }
}

/* Each tensor of b is a's, in the same order, with the same bytes. */
static void same_tensors(const ck_model *a, const ck_model *b)
{
    if (a->index.n_live != b->index.n_live)
        abort();
    for (size_t i = 0; i < a->index.n_live; i++) {
        const ck_tensor *ta = &a->index.tensors[a->index.live[i]];
        const ck_tensor *tb = &b->index.tensors[b->index.live[i]];
        if (strcmp(ta->dir_name, tb->dir_name) != 0 || ta->dtype != tb->dtype ||
            ta->ndim != tb->ndim || memcmp(ta->dims, tb->dims, ta->ndim * sizeof *ta->dims))
            abort();
        same_bytes(a, ta, b, tb);
    }
}

/* Save the tree (every editable tensor given as its own bytes when all is
 * set, else unchanged) and reopen it: the same tensors. */
static void check_reencode(const ck_model *m, bool all)
{
    ck_piece *pieces = calloc(m->index.n_live + 1, sizeof *pieces);
    ck_write_tensor *w = rewrite_all(m, pieces);
    for (size_t i = 0; !all && i < m->index.n_live; i++)
        w[i].unchanged = true;
    int out = open(rewritten, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ck_error err;
    if (out < 0 || encode_to_fd(m, w, m->index.n_live, out, &err) < 0) {
        fprintf(stderr, "rewrite failed: %s\n", err.msg);
        abort();
    }
    close(out);
    free(w);
    free(pieces);
    ck_model *back = ck_model_open(rewritten, &opts, &err);
    if (back == NULL) {
        fprintf(stderr, "rewritten model refused: %s\n", err.msg);
        abort();
    }
    same_tensors(m, back);
    ck_model_close(back);
}

/* The shards a fuzzed index may name (see the top). */
static const char *const shards[][2] = {
    {"a.safetensors", "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}"},
    {"b.safetensors", "{\"__metadata__\":{\"format\":\"pt\"},"
                      "\"y\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]},"
                      "\"z\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[4,7]}}"},
};
#define N_SHARDS (sizeof shards / sizeof shards[0])

static void shard_path(size_t i, char *out, size_t size)
{
    snprintf(out, size, "%s/%s", dir, shards[i][0]);
}

/* Each shard: its header padded with spaces to 8 bytes, then its data. */
static void write_shards(void)
{
    static const unsigned char data[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    for (size_t i = 0; i < N_SHARDS; i++) {
        char p[PATH_MAX], head[256];
        size_t len = strlen(shards[i][1]), padded = (len + 7) / 8 * 8;
        memset(head, ' ', sizeof head);
        memcpy(head, shards[i][1], len);
        unsigned char n8[8];
        for (int k = 0; k < 8; k++)
            n8[k] = (unsigned char)(padded >> (8 * k));
        shard_path(i, p, sizeof p);
        int sfd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (sfd < 0 || write(sfd, n8, 8) != 8 || write(sfd, head, padded) != (ssize_t)padded ||
            write(sfd, data, i == 0 ? 8 : 7) < 0)
            abort();
        close(sfd);
    }
}

static void remove_dcp_files(void);

/* Make dir/rel, not the fuzz file made first, the file each input goes to. */
static void input_at(const char *rel)
{
    close(fd);
    unlink(path);
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    if ((fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0)
        abort();
}

static void remove_dir(void)
{
    if (strategy)
        remove_ranks();
    if (iteration)
        remove_shards_of_iteration();
    if (oneflow)
        remove_oneflow_tensors();
    if (dcp)
        remove_dcp_files();
    unlink(path);
    unlink(rewritten);
    for (size_t i = 0; i < N_SHARDS; i++) {
        char p[PATH_MAX];
        shard_path(i, p, sizeof p);
        unlink(p);
    }
    rmdir(dir);
}

/* Copy the file from (which must be given: what names it) to to. */
static void copy_file(const char *from, const char *to, const char *what)
{
    static unsigned char buf[1 << 16];
    int in = from != NULL ? open(from, O_RDONLY | O_CLOEXEC) : -1;
    int out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ssize_t n;
    if (in < 0 || out < 0) {
        fprintf(stderr, "fuzz: %s\n", what);
        exit(2);
    }
    while ((n = read(in, buf, sizeof buf)) > 0)
        if (write(out, buf, (size_t)n) != n)
            abort();
    if (n < 0 || close(out) < 0)
        abort();
    close(in);
}

/* dir/dcp/: the data files of the DCP checkpoint CKPTFS_FUZZ_DCP names
 * (run.sh: one the test oracle wrote), whose .metadata is the input. */
static void write_dcp_files(void)
{
    const char *from = getenv("CKPTFS_FUZZ_DCP");
    DIR *d = from != NULL ? opendir(from) : NULL;
    char p[PATH_MAX], q[PATH_MAX];
    struct dirent *de;
    snprintf(p, sizeof p, "%s/dcp", dir);
    if (d == NULL || mkdir(p, 0700) < 0) {
        fprintf(stderr, "dcp: CKPTFS_FUZZ_DCP must name a DCP checkpoint's directory\n");
        exit(2);
    }
    while ((de = readdir(d)) != NULL) {
        size_t n = strlen(de->d_name);
        if (n < 7 || strcmp(de->d_name + n - 7, ".distcp") != 0)
            continue;
        snprintf(p, sizeof p, "%s/%s", from, de->d_name);
        snprintf(q, sizeof q, "%s/dcp/%s", dir, de->d_name);
        copy_file(p, q, "dcp: cannot copy a data file");
    }
    closedir(d);
}

static void remove_dcp_files(void)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/dcp", dir);
    DIR *d = opendir(p);
    struct dirent *de;
    while (d != NULL && (de = readdir(d)) != NULL)
        if (de->d_name[0] != '.' || strcmp(de->d_name, ".metadata") == 0) {
            snprintf(p, sizeof p, "%s/dcp/%s", dir, de->d_name);
            unlink(p);
        }
    if (d != NULL)
        closedir(d);
    snprintf(p, sizeof p, "%s/dcp", dir);
    rmdir(p);
}

/* The model the fuzzed indexes are decoded against: path, written once,
 * its directory, and its own identity (for an input too short to claim
 * one, which the decoder refuses anyway). */
static ck_model_dir *model_dir;
static ck_saved_identity own_id;

static void start_saved_index(void)
{
    ck_error err;
    close(fd);
    fd = -1;
    if (saved_format == &ck_format_onnx)
        copy_file(getenv("CKPTFS_FUZZ_ONNX"), path, "CKPTFS_FUZZ_ONNX must name an ONNX model");
    else
        write_indexed_model(path);
    unsigned char head[CK_SAVED_SAMPLE];
    struct stat st;
    int mfd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = mfd < 0 ? -1 : read(mfd, head, sizeof head);
    if (n < 0 || fstat(mfd, &st) < 0 || (model_dir = ck_dir_open(path, &err)) == NULL)
        abort();
    close(mfd);
    own_id = (ck_saved_identity){.real_path = path, .size = (uint64_t)st.st_size,
                                 .mtime_sec = st.st_mtim.tv_sec,
                                 .mtime_nsec = (uint32_t)st.st_mtim.tv_nsec};
    unsigned int len = sizeof own_id.sample;
    EVP_Digest(head, (size_t)n, own_id.sample, &len, EVP_sha256(), NULL);
}

/* A refusal is one line (the mount logs it so). */
static void one_line(const ck_error *err)
{
    if (err->msg[0] == '\0' || strchr(err->msg, '\n'))
        abort();
}

/* Every tensor of an index that was accepted, read through ck_model_read
 * (which first checks its record header's CRC against the index): its
 * bytes, or a one-line refusal (the extents of a mutated index may lie
 * past the end of the real file, their header no longer match...). */
static void read_indexed(const ck_model *m)
{
    static unsigned char buf[65536];
    for (size_t i = 0; i < m->index.count; i++) {
        const ck_tensor *t = &m->index.tensors[i];
        for (uint64_t off = 0; off < t->nbytes; off += sizeof buf) {
            ck_error err = {0};
            long n = ck_model_read(m, t, buf, sizeof buf, off, &err);
            if (n < 0)
                one_line(&err);
            if (n <= 0)
                break;
        }
    }
    ck_error err = {0};
    if (ck_saved_index_check_all(m, &err) < 0)
        one_line(&err);
}

/* What the decoder promises of an index it accepts: each record within
 * the file size it claims, each extent in the model file and within its
 * record (the CRC of a record's other bytes is what vouches for them). */
static void check_accepted(const ck_model *m, uint64_t size)
{
    for (size_t i = 0; i < m->index.count; i++) {
        const ck_tensor *t = &m->index.tensors[i];
        if (t->rec_off > t->rec_end || t->rec_end > size)
            abort();
        for (uint32_t k = 0; k < t->n_ext; k++) {
            const ck_extent *e = ck_tensor_ext(t, k);
            uint64_t end;
            if (e->src != 0 || e->off < t->rec_off ||
                __builtin_add_overflow(e->off, e->len, &end) || end > t->rec_end)
                abort();
        }
    }
}

/* The input as a saved index's body (see the top). */
static int fuzz_saved_index(const uint8_t *data, size_t size)
{
    unsigned char *file;
    size_t len;
    if (ck_saved_index_frame(data, size, &file, &len) < 0)
        abort(); /* inputs are far below the bound */
    ck_saved_identity id = own_id, claimed;
    char claimed_path[PATH_MAX];
    if (ck_saved_index_claimed(file, len, &claimed, claimed_path, sizeof claimed_path) == 0)
        id = claimed;
    ck_error err = {0};
    ck_model *m = ck_model_assembled(model_dir, path, saved_format, &err);
    ck_source *src = m != NULL ? ck_source_open_file(path, &err) : NULL;
    if (src == NULL || ck_model_add_source(m, src, &err) < 0)
        abort();
    if (ck_saved_index_decode(m, &opts, &id, file, len, &err) < 0) {
        one_line(&err);
        if (m->index.count != 0 || m->state != NULL || m->saved != NULL)
            abort(); /* a refused index leaves the model as it was */
    } else {
        check_accepted(m, id.size);
        if (ck_index_finalize(&m->index, path, &err) < 0)
            one_line(&err);
        else
            read_indexed(m);
    }
    ck_model_close(m);
    free(file);
    return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *format = getenv("CKPTFS_FUZZ_FORMAT");
    if (format == NULL || *format == '\0')
        format = "ckpt";
    size_t base = strcspn(format, ".");
    const char *wrap = format + base;
    char name[32];
    snprintf(name, sizeof name, "%.*s", (int)base, format);
    strategy = strcmp(format, "strategy") == 0;
    iteration = strcmp(format, "iteration") == 0;
    oneflow = strcmp(format, "oneflow") == 0;
    dcp = strcmp(format, "dcp") == 0;
    map_text = strcmp(format, "map") == 0;
    bool index_of_onnx = strcmp(format, "saved-index-onnx") == 0;
    saved_index = strcmp(format, "saved-index") == 0 || index_of_onnx;
    saved_format = index_of_onnx ? &ck_format_onnx : &ck_format_ckpt;
    bool of_ckpt = strategy || iteration || oneflow || dcp || saved_index || map_text;
    const ck_format *f = index_of_onnx ? &ck_format_onnx
                                       : ck_format_by_name(of_ckpt ? "ckpt" : name);
    if (f == NULL || (*wrap && strcmp(wrap, ".enc") != 0 && strcmp(wrap, ".zst") != 0)) {
        fprintf(stderr, "CKPTFS_FUZZ_FORMAT must be a format (ckpt, onnx, mindir, "
                "safetensors, safetensors-set, pytorch), then maybe .enc or .zst, or strategy, "
                "iteration, oneflow, dcp, saved-index, saved-index-onnx or map, not '%s'\n", format);
        exit(2);
    }
    const char *model_to = getenv("CKPTFS_FUZZ_MODEL_TO");
    if (saved_index && !index_of_onnx && model_to != NULL && *model_to != '\0') {
        write_indexed_model(model_to); /* for run.sh's seeds: nothing fuzzed */
        exit(0);
    }
    ckpt = base == 4 && strncmp(format, "ckpt", 4) == 0 && !of_ckpt;
    wrapped = *wrap != '\0';
    if (strcmp(wrap, ".enc") == 0) {
        ck_error kerr;
        if (setenv("CKPTFS_KEY_HEX", FUZZ_KEY_HEX, 1) != 0 ||
            ck_envelope_args_ready(&key, &kerr) < 0)
            abort();
        opts.envelope = &key;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/ckptfs-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (mkdtemp(dir) == NULL)
        abort();
    /* The name says the format (and .zst); ".enc" is only in the variable. */
    const char *zst = strcmp(wrap, ".zst") == 0 ? ".zst" : "";
    snprintf(path, sizeof path, "%s/fuzz%s%s", dir, f->extension, zst);
    snprintf(rewritten, sizeof rewritten, "%s/rewritten%s%s", dir, f->extension, zst);
    fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        abort();
    atexit(remove_dir);
    if (f == &ck_format_safetensors_set)
        write_shards();
    if (strategy)
        write_ranks();
    if (iteration) { /* the input is the directory's metadata.json */
        write_shards_of_iteration();
        input_at("iteration_00000001/metadata.json");
    }
    if (saved_index) /* the input is its index; the model is fixed */
        start_saved_index();
    if (oneflow) { /* the input is the snapshot's pickled_data */
        write_oneflow_tensors();
        input_at("oneflow/pickled_data");
    }
    if (dcp) { /* the input is the checkpoint's .metadata */
        write_dcp_files();
        input_at("dcp/.metadata");
    }
    return 0;
}

/* A model merged from the fixed files and the input (strategy, iteration,
 * oneflow, dcp):
 * refused in one line, or read back whole. */
static int check_merged(ck_model *m, const ck_error *err)
{
    if (m == NULL) {
        if (err->msg[0] == '\0' || strchr(err->msg, '\n'))
            abort(); /* every refusal is one line */
        return 0;
    }
    read_everything(m);
    ck_model_close(m);
    return 0;
}

/* The input as the metadata.json of the shards write_shards_of_iteration()
 * wrote, or as a strategy for the ranks write_ranks() wrote. */
static int fuzz_merged(void)
{
    char where[PATH_MAX];
    ck_error err;
    if (iteration) {
        snprintf(where, sizeof where, "%s/iteration_00000001", dir);
        return check_merged(ck_iteration_open(where, &opts, false, &err), &err);
    }
    if (oneflow) {
        snprintf(where, sizeof where, "%s/oneflow", dir);
        return check_merged(ck_oneflow_open(where, &err), &err);
    }
    if (dcp) {
        const ck_collection_opts co = {0};
        snprintf(where, sizeof where, "%s/dcp", dir);
        return check_merged(ck_collection_dcp.open(where, &co, &err), &err);
    }
    snprintf(where, sizeof where, "%s/dist", dir);
    return check_merged(ck_dist_open(where, path, &opts, false, &err), &err);
}

/* The input as a map's text (codec/map/): parsed or refused in one line;
 * a parsed map applied to names a model may hold, and its reverse when
 * it has one, each outcome names or a one-line refusal. */
static int fuzz_map(const uint8_t *data, size_t size)
{
    static const char *const names[] = {
        "conv1.weight", "bn1.gamma", "bn1.beta", "bn1.moving_mean", "bn1.moving_variance",
        "c.bn.bn2d.gamma", "c.bn.bn2d.moving_mean", "moments.conv1.weight", "global_step",
        "model.layers.0.self_attn.q_proj.weight", "model.norm.weight", "x", "a.b.c.d",
        "layer1.0.down_sample.1.gamma", "classifier.weight", "em.embedding_table", "w",
    };
    const size_t n = sizeof names / sizeof *names;
    ck_error err = {0};
    /* params a map may declare (`param h`, `param n`) */
    ck_map *m = ck_map_parse_args((const char *)data, size, "fuzz.map", NULL, &err);
    if (m == NULL && strstr(err.msg, "the map needs") != NULL)
        m = ck_map_parse_args((const char *)data, size, "fuzz.map", "h=2:n=4", &err);
    if (m == NULL) {
        one_line(&err);
        return 0;
    }
    ck_map *r = ck_map_invertible(m) ? ck_map_reverse(m, &err) : NULL;
    if (ck_map_invertible(m) && r == NULL)
        abort(); /* an invertible map has its reverse */
    for (ck_map *x = m; x != NULL; x = x == m ? r : NULL) {
        char *out[sizeof names / sizeof *names];
        if (ck_map_names(x, names, n, out, &err) < 0) {
            one_line(&err);
            for (size_t i = 0; i < n; i++)
                if (out[i] != NULL)
                    abort(); /* refused: nothing handed out */
            continue;
        }
        for (size_t i = 0; i < n; i++) {
            if (out[i] != NULL && (out[i][0] == '\0' || strlen(out[i]) > CK_MAP_NAME_MAX))
                abort(); /* no empty or over-long name is handed out */
            free(out[i]);
        }
    }
    /* With shapes: the layout and add rules apply too. */
    static const int64_t dims[][4] = {{8, 3, 1, 5}, {8}, {1}, {4, 4}};
    ck_map_tensor in[sizeof names / sizeof *names];
    for (size_t i = 0; i < n; i++)
        in[i] = (ck_map_tensor){.name = names[i], .dtype = ck_dtype_from_canonical("float32"),
                                .dims = dims[i % 4], .ndim = i % 4 == 0 ? 4 : i % 4 == 3 ? 2 : 1};
    ck_map_out *o;
    size_t k;
    if (ck_map_apply(m, in, n, &o, &k, &err) < 0) {
        one_line(&err);
    } else {
        for (size_t i = 0; i < k; i++) {
            uint64_t bytes;
            if (o[i].name[0] == '\0' || (o[i].from < 0 && o[i].dims == NULL) ||
                o[i].ndim > CK_MAX_DIMS ||
                (o[i].dims && ck_shape_product(&ck_shape_ckpt, o[i].dtype, o[i].dims,
                                               o[i].ndim, &bytes) >= 0))
                abort(); /* every outcome a tensor a format can hold */
            const int64_t *d = o[i].dims ? o[i].dims : in[o[i].from].dims;
            uint64_t count = 1, seen = 1, reach = 0;
            for (uint32_t j = 0; j < o[i].ndim; j++)
                count *= (uint64_t)d[j];
            for (uint32_t j = 0; j < o[i].view_n; j++) {
                seen *= (uint64_t)o[i].view_dims[j];
                reach += (uint64_t)(o[i].view_dims[j] - 1) * (uint64_t)o[i].view_step[j];
            }
            if (o[i].view_n > 0 && (o[i].from < 0 || seen != count || reach >= count))
                abort(); /* a new order reads each element of the tensor's own */
        }
        ck_map_out_free(o, k);
    }
    ck_map_free(r);
    ck_map_free(m);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (map_text)
        return fuzz_map(data, size);
    if (saved_index)
        return fuzz_saved_index(data, size);
    if (ftruncate(fd, 0) < 0 || (size && pwrite(fd, data, size, 0) != (ssize_t)size))
        abort();
    if (strategy || iteration || oneflow || dcp)
        return fuzz_merged();
    ck_error err;
    /* The same bytes as a meta someone wrote: parsed or refused, one line. */
    ck_meta meta;
    if (ckpt && !wrapped && ck_meta_parse((const char *)data, size, &meta, &err) < 0 &&
        (err.msg[0] == '\0' || strchr(err.msg, '\n')))
        abort();
    ck_model *m = ck_model_open(path, &opts, &err);
    if (m == NULL) {
        if (err.msg[0] == '\0' || strchr(err.msg, '\n'))
            abort(); /* every refusal is one line */
        return 0;
    }
    read_everything(m);
    /* Read-only: the 1.3-1.6 encryption layout, and formats not saved yet. */
    if (ck_envelope_read_only(&m->env) != NULL || ck_writer_of(m) == NULL) {
        ck_model_close(m);
        return 0;
    }
    if (wrapped)
        check_reencode(m, false);
    else
        check_identity(m, data, size);
    if (!ckpt)
        check_reencode(m, true);
    ck_model_close(m);
    return 0;
}
