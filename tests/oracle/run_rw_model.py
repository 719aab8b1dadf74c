#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Expected values for the writable run-directory mounts (tests/bats/run_rw.bats).

Everything here is decided by ckpt_oracle.py's reference parse of the files and by
what the test itself wrote, never by ckptfs: the mount is only driven (dd, touch, cat)
and its answers compared with the reference.

    run_rw_model.py edited ORIG NEW [TAG OFFSET HEX]...
        NEW's reference parse is ORIG's with only the given bytes replaced (tensor
        directory names, types and dims all equal).  Exit 1 with the difference.
    run_rw_model.py random MNT RUN_DIR STATE --seed N --ops N
        A seeded random sequence on the rw mount MNT of RUN_DIR: overwrite (dd
        conv=notrunc) a random range of a random tensor's out with random bytes,
        save a random checkpoint (touch snapshot_done; its file must then parse to the
        reference, its directory keep its inode, no temporary file stay), read a random
        tensor (must equal the reference).  After every step each checkpoint with unsaved
        edits still holds its lock file (it was never closed).  The reference is saved to
        STATE (JSON) for `final`.
    run_rw_model.py final RUN_DIR STATE
        Every checkpoint file of RUN_DIR parses to the reference in STATE (after the
        unmount, which saves all unsaved edits).
"""

import argparse
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckpt_oracle as co  # noqa: E402


def parsed(path):
    """{dirname: (type, dims, out bytes)} in file order, from the oracle's parse."""
    entries, _ = co.load_reference(path)
    return {os.fsdecode(e.dirname): (e.of_type, list(e.dims), bytes(e.out)) for e in entries}


def cmd_edited(orig, new, patches):
    old, got = parsed(orig), parsed(new)
    if list(old) != list(got):
        sys.exit(f"tensors differ: {list(old)} -> {list(got)}")
    want = {k: [t, d, bytearray(o)] for k, (t, d, o) in old.items()}
    for i in range(0, len(patches), 3):
        name, off, data = patches[i], int(patches[i + 1]), bytes.fromhex(patches[i + 2])
        out = want[name][2]
        if off + len(data) > len(out):
            sys.exit(f"patch of {name} at {off} runs past its {len(out)} bytes")
        out[off:off + len(data)] = data
    for k, (t, d, o) in want.items():
        gt, gd, go = got[k]
        if (gt, gd) != (t, d):
            sys.exit(f"{k}: {gt} {gd}, expected {t} {d}")
        if go != bytes(o):
            first = next(i for i in range(min(len(go), len(o)) + 1)
                         if i >= len(go) or i >= len(o) or go[i] != o[i])
            sys.exit(f"{k}: out differs from byte {first} ({len(go)} bytes, expected {len(o)})")
    print(f"edited ok: {len(want)} tensors, {len(patches) // 3} patches")


class Failed(Exception):
    pass


def files_of(run_dir):
    """{name shown in the mount: file name} for the .ckpt files of a run directory."""
    return {f[:-len(".ckpt")]: f for f in sorted(os.listdir(run_dir))
            if f.endswith(".ckpt") and not f.startswith(".")}


