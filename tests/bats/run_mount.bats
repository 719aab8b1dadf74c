#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# A training run's directory mounted (issue 14): one read-only directory per
# complete checkpoint, named as codec/run_dir names it, each exactly the tree
# a mount of that one file shows; `latest` links to the newest that opens; the
# listing opens no checkpoint but that one, once; the daemon follows the directory while a writer saves
# (ModelCheckpoint: 0644 while written, chmod 0400 when done, the oldest
# removed beyond keep_checkpoint_max, a reused directory's prefix renamed);
# a checkpoint deleted or replaced under a reader never gives it wrong bytes.
# Every expected name, link and tree comes from the files and the rules
# (ckpt_oracle / safetensors_oracle parse the files), never from the mount.

load helpers

RUN=$FIXTURES/mindspore_run_dir/qishna_lenet_modelcheckpoint
ST="$PY $REPO/tests/oracle/safetensors_oracle.py"
WRITER="$PY $REPO/tests/oracle/run_writer.py"
ITER="$PY $REPO/tests/oracle/iteration_oracle.py"

setup() {
    T=$BATS_TEST_TMPDIR
    M=$T/m
    D=$T/run
}

teardown() {
    # a reader left running by a failed test would keep the mount busy
    if [ -s "$BATS_TEST_TMPDIR/reader.pid" ]; then
        kill "$(cat "$BATS_TEST_TMPDIR/reader.pid")" 2>/dev/null || true
        wait "$(cat "$BATS_TEST_TMPDIR/reader.pid")" 2>/dev/null || true
    fi
    exec 7<&- 8>&- || true
    # a daemon a test stopped (to overflow its inotify queue) answers again
    if [ -s "$BATS_TEST_TMPDIR/stopped.pid" ]; then
        kill -CONT "$(cat "$BATS_TEST_TMPDIR/stopped.pid")" 2>/dev/null || true
    fi
    ckptfs_teardown
}

# fixture N: the fixture run's checkpoint of epoch N
fixture() { echo "$RUN/checkpoint_lenet-$1_1875.ckpt"; }

# dump_names DIR [options]: the first column of `ckptfs-dump DIR`'s checkpoint
# lines, complete ones only, and latest if any is complete (what the spec says
# the root shows; a cross-check of the two, beside the independent expectation)
dump_names() {
    "$BUILD/ckptfs-dump" "${@:2}" "$1" >"$T/dump"
    { tail -n +2 "$T/dump" | awk -F'\t' '$5 == "complete" || $5 ~ /^does not open: / {print $1}'
      head -1 "$T/dump" | grep -qv 'latest none$' && echo latest; } | LC_ALL=C sort
}

root_names() { ls -A "$M" | LC_ALL=C sort; }

