#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Independent test oracle for ckptfs (MindSpore .ckpt mounted as a OneFlow tree).

This module is written from the format notes only (mindspore-formats.md sections 1, 2
and 7; oneflow-layout.md sections 0, 1.4 and 2) and from the tree specification given
to it; it shares no code with the C program under test.  It uses the protobuf runtime
(message classes built at run time from hand-written FileDescriptorProtos, since no
protoc is available) as the reference encoder/decoder, so that a bug in ckptfs's
hand-written wire parser cannot hide behind the same bug in the oracle.

Run it with Debian's interpreter (it needs python3-protobuf and python3-numpy):

    /usr/bin/python3 ckpt_oracle.py gen OUT.ckpt --case NAME [--seed N] [--count N]
    /usr/bin/python3 ckpt_oracle.py parse MODEL.ckpt [--full]
    /usr/bin/python3 ckpt_oracle.py check MOUNTPOINT MODEL.ckpt
    /usr/bin/python3 ckpt_oracle.py meta-of DIMS TYPE
    /usr/bin/python3 ckpt_oracle.py bigfile OUT.ckpt --size-gib G [--seed N]
    /usr/bin/python3 ckpt_oracle.py check-big MOUNTPOINT OUT.ckpt
    /usr/bin/python3 ckpt_oracle.py bad OUT --case NAME [--seed N]
    /usr/bin/python3 ckpt_oracle.py from-oneflow SNAPSHOT_DIR OUT.ckpt   (meta parsed with
                                                                 text_format, out as is)
    /usr/bin/python3 ckpt_oracle.py fake-tree DIR MODEL.ckpt     (builds the expected tree;
                                                                 only for testing `check`)

`gen` cases: alltypes oneshot sliced repeat packed crc crcbad names maptensor int4 many.
`bad` cases: truncated pastend longvarint wiretype negdim overflow sizemismatch badtype
encgcm enccbc zstd.  `bad` prints the byte offset of the offending element: the first
byte (key) of the top-level record for truncated/pastend, the first byte of the overlong
varint for longvarint, the key byte of the offending field for wiretype/negdim/overflow/
sizemismatch/badtype (for overflow: the dim at which the byte count exceeds 2**63-1), and
0 (the magic) for encgcm/enccbc/zstd.  `parse` refuses every one of those files and
reports the same offset on stderr.

