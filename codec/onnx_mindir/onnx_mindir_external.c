/* SPDX-License-Identifier: Apache-2.0 */
/*
 * onnx_mindir_external: a tensor's external data in an ONNX or MindIR
 * model (onnx_mindir_internal.h lists the reader's files).
 *
 * The external_data fields (ONNX: key/value strings; MindIR: a message of
 * location, offset, length), and the data files they name: opened once per
 * location, beneath the model's directory, no symbolic link followed, each
 * file under one name only (a save writes each file once).  A location is
 * made canonical ("." and "dir/.." folded), so two spellings of one file
 * share a source; two locations that are different names of one file (a
 * hard link, or the model file itself) are refused, naming both, since a
 * save writes each name anew and would lose the edits made through the
 * other.  A split MindIR (<prefix>_graph.mindir, external_data into
 * <prefix>_variables/data_N) is read the same way, plus the checks
 * MindSpore's loader makes: each data file's 64-byte front info says
 * little-endian (byte 0 is 1), and no tensor starts inside it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/dir_name.h"
#include "onnx_mindir_internal.h"
#include "onnx_mindir_reader.h"

static int parse_decimal(const ck_pb_str *s, uint64_t *out)
{
    if (s->len == 0 || s->len > 19)
        return -1;
    uint64_t v = 0;
    for (size_t i = 0; i < s->len; i++) {
        if (s->buf[i] < '0' || s->buf[i] > '9')
            return -1;
        v = v * 10 + (uint64_t)(s->buf[i] - '0');
    }
    *out = v;
    return 0;
}

/* ONNX external_data: repeated StringStringEntryProto {key = 1, value = 2}. */
static int read_onnx_external_entry(rd *d, const pb_field *f, uint64_t end, tinfo *ti)
{
    uint64_t len_off, body, body_end;
    if (ck_pb_enter(&d->w, f, end, "TensorProto.external_data", &len_off, &body, &body_end) < 0)
        return -1;
    ck_pb_str key = {.len = 0, .buf = ""}, *value = &d->scratch;
    value->set = false;
    pb_field g;
    int rc;
    while ((rc = pb_next_field(&d->w.r, body_end, &g, d->err)) > 0) {
        if (g.num == 1) {
            if (ck_pb_read_str(&d->w, &g, body_end, "external_data key", &key) < 0)
                return -1;
        } else if (g.num == 2) {
            if (ck_pb_read_str(&d->w, &g, body_end, "external_data value", value) < 0)
                return -1;
        } else if (pb_skip(&d->w.r, body_end, g.key_off, g.wire_type, d->err) < 0) {
            return -1;
        }
    }
    if (rc < 0)
        return -1;
    if (!value->set)
        return 0;
    if (strcmp(key.buf, "location") == 0) {
        ti->location = *value;
    } else if (strcmp(key.buf, "offset") == 0 || strcmp(key.buf, "length") == 0) {
        bool is_off = key.buf[0] == 'o';
        uint64_t v;
        if (parse_decimal(value, &v) < 0)
            return ck_fail(d->err, EINVAL, "%s: offset %llu: external_data %s '%s' is not a "
                           "non-negative decimal number", PATH(d), OFF(f->key_off), key.buf,
                           ck_quote(d->q, value->buf, value->len));
        if (is_off) {
            ti->ext_off = v;
            ti->ext_off_at = f->key_off;
        } else {
            ti->ext_len = v;
            ti->ext_len_at = f->key_off;
            ti->has_ext_len = true;
        }
    }
    return 0;
}

/* MindIR external_data: ExternalDataProto {location = 1, offset = 2, length = 3}. */
static int read_mindir_external(rd *d, const pb_field *f, uint64_t end, tinfo *ti)
{
    uint64_t len_off, body, body_end;
    if (ck_pb_enter(&d->w, f, end, "TensorProto.external_data", &len_off, &body, &body_end) < 0)
        return -1;
    ti->external = true;
    pb_field g;
    int rc;
    while ((rc = pb_next_field(&d->w.r, body_end, &g, d->err)) > 0) {
        uint64_t v;
        if (g.num == 1) {
            if (ck_pb_read_str(&d->w, &g, body_end, "external_data location",
                               &ti->location) < 0)
                return -1;
        } else if (g.num == 2 || g.num == 3) {
            if (ck_pb_read_varint_field(&d->w, &g, body_end, "external_data offset/length",
                                        &v) < 0)
                return -1;
            if ((int64_t)v < 0)
                return ck_fail(d->err, EINVAL, "%s: offset %llu: negative external_data %s",
                               PATH(d), OFF(g.key_off), g.num == 2 ? "offset" : "length");
            if (g.num == 2) {
                ti->ext_off = v;
                ti->ext_off_at = g.key_off;
            } else {
                ti->ext_len = v;
                ti->ext_len_at = g.key_off;
                ti->has_ext_len = true;
            }
        } else if (pb_skip(&d->w.r, body_end, g.key_off, g.wire_type, d->err) < 0) {
            return -1;
        }
    }
    return rc;
}

