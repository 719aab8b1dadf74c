#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Independent oracle for ckptfs-convert: does OUT hold IN's tensors?

Each side is read by the repository's independent readers, never by ckptfs:
  .ckpt         ckpt_oracle (the official protobuf runtime)
  .safetensors  safetensors_oracle (json + numpy)
  .onnx/.mindir graph_oracle (python3-onnx, protobuf)
  a directory   as IN, any snapshot the tools read (oneflow_oracle: the legacy layout,
                or the pickled one by Python's own restricted unpickler); as OUT, a
                OneFlow snapshot, read here: `meta` parsed with protobuf's text_format
                (ckpt_oracle's VariableMetaInfo), `out` with numpy, its size checked
                against prod(shape) * itemsize, `snapshot_done` required; a `pickled_data` only
                when the tensors are not in their names' byte order, listing each
                directory under its legacy name, in OUT's order.

    /usr/bin/python3 convert_oracle.py list PATH           one line a tensor
    /usr/bin/python3 convert_oracle.py compare IN OUT...   exit 0 when each OUT holds
                                                           exactly IN's tensors; 1 and
                                                           the first difference otherwise
    /usr/bin/python3 convert_oracle.py split IN INDEX MAX  compare, and INDEX's set is cut
                                                           as huggingface_hub cuts IN's
                                                           state dict into shards of MAX

`split` applies huggingface_hub's split_state_dict_into_shards_factory rule (written here
from its documented behaviour: tensors in IN's order; one larger than MAX alone in its
own shard, numbered at once; else into the current shard unless that would pass MAX,
which then closes and takes the next number) and names the shards as its
filename_pattern does, after INDEX's name: "<stem>-00001-of-00003.safetensors".  The
index must be byte for byte what transformers' save_pretrained writes for that cut
(json.dumps(index, indent=2, sort_keys=True) + "\n"), and no other shard of that stem
may lie beside it.

A tensor is matched by the name OUT gives it: in a OneFlow snapshot, its directory as the
mount shows it (ckptfs's escaping, as each reader computes it); in a file, its own name,
except a graph's generated tensors (constants, subgraph tensors: NAME%const,
NAME%@NODE.ATTR, %dupK) and MindIR parameters, which keep the shown name with its escaped
part decoded and the generated suffix as is.  Types compare by kind across spellings
(Float32 = F32 = FLOAT = kFloat); into OneFlow by the OneFlow DataType each reader
assigns.  Shapes as presented, bytes by SHA-256.

Exit status: 0 equal; 1 a difference; 2 a file refused or a usage error.
"""

import hashlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
from google.protobuf import text_format  # noqa: E402

import ckpt_oracle as co  # noqa: E402
import graph_oracle as go  # noqa: E402
import safetensors_oracle as so  # noqa: E402

# Every spelling of a type, by kind.
KINDS = {
    "f32": "Float32 F32 FLOAT kFloat float32",
    "f64": "Float64 F64 DOUBLE FLOAT64 kDouble float64",
    "f16": "Float16 F16 FLOAT16 kFloat16 float16",
    "bf16": "BFloat16 BF16 BFLOAT16 kBFloat16",
    "i8": "Int8 I8 INT8 kInt8 int8",
    "i16": "Int16 I16 INT16 kInt16 int16",
    "i32": "Int32 I32 INT32 kInt32 int32",
    "i64": "Int64 I64 INT64 kInt64 int64",
    "u8": "UInt8 U8 UINT8 kUInt8 uint8",
    "u16": "UInt16 U16 UINT16 kUInt16 uint16",
    "u32": "UInt32 U32 UINT32 kUInt32 uint32",
    "u64": "UInt64 U64 UINT64 kUInt64 uint64",
    "bool": "Bool BOOL kBool bool",
    "c64": "Complex64 C64 COMPLEX64 kComplex64 complex64",
    "c128": "Complex128 COMPLEX128 kComplex128 complex128",
    "str": "str STRING kChar",
    "f8e4m3": "F8_E4M3 FLOAT8E4M3FN",
    "f8e5m2": "F8_E5M2 FLOAT8E5M2",
}
KIND_OF = {name: k for k, names in KINDS.items() for name in names.split()}

OF_NUMPY = {"kFloat": "<f4", "kDouble": "<f8", "kFloat16": "<f2", "kInt8": "i1",
            "kInt16": "<i2", "kInt32": "<i4", "kInt64": "<i8", "kUInt8": "u1", "kBool": "u1",
            "kComplex64": "<c8", "kComplex128": "<c16"}


class Tensor:
    def __init__(self, name, dirname, type_name, of_type, dims, out):
        self.name, self.dirname = name, dirname
        self.type_name, self.of_type = type_name, of_type
        self.kind = KIND_OF.get(type_name, type_name)
        self.dims, self.out = list(dims), out
        self.sha = hashlib.sha256(out).hexdigest()


def shown_name(e, base):
    """A graph tensor's name in a file OUT: base (its name, MindIR's after the ':') and
    the generated suffix of its directory, as is; a hash-shortened one as shown."""
    ebase = go.esc(base)
    if e.dirname.startswith(ebase) and b"%~" not in ebase:
        return base + e.dirname[len(ebase):]
    return e.dirname


def read_graph(path):
    # Walker.add knows the shown name; keep it with the entry it appends.
    orig = go.Walker.add

    def add(self, t, name, suffix, shown_name=None):
        orig(self, t, name, suffix, shown_name)
        self.entries[-1].shown = shown_name if shown_name is not None else name
    go.Walker.add = add
    try:
        entries = go.load(path)
    finally:
        go.Walker.add = orig
    out = []
    for e in entries:
        of_type = next(v[1] for v in go.ONNX_TYPES.values() if v[0] == e.ms_type) \
            if e.ms_type != "FLOAT64" else "kDouble"
        if e.ms_type == "QINT4X2":
            of_type = "kUInt8"
        out.append(Tensor(shown_name(e, e.shown), e.dirname, e.ms_type, of_type, e.dims, e.out))
    return out


def read_ckpt(path):
    entries, _crc = co.load_reference(path)
    return [Tensor(e.tag, e.dirname, e.ms_type, e.of_type, e.dims, e.out) for e in entries
            if not e.part]


def read_safetensors(path):
    return [Tensor(e.tag, e.dirname, e.ms_type, e.of_type, e.dims, e.out)
            for e in so.load_entries(path)]


def read_oneflow(path):
    """A snapshot as OneFlow's loader takes it (oneflow-layout.md 1.4, 3)."""
    names = sorted(os.listdir(path))
    if "snapshot_done" not in names or not os.path.isfile(os.path.join(path, "snapshot_done")):
        raise co.CheckFailed(f"{path}: no snapshot_done")
    if os.path.getsize(os.path.join(path, "snapshot_done")) != 0:
        raise co.CheckFailed(f"{path}: snapshot_done is not empty")
    dirs = [n for n in names if n not in ("snapshot_done", "pickled_data")]
    if "pickled_data" in names:
        # Written only to keep an order the names' byte order is not: it
        # must list every tensor directory once, under the name a legacy
        # reading of that directory gives, in that other order.
        import oneflow_oracle as oo
        listed = oo.entries(path)
        if sorted(d for _n, d in listed) != dirs:
            raise co.CheckFailed(f"{path}: pickled_data lists {[d for _n, d in listed]}, "
                                 f"not the directories {dirs}")
        for n, d in listed:
            legacy = oo.decode_dir(d)
            if (legacy if legacy is not None else os.fsencode(d)) != n:
                raise co.CheckFailed(f"{path}: pickled_data names {d} {n!r}")
        if [n for n, _d in listed] == sorted(n for n, _d in listed):
            raise co.CheckFailed(f"{path}: pickled_data for names already in byte order")
        dirs = [d for _n, d in listed]
    out = []
    for name in dirs:
        var = os.path.join(path, name)
        if sorted(os.listdir(var)) != ["meta", "out"]:
            raise co.CheckFailed(f"{var}: holds {sorted(os.listdir(var))}, not meta and out")
        meta = co.VariableMetaInfo()
        with open(os.path.join(var, "meta"), "rb") as f:
            text = f.read()
        text_format.Parse(text.decode("utf-8"), meta)
        of_type = co._DATA_TYPE_ENUM.values_by_number[meta.data_type].name
        dims = list(meta.shape.dim)
        if text != co.meta_bytes(dims, of_type):
            raise co.CheckFailed(f"{var}/meta is not the text OneFlow writes: {text!r}")
        data = np.fromfile(os.path.join(var, "out"), dtype=np.uint8).tobytes()
        if of_type in OF_NUMPY:
            want = int(np.prod(dims, dtype=np.int64)) * np.dtype(OF_NUMPY[of_type]).itemsize
            if len(data) != want:
                raise co.CheckFailed(f"{var}/out: {len(data)} bytes, shape {dims} {of_type} "
                                     f"takes {want}")
        out.append(Tensor(os.fsencode(name), os.fsencode(name), of_type, of_type, dims, data))
    return out


