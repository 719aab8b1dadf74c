#include "model.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ckpt_reader.h"
#include "onnx_mindir_reader.h"

const char *ck_format_name(ck_format f)
{
    switch (f) {
    case CK_FORMAT_CKPT: return "ckpt";
    case CK_FORMAT_ONNX: return "onnx";
    case CK_FORMAT_MINDIR: return "mindir";
    }
    return "?";
}

static uint32_t le32(const unsigned char *p)
{
    return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static bool has_suffix(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* Refuse, with the reason, files that are recognisably something ckptfs
 * does not read (yet).  Magic numbers: MindSpore crypto.h, zstd format. */
static int refuse_unsupported(ck_source *src, ck_error *err)
{
    if (src->size == 0)
        return ck_fail(err, EINVAL, "%s: empty file (0 bytes)", src->path);
    unsigned char head[4] = {0};
    size_t n = src->size < 4 ? (size_t)src->size : 4;
    if (ck_source_read(src, head, n, 0, err) < 0)
        return -1;
    if (n == 4) {
        switch (le32(head)) {
        case 0x7F3A5ED8u:
            return ck_fail(err, ENOTSUP, "%s: offset 0: encrypted MindSpore model (AES-GCM, "
                           "magic 0x7F3A5ED8); decryption is not supported yet", src->path);
        case 0x7F3A5ED9u:
            return ck_fail(err, ENOTSUP, "%s: offset 0: encrypted MindSpore model (AES-CBC, "
                           "magic 0x7F3A5ED9); decryption is not supported yet", src->path);
        case 0x7F3A5EDAu:
            return ck_fail(err, ENOTSUP, "%s: offset 0: encrypted MindSpore model (SM4-CBC, "
                           "magic 0x7F3A5EDA); decryption is not supported", src->path);
        case 0xFD2FB528u:
            return ck_fail(err, ENOTSUP, "%s: offset 0: zstd-compressed file; compressed "
                           "models are not supported yet", src->path);
        }
    }
    return 0;
}

/* By name: the three formats have no magic number of their own. */
static ck_format format_of(const char *path)
{
    if (has_suffix(path, ".onnx"))
        return CK_FORMAT_ONNX;
    if (has_suffix(path, ".mindir"))
        return CK_FORMAT_MINDIR;
    return CK_FORMAT_CKPT;
}

long ck_model_add_source(ck_model *m, ck_source *src, ck_error *err)
{
    if (m->n_sources == CK_MAX_SOURCES) {
        ck_fail(err, EMFILE, "%s: more than %d data files", m->path, CK_MAX_SOURCES);
        ck_source_close(src);
        return -1;
    }
    if (m->n_sources == m->cap_sources) {
        uint32_t cap = m->cap_sources ? m->cap_sources * 2 : 4;
        ck_source **s = realloc(m->sources, cap * sizeof *s);
        if (s == NULL) {
            ck_fail(err, ENOMEM, "%s: out of memory", m->path);
            ck_source_close(src);
            return -1;
        }
        m->sources = s;
        m->cap_sources = cap;
    }
    m->sources[m->n_sources] = src;
    return (long)m->n_sources++;
}

static ck_model *model_alloc(const char *path, ck_error *err)
{
    ck_model *m = calloc(1, sizeof *m);
    if (m == NULL || (m->path = strdup(path)) == NULL) {
        free(m);
        ck_fail(err, ENOMEM, "%s: out of memory", path);
        return NULL;
    }
    ck_index_init(&m->index);
    return m;
}

ck_model *ck_model_open(const char *path, const ck_open_opts *opts, ck_error *err)
{
    ck_model *m = model_alloc(path, err);
    if (m == NULL)
        return NULL;
    ck_source *src = ck_source_open_file(path, err);
    if (src == NULL)
        goto fail;
    if (ck_model_add_source(m, src, err) < 0)
        goto fail;
    if (fstat(src->fd, &m->st) < 0) {
        ck_fail_errno(err, errno, "%s: cannot stat", path);
        goto fail;
    }
    if (refuse_unsupported(src, err) < 0)
        goto fail;

    m->format = format_of(path);
    if (m->format == CK_FORMAT_CKPT) {
        ck_ckpt_info info;
        if (ck_ckpt_read(src, 0, !(opts && opts->skip_crc), &m->index, &info, err) < 0)
            goto fail;
        m->has_crc = info.has_crc;
        m->records_end = info.records_end;
    } else if (ck_onnx_mindir_read(m, m->format == CK_FORMAT_MINDIR, err) < 0) {
        goto fail;
    }
    if (ck_index_finalize(&m->index, path, err) < 0)
        goto fail;
    return m;

fail:
    ck_model_close(m);
    return NULL;
}

ck_model *ck_model_empty(const char *path, const char *format_name, ck_error *err)
{
    bool ckpt = format_name ? strcmp(format_name, "ckpt") == 0 : has_suffix(path, ".ckpt");
    if (!ckpt) {
        ck_fail(err, ENOTSUP, "%s: cannot create a model of this type (give a .ckpt name or "
                "-o format=ckpt)", path);
        return NULL;
    }
    ck_model *m = model_alloc(path, err);
    if (m == NULL)
        return NULL;
    m->format = CK_FORMAT_CKPT;
    m->st.st_mode = S_IFREG | 0644;
    m->st.st_uid = getuid();
    m->st.st_gid = getgid();
    clock_gettime(CLOCK_REALTIME, &m->st.st_mtim);
    if (ck_index_finalize(&m->index, path, err) < 0) {
        ck_model_close(m);
        return NULL;
    }
    return m;
}

void ck_model_close(ck_model *m)
{
    if (m == NULL)
        return;
    for (uint32_t i = 0; i < m->n_sources; i++)
        ck_source_close(m->sources[i]);
    free(m->sources);
    ck_pb_layout_free(m->pb);
    ck_index_free(&m->index);
    free(m->path);
    free(m);
}

struct read_ctx {
    const ck_model *m;
    unsigned char *dst;
    ck_error *err;
};

static int read_piece(void *ctx, uint32_t src, uint64_t src_off, size_t len)
{
    struct read_ctx *c = ctx;
    if (ck_source_read(c->m->sources[src], c->dst, len, src_off, c->err) < 0)
        return -1;
    c->dst += len;
    return 0;
}

long ck_model_read(const ck_model *m, const ck_tensor *t, void *buf, size_t size,
                   uint64_t off, ck_error *err)
{
    if (off >= t->nbytes)
        return 0;
    if (size > t->nbytes - off)
        size = (size_t)(t->nbytes - off);
    if (t->inline_data != NULL) {
        memcpy(buf, t->inline_data + off, size);
        return (long)size;
    }
    struct read_ctx c = {.m = m, .dst = buf, .err = err};
    if (ck_tensor_for_range(t, off, size, read_piece, &c) != 0)
        return -1;
    return (long)size;
}
