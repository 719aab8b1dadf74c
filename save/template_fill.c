/* SPDX-License-Identifier: Apache-2.0 */
/*
 * template_fill: ckptfs-convert --into (template_fill.h).
 *
 * The template is opened as a model and written again to OUT through its
 * own writer, the way ckptfs-reencode writes a model to another path:
 * every tensor of the template listed in order, the ones no checkpoint
 * tensor fills copied as they are, the filled ones given as new bytes
 * whose pieces are the checkpoint's extents.  So the graph, the nodes and
 * every other byte of the template stay as they were, and the bytes of
 * the weights stream from CKPT to OUT without being held in memory.
 *
 * The template's format says what its weights are called and which of
 * its models it refuses (its ck_template, codec/io/target.h, found in the
 * registry: codec/onnx_mindir/onnx_mindir_template.c), so that this file
 * names no format.
 *
 * Names are matched as the mount shows them (a tensor's directory
 * source: a MindIR parameter without its "<graph>:" prefix, which the
 * writer keeps, since a filled tensor keeps its own name).  Only the main
 * graph's weights are filled: Constant nodes' values and subgraph tensors
 * are part of the graph, not of what a checkpoint holds.
 *
 * A template with external data (ONNX's) gives an OUT with its own: the
 * group is marked own_data, so the writer puts every external tensor,
 * filled or not, in one new file beside OUT, "<OUT>.data", and nothing of
 * the template's directory is written.  The ones not filled are handed
 * over as new bytes, their own.
 */
#include "template_fill.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../codec/core/model.h"
#include "../codec/core/name_map.h"
#include "../codec/io/target.h"
#include "../codec/open_path.h"
#include "../codec/core/progress.h"
#include "../codec/registry.h"
#include "write_claim.h"

#define TOOL "ckptfs-convert"
#define NONE CK_NAME_MAP_NONE

/* --map FILE: its size and a line's length are bounded, like any input. */
#define MAP_MAX_BYTES (16u << 20)
#define MAP_LINE_MAX 65536
/* Pieces of all filled tensors together: one per extent, or per run of a
 * tensor merged from slices cut along a later dimension. */
#define FILL_MAX_PIECES (1u << 20)
/* The report names this many tensors of each side, then counts the rest. */
#define REPORT_NAMES 6

typedef struct fill {
    const ck_fill_args *a;
    ck_model *tm, *cm;          /* the template, the checkpoint */
    ck_name_map tnames, cnames; /* shown name -> position in live */
    ck_name_map tfull;          /* MindIR: "<graph>:<name>" -> position, for --map */
    uint32_t *by_tmpl;          /* per template tensor: the checkpoint's filling it */
    bool *renamed;              /* per checkpoint tensor: --map gave it another name */
    bool *used;                 /* per checkpoint tensor: it fills one */
    char *map_text;             /* --map's file, cut into names in place */
    size_t n_cand, n_filled;    /* template tensors that may be filled, and are */
    const ck_template *kind;    /* the template's format as one (its weights' name...) */
    bool external;              /* the template keeps tensor data in data files */
    ck_write_claim claim;       /* OUT's directory and writer lock, held from the start */
    ck_error *err;
    char q1[CK_QUOTE_BUF], q2[CK_QUOTE_BUF];
} fill;

static const ck_tensor *tmpl_at(const fill *f, uint32_t i)
{
    return &f->tm->index.tensors[f->tm->index.live[i]];
}

static const ck_tensor *ckpt_at(const fill *f, uint32_t i)
{
    return &f->cm->index.tensors[f->cm->index.live[i]];
}

/* The name as the mount shows it (before escaping): a MindIR parameter's
 * after its graph's prefix. */
static const char *shown(const ck_tensor *t, size_t *len)
{
    if (t->dir_src != NULL) {
        *len = t->dir_src_len;
        return t->dir_src;
    }
    *len = t->name_len;
    return t->name;
}

static const char *quote(char q[CK_QUOTE_BUF], const ck_tensor *t)
{
    size_t len;
    const char *s = shown(t, &len);
    return ck_quote(q, s, len);
}

