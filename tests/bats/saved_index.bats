#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# A .ckpt's saved index (codec/core/saved_index.h): the second mount reads
# its first 4 KiB instead of every record header; a file replaced under a
# matching index never shows a wrong byte; a corrupt, foreign or planted
# index is never trusted; -o noindex and -o index_dir.

load helpers

# the oracles' calls through one Python that imported them (helpers.bash)
setup_file() { pyserve_file_start numpy "$REPO/tests/oracle/ckpt_oracle.py" onnx "$REPO/tests/oracle/graph_oracle.py"; }
teardown_file() { pyserve_file_stop; }

setup() {
    T=$BATS_TEST_TMPDIR
    # Never the user's cache, nor the suite's: this test's own.
    export XDG_CACHE_HOME=$T/cache HOME=$T/home
    IDX=$T/cache/ckptfs
    M=$T/m
}

# gen FILE COUNT SIZE: a checkpoint of COUNT tensors, SIZE bytes in all.
gen() { $PY "$REPO/bench/gen_ckpt.py" "$1" --size "$3" --count "$2"; }

# rchar PID: the bytes the daemon has read so far (files and pipes).
rchar() { awk '/^rchar:/ {print $2}' "/proc/$1/io"; }

# mount_rchar MODEL [options]: mount, print the daemon's rchar once the
# mount is up, unmount.
mount_rchar() {
    local f=$1
    shift
    mount_fg "$f" "$M" "$@"
    rchar "$(daemon_pid)"
    unmount "$M"
}

# content FILE TAG: the bytes of a gen_ckpt tensor, found in the file
# (tensor_content, field 3, follows its type string).
content() {
    $PY - "$1" "$2" <<'EOF'
import sys
b = open(sys.argv[1], "rb").read()
i = b.index(b"Float32", b.index(sys.argv[2].encode() + b"\x12")) + 7
assert b[i] == 0x1A
i += 1
n = s = 0
while True:
    n |= (b[i] & 0x7F) << s
    s += 7
    i += 1
    if b[i - 1] < 0x80:
        break
sys.stdout.buffer.write(b[i:i + n])
EOF
}

# the index file of model $1 in $2 (default $IDX)
index_of() {
    local real
    real=$(realpath "$1")
    echo "${2:-$IDX}/$(printf %s "$real" | sha256sum | cut -d' ' -f1).ckidx"
}

@test "the second mount reads far less than the first, and shows the same bytes" {
    f=$T/big.ckpt
    gen "$f" 2000 $((64 << 20))
    first=$(mount_rchar "$f")
    [ -f "$(index_of "$f")" ]
    [ "$(stat -c %a "$IDX")" = 700 ]
    [ "$(stat -c %a "$(index_of "$f")")" = 600 ]
    second=$(mount_rchar "$f")
    echo "rchar: first mount $first, second $second" >&3
    # The first reads every record header (16 MiB here: its read window
    # around each); the second the index and the first 4 KiB.
    [ "$second" -lt $((first / 20)) ]
    [ "$second" -lt $((1 << 20)) ]
    mount_fg "$f" "$M"
    [ "$(ls "$M" | grep -c '^layer\.')" -eq 2000 ]
    run $ORACLE check "$M" "$f"
    [ "$status" -eq 0 ]
}

@test "the index is used by a mount of a fixture, which reads back as the oracle says" {
    f=$T/lenet.ckpt
    cp "$MS/mindarmour_checkpoint_lenet-10_1875.ckpt" "$f"
    mount_fg "$f" "$M"
    unmount "$M"
    [ -f "$(index_of "$f")" ]
    mount_fg "$f" "$M" -o ro
    run $ORACLE check "$M" "$f"
    [ "$status" -eq 0 ]
    cat "$M/fc3.bias/meta" >/dev/null
}

# replace FILE: other tensor bytes and another record header for
# layer.40.weight (a name of the same length), the size, the first 4 KiB
# and the mtime (to the nanosecond) kept.
replace_same_looking() {
    $PY - "$1" <<'EOF'
import os, sys
p = sys.argv[1]
st = os.stat(p)
b = bytearray(open(p, "rb").read())
at = b.index(b"layer.40.weight")
assert at > 4096
b[at:at + 15] = b"layer.40.wEight"
for i in range(at + 64, at + 1024):
    b[i] ^= 0x5A
open(p, "r+b").write(bytes(b))
os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
assert os.stat(p).st_size == st.st_size and os.stat(p).st_mtime_ns == st.st_mtime_ns
EOF
}

