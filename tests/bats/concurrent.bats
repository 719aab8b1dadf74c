#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# Requests during a save (issue 12).  A save runs beside the request loop:
# lookups, getattr, reads, readdir, getxattr and statfs are answered while it
# runs and show the tree as it was when it began; writes made meanwhile go to
# the next save and none is lost; unmount and kill -9 in the middle of a save
# leave a whole model.  Every wait here is a deadlock guard (it fails the test
# instead of hanging the suite), never a bound on how fast anything is: the
# order of events is forced by freezing the filesystem the model lives on.
#
# How: the model sits on a small loop-mounted ext4, frozen (fsfreeze -f)
# once an edit is made, so the save blocks on its temporary file (a daemon
# thread in percpu_rwsem_wait, read from /proc/PID/task/*/wchan).  Another
# process then stats a meta, reads 4 KiB of an edited and an unedited out
# (compared with the oracle's bytes), lists a tensor directory, reads
# user.ckptfs.type and runs stat -f; the log must show all of them done
# before the unfreeze and the save after it.  A setfattr holds the root's
# lock in the kernel while it waits for its reply, so a listing of the root
# waits with it whatever the daemon does; the fsync case lists the root
# too.  A touch that creates snapshot_done on a mount where nothing was
# looked up yet must leave a stat of a tensor directory, a read and a
# listing of the root answered before the unfreeze, and return after it
# with the model file on disk already the new one.  While such a save
# waits, edits that touch only the tree (a meta reshape; with fsync, a
# rename and a mkdir in the root) are taken at once and go to the next
# save, and the request that asked for the save still succeeds.  The other
# cases: writer processes on disjoint tensors racing a saver process, the
# automatic save and readers (tests/concurrent/race.py); renames, mkdir,
# rmdir, rm -r and meta and out edits during a save of 512 MiB (that save
# holds the tree it began with, the next one the final tree);
# fusermount3 -u and ckptfs-umount during an automatic save; kill -9
# during a save (the whole old or new model, and a remount).
#
# The cases that name the multi-threaded loop run again with it, when the
# build has the option (MT_OPT, helpers.bash).  `make tsan` runs them, and
# the random test's --threads cases, under ThreadSanitizer.

load helpers

RACE="$PY $REPO/tests/concurrent/race.py"

setup() {
    M=$BATS_TEST_TMPDIR/m
    FROZEN=
    EXT=
    LOOPDEV=
}

need_mt() {
    [ -n "$MT_OPT" ] || skip "this build has no multi-threaded loop option (ckptfs --help)"
}

# wait_until CMD...: poll CMD for up to 120 s.  A deadlock guard only.
wait_until() {
    local _
    for _ in $(seq 1 2400); do
        "$@" && return 0
        sleep 0.05
    done
    echo "gave up waiting (120 s) for: $*" >&2
    return 1
}

# bg PID: a background client this test started, ended in teardown.
bg() { echo "$1" >>"$BATS_TEST_TMPDIR/bg"; }

# forget_daemon PID: the test collected this daemon itself.
forget_daemon() { sed -i "/^$1 /d" "$BATS_TEST_TMPDIR/mounts"; }

