#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# A run directory mounted writable (`ckptfs -o rw RUN_DIR M`, issue 14).
# Each test's name starts with the behaviour it checks:
#   1. each checkpoint's directory is edited and saved as a single-model
#      writable mount is (dd, meta, mkdir/rmdir/rename, touch snapshot_done,
#      fsync, the automatic save, commit=manual); the root stays read-only;
#   2. a save replaces the file atomically (name, mode, owner kept) and keeps
#      the checkpoint's listing, directory inode and a shell's cwd; a saved
#      0644 file is listed at once;
#   3. one writer per model, both ways (the run's lock refuses a single-model
#      rw mount; another's lock makes that checkpoint read-only, said once);
#   4. -o index_cache never closes a checkpoint with edits, a save running or
#      a file open for writing; clean ones close and drop their lock;
#   5. unmount and ckptfs-umount save everything; a failed save is a non-zero
#      exit (or a refused ckptfs-umount) with the reason;
#   6. a file deleted or replaced under unsaved edits is never overwritten:
#      the edits stay readable, the save is refused;
#   7. kill -9 during a save leaves the old or the new file;
#   8. what cannot be saved (iteration directories, legacy encryption) is
#      read-only beside writable checkpoints;
#   9. encrypted and zstd checkpoints are saved in their own envelope.
# The last test is a seeded model-based random test.  Every expected byte
# comes from the files and the independent oracles (ckpt_oracle
# parse/check/fake-tree, run_rw_model.py over ckpt_oracle, envelope_oracle,
# zstd -d), never from the mount.

load helpers

RUN=$FIXTURES/mindspore_run_dir/qishna_lenet_modelcheckpoint
LINEARS=$MS/goldenstick_test_linears_woq_predict_2stage_fp32.ckpt
LENET=$MS/mindarmour_checkpoint_lenet-10_1875.ckpt
RWM="$PY $REPO/tests/oracle/run_rw_model.py"
ENVELOPE="$PY $REPO/tests/oracle/envelope_oracle.py"
ITER="$PY $REPO/tests/oracle/iteration_oracle.py"
UMOUNT=$REPO/mount-helpers/ckptfs-umount
KHEX=30313233343536373839414243444546 # the bytes of 0123456789ABCDEF
# the fixture run's checkpoints, as the mount names them
N1=checkpoint_lenet-1_1875
N2=checkpoint_lenet-2_1875
N3=checkpoint_lenet-3_1875

setup() {
    T=$BATS_TEST_TMPDIR
    M=$T/m      # the run's mount
    D=$T/run    # the run directory
    O=$T/orig   # pristine copies of what D held
    KEY=$T/key
    (umask 077 && printf '0123456789ABCDEF' >"$KEY")
}

teardown() {
    # descriptors a failed test left open would keep its mount busy
    exec 5>&- 6>&- || true
    ckptfs_teardown
}

