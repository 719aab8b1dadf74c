#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Independent oracle for OneFlow snapshot directories read by ckptfs's tools.

Written from oneflow-layout.md (sections 1 and 3) and OneFlow's check_point_v2.py as
that note describes it; it shares no code with the C program.  `meta` is parsed by the
protobuf runtime's text_format (the VariableMetaInfo message ckpt_oracle builds), `out`
read with numpy, and `pickled_data` loaded by Python's own unpickler, restricted to the
classes of a OneFlow state dict (stand-ins; nothing else is ever imported).  Snapshots
are written with Python's own pickler, the classes registered under OneFlow's module
names so that the pickle names the globals OneFlow's does.

    /usr/bin/python3 oneflow_oracle.py gen DIR --case CASE [--protocol P] [--count N]
                                       [--seed S]
        pickled (a state dict of varied types and shapes; names with dots, '/',
        unicode, a leading '.', '%', a 300-byte one), oneflow-1.0 (the top dict
        holding OneFlow 1.0's magic key too), magic-not-none (that key not None),
        many (N tiny tensors, in a shuffled order), empty (none), legacy (N
        tensors, directories named as ckptfs escapes names, snapshot_done),
        same-object (one Parameter twice), dup-key (two equal keys, by editing
        the pickle's bytes), system (a value whose pickle calls os.system:
        loading it would create DIR/PWNED),
        reduce-other (collections.Counter called), deep-mark (100000 MARKs),
        huge-len (a BINUNICODE8 of 2^62 bytes), plain-dict (data a plain dict)
    /usr/bin/python3 oneflow_oracle.py dump DIR [--meta-types]
        the tensor lines ckptfs-dump DIR should print (its header aside), each
        type by its canonical name (float32); with --meta-types, by the meta's
        OneFlow name (kFloat), as a mount's meta has it
    /usr/bin/python3 oneflow_oracle.py sums DIR
        each tensor's directory name and the SHA-256 of its bytes, one a line
    /usr/bin/python3 oneflow_oracle.py stat DIR [--hist BINS]
        the JSON document ckptfs-stat --json DIR should print (stat_oracle's fields)

Rules (codec/oneflow/oneflow_dir.h): with pickled_data, the tensors are the
state dict's entries in its order, each read from its {"path": dir}/meta and out;
without it, every subdirectory holding `out` is a tensor named by its directory name
(ckptfs's escapes decoded), sorted bytewise.  A dump extent is the tensor's whole
`out`, FILE:0+LEN, FILE its path relative to DIR ("tensor_5/out").

Exit status: 0 success; 1 refused snapshot; 2 usage error.
"""

import argparse
import collections
import hashlib
import json
import os
import pickle
import random
import sys
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
from google.protobuf import text_format  # noqa: E402

import ckpt_oracle as co  # noqa: E402
import stat_oracle as so  # noqa: E402

OF_TYPES = {}  # OneFlow DataType name -> (bytes per element, numpy dtype, MindSpore name)
for _ms, (_of, _size, _np) in co.MS_TYPES.items():
    if _ms != "Int4":
        OF_TYPES.setdefault(_of, (_size, _np, _ms))


# ---- OneFlow's classes, as the pickler and the unpickler see them ------------------------

class Parameter:
    """oneflow.nn.Parameter as flow.save pickles it: its state is {"path": dir}."""

    def __init__(self, path):
        self.path = path

    def __getstate__(self):
        return {"path": self.path}

    def __setstate__(self, state):
        self.path = state["path"]


class Tensor(Parameter):
    """oneflow.Tensor (a buffer), the same state."""


Parameter.__module__, Parameter.__qualname__ = "oneflow.nn", "Parameter"
Tensor.__module__, Tensor.__qualname__ = "oneflow", "Tensor"
_oneflow = types.ModuleType("oneflow")
_oneflow_nn = types.ModuleType("oneflow.nn")
_oneflow.nn, _oneflow.Tensor, _oneflow_nn.Parameter = _oneflow_nn, Tensor, Parameter
sys.modules.setdefault("oneflow", _oneflow)
sys.modules.setdefault("oneflow.nn", _oneflow_nn)

ALLOWED = {("collections", "OrderedDict"): collections.OrderedDict,
           ("oneflow.nn", "Parameter"): Parameter, ("oneflow", "Tensor"): Tensor}


class Refused(Exception):
    pass


class _Unpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) not in ALLOWED:
            raise Refused(f"global {module}.{name} refused")
        return ALLOWED[(module, name)]


class System:
    """A value whose unpickling would run a shell command."""

    def __init__(self, cmd):
        self.cmd = cmd

    def __reduce__(self):
        return (os.system, (self.cmd,))


class Counter:
    def __reduce__(self):
        return (collections.Counter, ("abc",))


# ---- reading a snapshot -----------------------------------------------------------------

def read_meta(path):
    meta = co.VariableMetaInfo()
    with open(path, "r", encoding="utf-8") as f:
        text_format.Parse(f.read(), meta)
    of_type = co._DATA_TYPE_ENUM.values_by_number[meta.data_type].name
    return of_type, [int(d) for d in meta.shape.dim]


def decode_dir(name):
    """A directory name back to the tensor name (ckptfs's escapes), or None."""
    raw = os.fsencode(name)
    out, i = bytearray(), 0
    while i < len(raw):
        if raw[i] == 0x25:
            h = raw[i + 1:i + 3]
            if len(h) != 2 or not all(c in b"0123456789ABCDEF" for c in h):
                return None
            out.append(int(h, 16))
            i += 3
        else:
            out.append(raw[i])
            i += 1
    return bytes(out) if co.escape_tag(bytes(out)) == raw else None


def entries(d):
    """[(name bytes, directory)] in the tools' order."""
    if os.path.exists(os.path.join(d, "pickled_data")):
        with open(os.path.join(d, "pickled_data"), "rb") as f:
            top = _Unpickler(f).load()
        extra = set(top) - {"protocol_version", "data", "oneflow", "__oneflow__"}
        magic = [top[k] for k in ("oneflow", "__oneflow__") if k in top]
        if top.get("protocol_version") != 1 or extra or any(m is not None for m in magic):
            raise Refused("protocol_version")
        return [(k.encode("utf-8"), v.path) for k, v in top["data"].items()]
    out = []
    for name in os.listdir(d):
        if os.path.isdir(os.path.join(d, name)) and os.path.lexists(os.path.join(d, name, "out")):
            decoded = decode_dir(name)
            out.append((decoded if decoded is not None else os.fsencode(name), name))
    return sorted(out)


def tensors(d):
    """[(name, dirname, of_type, dims, raw bytes)]."""
    out = []
    for name, sub in entries(d):
        of_type, dims = read_meta(os.path.join(d, sub, "meta"))
        raw = np.fromfile(os.path.join(d, sub, "out"), dtype="u1").tobytes()
        size, _np, _ms = OF_TYPES[of_type]
        if len(raw) != size * int(np.prod(dims, dtype=np.int64)):
            raise Refused(f"{sub}/out: size")
        out.append((name, co.escape_tag(name), of_type, dims, raw))
    return out


def cmd_dump(a):
    subs = [sub for _name, sub in entries(a.dir)]
    for sub, (name, dirname, of_type, dims, raw) in zip(subs, tensors(a.dir)):
        shape = ",".join(str(x) for x in dims)
        shown = of_type if a.meta_types else so.canonical_name(OF_TYPES[of_type][2])
        line = (f"{os.fsdecode(dirname)}\t{shown}\t[{shape}]\t{len(raw)}\t"
                f"{sub}/out:0+{len(raw)}")
        sys.stdout.buffer.write(os.fsencode(line) + b"\n")
    return 0


def cmd_sums(a):
    for name, dirname, of_type, dims, raw in tensors(a.dir):
        line = f"{os.fsdecode(dirname)}\t{hashlib.sha256(raw).hexdigest()}"
        sys.stdout.buffer.write(os.fsencode(line) + b"\n")
    return 0


def cmd_stat(a):
    docs = []
    for name, dirname, of_type, dims, raw in tensors(a.dir):
        t = so.Tensor(name, None, dirname, OF_TYPES[of_type][2], dims, raw)
        d = so.tensor_stats(t, a.hist)
        docs.append(d)
    json.dump({"tensors": docs}, sys.stdout, indent=1)
    print()
    return 0


# ---- writing snapshots ------------------------------------------------------------------

def write_tensor(d, sub, of_type, dims, rng):
    os.makedirs(os.path.join(d, sub))
    size, np_type, _ms = OF_TYPES[of_type]
    n = int(np.prod(dims, dtype=np.int64))
    raw = rng.randbytes(n * size)
    if of_type == "kBool":
        raw = bytes(b & 1 for b in raw)
    elif np_type.startswith("<f"):  # finite values: the statistics stay comparable
        raw = (np.frombuffer(rng.randbytes(n * 8), dtype="<u8") % 2001).astype(np.float64)
        raw = ((raw - 1000) / 7).astype(np_type).tobytes()
    with open(os.path.join(d, sub, "out"), "wb") as f:
        f.write(raw)
    with open(os.path.join(d, sub, "meta"), "wb") as f:
        f.write(co.meta_bytes(dims, of_type))


NAMES = ["conv1.weight", "conv1.bias", "héllo/wörld", "a/b/c", ".hidden", "snapshot_done",
         "100%", "日本語", "x" * 300, "bn.num_batches_tracked"]
KINDS = [("kFloat", [3, 4]), ("kDouble", [2]), ("kInt64", []), ("kFloat16", [5, 1, 2]),
         ("kInt8", [7]), ("kUInt8", [0]), ("kInt32", [2, 2]), ("kBool", [3]),
         ("kFloat", [6]), ("kInt64", [1])]


def state_dict(d, names, rng, plain=False):
    data = {} if plain else collections.OrderedDict()
    ids = rng.sample(range(100000), len(names))
    for i, name in enumerate(names):
        of_type, dims = KINDS[i % len(KINDS)]
        sub = f"tensor_{ids[i]}"
        write_tensor(d, sub, of_type, dims, rng)
        data[name] = (Tensor if i % 3 == 2 else Parameter)(sub)
    if not plain:
        data._metadata = collections.OrderedDict([("", {"version": 1}), ("conv1", {"version": 1})])
    return data


def write_pickle(d, obj, protocol, magic=None):
    top = {"protocol_version": 1, "data": obj}
    if magic:  # OneFlow 1.0's save_as_external_data: its magic key too
        top = {"protocol_version": 1, magic: None, "data": obj}
    with open(os.path.join(d, "pickled_data"), "wb") as f:
        pickle.dump(top, f, protocol=protocol)


def cmd_gen(a):
    rng = random.Random(a.seed)
    d, p = a.dir, a.protocol
    os.makedirs(d)
    if a.case in ("pickled", "plain-dict"):
        write_pickle(d, state_dict(d, NAMES, rng, a.case == "plain-dict"), p)
    elif a.case in ("oneflow-1.0", "magic-not-none"):
        data = state_dict(d, NAMES[:3], rng)
        write_pickle(d, data, p, "oneflow")
        if a.case == "magic-not-none":
            with open(os.path.join(d, "pickled_data"), "wb") as f:
                pickle.dump({"protocol_version": 1, "oneflow": 1, "data": data}, f, protocol=p)
    elif a.case == "many":
        names = [f"layer{i}.weight" for i in range(a.count)]
        rng.shuffle(names)
        data = collections.OrderedDict()
        for i, name in enumerate(names):
            write_tensor(d, f"tensor_{i}", "kFloat", [1], rng)
            data[name] = Parameter(f"tensor_{i}")
        write_pickle(d, data, p)
    elif a.case == "empty":
        write_pickle(d, collections.OrderedDict(), p)
    elif a.case == "legacy":
        for i in range(a.count):
            name = f"block{i}/w" if i % 2 else f"block{i}.b"
            of_type, dims = KINDS[i % len(KINDS)]
            write_tensor(d, os.fsdecode(co.escape_tag(name.encode())), of_type, dims, rng)
        open(os.path.join(d, "snapshot_done"), "wb").close()
    elif a.case == "same-object":
        data = state_dict(d, ["w"], rng)
        data["w2"] = data["w"]
        write_pickle(d, data, p)
    elif a.case == "dup-key":
        write_pickle(d, state_dict(d, ["wa", "wb"], rng), p)
        with open(os.path.join(d, "pickled_data"), "rb") as f:
            b = f.read()
        with open(os.path.join(d, "pickled_data"), "wb") as f:
            f.write(b.replace(b"wb", b"wa"))
    elif a.case == "system":
        data = state_dict(d, ["w"], rng)
        data["evil"] = System("touch " + os.path.join(os.path.abspath(d), "PWNED"))
        write_pickle(d, data, p)
    elif a.case == "reduce-other":
        data = state_dict(d, ["w"], rng)
        data["evil"] = Counter()
        write_pickle(d, data, p)
    elif a.case == "deep-mark":
        with open(os.path.join(d, "pickled_data"), "wb") as f:
            f.write(b"\x80\x04" + b"(" * 100000 + b".")
    elif a.case == "huge-len":
        with open(os.path.join(d, "pickled_data"), "wb") as f:
            f.write(b"\x80\x04\x8d" + (1 << 62).to_bytes(8, "little") + b"abc.")
    else:
        raise SystemExit(f"unknown case {a.case}")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("gen")
    p.add_argument("dir")
    p.add_argument("--case", required=True)
    p.add_argument("--protocol", type=int, default=4)
    p.add_argument("--count", type=int, default=10)
    p.add_argument("--seed", type=int, default=1)
    p = sub.add_parser("dump")
    p.add_argument("dir")
    p.add_argument("--meta-types", action="store_true")
    p = sub.add_parser("sums")
    p.add_argument("dir")
    p = sub.add_parser("stat")
    p.add_argument("dir")
    p.add_argument("--hist", type=int, default=0)
    a = ap.parse_args(argv)
    try:
        return {"gen": cmd_gen, "dump": cmd_dump, "sums": cmd_sums, "stat": cmd_stat}[a.cmd](a)
    except (Refused, pickle.UnpicklingError, KeyError, AttributeError) as exc:
        print(f"oneflow_oracle: {a.dir}: refused: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