Reference semantics (MindSpore's loader): strip a 17-byte `crc_num` trailer, parse the
whole file as one `Checkpoint`, group *adjacent* Values with equal tags (contents
concatenated, dims/type from the last Value; map tensors: each of key/value/status
concatenated with dims[0] summed); a later non-adjacent repeat of a tag replaces the
earlier entry and takes the position of its last occurrence.

Exit status: 0 success; 1 check mismatch; 2 file refused / usage error.
"""

import argparse
import hashlib
import json
import math
import os
import stat
import sys
import zlib

import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format
from google.protobuf.internal import encoder

# ---------------------------------------------------------------------------------------
# Protobuf schemas, built at run time (proto2).
# ---------------------------------------------------------------------------------------

_F = descriptor_pb2.FieldDescriptorProto
_OPT, _REQ, _REP = _F.LABEL_OPTIONAL, _F.LABEL_REQUIRED, _F.LABEL_REPEATED


def _add_field(msg, name, number, label, ftype, type_name=None, oneof_index=None, packed=False):
    f = msg.field.add(name=name, number=number, label=label, type=ftype)
    if type_name:
        f.type_name = type_name
    if oneof_index is not None:
        f.oneof_index = oneof_index
    if packed:
        f.options.packed = True
    return f


def _checkpoint_file(name, package, packed_dims):
    """checkpoint.proto v3 (v2.0+): Checkpoint{Value}, TensorProto, MapTensorProto."""
    fdp = descriptor_pb2.FileDescriptorProto(name=name, syntax="proto2")
    prefix = "." + package if package else ""
    if package:
        fdp.package = package
    ckpt = fdp.message_type.add(name="Checkpoint")
    value = ckpt.nested_type.add(name="Value")
    value.oneof_decl.add(name="value")
    _add_field(value, "tag", 1, _REQ, _F.TYPE_STRING)
    _add_field(value, "tensor", 2, _OPT, _F.TYPE_MESSAGE, prefix + ".TensorProto", oneof_index=0)
    _add_field(value, "maptensor", 3, _OPT, _F.TYPE_MESSAGE, prefix + ".MapTensorProto", oneof_index=0)
    _add_field(ckpt, "value", 1, _REP, _F.TYPE_MESSAGE, prefix + ".Checkpoint.Value")
    tensor = fdp.message_type.add(name="TensorProto")
    _add_field(tensor, "dims", 1, _REP, _F.TYPE_INT64, packed=packed_dims)
    _add_field(tensor, "tensor_type", 2, _REQ, _F.TYPE_STRING)
    _add_field(tensor, "tensor_content", 3, _REQ, _F.TYPE_BYTES)
    maptensor = fdp.message_type.add(name="MapTensorProto")
    _add_field(maptensor, "tensor", 1, _REP, _F.TYPE_MESSAGE, prefix + ".TensorProto")
    return fdp


def _checkpoint_v05_file():
    """v0.5.0-beta only: Checkpoint gains `required string model_type = 2`."""
    fdp = descriptor_pb2.FileDescriptorProto(name="checkpoint_v05.proto", syntax="proto2")
    fdp.dependency.append("checkpoint.proto")
    msg = fdp.message_type.add(name="CheckpointV05")
    _add_field(msg, "value", 1, _REP, _F.TYPE_MESSAGE, ".Checkpoint.Value")
    _add_field(msg, "model_type", 2, _REQ, _F.TYPE_STRING)
    return fdp


ONEFLOW_DATA_TYPES = [
    "kInvalidDataType", "kChar", "kFloat", "kDouble", "kInt8", "kInt32", "kInt64", "kUInt8",
    "kOFRecord", "kFloat16", "kTensorBuffer", "kBFloat16", "kBool", "kUInt16", "kUInt32",
    "kUInt64", "kUInt128", "kInt16", "kInt128", "kComplex32", "kComplex64", "kComplex128",
]


def _oneflow_file():
    """oneflow.ShapeProto, oneflow.DataType (v0.6+ numbering), oneflow.VariableMetaInfo."""
    fdp = descriptor_pb2.FileDescriptorProto(
        name="oneflow/core/framework/variable_meta_info.proto", package="oneflow", syntax="proto2")
    shape = fdp.message_type.add(name="ShapeProto")
    _add_field(shape, "dim", 1, _REP, _F.TYPE_INT64)
    enum = fdp.enum_type.add(name="DataType")
    for number, name in enumerate(ONEFLOW_DATA_TYPES):
        enum.value.add(name=name, number=number)
    meta = fdp.message_type.add(name="VariableMetaInfo")
    _add_field(meta, "shape", 2, _REQ, _F.TYPE_MESSAGE, ".oneflow.ShapeProto")
    _add_field(meta, "data_type", 3, _REQ, _F.TYPE_ENUM, ".oneflow.DataType")
    return fdp


_POOL = descriptor_pool.DescriptorPool()
for _fdp in (_checkpoint_file("checkpoint.proto", "", False), _checkpoint_v05_file(),
             _checkpoint_file("checkpoint_packed.proto", "packed", True), _oneflow_file()):
    _POOL.Add(_fdp)


def _message_class(full_name):
    desc = _POOL.FindMessageTypeByName(full_name)
    if hasattr(message_factory, "GetMessageClass"):  # protobuf >= 4.22
        return message_factory.GetMessageClass(desc)
    return message_factory.MessageFactory(_POOL).GetPrototype(desc)


Checkpoint = _message_class("Checkpoint")
CheckpointValue = _message_class("Checkpoint.Value")
TensorProto = _message_class("TensorProto")
MapTensorProto = _message_class("MapTensorProto")
CheckpointV05 = _message_class("CheckpointV05")
PackedCheckpoint = _message_class("packed.Checkpoint")
PackedCheckpointValue = _message_class("packed.Checkpoint.Value")
PackedTensorProto = _message_class("packed.TensorProto")
ShapeProto = _message_class("oneflow.ShapeProto")
VariableMetaInfo = _message_class("oneflow.VariableMetaInfo")
_DATA_TYPE_ENUM = _POOL.FindEnumTypeByName("oneflow.DataType")

# ---------------------------------------------------------------------------------------
# Type tables.
# ---------------------------------------------------------------------------------------

# MindSpore tensor_type -> (OneFlow DataType name, bytes per element, numpy dtype for out).
MS_TYPES = {
    "Float16": ("kFloat16", 2, "<f2"),
    "Float32": ("kFloat", 4, "<f4"),
    "Float64": ("kDouble", 8, "<f8"),
    "BFloat16": ("kBFloat16", 2, "<u2"),  # numpy has no bfloat16: raw bits
    "Int8": ("kInt8", 1, "i1"),
    "Int16": ("kInt16", 2, "<i2"),
    "Int32": ("kInt32", 4, "<i4"),
    "Int64": ("kInt64", 8, "<i8"),
    "UInt8": ("kUInt8", 1, "u1"),
    "UInt16": ("kUInt16", 2, "<u2"),
    "UInt32": ("kUInt32", 4, "<u4"),
    "UInt64": ("kUInt64", 8, "<u8"),
    "Bool": ("kBool", 1, "?"),
    "Complex64": ("kComplex64", 8, "<c8"),
    "Complex128": ("kComplex128", 16, "<c16"),
    "Int4": ("kUInt8", 1, "u1"),  # packed qint4x2, exposed as raw bytes, same dims
}
# numpy dtype strings used inside map tensors.
NP_TYPES = {
    "int8": ("kInt8", 1, "i1"), "int16": ("kInt16", 2, "<i2"),
    "int32": ("kInt32", 4, "<i4"), "int64": ("kInt64", 8, "<i8"),
    "uint8": ("kUInt8", 1, "u1"), "uint16": ("kUInt16", 2, "<u2"),
    "uint32": ("kUInt32", 4, "<u4"), "uint64": ("kUInt64", 8, "<u8"),
    "float16": ("kFloat16", 2, "<f2"), "float32": ("kFloat", 4, "<f4"),
    "float64": ("kDouble", 8, "<f8"), "bool": ("kBool", 1, "?"),
    "complex64": ("kComplex64", 8, "<c8"), "complex128": ("kComplex128", 16, "<c16"),
}
MAP_PARTS = ("key", "value", "status")
INT64_MAX = 2 ** 63 - 1

# ---------------------------------------------------------------------------------------
# Errors.
# ---------------------------------------------------------------------------------------


class Refused(Exception):
    """The checkpoint is malformed; `offset` is a byte offset in the file or None."""

    def __init__(self, offset, reason):
        super().__init__(reason)
        self.offset = offset
        self.reason = reason

    def __str__(self):
        where = "-" if self.offset is None else str(self.offset)
        return f"refused at offset {where}: {self.reason}"


class CheckFailed(Exception):
    """The mounted tree differs from the reference."""


# ---------------------------------------------------------------------------------------
# OneFlow side: meta text, directory names.
# ---------------------------------------------------------------------------------------


def meta_bytes(dims, of_type):
    """Exact `meta` file content: text_format of oneflow.VariableMetaInfo."""
    meta = VariableMetaInfo()
    meta.shape.SetInParent()  # a 0-d tensor must still print `shape {\n}`
    meta.shape.dim.extend(int(d) for d in dims)
    meta.data_type = _DATA_TYPE_ENUM.values_by_name[of_type].number
    return text_format.MessageToString(meta).encode("utf-8")


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def escape_tag(tag):
    """Directory name for a tag (bytes -> bytes), per the ckptfs naming rules."""
    if tag == b"snapshot_done":
        return b"%73napshot_done"
    out = bytearray()
    for i, b in enumerate(tag):
        if b == 0x2F:
            out += b"%2F"
        elif b == 0x25:
            out += b"%25"
        elif b == 0x00:
            out += b"%00"
        elif i == 0 and b == 0x2E:
            out += b"%2E"
        else:
            out.append(b)
    if len(out) <= 255:
        return bytes(out)
    cut = 237
    # Every '%' in the escaped name starts a 3-byte escape: never split one.
    if out[cut - 1] == 0x25:
        cut -= 1
    elif out[cut - 2] == 0x25:
        cut -= 2
    # Never split a UTF-8 sequence: back off while the first dropped byte is a continuation.
    while cut > 0 and 0x80 <= out[cut] <= 0xBF:
        cut -= 1
    return bytes(out[:cut]) + b"%~" + b"%016x" % fnv1a64(tag)


def dir_name(tag, part=None):
    name = escape_tag(tag)
    if part is None:
        return name
    name += b"%map." + part.encode()
    if len(name) > 255:
        # The spec does not say how a long *map* tag is shortened; refuse to guess.
        raise NotImplementedError(f"map tag too long for the oracle: {tag!r}")
    return name


# ---------------------------------------------------------------------------------------
# Wire-level walker (locates structural and semantic errors by byte offset).
# ---------------------------------------------------------------------------------------


def _varint(buf, pos, end):
    start, result = pos, 0
    for i in range(10):
        if pos >= end:
            raise Refused(start, "varint runs past the end of its enclosing data")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << (7 * i)
        if not b & 0x80:
            if result > 0xFFFFFFFFFFFFFFFF:
                raise Refused(start, "varint exceeds 64 bits")
            return result, pos
    raise Refused(start, "varint longer than 10 bytes")


def _fields(buf, pos, end):
    """Yield (field, wire_type, key_offset, payload) over [pos, end); payload is an int for
    varint/fixed fields and a (start, stop) range for LEN fields."""
    while pos < end:
        key_off = pos
        key, pos = _varint(buf, pos, end)
        field, wt = key >> 3, key & 7
        if field == 0:
            raise Refused(key_off, "field number 0")
        if wt == 0:
            value, pos = _varint(buf, pos, end)
            yield field, wt, key_off, value
        elif wt in (1, 5):
            width = 8 if wt == 1 else 4
            if pos + width > end:
                raise Refused(key_off, "fixed-width field runs past the end")
            yield field, wt, key_off, int.from_bytes(buf[pos:pos + width], "little")
            pos += width
        elif wt == 2:
            length, pos = _varint(buf, pos, end)
            if length > end - pos:
                raise Refused(key_off, f"length {length} runs past the end ({end - pos} bytes left)")
            yield field, wt, key_off, (pos, pos + length)
            pos += length
        else:
            raise Refused(key_off, f"unsupported wire type {wt}")


def _signed64(v):
    return v - (1 << 64) if v >= 1 << 63 else v


def _walk_tensor(buf, start, end, key_off):
    loc = {"key": key_off, "dims": [], "type": None, "content": None}
    for field, wt, off, payload in _fields(buf, start, end):
        if field == 1 and wt == 0:
            loc["dims"].append((_signed64(payload), off))
        elif field == 1 and wt == 2:  # packed dims
            pos, stop = payload
            while pos < stop:
                value, nxt = _varint(buf, pos, stop)
                loc["dims"].append((_signed64(value), pos))
                pos = nxt
        elif field in (1, 2, 3) and not (field in (2, 3) and wt == 2):
            raise Refused(off, f"TensorProto field {field} has wire type {wt}")
        elif field == 2:
            loc["type"] = off
        elif field == 3:
            loc["content"] = off
    if loc["type"] is None or loc["content"] is None:
        raise Refused(key_off, "TensorProto lacks tensor_type or tensor_content")
    return loc


def walk_values(buf, end):
    """Offsets of every Checkpoint.Value in buf[:end], validating the wire structure."""
    values = []
    for field, wt, off, payload in _fields(buf, 0, end):
        if field != 1:
            continue  # unknown top-level field (v0.5 model_type, ...)
        if wt != 2:
            raise Refused(off, f"Checkpoint.value has wire type {wt}")
        loc = {"start": off, "tag": None, "tensor": None, "map": []}
        for vfield, vwt, voff, vpay in _fields(buf, payload[0], payload[1]):
            if vfield in (1, 2, 3) and vwt != 2:
                raise Refused(voff, f"Checkpoint.Value field {vfield} has wire type {vwt}")
            if vfield == 1:
                loc["tag"] = voff
            elif vfield == 2:
                loc["tensor"] = _walk_tensor(buf, vpay[0], vpay[1], voff)
            elif vfield == 3:
                for mfield, mwt, moff, mpay in _fields(buf, vpay[0], vpay[1]):
                    if mfield == 1:
                        if mwt != 2:
                            raise Refused(moff, f"MapTensorProto.tensor has wire type {mwt}")
                        loc["map"].append(_walk_tensor(buf, mpay[0], mpay[1], moff))
        if loc["tag"] is None:
            raise Refused(off, "Checkpoint.Value has no tag")
        if loc["tensor"] is None and not loc["map"]:
            raise Refused(off, "Checkpoint.Value has neither tensor nor maptensor")
        values.append(loc)
    return values


# ---------------------------------------------------------------------------------------
# Reference parse.
# ---------------------------------------------------------------------------------------

ENCRYPTION_MAGICS = {b"\xd8\x5e\x3a\x7f": "AES-GCM encrypted", b"\xd9\x5e\x3a\x7f": "AES-CBC encrypted",
                     b"\xda\x5e\x3a\x7f": "SM4-CBC encrypted", b"\x28\xb5\x2f\xfd": "zstd compressed"}


class Entry:
    """One tensor directory of the expected tree."""

    def __init__(self, tag, part, ms_type, ckpt_dims, dims, of_type, out):
        self.tag, self.part, self.ms_type = tag, part, ms_type
        self.ckpt_dims, self.dims, self.of_type, self.out = ckpt_dims, dims, of_type, out
        self.dirname = dir_name(tag, part)
        self.meta = meta_bytes(dims, of_type)

    @property
    def np_dtype(self):
        table = NP_TYPES if self.part else MS_TYPES
        info = table.get(self.ms_type)
        return info[2] if info and self.ms_type != "Int4" else None

    def to_json(self):
        obj = {"tag": self.tag.decode("utf-8", "surrogateescape")}
        if self.part:
            obj["part"] = self.part
        obj.update({"type": self.ms_type, "dims": self.dims, "nbytes": len(self.out),
                    "sha256": hashlib.sha256(self.out).hexdigest(), "oneflow_type": self.of_type,
                    "ckpt_dims": self.ckpt_dims,
                    "dir": self.dirname.decode("utf-8", "surrogateescape")})
        return obj


def split_crc(buf):
    """Return (body, status) with status 'absent', 'ok' or 'mismatch'."""
    if len(buf) >= 17 and buf[-17:-10] == b"crc_num":
        body = buf[:-17]
        stored = int.from_bytes(buf[-10:], "big")
        return body, ("ok" if stored == zlib.crc32(body) else "mismatch")
    return buf, "absent"


def _tensor_entry(tag, part, ms_type, dims, content, loc):
    """Validate one (concatenated) tensor and turn it into a tree Entry."""
    if part is None and ms_type == "str":
        if len(content) % 4:
            raise Refused(loc["content"], f"str content of {len(content)} bytes is not UTF-32")
        try:
            text = content.decode("utf-32-le")
        except UnicodeDecodeError as exc:
            raise Refused(loc["content"], f"invalid UTF-32 string: {exc}") from None
        out = text.rstrip("\x00").encode("utf-8")
        return Entry(tag, part, ms_type, dims, [len(out)], "kChar", out)
    if part is None and ms_type == "random_op":
        return Entry(tag, part, ms_type, dims, [len(content)], "kUInt8", content)
    info = (NP_TYPES if part else MS_TYPES).get(ms_type)
    if info is None:
        raise Refused(loc["type"], f"unknown tensor_type {ms_type!r}")
    of_type, elem, _ = info
    offsets = [o for _, o in loc["dims"]]
    offsets += [loc["key"]] * (len(dims) - len(offsets))
    total = elem
    for value, off in zip(dims, offsets):
        if value < 0:
            raise Refused(off, f"negative dimension {value}")
        total *= value
        if total > INT64_MAX:
            raise Refused(off, f"dims {dims} overflow 64-bit byte count")
    if dims == [0] and len(content) == elem:
        out_dims = []  # pre-2.3 scalar
    elif len(content) == total:
        out_dims = list(dims)
    else:
        raise Refused(loc["content"], f"{ms_type} dims {dims} need {total} bytes, content has {len(content)}")
    return Entry(tag, part, ms_type, dims, out_dims, of_type, content)


def _tag_bytes(tag):
    return tag.encode("utf-8") if isinstance(tag, str) else bytes(tag)


def reference_parse(buf):
    """Parse a checkpoint like MindSpore's loader. Returns (entries, crc_status)."""
    magic = ENCRYPTION_MAGICS.get(bytes(buf[:4]))
    if magic:
        raise Refused(0, f"{magic} file (magic {buf[:4].hex()})")
    body, crc = split_crc(buf)
    locs = walk_values(body, len(body))
    ckpt = Checkpoint()
    try:
        ckpt.ParseFromString(bytes(body))
    except Exception as exc:  # DecodeError and friends
        raise Refused(None, f"protobuf runtime rejects the file: {exc}") from None
    if len(ckpt.value) != len(locs):
        raise Refused(None, f"walker saw {len(locs)} values, protobuf {len(ckpt.value)}")
    if not ckpt.value:
        raise Refused(None, "no Checkpoint.value at all")

    result = {}  # tag -> [Entry, ...], insertion order = position of the last occurrence
    i, n = 0, len(ckpt.value)
    while i < n:
        tag = _tag_bytes(ckpt.value[i].tag)
        j = i
        while j + 1 < n and _tag_bytes(ckpt.value[j + 1].tag) == tag:
            j += 1
        group = list(ckpt.value[i:j + 1])
        kinds = {v.WhichOneof("value") for v in group}
        last, loc = group[-1], locs[j]
        if kinds == {"tensor"}:
            content = b"".join(v.tensor.tensor_content for v in group)
            entries = [_tensor_entry(tag, None, last.tensor.tensor_type, list(last.tensor.dims),
                                     content, loc["tensor"])]
        elif kinds == {"maptensor"}:
            entries = []
            for k, part in enumerate(MAP_PARTS):
                parts = []
                for v, vloc in zip(group, locs[i:j + 1]):
                    if len(v.maptensor.tensor) != 3:
                        raise Refused(vloc["start"], "maptensor must hold exactly 3 tensors")
                    parts.append(v.maptensor.tensor[k])
                dims = list(parts[-1].dims)
                if not dims:
                    raise Refused(loc["map"][k]["key"], f"map {part} tensor has no dims")
                dims[0] = sum(p.dims[0] if p.dims else 0 for p in parts)
                content = b"".join(p.tensor_content for p in parts)
                entries.append(_tensor_entry(tag, part, parts[-1].tensor_type, dims, content,
                                             loc["map"][k]))
        else:
            raise Refused(locs[i]["start"], f"tag {tag!r}: mixed or empty Value kinds {sorted(map(str, kinds))}")
        result.pop(tag, None)
        result[tag] = entries
        i = j + 1

    entries = [e for group in result.values() for e in group]
    names = {}
    for e in entries:
        if e.dirname in names:
            raise Refused(None, f"directory name collision: {e.dirname!r}")
        names[e.dirname] = e
    return entries, crc


def load_reference(path):
    with open(path, "rb") as f:
        return reference_parse(f.read())


# ---------------------------------------------------------------------------------------
# Checkpoint writers.
# ---------------------------------------------------------------------------------------


def varint(n):
    return encoder._VarintBytes(n & 0xFFFFFFFFFFFFFFFF)


def tensor_value(tag, ms_type, dims, content, cls=CheckpointValue):
    value = cls(tag=tag)
    value.tensor.dims.extend(dims)
    value.tensor.tensor_type = ms_type
    value.tensor.tensor_content = content
    return value


def map_value(tag, parts):
    value = CheckpointValue(tag=tag)
    for ms_type, dims, content in parts:
        value.maptensor.tensor.add(dims=dims, tensor_type=ms_type, tensor_content=content)
    return value


def record(value, cls=Checkpoint):
    """One serialized Checkpoint holding exactly one Value (MindSpore's writer)."""
    return cls(value=[value]).SerializeToString()


def random_bytes(rng, n):
    return rng.integers(0, 256, size=n, dtype=np.uint8).tobytes()


def random_tensor(rng, ms_type, dims):
    """Random content for a MindSpore type and shape (C order, little-endian)."""
    n = int(np.prod(dims)) if dims else 1
    if ms_type in ("Float16", "Float32", "Float64"):
        return rng.standard_normal(n).astype(MS_TYPES[ms_type][2]).tobytes()
    if ms_type in ("Complex64", "Complex128"):
        z = rng.standard_normal(n) + 1j * rng.standard_normal(n)
        return z.astype(MS_TYPES[ms_type][2]).tobytes()
    if ms_type == "Bool":
        return rng.integers(0, 2, size=n, dtype=np.uint8).tobytes()
    if ms_type in ("BFloat16", "Int4"):
        return random_bytes(rng, n * MS_TYPES[ms_type][1])
    dtype = np.dtype(MS_TYPES[ms_type][2])
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=n, dtype=dtype, endpoint=True).tobytes()