teardown() {
    local rc=0 pid mnt _
    # First the filesystem: a save blocked on it would keep its daemon alive.
    if [ -n "$FROZEN" ]; then fsfreeze -u "$FROZEN" 2>/dev/null || true; fi
    # Our own clients, by pid: one stuck on a hung daemon keeps the mount busy.
    if [ -f "$BATS_TEST_TMPDIR/bg" ]; then
        while read -r pid; do
            kill -9 "$pid" 2>/dev/null || true
            wait "$pid" 2>/dev/null || true
        done <"$BATS_TEST_TMPDIR/bg"
    fi
    # A daemon that does not exit after its unmount (a deadlocked save) is
    # killed after a guard, so that the suite goes on; the test then fails.
    if [ -f "$BATS_TEST_TMPDIR/mounts" ]; then
        while read -r pid mnt; do
            if mountpoint -q "$mnt"; then
                fusermount3 -u "$mnt" 2>/dev/null || fusermount3 -uz "$mnt" 2>/dev/null || true
            fi
            for _ in $(seq 1 1200); do running_child "$pid" || break; sleep 0.1; done
            if running_child "$pid"; then
                echo "daemon $pid still runs 120 s after its unmount: killed" >&2
                kill -9 "$pid" 2>/dev/null || true
                rc=1
            fi
        done < <(tac "$BATS_TEST_TMPDIR/mounts")
    fi
    ckptfs_teardown || rc=1
    # A mount whose daemon the test killed itself.
    while read -r mnt; do
        fusermount3 -uz "$mnt" 2>/dev/null || true
    done < <(awk -v d="$BATS_TEST_TMPDIR/" 'index($2, d) == 1 && $3 ~ /^fuse/ {print $2}' /proc/mounts)
    if [ -n "$EXT" ] && mountpoint -q "$EXT"; then umount "$EXT" || rc=1; fi
    if [ -n "$LOOPDEV" ]; then losetup -d "$LOOPDEV" 2>/dev/null || true; fi
    return "$rc"
}

# ext4_image SIZE: a small ext4 on a loop device, mounted at $EXT (root only).
ext4_image() {
    [ "$(id -u)" = 0 ] || skip "a loop-mounted ext4 needs root"
    command -v fsfreeze >/dev/null || skip "no fsfreeze"
    truncate -s "$1" "$BATS_TEST_TMPDIR/ext4.img"
    mkfs.ext4 -q "$BATS_TEST_TMPDIR/ext4.img"
    LOOPDEV=$(losetup -f --show "$BATS_TEST_TMPDIR/ext4.img" 2>/dev/null) || {
        LOOPDEV=
        skip "no loop device"
    }
    EXT=$BATS_TEST_TMPDIR/ext
    mkdir -p "$EXT"
    mount -o noatime "$LOOPDEV" "$EXT"
}

