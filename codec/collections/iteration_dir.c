/* SPDX-License-Identifier: Apache-2.0 */
/*
 * iteration_dir: a MindSpore Transformers iteration directory as one model
 * (iteration_dir.h).
 *
 * The layout, after mindformers' mindformers/checkpoint/ (utils.py
 * get_checkpoint_name, metadata.py save_metadata, sharded_tensor.py,
 * reshard.py; no public example directory exists):
 *
 * - Shard files [<prefix>-]{model,opt}-<i:07d>-<n:07d>.safetensors: each
 *   holds its rank's slice of each parameter under the parameter's full
 *   name.  They are read model files first, then optimizer files, each in
 *   index order; a tensor is shown where its name first appears.
 * - metadata.json: {"state_dict_metadata": {name: {"global_shape",
 *   "axis_fragmentations", "chunk": [{"global_offset": [s],
 *   "local_shape"}], "layout", ...}}, "storage_data": {"('<name>', (s,))":
 *   [{"file_name", "storage_rank", "rank_group"}, ...]}}.  A parameter is a
 *   grid of axis_fragmentations slices of local_shape each, s being a
 *   slice's row-major index in that grid (not an element offset), stored in
 *   the first storage entry's file.  A slice of the full shape is the whole
 *   tensor (a writer that gathered it).  A name metadata.json does not
 *   describe (a buffer every rank saves whole) is the first file's.
 * - Without metadata.json (one card), every file holds whole tensors and a
 *   name may be in one file only.
 */
#define _GNU_SOURCE
#include "iteration_dir.h"
#include "../registry.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/decimal.h"
#include "model_set.h"
#include "../safetensors/safetensors_reader.h"
#include "tensor_grid.h"

#define METADATA "metadata.json"

/* Where slice s of a parameter is stored: storage_data's first entry. */
typedef struct stored {
    const char *name;           /* within the storage key */
    size_t len;
    uint64_t s;
    const char *file;
} stored;

typedef struct iter {
    const char *path;           /* the directory, for messages */
    ck_model *m;                /* the merged model */
    ck_model_set *files;        /* its state: file i is model i */
    char **file_names;          /* per file, by model index */
    uint32_t *by_file_name;     /* model indexes sorted by file name */
    json_t *root;               /* metadata.json, or NULL */
    json_t *params;             /* its state_dict_metadata */
    stored *store;              /* storage_data, sorted by (name, s) */
    size_t n_store;
    uint8_t **first;            /* per file, per tensor id: where its name first appears */
    size_t n_described;         /* tensors added that metadata.json describes */
} iter;

static const ck_format iteration_format =
    CK_MSET_FORMAT("iteration", "MindSpore Transformers iteration directory");

/* A shard file's index: at least 7 digits (mindformers' {:07d}). */
static bool digits(const char *s, size_t len, uint64_t *v)
{
    return len >= 7 && ck_decimal(s, len, v);
}

bool ck_iteration_dir_name(const char *name, uint64_t *n)
{
    return strncmp(name, "iteration_", 10) == 0 && ck_decimal(name + 10, strlen(name + 10), n);
}

bool ck_iteration_dir_path(const char *path)
{
    char name[NAME_MAX + 1];
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/')
        len--;
    const char *start = memrchr(path, '/', len);
    start = start ? start + 1 : path;
    size_t n = (size_t)(path + len - start);
    uint64_t number;
    if (n > NAME_MAX)
        return false;
    memcpy(name, start, n);
    name[n] = '\0';
    return ck_iteration_dir_name(name, &number);
}