# fixture_run: the fixture ModelCheckpoint run in $D (checkpoints 0400 as
# MindSpore leaves them, its graph.meta beside them), pristine copies in $O.
fixture_run() {
    mkdir -p "$D" "$O"
    cp "$RUN"/*.ckpt "$RUN"/*.meta "$D/"
    cp "$RUN"/*.ckpt "$O/"
    chmod 0400 "$D"/*.ckpt
    chmod 0644 "$D"/*.meta
}

# put SRC NAME [MODE]: SRC as $D/NAME (mode 0400 unless given), and a pristine
# copy as $O/NAME.
put() {
    mkdir -p "$D" "$O"
    cp "$1" "$O/$2"
    cp "$1" "$D/$2"
    chmod "${3:-0400}" "$D/$2"
}

# poke FILE OFFSET HEX: the bytes HEX written at OFFSET of FILE, in place (dd).
poke() {
    printf "$(sed 's/../\\x&/g' <<<"$3")" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}

# edited ORIG NEW [TAG OFFSET HEX]...: the oracle's parse of NEW is ORIG's
# with exactly those bytes replaced.
edited() { $RWM edited "$@"; }

lock_of() { echo "$D/.$1.ckptfs-lock"; }
# holder_text PID MNT: what a lock file holds (writer_lock.h)
holder_text() { printf '%s %s\nhost %s' "$1" "$2" "$(hostname)"; }
locks() { ls -A "$D" | grep '\.ckptfs-lock$' || true; }
root_names() { ls -A "$M" | LC_ALL=C sort; }

# refused_ro CMD...: CMD fails with EROFS or EACCES (a checkpoint shown
# read-only: either its mode bits or the filesystem refuse).
refused_ro() {
    run "$@"
    echo "$*: status $status: $output"
    [ "$status" -ne 0 ]
    [[ $output == *"Read-only file system"* || $output == *"Permission denied"* ]]
}

# erofs CMD...: CMD fails with EROFS.
erofs() {
    run "$@"
    echo "$*: status $status: $output"
    [ "$status" -ne 0 ]
    [[ $output == *"Read-only file system"* ]]
}

# second_rw FILE: a single-model writable mount of FILE beside the run's
# (daemonized, so one that wrongly succeeds returns and teardown unmounts
# it; fd 3 closed so that it cannot hang bats).
second_rw() {
    mkdir -p "$T/second"
    echo "0 $T/second" >>"$T/mounts"
    run "$CKPTFS" -o rw "$1" "$T/second" 3>&-
    echo "$output"
}

# sums DIR: the sha256 of every file under DIR, and its mode (what must not change)
sums() {
    (cd "$1" && find . -type f ! -name '.*ckptfs-lock' -printf '%p %m\n' -exec sha256sum {} \; |
        LC_ALL=C sort)
}

# ---------------------------------------------------------------------------
# 1. Each checkpoint edited and saved as a single-model writable mount

@test "1: the fixture run mounted -o rw: dd into one checkpoint's out, touch its snapshot_done saves exactly that edit; the other files untouched" {
    fixture_run
    sums "$D" >"$T/before"
    mount_fg "$D" "$M" -o rw,commit=manual
    printf '%s\n' "$N1" "$N2" "$N3" latest | LC_ALL=C sort | diff - <(root_names)
    [ -e "$M/$N2/snapshot_done" ]
    poke "$M/$N2/fc1.bias/out" 8 0000803f00000040
    # an edit not saved yet: no snapshot_done, the file as it was
    [ ! -e "$M/$N2/snapshot_done" ]
    sums "$D" | diff "$T/before" -
    cmp "$D/$N2.ckpt" "$O/$N2.ckpt"
    touch "$M/$N2/snapshot_done"
    [ -e "$M/$N2/snapshot_done" ]
    edited "$O/$N2.ckpt" "$D/$N2.ckpt" fc1.bias 8 0000803f00000040
    $ORACLE check "$M/$N2" "$D/$N2.ckpt"
    # the other checkpoints, and the graph.meta, as they were
    sums "$D" | grep -v "$N2.ckpt" | diff <(grep -v "$N2.ckpt" "$T/before") -
    $ORACLE check "$M/$N1" "$O/$N1.ckpt"
    $ORACLE check "$M/$N3" "$O/$N3.ckpt"
}

@test "1: without -o rw a run stays read-only, even when its files are writable" {
    put "$LINEARS" net-1_1.ckpt 0644
    touch -d '-1 hour' "$D/net-1_1.ckpt"
    mount_fg "$D" "$M"
    erofs sh -c "printf x | dd of='$M/net-1_1/linear1.bias/out' conv=notrunc status=none"
    erofs mkdir "$M/net-1_1/new"
    erofs mkdir "$M/new"
    cmp "$D/net-1_1.ckpt" "$O/net-1_1.ckpt"
    locks >"$T/locks"
    [ ! -s "$T/locks" ]
}

@test "1: meta (a reshape), mkdir of a new tensor, rmdir, rm -r and rename of tensor directories in one checkpoint, saved by fsync; the oracle reads the saved file" {
    put "$LINEARS" net-1_1.ckpt
    put "$LINEARS" net-2_1.ckpt
    mount_fg "$D" "$M" -o rw,commit=manual
    C=$M/net-1_1
    $ORACLE meta-of 2,3 kFloat >"$C/linear1.bias/meta"
    cmp <($ORACLE meta-of 2,3 kFloat) "$C/linear1.bias/meta"
    mkdir "$C/extra.bias"
    $ORACLE meta-of 3 kFloat >"$C/extra.bias/meta"
    $PY -c 'import numpy as n,sys; n.array([1,2,3],dtype="<f4").tofile(sys.argv[1])' \
        "$C/extra.bias/out"
    mkdir "$C/scratch"
    rmdir "$C/scratch"
    rm -r "$C/linear2.bias"
    mv "$C/linear2.weight" "$C/renamed.weight"
    [ ! -e "$C/snapshot_done" ]
    cmp "$D/net-1_1.ckpt" "$O/net-1_1.ckpt"
    $PY -c 'import os,sys; fd = os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd)' \
        "$C/linear1.weight/out"
    [ -e "$C/snapshot_done" ]
    $ORACLE check "$C" "$D/net-1_1.ckpt"
    # the saved file, by the oracle: exactly those changes
    $PY - <($ORACLE parse "$O/net-1_1.ckpt") <($ORACLE parse "$D/net-1_1.ckpt") <<'PY'
import hashlib, json, sys
old = {e["tag"]: e for e in json.load(open(sys.argv[1]))}
new = {e["tag"]: e for e in json.load(open(sys.argv[2]))}
assert sorted(new) == ["extra.bias", "linear1.bias", "linear1.weight", "renamed.weight"], \
    sorted(new)
assert new["linear1.bias"]["dims"] == [2, 3], new["linear1.bias"]
assert new["linear1.bias"]["sha256"] == old["linear1.bias"]["sha256"]
assert new["linear1.weight"] == old["linear1.weight"]
assert new["renamed.weight"]["sha256"] == old["linear2.weight"]["sha256"]
assert new["renamed.weight"]["dims"] == old["linear2.weight"]["dims"]
import numpy as np
want = hashlib.sha256(np.array([1, 2, 3], dtype="<f4").tobytes()).hexdigest()
assert new["extra.bias"]["sha256"] == want and new["extra.bias"]["dims"] == [3], new["extra.bias"]
print("saved as expected")
PY
    cmp "$D/net-2_1.ckpt" "$O/net-2_1.ckpt"
}

@test "1: the automatic save: a checkpoint is saved commit_delay (default 1 s) after its last writer closes, not while it is open" {
    put "$LINEARS" a-1_1.ckpt
    put "$LINEARS" b-1_1.ckpt
    mount_fg "$D" "$M" -o rw
    exec 5<>"$M/a-1_1/linear1.bias/out"
    printf '\x00\x00\x80\x3f' >&5
    sleep 1.5
    # still open for writing: nothing is saved yet
    cmp "$D/a-1_1.ckpt" "$O/a-1_1.ckpt"
    [ ! -e "$M/a-1_1/snapshot_done" ]
    exec 5>&-
    # a bounded wait for the daemon's save, not a timing check
    for _ in $(seq 1 400); do [ -e "$M/a-1_1/snapshot_done" ] && break; sleep 0.05; done
    [ -e "$M/a-1_1/snapshot_done" ]
    edited "$O/a-1_1.ckpt" "$D/a-1_1.ckpt" linear1.bias 0 0000803f
    cmp "$D/b-1_1.ckpt" "$O/b-1_1.ckpt"
}

@test "1: -o commit=manual in a run: nothing is saved until touch snapshot_done" {
    put "$LINEARS" a-1_1.ckpt
    mount_fg "$D" "$M" -o rw,commit=manual,commit_delay=0
    poke "$M/a-1_1/linear2.bias/out" 4 0000c03f
    sleep 0.5
    cmp "$D/a-1_1.ckpt" "$O/a-1_1.ckpt"
    [ ! -e "$M/a-1_1/snapshot_done" ]
    touch "$M/a-1_1/snapshot_done"
    edited "$O/a-1_1.ckpt" "$D/a-1_1.ckpt" linear2.bias 4 0000c03f
}

@test "1: the run level stays read-only in an rw run mount: mkdir, new files, rename of checkpoints, latest, rmdir of a checkpoint fail with EROFS; the directory is unchanged" {
    fixture_run
    sums "$D" >"$T/before"
    mount_fg "$D" "$M" -o rw,commit=manual
    printf '%s\n' "$N1" "$N2" "$N3" latest | LC_ALL=C sort >"$T/names"
    latest=$(readlink "$M/latest")
    erofs mkdir "$M/new"
    erofs touch "$M/new.ckpt"
    erofs sh -c "echo x >'$M/notes.txt'"
    erofs cp "$O/$N1.ckpt" "$M/"
    erofs mv "$M/$N1" "$M/renamed"
    erofs mv -T "$M/$N1" "$M/$N2"
    erofs rm "$M/latest"
    erofs mv "$M/latest" "$M/latest2"
    erofs rmdir "$M/$N1"
    root_names | diff "$T/names" -
    [ "$(readlink "$M/latest")" = "$latest" ]
    sums "$D" | diff "$T/before" -
    unmount "$M"
    sums "$D" | diff "$T/before" -
}

@test "1: rm -r of a checkpoint in an rw run mount fails; it stays listed and its file is never replaced, also at unmount" {
    fixture_run
    sums "$D" >"$T/before"
    mount_fg "$D" "$M" -o rw,commit=manual
    printf '%s\n' "$N1" "$N2" "$N3" latest | LC_ALL=C sort >"$T/names"
    run rm -r "$M/$N3"
    echo "rm -r: status $status: $output"
    [ "$status" -ne 0 ]
    root_names | diff "$T/names" -
    sums "$D" | diff "$T/before" -
    # rm -r removes the contents first (tensor directories are editable),
    # as on any filesystem whose directory cannot be removed; the file is
    # never replaced by the emptied one (an empty checkpoint does not read
    # back), and the daemon's exit status says the save failed, naming it
    rc=0
    unmount "$M" || rc=$?
    echo "the daemon exited $rc"
    if [ "$rc" -ne 0 ]; then
        grep -qF "$M/$N3" "$T/daemon.log"
        # the emptied tensors are kept beside it, named in the log (issue 39)
        R=$(sed -n 's/.* kept in \(.*\); apply them with.*/\1/p' "$T/daemon.log")
        [ "$(dirname "$R")" = "$D" ]
        grep -q '^remove ' "$R/edits"
        rm -r "$R"
    fi
    sums "$D" | diff "$T/before" -
    : >"$T/daemon.log"
}

