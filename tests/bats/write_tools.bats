#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# Tools that write through temporary files and rename them into place
# (rsync, sed -i, atomic writers), cp -a, tar x, and the files such tools
# leave, which are never saved into the model.

load helpers

# the oracles' calls through one Python that imported them (helpers.bash)
setup_file() { pyserve_file_start numpy "$REPO/tests/oracle/ckpt_oracle.py" "$REPO/tests/oracle/safetensors_oracle.py"; }
teardown_file() { pyserve_file_stop; }
export ORACLE_PY=$REPO/tests/oracle/ckpt_oracle.py

setup() {
    M=$BATS_TEST_TMPDIR/m
    F=$BATS_TEST_TMPDIR/model.ckpt
    SNAP=$FIXTURES/oneflow/legacy_v2_java_mlp_adam
}

# like_tree: a copy of the snapshot with the modes of a new model's tree
# (0755 directories, 0644 files); prints its path.  The fixture's own are
# read-only.
# Without its snapshot_done, which the tests touch once the copy is done:
# cp and rsync copy a directory in inode order, and a snapshot_done copied
# before any tensor saves a tree of none (refused for a .ckpt,
# pickled_copy.bats), whatever order the fixture's copy has here.
like_tree() {
    local d=$BATS_TEST_TMPDIR/snap
    cp -r "$SNAP" "$d"
    chmod -R u=rwX,go=rX "$d"
    rm "$d/snapshot_done"
    echo "$d"
}

@test "rsync -a of a real OneFlow snapshot into a new mount, then touch snapshot_done" {
    mount_fg "$F" "$M" -o create,commit=manual
    rsync -a "$(like_tree)/" "$M/"
    touch "$M/snapshot_done"
    diff -r "$SNAP" "$M"
    run $ORACLE check "$M" "$F"
    [ "$status" -eq 0 ]
    [ -z "$(ls -A "$M/dense1-bias" | grep -v '^meta$\|^out$')" ]
}

@test "cp -a of a snapshot (modes, times) works too" {
    mount_fg "$F" "$M" -o create,commit=manual
    cp -a "$(like_tree)/." "$M/" ||
        { getfattr -n user.ckptfs.last_error "$M"; ls -i "$BATS_TEST_TMPDIR/snap"; false; }
    touch "$M/snapshot_done"
    diff -r "$SNAP" "$M"
}

@test "cp -a, rsync -a and tar x of a read-only snapshot (0444 files, 0555 directories) exit 0" {
    # The tree has the model file's read bits; write bits are the mount's,
    # so setting 0444 or 0555 is taken and changes nothing (issue 39).
    mount_fg "$F" "$M" -o create,commit=manual
    cp -a "$SNAP/." "$M/"
    touch "$M/snapshot_done"
    diff -r "$SNAP" "$M"
    run $ORACLE check "$M" "$F"
    [ "$status" -eq 0 ]
    [ "$(stat -c %a "$M/dense1-bias/out")" = 644 ]
    for t in "$M"/*/; do rm -r "$t"; done
    rsync -a "$SNAP/" "$M/"
    touch "$M/snapshot_done"
    diff -r "$SNAP" "$M"
    for t in "$M"/*/; do rm -r "$t"; done
    tar -C "$SNAP" -cf - . | tar -C "$M" -xf -
    touch "$M/snapshot_done"
    diff -r "$SNAP" "$M"
    run $ORACLE check "$M" "$F"
    [ "$status" -eq 0 ]
}