/* Anchored on the right: the prefix is free text and may hold '-'. */
bool ck_iteration_file_name(const char *name, int *kind, uint64_t *i)
{
    static const char ext[] = ".safetensors";
    size_t len = strlen(name), el = sizeof ext - 1;
    if (len <= el || strcmp(name + len - el, ext) != 0)
        return false;
    len -= el;
    const char *n_dash = memrchr(name, '-', len);
    if (n_dash == NULL)
        return false;
    const char *i_dash = memrchr(name, '-', (size_t)(n_dash - name));
    uint64_t n;
    if (i_dash == NULL || !digits(n_dash + 1, len - (size_t)(n_dash + 1 - name), &n) ||
        !digits(i_dash + 1, (size_t)(n_dash - i_dash - 1), i))
        return false;
    for (int k = 0; k < 2; k++) {
        const char *word = k == 0 ? "model" : "opt";
        size_t wl = strlen(word);
        const char *w = i_dash - wl;
        if (w >= name && memcmp(w, word, wl) == 0 && (w == name || w[-1] == '-')) {
            *kind = k;
            return true;
        }
    }
    return false;
}

/* ---- the files -------------------------------------------------------- */

typedef struct shard_file {
    char *name;
    int kind;
    uint64_t i;
} shard_file;

static int cmp_shard(const void *a, const void *b)
{
    const shard_file *x = a, *y = b;
    if (x->kind != y->kind)
        return x->kind - y->kind;
    if (x->i != y->i)
        return x->i < y->i ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* The shard files of the directory, in reading order; whether it holds
 * metadata.json. */
static int list_files(int dfd, const char *path, shard_file **out, size_t *n_out,
                      bool *has_meta, ck_error *err)
{
    DIR *d = ck_list_dir(dfd);
    if (d == NULL)
        return ck_fail_errno(err, errno, "%s: cannot list the directory", path);
    shard_file *f = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    struct dirent *de;
    *has_meta = false;
    while (rc == 0 && (errno = 0, de = readdir(d)) != NULL) {
        struct stat st;
        int kind;
        uint64_t i;
        bool meta = strcmp(de->d_name, METADATA) == 0;
        if (!meta && !ck_iteration_file_name(de->d_name, &kind, &i))
            continue;
        if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
            continue; /* gone, or not a file: not one of the checkpoint's */
        if (meta) {
            *has_meta = true;
        } else if (n == CK_ITER_MAX_FILES) {
            rc = ck_fail(err, EMFILE, "%s: more than %d shard files", path, CK_ITER_MAX_FILES);
        } else if (n == cap && (cap = cap ? cap * 2 : 16,
                                f = reallocarray(f, cap, sizeof *f)) == NULL) {
            rc = ck_nomem(err, path);
        } else if ((f[n].name = strdup(de->d_name)) == NULL) {
            rc = ck_nomem(err, path);
        } else {
            f[n].kind = kind;
            f[n++].i = i;
        }
    }
    if (rc == 0 && errno != 0)
        rc = ck_fail_errno(err, errno, "%s: cannot list the directory", path);
    closedir(d);
    if (rc == 0 && n == 0)
        rc = ck_fail(err, EINVAL, "%s: no model or optimizer shard files "
                     "([<prefix>-]model-NNNNNNN-NNNNNNN.safetensors)", path);
    if (rc == 0)
        qsort(f, n, sizeof *f, cmp_shard);
    *out = f;
    *n_out = n;
    return rc;
}

static int cmp_file_name(const void *a, const void *b, void *names)
{
    char **n = names;
    return strcmp(n[*(const uint32_t *)a], n[*(const uint32_t *)b]);
}

static int open_files(iter *it, int dfd, ck_model_dir *root, const char *below,
                      shard_file *f, size_t n, const ck_open_opts *o, bool watch,
                      ck_error *err)
{
    it->file_names = calloc(n, sizeof *it->file_names);
    it->by_file_name = calloc(n, sizeof *it->by_file_name);
    if (it->file_names == NULL || it->by_file_name == NULL)
        return ck_nomem(err, it->path);
    for (size_t i = 0; i < n; i++) {
        char file[PATH_MAX];
        if ((size_t)snprintf(file, sizeof file, "%s/%s", it->path, f[i].name) >= sizeof file)
            return ck_fail(err, ENAMETOOLONG, "%s: the path is too long", it->path);
        ck_model_dir *d = ck_dir_in(dfd, it->path, f[i].name, err);
        if (d == NULL)
            return -1;
        if (root != NULL && ck_dir_set_root(d, root, below, err) < 0) {
            ck_dir_unref(d);
            return -1;
        }
        if (watch && i == 0)
            ck_dir_watch_files(d);
        else if (watch)
            ck_dir_share_watch(d, it->files->models[0]->dir->watch);
        ck_open_opts member = *o;
        member.index = NULL; /* read through the iteration's model: model.h */
        ck_model *m = ck_model_open_at(d, file, &member, err);
        ck_dir_unref(d);
        if (m == NULL || ck_mset_put(it->files, (uint32_t)i, m, err) < 0)
            return -1;
        it->file_names[i] = f[i].name;
        f[i].name = NULL; /* the iter's now */
        it->by_file_name[i] = (uint32_t)i;
    }
    qsort_r(it->by_file_name, n, sizeof *it->by_file_name, cmp_file_name, it->file_names);
    return 0;
}

/* The model index of the shard file called name, or -1. */
static long file_index(const iter *it, const char *name)
{
    size_t lo = 0, hi = it->files->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(it->file_names[it->by_file_name[mid]], name);
        if (c == 0)
            return it->by_file_name[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

/* ---- metadata.json ---------------------------------------------------- */

static int meta_fail(const iter *it, ck_error *err, const char *name, const char *what)
{
    char q[CK_QUOTE_BUF];
    if (name == NULL)
        return ck_fail(err, EINVAL, "%s/" METADATA ": %s", it->path, what);
    return ck_fail(err, EINVAL, "%s/" METADATA ": parameter '%s': %s", it->path,
                   ck_quote(q, name, strlen(name)), what);
}

static json_t *read_metadata(const iter *it, int dfd, ck_error *err)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/" METADATA, it->path);
    struct stat st;
    int fd = ck_open_regular(dfd, METADATA, O_RDONLY | O_NOFOLLOW, 0, &st);
    if (fd < 0) {
        if (st.st_mode != 0)
            ck_fail(err, EINVAL, "%s: is %s, not a regular file", path, ck_file_kind(st.st_mode));
        else
            ck_fail_errno(err, errno, "%s: cannot open", path);
        return NULL;
    }
    char *text = NULL;
    json_t *root = NULL;
    if ((uint64_t)st.st_size > CK_ITER_MAX_METADATA)
        ck_fail(err, EINVAL, "%s: too big (at most 64 MiB)", path);
    else if ((text = malloc((size_t)st.st_size + 1)) == NULL)
        ck_nomem(err, path);
    else if (pread(fd, text, (size_t)st.st_size, 0) != st.st_size)
        ck_fail_errno(err, errno ? errno : EIO, "%s: cannot read", path);
    else
        root = ck_st_parse_json(text, (size_t)st.st_size, 0, path, "metadata", err);
    free(text);
    close(fd);
    return root;
}

/* "('<name>', (<s>,))", Python's str() of the shard id: the name (without
 * escapes: one with a backslash is not looked up) and s. */
static bool parse_key(const char *key, stored *out)
{
    if (key[0] != '(' || (key[1] != '\'' && key[1] != '"'))
        return false;
    char quote = key[1];
    const char *name = key + 2, *end = strchr(name, quote);
    if (end == NULL || memchr(name, '\\', (size_t)(end - name)) != NULL ||
        strncmp(end + 1, ", (", 3) != 0)
        return false;
    const char *p = end + 4;
    uint64_t s = 0;
    if (*p < '0' || *p > '9')
        return false;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (s > (UINT64_MAX - 9) / 10)
            return false;
        s = s * 10 + (uint64_t)(*p - '0');
    }
    if (strcmp(p, ",))") != 0)
        return false;
    *out = (stored){.name = name, .len = (size_t)(end - name), .s = s};
    return true;
}

static int cmp_stored(const void *a, const void *b)
{
    const stored *x = a, *y = b;
    int c = memcmp(x->name, y->name, x->len < y->len ? x->len : y->len);
    if (c == 0)
        c = (x->len > y->len) - (x->len < y->len);
    if (c == 0)
        c = (x->s > y->s) - (x->s < y->s);
    return c;
}

static int read_storage(iter *it, ck_error *err)
{
    json_t *sd = json_object_get(it->root, "storage_data");
    if (!json_is_object(sd))
        return meta_fail(it, err, NULL, "no storage_data object");
    it->store = calloc(json_object_size(sd) + 1, sizeof *it->store);
    if (it->store == NULL)
        return ck_nomem(err, it->path);
    const char *key;
    json_t *v;
    json_object_foreach(sd, key, v) {
        stored *s = &it->store[it->n_store];
        json_t *first = json_array_get(v, 0);
        const char *file = json_string_value(json_object_get(first, "file_name"));
        if (!parse_key(key, s))
            continue; /* a name written with escapes: its slices are missing, said later */
        if (file == NULL) {
            char q[CK_QUOTE_BUF];
            return meta_fail(it, err, NULL, ck_quote(q, key, strlen(key)));
        }
        s->file = file;
        it->n_store++;
    }
    qsort(it->store, it->n_store, sizeof *it->store, cmp_stored);
    return 0;
}

static const stored *find_stored(const iter *it, const char *name, size_t len, uint64_t s)
{
    stored key = {.name = name, .len = len, .s = s};
    return bsearch(&key, it->store, it->n_store, sizeof *it->store, cmp_stored);
}

static int read_metadata_tables(iter *it, int dfd, ck_error *err)
{
    if ((it->root = read_metadata(it, dfd, err)) == NULL)
        return -1;
    it->params = json_object_get(it->root, "state_dict_metadata");
    if (!json_is_object(it->params))
        return meta_fail(it, err, NULL, "no state_dict_metadata object");
    return read_storage(it, err);
}

/* ---- where each name first appears ------------------------------------ */

typedef struct occurrence {
    const ck_tensor *t;
    uint32_t file;
    uint32_t id;
} occurrence;

static int cmp_names(const ck_tensor *s, const ck_tensor *t)
{
    int c = memcmp(s->name, t->name, s->name_len < t->name_len ? s->name_len : t->name_len);
    return c != 0 ? c : (s->name_len > t->name_len) - (s->name_len < t->name_len);
}

static int cmp_occurrence(const void *a, const void *b)
{
    const occurrence *x = a, *y = b;
    int c = cmp_names(x->t, y->t);
    return c != 0 ? c : (x->file > y->file) - (x->file < y->file);
}

/* first[f][id]: 1 where tensor id of file f is its name's first appearance,
 * 2 when the name is in other files too. */
static int find_firsts(iter *it, ck_error *err)
{
    size_t total = 0;
    ck_model_set *fs = it->files;
    it->first = calloc(fs->n, sizeof *it->first);
    if (it->first == NULL)
        return ck_nomem(err, it->path);
    for (uint32_t f = 0; f < fs->n; f++) {
        total += fs->models[f]->index.n_live;
        if ((it->first[f] = calloc(fs->models[f]->index.count + 1, 1)) == NULL)
            return ck_nomem(err, it->path);
    }
    occurrence *all = malloc((total ? total : 1) * sizeof *all);
    if (all == NULL)
        return ck_nomem(err, it->path);
    size_t n = 0;
    for (uint32_t f = 0; f < fs->n; f++) {
        const ck_index *ix = &fs->models[f]->index;
        for (size_t k = 0; k < ix->n_live; k++)
            all[n++] = (occurrence){.t = &ix->tensors[ix->live[k]], .file = f,
                                    .id = ix->live[k]};
    }
    qsort(all, n, sizeof *all, cmp_occurrence);
    for (size_t i = 0; i < n; i++) {
        bool starts = i == 0 || cmp_names(all[i - 1].t, all[i].t) != 0;
        bool more = i + 1 < n && cmp_names(all[i].t, all[i + 1].t) == 0;
        if (starts)
            it->first[all[i].file][all[i].id] = more ? 2 : 1;
    }
    free(all);
    return 0;
}

/* ---- one tensor ------------------------------------------------------- */

static const char *quoted(const ck_tensor *t, char q[CK_QUOTE_BUF])
{
    return ck_quote(q, t->name, t->name_len);
}

/* A JSON array of at most CK_MAX_DIMS integers in [lo, INT64_MAX]. */
static long int_array(const json_t *a, int64_t lo, int64_t *out)
{
    if (!json_is_array(a) || json_array_size(a) > CK_MAX_DIMS)
        return -1;
    for (size_t i = 0; i < json_array_size(a); i++) {
        const json_t *v = json_array_get(a, i);
        if (!json_is_integer(v) || json_integer_value(v) < lo)
            return -1;
        out[i] = json_integer_value(v);
    }
    return (long)json_array_size(a);
}

/* A parameter's description in metadata.json. */
typedef struct param_meta {
    int64_t global[CK_MAX_DIMS], frag[CK_MAX_DIMS], local[CK_MAX_DIMS];
    uint32_t ndim;
    uint64_t slices;            /* the grid's size */
} param_meta;

/* Every chunk names a distinct slice of the local shape, and all are there. */
static int check_chunks(const iter *it, const char *name, const json_t *chunks,
                        const param_meta *pm, ck_error *err)
{
    if (!json_is_array(chunks) || json_array_size(chunks) != pm->slices)
        return meta_fail(it, err, name, "the chunk list does not hold one chunk per slice");
    uint8_t *seen = calloc(pm->slices, 1);
    if (seen == NULL)
        return ck_nomem(err, it->path);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < pm->slices; i++) {
        const json_t *c = json_array_get(chunks, i);
        int64_t off[CK_MAX_DIMS], local[CK_MAX_DIMS];
        long n_off = int_array(json_object_get(c, "global_offset"), 0, off);
        long n_local = int_array(json_object_get(c, "local_shape"), 0, local);
        if (n_off != 1 || (uint64_t)off[0] >= pm->slices || seen[off[0]])
            rc = meta_fail(it, err, name, "a chunk's global_offset is not a slice of its own");
        else if (n_local != (long)pm->ndim ||
                 memcmp(local, pm->local, pm->ndim * sizeof *local) != 0)
            rc = meta_fail(it, err, name, "a chunk's local_shape is not global_shape divided "
                           "by axis_fragmentations");
        else
            seen[off[0]] = 1;
    }
    free(seen);
    return rc;
}

