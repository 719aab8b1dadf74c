#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# Hugging Face sharded sets written: ckptfs-convert IN NAME.safetensors.index.json, the
# mount's view with -o max_shard_size (model.safetensors.index.json beside
# model-00001-of-0000N.safetensors), and a set made with -o create.  The oracle
# (tests/oracle/convert_oracle.py split) reads every shard with json + numpy
# (safetensors_oracle.load_set: each shard a valid file, the weight map exactly each
# shard's tensors, total_size their bytes), compares them with IN read by its own reader
# (the protobuf runtime for a .ckpt), and checks the cut against huggingface_hub's rule,
# which it applies itself, and the index byte for byte against what transformers'
# save_pretrained writes.  Debian has neither transformers nor the safetensors package.

load helpers

CONVERT=$BUILD/ckptfs-convert
CONV="$PY $REPO/tests/oracle/convert_oracle.py"
LENET=$MS/mindarmour_checkpoint_lenet-10_1875.ckpt
INDEX=model.safetensors.index.json

setup() {
    T=$BATS_TEST_TMPDIR
    M=$T/m
}

# shards DIR STEM: the shard files of STEM in DIR, one a line
shards() { (cd "$1" && ls -1 "$2"-*-of-*.safetensors); }

@test "ckptfs-convert to a set: cut as huggingface_hub cuts a state dict, the index as transformers writes it" {
    # lenet's fc1 weights (192000 bytes) pass 50 KB: each alone, numbered before the
    # shard still open, the rest cut at 50000 bytes; KB is decimal, as Hugging Face's
    mkdir "$T/a"
    "$CONVERT" -q -o max_shard_size=50KB "$LENET" "$T/a/lenet.safetensors.index.json"
    $CONV split "$LENET" "$T/a/lenet.safetensors.index.json" 50000
    [ "$(shards "$T/a" lenet | wc -l)" -eq 6 ]
    # K is binary, as ckptfs's other sizes
    mkdir "$T/b"
    "$CONVERT" -q -o max_shard_size=50K "$LENET" "$T/b/$INDEX"
    $CONV split "$LENET" "$T/b/$INDEX" 51200
    # the default, 5 GB: one shard, still with its index, as OUT names one
    mkdir "$T/c"
    "$CONVERT" -q "$MS/goldenstick_test_linears_woq_predict_2stage_fp32.ckpt" "$T/c/$INDEX"
    $CONV split "$MS/goldenstick_test_linears_woq_predict_2stage_fp32.ckpt" "$T/c/$INDEX" \
        5000000000
    [ "$(shards "$T/c" model)" = model-00001-of-00001.safetensors ]
    # ckptfs reads the set it wrote as the tensors it was given
    run "$BUILD/ckptfs-diff" "$LENET" "$T/a/lenet.safetensors.index.json"
    [ "$status" -eq 0 ]
}

@test "ckptfs-convert to a set: an existing index or shard is replaced only with -f, a link in place replaced, not followed" {
    mkdir "$T/s"
    "$CONVERT" -q -o max_shard_size=50KB "$LENET" "$T/s/$INDEX"
    local before
    before=$(cd "$T/s" && sha256sum ./* | sha256sum)
    run "$CONVERT" -q -o max_shard_size=50KB "$LENET" "$T/s/$INDEX"
    [ "$status" -eq 1 ]
    [[ $output == *"$INDEX: exists (give -f to replace it)"* ]]
    # a shard's name taken, the index free: refused, nothing written
    rm "$T/s/$INDEX"
    run "$CONVERT" -q -o max_shard_size=50KB "$LENET" "$T/s/$INDEX"
    [ "$status" -eq 1 ]
    [[ $output == *"model-00001-of-00006.safetensors: exists (give -f to replace it)"* ]]
    [ ! -e "$T/s/$INDEX" ]
    [ "$(ls -A "$T/s" | grep -c ckptfs)" -eq 0 ]
    # -f: every file replaced; a shard's name that is a link: the link replaced, its
    # target untouched
    echo keep >"$T/target"
    ln -sf "$T/target" "$T/s/model-00002-of-00006.safetensors"
    "$CONVERT" -q -f -o max_shard_size=50KB "$LENET" "$T/s/$INDEX"
    [ "$(cat "$T/target")" = keep ]
    [ ! -L "$T/s/model-00002-of-00006.safetensors" ]
    [ "$(cd "$T/s" && sha256sum ./* | sha256sum)" = "$before" ]
    $CONV split "$LENET" "$T/s/$INDEX" 50000
}

@test "ckptfs-convert to a set: refused in one line, before anything is written" {
    # more shards than a set may have (a model's 4096 files)
    $PY "$REPO/tests/oracle/safetensors_oracle.py" gen "$T/many.safetensors" --case many \
        --count 4100
    mkdir "$T/o"
    run "$CONVERT" -q -o max_shard_size=1 "$T/many.safetensors" "$T/o/$INDEX"
    [ "$status" -eq 1 ]
    [[ $output == *"4100 shards of at most 1 bytes, more than the 4095 a set may have"* ]]
    [ -z "$(ls -A "$T/o")" ]
    # max_shard_size is for a set; sizes are positive, with known units
    run "$CONVERT" -q -o max_shard_size=1M "$LENET" "$T/o/x.safetensors"
    [ "$status" -eq 2 ]
    [[ $output == *"-o max_shard_size is for a sharded set OUT"* ]]
    for bad in 0 -5 5XB 1.5GB ""; do
        run "$CONVERT" -q -o max_shard_size="$bad" "$LENET" "$T/o/$INDEX"
        [ "$status" -eq 2 ]
    done
    # an index is plain JSON
    run "$CONVERT" -q "$LENET" "$T/o/$INDEX.zst"
    [ "$status" -eq 1 ]
    [[ $output == *"a sharded set's index is plain JSON"* ]]
    [ -z "$(ls -A "$T/o")" ]
}

# viewed_set MODEL SIZE [options...]: MODEL mounted as safetensors cut at SIZE at $M (with
# $MOUNT_OPTS too), and converted with the same size (and options) into $T/conv/$INDEX;
# each file of the view is ckptfs-convert's
viewed_set() {
    local model=$1 size=$2
    shift 2
    mount_fg "$model" "$M" -o "as=safetensors,max_shard_size=$size${MOUNT_OPTS:-}" "$@"
    rm -rf "$T/conv"
    mkdir "$T/conv"
    "$CONVERT" -q -o "max_shard_size=$size" "$@" "$model" "$T/conv/$INDEX"
    [ "$(ls -A "$M")" = "$(ls -A "$T/conv")" ]
    local f
    for f in "$T"/conv/*; do
        # O_DIRECT: each read reaches the daemon as asked, from an odd offset
        dd if="$M/${f##*/}" iflag=direct,skip_bytes skip=13 bs=4093 status=none |
            cmp - <(tail -c +14 "$f")
        cmp "$M/${f##*/}" "$f"
    done
}

