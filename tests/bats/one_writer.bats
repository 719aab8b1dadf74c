#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# One writer, and the file it mounted: a second writable mount of a model
# is refused while the first lives (the lock survives its saves and dies
# with it); a model another program replaced or rewrote is never
# overwritten by the mount's next save; a read-only mount whose model was
# cut or rewritten fails its reads with EIO instead of short reads.
# Expected values come from the files themselves (sha256, od) and the
# oracles (ckpt_oracle.py; envelope_oracle.py for the encrypted model).

load helpers

# A test may use a shared directory outside the test's own ($S).
teardown() {
    local rc=0
    ckptfs_teardown || rc=$?
    if [ -n "${RO:-}" ] && mountpoint -q "$RO"; then umount "$RO"; fi
    if [ -n "${S:-}" ]; then rm -rf "$S"; fi
    return "$rc"
}

setup() {
    D=$BATS_TEST_TMPDIR/d
    mkdir -p "$D"
    M=$BATS_TEST_TMPDIR/m
    F=$D/model.ckpt
    LOCK=$D/.model.ckpt.ckptfs-lock
    cp "$MS/goldenstick_test_linears_woq_predict_2stage_fp32.ckpt" "$F"
    chmod 0644 "$F"
    OTHER=$BATS_TEST_TMPDIR/other.ckpt
    cp "$MS/mindarmour_checkpoint_lenet-10_1875.ckpt" "$OTHER"
    chmod 0644 "$OTHER"
    NEW=$BATS_TEST_TMPDIR/new.bin   # 6 floats for linear1.bias
    $PY -c 'import numpy as n; n.arange(10, 16, dtype="<f4").tofile("'"$NEW"'")'
}

# daemon_of MNT: the pid of the ckptfs process serving MNT, found in /proc
# (its executable is ckptfs and its command line names MNT).
daemon_of() {
    local p exe
    exe=$(readlink -f "$CKPTFS")
    for p in /proc/[0-9]*; do
        [ "$(readlink "$p/exe" 2>/dev/null)" = "$exe" ] || continue
        if tr '\0' '\n' <"$p/cmdline" 2>/dev/null | grep -qxF "$1"; then
            echo "${p#/proc/}"
            return 0
        fi
    done
    return 1
}

# mount_bg MODEL MNT [options]: a daemonized mount (teardown unmounts it).
mount_bg() {
    local model=$1 mnt=$2
    shift 2
    mkdir -p "$mnt"
    echo "0 $mnt" >>"$BATS_TEST_TMPDIR/mounts"
    "$CKPTFS" "$@" "$model" "$mnt"
}

# second_rw MODEL: a writable mount attempt beside the first (daemonized,
# so one that wrongly succeeds returns too and teardown unmounts it).
second_rw() {
    mkdir -p "$BATS_TEST_TMPDIR/second"
    echo "0 $BATS_TEST_TMPDIR/second" >>"$BATS_TEST_TMPDIR/mounts"
    run "$CKPTFS" -o rw "$@" "$BATS_TEST_TMPDIR/second"
    echo "$output"
}

# the_daemon: the pid of the newest mount_fg daemon.
the_daemon() { tail -1 "$BATS_TEST_TMPDIR/mounts" | cut -d' ' -f1; }

# unmount_refused MNT PID: unmount; the save at unmount is refused, so the
# daemon exits 1 (and teardown must not count that as a failure).
unmount_refused() {
    local rc=0
    umount_wait "$1" "$2" || rc=$?
    [ "$rc" -eq 1 ]
    sed -i "\\|^$2 $1\$|d" "$BATS_TEST_TMPDIR/mounts"
}

