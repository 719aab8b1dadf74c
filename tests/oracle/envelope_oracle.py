#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Independent test oracle for ckptfs's "envelopes": MindSpore encryption and seekable zstd.

Written from the format facts only; it shares no code with the C program under test.

Sources
-------
* MindSpore encryption: ../shared/reference/mindspore-formats.md section 3 (3.1 constants,
  3.2 block layout, 3.4 detection) and 4.4/4.5 (encrypted MindIR, encrypted split data
  files, which are the same block format), checked against the fixtures
  mindspore_add_encrpty_key_0123456789ABCDEF{,_v1.3legacy}.mindir (SOURCES.md).
* Seekable zstd: facebook/zstd contrib/seekable_format/zstd_seekable_compression_format.md
  (version 0.1.0) and doc/zstd_compression_format.md (frame/block headers, skippable
  frames, Content_Checksum = low 32 bits of XXH64 seed 0, little-endian).
* XXH64: the xxHash specification (constants PRIME64_1..5, 4 lanes over 32-byte stripes,
  tail of 8/4/1-byte steps, avalanche); implemented here in pure Python and checked
  against zstd's own frame checksums (`xxh64-selftest`, and on every frame written by
  `zstd-seekable --checksums`).

Encrypted block layout (every integer little-endian; i32 = signed 32-bit):
    v1.7+ AES-GCM : u32 magic 0x7F3A5ED8, u8 tag[16], i32 block_size, i32 iv_len (=16),
                    u8 iv[16], i32 cipher_len, u8 cipher[cipher_len]
    v1.7+ AES-CBC : u32 magic 0x7F3A5ED9, i32 block_size, i32 iv_len, iv, i32 cipher_len,
                    cipher                                      (no tag)
    legacy v1.3-1.6: as AES-CBC but magic 0x7F3A5ED8 (all modes) and no tag
    block_size = 4 + iv_len + 4 + cipher_len = 24 + cipher_len.
  GCM: AES-GCM, nonce = iv[0:12], no AAD, 16-byte tag; cipher_len == plaintext length.
  CBC: AES-CBC with the full 16-byte IV, PKCS#7 padding (1..16 bytes, always added).
  legacy: AES-CTR with initial counter block iv[0:12] || 00 00 00 02 (the GCM keystream,
  no tag, so it cannot be authenticated: a wrong key yields garbage, not an error).
  Key length 16/24/32 selects AES-128/192/256.  The plaintext is cut from offset 0 into
  consecutive pieces of at most 64 MiB (v1.7+; 512 MiB in v1.3-1.6), one block each;
  an empty plaintext gives an empty file.

Seekable zstd (all numbers little-endian): independent frames, then one final skippable
frame  u32 0x184D2A5E, u32 Frame_Size (= bytes after these 8), entries of
u32 Compressed_Size, u32 Decompressed_Size [, u32 Checksum if descriptor bit 7],
then the 9-byte footer u32 Number_Of_Frames, u8 Seek_Table_Descriptor (bit 7
Checksum_Flag, bits 6-2 reserved = 0, bits 1-0 unused), u32 Seekable_Magic 0x8F92EAB1.