# save_blocked PID: a thread of the daemon waits for the frozen filesystem
# (sb_start_write sleeps in percpu_rwsem_wait): its save is under way.
save_blocked() {
    grep -qx percpu_rwsem_wait /proc/"$1"/task/*/wchan 2>/dev/null
}

# save_running DIR MODEL DONE: the save's temporary file is beside the model,
# or the save has already returned (DONE exists).
save_running() {
    [ -e "$3" ] || ls -A "$1" | grep "^\.$2\.ckptfs-" | grep -qv -- '-lock$'
}

# read_is FILE SKIP WANT: the 4 KiB block SKIP of FILE equals the file WANT.
read_is() {
    dd if="$1" bs=4096 skip="$2" count=1 status=none | cmp - "$3"
}

# frozen_save HOW [ckptfs options]: the save that HOW asks for (touch,
# fsync, setfattr: ckptfs-umount's save) waits on the frozen ext4 the model
# lives on; requests made from another process meanwhile are all answered,
# and show the tree as it was (the edited tensor with its new bytes); the
# save returns only after the unfreeze, and the file holds the edit (for
# touch, as soon as touch returns: its close waited for the save).
# touch-cold: touch on a mount where no tensor directory was looked up
# yet.  `touch snapshot_done` creates the file, and the kernel holds the
# root's directory lock for the whole create, which every first lookup
# in the root needs: the create must be answered at once.
frozen_save() {
    local how=$1 pid log=$BATS_TEST_TMPDIR/order T=$BATS_TEST_TMPDIR
    shift
    ext4_image 64M
    F=$EXT/model.ckpt
    $RACE gen "$F" --count 6 --min-kib 64 --max-kib 256 --seed 3
    mount_fg "$F" "$M" -o commit=manual "$@"
    pid=$(daemon_pid)
    $RACE extract "$F" t.1 "$T/t1"
    $RACE extract "$F" t.2 "$T/t2"
    # The edit: its overlay is in the spill file beside the model, so it is
    # made before the freeze; nothing writes into the mount after it.
    printf 'EDITED!!' >"$T/patch"
    dd if="$T/patch" of="$M/t.1/out" bs=1 seek=4100 conv=notrunc status=none
    dd if="$T/patch" of="$T/t1" bs=1 seek=4100 conv=notrunc status=none
    dd if="$T/t1" of="$T/t1.want" bs=4096 skip=1 count=1 status=none
    dd if="$T/t2" of="$T/t2.want" bs=4096 skip=2 count=1 status=none
    [ ! -e "$M/snapshot_done" ]
    # The tensor directories' entries are cached (directories keep long
    # timeouts), as in any use: a lookup in the root then needs no lock on
    # it, which setfattr holds for as long as the save runs.
    if [ "$how" != touch-cold ]; then
        ls "$M" >/dev/null
        stat "$M"/t.*/ >/dev/null
    fi

    FROZEN=$EXT
    fsfreeze -f "$EXT"
    case $how in
    touch*) (rc=0; touch "$M/snapshot_done" || rc=$?
             $RACE extract "$F" t.1 "$T/t1.now" && cmp -s "$T/t1" "$T/t1.now" || rc="$rc, not durable"
             echo "save $rc" >>"$log") & ;;
    fsync) (rc=0; $PY -c 'import os, sys; os.fsync(os.open(sys.argv[1], os.O_RDONLY))' \
                "$M/t.3/meta" || rc=$?; echo "save $rc" >>"$log") & ;;
    setfattr) (rc=0; setfattr -n user.ckptfs.unmount -v 1 "$M" || rc=$?; echo "save $rc" >>"$log") & ;;
    esac
    bg $!
    wait_until save_blocked "$pid"
    (
        r() {
            local what=$1
            shift
            if "$@" >"$T/reader.$what" 2>&1; then echo "reader $what ok"; else echo "reader $what FAILED"; fi >>"$log"
        }
        r stat-meta stat "$M/t.2/meta"
        r read-edited read_is "$M/t.1/out" 1 "$T/t1.want"
        r read read_is "$M/t.2/out" 2 "$T/t2.want"
        r ls-tensor sh -c '[ "$(ls "$1" | tr "\n" " ")" = "meta out " ]' - "$M/t.2"
        r getfattr sh -c '[ "$(getfattr --only-values -n user.ckptfs.type "$1")" = Float32 ]' - "$M/t.4"
        r statfs stat -f "$M"
        # setxattr (setfattr) holds the root's lock in the kernel for as long
        # as it waits: a listing of the root waits there with it, whatever
        # the daemon does.  touch waits in its close, fsync on its file.
        if [ "$how" != setfattr ]; then
            r ls-root sh -c '[ "$(ls "$1" | grep -c "^t\.[0-5]$")" = 6 ]' - "$M"
        fi
        echo "readers done" >>"$log"
    ) &
    bg $!
    wait_until grep -qx "readers done" "$log" || true
    echo "unfreeze" >>"$log"
    fsfreeze -u "$EXT"
    FROZEN=
    wait_until grep -q "^save " "$log"
    cat "$log"
    # Every reader answered, correctly, before the unfreeze; the save after.
    [ "$(sed -n '/^unfreeze$/q;p' "$log" | grep -c ' ok$')" -eq "$([ "$how" != setfattr ] && echo 7 || echo 6)" ]
    sed -n '/^unfreeze$/q;p' "$log" | grep -qx "readers done"
    ! grep -q FAILED "$log" || false
    sed -n '/^unfreeze$/,$p' "$log" | grep -qx "save 0"
    ! sed -n '/^unfreeze$/q;p' "$log" | grep -q "^save" || false
    # The save holds the edit; the tree switched to the new file.
    [ -e "$M/snapshot_done" ]
    $RACE extract "$F" t.1 "$T/t1.saved"
    cmp "$T/t1" "$T/t1.saved"
    $ORACLE check "$M" "$F"
}

