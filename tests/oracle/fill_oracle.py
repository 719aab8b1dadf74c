#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Independent test oracle for ckptfs-convert --into (a graph filled with a checkpoint).

Written from onnx-format.md, mindspore-formats.md section 4 and the rules of
docs/man/ckptfs-convert.1 (names as the mount shows them, --map, exact type and shape);
it shares no code with the C program under test.  ONNX models are read and written with
Debian's python3-onnx, MindIR models with the protobuf runtime and mind_ir.proto (through
graph_oracle), checkpoints written with the protobuf runtime (ckpt_oracle) or as
safetensors by json + numpy.

    /usr/bin/python3 fill_oracle.py ckpt TEMPLATE OUT.ckpt|OUT.safetensors [--seed N]
            [--skip NAME]... [--rename NAME=NEW]... [--extra NAME]... [--retype NAME]
            [--reshape NAME]
        a checkpoint of TEMPLATE's main-graph initializers / parameters (MindIR: named
        without the "<graph>:" prefix) with perturbed values; --skip leaves one out,
        --rename stores one under another name, --extra adds a Float32 [3] tensor the
        template lacks, --retype stores one with another type of the same size or a
        different one (Float32 <-> Int32, Float16 <-> Int16...), --reshape with its
        dimensions reversed (or one more dimension of 1).
    /usr/bin/python3 fill_oracle.py template CKPT OUT.onnx
        an ONNX graph (IR 8, no nodes) whose initializers are CKPT's tensors, zeros.
    /usr/bin/python3 fill_oracle.py check TEMPLATE CKPT OUT [--map FILE] [--checker]
            [--data-file NAME]
        OUT is TEMPLATE with every matched initializer holding CKPT's bytes and every
        other one its own; everything else equal (nodes, inputs, outputs, attributes,
        metadata, other tensors; ONNX external data loaded by onnx, so compared as
        values); every ONNX tensor external in TEMPLATE is external in OUT, in the one
        file "<OUT>.data" beside it (or --data-file NAME: a decompressed OUT.zst's is
        still named after OUT.zst) (location, offset, length, nothing else; its own
        range, 4096-aligned over 1 MiB), every inline one inline; --checker:
        onnx.checker.check_model(OUT) passes.  Prints "ok: N filled, K kept", and
        ", E external" when OUT has external data.
    /usr/bin/python3 fill_oracle.py pyfill TEMPLATE CKPT OUT [--map FILE]
        the same fill done by onnx's own helpers (numpy_helper.from_array): the model
        onnxruntime's outputs are compared with.

