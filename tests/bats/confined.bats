#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# Nothing outside the model's own files: every file of a mount is reached
# through the model's directory, opened once before mounting, with no name
# resolved again and no symbolic link followed (codec/core/model_dir.h).
# Checked with the ckpt oracle, python3-onnx and ordinary tools.
#
# The `timeout` around a client command or a mount is a guard, not a
# timing check: the defects these tests cover made the command hang
# forever, and a regression must fail rather than hang CI.

load helpers

GUARD="timeout 60"
CKPT=$MS/goldenstick_test_linears_woq_predict_2stage_fp32.ckpt
SPLIT="$PY $REPO/tests/oracle/split_mindir.py"

teardown() {
    # A daemon stuck on its own request (the mount point is the model's
    # directory) is only freed by SIGKILL.
    local pid mnt state
    if [ -f "$BATS_TEST_TMPDIR/self" ]; then
        read -r pid mnt <"$BATS_TEST_TMPDIR/self"
        state=$(ps -o stat= -p "$pid" 2>/dev/null || true)
        if [[ "$state" == D* ]]; then
            kill -9 "$pid" 2>/dev/null || true
            fusermount3 -uz "$mnt" 2>/dev/null || true
        fi
    fi
    # Mounts a refused command might have made on the original code.
    for mnt in "$BATS_TEST_TMPDIR/file-mnt" "$BATS_TEST_TMPDIR/mnt"; do
        fusermount3 -uz "$mnt" 2>/dev/null || true
    done
    ckptfs_teardown
    [ -z "${STICKY:-}" ] || rm -rf "$STICKY"
}

# make_onnx DIR NAME=LOCATION...: DIR/m.onnx whose float[4] initializers
# NAME are external data at LOCATION (16 bytes each, in order), with the
# data files written (values 0, 1, 2...).
make_onnx() {
    $PY - "$@" <<'PY'
import os, sys, numpy as np, onnx
from onnx import helper, TensorProto
d = sys.argv[1]
inits, files = [], {}
for spec in sys.argv[2:]:
    name, loc = spec.split("=")
    off = files.get(loc, 0)
    files[loc] = off + 16
    t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=[4])
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", loc), ("offset", str(off)), ("length", "16")):
        e = t.external_data.add(); e.key, e.value = k, v
    inits.append(t)
for loc, size in files.items():
    p = os.path.join(d, loc)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    np.arange(size // 4, dtype="<f4").tofile(p)
g = helper.make_graph([], "g", [], [], inits)
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), os.path.join(d, "m.onnx"))
PY
}

# The initializers as python3-onnx loads them, one "name values..." line each.
onnx_values() {
    $PY - "$1" <<'PY'
import sys, onnx
from onnx import numpy_helper
for t in onnx.load(sys.argv[1]).graph.initializer:
    print(t.name, *numpy_helper.to_array(t).ravel().tolist())
PY
}

# refused CMD...: the command (a mount) fails at once, in one line.
refused() {
    run $GUARD "$@"
    echo "status $status: $output"
    [ "$status" -ne 0 ]
    [ "$status" -ne 124 ] # the guard fired: it hung
    [ "${#lines[@]}" -eq 1 ]
}

@test "sub/ swapped for a symlink after mounting: a root save creates nothing outside and keeps the edit" {
    local d=$BATS_TEST_TMPDIR/model mnt=$BATS_TEST_TMPDIR/m out=$BATS_TEST_TMPDIR/outside
    mkdir -p "$d" "$out"
    make_onnx "$d" a=sub/data.bin
    mount_fg "$d/m.onnx" "$mnt" -o rw,commit=manual
    mv "$d/sub" "$d/sub.real"
    ln -s "$out" "$d/sub"
    $PY -c 'import numpy as np,sys; np.full(4, 9, "<f4").tofile(sys.argv[1])' "$mnt/a/out"
    run touch "$mnt/snapshot_done"
    echo "$output"
    # Nothing was made where the link points; the save failed and kept the edit.
    [ -z "$(ls -A "$out")" ]
    [ "$status" -ne 0 ]
    getfattr -n user.ckptfs.last_error --only-values "$mnt" | grep -q "sub/data.bin"
    [ "$($PY -c 'import numpy as np,sys; print(np.fromfile(sys.argv[1], "<f4").tolist())' "$mnt/a/out")" = "[9.0, 9.0, 9.0, 9.0]" ]
    # With the directory back, the same edit is saved inside.
    rm "$d/sub"
    mv "$d/sub.real" "$d/sub"
    touch "$mnt/snapshot_done"
    [ "$(onnx_values "$d/m.onnx")" = "a 9.0 9.0 9.0 9.0" ]
    [ -z "$(ls -A "$out")" ]
}