Commands (run with Debian's /usr/bin/python3: it needs python3-cryptography;
the zstd commands need the `zstd` program, v1.5.4 tested)
--------
  encrypt --mode {AES-GCM,AES-CBC,legacy} --key-hex HEX IN OUT [--block-size N]
          [--force-block-size]
      Write IN encrypted in MindSpore's block format; random IVs (os.urandom).
      --block-size defaults to 64 MiB; larger than the reader limit (64 MiB, legacy
      512 MiB) only with --force-block-size (for negative tests).  One block in memory.
  decrypt --key-hex HEX IN OUT [--expect-mode MODE]
      Detect the layout from block 0, check every block strictly, decrypt, verify the
      GCM tag / CBC padding, write the plaintext (OUT "-" = stdout).  On failure: exit 1,
      one line "block N at offset X: reason" on stderr, OUT removed.
      Detection: magic 0x7F3A5ED9 -> AES-CBC; magic 0x7F3A5ED8 -> AES-GCM if block 0's
      v1.7 header is consistent (iv_len 16, cipher_len >= 0, block_size = 24 +
      cipher_len), else legacy if the tagless header is; SM4 (0x7F3A5EDA) and other
      magics are refused.  --expect-mode fails if the detected mode differs, unless
      block 0 also fits the expected layout (then that layout is used).
      Per-block checks: header complete; magic equal to block 0's; iv_len 16;
      block_size, cipher_len >= 0 and block_size = 24 + cipher_len; ciphertext inside
      the file; no bytes after the last block; CBC cipher_len a positive multiple of 16;
      plaintext <= 64 MiB (v1.7+) / 512 MiB (legacy) - without a key (layout) CBC can
      only be held to cipher_len <= 64 MiB + 16.  A GCM/legacy block with cipher_len 0
      is accepted (never written by MindSpore, but valid for its reader).
      An empty IN decrypts to an empty OUT (an empty plaintext encrypts to nothing).
  layout IN
      Same structural checks without a key (plus: no two blocks share an IV); prints
      {"mode": ..., "blocks": [{"offset", "block_size", "cipher_len", "iv"}]}.
      An empty file prints {"mode": null, "blocks": []}.
  tamper IN OUT --block N [--byte K]
      Copy IN to OUT with byte K (default 0; negative counts from the end) of block N's
      ciphertext xored with 0x01; prints the file offset of that byte.  GCM detects any
      flip; CBC only if the padding breaks: K = -17 always does (it flips the pad byte),
      K in -16..-1 does with probability ~255/256 (the last plaintext block is garbled),
      other bytes go unnoticed; legacy (CTR, no tag) never detects a flip.
  zstd-seekable IN OUT --frame-size N [--level L] [--checksums] [--content-size]
      Cut IN into N-byte pieces (N <= 1 GiB, zstd's seekable library limit; an empty IN
      gives a seek table with 0 frames), compress each with `zstd -q -c --check -L` (levels >= 20
      add --ultra, negative levels use --fast=) into one frame, append the seek table.
      --checksums: store the low 32 bits of XXH64 (pure Python, cross-checked against
      the frame's own Content_Checksum); --content-size: pass --stream-size so each
      frame header records its size.
  zstd-layout IN
      Parse and check the seek table, walk every frame's header/blocks (its length must
      equal Compressed_Size), decompress each with `zstd -d -c` and compare the length
      (and checksum, if present).  Also refused: reserved descriptor bits 6-2 set,
      skippable magic other than 0x184D2A5E, Frame_Size != entries*size + 9, more than
      0x8000000 frames, a Compressed_Size of 0, a Decompressed_Size over 1 GiB.  Prints {"frames": [{"offset", "compressed",
      "decompressed"[, "checksum"]}], "descriptor": int}.
  frame-boundaries IN
      Print the decompressed offset at which each frame starts, one per line (seek
      table and frame headers checked, no decompression).
  xxh64 IN
      Print XXH64 (seed 0) of IN as 16 hex digits (pure Python: about 30 MiB/s).
  xxh64-selftest
      Check the pure-Python XXH64 against zstd --check frame checksums for many lengths.

