#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# What a conversion keeps beyond the tensors' bytes: safetensors'
# "__metadata__" (through ckptfs-convert, the as=safetensors view and a
# writable mount's save; shown by ckptfs-dump), and a OneFlow snapshot's
# order through a .ckpt and back.  Every header is read by Python by hand
# (struct and json), every order by the oracles, never by the code under
# test.

load helpers

CONVERT=$BUILD/ckptfs-convert
DUMP=$BUILD/ckptfs-dump
ST=$FIXTURES/safetensors
OF=$FIXTURES/oneflow
PEFT=$ST/peft-gpt2-lora/adapter_model.safetensors
SAMPLES=$ST/hf-safetensors-samples/overall.safetensors
PLAIN=$ST/burn/multi_layer.safetensors

setup() {
    T=$BATS_TEST_TMPDIR
}

# meta FILE...: each file's "__metadata__" as compact JSON in its order, or
# "none", one a line; read from the header by hand.
meta() {
    $PY - "$@" <<'PY'
import json, struct, sys
for p in sys.argv[1:]:
    with open(p, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    m = h.get("__metadata__")
    print("none" if m is None else json.dumps(m, separators=(",", ":")))
PY
}

# same_meta WANT_FILE FILE...: every FILE has WANT_FILE's "__metadata__".
same_meta() {
    local want got f
    want=$(meta "$1")
    shift
    for f in "$@"; do
        got=$(meta "$f")
        [ "$got" = "$want" ] || { echo "$f: $got, not $want" >&2; return 1; }
    done
}

@test "safetensors to safetensors, to a set and a set to one file: __metadata__ kept exactly" {
    for f in "$PEFT" "$SAMPLES" "$PLAIN"; do
        rm -rf "$T/out" && mkdir "$T/out"
        "$CONVERT" -q "$f" "$T/out/one.safetensors"
        same_meta "$f" "$T/out/one.safetensors"
        # small shards: a set of several, each shard with the file's map
        "$CONVERT" -q -o max_shard_size=2K "$f" "$T/out/model.safetensors.index.json"
        shards=("$T"/out/model-*-of-*.safetensors)
        [ "${#shards[@]}" -ge 1 ]
        same_meta "$f" "${shards[@]}"
        # and the set back to one file
        "$CONVERT" -q "$T/out/model.safetensors.index.json" "$T/out/back.safetensors"
        same_meta "$f" "$T/out/back.safetensors"
    done
    [ "$(meta "$PEFT")" = '{"format":"pt"}' ] && [ "$(meta "$PLAIN")" = none ]
    # a set made by hand, each shard with a map of several keys (order kept)
    mkdir "$T/hand"
    $PY - "$T/hand" <<'PY'
import json, struct, sys
d = sys.argv[1]
meta = {"format": "pt", "zeta": "1", "alpha": "two words"}
weights = {}
for i, name in enumerate(["w.a", "w.b"]):
    shard = "model-%05d-of-00002.safetensors" % (i + 1)
    h = json.dumps({"__metadata__": meta,
                    name: {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}},
                   separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(d + "/" + shard, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + struct.pack("<2f", i, i + 0.5))
    weights[name] = shard
with open(d + "/model.safetensors.index.json", "w") as f:
    json.dump({"metadata": {"total_size": 16}, "weight_map": weights}, f)
PY
    "$CONVERT" -q "$T/hand/model.safetensors.index.json" "$T/hand.safetensors"
    [ "$(meta "$T/hand.safetensors")" = '{"format":"pt","zeta":"1","alpha":"two words"}' ]
}

@test "another format to safetensors: {\"format\":\"pt\"}, in ckptfs-convert's file and the as=safetensors view alike" {
    in=$MS/mindarmour_checkpoint_lenet-10_1875.ckpt
    "$CONVERT" -q "$in" "$T/c.safetensors"
    [ "$(meta "$T/c.safetensors")" = '{"format":"pt"}' ]
    "$CONVERT" -q --to oneflow "$in" "$T/snap"
    "$CONVERT" -q "$T/snap" "$T/s.safetensors"
    [ "$(meta "$T/s.safetensors")" = '{"format":"pt"}' ]
    mount_fg "$in" "$T/v" -o as=safetensors
    [ "$(meta "$T/v/model.safetensors")" = '{"format":"pt"}' ]
    cmp "$T/v/model.safetensors" "$T/c.safetensors"
    # a safetensors file's view keeps its own, as convert does
    mount_fg "$SAMPLES" "$T/w" -o as=safetensors
    same_meta "$SAMPLES" "$T/w/model.safetensors"
    mount_fg "$PLAIN" "$T/x" -o as=safetensors
    same_meta "$PLAIN" "$T/x/model.safetensors"
}

@test "a writable mount's save keeps __metadata__: an edit in place, and a tensor added" {
    f=$T/s.safetensors
    cp "$SAMPLES" "$f"
    chmod 0644 "$f"
    mount_fg "$f" "$T/m" -o commit=manual
    printf '\x07' | dd of="$T/m/B/out" bs=1 seek=2 conv=notrunc status=none
    touch "$T/m/snapshot_done"
    same_meta "$SAMPLES" "$f"
    [ "$(od -An -tx1 -j2 -N1 "$T/m/B/out" | tr -d ' ')" = 07 ]
    # a new tensor: the file laid out anew, its map still there
    mkdir "$T/m/added"
    printf 'shape {\n  dim: 2\n}\ndata_type: kFloat\n' >"$T/m/added/meta"
    head -c 8 /dev/zero >"$T/m/added/out"
    touch "$T/m/snapshot_done"
    same_meta "$SAMPLES" "$f"
    $PY -c '
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
assert "added" in json.loads(b[8:8 + n])' "$f"
}

@test "ckptfs-dump shows __metadata__: a '# metadata:' line, and --json's \"metadata\"" {
    run "$DUMP" "$SAMPLES"
    [ "$status" -eq 0 ] && [ "${lines[1]}" = "# metadata: test=a" ]
    [ "${lines[2]}" = $'# name\ttype\tshape\tbytes\textents\tlayout' ]
    run "$DUMP" "$PEFT"
    [ "${lines[1]}" = "# metadata: format=pt" ]
    run "$DUMP" "$PLAIN"
    [ "$status" -eq 0 ] && ! grep -q '^# metadata' <<<"$output"
    for f in "$SAMPLES" "$PEFT" "$PLAIN"; do
        "$DUMP" --json "$f" >"$T/d.json"
        $PY - "$f" "$T/d.json" <<'PY'
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    want = json.loads(f.read(n)).get("__metadata__")
got = json.load(open(sys.argv[2])).get("metadata")
assert got == want, (got, want)
PY
    done
}

# order SNAPSHOT: its tensors' names as OneFlow's load sees them, one a
# line: pickled_data's order when it has one, else the names sorted (the
# oracle's reading, which never runs the code under test).
order() {
    $PY - "$REPO/tests/oracle" "$1" <<'PY'
import os, sys
sys.path.insert(0, sys.argv[1])
import oneflow_oracle
for name, _sub in oneflow_oracle.entries(sys.argv[2]):
    sys.stdout.buffer.write(name + b"\n")
PY
}

# ckpt_order FILE: a .ckpt's tensor names in the file's order.
ckpt_order() {
    $ORACLE parse "$1" | $PY -c '
import json, sys
for e in json.load(sys.stdin):
    if "sha256" in e:
        sys.stdout.buffer.write(e["tag"].encode("utf-8", "surrogateescape") + b"\n")'
}

@test "a OneFlow snapshot to .ckpt and back keeps its tensors' order, as OneFlow's load sees it" {
    "$PY" "$REPO/tests/oracle/oneflow_pickled.py" gen "$T/gen" --count 9 --seed 3
    for s in "$OF/new_pickled_3x3_i3o3_conv2d_params" "$T/gen" "$OF/legacy_v2_java_mlp_adam" \
             "$OF/graph_save_affine_with_parameter"; do
        echo "== $s"
        rm -rf "$T/x.ckpt" "$T/back"
        "$CONVERT" -q "$s" "$T/x.ckpt"
        "$CONVERT" -q --to oneflow "$T/x.ckpt" "$T/back"
        order "$s" >"$T/want"
        ckpt_order "$T/x.ckpt" >"$T/ckpt"
        order "$T/back" >"$T/got"
        [ -s "$T/want" ]
        diff "$T/want" "$T/ckpt"
        diff "$T/want" "$T/got"
        # the same bytes under each name, and what OneFlow's legacy load
        # asserts still there
        $PY "$REPO/tests/oracle/convert_oracle.py" compare "$s" "$T/back"
        [ -f "$T/back/snapshot_done" ]
    done
    # names already sorted: no pickled_data, a plain legacy snapshot
    [ ! -e "$T/back/pickled_data" ]
    # not sorted: the pickle lists them, each at its name's directory
    "$CONVERT" -q "$T/gen" "$T/g.ckpt"
    "$CONVERT" -q --to oneflow "$T/g.ckpt" "$T/gback"
    [ -f "$T/gback/pickled_data" ]
    run "$PY" "$REPO/tests/oracle/oneflow_pickled.py" names "$T/gback"
    [ "$status" -eq 0 ] && [ "${#lines[@]}" -eq 9 ]
    for l in "${lines[@]}"; do
        [ -d "$T/gback/${l#*$'\t'}" ]
    done
}
