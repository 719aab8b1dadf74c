#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Independent test oracle for ckptfs mounts of ONNX and MindIR models.

Written from onnx-format.md, mindspore-formats.md section 4 and the naming rules in
codec/onnx_mindir/onnx_mindir_reader.h; it shares no code with the C program under test.  ONNX files are read
with Debian's python3-onnx (tensor bytes from numpy_helper.to_array); MindIR files with
the official protobuf runtime and tests/oracle/mind_ir.proto, compiled here by protoc.

    /usr/bin/python3 graph_oracle.py list MODEL            expected tree, one line a tensor
    /usr/bin/python3 graph_oracle.py check MOUNTPOINT MODEL
    /usr/bin/python3 graph_oracle.py values MODEL NAME     a tensor's values, one per line
    /usr/bin/python3 graph_oracle.py users MODEL NAME      the nodes that read a tensor
    /usr/bin/python3 graph_oracle.py users MODEL           each main-graph tensor and its
                                                           first reader (or nothing)
    /usr/bin/python3 graph_oracle.py bad OUT.onnx|OUT.mindir --case NAME
                                                 a malformed model; prints the offset
                                                 ckptfs must name, or - (valid)

`bad` cases (OUT's extension picks the format; the victim tensor sits between two good
ones): truncated (cut inside raw_data), pastend (a raw_data length past the end of the
tensor and of the file), deep (33 graphs nested through If.then_branch; deep32, 32 of
them, is valid), negdim, overflow (dims [2^40, 2^40]), manydims (65), sizemismatch
(raw_data), typedmismatch (float_data), typedwire (float_data as a varint), badtype
(data_type 99), extoff / extlen / extsize (an external offset past, a range past the end
of, a length not matching, OUT.data; extheader, MindIR only: bytes inside the
64-byte front info); emptypacked (an empty packed int64_data) is valid.

Naming (codec/onnx_mindir/onnx_mindir_reader.h): main-graph initializers / MindIR parameters keep their name
(MindIR: after the first ':'); Constant nodes of the main graph are OUTPUT%const;
tensors inside subgraphs are NAME%@NODE.ATTR (NODE the escaped node name, or #INDEX
when it has none, the suffix cut to 120 bytes with %~HASH); MindIR map parameters
NAME%map.key/.value/.status; equal generated names get %dup2, %dup3 in file order.
ONNX shows the TENSOR and TENSORS attributes of every node (ConstantOfShape.value...),
at any depth, named as a Constant's value: the node's first output (the tensor's own
name when the node has none) + %const in the main graph, + the subgraph's %@NODE.ATTR
inside one; several tensors of one node are told apart by %dup2... MindIR shows a
Constant's value only: its other attributes' tensors are output types, without data.

users: NAME is a tensor directory; its tensor's name as the file spells it (MindIR
parameters with their GRAPH: prefix) is looked for in the `input` list of every node, in
the main graph, MindIR functions and all subgraphs, depth first in file order.  A node is
printed by its name, or as "#INDEX (OP_TYPE)" (its position in its graph) when it has none.
Without NAME: one line "DIRECTORY<TAB>FIRST READER" per main-graph initializer / parameter,
the reader empty when no node reads it.

