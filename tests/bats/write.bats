#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# Writable mounts (-o rw): edits to out and meta with ordinary tools, saved
# into the model by touch snapshot_done, fsync or unmount, checked with the
# oracle's reference parse of the saved file.

load helpers

# the oracles' calls through one Python that imported them (helpers.bash)
setup_file() { pyserve_file_start numpy "$REPO/tests/oracle/ckpt_oracle.py"; }
teardown_file() { pyserve_file_stop; }

setup() {
    M=$BATS_TEST_TMPDIR/m
    F=$BATS_TEST_TMPDIR/model.ckpt
    cp "$MS/goldenstick_test_linears_woq_predict_2stage_fp32.ckpt" "$F"
    chmod 0644 "$F"
}

# field TENSOR KEY: a field of the oracle's reference parse of the model.
field() {
    $ORACLE parse "$F" | $PY -c 'import json,sys
e = next(e for e in json.load(sys.stdin) if e["tag"] == sys.argv[1])
print(json.dumps(e[sys.argv[2]]))' "$1" "$2"
}

# values TENSOR: the tensor's float32 values in the saved file, decoded by
# the oracle's protobuf parse (not through the mount).
values() {
    $PY - "$ORACLE_PY" "$F" "$1" <<'PY'
import importlib.util, sys
import numpy as np
spec = importlib.util.spec_from_file_location("oracle", sys.argv[1])
oracle = importlib.util.module_from_spec(spec)
spec.loader.exec_module(oracle)
entries, _ = oracle.load_reference(sys.argv[2])
e = next(e for e in entries if e.tag == sys.argv[3].encode())
print(" ".join("%g" % v for v in np.frombuffer(e.out, "<f4")))
PY
}
export ORACLE_PY=$REPO/tests/oracle/ckpt_oracle.py

@test "dd patches out in place; touch snapshot_done saves exactly that change" {
    mount_fg "$F" "$M" -o rw,commit=manual
    cp "$F" "$BATS_TEST_TMPDIR/before"
    printf '\x00\x00\x80\x3f' | dd of="$M/linear1.bias/out" bs=1 seek=8 conv=notrunc status=none
    [ ! -e "$M/snapshot_done" ]
    [ "$(sha "$F")" = "$(sha "$BATS_TEST_TMPDIR/before")" ]
    touch "$M/snapshot_done"
    [ -e "$M/snapshot_done" ]
    [ "$(values linear1.bias | cut -d' ' -f3)" = 1 ]
    # Every other byte of the file is as it was.
    [ "$(cmp -l "$BATS_TEST_TMPDIR/before" "$F" | wc -l)" -le 4 ]
    [ "$(stat -c %s "$F")" -eq "$(stat -c %s "$BATS_TEST_TMPDIR/before")" ]
    run $ORACLE check "$M" "$F"
    [ "$status" -eq 0 ]
}

@test "cp a new file over out, fsync saves it durably" {
    mount_fg "$F" "$M" -o rw,commit=manual
    $PY -c 'import numpy as n; n.arange(6, dtype="<f4").tofile("'"$BATS_TEST_TMPDIR"'/new.bin")'
    cp "$BATS_TEST_TMPDIR/new.bin" "$M/linear1.bias/out"
    $PY -c 'import os; fd = os.open("'"$M"'/linear1.bias/out", os.O_RDONLY); os.fsync(fd)'
    [ "$(values linear1.bias)" = "0 1 2 3 4 5" ]
    [ -e "$M/snapshot_done" ]
}

@test "np.memmap writes are saved at unmount; the daemon exits 0" {
    mount_fg "$F" "$M" -o rw,commit=manual
    $PY -c 'import numpy as n
a = n.memmap("'"$M"'/linear2.bias/out", dtype="<f4", mode="r+")
a[:] = [9, 8, 7, 6, 5]; a.flush(); del a'
    umount_wait "$M" "$(tail -1 "$BATS_TEST_TMPDIR/mounts" | cut -d' ' -f1)"
    : >"$BATS_TEST_TMPDIR/mounts"
    [ "$(values linear2.bias)" = "9 8 7 6 5" ]
}

@test "a wrong size is refused at the save: tensor and sizes named, file untouched, edit kept" {
    mount_fg "$F" "$M" -o rw,commit=manual
    before=$(sha "$F")
    truncate -s 20 "$M/linear1.bias/out"
    run touch "$M/snapshot_done"
    [ "$status" -ne 0 ]
    err=$(getfattr --only-values -n user.ckptfs.last_error "$M")
    [[ $err == *"tensor 'linear1.bias': out is 20 bytes but meta [6] kFloat needs 24; nothing was saved"* ]]
    grep -q "out is 20 bytes" "$BATS_TEST_TMPDIR/daemon.log"
    [ "$(sha "$F")" = "$before" ]
    [ "$(stat -c %s "$M/linear1.bias/out")" -eq 20 ]
    truncate -s 24 "$M/linear1.bias/out"
    touch "$M/snapshot_done"
    [ "$(values linear1.bias | cut -d' ' -f6)" = 0 ]
}

@test "meta accepts what text_format accepts and shows the canonical form; a reshape is saved" {
    mount_fg "$F" "$M" -o rw,commit=manual
    printf '# reshape\nshape { dim: [2, 3] } data_type: 2' >"$M/linear1.bias/meta"
    cmp <($ORACLE meta-of 2,3 kFloat) "$M/linear1.bias/meta"
    [ "$(getfattr --only-values -n user.ckptfs.shape "$M/linear1.bias")" = "[2,3]" ]
    touch "$M/snapshot_done"
    [ "$(field linear1.bias dims)" = "[2, 3]" ]
    run $ORACLE check "$M" "$F"
    [ "$status" -eq 0 ]
}

