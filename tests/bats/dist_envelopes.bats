#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# A distributed checkpoint whose ranks are compressed or encrypted (issue 14):
# each rank is opened as any model is, so the merge is the same whatever
# wraps the files.  The ranks are cut by dist_oracle's `gen`, wrapped by zstd
# and by envelope_oracle (python3-cryptography), and the mount must equal the
# oracle's merge of the plain ranks.

load helpers

DIST="$PY $REPO/tests/oracle/dist_oracle.py"
ENV_ORACLE="$PY $REPO/tests/oracle/envelope_oracle.py"
KEY_HEX=30313233343536373839414243444546

setup() {
    T=$BATS_TEST_TMPDIR
    $DIST gen "$T/set" --ranks 4 --case tp4x2 --seed 11
    $DIST merge "$T/set/strategy.ckpt" "$T/set/dist" "$T/expect"
}

@test "ranks compressed with zstd (seekable with small frames, and plain) merge as the plain ranks do" {
    local f=$T/set/dist/rank_0/checkpoint_0.ckpt
    $ENV_ORACLE zstd-seekable "$f" "$f.zst" --frame-size 256 --checksums
    rm "$f"
    for r in 1 2 3; do
        zstd -q --rm "$T/set/dist/rank_$r/checkpoint_$r.ckpt"
    done
    [ -f "$T/set/dist/rank_3/checkpoint_3.ckpt.zst" ]
    mount_fg "$T/set/dist" "$T/m" -o strategy="$T/set/strategy.ckpt"
    diff -r "$T/expect" "$T/m"
}

@test "ranks encrypted (AES-GCM, AES-CBC) merge with the key, and are refused without it" {
    local r mode
    for r in 0 1 2 3; do
        mode=AES-GCM
        [ $((r % 2)) = 1 ] && mode=AES-CBC
        $ENV_ORACLE encrypt --mode $mode --key-hex $KEY_HEX \
            "$T/set/dist/rank_$r/checkpoint_$r.ckpt" "$T/enc"
        mv "$T/enc" "$T/set/dist/rank_$r/checkpoint_$r.ckpt"
    done
    mkdir -p "$T/m0"
    run $CKPTFS -o strategy="$T/set/strategy.ckpt" "$T/set/dist" "$T/m0"
    [ "$status" = 1 ]
    [ "${#lines[@]}" = 1 ]
    [[ "$output" == *rank_0/checkpoint_0.ckpt* ]]
    ! mountpoint -q "$T/m0" || false
    CKPTFS_KEY_HEX=$KEY_HEX mount_fg "$T/set/dist" "$T/m" -o strategy="$T/set/strategy.ckpt"
    diff -r "$T/expect" "$T/m"
}

@test "-o threads: parallel readers of encrypted ranks, with small page caches, all read the oracle's bytes" {
    local r
    for r in 0 1 2 3; do
        $ENV_ORACLE encrypt --mode AES-GCM --key-hex $KEY_HEX --block-size 64 \
            "$T/set/dist/rank_$r/checkpoint_$r.ckpt" "$T/enc"
        mv "$T/enc" "$T/set/dist/rank_$r/checkpoint_$r.ckpt"
    done
    CKPTFS_KEY_HEX=$KEY_HEX mount_fg "$T/set/dist" "$T/m" -o strategy="$T/set/strategy.ckpt" \
        -o threads -o cache_size=8K
    readers_agree "$T/m" "$T/expect"
}
