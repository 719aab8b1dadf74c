/*
 * ckptfs-dump: list a model's tensors without mounting it.
 *
 * It uses the codec alone (no FUSE), like squashfuse_ls: handy to see what a
 * mount would show, where each tensor's bytes are, and why a file is refused.
 *
 *   ckptfs-dump [--nocrc] [-o key_file=PATH] [-o tmp_max=SIZE] MODEL
 *   one line per visible tensor: directory name, type, shape, bytes, extents
 *   (of the plaintext, for an encrypted or compressed model), each OFF+LEN,
 *   FILE:OFF+LEN when it is in a data file (an ONNX external data file, a
 *   shard of a safetensors set), FILE relative to the model's directory
 *
 * The key of an encrypted model comes as for a mount: -o key_file=PATH or
 * CKPTFS_KEY_HEX; a zstd model without a seek table is decompressed into
 * $TMPDIR within -o tmp_max, as for a mount.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "model.h"
#include "oneflow_meta.h"

static void print_tensor(const ck_model *m, const ck_tensor *t)
{
    printf("%s\t%s\t[", t->dir_name, t->type_name);
    for (uint32_t i = 0; i < t->ndim; i++)
        printf("%s%" PRId64, i ? "," : "", t->dims[i]);
    printf("]\t%" PRIu64 "\t", t->nbytes);
    if (t->dtype->kind == CK_KIND_STR)
        printf("decoded ");
    for (uint32_t i = 0; i < t->n_ext; i++) {
        const ck_extent *e = ck_tensor_ext(t, i);
        printf("%s", i ? "," : "");
        if (ck_model_is_data_file(m, e->src)) {
            const char *path = m->sources[e->src]->path, *rel = ck_dir_rel(m->dir, path);
            printf("%s:", rel != NULL ? rel : path);
        }
        printf("%" PRIu64 "+%" PRIu64, e->off, e->len);
    }
    printf("\n");
}

static const char *envelope_name(const ck_envelope *env)
{
    switch (env->wrap) {
    case CK_WRAP_NONE: return "";
    case CK_WRAP_ZSTD: return env->seekable ? "seekable zstd" : "zstd";
    case CK_WRAP_CIPHER: break;
    }
    if (env->legacy)
        return "AES-GCM without tag (MindSpore 1.3-1.6)";
    return env->mode == CK_AES_GCM ? "AES-GCM" : "AES-CBC";
}

int main(int argc, char **argv)
{
    ck_open_opts opts = {0};
    const char *path = NULL, *key_file = NULL;
    size_t tmp_max = 0;
    bool bad = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--nocrc") == 0)
            opts.skip_crc = true;
        else if (strcmp(argv[i], "-o") == 0 && i + 1 < argc &&
                 strncmp(argv[i + 1], "key_file=", 9) == 0)
            key_file = argv[++i] + 9;
        else if (strcmp(argv[i], "-o") == 0 && i + 1 < argc &&
                 strncmp(argv[i + 1], "tmp_max=", 8) == 0)
            bad |= ck_parse_size(argv[++i] + 8, &tmp_max) < 0;
        else if (path == NULL && argv[i][0] != '-')
            path = argv[i];
        else
            bad = true;
    }
    if (path == NULL || bad) {
        fprintf(stderr, "usage: ckptfs-dump [--nocrc] [-o key_file=PATH] [-o tmp_max=SIZE] "
                "MODEL\n");
        return 2;
    }
    ck_error err = {0};
    ck_key key;
    if (ck_key_load(key_file, &key, &err) < 0) {
        fprintf(stderr, "ckptfs-dump: %s\n", err.msg);
        return 1;
    }
    opts.key = &key;
    opts.tmp_max = tmp_max;
    ck_model *m = ck_model_open(path, &opts, &err);
    ck_key_wipe(&key);
    if (m == NULL) {
        fprintf(stderr, "ckptfs-dump: %s\n", err.msg);
        return 1;
    }
    const ck_index *ix = &m->index;
    printf("# %s: format %s, %zu tensors (%zu records), index memory %zu bytes%s%s%s\n",
           m->path, m->format->name, ix->n_live, ix->count, ck_index_memory(ix),
           m->format->notes ? m->format->notes(m) : "", m->env.wrap == CK_WRAP_NONE ? "" : ", ",
           envelope_name(&m->env));
    for (size_t i = 0; i < ix->n_live; i++)
        print_tensor(m, &ix->tensors[ix->live[i]]);
    ck_model_close(m);
    return 0;
}
