#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Random distributed checkpoints for the merged mount's model-based test (dist_random.bats).

    /usr/bin/python3 dist_random.py gen OUT_DIR --seed S
        OUT_DIR/full.ckpt, OUT_DIR/strategy.ckpt, OUT_DIR/dist/rank_<r>/checkpoint_<r>.ckpt:
        a random device matrix (1 to 3 axes, up to 12 devices) and random parameters (0 to 4
        dimensions, random types, each dimension cut along a random unused device axis or
        not at all, some with an optimizer shard, some absent from the strategy), cut by
        dist_oracle's `gen` (MindSpore's load-side functions); prints the device count.
    /usr/bin/python3 dist_random.py reads MNT FULL_CKPT --seed S [--count N]
        N random (offset, size) reads of random merged `out` files, each compared with the
        same bytes of the full parameter parsed from FULL_CKPT by ckpt_oracle.

The expected trees come from dist_oracle (`merge`, `tree full.ckpt`), never from ckptfs.
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckpt_oracle as co  # noqa: E402
import dist_oracle as do  # noqa: E402

TYPES = ["Float16", "Float32", "Float64", "Int8", "Int32", "Int64", "UInt8", "BFloat16"]


def random_dev(rng):
    while True:
        dev = [int(rng.integers(1, 4)) for _ in range(int(rng.integers(1, 4)))]
        if 2 <= int(np.prod(dev)) <= 12:
            return dev


def opt_ok(dev, tmap, full, step, size):
    """Whether dist_oracle's `gen` can cut this optimizer shard (it requires a rank's
    model-parallel slice to be rank % step, as MindSpore's transform assumes)."""
    try:
        for r in range(int(np.prod(dev))):
            do.local_slice(np.zeros(full, dtype="u1"), dev, tmap, step, size, r)
    except do.Refused:
        return False
    return True


def random_param(rng, i, dev):
    ndim = int(rng.choice([0, 1, 2, 2, 3, 3, 4]))
    free = list(range(len(dev)))
    tmap, full = [], []
    for _ in range(ndim):
        k = -1
        if free and rng.random() < 0.6:
            k = free.pop(int(rng.integers(0, len(free))))
        tmap.append(k)
        cut = 1 if k == -1 else dev[len(dev) - 1 - k]
        full.append(int(rng.integers(1, 4)) * cut)
    ms_type = TYPES[int(rng.integers(0, len(TYPES)))]
    name = f"layer{i}.{'w' if ndim > 1 else 'b'}{i}"
    if rng.random() < 0.15:
        return (name, ms_type, full, None, 0, 0)
    step = size = 0
    if ndim >= 1 and rng.random() < 0.35:
        mp = int(np.prod(do.tensor_strategy(dev, tmap)))
        rest = int(np.prod(dev)) // mp
        sizes = [s for s in range(1, rest + 1) if rest % s == 0]
        size = sizes[int(rng.integers(0, len(sizes)))]
        full[0] *= size
        step = mp
        if not opt_ok(dev, tmap, full, step, size):
            full[0] //= size
            step = size = 0
    return (name, ms_type, full, tmap, step, size)


def cmd_gen(out_dir, seed):
    rng = np.random.default_rng(seed)
    dev = random_dev(rng)
    specs = [random_param(rng, i, dev) for i in range(int(rng.integers(3, 8)))]
    if all(s[3] is None for s in specs):  # a strategy names at least one parameter
        specs.append(("extra.w", "Float32", [dev[-1] * 2], [0], 0, 0))
    do.CASES["random"] = (dev, specs)
    ranks = int(np.prod(dev))
    do.cmd_gen(out_dir, ranks, "random", seed)
    print(ranks)


def cmd_reads(mnt, full_ckpt, seed, count):
    entries, _ = co.load_reference(full_ckpt)
    full = {co.dir_name(e.tag): e.out for e in entries if e.part is None}
    names = sorted(n for n, data in full.items() if data)
    if not names:
        return
    rng = np.random.default_rng(seed)
    for _ in range(count):
        name = names[int(rng.integers(0, len(names)))]
        data = full[name]
        off = int(rng.integers(0, len(data)))
        size = int(rng.integers(1, len(data) - off + 8))
        fd = os.open(os.path.join(os.fsencode(mnt), name, b"out"), os.O_RDONLY)
        try:
            got = os.pread(fd, size, off)
        finally:
            os.close(fd)
        if got != data[off:off + size]:
            sys.exit(f"{name!r}: {size} bytes at {off}: the mount gave other bytes "
                     f"({got[:16].hex()}... against {data[off:off + 16].hex()}...)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("gen")
    p.add_argument("out_dir")
    p.add_argument("--seed", type=int, required=True)
    p = sub.add_parser("reads")
    p.add_argument("mnt")
    p.add_argument("full_ckpt")
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--count", type=int, default=40)
    args = ap.parse_args()
    if args.cmd == "gen":
        cmd_gen(args.out_dir, args.seed)
    else:
        cmd_reads(args.mnt, args.full_ckpt, args.seed, args.count)


if __name__ == "__main__":
    main()
