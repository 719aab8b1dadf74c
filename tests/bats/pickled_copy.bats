#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# A OneFlow >= 0.6 snapshot (pickled_data + tensor_<N>/{meta,out}) copied into
# a writable mount with cp -r, rsync -a or tar: the save gives the tensors the
# real names pickled_data lists (read by codec/oneflow/oneflow_pickle.c, never
# executed) and drops pickled_data.  A pickled_data that cannot be read fails
# that save with one line and changes nothing.  Saved files are read by the
# independent oracles.

load helpers
export ORACLE_PY=$REPO/tests/oracle/ckpt_oracle.py
PICKLED="$PY $REPO/tests/oracle/oneflow_pickled.py"
STORACLE="$PY $REPO/tests/oracle/safetensors_oracle.py"

setup() {
    M=$BATS_TEST_TMPDIR/m
    F=$BATS_TEST_TMPDIR/new.ckpt
    SNAP=$FIXTURES/oneflow/new_pickled_3x3_i3o3_conv2d_params
}

# like_snap: a copy of the snapshot with writable modes (the fixture's are
# read-only, which rsync -a and tar x would try to set on the tree).
like_snap() {
    cp -r "$SNAP" "$BATS_TEST_TMPDIR/snap"
    chmod -R u=rwX,go=rX "$BATS_TEST_TMPDIR/snap"
    echo "$BATS_TEST_TMPDIR/snap"
}

# named_after_save: the mount shows the real names, not tensor_<N>, and no
# pickled_data (checked before anything lists the root, so that the kernel's
# cached names are what is looked up).  $1: the root's listing.
named_after_save() {
    [ ! -e "$M/tensor_5" ]
    [ ! -e "$M/tensor_6" ]
    [ ! -e "$M/pickled_data" ]
    [ -d "$M/weight" ]
    [ "$(ls "$M" | tr '\n' ' ')" = "${1:-bias snapshot_done weight }" ]
    cmp "$M/weight/out" "$SNAP/tensor_5/out"
    cmp "$M/bias/meta" "$SNAP/tensor_6/meta"
}

# until_saved: a bounded wait for the automatic save (snapshot_done back).
until_saved() { until_listed snapshot_done; }

@test "cp -r of a pickled snapshot into -o create x.ckpt, unmount: weight and bias, in the pickle's order" {
    mount_fg "$F" "$M" -o create,commit=manual
    cp -r "$SNAP/." "$M/"
    [ -f "$M/pickled_data" ]        # shown while it waits for the save
    [ -d "$M/tensor_5" ]
    unmount "$M"
    run $PICKLED check-ckpt "$F" "$SNAP"
    [ "$status" -eq 0 ]
    [ "$output" = "ok 2" ]
}

@test "cp -r, then touch snapshot_done: the mount shows the real names at once; ckpt_oracle check agrees" {
    mount_fg "$F" "$M" -o create,commit=manual
    cp -r "$SNAP/." "$M/"
    [ ! -e "$M/snapshot_done" ]
    touch "$M/snapshot_done"
    named_after_save
    $PICKLED check-ckpt "$F" "$SNAP"
    run $ORACLE check "$M" "$F"
    [ "$status" -eq 0 ]
    # The tree out of the mount is the legacy layout every OneFlow >= 0.5 loads.
    cp -r "$M" "$BATS_TEST_TMPDIR/out"
    [ "$(find "$BATS_TEST_TMPDIR/out" | sed "s|$BATS_TEST_TMPDIR/out||" | sort | tr '\n' ' ')" \
        = " /bias /bias/meta /bias/out /snapshot_done /weight /weight/meta /weight/out " ]
    cmp "$BATS_TEST_TMPDIR/out/bias/out" "$SNAP/tensor_6/out"
}

@test "commit=auto: the automatic save names them" {
    mount_fg "$F" "$M" -o create,commit_delay=0.2
    cp -r "$SNAP/." "$M/"
    until_saved
    named_after_save
    $PICKLED check-ckpt "$F" "$SNAP"
}

@test "fsync of the root saves and names them" {
    mount_fg "$F" "$M" -o create,commit=manual
    cp -r "$SNAP/." "$M/"
    $PY -c 'import os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd)' "$M"
    named_after_save
    $PICKLED check-ckpt "$F" "$SNAP"
}