@test "touch snapshot_done: stat, reads, listings, getxattr and statfs are answered while the save waits on a frozen fs" {
    frozen_save touch
}

@test "fsync: the root's listing too is answered while the save waits on a frozen fs" {
    frozen_save fsync
}

@test "ckptfs-umount's save (setfattr user.ckptfs.unmount): requests are answered while it waits on a frozen fs" {
    frozen_save setfattr
}

@test "multi-threaded loop: requests are answered while touch's save waits on a frozen fs" {
    need_mt
    frozen_save touch -o "$MT_OPT"
}

@test "multi-threaded loop: requests are answered while fsync's save waits on a frozen fs" {
    need_mt
    frozen_save fsync -o "$MT_OPT"
}

@test "touch snapshot_done on a mount with nothing looked up: first lookups in the root are answered during the save, touch returns once it is durable" {
    frozen_save touch-cold
}

@test "multi-threaded loop: first lookups in the root are answered during touch's save" {
    need_mt
    frozen_save touch-cold -o "$MT_OPT"
}

# dirty_during_frozen_save HOW [ckptfs options]: while the save HOW asks
# for waits on the frozen ext4, edits that touch only the tree (nothing on
# disk) are taken at once: with touch, a meta reshape; with fsync, a rename
# and a mkdir in the root.  After the
# unfreeze the save has the tree it began with, the next one the edits, and
# HOW itself succeeded: touch's futimens comes when the tree is dirty again.
dirty_during_frozen_save() {
    local how=$1 pid T=$BATS_TEST_TMPDIR log=$BATS_TEST_TMPDIR/order
    shift
    ext4_image 64M
    F=$EXT/model.ckpt
    $RACE gen "$F" --count 4 --min-kib 64 --max-kib 64 --seed 4
    mount_fg "$F" "$M" -o commit=manual "$@"
    pid=$(daemon_pid)
    printf 'EDITED!!' | dd of="$M/t.1/out" bs=1 seek=100 conv=notrunc status=none
    ls "$M" >/dev/null
    stat "$M"/t.*/ >/dev/null
    tree_of "$F" | sed 's/^t\.1 .*/t.1/' >"$T/want1"
    FROZEN=$EXT
    fsfreeze -f "$EXT"
    if [ "$how" = touch ]; then
        (rc=0; touch "$M/snapshot_done" 2>"$T/save.err" || rc=$?; echo "save $rc" >>"$log") &
    else
        (rc=0; $PY -c 'import os, sys; os.fsync(os.open(sys.argv[1], os.O_RDONLY))' \
             "$M/t.3/meta" 2>"$T/save.err" || rc=$?; echo "save $rc" >>"$log") &
    fi
    bg $!
    wait_until save_blocked "$pid"
    (
        rc=0
        if [ "$how" = touch ]; then
            printf 'shape { dim: 128 dim: 128 } data_type: kFloat' >"$M/t.2/meta" || rc=$?
        else
            { mv "$M/t.2" "$M/t.2.renamed" && mkdir "$M/new.dir"; } || rc=$?
        fi
        echo "edits $rc" >>"$log"
    ) &
    bg $!
    wait_until grep -q "^edits " "$log" || true
    echo "unfreeze" >>"$log"
    fsfreeze -u "$EXT"
    FROZEN=
    wait_until grep -q "^save " "$log"
    cat "$log" "$T/save.err"
    sed -n '/^unfreeze$/q;p' "$log" | grep -qx "edits 0"
    # that save: the tree it began with (t.1 edited)
    tree_of "$F" | sed 's/^t\.1 .*/t.1/' | diff "$T/want1" -
    $RACE extract "$F" t.1 "$T/t1.saved"
    [ "$(dd if="$T/t1.saved" bs=1 skip=100 count=8 status=none)" = 'EDITED!!' ]
    [ ! -e "$M/snapshot_done" ]
    rmdir "$M/new.dir" 2>/dev/null || true
    touch "$M/snapshot_done"
    if [ "$how" = touch ]; then
        tree_of "$F" | grep -q '^t\.2 128,128 kFloat '
    else
        [ "$(tree_of "$F" | cut -d' ' -f1 | tr '\n' ' ')" = "t.0 t.1 t.2.renamed t.3 " ]
    fi
    # the status of the request that asked for the save, last
    grep -qx "save 0" "$log"
}

