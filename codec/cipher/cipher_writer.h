/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cipher_writer: the wrap writer that encrypts in MindSpore's block layout
 * (cipher_writer.c; the layout in codec/cipher/ms_cipher.h).
 */
#ifndef CK_CIPHER_WRITER_H
#define CK_CIPHER_WRITER_H

#include "key.h"
#include "ms_cipher.h"
#include "../io/wrap_writer.h"

ck_wrap_writer *ck_cipher_writer_new(int fd, const char *path, ck_cipher_mode mode,
                                     const ck_key *key, ck_error *err);

#endif
