#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Independent oracle for ckptfs-stat: the statistics of a model's tensors, by numpy.

Files are parsed by the other oracles (ckpt_oracle for .ckpt, safetensors_oracle for
.safetensors, graph_oracle for ONNX and MindIR; an encrypted model is first decrypted by
envelope_oracle, a .zst one decompressed by the zstd program); the numbers are numpy's,
computed on each whole tensor at once, with none of the C program's chunking or merging.

    /usr/bin/python3 stat_oracle.py expect MODEL [--hist BINS] [--key-hex HEX] [--zstd]
        the JSON document ckptfs-stat --json [--hist=BINS] should print (same fields)
    /usr/bin/python3 stat_oracle.py compare EXPECTED.json ACTUAL.json [--names N...]
                                                                      [--any-order]
        field by field: counts, min, max, shape, type and histogram counts and edges
        exactly, mean and std within a relative 1e-9 (of the larger of the value and the
        extremes: a mean near 0 comes from cancellation); with --names, ACTUAL holds
        those tensors only (names or shell globs, in the order named: selected());
        --any-order: the same tensors in any order
        (EXPECTED from the full model a distributed or iteration set was cut from)
    /usr/bin/python3 stat_oracle.py gen OUT --case special|big|safetensors|allbits [--seed N]
        a model with the values the statistics must get right (see gen_*)

