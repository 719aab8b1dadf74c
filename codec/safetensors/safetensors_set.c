/* SPDX-License-Identifier: Apache-2.0 */
/*
 * safetensors_set: a Hugging Face sharded set, mounted through its index
 * file as one model.
 *
 * transformers' save_pretrained (and huggingface_hub's
 * save_torch_state_dict) split a large model into shards
 * "model-00001-of-00003.safetensors"... and write beside them
 * "model.safetensors.index.json":
 *
 *   {"metadata": {"total_size": 16060522496},
 *    "weight_map": {"lm_head.weight": "model-00003-of-00003.safetensors", ...}}
 *
 * "weight_map" names, for every tensor, the shard that holds it; loaders
 * open the shards it lists.  Each shard is an ordinary safetensors file,
 * read by safetensors_reader.c as a data file of the model, so its
 * tensors' bytes are extents of the shard.  The tree lists the shards'
 * tensors shard by shard, shards in name order (which is their number),
 * each in its header's order.
 *
 * The set must agree with itself, as loaders assume: every tensor of a
 * shard is in the weight map under that shard, and every name the map
 * lists is in the shard it names; anything else is refused in one line
 * naming the tensor and both files, since a loader trusting either side
 * would otherwise see another model.  The index is parsed by jansson
 * (duplicate keys refused, the header's 100 MB bound).  Shard names are
 * relative paths beneath the index's directory; each shard is opened once
 * (ck_model_open_data_file: no symbolic link, a regular file, not a second
 * name of a file already open), and record_source says which shard holds
 * a tensor's record.  codec/safetensors/safetensors_set_writer.c saves the
 * set.
 */
#include "safetensors_set.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "../core/model.h"
#include "safetensors_reader.h"

/* The index is JSON like a header; the same bound. */
#define CK_ST_MAX_INDEX CK_ST_MAX_HEADER

typedef struct set_reader {
    ck_model *m;
    ck_st_info *info;
    json_t *weight_map;
    ck_error *err;
} set_reader;

static int nomem(set_reader *r)
{
    return ck_nomem(r->err, r->m->path);
}

static json_t *parse_index(set_reader *r)
{
    ck_source *src = r->m->sources[0];
    if (src->size > CK_ST_MAX_INDEX) {
        ck_fail(r->err, EINVAL, "%s: offset 0: an index of %llu bytes, over the limit of %u",
                r->m->path, (unsigned long long)src->size, CK_ST_MAX_INDEX);
        return NULL;
    }
    char *text = malloc(src->size + 1);
    if (text == NULL) {
        nomem(r);
        return NULL;
    }
    json_t *root = NULL;
    if (ck_source_read(src, text, (size_t)src->size, 0, r->err) == 0)
        root = ck_st_parse_json(text, (size_t)src->size, 0, r->m->path, "the index", r->err);
    free(text);
    return root;
}

