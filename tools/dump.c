/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ckptfs-dump: list a model's tensors without mounting it.
 *
 * It uses the codec alone (no FUSE), like squashfuse_ls: handy to see what a
 * mount would show, where each tensor's bytes are, and why a file is refused.
 *
 *   ckptfs-dump [--nocrc] [--no-index] [-o index_dir=DIR] [-o key_file=PATH]
 *               [-o tmp_max=SIZE] MODEL [TENSOR...]
 *   one line per visible tensor (or per tensor the TENSOR names or shell
 *   globs select, in their order: ck_cli_select): directory name, type (the
 *   canonical name, dtype.h: float32 whatever the format spells it), shape,
 *   bytes, extents
 *   (of the plaintext, for an encrypted or compressed model), each OFF+LEN,
 *   FILE:OFF+LEN when it is in a data file (an ONNX external data file, a
 *   shard of a safetensors set), FILE relative to the model's directory;
 *   a '#' line of the model's own metadata when it has some (safetensors'
 *   "__metadata__"), a '#' line of column names before them and '#' lines of totals (all,
 *   then by type) after, so that scripts skipping '#' lines see tensors only
 *
 *   ckptfs-dump --json ...: any of these as one JSON object instead, the
 *   schema ckptfs-dump(1)'s JSON SCHEMA: for scripts, which should not
 *   have to parse the tab-separated listing (a name may hold any byte)
 *
 * The key of an encrypted model comes as for a mount: -o key_file=PATH or
 * CKPTFS_KEY_HEX; a zstd model without a seek table is decompressed into
 * $TMPDIR within -o tmp_max, as for a mount.
 *
 *   ckptfs-dump -o strategy=FILE DIST_DIR
 *   a distributed checkpoint merged by its strategy file (dist_merge.h), as
 *   a mount shows it: each extent RANK_FILE:OFF+LEN, and for a tensor cut
 *   along a dimension after the first, the length of the runs in which
 *   its extents interleave
 *
 *   ckptfs-dump RUN_DIR/iteration_<N>
 *   a MindSpore Transformers iteration directory (iteration_dir.h), its
 *   tensors as a mount shows them, each extent SHARD_FILE:OFF+LEN
 *
 *   ckptfs-dump SNAPSHOT_DIR
 *   a OneFlow snapshot directory (oneflow_dir.h): its tensors, named by
 *   pickled_data or by their directories; each extent FILE:OFF+LEN, FILE
 *   the tensor's `out` relative to the snapshot (tensor_5/out, conv1.weight/out)
 *
 *   ckptfs-dump HF_MODEL_FOLDER
 *   a Hugging Face model folder (hf_folder.h): the model file it stands
 *   for, dumped as when given it (the summary line names it)
 *
 *   ckptfs-dump [-o settle=SECONDS] RUN_DIR
 *   a training run's directory: one line per checkpoint (run_dir.h): its
 *   name, file, format, epoch and step when its name has them, and
 *   whether it is complete, being written, or complete but does not open
 *   (with the reader's one-line reason); the newest complete one that
 *   opens in the summary line.  Each complete one is opened and closed,
 *   as a mount opens it (ck_run_entry_check: its index, not its data; for
 *   a .ckpt every record's framing, which is how a truncated one is told)
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <jansson.h>

#include "cli_open.h"
#include "../codec/core/model.h"
#include "../codec/run_dir.h"
#include "../codec/run_path.h"
#include "../codec/core/version.h"

/* Seconds a writable checkpoint must be left unchanged to count as
 * complete, by default (MindSpore's own are made read-only when done). */
#define SETTLE_DEFAULT CK_RUN_SETTLE_DEFAULT

/* Extent e of t: FILE:OFF+LEN when its bytes are in a file of the model's
 * directory other than the model's own, else OFF+LEN. */
static void print_extent(const ck_model *m, const ck_tensor *t, const ck_extent *e)
{
    const char *path = m->sources[e->src]->path;
    size_t k = strlen(m->path);
    uint64_t off = e->off;
    const char *out = ck_model_extent_file(m, t, e->off, &off);
    if (out != NULL) {
        printf("%s:", out); /* a tensor's out, of a snapshot directory */
    } else if (ck_model_is_data_file(m, e->src)) {
        const char *rel = ck_dir_rel(m->dir, path);
        printf("%s:", rel != NULL ? rel : path);
    } else if (strncmp(path, m->path, k) == 0 && path[k] == '/') {
        printf("%s:", path + k + 1); /* a rank's file, of a merged checkpoint */
    }
    printf("%" PRIu64 "+%" PRIu64, off, e->len);
}

/* s with its control bytes as \xNN: a metadata value may hold a newline,
 * which would break the line into one a script takes for a tensor's. */
static void print_clean(const char *s)
{
    for (; *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;
        if (c < 0x20 || c == 0x7f)
            printf("\\x%02x", c);
        else
            putchar(c);
    }
}

/* The model's own metadata (safetensors' "__metadata__", a set index's
 * "metadata"), as a '#' line of KEY=VALUE, in the file's order; a value
 * that is not a string as compact JSON.  Nothing when it has none. */
static void print_metadata(const ck_model *m)
{
    const char *text = ck_model_metadata(m);
    json_t *meta = text != NULL ? json_loads(text, 0, NULL) : NULL;
    if (json_is_object(meta)) {
        const char *key;
        json_t *v;
        const char *sep = "";
        printf("# metadata: ");
        json_object_foreach(meta, key, v) {
            char *js = json_is_string(v) ? NULL : json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
            printf("%s", sep);
            print_clean(key);
            putchar('=');
            print_clean(js != NULL ? js : json_is_string(v) ? json_string_value(v) : "?");
            free(js);
            sep = ", ";
        }
        putchar('\n');
    }
    json_decref(meta);
}

/* The column names of the tensor lines, as gguf-dump and h5ls head theirs;
 * a '#' line, so that readers skipping '#' lines read tensor lines alone. */
#define COLUMNS "# name\ttype\tshape\tbytes\textents\tlayout\n"

static void print_tensor(const ck_model *m, const ck_tensor *t)
{
    printf("%s\t%s\t[", t->dir_name, ck_dtype_canonical_name(t->dtype));
    for (uint32_t i = 0; i < t->ndim; i++)
        printf("%s%" PRId64, i ? "," : "", t->dims[i]);
    printf("]\t%" PRIu64 "\t", t->nbytes);
    if (t->dtype->kind == CK_KIND_STR)
        printf("decoded ");
    for (uint32_t i = 0; i < t->n_ext; i++) {
        printf("%s", i ? "," : "");
        print_extent(m, t, ck_tensor_ext(t, i));
    }
    if (t->gather != NULL)
        printf("\t%s, %" PRIu64 "-byte runs", t->gather->step ? "strided" : "interleaved",
               t->gather->run);
    printf("\n");
}

/* A tensor's element count: its dims multiplied out.  The readers bound
 * each shape (dtype.h, ck_shape_rule) so that its bytes fit in 64 bits,
 * but a zero dim lets the others be huge ([2^62, 0, 2^62]): a zero
 * anywhere is 0 elements, and an overflow (no reader lets one through)
 * stays at UINT64_MAX rather than wrapping to a wrong small count. */
static uint64_t elements(const ck_tensor *t)
{
    uint64_t n = 1;
    for (uint32_t i = 0; i < t->ndim; i++)
        if (t->dims[i] == 0)
            return 0;
    for (uint32_t i = 0; i < t->ndim; i++)
        if (t->dims[i] < 0 || __builtin_mul_overflow(n, (uint64_t)t->dims[i], &n))
            return UINT64_MAX;
    return n;
}

/* Counts of one type, or of them all. */
typedef struct sums {
    const char *type;           /* the canonical type name (dtype.h), so that the
                                 * F32 and Float32 tensors of one listing total as
                                 * one float32; NULL for all */
    uint64_t tensors, parameters, bytes;
} sums;

typedef struct totals {
    sums all;
    sums *by_type;              /* in the order the types first appear */
    size_t n_types;
} totals;

static void sums_add(sums *s, const ck_tensor *t)
{
    uint64_t e = elements(t);
    s->tensors++;
    /* saturating, as elements(): a wrong small total is worse than a
     * visibly impossible one */
    if (__builtin_add_overflow(s->parameters, e, &s->parameters))
        s->parameters = UINT64_MAX;
    if (__builtin_add_overflow(s->bytes, t->nbytes, &s->bytes))
        s->bytes = UINT64_MAX;
}

/* The tensors listed (order[0..n): indexes into ix->live), counted in
 * all and by type.  -1 out of memory. */
static int count(const ck_index *ix, const size_t *order, size_t n, totals *tot)
{
    *tot = (totals){0};
    for (size_t i = 0; i < n; i++) {
        const ck_tensor *t = &ix->tensors[ix->live[order[i]]];
        sums_add(&tot->all, t);
        size_t k = 0;
        const char *type = ck_dtype_canonical_name(t->dtype);
        /* a model has a handful of types: a linear search is enough */
        while (k < tot->n_types && strcmp(tot->by_type[k].type, type) != 0)
            k++;
        if (k == tot->n_types) {
            sums *b = realloc(tot->by_type, (k + 1) * sizeof *b);
            if (b == NULL)
                return -1;
            tot->by_type = b;
            b[k] = (sums){.type = type};
            tot->n_types++;
        }
        sums_add(&tot->by_type[k], t);
    }
    return 0;
}

static void print_sums(const sums *s)
{
    printf("# total%s%s: %" PRIu64 " tensors, %" PRIu64 " parameters, %" PRIu64 " bytes\n",
           s->type ? " " : "", s->type ? s->type : "", s->tensors, s->parameters, s->bytes);
}

/* The totals lines at the end of the text listing: all the tensors, then
 * each type, as gguf-dump and h5ls close theirs. */
static void print_totals(const totals *tot)
{
    print_sums(&tot->all);
    for (size_t k = 0; k < tot->n_types; k++)
        print_sums(&tot->by_type[k]);
}

/* ---- --json ---- */

/* A JSON integer of a count or an offset.  jansson's integers are signed
 * 64-bit; sizes and offsets are off_t (so below 2^63) and the saturated
 * sums above are the only values past that: those become a float, which
 * a reader sees as no exact count. */
static json_t *jint(uint64_t v)
{
    return v <= INT64_MAX ? json_integer((json_int_t)v) : json_real((double)v);
}

/* Length of the well-formed UTF-8 sequence at s (n bytes left), or 0: no
 * overlong forms, no surrogates, nothing past U+10FFFF (RFC 3629, what
 * Python's strict decoder and jansson take). */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len;
    unsigned lo = 0x80, hi = 0xBF;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0)
            lo = 0xA0;
        if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0)
            lo = 0x90;
        if (c == 0xF4)
            hi = 0x8F;
    } else
        return 0;
    if (n < len || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xBF)
            return 0;
    return len;
}

