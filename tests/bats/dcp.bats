#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# PyTorch Distributed Checkpoint directories (.metadata, __<rank>_<n>.distcp)
# mount as the one model they were saved from, read-only, and the tools
# take them as input.  Debian's torch 1.13 cannot write DCP (its
# distributed checkpoint modules do not import on Python 3.11), so the
# test oracle (tests/oracle/dcp_oracle.py) writes them as PyTorch 2.x's
# FileSystemWriter does, from PyTorch's own source (the metadata
# dataclasses pickled under their real module paths, each item a
# torch.save archive), and reads them back on its own: the metadata
# unpickled with its own classes, each chunk loaded by torch itself and
# placed at its offsets.  Mounting reads no tensor bytes; hostile
# directories are refused in one line, nothing executed or mounted.

load helpers

DCP_ORACLE="$PY $REPO/tests/oracle/dcp_oracle.py"
M=$BATS_TEST_TMPDIR/m
T=$BATS_TEST_TMPDIR

teardown() {
    # a directory wrongly accepted was mounted as a daemon: take it down too
    if mountpoint -q "$M"; then
        fusermount3 -u "$M" || fusermount3 -uz "$M"
    fi
    ckptfs_teardown
}

# check_mount DIR: mounted, the tree is what the oracle assembles
check_mount() {
    mount_fg "$1" "$M"
    run $DCP_ORACLE check "$M" "$1"
    echo "$1: $output"
    [ "$status" -eq 0 ]
    unmount "$M"
}

@test "DCP directories as PyTorch 2.x writes them mount as the model saved: whole tensors of every dtype, rows cut unevenly over ranks, grids even and uneven, strided chunks, values saved as bytes, PyTorch 2.0's layout, Python 3.10's enum pickles, safetensors data files, 2000 tensors" {
    for c in single dim0 grid uneven strided older py310 safetensors mixed; do
        $DCP_ORACLE gen "$T/$c" --case "$c"
        check_mount "$T/$c"
    done
    $DCP_ORACLE gen "$T/many" --case many --count 2000
    check_mount "$T/many"
    # chunks are served where they lie: a grid interleaves, a transpose is a gather
    "$BUILD/ckptfs-dump" "$T/grid" | grep -P '\tinterleaved, '
    "$BUILD/ckptfs-dump" "$T/uneven" | grep -P '^fsdp_tp\t.*\tinterleaved, 16-byte runs$'
    "$BUILD/ckptfs-dump" "$T/strided" | grep -P '\tstrided, '
    "$BUILD/ckptfs-dump" "$T/dim0" | grep -P '__[0-9]+_0\.distcp:[0-9]+\+[0-9]+,__[0-9]+_0\.distcp:'
}

@test "a DCP mount is read-only: writes, new tensors and -o rw are refused" {
    $DCP_ORACLE gen "$T/d" --case single
    mount_fg "$T/d" "$M"
    name=$(ls "$M" | grep -v snapshot_done | head -1)
    run sh -c "echo x >'$M/$name/out'"
    [ "$status" -ne 0 ]
    run mkdir "$M/new"
    [ "$status" -ne 0 ]
    unmount "$M"
    run "$CKPTFS" -o rw "$T/d" "$M"
    echo "$output"
    [ "$status" -ne 0 ]
    ! mountpoint -q "$M" || false
}