Exit status: 0 success; 1 check mismatch; 2 usage error.
"""

import argparse
import json
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import numpy_helper  # noqa: E402

import ckpt_oracle as co  # noqa: E402
import graph_oracle as go  # noqa: E402

# TensorProto.DataType -> MindSpore tensor_type (mindspore-formats.md 4.3), and the
# safetensors dtype (safetensors' own list).
MS_OF_PB = {1: "Float32", 2: "UInt8", 3: "Int8", 4: "UInt16", 5: "Int16", 6: "Int32",
            7: "Int64", 9: "Bool", 10: "Float16", 11: "Float64", 12: "UInt32",
            13: "UInt64", 14: "Complex64", 15: "Complex128", 16: "BFloat16", 17: "Float64"}
ST_OF_MS = {"Float32": "F32", "UInt8": "U8", "Int8": "I8", "UInt16": "U16", "Int16": "I16",
            "Int32": "I32", "Int64": "I64", "Bool": "BOOL", "Float16": "F16",
            "Float64": "F64", "UInt32": "U32", "UInt64": "U64", "BFloat16": "BF16"}
MS_OF_ST = {v: k for k, v in ST_OF_MS.items()}
# --retype: another type of the same element size where there is one.
RETYPE = {"Float32": "Int32", "Int32": "Float32", "Float16": "Int16", "Int16": "Float16",
          "Int64": "Float64", "Float64": "Int64", "BFloat16": "Float16", "UInt8": "Int8",
          "Int8": "UInt8", "Bool": "UInt8", "UInt16": "Int16", "UInt32": "Int32",
          "UInt64": "Int64"}


def fail(msg):
    print(f"fill_oracle: {msg}", file=sys.stderr)
    sys.exit(1)


# ---------------------------------------------------------------------------------------
# Models.
# ---------------------------------------------------------------------------------------


class Graph:
    """A template or a filled model: its main-graph tensors by shown name."""

    def __init__(self, path):
        self.path = path
        self.mindir = path.endswith(".mindir")
        self.types = go.MINDIR_TYPES if self.mindir else go.ONNX_TYPES
        self.base = os.path.dirname(os.path.abspath(path))
        if self.mindir:
            self.model = go.mindir_module().ModelProto()
            with open(path, "rb") as f:
                self.model.ParseFromString(f.read())
            self.list = self.model.graph.parameter
        else:
            # external data loaded into the tensors (data_location DEFAULT, no
            # external_data entries): models compare as values wherever the bytes are
            self.model = onnx.load(path)
            self.layout = onnx.load(path, load_external_data=False)
            self.list = self.model.graph.initializer

    def shown(self, t):
        """MindIR: the name after the first ':' (mindspore-formats.md 4.3)."""
        if self.mindir and ":" in t.name:
            return t.name.split(":", 1)[1]
        return t.name

    def tensors(self):
        """[(shown name, TensorProto, data_type, dims, bytes)] in file order."""
        out = []
        for t in self.list:
            _, dims, data = go.tensor_bytes(t, self.types, self.base, self.mindir)
            out.append((self.shown(t), t, t.data_type, list(t.dims), data))
        return out

    def without_data(self):
        """The model with every main-graph tensor's data fields cleared."""
        m = type(self.model)()
        m.CopyFrom(self.model)
        for t in (m.graph.parameter if self.mindir else m.graph.initializer):
            for field in ("raw_data", "float_data", "int32_data", "int64_data", "double_data",
                          "uint64_data", "string_data"):
                t.ClearField(field)
        return m


# ---------------------------------------------------------------------------------------
# Checkpoints.
# ---------------------------------------------------------------------------------------


def read_ckpt(path):
    """{name: (MindSpore type, dims, bytes)} of a .ckpt or .safetensors."""
    if path.endswith(".safetensors"):
        with open(path, "rb") as f:
            buf = f.read()
        n = struct.unpack("<Q", buf[:8])[0]
        head = json.loads(buf[8:8 + n])
        body = buf[8 + n:]
        return {k: (MS_OF_ST[v["dtype"]], list(v["shape"]),
                    body[v["data_offsets"][0]:v["data_offsets"][1]])
                for k, v in head.items() if k != "__metadata__"}
    entries, _ = co.load_reference(path)
    return {e.tag.decode(): (e.ms_type, list(e.dims), e.out) for e in entries if not e.part}


def write_ckpt(path, tensors):
    """tensors: [(name, MindSpore type, dims, bytes)]."""
    if path.endswith(".safetensors"):
        head, body = {}, b""
        for name, ms, dims, data in tensors:
            head[name] = {"dtype": ST_OF_MS[ms], "shape": dims,
                          "data_offsets": [len(body), len(body) + len(data)]}
            body += data
        h = json.dumps(head).encode()
        h += b" " * (-len(h) % 8)
        co.write_file(path, [struct.pack("<Q", len(h)), h, body])
        return
    co.write_file(path, [co.record(co.tensor_value(name, ms, dims if dims else [], data))
                         for name, ms, dims, data in tensors])


def perturb(ms, data, rng):
    """Other values of the same type: floats moved by up to 1, integers by 1..3, raw
    bits (BFloat16, Bool) replaced."""
    np_dtype = co.MS_TYPES[ms][2]
    if ms in ("BFloat16", "Bool"):
        v = np.frombuffer(data, dtype=np_dtype)
        new = rng.integers(0, 2, size=v.size).astype(np_dtype) if ms == "Bool" else \
            (np.frombuffer(np.float32(rng.uniform(-2, 2, v.size)).astype("<f4").tobytes(),
                           dtype="<u4") >> 16).astype("<u2")
        return new.tobytes()
    v = np.frombuffer(data, dtype=np_dtype)
    if v.dtype.kind in "fc":
        return (v + rng.uniform(-1, 1, v.size).astype(v.dtype)).astype(np_dtype).tobytes()
    return (v + rng.integers(1, 4, v.size).astype(v.dtype)).astype(np_dtype).tobytes()