/* A tensor's name (or a path: key) into o: "name" as it is when it is UTF-8 (JSON strings
 * are Unicode); else "name" with each byte outside a well-formed sequence
 * written as the four characters \xHH (readable, not reversible: a name
 * can hold those characters itself) and "name_hex", the exact bytes in
 * hex, which is.  Paths too can be any bytes but NUL, and are written
 * alike as "file" and "file_hex".  -1 out of memory. */
static int put_name(json_t *o, const char *key, const char *name, size_t len)
{
    const unsigned char *s = (const unsigned char *)name;
    bool utf8 = true;
    for (size_t i = 0; i < len;) {
        size_t k = utf8_seq(s + i, len - i);
        if (k == 0) {
            utf8 = false;
            break;
        }
        i += k;
    }
    if (utf8)
        return json_object_set_new(o, key, json_stringn(name, len));
    char *text = malloc(4 * len + 1), *hex = malloc(2 * len + 1);
    if (text == NULL || hex == NULL) {
        free(text);
        free(hex);
        return -1;
    }
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        size_t k = utf8_seq(s + i, len - i);
        if (k == 0) {
            n += (size_t)sprintf(text + n, "\\x%02x", s[i]);
            i++;
        } else {
            memcpy(text + n, s + i, k);
            n += k;
            i += k;
        }
    }
    for (size_t i = 0; i < len; i++)
        sprintf(hex + 2 * i, "%02x", s[i]);
    char hex_key[32];
    snprintf(hex_key, sizeof hex_key, "%s_hex", key);
    int rc = json_object_set_new(o, key, json_stringn(text, n));
    rc |= json_object_set_new(o, hex_key, json_string(hex));
    free(text);
    free(hex);
    return rc;
}