@test "a file replaced with the same size, mtime and first bytes: EIO and one line, never the old index's bytes; rebuilt next time" {
    f=$T/r.ckpt
    gen "$f" 100 $((1 << 20))
    mount_fg "$f" "$M"
    unmount "$M"
    idx=$(index_of "$f")
    [ -f "$idx" ]
    replace_same_looking "$f"
    mount_fg "$f" "$M"
    # Loaded from the index: the tree still lists the old name ...
    [ -d "$M/layer.40.weight" ]
    # ... whose bytes are refused, not served from the new file's layout.
    run cat "$M/layer.40.weight/out"
    [ "$status" -ne 0 ]
    [[ $output == *"Input/output error"* ]]
    grep -q "r.ckpt: tensor 'layer.40.weight': the file was replaced since its index .*\.ckidx was written; remount" \
        "$T/daemon.log"
    [ "$(grep -c 'was replaced since its index' "$T/daemon.log")" -eq 1 ]
    [ ! -e "$idx" ]
    # A tensor whose record is unchanged reads its true bytes.
    cmp "$M/layer.3.weight/out" <(content "$f" layer.3.weight)
    unmount "$M"
    # The next mount reads the file: the new name, the new bytes.
    mount_fg "$f" "$M"
    [ -d "$M/layer.40.wEight" ]
    [ ! -e "$M/layer.40.weight" ]
    run $ORACLE check "$M" "$f"
    [ "$status" -eq 0 ]
    [ -f "$idx" ]
}

@test "a corrupt index (a bit flipped, cut short) is ignored, rebuilt, and the mount is right" {
    f=$T/c.ckpt
    gen "$f" 500 $((8 << 20))
    full=$(mount_rchar "$f")
    idx=$(index_of "$f")
    good=$(sha "$idx")
    for how in flip cut; do
        if [ $how = flip ]; then
            $PY -c 'import sys; p = sys.argv[1]; b = bytearray(open(p, "rb").read()); b[len(b) // 2] ^= 4; open(p, "wb").write(b)' "$idx"
        else
            truncate -s $(($(stat -c %s "$idx") - 100)) "$idx"
        fi
        [ "$(sha "$idx")" != "$good" ]
        r=$(mount_rchar "$f")
        # read in full again (about as much as the first mount) ...
        [ "$r" -gt $((full / 2)) ]
        # ... and the index written anew
        [ "$(sha "$idx")" = "$good" ]
    done
    mount_fg "$f" "$M"
    run $ORACLE check "$M" "$f"
    [ "$status" -eq 0 ]
}

@test "an index owned by another user, or one others may write, is not read" {
    f=$T/o.ckpt
    gen "$f" 500 $((8 << 20))
    full=$(mount_rchar "$f")
    idx=$(index_of "$f")
    loaded=$(mount_rchar "$f")
    [ "$loaded" -lt $((full / 10)) ]
    chown 65534:65534 "$idx"
    r=$(mount_rchar "$f")
    [ "$r" -gt $((full / 2)) ]
    [ "$(stat -c %u "$idx")" = "$(id -u)" ] # replaced by the user's own
    chmod 0620 "$idx"
    r=$(mount_rchar "$f")
    [ "$r" -gt $((full / 2)) ]
    [ "$(stat -c %a "$idx")" = 600 ]
    # Nor anything in a directory others may write.
    chmod 0777 "$IDX"
    r=$(mount_rchar "$f")
    [ "$r" -gt $((full / 2)) ]
    grep -q "warning: .*o.ckpt: cannot save its index in $IDX (the directory is not the user's own, or others may write it)" \
        "$T/daemon.log"
}

@test "a symbolic link planted as the index is not followed" {
    f=$T/s.ckpt
    gen "$f" 500 $((8 << 20))
    full=$(mount_rchar "$f")
    idx=$(index_of "$f")
    mv "$idx" "$T/real-index"
    echo precious >"$T/target"
    ln -s "$T/real-index" "$idx"
    r=$(mount_rchar "$f")
    [ "$r" -gt $((full / 2)) ] # the good index behind the link was not read
    [ -f "$idx" ] && [ ! -L "$idx" ] # a file of its own replaced the link
    ln -sf "$T/target" "$idx"
    mount_rchar "$f" >/dev/null
    [ "$(cat "$T/target")" = precious ] # never written through
    [ ! -L "$idx" ]
}

@test "an index directory that cannot be made: the mount works and says so once" {
    f=$T/w.ckpt
    gen "$f" 50 $((1 << 20))
    echo file >"$T/notadir"
    mount_fg "$f" "$M" -o index_dir="$T/notadir/idx"
    run $ORACLE check "$M" "$f"
    [ "$status" -eq 0 ]
    unmount "$M"
    [ "$(grep -c 'warning: .*cannot save its index in' "$T/daemon.log")" -eq 1 ]
    grep -q "w.ckpt: cannot save its index in $T/notadir/idx (Not a directory); it is read in full" \
        "$T/daemon.log"
}

