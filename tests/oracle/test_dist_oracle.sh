#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Self-checks of tests/oracle/dist_oracle.py (the merged-distributed-checkpoint oracle),
# without a mount: every gen case merges back to its full model (tree compared file by
# file with the tree of full.ckpt), a few slices are checked against positions worked out
# by hand from the tensor_map rule, the real golden-stick pair merges to the full shapes
# and values of its shards, the real strategy files parse, and every malformed strategy or
# rank set is refused with one line.  Prints ok/not ok per check; exits non-zero if any
# check failed.
set -u

HERE=$(cd "$(dirname "$0")" && pwd)
ORACLE=(/usr/bin/python3 "$HERE/dist_oracle.py")
FIX=${MINDSPORE_DIST_FIXTURES:-$(cd "$HERE/../../../shared/fixtures/mindspore_distributed" 2>/dev/null && pwd)}
. "$HERE/selfcheck.sh"
# flip_byte CKPT TAG: rewrite CKPT with the first byte of TAG's data changed
flip_byte() {
    py "$1" "$HERE" "$2" <<'EOF'
import sys
sys.path.insert(0, sys.argv[2])
import ckpt_oracle as co
p = sys.argv[1]
es, _ = co.load_reference(p)
recs = []
for e in es:
    out = bytearray(e.out)
    if e.tag == sys.argv[3].encode():
        out[0] ^= 0x40
    recs.append(co.record(co.tensor_value(e.tag.decode(), e.ms_type, e.ckpt_dims, bytes(out))))
co.write_file(p, recs)
EOF
}

if [ -z "$FIX" ] || [ ! -f "$FIX/SOURCES.md" ]; then
    echo "not ok 1 - no fixtures (set MINDSPORE_DIST_FIXTURES)"
    exit 1
fi
GS_STRAT=$FIX/golden-stick_llama2-13b-2p-strategy/ckpt_strategy_rank_0.ckpt
GS_DIST=$FIX/golden-stick_llama2-13b-fp16_2p

# --- gen -> merge == the full model -------------------------------------------------------