@test "1: links and special files made in the root of an rw run mount fail with EROFS (files created in the root)" {
    fixture_run
    mount_fg "$D" "$M" -o rw,commit=manual
    printf '%s\n' "$N1" "$N2" "$N3" latest | LC_ALL=C sort >"$T/names"
    # every one tried, then all must have given EROFS
    bad=0
    for cmd in "mknod $M/fifo p" "ln -s $N1 $M/link" "ln $M/$N1/fc1.bias/out $M/hard"; do
        run $cmd
        echo "$cmd: status $status: $output"
        [ "$status" -ne 0 ]
        [[ $output == *"Read-only file system"* ]] || bad=$((bad + 1))
    done
    root_names | diff "$T/names" -
    [ "$bad" -eq 0 ]
}

# ---------------------------------------------------------------------------
# 2. A save replaces the file atomically; the directory keeps its identity

@test "2: a save replaces the file atomically: new inode, same name, mode and owner, no temporary file left, a reader of the old file keeps its bytes; the directory keeps its inode and place" {
    put "$LENET" a-1_1.ckpt 0400
    chown 1234:5678 "$D/a-1_1.ckpt"
    put "$LINEARS" b-1_1.ckpt 0640
    chown 4321:8765 "$D/b-1_1.ckpt"
    touch -d '-1 hour' "$D/b-1_1.ckpt"
    mount_fg "$D" "$M" -o rw,commit=manual
    printf '%s\n' a-1_1 b-1_1 latest | diff - <(root_names)
    latest=$(readlink "$M/latest")
    dino=$(stat -c %i "$M/a-1_1")
    fino=$(stat -c %i "$D/a-1_1.ckpt")
    exec 6<"$D/a-1_1.ckpt"   # a reader of the file as it was
    poke "$M/a-1_1/fc2.bias/out" 12 0102030405060708
    touch "$M/a-1_1/snapshot_done"
    [ "$(stat -c %i "$D/a-1_1.ckpt")" != "$fino" ]
    [ "$(stat -c '%a %u %g' "$D/a-1_1.ckpt")" = "400 1234 5678" ]
    [ "$(sha256sum <&6 | cut -d' ' -f1)" = "$(sha "$O/a-1_1.ckpt")" ]
    exec 6<&-
    edited "$O/a-1_1.ckpt" "$D/a-1_1.ckpt" fc2.bias 12 0102030405060708
    # beside the checkpoints, only lock files
    [ "$(ls -A "$D" | grep -v '\.ckptfs-lock$' | tr '\n' ' ')" = "a-1_1.ckpt b-1_1.ckpt " ]
    [ "$(stat -c %i "$M/a-1_1")" = "$dino" ]
    printf '%s\n' a-1_1 b-1_1 latest | diff - <(root_names)
    [ "$(readlink "$M/latest")" = "$latest" ]
    $ORACLE check "$M/a-1_1" "$D/a-1_1.ckpt"
    # the second: 0640 and another owner kept too
    poke "$M/b-1_1/linear1.weight/out" 0 11223344
    touch "$M/b-1_1/snapshot_done"
    [ "$(stat -c '%a %u %g' "$D/b-1_1.ckpt")" = "640 4321 8765" ]
    edited "$O/b-1_1.ckpt" "$D/b-1_1.ckpt" linear1.weight 0 11223344
    [ "$(ls -A "$D" | grep -v '\.ckptfs-lock$' | tr '\n' ' ')" = "a-1_1.ckpt b-1_1.ckpt " ]
}

@test "2: a checkpoint saved through the mount is listed at once and stays listed although its file is 0644 and just written (-o settle=3600)" {
    put "$LINEARS" w-1_1.ckpt 0644
    put "$LENET" old-1_1.ckpt 0400
    touch -d '-2 hours' "$D/w-1_1.ckpt" "$D/old-1_1.ckpt"
    mount_fg "$D" "$M" -o rw,commit=manual,settle=3600
    printf '%s\n' latest old-1_1 w-1_1 | diff - <(root_names)
    dino=$(stat -c %i "$M/w-1_1")
    poke "$M/w-1_1/linear2.bias/out" 0 0000a040
    touch "$M/w-1_1/snapshot_done"
    # no wait: listed right after the save
    listed w-1_1
    [ "$(stat -c '%a' "$D/w-1_1.ckpt")" = 644 ]
    [ "$(stat -c %i "$M/w-1_1")" = "$dino" ]
    # a complete file put in the run afterwards: once it shows, the daemon
    # has seen the save's rename too; the saved checkpoint is still there
    cp "$LENET" "$T/new.ckpt"
    chmod 0400 "$T/new.ckpt"
    mv "$T/new.ckpt" "$D/new-1_1.ckpt"
    until_listed new-1_1
    printf '%s\n' latest new-1_1 old-1_1 w-1_1 | diff - <(root_names)
    [ "$(stat -c %i "$M/w-1_1")" = "$dino" ]
    $ORACLE check "$M/w-1_1" "$D/w-1_1.ckpt"
    edited "$O/w-1_1.ckpt" "$D/w-1_1.ckpt" linear2.bias 0 0000a040
}

@test "2: a shell whose cwd is inside a checkpoint keeps working across its saves (no ESTALE): relative reads, edits, ls, a second save" {
    put "$LENET" a-1_1.ckpt
    $ORACLE fake-tree "$T/exp" "$O/a-1_1.ckpt"
    mount_fg "$D" "$M" -o rw,commit=manual
    (
        cd "$M/a-1_1/fc1.bias"
        poke out 0 0000803f
        touch ../snapshot_done
        cat out >"$T/after1"
        ls .. >"$T/ls1"
        cat ../fc3.bias/out >"$T/fc3"
        poke out 8 00000040
        poke ../fc3.bias/out 4 00004040
        touch ../snapshot_done
        cat out >"$T/after2"
        ls -l . >/dev/null
        pwd -P >"$T/pwd"
    )
    edited "$O/a-1_1.ckpt" "$D/a-1_1.ckpt" fc1.bias 0 0000803f fc1.bias 8 00000040 \
        fc3.bias 4 00004040
    cmp "$T/fc3" "$T/exp/fc3.bias/out"
    (cd "$T/exp" && ls | grep -vx snapshot_done) | diff - <(grep -vx snapshot_done "$T/ls1")
    poke "$T/exp/fc1.bias/out" 0 0000803f
    cmp "$T/after1" "$T/exp/fc1.bias/out"
    poke "$T/exp/fc1.bias/out" 8 00000040
    cmp "$T/after2" "$T/exp/fc1.bias/out"
    [ "$(cat "$T/pwd")" = "$M/a-1_1/fc1.bias" ]
}

# ---------------------------------------------------------------------------
# 3. One writer per model

