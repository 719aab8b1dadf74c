#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# A training run's directory, listed by ckptfs-dump without opening a
# checkpoint: which files are checkpoints, which are complete (read-only,
# as MindSpore leaves them, or unchanged for -o settle seconds), and the
# newest complete one, by ModelCheckpoint's <prefix>-<epoch>_<step> names
# and their renamed prefixes (<prefix>_1...), else by time.  The expected
# listings are written here from those rules, not taken from the output.

load helpers

RUN=$FIXTURES/mindspore_run_dir/qishna_lenet_modelcheckpoint
CK=$FIXTURES/mindspore_run_dir/qishna_lenet_modelcheckpoint/checkpoint_lenet-1_1875.ckpt

# listing DIR [options]: the dump's checkpoint lines, tab-separated
listing() {
    "$BUILD/ckptfs-dump" "${@:2}" "$1" | tail -n +2
}

@test "a ModelCheckpoint run: its three checkpoints, not its graph.meta; the newest is epoch 3" {
    run "$BUILD/ckptfs-dump" "$RUN"
    echo "$output"
    [ "$status" -eq 0 ]
    [ "${lines[0]}" = "# $RUN: run directory, 3 checkpoints (3 complete), latest checkpoint_lenet-3_1875" ]
    for e in 1 2 3; do
        [ "${lines[$e]}" = "checkpoint_lenet-${e}_1875"$'\t'"checkpoint_lenet-${e}_1875.ckpt"$'\tckpt\t'"epoch $e step 1875"$'\tcomplete' ]
    done
    [ "${#lines[@]}" -eq 4 ]
}

@test "what is a checkpoint: format extensions (and .zst), a sharded set's index but not its shards; not dot files, links, FIFOs, directories, JSON, graph.meta" {
    D=$BATS_TEST_TMPDIR/run
    mkdir "$D" "$D/iteration_1"
    cp "$CK" "$D/a-1_1.ckpt"
    zstd -q -c "$CK" >"$D/b-1_1.ckpt.zst"
    cp "$FIXTURES/onnx/tiny_conv2d.onnx" "$D/net.onnx"
    cp "$FIXTURES/mindspore/mindspore_relu.mindir" "$D/relu.mindir"
    $PY "$REPO/tests/oracle/safetensors_oracle.py" gen "$D/w.safetensors" --case scalars
    $PY "$REPO/tests/oracle/safetensors_oracle.py" gen-set "$D" --shards 2 --count 4
    cp "$CK" "$D/.a-2_1.ckpt.ckptfs-tmp"
    cp "$CK" "$D/.hidden.ckpt"
    ln -s a-1_1.ckpt "$D/link.ckpt"
    mkfifo "$D/fifo.ckpt"
    mkdir "$D/dir.ckpt"
    echo '{}' >"$D/log.json"
    cp "$RUN/checkpoint_lenet-graph.meta" "$D/a-graph.meta"
    listing "$D" -o settle=0 | cut -f1-3 >"$BATS_TEST_TMPDIR/got"
    cat "$BATS_TEST_TMPDIR/got"
    printf '%s\t%s\t%s\n' a-1_1 a-1_1.ckpt ckpt b-1_1 b-1_1.ckpt.zst ckpt \
        model model.safetensors.index.json safetensors-set net net.onnx onnx \
        relu relu.mindir mindir w w.safetensors safetensors | diff - "$BATS_TEST_TMPDIR/got"
}

@test "complete: read-only files at once, writable ones after -o settle seconds unchanged; the newest is the newest complete" {
    D=$BATS_TEST_TMPDIR/run
    mkdir "$D"
    cp "$CK" "$D/lenet-1_10.ckpt"
    cp "$CK" "$D/lenet-2_10.ckpt"
    chmod 0400 "$D/lenet-1_10.ckpt" "$D/lenet-2_10.ckpt"
    cp "$CK" "$D/lenet-3_10.ckpt" # still being written: writable, just changed
    chmod 0644 "$D/lenet-3_10.ckpt"
    run "$BUILD/ckptfs-dump" -o settle=3600 "$D"
    echo "$output"
    [[ ${lines[0]} == *"3 checkpoints (2 complete), latest lenet-2_10" ]]
    [[ ${lines[3]} == "lenet-3_10"*$'\tbeing written' ]]
    # unchanged for an hour: complete
    touch -d '-2 hours' "$D/lenet-3_10.ckpt"
    run "$BUILD/ckptfs-dump" -o settle=3600 "$D"
    [[ ${lines[0]} == *"3 checkpoints (3 complete), latest lenet-3_10" ]]
    run "$BUILD/ckptfs-dump" -o settle=-1 "$D"
    [ "$status" -eq 2 ]
}

@test "the newest: a reused directory's renamed prefix (lenet_1) is newer than the first run, whatever the epochs; mixed names go by time" {
    D=$BATS_TEST_TMPDIR/run
    mkdir "$D"
    for f in lenet-1_10 lenet-5_10 lenet_1-1_10 lenet_1-2_5 lenet_2-1_1; do
        cp "$CK" "$D/$f.ckpt"
    done
    # times that contradict the names: the names decide
    touch -d '-1 hour' "$D/lenet_2-1_1.ckpt"
    run "$BUILD/ckptfs-dump" "$D"
    echo "$output"
    [[ ${lines[0]} == *"latest lenet_2-1_1" ]]
    rm "$D/lenet_2-1_1.ckpt"
    run "$BUILD/ckptfs-dump" "$D"
    [[ ${lines[0]} == *"latest lenet_1-2_5" ]]
    # one prefix: epoch, then step
    rm "$D"/lenet_1-*
    run "$BUILD/ckptfs-dump" "$D"
    [[ ${lines[0]} == *"latest lenet-5_10" ]]
    # a file named otherwise: the latest modification wins
    cp "$CK" "$D/final.ckpt"
    touch -d '-1 hour' "$D/final.ckpt"
    touch -d '-2 hours' "$D/lenet-5_10.ckpt"
    run "$BUILD/ckptfs-dump" "$D"
    [[ ${lines[0]} == *"latest lenet-1_10" ]]
    [[ ${lines[1]} == "final"$'\t'"final.ckpt"$'\tckpt\t-\tcomplete' ]]
}

@test "an empty directory has no latest; one that cannot be read is one line naming it" {
    mkdir "$BATS_TEST_TMPDIR/empty"
    run "$BUILD/ckptfs-dump" "$BATS_TEST_TMPDIR/empty"
    [ "$output" = "# $BATS_TEST_TMPDIR/empty: run directory, 0 checkpoints (0 complete), latest none" ]
    # another user, who may pass through the directory but not list it
    # (reached from inside the test's directory: its parents are root's)
    mkdir -m 0711 "$BATS_TEST_TMPDIR/closed"
    chmod 0711 "$BATS_TEST_TMPDIR"
    cd "$BATS_TEST_TMPDIR"
    run setpriv --reuid=65534 --regid=65534 --clear-groups "$BUILD/ckptfs-dump" closed
    echo "$output"
    [ "$status" -eq 1 ]
    [ "$output" = "ckptfs-dump: closed: cannot open the directory: Permission denied" ]
}