def str_value(tag, text):
    content = np.array(text).tobytes()  # numpy <U: UTF-32LE, "" -> 4 zero bytes
    return tensor_value(tag, "str", [0], content)


def alltypes_values(rng):
    specs = [
        ("net.conv1.weight", "Float32", [2, 3, 4]),
        ("net.fc.weight", "Float16", [3, 4]),
        ("net.fc.bias", "Float64", [5]),
        ("net.bf16", "BFloat16", [3, 4]),
        ("t.int8", "Int8", [5]),
        ("t.int16", "Int16", [3, 4]),
        ("t.int32", "Int32", [1]),
        ("t.int64", "Int64", [2, 3, 4]),
        ("t.uint8", "UInt8", [3, 4]),
        ("t.uint16", "UInt16", [5]),
        ("t.uint32", "UInt32", [2, 3, 4]),
        ("t.uint64", "UInt64", [3, 4]),
        ("t.bool", "Bool", [3, 4]),
        ("t.complex64", "Complex64", [5]),
        ("t.complex128", "Complex128", [3, 4]),
        ("empty_3d", "Float32", [2, 0, 3]),
    ]
    values = [tensor_value(tag, t, dims, random_tensor(rng, t, dims)) for tag, t, dims in specs]
    values += [
        tensor_value("empty_1d", "Int32", [0], b""),
        tensor_value("scalar_empty_dims", "Float32", [], random_tensor(rng, "Float32", [])),
        tensor_value("scalar_empty_dims_i64", "Int64", [], random_tensor(rng, "Int64", [])),
        tensor_value("scalar_dims0", "Float64", [0], random_tensor(rng, "Float64", [])),
        tensor_value("scalar_dims0_bool", "Bool", [0], b"\x01"),
        tensor_value("scalar_dims0_f16", "Float16", [0], random_tensor(rng, "Float16", [])),
        str_value("info.str_ascii", "hello world"),
        str_value("info.str_unicode", "h\u00e9llo \u2713 \U0001D11E"),
        str_value("info.str_empty", ""),
    ]
    return values


