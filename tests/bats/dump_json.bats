#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# ckptfs-dump --json (the man page's JSON SCHEMA) and the text listing's
# column header and totals, each held to a reader of its own: the .ckpt
# oracle, a safetensors header read in Python, the ONNX graph oracle,
# torch.load, and totals added up again in Python from the tensors.

load helpers

# the oracles' calls through one Python that imported them (helpers.bash)
setup_file() { pyserve_file_start numpy "$REPO/tests/oracle/ckpt_oracle.py" "$REPO/tests/oracle/dcp_oracle.py"; }
teardown_file() { pyserve_file_stop; }

setup() {
    T=$BATS_TEST_TMPDIR
}

# dump_json MODEL...: ckptfs-dump --json MODEL into $T/d.json (exit 0, and
# one JSON object as Python's strict parser reads it), its schema and its
# totals checked (totals() below).
dump_json() {
    "$BUILD/ckptfs-dump" --json "$@" >"$T/d.json"
    totals "$T/d.json"
}

# totals JSON: every key the schema names, of its type; each tensor's
# parameters the product of its shape; the totals, overall and by type,
# the sums over the tensors.
totals() {
    $PY - "$1" <<'PY'
import json, math, sys
d = json.load(open(sys.argv[1]))
assert set(d) <= {"file", "format", "records", "index_memory", "notes", "envelope",
                  "metadata", "tensors", "totals", "file_hex"}, sorted(d)
assert isinstance(d.get("metadata", {}), dict), d["metadata"]
assert isinstance(d["file"], str) and isinstance(d["format"], str)
assert isinstance(d["records"], int) and d["records"] >= len(d["tensors"])
want = {"tensors": 0, "parameters": 0, "bytes": 0}
by = {}
for t in d["tensors"]:
    assert isinstance(t["name"], str) and isinstance(t["dir"], str), t
    assert isinstance(t["type"], str) and isinstance(t["format_type"], str), t
    assert "dtype" not in t, t  # the old MindSpore spelling: "type" is every type's
    assert all(isinstance(n, int) for n in t["shape"]), t
    assert t["parameters"] == math.prod(t["shape"]), t
    assert isinstance(t["bytes"], int) and t["bytes"] >= 0, t
    assert t["extents"] and all(set(e) <= {"file", "offset", "length"} for e in t["extents"])
    for k in ("tensors", "parameters", "bytes"):
        n = 1 if k == "tensors" else t[k]
        want[k] += n
        by.setdefault(t["type"], {"tensors": 0, "parameters": 0, "bytes": 0})[k] += n
tot = d["totals"]
assert {k: tot[k] for k in want} == want, (tot, want)
assert tot["by_type"] == by, (tot["by_type"], by)
print("%d tensors, %d parameters, %d bytes" % (want["tensors"], want["parameters"],
                                              want["bytes"]))
PY
}

@test "--json of .ckpt files: each tensor's name, type, shape and bytes the oracle's, its bytes where it says" {
    $ORACLE gen "$T/a.ckpt" --case alltypes
    for f in "$MS/mindarmour_checkpoint_lenet-10_1875.ckpt" "$T/a.ckpt" \
             "$FIXTURES/mindspore_bridge/competition_lstm_crf_20_63.ckpt"; do
        dump_json "$f"
        $ORACLE parse "$f" >"$T/ref.json"
        $PY - "$f" "$T/d.json" "$T/ref.json" <<'PY'
import hashlib, json, sys
data = open(sys.argv[1], "rb").read()
d = json.load(open(sys.argv[2]))
ref = json.load(open(sys.argv[3]))
assert d["file"] == sys.argv[1] and d["format"] == "ckpt", (d["file"], d["format"])
# the tensors a mount shows: the oracle's entries that have an out
ref = [e for e in ref if "sha256" in e]
assert [t["dir"] for t in d["tensors"]] == [e["dir"] for e in ref]
for t, e in zip(d["tensors"], ref):
    assert t["name"] == e["tag"], (t["name"], e["tag"])
    assert t["format_type"] == e["type"], (t, e)
    assert t["shape"] == e["dims"], (t, e)
    assert t["bytes"] == e["nbytes"], (t, e)
    if not t.get("decoded"):
        x, = t["extents"]
        assert "file" not in x and x["length"] == e["nbytes"], t
        got = hashlib.sha256(data[x["offset"]:x["offset"] + x["length"]]).hexdigest()
        assert got == e["sha256"], t["name"]
print("%s: %d tensors" % (sys.argv[1], len(ref)))
PY
    done
}