def fresh_bytes(rng, kind, part, n):
    """n random bytes a save must accept for this tensor: ASCII for a str (UTF-8 out),
    0/1 for bools, a map tensor's status in MindSpore's 0..2; anything else random."""
    if kind == "kChar":
        return bytes(rng.integers(0x61, 0x7b, size=n, dtype=np.uint8))
    if kind == "kBool":
        return bytes(rng.integers(0, 2, size=n, dtype=np.uint8))
    if part == "status":
        return rng.integers(0, 3, size=n // 4, dtype=np.int32).astype("<i4").tobytes()
    return bytes(rng.integers(0, 256, size=n, dtype=np.uint8))


def compare_file(path, ref, what):
    got = parsed(path)
    if list(got) != list(ref):
        raise Failed(f"{what}: tensors {list(got)}, expected {list(ref)}")
    for k, (t, d, o) in ref.items():
        gt, gd, go = got[k]
        if (gt, gd) != (t, d) or go != bytes(o):
            raise Failed(f"{what}: tensor {k} differs from the reference")


def cmd_random(mnt, run_dir, state, seed, nops):
    rng = np.random.default_rng(seed)
    files = files_of(run_dir)
    names = sorted(files)
    ref = {n: {k: (t, d, bytearray(o)) for k, (t, d, o) in
               parsed(os.path.join(run_dir, files[n])).items()} for n in names}
    parts = {}
    for n in names:
        for e in co.load_reference(os.path.join(run_dir, files[n]))[0]:
            parts[(n, os.fsdecode(e.dirname))] = e.part
    inode = {n: os.stat(os.path.join(mnt, n)).st_ino for n in names}
    dirty = set()   # checkpoints with unsaved edits: never closed, so their lock stays
    log = []
    counts = {"write": 0, "save": 0, "read": 0, "closed": 0}  # closed: seen after a step
    try:
        for step in range(nops):
            op = ("write", "save", "read")[int(rng.choice(3, p=[0.45, 0.2, 0.35]))]
            n = names[int(rng.integers(len(names)))]
            tensors = [k for k, v in ref[n].items() if len(v[2]) > 0]
            if op == "write":
                k = tensors[int(rng.integers(len(tensors)))]
                t, _, out = ref[n][k]
                size = len(out)
                if rng.random() < 0.5 or size < 2 or t == "kChar" or parts[(n, k)] == "status":
                    off, length = 0, size
                else:
                    off = int(rng.integers(size))
                    length = int(rng.integers(1, size - off + 1))
                data = fresh_bytes(rng, t, parts[(n, k)], length)
                log.append(f"{step}: write {n}/{k} [{off}, {off + length})")
                r = subprocess.run(["dd", f"of={os.path.join(mnt, n, k, 'out')}", "bs=1M",
                                    f"seek={off}", "oflag=seek_bytes", "conv=notrunc",
                                    "status=none"], input=data, capture_output=True)
                if r.returncode != 0:
                    raise Failed(f"dd failed: {r.stderr.decode().strip()}")
                out[off:off + length] = data
                dirty.add(n)
            elif op == "save":
                log.append(f"{step}: save {n}")
                r = subprocess.run(["touch", os.path.join(mnt, n, "snapshot_done")],
                                   capture_output=True)
                if r.returncode != 0:
                    raise Failed(f"touch snapshot_done failed: {r.stderr.decode().strip()}")
                compare_file(os.path.join(run_dir, files[n]), ref[n], f"{files[n]} after the save")
                dirty.discard(n)
                left = [f for f in os.listdir(run_dir) if f.startswith(f".{files[n]}.ckptfs-")
                        and f != f".{files[n]}.ckptfs-lock"]
                if left:
                    raise Failed(f"temporary files left beside {files[n]}: {left}")
                if os.stat(os.path.join(mnt, n)).st_ino != inode[n]:
                    raise Failed(f"{n}: its directory's inode changed at the save")
                shown = sorted(x for x in os.listdir(mnt) if x != "latest")
                if shown != names:
                    raise Failed(f"root lists {shown} after the save, expected {names}")
            else:
                k = tensors[int(rng.integers(len(tensors)))]
                log.append(f"{step}: read {n}/{k}")
                with open(os.path.join(mnt, n, k, "out"), "rb") as f:
                    got = f.read()
                if got != bytes(ref[n][k][2]):
                    raise Failed(f"{n}/{k}: read {len(got)} bytes that differ from the reference")
            counts[op] += 1
            for d in names:
                held = os.path.exists(os.path.join(run_dir, f".{files[d]}.ckptfs-lock"))
                if d in dirty and not held:
                    raise Failed(f"{d} has unsaved edits but its lock file is gone (closed?)")
                counts["closed"] += not held
    except Failed as exc:
        print(f"seed {seed}: FAIL at {log[-1]}: {exc}", file=sys.stderr)
        print("the sequence:\n  " + "\n  ".join(log), file=sys.stderr)
        return 1
    with open(state, "w") as f:
        json.dump({n: {k: [t, d, bytes(o).hex()] for k, (t, d, o) in ref[n].items()}
                   for n in names}, f)
    print(f"seed {seed}: {counts}")
    if not counts["closed"]:
        print(f"seed {seed}: no checkpoint was ever closed: index_cache not exercised",
              file=sys.stderr)
        return 1
    return 0


def cmd_final(run_dir, state):
    with open(state) as f:
        ref = json.load(f)
    files = files_of(run_dir)
    if sorted(files) != sorted(ref):
        print(f"the run holds {sorted(files)}, expected {sorted(ref)}", file=sys.stderr)
        return 1
    for n, tensors in ref.items():
        want = {k: (t, d, bytes.fromhex(h)) for k, (t, d, h) in tensors.items()}
        try:
            compare_file(os.path.join(run_dir, files[n]), want, files[n])
        except Failed as exc:
            print(f"FAIL: {exc}", file=sys.stderr)
            return 1
    print(f"final ok: {len(ref)} checkpoints")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("edited")
    p.add_argument("orig")
    p.add_argument("new")
    p.add_argument("patches", nargs="*")
    p = sub.add_parser("random")
    p.add_argument("mnt")
    p.add_argument("run_dir")
    p.add_argument("state")
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--ops", type=int, default=40)
    p = sub.add_parser("final")
    p.add_argument("run_dir")
    p.add_argument("state")
    a = ap.parse_args()
    if a.cmd == "edited":
        if len(a.patches) % 3:
            ap.error("patches come as TAG OFFSET HEX")
        cmd_edited(a.orig, a.new, a.patches)
        return 0
    if a.cmd == "random":
        return cmd_random(a.mnt, a.run_dir, a.state, a.seed, a.ops)
    return cmd_final(a.run_dir, a.state)


if __name__ == "__main__":
    sys.exit(main())