@test "the mount point is the model's own directory: an edit and its save work, no hang" {
    local d=$BATS_TEST_TMPDIR/self-dir pid
    mkdir -p "$d"
    cp "$CKPT" "$d/model.ckpt"
    chmod 0644 "$d/model.ckpt"
    mount_fg "$d/model.ckpt" "$d" -o rw,commit=manual
    pid=$(tail -n 1 "$BATS_TEST_TMPDIR/mounts" | cut -d' ' -f1)
    echo "$pid $d" >"$BATS_TEST_TMPDIR/self"
    guarded "$pid" "$d" sh -c 'printf "\0\0\200\77" | dd of="$1" bs=1 seek=8 conv=notrunc status=none' \
        sh "$d/linear1.bias/out"
    guarded "$pid" "$d" touch "$d/snapshot_done"
    [ -e "$d/snapshot_done" ]
    umount_wait "$d" "$pid"
    sed -i '$d' "$BATS_TEST_TMPDIR/mounts"
    rm "$BATS_TEST_TMPDIR/self"
    # The model file, seen again once unmounted, holds the edit.
    $ORACLE parse "$d/model.ckpt" >/dev/null
    $PY - "$REPO/tests/oracle/ckpt_oracle.py" "$d/model.ckpt" <<'PY'
import importlib.util, sys
import numpy as np
spec = importlib.util.spec_from_file_location("oracle", sys.argv[1])
oracle = importlib.util.module_from_spec(spec)
spec.loader.exec_module(oracle)
entries, _ = oracle.load_reference(sys.argv[2])
e = next(e for e in entries if e.tag == b"linear1.bias")
assert np.frombuffer(e.out, "<f4")[2] == 1.0, np.frombuffer(e.out, "<f4")
PY
    [ -z "$(ls -A "$d" | grep '^\.')" ]
}

# guarded PID MNT CMD...: run CMD against the mount of daemon PID.  A
# client waiting on a daemon stuck on its own request cannot even be
# killed; if CMD has not finished in 60 s, kill the daemon (the only way
# to free both) so that the test fails instead of hanging.
guarded() {
    local pid=$1 mnt=$2 c
    shift 2
    "$@" &
    c=$!
    for _ in $(seq 1 600); do
        running_child "$c" || break
        sleep 0.1
    done
    if running_child "$c"; then
        echo "$* hung: killing the daemon" >&2
        kill -9 "$pid"
        fusermount3 -uz "$mnt" 2>/dev/null || true
        wait "$c" || true
        return 1
    fi
    wait "$c"
}

# plant_journal: in a sticky directory, a root-owned model and victim,
# and a journal of user 65534 that would rename its own files over both.
plant_journal() {
    STICKY=$(mktemp -d /tmp/ckptfs-sticky.XXXXXX)
    chmod 1777 "$STICKY"
    cp "$CKPT" "$STICKY/m.ckpt"
    chmod 0644 "$STICKY/m.ckpt"
    echo "root's file" >"$STICKY/victim"
    setpriv --reuid=65534 --regid=65534 --clear-groups sh -c '
        cd "$1"
        echo planted >.victim.ckptfs-AAAAAA
        echo planted >.m.ckpt.ckptfs-BBBBBB
        printf "ckptfs-journal 1\n.victim.ckptfs-AAAAAA\0victim\0.m.ckpt.ckptfs-BBBBBB\0m.ckpt\0end\n" \
            >.m.ckpt.ckptfs-journal' sh "$STICKY"
    sha "$STICKY/m.ckpt" >"$BATS_TEST_TMPDIR/model.sha"
}

# Nothing the planted journal lists was renamed.
nothing_renamed() {
    [ "$(cat "$STICKY/victim")" = "root's file" ]
    [ "$(sha "$STICKY/m.ckpt")" = "$(cat "$BATS_TEST_TMPDIR/model.sha")" ]
    [ -e "$STICKY/.victim.ckptfs-AAAAAA" ]
    [ -e "$STICKY/.m.ckpt.ckptfs-BBBBBB" ]
    [ -e "$STICKY/.m.ckpt.ckptfs-journal" ]
}

@test "a journal planted by another user in a sticky directory: a root -o ro mount renames nothing" {
    plant_journal
    mkdir -p "$BATS_TEST_TMPDIR/mnt"
    refused "$CKPTFS" -f -o ro "$STICKY/m.ckpt" "$BATS_TEST_TMPDIR/mnt"
    [[ "$output" == *"a save was interrupted"*"mount it writable once"* ]]
    nothing_renamed
}

@test "a journal planted by another user: a root writable mount refuses it, renames nothing" {
    plant_journal
    mkdir -p "$BATS_TEST_TMPDIR/mnt"
    refused "$CKPTFS" -f -o rw "$STICKY/m.ckpt" "$BATS_TEST_TMPDIR/mnt"
    [[ "$output" == *"owned by uid 65534, not by the model's owner (uid 0)"* ]]
    nothing_renamed
}

