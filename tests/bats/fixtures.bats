#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# Real MindSpore checkpoints and real OneFlow snapshots (../shared/fixtures),
# compared with the independent oracle (python protobuf + numpy).

load helpers

@test "every valid MindSpore fixture mounts and matches the reference parse" {
    local n=0
    for f in "$MS"/*.ckpt; do
        case $f in *strategy*|*EMPTY*) continue ;; esac
        mount_fg "$f" "$BATS_TEST_TMPDIR/m$n"
        run $ORACLE check "$BATS_TEST_TMPDIR/m$n" "$f"
        echo "$f: $output"
        [ "$status" -eq 0 ]
        n=$((n + 1))
    done
    [ "$n" -eq 5 ]
}

@test "LeNet: 18 tensors in file order, dims-[0] Float64 values are 0-d" {
    mount_fg "$MS/mindarmour_checkpoint_lenet-10_1875.ckpt" "$BATS_TEST_TMPDIR/m"
    run ls -U "$BATS_TEST_TMPDIR/m"
    [ "${lines[0]}" = conv1.weight ]
    [ "${lines[18]}" = snapshot_done ] # last, as OneFlow writes it
    [ "${#lines[@]}" -eq 19 ]
    expected=$($ORACLE parse "$MS/mindarmour_checkpoint_lenet-10_1875.ckpt" |
        $PY -c 'import json,sys; print("\n".join(e["dir"] for e in json.load(sys.stdin)))')
    [ "$(ls -U "$BATS_TEST_TMPDIR/m" | head -n -1)" = "$expected" ]
    [ "$(cat "$BATS_TEST_TMPDIR/m/learning_rate/meta")" = "$(printf 'shape {\n}\ndata_type: kDouble')" ]
    [ "$(stat -c %s "$BATS_TEST_TMPDIR/m/momentum/out")" -eq 8 ]
}

@test "dims [0] is a scalar while dims [1] stays 1-D (mindquantum)" {
    mount_fg "$MS/mindquantum_hackathon01_Mr_Tang754_model.ckpt" "$BATS_TEST_TMPDIR/m"
    cmp <($ORACLE meta-of "" kFloat) "$BATS_TEST_TMPDIR/m/learning_rate/meta"
    cmp <($ORACLE meta-of 1 kFloat) "$BATS_TEST_TMPDIR/m/beta1_power/meta"
    [ "$(getfattr --only-values -n user.ckptfs.shape "$BATS_TEST_TMPDIR/m/learning_rate")" = "[]" ]
    [ "$(getfattr --only-values -n user.ckptfs.shape "$BATS_TEST_TMPDIR/m/beta1_power")" = "[1]" ]
}

@test "a parallel-strategy protobuf named .ckpt is refused, nothing mounted" {
    f=$MS/goldenstick_ckpt_strategy_rank_0.ckpt
    mkdir "$BATS_TEST_TMPDIR/m"
    run "$CKPTFS" "$f" "$BATS_TEST_TMPDIR/m"
    [ "$status" -ne 0 ]
    [ "${#lines[@]}" -eq 1 ]
    [[ $output == *"$f"*"not a MindSpore checkpoint: no tensor records"* ]]
    ! mountpoint -q "$BATS_TEST_TMPDIR/m" || false
}

@test "an empty .ckpt is refused as empty" {
    f=$MS/mindscience_phylstm_your_file_EMPTY.ckpt
    mkdir "$BATS_TEST_TMPDIR/m"
    run "$CKPTFS" "$f" "$BATS_TEST_TMPDIR/m"
    [ "$status" -ne 0 ]
    [[ $output == *"$f: empty file"* ]]
    ! mountpoint -q "$BATS_TEST_TMPDIR/m" || false
}

@test "meta text is byte-identical with the oracle's text_format for every OneFlow fixture file" {
    local n=0
    for meta in "$FIXTURES"/oneflow/*/*/meta; do
        dims=$($PY -c '
import re,sys
t=open(sys.argv[1]).read()
print(",".join(re.findall(r"dim: (\d+)", t)), re.search(r"data_type: (\w+)", t).group(1))' "$meta")
        cmp <($ORACLE meta-of ${dims% *} ${dims#* }) "$meta"
        n=$((n + 1))
    done
    [ "$n" -ge 15 ]
}

@test "a checkpoint of a real OneFlow snapshot's variables mounts as that snapshot, byte for byte" {
    src=$FIXTURES/oneflow/legacy_v2_java_mlp_adam
    $ORACLE from-oneflow "$src" "$BATS_TEST_TMPDIR/mlp.ckpt"
    mount_fg "$BATS_TEST_TMPDIR/mlp.ckpt" "$BATS_TEST_TMPDIR/m"
    diff -r "$src" "$BATS_TEST_TMPDIR/m"
    # and `cp -r` out of the mount is that snapshot again
    cp -r "$BATS_TEST_TMPDIR/m" "$BATS_TEST_TMPDIR/copy"
    diff -r "$src" "$BATS_TEST_TMPDIR/copy"
}

@test "graph_save fixture: the mount's meta for a (3,4) kFloat equals OneFlow's own file" {
    src=$FIXTURES/oneflow/graph_save_affine_with_parameter
    $ORACLE from-oneflow "$src" "$BATS_TEST_TMPDIR/g.ckpt"
    mount_fg "$BATS_TEST_TMPDIR/g.ckpt" "$BATS_TEST_TMPDIR/m"
    cmp "$src/model.a/meta" "$BATS_TEST_TMPDIR/m/model.a/meta"
    cmp "$src/model.a/out" "$BATS_TEST_TMPDIR/m/model.a/out"
    cmp "$src/model.b/meta" "$BATS_TEST_TMPDIR/m/model.b/meta"
}