def cmd_ckpt(a):
    g = Graph(a.template)
    rng = np.random.default_rng(a.seed)
    renames = dict(r.split("=", 1) for r in a.rename)
    names = {n for n, *_ in g.tensors()}
    for n in a.skip + list(renames) + a.retype + a.reshape:
        if n not in names:
            fail(f"{a.template} has no tensor {n}")
    out = []
    for name, _, code, dims, data in g.tensors():
        if name in a.skip or code not in MS_OF_PB:
            continue
        ms = MS_OF_PB[code]
        data = perturb(ms, data, rng)
        if name in a.retype:
            ms = RETYPE[ms]
        if name in a.reshape:
            dims = dims[::-1] if len(dims) > 1 and dims != dims[::-1] else dims + [1]
        out.append((renames.get(name, name), ms, dims, data))
    for name in a.extra:
        out.append((name, "Float32", [3], np.float32([1, 2, 3]).tobytes()))
    write_ckpt(a.out, out)


# ---------------------------------------------------------------------------------------
# The expected fill.
# ---------------------------------------------------------------------------------------


def read_map(path):
    """CKPT_NAME -> TEMPLATE_NAME (the format of ckptfs-convert(1))."""
    renames = {}
    if path is None:
        return renames
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    for line in lines:
        # blanks are spaces and tabs; a carriage return counts as one
        words = [w for w in line.replace(b"\t", b" ").replace(b"\r", b" ").split(b" ") if w]
        if words and not words[0].startswith(b"#"):
            renames[words[0].decode("utf-8", "surrogateescape")] = \
                words[1].decode("utf-8", "surrogateescape")
    return renames


def expected(template, ckpt_path, map_path):
    """{template name: (MindSpore type, dims, bytes) it is filled with}."""
    ckpt = read_ckpt(ckpt_path)
    renames = read_map(map_path)
    by_new = {}
    for name, value in ckpt.items():
        by_new.setdefault(renames.get(name, name), []).append((name in renames, value))
    names = {n for n, *_ in template.tensors()}
    # a MindIR parameter may be named in full in the map ("<graph>:<name>")
    full = {t.name: n for n, t, *_ in template.tensors()}
    by_new = {(n if n in names else full.get(n, n)): v for n, v in by_new.items()}
    fills = {}
    for name in names:
        # a name the map gives wins over a tensor that has it of its own
        cands = sorted(by_new.get(name, []), key=lambda c: not c[0])
        if cands:
            fills[name] = cands[0][1]
    return fills


def check_layout(tmpl, out, data):
    """ONNX: the tensors external in the template are external in OUT, in
    "<OUT>.data" (onnx's all_tensors_to_one_file layout), each at its own range
    holding its bytes; the inline ones inline.  Returns how many are external."""
    edh = onnx.external_data_helper
    ts = list(edh._get_all_tensors(tmpl.layout))
    os_ = list(edh._get_all_tensors(out.layout))
    loaded = list(edh._get_all_tensors(out.model))
    if len(ts) != len(os_):
        fail(f"{len(os_)} tensors, the template has {len(ts)}")
    spans = []
    for t, o, full in zip(ts, os_, loaded):
        if edh.uses_external_data(t) != edh.uses_external_data(o):
            fail(f"{o.name}: external {edh.uses_external_data(o)}, in the template "
                 f"{edh.uses_external_data(t)}")
        if not edh.uses_external_data(o):
            continue
        kv = [(e.key, e.value) for e in o.external_data]
        if [k for k, _ in kv] != ["location", "offset", "length"] or kv[0][1] != data:
            fail(f"{o.name}: external_data {kv}, expected location {data}, offset, length")
        off, length = int(kv[1][1]), int(kv[2][1])
        if length != len(full.raw_data):
            fail(f"{o.name}: length {length}, its bytes are {len(full.raw_data)}")
        if length > (1 << 20) and off % 4096:
            fail(f"{o.name}: offset {off} of a tensor over 1 MiB not 4096-aligned")
        spans.append((off, off + length, o.name))
    spans.sort()
    for (_, end, name), (start, _, other) in zip(spans, spans[1:]):
        if start < end:
            fail(f"{name} and {other} overlap in {data}")
    if spans and spans[-1][1] > os.path.getsize(os.path.join(out.base, data)):
        fail(f"{spans[-1][2]}: past the end of {data}")
    return len(spans)


