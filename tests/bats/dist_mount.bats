#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# A distributed checkpoint mounted merged (issue 14): `ckptfs -o strategy=STRATEGY DIST_DIR M`
# shows the full model whose slices the ranks (DIST_DIR/rank_<id>/, one checkpoint each) hold,
# as laid out by MindSpore's ParallelStrategyMap.  Every expected tree and byte comes from
# tests/oracle/dist_oracle.py (protobuf runtime + numpy, MindSpore's own merge rules), never
# from the mount.  Also: every set or strategy the oracle refuses is refused before mounting
# in one line naming what is wrong; the merged mount is read-only; without -o strategy the
# same directory is a run whose snapshots are the ranks.

load helpers

DIST="$PY $REPO/tests/oracle/dist_oracle.py"
GS=$FIXTURES/mindspore_distributed
GS_DIST=$GS/golden-stick_llama2-13b-fp16_2p
GS_STRAT=$GS/golden-stick_llama2-13b-2p-strategy/ckpt_strategy_rank_0.ckpt

setup() {
    T=$BATS_TEST_TMPDIR
    M=$T/m
    G=$T/gen
}

# gen CASE RANKS [SEED [FORMAT]]: a generated set in $G (full.ckpt, strategy.ckpt,
# dist/rank_<id>/checkpoint_<id>.FORMAT), the oracle's merged tree in $T/want; the rank files
# read-only, as MindSpore leaves them
gen() {
    $DIST gen "$G" --ranks "$2" --case "$1" --seed "${3:-1}" --format "${4:-ckpt}"
    chmod 0400 "$G"/dist/rank_*/*
    $DIST merge "$G/strategy.ckpt" "$G/dist" "$T/want"
    # the oracle's merge is the full model (its own self-check, repeated: an oracle that
    # silently produced a wrong tree would make every comparison below meaningless)
    $DIST tree "$G/full.ckpt" "$T/full"
    diff -rq "$T/full" "$T/want"
}

# oracle_refuses ARGS...: the oracle refuses too (`dist_oracle.py ARGS...`: exit 1, one line)
oracle_refuses() {
    local st=0
    $DIST "$@" >/dev/null 2>"$T/oracle.err" || st=$?
    echo "oracle exit $st: $(cat "$T/oracle.err")"
    [ "$st" -eq 1 ]
    [ "$(wc -l <"$T/oracle.err")" -eq 1 ]
    grep -q '^refused: ' "$T/oracle.err"
}

# names WORD...: the refusal line in $T/err names each WORD whole (`rank_1` is not `rank_10`,
# `a.weight` not `a.weight_scale`)
names() {
    local w re
    for w; do
        re="(^|[^A-Za-z0-9_.])${w//./\\.}([^A-Za-z0-9_.]|\\.([^A-Za-z0-9_]|\$)|\$)"
        grep -qE "$re" "$T/err" || { echo "the line does not name $w" >&2; return 1; }
    done
}

# slice FILE OFFSET LENGTH: bytes [OFFSET, OFFSET+LENGTH) of FILE, by python slicing
slice() {
    $PY -c 'import sys
d = open(sys.argv[1], "rb").read()
o = int(sys.argv[2])
sys.stdout.buffer.write(d[o:o + int(sys.argv[3])])' "$@"
}

# odd_reads TREE: each out under $M read with dd at odd offsets and block sizes (some ending
# past the end; one across the middle, where a dim-0 split joins two ranks' slices) equals
# the same bytes of TREE's out; at least one read returns data
odd_reads() {
    local d p r bs skip count size got=0
    for d in "$1"/*; do
        [ -d "$d" ] || continue
        p=$(basename "$d")
        size=$(stat -c %s "$d/out")
        for r in 7:3:9 13:1:5 5:0:1 3:11:1000 4096:0:1; do
            IFS=: read -r bs skip count <<<"$r"
            dd if="$M/$p/out" bs="$bs" skip="$skip" count="$count" status=none >"$T/got"
            slice "$1/$p/out" $((bs * skip)) $((bs * count)) >"$T/exp"
            cmp "$T/exp" "$T/got" || { echo "$p: dd bs=$bs skip=$skip count=$count" >&2; return 1; }
            got=$((got + $(stat -c %s "$T/got")))
        done
        for r in $((size / 2 > 5 ? size / 2 - 5 : 0)):11 $((size > 3 ? size - 3 : 0)):10; do
            dd if="$M/$p/out" iflag=skip_bytes,count_bytes bs=4096 skip="${r%:*}" count="${r#*:}" \
                status=none >"$T/got"
            slice "$1/$p/out" "${r%:*}" "${r#*:}" >"$T/exp"
            cmp "$T/exp" "$T/got" || { echo "$p: bytes ${r%:*} +${r#*:}" >&2; return 1; }
        done
    done
    [ "$got" -gt 0 ]
}

# merged_equal TREE: the mount is TREE: the same names (nothing extra), metas, outs
merged_equal() {
    ls -A "$1" | LC_ALL=C sort >"$T/names.want"
    ls -A "$M" | LC_ALL=C sort | diff "$T/names.want" -
    [ "$(wc -l <"$T/names.want")" -gt 3 ]
    local d
    for d in "$1"/*; do
        [ -d "$d" ] || continue
        diff "$d/meta" "$M/$(basename "$d")/meta"
        cmp "$d/out" "$M/$(basename "$d")/out"
    done
    diff -rq "$1" "$M"   # and nothing else anywhere (-q: binary outs)
}

mount_gen_case() {
    gen "$@"
    mount_fg "$G/dist" "$M" -o "strategy=$G/strategy.ckpt"
    merged_equal "$T/want"
    odd_reads "$T/want"
}

# tp2: replicated, dim 0, dim 1, a middle dim, 1-D, scalars outside the strategy
@test "tp2 (2 ranks) merged: the oracle's tree; odd reads" {
    mount_gen_case tp2 2 3
}

# tp4x2: dev_matrix [2,2]; two split dims, swapped axes, replicas
@test "tp4x2 (4 ranks) merged: the oracle's tree; odd reads" {
    mount_gen_case tp4x2 4 4
}

# optshard: parallel-optimizer shards on top of model-parallel slices, a pure opt shard
@test "optshard (4 ranks) merged: the oracle's tree; odd reads" {
    mount_gen_case optshard 4 5
}

@test "tp4x2 with one .safetensors per rank merged: the oracle's tree; odd reads" {
    mount_gen_case tp4x2 4 6 safetensors
    [ -f "$G/dist/rank_3/checkpoint_3.safetensors" ]
}

# gs_strategy OUT: the golden-stick pair's own layout, derived by hand from its shards
# (SOURCES.md): wq/wk/wv/w1/w3 and lm_head split on dim 0, wo/w2 on dim 1, embedding and norms
# replicated; each of the 12 parameters listed
gs_strategy() {
    local L=model.layers.0
    $DIST strategy "$1" --dev 2 \
        model.tok_embeddings.embedding_weight=-1,-1 \
        $L.ffn_norm.weight=-1 \
        $L.attention_norm.weight=-1 \
        $L.attention.wq.weight=0,-1 \
        $L.attention.wk.weight=0,-1 \
        $L.attention.wv.weight=0,-1 \
        $L.attention.wo.weight=-1,0 \
        $L.feed_forward.w1.weight=0,-1 \
        $L.feed_forward.w2.weight=-1,0 \
        $L.feed_forward.w3.weight=0,-1 \
        model.norm_out.weight=-1 \
        lm_head.weight=0,-1
}

@test "golden-stick pair, derived strategy: the oracle's tree; lm_head rank 0's half, rank 1's" {
    gs_strategy "$T/strategy.ckpt"
    $DIST merge "$T/strategy.ckpt" "$GS_DIST" "$T/want"
    [ "$(ls "$T/want" | wc -l)" -eq 13 ]
    mount_fg "$GS_DIST" "$M" -o "strategy=$T/strategy.ckpt"
    merged_equal "$T/want"
    # lm_head across the boundary of the two halves (16000 rows x 40 x 2 bytes)
    half=1280000
    grep -q 'dim: 32000' "$M/lm_head.weight/meta"
    dd if="$M/lm_head.weight/out" bs=7 skip=$((half / 7 - 2)) count=5 status=none >"$T/got"
    $PY -c 'import sys
sys.path.insert(0, sys.argv[3] + "/tests/oracle")
import ckpt_oracle as co
half, out = int(sys.argv[2]), b""
for r in (0, 1):
    es, _ = co.load_reference(f"{sys.argv[1]}/rank_{r}/checkpoint_{r}.ckpt")
    out += {e.tag: e.out for e in es}[b"lm_head.weight"]
o = (half // 7 - 2) * 7
sys.stdout.buffer.write(out[o:o + 35])' "$GS_DIST" "$half" "$REPO" >"$T/exp"
    cmp "$T/exp" "$T/got"
}

# the fixture's strategy is another run's (40 layers, the ranks hold 1)
@test "golden-stick pair, fixture's strategy: refused, names a parameter rank_0 lacks" {
    oracle_refuses merge "$GS_STRAT" "$GS_DIST" "$T/want"
    mount_refused -o "strategy=$GS_STRAT" "$GS_DIST"
    names rank_0
    # the parameters the strategy names and rank 0 lacks; the line names one of them
    $DIST parse "$GS_STRAT" >"$T/parsed"
    $PY -c 'import json, sys
sys.path.insert(0, sys.argv[3] + "/tests/oracle")
import ckpt_oracle as co
es, _ = co.load_reference(sys.argv[2] + "/rank_0/checkpoint_0.ckpt")
have = {e.tag.decode() for e in es}
for v in json.load(open(sys.argv[1])).values():
    if v["name"] not in have:
        print(v["name"])' "$T/parsed" "$GS_DIST" "$REPO" >"$T/lacking"
    [ "$(wc -l <"$T/lacking")" -gt 300 ]
    ! grep -qx 'lm_head.weight' "$T/lacking" || false
    n=0
    while read -r p; do
        names "$p" 2>/dev/null && n=$((n + 1))
    done <"$T/lacking"
    echo "names $n of them"
    [ "$n" -ge 1 ]
}

# bad_dist CASE WORD...: the oracle's tp2 set with defect CASE: the oracle refuses it, and
# so does ckptfs, in one line naming each WORD
bad_dist() {
    local c=$1
    shift
    $DIST bad-dist "$T/bd" --case "$c"
    oracle_refuses merge "$T/bd/strategy.ckpt" "$T/bd/dist" "$T/bd-tree"
    mount_refused -o "strategy=$T/bd/strategy.ckpt" "$T/bd/dist"
    names "$@"
}

@test "bad set missingrank (rank_1/ absent): refused, names rank_1" { bad_dist missingrank rank_1; }
@test "bad set extrarank (rank_2/ past 2 ranks): refused, names rank_2" {
    bad_dist extrarank rank_2
}
@test "bad set twockpts (two .ckpt in rank_1/): refused, names rank_1" { bad_dist twockpts rank_1; }
@test "bad set nockpt (no .ckpt in rank_1/): refused, names rank_1" { bad_dist nockpt rank_1; }
@test "bad set replshape (replicated, shorter on rank_1): refused, names it and rank_1" {
    bad_dist replshape model.embed.weight rank_1
}
@test "bad set splitshape (a split parameter shorter on rank_1): refused, names it and rank_1" {
    bad_dist splitshape model.layers.0.wq.weight rank_1
}
@test "bad set dtype (UInt32 on rank_1, Int32 on rank_0): refused, names the parameter and rank_1" {
    bad_dist dtype model.layers.0.bias rank_1
}
@test "bad set ndim (a 3-entry tensor_map for a 2-d parameter): refused, names the parameter" {
    bad_dist ndim model.layers.0.wo.weight
}
@test "bad set missingparam (rank_1 lacks a parameter rank_0 has): refused, names it and rank_1" {
    bad_dist missingparam model.layers.0.wo.weight rank_1
}
@test "bad set uneven (param_split_shape): refused, names the parameter" {
    bad_dist uneven model.layers.0.wq.weight
}
@test "bad set pipeline (every layout on stage 1): refused in one line" { bad_dist pipeline; }

# bad_strategy CASE: a malformed strategy file (the oracle's parse refuses it) given with a
# good tp2 set: refused in one line naming the strategy file
bad_strategy() {
    $DIST gen "$G" --ranks 2 --case tp2
    $DIST bad-strategy "$T/bad-$1.ckpt" --case "$1"
    oracle_refuses parse "$T/bad-$1.ckpt"
    mount_refused -o "strategy=$T/bad-$1.ckpt" "$G/dist"
    grep -qF -- "$T/bad-$1.ckpt" "$T/err"
}

@test "bad strategy empty: refused, names the file" { bad_strategy empty; }
@test "bad strategy truncated: refused, names the file" { bad_strategy truncated; }
@test "bad strategy garbage: refused, names the file" { bad_strategy garbage; }
@test "bad strategy nolayouts: refused, names the file" { bad_strategy nolayouts; }
@test "bad strategy mapoutofrange: refused, names the file" { bad_strategy mapoutofrange; }
@test "bad strategy devzero: refused, names the file" { bad_strategy devzero; }
@test "bad strategy optstep: refused, names the file" { bad_strategy optstep; }

@test "a strategy file that does not exist: refused, names it" {
    $DIST gen "$G" --ranks 2 --case tp2
    mount_refused -o "strategy=$T/nonexistent.ckpt" "$G/dist"
    grep -qF -- "$T/nonexistent.ckpt" "$T/err"
}

# strategy_pb PYTHON OUT [ARGS...]: run PYTHON with the oracle's strategy messages (the official
# protobuf runtime) as Map, Item, Layout, and OUT, ARGS as sys.argv[1:]
strategy_pb() {
    local code=$1
    shift
    $PY -c "import sys
sys.path.insert(0, '$REPO/tests/oracle')
import dist_oracle as d
Map = d._cls('ParallelStrategyMap')
$code" "$@"
}

# A 32 MiB strategy of 16 operator strategies of 2^20 empty ParallelStrategy each (2 bytes on
# the wire, a struct, a pointer and a scan record unpacked: ~30 times the file before the fix,
# 986 MB peak): refused in one line naming the file and the memory, before it is read into
# memory (peak RSS under its size); a strategy of real size (the golden-stick layout beside
# 20,000 operator strategies, 1.6 MB) still mounts, the oracle's tree.
@test "a strategy of empty items: refused before it is read into memory, names the file; a real-size one mounts" {
    strategy_pb '
m = Map()
it = m.parallel_strategy_item.add(node_name="n")
it.parallel_strategys.stage = 0
for _ in range(1 << 20):
    it.parallel_strategys.parallel_strategy.add()
one = m.SerializePartialToString()  # current_stage is in the first piece
with open(sys.argv[1], "wb") as f:
    f.write(Map(current_stage=0).SerializeToString())
    for _ in range(16):
        f.write(one)  # concatenated messages merge: 16 items' "$T/hostile.ckpt"
    size=$(stat -c %s "$T/hostile.ckpt")
    [ "$size" -gt $((32 << 20)) ]
    st=0
    /usr/bin/time -f '%M' -o "$T/peak" "$BUILD/ckptfs-dump" -o "strategy=$T/hostile.ckpt" \
        "$GS_DIST" >"$T/out" 2>"$T/err" || st=$?
    peak=$(tail -1 "$T/peak") # after time's own "Command exited" line
    echo "exit $st, peak $peak KiB: $(cat "$T/err")"
    [ "$peak" -lt $((size / 1024)) ]
    [ "$st" -eq 1 ]
    [ "$(wc -l <"$T/err")" -eq 1 ]
    grep -qF -- "$T/hostile.ckpt: " "$T/err"
    grep -q 'memory' "$T/err"

    gs_strategy "$T/small.ckpt"
    strategy_pb '
m = Map()
m.ParseFromString(open(sys.argv[1], "rb").read())
for i in range(20000):
    it = m.parallel_strategy_item.add(node_name=f"Default/network-Net/layer.{i}/MatMul-op{i}")
    it.parallel_strategys.stage = 0
    for _ in range(2):
        it.parallel_strategys.parallel_strategy.add(dim=[2, 1])
open(sys.argv[2], "wb").write(m.SerializeToString())' "$T/small.ckpt" "$T/strategy.ckpt"
    [ "$(stat -c %s "$T/strategy.ckpt")" -gt $((1 << 20)) ]
    $DIST merge "$T/strategy.ckpt" "$GS_DIST" "$T/want"
    mount_fg "$GS_DIST" "$M" -o "strategy=$T/strategy.ckpt"
    merged_equal "$T/want"
}

# -o rw / -o create refused before mounting; every change fails with EROFS; the ranks unchanged
@test "read-only: -o rw, -o create refused; writes, touch, mkdir, rm: EROFS" {
    gen tp2 2
    mount_refused -o rw -o "strategy=$G/strategy.ckpt" "$G/dist"
    mount_refused -o "strategy=$G/strategy.ckpt,rw" "$G/dist"
    mount_refused -o create -o "strategy=$G/strategy.ckpt" "$G/dist"
    (cd "$G/dist" && find . -type f -exec sha256sum {} + | LC_ALL=C sort) >"$T/before"
    ls -lR "$G/dist" >"$T/before.ls"
    mount_fg "$G/dist" "$M" -o "strategy=$G/strategy.ckpt"
    p=model.layers.0.wq.weight
    [ -f "$M/$p/out" ]
    for cmd in "printf x >'$M/$p/out'" "printf x >>'$M/$p/out'" "touch '$M/new'" \
               "touch '$M/$p/out'" "mkdir '$M/new'" "rm -f '$M/$p/out'" "rm -rf '$M/$p'" \
               "mv '$M/$p' '$M/moved'" "truncate -s 0 '$M/$p/out'"; do
        run sh -c "$cmd"
        echo "$cmd: $status $output"
        [ "$status" -ne 0 ]
        [[ "$output" == *"Read-only file system"* ]]
    done
    merged_equal "$T/want"
    (cd "$G/dist" && find . -type f -exec sha256sum {} + | LC_ALL=C sort) | diff "$T/before" -
    ls -lR "$G/dist" | diff "$T/before.ls" -
}

# run_of CASE RANKS FORMAT: the generated set mounted without -o strategy is a run of the
# ranks: rank_0/..rank_<RANKS-1>/, each the oracle's tree of its one checkpoint
run_of() {
    gen "$1" "$2" 1 "$3"
    mount_fg "$G/dist" "$M"
    # the run's `latest` (README: the newest by time when names say nothing) may be there too
    ls -A "$M" | grep -vx latest | LC_ALL=C sort >"$T/got"
    seq -f 'rank_%g' 0 $(($2 - 1)) | diff - "$T/got"
    if [ -e "$M/latest" ] || [ -L "$M/latest" ]; then
        [ -L "$M/latest" ]
        grep -qx "$(readlink "$M/latest")" "$T/got"
    fi
    for r in $(seq 0 $(($2 - 1))); do
        $DIST tree "$G/dist/rank_$r/checkpoint_$r.$3" "$T/rank_$r"
        diff -rq "$T/rank_$r" "$M/rank_$r"
        [ "$(ls "$T/rank_$r" | wc -l)" -gt 3 ]
    done
}

@test "without -o strategy: a run of rank_0/ and rank_1/, each its checkpoint's tree" {
    run_of tp2 2 ckpt
    # the ranks' slices, not the merge: rank 1's wq is the second half of the full one
    ! cmp -s "$M/rank_1/model.layers.0.wq.weight/out" "$T/want/model.layers.0.wq.weight/out" ||
        false
}

@test "without -o strategy: .safetensors ranks, a run of rank_0/..rank_3/" {
    run_of optshard 4 safetensors
}

# nobody MNT CMD...: CMD as another user without root's groups, in the mount MNT
nobody() {
    (cd "$1" && shift && setpriv --reuid=65534 --regid=65534 --clear-groups "$@")
}

@test "another user (allow_other): no read of 0600 ranks' merge; 0444 ones' is the oracle's" {
    gen tp2 2
    cp -a "$G/dist" "$T/public"
    chmod 0600 "$G"/dist/rank_*/*.ckpt
    chmod 0444 "$T"/public/rank_*/*.ckpt
    mount_fg "$G/dist" "$M" -o "strategy=$G/strategy.ckpt" -o allow_other
    mount_fg "$T/public" "$T/m2" -o "strategy=$G/strategy.ckpt" -o allow_other
    p=model.layers.0.wq.weight
    cmp "$T/want/$p/out" "$M/$p/out"  # the owner reads it
    run nobody "$M" cat "$p/out"
    echo "$output"
    [ "$status" -ne 0 ]
    [[ $output == *"Permission denied"* ]]
    nobody "$T/m2" cat "$p/out" | cmp "$T/want/$p/out" -
}

@test "another user (allow_other): ranks' files 0444 but rank_1/ 0700: no read of a tensor drawing on rank_1 (EACCES), as on disk; the owner reads the oracle's merge; rank_1/ opened, the other user reads it too" {
    gen tp2 2
    chmod 0444 "$G"/dist/rank_*/*.ckpt
    chmod 0755 "$G/dist" "$G/dist/rank_0"
    chmod 0700 "$G/dist/rank_1"
    # on disk, from the distributed checkpoint's directory
    nobody "$G/dist" cat rank_0/"$(ls "$G/dist/rank_0")" >/dev/null
    ! nobody "$G/dist" cat rank_1/"$(ls "$G/dist/rank_1")" >/dev/null || false
    mount_fg "$G/dist" "$M" -o "strategy=$G/strategy.ckpt" -o allow_other
    p=model.layers.0.wq.weight
    for f in out meta; do
        run nobody "$M" cat "$p/$f"
        echo "$p/$f: $status ${output:0:60}"
        [ "$status" -ne 0 ]
        [[ $output == *"Permission denied"* ]]
    done
    chmod 0755 "$G/dist/rank_1"
    nobody "$M" cat "$p/out" | cmp "$T/want/$p/out" -
    diff -r "$T/want" "$M"
}
