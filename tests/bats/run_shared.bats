#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# A run directory on storage other machines write (issue 28): inotify sees
# only this kernel's writes, so on shared storage (NFS, SMB, Lustre, any
# FUSE filesystem...) the run is listed again every -o poll seconds and
# every new file is judged by its settle time alone.  "Another machine" is
# played here by writes made to the directory behind a bindfs mount (a
# FUSE filesystem, as s3fs and sshfs are): the mount's kernel gets no
# event for them.  Expected trees come from the files (ckpt_oracle), never
# from the mount.

load helpers

RUN=$FIXTURES/mindspore_run_dir/qishna_lenet_modelcheckpoint
ITER="$PY $REPO/tests/oracle/iteration_oracle.py"

setup() {
    T=$BATS_TEST_TMPDIR
    M=$T/m
    S=$T/storage  # what the other machine writes
    D=$T/shared   # the same directory, through FUSE: what ckptfs is given
}

teardown() {
    ckptfs_teardown
    local rc=$?
    if [ -s "$T/bindfs.pid" ]; then
        fusermount3 -u "$D" 2>/dev/null || fusermount3 -uz "$D" 2>/dev/null || true
        wait "$(cat "$T/bindfs.pid")" 2>/dev/null || true
    fi
    return $rc
}

# shared_start: $S seen through bindfs at $D (in the foreground, so that its
# pid is ours to stop)
shared_start() {
    mkdir -p "$S" "$D"
    bindfs -f "$S" "$D" 2>>"$T/bindfs.log" &
    echo $! >"$T/bindfs.pid"
    local _
    for _ in $(seq 1 400); do
        mountpoint -q "$D" && return 0
        sleep 0.05
    done
    cat "$T/bindfs.log" >&2
    return 1
}

fixture() { echo "$RUN/checkpoint_lenet-$1_1875.ckpt"; }

# elsewhere SRC NAME [MODE]: SRC's bytes written as $S/NAME by "another
# machine", its mode then MODE (default 0400, as MindSpore leaves them)
elsewhere() {
    cp "$1" "$S/$2"
    chmod "${3:-0400}" "$S/$2"
}

# sentinel NAME: a complete checkpoint, written long ago, arrives from
# elsewhere; once it is listed, a listing has seen everything written before
sentinel() {
    elsewhere "$(fixture 3)" "$1.ckpt"
    touch -d '-1 hour' "$S/$1.ckpt"
    until_listed "$1"
}

watch_of() { getfattr --only-values -n user.ckptfs.watch "$M"; }

@test "a run on a FUSE filesystem is polled, and says so on its root (user.ckptfs.watch); -o watch=inotify and -o watch=poll force either way; on a local disk, inotify alone" {
    shared_start
    mount_fg "$D" "$M" -o poll=3
    [[ $(watch_of) == "poll every 3 s and inotify (fuse)" ]] ||
        [[ $(watch_of) == "poll every 3 s and inotify (fuse."* ]]
    unmount "$M"
    mount_fg "$D" "$M" -o watch=inotify
    [[ $(watch_of) == "inotify (fuse"* ]]
    unmount "$M"
    mkdir "$T/local"
    mount_fg "$T/local" "$M"
    [[ $(watch_of) != *poll* ]]
    [[ $(watch_of) == "inotify ("* ]]
    unmount "$M"
    mount_fg "$T/local" "$M" -o watch=poll,poll=0.5
    [[ $(watch_of) == "poll every 0.5 s and inotify ("* ]]
}

@test "a checkpoint another machine writes appears (no event here: the next listing finds it), reads as its file; one it deletes leaves" {
    shared_start
    elsewhere "$(fixture 1)" lenet-1_1875.ckpt
    touch -d '-1 hour' "$S/lenet-1_1875.ckpt"
    mount_fg "$D" "$M" -o poll=0.2,settle=1
    listed lenet-1_1875
    elsewhere "$(fixture 2)" lenet-2_1875.ckpt
    until_listed lenet-2_1875
    $ORACLE check "$M/lenet-2_1875" "$(fixture 2)"
    [ "$(readlink "$M/latest")" = lenet-2_1875 ]
    rm "$S/lenet-1_1875.ckpt"
    until_gone lenet-1_1875
    $ORACLE check "$M/lenet-2_1875" "$(fixture 2)"
}