static int read_param_meta(const iter *it, const char *name, const json_t *pj, param_meta *pm,
                           ck_error *err)
{
    long n = int_array(json_object_get(pj, "global_shape"), 0, pm->global);
    long nf = int_array(json_object_get(pj, "axis_fragmentations"), 1, pm->frag);
    if (n < 0 || nf != n)
        return meta_fail(it, err, name, "global_shape and axis_fragmentations are not lists "
                         "of as many sizes");
    const json_t *layout = json_object_get(pj, "layout");
    if (json_is_true(json_object_get(layout, "interleaved_parallel")))
        return meta_fail(it, err, name, "an interleaved_parallel layout is not merged");
    pm->ndim = (uint32_t)n;
    pm->slices = 1;
    for (uint32_t d = 0; d < pm->ndim; d++) {
        if (pm->global[d] % pm->frag[d] != 0 ||
            __builtin_mul_overflow(pm->slices, (uint64_t)pm->frag[d], &pm->slices) ||
            pm->slices > (1u << 24))
            return meta_fail(it, err, name, "axis_fragmentations does not divide global_shape "
                             "into at most 2^24 slices");
        pm->local[d] = pm->global[d] / pm->frag[d];
    }
    return check_chunks(it, name, json_object_get(pj, "chunk"), pm, err);
}