@test "-o noindex writes and reads nothing; -o index_dir moves the index" {
    f=$T/n.ckpt
    gen "$f" 500 $((8 << 20))
    mount_fg "$f" "$M" -o noindex
    unmount "$M"
    [ ! -e "$IDX" ]
    full=$(mount_rchar "$f" -o index_dir=rel-idx) # relative to where ckptfs started
    [ -f "$(index_of "$f" "$PWD/rel-idx")" ]
    rm -rf "$PWD/rel-idx"
    mount_rchar "$f" -o index_dir="$T/elsewhere" >/dev/null
    [ -f "$(index_of "$f" "$T/elsewhere")" ]
    [ ! -e "$IDX" ]
    r=$(mount_rchar "$f" -o index_dir="$T/elsewhere")
    [ "$r" -lt $((full / 10)) ]
    # noindex does not read it either
    r=$(mount_rchar "$f" -o noindex,index_dir="$T/elsewhere")
    [ "$r" -gt $((full / 2)) ]
}

@test "the tools read and write the same index; --no-index does neither" {
    f=$T/t.ckpt
    gen "$f" 300 $((4 << 20))
    "$BUILD/ckptfs-dump" --no-index "$f" >"$T/plain.txt"
    [ ! -e "$IDX" ]
    "$BUILD/ckptfs-dump" "$f" >"$T/first.txt"
    [ -f "$(index_of "$f")" ]
    # (LeakSanitizer cannot run under ptrace: make asan's build checks
    # leaks everywhere else)
    env ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" \
        strace -f -e trace=pread64 -o "$T/trace" "$BUILD/ckptfs-dump" "$f" >"$T/second.txt"
    cmp "$T/plain.txt" "$T/first.txt"
    cmp "$T/plain.txt" "$T/second.txt"
    # from the index: the model's first 4 KiB, no record header
    [ "$(grep -c 'pread64(3' "$T/trace")" -le 2 ]
    # a mount loads what the tool wrote
    r=$(mount_rchar "$f")
    [ "$r" -lt $((1 << 20)) ]
    "$BUILD/ckptfs-stat" "$f" >/dev/null
    "$BUILD/ckptfs-dump" -o index_dir="$T/tool-idx" "$f" >/dev/null
    [ -f "$(index_of "$f" "$T/tool-idx")" ]
}

@test "a save through the mount: the old index no longer matches, the new file's is written" {
    f=$T/rw.ckpt
    cp "$MS/mindarmour_checkpoint_lenet-10_1875.ckpt" "$f"
    chmod 0644 "$f"
    mount_fg "$f" "$M" -o rw
    unmount "$M"
    idx=$(index_of "$f")
    before=$(sha "$idx")
    mount_fg "$f" "$M" -o rw # from the index
    head -c 40 /dev/urandom >"$T/bias"
    cp "$T/bias" "$M/fc3.bias/out"
    touch "$M/snapshot_done"
    unmount "$M"
    [ "$(sha "$idx")" != "$before" ]
    mount_fg "$f" "$M"
    cmp "$T/bias" "$M/fc3.bias/out"
    run $ORACLE check "$M" "$f"
    [ "$status" -eq 0 ]
}

# ---- ONNX and MindIR: the layout of the protobuf message is kept too ----

GRAPH=$GRAPH_ORACLE
ONNX_FIX=$FIXTURES/onnx

# model_bytes_read MODEL: the bytes ckptfs-dump reads of MODEL itself
# (strace -y names each descriptor's file), its tree to $T/dump.txt.
model_bytes_read() {
    env ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" \
        strace -f -y -e trace=read,pread64 -o "$T/trace" "$BUILD/ckptfs-dump" "$1" >"$T/dump.txt"
    awk -v f="<$(realpath "$1")>" 'index($0, f) && $NF ~ /^[0-9]+$/ {n += $NF} END {print n + 0}' \
        "$T/trace"
}

@test "ONNX and MindIR: a second open reads the index and the file's first 4 KiB, not the graph; the mount's tree is the oracle's" {
    for src in "$ONNX_FIX/silero_vad_legacy.onnx" "$ONNX_FIX/ppocrv4_rec_constants.onnx" \
        "$MS/mindspore_ori_net.mindir"; do
        f=$T/$(basename "$src")
        cp "$src" "$f"
        first=$(model_bytes_read "$f")
        cp "$T/dump.txt" "$T/first.txt"
        [ -f "$(index_of "$f")" ]
        second=$(model_bytes_read "$f")
        echo "$(basename "$f") ($(stat -c %s "$f") bytes): read by the first open $first, by the second $second" >&3
        # the walk reads every message but the raw data; the index stands for it
        [ "$first" -gt 16384 ]
        [ "$second" -le 4160 ]
        tail -n +2 "$T/first.txt" | cmp - <(tail -n +2 "$T/dump.txt")
        mount_fg "$f" "$M" -o ro
        run $GRAPH check "$M" "$f"
        echo "$output"
        [ "$status" -eq 0 ]
        unmount "$M"
    done
}