@test "--json of safetensors files: names, dtypes, shapes, bytes and offsets as the header says" {
    local SF=$FIXTURES/safetensors
    for f in "$SF/hf-safetensors-samples/overall.safetensors" "$SF/burn/mnist.safetensors" \
             "$SF/peft-gpt2-lora/adapter_model.safetensors" "$SF/burn/boolean.safetensors"; do
        dump_json "$f"
        $PY - "$f" "$T/d.json" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n, = struct.unpack("<Q", raw[:8])
head = json.loads(raw[8:8 + n])
head.pop("__metadata__", None)
d = json.load(open(sys.argv[2]))
assert d["format"] == "safetensors", d["format"]
got = {t["name"]: t for t in d["tensors"]}
assert sorted(got) == sorted(head), (sorted(got), sorted(head))
for name, h in head.items():
    t = got[name]
    begin, end = h["data_offsets"]
    assert t["format_type"] == h["dtype"], (name, t["format_type"], h["dtype"])
    assert t["shape"] == h["shape"], (name, t["shape"], h["shape"])
    assert t["bytes"] == end - begin, (name, t["bytes"], end - begin)
    x, = t["extents"]
    assert (x["offset"], x["length"]) == (8 + n + begin, end - begin), (name, x)
print("%s: %d tensors" % (sys.argv[1], len(head)))
PY
    done
}

@test "--json of ONNX files: the graph oracle's initializers and constants" {
    for f in "$ONNX_FIX/tiny_conv2d.onnx" "$ONNX_FIX/dtypes_burn.onnx" \
             "$ONNX_FIX/typed_fields_keras2onnx.onnx"; do
        dump_json "$f"
        $GRAPH_ORACLE list "$f" >"$T/ref.tsv"
        $PY - "$T/d.json" "$T/ref.tsv" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["format"] == "onnx", d["format"]
ref = [l.rstrip("\n").split("\t") for l in open(sys.argv[2])]
got = [(t["dir"], t["format_type"], "[%s]" % ",".join(map(str, t["shape"])), str(t["bytes"]))
       for t in d["tensors"]]
assert got == [tuple(r[:4]) for r in ref], (got, ref)
print("%d tensors" % len(ref))
PY
    done
}

@test "--json of PyTorch files: the state dict torch.load reads" {
    $PY -c 'import torch' 2>/dev/null || skip "no torch for /usr/bin/python3"
    for f in "$FIXTURES/pytorch/torchtune_tiny_fair_checkpoint.pt" \
             "$FIXTURES/pytorch/candle_test.pt"; do
        dump_json "$f"
        $PY - "$f" "$T/d.json" <<'PY'
import json, sys, torch
sd = torch.load(sys.argv[1], map_location="cpu")
d = json.load(open(sys.argv[2]))
assert d["format"] == "pytorch", d["format"]
got = {t["name"]: t for t in d["tensors"]}
assert sorted(got) == sorted(sd), (sorted(got), sorted(sd))
for name, v in sd.items():
    t = got[name]
    assert t["format_type"] == str(v.dtype), (name, t["format_type"], v.dtype)
    assert t["type"] == str(v.dtype).removeprefix("torch."), (name, t["type"], v.dtype)
    assert t["shape"] == list(v.shape), (name, t["shape"], v.shape)
    assert t["bytes"] == v.numel() * v.element_size(), (name, t["bytes"])
print("%s: %d tensors" % (sys.argv[1], len(sd)))
PY
    done
}