@test "touch's save on a frozen fs: a meta edit is taken at once; touch succeeds though the tree is dirty again" {
    dirty_during_frozen_save touch
}

@test "fsync's save on a frozen fs: a rename and a mkdir are taken at once and go to the next save" {
    dirty_during_frozen_save fsync
}

@test "multi-threaded loop: a meta edit during touch's save on a frozen fs; touch succeeds" {
    need_mt
    dirty_during_frozen_save touch -o "$MT_OPT"
}

# race [ckptfs options]: 64 tensors of 1-4 MiB, 4 writers, a saver, 2
# readers and the automatic save (tests/concurrent/race.py).
race() {
    F=$BATS_TEST_TMPDIR/model.ckpt
    $RACE gen "$F" --count 64 --min-kib 1024 --max-kib 4096 --seed 5
    mount_fg "$F" "$M" -o commit_delay=0.1 "$@"
    # touch is several requests (lookup, open or create, futimens of the open
    # file): a writer may make the tree dirty between them; every save, touch
    # included, must still succeed.
    run $RACE race "$M" "$F" --writers 4 --readers 2 --rounds 6 --seed 5
    echo "$output"
    [ "$status" -eq 0 ]
}

@test "writers racing saves lose nothing; readers of other tensors see their bytes, never an error" {
    race
}

@test "multi-threaded loop: writers racing saves lose nothing" {
    need_mt
    race -o "$MT_OPT"
}