@test "a second writable mount is refused, naming the daemon's pid; a read-only one beside it works" {
    mount_bg "$F" "$M" -o rw,commit=manual
    pid=$(daemon_of "$M")
    [ -n "$pid" ]
    [ "$(getfattr --only-values -n user.ckptfs.pid "$M")" = "$pid" ]
    second_rw "$F"
    [ "$status" -ne 0 ]
    [[ $output == *"ckptfs: $F: mounted writable by pid $pid at $M; mount it -o ro, or unmount that first"* ]]
    ! mountpoint -q "$BATS_TEST_TMPDIR/second" || false
    # The default (writable, since the owner may write the file) is refused too.
    run "$CKPTFS" "$F" "$BATS_TEST_TMPDIR/second"
    [ "$status" -ne 0 ]
    [[ $output == *"mounted writable by pid $pid"* ]]
    mount_fg "$F" "$BATS_TEST_TMPDIR/ro" -o ro
    cmp "$M/linear1.weight/out" "$BATS_TEST_TMPDIR/ro/linear1.weight/out"
    [ "$(od -An -tx1 -v -j 37 -N 120 "$F")" = "$(od -An -tx1 -v "$BATS_TEST_TMPDIR/ro/linear1.weight/out")" ]
}

@test "the lock file holds the daemon's pid; a read-only mount creates nothing; a clean unmount removes it" {
    before=$(ls -A "$D")
    mount_fg "$F" "$BATS_TEST_TMPDIR/ro" -o ro
    [ "$(ls -A "$D")" = "$before" ]
    mount_fg "$F" "$M" -o rw,commit=manual
    pid=$(the_daemon)
    [ "$(head -1 "$LOCK" | cut -d' ' -f1)" = "$pid" ]
    umount_wait "$M" "$pid"
    sed -i "\\|^$pid $M\$|d" "$BATS_TEST_TMPDIR/mounts"
    [ ! -e "$LOCK" ]
    [ "$(ls -A "$D")" = "$before" ]
}

@test "the lock holds across the first mount's saves" {
    mount_fg "$F" "$M" -o rw,commit=manual
    pid=$(the_daemon)
    ino=$(stat -c %i "$F")
    cp "$NEW" "$M/linear1.bias/out"
    touch "$M/snapshot_done"
    [ "$(stat -c %i "$F")" != "$ino" ]   # the save put a new file in place
    [ "$(od -An -tx1 -v -j 188 -N 24 "$F")" = "$(od -An -tx1 -v "$NEW")" ]
    second_rw "$F"
    [ "$status" -ne 0 ]
    [[ $output == *"mounted writable by pid $pid at $M"* ]]
    # and after a second save too
    head -c 20 "$NEW" >"$M/linear2.bias/out"
    touch "$M/snapshot_done"
    second_rw "$F"
    [ "$status" -ne 0 ]
    [[ $output == *"mounted writable by pid $pid at $M"* ]]
}

@test "the lock dies with the daemon (kill -9): then a new writable mount succeeds" {
    mount_bg "$F" "$M" -o rw,commit=manual
    pid=$(daemon_of "$M")
    second_rw "$F"
    [ "$status" -ne 0 ]
    [[ $output == *"mounted writable by pid $pid at $M"* ]]
    kill -9 "$pid"
    while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
    fusermount3 -uz "$M"
    mount_fg "$F" "$BATS_TEST_TMPDIR/after" -o rw,commit=manual
    [ "$(head -1 "$LOCK" | cut -d' ' -f1)" = "$(the_daemon)" ]
    cp "$NEW" "$BATS_TEST_TMPDIR/after/linear1.bias/out"
    touch "$BATS_TEST_TMPDIR/after/snapshot_done"
    [ "$(od -An -tx1 -v -j 188 -N 24 "$F")" = "$(od -An -tx1 -v "$NEW")" ]
}

@test "-o create mounts take the lock too" {
    mount_fg "$D/fresh.ckpt" "$M" -o create,commit=manual
    pid=$(the_daemon)
    second_rw -o create "$D/fresh.ckpt"
    [ "$status" -ne 0 ]
    [[ $output == *"$D/fresh.ckpt: mounted writable by pid $pid at $M"* ]]
}

@test "ckptfs-reencode refuses to write a model mounted writable" {
    mount_fg "$F" "$M" -o rw,commit=manual
    pid=$(the_daemon)
    before=$(sha "$F")
    run "$BUILD/ckptfs-reencode" "$OTHER" "$F"
    [ "$status" -ne 0 ]
    [[ $output == *"$F: mounted writable by pid $pid at $M"* ]]
    [ "$(sha "$F")" = "$before" ]
}