/* Extent e of t as {"file"?, "offset", "length"}: "file" as the text
 * listing's FILE: (print_extent), absent for the model's own file. */
static json_t *json_extent(const ck_model *m, const ck_tensor *t, const ck_extent *e)
{
    const char *path = m->sources[e->src]->path;
    size_t k = strlen(m->path);
    uint64_t off = e->off;
    const char *file = ck_model_extent_file(m, t, e->off, &off);
    if (file == NULL && ck_model_is_data_file(m, e->src)) {
        file = ck_dir_rel(m->dir, path);
        if (file == NULL)
            file = path;
    } else if (file == NULL && strncmp(path, m->path, k) == 0 && path[k] == '/') {
        file = path + k + 1;
    }
    json_t *x = json_object();
    if (file != NULL)
        put_name(x, "file", file, strlen(file));
    json_object_set_new(x, "offset", jint(off));
    json_object_set_new(x, "length", jint(e->len));
    return x;
}

static json_t *json_tensor(const ck_model *m, const ck_tensor *t)
{
    json_t *o = json_object();
    if (put_name(o, "name", t->name, t->name_len) < 0 ||
        put_name(o, "dir", t->dir_name, strlen(t->dir_name)) < 0) {
        json_decref(o);
        return NULL;
    }
    /* "type" the one name across formats (dtype.h), as the text listing,
     * ckptfs-stat and ckptfs-diff print it; "format_type" the file's own
     * spelling, which tells more where the format does (torch.float32 of a
     * PyTorch file, F8_E4M3 where float8_e4m3fn is what a library calls it) */
    json_object_set_new(o, "type", json_string(ck_dtype_canonical_name(t->dtype)));
    json_object_set_new(o, "format_type", json_string(t->type_name));
    json_t *shape = json_array();
    for (uint32_t i = 0; i < t->ndim; i++)
        json_array_append_new(shape, json_integer(t->dims[i]));
    json_object_set_new(o, "shape", shape);
    json_object_set_new(o, "parameters", jint(elements(t)));
    json_object_set_new(o, "bytes", jint(t->nbytes));
    if (t->dtype->kind == CK_KIND_STR)
        json_object_set_new(o, "decoded", json_true());
    json_t *ext = json_array();
    for (uint32_t i = 0; i < t->n_ext; i++)
        json_array_append_new(ext, json_extent(m, t, ck_tensor_ext(t, i)));
    json_object_set_new(o, "extents", ext);
    if (t->gather != NULL) {
        json_t *g = json_object();
        json_object_set_new(g, "kind",
                            json_string(t->gather->step ? "strided" : "interleaved"));
        json_object_set_new(g, "run", jint(t->gather->run));
        json_object_set_new(o, "layout", g);
    }
    return o;
}