@test "3: a checkpoint looked into holds .<file>.ckptfs-lock (\"PID MOUNTPOINT\"), through its saves; a single-model rw mount of it is refused in one line naming them; listing takes no lock" {
    fixture_run
    mount_fg "$D" "$M" -o rw,commit=manual
    pid=$(daemon_pid)
    ls -l "$M" >/dev/null
    readlink "$M/latest"
    locks >"$T/locks"
    [ ! -s "$T/locks" ]
    ls "$M/$N1" >/dev/null
    [ "$(cat "$(lock_of "$N1.ckpt")")" = "$(holder_text "$pid" "$M")" ]
    [ ! -e "$(lock_of "$N2.ckpt")" ]
    second_rw "$D/$N1.ckpt"
    [ "$status" -ne 0 ]
    [ "${#lines[@]}" -eq 1 ]
    [[ $output == *"$D/$N1.ckpt"* ]]
    [[ $output == *"pid $pid"* ]]
    [[ $output == *" $M"* ]]
    ! mountpoint -q "$T/second" || false
    # read-only beside it is fine
    mount_fg "$D/$N1.ckpt" "$T/ro" -o ro
    cmp "$T/ro/fc1.bias/out" "$M/$N1/fc1.bias/out"
    # the lock holds across a save
    poke "$M/$N1/fc3.bias/out" 0 0000803f
    touch "$M/$N1/snapshot_done"
    edited "$O/$N1.ckpt" "$D/$N1.ckpt" fc3.bias 0 0000803f
    [ "$(cat "$(lock_of "$N1.ckpt")")" = "$(holder_text "$pid" "$M")" ]
    second_rw "$D/$N1.ckpt"
    [ "$status" -ne 0 ]
    [[ $output == *"pid $pid"* ]]
    # a clean unmount releases every lock; then the file mounts writable
    unmount "$T/ro"
    unmount "$M"
    locks >"$T/locks"
    [ ! -s "$T/locks" ]
    mount_fg "$D/$N1.ckpt" "$T/after" -o rw,commit=manual
    [ "$(head -1 "$(lock_of "$N1.ckpt")" | cut -d' ' -f1)" = "$(daemon_pid)" ]
}

@test "3: a checkpoint another ckptfs mounts writable is read-only in the rw run mount (EROFS/EACCES, file unchanged), one log line names the file and the holder; the others stay writable" {
    fixture_run
    mount_fg "$D/$N1.ckpt" "$T/one" -o rw,commit=manual
    holder=$(daemon_pid)
    mount_fg "$D" "$M" -o rw,commit=manual,log="$T/log"
    $ORACLE check "$M/$N1" "$O/$N1.ckpt"
    refused_ro sh -c "printf x | dd of='$M/$N1/conv1.weight/out' conv=notrunc status=none"
    refused_ro mkdir "$M/$N1/new"
    refused_ro mv "$M/$N1/fc1.bias" "$M/$N1/fc1.b"
    # (cp, not the shell's printf: dash's printf reports every write error as EIO)
    refused_ro cp "$M/$N1/fc2.bias/meta" "$M/$N1/fc1.bias/meta"
    cmp "$D/$N1.ckpt" "$O/$N1.ckpt"
    $ORACLE check "$M/$N1" "$O/$N1.ckpt"
    cat "$T/log"
    grep "$N1.ckpt" "$T/log" >"$T/lines"
    [ "$(wc -l <"$T/lines")" -eq 1 ]
    grep -q "$holder" "$T/lines"
    # the lock is still the single-model mount's
    [ "$(head -1 "$(lock_of "$N1.ckpt")" | cut -d' ' -f1)" = "$holder" ]
    # another checkpoint of the run: writable
    poke "$M/$N2/fc3.bias/out" 0 0000803f
    touch "$M/$N2/snapshot_done"
    edited "$O/$N2.ckpt" "$D/$N2.ckpt" fc3.bias 0 0000803f
    # and the holder still saves its own
    poke "$T/one/fc3.bias/out" 4 00000040
    touch "$T/one/snapshot_done"
    edited "$O/$N1.ckpt" "$D/$N1.ckpt" fc3.bias 4 00000040
}

@test "3: a checkpoint in rank_<id>/ holds its lock beside its file (rank_<id>/.<file>.ckptfs-lock) and is edited and saved; a single-model rw mount of that file, by any path, is refused; one holding it first makes it read-only in the run" {
    mkdir -p "$D/rank_0" "$D/rank_1" "$O"
    cp "$RUN/$N1.ckpt" "$D/rank_0/net.ckpt"
    cp "$RUN/$N2.ckpt" "$D/rank_1/net.ckpt"
    cp "$RUN/$N1.ckpt" "$O/r0.ckpt"
    cp "$RUN/$N2.ckpt" "$O/r1.ckpt"
    chmod 0400 "$D"/rank_*/net.ckpt
    mount_fg "$D" "$M" -o rw,commit=manual
    pid=$(daemon_pid)
    ls "$M/rank_0" >/dev/null
    [ "$(cat "$D/rank_0/.net.ckpt.ckptfs-lock")" = "$(holder_text "$pid" "$M")" ]
    [ ! -e "$D/.rank_0" ]
    second_rw "$D/rank_0/net.ckpt"
    [ "$status" -ne 0 ]
    [ "${#lines[@]}" -eq 1 ]
    [[ $output == *"pid $pid"* ]]
    ! mountpoint -q "$T/second" || false
    # another name of the same file: the same lock
    ln -s "$D/rank_0/net.ckpt" "$T/link.ckpt"
    second_rw "$T/link.ckpt"
    [ "$status" -ne 0 ]
    [[ $output == *"pid $pid"* ]]
    ! mountpoint -q "$T/second" || false
    # the run edits and saves it
    poke "$M/rank_0/fc3.bias/out" 0 0000803f
    touch "$M/rank_0/snapshot_done"
    edited "$O/r0.ckpt" "$D/rank_0/net.ckpt" fc3.bias 0 0000803f
    unmount "$M"
    [ ! -e "$D/rank_0/.net.ckpt.ckptfs-lock" ]
    # the other way: a single-model rw mount holds rank_1's file
    mount_fg "$D/rank_1/net.ckpt" "$T/one" -o rw,commit=manual
    mount_fg "$D" "$M" -o rw,commit=manual
    refused_ro sh -c "printf x | dd of='$M/rank_1/conv1.weight/out' conv=notrunc status=none"
    cmp "$D/rank_1/net.ckpt" "$O/r1.ckpt"
}

# ---------------------------------------------------------------------------
# 4. -o index_cache

# until_no_lock FILE NAME...: read a file of each NAME in turn until FILE's
# lock is gone (a bounded wait, not a timing check).  The names alternate
# between checkpoints that cannot all stay open, so that each round opens
# one: the bound is enforced when a checkpoint is opened.
until_no_lock() {
    local lock i n
    lock=$(lock_of "$1")
    shift
    for i in $(seq 1 100); do
        [ -e "$lock" ] || return 0
        for n in "$@"; do cat "$M/$n/fc3.bias/out" >/dev/null; done
        sleep 0.05
    done
    echo "$lock never went away; locks: $(locks | tr '\n' ' ')" >&2
    return 1
}

@test "3: a checkpoint is claimed as a single-model rw mount claims its file: a save cut short past its commit point is finished when the run opens it, a killed save's temporary file removed" {
    fixture_run
    # N2's save reached its journal (the new file is N1's bytes); N3's was
    # killed before writing one.
    cp "$O/$N1.ckpt" "$D/.$N2.ckpt.ckptfs-BBBBBB"
    printf "ckptfs-journal 1\n.$N2.ckpt.ckptfs-BBBBBB\0$N2.ckpt\0end\n" >"$D/.$N2.ckpt.ckptfs-journal"
    echo partial >"$D/.$N3.ckpt.ckptfs-CCCCCC"
    mount_fg "$D" "$M" -o rw
    ls "$M/$N2" "$M/$N3" >/dev/null
    [ ! -e "$D/.$N2.ckpt.ckptfs-journal" ] && [ ! -e "$D/.$N2.ckpt.ckptfs-BBBBBB" ]
    cmp "$D/$N2.ckpt" "$O/$N1.ckpt"
    $ORACLE check "$M/$N2" "$O/$N1.ckpt"
    [ ! -e "$D/.$N3.ckpt.ckptfs-CCCCCC" ]
    cmp "$D/$N3.ckpt" "$O/$N3.ckpt"
}

