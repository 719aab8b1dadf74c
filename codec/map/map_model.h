/* SPDX-License-Identifier: Apache-2.0 */
/*
 * map_model: a map applied to an open model: its visible tensors renamed
 * and dropped as the map says, in their order, their bytes where they
 * were (a rename costs no copy: the same extents under another name).
 * The model then shows the map's names to every reader of it: the mount,
 * the tools, a conversion's writer, -o as=safetensors.  It is no longer
 * saved in place (ck_model.mapped_by): an edit would be written under
 * the map's names.
 */
#ifndef CK_MAP_MODEL_H
#define CK_MAP_MODEL_H

#include "../core/model.h"
#include "map.h"

/* 0, or -1 with err (the model as it was, or to be closed). */
int ck_map_model(ck_model *m, const ck_map *map, ck_error *err);

#endif