static json_t *json_sums(const sums *s)
{
    json_t *o = json_object();
    json_object_set_new(o, "tensors", jint(s->tensors));
    json_object_set_new(o, "parameters", jint(s->parameters));
    json_object_set_new(o, "bytes", jint(s->bytes));
    return o;
}

/* root to stdout, one object and a newline; 1 if it could not be built or
 * written (out of memory, a full disk). */
static int emit(json_t *root)
{
    int rc = root == NULL || json_dumpf(root, stdout, JSON_INDENT(2)) < 0 ||
             fputc('\n', stdout) == EOF || fflush(stdout) == EOF;
    json_decref(root);
    if (rc)
        fprintf(stderr, "ckptfs-dump: cannot write the JSON listing\n");
    return rc;
}

/* The model as one JSON object: the schema is the man page's JSON SCHEMA. */
static int dump_json(const ck_model *m, const size_t *order, size_t n, const totals *tot)
{
    const ck_index *ix = &m->index;
    json_t *root = json_object();
    put_name(root, "file", m->path, strlen(m->path));
    json_object_set_new(root, "format", json_string(m->format->name));
    json_object_set_new(root, "records", jint(ix->count));
    json_object_set_new(root, "index_memory", jint(ck_index_memory(ix)));
    const char *notes = m->format->notes ? m->format->notes(m) : "";
    if (strncmp(notes, ", ", 2) == 0)
        notes += 2; /* the notes come as the text header's ", ..." tail */
    if (*notes != '\0')
        json_object_set_new(root, "notes", json_string(notes));
    if (ck_envelope_is_wrapped(&m->env))
        json_object_set_new(root, "envelope", json_string(ck_envelope_describe(&m->env)));
    const char *meta = ck_model_metadata(m); /* the file's own JSON, as it is */
    if (meta != NULL)
        json_object_set_new(root, "metadata", json_loads(meta, 0, NULL));
    json_t *list = json_array();
    json_object_set_new(root, "tensors", list);
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_tensor(m, &ix->tensors[ix->live[order[i]]]);
        if (t == NULL || json_array_append_new(list, t) < 0) {
            json_decref(root);
            return emit(NULL);
        }
    }
    json_t *all = json_sums(&tot->all), *by = json_object();
    for (size_t k = 0; k < tot->n_types; k++)
        json_object_set_new(by, tot->by_type[k].type, json_sums(&tot->by_type[k]));
    json_object_set_new(all, "by_type", by);
    json_object_set_new(root, "totals", all);
    return emit(root);
}

