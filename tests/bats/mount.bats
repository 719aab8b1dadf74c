#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# The command line and the life of a mount.

load helpers

@test "--help and --version" {
    run "$CKPTFS" --help
    [ "$status" -eq 0 ]
    [[ $output == *"usage: ckptfs [-f] [-d] [-o OPTIONS] MODEL MOUNTPOINT"* ]]
    [[ $output == *"-o nocrc"* ]]
    run "$CKPTFS" --version
    [ "$status" -eq 0 ]
    [[ ${lines[0]} == "ckptfs "[0-9]* ]]
    [[ $output == *"FUSE library version 3."* ]]
}

@test "missing arguments are usage errors" {
    run "$CKPTFS"
    [ "$status" -eq 2 ]
    [[ $output == *"missing MODEL"* ]]
    run "$CKPTFS" "$MS/goldenstick_test_sq_predict_simplenet_2stage_fp.ckpt"
    [ "$status" -eq 2 ]
    [[ $output == *"missing MOUNTPOINT"* ]]
    # an option nobody knows, one argument too many: usage errors too
    mkdir "$BATS_TEST_TMPDIR/m"
    run "$CKPTFS" --no-such-option "$MS/goldenstick_test_sq_predict_simplenet_2stage_fp.ckpt" \
        "$BATS_TEST_TMPDIR/m"
    [ "$status" -eq 2 ]
    [[ $output == *"unknown option"*"--no-such-option"* ]]
    run "$CKPTFS" "$MS/goldenstick_test_sq_predict_simplenet_2stage_fp.ckpt" \
        "$BATS_TEST_TMPDIR/m" "$BATS_TEST_TMPDIR/m"
    [ "$status" -eq 2 ]
    [[ $output == *"usage: ckptfs "* ]]
    ! mountpoint -q "$BATS_TEST_TMPDIR/m" || false
}

@test "without -f the command returns with the tree already usable, and the daemon exits at unmount" {
    f=$MS/goldenstick_test_sq_predict_simplenet_2stage_fp.ckpt
    mkdir "$BATS_TEST_TMPDIR/m"
    "$CKPTFS" "$f" "$BATS_TEST_TMPDIR/m"
    echo "0 $BATS_TEST_TMPDIR/m" >>"$BATS_TEST_TMPDIR/mounts" # teardown unmounts on failure
    [ "$(ls "$BATS_TEST_TMPDIR/m" | wc -l)" -eq 3 ]
    run $ORACLE check "$BATS_TEST_TMPDIR/m" "$f"
    [ "$status" -eq 0 ]
    grep -q " $BATS_TEST_TMPDIR/m fuse.ckptfs ro," /proc/mounts
    grep "$BATS_TEST_TMPDIR/m" /proc/mounts | grep -q "^$f "
    fusermount3 -u "$BATS_TEST_TMPDIR/m"
    ! mountpoint -q "$BATS_TEST_TMPDIR/m" || false
}

@test "a missing mount point: libfuse's one-line reason and a short usage line" {
    run "$CKPTFS" "$MS/goldenstick_test_sq_predict_simplenet_2stage_fp.ckpt" "$BATS_TEST_TMPDIR/none"
    [ "$status" -ne 0 ]
    [[ ${lines[0]} == *"bad mount point"*"No such file or directory"* ]]
    [ "${#lines[@]}" -eq 2 ]
}

@test "-o ro is accepted; unknown -o options go to libfuse, which refuses them" {
    f=$MS/goldenstick_test_sq_predict_simplenet_2stage_fp.ckpt
    mount_fg "$f" "$BATS_TEST_TMPDIR/m" -o ro
    [ -f "$BATS_TEST_TMPDIR/m/linear.bias/out" ]
    mkdir "$BATS_TEST_TMPDIR/m2"
    run "$CKPTFS" -o no_such_option "$f" "$BATS_TEST_TMPDIR/m2"
    [ "$status" -eq 2 ]
    [[ $output == *"no_such_option"* ]]
    ! mountpoint -q "$BATS_TEST_TMPDIR/m2" || false
}