@test "ONNX and MindIR: a save from a mount that loaded the index is the oracle's edit; the saved file's index is kept" {
    for src in "$ONNX_FIX/silero_vad_legacy.onnx" "$MS/mindspore_ori_net.mindir"; do
        f=$T/$(basename "$src")
        cp "$src" "$f"
        chmod 0644 "$f"
        mount_fg "$f" "$M" -o ro
        unmount "$M"
        idx=$(index_of "$f")
        before=$(sha "$idx")
        mount_fg "$f" "$M" -o rw,commit=manual
        # the largest float tensor, rewritten
        d=$(for x in "$M"/*/; do
            grep -q '^data_type: kFloat$' "$x/meta" && echo "$(stat -c %s "$x/out") $(basename "$x")"
        done | sort -n | tail -1 | cut -d' ' -f2)
        [ -n "$d" ]
        head -c "$(stat -c %s "$M/$d/out")" /dev/urandom >"$T/new"
        cp "$T/new" "$M/$d/out"
        touch "$M/snapshot_done"
        unmount "$M"
        [ "$(sha "$idx")" != "$before" ]
        # the oracle reads the edit from the saved file; the next open is
        # from the new index, and the mount is the oracle's tree
        name=$($PY -c 'import sys, urllib.parse; print(urllib.parse.unquote(sys.argv[1]))' "$d")
        $GRAPH values "$f" "$name" | diff <($PY -c 'import numpy as n, sys
for v in n.fromfile(sys.argv[1], "<f4"): print(repr(v.item()))' "$T/new") -
        [ "$(model_bytes_read "$f")" -le 4160 ]
        mount_fg "$f" "$M" -o ro
        run $GRAPH check "$M" "$f"
        echo "$output"
        [ "$status" -eq 0 ]
        unmount "$M"
    done
}

@test "ONNX: a file whose message layout changed under a matching index (same size, mtime, first 4 KiB): a save is refused in one line, nothing written" {
    f=$T/l.onnx
    cp "$ONNX_FIX/silero_vad_legacy.onnx" "$f"
    chmod 0644 "$f"
    mount_fg "$f" "$M" -o ro
    unmount "$M"
    idx=$(index_of "$f")
    [ -f "$idx" ]
    # The key of the graph's last initializer (field 5) becomes that of a
    # value_info (field 12): every tensor's own bytes are as they were,
    # only the message around them differs.
    $PY - "$f" <<'PY'
import os, sys
p = sys.argv[1]
st = os.stat(p)
b = bytearray(open(p, "rb").read())

def varint(at):
    v = s = 0
    while True:
        v |= (b[at] & 0x7F) << s
        s += 7
        at += 1
        if b[at - 1] < 0x80:
            return v, at

def fields(at, end):
    while at < end:
        key, body = varint(at)
        wire = key & 7
        if wire == 0:
            _, nxt = varint(body)
        elif wire == 2:
            n, body = varint(body)
            nxt = body + n
        elif wire == 5:
            nxt = body + 4
        elif wire == 1:
            nxt = body + 8
        else:
            raise SystemExit("wire type %d" % wire)
        yield key >> 3, at, body, nxt
        at = nxt

graph = next((body, end) for num, _, body, end in fields(0, len(b)) if num == 7)
inits = [at for num, at, _, _ in fields(*graph) if num == 5]
assert inits[-1] > 4096 and b[inits[-1]] == 0x2A
b[inits[-1]] = 0x62
open(p, "r+b").write(bytes(b))
os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
PY
    sum=$(sha "$f")
    mount_fg "$f" "$M" -o rw,commit=manual
    # a tensor's own record is unchanged: it reads right
    first=$(ls "$M" | head -1)
    cat "$M/$first/out" >/dev/null
    d=$(for x in "$M"/*/; do grep -q '^data_type: kFloat$' "$x/meta" && basename "$x"; done | head -1)
    head -c "$(stat -c %s "$M/$d/out")" /dev/urandom >"$M/$d/out"
    run touch "$M/snapshot_done"
    [ "$status" -ne 0 ]
    unmount "$M" || true # the edit is still unsaved: its final save is refused too
    grep -q "l.onnx: the file was replaced since its index was written (its message layout differs); remount" \
        "$T/daemon.log"
    [ "$(grep -c 'message layout differs' "$T/daemon.log")" -eq 2 ]
    [ "$(sha "$f")" = "$sum" ]
    [ ! -e "$idx" ]
    [ -z "$(ls -A "$T" | grep 'ckptfs-' || true)" ]
}