@test "-o as=safetensors,max_shard_size: the index and shards are ckptfs-convert's, read back by the oracle" {
    viewed_set "$LENET" 50KB
    [ "$(ls "$M" | wc -l)" -eq 7 ]
    $CONV split "$LENET" "$M/$INDEX" 50000
    [ "$(stat -c '%F %a' "$M/$INDEX")" = "regular file 444" ]
    unmount "$M"
    # a merged distributed checkpoint: tensors gathered from ranks, shards of them
    $PY "$REPO/tests/oracle/dist_oracle.py" gen "$T/g" --ranks 4 --case tp4x2 --seed 2
    viewed_set "$T/g/dist" 200 -o strategy="$T/g/strategy.ckpt"
    $CONV compare "$T/g/full.ckpt" "$M/$INDEX"
    unmount "$M"
    # a model that fits in one shard: model.safetensors alone, as save_pretrained writes it
    mount_fg "$LENET" "$M" -o as=safetensors,max_shard_size=1MB
    [ "$(ls -A "$M")" = model.safetensors ]
    "$CONVERT" -q "$LENET" "$T/one.safetensors"
    cmp "$M/model.safetensors" "$T/one.safetensors"
    [ ! -e "$M/$INDEX" ]
}

# nobody CMD...: CMD as another user without root's groups, in the mount
nobody() {
    (cd "$M" && setpriv --reuid=65534 --regid=65534 --clear-groups "$@")
}

@test "-o as=safetensors,max_shard_size,allow_other: another user reads the set of a 0644 model, nothing of a 0600 one" {
    cp "$LENET" "$T/model.ckpt"
    chmod 644 "$T/model.ckpt"
    MOUNT_OPTS=,allow_other viewed_set "$T/model.ckpt" 50KB
    nobody cat "$INDEX" | cmp - "$T/conv/$INDEX"
    nobody cat model-00003-of-00006.safetensors | cmp - "$T/conv/model-00003-of-00006.safetensors"
    unmount "$M"
    chmod 600 "$T/model.ckpt"
    mount_fg "$T/model.ckpt" "$M" -o as=safetensors,max_shard_size=50KB,allow_other
    local f
    for f in "$INDEX" model-00001-of-00006.safetensors; do
        run nobody cat "$f"
        [ "$status" -ne 0 ]
        [[ $output == *"Permission denied"* ]]
    done
    cmp "$M/$INDEX" "$T/conv/$INDEX"   # its owner reads
}

@test "-o create of a set: the first save cuts it at max_shard_size; a tensor added later goes to the last shard" {
    mount_fg "$LENET" "$T/src"
    mkdir "$T/new"
    mount_fg "$T/new/$INDEX" "$M" -o create,max_shard_size=50KB,commit=manual
    # the tree copied whole in its order (the oracle cuts IN's), then saved once
    # (commit=manual: touch snapshot_done)
    local d
    for d in $(ls -U "$T/src"); do
        [ "$d" = snapshot_done ] || cp -r "$T/src/$d" "$M/"
    done
    touch "$M/snapshot_done"
    $CONV split "$LENET" "$T/new/$INDEX" 50000
    # a new tensor: into the last shard, the weight map and total_size updated
    mkdir "$M/extra"
    cp "$T/src/fc3.bias/meta" "$M/extra/meta"
    cp "$T/src/fc3.bias/out" "$M/extra/out"
    touch "$M/snapshot_done"
    $PY - "$T/new/$INDEX" <<'EOF'
import json, sys
index = json.load(open(sys.argv[1]))
assert index["weight_map"]["extra"] == "model-00006-of-00006.safetensors", index
EOF
    $PY "$REPO/tests/oracle/safetensors_oracle.py" index "$T/new/$INDEX" | cmp - "$T/new/$INDEX"
}

@test "max_shard_size refused in one line: without a view or a new set, or not a size" {
    mount_refused -o max_shard_size=5GB "$LENET"
    grep -q 'max_shard_size cuts the shards of -o as=safetensors' "$T/err"
    mount_refused -o as=safetensors,max_shard_size=5XB "$LENET"
    grep -q 'max_shard_size=5XB: give a size' "$T/err"
}