@test "cp -r into -o create x.safetensors: weight and bias with the fixture's bytes, nothing else" {
    F=$BATS_TEST_TMPDIR/x.safetensors
    mount_fg "$F" "$M" -o create,commit=manual
    cp -r "$SNAP/." "$M/"
    unmount "$M"
    run $STORACLE parse "$F"
    [ "$status" -eq 0 ]
    w=$(sha256sum "$SNAP/tensor_5/out" | cut -c1-16)
    b=$(sha256sum "$SNAP/tensor_6/out" | cut -c1-16)
    [ "$(grep -c '^tensor' <<<"$output")" -eq 2 ]
    grep -qxF "$(printf 'tensor\tweight\tF32\t[3,3,3,3]\t324\t%s\tkFloat\t[3,3,3,3]' "$w")" <<<"$output"
    grep -qxF "$(printf 'tensor\tbias\tF32\t[3]\t12\t%s\tkFloat\t[3]' "$b")" <<<"$output"
}

@test "rsync -a and tar x of a pickled snapshot name the tensors too" {
    local s
    s=$(like_snap)
    mount_fg "$F" "$M" -o create,commit=manual
    rsync -a "$s/" "$M/"
    touch "$M/snapshot_done"
    named_after_save
    $PICKLED check-ckpt "$F" "$SNAP"
    unmount "$M"
    F=$BATS_TEST_TMPDIR/tar.ckpt
    mount_fg "$F" "$M" -o create,commit=manual
    tar -C "$s" -cf - . | tar -C "$M" -xf -
    touch "$M/snapshot_done"
    named_after_save
    $PICKLED check-ckpt "$F" "$SNAP"
}

# copy_first_files SRC DST [DIRS...]: copy as GNU cp -r does when a snapshot's
# two files have the lowest inodes (ext4 often gives directories higher
# ones): pickled_data, then snapshot_done, then the directories, all from one
# process, which fails if a close fails.
copy_first_files() {
    $PY - "$@" <<'PY'
import os, shutil, sys
src, dst, dirs = sys.argv[1], sys.argv[2], sys.argv[3:]
shutil.copyfile(src + "/pickled_data", dst + "/pickled_data")
open(dst + "/snapshot_done", "w").close()
for d in dirs:
    os.mkdir(dst + "/" + d)
    for f in ("meta", "out"):
        shutil.copyfile(src + "/" + d + "/" + f, dst + "/" + d + "/" + f)
PY
}

@test "a copy's own snapshot_done before the directories pickled_data names (cp's inode order): the copy ends well, the next touch saves them named" {
    mount_fg "$F" "$M" -o create,commit=manual,log="$BATS_TEST_TMPDIR/log"
    copy_first_files "$SNAP" "$M" tensor_5 tensor_6
    [ ! -e "$M/snapshot_done" ]
    [ ! -e "$F" ]
    grep -q "'tensor_5' (of 'weight') is not in the tree; nothing was saved.*taken as the snapshot_done of a copy not done yet" "$BATS_TEST_TMPDIR/log"
    touch "$M/snapshot_done"
    named_after_save
    $PICKLED check-ckpt "$F" "$SNAP"
}

@test "a copy's own snapshot_done waits: when the directories never come, a touch is refused with the line" {
    mount_fg "$F" "$M" -o create,commit=manual,log="$BATS_TEST_TMPDIR/log"
    copy_first_files "$SNAP" "$M" tensor_6
    [[ $(getfattr --only-values -n user.ckptfs.last_error "$M") == *"'tensor_5' (of 'weight') is not in the tree"*"copy not done yet"* ]]
    run touch "$M/snapshot_done"
    [ "$status" -ne 0 ]
    [[ $output == *"Invalid argument"* ]]
    [ ! -e "$F" ]
    [ -f "$M/pickled_data" ]
    cmp "$M/tensor_6/out" "$SNAP/tensor_6/out"
    cp -r "$SNAP/tensor_5" "$M/"
    touch "$M/snapshot_done"
    named_after_save
    $PICKLED check-ckpt "$F" "$SNAP"
}

@test "pickled_data copied before or after the tensor directories" {
    mount_fg "$F" "$M" -o create,commit=manual
    cp "$SNAP/pickled_data" "$M/"
    cp -r "$SNAP/tensor_6" "$SNAP/tensor_5" "$M/"
    touch "$M/snapshot_done"
    named_after_save
    $PICKLED check-ckpt "$F" "$SNAP"
    unmount "$M"
    F=$BATS_TEST_TMPDIR/last.ckpt
    mount_fg "$F" "$M" -o create,commit=manual
    cp -r "$SNAP/tensor_6" "$SNAP/tensor_5" "$M/"
    cp "$SNAP/pickled_data" "$M/"
    unmount "$M"
    $PICKLED check-ckpt "$F" "$SNAP"
}