/* A MindIR data file (<prefix>_variables/data_N) opens with 64 bytes of
 * "front info" whose first byte is 1 when the exporter was little-endian;
 * MindSpore's loader refuses a file whose byte order is not the host's. */
static int check_data_header(rd *d, ck_source *src)
{
    unsigned char b = 0;
    if (src->size < CK_MINDIR_DATA_HEADER)
        return ck_fail(d->err, EINVAL, "%s: data file %s is %llu bytes, shorter than its "
                       "%u-byte header", PATH(d), src->path, OFF(src->size),
                       CK_MINDIR_DATA_HEADER);
    if (ck_source_read(src, &b, 1, 0, d->err) < 0)
        return -1;
    if (b != 1)
        return ck_fail(d->err, EINVAL, "%s: data file %s: offset 0: header byte %u says %s; "
                       "only little-endian data is read", PATH(d), src->path, b,
                       b == 0 ? "big-endian" : "neither byte order");
    return 0;
}

static void normalize_location(const ck_pb_str *loc, char *out, size_t size);
static long open_external(rd *d, ck_tensor *t, const ck_pb_str *loc, const char *rel);

/* The source of an external location, opened on first use.  Locations
 * are looked up by their canonical text, so "w.bin" and "./w.bin" share a
 * source (a save writes each file once) and "w.bin" and "sub/w.bin" never
 * do; a new text naming a file already open under another name is
 * refused (open_external). */
long omr_external_source(rd *d, ck_tensor *t, const ck_pb_str *loc)
{
    if (loc->len == 0 || memchr(loc->buf, '\0', loc->len) != NULL)
        return ck_fail(d->err, EINVAL, "%s: tensor '%s': external data without a location",
                       PATH(d), tensor_label(d, t));
    char q[CK_QUOTE_BUF];
    if (loc->buf[0] == '/')
        return ck_fail(d->err, EPERM, "%s: tensor '%s': external data location '%s' is "
                       "absolute; only paths inside the model's directory are allowed",
                       PATH(d), tensor_label(d, t), ck_quote(q, loc->buf, loc->len));
    char rel[PATH_MAX];
    normalize_location(loc, rel, sizeof rel);
    if (rel[0] == '\0')
        return ck_fail(d->err, EINVAL, "%s: tensor '%s': external data location '%s' names "
                       "no file", PATH(d), tensor_label(d, t), ck_quote(q, loc->buf, loc->len));
    size_t rl = strlen(rel);
    uint32_t known = ck_name_map_get(&d->locations, rel, rl);
    if (known != CK_NAME_MAP_NONE)
        return known;
    long sid = open_external(d, t, loc, rel);
    const char *key = sid < 0 ? NULL : ck_arena_strndup(&d->m->index.arena, rel, rl);
    if (sid >= 0 && (key == NULL || ck_name_map_put(&d->locations, key, rl, (uint32_t)sid) < 0))
        return nomem(d);
    return sid;
}

/* loc with "." components and repeated slashes dropped and "dir/.."
 * folded: the name a save writes the file by, and the key two spellings
 * of one location share.  Folding ".." textually is right because no
 * component may be a symbolic link; a ".." that climbs out is left for
 * the open to refuse. */
