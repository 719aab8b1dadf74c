#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# A mount other machines can use (issue 28): served by an NFS server, a
# ckptfs mount must turn a file handle back into the same node after the
# kernel has forgotten the inode (libfuse's doc/README.NFS: export support,
# lookups of "." and "..", inode numbers and generations valid for the
# mount's life).  This machine has no NFS client, so the handles are taken
# and opened as the kernel's NFS server does (name_to_handle_at,
# open_by_handle_at: $BUILD/fhandle, tests/tools/fhandle.c), after
# drop_caches made the kernel forget the inodes.  Every expected byte comes
# from the model files (ckpt_oracle fake-tree), never from the mount.
#
# That the kernel had forgotten is checked in the daemon's -d log: a
# handle of an inode still cached is opened without asking the daemon,
# one forgotten makes the kernel send LOOKUP "." on its number (insize 42:
# the 40-byte header and ".\0"; ".." is 43).

load helpers

RUN=$FIXTURES/mindspore_run_dir/qishna_lenet_modelcheckpoint
LENET=$MS/mindarmour_checkpoint_lenet-10_1875.ckpt
FH=$BUILD/fhandle
N1=checkpoint_lenet-1_1875
N2=checkpoint_lenet-2_1875
N3=checkpoint_lenet-3_1875
N4=checkpoint_lenet-4_1875

setup() {
    T=$BATS_TEST_TMPDIR
    M=$T/m
    D=$T/run
    H=$T/handles
    mkdir -p "$H"
}

teardown() {
    # the NFS server holds files of the mount: it goes first
    if [ -s "$BATS_TEST_TMPDIR/ganesha.bgpid" ]; then
        kill "$(cat "$BATS_TEST_TMPDIR/ganesha.bgpid")" 2>/dev/null || true
        wait "$(cat "$BATS_TEST_TMPDIR/ganesha.bgpid")" 2>/dev/null || true
    fi
    ckptfs_teardown
}

# save NAME PATH: PATH's handle, kept as NAME, with its inode number.
save() {
    "$FH" save "$2" "$H/$1"
    stat -c %i "$2" >"$H/$1.ino"
}

# forget: the kernel drops its unused dentries and inodes (FORGET to the
# daemon), and the log is marked: asked looks after the mark.
forget() {
    sync
    echo 2 >/proc/sys/vm/drop_caches
    wc -l <"$T/daemon.log" >"$T/mark"
}

# asked NAME [..]: since the last forget, the kernel looked up "." (or
# "..") on NAME's inode number: it had forgotten it.
asked() {
    local size=42
    [ "${2:-}" = .. ] && size=43
    tail -n +"$(($(cat "$T/mark") + 1))" "$T/daemon.log" |
        grep -q "opcode: LOOKUP (1), nodeid: $(cat "$H/$1.ino"), insize: $size,"
}

# opens NAME EXPECTED: NAME's handle opens a file of EXPECTED's bytes, or a
# directory of EXPECTED's names.
opens() {
    "$FH" open "$M" "$H/$1" >"$T/got"
    if [ -d "$2" ]; then
        LC_ALL=C sort "$T/got" | diff <(ls -A "$2" | LC_ALL=C sort) -
    else
        cmp "$T/got" "$2"
    fi
}

# stale NAME: NAME's handle is ESTALE, and nothing was read.
stale() {
    run "$FH" open "$M" "$H/$1"
    echo "$1: status $status: $output"
    [ "$status" -eq 1 ]
    [[ $output == *"open_by_handle_at: Stale file handle"* ]]
}

# forged NAME INO: a handle like NAME's (its type and generation) of inode
# number INO, which the mount never gave out.
forged() {
    $PY - "$H/$1" "$H/forged" "$2" <<'EOF'
import struct, sys
raw = bytearray(open(sys.argv[1], "rb").read())
nbytes, kind = struct.unpack_from("=Ii", raw)
assert nbytes == 12 and kind == 0x81, (nbytes, kind)
ino = int(sys.argv[3])
struct.pack_into("=II", raw, 8, ino >> 32, ino & 0xFFFFFFFF)
open(sys.argv[2], "wb").write(raw)
EOF
}

@test "one model: handles of out, meta, a tensor directory and the root open the same nodes after the kernel forgets them" {
    $ORACLE fake-tree "$T/exp" "$LENET"
    mount_fg "$LENET" "$M" -d
    save out "$M/fc2.bias/out"
    save meta "$M/conv1.weight/meta"
    save dir "$M/fc3.weight"
    save root "$M"
    forget
    opens out "$T/exp/fc2.bias/out"
    asked out
    opens meta "$T/exp/conv1.weight/meta"
    asked meta
    # a directory is reconnected to the root: "." then ".."
    opens dir "$T/exp/fc3.weight"
    asked dir
    asked dir ..
    opens root "$T/exp"
    # again, in another order, and the paths agree
    forget
    opens dir "$T/exp/fc3.weight"
    opens out "$T/exp/fc2.bias/out"
    asked out
    [ "$("$FH" ino "$M" "$H/out")" = "$(cat "$H/out.ino")" ]
    $ORACLE check "$M" "$LENET"
}

