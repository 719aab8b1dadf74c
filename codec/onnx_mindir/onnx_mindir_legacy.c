/* SPDX-License-Identifier: Apache-2.0 */
/*
 * onnx_mindir_legacy: the legacy split MindIR layout (MindSpore 1.2-1.5),
 * whose parameters are kept beside the graph file (onnx_mindir_internal.h
 * lists the reader's files).
 *
 * A "<prefix>_graph.mindir" whose graph has no parameters keeps them in the
 * regular files of "<prefix>_variables/", each a serialized GraphProto,
 * walked here as main-graph parts of the model, in version order of their
 * names (data_2 before data_10; MindSpore's loader takes readdir order).
 * Each is one more protobuf file of the layout (ck_pb_tensor.pbfile),
 * planned and written by the same writer, new parameters at the top level
 * of the last one.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "onnx_mindir_internal.h"

static bool has_parameters(const rd *d)
{
    for (size_t i = 0; i < d->m->index.count; i++)
        if (d->pb->tensors[i].role == CK_ROLE_TOP)
            return true;
    return false;
}

/* One variables file: a GraphProto whose parameters are the model's. */
static int walk_variables_file(rd *d, int dfd, const char *dir, const char *name)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
        return ck_fail(d->err, ENAMETOOLONG, "%s/%s: path too long", dir, name);
    /* O_NONBLOCK: a FIFO here must be refused, not waited on. */
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    fd = ck_keep_regular(ck_override_fd(d->m->overrides, d->m->n_overrides, path, fd), &st);
    if (fd < 0 && st.st_mode != 0 && !S_ISDIR(st.st_mode))
        return ck_fail(d->err, EINVAL, "%s: variables file %s is %s, not a regular file",
                       PATH(d), path, ck_file_kind(st.st_mode));
    if (fd < 0)
        return 0; /* MindSpore's loader reads regular files only */
    ck_source *src = ck_source_adopt_fd(fd, path, d->err);
    long sid = src == NULL ? -1 : ck_model_add_data_file(d->m, src, d->err);
    if (sid < 0)
        return -1;
    d->src = src;
    d->src_id = (uint32_t)sid;
    if (omr_walk_file_graph(d) < 0)
        return -1;
    d->pb->new_pbfile = (uint32_t)sid; /* new parameters go to the last file */
    return 0;
}

static int by_version(const void *a, const void *b)
{
    return strverscmp(*(char *const *)a, *(char *const *)b);
}

/* The visible names in the directory dfd, sorted by version (data_2
 * before data_10); *n of them, or NULL. */
static char **list_variables(rd *d, int dfd, const char *dir, size_t *n)
{
    int lfd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *ds = lfd < 0 ? NULL : fdopendir(lfd);
    if (ds == NULL) {
        if (lfd >= 0)
            close(lfd);
        ck_fail_errno(d->err, errno, "%s: cannot list %s", PATH(d), dir);
        return NULL;
    }
    char **names = NULL;
    size_t cap = 0;
    *n = 0;
    struct dirent *e;
    while ((e = readdir(ds)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        if (*n == CK_MAX_SOURCES) {
            ck_fail(d->err, EMFILE, "%s: more than %d files in %s", PATH(d), CK_MAX_SOURCES,
                    dir);
            break;
        }
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            char **more = realloc(names, cap * sizeof *names);
            if (more == NULL) {
                nomem(d);
                break;
            }
            names = more;
        }
        if ((names[*n] = strdup(e->d_name)) == NULL) {
            nomem(d);
            break;
        }
        (*n)++;
    }
    bool failed = e != NULL;
    closedir(ds);
    if (failed) {
        while (*n > 0)
            free(names[--*n]);
        free(names);
        return NULL;
    }
    if (*n > 0)
        qsort(names, *n, sizeof *names, by_version);
    return names != NULL ? names : calloc(1, sizeof *names);
}

/* The v1.2-1.5 split layout: a "<prefix>_graph.mindir" whose graph has no
 * parameters keeps them in the regular files of "<prefix>_variables/",
 * each a serialized GraphProto.  MindSpore's loader takes them in readdir
 * order; they are taken in version order (data_2 before data_10) so every
 * mount shows the same tree. */
int omr_walk_legacy_variables(rd *d)
{
    static const char suffix[] = "_graph.mindir";
    const ck_model_dir *md = d->m->dir;
    size_t pl = strlen(md->base), sl = sizeof suffix - 1;
    if (!d->pb->mindir || pl < sl || strcmp(md->base + pl - sl, suffix) != 0 ||
        has_parameters(d))
        return 0;
    char rel[PATH_MAX], dir[PATH_MAX];
    snprintf(rel, sizeof rel, "%.*s_variables", (int)(pl - sl), md->base);
    ck_dir_join(md, rel, dir, sizeof dir);
    int dfd = ck_dir_openat(md, rel, O_PATH | O_DIRECTORY, 0);
    if (dfd < 0)
        return errno == ENOENT ? 0 : ck_fail_errno(d->err, errno, "%s: cannot open %s",
                                                   PATH(d), dir);
    size_t n = 0;
    char **names = list_variables(d, dfd, dir, &n);
    int rc = names == NULL ? -1 : 0;
    /* Parameter names keep the main graph's prefix; a data file's graph
     * has no name of its own to take. */
    const char *gname = d->pb->graph_name;
    size_t glen = d->pb->graph_name_len;
    uint64_t insert = d->pb->insert_off;
    for (size_t i = 0; i < n; i++) {
        if (rc == 0)
            rc = walk_variables_file(d, dfd, dir, names[i]);
        free(names[i]);
    }
    free(names);
    close(dfd);
    d->pb->graph_name = gname;
    d->pb->graph_name_len = glen;
    if (d->pb->new_pbfile == 0)
        d->pb->insert_off = insert;
    d->src = d->m->sources[0];
    d->src_id = 0;
    return rc;
}