/* A main-graph initializer or parameter (a checkpoint's tensor), not a
 * node's constant, a subgraph's tensor or a map parameter's part. */
static bool fillable(const ck_tensor *t)
{
    return t->part == CK_PART_WHOLE && t->dir_suffix == NULL;
}

/* What the template's weights are called: "initializer". */
static const char *what(const fill *f)
{
    return f->kind->tensor;
}

/* ---- opening ---- */

/* The template with the tools' key (a plain template opens as it is). */
static ck_model *open_template(const fill *f)
{
    ck_open_opts opts = f->a->open->open;
    opts.key_if_encrypted = true;
    return ck_model_open(f->a->tmpl, &opts, f->err);
}

/* The formats a template may be in, for a refusal: "an ONNX or MindIR". */
#define TEMPLATE_FORMATS_MAX 16

static const char *template_formats(char *buf, size_t cap)
{
    const ck_format *all[TEMPLATE_FORMATS_MAX];
    size_t n = 0, len = 0;
    for (size_t i = 0; ck_format_at(i) != NULL && n < TEMPLATE_FORMATS_MAX; i++)
        if (ck_format_template(ck_format_at(i)) != NULL)
            all[n++] = ck_format_at(i);
    buf[0] = '\0';
    for (size_t k = 0; k < n && len < cap; k++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%s",
                                k == 0 ? "" : k + 1 < n ? ", " : " or ",
                                k == 0 ? ck_format_template(all[0])->a_title : all[k]->title);
    return buf;
}

static int check_template(fill *f)
{
    const ck_model *m = f->tm;
    char formats[256];
    if ((f->kind = ck_format_template(m->format)) == NULL)
        return ck_fail(f->err, EINVAL, "%s: a %s, not %s graph: --into takes a graph to fill",
                       f->a->tmpl, m->format->title, template_formats(formats, sizeof formats));
    if (f->kind->check(m, f->a->tmpl, &f->external, f->err) < 0)
        return -1;
    const ck_format *out = ck_format_by_extension(f->a->out);
    if (out != NULL && out != m->format)
        return ck_fail(f->err, EINVAL, "%s: named as a %s, but the filled template is %s",
                       f->a->out, out->title, m->format->title);
    /* OUT is wrapped as the template is: its name must not say otherwise. */
    const ck_envelope_kind *named = ck_envelope_by_extension(f->a->out);
    if (named != NULL && named != m->env.kind)
        return ck_fail(f->err, EINVAL, "%s: named as %s, but the filled template is not",
                       f->a->out, named->adjective);
    if (named == NULL && ck_envelope_extension(&m->env) != NULL)
        return ck_fail(f->err, EINVAL, "%s: the filled template is %s as the template is: "
                       "name it %s", f->a->out, m->env.kind->adjective, m->env.kind->extension);
    return 0;
}

/* OUT must not be one of the files read (it would be replaced while they
 * are read); an existing OUT is replaced only with -f. */
static bool is_read(const ck_model *m, const struct stat *so)
{
    if (m == NULL)
        return false;
    if (m->st.st_dev == so->st_dev && m->st.st_ino == so->st_ino)
        return true;
    for (uint32_t i = 0; i < m->n_sources; i++)
        for (const ck_source *s = m->sources[i]; s != NULL; s = s->inner)
            if (s->dev != 0 && s->dev == so->st_dev && s->ino == so->st_ino)
                return true;
    return false;
}

/* path (OUT, or data: its data file) must not be a file read, and an
 * existing one is replaced only with -f. */
static int check_path(const fill *f, const char *path, bool data)
{
    struct stat st;
    if (lstat(path, &st) < 0)
        return errno == ENOENT ? 0 : ck_fail_errno(f->err, errno, "%s: cannot stat", path);
    if (S_ISDIR(st.st_mode))
        return ck_fail(f->err, EISDIR, "%s: is a directory", path);
    struct stat so;
    bool tmpl = stat(path, &so) == 0 && is_read(f->tm, &so);
    if (tmpl || (stat(path, &so) == 0 && is_read(f->cm, &so)))
        return ck_fail(f->err, EINVAL, data ? "%s: is %s or one of its files: OUT's data "
                       "would go there (name OUT otherwise)" : "%s: is %s or one of its files: "
                       "write it elsewhere", path, tmpl ? f->a->tmpl : f->a->ckpt);
    if (!f->a->force)
        return ck_fail(f->err, EEXIST, "%s: exists (give -f to replace it)", path);
    return 0;
}