static void normalize_location(const ck_pb_str *loc, char *out, size_t size)
{
    size_t n = 0;
    const char *p = loc->buf, *end = loc->buf + loc->len;
    while (p < end) {
        const char *q = memchr(p, '/', (size_t)(end - p));
        size_t k = (size_t)((q ? q : end) - p);
        const char *slash = n ? memrchr(out, '/', n) : NULL;
        const char *last = slash ? slash + 1 : out;
        bool last_up = n > 0 && out + n - last == 2 && memcmp(last, "..", 2) == 0;
        if (k == 2 && memcmp(p, "..", 2) == 0 && n > 0 && !last_up) {
            n = slash ? (size_t)(slash - out) : 0; /* "dir/.." */
        } else if (k > 0 && !(k == 1 && *p == '.') && n + k + 2 < size) {
            if (n > 0)
                out[n++] = '/';
            memcpy(out + n, p, k);
            n += k;
        }
        p += k + 1;
    }
    out[n] = '\0';
}

static long open_external(rd *d, ck_tensor *t, const ck_pb_str *loc, const char *rel)
{
    char q[CK_QUOTE_BUF], full[PATH_MAX], shown[CK_QUOTE_BUF];
    const ck_model_dir *dir = d->m->dir;
    ck_dir_join(dir, rel, full, sizeof full);
    ck_quote(shown, full, strlen(full)); /* the location is text from the file */
    /* Beneath the model's directory, no symbolic link followed: a link
     * swapped in for a directory after mounting cannot redirect a save,
     * and two names of one file cannot hide behind a link. */
    struct stat st;
    int fd = ck_dir_openat(dir, rel, O_RDONLY | O_NONBLOCK, 0);
    fd = ck_keep_regular(ck_override_fd(d->m->overrides, d->m->n_overrides, full, fd), &st);
    if (fd < 0 && st.st_mode != 0)
        return ck_fail(d->err, EINVAL, "%s: tensor '%s': external data file %s is %s, not a "
                       "regular file", PATH(d), tensor_label(d, t), shown,
                       ck_file_kind(st.st_mode));
    if (fd < 0) {
        int e = errno;
        if (e == EXDEV)
            return ck_fail(d->err, EPERM, "%s: tensor '%s': external data location '%s' "
                           "leads out of the model's directory", PATH(d), tensor_label(d, t),
                           ck_quote(q, loc->buf, loc->len));
        if (e == ELOOP)
            return ck_fail(d->err, ELOOP, "%s: tensor '%s': external data location '%s' is "
                           "or passes through a symbolic link, which ckptfs does not follow",
                           PATH(d), tensor_label(d, t), ck_quote(q, loc->buf, loc->len));
        if (e == EMFILE || e == ENFILE)
            return ck_fail_errno(d->err, e, "%s: tensor '%s': external data file %s (the "
                                 "model has more data files than this process may open; "
                                 "raise ulimit -n)", PATH(d), tensor_label(d, t), shown);
        return ck_fail_errno(d->err, e, "%s: tensor '%s': external data file %s", PATH(d),
                             tensor_label(d, t), shown);
    }
    /* Another name of a file already open (a hard link, or the model
     * itself): a save would write one name and lose the edits made
     * through the other, so such a model is not mounted. */
    for (uint32_t i = 0; i < d->m->n_sources; i++) {
        const ck_source *s = d->m->sources[i];
        if (s->dev != st.st_dev || s->ino != st.st_ino)
            continue;
        close(fd);
        char q2[CK_QUOTE_BUF];
        const char *other = i == 0 ? NULL : ck_dir_rel(dir, s->path);
        if (other == NULL)
            return ck_fail(d->err, EINVAL, "%s: tensor '%s': external data location '%s' "
                           "is the model file itself", PATH(d), tensor_label(d, t),
                           ck_quote(q, loc->buf, loc->len));
        return ck_fail(d->err, EINVAL, "%s: external data locations '%s' and '%s' are the "
                       "same file (a hard link); a save would lose the edits made through "
                       "one of them", PATH(d), ck_quote(q2, other, strlen(other)),
                       ck_quote(q, loc->buf, loc->len));
    }
    ck_source *src = ck_source_adopt_fd(fd, full, d->err);
    long id = src == NULL ? -1 : ck_model_add_data_file(d->m, src, d->err);
    if (id >= 0 && d->pb->mindir && check_data_header(d, d->m->sources[id]) < 0)
        return -1;
    return id;
}

int omr_read_external(rd *d, const pb_field *f, uint64_t end, tinfo *ti)
{
    return d->pb->mindir ? read_mindir_external(d, f, end, ti)
                         : read_onnx_external_entry(d, f, end, ti);
}
