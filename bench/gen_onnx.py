#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Write a large benchmark ONNX model quickly: COUNT Float32 initializers
holding SIZE bytes in total, feeding a chain of Add nodes (X + W0 + W1 + ...
= Y), so that onnx.checker accepts the model.

By default the tensor bytes live in one external data file beside the model,
OUT.data (data_location EXTERNAL, keys location/offset/length, the location
relative), each tensor at an offset aligned to ALIGN bytes; the .onnx file
itself stays a few KiB.  With --inline they are raw_data inside OUT instead
(one file, under protobuf's 2 GiB limit); the model is then streamed to the
file, never built in memory.

Content is a repeated block of random bytes, so the files are real data on
disk (no sparse holes) without paying for a random generator.  Only the .onnx
file is checked with onnx.checker (it reads the model file, not the external
data); --no-check skips that.

usage: gen_onnx.py OUT --size BYTES --count N [--inline] [--align BYTES] [--no-check]
"""
import argparse
import os
import sys

import onnx
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_ckpt import varint  # noqa: E402

COLS = 256  # every tensor is [rows, COLS] Float32


def key(num, wire=2):
    return varint(num << 3 | wire)


def write_fill(f, n, block):
    while n:
        k = min(n, len(block))
        f.write(block[:k])
        n -= k


def graph(count, rows, initializers):
    nodes = []
    prev = "X"
    for i in range(count):
        out = "Y" if i == count - 1 else "h%d" % i
        nodes.append(helper.make_node("Add", [prev, "layer.%d.weight" % i], [out],
                                      name="add%d" % i))
        prev = out
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [rows, COLS]) for n in "XY"]
    return helper.make_graph(nodes, "bench", [vi[0]], [vi[1]], initializers)


def model(g):
    return helper.make_model(g, producer_name="ckptfs-bench",
                             opset_imports=[helper.make_opsetid("", 13)])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--size", type=int, required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--inline", action="store_true")
    ap.add_argument("--align", type=int, default=4096)
    ap.add_argument("--no-check", action="store_true")
    a = ap.parse_args()
    rows = max(1, a.size // a.count // (4 * COLS))
    per = rows * COLS * 4
    block = os.urandom(1 << 20)
    names = ["layer.%d.weight" % i for i in range(a.count)]

    def tensor(name):
        t = TensorProto()
        t.name = name
        t.data_type = TensorProto.FLOAT
        t.dims.extend([rows, COLS])
        return t

    if a.inline:
        # A model is its fields concatenated, and a message's fields may come
        # in any order: serialize everything small with the onnx API, then
        # append the initializers (GraphProto field 5), each ending with its
        # raw_data (TensorProto field 9), and the graph (ModelProto field 7).
        g = graph(a.count, rows, [])
        g_head = g.SerializeToString()
        m = model(g)
        m.ClearField("graph")
        m_head = m.SerializeToString()
        inits = []
        for name in names:
            t_head = tensor(name).SerializeToString() + key(9) + varint(per)
            inits.append(key(5) + varint(len(t_head) + per) + t_head)
        g_len = len(g_head) + sum(len(h) for h in inits) + a.count * per
        with open(a.out, "wb") as f:
            f.write(m_head + key(7) + varint(g_len) + g_head)
            for h in inits:
                f.write(h)
                write_fill(f, per, block)
    else:
        loc = os.path.basename(a.out) + ".data"
        inits = []
        off = 0
        with open(os.path.join(os.path.dirname(a.out) or ".", loc), "wb") as f:
            for name in names:
                pad = -off % a.align
                write_fill(f, pad, bytes(pad))  # written, not a hole
                off += pad
                t = tensor(name)
                t.data_location = TensorProto.EXTERNAL
                for k, v in (("location", loc), ("offset", off), ("length", per)):
                    e = t.external_data.add()
                    e.key = k
                    e.value = str(v)
                inits.append(t)
                write_fill(f, per, block)
                off += per
        with open(a.out, "wb") as f:
            f.write(model(graph(a.count, rows, inits)).SerializeToString())
    if not a.no_check:
        onnx.checker.check_model(a.out)


if __name__ == "__main__":
    main()