Exit status: 0 success; 1 check mismatch; 2 usage error.
"""

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnx.external_data_helper  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

import ckpt_oracle as co  # noqa: E402  (escaping, meta text and tree checks)

SUFFIX_MAX = 120

# ONNX / MindIR DataType -> (type name, OneFlow type, numpy dtype or None, kind)
# kind: num (dims as stored), flat (packed bytes shown as [n]), str (NUL-ended UTF-8)
ONNX_TYPES = {
    1: ("FLOAT", "kFloat", "<f4", "num"), 2: ("UINT8", "kUInt8", "u1", "num"),
    3: ("INT8", "kInt8", "i1", "num"), 4: ("UINT16", "kUInt16", "<u2", "num"),
    5: ("INT16", "kInt16", "<i2", "num"), 6: ("INT32", "kInt32", "<i4", "num"),
    7: ("INT64", "kInt64", "<i8", "num"), 8: ("STRING", "kChar", None, "str"),
    9: ("BOOL", "kBool", "u1", "num"), 10: ("FLOAT16", "kFloat16", "<f2", "num"),
    11: ("DOUBLE", "kDouble", "<f8", "num"), 12: ("UINT32", "kUInt32", "<u4", "num"),
    13: ("UINT64", "kUInt64", "<u8", "num"), 14: ("COMPLEX64", "kComplex64", "<c8", "num"),
    15: ("COMPLEX128", "kComplex128", "<c16", "num"),
    16: ("BFLOAT16", "kBFloat16", None, "num"),
    17: ("FLOAT8E4M3FN", "kUInt8", None, "num"), 18: ("FLOAT8E4M3FNUZ", "kUInt8", None, "num"),
    19: ("FLOAT8E5M2", "kUInt8", None, "num"), 20: ("FLOAT8E5M2FNUZ", "kUInt8", None, "num"),
    21: ("UINT4", "kUInt8", None, "flat"), 22: ("INT4", "kUInt8", None, "flat"),
    23: ("FLOAT4E2M1", "kUInt8", None, "flat"), 24: ("FLOAT8E8M0", "kUInt8", None, "num"),
    25: ("UINT2", "kUInt8", None, "flat"), 26: ("INT2", "kUInt8", None, "flat"),
}
MINDIR_TYPES = {k: v for k, v in ONNX_TYPES.items() if k <= 16}
MINDIR_TYPES[17] = ("FLOAT64", "kDouble", "<f8", "num")
MINDIR_TYPES[18] = ("QINT4X2", "kUInt8", None, "flat")


class Entry:
    """One expected tensor directory (the attributes ckpt_oracle.check_tensor_dir reads)."""

    def __init__(self, dirname, name, type_name, of_type, dims, out, np_dtype):
        self.dirname = dirname
        self.tag = name
        self.part = None
        self.ms_type = type_name.decode()
        self.dims = list(dims)
        self.out = out
        self.np_dtype = np_dtype
        self.meta = co.meta_bytes(self.dims, of_type)
        self.top = False  # a main-graph initializer / parameter


def esc(b):
    return co.escape_tag(b)


def make_suffix(node_name, index, attr_name):
    label = esc(node_name) if node_name else b"#%d" % index
    out = b"%@" + label + b"." + esc(attr_name)
    if len(out) > SUFFIX_MAX:
        out = out[:SUFFIX_MAX - 18] + b"%~" + b"%016x" % co.fnv1a64(out)
    return out


def dir_with_suffix(name, suffix):
    """Escaped name + suffix; too long, the name is cut and made unique by its hash."""
    e = esc(name) if len(esc(name)) <= 255 else None
    if e is not None and len(e) + len(suffix) <= 255:
        return e + suffix
    cut = 255 - 18 - len(suffix)
    full = bytearray(esc_unshortened(name))
    while cut > 0 and 0x80 <= full[cut] <= 0xBF:
        cut -= 1
    if full[cut - 1] == 0x25:
        cut -= 1
    elif full[cut - 2] == 0x25:
        cut -= 2
    return bytes(full[:cut]) + b"%~" + b"%016x" % co.fnv1a64(name) + suffix


def esc_unshortened(name):
    out = bytearray()
    for i, b in enumerate(name):
        if b in (0x2F, 0x25, 0x00) or (i == 0 and b == 0x2E):
            out += b"%%%02X" % b
        else:
            out.append(b)
    return bytes(out)


def tensor_bytes(t, types, base_dir, mindir):
    """(type info, dims, bytes) of a TensorProto, from the official runtime's view."""
    code = t.data_type
    if code not in types:
        raise ValueError(f"unknown data_type {code}")
    tname, of_type, np_dtype, kind = types[code]
    dims = list(t.dims)
    n = int(np.prod(dims)) if dims else 1
    if kind == "str":
        out = b"".join(s + b"\0" for s in t.string_data)
        return (tname, of_type, None), [len(out)], out
    ext = None
    if mindir and t.HasField("external_data"):
        ext = (t.external_data.location, t.external_data.offset,
               t.external_data.length if t.external_data.HasField("length") else None)
    if not mindir and t.HasField("data_location") and t.data_location == 1:
        kv = {e.key: e.value for e in t.external_data}
        ext = (kv["location"], int(kv.get("offset", "0")),
               int(kv["length"]) if "length" in kv else None)
    if ext is not None:
        loc, off, length = ext
        with open(os.path.join(base_dir, loc), "rb") as f:
            f.seek(off)
            out = f.read() if length is None else f.read(length)
    elif t.HasField("raw_data"):
        out = t.raw_data
    elif code in (16,) or 17 <= code <= 26 or (mindir and code == 18):
        per = {21: 2, 22: 2, 23: 2, 25: 4, 26: 4, 18: 2}.get(code, 1)
        width = 2 if code == 16 else 1
        out = b"".join(int(v & ((1 << (8 * width)) - 1)).to_bytes(width, "little")
                       for v in t.int32_data)
        del per
    elif mindir:
        field = {1: "float_data", 11: "double_data", 17: "double_data", 14: "float_data",
                 15: "double_data", 7: "int64_data", 12: "uint64_data",
                 13: "uint64_data"}.get(code, "int32_data")
        vals = getattr(t, field)
        out = np.array(vals).astype(np_dtype).tobytes()
    elif code in (14, 15):
        # complex in float_data / double_data, real and imaginary parts interleaved (onnx
        # 1.12's numpy_helper cannot read these)
        vals = t.float_data if code == 14 else t.double_data
        out = np.array(vals, dtype="<f4" if code == 14 else "<f8").tobytes()
    else:
        out = numpy_helper.to_array(t).astype(np_dtype).tobytes()
    if kind == "flat":
        per = {21: 2, 22: 2, 23: 2, 25: 4, 26: 4, 18: 2}[code]
        return (tname, of_type, None), [(n + per - 1) // per], out
    return (tname, of_type, np_dtype), dims, out


def has_data(t):
    """A MindIR TensorProto holds data: raw_data, typed values or external data.
    MindSpore's loader (load_model.cc, BuildValueFromAttributeProto) reads an
    attribute's tensor without raw_data as the data type it names."""
    typed = ("float_data", "int32_data", "int64_data", "double_data", "uint64_data",
             "string_data")
    return (t.HasField("raw_data") or t.HasField("external_data")
            or any(len(getattr(t, f, ())) for f in typed))


class Walker:
    def __init__(self, path, mindir, module=None):
        self.path = path
        self.base = os.path.dirname(os.path.abspath(path))
        self.mindir = mindir
        self.types = MINDIR_TYPES if mindir else ONNX_TYPES
        self.entries = []
        self.seen = set()
        if mindir:
            self.model = module.ModelProto()
            with open(path, "rb") as f:
                self.model.ParseFromString(f.read())
        else:
            self.model = onnx.load(path, load_external_data=False)

    def add(self, t, name, suffix, shown_name=None):
        info, dims, out = tensor_bytes(t, self.types, self.base, self.mindir)
        tname, of_type, np_dtype = info
        base = shown_name if shown_name is not None else name
        if suffix is None:
            d = esc(base)
        else:
            d = dir_with_suffix(base, suffix)
            k = 2
            while d in self.seen:
                d = dir_with_suffix(base, suffix + b"%%dup%d" % k)
                k += 1
        self.seen.add(d)
        self.entries.append(Entry(d, name, tname.encode(), of_type, dims, out, np_dtype))

    def shows(self, node, a):
        """ONNX: every attribute's TENSOR / TENSORS values (onnx-format.md 8: also
        ConstantOfShape.value...).  MindIR: a Constant's value only, its other attributes'
        tensors describe a node's output type and shape, without data."""
        return not self.mindir or (node.op_type == "Constant" and a.name == "value")

    def attr_tensor(self, t, node, main, suffix):
        """An attribute's tensor: named by the node's first output, as a Constant's value
        (its own name when the node has no output)."""
        if self.mindir and not has_data(t):
            return  # a data type, not a tensor (MindSpore's load_model.cc reads it so)
        value = node.output[0].encode() if node.output and node.output[0] else t.name.encode()
        self.add(t, value, b"%const" if main else suffix)

    def graph(self, g, main, suffix):
        for i, node in enumerate(g.node):
            for a in node.attribute:
                shown = self.shows(node, a)
                sub_suffix = make_suffix(node.name.encode(), i, a.name.encode())
                # field order, as a serializer writes them: t, g, tensors, graphs
                if shown and a.HasField("t"):
                    self.attr_tensor(a.t, node, main, suffix)
                if a.HasField("g"):
                    self.graph(a.g, False, sub_suffix)
                for t in a.tensors if shown else []:
                    self.attr_tensor(t, node, main, suffix)
                for sub in a.graphs:
                    self.graph(sub, False, sub_suffix)
        tensors = g.parameter if self.mindir else g.initializer
        for t in tensors:
            name = t.name.encode()
            if main and self.mindir:
                self.add(t, name, None, name.split(b":", 1)[1] if b":" in name else name)
            else:
                self.add(t, name, None if main else suffix)
            self.entries[-1].top = main
        if self.mindir and main:
            for mp in g.map_parameter:
                for part, t in (("key", mp.key_tensor), ("value", mp.value_tensor),
                                ("status", mp.status_tensor)):
                    self.add(t, mp.name.encode(), b"%map." + part.encode())

    def legacy_variables(self):
        """The v1.2-1.5 split: a _graph.mindir without parameters takes them from every
        regular file of PREFIX_variables/, each a GraphProto (mindspore-formats.md 4.4)."""
        if not self.path.endswith("_graph.mindir") or self.model.graph.parameter:
            return []
        var_dir = self.path[:-len("_graph.mindir")] + "_variables"
        params = []
        for name in sorted(os.listdir(var_dir)):
            p = os.path.join(var_dir, name)
            if name.startswith(".") or not os.path.isfile(p):
                continue
            g = type(self.model.graph)()
            with open(p, "rb") as f:
                g.ParseFromString(f.read())
            params.extend(g.parameter)
        return params

    def walk(self):
        if self.mindir:
            self.model.graph.parameter.extend(self.legacy_variables())
        self.graph(self.model.graph, True, None)
        if self.mindir:
            for k, fn in enumerate(self.model.functions):
                del k
                self.graph(fn, False, make_suffix(fn.name.encode(), 0, b"function"))
        return self.entries


def mindir_module():
    """mind_ir.proto compiled by protoc and imported; the generated file is
    removed once imported (the module stays loaded)."""
    if "mind_ir_pb2" in sys.modules:
        return sys.modules["mind_ir_pb2"]
    here = os.path.dirname(os.path.abspath(__file__))
    with tempfile.TemporaryDirectory(prefix="ckptfs-mindir-pb-") as out:
        subprocess.run(["protoc", "-I" + here, "--python_out=" + out, "mind_ir.proto"], check=True)
        sys.path.insert(0, out)
        try:
            import mind_ir_pb2  # noqa: E402
        finally:
            sys.path.remove(out)
    return mind_ir_pb2


def load(path):
    mindir = path.endswith(".mindir")
    return Walker(path, mindir, mindir_module() if mindir else None).walk()


def cmd_list(model):
    for e in load(model):
        print("%s\t%s\t%s\t%d\t%s" % (os.fsdecode(e.dirname), e.ms_type,
                                      co.shape_text(e.dims).decode(), len(e.out),
                                      hashlib.sha256(e.out).hexdigest()[:16]))


def cmd_check(mount, model):
    entries = load(model)
    root = os.fsencode(mount)
    co.check_root_listing(root, [e.dirname for e in entries])
    co.check_snapshot_done(root)
    for e in entries:
        co.check_tensor_dir(root, e)
    co.check_numpy_reads(root, [e for e in entries if e.dims])
    print(f"ok: {len(entries)} tensors match")


def cmd_values(model, name):
    for e in load(model):
        if e.dirname == os.fsencode(name):
            for v in np.frombuffer(e.out, dtype=e.np_dtype).ravel():
                print(repr(v.item()))
            return
    sys.exit(f"no tensor directory {name}")


def node_label(node, index):
    if node.name:
        return node.name
    return "#%d (%s)" % (index, node.op_type) if node.op_type else "#%d" % index


def readers(g, name):
    """Nodes of g and of its subgraphs that list name as an input, depth first."""
    for i, node in enumerate(g.node):
        if name in [n.encode() for n in node.input]:
            yield node_label(node, i)
        for a in node.attribute:
            for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                yield from readers(sub, name)


def cmd_users(model, dirname):
    mindir = model.endswith(".mindir")
    w = Walker(model, mindir, mindir_module() if mindir else None)
    entries = w.walk()
    graphs = [w.model.graph] + (list(w.model.functions) if mindir else [])
    if dirname is None:
        for e in entries:
            if e.top:
                first = next((r for g in graphs for r in readers(g, e.tag)), "")
                print("%s\t%s" % (os.fsdecode(e.dirname), first))
        return
    tags = [e.tag for e in entries if e.dirname == os.fsencode(dirname)]
    if not tags:
        sys.exit(f"no tensor directory {dirname}")
    for g in graphs:
        for label in readers(g, tags[0]):
            print(label)
# ---------------------------------------------------------------------------------------
# Malformed models (`bad`).  A valid model is built with onnx.helper or the MindIR
# protobuf module, then one tensor ("the victim", between two good ones) is made bad,
# by the official encoder where it can express the fault, by editing bytes where it
# cannot.  The offset ckptfs must name is found here, in the serialized bytes, with
# ckpt_oracle's wire walker: the key of the offending field, or for a truncated file the
# key of the top-level field the cut falls in.
# ---------------------------------------------------------------------------------------

MAX_GRAPH_DEPTH = 32        # graphs nested, the main graph being the first
MAX_DIMS = 64


def field_numbers(pb, mindir):
    """The field numbers the cases need, from the official descriptors."""
    def num(msg, name):
        return getattr(pb, msg).DESCRIPTOR.fields_by_name[name].number
    return dict(model_graph=num("ModelProto", "graph"), graph_node=num("GraphProto", "node"),
                graph_tensor=num("GraphProto", "parameter" if mindir else "initializer"),
                node_attr=num("NodeProto", "attribute"), attr_g=num("AttributeProto", "g"),
                t_dims=num("TensorProto", "dims"), t_type=num("TensorProto", "data_type"),
                t_float=num("TensorProto", "float_data"), t_raw=num("TensorProto", "raw_data"),
                t_external=num("TensorProto", "external_data"))


def occurrences(buf, start, end, num):
    """(key offset, payload) of every field numbered num in the message [start, end)."""
    return [(off, payload) for field, _wt, off, payload in co._fields(buf, start, end)
            if field == num]


def locate(buf, steps):
    """Follow (field, index) steps down from the top-level message; the key offset and
    payload of the last one."""
    start, end = 0, len(buf)
    for num, index in steps:
        off, payload = occurrences(buf, start, end, num)[index]
        if isinstance(payload, tuple):
            start, end = payload
    return off, payload


class Builder:
    """Tensors, nodes and models of one format, built by its official protobuf code."""

    def __init__(self, mindir):
        self.mindir = mindir
        self.pb = mindir_module() if mindir else onnx
        self.f = field_numbers(self.pb, mindir)

    def tensor(self, name, dims, data_type=1, raw=None):
        t = self.pb.TensorProto()
        t.name = "main:" + name if self.mindir else name
        t.data_type = data_type
        t.dims.extend(dims)
        if raw is not None:
            t.raw_data = raw
        return t

    def good(self, name):
        return self.tensor(name, [2, 3], raw=np.arange(6, dtype="<f4").tobytes())

    def external(self, t, location, offset, length):
        if self.mindir:
            t.external_data.location = location
            t.external_data.offset = offset
            t.external_data.length = length
        else:
            # as onnx.save_model does: the helper wants raw_data, which then goes
            t.raw_data = b"\0"
            onnx.external_data_helper.set_external_data(t, location, offset, length)
            t.data_location = onnx.TensorProto.EXTERNAL
            t.ClearField("raw_data")

    def graph(self, name, tensors=(), nodes=()):
        if self.mindir:
            g = self.pb.GraphProto(name=name)
            g.parameter.extend(tensors)
            g.node.extend(nodes)
            return g
        return helper.make_graph(list(nodes), name, [], [], initializer=list(tensors))

    def if_node(self, name, then_branch):
        if self.mindir:
            n = self.pb.NodeProto(name=name, op_type="If", input=["c"], output=[name + "_y"])
            n.attribute.add(name="then_branch").g.CopyFrom(then_branch)
            return n
        return helper.make_node("If", ["c"], [name + "_y"], name=name,
                                then_branch=then_branch)

    def model(self, g):
        if self.mindir:
            m = self.pb.ModelProto(ir_version="1", producer_name="ckptfs-oracle",
                                   model_version="1", little_endian=True, mind_ir_version=1)
            m.graph.CopyFrom(g)
            return m.SerializeToString()
        return helper.make_model(g, producer_name="ckptfs-oracle",
                                 opset_imports=[helper.make_opsetid("", 13)]
                                 ).SerializeToString()

    def with_victim(self, victim):
        """A model whose main graph holds good tensors around the victim: the bytes and
        the (field, index) steps to the victim."""
        g = self.graph("main", [self.good("before"), victim, self.good("after")])
        return self.model(g), [(self.f["model_graph"], 0), (self.f["graph_tensor"], 1)]

    def in_victim(self, buf, steps, num, index=0):
        """Key offset and payload of a field of the victim."""
        return locate(buf, steps + [(num, index)])


def splice(buf, steps, at, extra):
    """Insert extra at offset at, inside every message on the steps' path, growing their
    length prefixes (each kept at its width)."""
    out = bytearray(buf[:at] + extra + buf[at:])
    start, end = 0, len(buf)
    for num, index in steps:
        off, (body, body_end) = occurrences(buf, start, end, num)[index]
        width = body - off - 1  # one-byte keys
        new = body_end - body + len(extra)
        assert new < 1 << (7 * width)
        out[off + 1:body] = bytes(((new >> (7 * i)) & 0x7F) | (0x80 if i < width - 1 else 0)
                                  for i in range(width))
        start, end = body, body_end
    return bytes(out)


def nested(b, depth):
    """A model whose graphs nest depth deep through If nodes' then_branch, with one
    tensor in the innermost graph; the steps to the innermost graph's field."""
    inner = b.graph("g%d" % depth, [b.good("deep")])
    for level in range(depth - 1, 0, -1):
        inner = b.graph("g%d" % level, nodes=[b.if_node("If_%d" % level, inner)])
    steps = [(b.f["model_graph"], 0)]
    steps += [(b.f["graph_node"], 0), (b.f["node_attr"], 0), (b.f["attr_g"], 0)] * (depth - 1)
    return b.model(inner), steps


def overflow_dim(dims, itemsize):
    """Index of the dim at which itemsize x prod(dims) exceeds 2**63 - 1."""
    n = itemsize
    for i, d in enumerate(dims):
        n *= d
        if n > co.INT64_MAX:
            return i
    raise AssertionError("dims do not overflow")


def external_case(b, out, offset, length, file_size):
    """The victim's bytes in a side file of file_size bytes next to out.  A MindIR data
    file opens with 64 bytes of front info, byte 0 = 1 (little-endian; section 4.4)."""
    location = os.path.basename(out) + ".data"
    data = bytes(range(256)) * (file_size // 256) + bytes(file_size % 256)
    if b.mindir:
        data = b"\1" + bytes(63) + data[64:]
    with open(os.path.join(os.path.dirname(os.path.abspath(out)), location), "wb") as f:
        f.write(data)
    victim = b.tensor("ext", [3, 4])
    b.external(victim, location, offset, length)
    return b.with_victim(victim)


def external_field(b, buf, steps, what):
    """Key offset of the victim's external offset or length: MindIR's ExternalDataProto
    field; ONNX's external_data entry whose key is `what`."""
    if b.mindir:
        ext = b.pb.TensorProto.ExternalDataProto.DESCRIPTOR.fields_by_name[what].number
        return b.in_victim(buf, steps + [(b.f["t_external"], 0)], ext)[0]
    key = onnx.StringStringEntryProto.DESCRIPTOR.fields_by_name["key"].number
    for off, (start, end) in occurrences(buf, *locate(buf, steps)[1], b.f["t_external"]):
        (_koff, (ks, ke)), = occurrences(buf, start, end, key)
        if buf[ks:ke] == what.encode():
            return off
    raise AssertionError("no external_data entry " + what)


def bad_model(case, out):
    """(bytes, offset) of a malformed model for case; side files are written beside out."""
    b = Builder(out.endswith(".mindir"))
    f = b.f
    if case in ("deep", "deep32"):
        depth = MAX_GRAPH_DEPTH + (case == "deep")
        buf, steps = nested(b, depth)
        return buf, (locate(buf, steps)[0] if case == "deep" else None)
    if case in ("truncated", "pastend"):
        buf, steps = b.with_victim(b.tensor("cut", [50], raw=bytes(range(200))))
        raw_off, (start, _end) = b.in_victim(buf, steps, f["t_raw"])
        if case == "truncated":
            cut = start + 100
            top = [off for _n, _wt, off, p in co._fields(buf, 0, len(buf))
                   if isinstance(p, tuple) and p[0] <= cut < p[1]]
            return buf[:cut], top[0]
        # raw_data's 2-byte length prefix (200) becomes 16383: past the end of the
        # tensor, and of the file.
        assert buf[start - 2:start] == b"\xc8\x01" and 16383 > len(buf) - start
        return buf[:start - 2] + b"\xff\x7f" + buf[start:], raw_off
    if case == "negdim":
        buf, steps = b.with_victim(b.tensor("neg", [4, -3], raw=bytes(48)))
        return buf, b.in_victim(buf, steps, f["t_dims"], 1)[0]
    if case == "overflow":
        dims = [2 ** 40, 2 ** 40]
        buf, steps = b.with_victim(b.tensor("over", dims, raw=bytes(4)))
        return buf, b.in_victim(buf, steps, f["t_dims"], overflow_dim(dims, 4))[0]
    if case == "manydims":
        buf, steps = b.with_victim(b.tensor("many", [1] * (MAX_DIMS + 1), raw=bytes(4)))
        return buf, b.in_victim(buf, steps, f["t_dims"], MAX_DIMS)[0]
    if case == "sizemismatch":
        buf, steps = b.with_victim(b.tensor("mismatch", [3, 4], raw=bytes(40)))
        return buf, b.in_victim(buf, steps, f["t_raw"])[0]
    if case == "typedmismatch":
        victim = b.tensor("typed", [2, 3])
        victim.float_data.extend([1.0, 2.0, 3.0, 4.0, 5.0])
        buf, steps = b.with_victim(victim)
        return buf, b.in_victim(buf, steps, f["t_float"])[0]
    if case == "typedwire":
        # float_data's key gets wire type varint, its bytes one padded varint: the
        # same size, so every enclosing length stays right
        victim = b.tensor("typedwire", [1])
        victim.float_data.append(1.0)
        buf, steps = b.with_victim(victim)
        key_off, _payload = b.in_victim(buf, steps, f["t_float"])
        size = 6 if buf[key_off] & 7 == 2 else 5  # packed (ONNX), or one fixed32 (MindIR)
        varint_key = bytes([f["t_float"] << 3])
        return buf[:key_off] + varint_key + b"\x80" * (size - 2) + b"\0" + buf[key_off + size:], key_off
    if case == "emptypacked":
        # a 0-element tensor whose int64_data is an empty packed run: valid protobuf
        victim = b.tensor("empty", [0], data_type=7)
        buf, steps = b.with_victim(victim)
        t_end = locate(buf, steps)[1][1]
        int64 = b.pb.TensorProto.DESCRIPTOR.fields_by_name["int64_data"].number
        return splice(buf, steps, t_end, bytes([int64 << 3 | 2, 0])), None
    if case == "badtype":
        buf, steps = b.with_victim(b.tensor("badtype", [2], data_type=99, raw=bytes(8)))
        return buf, b.in_victim(buf, steps, f["t_type"])[0]
    if case == "extoff":
        buf, steps = external_case(b, out, 4096, 48, 1024)
        return buf, external_field(b, buf, steps, "offset")
    if case == "extlen":
        buf, steps = external_case(b, out, 1000, 48, 1024)
        return buf, external_field(b, buf, steps, "length")
    if case == "extsize":
        buf, steps = external_case(b, out, 0, 40, 1024)
        return buf, external_field(b, buf, steps, "length")
    if case == "extheader":  # MindIR: data inside a data file's front info
        buf, steps = external_case(b, out, 16, 48, 1024)
        return buf, external_field(b, buf, steps, "offset")
    raise SystemExit(f"unknown bad case {case!r}")


BAD_CASES = ["truncated", "pastend", "deep", "deep32", "negdim", "overflow", "manydims",
             "sizemismatch", "typedmismatch", "typedwire", "emptypacked", "badtype", "extoff",
             "extlen", "extsize", "extheader"]


def cmd_bad(out, case):
    buf, offset = bad_model(case, out)
    with open(out, "wb") as f:
        f.write(buf)
    print("-" if offset is None else offset)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("list")
    p.add_argument("model")
    p = sub.add_parser("check")
    p.add_argument("mount")
    p.add_argument("model")
    p = sub.add_parser("values")
    p.add_argument("model")
    p.add_argument("name")
    p = sub.add_parser("users")
    p.add_argument("model")
    p.add_argument("name", nargs="?")
    p = sub.add_parser("bad")
    p.add_argument("out")
    p.add_argument("--case", required=True, choices=BAD_CASES)
    a = ap.parse_args()
    if a.cmd == "list":
        cmd_list(a.model)
    elif a.cmd == "check":
        cmd_check(a.mount, a.model)
    elif a.cmd == "values":
        cmd_values(a.model, a.name)
    elif a.cmd == "bad":
        cmd_bad(a.out, a.case)
    else:
        cmd_users(a.model, a.name)


if __name__ == "__main__":
    main()