static bool has_dims(const ck_tensor *t, const int64_t *dims, uint32_t ndim)
{
    return t->ndim == ndim && memcmp(t->dims, dims, ndim * sizeof *dims) == 0;
}

static int slice_fail(const iter *it, uint32_t f, const ck_tensor *t, ck_error *err,
                      const char *what)
{
    char q[CK_QUOTE_BUF];
    return ck_fail(err, EINVAL, "%s/%s: parameter '%s': %s", it->path, it->file_names[f],
                   quoted(t, q), what);
}

/* Slice s of parameter t0's name: its stored tensor, checked. */
static const ck_tensor *find_slice(const iter *it, const ck_tensor *t0, const param_meta *pm,
                                   uint64_t s, uint32_t *file, ck_error *err)
{
    char q[CK_QUOTE_BUF], why[160];
    const stored *st = find_stored(it, t0->name, t0->name_len, s);
    long f = st == NULL ? -1 : file_index(it, st->file);
    const ck_tensor *t = f < 0 ? NULL : ck_mset_find(it->files, (uint32_t)f, t0->name,
                                                     t0->name_len);
    if (st == NULL) {
        snprintf(why, sizeof why, "no storage_data entry for slice %llu", (unsigned long long)s);
        meta_fail(it, err, t0->name, why);
    } else if (f < 0) {
        ck_fail(err, ENOENT, "%s/" METADATA ": parameter '%s': slice %llu is stored in '%s', "
                "which is not a shard file here", it->path, quoted(t0, q),
                (unsigned long long)s, st->file);
    } else if (t == NULL) {
        ck_fail(err, EINVAL, "%s/%s: no tensor '%s', where metadata.json stores its slice %llu",
                it->path, it->file_names[f], quoted(t0, q), (unsigned long long)s);
    } else if (t->dtype != t0->dtype) {
        snprintf(why, sizeof why, "type %s, the first slice's is %s", t->type_name,
                 t0->type_name);
        slice_fail(it, (uint32_t)f, t, err, why);
        t = NULL;
    } else if (!has_dims(t, pm->local, pm->ndim) && !has_dims(t, pm->global, pm->ndim)) {
        slice_fail(it, (uint32_t)f, t, err, "a slice of another shape than metadata.json's "
                   "local_shape");
        t = NULL;
    }
    if (t != NULL)
        *file = (uint32_t)f;
    return t;
}