def small_values(rng, prefix="small"):
    return [
        tensor_value(f"{prefix}.weight", "Float32", [3, 4], random_tensor(rng, "Float32", [3, 4])),
        tensor_value(f"{prefix}.bias", "Float32", [4], random_tensor(rng, "Float32", [4])),
        tensor_value(f"{prefix}.step", "Int64", [], random_tensor(rng, "Int64", [])),
        tensor_value(f"{prefix}.lr", "Float32", [0], random_tensor(rng, "Float32", [])),
    ]


def slices_by_bytes(tag, ms_type, dims, content, sizes):
    assert sum(sizes) == len(content)
    out, pos = [], 0
    for size in sizes:
        out.append(tensor_value(tag, ms_type, dims, content[pos:pos + size]))
        pos += size
    return out


def gen_records(case, rng, count, str_chars=64):
    """Return the list of byte records making the checkpoint for a `gen` case."""
    if case == "alltypes":
        return [record(v) for v in alltypes_values(rng)]
    if case == "oneshot":
        return [Checkpoint(value=alltypes_values(rng)).SerializeToString()]
    if case == "sliced":
        recs = [record(v) for v in small_values(rng, "before")]
        flat = rng.standard_normal(70).astype("<f4")  # [10,7], np.array_split in 3: 24/23/23
        recs += [record(tensor_value("sliced.array_split", "Float32", [10, 7], part.tobytes()))
                 for part in np.array_split(flat, 3)]
        data = random_bytes(rng, 1000)
        recs += [record(v) for v in slices_by_bytes("sliced.bytes", "UInt8", [1000], data, [400, 400, 200])]
        odd = random_tensor(rng, "Float32", [6])  # chunks that split elements
        recs += [record(v) for v in slices_by_bytes("sliced.odd", "Float32", [6], odd, [7, 7, 10])]
        recs += [record(v) for v in small_values(rng, "after")]
        return recs
    if case == "repeat":
        recs = [record(tensor_value("first", "Float32", [2], random_tensor(rng, "Float32", [2]))),
                record(tensor_value("dup", "Float32", [2, 2], random_tensor(rng, "Float32", [2, 2]))),
                record(tensor_value("other.a", "Int32", [3], random_tensor(rng, "Int32", [3]))),
                CheckpointV05(model_type="normal").SerializeToString(),
                record(tensor_value("other.b", "Float64", [2], random_tensor(rng, "Float64", [2])))]
        later = random_tensor(rng, "Int32", [5])
        recs += [record(v) for v in slices_by_bytes("dup", "Int32", [5], later, [12, 8])]
        recs.append(record(tensor_value("last", "UInt8", [3], random_tensor(rng, "UInt8", [3]))))
        return recs
    if case == "packed":
        specs = [("packed.w", "Float32", [3, 4]), ("packed.b", "Float32", [5]),
                 ("packed.big_dims", "UInt8", [300, 2]), ("packed.scalar", "Int64", []),
                 ("packed.empty", "Float16", [2, 0, 3])]
        recs = [record(tensor_value(tag, t, d, random_tensor(rng, t, d), PackedCheckpointValue), PackedCheckpoint)
                for tag, t, d in specs]
        recs.append(record(tensor_value("packed.scalar0", "Float64", [0], random_tensor(rng, "Float64", []),
                                        PackedCheckpointValue), PackedCheckpoint))
        return recs
    if case in ("crc", "crcbad"):
        recs = [record(v) for v in small_values(rng, "crc")]
        crc = zlib.crc32(b"".join(recs)) + (1 if case == "crcbad" else 0)
        return recs + [b"crc_num" + crc.to_bytes(10, "big")]
    if case == "names":
        long_a = "L" * 280 + "a" * 20
        long_b = "L" * 280 + "b" * 20
        tags = ["a/b/c", "100%", ".hidden", "snapshot_done", "name with spaces", "\u00fc-unicode",
                long_a, long_b, "nul\x00byte",
                "x" * 236 + "/" + "y" * 100,           # %2F straddles the 237-byte cut
                "a" * 236 + "\u00e9" * 40,             # 2-byte UTF-8 straddles the cut
                "b" * 235 + "\u2713" * 30,             # 3-byte UTF-8 straddles the cut
                "e" * 252 + "/",                       # escapes to exactly 255 bytes: kept
                "f" * 253 + "/",                       # escapes to 256 bytes: shortened
                "..", "%2F", "snapshot_done.x"]
        return [record(tensor_value(t, "Float32", [2], random_tensor(rng, "Float32", [2]))) for t in tags]
    if case == "maptensor":
        recs = [record(tensor_value("dense.weight", "Float32", [2, 3], random_tensor(rng, "Float32", [2, 3])))]
        for rows in (4, 2):
            keys = rng.integers(0, 1 << 40, size=rows, dtype=np.int64)
            vals = rng.standard_normal((rows, 3)).astype(np.float32)
            status = rng.integers(0, 3, size=rows, dtype=np.int32)
            recs.append(record(map_value("emb", [(str(keys.dtype), [rows], keys.tobytes()),
                                                 (str(vals.dtype), [rows, 3], vals.tobytes()),
                                                 (str(status.dtype), [rows], status.tobytes())])))
        recs.append(record(tensor_value("dense.bias", "Float32", [2], random_tensor(rng, "Float32", [2]))))
        return recs
    if case == "int4":
        return [record(tensor_value("quant.weight", "Int4", [4, 8], random_tensor(rng, "Int4", [4, 8]))),
                record(tensor_value("random_op", "random_op", [], random_bytes(rng, 24)))]
    if case == "many":
        return [record(tensor_value(f"layer.{i}.w", "Float32", [4], random_tensor(rng, "Float32", [4])))
                for i in range(count)]
    if case == "strs":  # count str values of str_chars characters, some beyond ASCII
        alphabet = "abcdefghijklmnopqrstuvwxyz0123456789 \u00e9\u00fc\u4e2d\u6587\U0001f600"
        recs = []
        for i in range(count):
            text = "".join(alphabet[j] for j in rng.integers(0, len(alphabet), size=str_chars))
            recs.append(record(str_value(f"note.{i}", text)))
            if i % 100 == 0:
                recs.append(record(tensor_value(f"w.{i}", "Float32", [3], random_tensor(rng, "Float32", [3]))))
        return recs
    raise SystemExit(f"unknown gen case {case!r}")


