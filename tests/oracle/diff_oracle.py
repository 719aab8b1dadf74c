#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Independent oracle for ckptfs-diff: what differs between two models, by numpy.

Files are parsed as stat_oracle parses them (ckpt_oracle, safetensors_oracle, graph_oracle;
an encrypted model decrypted by envelope_oracle first); the differences are numpy's (Python
integers for the integer types), computed on whole tensors, with none of the C program's
chunking.

    /usr/bin/python3 diff_oracle.py expect A B [--key-hex HEX]
        the JSON document ckptfs-diff --json A B should print (the fields compared)
    /usr/bin/python3 diff_oracle.py compare EXPECTED.json ACTUAL.json
        tensors in the same order with the same name, part, status, bit_identical, and
        max_abs and max_rel exactly (numbers, or "nan" / "inf"); the same "identical"
    /usr/bin/python3 diff_oracle.py write IN OUT [--permute] [--remove NAME]
            [--add NAME] [--reshape NAME] [--retype NAME] [--set NAME INDEX VALUE]...
        IN's tensors (a .ckpt or .safetensors) written to OUT (.ckpt or .safetensors, by
        its name: the fixture in another format), changed as asked: the file order
        reversed, a tensor left out, one added (4 float32 ones), one's shape flattened,
        one's type changed (float32 <-> float64, the values converted), element INDEX
        (of the flattened tensor) set to VALUE (a float, "nan", "inf", "-inf", or for an
        integer type an integer; "nanbits" gives a NaN of another payload; a negative
        VALUE with a leading space, which argparse does not take for an option)
    /usr/bin/python3 diff_oracle.py gen OUT --case nan-a|nan-b
        two models that differ at NaN, infinity and integer extremes (see gen_nan)

