#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# Who may see what: the tree has the model file's owner and modes, which the
# kernel enforces (default_permissions) for other users too (allow_other);
# chmod and chown on the tree are refused; key files must be the mounting
# user's own, and CKPTFS_KEY_HEX leaves the daemon's environment.  And the
# reasons behind refusals: -o log=PATH and user.ckptfs.last_error.

load helpers

ENVELOPE="$PY $REPO/tests/oracle/envelope_oracle.py"
# nobody CMD...: CMD as another user without root's groups, in the mount
# (paths relative to it: the test's own directories are private).
nobody() {
    (cd "$M" && setpriv --reuid=65534 --regid=65534 --clear-groups "$@")
}
ISO='[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z'

setup() {
    M=$BATS_TEST_TMPDIR/m
    F=$BATS_TEST_TMPDIR/model.ckpt
    cp "$MS/goldenstick_test_linears_woq_predict_2stage_fp32.ckpt" "$F"
    KEY=$BATS_TEST_TMPDIR/key
    (umask 077 && printf '0123456789ABCDEF' >"$KEY")
    KHEX=$(printf 0123456789ABCDEF | od -An -vtx1 | tr -d ' \n')
}

# encrypted OUT: the test model encrypted (AES-GCM) by the oracle with KEY.
encrypted() {
    $ENVELOPE encrypt --mode AES-GCM --key-hex "$KHEX" "$F" "$1"
}

# daemonized MODEL [options...]: a mount without -f, torn down by teardown.
daemonized() {
    local model=$1
    shift
    mkdir -p "$M"
    echo "0 $M" >>"$BATS_TEST_TMPDIR/mounts"
    $CKPTFS "$@" "$model" "$M"
}

@test "allow_other: another user gets EACCES on out and meta of a 0600 model" {
    chmod 600 "$F"
    mount_fg "$F" "$M" -o allow_other
    grep -q " $M fuse.ckptfs .*default_permissions" /proc/mounts
    cat "$M/linear1.bias/out" >/dev/null   # its owner reads
    run nobody cat "linear1.bias/out"
    [ "$status" -ne 0 ]
    [[ $output == *"Permission denied"* ]]
    run nobody cat "linear1.bias/meta"
    [ "$status" -ne 0 ]
    [[ $output == *"Permission denied"* ]]
    run nobody ls .
    [[ $output == *"Permission denied"* ]]
}

@test "allow_other: another user reads a 0644 model but not a 0600 copy; writes neither" {
    chmod 644 "$F"
    cp -p "$F" "$BATS_TEST_TMPDIR/private.ckpt"
    chmod 600 "$BATS_TEST_TMPDIR/private.ckpt"
    mount_fg "$BATS_TEST_TMPDIR/private.ckpt" "$BATS_TEST_TMPDIR/private" -o allow_other
    mount_fg "$F" "$M" -o allow_other,commit=manual
    run nobody cat ../private/linear1.bias/out
    [[ $output == *"Permission denied"* ]]
    run nobody cat linear1.bias/out
    [ "$status" -eq 0 ]
    nobody cat linear1.bias/out | cmp - "$M/linear1.bias/out"
    nobody cat linear1.bias/meta | cmp - "$M/linear1.bias/meta"
    run nobody sh -c "printf x >linear1.bias/out"
    [[ $output == *"Permission denied"* ]]
    run nobody mkdir new
    [[ $output == *"Permission denied"* ]]
}

@test "allow_other: a 0600 encrypted model mounted with its key shows nobody the plaintext" {
    E=$BATS_TEST_TMPDIR/enc.ckpt
    encrypted "$E"
    chmod 600 "$E"
    mount_fg "$E" "$M" -o allow_other,key_file="$KEY"
    $ORACLE check "$M" "$F"   # its owner reads the plaintext
    run nobody cat linear1.weight/out
    [ "$status" -ne 0 ]
    [[ $output == *"Permission denied"* ]]
}

