/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cipher_source: the plaintext of a MindSpore-encrypted file (ms_cipher.h)
 * as a byte source.
 *
 * Opening reads every block header, then authenticates: each AES-GCM block
 * is decrypted once, streaming 1 MiB at a time, to check its tag, and each
 * AES-CBC block's last cipher block is decrypted to check its PKCS#7
 * padding (which also gives the block's plaintext length).  Nothing
 * decrypted is kept: mounting costs one pass of AES over a GCM file and
 * memory for the block table.  A wrong key or an altered block is
 * refused there, with the block's number.  (The v1.3-1.6 layout has no
 * tag: a wrong key shows as garbage the format reader then refuses.)
 *
 * Reads decrypt only the 1 MiB pages they touch, from the page's own
 * ciphertext, and keep them in the shared page cache (-o cache_size, 16 MiB
 * by default, at most 256 pages, wiped when freed).  The tags were checked
 * at open and cover the file as it was then: a cache miss first checks the
 * file's size and mtime (not the ctime, which chmod and chown change), and
 * a file resized or written since fails the read with EIO rather than
 * serve bytes no tag covers.  CBC has no integrity beyond its padding, as
 * in MindSpore.
 */
#ifndef CK_CIPHER_SOURCE_H
#define CK_CIPHER_SOURCE_H

#include "../core/byte_source.h"
#include "../core/ck_error.h"
#include "key.h"
#include "ms_cipher.h"
#include "../core/page_cache.h"

#define CK_CIPHER_PAGE (1u << 20)

/* file: the encrypted file, owned by the result from then on (closed on
 * failure too). */
ck_source *ck_cipher_source_open(ck_source *file, ck_ms_layout layout, const ck_key *key,
                                 ck_page_cache *cache, ck_error *err);

#endif
