#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""What ckptfs-diff must say of two models' values, computed by numpy.

  gen DIR [--case CASE]   write DIR/a.safetensors and DIR/b.safetensors,
                          their values chosen here (seeded), CASE the mix
  text A B OUTPUT         check ckptfs-diff's lines (OUTPUT, a file) against
                          numpy: each statistic as %.9g prints it
  json A B GOT.json       the same of ckptfs-diff --json, to 1e-12 relative
  allclose A B ATOL RTOL  print 0 when numpy.allclose (in float64, equal_nan)
                          holds for every tensor of both, else 1: the exit
                          status ckptfs-diff --atol ATOL --rtol RTOL must give
  edge A B atol|rtol OTHER  print "INSIDE OUTSIDE": the smallest atol (or
                          rtol) numpy.allclose takes for the models, the other
                          tolerance OTHER, and the next double below it

The files are safetensors written here (8-byte little-endian header length,
JSON header, bytes), read back here by the same rules, so that no part of
ckptfs is in the oracle.
"""
import json
import math
import struct
import sys

import numpy as np

DTYPES = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64}
NAMES = {np.dtype(v).name: k for k, v in DTYPES.items()}


def write(path, tensors):
    header, blobs, off = {}, [], 0
    for name, arr in tensors.items():
        raw = np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": NAMES[arr.dtype.name], "shape": list(arr.shape),
                        "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read(path):
    """The tensors of a safetensors file in file order, as float64 arrays."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, d in sorted(((k, v) for k, v in header.items() if k != "__metadata__"),
                          key=lambda kv: kv[1]["data_offsets"][0]):
        lo, hi = d["data_offsets"]
        a = np.frombuffer(data[8 + n + lo:8 + n + hi], dtype=np.dtype(DTYPES[d["dtype"]]).newbyteorder("<"))
        out[name] = a.astype(np.float64)
    return out


def gen(out_dir, case):
    rng = np.random.default_rng(39)
    if case == "nan":
        a = np.array([1.0, np.nan, 3.0, np.inf], np.float32)
        b = np.array([1.0 + 1e-6, np.nan, 3.0, np.inf], np.float32)
        c = np.array([1.0, 2.0], np.float32)
        write(f"{out_dir}/a.safetensors", {"nan_both": a, "nan_one": c})
        write(f"{out_dir}/b.safetensors", {"nan_both": b,
                                           "nan_one": np.array([1.0, np.nan], np.float32)})
        return
    # large: millions of small differences beside large values, where a
    # plain float sum would lose digits
    big = (rng.standard_normal(1 << 20) * 100).astype(np.float32)
    big_b = (big + rng.standard_normal(big.size).astype(np.float32) * 1e-3).astype(np.float32)
    w = rng.standard_normal((64, 48)).astype(np.float32)
    w_b = w.copy()
    w_b[rng.integers(0, 64, 20), rng.integers(0, 48, 20)] += np.float32(0.01)
    f64 = rng.standard_normal(1000)
    i32 = rng.integers(-1000, 1000, 500).astype(np.int32)
    i32_b = i32.copy()
    i32_b[::7] += 3
    zeros = np.zeros(8, np.float32)
    nonzero = zeros.copy()
    nonzero[5] = 0.25
    same = rng.standard_normal(100).astype(np.float32)
    write(f"{out_dir}/a.safetensors", {"big": big, "w": w, "f64": f64, "i32": i32,
                                       "to_zeros": nonzero, "both_zero": zeros, "same": same})
    write(f"{out_dir}/b.safetensors", {"big": big_b, "w": w_b, "f64": f64 * (1 + 1e-9),
                                       "i32": i32_b, "to_zeros": zeros,
                                       "both_zero": np.zeros(8, np.float32), "same": same})


def stats(a, b):
    """max abs, max rel, mean abs, rms, rel norm as ckptfs-diff defines them."""
    with np.errstate(invalid="ignore", divide="ignore"):
        same = (a == b) | (np.isnan(a) & np.isnan(b))
        d = np.where(same, 0.0, np.abs(a - b))
        mag = np.maximum(np.abs(a), np.abs(b))
        rel = np.where(same, 0.0, d / np.where(same, 1.0, mag))
    mx = lambda v: math.nan if np.isnan(v).any() else float(v.max())
    norm_d, norm_b = np.linalg.norm(d), np.linalg.norm(b)
    if norm_b == 0:
        rel_norm = 0.0 if norm_d == 0 else math.inf  # ckptfs-diff's rule, not numpy's NaN
    else:
        rel_norm = float(norm_d / norm_b)
    return {"max_abs": mx(d), "max_rel": mx(rel), "mean_abs": float(np.mean(d)),
            "rms": float(np.sqrt(np.mean(d * d))), "rel_norm": rel_norm}


