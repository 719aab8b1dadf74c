#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# PyTorch torch.save files (.pt, .pth, .bin) mount as the tree PyTorch
# itself loads: every real fixture and every file Debian's torch 1.13
# writes here (every dtype, views of shared storages at offsets and with
# strides, nested training checkpoints with numbers beside the tensors,
# Parameters, names that need escaping, ZIP64) shows, through a real
# mount, what torch.load(weights_only=True) returns
# (tests/oracle/pytorch_oracle.py).  Mounting reads no storage bytes;
# hostile files are refused in one line naming the offset, nothing is
# executed or mounted; the mount is read-only (no writer yet); the tools
# take .pt files as input.

load helpers

PT_ORACLE="$PY $REPO/tests/oracle/pytorch_oracle.py"
PT=$FIXTURES/pytorch
M=$BATS_TEST_TMPDIR/m
T=$BATS_TEST_TMPDIR

teardown() {
    # a file wrongly accepted was mounted as a daemon: take it down too
    if mountpoint -q "$M"; then
        fusermount3 -u "$M" || fusermount3 -uz "$M"
    fi
    ckptfs_teardown
}

# check_mount FILE [--trusted]: mounted read-only, the tree is what torch loads
check_mount() {
    mount_fg "$1" "$M" -o ro
    run $PT_ORACLE check "$M" "$@"
    echo "$1: $output"
    [ "$status" -eq 0 ]
    unmount "$M"
}