def cmd_check(a):
    tmpl, out = Graph(a.template), Graph(a.out)
    fills = expected(tmpl, a.ckpt, a.map)
    t_list, o_list = tmpl.tensors(), out.tensors()
    if [n for n, *_ in t_list] != [n for n, *_ in o_list]:
        fail(f"tensor names differ: {[n for n, *_ in o_list]}")
    filled = kept = 0
    for (name, t, code, dims, data), (_, ot, ocode, odims, odata) in zip(t_list, o_list):
        if ot.name != t.name or ocode != code or odims != dims:
            fail(f"{name}: name, type or dims changed: {ot.name} {ocode} {odims}")
        if name in fills:
            ms, cdims, cdata = fills[name]
            if MS_OF_PB[code] != ms or (cdims or []) != dims:
                fail(f"{name}: checkpoint's {ms} {cdims} filled {code} {dims}")
            want = cdata
            filled += 1
        else:
            want = data
            kept += 1
        if odata != want:
            side = "checkpoint" if name in fills else "template"
            fail(f"{name}: {len(odata)} bytes differ from the {side}'s")
    data = a.data_file or os.path.basename(a.out) + ".data"
    external = 0 if out.mindir else check_layout(tmpl, out, data)
    if out.without_data() != tmpl.without_data():
        fail("the graph outside the tensors' data changed")
    if a.checker:
        onnx.checker.check_model(a.out)
    print(f"ok: {filled} filled, {kept} kept" + (f", {external} external" if external else ""))


def cmd_pyfill(a):
    model = onnx.load(a.template)
    fills = expected(Graph(a.template), a.ckpt, a.map)
    for i, t in enumerate(model.graph.initializer):
        if t.name not in fills:
            continue
        ms, dims, data = fills[t.name]
        arr = np.frombuffer(data, dtype=co.MS_TYPES[ms][2]).reshape(dims)
        model.graph.initializer[i].CopyFrom(numpy_helper.from_array(arr, t.name))
    onnx.save(model, a.out)


PB_OF_MS = {v: k for k, v in MS_OF_PB.items() if k != 17}


def cmd_template(a):
    inits = [onnx.helper.make_tensor(name, PB_OF_MS[ms], dims, bytes(len(data)), raw=True)
             for name, (ms, dims, data) in read_ckpt(a.ckpt).items()]
    graph = onnx.helper.make_graph([], "fill", [], [], initializer=inits)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, a.out)


def main():
    ap = argparse.ArgumentParser(prog="fill_oracle.py")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("ckpt")
    p.add_argument("template")
    p.add_argument("out")
    p.add_argument("--seed", type=int, default=1)
    for opt in ("skip", "rename", "extra", "retype", "reshape"):
        p.add_argument("--" + opt, action="append", default=[])
    p = sub.add_parser("template")
    p.add_argument("ckpt")
    p.add_argument("out")
    for name in ("check", "pyfill"):
        p = sub.add_parser(name)
        p.add_argument("template")
        p.add_argument("ckpt")
        p.add_argument("out")
        p.add_argument("--map")
        if name == "check":
            p.add_argument("--checker", action="store_true")
            p.add_argument("--data-file")
    a = ap.parse_args()
    {"ckpt": cmd_ckpt, "template": cmd_template, "check": cmd_check,
     "pyfill": cmd_pyfill}[a.cmd](a)


if __name__ == "__main__":
    main()
