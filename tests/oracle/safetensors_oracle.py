#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Independent test oracle for ckptfs mounts of .safetensors files.

Written from the format description (../shared/fixtures/safetensors/SOURCES.md, checked
on real files) and from the reference implementation's rules as read in its source
(safetensors/safetensors, safetensors/src/tensor.rs at 0051dd2957636e84d6ad6dad37cbdfb622ff4136:
read_metadata, Metadata::validate, prepare, Dtype).  It does not use the safetensors
package: the header is read with the standard library's json module (its string and
number scanners; the containers are walked here so that every element has a byte
offset), tensor bytes with numpy.  The tree rules (directory-name escaping, meta text,
the checks of a mounted tree) are ckpt_oracle's, imported, so that they live in one place.

    /usr/bin/python3 safetensors_oracle.py parse FILE
    /usr/bin/python3 safetensors_oracle.py check MOUNTPOINT FILE
    /usr/bin/python3 safetensors_oracle.py fake-tree DIR FILE   (expected tree, to test `check`)
    /usr/bin/python3 safetensors_oracle.py values FILE NAME     (a tensor's elements, one a line)
    /usr/bin/python3 safetensors_oracle.py gen OUT --case NAME [--seed N] [--count N]
    /usr/bin/python3 safetensors_oracle.py rewrite IN OUT [--unpadded]
                                  (IN's tensors and metadata through gen's writer; on a file
                                   written by safetensors itself OUT is byte-identical)
    /usr/bin/python3 safetensors_oracle.py bad OUT --case NAME   (prints the offset, or -)
    /usr/bin/python3 safetensors_oracle.py gen-set DIR [--shards N] [--count N] [--elems N] [--seed N]
    /usr/bin/python3 safetensors_oracle.py index DIR/model.safetensors.index.json
                                  (the index transformers would write for the set's shards)
    /usr/bin/python3 safetensors_oracle.py bad-set DIR --case NAME

Sharded sets (Hugging Face: model.safetensors.index.json beside its shards) are written
from the layout as transformers' save_pretrained documents and writes it (no public small
example set was found, see SOURCES.md): shards model-0000i-of-0000n.safetensors, each an
ordinary file with {"format": "pt"} metadata, and an index
    {"metadata": {"total_size": BYTES}, "weight_map": {NAME: SHARD, ...}}
dumped as json.dumps(index, indent=2, sort_keys=True) + "\n".  total_size is the bytes of
all tensors.  Every command taking FILE also takes an index file: its set's tensors, shard
by shard in name order, each in header order, after checking that the weight map lists
exactly each shard's tensors under that shard and that total_size is their bytes.

`parse` prints, tab-separated, one line per tensor in header order:
    tensor DIR DTYPE [SHAPE] NBYTES SHA256[:16] ONEFLOW_TYPE [PRESENTED_DIMS]
then `__metadata__ {compact JSON}` (or `none`), then `header LEN pad=SPACES data=BYTES`.
Control characters in DIR are printed as \\xNN.

Dtypes: the 22 of the reference's `Dtype` enum at the commit above, in its order (which is
also the writer's sort order, see gen): BOOL F4 F6_E2M3 F6_E3M2 U8 I8 F8_E5M2 F8_E4M3 F8_E8M0
F8_E4M3FNUZ F8_E5M2FNUZ I16 U16 F16 BF16 I32 U32 F32 C64 F64 I64 U64.  The fixtures
(SOURCES.md) only show F64 F32 F16 BF16 I64 I32 I16 I8 U32 U16 U8 BOOL; F8_E4M3/F8_E5M2
came with safetensors PR #383 (2023), the others (sub-byte types, sized in bits since 0.6;
F8_E8M0, C64, the FNUZ pair) in 0.6 and later.  No real file with them was found.