@test "an invalid meta fails close() with EINVAL and the previous meta stays" {
    mount_fg "$F" "$M" -o rw,commit=manual
    before=$(sha "$F")
    for bad in 'data_type: kFoo' 'shape { dim: -3 } data_type: kFloat' 'extra: 1' 'garbage'; do
        run $PY -c 'import sys
f = open(sys.argv[1], "w"); f.write(sys.argv[2])
try:
    f.close()
except OSError as e:
    print("errno", e.errno); sys.exit(0)
sys.exit(1)' "$M/linear1.bias/meta" "$bad"
        [ "$status" -eq 0 ]
        [ "$output" = "errno 22" ]
        cmp <($ORACLE meta-of 6 kFloat) "$M/linear1.bias/meta"
    done
    [ -e "$M/snapshot_done" ]
    touch "$M/snapshot_done"
    [ "$(sha "$F")" = "$before" ]
}

@test "a save with nothing changed leaves the file byte for byte" {
    mount_fg "$F" "$M" -o rw,commit=manual
    before=$(sha "$F")
    cp "$M/linear1.weight/meta" "$BATS_TEST_TMPDIR/meta"
    cat "$BATS_TEST_TMPDIR/meta" >"$M/linear1.weight/meta"
    [ -e "$M/snapshot_done" ]
    touch "$M/snapshot_done"
    [ "$(sha "$F")" = "$before" ]
}

@test "unmount with an invalid edit: non-zero exit, the reason, the file untouched" {
    mount_fg "$F" "$M" -o rw,commit=manual
    before=$(sha "$F")
    truncate -s 3 "$M/linear2.bias/out"
    pid=$(tail -1 "$BATS_TEST_TMPDIR/mounts" | cut -d' ' -f1)
    # Not under `run`: its subshell cannot wait for our daemon.
    status=0
    umount_wait "$M" "$pid" || status=$?
    : >"$BATS_TEST_TMPDIR/mounts"
    [ "$status" -ne 0 ]
    grep -q "tensor 'linear2.bias': out is 3 bytes" "$BATS_TEST_TMPDIR/daemon.log"
    [ "$(sha "$F")" = "$before" ]
    : >"$BATS_TEST_TMPDIR/daemon.log"
}

@test "str values are written back from UTF-8" {
    $ORACLE gen "$F" --case alltypes
    mount_fg "$F" "$M" -o rw,commit=manual
    printf 'grüße ✓' >"$M/info.str_ascii/out"
    touch "$M/snapshot_done"
    run $ORACLE check "$M" "$F"
    [ "$status" -eq 0 ]
    [ "$(cat "$M/info.str_ascii/out")" = "grüße ✓" ]
    [ "$(field info.str_ascii type)" = '"str"' ]
}

@test "without a trigger the edits are saved commit_delay after the last writer closes" {
    mount_fg "$F" "$M" -o commit_delay=0.2
    exec 5<>"$M/linear1.bias/out"
    printf '\x00\x00\x80\x3f' >&5
    before=$(sha "$F")
    sleep 0.5
    # still open for writing: nothing is saved yet
    [ "$(sha "$F")" = "$before" ]
    [ ! -e "$M/snapshot_done" ]
    exec 5>&-
    for _ in $(seq 1 200); do [ -e "$M/snapshot_done" ] && break; sleep 0.05; done
    [ -e "$M/snapshot_done" ]
    [ "$(values linear1.bias | cut -d' ' -f1)" = 1 ]
}

@test "-o commit=manual: nothing is saved until asked" {
    mount_fg "$F" "$M" -o commit=manual,commit_delay=0
    before=$(sha "$F")
    printf '\x00\x00\x80\x3f' | dd of="$M/linear1.bias/out" conv=notrunc status=none
    sleep 0.3
    [ "$(sha "$F")" = "$before" ]
    touch "$M/snapshot_done"
    [ "$(values linear1.bias | cut -d' ' -f1)" = 1 ]
}

@test "a bad meta fails only its writer's close: a reader that opens, reads and closes it meanwhile succeeds, and sees the previous meta" {
    mount_fg "$F" "$M" -o commit=manual
    d=$(ls "$M" | grep -v snapshot_done | head -1)
    before=$(cat "$M/$d/meta")
    # Found by the random test with 4 client threads: the kernel sends a
    # writer's RELEASE in the background, so a reader's close could come
    # first and was failed with the writer's EINVAL.  Keeping the writer
    # open makes that order certain.
    run $PY - "$M/$d/meta" "$before" <<'PY'
import errno, os, sys
meta = sys.argv[1]
w = os.open(meta, os.O_WRONLY | os.O_TRUNC)
os.write(w, b"shape {\n}\ndata_type: kNoSuchType")  # no newline: judged at the close
r = os.open(meta, os.O_RDONLY)
os.read(r, 4096)
os.close(r)                      # the reader's close: must succeed
try:
    os.close(w)
except OSError as e:
    assert e.errno == errno.EINVAL, e
    print("writer's close: EINVAL")
else:
    sys.exit("the bad meta's close succeeded")
with open(meta) as f:
    assert f.read() == sys.argv[2] + "\n", "the previous meta did not stay"
PY
    echo "$output"
    [ "$status" -eq 0 ]
    [[ $output == *"writer's close: EINVAL"* ]]
}
