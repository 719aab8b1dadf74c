#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The floor of a model's format: the byte ranges a reader must fetch to know
every tensor's name, type, shape and place, found from the format alone
(independently of ckptfs), and a reader that fetches exactly those ranges.

  format_floor.py ranges FORMAT FILE   print "OFFSET LENGTH" lines, merged
                                       and in file order; FORMAT is ckpt,
                                       safetensors or onnx
  format_floor.py read FILE RANGES     os.pread each range of the file RANGES
                                       from FILE, in order; print the bytes read

ckpt: each record of the Checkpoint message (field 1, a value) from its
first byte to the first byte of its tensor's tensor_content data (Tensor
field 3); a record without tensor_content (a str value, a map parameter) is
read whole, and so is anything between records (the CRC trailer).
safetensors: the 8-byte length and the JSON header.
onnx (raw_data inline): everything but the payloads of the initializers'
raw_data (ModelProto.graph = 7, GraphProto.initializer = 5,
TensorProto.raw_data = 9).

The parse reads only the headers (a few preads per record), never the data,
so the local copy of a 256 MiB file is parsed in well under a second.
"""
import os
import struct
import sys


class Reader:
    def __init__(self, fd):
        self.fd = fd

    def varint(self, off):
        """(value, offset after it) of the varint at off."""
        buf = os.pread(self.fd, 10, off)
        n = shift = 0
        for i, b in enumerate(buf):
            n |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return n, off + i + 1
        raise ValueError("bad varint at %d" % off)

    def field(self, off):
        """(field number, wire type, payload start, payload end) at off."""
        k, p = self.varint(off)
        num, wire = k >> 3, k & 7
        if wire == 0:
            _, q = self.varint(p)
            return num, wire, p, q
        if wire == 1:
            return num, wire, p, p + 8
        if wire == 5:
            return num, wire, p, p + 4
        if wire == 2:
            n, p = self.varint(p)
            return num, wire, p, p + n
        raise ValueError("wire type %d at %d" % (wire, off))


def skip_ranges(r, start, end, path):
    """Payload ranges to leave out of [start, end): the field chain `path`
    (a list of field numbers, the last one the payload left out), descended
    through length-delimited fields."""
    out = []
    off = start
    while off < end:
        num, wire, p, q = r.field(off)
        if wire == 2 and num == path[0]:
            if len(path) == 1:
                out.append((p, q))
            else:
                out.extend(skip_ranges(r, p, q, path[1:]))
        off = q
    return out


def ckpt_skips(r, size):
    """The tensor_content payload of every record: Checkpoint.value (1) ->
    Value.tensor (2) -> Tensor.tensor_content (3).  Only the first
    tensor_content of a record is data (there is one)."""
    out = []
    off = 0
    while off < size:
        try:
            num, wire, p, q = r.field(off)
        except ValueError:
            break  # the CRC trailer or padding: read whole
        if q > size:
            break
        if num == 1 and wire == 2:
            out.extend(skip_ranges(r, p, q, [2, 3]))
        off = q
    return out


def complement(skips, size):
    ranges = []
    off = 0
    for a, b in sorted(skips):
        if a > off:
            ranges.append((off, a - off))
        off = max(off, b)
    if off < size:
        ranges.append((off, size - off))
    return ranges


def ranges(fmt, path):
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        r = Reader(fd)
        if fmt == "safetensors":
            (n,) = struct.unpack("<Q", os.pread(fd, 8, 0))
            return [(0, 8 + n)]
        if fmt == "ckpt":
            return complement(ckpt_skips(r, size), size)
        if fmt == "onnx":
            return complement(skip_ranges(r, 0, size, [7, 5, 9]), size)
        raise SystemExit("unknown format %s" % fmt)
    finally:
        os.close(fd)


def read(path, ranges_file):
    total = 0
    fd = os.open(path, os.O_RDONLY)
    try:
        with open(ranges_file) as f:
            for line in f:
                off, n = map(int, line.split())
                while n:
                    b = os.pread(fd, n, off)
                    if not b:
                        raise SystemExit("%s: short read at %d" % (path, off))
                    total += len(b)
                    off += len(b)
                    n -= len(b)
    finally:
        os.close(fd)
    print(total)


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "ranges":
        for off, n in ranges(sys.argv[2], sys.argv[3]):
            print(off, n)
    elif len(sys.argv) == 4 and sys.argv[1] == "read":
        read(sys.argv[2], sys.argv[3])
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