/* OUT, and with a template's external data "<OUT>.data" too. */
static int check_out(fill *f)
{
    if (check_path(f, f->a->out, false) < 0)
        return -1;
    if (!f->external)
        return 0;
    char data[PATH_MAX];
    if ((size_t)snprintf(data, sizeof data, "%s.data", f->a->out) >= sizeof data)
        return ck_fail(f->err, ENAMETOOLONG, "%s.data: path too long", f->a->out);
    return check_path(f, data, true);
}

/* ---- names ---- */

static int index_names(fill *f, const ck_model *m, ck_name_map *map, const char *path)
{
    ck_name_map_init(map);
    for (size_t i = 0; i < m->index.n_live; i++) {
        const ck_tensor *t = &m->index.tensors[m->index.live[i]];
        if (!fillable(t))
            continue;
        size_t len;
        const char *s = shown(t, &len);
        int64_t prev = ck_name_map_put(map, s, len, (uint32_t)i);
        if (prev == -1)
            return ck_nomem(f->err, path);
        if (prev != NONE)
            return ck_fail(f->err, EINVAL, "%s: two tensors named '%s'", path,
                           ck_quote(f->q1, s, len));
        if (m == f->tm)
            f->n_cand++;
    }
    return 0;
}

/* MindIR parameters by their full names, which --map may use too. */
static int index_full_names(fill *f)
{
    ck_name_map_init(&f->tfull);
    for (size_t i = 0; i < f->tm->index.n_live; i++) {
        const ck_tensor *t = tmpl_at(f, (uint32_t)i);
        if (fillable(t) && t->dir_src != NULL &&
            ck_name_map_put(&f->tfull, t->name, t->name_len, (uint32_t)i) == -1)
            return ck_nomem(f->err, f->a->tmpl);
    }
    return 0;
}

/* ---- --map FILE ---- */

/* The whole file into f->map_text, NUL-ended: a regular file of bounded
 * size with no NUL byte. */
static int read_map(fill *f)
{
    const char *path = f->a->map;
    struct stat st;
    int fd = ck_open_regular(AT_FDCWD, path, O_RDONLY | O_NOCTTY, 0, &st);
    if (fd < 0 && st.st_mode != 0)
        return ck_fail(f->err, EINVAL, "%s: not a regular file (%s)", path,
                       ck_file_kind(st.st_mode));
    if (fd < 0)
        return ck_fail_errno(f->err, errno, "%s", path);
    int rc = -1;
    if (st.st_size > MAP_MAX_BYTES) {
        ck_fail(f->err, EFBIG, "%s: over %u bytes: not a name map", path, MAP_MAX_BYTES);
    } else if ((f->map_text = malloc((size_t)st.st_size + 1)) == NULL) {
        ck_nomem(f->err, path);
    } else {
        size_t n = 0, want = (size_t)st.st_size;
        ssize_t r = 1;
        while (n < want && (r = read(fd, f->map_text + n, want - n)) > 0)
            n += (size_t)r;
        f->map_text[n] = '\0';
        const char *nul = memchr(f->map_text, '\0', n);
        if (r < 0)
            ck_fail_errno(f->err, errno, "%s", path);
        else if (nul != NULL)
            ck_fail(f->err, EINVAL, "%s: offset %zu: a NUL byte: not a text file", path,
                    (size_t)(nul - f->map_text));
        else
            rc = 0;
    }
    close(fd);
    return rc;
}

static bool blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r';
}

/* Cut line into at most 3 blank-separated fields (a third one is an
 * error); returns how many. */