@test "the fixture run: a directory per checkpoint and latest -> the newest epoch; each is its file's tree; no graph.meta" {
    mount_fg "$RUN" "$M"
    # expected from the directory's names: <prefix>-<epoch>_<step>.ckpt, plus latest
    { (cd "$RUN" && ls -- *.ckpt | sed 's/\.ckpt$//'); echo latest; } | LC_ALL=C sort >"$T/want"
    root_names >"$T/got"
    diff "$T/want" "$T/got"
    grep -q . "$T/want"
    dump_names "$RUN" | diff "$T/want" -
    # the newest: one prefix, so the largest epoch (then step)
    newest=$(cd "$RUN" && ls -- *.ckpt | sed -E 's/^(.*)-([0-9]+)_([0-9]+)\.ckpt$/\2 \3 \1-\2_\3/' |
             sort -n -k1,1 -k2,2 | tail -1 | cut -d' ' -f3)
    echo "newest $newest"
    [ -L "$M/latest" ]
    [ "$(readlink "$M/latest")" = "$newest" ]
    for f in "$RUN"/*.ckpt; do
        $ORACLE check "$M/$(basename "$f" .ckpt)" "$f"
    done
    $ORACLE check "$M/latest" "$RUN/$newest.ckpt"
    # the run's graph.meta is no checkpoint
    ! ls -A "$M" | grep -q graph || false
    [ ! -e "$M/checkpoint_lenet-graph" ]
    [ ! -e "$M/checkpoint_lenet-graph.meta" ]
}

@test "each checkpoint directory is the tree a read-only mount of that one file shows: entries, types, modes, sizes, times, xattrs" {
    mkdir "$D"
    cp "$(fixture 1)" "$D/a-1_1.ckpt"
    $ST gen "$D/w.safetensors" --case alltypes
    $ORACLE gen "$D/m-1_1.ckpt" --case maptensor
    chmod 0400 "$D"/*
    chmod 0444 "$D/w.safetensors"
    mount_fg "$D" "$M"
    for f in a-1_1.ckpt w.safetensors m-1_1.ckpt; do
        mount_fg "$D/$f" "$T/one.$f" -o ro
        mounted_tree "$M/${f%.*}" >"$T/run.tree"
        mounted_tree "$T/one.$f" >"$T/one.tree"
        diff "$T/one.tree" "$T/run.tree"
        [ "$(wc -l <"$T/one.tree")" -gt 10 ]
    done
}

@test "a mixed directory: ckpt, ckpt.zst, safetensors, a sharded set shown; JSON, graph.meta, dot files, links, FIFOs, directories, other files not; ls -l does not block on the FIFO" {
    mkdir "$D" "$D/dir.ckpt"
    $ORACLE gen "$D/a-1_1.ckpt" --case alltypes
    $ORACLE gen "$T/plain.ckpt" --case sliced --seed 3
    zstd -q -c "$T/plain.ckpt" >"$D/b-1_1.ckpt.zst"
    $ST gen "$D/w.safetensors" --case alltypes --seed 1
    $ST gen-set "$D" --shards 2 --count 5
    echo '{"loss": 0.5}' >"$D/log.json"
    cp "$RUN/checkpoint_lenet-graph.meta" "$D/a-graph.meta"
    cp "$D/a-1_1.ckpt" "$D/.a-2_1.ckpt"
    ln -s a-1_1.ckpt "$D/link.ckpt"
    ln -s w.safetensors "$D/link.safetensors"
    mkfifo "$D/fifo.ckpt"
    echo notes >"$D/README.txt"
    # all written and read-only, as MindSpore leaves them
    chmod 0400 "$D/a-1_1.ckpt" "$D/b-1_1.ckpt.zst" "$D/w.safetensors" "$D"/model*.safetensors* \
        "$D/.a-2_1.ckpt"
    # names of different kinds: the newest by time, w.safetensors by an hour
    touch -h -d '-3 hours' "$D"/* "$D"/.a-2_1.ckpt
    touch -d '-1 hour' "$D/w.safetensors"
    mount_fg "$D" "$M"
    if ! timeout 120 ls -l "$M" >"$T/ls-l"; then
        timeout 10 sh -c ": >'$D/fifo.ckpt'" || true   # let a blocked open of the FIFO go
        echo "ls -l of the root failed or blocked" >&2
        false
    fi
    cat "$T/ls-l"
    printf '%s\n' a-1_1 b-1_1 latest model w >"$T/want"
    root_names | diff "$T/want" -
    dump_names "$D" | diff "$T/want" -
    [ "$(readlink "$M/latest")" = w ]
    [ "$(grep -c '^d' "$T/ls-l")" -eq 4 ]
    grep -q '^l.* latest -> w$' "$T/ls-l"
    $ORACLE check "$M/a-1_1" "$D/a-1_1.ckpt"
    $ORACLE check "$M/b-1_1" "$T/plain.ckpt"
    $ST check "$M/w" "$D/w.safetensors"
    $ST check "$M/model" "$D/model.safetensors.index.json"
    for n in fifo fifo.ckpt dir dir.ckpt link link.ckpt log log.json a-graph a-graph.meta \
             .a-2_1 README README.txt model-00001-of-00002 model-00002-of-00002; do
        [ ! -e "$M/$n" ]
    done
}

# opens TRACE FILE: how many times the traced daemon opened FILE (not O_PATH),
# by whatever path (absolute, or relative to the directory's descriptor)
opens() {
    grep -E 'open(at2?)?\(' "$1" | grep -v O_PATH | grep -cE "[\"/]${2//./\\.}\"" || true
}

traced_mount() {
    # LeakSanitizer cannot run under ptrace (make asan): no leak check here.
    CKPTFS="env ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0 strace -f -o $1 -e trace=open,openat,openat2 $CKPTFS" \
        mount_fg "$D" "$M" "${@:2}"
}

lazy_dir() {
    mkdir "$D"
    cp "$(fixture 1)" "$D/a-1_1.ckpt"
    cp "$(fixture 2)" "$D/a-2_1.ckpt"
    $ST gen "$D/w.safetensors" --case alltypes
    chmod 0400 "$D"/*
}

@test "lazy: listing the root (ls -l, latest) opens only the newest, once, to tell it opens; looking into one opens that one only" {
    lazy_dir
    traced_mount "$T/trace"
    ls -l "$M" >/dev/null
    ls -lL "$M" >/dev/null
    readlink "$M/latest"
    stat "$M/a-1_1" "$M/w" >/dev/null
    grep -q "openat(" "$T/trace"   # the trace works
    for f in a-1_1.ckpt a-2_1.ckpt w.safetensors; do
        echo "$f: $(opens "$T/trace" "$f") opens after listing"
    done
    [ "$(opens "$T/trace" a-1_1.ckpt)" -eq 0 ]
    [ "$(opens "$T/trace" a-2_1.ckpt)" -eq 0 ]
    # w, the newest (latest): opened and closed once, whatever was listed
    [ "$(opens "$T/trace" w.safetensors)" -eq 1 ]
    ls "$M/a-2_1" >/dev/null
    cat "$M/a-2_1/conv1.weight/out" >/dev/null
    [ "$(opens "$T/trace" a-2_1.ckpt)" -ge 1 ]
    [ "$(opens "$T/trace" a-1_1.ckpt)" -eq 0 ]
    [ "$(opens "$T/trace" w.safetensors)" -eq 1 ]
    ls -l "$M" >/dev/null
    ls "$M/w" >/dev/null
    [ "$(opens "$T/trace" w.safetensors)" -ge 2 ]
    [ "$(opens "$T/trace" a-1_1.ckpt)" -eq 0 ]
    $ORACLE check "$M/a-2_1" "$D/a-2_1.ckpt"
    $ST check "$M/w" "$D/w.safetensors"
    [ "$(opens "$T/trace" a-1_1.ckpt)" -eq 0 ]
}

@test "lazy: -o index_cache smaller than one index closes the others, which are reopened on the next look and still right; a held descriptor keeps reading" {
    lazy_dir
    traced_mount "$T/trace" -o index_cache=1K
    $ORACLE fake-tree "$T/exp" "$D/a-1_1.ckpt"
    ls "$M/a-1_1" >/dev/null
    [ "$(opens "$T/trace" a-1_1.ckpt)" -ge 1 ]
    first=$(opens "$T/trace" a-1_1.ckpt)
    # a reader holds one of its files while the others push its index out
    exec 7<"$M/a-1_1/fc1.weight/out"
    readat 0 4096
    original_at 0 4096 | cmp - "$T/got"
    ls "$M/a-2_1" >/dev/null
    ls "$M/w" >/dev/null
    cat "$M/a-2_1/fc1.weight/out" "$M/w/"*/out >/dev/null
    # not deleted nor replaced: the held descriptor still reads the right bytes
    readat 184320 4096
    original_at 184320 4096 | cmp - "$T/got"
    readat 163840 4096
    original_at 163840 4096 | cmp - "$T/got"
    exec 7<&-
    $ORACLE check "$M/a-1_1" "$D/a-1_1.ckpt"
    echo "a-1_1.ckpt opened $first, then $(opens "$T/trace" a-1_1.ckpt) times"
    [ "$(opens "$T/trace" a-1_1.ckpt)" -gt "$first" ]
    $ORACLE check "$M/a-2_1" "$D/a-2_1.ckpt"
    $ST check "$M/w" "$D/w.safetensors"
    $ORACLE check "$M/a-1_1" "$D/a-1_1.ckpt"
}