Exit status: 0 success; 1 format/crypto/check failure (message on stderr); 2 usage.
"""

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys

MIB = 1024 * 1024

# ---------------------------------------------------------------------------------------
# MindSpore encryption
# ---------------------------------------------------------------------------------------

MAGIC_GCM = 0x7F3A5ED8
MAGIC_CBC = 0x7F3A5ED9
MAGIC_SM4 = 0x7F3A5EDA
IV_LEN = 16
TAG_LEN = 16
MAX_BLOCK_V17 = 64 * MIB      # plaintext per block, v1.7+
MAX_BLOCK_LEGACY = 512 * MIB  # plaintext per block, v1.3-1.6
MODES = ("AES-GCM", "AES-CBC", "legacy")


class OracleError(Exception):
    pass


def _fail(msg):
    raise OracleError(msg)


def _crypto():
    try:
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
    except ImportError:
        _fail("python3-cryptography is missing: run this with /usr/bin/python3")
    return Cipher, algorithms, modes


def _parse_key(hexstr):
    try:
        key = bytes.fromhex(hexstr)
    except ValueError:
        _fail("--key-hex is not valid hex")
    if len(key) not in (16, 24, 32):
        _fail("key must be 16, 24 or 32 bytes (AES-128/192/256), got %d" % len(key))
    return key


def _hdr_len(mode):
    # magic [tag] block_size iv_len iv cipher_len
    return 4 + (TAG_LEN if mode == "AES-GCM" else 0) + 4 + 4 + IV_LEN + 4


def _max_plain(mode):
    return MAX_BLOCK_LEGACY if mode == "legacy" else MAX_BLOCK_V17


def _max_cipher(mode):
    return _max_plain(mode) + (16 if mode == "AES-CBC" else 0)


def _mode_magic(mode):
    return MAGIC_CBC if mode == "AES-CBC" else MAGIC_GCM


def _unpack_header(mode, hdr):
    """hdr -> (magic, tag or None, block_size, iv_len, iv, cipher_len)."""
    magic = struct.unpack_from("<I", hdr, 0)[0]
    p = 4
    tag = None
    if mode == "AES-GCM":
        tag = bytes(hdr[4:4 + TAG_LEN])
        p += TAG_LEN
    block_size, iv_len = struct.unpack_from("<ii", hdr, p)
    iv = bytes(hdr[p + 8:p + 8 + IV_LEN])
    cipher_len = struct.unpack_from("<i", hdr, p + 8 + IV_LEN)[0]
    return magic, tag, block_size, iv_len, iv, cipher_len


def _header_consistent(mode, hdr):
    if len(hdr) < _hdr_len(mode):
        return False
    _, _, block_size, iv_len, _, cipher_len = _unpack_header(mode, hdr)
    return iv_len == IV_LEN and cipher_len >= 0 and block_size == 4 + iv_len + 4 + cipher_len


def _detect(head, file_size):
    """Decide the layout from the first bytes (block 0).  Returns a mode or fails."""
    if file_size == 0:
        return None
    if len(head) < 4:
        _fail("block 0 at offset 0: truncated header (%d bytes, no magic)" % len(head))
    magic = struct.unpack_from("<I", head, 0)[0]
    if magic == MAGIC_CBC:
        return "AES-CBC"
    if magic == MAGIC_SM4:
        _fail("block 0 at offset 0: magic 0x%08X is SM4-CBC (not supported)" % magic)
    if magic != MAGIC_GCM:
        _fail("block 0 at offset 0: not an encrypted file (magic 0x%08X)" % magic)
    if _header_consistent("AES-GCM", head):
        return "AES-GCM"
    if _header_consistent("legacy", head):
        return "legacy"
    if len(head) < _hdr_len("legacy"):
        _fail("block 0 at offset 0: truncated header (%d bytes)" % len(head))
    _fail("block 0 at offset 0: magic 0x%08X but the header fits neither the v1.7+ AES-GCM "
          "layout nor the v1.3-1.6 layout (iv_len/block_size/cipher_len inconsistent)" % magic)


def _read_exact(f, n):
    """Read n bytes (fewer only at EOF)."""
    buf = bytearray(n)
    mv = memoryview(buf)
    got = 0
    while got < n:
        k = f.readinto(mv[got:])
        if not k:
            break
        got += k
    if got < n:
        del mv
        del buf[got:]
    return buf


class _Buf:
    """A reusable bytearray, so that at most one block's input and output are resident."""

    def __init__(self):
        self.buf = bytearray(0)

    def view(self, n):
        if len(self.buf) < n:
            self.buf = bytearray(0)  # drop the old one before allocating the new one
            self.buf = bytearray(n)
        return memoryview(self.buf)[:n]


def _read_into(f, mv):
    """Fill memoryview mv from f; returns the number of bytes read (short only at EOF)."""
    got = 0
    while got < len(mv):
        k = f.readinto(mv[got:])
        if not k:
            break
        got += k
    return got


def _iter_blocks(f, file_size, mode, read_cipher):
    """Walk the blocks of an open file with strict structural checks.

    Yields (index, offset, tag, block_size, iv, cipher_len, cipher or None); cipher is a
    memoryview into a buffer reused for the next block."""
    cbuf = _Buf()
    hl = _hdr_len(mode)
    want_magic = _mode_magic(mode)
    pos = 0
    idx = 0
    f.seek(0)
    while pos < file_size:
        where = "block %d at offset %d" % (idx, pos)
        hdr = _read_exact(f, hl)
        if len(hdr) < hl:
            _fail("%s: truncated header (%d of %d bytes left; trailing bytes after the last "
                  "block?)" % (where, len(hdr), hl))
        magic, tag, block_size, iv_len, iv, cipher_len = _unpack_header(mode, hdr)
        if magic != want_magic:
            _fail("%s: magic 0x%08X, expected 0x%08X (%s, as block 0)"
                  % (where, magic, want_magic, mode))
        if iv_len != IV_LEN:
            _fail("%s: iv_len %d, expected 16" % (where, iv_len))
        if block_size < 0:
            _fail("%s: negative block_size %d" % (where, block_size))
        if cipher_len < 0:
            _fail("%s: negative cipher_len %d" % (where, cipher_len))
        if block_size != 4 + iv_len + 4 + cipher_len:
            _fail("%s: block_size %d != 4 + iv_len + 4 + cipher_len = %d"
                  % (where, block_size, 4 + iv_len + 4 + cipher_len))
        if mode == "AES-CBC" and (cipher_len == 0 or cipher_len % 16):
            _fail("%s: AES-CBC cipher_len %d is not a positive multiple of 16" % (where, cipher_len))
        if cipher_len > _max_cipher(mode):
            _fail("%s: cipher_len %d exceeds the %s block limit (%d bytes of plaintext)"
                  % (where, cipher_len, mode, _max_plain(mode)))
        left = file_size - pos - hl
        if cipher_len > left:
            _fail("%s: cipher_len %d runs past the end of the file (%d bytes left)"
                  % (where, cipher_len, left))
        cipher = None
        if read_cipher:
            cipher = cbuf.view(cipher_len)
            if _read_into(f, cipher) != cipher_len:
                _fail("%s: file shrank while reading" % where)
        else:
            f.seek(cipher_len, 1)
        yield idx, pos, tag, block_size, iv, cipher_len, cipher
        pos += hl + cipher_len
        idx += 1