static int fields(char *line, char *field[3])
{
    int n = 0;
    char *p = line;
    while (n < 3) {
        while (blank(*p))
            p++;
        if (*p == '\0')
            break;
        field[n++] = p;
        while (*p != '\0' && !blank(*p))
            p++;
        if (*p != '\0')
            *p++ = '\0';
    }
    return n;
}

/* One line "CKPT_NAME TEMPLATE_NAME": the checkpoint's tensor takes the
 * template's name. */
static int map_pair(fill *f, unsigned line, const char *cname, const char *tname)
{
    const char *path = f->a->map;
    size_t cl = strlen(cname), tl = strlen(tname);
    uint32_t c = ck_name_map_get(&f->cnames, cname, cl);
    uint32_t t = ck_name_map_get(&f->tnames, tname, tl);
    if (t == NONE) /* a MindIR parameter named in full, as the file spells it */
        t = ck_name_map_get(&f->tfull, tname, tl);
    if (c == NONE)
        return ck_fail(f->err, EINVAL, "%s:%u: '%s' is not a tensor of %s", path, line,
                       ck_quote(f->q1, cname, cl), f->a->ckpt);
    if (t == NONE)
        return ck_fail(f->err, EINVAL, "%s:%u: '%s' is not %s of %s", path, line,
                       ck_quote(f->q1, tname, tl), f->kind->a_tensor, f->a->tmpl);
    if (f->renamed[c])
        return ck_fail(f->err, EINVAL, "%s:%u: '%s' is mapped twice", path, line,
                       ck_quote(f->q1, cname, cl));
    if (f->by_tmpl[t] != NONE)
        return ck_fail(f->err, EINVAL, "%s:%u: '%s' is filled twice", path, line,
                       ck_quote(f->q1, tname, tl));
    f->renamed[c] = true;
    f->by_tmpl[t] = c;
    return 0;
}

/* Blank lines and lines whose first non-blank byte is '#' are skipped;
 * names hold no blank (a name with one cannot be mapped). */
static int apply_map(fill *f)
{
    if (f->a->map == NULL)
        return 0;
    if (index_full_names(f) < 0 || read_map(f) < 0)
        return -1;
    char *p = f->map_text;
    for (unsigned line = 1; *p != '\0'; line++) {
        char *end = strchr(p, '\n');
        char *next = end ? end + 1 : p + strlen(p);
        if (end != NULL)
            *end = '\0';
        if ((size_t)(next - p) > MAP_LINE_MAX)
            return ck_fail(f->err, EINVAL, "%s:%u: line longer than %u bytes", f->a->map,
                           line, MAP_LINE_MAX);
        char *field[3];
        int n = fields(p, field);
        if (n > 0 && field[0][0] != '#' && n != 2)
            return ck_fail(f->err, EINVAL, "%s:%u: expected 'CKPT_NAME TEMPLATE_NAME', "
                           "found %d name%s", f->a->map, line, n,
                           n == 1 ? "" : "s or more");
        if (n == 2 && field[0][0] != '#' && map_pair(f, line, field[0], field[1]) < 0)
            return -1;
        p = next;
    }
    return 0;
}

/* ---- matching ---- */

/* After --map: a template tensor not named in it takes the checkpoint's
 * tensor of the same name, unless --map renamed that one. */
static void match_names(fill *f)
{
    for (size_t i = 0; i < f->tm->index.n_live; i++) {
        const ck_tensor *t = tmpl_at(f, (uint32_t)i);
        if (!fillable(t) || f->by_tmpl[i] != NONE)
            continue;
        size_t len;
        const char *s = shown(t, &len);
        uint32_t c = ck_name_map_get(&f->cnames, s, len);
        if (c != NONE && !f->renamed[c])
            f->by_tmpl[i] = c;
    }
    for (size_t i = 0; i < f->tm->index.n_live; i++)
        if (f->by_tmpl[i] != NONE) {
            f->used[f->by_tmpl[i]] = true;
            f->n_filled++;
        }
}

