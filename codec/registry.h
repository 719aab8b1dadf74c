/* SPDX-License-Identifier: Apache-2.0 */
/*
 * registry: the formats ckptfs knows, in one table (registry.c).
 *
 * Each entry is a format's reader (format.h) and its writer
 * (export/encoder.h; NULL where ckptfs reads the format but does not save
 * it), both defined in the format's folder, codec/FORMAT/.  The table is
 * its own module, apart from the interfaces it lists, so that a format
 * includes only those interfaces and the table includes the formats.
 *
 * Adding a format: its folder with a reader defining a ck_format and a
 * writer defining a ck_writer, and one line in the table.
 */
#ifndef CK_REGISTRY_H
#define CK_REGISTRY_H

#include "format.h"

struct ck_writer;

/* The format a file name says by its extension (before a ".zst"), or NULL. */
const ck_format *ck_format_by_extension(const char *path);
/* The format called name, or NULL. */
const ck_format *ck_format_by_name(const char *name);
/* The format of a file whose name says none: a MindSpore checkpoint, which
 * has no magic number and whose users name it as they like. */
const ck_format *ck_format_default(void);
/* The writer of format f; NULL when ckptfs does not save it (yet). */
const struct ck_writer *ck_format_writer(const ck_format *f);

#endif