GEN_CASES = ["alltypes", "oneshot", "sliced", "repeat", "packed", "crc", "crcbad", "names",
             "maptensor", "int4", "many", "strs"]


def write_file(path, chunks):
    with open(path, "wb") as f:
        for chunk in chunks:
            f.write(chunk)


# ---------------------------------------------------------------------------------------
# Malformed files.
# ---------------------------------------------------------------------------------------


def encode_value(tag, ms_type, dims, content):
    """Hand-encode a Value (as MindSpore writes it) and return (bytes, offsets relative to
    the start of the returned top-level record)."""
    tensor = bytearray()
    dim_offs = []
    for d in dims:
        dim_offs.append(len(tensor))
        tensor += b"\x08" + varint(d)
    type_off = len(tensor)
    tensor += b"\x12" + varint(len(ms_type)) + ms_type.encode()
    content_off = len(tensor)
    tensor += b"\x1a" + varint(len(content)) + content
    tag_b = tag.encode()
    value = b"\x0a" + varint(len(tag_b)) + tag_b + b"\x12" + varint(len(tensor))
    tensor_base = len(value)
    value += tensor
    rec = b"\x0a" + varint(len(value))
    base = len(rec) + tensor_base
    rec += value
    offs = {"dims": [base + o for o in dim_offs], "type": base + type_off, "content": base + content_off}
    return rec, offs