@test "mv other.ckpt model.ckpt while mounted: the save is refused, the other file stays, the edits stay" {
    mount_fg "$F" "$M" -o rw,commit=manual
    pid=$(the_daemon)
    cp "$NEW" "$M/linear1.bias/out"
    mv "$OTHER" "$F"
    want=$(sha "$F")
    run touch "$M/snapshot_done"
    [ "$status" -ne 0 ]
    [ "$(sha "$F")" = "$want" ]
    err=$(getfattr --only-values -n user.ckptfs.last_error "$M")
    [[ $err == *"$F: changed on disk since it was mounted (another file was put in its place); the edits are kept"* ]]
    grep -q "$F: changed on disk since it was mounted" "$BATS_TEST_TMPDIR/daemon.log"
    # The edits, and the tensors of the file that was mounted, still read.
    cmp "$NEW" "$M/linear1.bias/out"
    [ "$(od -An -tx1 -v "$M/linear2.bias/out")" = "$(od -An -tx1 -v -j 400 -N 20 \
        "$MS/goldenstick_test_linears_woq_predict_2stage_fp32.ckpt")" ]
    [ ! -e "$M/snapshot_done" ]
    unmount_refused "$M" "$pid"
    [ "$(sha "$F")" = "$want" ]
    run $ORACLE parse "$F"
    [ "$status" -eq 0 ]
}

@test "a model rewritten in place while mounted (same size; cat over it): the save is refused" {
    mount_fg "$F" "$M" -o rw,commit=manual
    pid=$(the_daemon)
    cp "$NEW" "$M/linear1.bias/out"
    # Another program changes 4 bytes of linear2.bias: same inode, same size.
    printf '\x00\x00\x20\x41' | dd of="$F" bs=1 seek=404 conv=notrunc status=none
    want=$(sha "$F")
    run touch "$M/snapshot_done"
    [ "$status" -ne 0 ]
    [ "$(sha "$F")" = "$want" ]
    [[ $(getfattr --only-values -n user.ckptfs.last_error "$M") == \
        *"$F: changed on disk since it was mounted (it was written to); the edits are kept"* ]]
    cmp "$NEW" "$M/linear1.bias/out"
    # The mount does not serve the rewritten bytes as the indexed ones.
    run cat "$M/linear2.bias/out"
    [ "$status" -ne 0 ]
    [[ $output == *"Input/output error"* ]]
    # A rewrite of another size (cat over it), the same.
    cat "$OTHER" >"$F"
    run touch "$M/snapshot_done"
    [ "$status" -ne 0 ]
    cmp "$OTHER" "$F"
    [[ $(getfattr --only-values -n user.ckptfs.last_error "$M") == \
        *"$F: changed on disk since it was mounted (its size changed)"* ]]
    cmp "$NEW" "$M/linear1.bias/out"
    unmount_refused "$M" "$pid"
    cmp "$OTHER" "$F"
}