# reader: poll the mount; copy each checkpoint whose snapshot_done shows, once,
# to $C/<name> (a copy that fails - the writer may delete it meanwhile - is
# dropped and noted).  After $T/stop appears, one more pass, then return.
reader() {
    local i n stop=0
    for i in $(seq 1 4000); do
        [ -e "$T/stop" ] && stop=1
        for n in $(ls "$M" 2>/dev/null); do
            [ "$n" = latest ] && continue
            [ -e "$C/$n" ] && continue
            [ -e "$M/$n/snapshot_done" ] || continue
            if cp -r "$M/$n" "$C/.part" 2>>"$T/cp.err"; then
                mv "$C/.part" "$C/$n"
                echo "$n" >>"$T/copied"
            else
                rm -rf "$C/.part"
                echo "copy of $n failed" >>"$T/cp.err"
            fi
        done
        [ "$stop" = 1 ] && return 0
        sleep 0.02
    done
}

# live_run [ckptfs options]: the live case
live_run() {
    C=$T/copies
    P=$T/pristine
    mkdir "$D" "$C" "$P"
    mount_fg "$D" "$M" -o settle=60 "$@"
    [ -z "$(ls -A "$M")" ]
    [ ! -L "$M/latest" ]
    reader &
    echo $! >"$T/reader.pid"
    # two runs of 4 epochs, keep_checkpoint_max 3; save 2 through a .tmp
    # name, save 5 (the second run's epoch 2) begun halfway through save 4
    $WRITER "$D" "$P" --prefix lenet --runs 4,4 --step 10 --keep 3 --pieces 6 --pause 0.1 \
        --overlap 5 --via-tmp 2 >"$T/writer.log"
    cat "$T/writer.log"
    # what ModelCheckpoint leaves: the first run's last 3 epochs, and the
    # second run's (prefix renamed lenet_1) last 3; its epoch 4 the newest
    printf '%s\n' latest lenet-2_10 lenet-3_10 lenet-4_10 lenet_1-2_10 lenet_1-3_10 lenet_1-4_10 >"$T/want"
    (ls "$D" | sed 's/\.ckpt$//'; echo latest) | LC_ALL=C sort | diff "$T/want" -
    for i in $(seq 1 400); do
        root_names | cmp -s "$T/want" - && break
        sleep 0.05
    done
    root_names | diff "$T/want" -
    touch "$T/stop"
    wait "$(cat "$T/reader.pid")"
    : >"$T/reader.pid"
    [ "$(readlink "$M/latest")" = lenet_1-4_10 ]
    run ls "$M/lenet-1_10"
    [ "$status" -ne 0 ]
    run ls "$M/lenet_1-1_10"
    [ "$status" -ne 0 ]
    echo "copied: $(tr '\n' ' ' <"$T/copied")"
    cat "$T/cp.err" 2>/dev/null || true
    # every copy is a whole checkpoint the writer wrote: the oracle's tree of it
    (cd "$P" && ls) | sed 's/\.ckpt$//' | LC_ALL=C sort >"$T/written"
    [ "$(wc -l <"$T/written")" -eq 8 ]
    ls -A "$C" | LC_ALL=C sort >"$T/copied.names"
    comm -13 "$T/written" "$T/copied.names" >"$T/strangers"
    [ ! -s "$T/strangers" ]
    for n in $(cat "$T/copied.names"); do
        $ORACLE fake-tree "$T/exp/$n" "$P/$n.ckpt"
        diff -r "$T/exp/$n" "$C/$n"
    done
    # the reader saw each checkpoint that is still there
    for n in $(grep -v latest "$T/want"); do
        grep -qxF "$n" "$T/copied.names"
        $ORACLE check "$M/$n" "$P/$n.ckpt"
    done
}

@test "live: a ModelCheckpoint writer (pieces at 0644, chmod 0400, keep 3, a reused prefix, an overlapping save); a reader copying each new checkpoint gets it whole" {
    live_run
}

@test "-o threads with a directory: refused with one line naming it, nothing mounted (a run is served on one thread)" {
    mkdir -p "$D" "$M"
    echo "0 $M" >>"$T/mounts" # torn down if it did mount
    run $CKPTFS -o threads "$D" "$M"
    echo "$output"
    [ "$status" -ne 0 ]
    [ "${#lines[@]}" -eq 1 ]
    [[ "$output" == "ckptfs: $D: "* ]]
    ! mountpoint -q "$M" || false
}

# readat OFFSET LENGTH: pread of fd 7 (bats keeps 3 for itself); status 0 and the bytes in $T/got, or
# status 1 and the error
readat() {
    $PY -c '
import os, sys
try:
    data = os.pread(7, int(sys.argv[2]), int(sys.argv[1]))
except OSError as e:
    print("error", e.errno, e.strerror)
    sys.exit(1)
open(sys.argv[3], "wb").write(data)
print("read", len(data), "bytes")' "$1" "$2" "$T/got"
}