@test "mounting reads .metadata and each item's archive directory and data.pkl, never a tensor's bytes" {
    $DCP_ORACLE gen "$T/d" --case big --count 16
    total=$(cat "$T"/d/*.distcp | wc -c)
    env ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" \
        strace -f -y -e trace=read,pread64 -o "$T/trace" "$BUILD/ckptfs-dump" "$T/d" >/dev/null
    read=$(awk 'index($0, ".distcp>") && $NF ~ /^[0-9]+$/ {n += $NF} END {print n + 0}' "$T/trace")
    # 16 tensors of 256 KiB over 2 ranks: each chunk's archive is 128 KiB
    # of storage and well under 4 KiB of the rest
    echo "read $read of $total data file bytes" >&3
    [ "$read" -gt 0 ]
    [ "$read" -le $((32 * 4096)) ]
}

@test "the tools take a DCP directory: ckptfs-convert to safetensors (json + numpy read what the oracle assembles), to .pt (torch loads it) and .ckpt; dump, stat, diff" {
    $DCP_ORACLE gen "$T/d" --case dim0
    "$BUILD/ckptfs-convert" "$T/d" "$T/x.safetensors"
    $DCP_ORACLE same-as-safetensors "$T/d" "$T/x.safetensors"
    "$BUILD/ckptfs-convert" "$T/d" "$T/x.pt"
    # torch loads it (weights_only) as the tree the mount of it shows, and
    # that is the DCP's (numbers become 0-d tensors: ckptfs-diff compares values)
    mount_fg "$T/x.pt" "$M" -o ro
    $PY "$REPO/tests/oracle/pytorch_oracle.py" check "$M" "$T/x.pt"
    unmount "$M"
    run "$BUILD/ckptfs-diff" "$T/d" "$T/x.pt"
    echo "$output"
    [ "$status" -eq 0 ]
    "$BUILD/ckptfs-convert" "$T/d" "$T/x.ckpt"
    run "$BUILD/ckptfs-diff" "$T/d" "$T/x.ckpt"
    echo "$output"
    [ "$status" -eq 0 ]
    "$BUILD/ckptfs-stat" "$T/d" | grep -q '^tensor'
    "$BUILD/ckptfs-dump" "$T/d" | head -1 | grep -q 'format dcp, .*PyTorch distributed checkpoint of'
}

@test "hostile DCP directories are refused in one line naming the file, offset or tensor, nothing executed, nothing mounted" {
    rm -f /tmp/ckptfs-dcp-oracle-executed
    mkdir -p "$M"
    n=0
    $DCP_ORACLE bad-all "$T" >"$T/bad-cases"
    [ "$(wc -l <"$T/bad-cases")" -eq "$($DCP_ORACLE bad-cases | wc -w)" ]
    while IFS=$'\t' read -r c want; do
        d=$T/bad-$c
        run "$BUILD/ckptfs-dump" "$d"
        echo "$c: $output"
        [ "$status" -ne 0 ]
        [ "${#lines[@]}" -eq 1 ]
        [[ $output == *"$want"* ]]
        run "$CKPTFS" -o ro "$d" "$M"
        [ "$status" -ne 0 ]
        [[ $output == *"$want"* ]]
        ! mountpoint -q "$M" || false
        n=$((n + 1))
    done <"$T/bad-cases"
    [ "$n" -ge 10 ]
    [ ! -e /tmp/ckptfs-dcp-oracle-executed ]
}

# nobody MNT CMD...: CMD as another user without root's groups, in the mount MNT
nobody() {
    (cd "$1" && shift && setpriv --reuid=65534 --regid=65534 --clear-groups "$@")
}

@test "another user (allow_other): no read of a checkpoint with a 0600 data file (its tensors hold bytes of each, as a merged distributed checkpoint's); a 0644 one reads as its owner does" {
    $DCP_ORACLE gen "$T/d" --case dim0
    cp -a "$T/d" "$T/public"
    chmod 0755 "$T" "$T/d" "$T/public"
    chmod 0644 "$T"/d/.metadata "$T"/d/*.distcp "$T"/public/.metadata "$T"/public/*.distcp
    chmod 0600 "$T/d/__1_0.distcp"
    mount_fg "$T/d" "$M" -o allow_other
    mount_fg "$T/public" "$T/m2" -o allow_other
    n=0
    for name in $(ls "$M" | grep -v snapshot_done); do
        run nobody "$M" cat "$name/out"
        [ "$status" -ne 0 ]
        [[ $output == *"Permission denied"* ]]
        nobody "$T/m2" cat "$name/out" | cmp "$M/$name/out" -
        n=$((n + 1))
    done
    [ "$n" -gt 0 ]
}

@test "a data file rewritten after the mount is an I/O error naming it, never the new bytes" {
    $DCP_ORACLE gen "$T/d" --case single
    mount_fg "$T/d" "$M"
    name=$(ls "$M" | grep -v snapshot_done | head -1)
    cat "$M/$name/out" >/dev/null
    f=$(ls "$T"/d/*.distcp | head -1)
    size=$(stat -c %s "$f")
    head -c "$size" /dev/urandom >"$T/junk"
    dd if="$T/junk" of="$f" conv=notrunc status=none
    ok=0
    for name in $(ls "$M" | grep -v snapshot_done); do
        if ! cat "$M/$name/out" >/dev/null 2>"$T/err"; then
            grep -q 'Input/output error' "$T/err"
            ok=$((ok + 1))
        fi
    done
    [ "$ok" -gt 0 ]
}