def bad_file(case, rng):
    """Return (bytes, offset or None) for a malformed-file case."""
    good = [record(v) for v in small_values(rng, "good")]
    head = b"".join(good[:2])
    tail = b"".join(good[2:])
    if case in ("encgcm", "enccbc", "zstd"):
        magic = {"encgcm": b"\xd8\x5e\x3a\x7f", "enccbc": b"\xd9\x5e\x3a\x7f", "zstd": b"\x28\xb5\x2f\xfd"}[case]
        return magic + random_bytes(rng, 60), 0
    if case == "truncated":
        victim = record(tensor_value("cut", "Float32", [16], random_tensor(rng, "Float32", [16])))
        return head + victim[:len(victim) // 2], len(head)
    if case == "pastend":
        victim = record(tensor_value("cut", "Float32", [16], random_tensor(rng, "Float32", [16])))
        body = Checkpoint.FromString(victim).value[0].SerializeToString()
        return head + b"\x0a" + varint(len(body) + 1) + body, len(head)
    if case == "longvarint":
        return head + b"\x0a" + b"\x80" * 10 + b"\x01" + random_bytes(rng, 16), len(head) + 1
    if case == "wiretype":
        tensor = TensorProto(dims=[2], tensor_type="Float32",
                             tensor_content=random_tensor(rng, "Float32", [2])).SerializeToString()
        value = b"\x08" + varint(5) + b"\x12" + varint(len(tensor)) + tensor  # tag as varint 5
        rec = b"\x0a" + varint(len(value)) + value
        return head + rec + tail, len(head) + 1 + len(varint(len(value)))
    specs = {
        "negdim": ("neg", "Float32", [4, -3], random_bytes(rng, 48), lambda o: o["dims"][1]),
        "overflow": ("over", "Float32", [2 ** 40, 2 ** 40], random_bytes(rng, 4), lambda o: o["dims"][1]),
        "sizemismatch": ("mismatch", "Float32", [3, 4], random_bytes(rng, 40), lambda o: o["content"]),
        "badtype": ("badtype", "Float128", [2], random_bytes(rng, 32), lambda o: o["type"]),
    }
    if case not in specs:
        raise SystemExit(f"unknown bad case {case!r}")
    tag, ms_type, dims, content, where = specs[case]
    rec, offs = encode_value(tag, ms_type, dims, content)
    assert rec == record(tensor_value(tag, ms_type, dims, content)), "hand encoding differs from protobuf"
    return head + rec + tail, len(head) + where(offs)


BAD_CASES = ["truncated", "pastend", "longvarint", "wiretype", "negdim", "overflow", "sizemismatch",
             "badtype", "encgcm", "enccbc", "zstd"]

# ---------------------------------------------------------------------------------------
# Mounted-tree checks.
# ---------------------------------------------------------------------------------------


def _fail(msg):
    raise CheckFailed(msg)


def _regular(path, what):
    try:
        st = os.lstat(path)
    except OSError as exc:
        _fail(f"{what}: cannot stat {os.fsdecode(path)!r}: {exc}")
    if not stat.S_ISREG(st.st_mode):
        _fail(f"{what}: {os.fsdecode(path)!r} is not a regular file (mode {st.st_mode:o})")
    return st


def _read_all(path, what):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        _fail(f"{what}: cannot read {os.fsdecode(path)!r}: {exc}")


def _first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def _xattr(path, name, what):
    try:
        return os.getxattr(path, name, follow_symlinks=False)
    except OSError as exc:
        _fail(f"{what}: xattr {os.fsdecode(name)} unreadable: {exc}")


def shape_text(dims):
    return ("[" + ",".join(str(d) for d in dims) + "]").encode()


def check_snapshot_done(root):
    path = os.path.join(root, b"snapshot_done")
    st = _regular(path, "snapshot_done")
    if st.st_size != 0 or _read_all(path, "snapshot_done") != b"":
        _fail("snapshot_done is not empty")


def check_root_listing(root, expected_dirs):
    try:
        names = set(os.listdir(root))
    except OSError as exc:
        _fail(f"cannot list mountpoint: {exc}")
    want = set(expected_dirs) | {b"snapshot_done"}
    missing, extra = sorted(want - names), sorted(names - want)
    if missing or extra:
        _fail(f"root listing differs: missing {missing[:5]}{'...' if len(missing) > 5 else ''}, "
              f"unexpected {extra[:5]}{'...' if len(extra) > 5 else ''}")


def check_tensor_dir(root, e, out_size=None):
    """Check listing, xattrs, meta and out of one tensor directory.  With out_size given,
    only the size of `out` is checked (its content is then the caller's business)."""
    d = os.path.join(root, e.dirname)
    what = f"tensor {e.tag!r}" + (f" part {e.part}" if e.part else "")
    try:
        st = os.lstat(d)
    except OSError as exc:
        _fail(f"{what}: cannot stat directory {os.fsdecode(e.dirname)!r}: {exc}")
    if not stat.S_ISDIR(st.st_mode):
        _fail(f"{what}: {os.fsdecode(e.dirname)!r} is not a directory")
    listing = sorted(os.listdir(d))
    if listing != [b"meta", b"out"]:
        _fail(f"{what}: directory holds {listing}, expected [b'meta', b'out']")
    for name, want in ((b"user.ckptfs.name", e.tag), (b"user.ckptfs.type", e.ms_type.encode()),
                       (b"user.ckptfs.shape", shape_text(e.dims))):
        got = _xattr(d, name, what)
        if got != want:
            _fail(f"{what}: xattr {name.decode()} = {got!r}, expected {want!r}")
    meta_path = os.path.join(d, b"meta")
    st = _regular(meta_path, what + " meta")
    if st.st_size != len(e.meta):
        _fail(f"{what}: meta st_size {st.st_size}, expected {len(e.meta)}")
    got = _read_all(meta_path, what + " meta")
    if got != e.meta:
        _fail(f"{what}: meta is {got!r}, expected {e.meta!r}")
    out_path = os.path.join(d, b"out")
    st = os.stat(out_path)
    _regular(out_path, what + " out")
    want_size = len(e.out) if out_size is None else out_size
    if st.st_size != want_size:
        _fail(f"{what}: out st_size {st.st_size}, expected {want_size}")
    if out_size is None:
        got = _read_all(out_path, what + " out")
        if got != e.out:
            _fail(f"{what}: out differs ({len(got)} bytes read, expected {len(e.out)}; "
                  f"first difference at byte {_first_diff(got, e.out)})")


def check_numpy_reads(root, entries):
    """np.fromfile on one numeric tensor, np.memmap on another."""
    numeric = [e for e in entries if e.np_dtype and len(e.out) > 0]
    if not numeric:
        return
    first, second = numeric[0], numeric[1] if len(numeric) > 1 else numeric[0]
    for how, e in (("fromfile", first), ("memmap", second)):
        path = os.path.join(root, e.dirname, b"out")
        try:
            if how == "fromfile":
                arr = np.fromfile(path, dtype=e.np_dtype)
            else:
                arr = np.memmap(path, dtype=e.np_dtype, mode="r")
            arr = arr.reshape(e.dims)
            ok = arr.tobytes() == e.out
            del arr
        except Exception as exc:  # noqa: BLE001 - any failure is a check failure
            _fail(f"tensor {e.tag!r}: numpy {how} failed: {exc}")
        if not ok:
            _fail(f"tensor {e.tag!r}: numpy {how} content differs")


def check_mounted(mount, entries):
    """The mounted tree at mount is exactly entries: listing, snapshot_done, every tensor
    directory, numpy reads."""
    root = os.fsencode(mount)
    check_root_listing(root, [e.dirname for e in entries])
    check_snapshot_done(root)
    for e in entries:
        check_tensor_dir(root, e)
    check_numpy_reads(root, entries)


def cmd_check(mount, ckpt):
    entries, _ = load_reference(ckpt)
    check_mounted(mount, entries)
    print(f"ok {len(entries)} tensors")


def fake_tree(directory, ckpt):
    """Materialise the expected tree (for testing `check` itself without ckptfs)."""
    entries, _ = load_reference(ckpt)
    root = os.fsencode(directory)
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, b"snapshot_done"), "wb"):
        pass
    for e in entries:
        d = os.path.join(root, e.dirname)
        os.mkdir(d)
        write_file(os.path.join(d, b"meta"), [e.meta])
        write_file(os.path.join(d, b"out"), [e.out])
        os.setxattr(d, b"user.ckptfs.name", e.tag)
        os.setxattr(d, b"user.ckptfs.type", e.ms_type.encode())
        os.setxattr(d, b"user.ckptfs.shape", shape_text(e.dims))


