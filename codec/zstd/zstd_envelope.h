/* SPDX-License-Identifier: Apache-2.0 */
/*
 * zstd_envelope: zstd compression as an envelope kind
 * (../envelope_kind.h), one line of the registry's table: detected by its
 * magic number, read through zstd_source.h, written (seekable) by
 * zstd_writer.h.
 */
#ifndef CK_ZSTD_ENVELOPE_H
#define CK_ZSTD_ENVELOPE_H

#include "../envelope_kind.h"

/* The level a save compresses at when none was given (-o zstd_level). */
#define CK_ZSTD_LEVEL_DEFAULT 3

extern const ck_envelope_kind ck_envelope_zstd;

#endif