@test "sed -i on a meta reshapes; rsync of one file over out replaces it; both saved" {
    $ORACLE from-oneflow "$SNAP" "$F"
    mount_fg "$F" "$M" -o commit=manual
    sed -i 's/dim: 10$/dim: 5\n  dim: 2/' "$M/dense2-bias/meta"
    cmp <($ORACLE meta-of 5,2 kFloat) "$M/dense2-bias/meta"
    $PY -c 'import numpy as n; n.full(10, 7, "<f4").tofile("'"$BATS_TEST_TMPDIR"'/sevens")'
    rsync -I "$BATS_TEST_TMPDIR/sevens" "$M/dense2-bias/out"  # -I: same size and second
    cmp "$BATS_TEST_TMPDIR/sevens" "$M/dense2-bias/out"
    touch "$M/snapshot_done"
    $ORACLE parse "$F" | $PY -c 'import json,sys,hashlib
e = next(e for e in json.load(sys.stdin) if e["tag"] == "dense2-bias")
assert e["dims"] == [5, 2], e
assert e["sha256"] == hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest()' "$BATS_TEST_TMPDIR/sevens"
}

@test "an atomic writer (temp file + rename) over meta with an invalid meta fails the rename" {
    $ORACLE from-oneflow "$SNAP" "$F"
    mount_fg "$F" "$M" -o commit=manual
    printf 'data_type: kNope' >"$M/dense2-bias/.meta.tmp"
    run $PY -c 'import os, sys
try:
    os.rename(sys.argv[1], sys.argv[2])
except OSError as e:
    print("errno", e.errno)' "$M/dense2-bias/.meta.tmp" "$M/dense2-bias/meta"
    [ "$output" = "errno 22" ]
    grep -q "tensor 'dense2-bias': meta line 1: unknown or unsupported data_type" "$BATS_TEST_TMPDIR/daemon.log"
    cmp <($ORACLE meta-of 10 kFloat) "$M/dense2-bias/meta"
}

@test "other files in the tree are kept while mounted but never saved; rmdir sees them" {
    $ORACLE from-oneflow "$SNAP" "$F"
    mount_fg "$F" "$M" -o commit=manual
    echo note >"$M/dense2-bias/README"
    echo note >"$M/notes.txt"
    [ "$(cat "$M/dense2-bias/README")" = note ]
    before=$(sha "$F")
    [ -e "$M/snapshot_done" ]     # nothing to save: such files are not the model
    touch "$M/snapshot_done"
    [ "$(sha "$F")" = "$before" ]
    rm "$M/dense2-bias/meta" "$M/dense2-bias/out"
    run rmdir "$M/dense2-bias"
    [[ $output == *"Directory not empty"* ]]
    rm "$M/dense2-bias/README"
    rmdir "$M/dense2-bias"
    touch "$M/snapshot_done"
    ! $ORACLE parse "$F" | grep -q '"tag": "dense2-bias"' || false
    [ "$(cat "$M/notes.txt")" = note ]
}

@test "a mount's tree copied by cp -r or tar into a new mount: snapshot_done comes last, so the copy itself saves every tensor" {
    local S=$BATS_TEST_TMPDIR/s lenet=$MS/mindarmour_checkpoint_lenet-10_1875.ckpt
    mount_fg "$lenet" "$S" -o ro
    # last in the listing (tar, ls -U) and by inode (cp -r reads in inode order)
    [ "$(ls -U "$S" | tail -1)" = snapshot_done ]
    [ "$(ls -i "$S" | sort -n | tail -1 | awk '{print $2}')" = snapshot_done ]
    mount_fg "$F" "$M" -o create,commit=manual
    [ -z "$(ls -A "$M")" ] # no file yet, so no snapshot_done
    cp -r "$S/." "$M/"
    # saved by cp's own create of snapshot_done, before any touch or unmount
    run $ORACLE check "$S" "$F"
    echo "$output"
    [ "$status" -eq 0 ]
    local st=$BATS_TEST_TMPDIR/t.safetensors M2=$BATS_TEST_TMPDIR/m2
    mount_fg "$st" "$M2" -o create,commit=manual
    tar -C "$S" --mode=u+w -cf - . | tar -C "$M2" -xf - --exclude=./ # the root keeps its mode
    [ -e "$M2/snapshot_done" ] # saved, by tar's create of it
    diff -r "$S" "$M2"
    run $PY "$REPO/tests/oracle/safetensors_oracle.py" check "$M2" "$st"
    echo "$output"
    [ "$status" -eq 0 ]
}
