/* SPDX-License-Identifier: Apache-2.0 */
/*
 * model_set: the models a merged model is assembled from (a distributed
 * checkpoint's ranks, an iteration directory's shard files), held open for
 * its life as its format state.
 *
 * The merged model reads their bytes through views of their sources
 * (ck_source_view), so its extents index its own sources while each model
 * keeps, and serializes, its own.  The set also finds a model's tensors by
 * name, and gives the ck_format callbacks every such merged model shares.
 */
#ifndef CK_MODEL_SET_H
#define CK_MODEL_SET_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include "../core/ck_error.h"
#include "../core/model.h"

typedef struct ck_model_set {
    ck_model **models;
    uint32_t n;                 /* models[0 .. n-1] are set (NULL where one failed) */
    uint32_t cap;
    uint32_t **by_name;         /* per model: its visible tensors' ids, sorted by name */
    uint32_t *src_base;         /* model i's source k is the merged model's src_base[i] + k */
    char notes[64];             /* what ckptfs-dump adds about the merged model */
} ck_model_set;

/* A set of room for cap models. */
ck_model_set *ck_mset_new(uint32_t cap, const char *path, ck_error *err);
/* Take m as model i (< cap), and index its tensors by name; m is closed
 * with the set even when this fails. */
int ck_mset_put(ck_model_set *s, uint32_t i, ck_model *m, ck_error *err);
/* Model i's visible tensor called name (len bytes), or NULL. */
const ck_tensor *ck_mset_find(const ck_model_set *s, uint32_t i, const char *name, size_t len);
/* Model i's k-th visible tensor by name order. */
const ck_tensor *ck_mset_sorted(const ck_model_set *s, uint32_t i, size_t k);
/* Add a view of every model's every source to merged, filling src_base. */
int ck_mset_add_views(ck_model_set *s, ck_model *merged, ck_error *err);
/* The attributes a mount shows for the merged model: model 0's owner,
 * all models' sizes together, the newest mtime, and only the permissions
 * every model's file grants (a merged tensor holds bytes of each). */
void ck_mset_stat(const ck_model_set *s, struct stat *st);
/* One more file into such attributes: its size added, its permissions
 * and'ed, its mtime if newer (run_dir lists an iteration directory with
 * the attributes a mount of it will give). */
void ck_mset_stat_join(struct stat *all, const struct stat *one);
/* Close every model and free the set: a merged model's free_state. */
void ck_mset_free(void *s);

/* ck_format callbacks for a merged model whose state is a set. */
const char *ck_mset_type_name(const ck_model *m, const ck_tensor *t, const ck_dtype *dt);
bool ck_mset_is_data_file(const ck_model *m, uint32_t i);
const char *ck_mset_notes(const ck_model *m);

/* The format of such a model.  Registered nowhere (the registry's table is for
 * files): nothing is recognised, created or saved as one, and with no
 * writer it mounts read-only. */
#define CK_MSET_FORMAT(NAME, TITLE)                                                   \
    {                                                                                 \
        .name = (NAME), .title = (TITLE), .extension = "", .free_state = ck_mset_free, \
        .type_name = ck_mset_type_name, .is_data_file = ck_mset_is_data_file,         \
        .notes = ck_mset_notes,                                                       \
    }

#endif