def _open_layout(path, expect=None):
    """Open path and decide its layout from block 0 (expect: the caller's mode, if any)."""
    f = open(path, "rb")
    size = os.fstat(f.fileno()).st_size
    head = _read_exact(f, _hdr_len("AES-GCM"))
    try:
        mode = _detect(head, size)
    except OracleError:
        f.close()
        raise
    if expect is not None and mode is not None and mode != expect:
        magic = struct.unpack_from("<I", head, 0)[0]
        if magic == _mode_magic(expect) and _header_consistent(expect, head):
            return f, size, expect  # block 0 fits both layouts: the caller's mode decides
        f.close()
        _fail("block 0 at offset 0: file is %s, expected %s" % (mode, expect))
    return f, size, mode


def _counter_block(iv):
    return iv[:12] + b"\x00\x00\x00\x02"


def cmd_encrypt(a):
    Cipher, algorithms, modes = _crypto()
    key = _parse_key(a.key_hex)
    bs = a.block_size
    if bs <= 0:
        _fail("--block-size must be positive")
    if bs > _max_plain(a.mode) and not a.force_block_size:
        _fail("--block-size %d exceeds the %s reader limit %d (use --force-block-size)"
              % (bs, a.mode, _max_plain(a.mode)))
    inbuf, outbuf = _Buf(), _Buf()
    with open(a.inp, "rb") as fin, open(a.out, "wb") as fout:
        left = os.fstat(fin.fileno()).st_size
        while left > 0:
            n = min(bs, left)
            piece = inbuf.view(n)
            if _read_into(fin, piece) != n:
                _fail("%s shrank while reading" % a.inp)
            left -= n
            iv = os.urandom(IV_LEN)
            out = outbuf.view(n + 32)
            if a.mode == "AES-GCM":
                enc = Cipher(algorithms.AES(key), modes.GCM(iv[:12])).encryptor()
                cl = enc.update_into(piece, out)
                if enc.finalize():
                    _fail("internal error: GCM finalize returned data")
                head = struct.pack("<I", MAGIC_GCM) + enc.tag
            elif a.mode == "AES-CBC":
                pad = 16 - n % 16
                enc = Cipher(algorithms.AES(key), modes.CBC(iv)).encryptor()
                cl = enc.update_into(piece, out)
                cl += enc.update_into(bytes([pad]) * pad, out[cl:])
                if enc.finalize():
                    _fail("internal error: CBC finalize returned data")
                head = struct.pack("<I", MAGIC_CBC)
            else:
                enc = Cipher(algorithms.AES(key), modes.CTR(_counter_block(iv))).encryptor()
                cl = enc.update_into(piece, out)
                enc.finalize()
                head = struct.pack("<I", MAGIC_GCM)
            fout.write(head + struct.pack("<ii", 24 + cl, IV_LEN) + iv + struct.pack("<i", cl))
            fout.write(out[:cl])
            del piece, out
    return 0


def cmd_decrypt(a):
    Cipher, algorithms, modes = _crypto()
    from cryptography.exceptions import InvalidTag
    key = _parse_key(a.key_hex)
    to_stdout = a.out == "-"
    fout = sys.stdout.buffer if to_stdout else open(a.out, "wb")
    ok = False
    outbuf = _Buf()
    try:
        f, size, mode = _open_layout(a.inp, a.expect_mode)
        with f:
            if mode is None:
                ok = True
                return 0
            for idx, pos, tag, _bs, iv, cl, cipher in _iter_blocks(f, size, mode, True):
                where = "block %d at offset %d" % (idx, pos)
                out = outbuf.view(cl + 16)
                if mode == "AES-GCM":
                    dec = Cipher(algorithms.AES(key), modes.GCM(iv[:12], tag)).decryptor()
                    n = dec.update_into(cipher, out)
                    try:
                        dec.finalize()
                    except InvalidTag:
                        _fail("%s: GCM tag mismatch (wrong key or tampered data)" % where)
                elif mode == "AES-CBC":
                    dec = Cipher(algorithms.AES(key), modes.CBC(iv)).decryptor()
                    n = dec.update_into(cipher, out)
                    rest = dec.finalize()
                    out[n:n + len(rest)] = rest
                    n += len(rest)
                    p = out[n - 1]
                    if n != cl or not 1 <= p <= 16 or bytes(out[n - p:n]) != bytes([p]) * p:
                        _fail("%s: bad CBC PKCS#7 padding (wrong key or tampered data)" % where)
                    n -= p
                else:
                    dec = Cipher(algorithms.AES(key), modes.CTR(_counter_block(iv))).decryptor()
                    n = dec.update_into(cipher, out)
                    dec.finalize()
                if n > _max_plain(mode):
                    _fail("%s: plaintext %d bytes exceeds the %s block limit %d"
                          % (where, n, mode, _max_plain(mode)))
                fout.write(out[:n])
                del out, cipher
        ok = True
        return 0
    finally:
        if not to_stdout:
            fout.close()
            if not ok:
                try:
                    os.unlink(a.out)
                except OSError:
                    pass
        else:
            fout.flush()