# original_at OFFSET LENGTH: the same range of the original tensor
original_at() {
    tail -c +$(($1 + 1)) "$T/exp/fc1.weight/out" | head -c "$2"
}

# error_or_original OFFSET LENGTH: a read through fd 7 fails or gives the
# original bytes
error_or_original() {
    if readat "$1" "$2"; then
        original_at "$1" "$2" | cmp - "$T/got"
    else
        echo "read at $1 refused"
    fi
}

# shifted SRC OUT: SRC's checkpoint with one small record in front: the same
# tensors, each at another offset (read with SRC's offsets, OUT gives other bytes)
shifted() {
    $PY -c '
import sys
sys.path.insert(0, sys.argv[3])
import ckpt_oracle as co
head = co.record(co.tensor_value("aaa.first", "Float32", [3], b"\x01" * 12))
co.write_file(sys.argv[2], [head, open(sys.argv[1], "rb").read()])' "$1" "$2" "$REPO/tests/oracle"
}

@test "deleted, then replaced, under a reader: its held descriptor reads an error or the original bytes, never others; the name goes away" {
    mkdir "$D"
    cp "$(fixture 1)" "$D/x-1_1.ckpt"
    cp "$(fixture 2)" "$D/y-1_1.ckpt"
    chmod 0400 "$D"/*
    cp "$(fixture 1)" "$T/orig.ckpt"
    $ORACLE fake-tree "$T/exp" "$T/orig.ckpt"
    size=$(stat -c %s "$T/exp/fc1.weight/out")
    [ "$size" -ge 192000 ]
    mount_fg "$D" "$M"
    exec 7<"$M/x-1_1/fc1.weight/out"
    readat 0 4096
    original_at 0 4096 | cmp - "$T/got"
    rm -f "$D/x-1_1.ckpt"
    until_gone x-1_1
    # offsets far from what was read (and read ahead) before
    error_or_original 184320 4096
    run ls "$M/x-1_1"
    [ "$status" -ne 0 ]
    # the same name again, other contents at other offsets
    shifted "$(fixture 3)" "$D/x-1_1.ckpt"
    chmod 0400 "$D/x-1_1.ckpt"
    until_listed x-1_1
    error_or_original 163840 4096
    error_or_original 0 4096
    exec 7<&-
    # a new look sees the new file
    $ORACLE check "$M/x-1_1" "$D/x-1_1.ckpt"
    $ORACLE check "$M/y-1_1" "$(fixture 2)"
}

# fresh_is_old_or_new: a new open of x-1_1's fc1.weight/out reads the old
# tensor or the new one (status 0: new; 1: old), or fails (status 1); anything
# else fails the test (status 2)
fresh_is_old_or_new() {
    cat "$M/x-1_1/fc1.weight/out" >"$T/fresh" 2>/dev/null || return 1
    cmp -s "$T/fresh" "$T/new/fc1.weight/out" && return 0
    cmp -s "$T/fresh" "$T/exp/fc1.weight/out" && return 1
    echo "a fresh read of fc1.weight/out gave neither the old nor the new bytes" >&2
    return 2
}

# until_new: fresh reads give the new tensor (bounded), never other bytes
until_new() {
    local i st
    for i in $(seq 1 400); do
        st=0
        fresh_is_old_or_new || st=$?
        [ "$st" -eq 0 ] && return 0
        [ "$st" -eq 2 ] && return 1
        sleep 0.05
    done
    echo "the new contents never showed" >&2
    return 1
}

@test "replaced by rename over its name (no moment without it): a held descriptor errors or reads the original; new opens read the old or the new tensor, then the new" {
    mkdir "$D"
    cp "$(fixture 1)" "$D/x-1_1.ckpt"
    chmod 0400 "$D/x-1_1.ckpt"
    $ORACLE fake-tree "$T/exp" "$(fixture 1)"
    shifted "$(fixture 2)" "$T/x.tmp"
    $ORACLE fake-tree "$T/new" "$T/x.tmp"
    mount_fg "$D" "$M"
    exec 7<"$M/x-1_1/fc1.weight/out"
    readat 0 4096
    original_at 0 4096 | cmp - "$T/got"
    chmod 0400 "$T/x.tmp"
    mv "$T/x.tmp" "$D/x-1_1.ckpt"
    until_new
    error_or_original 184320 4096
    error_or_original 163840 4096
    exec 7<&-
    $ORACLE check "$M/x-1_1" "$D/x-1_1.ckpt"
}

@test "rewritten in place (a writable checkpoint): it leaves the listing until settled again; a held descriptor errors or reads the original, never the new bytes" {
    mkdir "$D"
    cp "$(fixture 1)" "$D/x-1_1.ckpt"
    chmod 0644 "$D/x-1_1.ckpt"
    touch -d '-1 hour' "$D/x-1_1.ckpt"
    $ORACLE fake-tree "$T/exp" "$(fixture 1)"
    shifted "$(fixture 2)" "$T/x.new"
    $ORACLE fake-tree "$T/new" "$T/x.new"
    mount_fg "$D" "$M" -o settle=3
    listed x-1_1
    exec 7<"$M/x-1_1/fc1.weight/out"
    readat 0 4096
    original_at 0 4096 | cmp - "$T/got"
    # the same inode, other bytes (as `cp NEW x-1_1.ckpt` does)
    cat "$T/x.new" >"$D/x-1_1.ckpt"
    until_gone x-1_1      # changed and writable: being written
    error_or_original 184320 4096
    until_listed x-1_1    # settled
    error_or_original 163840 4096
    exec 7<&-
    until_new
    $ORACLE check "$M/x-1_1" "$D/x-1_1.ckpt"
}

@test "latest follows: a newer checkpoint moves it, deleting the newest moves it back, none left removes it" {
    mkdir "$D"
    cp "$(fixture 1)" "$D/lenet-1_5.ckpt"
    chmod 0400 "$D"/*
    mount_fg "$D" "$M"
    [ "$(readlink "$M/latest")" = lenet-1_5 ]
    # a later epoch; then the next run's (renamed prefix), whatever its epoch
    cp "$(fixture 2)" "$D/lenet-2_5.ckpt"
    chmod 0400 "$D/lenet-2_5.ckpt"
    until_listed lenet-2_5
    [ "$(readlink "$M/latest")" = lenet-2_5 ]
    cp "$(fixture 3)" "$D/lenet_1-1_5.ckpt"
    chmod 0400 "$D/lenet_1-1_5.ckpt"
    until_listed lenet_1-1_5
    [ "$(readlink "$M/latest")" = lenet_1-1_5 ]
    $ORACLE check "$M/latest" "$(fixture 3)"
    rm -f "$D/lenet_1-1_5.ckpt"
    until_gone lenet_1-1_5
    [ "$(readlink "$M/latest")" = lenet-2_5 ]
    $ORACLE check "$M/latest" "$(fixture 2)"
    rm -f "$D"/*.ckpt
    until_gone lenet-2_5
    until_gone lenet-1_5
    [ -z "$(ls -A "$M")" ]
    [ ! -L "$M/latest" ]
}

@test "links swapped in: a checkpoint's name made a symlink is no longer it (never the link's target); a renamed run directory with a link in its place is still the one followed" {
    mkdir "$D" "$T/elsewhere"
    cp "$(fixture 1)" "$D/x-1_1.ckpt"
    cp "$(fixture 2)" "$D/y-1_1.ckpt"
    $ORACLE gen "$T/outside.ckpt" --case alltypes
    $ORACLE gen "$T/elsewhere/z-1_1.ckpt" --case sliced
    chmod 0400 "$D"/* "$T/outside.ckpt" "$T/elsewhere"/*
    mount_fg "$D" "$M"
    printf '%s\n' latest x-1_1 y-1_1 | diff - <(root_names)
    # listed, never looked into; now a link to a checkpoint outside the run
    rm -f "$D/x-1_1.ckpt"
    ln -s "$T/outside.ckpt" "$D/x-1_1.ckpt"
    run ls "$M/x-1_1"
    echo "$output"
    [ "$status" -ne 0 ]
    until_gone x-1_1
    run ls "$M/x-1_1"
    [ "$status" -ne 0 ]
    # the directory renamed, a link to another one in its place: the mount
    # goes on with the directory it was given
    mv "$D" "$T/run.old"
    ln -s "$T/elsewhere" "$D"
    cp "$(fixture 3)" "$T/run.old/w-1_1.ckpt"
    chmod 0400 "$T/run.old/w-1_1.ckpt"
    until_listed w-1_1
    printf '%s\n' latest w-1_1 y-1_1 | diff - <(root_names)
    $ORACLE check "$M/y-1_1" "$(fixture 2)"
    $ORACLE check "$M/w-1_1" "$(fixture 3)"
    [ ! -e "$M/z-1_1" ]
}

@test "settle: a writable .safetensors shows only once unchanged for -o settle seconds; an old writable one at once" {
    mkdir "$D"
    $ST gen "$D/old.safetensors" --case scalars
    chmod 0644 "$D/old.safetensors"
    touch -d '-1 hour' "$D/old.safetensors"
    $ST gen "$T/new.safetensors" --case alltypes --seed 2
    mount_fg "$D" "$M" -o settle=2
    printf '%s\n' latest old | diff - <(root_names)
    [ "$(readlink "$M/latest")" = old ]
    cp "$T/new.safetensors" "$D/new.safetensors"
    chmod 0644 "$D/new.safetensors"
    # just written: not complete yet, neither listed nor found by name
    ! listed new || false
    [ ! -e "$M/new" ]
    [ "$(readlink "$M/latest")" = old ]
    until_listed new
    printf '%s\n' latest new old | diff - <(root_names)
    $ST check "$M/new" "$D/new.safetensors"
    $ST check "$M/old" "$D/old.safetensors"
    # the newest by time
    [ "$(readlink "$M/latest")" = new ]
}

@test "a corrupt checkpoint is listed, looking into it fails (EIO), one log line names the file and offset; latest passes over it; the others still work" {
    mkdir "$D"
    cp "$(fixture 1)" "$D/net-1_1.ckpt"
    off=$($ORACLE bad "$D/net-2_1.ckpt" --case truncated)
    chmod 0400 "$D"/*
    mount_fg "$D" "$M" -o log="$T/log"
    printf '%s\n' latest net-1_1 net-2_1 | diff - <(root_names)
    # newest by name, but it does not open (run_broken.bats): the next one
    [ "$(readlink "$M/latest")" = net-1_1 ]
    run ls "$M/net-2_1"
    echo "$output"
    [ "$status" -ne 0 ]
    [[ $output == *"Input/output error"* ]]
    run cat "$M/net-2_1/snapshot_done"
    [ "$status" -ne 0 ]
    ls "$M/latest/" >/dev/null
    cat "$T/log"
    [ "$(grep -c 'net-2_1\.ckpt' "$T/log")" -eq 1 ]
    grep 'net-2_1\.ckpt' "$T/log" | grep -qw "$off"
    grep -q 'net-2_1\.ckpt' "$T/daemon.log"   # and on stderr, with -f
    $ORACLE check "$M/net-1_1" "$(fixture 1)"
}

# nobody CMD...: CMD as another user without root's groups, in the mount
nobody() {
    (cd "$M" && setpriv --reuid=65534 --regid=65534 --clear-groups "$@")
}

@test "read-only without -o rw: -o create with a directory is refused with one line, nothing mounted; nothing is writable; another user cannot read a 0400 checkpoint" {
    mkdir "$D"
    cp "$(fixture 1)" "$D/own-1_1.ckpt"
    cp "$(fixture 2)" "$D/pub-1_1.ckpt"
    chmod 0400 "$D/own-1_1.ckpt"
    chmod 0444 "$D/pub-1_1.ckpt"
    mkdir -p "$M"
    echo "0 $M" >>"$T/mounts"   # torn down if it did mount
    st=0
    $CKPTFS -o create "$D" "$M" >"$T/out" 2>"$T/err" || st=$?
    cat "$T/err"
    [ "$st" -ne 0 ]
    [ "$(wc -l <"$T/err")" -eq 1 ]
    [ ! -s "$T/out" ]
    ! mountpoint -q "$M" || false
    ! grep -qF " $M " /proc/mounts || false

    mount_fg "$D" "$M" -o allow_other
    ls -l "$D" >"$T/before"
    run touch "$M/new"
    [ "$status" -ne 0 ]
    run mkdir "$M/new"
    [ "$status" -ne 0 ]
    run sh -c "printf x >'$M/own-1_1/conv1.weight/out'"
    [ "$status" -ne 0 ]
    run rm -rf "$M/pub-1_1"
    [ "$status" -ne 0 ]
    ls -l "$D" | diff "$T/before" -
    cmp "$D/own-1_1.ckpt" "$(fixture 1)"
    # the owner reads both; another user the 0444 one only
    $ORACLE check "$M/own-1_1" "$(fixture 1)"
    run nobody cat own-1_1/conv1.weight/out
    echo "$output"
    [ "$status" -ne 0 ]
    [[ $output == *"Permission denied"* ]]
    run nobody cat own-1_1/conv1.weight/meta
    [ "$status" -ne 0 ]
    nobody cat pub-1_1/conv1.weight/out | cmp - "$M/pub-1_1/conv1.weight/out"
}

# onnx_external OUT SEED: an ONNX model OUT whose one initializer "w" (4x3
# float32 from SEED) is stored in the external data file w.bin beside it, as
# onnx's save_as_external_data writes it
onnx_external() {
    $PY - "$1" "$2" <<'PYEOF'
import os, sys
import numpy as np
import onnx
from onnx import helper, numpy_helper, TensorProto
out, seed = sys.argv[1], int(sys.argv[2])
w = np.random.default_rng(seed).standard_normal((4, 3)).astype(np.float32)
g = helper.make_graph([helper.make_node("Identity", ["w"], ["y"])], "g", [],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 3])],
                      [numpy_helper.from_array(w, "w")])
m = helper.make_model(g)
onnx.save_model(m, out, save_as_external_data=True, all_tensors_to_one_file=True,
                location="w.bin", size_threshold=0)
PYEOF
}

# onnx_w MODEL: the bytes of initializer w, as onnx loads them (external data included)
onnx_w() {
    $PY -c 'import sys, onnx; from onnx import numpy_helper
m = onnx.load(sys.argv[1]); sys.stdout.buffer.write(numpy_helper.to_array(m.graph.initializer[0]).tobytes())' "$1"
}

@test "a checkpoint in rank_<id>/ reads its data files beside it: a sharded set's shards, an ONNX model's external data; never the run directory's files of the same names" {
    mkdir -p "$D/rank_0" "$D/rank_1" "$T/other"
    $ST gen-set "$D/rank_0" --shards 2 --count 5 --seed 1
    onnx_external "$D/rank_1/net.onnx" 1
    # the same names at the top of the run, other bytes
    $ST gen-set "$T/other" --shards 2 --count 5 --seed 2
    cp "$T"/other/model-0000?-of-00002.safetensors "$D/"
    onnx_external "$T/other/net.onnx" 2
    cp "$T/other/w.bin" "$D/w.bin"
    ! cmp -s "$D/w.bin" "$D/rank_1/w.bin" || false
    chmod 0444 "$D"/*.safetensors "$D"/rank_*/*
    mount_fg "$D" "$M"
    $ST check "$M/rank_0" "$D/rank_0/model.safetensors.index.json"
    onnx_w "$D/rank_1/net.onnx" | cmp - "$M/rank_1/w/out"
    unmount "$M"
    # with no such files at the top, they still open
    rm "$D"/model-0000?-of-00002.safetensors "$D/w.bin"
    mount_fg "$D" "$M"
    $ST check "$M/rank_0" "$D/rank_0/model.safetensors.index.json"
    onnx_w "$D/rank_1/net.onnx" | cmp - "$M/rank_1/w/out"
}