/* The merged tensor for t0's name: pm's shape, made of pieces. */
static int new_tensor(iter *it, const ck_tensor *t0, const param_meta *pm,
                      const ck_grid_piece *pieces, ck_error *err)
{
    char q[CK_QUOTE_BUF], what[CK_QUOTE_BUF + PATH_MAX];
    ck_index *ix = &it->m->index;
    long id = ck_index_add(ix);
    char *name = ck_arena_strndup(&ix->arena, t0->name, t0->name_len);
    int64_t *dims = ck_arena_alloc(&ix->arena, (pm->ndim ? pm->ndim : 1) * sizeof *dims);
    if (id < 0 || name == NULL || dims == NULL)
        return ck_nomem(err, it->path);
    memcpy(dims, pm->global, pm->ndim * sizeof *dims);
    const ck_tensor *p0 = pieces[0].t;
    ck_tensor *t = &ix->tensors[id];
    *t = (ck_tensor){.name = name, .name_len = t0->name_len, .type_name = p0->type_name,
                     .dtype = p0->dtype, .dims = dims, .ndim = pm->ndim,
                     .nbytes = p0->nbytes * pm->slices, .read_only = true};
    uint64_t grid[CK_MAX_DIMS];
    for (uint32_t d = 0; d < pm->ndim; d++)
        grid[d] = (uint64_t)pm->frag[d];
    snprintf(what, sizeof what, "%s: parameter '%s'", it->path, quoted(t0, q));
    return ck_grid_place(&ix->arena, t, grid, NULL, pieces, what, err);
}