def read_snapshot_in(path):
    """A snapshot as IN, in any layout the tools read: oneflow_oracle's reading (the
    pickle's names and order by Python's own restricted unpickler, or the legacy
    directories sorted)."""
    import oneflow_oracle as oo
    return [Tensor(name, dirname, of_type, of_type, dims, raw)
            for name, dirname, of_type, dims, raw in oo.tensors(path)]


def read(path, as_in=False):
    if os.path.isdir(path):
        return read_snapshot_in(path) if as_in else read_oneflow(path)
    if path.endswith(".ckpt"):
        return read_ckpt(path)
    if path.endswith(".safetensors") or path.endswith(so.INDEX_SUFFIX):
        return read_safetensors(path)
    if path.endswith(".onnx") or path.endswith(".mindir"):
        return read_graph(path)
    raise SystemExit(f"{path}: cannot tell its format")


def show(t):
    return "%s\t%s\t%s\t%d\t%s" % (t.name.decode("utf-8", "backslashreplace"), t.type_name,
                                    t.dims, len(t.out), t.sha[:16])


def compare(in_path, src, out_path):
    dst = read(out_path)
    into_dir = os.path.isdir(out_path)
    key = (lambda t: t.dirname) if into_dir else (lambda t: t.name)
    want = {}
    for t in src:
        want[key(t)] = t
    if len(want) != len(src):
        raise co.CheckFailed(f"{in_path}: two tensors share a name")
    got = {key(t): t for t in dst}
    if len(got) != len(dst):
        raise co.CheckFailed(f"{out_path}: two tensors share a name")
    for k in want:
        if k not in got:
            raise co.CheckFailed(f"{k!r}: missing from {out_path}")
    for k in got:
        if k not in want:
            raise co.CheckFailed(f"{k!r}: in {out_path} but not in {in_path}")
    for k, a in want.items():
        b = got[k]
        same_type = a.of_type == b.of_type if into_dir else a.kind == b.kind
        if not same_type:
            raise co.CheckFailed(f"{k!r}: type {a.type_name} became {b.type_name}")
        if a.dims != b.dims:
            raise co.CheckFailed(f"{k!r}: shape {a.dims} became {b.dims}")
        if a.sha != b.sha:
            raise co.CheckFailed(f"{k!r}: bytes differ ({len(a.out)} and {len(b.out)} bytes)")
    print(f"ok: {out_path}: {len(src)} tensors")