for c in tp2:2 tp4x2:4 optshard:4; do
    name=${c%:*} ranks=${c#*:}
    D=$T/$name
    check "gen $name" oracle gen "$D" --ranks "$ranks" --case "$name" --seed 5
    oracle gen "$T/again-$name" --ranks "$ranks" --case "$name" --seed 5
    check "gen $name is deterministic" diff -r "$D" "$T/again-$name"
    [ "$(ls "$D/dist" | paste -sd' ')" = "$(seq -f 'rank_%g' 0 $((ranks - 1)) | paste -sd' ')" ] &&
        ok "gen $name: rank_0..rank_$((ranks - 1))" || nok "gen $name: rank directories $(ls "$D/dist")"
    check "merge $name" oracle merge --strict-replicas "$D/strategy.ckpt" "$D/dist" "$D/merged"
    check "tree of $name full.ckpt" oracle tree "$D/full.ckpt" "$D/expected"
    check "merge $name equals the full model's tree" diff -r "$D/merged" "$D/expected"
    # the strategy lists exactly the parameters that have a tensor_map in the case, each
    # written the MindSpore way (empty param_split_shape/indices_offset sub-messages)
    check "strategy of $name: layout items as MindSpore writes them" py "$D/strategy.ckpt" "$HERE" <<'EOF'
import sys
sys.path.insert(0, sys.argv[2])
import dist_oracle as d
m = d.ParallelStrategyMap()
m.ParseFromString(open(sys.argv[1], "rb").read())
assert m.current_stage == 1 and len(m.parallel_strategy_item) == len(m.parallel_layout_item)
for it in m.parallel_layout_item:
    raw = it.parallel_layouts.SerializeToString()
    assert b"\x1a\x00\x22\x00" in raw, raw.hex()
    assert it.parallel_layouts.field == 0
EOF
done

# --- .safetensors ranks (one per rank, as save_checkpoint(format="safetensors") writes) ------

for c in tp2:2 tp4x2:4 optshard:4; do
    name=${c%:*} ranks=${c#*:}
    D=$T/st-$name
    check "gen $name --format safetensors" \
        oracle gen "$D" --ranks "$ranks" --case "$name" --seed 6 --format safetensors
    [ "$(cd "$D/dist" && ls rank_*/* | paste -sd' ')" = \
      "$(seq -f 'rank_%g' 0 $((ranks - 1)) | sed 's|.*|&/checkpoint_&.safetensors|;
         s|checkpoint_rank_|checkpoint_|' | paste -sd' ')" ] &&
        ok "gen $name --format safetensors: one rank_N/checkpoint_N.safetensors each" ||
        nok "gen $name --format safetensors: $(cd "$D/dist" && ls rank_*/*)"
    check "merge $name (.safetensors ranks)" \
        oracle merge --strict-replicas "$D/strategy.ckpt" "$D/dist" "$D/merged"
    oracle tree "$D/full.ckpt" "$D/expected"
    check "merge $name (.safetensors ranks) equals the full model's tree" \
        diff -r "$D/merged" "$D/expected"
done
check "tree of a .safetensors rank equals safetensors_oracle's expected tree of it" sh -c \
    "\"\$0\" \"\$1\" tree '$T/st-tp2/dist/rank_1/checkpoint_1.safetensors' '$T/st-t1' &&
     /usr/bin/python3 '$HERE/safetensors_oracle.py' fake-tree '$T/st-t2' \
        '$T/st-tp2/dist/rank_1/checkpoint_1.safetensors' && diff -r '$T/st-t1' '$T/st-t2'" \
    "${ORACLE[@]}"
cp -r "$T/st-tp2" "$T/st-two"
cp "$T/tp2/dist/rank_1/checkpoint_1.ckpt" "$T/st-two/dist/rank_1/"
refused "a rank with a .ckpt and a .safetensors" \
    oracle merge "$T/st-two/strategy.ckpt" "$T/st-two/dist" "$T/st-two/m"
grep -q 'rank_1 holds 2 ' "$T/err" && ok "  ... names rank_1" || nok "two files: $(cat "$T/err")"
cp -r "$T/tp2" "$T/st-mixed"
rm "$T/st-mixed/dist/rank_1/checkpoint_1.ckpt"
cp "$T/st-tp2/dist/rank_1/checkpoint_1.safetensors" "$T/st-mixed/dist/rank_1/"
refused "a set mixing .ckpt and .safetensors ranks (types F16/Float16... disagree)" \
    oracle merge "$T/st-mixed/strategy.ckpt" "$T/st-mixed/dist" "$T/st-mixed/m"

# one rank's slice differing in a split parameter changes the merge (the comparison bites)
cp -r "$T/tp4x2" "$T/tp4x2-bent"
flip_byte "$T/tp4x2-bent/dist/rank_1/checkpoint_1.ckpt" net.both.weight
rm -rf "$T/tp4x2-bent/merged"
oracle merge "$T/tp4x2-bent/strategy.ckpt" "$T/tp4x2-bent/dist" "$T/tp4x2-bent/merged" &&
    ! diff -rq "$T/tp4x2-bent/merged" "$T/tp4x2/expected" > /dev/null &&
    ok "a changed shard byte shows in the merged tree" || nok "a changed shard byte went unnoticed"

# a replica that differs: the default takes the lowest rank, --strict-replicas refuses
cp -r "$T/tp4x2" "$T/tp4x2-rep"
flip_byte "$T/tp4x2-rep/dist/rank_3/checkpoint_3.ckpt" net.norm
rm -rf "$T/tp4x2-rep/merged"
check "a differing replica on rank 3: merge takes rank 0's" sh -c \
    "\"\$0\" \"\$1\" merge '$T/tp4x2-rep/strategy.ckpt' '$T/tp4x2-rep/dist' '$T/tp4x2-rep/merged' &&
     diff -r '$T/tp4x2-rep/merged' '$T/tp4x2/expected'" "${ORACLE[@]}"
refused "a differing replica with --strict-replicas" \
    oracle merge --strict-replicas "$T/tp4x2-rep/strategy.ckpt" "$T/tp4x2-rep/dist" "$T/tp4x2-rep/m2"

# --- slices at positions worked out by hand ---------------------------------------------
# tensor_map value k names dev_matrix[len-1-k]; rank r's coordinate is row-major over the
# dev_matrix; the optimizer shard cuts dim 0 of the model-parallel slice, opt rank = r // step.
check "hand-worked slice positions (tp2, tp4x2, optshard)" py "$T" "$HERE" <<'EOF'
import sys
import numpy as np
sys.path.insert(0, sys.argv[2])
import ckpt_oracle as co
T = sys.argv[1]

def load(path):
    es, _ = co.load_reference(path)
    return {e.tag.decode(): np.frombuffer(e.out, co.MS_TYPES[e.ms_type][2]).reshape(e.dims) for e in es}

def rank(case, r):
    return load(f"{T}/{case}/dist/rank_{r}/checkpoint_{r}.ckpt")

def same(a, b, what):
    assert a.shape == b.shape and a.tobytes() == b.tobytes(), what

full = load(f"{T}/tp2/full.ckpt")
r1 = rank("tp2", 1)
same(r1["model.layers.0.wq.weight"], full["model.layers.0.wq.weight"][4:8], "tp2 wq rank1 = rows 4:8")
same(r1["model.layers.0.wo.weight"], full["model.layers.0.wo.weight"][:, 4:8], "tp2 wo rank1 = cols 4:8")
same(r1["model.layers.0.conv.weight"], full["model.layers.0.conv.weight"][:, 2:4, :], "tp2 conv middle")
same(r1["model.layers.0.bias"], full["model.layers.0.bias"][4:8], "tp2 bias")
same(r1["model.embed.weight"], full["model.embed.weight"], "tp2 replicated")
assert r1["learning_rate"].shape == () and r1["global_step"].shape == (1,)

full = load(f"{T}/tp4x2/full.ckpt")
# dev_matrix [2,2]: rank 1 = (0,1), rank 2 = (1,0)
r1, r2 = rank("tp4x2", 1), rank("tp4x2", 2)
same(r1["net.both.weight"], full["net.both.weight"][0:4, 3:6], "map [1,0] rank 1")
same(r2["net.both.weight"], full["net.both.weight"][4:8, 0:3], "map [1,0] rank 2")
same(r1["net.both_t.weight"], full["net.both_t.weight"][3:6, 0:4], "map [0,1] rank 1")
same(r2["net.both_t.weight"], full["net.both_t.weight"][0:3, 4:8], "map [0,1] rank 2")
same(r1["net.outer.weight"], full["net.outer.weight"][0:4], "map [1,-1] rank 1")
same(r2["net.outer.weight"], full["net.outer.weight"][4:8], "map [1,-1] rank 2")
same(r1["net.inner.weight"], full["net.inner.weight"][:, 4:8], "map [-1,0] rank 1")
same(r2["net.inner.weight"], full["net.inner.weight"][:, 0:4], "map [-1,0] rank 2")
same(r2["net.mid.weight"], full["net.mid.weight"][:, 2:4, 0:3], "map [-1,1,0] rank 2")
same(r1["net.vec"], full["net.vec"][4:8], "map [0] rank 1")

full = load(f"{T}/optshard/full.ckpt")
# step 2 size 2 on 4 ranks: model-parallel slice r % 2, opt chunk r // 2
r1, r2, r3 = rank("optshard", 1), rank("optshard", 2), rank("optshard", 3)
same(r1["opt.rows.weight"], full["opt.rows.weight"][4:6], "rows rank 1: mp 1 (rows 4:8), chunk 0")
same(r2["opt.rows.weight"], full["opt.rows.weight"][2:4], "rows rank 2: mp 0 (rows 0:4), chunk 1")
same(r2["opt.cols.weight"], full["opt.cols.weight"][3:6, 0:2], "cols rank 2: cols 0:2, rows 3:6")
same(r3["opt.vec"], full["opt.vec"][6:8], "vec rank 3")
# step 1, size -1 (= 4): rank r holds rows 2r:2r+2
same(r3["opt.dp.weight"], full["opt.dp.weight"][6:8], "pure opt shard rank 3")
# step 1, size 2 on 4 ranks: opt chunk r % 2, ranks 0-1 and 2-3 are replicas
same(r3["opt.rep.weight"], full["opt.rep.weight"][3:6], "opt + replica rank 3")
same(r2["opt.rep.weight"], full["opt.rep.weight"][0:3], "opt + replica rank 2")
same(r3["opt.none.weight"], full["opt.none.weight"][2:4, 3:6], "no opt shard rank 3")
EOF

# --- the golden-stick 2-rank pair ---------------------------------------------------------
# Its test suite's strategy is another run's (40 layers, lm_head replicated; the ranks hold
# 1 layer and a split lm_head): a mismatch, refused naming a parameter rank_0 lacks.

refused "golden-stick pair with the fixture's strategy (another run's)" \
    oracle merge "$GS_STRAT" "$GS_DIST" "$T/gs-fixture"
grep -qE "'model\.layers\.([1-9]|[1-3][0-9])\.[^']+'.*rank_0" "$T/err" &&
    ok "the mismatch refusal names a layer rank_0 lacks, and rank_0" ||
    nok "mismatch refusal: $(cat "$T/err")"
[ ! -e "$T/gs-fixture" ] && ok "the refused merge wrote no tree" ||
    nok "the refused merge wrote $T/gs-fixture"
refused "golden-stick pair with the fixture's rank_1 strategy (byte-identical)" \
    oracle merge "${GS_STRAT%_0.ckpt}_1.ckpt" "$GS_DIST" "$T/gs1"

# The strategy of the pair's own run, derived by hand from SOURCES.md's shard facts:
# wq/wk/wv/w1/w3 and lm_head split on dim 0, wo/w2 on dim 1, embedding and norms replicated.
# gs_strategy OUT LM_HEAD_TMAP: that strategy, lm_head's tensor_map given
gs_strategy() {
    local L=model.layers.0
    oracle strategy "$1" --dev 2 \
        model.tok_embeddings.embedding_weight=-1,-1 $L.ffn_norm.weight=-1 \
        $L.attention_norm.weight=-1 $L.attention.wq.weight=0,-1 $L.attention.wk.weight=0,-1 \
        $L.attention.wv.weight=0,-1 $L.attention.wo.weight=-1,0 $L.feed_forward.w1.weight=0,-1 \
        $L.feed_forward.w2.weight=-1,0 $L.feed_forward.w3.weight=0,-1 model.norm_out.weight=-1 \
        lm_head.weight="$2"
}
check "strategy: the derived golden-stick strategy written" gs_strategy "$T/gs-strat.ckpt" 0,-1
check "strategy: it parses back to the 12 layouts given" \
    sh -c "\"\$0\" \"\$1\" parse '$T/gs-strat.ckpt' |
    /usr/bin/python3 -c '
import json, sys
d = json.load(sys.stdin)
assert len(d) == 12, len(d)
assert all(v[\"dev_matrix\"] == [2] and v[\"stage\"] == 0 and v[\"field\"] == 0 for v in d.values())
assert all(v[\"opt_weight_shard_step\"] == 0 == v[\"opt_weight_shard_size\"] for v in d.values())
assert d[\"lm_head.weight\"][\"tensor_map\"] == [0, -1]
assert d[\"model.layers.0.attention.wo.weight\"][\"tensor_map\"] == [-1, 0]
assert d[\"model.norm_out.weight\"][\"tensor_map\"] == [-1]
'" "${ORACLE[@]}"
oracle strategy "$T/opt.ckpt" --dev 2,2 w=0,-1:2:2
check "strategy: an optimizer shard :STEP:SIZE is written" \
    grep -q '"opt_weight_shard_size": 2' <(oracle parse "$T/opt.ckpt")
check "merge golden-stick llama2 2p with the derived strategy" \
    oracle merge "$T/gs-strat.ckpt" "$GS_DIST" "$T/gs"
# gs_expect TREE LM_HEAD_AXIS: the tree's 12 parameters have the full shapes and the shards
# concatenated (LM_HEAD_AXIS: 0 = split, none = replicated -> rank 0's half)
gs_expect() {
    py "$1" "$GS_DIST" "$HERE" "$2" <<'EOF'
import os, sys
import numpy as np
sys.path.insert(0, sys.argv[3])
import ckpt_oracle as co
from google.protobuf import text_format
tree, dist = sys.argv[1], sys.argv[2]
lm = None if sys.argv[4] == "none" else int(sys.argv[4])
want = {
    "model.tok_embeddings.embedding_weight": ([32000, 40], "kFloat16", None),
    "model.layers.0.ffn_norm.weight": ([40], "kFloat", None),
    "model.layers.0.attention_norm.weight": ([40], "kFloat", None),
    "model.layers.0.attention.wq.weight": ([40, 40], "kFloat16", 0),
    "model.layers.0.attention.wk.weight": ([40, 40], "kFloat16", 0),
    "model.layers.0.attention.wv.weight": ([40, 40], "kFloat16", 0),
    "model.layers.0.attention.wo.weight": ([40, 40], "kFloat16", 1),
    "model.layers.0.feed_forward.w1.weight": ([256, 40], "kFloat16", 0),
    "model.layers.0.feed_forward.w2.weight": ([40, 256], "kFloat16", 1),
    "model.layers.0.feed_forward.w3.weight": ([256, 40], "kFloat16", 0),
    "model.norm_out.weight": ([40], "kFloat", None),
    "lm_head.weight": ([32000 if lm == 0 else 16000, 40], "kFloat16", lm),
}
got = sorted(n for n in os.listdir(tree) if n != "snapshot_done")
assert got == sorted(want), got
assert os.path.getsize(os.path.join(tree, "snapshot_done")) == 0
ranks = []
for r in (0, 1):
    es, _ = co.load_reference(f"{dist}/rank_{r}/checkpoint_{r}.ckpt")
    ranks.append({e.tag.decode(): np.frombuffer(e.out, co.MS_TYPES[e.ms_type][2]).reshape(e.dims) for e in es})
for name, (dims, of_type, axis) in want.items():
    meta = co.VariableMetaInfo()
    text_format.Parse(open(os.path.join(tree, name, "meta")).read(), meta)
    assert list(meta.shape.dim) == dims, (name, list(meta.shape.dim))
    assert co._DATA_TYPE_ENUM.values_by_number[meta.data_type].name == of_type, name
    out = open(os.path.join(tree, name, "out"), "rb").read()
    exp = ranks[0][name] if axis is None else np.concatenate([ranks[0][name], ranks[1][name]], axis)
    assert out == exp.tobytes(), name
# lm_head: the halves really differ, so the split is visible in the bytes
half = ranks[0]["lm_head.weight"].nbytes
assert ranks[0]["lm_head.weight"].tobytes() != ranks[1]["lm_head.weight"].tobytes()
out = open(os.path.join(tree, "lm_head.weight", "out"), "rb").read()
assert out[:half] == ranks[0]["lm_head.weight"].tobytes()
if lm == 0:
    assert out[half:] == ranks[1]["lm_head.weight"].tobytes()
EOF
}
check "golden-stick: full shapes (lm_head [32000,40], wq, wo [40,40]); lm_head rank 0's half, \
then rank 1's" \
    gs_expect "$T/gs" 0
check "golden-stick derived strategy: --strict-replicas also merges (no replica differs)" \
    oracle merge --strict-replicas "$T/gs-strat.ckpt" "$GS_DIST" "$T/gs-strict-ok"
# lm_head declared replicated although its halves differ: rank 0's copy by default;
# --strict-replicas refuses naming it
gs_strategy "$T/gs-repl.ckpt" -1,-1
check "golden-stick with lm_head declared replicated: rank 0's half [16000,40]" sh -c \
    "\"\$0\" \"\$1\" merge '$T/gs-repl.ckpt' '$GS_DIST' '$T/gs-repl'" "${ORACLE[@]}"
check "  ... and the rest as with the derived strategy" gs_expect "$T/gs-repl" none
refused "golden-stick with lm_head declared replicated, --strict-replicas (lm_head halves differ)" \
    oracle merge --strict-replicas "$T/gs-repl.ckpt" "$GS_DIST" "$T/gs-strict"
grep -q 'lm_head.weight' "$T/err" && ok "the strict refusal names lm_head.weight" || nok "strict refusal: $(cat "$T/err")"
# a strategy naming one parameter more than the ranks hold (here a second layer's wq)
oracle strategy "$T/gs-extra.ckpt" --dev 2 model.layers.0.attention.wq.weight=0,-1 \
    model.layers.1.attention.wq.weight=0,-1
refused "a strategy naming a parameter the ranks lack" \
    oracle merge "$T/gs-extra.ckpt" "$GS_DIST" "$T/gs-extra"
grep -q "'model.layers.1.attention.wq.weight'.*rank_0" "$T/err" &&
    ok "  ... names it and rank_0" || nok "extra-parameter refusal: $(cat "$T/err")"
# a stage prefix is stripped before the lookup: 0-<name> of a parameter the ranks hold merges
oracle strategy "$T/gs-stage.ckpt" --dev 2 0-model.layers.0.attention.wq.weight=0,-1
check "a '0-' stage-prefixed strategy name is looked up without its prefix" \
    oracle merge "$T/gs-stage.ckpt" "$GS_DIST" "$T/gs-stage"

# --- parse of the real strategy files ---------------------------------------------------

check "parse golden-stick strategy: 363 layouts, dev_matrix [2], wq [0,-1], wo [-1,0], lm_head [-1,-1]" \
    sh -c "\"\$0\" \"\$1\" parse '$GS_STRAT' | /usr/bin/python3 -c '
import json, sys
d = json.load(sys.stdin)
assert len(d) == 363
assert all(v[\"dev_matrix\"] == [2] and v[\"stage\"] == 0 and v[\"field\"] == 0 for v in d.values())
assert all(v[\"opt_weight_shard_step\"] == 0 == v[\"opt_weight_shard_size\"] for v in d.values())
assert d[\"model.layers.39.attention.wq.weight\"][\"tensor_map\"] == [0, -1]
assert d[\"model.layers.0.attention.wo.weight\"][\"tensor_map\"] == [-1, 0]
assert d[\"lm_head.weight\"][\"tensor_map\"] == [-1, -1]
assert d[\"model.norm_out.weight\"][\"tensor_map\"] == [-1]
'" "${ORACLE[@]}"
for n in 4:2 8:2,2; do  # 2 pipeline stages of 2 (dev_matrix [2]) or 4 devices ([2,2])
    dev=${n#*:} n=${n%:*}
    check "parse mindformers strategy_${n}_npus: 148 stage-prefixed layouts (72 stage 0, 76 stage 1), dev_matrix [$dev]" \
        sh -c "\"\$0\" \"\$1\" parse '$FIX/mindformers_ckpt_transform/strategy_${n}_npus.ckpt' | /usr/bin/python3 -c '
import json, sys
d = json.load(sys.stdin)
assert len(d) == 148, len(d)
st = [v[\"stage\"] for v in d.values()]
assert st.count(0) == 72 and st.count(1) == 76, (st.count(0), st.count(1))
for k, v in d.items():
    assert k == \"%d-%s\" % (v[\"stage\"], v[\"name\"]), k
    assert v[\"dev_matrix\"] == [$dev], v
assert any(v[\"name\"].startswith(\"adam_m.backbone\") for v in d.values())
'" "${ORACLE[@]}"
done
check "parse skips unknown fields (as MindSpore's protobuf runtime does)" py "$GS_STRAT" "$HERE" "$T" <<'EOF'
import json, subprocess, sys
sys.path.insert(0, sys.argv[2])
import dist_oracle as d
data = open(sys.argv[1], "rb").read()
m = d.ParallelStrategyMap()
m.ParseFromString(data)
first = m.parallel_layout_item[0]
lay = first.parallel_layouts.SerializeToString() + b"\x40\x07"  # + field 8 varint
name = first.param_name.encode()
item = b"\x0a" + d.co.varint(len(name)) + name + b"\x12" + d.co.varint(len(lay)) + lay
del m.parallel_layout_item[0]
extra = b"\x1a" + d.co.varint(len(item)) + item + b"\x22\x03abc"  # + top-level field 4
open(sys.argv[3] + "/unknown.ckpt", "wb").write(m.SerializeToString() + extra)
run = lambda p: subprocess.run([sys.executable, d.__file__, "parse", p], check=True, capture_output=True).stdout
a, b = json.loads(run(sys.argv[1])), json.loads(run(sys.argv[3] + "/unknown.ckpt"))
assert a == b, "unknown fields changed the parse"
EOF
refused "merge refuses a pipeline (2-stage) strategy" \
    oracle merge "$FIX/mindformers_ckpt_transform/strategy_4_npus.ckpt" "$GS_DIST" "$T/mf"
refused "parse refuses a checkpoint given as the strategy" oracle parse "$GS_DIST/rank_0/checkpoint_0.ckpt"

# --- malformed strategies and rank sets -------------------------------------------------

cases=$(oracle bad-strategy --help | grep -oE '\{[a-z0-9,]+\}' | head -1 | tr -d '{}' | tr ',' ' ')
[ -n "$cases" ] || nok "no bad-strategy cases listed"
for c in $cases; do
    oracle bad-strategy "$T/bad-$c" --case "$c"
    refused "parse refuses bad strategy $c" oracle parse "$T/bad-$c"
done
refused "merge refuses bad strategy mapdup" oracle merge "$T/bad-mapdup" "$GS_DIST" "$T/bm"

cases=$(oracle bad-dist --help | grep -oE '\{[a-z0-9,]+\}' | head -1 | tr -d '{}' | tr ',' ' ')
[ -n "$cases" ] || nok "no bad-dist cases listed"
for c in $cases; do
    oracle bad-dist "$T/bd-$c" --case "$c"
    refused "merge refuses rank set $c" oracle merge "$T/bd-$c/strategy.ckpt" "$T/bd-$c/dist" "$T/bd-$c/tree"
done
refused "merge refuses a missing DIST_DIR" oracle merge "$GS_STRAT" "$T/nonexistent" "$T/x"
refused "gen refuses a rank count that is not the case's device count" oracle gen "$T/g3" --ranks 3 --case tp2
check "slicing refuses a dimension not divisible by its split" py "$HERE" <<'EOF'
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import dist_oracle as d
for full, dev, tmap, step, size in (((7, 6), [2], [0, -1], 0, 0), ((6, 5), [2, 2], [1, 0], 0, 0),
                                     ((6, 4), [2, 2], [0, -1], 2, 2)):
    try:
        d.local_slice(np.zeros(full, np.float32), dev, tmap, step, size, 0)
    except d.Refused:
        continue
    raise SystemExit(f"{full} {tmap} accepted")
EOF

summary