/* Tensor t0 of file f, the first appearance of its name, into the model:
 * as stored, or put together from the slices metadata.json describes. */
static int add_tensor(iter *it, uint32_t f, const ck_tensor *t0, ck_error *err)
{
    const json_t *pj = it->params ? json_object_getn(it->params, t0->name, t0->name_len) : NULL;
    if (it->params == NULL && it->first[f][t0 - it->files->models[f]->index.tensors] == 2)
        return slice_fail(it, f, t0, err, "in several files (and no metadata.json to say how "
                          "they make one tensor)");
    param_meta pm = {.slices = 1, .ndim = t0->ndim};
    memcpy(pm.global, t0->dims, t0->ndim * sizeof *pm.global);
    for (uint32_t d = 0; d < pm.ndim; d++)
        pm.frag[d] = 1;
    if (pj != NULL && read_param_meta(it, t0->name, pj, &pm, err) < 0)
        return -1;
    it->n_described += pj != NULL;
    ck_grid_piece *pieces = calloc(pm.slices, sizeof *pieces);
    if (pieces == NULL)
        return ck_nomem(err, it->path);
    int rc = 0;
    for (uint64_t s = 0; rc == 0 && s < pm.slices; s++) {
        uint32_t file = f;
        const ck_tensor *t = pj == NULL ? t0 : find_slice(it, t0, &pm, s, &file, err);
        if (t == NULL) {
            rc = -1;
            break;
        }
        ck_grid_piece p = {.t = t, .src_base = it->files->src_base[file]};
        if (pm.slices > 1 && has_dims(t, pm.global, pm.ndim)) {
            pieces[0] = p; /* the whole tensor, stored by a writer that gathered it */
            pm.slices = 1;
            for (uint32_t d = 0; d < pm.ndim; d++)
                pm.frag[d] = 1;
        } else {
            pieces[s] = p;
        }
    }
    if (rc == 0)
        rc = new_tensor(it, t0, &pm, pieces, err);
    free(pieces);
    return rc;
}

