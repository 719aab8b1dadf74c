#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Write the inputs of bench/bench_dist.sh quickly: one Float32 tensor [ROWS, COLS] of random
bytes as a plain checkpoint, and the same tensor as two 8-rank distributed checkpoints (split
along dim 0, tensor_map [0, -1], and along dim 1, tensor_map [-1, 0], dev_matrix [RANKS]),
each with its strategy file.  Slices are cut by tests/oracle/dist_oracle.py's local_slice
(MindSpore's _load_tensor) and strategies written by its strategy_bytes, so the layout is the
one the oracle merges; only the record framing is written here, because the content (1 GiB)
is streamed from the array rather than copied into a protobuf message.

    /usr/bin/python3 gen_dist.py OUT_DIR [--rows 16384] [--cols 16384] [--ranks 8]
        [--name layer.0.weight] [--seed 0]

OUT_DIR/plain.ckpt; OUT_DIR/dim0/strategy.ckpt, OUT_DIR/dim0/dist/rank_<r>/checkpoint_<r>.ckpt;
the same under OUT_DIR/dim1.  Each file is one record whose tensor content is its last bytes
(no crc trailer), so `tail -c ROWS*COLS*4 plain.ckpt` is the tensor.
"""
import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "oracle"))
import ckpt_oracle as co  # noqa: E402
import dist_oracle as do  # noqa: E402


def field(num, payload):
    return co.varint(num << 3 | 2) + co.varint(len(payload)) + payload


def record_head(tag, ms_type, dims, length):
    """A Checkpoint record of one Value up to (not including) its tensor content, laid out as
    MindSpore's writer lays it out (dims, tensor_type, tensor_content)."""
    tensor_head = b"".join(b"\x08" + co.varint(d) for d in dims)
    tensor_head += field(2, ms_type.encode()) + b"\x1a" + co.varint(length)
    value_head = field(1, tag.encode()) + b"\x12" + co.varint(len(tensor_head) + length)
    value_head += tensor_head
    return b"\x0a" + co.varint(len(value_head) + length) + value_head


def write_tensor(path, name, arr):
    arr = np.ascontiguousarray(arr)  # the file holds the slice row-major
    with open(path, "wb") as f:
        f.write(record_head(name, "Float32", list(arr.shape), arr.nbytes))
        f.write(memoryview(arr).cast("B"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--rows", type=int, default=16384)
    ap.add_argument("--cols", type=int, default=16384)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--name", default="layer.0.weight")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    # Random bytes, not values: every byte differs, so a misplaced run cannot compare equal.
    full = rng.integers(0, 256, size=a.rows * a.cols * 4, dtype=np.uint8).view(np.float32)
    full = full.reshape(a.rows, a.cols)
    os.makedirs(a.out_dir, exist_ok=True)
    write_tensor(os.path.join(a.out_dir, "plain.ckpt"), a.name, full)
    dev = [a.ranks]
    for split, tmap in (("dim0", [0, -1]), ("dim1", [-1, 0])):
        d = os.path.join(a.out_dir, split)
        os.makedirs(d, exist_ok=True)
        strategy = do.strategy_bytes([(a.name, dev, tmap, 0, 0)])
        co.write_file(os.path.join(d, "strategy.ckpt"), [strategy])
        for r in range(a.ranks):
            rd = os.path.join(d, "dist", f"rank_{r}")
            os.makedirs(rd, exist_ok=True)
            part = do.local_slice(full, dev, tmap, 0, 0, r)
            write_tensor(os.path.join(rd, f"checkpoint_{r}.ckpt"), a.name, part)


if __name__ == "__main__":
    main()