/* A run directory as one JSON object (the man page's JSON SCHEMA): the
 * text listing's columns, keyed; no tensors. */
/* What a run's checkpoint is: its collection's name (a directory's,
 * "iteration"), else its file's format's. */
static const char *entry_kind(const ck_run_entry *e)
{
    return e->collection != NULL ? e->collection->name : e->format->name;
}

static int run_dir_json(const char *path, const ck_run_list *l, size_t complete)
{
    json_t *root = json_object();
    put_name(root, "file", path, strlen(path));
    json_object_set_new(root, "format", json_string("run_dir"));
    json_t *list = json_array();
    json_object_set_new(root, "checkpoints", list);
    for (size_t i = 0; i < l->n; i++) {
        const ck_run_entry *e = &l->e[i];
        json_t *c = json_object();
        put_name(c, "name", e->name, strlen(e->name));
        put_name(c, "file", e->file, strlen(e->file));
        json_object_set_new(c, "format", json_string(entry_kind(e)));
        if (e->numbered) {
            json_object_set_new(c, "epoch", jint(e->epoch));
            json_object_set_new(c, "step", jint(e->step));
        }
        json_object_set_new(c, "complete", json_boolean(e->complete));
        if (e->complete)
            json_object_set_new(c, "opens", json_boolean(e->error == NULL));
        if (e->error != NULL)
            json_object_set_new(c, "error", json_string(e->error));
        json_array_append_new(list, c);
    }
    json_object_set_new(root, "latest",
                        l->latest >= 0 ? json_string(l->e[l->latest].name) : json_null());
    json_t *tot = json_object();
    json_object_set_new(tot, "checkpoints", jint(l->n));
    json_object_set_new(tot, "complete", jint(complete));
    json_object_set_new(root, "totals", tot);
    return emit(root);
}

/* Whether e opens, for ck_run_list_pick_opening: already judged. */
static int judged_opens(void *arg, ck_run_entry *e)
{
    (void)arg;
    return e->error == NULL ? 0 : -1;
}