/* metadata.json describes a parameter no shard file holds: name it. */
static int undescribed(const iter *it, ck_error *err)
{
    const char *name;
    json_t *v;
    json_object_foreach(it->params, name, v) {
        bool held = false;
        for (uint32_t f = 0; !held && f < it->files->n; f++)
            held = ck_mset_find(it->files, f, name, strlen(name)) != NULL;
        if (!held)
            return meta_fail(it, err, name, "no shard file holds it");
    }
    return meta_fail(it, err, NULL, "describes parameters no shard file holds");
}

/* Every name of every file, where it first appears. */
static int add_all(iter *it, ck_error *err)
{
    if (find_firsts(it, err) < 0 || ck_mset_add_views(it->files, it->m, err) < 0)
        return -1;
    for (uint32_t f = 0; f < it->files->n; f++) {
        const ck_index *ix = &it->files->models[f]->index;
        for (size_t k = 0; k < ix->n_live; k++)
            if (it->first[f][ix->live[k]] != 0 &&
                add_tensor(it, f, &ix->tensors[ix->live[k]], err) < 0)
                return -1;
    }
    if (it->params != NULL && it->n_described != json_object_size(it->params))
        return undescribed(it, err);
    return ck_index_finalize(&it->m->index, it->path, err);
}

static void iter_free(iter *it)
{
    for (uint32_t f = 0; it->file_names != NULL && f < it->files->cap; f++)
        free(it->file_names[f]);
    for (uint32_t f = 0; it->first != NULL && f < it->files->n; f++)
        free(it->first[f]);
    free(it->first);
    free(it->file_names);
    free(it->by_file_name);
    free(it->store);
    json_decref(it->root);
}

