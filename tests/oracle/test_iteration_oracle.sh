#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Self-checks of tests/oracle/iteration_oracle.py (the MindSpore Transformers Checkpoint 2.0
# iteration-directory oracle), without a mount: every gen case assembles back to its full
# model (tree compared file by file with the tree of full.safetensors), slices and
# metadata.json fields are checked against values worked out by hand from the research
# notes' rules, a changed slice byte shows in the tree, and every bad set is refused with
# one line.  Prints ok/not ok per check; exits non-zero if any check failed.
set -u

HERE=$(cd "$(dirname "$0")" && pwd)
ORACLE=(/usr/bin/python3 "$HERE/iteration_oracle.py")
. "$HERE/selfcheck.sh"
IT=iteration_00000010

# --- gen -> tree == the full model ---------------------------------------------------------

for c in $(oracle gen --help | grep -oE '\{[a-z0-9,]+\}' | head -1 | tr -d '{}' | tr ',' ' '); do
    [ "$c" = random ] && continue   # checked over many seeds below
    for prefix in none my-llama-7b; do
        D=$T/$c-$prefix
        opt=()
        [ "$prefix" = none ] || opt=(--prefix "$prefix")
        check "gen $c ($prefix)" oracle gen "$D" --case "$c" --seed 3 "${opt[@]}"
        oracle gen "$T/again" --case "$c" --seed 3 "${opt[@]}" &&
            diff -r "$D" "$T/again" > /dev/null &&
            ok "gen $c is deterministic" || nok "gen $c is not deterministic"
        rm -rf "$T/again"
        check "tree $c" oracle tree "$D/$IT" "$D/tree"
        check "tree of $c's full.safetensors" oracle file-tree "$D/full.safetensors" "$D/full"
        check "tree $c ($prefix) equals the full model's tree" diff -r "$D/tree" "$D/full"
        [ "$(ls "$D/tree" | wc -l)" -gt 3 ] && ok "$c: $(ls "$D/tree" | wc -l) entries" ||
            nok "$c: tree of $(ls "$D/tree" | wc -l) entries"
        [ "$(cat "$D/latest_checkpointed_iteration.txt")" = 10 ] &&
            [ "$(wc -c < "$D/latest_checkpointed_iteration.txt")" -eq 2 ] &&
            ok "$c: tracker holds 10, no newline" || nok "$c: tracker"
    done
done

# random layouts and save modes (what iteration_dir.bats mounts): each assembles to its model
bad_seeds=""
for s in $(seq 1 60); do
    D=$T/random-$s
    { oracle gen "$D" --case random --seed "$s" && oracle tree "$D/$IT" "$D/tree" &&
      oracle file-tree "$D/full.safetensors" "$D/full" && diff -r "$D/tree" "$D/full"; } \
        > /dev/null 2>&1 || bad_seeds="$bad_seeds $s"
    rm -rf "$D"
done
[ -z "$bad_seeds" ] && ok "60 random sets assemble to their full models" ||
    nok "random seeds whose tree is not the full model:$bad_seeds"

# mutate: one change to metadata.json; some seeds leave a valid set, others not
acc=0 ref=0
for s in $(seq 1 30); do
    D=$T/mut-$s
    oracle gen "$D" --case tp2 --seed "$s" || continue
    oracle mutate "$D/$IT" --seed "$s" > /dev/null || continue
    if oracle tree "$D/$IT" "$D/tree" 2> /dev/null; then
        acc=$((acc + 1))
    else
        ref=$((ref + 1))
    fi
    rm -rf "$D"
done
[ "$acc" -gt 0 ] && [ "$ref" -gt 10 ] && ok "mutate: $acc sets still valid, $ref refused" ||
    nok "mutate: $acc valid, $ref refused"

# --- slices and metadata at positions worked out by hand -------------------------------------
# tensor_map k names device_matrix[len-1-k]; a list of axes is split by all, the first major;
# slice index = row-major over axis_fragmentations; device position i = rank i (rank_list 0..).
check "hand-worked slices, chunks and storage entries" py "$T" "$HERE" <<'EOF'
import json, os, sys
import numpy as np
sys.path.insert(0, sys.argv[2])
import safetensors_oracle as so
T = sys.argv[1]
IT = "iteration_00000010"

def load(path):
    return {e.tag.decode(): np.frombuffer(e.out, so.MAPPING[e.ms_type][2]).reshape(e.shape)
            for e in so.load_reference(path).entries}

def same(a, b, what):
    assert a.shape == b.shape and a.tobytes() == b.tobytes(), what

def meta(case):
    return json.load(open(f"{T}/{case}/{IT}/metadata.json"))