@test "commit=auto: pickled_data first fails the save it meets alone; the tensors' arrival saves them named" {
    mount_fg "$F" "$M" -o create,commit_delay=0.1
    cp "$SNAP/pickled_data" "$M/"
    # The automatic save finds tensor_5 missing: refused, said once.
    for _ in $(seq 1 400); do
        getfattr --only-values -n user.ckptfs.last_error "$M" 2>/dev/null | grep -q tensor_5 && break
        sleep 0.05
    done
    [[ $(getfattr --only-values -n user.ckptfs.last_error "$M") == *"pickled_data: 'tensor_5' (of 'weight') is not in the tree; nothing was saved"* ]]
    [ -f "$M/pickled_data" ]
    cp -r "$SNAP/tensor_5" "$SNAP/tensor_6" "$M/"
    until_saved
    named_after_save
    $PICKLED check-ckpt "$F" "$SNAP"
    # A successful save clears the refusal.
    ! getfattr -n user.ckptfs.last_error "$M" 2>/dev/null || false
}

@test "commit=auto: tensors saved as tensor_<N> first, pickled_data later renames them in the file" {
    mount_fg "$F" "$M" -o create,commit_delay=0.1
    cp -r "$SNAP/tensor_6" "$SNAP/tensor_5" "$M/"
    until_saved
    [ "$(tags "$F")" = "tensor_6 tensor_5" ]
    cp "$SNAP/pickled_data" "$M/"
    until_saved
    # Names the kernel cached long (saved tensors) are dropped just after
    # the save is answered (a bounded wait, not a time limit).
    for _ in $(seq 1 400); do [ -e "$M/tensor_5" ] || break; sleep 0.05; done
    named_after_save
    # Already in the file: they keep their places.
    [ "$(tags "$F")" = "bias weight" ]
}

# tags FILE: the tensor names of the oracle's parse, in order.
tags() {
    $ORACLE parse "$1" | $PY -c 'import json,sys; print(" ".join(e["tag"] for e in json.load(sys.stdin)))'
}

@test "200 generated tensors, names with dots and a '/': real names in the pickle's order" {
    $PICKLED gen "$BATS_TEST_TMPDIR/gen" --count 200 --seed 3
    mount_fg "$F" "$M" -o create,commit=manual
    cp -r "$BATS_TEST_TMPDIR/gen/." "$M/"
    touch "$M/snapshot_done"
    [ ! -e "$M/pickled_data" ]
    [ -z "$(ls "$M" | grep '^tensor_')" ]
    [ "$(getfattr --only-values -n user.ckptfs.name "$M/head%2Ffc.weight")" = "head/fc.weight" ]
    [ -d "$M/%2E.leading.dots" ]
    [ "$(ls "$M" | wc -l)" -eq 201 ]
    run $PICKLED check-ckpt "$F" "$BATS_TEST_TMPDIR/gen"
    [ "$status" -eq 0 ]
    [ "$output" = "ok 200" ]
    run $ORACLE check "$M" "$F"
    [ "$status" -eq 0 ]
}