Meta (OneFlow DataType) per dtype, as ckpt_oracle (MindSpore types) and graph_oracle
(ONNX types) do; see MAPPING below:
    F64 kDouble, F32 kFloat, F16 kFloat16, BF16 kBFloat16 (out = raw bits),
    I64 kInt64, I32 kInt32, I16 kInt16, I8 kInt8, U8 kUInt8, BOOL kBool,
    U16 kUInt16, U32 kUInt32, U64 kUInt64 (OneFlow >= 0.6 has these; ckpt_oracle maps
        MindSpore's UInt16/32/64 the same way), C64 kComplex64,
    F8_E4M3 F8_E5M2 F8_E8M0 F8_E4M3FNUZ F8_E5M2FNUZ: kUInt8 with the tensor's dims (OneFlow
        has no 8-bit float; codec/onnx_mindir/onnx_mindir_reader.h shows ONNX's FLOAT8* the same way),
    F4 F6_E2M3 F6_E3M2: their packed bytes as kUInt8 [nbytes] (as ckpt_oracle's Int4 and
        graph_oracle's 4-bit types: no unpacking, whose layout we only know from code).
`out` is always the tensor's bytes as stored (little-endian, C order).

What a reader must accept (the reference's rules; where this oracle is stricter it says so):
  * bytes 0..8: header length N, u64 little-endian; N <= 100_000_000; 8 + N <= file size;
  * the header is UTF-8 and one JSON object, followed only by JSON whitespace (the writer
    pads with spaces; leading whitespace is allowed too);
  * key "__metadata__": an object of string values, or null (= absent, as the reference's
    Option); every other key is a tensor: an object with "dtype" (a name above), "shape"
    (array of integers >= 0) and "data_offsets" ([begin, end], integers, relative to the
    data section at 8 + N); other members are ignored, as the reference does;
  * prod(shape) * bits is a whole number of bytes, equal to end - begin, counted in
    64 bits without overflow; shape [] is one element;
  * sorted by (begin, end), the tensors tile the data section exactly: no gap, no overlap,
    nothing past its end, no trailing byte (the reference: InvalidOffset /
    MetadataIncompleteBuffer); several 0-byte tensors may share an offset;
  * JSON: numbers as in JSON (1.0, 1e0 and -0 are not integers), no NaN/Infinity, no lone
    surrogate \\uD800 escapes, at most 127 nested arrays/objects, the top-level object
    included (serde_json's recursion limit of 128);
  * stricter than the reference: a duplicate key in any object is refused (the reference's
    HashMap keeps the last one silently; it then refuses only if the lost tensor leaves a
    gap, safetensors issue #401), and a directory-name collision is refused.

Which byte offset a refusal names (file offsets; one line on stderr, exit 2):
  * 0 for a file under 8 bytes, N over the limit, 8 + N past the end;
  * the first byte that is not UTF-8;
  * JSON syntax: the first byte of the token that cannot come there (the end of the header,
    8 + N, when it ends early); a value that is not an object at the top level: its first
    byte; the opening quote of a string with a lone surrogate; the bracket opening the
    128th nested container;
  * the opening quote of the second of two equal keys; of a tensor's key when the value is
    not an object or a member is missing; of a collision's second name;
  * the value at fault: a "__metadata__" that is not an object (or one of its values that
    is not a string), a dtype, a shape that is not an array, the dim that is not an
    integer >= 0 or that takes the element count past 2**64-1 (the shape's last dim when
    the bit count overflows), the shape when bits are not a whole number of bytes,
    a data_offsets that is not two integers >= 0, or whose begin > end or whose size
    differs (its `[`);
  * layout, over the tensors sorted by (begin, end, header order): the `[` of the first
    data_offsets that runs past the data section, else that overlaps the previous one,
    else that leaves a gap after it; then trailing bytes: 8 + N + the end of the last one.
  Checks run in this order: file, UTF-8, JSON syntax (whole header), then each top-level
  member in header order, then the layout.

gen cases: alltypes scalars empty metadata_ms many unpadded names nulname (a name holding
NUL: valid, but refused by ckptfs, whose JSON library cannot hold it).  The writer is
safetensors' own (`prepare`): tensors sorted by dtype in descending enum order (U64 I64 F64
C64 F32 ... U8 ... BOOL: descending alignment, but ties within one size follow the enum, e.g.
I8 before U8), then by name bytewise; compact JSON (serde_json: no spaces, non-ASCII kept
as UTF-8), "__metadata__" first when given (its own keys in the order given here; the
reference's HashMap order is arbitrary), members dtype, shape, data_offsets; header padded
with spaces to a multiple of 8.  `unpadded` is the 2022 safetensors.numpy layout of the
hf samples: name order, no padding.

bad cases (see BAD_CASES): short headerpast toolarge notjson notobject trailingjunk nulpad
dupkey dupsame badutf8 surrogate baddtype negdim floatdim overflow subbyte missing
beginend pastend overlap sizemismatch gap trailing metanotobj metanonstr deep;
deepok (127 levels) is valid and prints -.

Exit status: 0 success; 1 check mismatch; 2 file refused / usage error.
"""

import argparse
import hashlib
import json
import json.decoder
import json.scanner
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402

import ckpt_oracle as co  # noqa: E402  (escaping, meta text, tree checks)

Refused = co.Refused
MAX_HEADER = 100_000_000
U64_MAX = 2 ** 64 - 1
MAX_DEPTH = 127  # serde_json: remaining_depth 128, an error when it reaches 0

# dtype -> (bits, OneFlow type, numpy dtype of out, kind); kind "num" keeps the dims,
# "flat" shows the packed bytes as [nbytes].  Insertion order = the reference's enum order.
MAPPING = {
    "BOOL": (8, "kBool", "?", "num"),
    "F4": (4, "kUInt8", "u1", "flat"),
    "F6_E2M3": (6, "kUInt8", "u1", "flat"),
    "F6_E3M2": (6, "kUInt8", "u1", "flat"),
    "U8": (8, "kUInt8", "u1", "num"),
    "I8": (8, "kInt8", "i1", "num"),
    "F8_E5M2": (8, "kUInt8", "u1", "num"),
    "F8_E4M3": (8, "kUInt8", "u1", "num"),
    "F8_E8M0": (8, "kUInt8", "u1", "num"),
    "F8_E4M3FNUZ": (8, "kUInt8", "u1", "num"),
    "F8_E5M2FNUZ": (8, "kUInt8", "u1", "num"),
    "I16": (16, "kInt16", "<i2", "num"),
    "U16": (16, "kUInt16", "<u2", "num"),
    "F16": (16, "kFloat16", "<f2", "num"),
    "BF16": (16, "kBFloat16", "<u2", "num"),  # numpy has no bfloat16: raw bits
    "I32": (32, "kInt32", "<i4", "num"),
    "U32": (32, "kUInt32", "<u4", "num"),
    "F32": (32, "kFloat", "<f4", "num"),
    "C64": (64, "kComplex64", "<c8", "num"),
    "F64": (64, "kDouble", "<f8", "num"),
    "I64": (64, "kInt64", "<i8", "num"),
    "U64": (64, "kUInt64", "<u8", "num"),
}
RANK = {name: i for i, name in enumerate(MAPPING)}

# ---------------------------------------------------------------------------------------
# Header JSON with positions.  Tokens are json's own (scanstring, NUMBER_RE); this walks
# the containers only, so that every value keeps its position and depth is bounded.
# ---------------------------------------------------------------------------------------

WS = re.compile(r"[ \t\n\r]*")
NUMBER = json.scanner.NUMBER_RE


class Node:
    """A JSON value and the character index where it starts.  Objects hold a list of
    (key, key_index, Node) so that duplicate keys stay visible; arrays a list of Node."""

    def __init__(self, kind, value, pos):
        self.kind, self.value, self.pos = kind, value, pos

    def plain(self):
        if self.kind == "object":
            return {k: v.plain() for k, _, v in self.value}
        if self.kind == "array":
            return [v.plain() for v in self.value]
        return self.value


class JsonError(Exception):
    def __init__(self, pos, reason):
        super().__init__(reason)
        self.pos, self.reason = pos, reason


def _ws(text, i):
    return WS.match(text, i).end()


def _string(text, i):
    """A string token starting at its quote; lone surrogates are refused (serde_json)."""
    try:
        s, end = json.decoder.scanstring(text, i + 1, True)
    except json.JSONDecodeError as exc:
        raise JsonError(exc.pos, exc.msg) from None
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        raise JsonError(i, "lone surrogate escape in string") from None
    return Node("string", s, i), end


def _value(text, i, depth):
    c = text[i:i + 1]
    if c == '"':
        return _string(text, i)
    if c in ("{", "["):
        if depth + 1 > MAX_DEPTH:
            raise JsonError(i, f"more than {MAX_DEPTH} nested arrays/objects")
        return (_object if c == "{" else _array)(text, i, depth + 1)
    m = NUMBER.match(text, i)
    if m:
        integer, frac, exp = m.groups()
        if frac or exp or integer == "-0":  # serde_json reads -0 as the float -0.0
            return Node("float", float(m.group()), i), m.end()
        return Node("int", int(integer), i), m.end()
    for word, value in (("true", True), ("false", False), ("null", None)):
        if text.startswith(word, i):
            return Node("bool" if value is not None else "null", value, i), i + len(word)
    raise JsonError(i, "expected a JSON value" if c else "header ends inside the JSON")


def _object(text, i, depth):
    members, open_at, i = [], i, _ws(text, i + 1)
    if text[i:i + 1] == "}":
        return Node("object", members, open_at), i + 1
    while True:
        if text[i:i + 1] != '"':
            raise JsonError(i, "expected a string key")
        key, j = _string(text, i)
        j = _ws(text, j)
        if text[j:j + 1] != ":":
            raise JsonError(j, "expected ':'")
        value, j = _value(text, _ws(text, j + 1), depth)
        members.append((key.value, i, value))
        j = _ws(text, j)
        c = text[j:j + 1]
        if c == "}":
            return Node("object", members, open_at), j + 1
        if c != ",":
            raise JsonError(j, "expected ',' or '}'")
        i = _ws(text, j + 1)


def _array(text, i, depth):
    items, open_at, i = [], i, _ws(text, i + 1)
    if text[i:i + 1] == "]":
        return Node("array", items, open_at), i + 1
    while True:
        value, j = _value(text, i, depth)
        items.append(value)
        j = _ws(text, j)
        c = text[j:j + 1]
        if c == "]":
            return Node("array", items, open_at), j + 1
        if c != ",":
            raise JsonError(j, "expected ',' or ']'")
        i = _ws(text, j + 1)


def parse_header_json(text):
    """The header's top-level value (must be an object) with positions, or JsonError."""
    i = _ws(text, 0)
    if text[i:i + 1] != "{":
        node, _ = _value(text, i, 0)  # a syntax error is reported as such first
        raise JsonError(i, f"header is a JSON {node.kind}, not an object")
    node, end = _object(text, i, 1)
    end = _ws(text, end)
    if end != len(text):
        raise JsonError(end, "trailing characters after the JSON object")
    # json itself must agree that this is JSON (it is the authority on tokens).
    json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    return node


# ---------------------------------------------------------------------------------------
# Reference parse.
# ---------------------------------------------------------------------------------------


def escape_name(tag):
    """ckpt_oracle's escaping; the empty name is "%" (codec/core/dir_name.h; ckpt_oracle would
    give an empty directory name, which a .ckpt tag in practice never is)."""
    return b"%" if tag == b"" else co.escape_tag(tag)


class Entry:
    """One tensor directory (the attributes ckpt_oracle.check_tensor_dir reads)."""

    def __init__(self, name, dtype, shape, begin, end, out, key_off, offsets_off):
        bits, of_type, np_dtype, kind = MAPPING[dtype]
        self.tag = name.encode("utf-8")
        self.part = None
        self.ms_type = dtype  # the format's type string: user.ckptfs.type
        self.shape = list(shape)
        self.dims = list(shape) if kind == "num" else [len(out)]
        self.np_dtype = np_dtype
        self.of_type = of_type
        self.begin, self.end, self.out = begin, end, out
        self.key_off, self.offsets_off = key_off, offsets_off
        self.dirname = escape_name(self.tag)
        self.meta = co.meta_bytes(self.dims, of_type)


class Parsed:
    def __init__(self, entries, metadata, header_len, pad, data_len):
        self.entries, self.metadata = entries, metadata
        self.header_len, self.pad, self.data_len = header_len, pad, data_len


class _Offsets:
    """Character index in the header -> byte offset in the file."""

    def __init__(self, text):
        self.text = text
        self.ascii = text.isascii()

    def __call__(self, ci):
        if self.ascii:
            return 8 + ci
        return 8 + len(self.text[:ci].encode("utf-8"))


def _refuse(at, pos, reason):
    raise Refused(at(pos), reason)


def _uint(node, at, what):
    if node.kind != "int" or node.value < 0 or node.value > U64_MAX:
        _refuse(at, node.pos, f"{what} is not an integer in 0..2**64-1: {node.plain()!r}")
    return node.value


def _check_metadata(node, at):
    if node.kind == "null":
        return None
    if node.kind != "object":
        _refuse(at, node.pos, f"__metadata__ is a JSON {node.kind}, not an object of strings")
    seen, out = set(), {}
    for key, key_pos, value in node.value:
        if key in seen:
            _refuse(at, key_pos, f"duplicate key {key!r} in __metadata__")
        seen.add(key)
        if value.kind != "string":
            _refuse(at, value.pos, f"__metadata__[{key!r}] is a JSON {value.kind}, not a string")
        out[key] = value.value
    return out


def _tensor_info(name, key_pos, node, at):
    """Validate one tensor's object; returns (dtype, shape, begin, end, offsets_pos)."""
    if node.kind != "object":
        _refuse(at, key_pos, f"tensor {name!r}: value is a JSON {node.kind}, not an object")
    fields = {}
    for key, pos, value in node.value:
        if key in fields:
            _refuse(at, pos, f"tensor {name!r}: duplicate member {key!r}")
        fields[key] = value
    for need in ("dtype", "shape", "data_offsets"):
        if need not in fields:
            _refuse(at, key_pos, f"tensor {name!r}: no {need!r}")
    dt = fields["dtype"]
    if dt.kind != "string" or dt.value not in MAPPING:
        _refuse(at, dt.pos, f"tensor {name!r}: unknown dtype {dt.plain()!r}")
    sh = fields["shape"]
    if sh.kind != "array":
        _refuse(at, sh.pos, f"tensor {name!r}: shape is a JSON {sh.kind}, not an array")
    shape, count = [], 1
    for d in sh.value:
        shape.append(_uint(d, at, f"tensor {name!r}: dim"))
        count *= shape[-1]
        if count > U64_MAX:
            _refuse(at, d.pos, f"tensor {name!r}: shape {[x.plain() for x in sh.value]} "
                               "overflows a 64-bit element count")
    bits = MAPPING[dt.value][0]
    last = sh.value[-1].pos if sh.value else sh.pos
    if count * bits > U64_MAX:
        _refuse(at, last, f"tensor {name!r}: bit count of shape {shape} overflows 64 bits")
    if count * bits % 8:
        _refuse(at, sh.pos, f"tensor {name!r}: {count} x {bits} bits is not a whole number of bytes")
    off = fields["data_offsets"]
    if off.kind != "array" or len(off.value) != 2:
        _refuse(at, off.pos, f"tensor {name!r}: data_offsets is not [begin, end]")
    begin, end = (_uint(v, at, f"tensor {name!r}: data_offsets entry") for v in off.value)
    if begin > end:
        _refuse(at, off.pos, f"tensor {name!r}: data_offsets [{begin}, {end}] end before begin")
    if end - begin != count * bits // 8:
        _refuse(at, off.pos, f"tensor {name!r}: {dt.value} {shape} needs {count * bits // 8} bytes, "
                             f"data_offsets [{begin}, {end}] hold {end - begin}")
    return dt.value, shape, begin, end, off.pos


def _check_layout(infos, at, data_len, data_start):
    cursor = 0
    for name, _dt, _shape, begin, end, off_pos in sorted(infos, key=lambda t: (t[3], t[4])):
        if end > data_len:
            _refuse(at, off_pos, f"tensor {name!r}: data_offsets [{begin}, {end}] run past the "
                                 f"data section ({data_len} bytes)")
        if begin < cursor:
            _refuse(at, off_pos, f"tensor {name!r}: data_offsets [{begin}, {end}] overlap the "
                                 f"previous tensor (ends at {cursor})")
        if begin > cursor:
            _refuse(at, off_pos, f"tensor {name!r}: gap of {begin - cursor} bytes before "
                                 f"data_offsets [{begin}, {end}]")
        cursor = end
    if cursor != data_len:
        raise Refused(data_start + cursor, f"{data_len - cursor} trailing bytes after the last tensor")


def reference_parse(buf):
    if len(buf) < 8:
        raise Refused(0, f"file of {len(buf)} bytes has no 8-byte header length")
    n = int.from_bytes(buf[:8], "little")
    if n > MAX_HEADER:
        raise Refused(0, f"header length {n} exceeds the limit {MAX_HEADER}")
    if 8 + n > len(buf):
        raise Refused(0, f"header length {n} runs past the end of the file ({len(buf)} bytes)")
    raw = bytes(buf[8:8 + n])
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Refused(8 + exc.start, "header is not UTF-8") from None
    at = _Offsets(text)
    try:
        root = parse_header_json(text)
    except JsonError as exc:
        raise Refused(at(exc.pos), exc.reason) from None
    except (ValueError, RecursionError) as exc:  # json disagrees: name the header
        raise Refused(8, f"header rejected by json: {exc}") from None

    metadata, infos, seen = None, [], {}
    for key, key_pos, value in root.value:
        if key in seen:
            _refuse(at, key_pos, f"duplicate key {key!r}")
        seen[key] = key_pos
        if key == "__metadata__":
            metadata = _check_metadata(value, at)
            continue
        infos.append((key, *_tensor_info(key, key_pos, value, at)))
    data_start = 8 + n
    data_len = len(buf) - data_start
    _check_layout(infos, at, data_len, data_start)

    entries, names = [], {}
    for name, dtype, shape, begin, end, off_pos in infos:
        out = bytes(buf[data_start + begin:data_start + end])
        e = Entry(name, dtype, shape, begin, end, out, at(seen[name]), at(off_pos))
        if e.dirname in names:
            raise Refused(e.key_off, f"directory name {e.dirname!r} of {name!r} collides with "
                                     f"{names[e.dirname]!r}")
        names[e.dirname] = name
        entries.append(e)
    pad = len(raw) - len(raw.rstrip(b" "))
    return Parsed(entries, metadata, n, pad, data_len)


def load_reference(path):
    with open(path, "rb") as f:
        return reference_parse(f.read())


# ---------------------------------------------------------------------------------------
# Writer (safetensors' `prepare`, or the 2022 numpy writer).
# ---------------------------------------------------------------------------------------


def serialize(tensors, metadata=None, unpadded=False):
    """tensors: list of (name, dtype, shape, bytes).  Returns the file's bytes."""
    if unpadded:
        order = sorted(tensors, key=lambda t: t[0].encode("utf-8"))
    else:
        order = sorted(tensors, key=lambda t: (-RANK[t[1]], t[0].encode("utf-8")))
    header, offset = {}, 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, data in order:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    if not unpadded:
        text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text + b"".join(t[3] for t in order)


def nbytes(dtype, shape):
    count = int(np.prod(shape, dtype=object)) if shape else 1
    return count * MAPPING[dtype][0] // 8


def random_data(rng, dtype, shape):
    """Random content of the right size: real values for the numeric types."""
    n = int(np.prod(shape, dtype=object)) if shape else 1
    np_dtype = MAPPING[dtype][2]
    if dtype in ("F16", "F32", "F64"):
        return rng.standard_normal(n).astype(np_dtype).tobytes()
    if dtype == "BF16":  # the upper half of a float32
        return (rng.standard_normal(n).astype("<f4").view("<u4") >> 16).astype("<u2").tobytes()
    if dtype == "C64":
        return (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype("<c8").tobytes()
    if dtype == "BOOL":
        return rng.integers(0, 2, size=n, dtype=np.uint8).tobytes()
    if MAPPING[dtype][3] == "flat" or dtype.startswith("F8"):
        return rng.integers(0, 256, size=nbytes(dtype, shape), dtype=np.uint8).tobytes()
    info = np.iinfo(np.dtype(np_dtype))
    return rng.integers(info.min, info.max, size=n, dtype=np.dtype(np_dtype), endpoint=True).tobytes()


def spec(rng, name, dtype, shape):
    return (name, dtype, list(shape), random_data(rng, dtype, shape))


ALLTYPE_SHAPES = [[2, 4], [3], [4, 2, 2], [8], [1, 4]]


def gen_file(case, rng, count):
    if case == "alltypes":
        # sub-byte types need a whole number of bytes: 8 elements are 4 or 6 bytes
        tensors = [spec(rng, f"t.{d.lower()}", d, [2, 4] if MAPPING[d][0] < 8
                        else ALLTYPE_SHAPES[i % len(ALLTYPE_SHAPES)]) for i, d in enumerate(MAPPING)]
        return serialize(tensors)
    if case == "scalars":
        tensors = [spec(rng, n, d, []) for n, d in
                   (("episode_index", "I64"), ("next.reward", "F32"), ("next.done", "BOOL"),
                    ("half", "F16"), ("double", "F64"), ("byte", "U8"), ("bf", "BF16"), ("z", "C64"))]
        tensors.append(spec(rng, "vector", "F32", [3]))
        return serialize(tensors)
    if case == "empty":
        tensors = [spec(rng, n, d, s) for n, d, s in
                   (("e.f32_0", "F32", [0]), ("e.f16_203", "F16", [2, 0, 3]), ("e.i64_0x4", "I64", [0, 4]),
                    ("e.bool_0", "BOOL", [0]), ("e.f4_0", "F4", [0]), ("w", "F32", [2]), ("b", "U8", [3]))]
        return serialize(tensors)
    if case == "metadata_ms":
        # MindSpore save_checkpoint(format="safetensors"): safetensors.numpy.save_file with
        # {"format": "ms"}, parameters added in sorted(name) order (the writer re-sorts anyway).
        names = [("conv1.weight", "F32", [4, 3, 3, 3]), ("bn1.gamma", "F32", [4]),
                 ("bn1.beta", "F32", [4]), ("bn1.moving_mean", "F32", [4]),
                 ("bn1.moving_variance", "F32", [4]), ("fc.weight", "F16", [10, 16]),
                 ("fc.bias", "F16", [10]), ("moments.fc.weight", "F16", [10, 16]),
                 ("global_step", "I32", [1]), ("learning_rate", "F32", [])]
        return serialize([spec(rng, n, d, s) for n, d, s in sorted(names)], {"format": "ms"})
    if case == "many":
        return serialize([spec(rng, f"layer.{i}.weight", "F32", [4]) for i in range(count)])
    if case == "unpadded":
        # 2022 safetensors.numpy: name order (uppercase first), no padding, so F64 data
        # sits at an odd offset; values arange(-3, 3) as the hf samples.
        tensors = [(n, d, [6], np.arange(-3, 3).astype(MAPPING[d][2]).tobytes())
                   for n, d in (("B", "U8"), ("d", "F64"), ("e", "F16"), ("f", "F32"),
                                ("h", "I16"), ("q", "I64"), ("Q", "U64"))]
        return serialize(tensors, {"test": "a"}, unpadded=True)
    if case == "names":
        names = ["a/b", "100%", ".hidden", "snapshot_done", "with space", "\u00fc-unicode", "",
                 "tab\there", "quote\"back\\slash", "x" * 300, "..", "%2F"]
        return serialize([spec(rng, n, "F32", [2]) for n in names])
    if case == "nulname":
        # Valid for the reference (a Rust String may hold NUL); ckptfs's JSON
        # library cannot hold it in a key, so ckptfs refuses the file.
        return serialize([spec(rng, n, "F32", [2]) for n in ("a", "nul\u0000byte")])
    raise SystemExit(f"unknown gen case {case!r}")


GEN_CASES = ["alltypes", "scalars", "empty", "metadata_ms", "many", "unpadded", "names",
             "nulname"]


def cmd_rewrite(src, out, unpadded):
    p = load_reference(src)
    tensors = [(e.tag.decode("utf-8"), e.ms_type, e.shape, e.out) for e in p.entries]
    with open(out, "wb") as f:
        f.write(serialize(tensors, p.metadata, unpadded))


# ---------------------------------------------------------------------------------------
# Hostile files.  A header is built piece by piece, remembering the offsets of interest.
# ---------------------------------------------------------------------------------------


class Header:
    def __init__(self):
        self.buf = bytearray(b"{")

    def mark(self):
        return 8 + len(self.buf)

    def member(self, key_json, value_json):
        """Append a raw member; returns (key offset, value offset) in the file."""
        if len(self.buf) > 1:
            self.buf += b","
        k = self.mark()
        self.buf += key_json + b":"
        v = self.mark()
        self.buf += value_json
        return k, v

    def tensor(self, name, dtype, dims, begin, end, extra=b""):
        """A tensor member written element by element; returns its offsets."""
        if len(self.buf) > 1:
            self.buf += b","
        marks = {"key": self.mark()}
        self.buf += json.dumps(name, ensure_ascii=False).encode() + b':{"dtype":'
        marks["dtype"] = self.mark()
        self.buf += dtype + b',"shape":'
        marks["shape"] = self.mark()
        self.buf += b"["
        marks["dims"] = []
        for i, d in enumerate(dims):
            self.buf += b"," if i else b""
            marks["dims"].append(self.mark())
            self.buf += d
        self.buf += b'],"data_offsets":'
        marks["offsets"] = self.mark()
        self.buf += b"[%d,%d]" % (begin, end) + extra + b"}"
        return marks

    def close(self, data, tail=b"}", pad=True):
        text = bytes(self.buf) + tail
        if pad:
            text += b" " * (-len(text) % 8)
        return len(text).to_bytes(8, "little") + text + data


def _good(h, rng, base=0):
    """Two ordinary F32 [4] tensors at base..base+32; returns their bytes."""
    h.tensor("good.a", b'"F32"', [b"4"], base, base + 16)
    h.tensor("good.b", b'"F32"', [b"4"], base + 16, base + 32)
    return random_data(rng, "F32", [8])


def _victim(case, rng):
    """Cases that put one bad tensor between good ones: (file, offset)."""
    h = Header()
    data = _good(h, rng)
    f32_16 = random_data(rng, "F32", [4])
    if case == "baddtype":
        m = h.tensor("victim", b'"F128"', [b"4"], 32, 48)
        return h.close(data + f32_16), m["dtype"]
    if case == "negdim":
        m = h.tensor("victim", b'"F32"', [b"4", b"-3"], 32, 48)
        return h.close(data + f32_16), m["dims"][1]
    if case == "floatdim":
        m = h.tensor("victim", b'"F32"', [b"2.0", b"2"], 32, 48)
        return h.close(data + f32_16), m["dims"][0]
    if case == "overflow":
        m = h.tensor("victim", b'"F32"', [b"%d" % 2 ** 40, b"%d" % 2 ** 40], 32, 48)
        return h.close(data + f32_16), m["dims"][1]
    if case == "subbyte":
        m = h.tensor("victim", b'"F4"', [b"3"], 32, 34)
        return h.close(data + f32_16[:2]), m["shape"]
    if case == "missing":
        k, _ = h.member(b'"victim"', b'{"dtype":"F32","shape":[4]}')
        return h.close(data), k
    if case == "beginend":
        m = h.tensor("victim", b'"F32"', [b"0"], 32, 16)
        return h.close(data), m["offsets"]
    if case == "sizemismatch":
        m = h.tensor("victim", b'"F32"', [b"3", b"4"], 32, 72)
        return h.close(data + random_data(rng, "F32", [10])), m["offsets"]
    if case == "pastend":
        m = h.tensor("victim", b'"F32"', [b"4"], 32, 48)
        return h.close(data + f32_16[:10]), m["offsets"]
    if case == "overlap":
        m = h.tensor("victim", b'"F32"', [b"4"], 24, 40)
        return h.close(data + f32_16[:8]), m["offsets"]
    if case == "gap":
        m = h.tensor("victim", b'"F32"', [b"4"], 40, 56)
        return h.close(data + random_data(rng, "F32", [6])), m["offsets"]
    if case == "trailing":
        h.tensor("victim", b'"F32"', [b"4"], 32, 48)
        out = h.close(data + f32_16 + b"\x00junk")
        return out, len(out) - 5
    if case in ("dupkey", "dupsame"):
        begin = 0 if case == "dupsame" else 32
        m = h.tensor("good.a", b'"F32"', [b"4"], begin, begin + 16)
        return h.close(data + (b"" if case == "dupsame" else f32_16)), m["key"]
    if case == "badutf8":
        k, _ = h.member(b'"bad\xffname"', b'{"dtype":"F32","shape":[4],"data_offsets":[32,48]}')
        return h.close(data + f32_16), k + 4
    if case == "surrogate":
        k, _ = h.member(b'"bad\\ud800name"', b'{"dtype":"F32","shape":[4],"data_offsets":[32,48]}')
        return h.close(data + f32_16), k
    if case == "metanotobj":
        _, v = h.member(b'"__metadata__"', b'"pt"')
        return h.close(data), v
    if case == "metanonstr":
        _, v = h.member(b'"__metadata__"', b'{"format":"pt","epoch":')
        h.buf += b"1}"
        return h.close(data), v + len(b'{"format":"pt","epoch":')
    if case in ("deep", "deepok"):
        # the top-level object and the tensor's object are levels 1 and 2
        levels = 200 if case == "deep" else MAX_DEPTH - 2
        m = h.tensor("victim", b'"F32"', [b"4"], 32, 48,
                     extra=b',"x":' + b"[" * levels + b"]" * levels)
        first = m["offsets"] + len(b"[32,48]") + len(b',"x":')
        return h.close(data + f32_16), (first + MAX_DEPTH - 2 if case == "deep" else None)
    raise SystemExit(f"unknown bad case {case!r}")


def bad_file(case, rng):
    """Return (bytes, offset or None) for a hostile-file case."""
    good = Header()
    data = _good(good, rng)
    if case == "short":
        return b"\x10\x00\x00", 0
    if case == "headerpast":
        whole = good.close(data)
        return (len(whole) + 100).to_bytes(8, "little") + whole[8:], 0
    if case == "toolarge":
        whole = good.close(data)
        return (MAX_HEADER + 1).to_bytes(8, "little") + whole[8:], 0
    if case == "notjson":
        k, v = good.member(b'"victim"', b"nope")
        return good.close(data), v
    if case == "notobject":
        text = b'[{"dtype":"F32","shape":[4],"data_offsets":[0,16]}]'
        text += b" " * (-len(text) % 8)
        return len(text).to_bytes(8, "little") + text + data[:16], 8
    if case == "trailingjunk":
        out = good.close(data, tail=b"}x", pad=False)
        return out, 8 + out[8:].index(b"}x") + 1
    if case == "nulpad":
        text = bytes(good.buf) + b"}"
        text += b"\x00" * (8 - len(text) % 8)
        return len(text).to_bytes(8, "little") + text + data, 8 + len(good.buf) + 1
    return _victim(case, rng)


BAD_CASES = ["short", "headerpast", "toolarge", "notjson", "notobject", "trailingjunk", "nulpad",
             "dupkey", "dupsame", "badutf8", "surrogate", "baddtype", "negdim", "floatdim",
             "overflow", "subbyte", "missing", "beginend", "pastend", "overlap", "sizemismatch",
             "gap", "trailing", "metanotobj", "metanonstr", "deep", "deepok"]

# ---------------------------------------------------------------------------------------
# Commands.
# ---------------------------------------------------------------------------------------
# Sharded sets.
# ---------------------------------------------------------------------------------------

INDEX_SUFFIX = ".safetensors.index.json"
SET_DTYPES = ["F32", "F16", "BF16", "I64", "U8"]


def index_text(index):
    """The index file as transformers' save_pretrained writes it."""
    return (json.dumps(index, indent=2, sort_keys=True) + "\n").encode("utf-8")


def gen_set(directory, rng, shards, count, elems=3):
    tensors = [spec(rng, f"model.layers.{i}.weight", SET_DTYPES[i % len(SET_DTYPES)],
                    [i % 4 + 1, elems]) for i in range(count)]
    names = [f"model-{k + 1:05d}-of-{shards:05d}.safetensors" for k in range(shards)]
    per = -(-count // shards)
    weight_map = {}
    for k, name in enumerate(names):
        part = tensors[k * per:(k + 1) * per]
        co.write_file(os.path.join(directory, name), [serialize(part, {"format": "pt"})])
        weight_map.update((t[0], name) for t in part)
    index = {"metadata": {"total_size": sum(len(t[3]) for t in tensors)}, "weight_map": weight_map}
    co.write_file(os.path.join(directory, "model" + INDEX_SUFFIX), [index_text(index)])


def load_set(path):
    """(index, [(shard, parse)]) of a set, checked for consistency."""
    with open(path, "rb") as f:
        index = json.loads(f.read())
    wm = index["weight_map"]
    folder = os.path.dirname(path)
    shards = [(s, load_reference(os.path.join(folder, s))) for s in sorted(set(wm.values()))]
    names = set()
    total = 0
    for shard, p in shards:
        for e in p.entries:
            name = e.tag.decode("utf-8")
            if wm.get(name) != shard:
                raise co.CheckFailed(f"{name!r} is in {shard}, the weight map says {wm.get(name)}")
            if name in names:
                raise co.CheckFailed(f"{name!r} is in two shards")
            names.add(name)
            total += len(e.out)
    if names != set(wm):
        raise co.CheckFailed(f"weight map names {sorted(set(wm) - names)[:5]} that no shard holds")
    if index.get("metadata", {}).get("total_size") != total:
        raise co.CheckFailed(f"total_size {index.get('metadata', {}).get('total_size')}, the tensors "
                             f"take {total}")
    return index, shards


def load_entries(path):
    """A file's tensors, or a set's: shard by shard."""
    if not path.endswith(INDEX_SUFFIX):
        return load_reference(path).entries
    return [e for _, p in load_set(path)[1] for e in p.entries]


def cmd_index(path):
    """The index transformers would write for the set's shards as they are."""
    index, shards = load_set(path)
    index["weight_map"] = {e.tag.decode("utf-8"): s for s, p in shards for e in p.entries}
    sys.stdout.buffer.write(index_text(index))


SET_BAD_CASES = ["notjson", "nomap", "absolute", "outside", "symlink", "fifo", "missing",
                 "unlisted", "wrongshard", "phantom", "twoshards", "hardlink", "notname"]


def bad_set(directory, case, rng):
    """A hostile set in DIR (its index model.safetensors.index.json); prints what the
    refusal must name."""
    gen_set(directory, rng, 2, 6)
    idx = os.path.join(directory, "model" + INDEX_SUFFIX)
    index = json.loads(open(idx, "rb").read())
    wm = index["weight_map"]
    first, second = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
    a = next(n for n, s in wm.items() if s == first)
    if case == "notjson":
        co.write_file(idx, [b'{"weight_map": {"a": "x.safetensors",}}'])
        return "not valid JSON"
    if case == "nomap":
        del index["weight_map"]
    elif case == "absolute":
        wm[a] = "/etc/passwd"
    elif case == "outside":
        wm[a] = "../" + first
    elif case == "symlink":
        os.rename(os.path.join(directory, first), os.path.join(directory, "real.safetensors"))
        os.symlink("real.safetensors", os.path.join(directory, first))
    elif case == "fifo":
        os.unlink(os.path.join(directory, first))
        os.mkfifo(os.path.join(directory, first))
    elif case == "missing":
        os.unlink(os.path.join(directory, second))
    elif case == "unlisted":
        del wm[a]
    elif case == "wrongshard":
        wm[a] = second
    elif case == "phantom":
        wm["not.in.any.shard"] = first
    elif case == "twoshards":
        # a tensor of the first shard also in the second
        p = load_reference(os.path.join(directory, second))
        e = next(e for e in load_reference(os.path.join(directory, first)).entries
                 if e.tag.decode() == a)
        tensors = [(x.tag.decode(), x.ms_type, x.shape, x.out) for x in p.entries]
        tensors.append((a, e.ms_type, e.shape, e.out))
        co.write_file(os.path.join(directory, second), [serialize(tensors, {"format": "pt"})])
    elif case == "hardlink":
        os.unlink(os.path.join(directory, second))
        os.link(os.path.join(directory, first), os.path.join(directory, second))
    elif case == "notname":
        wm[a] = "shard\x1b[2J.safetensors"
    co.write_file(idx, [index_text(index)])
    return {"nomap": "no \"weight_map\"", "absolute": "not a file name inside",
            "outside": "leads out of the model's directory", "symlink": "symbolic link",
            "fifo": "is a FIFO", "missing": "No such file", "unlisted": "is not in the index",
            "wrongshard": "puts it in", "phantom": "which does not hold it",
            "twoshards": "puts it in", "hardlink": "a hard link",
            "notname": "not a file name inside"}[case]


# ---------------------------------------------------------------------------------------


def _show(name):
    return re.sub(rb"[\x00-\x1f\x7f]", lambda m: b"\\x%02x" % m.group()[0], name)


def cmd_parse(path):
    if path.endswith(INDEX_SUFFIX):
        index, shards = load_set(path)
        w = sys.stdout.buffer
        for shard, p in shards:
            w.write(b"shard\t" + shard.encode("utf-8") + b"\n")
            for e in p.entries:
                w.write(b"\t".join([b"tensor", _show(e.dirname), e.ms_type.encode(),
                                    co.shape_text(e.shape), b"%d" % len(e.out),
                                    hashlib.sha256(e.out).hexdigest()[:16].encode()]) + b"\n")
        w.write(b"metadata\t" + json.dumps(index.get("metadata"), separators=(",", ":")).encode()
                + b"\n")
        return
    p = load_reference(path)
    w = sys.stdout.buffer
    for e in p.entries:
        w.write(b"\t".join([b"tensor", _show(e.dirname), e.ms_type.encode(), co.shape_text(e.shape),
                            b"%d" % len(e.out), hashlib.sha256(e.out).hexdigest()[:16].encode(),
                            e.of_type.encode(), co.shape_text(e.dims)]) + b"\n")
    meta = "none" if p.metadata is None else json.dumps(p.metadata, separators=(",", ":"), ensure_ascii=False)
    w.write(b"__metadata__\t" + meta.encode("utf-8") + b"\n")
    w.write(b"header\t%d\tpad=%d\tdata=%d\n" % (p.header_len, p.pad, p.data_len))


def cmd_values(path, name):
    for e in load_entries(path):
        if e.tag.decode("utf-8") != name:
            continue
        arr = np.frombuffer(e.out, dtype=e.np_dtype)
        if e.ms_type == "BF16":
            arr = (arr.astype("<u4") << 16).view("<f4")
        for v in arr.tolist():
            print(v)
        return
    raise SystemExit(f"no tensor {name!r}")


def cmd_check(mount, path):
    entries = load_entries(path)
    co.check_mounted(mount, entries)
    print(f"ok {len(entries)} tensors")


def fake_tree(directory, path):
    """Materialise the expected tree (for testing `check` itself without ckptfs)."""
    entries = load_entries(path)
    root = os.fsencode(directory)
    os.makedirs(root, exist_ok=True)
    co.write_file(os.path.join(root, b"snapshot_done"), [])
    for e in entries:
        d = os.path.join(root, e.dirname)
        os.mkdir(d)
        co.write_file(os.path.join(d, b"meta"), [e.meta])
        co.write_file(os.path.join(d, b"out"), [e.out])
        os.setxattr(d, b"user.ckptfs.name", e.tag)
        os.setxattr(d, b"user.ckptfs.type", e.ms_type.encode())
        os.setxattr(d, b"user.ckptfs.shape", co.shape_text(e.dims))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("parse", help="reference parse, one line a tensor")
    p.add_argument("file")
    p = sub.add_parser("check", help="compare a mounted tree with the reference parse")
    p.add_argument("mount")
    p.add_argument("file")
    p = sub.add_parser("fake-tree", help="build the expected tree in DIR (tests `check`)")
    p.add_argument("dir")
    p.add_argument("file")
    p = sub.add_parser("values", help="a tensor's elements, one a line")
    p.add_argument("file")
    p.add_argument("name")
    p = sub.add_parser("gen", help="write a test file as safetensors' writer does")
    p.add_argument("out")
    p.add_argument("--case", required=True, choices=GEN_CASES)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--count", type=int, default=10, help="tensor count for --case many")
    p = sub.add_parser("rewrite", help="IN's tensors and metadata through gen's writer")
    p.add_argument("file")
    p.add_argument("out")
    p.add_argument("--unpadded", action="store_true", help="the 2022 layout")
    p = sub.add_parser("gen-set", help="write a sharded set into DIR as transformers does")
    p.add_argument("dir")
    p.add_argument("--shards", type=int, default=3)
    p.add_argument("--count", type=int, default=12)
    p.add_argument("--elems", type=int, default=3, help="columns of each [rows, elems] tensor")
    p.add_argument("--seed", type=int, default=0)
    p = sub.add_parser("index", help="the index transformers would write for a set's shards")
    p.add_argument("file")
    p = sub.add_parser("bad-set", help="write a hostile set into DIR; prints what to name")
    p.add_argument("dir")
    p.add_argument("--case", required=True, choices=SET_BAD_CASES)
    p.add_argument("--seed", type=int, default=0)
    p = sub.add_parser("bad", help="write a hostile file; prints the offset to name, or -")
    p.add_argument("out")
    p.add_argument("--case", required=True, choices=BAD_CASES)
    p.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    try:
        if args.cmd == "parse":
            cmd_parse(args.file)
        elif args.cmd == "check":
            cmd_check(args.mount, args.file)
        elif args.cmd == "fake-tree":
            fake_tree(args.dir, args.file)
        elif args.cmd == "values":
            cmd_values(args.file, args.name)
        elif args.cmd == "gen":
            co.write_file(args.out, [gen_file(args.case, np.random.default_rng(args.seed), args.count)])
        elif args.cmd == "rewrite":
            cmd_rewrite(args.file, args.out, args.unpadded)
        elif args.cmd == "gen-set":
            gen_set(args.dir, np.random.default_rng(args.seed), args.shards, args.count, args.elems)
        elif args.cmd == "index":
            cmd_index(args.file)
        elif args.cmd == "bad-set":
            print(bad_set(args.dir, args.case, np.random.default_rng(args.seed)))
        elif args.cmd == "bad":
            data, offset = bad_file(args.case, np.random.default_rng(args.seed))
            co.write_file(args.out, [data])
            print("-" if offset is None else offset)
    except Refused as exc:
        print(f"{getattr(args, 'file', '')}: {exc}", file=sys.stderr)
        return 2
    except co.CheckFailed as exc:
        print(f"FAIL: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