@test "--json: a name that is not UTF-8 is written with \\xhh escapes beside its exact bytes in name_hex" {
    # MindSpore's tag is a protobuf string, but its files are not checked:
    # the records are made with a placeholder tag of the same length, then
    # the placeholder's bytes replaced with the name's
    $PY - "$T/raw.ckpt" "$REPO/tests/oracle" <<'PY'
import sys
sys.path.insert(0, sys.argv[2])
import numpy as np, ckpt_oracle as o
rng = np.random.default_rng(7)
recs = []
for tag in [b"plain", b"bad\xff\xfe", b"cut\xe2\x82", b"surrogate\xed\xa0\x80",
            b"back\\x41", "\u00fc-ok".encode()]:
    ph = b"Q" * len(tag)
    r = o.record(o.tensor_value(ph.decode(), "Float32", [3], o.random_tensor(rng, "Float32", [3])))
    assert r.count(ph) == 1
    recs.append(r.replace(ph, tag))
o.write_file(sys.argv[1], recs)
PY
    dump_json "$T/raw.ckpt"
    $PY - "$T/d.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
want = [b"plain", b"bad\xff\xfe", b"cut\xe2\x82", b"surrogate\xed\xa0\x80", b"back\\x41",
        "\u00fc-ok".encode()]
assert len(d["tensors"]) == len(want)
for t, raw in zip(d["tensors"], want):
    try:
        text = raw.decode("utf-8")
        assert t["name"] == text and "name_hex" not in t, t
    except UnicodeDecodeError:
        assert bytes.fromhex(t["name_hex"]) == raw, t
        assert t["name"] == raw.decode("utf-8", "backslashreplace"), t
print("ok")
PY
}

@test "--json of a run directory: its checkpoints as the text listing gives them" {
    local RUN=$FIXTURES/mindspore_run_dir/qishna_lenet_modelcheckpoint
    "$BUILD/ckptfs-dump" --json -o settle=0 "$RUN" >"$T/d.json"
    "$BUILD/ckptfs-dump" -o settle=0 "$RUN" >"$T/d.txt"
    $PY - "$RUN" "$T/d.json" "$T/d.txt" <<'PY'
import json, os, sys
d = json.load(open(sys.argv[2]))
lines = open(sys.argv[3]).read().splitlines()
assert d["file"] == sys.argv[1] and d["format"] == "run_dir"
rows = [l.split("\t") for l in lines[1:]]
assert len(d["checkpoints"]) == len(rows) == d["totals"]["checkpoints"]
for c, r in zip(d["checkpoints"], rows):
    es = "epoch %d step %d" % (c["epoch"], c["step"]) if "epoch" in c else "-"
    assert [c["name"], c["file"], c["format"], es,
            "does not open: " + c["error"] if "error" in c else
            "complete" if c["complete"] else "being written"] == r, (c, r)
    assert ("opens" in c) == c["complete"] and c.get("opens", True) == ("error" not in c), c
    assert os.path.exists(os.path.join(sys.argv[1], c["file"])), c
assert d["totals"]["complete"] == sum(c["complete"] for c in d["checkpoints"])
assert lines[0].endswith(", latest %s" % (d["latest"] or "none")), lines[0]
print(len(rows), "checkpoints")
PY
}

@test "the text listing: a column header after the first line, and the totals at the end, as the oracle counts them" {
    $ORACLE gen "$T/a.ckpt" --case alltypes
    # map tensors' parts are typed by numpy names: float32 totals with Float32
    $ORACLE gen "$T/m.ckpt" --case maptensor
    for f in "$MS/mindarmour_checkpoint_lenet-10_1875.ckpt" "$T/a.ckpt" "$T/m.ckpt"; do
        "$BUILD/ckptfs-dump" "$f" >"$T/d.txt"
        $ORACLE parse "$f" >"$T/ref.json"
        $PY - "$T/d.txt" "$T/ref.json" "$REPO/tests/oracle" <<'PY'
import json, math, sys
sys.path.insert(0, sys.argv[3])
import stat_oracle as so
lines = open(sys.argv[1]).read().splitlines()
ref = [e for e in json.load(open(sys.argv[2])) if "sha256" in e]
for e in ref:  # totals by the one name of each type (numpy's, by the oracle)
    e["type"] = so.canonical_name(e["type"])
assert lines[1] == "# name\ttype\tshape\tbytes\textents\tlayout", lines[1]
rows = [l for l in lines[2:] if not l.startswith("#")]
assert [r.split("\t")[0] for r in rows] == [e["dir"] for e in ref]
# the '#' lines after the tensors, in order: all, then each type as it
# first appears
tail = lines[2 + len(rows):]
assert all(l.startswith("# total") for l in tail), tail
def line(label, es):
    return "# %s: %d tensors, %d parameters, %d bytes" % (
        label, len(es), sum(math.prod(e["dims"]) for e in es), sum(e["nbytes"] for e in es))
types = list(dict.fromkeys(e["type"] for e in ref))
want = [line("total", ref)] + [line("total " + t, [e for e in ref if e["type"] == t])
                               for t in types]
assert tail == want, (tail, want)
print(tail[0])
PY
    done
}