@test "every real PyTorch fixture mounts as the tree torch.load gives (names, types, meta, out, numpy reads)" {
    n=0
    for f in "$PT"/*.pt "$PT"/*.pth; do
        check_mount "$f"
        n=$((n + 1))
    done
    [ "$n" -eq 5 ]
}

@test "files torch.save writes: every dtype, views (tied, offsets, transposes, every other column, stride 0, Fortran order), Parameters, escaped names, 3000 tensors" {
    for c in alltypes views params names; do
        $PT_ORACLE gen "$T/$c.pt" --case "$c"
        check_mount "$T/$c.pt"
    done
    $PT_ORACLE gen "$T/many.pth" --case many --count 3000
    check_mount "$T/many.pth"
    # the strided views are gathers of their storage, not copies
    "$BUILD/ckptfs-dump" "$T/views.pt" | grep -P '^transposed\t.*\tstrided, 4-byte runs$'
    "$BUILD/ckptfs-dump" "$T/views.pt" | grep -P '^rows\t(?!.*strided)'
}

@test "a training checkpoint: nested dicts and lists joined with '.', an optimizer's int keys, numbers as read-only 0-d tensors, strings and None counted, not shown" {
    f=$T/train.bin
    $PT_ORACLE gen "$f" --case nested
    # torch 1.13's weights-only loader has no BINFLOAT: the oracle loads
    # the file it wrote itself in full (pytorch_oracle.load_entries)
    check_mount "$f" --trusted
    run "$BUILD/ckptfs-dump" "$f"
    [ "$status" -eq 0 ]
    [[ ${lines[0]} == *", 3 values neither tensors nor numbers not shown (the first: 'optimizer.param_groups.0.foreach')" ]]
    mount_fg "$f" "$M"
    [ "$(getfattr --absolute-names --only-values -n user.ckptfs.type "$M/epoch")" = int ]
    [ "$(getfattr --absolute-names --only-values -n user.ckptfs.type "$M/lr")" = float ]
    [ "$(getfattr --absolute-names --only-values -n user.ckptfs.type "$M/optimizer.state.0.exp_avg")" = torch.float32 ]
    [ "$($PY -c 'import struct,sys; print(struct.unpack("<q", open(sys.argv[1],"rb").read())[0])' "$M/step/out")" = -70000000000 ]
    [ ! -e "$M/name" ] && [ ! -e "$M/nothing" ]
    run sh -c "echo 1 >'$M/epoch/out'"
    [ "$status" -ne 0 ]
    unmount "$M"
}

@test "ZIP64: the same records with every ZIP64 structure (Python's zipfile) mount as the same tree" {
    for c in views nested; do
        $PT_ORACLE gen "$T/$c.pt" --case "$c"
        $PT_ORACLE zip64 "$T/$c.pt" "$T/$c-64.pt"
        check_mount "$T/$c-64.pt" --trusted
    done
}

@test "mounting reads no storage bytes: at most the central directory, the local headers, byteorder and data.pkl" {
    f=$T/big.pt
    $PT_ORACLE gen "$f" --case big --count 16
    limit=$($PT_ORACLE overhead "$f")
    env ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" \
        strace -f -y -e trace=read,pread64 -o "$T/trace" "$BUILD/ckptfs-dump" "$f" >/dev/null
    read=$(awk -v f="<$(realpath "$f")>" 'index($0, f) && $NF ~ /^[0-9]+$/ {n += $NF} END {print n + 0}' "$T/trace")
    echo "read $read of $(stat -c %s "$f") bytes; $limit are not storages" >&3
    [ "$read" -gt 0 ]
    [ "$read" -le "$limit" ]
}

@test "hostile files are refused in one line naming the offset or record, nothing executed, nothing mounted" {
    rm -f /tmp/ckptfs-pytorch-oracle-executed
    mkdir -p "$M"
    for c in $($PT_ORACLE bad-cases); do
        f=$T/bad-$c.pt
        want=$($PT_ORACLE bad "$f" --case "$c")
        run "$BUILD/ckptfs-dump" "$f"
        echo "$c: $output"
        [ "$status" -ne 0 ]
        [ "${#lines[@]}" -eq 1 ]
        [[ $output == *"$want"* ]]
        run "$CKPTFS" -o ro "$f" "$M"
        [ "$status" -ne 0 ]
        [[ $output == *"$want"* ]]
        ! mountpoint -q "$M" || false
    done
    [ ! -e /tmp/ckptfs-pytorch-oracle-executed ]
}

@test "read-only: a PyTorch mount takes no edits (ckptfs does not save the format yet); -o rw is refused in one line" {
    cp "$PT/torchtune_tiny_state_dict_with_one_key.pt" "$T/w.pt"
    chmod 0644 "$T/w.pt"
    before=$(sha "$T/w.pt")
    mount_fg "$T/w.pt" "$M" # the owner may write it: read-only all the same
    run sh -c "printf x | dd of='$M/test_key/out' conv=notrunc 2>&1"
    [ "$status" -ne 0 ]
    [[ $output == *"Read-only file system"* ]]
    run mkdir "$M/new"
    [ "$status" -ne 0 ]
    unmount "$M"
    [ "$(sha "$T/w.pt")" = "$before" ]
    run "$CKPTFS" -o rw "$T/w.pt" "$M"
    [ "$status" -ne 0 ]
    [[ $output == *"ckptfs reads PyTorch models but does not save them yet"* ]]
}

@test "the tools take .pt files: convert to safetensors (json + numpy read it as torch loads the .pt), stat, diff" {
    f=$T/views.pt
    $PT_ORACLE gen "$f" --case views
    "$BUILD/ckptfs-convert" "$f" "$T/views.safetensors"
    # the safetensors oracle's own reader (json + numpy), against torch's load
    $PY - "$f" "$T/views.safetensors" <<'EOF'
import json, struct, sys
import numpy as np
import torch
pt, st = sys.argv[1], sys.argv[2]
with open(st, "rb") as fh:
    n = struct.unpack("<Q", fh.read(8))[0]
    header = json.loads(fh.read(n))
    data = fh.read()
want = {k: v.contiguous() for k, v in torch.load(pt, weights_only=True).items()}
header.pop("__metadata__", None)
assert sorted(header) == sorted(want), (sorted(header), sorted(want))
for k, v in want.items():
    h = header[k]
    b, e = h["data_offsets"]
    if v.dtype == torch.bfloat16:
        v = v.view(torch.int16)
    assert h["shape"] == list(v.shape), (k, h["shape"], v.shape)
    assert data[b:e] == v.numpy().tobytes(), k
print("ok", len(want))
EOF
    # stat reads the strided view as torch does: the base's elements
    "$BUILD/ckptfs-stat" "$f" >"$T/stat"
    [ "$(awk '$1 == "transposed" {print $2, $3, $4, $5, $6}' "$T/stat")" = \
      "$(awk '$1 == "base" {print $2, "[8,6]", $4, $5, $6}' "$T/stat")" ]
    run "$BUILD/ckptfs-diff" "$f" "$T/views.safetensors"
    echo "$output"
    [ "$status" -eq 0 ]
}

@test "a run directory lists .pt, .pth and .bin checkpoints by their names without the extension" {
    D=$T/run
    mkdir "$D"
    cp "$PT/candle_test.pt" "$D/net-1_10.pt"
    cp "$PT/candle_test_with_key.pt" "$D/net-2_10.pth"
    cp "$PT/torchtune_tiny_state_dict_with_one_key.pt" "$D/pytorch_model.bin"
    "$BUILD/ckptfs-dump" -o settle=0 "$D" | tail -n +2 | cut -f1-3 >"$T/got"
    cat "$T/got"
    printf '%s\t%s\t%s\n' net-1_10 net-1_10.pt pytorch net-2_10 net-2_10.pth pytorch \
        pytorch_model pytorch_model.bin pytorch | diff - "$T/got"
}