def hub_cut(sizes, max_size):
    """Shard numbers (from 0) of tensors of these sizes, as huggingface_hub cuts them."""
    shard_list, current, current_size = [], [], 0
    for i, size in enumerate(sizes):
        if size > max_size:
            shard_list.append([i])
            continue
        if current_size + size > max_size:
            shard_list.append(current)
            current, current_size = [], 0
        current.append(i)
        current_size += size
    if current:
        shard_list.append(current)
    shard_of = [None] * len(sizes)
    for k, members in enumerate(shard_list):
        for i in members:
            shard_of[i] = k
    return shard_of, len(shard_list)


def split(in_path, src, index_path, max_size):
    compare(in_path, src, index_path)
    shard_of, n = hub_cut([len(t.out) for t in src], max_size)
    base = os.path.basename(index_path)
    stem = base[:-len(so.INDEX_SUFFIX)]
    names = [f"{stem}-{k + 1:05d}-of-{n:05d}.safetensors" for k in range(n)]
    wm = {t.name.decode("utf-8"): names[shard_of[i]] for i, t in enumerate(src)}
    want = so.index_text({"metadata": {"total_size": sum(len(t.out) for t in src)},
                          "weight_map": wm})
    with open(index_path, "rb") as f:
        got = f.read()
    if got != want:
        raise co.CheckFailed(f"{index_path}: not the index of huggingface_hub's cut at "
                             f"{max_size}:\n{got.decode()}\nwanted:\n{want.decode()}")
    folder = os.path.dirname(index_path) or "."
    beside = sorted(f for f in os.listdir(folder)
                    if f.startswith(stem + "-") and f.endswith(".safetensors"))
    if beside != names:
        raise co.CheckFailed(f"{folder}: shards {beside}, wanted {names}")
    print(f"ok: {index_path}: {n} shards of at most {max_size} bytes")


def main(argv):
    try:
        if len(argv) == 2 and argv[0] == "list":
            for t in read(argv[1]):
                print(show(t))
        elif len(argv) >= 3 and argv[0] == "compare":
            src = read(argv[1], as_in=True)
            for out in argv[2:]:
                compare(argv[1], src, out)
        elif len(argv) == 4 and argv[0] == "split":
            split(argv[1], read(argv[1], as_in=True), argv[2], int(argv[3]))
        else:
            print(__doc__, file=sys.stderr)
            return 2
    except co.CheckFailed as e:
        print(f"MISMATCH: {e}", file=sys.stderr)
        return 1
    except co.Refused as e:
        print(f"refused: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