@test "-o rw of a .ckpt whose names are the pickle's: the copied values replace theirs, in place" {
    local legacy=$BATS_TEST_TMPDIR/legacy
    mkdir -p "$legacy/bias" "$legacy/weight" "$legacy/other"
    for t in weight:tensor_5 bias:tensor_6; do
        cp "$SNAP/${t#*:}/meta" "$legacy/${t%:*}/meta"
        head -c "$(stat -c %s "$SNAP/${t#*:}/out")" /dev/zero >"$legacy/${t%:*}/out"
    done
    $ORACLE meta-of 2 kFloat >"$legacy/other/meta"
    head -c 8 /dev/urandom >"$legacy/other/out"
    $ORACLE from-oneflow "$legacy" "$F"
    [ "$(tags "$F")" = "bias other weight" ]
    mount_fg "$F" "$M" -o rw,commit=manual
    cmp "$M/weight/out" "$legacy/weight/out"
    cp -r "$SNAP/." "$M/"
    touch "$M/snapshot_done"
    named_after_save "bias other snapshot_done weight "
    [ "$(tags "$F")" = "bias other weight" ]
    $ORACLE parse "$F" >"$BATS_TEST_TMPDIR/parse.json"
    $PY - "$BATS_TEST_TMPDIR/parse.json" "$SNAP" "$legacy" <<'PY'
import hashlib, json, sys
doc = {e["tag"]: e for e in json.load(open(sys.argv[1]))}
for name, path in (("weight", sys.argv[2] + "/tensor_5/out"), ("bias", sys.argv[2] + "/tensor_6/out"),
                   ("other", sys.argv[3] + "/other/out")):
    assert doc[name]["sha256"] == hashlib.sha256(open(path, "rb").read()).hexdigest(), name
PY
}

# refused CASE: a hostile pickled_data beside the copied tensor directories in
# a -o rw mount of an existing .ckpt: the save is refused with one line naming
# pickled_data, the file is unchanged, nothing in the tree is lost; once
# pickled_data is removed the tensors save under their directory names.
refused() {
    local case=$1 want=$2 before
    $ORACLE from-oneflow "$FIXTURES/oneflow/legacy_v2_java_mlp_adam" "$F"
    before=$(sha "$F")
    mount_fg "$F" "$M" -o rw,commit=manual,log="$BATS_TEST_TMPDIR/log"
    cp -r "$SNAP/tensor_5" "$SNAP/tensor_6" "$M/"
    $PICKLED hostile "$M/pickled_data" --case "$case" --marker "$BATS_TEST_TMPDIR/MARKER"
    run touch "$M/snapshot_done"
    [ "$status" -ne 0 ]
    [ "$(sha "$F")" = "$before" ]
    [ ! -e "$BATS_TEST_TMPDIR/MARKER" ]
    [ "$(grep -c pickled_data "$BATS_TEST_TMPDIR/log")" -eq 1 ]
    grep -q -- "$want" "$BATS_TEST_TMPDIR/log"
    [[ $(getfattr --only-values -n user.ckptfs.last_error "$M") == *"$want"*"nothing was saved, the edits and pickled_data are kept"* ]]
    [ -f "$M/pickled_data" ]
    cmp "$M/tensor_5/out" "$SNAP/tensor_5/out"
    cmp "$M/tensor_6/meta" "$SNAP/tensor_6/meta"
    rm "$M/pickled_data"
    touch "$M/snapshot_done"
    [ -d "$M/tensor_5" ]
    [[ " $(tags "$F") " == *" tensor_5 tensor_6 "* || " $(tags "$F") " == *" tensor_6 tensor_5 "* ]]
}

@test "hostile pickled_data: garbage is refused with its offset" {
    refused garbage "pickled_data: offset 2: "
}

@test "hostile pickled_data: an os.system GLOBAL is refused, never run" {
    refused os_system "global posix.system is not one of the classes"
}

@test "hostile pickled_data: a listed directory that is not in the tree" {
    refused missing "'tensor_999' (of 'gone') is not in the tree"
}

@test "hostile pickled_data: two entries of one name" {
    refused duplicate "the name 'wa' is given twice"
}

@test "a pickled_data past CK_PICKLE_MAX_BYTES is refused as it is written (EFBIG), with one line" {
    mount_fg "$F" "$M" -o create,commit=manual,log="$BATS_TEST_TMPDIR/log"
    run dd if=/dev/zero of="$M/pickled_data" bs=1M count=65 status=none
    [ "$status" -ne 0 ]
    [[ $output == *"File too large"* ]]
    [ "$(grep -c 'pickled_data' "$BATS_TEST_TMPDIR/log")" -ge 1 ]
    grep -q "more than the 64 MiB" "$BATS_TEST_TMPDIR/log"
    rm "$M/pickled_data"
}

@test "a read-only mount takes no pickled_data; a mount never shows one of its own" {
    mount_fg "$F" "$M" -o create,commit=manual
    cp -r "$SNAP/." "$M/"
    unmount "$M"
    mount_fg "$F" "$M" -o ro
    run cp "$SNAP/pickled_data" "$M/"
    [ "$status" -ne 0 ]
    [[ $output == *"Read-only file system"* ]]
    [ "$(ls -A "$M" | tr '\n' ' ')" = "bias snapshot_done weight " ]
    unmount "$M"
    mount_fg "$F" "$M" -o rw
    [ "$(ls -A "$M" | tr '\n' ' ')" = "bias snapshot_done weight " ]
}

@test "-o rw of an ONNX model whose initializers are the pickle's names: values replaced, graph intact" {
    F=$BATS_TEST_TMPDIR/conv.onnx
    $PY - "$F" <<'PY'
import sys
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
w = numpy_helper.from_array(np.zeros((3, 3, 3, 3), np.float32), "weight")
b = numpy_helper.from_array(np.ones(3, np.float32), "bias")
g = helper.make_graph([helper.make_node("Conv", ["x", "weight", "bias"], ["y"], name="conv")],
                      "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 5, 5])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 3, 3])], [w, b])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), sys.argv[1])
PY
    mount_fg "$F" "$M" -o rw,commit=manual
    cp -r "$SNAP/." "$M/"
    touch "$M/snapshot_done"
    named_after_save
    $PY - "$F" "$SNAP" <<'PY'
import sys
import numpy as np
import onnx
from onnx import numpy_helper
m = onnx.load(sys.argv[1])
onnx.checker.check_model(m, full_check=True)
inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
assert sorted(inits) == ["bias", "weight"], sorted(inits)
assert list(m.graph.node[0].input) == ["x", "weight", "bias"]
for name, path in (("weight", "tensor_5"), ("bias", "tensor_6")):
    want = open(f"{sys.argv[2]}/{path}/out", "rb").read()
    assert inits[name].astype("<f4").tobytes() == want, name
assert inits["weight"].shape == (3, 3, 3, 3)
PY
}

@test "a writable run directory's checkpoint takes a pickled snapshot the same way" {
    local d=$BATS_TEST_TMPDIR/run
    mkdir -p "$d" "$BATS_TEST_TMPDIR/legacy/other"
    $ORACLE meta-of 2 kFloat >"$BATS_TEST_TMPDIR/legacy/other/meta"
    head -c 8 /dev/urandom >"$BATS_TEST_TMPDIR/legacy/other/out"
    $ORACLE from-oneflow "$BATS_TEST_TMPDIR/legacy" "$d/net-1_10.ckpt"
    chmod 0400 "$d/net-1_10.ckpt"   # complete, as MindSpore leaves it
    mount_fg "$d" "$M" -o rw,commit=manual
    [ -d "$M/net-1_10" ]
    cp -r "$SNAP/." "$M/net-1_10/"
    touch "$M/net-1_10/snapshot_done"
    [ ! -e "$M/net-1_10/tensor_5" ]
    [ ! -e "$M/net-1_10/pickled_data" ]
    [ "$(ls "$M/net-1_10" | tr '\n' ' ')" = "bias other snapshot_done weight " ]
    [ "$(tags "$d/net-1_10.ckpt")" = "other weight bias" ]
    cmp "$M/net-1_10/weight/out" "$SNAP/tensor_5/out"
}

@test "an empty snapshot copied into -o create x.safetensors: a 0-tensor file is written, not answered saved with no file" {
    local snap=$BATS_TEST_TMPDIR/empty
    mkdir "$snap"
    : >"$snap/snapshot_done"
    local st=$BATS_TEST_TMPDIR/new.safetensors
    mount_fg "$st" "$M" -o create,commit=manual
    timeout 60 cp -r "$snap/." "$M/"
    [ -f "$st" ]
    $PY -c '
import json, struct, sys
d = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", d[:8])[0]
h = json.loads(d[8:8 + n]); h.pop("__metadata__", None)
assert h == {} and len(d) == 8 + n, (h, len(d))' "$st"
    [ "$(ls "$M")" = snapshot_done ]
}

@test "an empty snapshot copied into -o create x.ckpt: the save is refused with the reason and no file, and the tensors copied next make the file" {
    local snap=$BATS_TEST_TMPDIR/empty
    mkdir "$snap"
    : >"$snap/snapshot_done"
    local ck=$BATS_TEST_TMPDIR/new.ckpt
    mount_fg "$ck" "$M" -o create,commit=manual
    [ -z "$(ls -A "$M")" ] # no file yet, so no snapshot_done
    run timeout 60 cp -r "$snap/." "$M/"
    echo "$output"
    [ "$status" -ne 0 ]
    [[ $output == *snapshot_done* ]]
    err=$(getfattr --absolute-names --only-values -n user.ckptfs.last_error "$M")
    [[ $err == *"new.ckpt: no tensors to save, and MindSpore loads no empty checkpoint; nothing was saved"* ]]
    [ ! -e "$ck" ]
    [ ! -e "$M/snapshot_done" ]
    mkdir "$M/w"
    $ORACLE meta-of 2 kFloat >"$M/w/meta"
    head -c 8 /dev/urandom >"$M/w/out"
    touch "$M/snapshot_done"
    [ "$(tags "$ck")" = w ]
    run $ORACLE check "$M" "$ck"
    [ "$status" -eq 0 ]
}