@test "one model: a handle of a number never given out, or from an earlier mount of the same file, is ESTALE; the root's stays valid" {
    cp "$LENET" "$T/a.ckpt"
    $ORACLE fake-tree "$T/exp" "$T/a.ckpt"
    mount_fg "$T/a.ckpt" "$M" -d
    save out "$M/fc1.bias/out"
    save root "$M"
    # a tensor past the last one, a number between the kinds, a huge one
    for ino in $((16 + 4 * 500 + 2)) 7 $(((1 << 40) + 12345)) $(((1 << 60) + 2)); do
        forged out "$ino"
        forget
        cp "$H/forged" "$H/f$ino"
        stale "f$ino"
    done
    opens out "$T/exp/fc1.bias/out"
    unmount "$M"
    mount_fg "$T/a.ckpt" "$M"
    forget
    # same number, same tensor even, but another mount's generation
    stale out
    opens root "$T/exp"
    cat "$M/fc1.bias/out" | cmp - "$T/exp/fc1.bias/out"
}

@test "one model, writable: a removed tensor's handle is ESTALE, before and after the save, never a tensor made since; a renamed one's opens it under its new name" {
    cp "$LENET" "$T/a.ckpt"
    chmod 0644 "$T/a.ckpt"
    $ORACLE fake-tree "$T/exp" "$T/a.ckpt"
    mount_fg "$T/a.ckpt" "$M" -d -o rw,commit=manual
    save gone "$M/fc3.weight/out"
    save gone_dir "$M/fc3.weight"
    save next "$M/fc3.bias/out"          # right after it in the file
    save moved "$M/conv1.weight/out"
    save moved_meta "$M/conv1.weight/meta"
    rm -r "$M/fc3.weight"
    mv "$M/conv1.weight" "$M/conv1.renamed"
    mkdir "$M/new.t"
    $ORACLE meta-of 10 kFloat >"$M/new.t/meta"
    head -c 40 /dev/urandom >"$T/new.bin"
    cp "$T/new.bin" "$M/new.t/out"
    save new "$M/new.t/out"
    for round in unsaved saved; do
        forget
        stale gone
        stale gone_dir
        opens next "$T/exp/fc3.bias/out"
        asked next
        opens moved "$T/exp/conv1.weight/out"
        opens moved_meta "$T/exp/conv1.weight/meta"
        opens new "$T/new.bin"
        [ "$round" = saved ] || touch "$M/snapshot_done" # the save: a new file, indexed again
    done
    cmp "$M/conv1.renamed/out" "$T/exp/conv1.weight/out"
    [ ! -e "$M/fc3.weight" ]
    # remade under the old name: a new tensor, and the old handle stays stale
    mkdir "$M/fc3.weight"
    forget
    stale gone_dir
    stale gone
    rmdir "$M/fc3.weight" # an empty tensor directory would fail the save at unmount
}

@test "run directory: handles inside a checkpoint, of its directory and of the run's root open the same nodes after the kernel forgets them, the checkpoint closed and opened again meanwhile" {
    $ORACLE fake-tree "$T/exp2" "$RUN/$N2.ckpt"
    mount_fg "$RUN" "$M" -d -o index_cache=1K
    save out "$M/$N2/fc2.weight/out"
    save meta "$M/$N2/fc3.bias/meta"
    save dir "$M/$N2/conv2.weight"
    save ckpt "$M/$N2"
    save root "$M"
    # the others' indexes push N2's out (index_cache: one open at a time)
    cat "$M/$N1/fc3.bias/out" "$M/$N3/fc3.bias/out" >/dev/null
    forget
    opens out "$T/exp2/fc2.weight/out"
    asked out
    opens meta "$T/exp2/fc3.bias/meta"
    asked meta
    opens dir "$T/exp2/conv2.weight"
    asked dir
    asked dir ..
    opens ckpt "$T/exp2"
    ls -A "$RUN" | grep '\.ckpt$' | sed 's/\.ckpt$//' >"$T/names"
    echo latest >>"$T/names"
    "$FH" open "$M" "$H/root" | LC_ALL=C sort | diff <(LC_ALL=C sort "$T/names") -
    # a checkpoint the run never listed
    forged out $(((99 << 42) | 18))
    stale forged
}