static bool same_dims(const ck_tensor *a, const ck_tensor *b)
{
    if (a->ndim != b->ndim)
        return false;
    for (uint32_t d = 0; d < a->ndim; d++)
        if (a->dims[d] != b->dims[d])
            return false;
    return true;
}

/* A tensor's type in a refusal: its canonical name (dtype.h), as the
 * tools print it, and, when the types differ, the format's own in
 * parentheses if the other side's canonical name is the same (MindSpore's
 * Int4, a byte an element, is not ONNX's INT4, two to a byte): there the
 * spelling is the news. */
static const char *type_text(const ck_tensor *t, const ck_tensor *other, bool type_ok,
                             char *buf, size_t len)
{
    const char *name = ck_dtype_canonical_name(t->dtype);
    if (!type_ok && strcmp(name, ck_dtype_canonical_name(other->dtype)) == 0 &&
        strcmp(t->type_name, other->type_name) != 0)
        snprintf(buf, len, "%s (%s)", name, t->type_name);
    else
        snprintf(buf, len, "%s", name);
    return buf;
}

/* The checkpoint's tensor must be of the template's type (the same
 * DataType in the graph) and shape, exactly. */
static int check_pair(fill *f, const ck_tensor *t, const ck_tensor *c)
{
    const ck_writer *w = ck_writer_of(f->tm);
    if (t->read_only)
        return ck_fail(f->err, ENOTSUP, "%s: %s '%s' is %s, which ckptfs keeps as stored: it "
                       "cannot be filled from %s's '%s'", f->a->tmpl, what(f), quote(f->q1, t),
                       ck_dtype_canonical_name(t->dtype), f->a->ckpt, quote(f->q2, c));
    bool type_ok = t->dtype->kind == c->dtype->kind && c->dtype->pb_code != 0 &&
                   w->same_type(t->dtype, c->dtype);
    bool dims_ok = same_dims(t, c) && t->nbytes == c->nbytes;
    if (type_ok && dims_ok)
        return 0;
    char tbuf[64], cbuf[64];
    const char *ttype = type_text(t, c, type_ok, tbuf, sizeof tbuf);
    const char *ctype = type_text(c, t, type_ok, cbuf, sizeof cbuf);
    char ts[256], cs[256];
    ck_dims_text(t->dims, t->ndim, ts, sizeof ts);
    ck_dims_text(c->dims, c->ndim, cs, sizeof cs);
    return ck_fail(f->err, EINVAL, "%s: tensor '%s' is %s %s, but %s's %s '%s' is %s %s: "
                   "%s differ", f->a->ckpt, quote(f->q1, c), ctype, cs, f->a->tmpl, what(f),
                   quote(f->q2, t), ttype, ts, type_ok ? "shapes" : dims_ok ? "types"
                   : "types and shapes");
}

static int check_pairs(fill *f)
{
    for (size_t i = 0; i < f->tm->index.n_live; i++)
        if (f->by_tmpl[i] != NONE &&
            check_pair(f, tmpl_at(f, (uint32_t)i), ckpt_at(f, f->by_tmpl[i])) < 0)
            return -1;
    return 0;
}

/* ---- the report ---- */

typedef struct line_buf {
    char s[2048];
    size_t n;
} line_buf;

static void add(line_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void add(line_buf *b, const char *fmt, ...)
{
    if (b->n >= sizeof b->s - 1)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->s + b->n, sizeof b->s - b->n, fmt, ap);
    va_end(ap);
    if (n > 0)
        b->n += (size_t)n < sizeof b->s - b->n ? (size_t)n : sizeof b->s - 1 - b->n;
}

static bool left_over(const fill *f, bool tmpl, size_t i)
{
    const ck_model *m = tmpl ? f->tm : f->cm;
    if (!fillable(&m->index.tensors[m->index.live[i]]))
        return false;
    return tmpl ? f->by_tmpl[i] == NONE : !f->used[i];
}

/* The template's tensors left unfilled (tmpl) or the checkpoint's left
 * unused: their count, then ": a, b (+N more)". */