static int dump_run_dir(const char *path, double settle, bool json, const ck_cli_open *o)
{
    ck_run_list l;
    ck_error err = {0};
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    if (ck_run_dir_scan(path, settle, &now, &l, &err) < 0) {
        fprintf(stderr, "ckptfs-dump: %s\n", err.msg);
        ck_run_list_free(&l);
        return 1;
    }
    /* Every complete one is opened as a mount would open it: a file that
     * only looks like a checkpoint by its name (text in a .ckpt, one cut
     * short) is told here, not when a mount is looked into. */
    ck_envelope_args key;
    if (ck_cli_envelope_for_open(o, &key, &err) < 0) {
        fprintf(stderr, "ckptfs-dump: %s\n", err.msg);
        ck_run_list_free(&l);
        return 1;
    }
    ck_collection_opts co = ck_cli_collection_opts(o, &key);
    size_t complete = 0;
    for (size_t i = 0; i < l.n; i++) {
        complete += l.e[i].complete;
        ck_error why = {0};
        if (l.e[i].complete && ck_run_entry_check_path(path, &l.e[i], &co.open, &why) < 0 &&
            l.e[i].error == NULL) {
            fprintf(stderr, "ckptfs-dump: %s\n", why.msg);
            ck_envelope_args_free(&key);
            ck_run_list_free(&l);
            return 1;
        }
    }
    ck_envelope_args_free(&key);
    ck_run_list_pick_opening(&l, judged_opens, NULL);
    if (json) {
        int rc = run_dir_json(path, &l, complete);
        ck_run_list_free(&l);
        return rc;
    }
    printf("# %s: run directory, %zu checkpoints (%zu complete), latest %s\n", path, l.n,
           complete, l.latest >= 0 ? l.e[l.latest].name : "none");
    for (size_t i = 0; i < l.n; i++) {
        const ck_run_entry *e = &l.e[i];
        printf("%s\t%s\t%s\t", e->name, e->file,
               entry_kind(e));
        if (e->numbered)
            printf("epoch %" PRIu64 " step %" PRIu64, e->epoch, e->step);
        else
            printf("-");
        if (e->error != NULL)
            printf("\tdoes not open: %s\n", e->error);
        else
            printf("\t%s\n", e->complete ? "complete" : "being written");
    }
    ck_run_list_free(&l);
    return 0;
}

/* "2.5": seconds, 0 or more. */
static int parse_seconds(const char *text, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno != 0 || end == text || *end != '\0' || !(v >= 0) || v > 1e9)
        return -1;
    *out = v;
    return 0;
}

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

#define USAGE "usage: ckptfs-dump [OPTIONS] MODEL [TENSOR...] | RUN_DIR"

static void usage(FILE *to)
{
    fprintf(to, "usage: ckptfs-dump [--json] [--nocrc] [--no-index] [-o index_dir=DIR]\n"
            "                   [-o key_file=PATH] [-o tmp_max=SIZE] [--map NAME|FILE] [-q]\n"
            "                   MODEL [TENSOR...]\n"
            "       ckptfs-dump -o strategy=FILE DIST_DIR\n"
            "       ckptfs-dump RUN_DIR/iteration_<N>\n"
            "       ckptfs-dump ONEFLOW_SNAPSHOT_DIR\n"
            "       ckptfs-dump HF_MODEL_FOLDER    (its config.json beside model.safetensors,\n"
            "                   its .index.json or pytorch_model.bin: that file)\n"
            "       ckptfs-dump [-o settle=SECONDS] RUN_DIR\n"
            "       ckptfs-dump -h | --help | -V | --version\n"
            "-o takes a list, -o a,b (a comma in a value: \\,); -q: no warning, no bar.\n"
            "--json: one JSON object instead of the listing (man ckptfs-dump, JSON SCHEMA).\n"
            "--map: the names a map gives MODEL's tensors (ckptfs --maps; docs/maps.md).\n"
            "TENSOR: only those tensors, in the order named: a name or a shell glob ('fc*',\n"
            "quoted from the shell); a model of any kind above but a RUN_DIR takes them.\n");
}