# tp2: device_matrix [2,2] (dp, mp); rank 1 = (dp 0, mp 1), rank 2 = (dp 1, mp 0)
full = load(f"{T}/tp2-none/full.safetensors")
r1 = load(f"{T}/tp2-none/{IT}/model-0000001-0000004.safetensors")
r2 = load(f"{T}/tp2-none/{IT}/model-0000002-0000004.safetensors")
w = "model.layers.0."
same(r1[w + "attention.wq.weight"], full[w + "attention.wq.weight"][4:8], "[0,-1] rank 1 rows 4:8")
same(r2[w + "attention.wq.weight"], full[w + "attention.wq.weight"][0:4], "[0,-1] rank 2 rows 0:4")
same(r1[w + "attention.wo.weight"], full[w + "attention.wo.weight"][:, 4:8], "[-1,0] rank 1")
same(r1[w + "mlp.w1.weight"], full[w + "mlp.w1.weight"][0:4, 3:6], "[1,0] rank 1")
same(r2[w + "mlp.w1.weight"], full[w + "mlp.w1.weight"][4:8, 0:3], "[1,0] rank 2")
same(r1[w + "mlp.w2.weight"], full[w + "mlp.w2.weight"][2:4, 0:3], "[0,1] rank 1")
same(r2[w + "mlp.w2.weight"], full[w + "mlp.w2.weight"][0:2, 3:6], "[0,1] rank 2")
same(r2["model.pos_ids"], full["model.pos_ids"][2:4], "[1,-1] rank 2")
same(r1["model.norm.weight"], full["model.norm.weight"], "replicated")
assert r1["model.scale"].shape == ()
o3 = load(f"{T}/tp2-none/{IT}/opt-0000003-0000004.safetensors")
assert "model.norm.weight" not in o3 and "global_step" in o3
a = "adam_m.model.layers.0.mlp.w1.weight"
same(o3[a], full[a][4:8, 3:6], "opt [1,0] rank 3")
m = meta("tp2-none")
p = m["state_dict_metadata"][w + "mlp.w2.weight"]
assert p["axis_fragmentations"] == [2, 2] and p["global_shape"] == [4, 6]
# positions (dp,mp) 00 01 10 11 hold slices mp*2+dp: chunks in rank order 0, 2, 1, 3
assert [c["global_offset"] for c in p["chunk"]] == [[0], [2], [1], [3]], p["chunk"]
assert all(c["local_shape"] == [2, 3] for c in p["chunk"])
assert p["properties"]["dtype"] == "Float16"
assert list(p["layout"]) == ["device_matrix", "tensor_map", "interleaved_parallel", "alias_name",
                             "rank_list"]
q = m["state_dict_metadata"][w + "attention.wq.weight"]
assert q["properties"]["replica_id"] == [0, 0, 1, 1]
st = m["storage_data"]
assert st["('model.layers.0.attention.wq.weight', (1,))"] == [
    {"file_name": "model-0000001-0000004.safetensors", "storage_rank": 1, "rank_group": [1, 3]},
    {"file_name": "model-0000003-0000004.safetensors", "storage_rank": 3, "rank_group": [1, 3]}]
assert st["('global_step', (0,))"][2]["file_name"] == "opt-0000002-0000004.safetensors"
assert m["state_dict_metadata"]["model.scale"]["global_shape"] == []
assert len(st["('model.norm.weight', (0,))"]) == 4

# multiaxis: [2,2,2] (dp, cp, tp); rank 5 = (1,0,1), rank 6 = (1,1,0)
full = load(f"{T}/multiaxis-none/full.safetensors")
r5 = load(f"{T}/multiaxis-none/{IT}/model-0000005-0000008.safetensors")
r6 = load(f"{T}/multiaxis-none/{IT}/model-0000006-0000008.safetensors")
same(r5["model.embed.weight"], full["model.embed.weight"][2:4], "[[1,0],-1] rank 5: cp 0 tp 1")
same(r6["model.embed.weight"], full["model.embed.weight"][4:6], "[[1,0],-1] rank 6: cp 1 tp 0")
same(r5["model.proj.weight"], full["model.proj.weight"][:, 4:6], "[-1,[2,1]] rank 5: dp 1 cp 0")
same(r6["model.proj.weight"], full["model.proj.weight"][:, 6:8], "[-1,[2,1]] rank 6: dp 1 cp 1")
# research notes §3.5: [2,0] on [8,6], rank 5 holds slice 3 = rows 4:8, cols 3:6
same(r5["model.ffn.weight"], full["model.ffn.weight"][4:8, 3:6], "[2,0] rank 5")
same(r6["model.mix.weight"], full["model.mix.weight"][0:2, :, 6:8], "[0,-1,[2,1]] rank 6")
f = meta("multiaxis-none")["state_dict_metadata"]["model.ffn.weight"]
assert f["properties"]["replica_id"] == [0, 0, 1, 1, 0, 0, 1, 1]
assert [c["global_offset"][0] for c in f["chunk"]] == [0, 1, 2, 3]
e = meta("multiaxis-none")["state_dict_metadata"]["model.embed.weight"]
assert e["axis_fragmentations"] == [4, 1] and e["layout"]["tensor_map"] == [[1, 0], -1]

# dedup: opt files 0..3 are ranks 0,1,2,4; each slice once
st = meta("dedup-none")["storage_data"]
assert st["('adam_m.model.small', (0,))"] == [
    {"file_name": "opt-0000003-0000004.safetensors", "storage_rank": 4, "rank_group": [0, 1, 4, 5]}]