Definitions (the tool's, README "ckptfs-stat"): min, max, mean and std (population) are
of the finite elements; NaN, +Inf and -Inf are counted apart; zeros counts finite
elements equal to 0 (-0.0 too).  The histogram bins the finite elements over
numpy.linspace(min, max, BINS + 1) (min == max widened by 0.5 each side, as
numpy.histogram does), counted by numpy.histogram with those edges.  Numeric types:
float16/32/64, bfloat16, the 8- to 64-bit integers and bool; anything else is "not
numeric".  Integer extremes are exact: a uint64 above 2^63 - 1 is given as a string of
its digits (the tool's JSON library has signed 64-bit integers only).

Exit status: 0 success; 1 mismatch or refused file; 2 usage error.
"""

import argparse
import fnmatch
import json
import math
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402

import ckpt_oracle as co  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))

# Every format's type names -> numpy dtype ("bf16": bfloat16, widened by hand).
KINDS = {}
for names, kind in [
        (("Float16", "float16", "F16", "FLOAT16"), "<f2"),
        (("BFloat16", "BF16", "BFLOAT16"), "bf16"),
        (("Float32", "float32", "F32", "FLOAT"), "<f4"),
        (("Float64", "float64", "F64", "DOUBLE", "FLOAT64"), "<f8"),
        (("Int8", "int8", "I8", "INT8"), "i1"), (("Int16", "int16", "I16", "INT16"), "<i2"),
        (("Int32", "int32", "I32", "INT32"), "<i4"), (("Int64", "int64", "I64", "INT64"), "<i8"),
        (("UInt8", "uint8", "U8", "UINT8"), "u1"), (("UInt16", "uint16", "U16", "UINT16"), "<u2"),
        (("UInt32", "uint32", "U32", "UINT32"), "<u4"),
        (("UInt64", "uint64", "U64", "UINT64"), "<u8"),
        (("Bool", "bool", "BOOL"), "bool")]:
    for n in names:
        KINDS[n] = kind

INT64_MAX = 2 ** 63 - 1

# The one name ckptfs's tools print for a type (ckptfs(1), TYPE NAMES),
# decided here without ckptfs: numpy's own name of the element dtype
# (np.dtype("<f4").name is "float32"); bfloat16 as torch and ml_dtypes
# call it (numpy has none); complex and text by numpy's and Python's
# names; the raw-byte types by ml_dtypes' names (torch.float8_* the same),
# written out, as numpy 1.24 here has no such dtypes.
_COMPLEX = {n: "<c8" for n in ("Complex64", "complex64", "C64", "COMPLEX64", "kComplex64")}
_COMPLEX.update({n: "<c16" for n in ("Complex128", "complex128", "COMPLEX128", "kComplex128")})
_RAW = {
    "F8_E4M3": "float8_e4m3fn", "FLOAT8E4M3FN": "float8_e4m3fn",
    "F8_E4M3FNUZ": "float8_e4m3fnuz", "FLOAT8E4M3FNUZ": "float8_e4m3fnuz",
    "F8_E5M2": "float8_e5m2", "FLOAT8E5M2": "float8_e5m2",
    "F8_E5M2FNUZ": "float8_e5m2fnuz", "FLOAT8E5M2FNUZ": "float8_e5m2fnuz",
    "F8_E8M0": "float8_e8m0fnu", "FLOAT8E8M0": "float8_e8m0fnu",
    "F6_E2M3": "float6_e2m3fn", "F6_E3M2": "float6_e3m2fn",
    "F4": "float4_e2m1fn", "FLOAT4E2M1": "float4_e2m1fn",
    "Int4": "int4", "INT4": "int4", "QINT4X2": "int4", "UINT4": "uint4",
    "INT2": "int2", "UINT2": "uint2", "random_op": "random_op",
}


def canonical_name(type_name):
    """The tools' name of a type, from any format's spelling of it."""
    if type_name in ("str", "STRING", "kChar"):
        return str.__name__
    if type_name in _RAW:
        return _RAW[type_name]
    kind = KINDS.get(type_name) or _COMPLEX.get(type_name)
    if kind is None:
        raise SystemExit(f"stat_oracle: no canonical name for {type_name}")
    return "bfloat16" if kind == "bf16" else np.dtype(kind).name


class Tensor:
    def __init__(self, name, part, dirname, type_name, shape, raw):
        self.name, self.part, self.dirname = name, part, dirname
        self.type_name, self.shape, self.raw = type_name, list(shape), raw


def _decode_envelope(path, key_hex, zstd, tmp):
    """The plaintext model's path: decrypted and/or decompressed into tmp."""
    base = os.path.basename(path)
    if zstd:
        base = base[:-4] if base.endswith(".zst") else base
        out = os.path.join(tmp, "z-" + base)
        with open(out, "wb") as f:
            subprocess.run(["zstd", "-q", "-d", "-c", path], stdout=f, check=True)
        path = out
    if key_hex:
        out = os.path.join(tmp, "d-" + base)
        subprocess.run([sys.executable, os.path.join(HERE, "envelope_oracle.py"), "decrypt",
                        "--key-hex", key_hex, path, out], check=True)
        path = out
    return path


def load_tensors(path):
    """The model's tensors in file order, by the format oracles."""
    name = path[:-4] if path.endswith(".zst") else path
    if name.endswith(".safetensors") or name.endswith(".safetensors.index.json"):
        import safetensors_oracle as so
        return [Tensor(e.tag.decode("utf-8"), None, e.dirname, e.ms_type, e.shape, e.out)
                for e in so.load_entries(path)]
    if name.endswith(".onnx") or name.endswith(".mindir"):
        import graph_oracle as go
        if name.endswith(".mindir") and not path.endswith(".mindir"):
            raise SystemExit("stat_oracle: give graph_oracle a .mindir name")
        return [Tensor(os.fsdecode(e.tag) if isinstance(e.tag, bytes) else e.tag, None,
                       e.dirname, e.ms_type, e.dims, e.out) for e in go.load(path)]
    entries, _ = co.load_reference(path)
    out = []
    for e in entries:
        part = e.part if e.part else None
        out.append(Tensor(e.tag.decode("utf-8", "surrogateescape"), part, e.dirname,
                          e.ms_type, e.dims, e.out))
    return out


def _values(t):
    kind = KINDS.get(t.type_name)
    if kind is None:
        return None, None
    if kind == "bf16":
        bits = np.frombuffer(t.raw, dtype="<u2").astype("<u4") << 16
        return bits.view("<f4"), kind
    if kind == "bool":
        return (np.frombuffer(t.raw, dtype="u1") != 0).astype(np.int64), kind
    return np.frombuffer(t.raw, dtype=kind), kind


def _exact(v):
    v = int(v)
    return v if v <= INT64_MAX else str(v)


def tensor_stats(t, bins):
    d = {"dir": os.fsdecode(t.dirname), "type": canonical_name(t.type_name), "shape": t.shape}
    a, kind = _values(t)
    d["numeric"] = a is not None
    if a is None:
        return d
    is_float = a.dtype.kind == "f"
    d["count"] = int(a.size)
    if is_float:
        d["nan"] = int(np.isnan(a).sum())
        d["posinf"] = int(np.isposinf(a).sum())
        d["neginf"] = int(np.isneginf(a).sum())
        fin = a[np.isfinite(a)]
    else:
        d["nan"] = d["posinf"] = d["neginf"] = 0
        fin = a
    d["zeros"] = int((fin == 0).sum())
    f64 = fin.astype(np.float64)
    if fin.size == 0:
        d["min"] = d["max"] = d["mean"] = d["std"] = None
    else:
        d["min"] = float(fin.min()) if is_float else _exact(fin.min())
        d["max"] = float(fin.max()) if is_float else _exact(fin.max())
        d["mean"] = float(np.mean(f64))
        d["std"] = float(np.std(f64))
    if bins:
        if fin.size == 0:
            d["hist"] = None
        else:
            lo, hi = float(f64.min()), float(f64.max())
            if lo == hi:
                lo, hi = lo - 0.5, hi + 0.5
            edges = np.linspace(lo, hi, bins + 1)
            counts, _ = np.histogram(f64, bins=edges)
            d["hist"] = {"edges": [float(e) for e in edges], "counts": [int(c) for c in counts]}
    return d


def cmd_expect(a):
    with tempfile.TemporaryDirectory(prefix="stat-oracle-") as tmp:
        path = _decode_envelope(a.model, a.key_hex, a.zstd, tmp)
        try:
            tensors = load_tensors(path)
        except co.Refused as exc:
            print(f"stat_oracle: {a.model}: {exc}", file=sys.stderr)
            return 1
        doc = {"tensors": [tensor_stats(t, a.hist) for t in tensors]}
    json.dump(doc, sys.stdout, indent=1)
    print()
    return 0


def _close(x, y, scale):
    if x is None or y is None:
        return x is None and y is None
    return abs(x - y) <= 1e-9 * scale or x == y


def compare_tensor(e, g, problems):
    where = e["dir"]
    for k in ("type", "shape", "numeric", "count", "nan", "posinf", "neginf", "zeros",
              "min", "max"):
        if e.get(k, "absent") != g.get(k, "absent"):
            problems.append(f"{where}: {k} {g.get(k, 'absent')!r}, expected {e.get(k, 'absent')!r}")
    if not e["numeric"]:
        extra = [k for k in ("count", "min", "max", "mean", "std") if k in g]
        if extra:
            problems.append(f"{where}: not numeric, yet has {extra}")
        return
    scale = max([abs(float(v)) for v in (e["min"], e["max"], e["mean"], e["std"])
                 if v is not None] or [0.0])
    for k in ("mean", "std"):
        if not _close(e[k], g.get(k), scale):
            problems.append(f"{where}: {k} {g.get(k)!r}, expected {e[k]!r}")
    if "hist" in e and e["hist"] != g.get("hist", "absent"):
        problems.append(f"{where}: hist {g.get('hist', 'absent')!r}, expected {e['hist']!r}")


def selected(tensors, patterns):
    """The tensors TENSOR arguments select, as ckptfs-stat must list them: each
    pattern's (its name or directory equal to it, or matched as a shell glob by
    Python's fnmatch, not glibc's) in file order, patterns in the order given, a
    tensor once, at its first pattern."""
    out, seen = [], set()
    for p in patterns:
        for i, t in enumerate(tensors):
            names = [t["dir"]] + ([t["name"]] if "name" in t else [])
            if i not in seen and any(n == p or fnmatch.fnmatchcase(n, p) for n in names):
                seen.add(i)
                out.append(t)
    return out


def cmd_compare(a):
    with open(a.expected) as f:
        exp = json.load(f)["tensors"]
    with open(a.actual) as f:
        got = json.load(f)["tensors"]
    if a.names:
        exp = selected(exp, a.names)
    if a.any_order:  # the expected model is another file holding the same tensors
        exp = sorted(exp, key=lambda t: t["dir"])
        got = sorted(got, key=lambda t: t["dir"])
    problems = []
    if [e["dir"] for e in exp] != [g["dir"] for g in got]:
        problems.append(f"tensors {[g['dir'] for g in got]}, expected {[e['dir'] for e in exp]}")
    else:
        for e, g in zip(exp, got):
            compare_tensor(e, g, problems)
    return report(problems, len(exp))


def report(problems, n):
    """The end of a comparison: the first mismatches on stderr, and 1; or 0."""
    for p in problems[:20]:
        print("mismatch:", p, file=sys.stderr)
    if problems:
        return 1
    print(f"ok: {n} tensors match")
    return 0


# ---------------------------------------------------------------------------------------
# Generated models.
# ---------------------------------------------------------------------------------------


def _special_arrays(rng):
    """(name, numpy array) pairs: every numeric type with the values that matter."""
    f32 = rng.standard_normal(1000).astype("<f4")
    f32[[3, 50, 51]] = np.nan
    f32[7] = np.inf
    f32[[8, 9]] = -np.inf
    f32[[10, 11, 12]] = 0.0
    f32[13] = -0.0
    f16 = np.array([1.0, -2.5, 6.0e-8, 65504, -65504, np.inf, np.nan, 0, 0.1], dtype="<f2")
    f64 = (rng.standard_normal(300) * 1e3 + 1e6).astype("<f8")
    f64[0] = np.nan
    out = [("special.f32", f32), ("special.f16", f16), ("special.f64", f64),
           ("special.all_nan", np.full(4, np.nan, dtype="<f4")),
           ("special.constant", np.full(6, 2.5, dtype="<f4")),
           ("special.empty", np.zeros((2, 0, 3), dtype="<f4"))]
    for dt in ("i1", "<i2", "<i4", "<i8", "u1", "<u2", "<u4", "<u8"):
        info = np.iinfo(np.dtype(dt))
        v = rng.integers(info.min, info.max, size=200, dtype=np.dtype(dt), endpoint=True)
        v[:3] = [info.min, info.max, 0]
        out.append((f"int.{np.dtype(dt).name}", v))
    out.append(("int.bool", rng.integers(0, 2, size=77, dtype=np.uint8).astype("?")))
    return out


def _bf16(rng):
    """bfloat16 bits: the upper halves of float32 values, with NaN, +/-Inf and zeros."""
    v = rng.standard_normal(500).astype("<f4")
    v[:5] = [np.nan, np.inf, -np.inf, 0.0, -0.0]
    return (v.view("<u4") >> 16).astype("<u2")


MS_NAME = {"float32": "Float32", "float16": "Float16", "float64": "Float64", "int8": "Int8",
           "int16": "Int16", "int32": "Int32", "int64": "Int64", "uint8": "UInt8",
           "uint16": "UInt16", "uint32": "UInt32", "uint64": "UInt64", "bool": "Bool"}
ST_NAME = {"float32": "F32", "float16": "F16", "float64": "F64", "int8": "I8", "int16": "I16",
           "int32": "I32", "int64": "I64", "uint8": "U8", "uint16": "U16", "uint32": "U32",
           "uint64": "U64", "bool": "BOOL"}


def gen_special(out, rng):
    values = [co.tensor_value(n, MS_NAME[a.dtype.name], list(a.shape), a.tobytes())
              for n, a in _special_arrays(rng)]
    values.append(co.tensor_value("special.bf16", "BFloat16", [500], _bf16(rng).tobytes()))
    values.append(co.tensor_value("special.scalar", "Float32", [],
                                  np.array([3.25], dtype="<f4").tobytes()))
    values.append(co.str_value("info.str", "not numbers"))
    values.append(co.tensor_value("quant.int4", "Int4", [4, 8], co.random_bytes(rng, 32)))
    z = (rng.standard_normal(5) + 1j * rng.standard_normal(5)).astype("<c8")
    values.append(co.tensor_value("special.c64", "Complex64", [5], z.tobytes()))
    co.write_file(out, [co.record(v) for v in values])


def gen_big(out, rng):
    """Tensors of several 4 MiB chunks: a large mean beside a small spread (where a
    naive one-pass variance loses every digit), NaN and Inf spread over the chunks."""
    n = 3 * 1024 * 1024 + 12345
    f32 = (rng.standard_normal(n) * 0.01 + 1000.0).astype("<f4")
    f32[rng.integers(0, n, size=100)] = np.nan
    f32[rng.integers(0, n, size=10)] = np.inf
    i64 = rng.integers(-2 ** 62, 2 ** 62, size=1024 * 1024 + 7, dtype=np.int64)
    f16 = rng.standard_normal(2 * 1024 * 1024 + 1).astype("<f2")
    values = [co.tensor_value("big.f32", "Float32", [n], f32.tobytes()),
              co.tensor_value("big.i64", "Int64", [i64.size], i64.tobytes()),
              co.tensor_value("big.f16", "Float16", [f16.size], f16.tobytes())]
    co.write_file(out, [co.record(v) for v in values])


def gen_allbits(out, rng):
    """Every float16 and every bfloat16 bit pattern (subnormals, both zeros, both
    infinities, every NaN), shuffled so that each chunk holds a mixture."""
    bits = rng.permutation(np.arange(65536, dtype=np.uint32)).astype("<u2").tobytes()
    values = [co.tensor_value("all.f16", "Float16", [65536], bits),
              co.tensor_value("all.bf16", "BFloat16", [65536], bits)]
    co.write_file(out, [co.record(v) for v in values])


def gen_safetensors(out, rng):
    import safetensors_oracle as so
    tensors = [(n, ST_NAME[a.dtype.name], list(a.shape), a.tobytes())
               for n, a in _special_arrays(rng)]
    tensors.append(("special.bf16", "BF16", [500], _bf16(rng).tobytes()))
    tensors.append(("special.f8", "F8_E4M3", [6], co.random_bytes(rng, 6)))
    with open(out, "wb") as f:
        f.write(so.serialize(tensors, {"format": "pt"}))


def cmd_gen(a):
    rng = np.random.default_rng(a.seed)
    {"special": gen_special, "big": gen_big, "safetensors": gen_safetensors,
     "allbits": gen_allbits}[a.case](a.out, rng)
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("expect")
    e.add_argument("model")
    e.add_argument("--hist", type=int, default=0)
    e.add_argument("--key-hex")
    e.add_argument("--zstd", action="store_true")
    c = sub.add_parser("compare")
    c.add_argument("expected")
    c.add_argument("actual")
    c.add_argument("--names", nargs="*")
    c.add_argument("--any-order", action="store_true")
    g = sub.add_parser("gen")
    g.add_argument("out")
    g.add_argument("--case", required=True, choices=["special", "big", "safetensors", "allbits"])
    g.add_argument("--seed", type=int, default=1)
    a = p.parse_args(argv)
    return {"expect": cmd_expect, "compare": cmd_compare, "gen": cmd_gen}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
