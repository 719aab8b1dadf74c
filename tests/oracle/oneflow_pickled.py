#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Test oracle for OneFlow >= 0.6 snapshot directories (pickled_data + tensor_<N>/).

flow.save(state_dict, dir) (oneflow@v0.6.0:python/oneflow/framework/check_point_v2.py)
pickles {"protocol_version": 1, "data": state_dict} to dir/pickled_data, each tensor
reduced to {"path": "tensor_<N>"} (a Parameter: oneflow.nn.Parameter, NEWOBJ then BUILD),
and writes the tensor's meta and out into dir/tensor_<N>/.  This writes such directories
with Python's own pickle module, through stand-in classes registered under the module
names OneFlow uses, so that the pickle has OneFlow's GLOBALs; metas come from
ckpt_oracle.meta_bytes.  Reading one back uses a restricted Unpickler (an allow-list of
globals), never the code under test.

    oneflow_pickled.py gen DIR --count N [--seed S]   (names with dots, one with '/')
    oneflow_pickled.py names DIR                      (name TAB path, the pickle's order)
    oneflow_pickled.py hostile FILE --case CASE [--marker PATH] [--paths P,P]
        garbage | os_system (a GLOBAL of os.system that would touch MARKER) |
        missing (lists PATHS plus tensor_999) | duplicate (two entries named alike)
    oneflow_pickled.py check-ckpt FILE DIR            (FILE holds DIR's tensors by their
                                                       real names, in the pickle's order)
"""
import argparse
import collections
import io
import os
import pickle
import sys

import numpy as np
from google.protobuf import text_format

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckpt_oracle  # noqa: E402
# OneFlow's classes as the pickler and the restricted unpickler see them.
from oneflow_oracle import Parameter, _Unpickler  # noqa: E402


def dump_pickled(entries, protocol=4):
    """The pickled_data bytes for [(name, path)] (an OrderedDict with _metadata, as
    a Module's state_dict is)."""
    data = collections.OrderedDict((name, Parameter(path)) for name, path in entries)
    data._metadata = collections.OrderedDict()
    return pickle.dumps({"protocol_version": 1, "data": data}, protocol=protocol)


def load_names(directory):
    with open(os.path.join(directory, "pickled_data"), "rb") as f:
        doc = _Unpickler(io.BytesIO(f.read())).load()
    assert doc["protocol_version"] == 1
    return [(name, p.path) for name, p in doc["data"].items()]


def write_tensor(directory, path, dims, values):
    os.makedirs(os.path.join(directory, path))
    with open(os.path.join(directory, path, "meta"), "wb") as f:
        f.write(ckpt_oracle.meta_bytes(dims, "kFloat"))
    with open(os.path.join(directory, path, "out"), "wb") as f:
        f.write(np.asarray(values, dtype="<f4").tobytes())


def cmd_gen(directory, count, seed):
    rng = np.random.default_rng(seed)
    os.makedirs(directory, exist_ok=True)
    entries = []
    # OneFlow's counter is process-wide: the numbers start anywhere and
    # need not follow the state dict's order.
    numbers = rng.permutation(count) + 7
    for i in range(count):
        name = f"layers.{i}.conv.weight" if i % 2 == 0 else f"layers.{i // 2}.bn.running_mean"
        if i == count // 2:
            name = "head/fc.weight"     # a '/' in a state-dict key
        if i == count - 1:
            name = "..leading.dots"
        entries.append((name, f"tensor_{numbers[i]}"))
    # Made in another order than the pickle's: cp copies in the order of
    # the source's inodes, so the save must restore the state dict's.
    for k in rng.permutation(count):
        dims = [int(rng.integers(1, 5)), int(rng.integers(1, 5))]
        write_tensor(directory, entries[k][1], dims, rng.standard_normal(dims[0] * dims[1]))
    with open(os.path.join(directory, "pickled_data"), "wb") as f:
        f.write(dump_pickled(entries))


class _Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, ("touch " + self.marker,))


def cmd_hostile(out, case, marker, paths):
    paths = [p for p in (paths or "tensor_5,tensor_6").split(",") if p]
    if case == "garbage":
        data = b"\x80\x04\x95this is not a pickle at all" + bytes(range(256))
    elif case == "os_system":
        data = pickle.dumps({"protocol_version": 1, "data": collections.OrderedDict(
            [("weight", _Evil(marker))])}, protocol=2)
        assert b"system" in data
    elif case == "missing":
        data = dump_pickled([(f"t{i}", p) for i, p in enumerate(paths)] +
                            [("gone", "tensor_999")])
    elif case == "duplicate":
        # Two keys of one length, then the second made equal to the first:
        # a dict cannot hold them, a pickle can.
        data = dump_pickled([("wa", paths[0]), ("wb", paths[1])])
        assert data.count(b"wb") == 1
        data = data.replace(b"wb", b"wa")
    else:
        raise SystemExit(f"unknown case {case}")
    with open(out, "wb") as f:
        f.write(data)


def cmd_check_ckpt(path, directory):
    """The .ckpt holds exactly DIR's tensors, under their real names, in the pickle's
    order, with DIR's shapes and bytes."""
    entries, _crc = ckpt_oracle.load_reference(path)
    names = load_names(directory)
    got = [e.tag.decode("utf-8", "surrogateescape") for e in entries]
    want = [name for name, _ in names]
    if got != want:
        raise SystemExit(f"names {got[:5]}... != {want[:5]}...")
    for e, (name, tpath) in zip(entries, names):
        meta = ckpt_oracle.VariableMetaInfo()
        with open(os.path.join(directory, tpath, "meta")) as f:
            text_format.Parse(f.read(), meta)
        if list(e.ckpt_dims) != list(meta.shape.dim):
            raise SystemExit(f"{name}: dims {list(e.ckpt_dims)} != {list(meta.shape.dim)}")
        with open(os.path.join(directory, tpath, "out"), "rb") as f:
            if e.out != f.read():
                raise SystemExit(f"{name}: bytes differ")
    print("ok", len(names))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("gen")
    p.add_argument("dir")
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--seed", type=int, default=0)
    p = sub.add_parser("names")
    p.add_argument("dir")
    p = sub.add_parser("hostile")
    p.add_argument("out")
    p.add_argument("--case", required=True)
    p.add_argument("--marker", default="/nonexistent/marker")
    p.add_argument("--paths")
    p = sub.add_parser("check-ckpt")
    p.add_argument("file")
    p.add_argument("dir")
    args = ap.parse_args()
    if args.cmd == "gen":
        cmd_gen(args.dir, args.count, args.seed)
    elif args.cmd == "names":
        for name, path in load_names(args.dir):
            print(f"{name}\t{path}")
    elif args.cmd == "hostile":
        cmd_hostile(args.out, args.case, args.marker, args.paths)
    else:
        cmd_check_ckpt(args.file, args.dir)


if __name__ == "__main__":
    main()