def cmd_layout(a):
    f, size, mode = _open_layout(a.inp)
    blocks = []
    seen = {}
    with f:
        if mode is not None:
            for idx, pos, _tag, bs, iv, cl, _ in _iter_blocks(f, size, mode, False):
                if iv in seen:
                    _fail("block %d at offset %d: IV %s already used by block %d"
                          % (idx, pos, iv.hex(), seen[iv]))
                seen[iv] = idx
                blocks.append({"offset": pos, "block_size": bs, "cipher_len": cl,
                               "iv": iv.hex()})
    print(json.dumps({"mode": mode, "blocks": blocks}))
    return 0


def cmd_tamper(a):
    f, size, mode = _open_layout(a.inp)
    target = None
    with f:
        if mode is not None:
            for idx, pos, _tag, _bs, _iv, cl, _ in _iter_blocks(f, size, mode, False):
                if idx == a.block:
                    k = a.byte + cl if a.byte < 0 else a.byte
                    if not 0 <= k < cl:
                        _fail("block %d at offset %d: --byte %d outside its %d-byte ciphertext"
                              % (idx, pos, a.byte, cl))
                    target = pos + _hdr_len(mode) + k
    if target is None:
        _fail("no block %d in %s" % (a.block, a.inp))
    shutil.copyfile(a.inp, a.out)
    with open(a.out, "r+b") as g:
        g.seek(target)
        b = g.read(1)
        g.seek(target)
        g.write(bytes([b[0] ^ 0x01]))
    print(target)
    return 0


# ---------------------------------------------------------------------------------------
# XXH64 (pure Python, seed 0 by default)
# ---------------------------------------------------------------------------------------

_M64 = (1 << 64) - 1
_P1 = 0x9E3779B185EBCA87
_P2 = 0xC2B2AE3D27D4EB4F
_P3 = 0x165667B19E3779F9
_P4 = 0x85EBCA77C2B2AE63
_P5 = 0x27D4EB2F165667C5


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & _M64


def _round(acc, lane):
    acc = (acc + lane * _P2) & _M64
    return (_rotl(acc, 31) * _P1) & _M64


def _merge(acc, v):
    acc ^= _round(0, v)
    return (acc * _P1 + _P4) & _M64


def xxh64(data, seed=0):
    data = memoryview(data).cast("B")
    n = len(data)
    p = 0
    if n >= 32:
        v1 = (seed + _P1 + _P2) & _M64
        v2 = (seed + _P2) & _M64
        v3 = seed & _M64
        v4 = (seed - _P1) & _M64
        nstripes = n // 32
        chunk = 32768  # stripes per unpack (1 MiB)
        M, P1, P2 = _M64, _P1, _P2
        for s0 in range(0, nstripes, chunk):
            k = min(chunk, nstripes - s0)
            lanes = struct.unpack_from("<%dQ" % (4 * k), data, s0 * 32)
            it = iter(lanes)
            for a, b, c, d in zip(it, it, it, it):
                x = (v1 + a * P2) & M
                v1 = (((x << 31) | (x >> 33)) & M) * P1 & M
                x = (v2 + b * P2) & M
                v2 = (((x << 31) | (x >> 33)) & M) * P1 & M
                x = (v3 + c * P2) & M
                v3 = (((x << 31) | (x >> 33)) & M) * P1 & M
                x = (v4 + d * P2) & M
                v4 = (((x << 31) | (x >> 33)) & M) * P1 & M
        p = nstripes * 32
        acc = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M64
        acc = _merge(acc, v1)
        acc = _merge(acc, v2)
        acc = _merge(acc, v3)
        acc = _merge(acc, v4)
    else:
        acc = (seed + _P5) & _M64
    acc = (acc + n) & _M64
    while p + 8 <= n:
        lane = struct.unpack_from("<Q", data, p)[0]
        acc ^= _round(0, lane)
        acc = (_rotl(acc, 27) * _P1 + _P4) & _M64
        p += 8
    if p + 4 <= n:
        lane = struct.unpack_from("<I", data, p)[0]
        acc ^= (lane * _P1) & _M64
        acc = (_rotl(acc, 23) * _P2 + _P3) & _M64
        p += 4
    while p < n:
        acc ^= (data[p] * _P5) & _M64
        acc = (_rotl(acc, 11) * _P1) & _M64
        p += 1
    acc ^= acc >> 33
    acc = (acc * _P2) & _M64
    acc ^= acc >> 29
    acc = (acc * _P3) & _M64
    acc ^= acc >> 32
    return acc