def differing(pa, pb):
    ta, tb = read(pa), read(pb)
    return {k: stats(ta[k], tb[k]) for k in ta
            if k in tb and ta[k].tobytes() != tb[k].tobytes()}, ta, tb


def cmd_text(pa, pb, out_path):
    want, _, _ = differing(pa, pb)
    got = {}
    for line in open(out_path).read().splitlines():
        if line.startswith("values "):
            _, name, rest = line.split(": ", 2)
            got[name] = rest
    problems = []
    for name, s in want.items():
        text = ", ".join(f"{lab} {s[k]:.9g}" for lab, k in
                         (("max abs", "max_abs"), ("max rel", "max_rel"),
                          ("mean abs", "mean_abs"), ("rms", "rms"), ("rel norm", "rel_norm")))
        if got.get(name) != text:
            problems.append(f"{name}: got {got.get(name)!r}, numpy {text!r}")
    if sorted(got) != sorted(want):
        problems.append(f"tensors {sorted(got)}, numpy {sorted(want)}")
    return report(problems, len(want))


def close_num(g, w):
    if isinstance(g, str):
        return (g == "nan" and math.isnan(w)) or (g == "inf" and w == math.inf)
    return g == w or abs(g - w) <= 1e-12 * abs(w)


def cmd_json(pa, pb, got_path):
    want, _, _ = differing(pa, pb)
    got = {t["name"]: t for t in json.load(open(got_path))["tensors"]}
    problems = []
    for name, s in want.items():
        for k, w in s.items():
            if k not in got.get(name, {}) or not close_num(got[name][k], w):
                problems.append(f"{name}: {k} {got.get(name, {}).get(k)!r}, numpy {w!r}")
    return report(problems, len(want))


def report(problems, n):
    for p in problems:
        print(p, file=sys.stderr)
    if n == 0:
        print("nothing compared", file=sys.stderr)
        return 1
    return 1 if problems else 0


def allclose(ta, tb, atol, rtol):
    return all(np.allclose(ta[k], tb[k], atol=atol, rtol=rtol, equal_nan=True)
               for k in ta if k in tb)


def cmd_edge(pa, pb, which, other):
    ta, tb = read(pa), read(pb)
    other = float(other)
    with np.errstate(invalid="ignore", divide="ignore"):
        if which == "atol":
            need = [np.max(np.abs(ta[k] - tb[k]) - other * np.abs(tb[k])) for k in ta]
        else:
            need = [np.max(np.where(tb[k] != 0, (np.abs(ta[k] - tb[k]) - other)
                                    / np.abs(tb[k]), 0.0)) for k in ta]
    if which == "atol":
        take = lambda v: allclose(ta, tb, v, other)
    else:
        take = lambda v: allclose(ta, tb, other, v)
    v = max(0.0, float(np.nanmax(need)))
    while not take(v):                          # up to the first that numpy takes
        v = float(np.nextafter(v, math.inf))
    while v > 0 and take(float(np.nextafter(v, 0.0))):  # down to the smallest
        v = float(np.nextafter(v, 0.0))
    below = float(np.nextafter(v, 0.0))
    assert take(v) and not take(below)
    print(f"{v!r} {below!r}")
    return 0


def main(argv):
    cmd = argv[0]
    if cmd == "gen":
        gen(argv[1], argv[3] if len(argv) > 3 and argv[2] == "--case" else "mix")
        return 0
    if cmd == "text":
        return cmd_text(*argv[1:4])
    if cmd == "json":
        return cmd_json(*argv[1:4])
    if cmd == "allclose":
        ta, tb = read(argv[1]), read(argv[2])
        print(0 if allclose(ta, tb, float(argv[3]), float(argv[4])) else 1)
        return 0
    if cmd == "edge":
        return cmd_edge(*argv[1:5])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
