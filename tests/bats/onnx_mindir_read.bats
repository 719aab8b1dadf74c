#!/usr/bin/env bats
# Real ONNX and MindIR models mounted read-only and compared, tensor by
# tensor, with tests/oracle/graph_oracle.py (python3-onnx's numpy_helper for
# ONNX; the official protobuf runtime with tests/oracle/mind_ir.proto for
# MindIR).

load helpers

check_fixture() {
    local model=$1 mnt=$BATS_TEST_TMPDIR/m$2
    mount_fg "$model" "$mnt" -o ro
    run $GRAPH_ORACLE check "$mnt" "$model"
    echo "$model: $output"
    [ "$status" -eq 0 ]
}

@test "every readable ONNX fixture matches numpy_helper tensor by tensor" {
    local n=0
    for f in "$ONNX_FIX"/*.onnx "$ONNX_FIX"/external_burn/*.onnx; do
        case $f in *dangling*) continue ;; esac
        check_fixture "$f" "$n"
        n=$((n + 1))
    done
    [ "$n" -eq 9 ]
}

@test "every plain MindIR fixture matches the protobuf runtime tensor by tensor" {
    local n=0
    for f in "$MS"/*.mindir; do
        case $f in *encrpty_key*) continue ;; esac
        check_fixture "$f" "$n"
        n=$((n + 1))
    done
    [ "$n" -eq 4 ]
}

@test "weights in Constant nodes and If subgraphs are shown (PaddleOCR, Silero v5)" {
    mount_fg "$ONNX_FIX/ppocrv4_rec_constants.onnx" "$BATS_TEST_TMPDIR/p" -o ro
    [ "$(ls "$BATS_TEST_TMPDIR/p" | grep -c '%const$')" -eq 325 ]
    [ "$(getfattr --only-values -n user.ckptfs.name "$BATS_TEST_TMPDIR/p/batch_norm2d_148.b_0%const")" = batch_norm2d_148.b_0 ]
    mount_fg "$ONNX_FIX/silero_vad_v5_subgraphs.onnx" "$BATS_TEST_TMPDIR/s" -o ro
    [ "$(ls "$BATS_TEST_TMPDIR/s" | grep -c '%@If_0\.then_branch$')" -gt 0 ]
    [ "$(ls "$BATS_TEST_TMPDIR/s" | grep -c '%@If_0\.else_branch$')" -gt 0 ]
    [ "$(ls "$BATS_TEST_TMPDIR/s" | grep -vc snapshot_done)" -eq 341 ]
    # the one top-level Constant is stored in int64_data: decoded to 8 LE bytes
    [ "$(od -An -tx1 "$BATS_TEST_TMPDIR/s/Constant_0_output%const/out" | wc -w)" -eq 8 ]
}

@test "typed fields are shown as little-endian raw bytes (keras2onnx float_data/int64_data)" {
    local m=$ONNX_FIX/typed_fields_keras2onnx.onnx mnt=$BATS_TEST_TMPDIR/k
    mount_fg "$m" "$mnt" -o ro
    # an int64_data tensor and a float_data one, read with numpy against the oracle
    for d in $($GRAPH_ORACLE list "$m" | awk -F'\t' '$2 == "INT64" || $2 == "FLOAT" {print $1}' | head -20); do
        $PY -c 'import numpy as np,sys; print("\n".join(repr(v.item()) for v in np.fromfile(sys.argv[1], dtype=sys.argv[2]).ravel()))' \
            "$mnt/$d/out" "$(getfattr --only-values -n user.ckptfs.type "$mnt/$d" | sed 's/INT64/<i8/;s/FLOAT/<f4/')" >"$BATS_TEST_TMPDIR/got"
        $GRAPH_ORACLE values "$m" "$d" >"$BATS_TEST_TMPDIR/want"
        cmp "$BATS_TEST_TMPDIR/got" "$BATS_TEST_TMPDIR/want"
    done
}

@test "MindIR parameters lose the graph prefix in the directory, keep it in user.ckptfs.name" {
    mount_fg "$MS/mindspore_ori_net.mindir" "$BATS_TEST_TMPDIR/m" -o ro
    [ -d "$BATS_TEST_TMPDIR/m/conv1.weight" ]
    [ "$(getfattr --only-values -n user.ckptfs.name "$BATS_TEST_TMPDIR/m/conv1.weight")" = "17_1_construct.Default_wrapper.5:conv1.weight" ]
    # the fc weights are Constant nodes
    [ "$(cat "$BATS_TEST_TMPDIR/m/x%const/meta")" = "$($ORACLE meta-of 400,120 kFloat)" ]
}

@test "external data is served from the side file at its offset (mixed_data)" {
    local mnt=$BATS_TEST_TMPDIR/x
    mount_fg "$ONNX_FIX/external_burn/mixed_data.onnx" "$mnt" -o ro
    cmp "$mnt/weight/out" <(dd if="$ONNX_FIX/external_burn/mixed_data.bin" bs=65536 skip=1 count=1 status=none | head -c 16384)
}

@test "a missing external data file is a clear mount error (fp16_dangling_external)" {
    mkdir "$BATS_TEST_TMPDIR/none"
    run "$CKPTFS" -f -o ro "$ONNX_FIX/fp16_dangling_external.onnx" "$BATS_TEST_TMPDIR/none"
    [ "$status" -ne 0 ]
    [[ "$output" == *"fp16_dangling_external.onnx: tensor 'fc1.weight': external data file"*"2efa3527-1996-11ef-8eaf-0068ebc1adf8.data: No such file or directory"* ]]
    [ "${#lines[@]}" -eq 1 ]
}

@test "every truncation and 1000 byte flips each of small ONNX/MindIR files are refused or read, never a crash" {
    local dump=$BUILD/ckptfs-dump
    for f in "$ONNX_FIX/tiny_conv2d.onnx" "$MS/mindspore_relu.mindir"; do
        local ext=${f##*.} size
        size=$(stat -c %s "$f")
        for ((n = 0; n < size; n++)); do
            head -c "$n" "$f" >"$BATS_TEST_TMPDIR/t.$ext"
            run "$dump" "$BATS_TEST_TMPDIR/t.$ext"
            # refused with the file named, or read: never a signal
            [ "$status" -lt 128 ]
            [ "$status" -eq 0 ] || [[ "$output" == *"t.$ext"* ]]
        done
        $PY - "$f" "$BATS_TEST_TMPDIR/flip" "$ext" <<'PY' >"$BATS_TEST_TMPDIR/flips"
import random, sys
data = open(sys.argv[1], "rb").read()
rng = random.Random(7)
for i in range(1000):
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        b[rng.randrange(len(b))] = rng.randrange(256)
    name = "%s%d.%s" % (sys.argv[2], i, sys.argv[3])
    open(name, "wb").write(b)
    print(name)
PY
        while read -r g; do
            run "$dump" "$g"
            [ "$status" -lt 128 ]
        done <"$BATS_TEST_TMPDIR/flips"
    done
}
