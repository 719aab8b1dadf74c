#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Write a large benchmark checkpoint quickly: COUNT Float32 tensors holding
SIZE bytes in total, laid out as MindSpore's writer does (one Checkpoint
message per value).  Content is a repeated block of random bytes, so the file
is real data on disk (no sparse holes) without paying for a random generator.
With --safetensors, the same tensors (names, shapes, bytes) as a safetensors
file, laid out as its writer does (header padded to 8 bytes with spaces; one
dtype, so data in name order).

usage: gen_ckpt.py OUT --size BYTES --count N [--safetensors]
"""
import argparse
import json
import os
import struct


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field(num, payload):
    return varint(num << 3 | 2) + varint(len(payload)) + payload


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--size", type=int, required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--safetensors", action="store_true")
    a = ap.parse_args()
    per = max(4, a.size // a.count // 4 * 4)
    block = os.urandom(1 << 20)
    if a.safetensors:
        write_safetensors(a.out, a.count, per, block)
        return
    with open(a.out, "wb") as f:
        for i in range(a.count):
            tag = b"layer.%d.weight" % i
            n = per // 4
            dims = varint(1 << 3) + varint(n)
            head_t = dims + field(2, b"Float32") + varint(3 << 3 | 2) + varint(per)
            tensor_len = len(head_t) + per
            value_head = field(1, tag) + varint(2 << 3 | 2) + varint(tensor_len) + head_t
            value_len = len(value_head) + per
            f.write(varint(1 << 3 | 2) + varint(value_len) + value_head)
            left = per
            while left:
                k = min(left, len(block))
                f.write(block[:k])
                left -= k


def write_safetensors(out, count, per, block):
    names = sorted("layer.%d.weight" % i for i in range(count))
    header = {}
    for i, name in enumerate(names):
        header[name] = {"dtype": "F32", "shape": [per // 4], "data_offsets": [i * per, (i + 1) * per]}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(out, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        left = count * per
        while left:
            k = min(left, len(block))
            f.write(block[:k])
            left -= k


if __name__ == "__main__":
    main()
