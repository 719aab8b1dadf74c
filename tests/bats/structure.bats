#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# Tensors made, removed and renamed with mkdir, rm -r and mv; a model made
# from nothing with -o create; and the OneFlow bridge: a real OneFlow
# snapshot copied into a mount becomes a .ckpt.  Saved files are checked with
# the oracle.

load helpers
export ORACLE_PY=$REPO/tests/oracle/ckpt_oracle.py

setup() {
    M=$BATS_TEST_TMPDIR/m
    F=$BATS_TEST_TMPDIR/model.ckpt
    SNAP=$FIXTURES/oneflow/legacy_v2_java_mlp_adam
}

# tags FILE: the tensor names of the oracle's reference parse, in order.
tags() {
    $ORACLE parse "$1" | $PY -c 'import json,sys; print(" ".join(e["tag"] for e in json.load(sys.stdin)))'
}

@test "cp -r of a real OneFlow snapshot into a new mount, touch snapshot_done: a .ckpt of it" {
    mount_fg "$F" "$M" -o create,commit=manual
    # entry by entry, by name: cp -r "$SNAP/." goes in inode order, and
    # where the fixture's snapshot_done is the lowest its copy would save
    # a tree of no tensors (refused: pickled_copy.bats)
    for e in "$SNAP"/*; do cp -r "$e" "$M/"; done
    touch "$M/snapshot_done"
    [ -f "$F" ]
    diff -r "$SNAP" "$M"
    # Independently: the oracle's parse of the file matches the snapshot,
    # tensor by tensor (kFloat -> Float32, kInt64 -> Int64).
    $PY - "$ORACLE_PY" "$F" "$SNAP" <<'PY'
import importlib.util, os, sys
from google.protobuf import text_format
spec = importlib.util.spec_from_file_location("oracle", sys.argv[1])
oracle = importlib.util.module_from_spec(spec)
spec.loader.exec_module(oracle)
entries, crc = oracle.load_reference(sys.argv[2])
by_tag = {e.tag.decode(): e for e in entries}
names = sorted(d for d in os.listdir(sys.argv[3]) if os.path.isdir(os.path.join(sys.argv[3], d)))
assert sorted(by_tag) == names, (sorted(by_tag), names)
ms = {"kFloat": "Float32", "kInt64": "Int64"}
for name in names:
    meta = oracle.VariableMetaInfo()
    text_format.Parse(open(os.path.join(sys.argv[3], name, "meta")).read(), meta)
    e = by_tag[name]
    kind = oracle._DATA_TYPE_ENUM.values_by_number[meta.data_type].name
    assert e.ms_type == ms[kind], (name, e.ms_type)
    assert list(e.ckpt_dims) == list(meta.shape.dim), name
    assert e.out == open(os.path.join(sys.argv[3], name, "out"), "rb").read(), name
print("ok", len(names))
PY
}

@test "mkdir + meta + out adds a tensor; 0-d gets dims []; an incomplete one blocks the save" {
    $ORACLE gen "$F" --case sliced
    mount_fg "$F" "$M" -o commit=manual
    before=$(sha "$F")
    mkdir "$M/new.scalar"
    run touch "$M/snapshot_done"
    [ "$status" -ne 0 ]
    [ "$(sha "$F")" = "$before" ]
    [[ $(getfattr --only-values -n user.ckptfs.last_error "$M") == *"tensor 'new.scalar' has no meta"* ]]
    printf 'shape {\n}\ndata_type: kInt64\n' >"$M/new.scalar/meta"
    $PY -c 'import numpy as n; n.array(42, "<i8").tofile("'"$M"'/new.scalar/out")'
    touch "$M/snapshot_done"
    $ORACLE parse "$F" | $PY -c 'import json,sys
e = [e for e in json.load(sys.stdin) if e["tag"] == "new.scalar"][0]
assert e["type"] == "Int64" and e["ckpt_dims"] == [] and e["nbytes"] == 8, e'
    [ "$(tags "$F" | awk '{print $NF}')" = new.scalar ]
    run $ORACLE check "$M" "$F"
    [ "$status" -eq 0 ]
}

@test "rm -r deletes a tensor, also the records it had replaced; mv renames by the escaping rule" {
    $ORACLE gen "$F" --case repeat
    mount_fg "$F" "$M" -o commit=manual
    first=$(ls -U "$M" | grep -v snapshot_done | head -1)
    rm -r "$M/$first"
    second=$(ls -U "$M" | grep -v snapshot_done | head -1)
    mv "$M/$second" "$M/renamed%2Fwith%25escapes"
    [ "$(getfattr --only-values -n user.ckptfs.name "$M/renamed%2Fwith%25escapes")" = "renamed/with%escapes" ]
    touch "$M/snapshot_done"
    ! tags "$F" | tr ' ' '\n' | grep -qx "$first" || false
    tags "$F" | tr ' ' '\n' | grep -qx "renamed/with%escapes"
    run $ORACLE check "$M" "$F"
    [ "$status" -eq 0 ]
}

@test "names: an invalid escape is EINVAL, over 255 bytes ENAMETOOLONG, a rename replaces an empty target" {
    $ORACLE gen "$F" --case sliced
    mount_fg "$F" "$M" -o commit=manual
    run mkdir "$M/bad%zz"
    [[ $output == *"Invalid argument"* ]]
    run mkdir "$M/lower%2f"
    [[ $output == *"Invalid argument"* ]]
    run mkdir "$M/$(printf 'x%.0s' $(seq 300))"
    [[ $output == *"File name too long"* ]]
    a=$(ls -U "$M" | grep -v snapshot_done | sed -n 1p)
    b=$(ls -U "$M" | grep -v snapshot_done | sed -n 2p)
    n=$(ls "$M" | grep -vc snapshot_done)
    run mv -T "$M/$a" "$M/$b"
    [[ $output == *"Directory not empty"* ]]
    rm "$M/$b/meta" "$M/$b/out"
    mv -T "$M/$a" "$M/$b"
    [ "$(ls "$M" | grep -vc snapshot_done)" -eq $((n - 1)) ]
    want=$($ORACLE parse "$F" | $PY -c 'import json,sys
print(next(e["sha256"] for e in json.load(sys.stdin) if e["dir"] == sys.argv[1]))' "$a")
    [ "$(sha "$M/$b/out")" = "$want" ]
}

@test "-o create refuses a name it cannot tell the format of; a 0400 model with -o rw saves and keeps 0400" {
    mkdir "$M"
    run "$CKPTFS" -o create "$BATS_TEST_TMPDIR/model.dat" "$M"
    [ "$status" -ne 0 ]
    [[ $output == *"model.dat: cannot create a model of this type"* ]]
    mount_fg "$BATS_TEST_TMPDIR/model.dat" "$M" -o create,format=ckpt,commit=manual
    mkdir "$M/t"
    printf 'shape { dim: 2 } data_type: kInt8' >"$M/t/meta"
    printf 'ab' >"$M/t/out"
    touch "$M/snapshot_done"
    [ "$(tags "$BATS_TEST_TMPDIR/model.dat")" = t ]
    $ORACLE gen "$F" --case sliced
    chmod 0400 "$F"
    mount_fg "$F" "$BATS_TEST_TMPDIR/m2" -o rw,commit=manual
    rm -r "$BATS_TEST_TMPDIR/m2/$(ls -U "$BATS_TEST_TMPDIR/m2" | grep -v snapshot_done | head -1)"
    touch "$BATS_TEST_TMPDIR/m2/snapshot_done"
    [ "$(stat -c %a "$F")" = 400 ]
}