# nobody_reads_all DIR: nobody reads every out and meta under DIR (a mounted
# checkpoint), each equal to what the owner reads
nobody_reads_all() {
    local f
    for f in "$M/$1"/*/out "$M/$1"/*/meta; do
        nobody cat "${f#"$M/"}" | cmp - "$f"
    done
}

# nobody_refused DIR: nobody's read of every out and meta under DIR fails with
# EACCES (before the owner reads anything there: the kernel keeps what was read)
nobody_refused() {
    local f
    for f in "$M/$1"/*/out "$M/$1"/*/meta; do
        run nobody cat "${f#"$M/"}"
        echo "$f: $status ${output:0:60}"
        [ "$status" -ne 0 ]
        [[ $output == *"Permission denied"* ]]
    done
}

@test "allow_other: another user reads through the mount what they could read on disk: nothing of a checkpoint in a 0700 rank_<id>/ or iteration_<N>/ (EACCES), the rest; the owner everything; a chmod of the directory counts at once" {
    mkdir -p "$D/rank_0" "$D/rank_1"
    cp "$(fixture 1)" "$D/rank_0/net.ckpt"
    cp "$(fixture 2)" "$D/rank_1/net.ckpt"
    $ITER gen "$T/it" --case tp2 --seed 1
    mv "$T/it/iteration_00000010" "$D/"
    printf 10 >"$D/latest_checkpointed_iteration.txt"
    $ITER file-tree "$T/it/full.safetensors" "$T/it/full"
    chmod 0444 "$D"/rank_*/net.ckpt "$D"/iteration_00000010/*
    chmod 0755 "$D" "$D/rank_0"
    chmod 0700 "$D/rank_1" "$D/iteration_00000010"
    # on disk, from the run directory: nobody reads rank_0's file, not
    # rank_1's nor the iteration's
    M=$D nobody cat rank_0/net.ckpt >/dev/null
    ! M=$D nobody cat rank_1/net.ckpt >/dev/null || false
    ! M=$D nobody cat "iteration_00000010/$(ls "$D/iteration_00000010" | head -1)" >/dev/null ||
        false
    mount_fg "$D" "$M" -o allow_other
    nobody_refused rank_1
    nobody_refused iteration_00000010
    nobody_reads_all rank_0
    # the owner reads them all, right
    $ORACLE check "$M/rank_0" "$(fixture 1)"
    $ORACLE check "$M/rank_1" "$(fixture 2)"
    diff -r "$T/it/full" "$M/iteration_00000010"
    # the directories opened: their files are now readable on disk, and through the mount
    chmod 0755 "$D/rank_1" "$D/iteration_00000010"
    nobody_reads_all rank_1
    nobody_reads_all iteration_00000010
}

# ---------------------------------------------------------------------------
# Following the run: every complete checkpoint shown, and only those (issue 26)

# put_ro SRC NAME: SRC's bytes as $D/NAME, moved in read-only and whole
# (rename: one event; no moment half written)
put_ro() {
    cp "$1" "$T/put.tmp"
    chmod 0400 "$T/put.tmp"
    mv "$T/put.tmp" "$D/$2"
}

# until_sentinel NAME: a complete checkpoint moved in as NAME is listed; the
# watcher has then taken every event before it (they come in order)
until_sentinel() {
    put_ro "$(fixture 3)" "$1.ckpt"
    until_listed "$1"
}

@test "arrived by link(2): ln, cp -l and an O_TMPFILE published with linkat are listed once complete, and read whole" {
    mkdir "$D"
    put_ro "$(fixture 1)" lenet-1_5.ckpt
    for e in 1 2 3; do
        cp "$(fixture $e)" "$T/src$e.ckpt"
        chmod 0400 "$T/src$e.ckpt"
    done
    mount_fg "$D" "$M" -o settle=1
    ln "$T/src2.ckpt" "$D/lenet-2_5.ckpt"
    until_listed lenet-2_5
    cp -l "$T/src3.ckpt" "$D/lenet-3_5.ckpt"
    until_listed lenet-3_5
    # a writer publishing atomically: written unnamed, then linked in
    $PY - "$D" lenet-4_5.ckpt "$T/src1.ckpt" <<'PY'
import ctypes, os, sys
d, name, src = sys.argv[1:]
fd = os.open(d, os.O_TMPFILE | os.O_WRONLY, 0o400)
with open(src, "rb") as f:
    data = f.read()
while data:
    data = data[os.write(fd, data):]
# linkat(2) as open(2) documents it for O_TMPFILE (os.link does not follow)
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, AT_SYMLINK_FOLLOW = -100, 0x400
if libc.linkat(AT_FDCWD, b"/proc/self/fd/%d" % fd, AT_FDCWD,
               os.path.join(d, name).encode(), AT_SYMLINK_FOLLOW) != 0:
    raise OSError(ctypes.get_errno(), "linkat")
os.close(fd)
PY
    until_listed lenet-4_5
    printf '%s\n' latest lenet-1_5 lenet-2_5 lenet-3_5 lenet-4_5 | diff - <(root_names)
    [ "$(readlink "$M/latest")" = lenet-4_5 ]
    $ORACLE check "$M/lenet-2_5" "$(fixture 2)"
    $ORACLE check "$M/lenet-3_5" "$(fixture 3)"
    $ORACLE check "$M/lenet-4_5" "$(fixture 1)"
}

@test "an inotify queue overflow: a checkpoint whose close and chmod were lost is listed once settled" {
    mkdir "$D"
    put_ro "$(fixture 1)" lenet-1_5.ckpt
    mount_fg "$D" "$M" -o settle=1
    pid=$(daemon_pid)
    half=$(($(stat -c %s "$(fixture 2)") / 2))
    # a writer has the next checkpoint open, half written: the daemon knows
    exec 8>"$D/lenet-2_5.ckpt"
    head -c "$half" "$(fixture 2)" >&8
    until_sentinel lenet-0_5
    ! listed lenet-2_5 || false
    # the daemon stops reading; more events than its queue holds, then the
    # rest of the file, its close and its chmod: all lost
    echo "$pid" >"$T/stopped.pid"
    kill -STOP "$pid"
    queue=$(cat /proc/sys/fs/inotify/max_queued_events)
    $PY - "$D" "$queue" <<'PY'
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
for i in range(n):  # each at least a create and a close
    os.close(os.open(os.path.join(d, "flood%d" % i), os.O_CREAT | os.O_WRONLY, 0o644))
PY
    tail -c +$((half + 1)) "$(fixture 2)" >&8
    exec 8>&-
    chmod 0400 "$D/lenet-2_5.ckpt"
    kill -CONT "$pid"
    rm -f "$T/stopped.pid"
    until_listed lenet-2_5
    [ "$(readlink "$M/latest")" = lenet-2_5 ]
    $ORACLE check "$M/lenet-2_5" "$(fixture 2)"
    find "$D" -name 'flood*' -delete
}

@test "subdirectories followed: a rank_<id>/ and an iteration_<N>/ made empty, then filled, are listed once complete" {
    mkdir "$D"
    put_ro "$(fixture 1)" lenet-1_5.ckpt
    $PY "$REPO/tests/oracle/iteration_oracle.py" gen "$T/it" --case tp2 --seed 1
    $PY "$REPO/tests/oracle/iteration_oracle.py" file-tree "$T/it/full.safetensors" "$T/it/full"
    mount_fg "$D" "$M" -o settle=1
    mkdir "$D/rank_0" "$D/iteration_00000010"
    until_sentinel lenet-0_5   # the empty directories were seen
    ! listed rank_0 || false
    ! listed iteration_00000010 || false
    cp "$(fixture 2)" "$D/rank_0/net.ckpt"
    chmod 0400 "$D/rank_0/net.ckpt"
    until_listed rank_0
    $ORACLE check "$M/rank_0" "$(fixture 2)"
    cp "$T/it/iteration_00000010"/* "$D/iteration_00000010/"
    chmod 0400 "$D/iteration_00000010"/*
    until_listed iteration_00000010
    diff -r "$T/it/full" "$M/iteration_00000010"
    # deleted and made again: followed again
    rm -r "$D/rank_0"
    until_gone rank_0
    mkdir "$D/rank_0"
    until_sentinel lenet-0_6
    cp "$(fixture 3)" "$D/rank_0/net.ckpt"
    chmod 0400 "$D/rank_0/net.ckpt"
    until_listed rank_0
    $ORACLE check "$M/rank_0" "$(fixture 3)"
}

@test "latest while a newer checkpoint is written read-only from the start (cp of a 0444 file): it stays on the newest complete one" {
    mkdir "$D"
    put_ro "$(fixture 1)" lenet-1_5.ckpt
    mount_fg "$D" "$M" -o settle=1
    [ "$(readlink "$M/latest")" = lenet-1_5 ]
    half=$(($(stat -c %s "$(fixture 2)") / 2))
    umask 0333
    exec 8>"$D/lenet-2_5.ckpt"
    umask 0022
    [ "$(stat -c %a "$D/lenet-2_5.ckpt")" = 444 ]
    head -c "$half" "$(fixture 2)" >&8
    until_sentinel lenet-0_5   # the half-written one was seen
    ! listed lenet-2_5 || false
    [ "$(readlink "$M/latest")" = lenet-1_5 ]
    $ORACLE check "$M/latest" "$(fixture 1)"
    tail -c +$((half + 1)) "$(fixture 2)" >&8
    exec 8>&-
    until_listed lenet-2_5
    [ "$(readlink "$M/latest")" = lenet-2_5 ]
    $ORACLE check "$M/latest" "$(fixture 2)"
}

@test "out of descriptors for a while (ulimit -n 300, 58 checkpoints open, a 180-shard set): the idle ones are closed and it opens; no failure is kept" {
    mkdir "$D"
    for i in $(seq 1 58); do
        $ST gen "$D/c$i.safetensors" --case scalars --seed "$i"
    done
    $ST gen-set "$D" --shards 180 --count 180
    # a second such set, other.safetensors.index.json and other-*-of-00180
    mkdir "$T/s2"
    $ST gen-set "$T/s2" --shards 180 --count 180 --seed 2
    $PY - "$T/s2" "$D" <<'PY'
import json, os, sys
src, dst = sys.argv[1:]
with open(os.path.join(src, "model.safetensors.index.json")) as f:
    index = json.load(f)
for shard in set(index["weight_map"].values()):
    os.rename(os.path.join(src, shard), os.path.join(dst, "other" + shard[len("model"):]))
index["weight_map"] = {k: "other" + v[len("model"):] for k, v in index["weight_map"].items()}
with open(os.path.join(dst, "other.safetensors.index.json"), "w") as f:
    json.dump(index, f, indent=2, sort_keys=True)
PY
    chmod 0400 "$D"/*
    CKPTFS="prlimit --nofile=300:300 $CKPTFS" mount_fg "$D" "$M"
    pid=$(daemon_pid)
    for i in $(seq 1 58); do
        ls "$M/c$i" >/dev/null
    done
    # 58 open hold 116 descriptors: the set's 181 fit once they are closed
    $ST check "$M/model" "$D/model.safetensors.index.json"
    $ST check "$M/c1" "$D/c1.safetensors"
    # with a limit nothing closed can meet, this request fails; with the
    # limit back, the next one opens it
    prlimit --pid "$pid" --nofile=100:300
    run ls "$M/other"
    echo "$output"
    [ "$status" -ne 0 ]
    cat "$T/daemon.log"
    grep -F "/other" "$T/daemon.log" | grep -F "tried again"
    prlimit --pid "$pid" --nofile=300:300
    $ST check "$M/other" "$D/other.safetensors.index.json"
    $ST check "$M/model" "$D/model.safetensors.index.json"
}

# held: the daemon (pid $pid) has a descriptor of $D/$1
held() { ls -l "/proc/$pid/fd" | grep -qF -- "$D/$1"; }

@test "a deleted checkpoint's file is let go once the listing drops it, with no request into another checkpoint" {
    mkdir "$D"
    put_ro "$(fixture 1)" a-1_1.ckpt
    put_ro "$(fixture 2)" b-1_1.ckpt
    mount_fg "$D" "$M"
    pid=$(daemon_pid)
    $ORACLE check "$M/a-1_1" "$(fixture 1)"
    held a-1_1.ckpt
    rm -f "$D/a-1_1.ckpt"
    until_gone a-1_1
    for _ in $(seq 1 400); do held a-1_1.ckpt || break; sleep 0.05; done
    ls -l "/proc/$pid/fd"
    ! held a-1_1.ckpt || false
    $ORACLE check "$M/b-1_1" "$(fixture 2)"
}
