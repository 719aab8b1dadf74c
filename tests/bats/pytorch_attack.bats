#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# Issue 39: the PyTorch save path, attacked with small files torch itself
# loads (weights_only=True), each written byte by byte by the oracle
# (tests/oracle/pytorch_oracle.py attack-all).  Through a real `-o rw`
# mount, an edit or a rename is saved (touch snapshot_done) and torch
# checks the saved file: the edit is there, nothing else changed, the
# value the tree does not show kept with its sharing.

load helpers

PT_ORACLE="$PY $REPO/tests/oracle/pytorch_oracle.py"
M=$BATS_TEST_TMPDIR/m
T=$BATS_TEST_TMPDIR

setup_file() {
    # every attack in one process: importing torch costs seconds
    /usr/bin/python3 "$BATS_TEST_DIRNAME/../oracle/pytorch_oracle.py" attack-all "$BATS_FILE_TMPDIR" >/dev/null
}

teardown() {
    # a daemon the hang guard killed leaves its mount, not connected
    if mountpoint -q "$M" || grep -qF " $M fuse" /proc/mounts; then
        fusermount3 -u "$M" || fusermount3 -uz "$M"
    fi
    ckptfs_teardown
}

# attack CASE: the hostile file of CASE copied to $f, its original in $T/orig.pt
attack() {
    f=$T/$1.pt
    cp "$BATS_FILE_TMPDIR/attack-$1.pt" "$f"
    cp "$f" "$T/orig.pt"
}

# edit_out NAME: NAME's out given new random bytes (kept in $T/new.out)
edit_out() {
    size=$(stat -c %s "$M/$1/out")
    head -c "$size" /dev/urandom >"$T/new.out"
    dd if="$T/new.out" of="$M/$1/out" conv=notrunc,fsync status=none
}

@test "a hidden value of one tuple shared twice per level, 40 deep, is written once and fetched from the memo: the re-laid-out save ends, torch loads it shared" {
    attack shared_tuple
    mount_fg "$f" "$M" -o rw
    mv "$M/w" "$M/w2"
    # a guard against a hang if this regresses (2^40 paths), not a speed
    # check: a save still running then has its daemon killed, which ends the
    # touch (a FUSE request may not be interruptible) and fails the test
    touch "$M/snapshot_done" &
    local tp=$!
    if ! timeout 120 tail --pid="$tp" -f /dev/null; then
        kill -KILL "$(daemon_pid)"
        fusermount3 -uz "$M" || true
    fi
    wait "$tp"
    unmount "$M"
    run $PT_ORACLE attack-check shared_tuple "$T/orig.pt" "$f"
    echo "$output"
    [ "$status" -eq 0 ]
}

@test "two storage records whose bytes overlap (one's local header in the other's extra field): an edit of one lays the file out anew, the other keeps its values" {
    attack overlap
    mount_fg "$f" "$M" -o rw
    edit_out a
    touch "$M/snapshot_done"
    unmount "$M"
    run $PT_ORACLE attack-check overlap "$T/orig.pt" "$f" "$T/new.out"
    echo "$output"
    [ "$status" -eq 0 ]
}

@test "a record flagged as followed by a data descriptor that is not there: the edit saves, its CRC where the record really keeps it" {
    attack no_descriptor
    mount_fg "$f" "$M" -o rw
    edit_out w
    touch "$M/snapshot_done"
    unmount "$M"
    run $PT_ORACLE attack-check no_descriptor "$T/orig.pt" "$f" "$T/new.out"
    echo "$output"
    [ "$status" -eq 0 ]
    # patched in place: only its bytes and its CRC fields changed
    run $PT_ORACLE edit-check "$T/orig.pt" "$f" w "$T/new.out"
    echo "$output"
    [ "$status" -eq 0 ]
}

@test "a tensor in a value the tree does not show (an OrderedDict's _metadata): a save that renumbers the storages renumbers its key too, its record copied" {
    attack hidden_tensor
    mount_fg "$f" "$M" -o rw
    mv "$M/w" "$M/w2"
    touch "$M/snapshot_done"
    unmount "$M"
    run $PT_ORACLE attack-check hidden_tensor "$T/orig.pt" "$f"
    echo "$output"
    [ "$status" -eq 0 ]
}