static size_t list_left(fill *f, line_buf *b, bool tmpl)
{
    const ck_model *m = tmpl ? f->tm : f->cm;
    size_t count = 0, listed = 0;
    for (size_t i = 0; i < m->index.n_live; i++)
        count += left_over(f, tmpl, i);
    for (size_t i = 0; i < m->index.n_live && listed < REPORT_NAMES; i++)
        if (left_over(f, tmpl, i))
            add(b, "%s%s", listed++ ? ", " : ": ",
                quote(f->q1, &m->index.tensors[m->index.live[i]]));
    if (count > listed)
        add(b, " (+%zu more)", count - listed);
    return count;
}

/* One line on stderr: what was filled and what was not. */
static void report(fill *f)
{
    line_buf b = {.n = 0}, kept = {.n = 0}, unused = {.n = 0};
    size_t k = list_left(f, &kept, true), j = list_left(f, &unused, false);
    add(&b, TOOL ": %s: filled %zu of %zu %ss; %zu template %ss kept%s; %zu checkpoint "
        "tensors unused%s", f->a->out, f->n_filled, f->n_cand, what(f), k, what(f), kept.s,
        j, unused.s);
    fprintf(stderr, "%s\n", b.s);
}

/* ---- writing ---- */

/* Where ck_tensor_for_range's pieces of a checkpoint tensor go. */
typedef struct piece_out {
    const ck_model *m;
    ck_piece *next;
} piece_out;

static int add_piece(void *ctx, uint32_t src, uint64_t src_off, size_t len)
{
    piece_out *o = ctx;
    *o->next++ = (ck_piece){.src = o->m->sources[src], .off = src_off, .len = len};
    return 0;
}

/* A tensor whose bytes are in one of the template's data files: OUT
 * cannot name those, so it is handed over as new bytes, its own, which
 * the writer puts in OUT's data file. */
static bool moves(const fill *f, const ck_tensor *t)
{
    for (uint32_t k = 0; f->external && k < t->n_ext; k++)
        if (ck_model_is_data_file(f->tm, ck_tensor_ext(t, k)->src))
            return true;
    return false;
}

/* The template's tree, each filled tensor given the checkpoint's bytes;
 * *pieces_out holds every piece. */
static ck_write_tensor *tree(fill *f, ck_piece **pieces_out)
{
    const ck_index *ix = &f->tm->index;
    size_t n_pieces = 0;
    for (size_t i = 0; i < ix->n_live; i++)
        if (f->by_tmpl[i] == NONE) {
            n_pieces += moves(f, tmpl_at(f, (uint32_t)i)) ? tmpl_at(f, (uint32_t)i)->n_ext : 0;
        } else {
            const ck_tensor *c = ckpt_at(f, f->by_tmpl[i]);
            n_pieces += ck_tensor_max_pieces(c, 0, c->nbytes);
            if (n_pieces > FILL_MAX_PIECES) {
                ck_fail(f->err, E2BIG, "%s: tensor '%s': more than %u pieces to copy (slices "
                        "of a distributed checkpoint cut along a later dimension)",
                        f->a->ckpt, quote(f->q1, c), FILL_MAX_PIECES);
                return NULL;
            }
        }
    ck_write_tensor *w = calloc(ix->n_live + 1, sizeof *w);
    ck_piece *pieces = calloc(n_pieces + 1, sizeof *pieces);
    if (w == NULL || pieces == NULL) {
        free(w);
        free(pieces);
        ck_nomem(f->err, f->a->tmpl);
        return NULL;
    }
    piece_out out = {.m = f->cm, .next = pieces};
    for (size_t i = 0; i < ix->n_live; i++) {
        uint32_t id = ix->live[i];
        const ck_tensor *t = &ix->tensors[id];
        w[i] = f->by_tmpl[i] == NONE && moves(f, t) ? ck_write_own(f->tm, t, id, &out.next)
                                                    : ck_write_unchanged(t, id);
        if (f->by_tmpl[i] == NONE)
            continue;
        const ck_tensor *c = ckpt_at(f, f->by_tmpl[i]);
        w[i].unchanged = false;
        w[i].pieces = out.next;
        ck_tensor_for_range(c, 0, c->nbytes, add_piece, &out);
        w[i].n_pieces = (size_t)(out.next - w[i].pieces);
    }
    *pieces_out = pieces;
    return w;
}