@test "4: a small -o index_cache closes clean checkpoints (their lock files go) and reopens them on access; never one with unsaved edits or a file open for writing" {
    fixture_run
    # a fourth checkpoint: N3 and N4 read in turn open one each time
    N4=checkpoint_lenet-4_1875
    put "$O/$N3.ckpt" "$N4.ckpt"
    $ORACLE fake-tree "$T/exp1" "$O/$N1.ckpt"
    $ORACLE fake-tree "$T/exp2" "$O/$N2.ckpt"
    mount_fg "$D" "$M" -o rw,commit=manual,index_cache=1
    pid=$(daemon_pid)
    # N1 edited, not saved
    poke "$M/$N1/fc1.bias/out" 0 0000803f
    poke "$T/exp1/fc1.bias/out" 0 0000803f
    cat "$M/$N2/fc3.bias/out" >/dev/null
    until_no_lock "$N2.ckpt" "$N3" "$N4"
    # the edited one stays open, its edit there
    [ "$(cat "$(lock_of "$N1.ckpt")")" = "$(holder_text "$pid" "$M")" ]
    cmp "$M/$N1/fc1.bias/out" "$T/exp1/fc1.bias/out"
    # reopened on the next access, the same tree
    $ORACLE check "$M/$N2" "$O/$N2.ckpt"
    # a file open for writing (nothing written) keeps N2 open
    exec 5<>"$M/$N2/fc3.bias/out"
    for _ in $(seq 1 10); do cat "$M/$N3/fc3.bias/out" "$M/$N4/fc3.bias/out" >/dev/null; done
    [ "$(cat "$(lock_of "$N2.ckpt")")" = "$(holder_text "$pid" "$M")" ]
    [ "$(cat "$(lock_of "$N1.ckpt")")" = "$(holder_text "$pid" "$M")" ]
    $PY -c 'import os,sys; sys.exit(os.pread(5, 40, 0) != open(sys.argv[1], "rb").read())' \
        "$T/exp2/fc3.bias/out"
    exec 5>&-
    # closed without a write: clean, so it closes again
    until_no_lock "$N2.ckpt" "$N3" "$N4"
    cmp "$D/$N2.ckpt" "$O/$N2.ckpt"
    # N1 was never closed: its edit is saved now, then it may close too
    [ -e "$(lock_of "$N1.ckpt")" ]
    touch "$M/$N1/snapshot_done"
    edited "$O/$N1.ckpt" "$D/$N1.ckpt" fc1.bias 0 0000803f
    until_no_lock "$N1.ckpt" "$N3" "$N4"
    $ORACLE check "$M/$N1" "$D/$N1.ckpt"
    $ORACLE check "$M/$N2" "$O/$N2.ckpt"
    for n in "$N2" "$N3" "$N4"; do cmp "$D/$n.ckpt" "$O/$n.ckpt"; done
}

@test "4: -o index_cache=1 while a 64 MiB save runs: other checkpoints opened, read and closed meanwhile read right; the save completes with exactly the edit" {
    $PY "$REPO/bench/gen_ckpt.py" "$T/big.ckpt" --size $((64 << 20)) --count 8
    put "$T/big.ckpt" big-1_1.ckpt
    put "$LENET" a-1_1.ckpt
    put "$LENET" b-1_1.ckpt
    $ORACLE fake-tree "$T/exp" "$LENET"
    mount_fg "$D" "$M" -o rw,commit=manual,index_cache=1
    printf 'ckpt' | dd of="$M/big-1_1/layer.3.weight/out" bs=1 seek=4096 conv=notrunc status=none
    (touch "$M/big-1_1/snapshot_done"; echo $? >"$T/touch.rc") &
    toucher=$!
    n=0
    while kill -0 "$toucher" 2>/dev/null && [ "$n" -lt 2000 ]; do
        cmp "$M/a-1_1/fc1.bias/out" "$T/exp/fc1.bias/out"
        cmp "$M/b-1_1/fc2.bias/out" "$T/exp/fc2.bias/out"
        n=$((n + 1))
    done
    wait "$toucher"
    echo "$n rounds of reads during the save"
    [ "$(cat "$T/touch.rc")" = 0 ]
    edited "$O/big-1_1.ckpt" "$D/big-1_1.ckpt" layer.3.weight 4096 636b7074
    cmp "$D/a-1_1.ckpt" "$O/a-1_1.ckpt"
    cmp "$D/b-1_1.ckpt" "$O/b-1_1.ckpt"
    $ORACLE check "$M/a-1_1" "$LENET"
}

# ---------------------------------------------------------------------------
# 5. Unmount and ckptfs-umount

@test "5: unmount (fusermount3 -u) saves every checkpoint with unsaved edits, also with -o index_cache=1; the daemon exits 0 and no lock is left" {
    for opts in rw,commit=manual rw,commit=manual,index_cache=1; do
        rm -rf "$D" "$O"
        fixture_run
        mount_fg "$D" "$M" -o "$opts"
        poke "$M/$N1/fc1.bias/out" 0 0000803f
        poke "$M/$N3/conv1.weight/out" 100 0a0b0c0d
        cat "$M/$N2/fc2.bias/out" >/dev/null
        unmount "$M"
        edited "$O/$N1.ckpt" "$D/$N1.ckpt" fc1.bias 0 0000803f
        edited "$O/$N3.ckpt" "$D/$N3.ckpt" conv1.weight 100 0a0b0c0d
        cmp "$D/$N2.ckpt" "$O/$N2.ckpt"
        locks >"$T/locks"
        [ ! -s "$T/locks" ]
        [ "$(stat -c %a "$D/$N1.ckpt")" = 400 ]
    done
}

@test "5: unmount with a save that fails: the daemon exits non-zero naming the reason; that file untouched, the other edited checkpoint saved" {
    fixture_run
    mount_fg "$D" "$M" -o rw,commit=manual
    truncate -s 3 "$M/$N1/fc3.bias/out"
    poke "$M/$N2/fc3.bias/out" 0 0000803f
    rc=0
    unmount "$M" || rc=$?
    echo "daemon exit $rc"
    [ "$rc" -ne 0 ]
    grep -q "tensor 'fc3.bias': out is 3 bytes" "$T/daemon.log"
    cmp "$D/$N1.ckpt" "$O/$N1.ckpt"
    edited "$O/$N2.ckpt" "$D/$N2.ckpt" fc3.bias 0 0000803f
    : >"$T/daemon.log"
}