ck_model *ck_iteration_open_at(int root_fd, const char *below, const char *path,
                               const ck_open_opts *o, bool watch, ck_error *err)
{
    int dfd = root_fd;
    ck_model_dir *root = NULL; /* the run's directory, for its files' checks */
    if (below != NULL &&
        ((root = ck_dir_in(root_fd, path, ".", err)) == NULL ||
         (dfd = openat(root_fd, below, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)) {
        if (root != NULL)
            ck_fail_errno(err, errno, "%s: cannot open", path);
        ck_dir_unref(root);
        return NULL;
    }
    shard_file *f = NULL;
    size_t n = 0;
    bool has_meta = false;
    iter it = {.path = path};
    ck_model *m = NULL;
    int rc = list_files(dfd, path, &f, &n, &has_meta, err);
    if (rc == 0 && (it.files = ck_mset_new((uint32_t)n, path, err)) == NULL)
        rc = -1;
    if (rc == 0)
        rc = open_files(&it, dfd, root, below, f, n, o, watch, err);
    if (rc == 0 && has_meta)
        rc = read_metadata_tables(&it, dfd, err);
    if (rc == 0 && (m = ck_model_assembled(it.files->models[0]->dir, path, &iteration_format,
                                           err)) == NULL)
        rc = -1;
    if (rc == 0) {
        m->state = it.files; /* closed with m from here on */
        snprintf(it.files->notes, sizeof it.files->notes, ", %u shard files%s", it.files->n,
                 has_meta ? "" : ", no metadata.json");
        ck_mset_stat(it.files, &m->st);
        it.m = m;
        rc = add_all(&it, err);
    }
    iter_free(&it);
    if (m == NULL)
        ck_mset_free(it.files);
    for (size_t i = 0; i < n; i++)
        free(f[i].name);
    free(f);
    if (rc < 0 && m != NULL) {
        ck_model_close(m);
        m = NULL;
    }
    if (dfd != root_fd)
        close(dfd);
    ck_dir_unref(root);
    return m;
}

ck_model *ck_iteration_open(const char *path, const ck_open_opts *o, bool watch,
                            ck_error *err)
{
    int dfd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        ck_fail_errno(err, errno, "%s: cannot open the directory", path);
        return NULL;
    }
    ck_model *m = ck_iteration_open_at(dfd, NULL, path, o, watch, err);
    close(dfd);
    return m;
}

static ck_model *open_iteration(const char *path, const ck_collection_opts *o, ck_error *err)
{
    return ck_iteration_open(path, &o->open, o->watch, err);
}

static ck_model *open_iteration_at(int dfd, const char *below, const char *path,
                                   const ck_collection_opts *o, ck_error *err)
{
    if (strchr(below, '/') != NULL) { /* openat would follow a link on the way */
        ck_fail(err, EINVAL, "%s: not a single directory name", path);
        return NULL;
    }
    return ck_iteration_open_at(dfd, below, path, &o->open, o->watch, err);
}

/* By its name alone; whether it is a directory holding shard files,
 * stat_iteration says. */
static bool probe_iteration_at(int dfd, const char *name)
{
    (void)dfd;
    uint64_t n;
    return ck_iteration_dir_name(name, &n);
}

/* The first shard file in reading order (see the top): model before
 * optimizer, then by index, then by name. */
static bool reads_before(int kind, uint64_t i, const char *name, int kind0, uint64_t i0,
                         const char *name0)
{
    if (kind != kind0)
        return kind < kind0;
    return i != i0 ? i < i0 : strcmp(name, name0) < 0;
}

/* Its shard files' attributes together, as the model opened gives them
 * (ck_mset_stat): the owner is the first file's. */
static int stat_iteration(int dfd, const char *name, struct stat *all)
{
    int ifd = openat(dfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = ifd < 0 ? NULL : ck_list_dir(ifd);
    if (ifd >= 0)
        close(ifd);
    if (d == NULL)
        return -1; /* not a directory (no link is followed), or unreadable */
    *all = (struct stat){.st_mode = S_IFREG | 07777};
    struct stat st;
    char first[NAME_MAX + 1] = "";
    int kind0 = 0;
    uint64_t i0 = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        int kind;
        uint64_t i;
        if (!ck_iteration_file_name(de->d_name, &kind, &i) ||
            fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
            continue;
        if (first[0] == '\0' || reads_before(kind, i, de->d_name, kind0, i0, first)) {
            snprintf(first, sizeof first, "%s", de->d_name);
            kind0 = kind;
            i0 = i;
            all->st_uid = st.st_uid;
            all->st_gid = st.st_gid;
        }
        ck_mset_stat_join(all, &st);
    }
    closedir(d);
    return first[0] != '\0' ? 0 : -1; /* no shard file: not one yet */
}

/* mindformers writes the tracker once every file of the iteration is
 * written: its commit point. */
static const ck_collection_done iteration_done = {
    .number = ck_iteration_dir_name,
    .tracker = "latest_checkpointed_iteration.txt",
    .stat_at = stat_iteration,
};

const ck_collection ck_collection_iteration = {
    .name = "iteration", .title = "an iteration directory", .probe = ck_iteration_dir_path,
    .open = open_iteration, .probe_at = probe_iteration_at, .open_at = open_iteration_at,
    .done = &iteration_done,
};
