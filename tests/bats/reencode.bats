#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# The encoder behind commits, driven by ckptfs-reencode and checked with the
# oracle: an unchanged tree gives the file back byte for byte; re-encoding
# every tensor gives a file the official protobuf runtime reads as the same
# tensors.

load helpers

REENCODE=$BUILD/ckptfs-reencode

# same_tensors A B: the oracle's reference parse of A and B agree, CRC included.
same_tensors() {
    diff <($ORACLE parse --full "$1" 2>/dev/null) <($ORACLE parse --full "$2" 2>/dev/null)
}

@test "every real checkpoint: unchanged re-encode is identical, full re-encode parses the same" {
    local n=0
    for f in "$MS"/*.ckpt; do
        case $f in *strategy*|*EMPTY*) continue ;; esac
        "$REENCODE" "$f" "$BATS_TEST_TMPDIR/same.ckpt"
        cmp "$f" "$BATS_TEST_TMPDIR/same.ckpt"
        "$REENCODE" --all "$f" "$BATS_TEST_TMPDIR/all.ckpt"
        same_tensors "$f" "$BATS_TEST_TMPDIR/all.ckpt"
        n=$((n + 1))
    done
    [ "$n" -eq 5 ]
}

@test "every generated variant: identical unchanged, same tensors when all are re-encoded" {
    for c in alltypes oneshot sliced repeat packed crc names maptensor int4; do
        f=$BATS_TEST_TMPDIR/$c.ckpt
        $ORACLE gen "$f" --case "$c"
        "$REENCODE" "$f" "$BATS_TEST_TMPDIR/same.ckpt"
        cmp "$f" "$BATS_TEST_TMPDIR/same.ckpt"
        "$REENCODE" --all "$f" "$BATS_TEST_TMPDIR/$c.all"
        same_tensors "$f" "$BATS_TEST_TMPDIR/$c.all"
    done
    # the re-encode really rewrote: replaced records and packed dims are gone
    [ "$(stat -c %s "$BATS_TEST_TMPDIR/repeat.all")" -lt "$(stat -c %s "$BATS_TEST_TMPDIR/repeat.ckpt")" ]
    ! cmp -s "$BATS_TEST_TMPDIR/packed.ckpt" "$BATS_TEST_TMPDIR/packed.all" || false
    $ORACLE parse --full "$BATS_TEST_TMPDIR/crc.all" | grep -q '"crc": "ok"'
}

@test "a re-encoded checkpoint mounts and matches the original's reference parse" {
    $ORACLE gen "$BATS_TEST_TMPDIR/a.ckpt" --case alltypes
    "$REENCODE" --all "$BATS_TEST_TMPDIR/a.ckpt" "$BATS_TEST_TMPDIR/b.ckpt"
    mount_fg "$BATS_TEST_TMPDIR/b.ckpt" "$BATS_TEST_TMPDIR/m"
    run $ORACLE check "$BATS_TEST_TMPDIR/m" "$BATS_TEST_TMPDIR/a.ckpt"
    echo "$output"
    [ "$status" -eq 0 ]
}

@test "the output keeps the model's mode and no temporary file is left" {
    $ORACLE gen "$BATS_TEST_TMPDIR/a.ckpt" --case sliced
    cp "$BATS_TEST_TMPDIR/a.ckpt" "$BATS_TEST_TMPDIR/out.ckpt"
    chmod 0400 "$BATS_TEST_TMPDIR/out.ckpt"
    "$REENCODE" --all "$BATS_TEST_TMPDIR/a.ckpt" "$BATS_TEST_TMPDIR/out.ckpt"
    [ "$(stat -c %a "$BATS_TEST_TMPDIR/out.ckpt")" = 400 ]
    [ -z "$(ls -A "$BATS_TEST_TMPDIR" | grep ckptfs-)" ]
    same_tensors "$BATS_TEST_TMPDIR/a.ckpt" "$BATS_TEST_TMPDIR/out.ckpt"
}

@test "MODEL whose save was cut short past its commit point: refused in one line, its files left for its writer" {
    local d=$BATS_TEST_TMPDIR before
    $ORACLE gen "$d/a.ckpt" --case sliced
    $ORACLE gen "$d/.a.ckpt.ckptfs-BBBBBB" --case alltypes
    printf "ckptfs-journal 1\n.a.ckpt.ckptfs-BBBBBB\0a.ckpt\0end\n" >"$d/.a.ckpt.ckptfs-journal"
    before=$(sha "$d/a.ckpt")
    run "$REENCODE" "$d/a.ckpt" "$d/out.ckpt"
    [ "$status" -eq 1 ]
    [ "${#lines[@]}" -eq 1 ]
    [[ "$output" == "ckptfs-reencode: $d/a.ckpt: a save was interrupted (journal "*"); mount it writable once (-o rw) to finish it" ]]
    [ "$(sha "$d/a.ckpt")" = "$before" ]
    [ -e "$d/.a.ckpt.ckptfs-BBBBBB" ] && [ -e "$d/.a.ckpt.ckptfs-journal" ]
    [ ! -e "$d/out.ckpt" ]
}