@test "the tree has the model file's owner and modes (x on directories where r is)" {
    chmod 640 "$F"
    chown 1234:5678 "$F"
    mount_fg "$F" "$M" -o rw,commit=manual
    [ "$(stat -c '%u:%g %a' "$M")" = "1234:5678 750" ]
    [ "$(stat -c '%u:%g %a' "$M/linear1.bias")" = "1234:5678 750" ]
    for f in meta out; do
        [ "$(stat -c '%u:%g %a' "$M/linear1.bias/$f")" = "1234:5678 640" ]
    done
    [ "$(stat -c '%u:%g %a' "$M/snapshot_done")" = "1234:5678 640" ]
    # a read-only mount drops the w bits
    mount_fg "$F" "$BATS_TEST_TMPDIR/ro" -o ro
    [ "$(stat -c '%a' "$BATS_TEST_TMPDIR/ro")" = 550 ]
    [ "$(stat -c '%a' "$BATS_TEST_TMPDIR/ro/linear1.bias/out")" = 440 ]
    # a file made in the tree gets the same
    echo note >"$M/notes.txt"
    [ "$(stat -c '%u:%g %a' "$M/notes.txt")" = "1234:5678 640" ]
}

@test "chmod of read bits and chown on the tree are refused with EPERM; setting what is there, or other write bits, succeeds" {
    chmod 644 "$F"
    mount_fg "$F" "$M" -o commit=manual
    before=$(sha "$F")
    run chmod 600 "$M/linear1.bias/out"
    [ "$status" -ne 0 ]
    [[ $output == *"Operation not permitted"* ]]
    run chmod 700 "$M/linear1.bias"
    [[ $output == *"Operation not permitted"* ]]
    run chown 65534 "$M/linear1.bias/meta"
    [[ $output == *"Operation not permitted"* ]]
    run chgrp 65534 "$M"
    [[ $output == *"Operation not permitted"* ]]
    [ "$(stat -c '%u:%g %a' "$M/linear1.bias/out")" = "0:0 644" ]
    [ "$(stat -c '%a' "$M/linear1.bias")" = 755 ]
    grep -q "linear1.bias/out: chmod 0600: the tree has the read bits of the model file (0644 here)" \
        "$BATS_TEST_TMPDIR/daemon.log"
    # no change: accepted; times, truncate and touch still work
    chmod 644 "$M/linear1.bias/out"
    # write and execute bits are the mount's: taken, and nothing changes
    chmod 444 "$M/linear1.bias/out"
    chmod 555 "$M/linear1.bias"
    [ "$(stat -c '%a' "$M/linear1.bias/out")" = 644 ]
    [ "$(stat -c '%a' "$M/linear1.bias")" = 755 ]
    chown 0:0 "$M/linear1.bias/out"
    touch -d @0 "$M/linear1.bias/out"
    truncate -s 0 "$M/linear1.bias/out"
    truncate -s 24 "$M/linear1.bias/out"
    printf '\x00\x00\x80\x3f' | dd of="$M/linear1.bias/out" conv=notrunc status=none
    touch "$M/snapshot_done"
    [ "$(stat -c '%a' "$F")" = 644 ]
    [ "$(sha "$F")" != "$before" ]
}

# key_refused KEY_FILE: mounting an encrypted model with it fails, nothing
# mounted; $output holds the reason.
key_refused() {
    E=$BATS_TEST_TMPDIR/enc.ckpt
    encrypted "$E"
    mkdir -p "$M"
    echo "0 $M" >>"$BATS_TEST_TMPDIR/mounts"
    run $CKPTFS -o ro,key_file="$1" "$E" "$M"
    [ "$status" -ne 0 ]
    ! mountpoint -q "$M" || false
}

@test "a key file that is a symlink is refused" {
    ln -s "$KEY" "$BATS_TEST_TMPDIR/keylink"
    key_refused "$BATS_TEST_TMPDIR/keylink"
    [[ $output == *"keylink: key file is a symbolic link"* ]]
}

@test "a key file owned by another user is refused" {
    chown 65534 "$KEY"
    key_refused "$KEY"
    [[ $output == *"key file is owned by uid 65534, not by the user mounting (uid 0)"* ]]
}