# ---------------------------------------------------------------------------------------
# zstd frames and the seekable format
# ---------------------------------------------------------------------------------------

ZSTD_MAGIC = 0xFD2FB528
SKIP_MAGIC_LO, SKIP_MAGIC_HI = 0x184D2A50, 0x184D2A5F
SEEK_TABLE_SKIP_MAGIC = 0x184D2A5E
SEEKABLE_MAGIC = 0x8F92EAB1
FOOTER_LEN = 9
MAX_FRAME_DECOMPRESSED = 0x40000000   # ZSTD_SEEKABLE_MAX_FRAME_DECOMPRESSED_SIZE (zstd lib)
MAX_FRAMES = 0x8000000                # ZSTD_SEEKABLE_MAXFRAMES (zstd lib)


def _zstd_level_args(level):
    if level < 0:
        return ["--fast=%d" % -level]
    if level >= 20:
        return ["--ultra", "-%d" % level]
    return ["-%d" % level]


def _run_zstd(args, data):
    try:
        r = subprocess.run(["zstd"] + args, input=data, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
    except FileNotFoundError:
        _fail("the zstd command is not installed")
    return r.returncode, r.stdout, r.stderr.decode("utf-8", "replace").strip()


def _frame_length(f, start, limit, where):
    """Length of the zstd or skippable frame at offset start (must end at or before limit)."""
    def need(off, n, what):
        if off + n > limit:
            _fail("%s: %s at offset %d runs past the frame's Compressed_Size" % (where, what, off))
        f.seek(off)
        b = f.read(n)
        if len(b) != n:
            _fail("%s: file too short reading %s" % (where, what))
        return b
    magic = struct.unpack("<I", need(start, 4, "magic"))[0]
    if SKIP_MAGIC_LO <= magic <= SKIP_MAGIC_HI:
        size = struct.unpack("<I", need(start + 4, 4, "skippable frame size"))[0]
        return 8 + size
    if magic != ZSTD_MAGIC:
        _fail("%s: bad frame magic 0x%08X at offset %d" % (where, magic, start))
    fhd = need(start + 4, 1, "frame header descriptor")[0]
    if fhd & 0x08:
        _fail("%s: reserved bit set in the frame header descriptor" % where)
    fcs_flag, single, checksum, did_flag = fhd >> 6, (fhd >> 5) & 1, (fhd >> 2) & 1, fhd & 3
    fcs_size = (1 if single else 0) if fcs_flag == 0 else (2, 4, 8)[fcs_flag - 1]
    p = start + 5 + (0 if single else 1) + (0, 1, 2, 4)[did_flag] + fcs_size
    while True:
        bh = need(p, 3, "block header")
        v = bh[0] | bh[1] << 8 | bh[2] << 16
        last, btype, bsize = v & 1, (v >> 1) & 3, v >> 3
        if btype == 3:
            _fail("%s: reserved block type at offset %d" % (where, p))
        p += 3 + (1 if btype == 1 else bsize)
        if p > limit:
            _fail("%s: block at offset %d runs past the frame's Compressed_Size" % (where, p))
        if last:
            break
    if checksum:
        p += 4
    return p - start


def _frame_checksum(f, start, length):
    """Content_Checksum of the zstd frame (None if absent)."""
    f.seek(start)
    b = f.read(5)
    if len(b) < 5 or struct.unpack_from("<I", b)[0] != ZSTD_MAGIC or not b[4] & 0x04:
        return None
    f.seek(start + length - 4)
    return struct.unpack("<I", f.read(4))[0]


def _read_seek_table(path):
    """Returns (file, descriptor, entries[(offset, compressed, decompressed, checksum)])."""
    f = open(path, "rb")
    size = os.fstat(f.fileno()).st_size
    if size < 8 + FOOTER_LEN:
        _fail("no seek table: file is %d bytes, shorter than an empty seek table (17)" % size)
    f.seek(size - FOOTER_LEN)
    nframes, desc, magic = struct.unpack("<IBI", f.read(FOOTER_LEN))
    if magic != SEEKABLE_MAGIC:
        _fail("no seek table: the file does not end with the seekable magic 0x8F92EAB1 "
              "(last 4 bytes read 0x%08X); a plain zstd file?" % magic)
    if desc & 0x7C:
        _fail("seek table: reserved descriptor bits set (descriptor 0x%02X)" % desc)
    if nframes > MAX_FRAMES:
        _fail("seek table: %d frames exceeds the limit %d" % (nframes, MAX_FRAMES))
    esize = 12 if desc & 0x80 else 8
    frame_size = nframes * esize + FOOTER_LEN
    total = 8 + frame_size
    if total > size:
        _fail("seek table: %d frames need a %d-byte seek table, file is %d bytes"
              % (nframes, total, size))
    f.seek(size - total)
    smagic, fsize = struct.unpack("<II", f.read(8))
    if smagic != SEEK_TABLE_SKIP_MAGIC:
        _fail("seek table: skippable magic at offset %d is 0x%08X, expected 0x184D2A5E"
              % (size - total, smagic))
    if fsize != frame_size:
        _fail("seek table: Frame_Size %d, expected %d for %d entries of %d bytes + 9"
              % (fsize, frame_size, nframes, esize))
    raw = f.read(nframes * esize)
    entries = []
    off = 0
    for i in range(nframes):
        if esize == 12:
            c, d, ck = struct.unpack_from("<III", raw, i * 12)
        else:
            (c, d), ck = struct.unpack_from("<II", raw, i * 8), None
        entries.append((off, c, d, ck))
        off += c
    if off + total != size:
        _fail("seek table inconsistent: sum of Compressed_Size %d + seek table %d = %d, "
              "file is %d bytes" % (off, total, off + total, size))
    for i, (o, c, d, ck) in enumerate(entries):
        where = "frame %d at offset %d" % (i, o)
        if d > MAX_FRAME_DECOMPRESSED:
            _fail("%s: Decompressed_Size %d exceeds %d" % (where, d, MAX_FRAME_DECOMPRESSED))
        if c == 0:
            _fail("%s: Compressed_Size 0" % where)
        flen = _frame_length(f, o, o + c, where)
        if flen != c:
            _fail("%s: Compressed_Size %d but the frame is %d bytes" % (where, c, flen))
    return f, desc, entries


def cmd_zstd_seekable(a):
    n = a.frame_size
    if not 0 < n <= MAX_FRAME_DECOMPRESSED:
        _fail("--frame-size must be in 1..%d" % MAX_FRAME_DECOMPRESSED)
    entries = []
    with open(a.inp, "rb") as fin, open(a.out, "wb") as fout:
        left = os.fstat(fin.fileno()).st_size
        while left > 0:
            piece = _read_exact(fin, min(n, left))
            if not piece:
                break
            left -= len(piece)
            args = ["-q", "-c", "--check"] + _zstd_level_args(a.level)
            if a.content_size:
                args.append("--stream-size=%d" % len(piece))
            rc, frame, err = _run_zstd(args, bytes(piece))
            if rc != 0:
                _fail("zstd failed (%d): %s" % (rc, err))
            ck = None
            if a.checksums:
                ck = xxh64(piece) & 0xFFFFFFFF
                zck = struct.unpack_from("<I", frame, len(frame) - 4)[0]
                if ck != zck:
                    _fail("frame %d: pure-Python XXH64 low 32 bits 0x%08X != zstd's frame "
                          "checksum 0x%08X" % (len(entries), ck, zck))
            if len(frame) > 0xFFFFFFFF:
                _fail("frame %d: compressed size does not fit in u32" % len(entries))
            fout.write(frame)
            entries.append((len(frame), len(piece), ck))
        esize = 12 if a.checksums else 8
        table = bytearray(struct.pack("<II", SEEK_TABLE_SKIP_MAGIC, len(entries) * esize + 9))
        for c, d, ck in entries:
            table += struct.pack("<II", c, d)
            if a.checksums:
                table += struct.pack("<I", ck)
        table += struct.pack("<IBI", len(entries), 0x80 if a.checksums else 0, SEEKABLE_MAGIC)
        fout.write(table)
    return 0


def cmd_zstd_layout(a):
    f, desc, entries = _read_seek_table(a.inp)
    frames = []
    with f:
        for i, (o, c, d, ck) in enumerate(entries):
            where = "frame %d at offset %d" % (i, o)
            f.seek(o)
            data = f.read(c)
            rc, out, err = _run_zstd(["-q", "-d", "-c"], data)
            del data
            if rc != 0:
                _fail("%s: zstd -d failed: %s" % (where, err))
            if len(out) != d:
                _fail("%s: decompresses to %d bytes, Decompressed_Size says %d"
                      % (where, len(out), d))
            row = {"offset": o, "compressed": c, "decompressed": d}
            if ck is not None:
                got = xxh64(out) & 0xFFFFFFFF
                if got != ck:
                    _fail("%s: checksum 0x%08X, XXH64 of the content gives 0x%08X"
                          % (where, ck, got))
                row["checksum"] = ck
            frames.append(row)
    print(json.dumps({"frames": frames, "descriptor": desc}))
    return 0


def cmd_frame_boundaries(a):
    f, _desc, entries = _read_seek_table(a.inp)
    f.close()
    pos = 0
    lines = []
    for _o, _c, d, _ck in entries:
        lines.append(str(pos))
        pos += d
    if lines:
        print("\n".join(lines))
    return 0


def cmd_xxh64(a):
    with open(a.inp, "rb") as f:
        print("%016x" % xxh64(f.read()))
    return 0


def cmd_xxh64_selftest(_a):
    known = {b"": 0xEF46DB3751D8E999}
    for data, want in known.items():
        if xxh64(data) != want:
            _fail("xxh64(%r) = %016x, expected %016x" % (data, xxh64(data), want))
    sizes = list(range(0, 70)) + [100, 127, 128, 129, 1000, 4096, 65537, 300001]
    for n in sizes:
        data = os.urandom(n)
        rc, frame, err = _run_zstd(["-q", "-c", "--check", "-1"], data)
        if rc != 0:
            _fail("zstd failed: %s" % err)
        zck = struct.unpack_from("<I", frame, len(frame) - 4)[0]
        if xxh64(data) & 0xFFFFFFFF != zck:
            _fail("length %d: xxh64 low 32 bits %08x != zstd checksum %08x"
                  % (n, xxh64(data) & 0xFFFFFFFF, zck))
    print("xxh64 ok (%d lengths checked against zstd --check)" % len(sizes))
    return 0


# ---------------------------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("encrypt", help="encrypt IN into MindSpore's block format")
    p.add_argument("--mode", required=True, choices=MODES)
    p.add_argument("--key-hex", required=True)
    p.add_argument("--block-size", type=int, default=MAX_BLOCK_V17)
    p.add_argument("--force-block-size", action="store_true",
                   help="allow blocks above the reader limit (negative tests)")
    p.add_argument("inp")
    p.add_argument("out")
    p.set_defaults(fn=cmd_encrypt)

    p = sub.add_parser("decrypt", help="check and decrypt a MindSpore-encrypted file")
    p.add_argument("--key-hex", required=True)
    p.add_argument("--expect-mode", choices=MODES)
    p.add_argument("inp")
    p.add_argument("out")
    p.set_defaults(fn=cmd_decrypt)

    p = sub.add_parser("layout", help="print the block layout as JSON (no key)")
    p.add_argument("inp")
    p.set_defaults(fn=cmd_layout)

    p = sub.add_parser("tamper", help="flip one ciphertext byte of one block")
    p.add_argument("inp")
    p.add_argument("out")
    p.add_argument("--block", type=int, required=True)
    p.add_argument("--byte", type=int, default=0)
    p.set_defaults(fn=cmd_tamper)

    p = sub.add_parser("zstd-seekable", help="write IN as seekable zstd")
    p.add_argument("inp")
    p.add_argument("out")
    p.add_argument("--frame-size", type=int, required=True)
    p.add_argument("--level", type=int, default=3)
    p.add_argument("--checksums", action="store_true")
    p.add_argument("--content-size", action="store_true")
    p.set_defaults(fn=cmd_zstd_seekable)

    p = sub.add_parser("zstd-layout", help="check a seekable zstd file, print its frames")
    p.add_argument("inp")
    p.set_defaults(fn=cmd_zstd_layout)

    p = sub.add_parser("frame-boundaries", help="decompressed offsets where frames start")
    p.add_argument("inp")
    p.set_defaults(fn=cmd_frame_boundaries)

    p = sub.add_parser("xxh64", help="XXH64 (seed 0) of a file")
    p.add_argument("inp")
    p.set_defaults(fn=cmd_xxh64)

    p = sub.add_parser("xxh64-selftest", help="check XXH64 against zstd frame checksums")
    p.set_defaults(fn=cmd_xxh64_selftest)

    a = ap.parse_args(argv)
    try:
        return a.fn(a)
    except OracleError as e:
        sys.stderr.write("%s\n" % e)
        return 1
    except OSError as e:
        sys.stderr.write("%s\n" % e)
        return 1


if __name__ == "__main__":
    sys.exit(main())