@test "5: ckptfs-umount on an rw run mount saves every checkpoint (user.ckptfs.unmount=1 on the root), unmounts, and returns after the daemon has exited" {
    fixture_run
    mount_fg "$D" "$M" -o rw,commit=manual
    pid=$(daemon_pid)
    # what ckptfs-umount asks for: save all, then no more edits...
    poke "$M/$N3/fc3.bias/out" 0 0000803f
    setfattr -n user.ckptfs.unmount -v 1 "$M"
    edited "$O/$N3.ckpt" "$D/$N3.ckpt" fc3.bias 0 0000803f
    erofs sh -c "printf x | dd of='$M/$N1/fc3.bias/out' conv=notrunc status=none"
    erofs mkdir "$M/$N2/new"
    # ...until told the unmount did not happen
    setfattr -n user.ckptfs.unmount -v 0 "$M"
    cp "$D/$N3.ckpt" "$O/$N3.saved"
    poke "$M/$N1/fc1.bias/out" 0 0000803f
    poke "$M/$N2/conv2.weight/out" 64 01020304
    "$UMOUNT" "$M"
    ! mountpoint -q "$M" || false
    ! running_child "$pid" || false # exited (a zombie until bash reaps it)
    sed -i "\\|^$pid $M\$|d" "$T/mounts"
    edited "$O/$N1.ckpt" "$D/$N1.ckpt" fc1.bias 0 0000803f
    edited "$O/$N2.ckpt" "$D/$N2.ckpt" conv2.weight 64 01020304
    cmp "$D/$N3.ckpt" "$O/$N3.saved"
}

@test "5: ckptfs-umount on an rw run mount whose save fails: status 1 with the reason, still mounted, that file untouched; fixed, it unmounts" {
    fixture_run
    mount_fg "$D" "$M" -o rw,commit=manual
    truncate -s 3 "$M/$N1/fc3.bias/out"
    run "$UMOUNT" "$M"
    echo "$output"
    [ "$status" -eq 1 ]
    [[ $output == *"not unmounted, the save failed"* ]]
    mountpoint -q "$M"
    cmp "$D/$N1.ckpt" "$O/$N1.ckpt"
    truncate -s 40 "$M/$N1/fc3.bias/out"
    "$UMOUNT" "$M"
    ! mountpoint -q "$M" || false
    : >"$T/mounts"
    # bytes 3.. of fc3.bias were cut and grown back as zeros
    edited "$O/$N1.ckpt" "$D/$N1.ckpt" fc3.bias 3 "$(printf '00%.0s' $(seq 37))"
}

# ---------------------------------------------------------------------------
# 6. A file deleted or replaced under unsaved edits

@test "6: a checkpoint deleted, or replaced, under unsaved edits stays listed and readable; its save fails with the single-model message (last_error, log) and writes nothing; a clean one disappears" {
    put "$LENET" a-1_1.ckpt
    put "$LENET" b-1_1.ckpt
    put "$LENET" c-1_1.ckpt
    $ORACLE fake-tree "$T/exp" "$LENET"
    rm "$T/exp/snapshot_done"   # edited, unsaved: no snapshot_done
    poke "$T/exp/fc1.bias/out" 0 0000803f
    mount_fg "$D" "$M" -o rw,commit=manual,log="$T/log"
    pid=$(daemon_pid)
    poke "$M/a-1_1/fc1.bias/out" 0 0000803f
    poke "$M/b-1_1/fc1.bias/out" 0 0000803f
    ls "$M/c-1_1" >/dev/null
    rm -f "$D/a-1_1.ckpt"
    cp "$LINEARS" "$T/other.ckpt"
    chmod 0400 "$T/other.ckpt"
    mv "$T/other.ckpt" "$D/b-1_1.ckpt"
    rm -f "$D/c-1_1.ckpt"
    until_gone c-1_1
    # a complete file put in afterwards: once it shows, the daemon has seen
    # the deletion and the replacement too
    cp "$LINEARS" "$T/z.ckpt"
    chmod 0400 "$T/z.ckpt"
    mv "$T/z.ckpt" "$D/z-1_1.ckpt"
    until_listed z-1_1
    printf '%s\n' a-1_1 b-1_1 latest z-1_1 | diff - <(root_names | grep -v '^c-1_1$')
    listed a-1_1
    listed b-1_1
    for n in a-1_1 b-1_1; do
        # the edits can be copied out: the tree of the file that was mounted, edited
        cp -r "$M/$n" "$T/copy-$n"
        diff -r "$T/exp" "$T/copy-$n"
        run touch "$M/$n/snapshot_done"
        [ "$status" -ne 0 ]
        [ ! -e "$M/$n/snapshot_done" ]
    done
    err=$(getfattr --only-values -n user.ckptfs.last_error "$M/a-1_1")
    echo "a: $err"
    [[ $err == *"$D/a-1_1.ckpt: changed on disk since it was mounted"*"the edits are kept"* ]]
    err=$(getfattr --only-values -n user.ckptfs.last_error "$M/b-1_1")
    echo "b: $err"
    why="another file was put in its place"
    [[ $err == *"$D/b-1_1.ckpt: changed on disk since it was mounted ($why); the edits are kept"* ]]
    grep -q "$D/a-1_1.ckpt: changed on disk since it was mounted" "$T/log"
    grep -q "$D/b-1_1.ckpt: changed on disk since it was mounted" "$T/log"
    [ ! -e "$D/a-1_1.ckpt" ]
    cmp "$D/b-1_1.ckpt" "$LINEARS"
    # the unmount cannot save them either: non-zero, nothing written
    rc=0
    unmount "$M" || rc=$?
    echo "daemon exit $rc"
    [ "$rc" -ne 0 ]
    [ ! -e "$D/a-1_1.ckpt" ]
    cmp "$D/b-1_1.ckpt" "$LINEARS"
    cmp "$D/z-1_1.ckpt" "$LINEARS"
    : >"$T/daemon.log"
}

# ---------------------------------------------------------------------------
# 7. kill -9 during a save

@test "7: kill -9 of the daemon during a save of a 64 MiB checkpoint in a run: always the complete old or new file; a new rw run mount takes the lock over and removes the temporary files" {
    $PY "$REPO/bench/gen_ckpt.py" "$T/big.ckpt" --size $((64 << 20)) --count 8
    put "$T/big.ckpt" big-1_1.ckpt
    put "$LINEARS" small-1_1.ckpt
    old=$(sha "$D/big-1_1.ckpt")
    # the new version, saved once without interruption (saves are deterministic)
    mount_fg "$D" "$M" -o rw,commit=manual
    printf 'ckpt' | dd of="$M/big-1_1/layer.3.weight/out" bs=1 seek=4096 conv=notrunc status=none
    touch "$M/big-1_1/snapshot_done"
    unmount "$M"
    new=$(sha "$D/big-1_1.ckpt")
    [ "$new" != "$old" ]
    seen_old=0 seen_new=0
    for i in 1 2 3 4 5; do
        cp "$O/big-1_1.ckpt" "$D/big-1_1.ckpt"
        chmod 0400 "$D/big-1_1.ckpt"
        "$CKPTFS" -f -o rw,commit=manual "$D" "$M" 2>>"$T/crash.log" &
        pid=$!
        echo "$pid $M" >>"$T/mounts"
        for _ in $(seq 1 600); do mountpoint -q "$M" && break; sleep 0.05; done
        printf 'ckpt' | dd of="$M/big-1_1/layer.3.weight/out" bs=1 seek=4096 conv=notrunc \
            status=none
        touch "$M/big-1_1/snapshot_done" 2>/dev/null &
        toucher=$!
        sleep "0.$((RANDOM % 40))"
        kill -9 "$pid"
        wait "$pid" 2>/dev/null || true
        sed -i "\\|^$pid $M\$|d" "$T/mounts"
        wait "$toucher" 2>/dev/null || true
        fusermount3 -uz "$M" 2>/dev/null || true
        got=$(sha "$D/big-1_1.ckpt")
        echo "round $i: $([ "$got" = "$old" ] && echo old || echo new)"
        [ "$got" = "$old" ] || [ "$got" = "$new" ]
        [ "$got" = "$old" ] && seen_old=$((seen_old + 1)) || seen_new=$((seen_new + 1))
        $ORACLE parse "$D/big-1_1.ckpt" >/dev/null
    done
    echo "old $seen_old, new $seen_new"
    # a leftover of an interrupted save as a kill leaves it (whatever the kills
    # left, there is at least this one)
    : >"$D/.big-1_1.ckpt.ckptfs-XyZ123"
    ls -A "$D"
    mount_fg "$D" "$M" -o rw,commit=manual
    pid=$(daemon_pid)
    ls "$M/big-1_1" >/dev/null
    [ "$(cat "$(lock_of big-1_1.ckpt)")" = "$(holder_text "$pid" "$M")" ]
    ls -A "$D"
    [ -z "$(ls -A "$D" | grep '^\.big-1_1\.ckpt\.ckptfs-' |
            grep -vx '\.big-1_1\.ckpt\.ckptfs-lock')" ]
    ! ls -A "$M" | grep -q ckptfs || false
    # and it saves: the same edit gives the new version whichever it found
    printf 'ckpt' | dd of="$M/big-1_1/layer.3.weight/out" bs=1 seek=4096 conv=notrunc status=none
    touch "$M/big-1_1/snapshot_done"
    [ "$(sha "$D/big-1_1.ckpt")" = "$new" ]
    cmp "$D/small-1_1.ckpt" "$O/small-1_1.ckpt"
}