@test "read-only unless the model's owner may write it (MindSpore saves 0400); -o rw and -o ro override" {
    $ORACLE gen "$BATS_TEST_TMPDIR/a.ckpt" --case sliced
    chmod 0400 "$BATS_TEST_TMPDIR/a.ckpt"
    mount_fg "$BATS_TEST_TMPDIR/a.ckpt" "$BATS_TEST_TMPDIR/m1"
    grep -q " $BATS_TEST_TMPDIR/m1 fuse.ckptfs ro," /proc/mounts
    mount_fg "$BATS_TEST_TMPDIR/a.ckpt" "$BATS_TEST_TMPDIR/m2" -o rw
    grep -q " $BATS_TEST_TMPDIR/m2 fuse.ckptfs rw," /proc/mounts
    # One writable mount at a time: end this one (and wait for its daemon).
    pid=$(tail -1 "$BATS_TEST_TMPDIR/mounts" | cut -d' ' -f1)
    umount_wait "$BATS_TEST_TMPDIR/m2" "$pid"
    sed -i '$d' "$BATS_TEST_TMPDIR/mounts"
    chmod 0600 "$BATS_TEST_TMPDIR/a.ckpt"
    mount_fg "$BATS_TEST_TMPDIR/a.ckpt" "$BATS_TEST_TMPDIR/m3"
    grep -q " $BATS_TEST_TMPDIR/m3 fuse.ckptfs rw," /proc/mounts
    mount_fg "$BATS_TEST_TMPDIR/a.ckpt" "$BATS_TEST_TMPDIR/m4" -o ro
    grep -q " $BATS_TEST_TMPDIR/m4 fuse.ckptfs ro," /proc/mounts
}

@test "a writable mount removes the temporary files of an interrupted save, and only those" {
    $ORACLE gen "$BATS_TEST_TMPDIR/a.ckpt" --case sliced
    touch "$BATS_TEST_TMPDIR/.a.ckpt.ckptfs-Ab12Cd" "$BATS_TEST_TMPDIR/.a.ckpt.ckptfs-keep-me" \
          "$BATS_TEST_TMPDIR/.b.ckpt.ckptfs-Ab12Cd"
    mount_fg "$BATS_TEST_TMPDIR/a.ckpt" "$BATS_TEST_TMPDIR/m"
    [ ! -e "$BATS_TEST_TMPDIR/.a.ckpt.ckptfs-Ab12Cd" ]
    [ -e "$BATS_TEST_TMPDIR/.a.ckpt.ckptfs-keep-me" ]
    [ -e "$BATS_TEST_TMPDIR/.b.ckpt.ckptfs-Ab12Cd" ]
}

@test "-o nosplice serves the same bytes" {
    $ORACLE gen "$BATS_TEST_TMPDIR/s.ckpt" --case sliced
    mount_fg "$BATS_TEST_TMPDIR/s.ckpt" "$BATS_TEST_TMPDIR/m" -o nosplice
    run $ORACLE check "$BATS_TEST_TMPDIR/m" "$BATS_TEST_TMPDIR/s.ckpt"
    [ "$status" -eq 0 ]
}

@test "mounting a 4 GiB checkpoint reads only record headers, not tensor bytes" {
    $ORACLE bigfile "$BATS_TEST_TMPDIR/big.ckpt" --size-gib 4.1
    # LeakSanitizer cannot run under ptrace (make asan): no leak check here.
    CKPTFS="env ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0 strace -y -o $BATS_TEST_TMPDIR/trace -e trace=pread64 $CKPTFS" \
        mount_fg "$BATS_TEST_TMPDIR/big.ckpt" "$BATS_TEST_TMPDIR/m"
    ls -R "$BATS_TEST_TMPDIR/m" >/dev/null
    umount_wait "$BATS_TEST_TMPDIR/m" "$(tail -1 "$BATS_TEST_TMPDIR/mounts" | cut -d' ' -f1)"
    # bytes returned by every pread64 of the model file during the mount
    total=$(grep -F 'big.ckpt>' "$BATS_TEST_TMPDIR/trace" | sed -E 's/.*= ([0-9]+)$/\1/' |
        awk '{s += $1} END {print s + 0}')
    echo "read $total bytes of $(stat -c %s "$BATS_TEST_TMPDIR/big.ckpt")"
    [ "$total" -gt 0 ]
    [ "$total" -lt 65536 ]
}

@test "SIGTERM to the daemon unmounts cleanly" {
    f=$MS/goldenstick_test_sq_predict_simplenet_2stage_fp.ckpt
    mount_fg "$f" "$BATS_TEST_TMPDIR/m"
    pid=$(tail -1 "$BATS_TEST_TMPDIR/mounts" | cut -d' ' -f1)
    kill -TERM "$pid"
    wait "$pid"
    ! mountpoint -q "$BATS_TEST_TMPDIR/m" || false
    : >"$BATS_TEST_TMPDIR/mounts"
}