assert all(len(v) == 1 for v in st.values())
files = sorted(os.listdir(f"{T}/dedup-none/{IT}"))
want = [f"opt-000000{i}-0000004.safetensors" for i in range(4)]
assert [n for n in files if n.startswith("opt-")] == want
count = {}
for n in files:
    if n.endswith(".safetensors"):
        for t in load(f"{T}/dedup-none/{IT}/{n}"):
            count[t] = count.get(t, 0) + 1
assert count["model.norm.weight"] == 1 and count["model.mix.weight"] == 8, count

# full: whole tensors in every rank's file; single: no metadata.json
r1 = load(f"{T}/full-none/{IT}/model-0000001-0000004.safetensors")
assert r1[w + "mlp.w1.weight"].shape == (8, 6)
assert not os.path.exists(f"{T}/single-none/{IT}/metadata.json")
assert sorted(os.listdir(f"{T}/single-my-llama-7b/{IT}")) == [
    "common.json", "my-llama-7b-model-0000000-0000001.safetensors",
    "my-llama-7b-opt-0000000-0000001.safetensors"]
# unlisted: opt.loss_scale only in rank 1's opt file
assert "opt.loss_scale" in load(f"{T}/unlisted-none/{IT}/opt-0000001-0000004.safetensors")
assert "opt.loss_scale" not in load(f"{T}/unlisted-none/{IT}/opt-0000000-0000004.safetensors")
rep = f"{T}/unlistedrep-none/{IT}/model-0000003-0000004.safetensors"
assert "model.rotary.inv_freq" in load(rep)
EOF

# mount order: model files first (by index), each in header order, a name at its first place
check "names: model file 0's header order, then the opt files'" py "$T" "$HERE" <<'EOF'
import subprocess, sys
sys.path.insert(0, sys.argv[2])
import safetensors_oracle as so
d = sys.argv[1] + "/unlisted-none/iteration_00000010"
got = subprocess.run([sys.executable, sys.argv[2] + "/iteration_oracle.py", "names", d],
                     check=True, capture_output=True, text=True).stdout.split()
m0 = [e.tag.decode() for e in so.load_reference(d + "/model-0000000-0000004.safetensors").entries]
o0 = [e.tag.decode() for e in so.load_reference(d + "/opt-0000000-0000004.safetensors").entries]
assert got == m0 + ["model.rotary.inv_freq"] + o0 + ["opt.loss_scale"], got
EOF

# --- the comparison bites -------------------------------------------------------------------

# flip_byte FILE TENSOR: the first byte of TENSOR in the safetensors FILE, flipped.
flip_byte() {
    py "$1" "$HERE" "$2" <<'EOF'
import sys
sys.path.insert(0, sys.argv[2])
import ckpt_oracle as co, safetensors_oracle as so
ts = [(e.tag.decode(), e.ms_type, e.shape, e.out) for e in so.load_reference(sys.argv[1]).entries]
ts = [(n, d, s, bytes([b[0] ^ 0x40]) + b[1:] if n == sys.argv[3] else b) for n, d, s, b in ts]
co.write_file(sys.argv[1], [so.serialize(ts, {"format": "ms"})])
EOF
}

cp -r "$T/tp2-none" "$T/bent"
flip_byte "$T/bent/$IT/model-0000003-0000004.safetensors" model.layers.0.mlp.w1.weight
rm -rf "$T/bent/tree"
oracle tree "$T/bent/$IT" "$T/bent/tree" && ! diff -rq "$T/bent/tree" "$T/bent/full" > /dev/null &&
    ok "a changed slice byte shows in the tree" || nok "a changed slice byte went unnoticed"
# a replica's byte (rank 3 holds wq slice 1 after rank 1, the first entry) is not read
cp -r "$T/tp2-none" "$T/rep"
flip_byte "$T/rep/$IT/model-0000003-0000004.safetensors" model.layers.0.attention.wq.weight
rm -rf "$T/rep/tree"
check "a replica that is not the first storage entry is not read" sh -c \
    "\"\$0\" \"\$1\" tree '$T/rep/$IT' '$T/rep/tree' &&
     diff -r '$T/rep/tree' '$T/rep/full'" "${ORACLE[@]}"

# --- bad sets -------------------------------------------------------------------------------

cases=$(oracle bad --help | grep -oE '\{[a-z0-9,]+\}' | head -1 | tr -d '{}' | tr ',' ' ')
[ "$(echo "$cases" | wc -w)" -eq 15 ] && ok "15 bad cases" || nok "bad cases: $cases"
for c in $cases; do
    oracle bad "$T/bad-$c" --case "$c" > "$T/what" || nok "bad $c was not written"
    refused "tree refuses bad set $c" oracle tree "$T/bad-$c/$IT" "$T/bad-$c/tree"
    file=$(cut -f1 "$T/what" | cut -d'|' -f1)  # the oracle names the first alternative
    grep -qF -- "$file" "$T/err" && ok "the $c refusal names $file" ||
        nok "$c refusal: $(cat "$T/err")"
done
refused "tree refuses a directory with no weight file" oracle tree "$T" "$T/none"

summary
