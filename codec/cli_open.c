/*
 * cli_open: how the command-line tools open a model (cli_open.h), in one
 * place so that ckptfs-dump and ckptfs-stat cannot drift apart.
 */
#include "cli_open.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dist_merge.h"
#include "iteration_dir.h"
#include "key.h"
#include "oneflow_dir.h"

const char *ck_cli_o_value(int argc, char **argv, int i, const char *name)
{
    size_t n = strlen(name);
    if (strcmp(argv[i], "-o") != 0 || i + 1 >= argc || strncmp(argv[i + 1], name, n) != 0 ||
        argv[i + 1][n] != '=')
        return NULL;
    return argv[i + 1] + n + 1;
}

int ck_cli_open_arg(ck_cli_open *o, int argc, char **argv, int *i)
{
    const char *v;
    if (strcmp(argv[*i], "--nocrc") == 0) {
        o->skip_crc = true;
        return 1;
    }
    if ((v = ck_cli_o_value(argc, argv, *i, "key_file")) != NULL) {
        o->key_file = v;
    } else if ((v = ck_cli_o_value(argc, argv, *i, "tmp_max")) != NULL) {
        if (ck_parse_size(v, &o->tmp_max) < 0)
            return -1;
    } else if ((v = ck_cli_o_value(argc, argv, *i, "strategy")) != NULL) {
        o->strategy = v;
    } else {
        return 0;
    }
    *i += 1;
    return 1;
}

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

bool ck_cli_opens_dir(const ck_cli_open *o, const char *path)
{
    return o->strategy != NULL || ck_iteration_dir_path(path) || ck_oneflow_dir_path(path);
}

ck_model *ck_cli_open_model(const ck_cli_open *o, const char *path, ck_error *err)
{
    ck_key key;
    if (ck_key_load(o->key_file, &key, err) < 0)
        return NULL;
    ck_open_opts opts = {.skip_crc = o->skip_crc, .key = &key, .tmp_max = o->tmp_max};
    bool iter = ck_iteration_dir_path(path);
    opts.key_if_encrypted = o->strategy != NULL || iter; /* ranks or shards, plain ones too */
    opts.key_if_encrypted |= o->key_optional;
    ck_model *m = o->strategy != NULL ? ck_dist_open(path, o->strategy, &opts, false, err)
                  : iter && is_dir(path) ? ck_iteration_open(path, &opts, false, err)
                  : ck_oneflow_dir_path(path) ? ck_oneflow_open(path, err)
                                              : ck_model_open(path, &opts, err);
    ck_key_wipe(&key);
    return m;
}

int ck_cli_uint(const char *text, unsigned lo, unsigned hi, unsigned *out)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || *text == '-' || v < lo || v > hi)
        return -1;
    *out = (unsigned)v;
    return 0;
}

const char *ck_cli_part(const ck_tensor *t)
{
    switch (t->part) {
    case CK_PART_MAP_KEY: return "key";
    case CK_PART_MAP_VALUE: return "value";
    case CK_PART_MAP_STATUS: return "status";
    }
    return NULL;
}

void ck_cli_shape(const ck_tensor *t, char *out, size_t cap)
{
    size_t n = (size_t)snprintf(out, cap, "[");
    for (uint32_t i = 0; i < t->ndim && n < cap; i++)
        n += (size_t)snprintf(out + n, cap - n, "%s%" PRId64, i ? "," : "", t->dims[i]);
    if (n < cap)
        snprintf(out + n, cap - n, "]");
}