typedef struct dump_opts {
    double settle;
    bool json;
} dump_opts;

/* -o settle=SECONDS and --json, ckptfs-dump's own options (ck_cli_args): 1
 * taken, 0 not one, -1 a bad value. */
static int own_arg(void *ctx, int argc, char **argv, int *i)
{
    dump_opts *d = ctx;
    if (strcmp(argv[*i], "--json") == 0) {
        d->json = true;
        return 1;
    }
    const char *v = ck_cli_o_value(argc, argv, *i, "settle");
    if (v == NULL)
        return 0;
    *i += 1;
    return parse_seconds(v, &d->settle) < 0 ? -1 : 1;
}

static int dump_model(const ck_cli_open *o, const char *path, const char **pats,
                      size_t n_pats, bool json);

int main(int argc, char **argv)
{
    ck_cli_open o = {0};
    dump_opts d = {.settle = SETTLE_DEFAULT};
    /* MODEL, then the TENSOR patterns */
    const char **pos = calloc((size_t)argc + 1, sizeof *pos);
    if (pos == NULL)
        return 2;
    ck_cli_args args = {.prog = "ckptfs-dump", .usage = usage, .open = &o, .own = own_arg,
                        .ctx = &d, .pos = pos, .max_pos = (size_t)argc};
    int got = ck_cli_read_args(&args, argc, argv);
    const char *path = pos[0];
    bool run_dir = got == 0 && path != NULL && is_dir(path) && !ck_cli_opens_dir(&o, path);
    if (got != 0 || path == NULL || (run_dir && args.n_pos > 1)) {
        if (got == 0)
            fprintf(stderr, "ckptfs-dump: %s; ", path == NULL ? "no MODEL given"
                    : "a RUN_DIR takes no TENSOR");
        if (got <= 0)
            fprintf(stderr, USAGE " (try --help)\n");
        free(pos);
        return got > 0 ? 0 : 2; /* --help, --version: 0 */
    }
    int rc = run_dir ? dump_run_dir(path, d.settle, d.json, &o)
                     : dump_model(&o, path, pos + 1, args.n_pos - 1, d.json);
    free(pos);
    return rc;
}

/* The model's summary line, then its tensors and their totals (or all
 * that as JSON): every tensor in file order, or those pats select.  The
 * exit status. */
static int dump_model(const ck_cli_open *o, const char *path, const char **pats,
                      size_t n_pats, bool json)
{
    ck_error err = {0};
    ck_model *m = ck_cli_open_model(o, path, &err);
    if (m == NULL) {
        fprintf(stderr, "ckptfs-dump: %s\n", err.msg);
        return 1;
    }
    const ck_index *ix = &m->index;
    size_t n = 0, *order = ck_cli_select_tensors("ckptfs-dump", path, ix, pats, n_pats, &n);
    if (order == NULL) {
        ck_model_close(m);
        return 1;
    }
    totals tot;
    int rc = count(ix, order, n, &tot) < 0 ? -1 : json ? dump_json(m, order, n, &tot) : 0;
    if (rc < 0)
        fprintf(stderr, "ckptfs-dump: %s: out of memory\n", m->path);
    if (rc != 0 || json) {
        free(tot.by_type);
        free(order);
        ck_model_close(m);
        return rc != 0 ? 1 : 0;
    }
    printf("# %s: format %s, %zu tensors (%zu records), index memory %zu bytes%s%s%s\n",
           m->path, m->format->name, ix->n_live, ix->count, ck_index_memory(ix),
           m->format->notes ? m->format->notes(m) : "",
           ck_envelope_is_wrapped(&m->env) ? ", " : "", ck_envelope_describe(&m->env));
    print_metadata(m);
    printf(COLUMNS);
    for (size_t k = 0; k < n; k++)
        print_tensor(m, &ix->tensors[ix->live[order[k]]]);
    print_totals(&tot);
    free(tot.by_type);
    free(order);
    ck_model_close(m);
    return 0;
}