@test "run directory, writable: a checkpoint whose tensors were removed and saved stays open past -o index_cache, so its names and handles keep their tensors; a removed one's is ESTALE" {
    mkdir -p "$D"
    cp "$RUN"/*.ckpt "$D/"
    cp "$D/$N3.ckpt" "$D/$N4.ckpt"
    chmod 0400 "$D"/*.ckpt
    $ORACLE fake-tree "$T/exp2" "$RUN/$N2.ckpt"
    mount_fg "$D" "$M" -d -o rw,commit=manual,index_cache=1
    save gone "$M/$N2/fc3.weight/out"
    save next "$M/$N2/fc3.bias/out"    # right after it: opened afresh, the saved
    save last "$M/$N2/moments.fc3.bias/out" # file would number them one lower
    rm -r "$M/$N2/fc3.weight"
    touch "$M/$N2/snapshot_done"
    # N3 and N4 read in turn: each open closes every checkpoint it may
    for _ in 1 2 3 4 5; do cat "$M/$N3/fc3.bias/out" "$M/$N4/fc3.bias/out" >/dev/null; done
    [ -e "$D/.$N2.ckpt.ckptfs-lock" ]   # N2 is still open
    [ ! -e "$D/.$N3.ckpt.ckptfs-lock" ] || [ ! -e "$D/.$N4.ckpt.ckptfs-lock" ]
    # by the names the kernel has cached
    cmp "$M/$N2/fc3.bias/out" "$T/exp2/fc3.bias/out"
    forget
    opens next "$T/exp2/fc3.bias/out"
    asked next
    opens last "$T/exp2/moments.fc3.bias/out"
    stale gone
    # and by path, looked up afresh
    cmp "$M/$N2/moments.fc3.bias/out" "$T/exp2/moments.fc3.bias/out"
    [ ! -e "$M/$N2/fc3.weight" ]
}

# ganesha PORT: nfs-ganesha (Debian's nfs-ganesha and nfs-ganesha-vfs: its
# VFS backend opens every file by handle, open_by_handle_at) exporting $M
# as /model over NFSv4 on 127.0.0.1:PORT, in the foreground, stopped by
# teardown; returns once it answers (a bounded wait).
ganesha() {
    cat >"$T/ganesha.conf" <<EOF
NFS_CORE_PARAM { Protocols = 4; NFS_Port = $1; Bind_addr = 127.0.0.1;
                 Enable_NLM = false; Enable_RQUOTA = false; }
NFSV4 { Graceless = true; }
EXPORT { Export_Id = 1; Path = $M; Pseudo = /model; Access_Type = RO;
         Squash = No_Root_Squash; Protocols = 4; Transports = TCP; SecType = sys;
         FSAL { Name = VFS; } }
EOF
    ganesha.nfsd -F -f "$T/ganesha.conf" -L "$T/ganesha.log" -p "$T/ganesha.pid" -N NIV_EVENT &
    echo $! >"$T/ganesha.bgpid"
    for _ in $(seq 1 200); do
        nfs-ls "nfs://127.0.0.1/model/?version=4&nfsport=$1" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    # ganesha makes its log itself: it may not be there if it never started
    cat "$T/ganesha.log" >&2 2>/dev/null || echo "nfs-ganesha wrote no log" >&2
    return 1
}

@test "nfs-ganesha serves a mount over NFSv4 (read by libnfs's nfs-cat): the same bytes before and after the kernel forgets the inodes" {
    command -v ganesha.nfsd >/dev/null && command -v nfs-cat >/dev/null ||
        skip "needs nfs-ganesha, nfs-ganesha-vfs and libnfs-utils (Debian)"
    $ORACLE fake-tree "$T/exp" "$LENET"
    mount_fg "$LENET" "$M" -d -o allow_other
    port=$($PY -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    ganesha "$port"
    files="fc2.bias/out conv1.weight/meta fc1.weight/out snapshot_done"
    for f in $files; do
        nfs-cat "nfs://127.0.0.1/model/$f?version=4&nfsport=$port" | cmp - "$T/exp/$f"
    done
    forget
    for f in $files; do
        nfs-cat "nfs://127.0.0.1/model/$f?version=4&nfsport=$port" | cmp - "$T/exp/$f"
    done
    # the server reopened forgotten inodes by handle: the kernel asked "."
    tail -n +"$(($(cat "$T/mark") + 1))" "$T/daemon.log" |
        grep -q "opcode: LOOKUP (1), nodeid: [0-9]*, insize: 42,"
    nfs-ls "nfs://127.0.0.1/model/?version=4&nfsport=$port" | awk '{print $NF}' | LC_ALL=C sort |
        diff <(ls -A "$T/exp" | LC_ALL=C sort) -
}