@test "CKPTFS_KEY_HEX is gone from the daemon's environment (/proc/PID/environ)" {
    E=$BATS_TEST_TMPDIR/enc.ckpt
    encrypted "$E"
    CKPTFS_KEY_HEX=$KHEX daemonized "$E" -o ro
    pid=$(getfattr --only-values -n user.ckptfs.pid "$M")
    [ -r "/proc/$pid/environ" ]
    grep -qa PATH= "/proc/$pid/environ"       # the environment is still there...
    ! grep -qa CKPTFS_KEY_HEX "/proc/$pid/environ" || false  # ...but not the key
    ! grep -qai "$KHEX" "/proc/$pid/environ" || false
    $ORACLE check "$M" "$F"   # the key was used
}

@test "daemonized: -o log=PATH and user.ckptfs.last_error get the reason of an EBUSY rm -r and of an invalid meta" {
    O=$BATS_TEST_TMPDIR/tiny_conv2d.onnx
    LOG=$BATS_TEST_TMPDIR/ckptfs.log
    cp "$ONNX_FIX/tiny_conv2d.onnx" "$O"
    chmod 644 "$O"
    daemonized "$O" -o commit=manual,log="$LOG"
    run rm -r "$M/2"
    [[ $output == *"Device or resource busy"* ]]
    grep -Eq "^$ISO ckptfs\[[0-9]+\]: $M/2: .*tensor '2' is an input of node '#0 \(Conv\)'" "$LOG"
    [[ $(getfattr --only-values -n user.ckptfs.last_error "$M") =~ ^$ISO\ $M/2:\ .*"tensor '2' is an input of node" ]]
    printf 'data_type: kNope\n' >"$BATS_TEST_TMPDIR/bad"
    run cp "$BATS_TEST_TMPDIR/bad" "$M/1/meta"
    [[ $output == *"Invalid argument"* ]]
    grep -Eq "^$ISO ckptfs\[[0-9]+\]: $M/1/meta: .*unknown or unsupported data_type" "$LOG"
    [[ $(getfattr --only-values -n user.ckptfs.last_error "$M") =~ ^$ISO\ $M/1/meta:\ .*"unknown or unsupported data_type" ]]
    # a failed save, then a successful one, which clears last_error
    cp "$M/1/out" "$BATS_TEST_TMPDIR/one"
    truncate -s 3 "$M/1/out"
    run touch "$M/snapshot_done"
    [ "$status" -ne 0 ]
    grep -Eq "^$ISO ckptfs\[[0-9]+\]: $M/snapshot_done: .*out is 3 bytes" "$LOG"
    [[ $(getfattr --only-values -n user.ckptfs.last_error "$M") == *"$M/snapshot_done: "*"out is 3 bytes"* ]]
    cat "$BATS_TEST_TMPDIR/one" >"$M/1/out"
    touch "$M/snapshot_done"
    run getfattr --only-values -n user.ckptfs.last_error "$M"
    [ "$status" -ne 0 ]
    [ "$(stat -c '%a' "$LOG")" = 600 ]
}

@test "-o log=PATH is never opened through a symlink" {
    ln -s "$BATS_TEST_TMPDIR/elsewhere" "$BATS_TEST_TMPDIR/log"
    mkdir "$M"
    echo "0 $M" >>"$BATS_TEST_TMPDIR/mounts"
    run $CKPTFS -o ro,log="$BATS_TEST_TMPDIR/log" "$F" "$M"
    [ "$status" -ne 0 ]
    [[ $output == *"log="*"Too many levels of symbolic links"* ]]
    [ ! -e "$BATS_TEST_TMPDIR/elsewhere" ]
}

@test "-o log=PATH that is a FIFO is refused, not waited on" {
    mkfifo "$BATS_TEST_TMPDIR/log"
    mkdir "$M"
    echo "0 $M" >>"$BATS_TEST_TMPDIR/mounts"
    run timeout 20 $CKPTFS -o ro,log="$BATS_TEST_TMPDIR/log" "$F" "$M"
    [ "$status" -ne 0 ] && [ "$status" -ne 124 ] || false
    [ "$output" = "ckptfs: -o log=$BATS_TEST_TMPDIR/log: is a FIFO, not a regular file" ]
}
