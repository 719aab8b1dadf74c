/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cipher_envelope: MindSpore's encryption as an envelope kind
 * (../envelope_kind.h), one line of the registry's table: detected by its
 * block magic, read through cipher_source.h, written by cipher_writer.h.
 */
#ifndef CK_CIPHER_ENVELOPE_H
#define CK_CIPHER_ENVELOPE_H

#include "../envelope_kind.h"

extern const ck_envelope_kind ck_envelope_cipher;

#endif