@test "a FIFO as the model is refused in one line" {
    mkfifo "$BATS_TEST_TMPDIR/m.ckpt"
    mkdir -p "$BATS_TEST_TMPDIR/mnt"
    refused "$CKPTFS" -f "$BATS_TEST_TMPDIR/m.ckpt" "$BATS_TEST_TMPDIR/mnt"
    [[ "$output" == "ckptfs: $BATS_TEST_TMPDIR/m.ckpt: is a FIFO, not a regular file" ]]
}

@test "a FIFO as an ONNX data file is refused in one line" {
    local d=$BATS_TEST_TMPDIR/model
    mkdir -p "$d"
    make_onnx "$d" a=w.bin
    rm "$d/w.bin"
    mkfifo "$d/w.bin"
    mkdir -p "$BATS_TEST_TMPDIR/mnt"
    refused "$CKPTFS" -f "$d/m.onnx" "$BATS_TEST_TMPDIR/mnt"
    [[ "$output" == *"external data file $d/w.bin is a FIFO, not a regular file" ]]
}

@test "a FIFO as a split MindIR variables file is refused in one line" {
    local d=$BATS_TEST_TMPDIR/model
    mkdir -p "$d"
    $SPLIT "$MS/mindspore_ori_net.mindir" "$d/net" --legacy
    mkfifo "$d/net_variables/data_1"
    mkdir -p "$BATS_TEST_TMPDIR/mnt"
    refused "$CKPTFS" -f "$d/net_graph.mindir" "$BATS_TEST_TMPDIR/mnt"
    [[ "$output" == *"variables file $d/net_variables/data_1 is a FIFO, not a regular file" ]]
}

@test "a FIFO as the journal is refused in one line" {
    cp "$CKPT" "$BATS_TEST_TMPDIR/m.ckpt"
    chmod 0644 "$BATS_TEST_TMPDIR/m.ckpt"
    mkfifo "$BATS_TEST_TMPDIR/.m.ckpt.ckptfs-journal"
    mkdir -p "$BATS_TEST_TMPDIR/mnt"
    refused "$CKPTFS" -f "$BATS_TEST_TMPDIR/m.ckpt" "$BATS_TEST_TMPDIR/mnt"
    [[ "$output" == "ckptfs: $BATS_TEST_TMPDIR/.m.ckpt.ckptfs-journal: is a FIFO, not a regular file" ]]
}

@test "a directory to create (-o create of a run directory) and /dev/null as the model are refused in one line" {
    mkdir -p "$BATS_TEST_TMPDIR/d.ckpt" "$BATS_TEST_TMPDIR/mnt"
    refused "$CKPTFS" -f -o create "$BATS_TEST_TMPDIR/d.ckpt" "$BATS_TEST_TMPDIR/mnt"
    [[ "$output" == "ckptfs: $BATS_TEST_TMPDIR/d.ckpt: -o create is for one model, not a run directory" ]]
    ! mountpoint -q "$BATS_TEST_TMPDIR/mnt" || false
    refused "$CKPTFS" -f /dev/null "$BATS_TEST_TMPDIR/mnt"
    [[ "$output" == "ckptfs: /dev/null: is a character device, not a regular file" ]]
}

@test "a regular file as MOUNTPOINT is refused in one line" {
    touch "$BATS_TEST_TMPDIR/file-mnt"
    refused "$CKPTFS" -f "$CKPT" "$BATS_TEST_TMPDIR/file-mnt"
    [[ "$output" == *"file-mnt: the mount point is a regular file, not a directory" ]]
}

@test "two external locations of one file (a hard link) are refused, naming both" {
    local d=$BATS_TEST_TMPDIR/model
    mkdir -p "$d"
    make_onnx "$d" a=real.bin b=hard.bin
    rm "$d/hard.bin"
    ln "$d/real.bin" "$d/hard.bin"
    mkdir -p "$BATS_TEST_TMPDIR/mnt"
    refused "$CKPTFS" -f "$d/m.onnx" "$BATS_TEST_TMPDIR/mnt"
    [[ "$output" == *"external data locations 'real.bin' and 'hard.bin' are the same file"* ]]
}

@test "an external location naming the model file itself is refused" {
    local d=$BATS_TEST_TMPDIR/model
    mkdir -p "$d"
    make_onnx "$d" a=m.onnx
    mkdir -p "$BATS_TEST_TMPDIR/mnt"
    refused "$CKPTFS" -f "$d/m.onnx" "$BATS_TEST_TMPDIR/mnt"
    [[ "$output" == *"tensor 'a': external data location 'm.onnx' is the model file itself" ]]
}

@test "an external location through a symbolic link (link.bin -> real.bin) is refused" {
    local d=$BATS_TEST_TMPDIR/model
    mkdir -p "$d"
    make_onnx "$d" a=real.bin b=link.bin
    rm "$d/link.bin"
    ln -s real.bin "$d/link.bin"
    mkdir -p "$BATS_TEST_TMPDIR/mnt"
    refused "$CKPTFS" -f "$d/m.onnx" "$BATS_TEST_TMPDIR/mnt"
    [[ "$output" == *"external data location 'link.bin' is or passes through a symbolic link"* ]]
}
