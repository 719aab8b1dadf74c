/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ckpt_str: the text of a `.ckpt` str value, both ways, in one place.
 *
 * MindSpore stores a str value as numpy does: UTF-32LE, padded with U+0000
 * (an empty string is one U+0000, numpy's <U1).  ckptfs shows it as UTF-8.
 * The reader decodes (ckpt_reader.c), the writer encodes (ckpt_writer.c);
 * reading the bytes and the messages, which name the file, the tensor and
 * the place, stay with them.  No I/O and no allocation here.
 */
#ifndef CK_CKPT_STR_H
#define CK_CKPT_STR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* UTF-32LE -> UTF-8: the nchars characters at u32, trailing U+0000
 * dropped (as numpy does), into u8 (room for 4 * nchars bytes: UTF-8 is
 * never longer than the 4 bytes UTF-32 uses).  true with the length in
 * *len; false at the first code point past U+10FFFF or a surrogate, its
 * value in *bad and its character index in *bad_at. */
bool ck_ckpt_str_decode(const unsigned char *u32, uint64_t nchars, unsigned char *u8,
                        size_t *len, uint32_t *bad, uint64_t *bad_at);

/* UTF-8 -> UTF-32LE: the len bytes at u8 into u32 (room for
 * 4 * (len + 1) bytes), an empty text as one U+0000.  true with the length
 * in *out_len; false when u8 is not UTF-8 as the Unicode standard defines
 * it (a stray or truncated sequence, an overlong form, a surrogate,
 * anything past U+10FFFF).  U+0000 is a character here: numpy keeps one
 * inside a string. */
bool ck_ckpt_str_encode(const unsigned char *u8, uint64_t len, unsigned char *u32,
                        uint64_t *out_len);

#endif