/* Take OUT's writer lock; then a fill of OUT and its data file killed
 * after its commit point is finished, as the next mount of OUT would, the
 * temporary files of one killed before it are removed (so what OUT and
 * OUT.data are is known), and OUT is checked. */
static int claim_out(fill *f)
{
    char rel[PATH_MAX];
    if (ck_write_claim_take(&f->claim, f->a->out, TOOL, f->err) < 0)
        return -1;
    if ((size_t)snprintf(rel, sizeof rel, "%s.data", f->claim.dir->base) < sizeof rel)
        ck_atomic_cleanup(f->claim.dir, rel, getuid());
    return check_out(f);
}

/* OUT written atomically in its directory (its writer lock is held); the
 * bar counts the checkpoint's bytes as they are copied. */
static int write_out(fill *f)
{
    ck_piece *pieces = NULL;
    ck_write_tensor *w = tree(f, &pieces);
    if (w == NULL)
        return -1;
    uint64_t bytes = 0;
    for (size_t i = 0; i < f->tm->index.n_live; i++)
        bytes += w[i].unchanged ? 0 : ck_pieces_len(&w[i]);
    ck_progress prog = {0};
    ck_progress_start(&prog, bytes, f->a->progress, stderr);
    ck_save_opts so = {.progress = &prog, .own_data = true, .data_replace = f->a->force};
    int rc = ck_write_claim_save(&f->claim, f->tm, w, f->tm->index.n_live, &so, f->err);
    ck_progress_end(&prog);
    free(w);
    free(pieces);
    return rc;
}

/* ---- the whole ---- */

static int prepare(fill *f)
{
    if ((f->tm = open_template(f)) == NULL || check_template(f) < 0 ||
        (f->cm = ck_open_path(f->a->ckpt, f->a->open, f->err)) == NULL ||
        claim_out(f) < 0)
        return -1;
    size_t nt = f->tm->index.n_live, nc = f->cm->index.n_live;
    f->by_tmpl = malloc((nt + 1) * sizeof *f->by_tmpl);
    f->renamed = calloc(nc + 1, sizeof *f->renamed);
    f->used = calloc(nc + 1, sizeof *f->used);
    if (f->by_tmpl == NULL || f->renamed == NULL || f->used == NULL)
        return ck_nomem(f->err, f->a->ckpt);
    for (size_t i = 0; i < nt; i++)
        f->by_tmpl[i] = NONE;
    if (index_names(f, f->tm, &f->tnames, f->a->tmpl) < 0 ||
        index_names(f, f->cm, &f->cnames, f->a->ckpt) < 0 || apply_map(f) < 0)
        return -1;
    match_names(f);
    if (check_pairs(f) < 0)
        return -1;
    if (!f->a->strict || f->n_filled == f->n_cand)
        return 0;
    line_buf kept = {.n = 0};
    size_t k = list_left(f, &kept, true);
    return ck_fail(f->err, EINVAL, "%s: %zu %ss have no tensor in %s (--strict)%s",
                   f->a->tmpl, k, what(f), f->a->ckpt, kept.s);
}

int ck_template_fill(const ck_fill_args *a)
{
    ck_error err = {0};
    fill f = {.a = a, .err = &err, .claim = CK_WRITE_CLAIM_NONE};
    int rc = prepare(&f) < 0 || write_out(&f) < 0 ? 1 : 0;
    if (rc != 0)
        fprintf(stderr, TOOL ": %s\n", err.msg);
    else
        report(&f);
    ck_name_map_free(&f.tnames);
    ck_name_map_free(&f.tfull);
    ck_name_map_free(&f.cnames);
    free(f.by_tmpl);
    free(f.renamed);
    free(f.used);
    free(f.map_text);
    ck_write_claim_release(&f.claim);
    ck_model_close(f.cm);
    ck_model_close(f.tm);
    return rc;
}