/* A shard name the index may give: relative, printable, NUL-free. */
static int check_shard_name(set_reader *r, const json_t *v, const char *tensor)
{
    char q[CK_QUOTE_BUF], qn[CK_QUOTE_BUF];
    if (!json_is_string(v))
        return ck_fail(r->err, EINVAL, "%s: \"weight_map\": the value of '%s' is not a file "
                       "name", r->m->path, ck_quote(q, tensor, strlen(tensor)));
    const char *name = json_string_value(v);
    size_t len = json_string_length(v);
    bool printable = len > 0 && memchr(name, '\0', len) == NULL && name[0] != '/';
    for (size_t i = 0; printable && i < len; i++)
        printable = (unsigned char)name[i] >= 0x20 && name[i] != 0x7f;
    if (!printable)
        return ck_fail(r->err, EPERM, "%s: \"weight_map\": tensor '%s' is in '%s', which is "
                       "not a file name inside the index's directory", r->m->path,
                       ck_quote(q, tensor, strlen(tensor)), ck_quote(qn, name, len));
    return 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The shards the weight map names, each once, in name order. */
static int list_shards(set_reader *r, const char ***out, size_t *n_out)
{
    size_t n = json_object_size(r->weight_map), k = 0;
    const char **names = malloc((n + 1) * sizeof *names);
    if (names == NULL)
        return nomem(r);
    const char *key;
    json_t *v;
    json_object_foreach(r->weight_map, key, v) {
        if (check_shard_name(r, v, key) < 0) {
            free(names);
            return -1;
        }
        names[k++] = json_string_value(v);
    }
    qsort(names, k, sizeof *names, by_name);
    size_t u = 0;
    for (size_t i = 0; i < k; i++)
        if (u == 0 || strcmp(names[u - 1], names[i]) != 0)
            names[u++] = names[i];
    if (u >= CK_MAX_SOURCES) {
        free(names);
        return ck_fail(r->err, EMFILE, "%s: %zu shards, more than %d", r->m->path, u,
                       CK_MAX_SOURCES - 1);
    }
    *out = names;
    *n_out = u;
    return 0;
}

/* Each tensor of file f is in the weight map, under f. */
static int check_listed(set_reader *r, const ck_st_file *f)
{
    char q[CK_QUOTE_BUF], qa[CK_QUOTE_BUF], qb[CK_QUOTE_BUF];
    for (uint32_t id = f->first; id < f->end; id++) {
        const ck_tensor *t = &r->m->index.tensors[id];
        const json_t *v = json_object_get(r->weight_map, t->name);
        const char *shard = json_string_value(v);
        if (shard == NULL)
            return ck_fail(r->err, EINVAL, "%s: tensor '%s' of shard '%s' is not in the index's "
                           "\"weight_map\"", r->m->path, ck_quote(q, t->name, t->name_len),
                           ck_quote(qa, f->rel, strlen(f->rel)));
        if (strcmp(shard, f->rel) != 0)
            return ck_fail(r->err, EINVAL, "%s: tensor '%s' is in shard '%s', but the index's "
                           "\"weight_map\" puts it in '%s'", r->m->path,
                           ck_quote(q, t->name, t->name_len),
                           ck_quote(qa, f->rel, strlen(f->rel)),
                           ck_quote(qb, shard, strlen(shard)));
    }
    return 0;
}

/* Every name of the weight map was found in its shard: with each tensor
 * listed under its own shard (check_listed), the counts tell, and the
 * name missing is looked for only when they differ. */
static int check_complete(set_reader *r)
{
    const ck_index *ix = &r->m->index;
    if (json_object_size(r->weight_map) == ix->count)
        return 0;
    json_t *seen = json_object();
    if (seen == NULL)
        return nomem(r);
    for (uint32_t id = 0; id < ix->count; id++)
        if (json_object_set_new(seen, ix->tensors[id].name, json_true()) < 0) {
            json_decref(seen);
            return nomem(r);
        }
    const char *key;
    json_t *v;
    int rc = 0;
    json_object_foreach(r->weight_map, key, v)
        if (json_object_get(seen, key) == NULL) {
            char q[CK_QUOTE_BUF], qs[CK_QUOTE_BUF];
            const char *shard = json_string_value(v);
            rc = ck_fail(r->err, EINVAL, "%s: the index's \"weight_map\" puts tensor '%s' in "
                         "shard '%s', which does not hold it", r->m->path,
                         ck_quote(q, key, strlen(key)), ck_quote(qs, shard, strlen(shard)));
            break;
        }
    json_decref(seen);
    return rc;
}

static int read_shards(set_reader *r)
{
    const char **names = NULL;
    size_t n = 0;
    if (list_shards(r, &names, &n) < 0)
        return -1;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const char *rel = ck_arena_strndup(&r->m->index.arena, names[i], strlen(names[i]));
        long sid = rel == NULL ? nomem(r) : ck_model_open_data_file(r->m, rel, r->err);
        rc = sid < 0 ? -1 : ck_st_read_file(r->m, r->info, (uint32_t)sid, rel, r->err);
        if (rc == 0)
            rc = check_listed(r, &r->info->files[r->info->n_files - 1]);
    }
    free(names);
    return rc == 0 ? check_complete(r) : rc;
}

static int read_index(set_reader *r, json_t *root)
{
    if (!json_is_object(root))
        return ck_fail(r->err, EINVAL, "%s: offset 0: the index is not a JSON object",
                       r->m->path);
    r->weight_map = json_object_get(root, "weight_map");
    if (!json_is_object(r->weight_map))
        return ck_fail(r->err, EINVAL, "%s: the index has no \"weight_map\" object (a sharded "
                       "set's index maps each tensor to its shard)", r->m->path);
    const json_t *meta = json_object_get(root, "metadata");
    if (meta != NULL && !json_is_null(meta)) {
        if (!json_is_object(meta))
            return ck_fail(r->err, EINVAL, "%s: the index's \"metadata\" is not an object",
                           r->m->path);
        r->info->set_metadata = json_dumps(meta, JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (r->info->set_metadata == NULL)
            return nomem(r);
    }
    return read_shards(r);
}

static int set_open(ck_model *m, const ck_open_opts *o, ck_error *err)
{
    (void)o;
    if (ck_envelope_is_wrapped(&m->env))
        return ck_fail(err, EINVAL, "%s: a sharded set's index is plain JSON; this one is "
                       "compressed or encrypted", m->path);
    ck_st_info *info = calloc(1, sizeof *info);
    if (info == NULL)
        return ck_nomem(err, m->path);
    m->state = info;
    set_reader r = {.m = m, .info = info, .err = err};
    json_t *root = parse_index(&r);
    if (root == NULL)
        return -1;
    int rc = read_index(&r, root);
    json_decref(root);
    return rc;
}

static bool set_is_data_file(const ck_model *m, uint32_t i)
{
    (void)m;
    (void)i;
    return true; /* every source past the index is a shard */
}

static uint32_t set_record_source(const ck_model *m, uint32_t id)
{
    const ck_st_file *f = ck_st_file_of(m, id);
    return f != NULL ? f->src : 0;
}

static const char *set_metadata(const ck_model *m)
{
    const ck_st_info *info = ck_st_info_of(m);
    return info != NULL ? info->set_metadata : NULL;
}

const ck_format ck_format_safetensors_set = {
    .name = "safetensors-set",
    .title = "sharded safetensors set",
    .extension = ".safetensors.index.json",
    .creatable = true,
    .open = set_open,
    .free_state = ck_st_info_free,
    .type_name = ck_st_type_name,
    .is_data_file = set_is_data_file,
    .record_source = set_record_source,
    .metadata = set_metadata,
};
