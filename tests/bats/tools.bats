#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# Ordinary tools on a mounted checkpoint: what users actually run.

load helpers

setup() {
    $ORACLE gen "$BATS_TEST_TMPDIR/a.ckpt" --case alltypes
    $ORACLE parse "$BATS_TEST_TMPDIR/a.ckpt" >"$BATS_TEST_TMPDIR/ref.json"
    M=$BATS_TEST_TMPDIR/m
    mount_fg "$BATS_TEST_TMPDIR/a.ckpt" "$M" -o ro
}

# ref_sha DIR: the oracle's sha256 of a tensor's out.
ref_sha() {
    $PY -c 'import json,sys
print(next(e["sha256"] for e in json.load(open(sys.argv[1])) if e["dir"] == sys.argv[2]))' \
        "$BATS_TEST_TMPDIR/ref.json" "$1"
}

@test "cp -r out of the mount gives the same tree (a OneFlow snapshot)" {
    cp -r "$M" "$BATS_TEST_TMPDIR/snap"
    diff -r "$M" "$BATS_TEST_TMPDIR/snap"
    [ -f "$BATS_TEST_TMPDIR/snap/snapshot_done" ]
    [ ! -s "$BATS_TEST_TMPDIR/snap/snapshot_done" ]
    for d in "$BATS_TEST_TMPDIR"/snap/*/; do
        name=$(basename "$d")
        [ "$(sha "$d/out")" = "$(ref_sha "$name")" ]
    done
}

@test "rsync -a and tar copy every file byte for byte" {
    rsync -a "$M/" "$BATS_TEST_TMPDIR/rs/"
    diff -r "$M" "$BATS_TEST_TMPDIR/rs"
    tar -C "$M" -cf "$BATS_TEST_TMPDIR/t.tar" .
    mkdir "$BATS_TEST_TMPDIR/untar"
    tar -C "$BATS_TEST_TMPDIR/untar" -xf "$BATS_TEST_TMPDIR/t.tar"
    diff -r "$M" "$BATS_TEST_TMPDIR/untar"
}

@test "dd with offsets and od read the right bytes" {
    d=t.int64
    size=$(stat -c %s "$M/$d/out")
    dd if="$M/$d/out" of="$BATS_TEST_TMPDIR/tail" bs=1 skip=8 status=none
    [ "$(stat -c %s "$BATS_TEST_TMPDIR/tail")" -eq $((size - 8)) ]
    cmp <(tail -c +9 "$M/$d/out") "$BATS_TEST_TMPDIR/tail"
    [ "$(od -A n -t d8 -N 8 "$M/$d/out" | tr -d ' ')" = \
      "$($PY -c 'import sys,numpy as n; print(n.fromfile(sys.argv[1], "<i8")[0])' "$M/$d/out")" ]
    [ "$(sha "$M/$d/out")" = "$(ref_sha "$d")" ]
}

@test "numpy.fromfile and np.memmap read tensors with the meta's shape" {
    $PY - "$M" "$BATS_TEST_TMPDIR/ref.json" <<'PY'
import hashlib, json, os, re, sys
import numpy as np
root, ref = sys.argv[1], json.load(open(sys.argv[2]))
np_types = {"kFloat": "<f4", "kDouble": "<f8", "kFloat16": "<f2", "kInt8": "i1", "kInt16": "<i2",
            "kInt32": "<i4", "kInt64": "<i8", "kUInt8": "u1", "kUInt16": "<u2", "kUInt32": "<u4",
            "kUInt64": "<u8", "kBool": "?", "kComplex64": "<c8", "kComplex128": "<c16"}
seen = 0
for e in ref:
    meta = open(os.path.join(root, e["dir"], "meta")).read()
    kind = re.search(r"data_type: (\w+)", meta).group(1)
    if kind not in np_types:
        continue
    shape = tuple(int(d) for d in re.findall(r"dim: (\d+)", meta))
    path = os.path.join(root, e["dir"], "out")
    a = np.fromfile(path, dtype=np_types[kind]).reshape(shape)
    assert hashlib.sha256(a.tobytes()).hexdigest() == e["sha256"], e["dir"]
    if a.size:
        mm = np.memmap(path, dtype=np_types[kind], mode="r", shape=shape)
        assert np.array_equal(np.asarray(mm), a, equal_nan=True), e["dir"]
    seen += 1
assert seen >= 15, seen
PY
}

@test "find and ls -lR list the tree with exact sizes" {
    [ "$(find "$M" -type d | wc -l)" -eq $(( $(ls "$M" | wc -l) )) ]
    [ "$(find "$M" -name out | wc -l)" -eq "$($PY -c 'import json,sys; print(len(json.load(open(sys.argv[1]))))' "$BATS_TEST_TMPDIR/ref.json")" ]
    [ "$(find "$M" -mindepth 2 ! -name meta ! -name out | wc -l)" -eq 0 ]
    ls -lR "$M" >"$BATS_TEST_TMPDIR/ls"
    $PY - "$M" "$BATS_TEST_TMPDIR/ref.json" <<'PY'
import json, os, sys
root, ref = sys.argv[1], json.load(open(sys.argv[2]))
for e in ref:
    assert os.stat(os.path.join(root, e["dir"], "out")).st_size == e["nbytes"], e["dir"]
PY
}

@test "modes are 0555/0444, mtime is the model's, writes fail with EROFS" {
    [ "$(stat -c %a "$M")" = 555 ]
    d=$(ls "$M" | grep -v snapshot_done | head -1)
    [ "$(stat -c %a "$M/$d")" = 555 ]
    [ "$(stat -c %a "$M/$d/out")" = 444 ]
    [ "$(stat -c %a "$M/$d/meta")" = 444 ]
    [ "$(stat -c %Y "$M/$d/out")" = "$(stat -c %Y "$BATS_TEST_TMPDIR/a.ckpt")" ]
    before=$(sha "$BATS_TEST_TMPDIR/a.ckpt")
    run sh -c "echo x > '$M/$d/out'"
    [[ $output == *"Read-only file system"* ]]
    run mkdir "$M/new"
    [[ $output == *"Read-only file system"* ]]
    run rm -r "$M/$d"
    [[ $output == *"Read-only file system"* ]]
    run mv "$M/$d" "$M/other"
    [[ $output == *"Read-only file system"* ]]
    run truncate -s 0 "$M/$d/out"
    [[ $output == *"Read-only file system"* ]]
    run setfattr -n user.x -v y "$M/$d"
    [ "$status" -ne 0 ]
    [ "$(sha "$BATS_TEST_TMPDIR/a.ckpt")" = "$before" ]
}

@test "getfattr shows name, MindSpore type, canonical type and shape as the reference parse has them" {
    for d in $(ls "$M" | grep -v snapshot_done); do
        getfattr -d --absolute-names "$M/$d" | grep '^user' | sort >"$BATS_TEST_TMPDIR/got"
        $PY - "$BATS_TEST_TMPDIR/ref.json" "$d" "$REPO/tests/oracle" >"$BATS_TEST_TMPDIR/want" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[3])
import stat_oracle as so  # the canonical name by numpy, not by ckptfs
e = next(e for e in json.load(open(sys.argv[1])) if e["dir"] == sys.argv[2])
print('user.ckptfs.dtype="%s"' % so.canonical_name(e["type"]))
print('user.ckptfs.name="%s"' % e["tag"])
print('user.ckptfs.shape="[%s]"' % ",".join(map(str, e["dims"])))
print('user.ckptfs.type="%s"' % e["type"])
PY
        diff "$BATS_TEST_TMPDIR/want" "$BATS_TEST_TMPDIR/got"
    done
}