# ---------------------------------------------------------------------------
# 8. Checkpoints that cannot be saved are read-only

# iteration_run: an iteration_00000010/ (the oracle's tp2 set, its whole
# tensors in $T/it/full) and its tracker in $D.
iteration_run() {
    mkdir -p "$D" "$O"
    $ITER gen "$T/it" --case tp2 --seed 1
    mv "$T/it/iteration_00000010" "$D/"
    printf 10 >"$D/latest_checkpointed_iteration.txt"
    $ITER file-tree "$T/it/full.safetensors" "$T/it/full"
    chmod 0400 "$D"/iteration_00000010/*
}

# iteration_read_only: $M/iteration_00000010 reads as the oracle assembles
# it and refuses every write.
iteration_read_only() {
    local t
    diff -r "$T/it/full" "$M/iteration_00000010"
    t=$(ls "$M/iteration_00000010" | grep -vx snapshot_done | head -1)
    refused_ro sh -c "printf x | dd of='$M/iteration_00000010/$t/out' conv=notrunc status=none"
    refused_ro cp "$T/it/full/$t/meta" "$M/iteration_00000010/$t/meta"
    refused_ro mkdir "$M/iteration_00000010/new"
    refused_ro rm -r "$M/iteration_00000010/$t"
    diff -r "$T/it/full" "$M/iteration_00000010"
}

@test "8: in an rw run mount an iteration_<N>/ directory is read-only (writes refused, files unchanged); a plain checkpoint beside it is writable" {
    iteration_run
    put "$LINEARS" net-1_1.ckpt
    sums "$D" | grep -v net-1_1 >"$T/before"
    mount_fg "$D" "$M" -o rw,commit=manual
    printf '%s\n' iteration_00000010 latest net-1_1 | diff - <(root_names)
    iteration_read_only
    poke "$M/net-1_1/linear1.bias/out" 0 0000803f
    touch "$M/net-1_1/snapshot_done"
    edited "$O/net-1_1.ckpt" "$D/net-1_1.ckpt" linear1.bias 0 0000803f
    unmount "$M"
    sums "$D" | grep -v net-1_1 | diff "$T/before" -
}

# The kernel takes an ENOSYS answer to OPEN or FLUSH for the whole connection
# (it sends no more of them): a read-only checkpoint of an rw run answers them
# as a writable mount does, so that the writable checkpoints' closes still
# reach the daemon: a bad meta fails its close, and touch snapshot_done
# returns only once the file is saved.
@test "8: after a read of a read-only iteration checkpoint of an rw run, a writable one's bad meta fails its close and touch snapshot_done waits for the save" {
    iteration_run
    put "$LINEARS" net-1_1.ckpt
    mount_fg "$D" "$M" -o rw,commit=manual
    diff -r "$T/it/full" "$M/iteration_00000010" # opens, reads and closes its files
    run $PY -c 'import os, sys
w = os.open(sys.argv[1], os.O_WRONLY | os.O_TRUNC)
os.write(w, b"shape {\n}\ndata_type: kNoSuchType")  # no newline: judged at the close
os.close(w)' "$M/net-1_1/linear1.bias/meta"
    echo "status $status: $output"
    [ "$status" -ne 0 ]
    [[ $output == *"Invalid argument"* ]]
    poke "$M/net-1_1/linear1.bias/out" 0 0000803f
    touch "$M/net-1_1/snapshot_done"
    edited "$O/net-1_1.ckpt" "$D/net-1_1.ckpt" linear1.bias 0 0000803f
}

# legacy_files: a legacy-encrypted .ckpt (the oracle's; its plaintext
# $T/plain.ckpt) and the v1.3 legacy .mindir fixture in $D.
legacy_files() {
    mkdir -p "$D" "$O"
    $ORACLE gen "$T/plain.ckpt" --case many --count 3
    $ENVELOPE encrypt --mode legacy --key-hex "$KHEX" "$T/plain.ckpt" "$D/leg-1_1.ckpt"
    cp "$MS/mindspore_add_encrpty_key_0123456789ABCDEF_v1.3legacy.mindir" "$D/legm.mindir"
    chmod 0400 "$D/leg-1_1.ckpt" "$D/legm.mindir"
}

legacy_read_only() {
    $ORACLE check "$M/leg-1_1" "$T/plain.ckpt"
    refused_ro sh -c "printf x | dd of='$M/leg-1_1/layer.0.w/out' conv=notrunc status=none"
    refused_ro cp "$M/leg-1_1/layer.1.w/meta" "$M/leg-1_1/layer.0.w/meta"
    refused_ro mkdir "$M/leg-1_1/new"
    refused_ro mkdir "$M/legm/new"
    $ORACLE check "$M/leg-1_1" "$T/plain.ckpt"
}

@test "8: in an rw run mount with -o key_file, legacy-encrypted files (an oracle .ckpt, the v1.3 .mindir fixture) are read-only; an AES-GCM checkpoint beside them is writable" {
    legacy_files
    $ENVELOPE encrypt --mode AES-GCM --key-hex "$KHEX" "$LINEARS" "$D/gcm-1_1.ckpt"
    chmod 0400 "$D/gcm-1_1.ckpt"
    sums "$D" | grep -v gcm-1_1 >"$T/before"
    mount_fg "$D" "$M" -o rw,commit=manual,key_file="$KEY"
    printf '%s\n' gcm-1_1 latest leg-1_1 legm | diff - <(root_names)
    legacy_read_only
    poke "$M/gcm-1_1/linear1.bias/out" 0 0000803f
    touch "$M/gcm-1_1/snapshot_done"
    $ENVELOPE decrypt --key-hex "$KHEX" --expect-mode AES-GCM "$D/gcm-1_1.ckpt" "$T/dec.ckpt"
    edited "$LINEARS" "$T/dec.ckpt" linear1.bias 0 0000803f
    unmount "$M"
    sums "$D" | grep -v gcm-1_1 | diff "$T/before" -
}

# ---------------------------------------------------------------------------
# 9. Encrypted and zstd checkpoints saved in their own envelope

@test "9: AES-GCM and AES-CBC checkpoints of an rw run (-o key_file) are saved encrypted in their own mode with exactly the edit (envelope oracle)" {
    mkdir -p "$D" "$O"
    P=$T/plain.ckpt
    cp "$LENET" "$P"
    $ENVELOPE encrypt --mode AES-GCM --key-hex "$KHEX" "$P" "$D/gcm-1_1.ckpt"
    $ENVELOPE encrypt --mode AES-CBC --key-hex "$KHEX" "$P" "$D/cbc-1_1.ckpt"
    chmod 0400 "$D"/*
    mount_fg "$D" "$M" -o rw,commit=manual,key_file="$KEY"
    printf '%s\n' cbc-1_1 gcm-1_1 latest | diff - <(root_names)
    for n in gcm-1_1 cbc-1_1; do
        $ORACLE check "$M/$n" "$P"
        poke "$M/$n/fc1.bias/out" 4 5a5a5a5a6b6b6b6b
        touch "$M/$n/snapshot_done"
    done
    for mode in AES-GCM AES-CBC; do
        f=$D/$([ "$mode" = AES-GCM ] && echo gcm || echo cbc)-1_1.ckpt
        $ENVELOPE decrypt --key-hex "$KHEX" --expect-mode "$mode" "$f" "$T/dec.ckpt"
        $ENVELOPE layout "$f" | $PY -c 'import json,sys; print(json.load(sys.stdin)["mode"])' |
            grep -qx -- "$mode"
        edited "$P" "$T/dec.ckpt" fc1.bias 4 5a5a5a5a6b6b6b6b
        # the edit is nowhere in clear
        $PY -c 'import sys
sys.exit(bytes.fromhex(sys.argv[1]) in open(sys.argv[2], "rb").read())' 5a5a5a5a6b6b6b6b "$f"
        [ "$(stat -c %a "$f")" = 400 ]
        $ORACLE check "$M/$(basename "$f" .ckpt)" "$T/dec.ckpt"
    done
    [ "$(ls -A "$D" | grep -v '\.ckptfs-lock$' | tr '\n' ' ')" = "cbc-1_1.ckpt gcm-1_1.ckpt " ]
}

@test "9: a .ckpt.zst checkpoint of an rw run is saved as seekable zstd, same name and mode, with exactly the edit (envelope oracle, zstd -d)" {
    mkdir -p "$D" "$O"
    P=$T/plain.ckpt
    cp "$LENET" "$P"
    zstd -q "$P" -o "$D/z-1_1.ckpt.zst"
    put "$LINEARS" net-1_1.ckpt
    chmod 0400 "$D/z-1_1.ckpt.zst"
    mount_fg "$D" "$M" -o rw,commit=manual
    printf '%s\n' latest net-1_1 z-1_1 | diff - <(root_names)
    $ORACLE check "$M/z-1_1" "$P"
    poke "$M/z-1_1/fc1.bias/out" 4 5a5a5a5a6b6b6b6b
    touch "$M/z-1_1/snapshot_done"
    $ENVELOPE zstd-layout "$D/z-1_1.ckpt.zst" >/dev/null
    zstd -q -d -c "$D/z-1_1.ckpt.zst" >"$T/unz.ckpt"
    edited "$P" "$T/unz.ckpt" fc1.bias 4 5a5a5a5a6b6b6b6b
    [ "$(stat -c %a "$D/z-1_1.ckpt.zst")" = 400 ]
    $ORACLE check "$M/z-1_1" "$T/unz.ckpt"
    [ "$(ls -A "$D" | grep -v '\.ckptfs-lock$' | tr '\n' ' ')" = "net-1_1.ckpt z-1_1.ckpt.zst " ]
    cmp "$D/net-1_1.ckpt" "$O/net-1_1.ckpt"
}

@test "8, 9: one rw run mixing encrypted (AES-GCM, legacy) with plain, .ckpt.zst and iteration checkpoints, -o key_file: the key applies to the encrypted ones; every checkpoint opens, each writable or read-only as alone" {
    iteration_run
    legacy_files
    put "$LINEARS" net-1_1.ckpt
    cp "$LENET" "$T/lenet.ckpt"
    zstd -q "$T/lenet.ckpt" -o "$D/z-1_1.ckpt.zst"
    $ENVELOPE encrypt --mode AES-GCM --key-hex "$KHEX" "$LINEARS" "$D/gcm-1_1.ckpt"
    chmod 0400 "$D/z-1_1.ckpt.zst" "$D/gcm-1_1.ckpt"
    mount_fg "$D" "$M" -o rw,commit=manual,key_file="$KEY"
    printf '%s\n' gcm-1_1 iteration_00000010 latest leg-1_1 legm net-1_1 z-1_1 |
        diff - <(root_names)
    # the README: "keys with -o key_file apply to every encrypted one"
    $ORACLE check "$M/net-1_1" "$LINEARS"
    $ORACLE check "$M/z-1_1" "$T/lenet.ckpt"
    iteration_read_only
    legacy_read_only
    poke "$M/net-1_1/linear1.bias/out" 0 0000803f
    poke "$M/gcm-1_1/linear1.bias/out" 0 0000803f
    poke "$M/z-1_1/fc1.bias/out" 0 0000803f
    for n in net-1_1 z-1_1 gcm-1_1; do touch "$M/$n/snapshot_done"; done
    edited "$LINEARS" "$D/net-1_1.ckpt" linear1.bias 0 0000803f
    zstd -q -d -c "$D/z-1_1.ckpt.zst" >"$T/unz.ckpt"
    edited "$T/lenet.ckpt" "$T/unz.ckpt" fc1.bias 0 0000803f
    $ENVELOPE decrypt --key-hex "$KHEX" --expect-mode AES-GCM "$D/gcm-1_1.ckpt" "$T/dec.ckpt"
    edited "$LINEARS" "$T/dec.ckpt" linear1.bias 0 0000803f
}

# ---------------------------------------------------------------------------
# The model-based random test

@test "random: 4 generated checkpoints, -o rw,commit=manual,index_cache=1; seeded writes, saves and reads against the oracle's reference; after unmount every file is the reference" {
    for seed in 1 2 3 4; do
        R=$T/run$seed
        mkdir -p "$R"
        i=0
        for c in "alltypes" "sliced" "crc" "many --count 8"; do
            $ORACLE gen "$R/r$i-1_$seed.ckpt" --case $c --seed $((seed * 10 + i))
            i=$((i + 1))
        done
        chmod 0400 "$R"/*
        mount_fg "$R" "$T/m$seed" -o rw,commit=manual,index_cache=1
        $RWM random "$T/m$seed" "$R" "$T/state$seed" --seed "$seed" --ops 40
        unmount "$T/m$seed"
        $RWM final "$R" "$T/state$seed"
        [ -z "$(ls -A "$R" | grep '^\.')" ]
    done
}
