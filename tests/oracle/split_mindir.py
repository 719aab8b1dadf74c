#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Write a MindIR model in MindSpore's split layouts, for the tests.

Follows mindspore-formats.md section 4.4 (MindSpore's _split_save), with the official
protobuf runtime and tests/oracle/mind_ir.proto; shares no code with ckptfs.

    split_mindir.py SRC.mindir DIR/PREFIX [--legacy] [--sorted] [--front BYTE]

Current layout (v1.6+): DIR/PREFIX_graph.mindir keeps every graph.parameter without
raw_data and with external_data{location "PREFIX_variables/data_0", offset, length};
DIR/PREFIX_variables/data_0 is 64 bytes of front info (byte 0 = 1: little-endian, or
--front), then each parameter's bytes padded with zeros to a multiple of 64, in proto
order (v1.6-2.2) or by name after the first ':' (--sorted, v2.3+).
Legacy layout (v1.2-1.5, --legacy): the graph file's graph.parameter is emptied and
data_0 is a serialized GraphProto holding the parameters.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import graph_oracle  # noqa: E402  (compiles mind_ir.proto)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("prefix")
    ap.add_argument("--legacy", action="store_true")
    ap.add_argument("--sorted", action="store_true")
    ap.add_argument("--front", type=int, default=1)
    a = ap.parse_args()
    pb = graph_oracle.mindir_module()
    model = pb.ModelProto()
    with open(a.src, "rb") as f:
        model.ParseFromString(f.read())
    base = os.path.basename(a.prefix)
    var_dir = a.prefix + "_variables"
    os.makedirs(var_dir)
    params = model.graph.parameter
    if a.legacy:
        g = pb.GraphProto()
        g.parameter.extend(params)
        del model.graph.parameter[:]
        with open(os.path.join(var_dir, "data_0"), "wb") as f:
            f.write(g.SerializeToString())
    else:
        order = list(params)
        if a.sorted:
            order.sort(key=lambda t: t.name.split(":", 1)[-1])
        data = bytearray([a.front]) + bytearray(63)
        for t in order:
            raw = t.raw_data
            t.ClearField("raw_data")
            t.external_data.location = base + "_variables/data_0"
            t.external_data.offset = len(data)
            t.external_data.length = len(raw)
            data += raw + bytes(-len(raw) % 64)
        with open(os.path.join(var_dir, "data_0"), "wb") as f:
            f.write(data)
    with open(a.prefix + "_graph.mindir", "wb") as f:
        f.write(model.SerializeToString())


if __name__ == "__main__":
    main()