@test "a file another machine is still writing is not listed, read-only or not: a new file counts once unchanged for settle seconds; complete, it is listed and reads whole" {
    shared_start
    mount_fg "$D" "$M" -o poll=0.2,settle=3600
    # half a checkpoint, already read-only (cp -p of a 0400 file creates it
    # so, then writes it), and another still writable
    head -c 100000 "$(fixture 1)" >"$S/half-1_1.ckpt"
    chmod 0400 "$S/half-1_1.ckpt"
    head -c 100000 "$(fixture 2)" >"$S/open-1_2.ckpt"
    sentinel done-1_3
    ! listed half-1_1 || false
    ! listed open-1_2 || false
    [ "$(readlink "$M/latest")" = done-1_3 ]
    # finished: its last write long ago, as a settled file is
    chmod 0600 "$S/half-1_1.ckpt"
    cp "$(fixture 1)" "$S/half-1_1.ckpt"
    touch -d '-1 hour' "$S/half-1_1.ckpt"
    until_listed half-1_1
    $ORACLE check "$M/half-1_1" "$(fixture 1)"
    ! listed open-1_2 || false
}

@test "an iteration directory another machine commits is listed once latest_checkpointed_iteration.txt names it, whatever settle says; not before" {
    shared_start
    $ITER gen "$T/it" --case tp2 --seed 1
    $ITER file-tree "$T/it/full.safetensors" "$T/it/full"
    mount_fg "$D" "$M" -o poll=0.2,settle=3600
    cp -r "$T/it/iteration_00000010" "$S/"
    sentinel before-1_1
    ! listed iteration_00000010 || false
    printf 10 >"$S/latest_checkpointed_iteration.txt"
    until_listed iteration_00000010
    diff -r "$T/it/full" "$M/iteration_00000010"
}

@test "the writer lock on shared storage: a lock file another host left refuses a writable mount with one line naming the host, pid, mount point and file; removed, the mount is writable and its lock names this host; on a local disk such a file, unlocked, is taken over" {
    shared_start
    cp "$(fixture 1)" "$S/model.ckpt"
    printf '4242 /mnt/elsewhere\nhost node-17\n' >"$S/.model.ckpt.ckptfs-lock"
    mkdir "$M"
    run $CKPTFS -f -o rw "$D/model.ckpt" "$M"
    echo "$output"
    [ "$status" -ne 0 ]
    [ "$(echo "$output" | wc -l)" -eq 1 ]
    [[ $output == *"$D/model.ckpt: mounted writable on host node-17 by pid 4242 at /mnt/elsewhere, as $D/.model.ckpt.ckptfs-lock says; locks on fuse"*"remove $D/.model.ckpt.ckptfs-lock if it is gone"* ]]
    ! mountpoint -q "$M" || false
    # the model and the other host's lock as they were
    cmp "$(fixture 1)" "$S/model.ckpt"
    [ "$(cat "$S/.model.ckpt.ckptfs-lock")" = "$(printf '4242 /mnt/elsewhere\nhost node-17')" ]
    rm "$D/.model.ckpt.ckptfs-lock" # by a person here, through the storage's mount
    mount_fg "$D/model.ckpt" "$M" -o rw,commit=manual
    [ "$(sed -n 2p "$S/.model.ckpt.ckptfs-lock")" = "host $(hostname)" ]
    unmount "$M"
    # local storage: flock is the whole truth, the file left unlocked is stale
    mkdir "$T/local"
    cp "$(fixture 1)" "$T/local/model.ckpt"
    printf '4242 /mnt/elsewhere\nhost node-17\n' >"$T/local/.model.ckpt.ckptfs-lock"
    mount_fg "$T/local/model.ckpt" "$M" -o rw,commit=manual
    [ "$(sed -n 2p "$T/local/.model.ckpt.ckptfs-lock")" = "host $(hostname)" ]
}
