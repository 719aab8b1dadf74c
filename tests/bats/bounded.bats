#!/usr/bin/env bats
# Bounded resources: what a mount may take of $TMPDIR (a zstd model without
# a seek table is decompressed there), of descriptors (edits under a low
# RLIMIT_NOFILE, and a save still possible), and of memory (str values).
# Expected contents come from the zstd command, ckpt_oracle.py and
# python3-numpy, never from ckptfs.

load helpers

setup() {
    M=$BATS_TEST_TMPDIR/m
    T=$BATS_TEST_TMPDIR/tmpfs # a small TMPDIR, mounted by the tests that need it
    mkdir -p "$M" "$T"
}

teardown() {
    local rc=0
    ckptfs_teardown || rc=1
    # A refused mount must not be left behind, whatever the test saw.
    if mountpoint -q "$M"; then
        fusermount3 -u "$M" || fusermount3 -uz "$M" || true
        rc=1
    fi
    if mountpoint -q "$T"; then
        umount "$T"
    fi
    return "$rc"
}

# small_tmpdir MIB: a tmpfs of MIB MiB at $T.
small_tmpdir() {
    mount -t tmpfs -o "size=$1m,mode=1777" tmpfs "$T"
}

# used DIR: bytes in use on DIR's filesystem.
used() { df -B1 --output=used "$1" | tail -1 | tr -d ' '; }

# refused_mount MODEL [options]: ckptfs refuses MODEL with exactly one line
# of output (in $output), and nothing is mounted.
refused_mount() {
    local model=$1
    shift
    run "$CKPTFS" "$@" "$model" "$M"
    echo "status $status: $output"
    [ "$status" -ne 0 ]
    [ "${#lines[@]}" -eq 1 ]
    ! mountpoint -q "$M"
}

# zeros_zst MIB OUT [zstd options]: MIB MiB of zeros compressed by zstd, from
# a pipe; --stream-size makes zstd declare the size in the frame header,
# --no-content-size makes it not.
zeros_zst() {
    local mib=$1 out=$2
    shift 2
    head -c "${mib}M" /dev/zero | zstd -q "$@" -c >"$out"
}

@test "tmp_max: a 13 KB zstd file declaring 400 MiB is refused before anything is written, in one line naming the sizes" {
    small_tmpdir 64
    zeros_zst 400 "$BATS_TEST_TMPDIR/bomb.ckpt.zst" --stream-size=419430400
    [ "$(stat -c %s "$BATS_TEST_TMPDIR/bomb.ckpt.zst")" -lt 20000 ]
    before=$(used "$T")
    TMPDIR=$T refused_mount "$BATS_TEST_TMPDIR/bomb.ckpt.zst" -o tmp_max=1M
    [[ $output == *"bomb.ckpt.zst: decompresses to 419430400 bytes"* ]]
    [[ $output == *"1048576-byte limit"* ]]
    [[ $output == *"-o tmp_max=SIZE"* ]]
    [ "$(used "$T")" = "$before" ]
    # ckptfs-dump takes the same option and says the same.
    TMPDIR=$T run "$BUILD/ckptfs-dump" -o tmp_max=1M "$BATS_TEST_TMPDIR/bomb.ckpt.zst"
    [ "$status" -eq 1 ]
    [[ $output == *"decompresses to 419430400 bytes"*"1048576-byte limit"* ]]
}

@test "tmp_max by default: 4 GiB declared by a 150 KB file is refused, naming the default rule" {
    zeros_zst 4096 "$BATS_TEST_TMPDIR/bomb.ckpt.zst" -1 --stream-size=4294967296
    TMPDIR=$BATS_TEST_TMPDIR refused_mount "$BATS_TEST_TMPDIR/bomb.ckpt.zst"
    [[ $output == *"decompresses to 4294967296 bytes"*"268435456-byte limit"* ]]
    [[ $output == *"64 times the compressed size"* ]]
}

@test "tmp_max: a zstd file without a declared size stops as its output passes the limit; nothing left" {
    small_tmpdir 64
    zeros_zst 400 "$BATS_TEST_TMPDIR/bomb.ckpt.zst" --no-content-size
    before=$(used "$T")
    TMPDIR=$T refused_mount "$BATS_TEST_TMPDIR/bomb.ckpt.zst" -o tmp_max=8M
    [[ $output == *"bomb.ckpt.zst: offset "*"passes "*"bytes (no declared size)"*"8388608-byte limit"* ]]
    [ "$(used "$T")" = "$before" ]
}

@test "free space: a TMPDIR on a 64 MiB tmpfs refuses 400 MiB, declared or not, naming the free bytes" {
    small_tmpdir 64
    zeros_zst 400 "$BATS_TEST_TMPDIR/a.ckpt.zst" --stream-size=419430400
    zeros_zst 400 "$BATS_TEST_TMPDIR/b.ckpt.zst" --no-content-size
    before=$(used "$T")
    TMPDIR=$T refused_mount "$BATS_TEST_TMPDIR/a.ckpt.zst" -o tmp_max=1G
    [[ $output == *"decompresses to 419430400 bytes (declared by its frames), but $T has "*" bytes free"* ]]
    [ "$(used "$T")" = "$before" ]
    TMPDIR=$T refused_mount "$BATS_TEST_TMPDIR/b.ckpt.zst" -o tmp_max=1G
    [[ $output == *"(no declared size), but $T has "*" bytes free"* ]]
    [ "$(used "$T")" = "$before" ]
}

@test "a real zstd model still mounts within a small tmp_max, declared size or not" {
    small_tmpdir 64
    $ORACLE gen "$BATS_TEST_TMPDIR/plain.ckpt" --case alltypes
    zstd -q "$BATS_TEST_TMPDIR/plain.ckpt" -o "$BATS_TEST_TMPDIR/a.ckpt.zst"
    zstd -q --no-content-size -c "$BATS_TEST_TMPDIR/plain.ckpt" >"$BATS_TEST_TMPDIR/b.ckpt.zst"
    size=$(stat -c %s "$BATS_TEST_TMPDIR/plain.ckpt")
    for f in a b; do
        TMPDIR=$T mount_fg "$BATS_TEST_TMPDIR/$f.ckpt.zst" "$M" -o ro,tmp_max=$size
        run $ORACLE check "$M" "$BATS_TEST_TMPDIR/plain.ckpt"
        echo "$output"
        [ "$status" -eq 0 ]
        fusermount3 -u "$M"
    done
    # One byte less is refused.
    TMPDIR=$T refused_mount "$BATS_TEST_TMPDIR/a.ckpt.zst" -o tmp_max=$((size - 1))
    [[ $output == *"decompresses to $size bytes"* ]]
}

@test "-o tmp_max with a bad size is refused" {
    $ORACLE gen "$BATS_TEST_TMPDIR/plain.ckpt" --case alltypes
    refused_mount "$BATS_TEST_TMPDIR/plain.ckpt" -o tmp_max=lots
    [[ $output == *"-o tmp_max=lots: give a size"* ]]
}