Definitions (the tool's, README "ckptfs-diff"): tensors match by name (and map part);
types compare by the element type, whatever the format's spelling (Float32 == F32); for
matched tensors of one type and shape, bit_identical is the bytes' equality and, for
numeric types, max_abs and max_rel are the largest |a - b| and |a - b| / max(|a|, |b|)
over the elements (0 where a == b, both are 0, or both are NaN; NaN as soon as one is
NaN).  Statuses: only_a, only_b, type, shape, differ, identical.

Exit status: 0 success; 1 mismatch; 2 usage error.
"""

import argparse
import json
import math
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402

import ckpt_oracle as co  # noqa: E402
import stat_oracle as so  # noqa: E402

# The element type a type name stands for, in any format ("Float32", "F32" -> "<f4").
CANON = dict(so.KINDS)
for n in ("Complex64", "complex64", "C64"):
    CANON[n] = "<c8"
for n in ("Complex128", "complex128"):
    CANON[n] = "<c16"

# numpy dtype name -> MindSpore / safetensors type name, for writing.
MS_OF = dict(so.MS_NAME, bfloat16="BFloat16")
ST_OF = dict(so.ST_NAME, bfloat16="BF16")


def _canon(type_name):
    return CANON.get(type_name, type_name.lower())


def _key(t):
    return (t.name, t.part)


def _floats(t):
    """The elements as float64 (exactly), or None for an integer or non-numeric type."""
    a, kind = so._values(t)
    if a is None or a.dtype.kind != "f":
        return None
    return a.astype(np.float64)


def _max(v):
    if v.size == 0:
        return 0.0
    return float("nan") if np.isnan(v).any() else float(v.max())


def differences(ta, tb):
    """(max_abs, max_rel) of two tensors of one numeric type and shape."""
    fa, fb = _floats(ta), _floats(tb)
    if fa is not None:
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            same = (fa == fb) | (np.isnan(fa) & np.isnan(fb))
            absd = np.where(same, 0.0, np.abs(fa - fb))
            mag = np.maximum(np.abs(fa), np.abs(fb))
            rel = np.where(same, 0.0, absd / np.where(same, 1.0, mag))
        return _max(absd), _max(rel)
    ia, ib = so._values(ta)[0], so._values(tb)[0]
    best_abs = best_rel = 0.0
    for x, y in zip(ia.tolist(), ib.tolist()):
        d, m = abs(int(x) - int(y)), max(abs(int(x)), abs(int(y)))
        best_abs = max(best_abs, float(d))
        best_rel = max(best_rel, 0.0 if m == 0 else float(d) / float(m))
    return best_abs, best_rel


def _jnum(v):
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf"
    return v


def _load(path, key_hex, tmp):
    return so.load_tensors(so._decode_envelope(path, key_hex, False, tmp))


def expect(a_path, b_path, key_hex):
    with tempfile.TemporaryDirectory(prefix="diff-oracle-") as tmp:
        ta = _load(a_path, key_hex, tmp)
        tb = _load(b_path, key_hex, tmp)
    in_b = {_key(t): t for t in tb}
    out, seen = [], set()
    for a in ta:
        d = {"name": a.name}
        if a.part:
            d["part"] = a.part
        b = in_b.get(_key(a))
        out.append(d)
        if b is None:
            d["status"] = "only_a"
            continue
        seen.add(_key(a))
        if _canon(a.type_name) != _canon(b.type_name):
            d["status"] = "type"
        elif list(a.shape) != list(b.shape):
            d["status"] = "shape"
        else:
            d["bit_identical"] = a.raw == b.raw
            d["status"] = "identical" if a.raw == b.raw else "differ"
            d["numeric"] = so._values(a)[0] is not None
            if d["numeric"]:
                mabs, mrel = (0.0, 0.0) if a.raw == b.raw else differences(a, b)
                d["max_abs"], d["max_rel"] = _jnum(mabs), _jnum(mrel)
    for b in tb:
        if _key(b) not in seen and _key(b) not in {_key(t) for t in ta}:
            d = {"name": b.name, "status": "only_b"}
            if b.part:
                d["part"] = b.part
            out.append(d)
    return {"identical": all(d["status"] == "identical" for d in out), "tensors": out}


def cmd_expect(a):
    json.dump(expect(a.a, a.b, a.key_hex), sys.stdout, indent=1)
    print()
    return 0


FIELDS = ("name", "part", "status", "numeric", "bit_identical", "max_abs", "max_rel")


def cmd_compare(a):
    with open(a.expected) as f:
        exp = json.load(f)
    with open(a.actual) as f:
        got = json.load(f)
    problems = []
    if exp["identical"] != got.get("identical"):
        problems.append(f"identical {got.get('identical')!r}, expected {exp['identical']!r}")
    e_names = [(t["name"], t.get("part")) for t in exp["tensors"]]
    g_names = [(t["name"], t.get("part")) for t in got["tensors"]]
    if e_names != g_names:
        problems.append(f"tensors {g_names}, expected {e_names}")
    else:
        for e, g in zip(exp["tensors"], got["tensors"]):
            for k in FIELDS:
                if e.get(k, "absent") != g.get(k, "absent"):
                    problems.append(f"{e['name']}: {k} {g.get(k, 'absent')!r}, "
                                    f"expected {e.get(k, 'absent')!r}")
    return so.report(problems, len(e_names))


# ---------------------------------------------------------------------------------------
# Writing models.
# ---------------------------------------------------------------------------------------


def _np_name(type_name):
    kind = so.KINDS.get(type_name)
    if kind is None:
        raise SystemExit(f"diff_oracle: cannot write type {type_name}")
    return "bfloat16" if kind == "bf16" else "bool" if kind == "bool" else np.dtype(kind).name


def write_model(out, tensors):
    """tensors: (name, numpy dtype name, shape, bytes); by OUT's name, .ckpt or safetensors."""
    if out.endswith(".safetensors"):
        import safetensors_oracle as sto
        with open(out, "wb") as f:
            f.write(sto.serialize([(n, ST_OF[t], s, r) for n, t, s, r in tensors],
                                  {"format": "pt"}))
        return
    co.write_file(out, [co.record(co.tensor_value(n, MS_OF[t], list(s), r))
                        for n, t, s, r in tensors])


def _set(raw, np_name, index, value):
    if np_name == "bfloat16":
        bits = np.frombuffer(raw, dtype="<u2").copy()
        f = np.array([float(value)], dtype="<f4").view("<u4") >> 16
        bits[index] = f[0]
        return bits.tobytes()
    a = np.frombuffer(raw, dtype=np.dtype(np_name).newbyteorder("<")).copy()
    if value == "nanbits":  # a NaN, with a payload other than numpy's
        u = a.view(f"<u{a.itemsize}")
        u[index] = {2: 0x7e01, 4: 0x7fc00001, 8: 0x7ff8000000000001}[a.itemsize]
    elif a.dtype.kind == "f":
        a[index] = float(value)
    else:
        a[index] = int(value)
    return a.tobytes()


def cmd_write(a):
    ts = [(t.name, _np_name(t.type_name), list(t.shape), t.raw) for t in so.load_tensors(a.input)]
    for t in ts:
        if t[0] is None:
            raise SystemExit("diff_oracle: a map tensor cannot be rewritten")
    if a.remove:
        ts = [t for t in ts if t[0] != a.remove]
    if a.add:
        ts.append((a.add, "float32", [4], np.ones(4, dtype="<f4").tobytes()))
    out = []
    for n, t, s, r in ts:
        if n == a.reshape:
            s = [int(np.prod(s))]
        if n == a.retype:
            old = np.frombuffer(r, dtype=np.dtype(t).newbyteorder("<"))
            t = "float64" if t == "float32" else "float32"
            r = old.astype(np.dtype(t).newbyteorder("<")).tobytes()
        for name, index, value in a.set or []:
            if name == n:
                r = _set(r, t, int(index), value)
        out.append((n, t, s, r))
    if a.permute:
        out.reverse()
    write_model(a.output, out)
    return 0


def gen_nan(case):
    """nan-a and nan-b: the same names, types and shapes; the values differ as the
    definitions must handle (NaN beside NaN, beside a number; infinities; integer
    extremes, where a difference overflows the type)."""
    b = case == "nan-b"
    f32 = np.array([1.0, np.nan, 2.0, np.inf, -1.0, 0.0], dtype="<f4")
    same_nan = f32.copy()  # NaN at the same place, other payload in b
    if b:
        same_nan.view("<u4")[1] = 0x7fc00001
    nan_vs_num = f32.copy()
    if b:
        nan_vs_num[0] = np.nan
    inf = np.array([np.inf, 1.0, -np.inf], dtype="<f4")
    if b:
        inf[0] = -np.inf
    f16 = np.array([0.5, 65504, -65504, 0.0], dtype="<f2")
    if b:
        f16[1] = -65504
        f16[3] = -0.0
    i64 = np.array([-2 ** 63, 2 ** 63 - 1, 5, 0], dtype="<i8")
    if b:
        i64[0], i64[2] = 2 ** 63 - 1, 7
    u64 = np.array([0, 2 ** 64 - 1, 3], dtype="<u8")
    if b:
        u64[1] = 1
    i8 = np.array([-128, 127, 0], dtype="i1")
    if b:
        i8[0] = 127
    bf = (np.array([1.0, 3.0, np.nan], dtype="<f4").view("<u4") >> 16).astype("<u2")
    if b:
        bf[1] = (np.array([3.5], dtype="<f4").view("<u4") >> 16)[0]
    zeros = np.zeros(3, dtype="<f8")
    if b:
        zeros[1] = -0.0  # bits differ, values do not
    return [("f32.same_nan", "float32", [6], same_nan.tobytes()),
            ("f32.nan_vs_num", "float32", [2, 3], nan_vs_num.tobytes()),
            ("f32.inf", "float32", [3], inf.tobytes()),
            ("f16.extremes", "float16", [4], f16.tobytes()),
            ("i64.extremes", "int64", [4], i64.tobytes()),
            ("u64.extremes", "uint64", [3], u64.tobytes()),
            ("i8.extremes", "int8", [3], i8.tobytes()),
            ("bf16.values", "bfloat16", [3], bf.tobytes()),
            ("f64.zeros", "float64", [3], zeros.tobytes()),
            ("f32.equal", "float32", [2], np.array([1, 2], dtype="<f4").tobytes())]


def cmd_gen(a):
    write_model(a.out, gen_nan(a.case))
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("expect")
    e.add_argument("a")
    e.add_argument("b")
    e.add_argument("--key-hex")
    c = sub.add_parser("compare")
    c.add_argument("expected")
    c.add_argument("actual")
    w = sub.add_parser("write")
    w.add_argument("input")
    w.add_argument("output")
    w.add_argument("--permute", action="store_true")
    w.add_argument("--remove")
    w.add_argument("--add")
    w.add_argument("--reshape")
    w.add_argument("--retype")
    w.add_argument("--set", nargs=3, action="append", metavar=("NAME", "INDEX", "VALUE"))
    g = sub.add_parser("gen")
    g.add_argument("out")
    g.add_argument("--case", required=True, choices=["nan-a", "nan-b"])
    a = p.parse_args(argv)
    return {"expect": cmd_expect, "compare": cmd_compare, "write": cmd_write,
            "gen": cmd_gen}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