@test "a meta open for writing across a save keeps its buffer; the write goes to the next save" {
    F=$BATS_TEST_TMPDIR/model.ckpt
    $ORACLE gen "$F" --case many --count 3
    mount_fg "$F" "$M" -o commit=manual
    printf 'x' | dd of="$M/layer.0.w/out" bs=1 seek=0 conv=notrunc status=none
    # open, save from elsewhere, then write and close: the new shape counts
    run $PY - "$M" <<'PY'
import os, subprocess, sys
m = sys.argv[1]
fd = os.open(os.path.join(m, "layer.1.w/meta"), os.O_WRONLY | os.O_TRUNC)
if subprocess.run(["touch", os.path.join(m, "snapshot_done")]).returncode:
    sys.exit("the save failed")
os.write(fd, b"shape { dim: 2 dim: 2 } data_type: kFloat\n")
os.close(fd)
PY
    echo "$output"
    [ "$status" -eq 0 ]
    cmp <($ORACLE meta-of 2,2 kFloat) "$M/layer.1.w/meta"
    [ ! -e "$M/snapshot_done" ]
    touch "$M/snapshot_done"
    $ORACLE check "$M" "$F"
    [ "$($ORACLE parse "$F" | $PY -c 'import json, sys
print([t["dims"] for t in json.load(sys.stdin) if t["tag"] == "layer.1.w"][0])')" = "[2, 2]" ]
}

# big_model: 512 MiB in 8 tensors layer.N.weight of 16777216 Float32, so
# that a save takes a while; orig.bin holds a tensor's bytes (all are alike).
big_model() {
    F=$BATS_TEST_TMPDIR/model.ckpt
    $PY "$REPO/bench/gen_ckpt.py" "$F" --size $((512 << 20)) --count 8
    $RACE extract "$F" layer.0.weight "$BATS_TEST_TMPDIR/orig.bin"
}

# tree_of MODEL: the oracle's parse, one line per tensor: dir dims type sha256.
tree_of() {
    $ORACLE parse "$1" | $PY -c 'import json, sys
for t in json.load(sys.stdin):
    print(t["dir"], ",".join(map(str, t["dims"])) or "-", t["oneflow_type"], t["sha256"])'
}

# patched_sha FILE OFFSET TEXT: sha256 of FILE with TEXT written at OFFSET.
patched_sha() {
    $PY -c 'import hashlib, sys
b = bytearray(open(sys.argv[1], "rb").read()); o = int(sys.argv[2]); t = sys.argv[3].encode()
b[o:o + len(t)] = t; print(hashlib.sha256(b).hexdigest())' "$@"
}

@test "renames, mkdir, rmdir, rm -r, meta and out edits during a save: that save has the tree it began with, the next one the final tree" {
    local T=$BATS_TEST_TMPDIR
    big_model
    mount_fg "$F" "$M" -o commit=manual
    orig=$(sha "$T/orig.bin")
    printf 'abcd' | dd of="$M/layer.0.weight/out" bs=1 seek=100 conv=notrunc status=none
    (rc=0; touch "$M/snapshot_done" || rc=$?; echo "$rc" >"$T/touch.rc") &
    bg $!
    wait_until save_running "$T" model.ckpt "$T/touch.rc"
    mv "$M/layer.1.weight" "$M/renamed.1"
    mkdir "$M/new.a"
    $ORACLE meta-of 2,3 kInt32 >"$M/new.a/meta"
    head -c 24 /dev/urandom >"$T/new.bin"
    cp "$T/new.bin" "$M/new.a/out"
    mkdir "$M/new.empty"
    rmdir "$M/new.empty"
    rm -r "$M/layer.2.weight"
    $ORACLE meta-of 4096,4096 kFloat >"$M/layer.3.weight/meta"
    $ORACLE meta-of 16777216 kInt32 >"$M/layer.4.weight/meta"
    mv "$M/layer.5.weight" "$M/layer.5.tmp"
    mv "$M/layer.5.tmp" "$M/layer.5.weight"
    printf 'wxyz' | dd of="$M/layer.6.weight/out" bs=1 seek=0 conv=notrunc status=none
    # the bytes the running save is writing, changed under it
    printf 'ABCD' | dd of="$M/layer.0.weight/out" bs=1 seek=100 conv=notrunc status=none
    wait_until [ -s "$T/touch.rc" ]
    # That save wrote the tree as it began: the first edit only.  The edits
    # made during it wait for the next one.
    edited0=$(patched_sha "$T/orig.bin" 100 abcd)
    {
        echo "layer.0.weight 16777216 kFloat $edited0"
        for i in 1 2 3 4 5 6 7; do echo "layer.$i.weight 16777216 kFloat $orig"; done
    } >"$T/want1"
    tree_of "$F" >"$T/got1"
    diff "$T/want1" "$T/got1"
    [ ! -e "$M/snapshot_done" ]
    touch "$M/snapshot_done"
    {
        echo "layer.0.weight 16777216 kFloat $(patched_sha "$T/orig.bin" 100 ABCD)"
        echo "renamed.1 16777216 kFloat $orig"
        echo "layer.3.weight 4096,4096 kFloat $orig"
        echo "layer.4.weight 16777216 kInt32 $orig"
        echo "layer.5.weight 16777216 kFloat $orig"
        echo "layer.6.weight 16777216 kFloat $(patched_sha "$T/orig.bin" 0 wxyz)"
        echo "layer.7.weight 16777216 kFloat $orig"
        echo "new.a 2,3 kInt32 $(sha "$T/new.bin")"
    } >"$T/want2"
    tree_of "$F" >"$T/got2"
    diff "$T/want2" "$T/got2"
    $ORACLE check "$M" "$F"
    # Last: touch itself succeeded.  It is a create (the save) and then a
    # futimens of the open snapshot_done; the edits above made the tree
    # dirty in between, and a futimens refused with ENOENT then fails the
    # touch whose save did happen.
    [ "$(cat "$T/touch.rc")" = 0 ]
}

# unmount_during_save HOW [ckptfs options]: an automatic save of a big
# model is under way; an edit made meanwhile, then an unmount (HOW:
# fusermount3 or ckptfs-umount).  The daemon exits 0, and the file holds
# both edits.
unmount_during_save() {
    local how=$1 pid T=$BATS_TEST_TMPDIR rc=0
    shift
    big_model
    mount_fg "$F" "$M" -o commit_delay=0 "$@"
    pid=$(daemon_pid)
    printf 'abcd' | dd of="$M/layer.0.weight/out" bs=1 seek=100 conv=notrunc status=none
    wait_until save_running "$T" model.ckpt "$M/snapshot_done"
    printf 'LAST' | dd of="$M/layer.1.weight/out" bs=1 seek=200 conv=notrunc status=none
    if [ "$how" = ckptfs-umount ]; then
        "$REPO/mount-helpers/ckptfs-umount" "$M"
        ! mountpoint -q "$M" || false
    fi
    umount_wait "$M" "$pid" || rc=$?
    forget_daemon "$pid"
    [ "$rc" -eq 0 ]
    tree_of "$F" >"$T/got"
    grep -qx "layer.0.weight 16777216 kFloat $(patched_sha "$T/orig.bin" 100 abcd)" "$T/got"
    grep -qx "layer.1.weight 16777216 kFloat $(patched_sha "$T/orig.bin" 200 LAST)" "$T/got"
    [ "$(wc -l <"$T/got")" -eq 8 ]
    [ -z "$(ls -A "$T" | grep '^\.model\.ckpt\.ckptfs-')" ]
}

@test "fusermount3 -u during an automatic save: the daemon saves the edits made meanwhile too, exits 0" {
    unmount_during_save fusermount3
}

@test "ckptfs-umount during an automatic save: the edits made meanwhile are saved" {
    unmount_during_save ckptfs-umount
}

@test "multi-threaded loop: fusermount3 -u during a save keeps the last edits" {
    need_mt
    unmount_during_save fusermount3 -o "$MT_OPT"
}

@test "multi-threaded loop: ckptfs-umount during a save keeps the last edits" {
    need_mt
    unmount_during_save ckptfs-umount -o "$MT_OPT"
}

# kill_during_save [ckptfs options]: kill -9 while a save writes its
# temporary file: the model is the whole old or the whole new one, and a
# writable remount removes the leftover and shows that file.
kill_during_save() {
    local pid T=$BATS_TEST_TMPDIR
    big_model
    tree_of "$F" >"$T/old"
    mount_fg "$F" "$M" -o commit=manual "$@"
    pid=$(daemon_pid)
    printf 'abcd' | dd of="$M/layer.3.weight/out" bs=1 seek=4096 conv=notrunc status=none
    sed "s/^\(layer\.3\.weight .* \)[0-9a-f]*$/\1$(patched_sha "$T/orig.bin" 4096 abcd)/" \
        "$T/old" >"$T/new"
    (rc=0; touch "$M/snapshot_done" || rc=$?; echo "$rc" >"$T/touch.rc") &
    bg $!
    wait_until save_running "$T" model.ckpt "$T/touch.rc"
    kill -9 "$pid"
    wait "$pid" || true
    forget_daemon "$pid"
    wait_until [ -s "$T/touch.rc" ]
    fusermount3 -uz "$M"
    tree_of "$F" >"$T/got"
    cmp -s "$T/got" "$T/old" || cmp -s "$T/got" "$T/new"
    mount_fg "$F" "$M" "$@"
    [ -z "$(ls -A "$T" | grep '^\.model\.ckpt\.ckptfs-' | grep -v -- '-lock$')" ]
    $ORACLE check "$M" "$F"
}

@test "kill -9 in the middle of a save: the model is the whole old or new one, a remount recovers" {
    kill_during_save
}

@test "multi-threaded loop: kill -9 in the middle of a save" {
    need_mt
    kill_during_save -o "$MT_OPT"
}