@test "a data file of an ONNX model rewritten while mounted: the save is refused, naming it" {
    mkdir "$D/ext"
    cp "$ONNX_FIX"/external_burn/multi_external_* "$D/ext/"
    chmod 0644 "$D"/ext/*
    mount_fg "$D/ext/multi_external_files.onnx" "$M" -o rw,commit=manual
    pid=$(the_daemon)
    $PY -c 'import numpy as np,sys; np.array([9,8,7,6],dtype="<f4").tofile(sys.argv[1])' "$M/bias/out"
    printf '\x00\x00\x20\x41' | dd of="$D/ext/multi_external_weights.bin" bs=1 seek=8 conv=notrunc status=none
    want=$(cat "$D"/ext/multi_external_* | sha256sum)
    run touch "$M/snapshot_done"
    [ "$status" -ne 0 ]
    [[ $(getfattr --only-values -n user.ckptfs.last_error "$M") == \
        *"$D/ext/multi_external_weights.bin: changed on disk since it was mounted (it was written to); the edits are kept"* ]]
    [ "$(cat "$D"/ext/multi_external_* | sha256sum)" = "$want" ]
    [ "$(od -An -tf4 -v "$M/bias/out" | xargs)" = "9 8 7 6" ]
    unmount_refused "$M" "$pid"
    [ "$(cat "$D"/ext/multi_external_* | sha256sum)" = "$want" ]
}

@test "-o create: a file another program created meanwhile is not overwritten" {
    mount_fg "$D/fresh.ckpt" "$M" -o create,commit=manual
    pid=$(the_daemon)
    mkdir "$M/w"
    $ORACLE meta-of 6 kFloat >"$M/w/meta"
    cp "$NEW" "$M/w/out"
    cp "$OTHER" "$D/fresh.ckpt"
    run touch "$M/snapshot_done"
    [ "$status" -ne 0 ]
    [[ $(getfattr --only-values -n user.ckptfs.last_error "$M") == \
        *"$D/fresh.ckpt: changed on disk since it was mounted (another program created it)"* ]]
    cmp "$OTHER" "$D/fresh.ckpt"
    cmp "$NEW" "$M/w/out"
    unmount_refused "$M" "$pid"
    cmp "$OTHER" "$D/fresh.ckpt"
}

@test "touch is not a change (no write): the save works, and a read-only mount still reads" {
    mount_fg "$F" "$M" -o rw,commit=manual
    cp "$NEW" "$M/linear1.bias/out"
    touch -d '2020-01-01 00:00:00' "$F"
    touch "$M/snapshot_done"
    [ -e "$M/snapshot_done" ]
    [ "$(od -An -tx1 -v -j 188 -N 24 "$F")" = "$(od -An -tx1 -v "$NEW")" ]
    run $ORACLE check "$M" "$F"
    [ "$status" -eq 0 ]
    # Touched after that save: the next one works too.
    $PY -c 'import numpy as n; n.arange(20, 26, dtype="<f4").tofile("'"$M/linear1.bias/out"'")'
    touch "$F"
    touch "$M/snapshot_done"
    [ -e "$M/snapshot_done" ]
    [ "$(od -An -tf4 -v -j 188 -N 24 "$F" | xargs)" = "20 21 22 23 24 25" ]

    # Read-only: reads go on after a touch...
    cp "$MS/goldenstick_test_linears_woq_predict_2stage_fp32.ckpt" "$D/ro.ckpt"
    mount_fg "$D/ro.ckpt" "$BATS_TEST_TMPDIR/ro" -o ro
    touch -d '2021-01-01 00:00:00' "$D/ro.ckpt"
    want=$($ORACLE parse "$D/ro.ckpt" | $PY -c \
        'import json,sys; print([t["sha256"] for t in json.load(sys.stdin) if t["tag"] == "linear2.bias"][0])')
    [ "$(sha "$BATS_TEST_TMPDIR/ro/linear2.bias/out")" = "$want" ]
    # ... but a write, even of the same bytes, is a write (linear1.bias is
    # not in the page cache yet: its read reaches the daemon).
    dd if="$D/ro.ckpt" of="$D/ro.ckpt" bs=4096 count=1 conv=notrunc status=none
    run cat "$BATS_TEST_TMPDIR/ro/linear1.bias/out"
    [ "$status" -ne 0 ]
    [[ $output == *"Input/output error"* ]]
}

@test "chmod is not a change: the save works, and reads of an encrypted model still work" {
    mount_fg "$F" "$M" -o rw,commit=manual
    cp "$NEW" "$M/linear1.bias/out"
    chmod 0600 "$F"
    chmod 0644 "$F"
    touch "$M/snapshot_done"
    [ -e "$M/snapshot_done" ]
    [ "$(od -An -tx1 -v -j 188 -N 24 "$F")" = "$(od -An -tx1 -v "$NEW")" ]
    run $ORACLE check "$M" "$F"
    [ "$status" -eq 0 ]

    # Encrypted, over several 1 MiB pages, with a one-page cache: the read
    # of a misses the cache and goes to the file after the chmod.
    ENVELOPE="$PY $REPO/tests/oracle/envelope_oracle.py"
    KEY=$BATS_TEST_TMPDIR/key
    (umask 077 && printf '0123456789ABCDEF' >"$KEY")
    KHEX=$(printf 0123456789ABCDEF | od -An -vtx1 | tr -d ' \n')
    P=$BATS_TEST_TMPDIR/big.ckpt E=$D/enc.ckpt
    PYTHONPATH=$REPO/tests/oracle $PY - "$P" <<'PY'
import sys
import numpy as np
import ckpt_oracle as co
with open(sys.argv[1], "wb") as f:
    for tag, n in (("a", 400000), ("b", 400000), ("c", 6)):
        content = np.arange(n, dtype="<f4").tobytes()
        f.write(co.encode_value(tag, "Float32", [n], content)[0])
        open(sys.argv[1] + "." + tag, "wb").write(content)
PY
    $ENVELOPE encrypt --mode AES-GCM --key-hex "$KHEX" "$P" "$E"
    chmod 0644 "$E"
    mount_fg "$E" "$BATS_TEST_TMPDIR/e" -o rw,commit=manual,key_file="$KEY",cache_size=1M
    chmod 0600 "$E"
    cmp "$P.a" "$BATS_TEST_TMPDIR/e/a/out"
    cmp "$P.b" "$BATS_TEST_TMPDIR/e/b/out"
    cp "$NEW" "$BATS_TEST_TMPDIR/e/c/out"
    touch "$BATS_TEST_TMPDIR/e/snapshot_done"
    $ENVELOPE decrypt --key-hex "$KHEX" "$E" "$BATS_TEST_TMPDIR/plain.ckpt"
    run $ORACLE check "$BATS_TEST_TMPDIR/e" "$BATS_TEST_TMPDIR/plain.ckpt"
    [ "$status" -eq 0 ]
    [ "$(stat -c %a "$E")" = 600 ]
}

@test "a read-only mount whose model is truncated: a read past the cut fails with EIO, not 0 bytes" {
    mount_fg "$OTHER" "$M" -o ro
    truncate -s 100000 "$OTHER"
    run cat "$M/fc1.bias/out"                   # at 202348, past the cut
    [ "$status" -ne 0 ]
    [[ $output == *"Input/output error"* ]]
    grep -q "$OTHER: truncated to 100000 bytes since it was mounted" "$BATS_TEST_TMPDIR/daemon.log"
    run cat "$M/fc1.weight/out"                 # runs across the cut
    [ "$status" -ne 0 ]
    [ "$(grep -c "truncated to" "$BATS_TEST_TMPDIR/daemon.log")" -eq 1 ]  # said once
}

@test "a read-only mount whose model is rewritten in place (same size): reads fail with EIO" {
    mount_fg "$OTHER" "$M" -o ro,nosplice
    printf '\x00\x00\x20\x41' | dd of="$OTHER" bs=1 seek=202348 conv=notrunc status=none
    run cat "$M/fc1.bias/out"
    [ "$status" -ne 0 ]
    [[ $output == *"Input/output error"* ]]
    grep -q "$OTHER: rewritten in place since it was mounted" "$BATS_TEST_TMPDIR/daemon.log"
}

@test "a lock path another user made a symlink is not followed: the writable mount is refused" {
    # A sticky world-writable directory (like /tmp) that nobody can reach.
    S=$(mktemp -d /tmp/ckptfs-one-writer.XXXXXX)
    chmod 1777 "$S"
    cp "$F" "$S/model.ckpt"
    echo "victim" >"$S/victim"
    setpriv --reuid=65534 --regid=65534 --clear-groups \
        ln -s "$S/victim" "$S/.model.ckpt.ckptfs-lock"
    second_rw "$S/model.ckpt"
    [ "$status" -ne 0 ]
    [[ $output == *"$S/model.ckpt: cannot create the lock file $S/.model.ckpt.ckptfs-lock"*"mount it -o ro"* ]]
    [ "$(cat "$S/victim")" = victim ]
    mount_fg "$S/model.ckpt" "$M" -o ro
    [ -f "$M/linear1.bias/out" ]
}

# refused_fast CMD...: CMD fails, and not by timing out (the hang guard:
# an open that waits on a FIFO fails the test instead of hanging it).
refused_fast() {
    run timeout 20 "$@"
    echo "$output"
    [ "$status" -ne 0 ]
    [ "$status" -ne 124 ]
}

@test "a FIFO another user planted as the lock file: the writable mount and ckptfs-convert are refused in one line naming it" {
    S=$(mktemp -d /tmp/ckptfs-one-writer.XXXXXX)
    chmod 1777 "$S"
    cp "$F" "$S/model.ckpt"
    chmod 0644 "$S/model.ckpt"
    setpriv --reuid=65533 --regid=65533 --clear-groups \
        mkfifo -m 0644 "$S/.model.ckpt.ckptfs-lock" "$S/.out.safetensors.ckptfs-lock"
    mkdir -m 0777 "$S/mnt"
    echo "0 $S/mnt" >>"$BATS_TEST_TMPDIR/mounts"
    local nobody=(setpriv --reuid=65534 --regid=65534 --clear-groups)
    local want="$S/model.ckpt: the lock file $S/.model.ckpt.ckptfs-lock is a FIFO, not a regular file"
    # root opens it for writing (a FIFO's O_RDWR open does not wait) ...
    refused_fast "$CKPTFS" -o rw "$S/model.ckpt" "$S/mnt"
    [[ $output == "ckptfs: $want"* ]]
    [ "${#lines[@]}" -eq 1 ]
    # ... another user may not, and falls back to reading it: that open
    # used to wait for a writer for ever
    refused_fast "${nobody[@]}" "$CKPTFS" -o rw "$S/model.ckpt" "$S/mnt"
    [[ $output == "ckptfs: $want"* ]]
    # (--no-index: the cache in the environment is root's, and its warning
    # is not what this test is about)
    refused_fast "${nobody[@]}" "$BUILD/ckptfs-convert" -q --no-index "$S/model.ckpt" \
        "$S/out.safetensors"
    [[ $output == *"$S/out.safetensors: the lock file $S/.out.safetensors.ckptfs-lock is a FIFO, not a regular file"* ]]
    [ "${#lines[@]}" -eq 1 ]
    [ ! -e "$S/out.safetensors" ]
    [ -p "$S/.model.ckpt.ckptfs-lock" ]
    ! mountpoint -q "$S/mnt" || false
}

@test "writable by default, in a directory that cannot hold the lock (read-only filesystem): mounted read-only" {
    S=$(mktemp -d /tmp/ckptfs-one-writer.XXXXXX)
    mkdir "$S/src" "$S/ro"
    cp "$F" "$S/src/model.ckpt"          # 0644: writable by its owner
    mount --bind "$S/src" "$S/ro"
    RO=$S/ro                             # teardown unmounts it
    mount -o remount,bind,ro "$S/ro"
    mount_fg "$S/ro/model.ckpt" "$M"
    grep -q " $M fuse.ckptfs ro," /proc/mounts
    grep -q "$S/ro/model.ckpt: its directory is not writable (Read-only file system), so a save could not replace it: mounted read-only" \
        "$BATS_TEST_TMPDIR/daemon.log"
    [ "$(od -An -tx1 -v "$M/linear1.bias/out")" = "$(od -An -tx1 -v -j 188 -N 24 "$F")" ]
    # Asked for explicitly, writable is refused with the reason.
    second_rw "$S/ro/model.ckpt"
    [ "$status" -ne 0 ]
    [[ $output == *"cannot create the lock file $S/ro/.model.ckpt.ckptfs-lock"*"Read-only file system"* ]]
    ! mountpoint -q "$BATS_TEST_TMPDIR/second" || false
}

@test "a writable mount right after an unmount waits for the old daemon's last save" {
    mount_fg "$F" "$M" -o rw,commit=manual
    cp "$NEW" "$M/linear1.bias/out"
    # The unmount returns before the daemon has saved: the new mount must
    # wait for that save (its lock), not be refused, and then read it.
    fusermount3 -u "$M"
    mount_fg "$F" "$BATS_TEST_TMPDIR/m2" -o rw,commit=manual
    cmp "$NEW" "$BATS_TEST_TMPDIR/m2/linear1.bias/out"
    [ "$(od -An -tx1 -v -j 188 -N 24 "$F")" = "$(od -An -tx1 -v "$NEW")" ]
}