@test "the text totals are --json's totals" {
    local f=$FIXTURES/safetensors/burn/mnist.safetensors
    dump_json "$f"
    "$BUILD/ckptfs-dump" "$f" >"$T/d.txt"
    $PY - "$T/d.json" "$T/d.txt" <<'PY'
import json, sys
tot = json.load(open(sys.argv[1]))["totals"]
tail = [l for l in open(sys.argv[2]).read().splitlines() if l.startswith("# total")]
fmt = "# %s: %d tensors, %d parameters, %d bytes"
want = [fmt % ("total", tot["tensors"], tot["parameters"], tot["bytes"])]
want += [fmt % ("total " + k, v["tensors"], v["parameters"], v["bytes"])
         for k, v in tot["by_type"].items()]
assert tail == want, (tail, want)
PY
}

@test "--json is one of the options --help lists" {
    "$BUILD/ckptfs-dump" --help | grep -q -- '--json'
}

# canon_oracle JSON MODEL KIND: each tensor's "type" in ckptfs-dump --json
# MODEL's JSON is the name the format's own library gives its element type,
# never ckptfs's table: numpy's dtype name (np.dtype("<f4").name, float32)
# of the element type the format's definition names (safetensors' letter
# and bits, ONNX's TensorProto.DataType through onnx's numpy mapping,
# MindSpore's and OneFlow's types through their oracles' numpy dtypes),
# torch's name for a PyTorch file (torch.load's dtype without "torch.")
# and for bfloat16, which numpy lacks; for the raw-byte types, which
# neither numpy 1.24 nor torch 1.13 has, ml_dtypes' names, written out.
# Prints the (format_type, type) pairs seen.
canon_oracle() {
    $PY - "$@" "$REPO/tests/oracle" <<'PY'
import json, struct, sys
sys.path.insert(0, sys.argv[4])
import numpy as np, torch
d, model, kind = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
ML_DTYPES = {"F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "INT4": "int4",
             "FLOAT8E4M3FN": "float8_e4m3fn", "UINT4": "uint4", "Int4": "int4"}
BF16 = str(torch.bfloat16).removeprefix("torch.")


def safetensors(st):
    if st in ML_DTYPES:
        return ML_DTYPES[st]
    if st == "BF16":
        return BF16
    if st == "BOOL":
        return np.dtype(bool).name
    letter, bits = st[0], int(st[1:])  # F32, I64, U8, C64: kind and bits
    return np.dtype("<%s%d" % (letter.lower(), bits // 8)).name


def onnx_type(name):
    import onnx
    from onnx import helper
    if name in ML_DTYPES:
        return ML_DTYPES[name]
    code = onnx.TensorProto.DataType.Value(name)
    if name == "BFLOAT16":  # numpy has none: onnx maps it to its storage
        return BF16
    if name == "STRING":
        return str.__name__
    if hasattr(helper, "tensor_dtype_to_np_dtype"):
        return np.dtype(helper.tensor_dtype_to_np_dtype(code)).name
    from onnx import mapping
    return np.dtype(mapping.TENSOR_TYPE_TO_NP_TYPE[code]).name


def mindspore(ms):
    import ckpt_oracle as co
    if ms in ML_DTYPES:
        return ML_DTYPES[ms]
    if ms == "BFloat16":
        return BF16
    if ms == "str":
        return str.__name__
    return np.dtype(co.MS_TYPES[ms][2]).name


def oneflow(of):
    import oneflow_oracle as oo
    return mindspore(oo.OF_TYPES[of][2])


want = {}
if kind == "safetensors":
    raw = open(model, "rb").read()
    n, = struct.unpack("<Q", raw[:8])
    want = {k: safetensors(v["dtype"]) for k, v in json.loads(raw[8:8 + n]).items()
            if k != "__metadata__"}
elif kind == "pytorch":
    want = {k: str(v.dtype).removeprefix("torch.")
            for k, v in torch.load(model, map_location="cpu").items()}
of_kind = {"ckpt": mindspore, "onnx": onnx_type, "oneflow": oneflow}
for t in d["tensors"]:
    own = t["format_type"]
    exp = want[t["name"]] if kind in ("safetensors", "pytorch") else of_kind[kind](own)
    assert t["type"] == exp, (t["name"], own, t["type"], exp)
print(sorted({(t["format_type"], t["type"]) for t in d["tensors"]}))
PY
}

@test "--json type: one name for a type across formats (F32, FLOAT, torch.float32, Float32, kFloat: float32), the libraries' own; format_type the file's" {
    $PY -c 'import torch, onnx' 2>/dev/null || skip "no torch or onnx for /usr/bin/python3"
    $ORACLE gen "$T/a.ckpt" --case alltypes
    $ORACLE gen "$T/i4.ckpt" --case int4
    local f kind
    while read -r kind f; do
        dump_json "$f"
        canon_oracle "$T/d.json" "$f" "$kind" | tee -a "$T/seen"
    done <<LIST
ckpt $T/a.ckpt
ckpt $T/i4.ckpt
onnx $ONNX_FIX/dtypes_burn.onnx
safetensors $FIXTURES/safetensors/hf-safetensors-samples/overall.safetensors
safetensors $FIXTURES/safetensors/burn/boolean.safetensors
pytorch $FIXTURES/pytorch/torchtune_tiny_fair_checkpoint.pt
oneflow $FIXTURES/oneflow/new_pickled_3x3_i3o3_conv2d_params
LIST
    # float32 came from each of the five formats' spellings of it
    for own in Float32 FLOAT F32 torch.float32 kFloat; do
        grep -qF "('$own', 'float32')" "$T/seen"
    done
}

@test "--json holds all the text listing says: each tensor line rebuilt from it (DCP, OneFlow snapshots, a str tensor, a CRC trailer)" {
    local DCP_ORACLE="$PY $REPO/tests/oracle/dcp_oracle.py"
    $DCP_ORACLE gen "$T/strided" --case strided
    $DCP_ORACLE gen "$T/grid" --case grid
    $ORACLE gen "$T/s.ckpt" --case strs
    $ORACLE gen "$T/crc.ckpt" --case crc
    for f in "$T/strided" "$T/grid" "$T/s.ckpt" "$T/crc.ckpt" \
             "$FIXTURES/oneflow/new_pickled_3x3_i3o3_conv2d_params" \
             "$FIXTURES/oneflow/legacy_v2_java_mlp_adam"; do
        dump_json "$f"
        "$BUILD/ckptfs-dump" "$f" >"$T/d.txt"
        $PY - "$T/d.json" "$T/d.txt" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
lines = open(sys.argv[2]).read().splitlines()
head = "# %s: format %s, %d tensors (%d records), index memory %d bytes" % (
    d["file"], d["format"], len(d["tensors"]), d["records"], d["index_memory"])
head += "".join(", " + d[k] for k in ("notes", "envelope") if k in d)
assert lines[0] == head, (lines[0], head)
def line(t):
    ext = ",".join(("%s:" % e["file"] if "file" in e else "") + "%d+%d" % (e["offset"], e["length"])
                   for e in t["extents"])
    f = [t["dir"], t["type"], "[%s]" % ",".join(map(str, t["shape"])), str(t["bytes"]),
         ("decoded " if t.get("decoded") else "") + ext]
    if "layout" in t:
        f.append("%s, %d-byte runs" % (t["layout"]["kind"], t["layout"]["run"]))
    return "\t".join(f)
rows = [l for l in lines if not l.startswith("#")]
assert rows == [line(t) for t in d["tensors"]], (rows, [line(t) for t in d["tensors"]])
print(lines[0])
PY
    done
}

@test "--json of an encrypted model: its envelope, and the plain model's tensors and totals" {
    local plain=$MS/mindarmour_checkpoint_lenet-10_1875.ckpt
    (umask 077 && printf '0123456789ABCDEF' >"$T/k")
    "$BUILD/ckptfs-convert" -q -o enc_mode=AES-GCM,key_file="$T/k" "$plain" "$T/enc.ckpt"
    dump_json -o noindex,key_file="$T/k" "$T/enc.ckpt"
    mv "$T/d.json" "$T/enc.json"
    dump_json --no-index "$plain"
    $PY - "$T/enc.json" "$T/d.json" <<'PY'
import json, sys
enc, plain = (json.load(open(p)) for p in sys.argv[1:])
assert enc["envelope"] == "AES-GCM" and "envelope" not in plain, (enc.get("envelope"),)
# offsets are the plaintext's, so the same as the plain file's
assert enc["tensors"] == plain["tensors"] and enc["totals"] == plain["totals"]
PY
}