# ---------------------------------------------------------------------------------------
# Big sparse checkpoint.
# ---------------------------------------------------------------------------------------

PATTERN = 4096


def huge_header(tag, ms_type, length):
    """Bytes of the top-level record up to (not including) the tensor content."""
    t = ms_type.encode()
    tensor_head = b"\x08" + varint(length) + b"\x12" + varint(len(t)) + t + b"\x1a" + varint(length)
    tensor_len = len(tensor_head) + length
    tag_b = tag.encode()
    value_head = b"\x0a" + varint(len(tag_b)) + tag_b + b"\x12" + varint(tensor_len)
    value_len = len(value_head) + tensor_len
    return b"\x0a" + varint(value_len) + value_head + tensor_head


def cmd_bigfile(out, size_gib, seed):
    rng = np.random.default_rng(seed)
    length = int(math.ceil(size_gib * 2 ** 30))
    if length < 2 * PATTERN:
        raise SystemExit("--size-gib too small")
    head, tail = random_bytes(rng, PATTERN), random_bytes(rng, PATTERN)
    header = huge_header("huge", "UInt8", length)
    after = [tensor_value(f"after.{i}", "Float32", [256], random_tensor(rng, "Float32", [256]))
             for i in range(2)]
    with open(out, "wb") as f:
        f.write(header)
        f.write(head)
        f.seek(len(header) + length - PATTERN)
        f.write(tail)
        for v in after:
            f.write(record(v))
    probes = [p - PATTERN // 2 for p in (2 ** 31, 2 ** 32)
              if PATTERN <= p - PATTERN // 2 and p + PATTERN // 2 <= length - PATTERN]
    tensors = [{"tag": "huge", "type": "UInt8", "dims": [length], "oneflow_type": "kUInt8",
                "nbytes": length, "content_offset": len(header),
                "head_sha256": hashlib.sha256(head).hexdigest(),
                "tail_sha256": hashlib.sha256(tail).hexdigest(), "zero_probes": probes}]
    for v in after:
        tensors.append({"tag": v.tag, "type": "Float32", "dims": [256], "oneflow_type": "kFloat",
                        "nbytes": len(v.tensor.tensor_content),
                        "sha256": hashlib.sha256(v.tensor.tensor_content).hexdigest()})
    sidecar = {"file_size": os.path.getsize(out), "tensors": tensors}
    with open(out + ".json", "w") as f:
        json.dump(sidecar, f, indent=1)


def _pread(path, offset, n, what):
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read(n)
    except OSError as exc:
        _fail(f"{what}: read of {n} bytes at {offset} failed: {exc}")
    if len(data) != n:
        _fail(f"{what}: short read at {offset}: {len(data)} of {n} bytes")
    return data


def cmd_check_big(mount, ckpt):
    with open(ckpt + ".json") as f:
        sidecar = json.load(f)
    if os.path.getsize(ckpt) != sidecar["file_size"]:
        _fail("checkpoint size differs from its sidecar")
    root = os.fsencode(mount)
    tensors = sidecar["tensors"]
    check_root_listing(root, [escape_tag(t["tag"].encode()) for t in tensors])
    check_snapshot_done(root)
    for t in tensors:
        huge = "head_sha256" in t
        entry = Entry(t["tag"].encode(), None, t["type"], t["dims"], t["dims"], t["oneflow_type"], b"")
        check_tensor_dir(root, entry, out_size=t["nbytes"])
        out_path = os.path.join(root, entry.dirname, b"out")
        what = f"tensor {t['tag']!r}"
        if huge:
            n = t["nbytes"]
            if hashlib.sha256(_pread(out_path, 0, PATTERN, what)).hexdigest() != t["head_sha256"]:
                _fail(f"{what}: first {PATTERN} bytes differ")
            if hashlib.sha256(_pread(out_path, n - PATTERN, PATTERN, what)).hexdigest() != t["tail_sha256"]:
                _fail(f"{what}: last {PATTERN} bytes differ")
            for p in t["zero_probes"]:
                if _pread(out_path, p, PATTERN, what) != bytes(PATTERN):
                    _fail(f"{what}: bytes at {p}..{p + PATTERN} are not zero")
            with open(out_path, "rb") as f:
                f.seek(n)
                if f.read(1) != b"":
                    _fail(f"{what}: data readable past st_size")
        else:
            data = _read_all(out_path, what)
            if hashlib.sha256(data).hexdigest() != t["sha256"]:
                _fail(f"{what}: out differs")
    print(f"ok {len(tensors)} tensors")


# ---------------------------------------------------------------------------------------
# CLI.
# ---------------------------------------------------------------------------------------


def cmd_parse(path, full):
    entries, crc = load_reference(path)
    listing = [e.to_json() for e in entries]
    if crc != "absent":
        print(f"crc_trailer: {crc}", file=sys.stderr)
    doc = {"crc": crc, "tensors": listing} if full else listing
    sys.stdout.buffer.write(json.dumps(doc, indent=1, ensure_ascii=False).encode("utf-8", "surrogateescape"))
    sys.stdout.buffer.write(b"\n")


def cmd_from_oneflow(directory, out):
    """Write a checkpoint holding the variables of a OneFlow snapshot directory
    (meta parsed with protobuf's text_format, out taken as is), in name order."""
    of_to_ms = {}
    for ms_type, (of_type, _size, _np) in MS_TYPES.items():
        of_to_ms.setdefault(of_type, ms_type)
    records = []
    for name in sorted(os.listdir(directory)):
        var = os.path.join(directory, name)
        if not os.path.isfile(os.path.join(var, "meta")):
            continue
        meta = VariableMetaInfo()
        with open(os.path.join(var, "meta"), "r", encoding="utf-8") as f:
            text_format.Parse(f.read(), meta)
        of_type = _DATA_TYPE_ENUM.values_by_number[meta.data_type].name
        with open(os.path.join(var, "out"), "rb") as f:
            content = f.read()
        records.append(record(tensor_value(name, of_to_ms[of_type], list(meta.shape.dim), content)))
    write_file(out, records)


def cmd_meta_of(dims_text, type_name):
    dims = [int(d) for d in dims_text.split(",")] if dims_text.strip() else []
    if type_name in MS_TYPES:
        type_name = MS_TYPES[type_name][0]
    if type_name not in _DATA_TYPE_ENUM.values_by_name:
        raise SystemExit(f"unknown type {type_name!r}")
    sys.stdout.buffer.write(meta_bytes(dims, type_name))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("gen", help="write a test checkpoint")
    p.add_argument("out")
    p.add_argument("--case", required=True, choices=GEN_CASES)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--count", type=int, default=10, help="tensor count for --case many, strs")
    p.add_argument("--str-chars", type=int, default=64, help="characters per value for --case strs")
    p = sub.add_parser("parse", help="reference parse, JSON on stdout")
    p.add_argument("ckpt")
    p.add_argument("--full", action="store_true", help='print {"crc": ..., "tensors": [...]}')
    p = sub.add_parser("check", help="compare a mounted tree with the reference parse")
    p.add_argument("mount")
    p.add_argument("ckpt")
    p = sub.add_parser("meta-of", help="expected meta bytes for DIMS (a,b,c) and TYPE (kFloat...)")
    p.add_argument("dims")
    p.add_argument("type")
    p = sub.add_parser("bigfile", help="write a sparse checkpoint larger than G GiB + sidecar")
    p.add_argument("out")
    p.add_argument("--size-gib", type=float, required=True)
    p.add_argument("--seed", type=int, default=0)
    p = sub.add_parser("check-big", help="check a mounted bigfile against its sidecar")
    p.add_argument("mount")
    p.add_argument("ckpt")
    p = sub.add_parser("bad", help="write a malformed file; prints the offending offset")
    p.add_argument("out")
    p.add_argument("--case", required=True, choices=BAD_CASES)
    p.add_argument("--seed", type=int, default=0)
    p = sub.add_parser("from-oneflow", help="write a checkpoint with a OneFlow snapshot's variables")
    p.add_argument("dir")
    p.add_argument("out")
    p = sub.add_parser("fake-tree", help="build the expected tree in DIR (tests `check`)")
    p.add_argument("dir")
    p.add_argument("ckpt")
    args = ap.parse_args(argv)

    try:
        if args.cmd == "gen":
            write_file(args.out, gen_records(args.case, np.random.default_rng(args.seed), args.count,
                                             args.str_chars))
        elif args.cmd == "parse":
            cmd_parse(args.ckpt, args.full)
        elif args.cmd == "check":
            cmd_check(args.mount, args.ckpt)
        elif args.cmd == "meta-of":
            cmd_meta_of(args.dims, args.type)
        elif args.cmd == "bigfile":
            cmd_bigfile(args.out, args.size_gib, args.seed)
        elif args.cmd == "check-big":
            cmd_check_big(args.mount, args.ckpt)
        elif args.cmd == "bad":
            data, offset = bad_file(args.case, np.random.default_rng(args.seed))
            write_file(args.out, [data])
            print("-" if offset is None else offset)
        elif args.cmd == "from-oneflow":
            cmd_from_oneflow(args.dir, args.out)
        elif args.cmd == "fake-tree":
            fake_tree(args.dir, args.ckpt)
    except Refused as exc:
        print(f"{args.ckpt if hasattr(args, 'ckpt') else ''}: {exc}", file=sys.stderr)
        return 2
    except CheckFailed as exc:
        print(f"FAIL: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
