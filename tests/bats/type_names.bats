#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# One name for a type in every tool's output (ckptfs(1), TYPE NAMES): a
# torch.save file of a dozen dtypes, the names it must show torch's own
# (str(dtype) without "torch.", decided by torch, not by ckptfs), held to
# ckptfs-dump's listing, totals and --json, ckptfs-stat's table and --json,
# and ckptfs-diff's "type differs" lines and --json against the same file
# with every dtype moved on by one.

load helpers

setup() {
    T=$BATS_TEST_TMPDIR
    $PY -c 'import torch' 2>/dev/null || skip "no torch for /usr/bin/python3"
    gen "$T/a.pt" 0 >"$T/a.want"
    gen "$T/b.pt" 1 >"$T/b.want"
}

# gen OUT SHIFT: OUT a torch.save state dict w0..w11, wI of the
# (I + SHIFT)-th dtype below and shape [2, I+1]; prints its lines
# NAME<TAB>TORCH_NAME<TAB>[SHAPE] (the expected type column).
gen() {
    $PY - "$1" "$2" <<'PY'
import sys, torch
dtypes = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8,
          torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool,
          torch.complex64, torch.complex128]
out, shift = sys.argv[1], int(sys.argv[2])
sd = {"w%d" % i: torch.ones(2, i + 1).to(dtypes[(i + shift) % len(dtypes)])
      for i in range(len(dtypes))}
torch.save(sd, out)
for k, v in sd.items():
    print("%s\t%s\t[%s]" % (k, str(v.dtype).removeprefix("torch."),
                            ",".join(map(str, v.shape))))
PY
}

@test "ckptfs-dump: the type column and the totals' types are torch's names" {
    "$BUILD/ckptfs-dump" "$T/a.pt" >"$T/dump"
    grep -v '^#' "$T/dump" | cut -f1-3 | diff "$T/a.want" -
    # one totals line a type, each tensor's type being another
    grep '^# total [^:]*:' "$T/dump" | sed 's/^# total \([^:]*\):.*/\1/' >"$T/totals"
    cut -f2 "$T/a.want" | diff - "$T/totals"
}

@test "ckptfs-dump --json: type torch's name, format_type torch's own spelling, totals by type" {
    "$BUILD/ckptfs-dump" --json "$T/a.pt" >"$T/d.json"
    $PY - "$T/d.json" "$T/a.want" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
want = [l.rstrip("\n").split("\t") for l in open(sys.argv[2])]
got = [(t["name"], t["type"], "[%s]" % ",".join(map(str, t["shape"]))) for t in d["tensors"]]
assert got == [tuple(w) for w in want], (got, want)
assert [t["format_type"] for t in d["tensors"]] == ["torch." + w[1] for w in want], d
assert list(d["totals"]["by_type"]) == [w[1] for w in want], d["totals"]
PY
}

@test "ckptfs-stat: the table's and --json's types are torch's names" {
    "$BUILD/ckptfs-stat" "$T/a.pt" >"$T/table"
    tail -n +2 "$T/table" | awk -v OFS='\t' '{ print $1, $2, $3 }' | diff "$T/a.want" -
    "$BUILD/ckptfs-stat" --json "$T/a.pt" >"$T/s.json"
    $PY - "$T/s.json" "$T/a.want" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
want = [l.rstrip("\n").split("\t") for l in open(sys.argv[2])]
got = [(t["name"], t["type"], "[%s]" % ",".join(map(str, t["shape"]))) for t in d["tensors"]]
assert got == [tuple(w) for w in want], (got, want)
PY
}

@test "ckptfs-diff: a 'type differs' line a tensor, each side by torch's name; --json the same" {
    run "$BUILD/ckptfs-diff" "$T/a.pt" "$T/b.pt"
    [ "$status" -eq 1 ]
    printf '%s\n' "$output" | grep '^type differs: ' >"$T/got"
    paste "$T/a.want" "$T/b.want" |
        awk -F'\t' '{ printf "type differs: %s: %s %s, %s %s\n", $1, $2, $3, $5, $6 }' |
        diff - "$T/got"
    run "$BUILD/ckptfs-diff" --json "$T/a.pt" "$T/b.pt"
    [ "$status" -eq 1 ]
    printf '%s\n' "$output" >"$T/diff.json"
    $PY - "$T/diff.json" "$T/a.want" "$T/b.want" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
a = [l.split("\t")[1] for l in open(sys.argv[2])]
b = [l.split("\t")[1] for l in open(sys.argv[3])]
got = [(t["status"], t["a"]["type"], t["b"]["type"], t["a"]["format_type"]) for t in d["tensors"]]
assert got == [("type", x, y, "torch." + x) for x, y in zip(a, b)], got
PY
}

@test "ckptfs-diff: two types of one name (MindSpore's Int4, MindIR's QINT4X2) add each format's own spelling" {
    # a .ckpt Int4 [4] (a byte an element) and a MindIR QINT4X2 [4] (two a
    # byte): ml_dtypes' int4 both, yet not the same bytes
    $PY - "$T" "$REPO/tests/oracle" <<'PY'
import sys
sys.path.insert(0, sys.argv[2])
import ckpt_oracle as co, graph_oracle
pb = graph_oracle.mindir_module()
m = pb.ModelProto(ir_version="0.1.1", producer_name="MindSpore", model_version="2.2.0",
                  mind_ir_version=1, little_endian=True)
m.graph.name = "net"
p = m.graph.parameter.add(name="net:w", data_type=pb.TensorProto.QINT4X2, dims=[4])
p.raw_data = b"\x21\x43"
open(sys.argv[1] + "/q.mindir", "wb").write(m.SerializeToString())
co.write_file(sys.argv[1] + "/i.ckpt",
              [co.record(co.tensor_value("w", "Int4", [4], b"\x01\x02\x03\x04"))])
PY
    [ "$("$BUILD/ckptfs-dump" "$T/i.ckpt" | grep -v '^#' | cut -f2)" = int4 ]
    [ "$("$BUILD/ckptfs-dump" "$T/q.mindir" | grep -v '^#' | cut -f2)" = int4 ]
    run "$BUILD/ckptfs-diff" "$T/i.ckpt" "$T/q.mindir"
    [ "$status" -eq 1 ]
    [ "${lines[0]}" = "type differs: w: int4 (Int4) [4], int4 (QINT4X2) [2]" ]
    run "$BUILD/ckptfs-diff" --json "$T/i.ckpt" "$T/q.mindir"
    printf '%s\n' "$output" | $PY -c 'import json, sys
t, = json.load(sys.stdin)["tensors"]
assert t["status"] == "type", t
assert (t["a"]["type"], t["a"]["format_type"]) == ("int4", "Int4"), t
assert (t["b"]["type"], t["b"]["format_type"]) == ("int4", "QINT4X2"), t'
}
