#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# ckptfs over object storage: s3rver (npm, a fake S3 server on 127.0.0.1)
# with its bucket mounted by s3fs (Debian), started and stopped by each test
# (s3_helpers.bash).  Models are copied into the bucket through s3fs or PUT
# straight to the server by "another client" (curl); every check reads the
# bucket back through the server or compares with the independent oracles,
# never with ckptfs itself.  Reads: every fixture format, a distributed
# merge whose ranks live in the bucket, the tools.  Saves: a .ckpt edit and
# a three-file ONNX commit (journal) into the bucket, ckptfs-convert writing
# there, kill -9 during saves (the object is always the old or the new
# model), another client's rewrite refused, never overwritten.

load helpers
load s3_helpers

GRAPH=$GRAPH_ORACLE
ST_ORACLE="$PY $REPO/tests/oracle/safetensors_oracle.py"
STAT_ORACLE="$PY $REPO/tests/oracle/stat_oracle.py"
DIST="$PY $REPO/tests/oracle/dist_oracle.py"
CMP="$PY $REPO/tests/oracle/convert_oracle.py compare"
OF_ORACLE="$PY $REPO/tests/oracle/oneflow_oracle.py"

setup() {
    T=$BATS_TEST_TMPDIR
    s3_start
}

# ro_check MODEL N CHECKER...: MODEL mounted read-only at $T/mN, the tree is
# what CHECKER (an oracle's `check MNT MODEL`) says; unmounted again.
ro_check() {
    local model=$1 mnt=$T/m$2
    shift 2
    mount_fg "$model" "$mnt" -o ro
    run "$@" check "$mnt" "$model"
    echo "$model: $output"
    [ "$status" -eq 0 ]
    unmount "$mnt"
}

# f4_values FILE: FILE's little-endian float32s one a line, as the graph
# oracle's `values` prints a tensor's elements.
f4_values() {
    $PY -c 'import numpy as n, sys
for v in n.fromfile(sys.argv[1], "<f4"): print(repr(v.item()))' "$1"
}

# temporaries PREFIX: the bucket's keys under PREFIX that a save leaves
# (its temporary files and journal: .NAME.ckptfs-*, not the lock), as the
# server lists them.
temporaries() { s3_keys "$1" | grep '\.ckptfs-' | grep -v -- '-lock$' || true; }

@test "the harness: s3fs shows the bucket, another client's PUT and GET agree with it" {
    grep -q " $S3 fuse.s3fs " /proc/self/mounts
    [ "$(stat -f -c %t "$S3")" = 65735546 ]
    mkdir "$S3/d"
    cp "$MS/mindarmour_checkpoint_lenet-10_1875.ckpt" "$S3/d/a.ckpt"
    s3_get d/a.ckpt "$T/a"
    cmp "$MS/mindarmour_checkpoint_lenet-10_1875.ckpt" "$T/a"
    s3_put "$ONNX_FIX/tiny_conv2d.onnx" d/b.onnx
    cmp "$ONNX_FIX/tiny_conv2d.onnx" "$S3/d/b.onnx"
    s3_keys d/ | grep -qx d/a.ckpt
}

@test "every fixture format read from the bucket: .ckpt, MindIR, ONNX (external data too), safetensors, the oracles' trees" {
    mkdir "$S3/ms" "$S3/onnx" "$S3/st"
    cp "$MS"/*.ckpt "$MS"/*.mindir "$S3/ms/"
    cp -r "$ONNX_FIX"/*.onnx "$ONNX_FIX/external_burn" "$S3/onnx/"
    local f n=0 c=0 g=0 s=0
    for f in "$S3"/ms/*.ckpt; do
        case $f in *strategy*|*EMPTY*) continue ;; esac
        ro_check "$f" $((n++)) $ORACLE
        c=$((c + 1))
    done
    for f in "$S3"/ms/*.mindir "$S3"/onnx/*.onnx "$S3"/onnx/external_burn/*.onnx; do
        case $f in *encrpty_key*|*dangling*) continue ;; esac
        ro_check "$f" $((n++)) $GRAPH
        g=$((g + 1))
    done
    for f in "$FIXTURES"/safetensors/*/*.safetensors; do
        s3_put "$f" "st/$(basename "$(dirname "$f")")-$(basename "$f")"
    done
    for f in "$S3"/st/*.safetensors; do
        ro_check "$f" $((n++)) $ST_ORACLE
        s=$((s + 1))
    done
    # the counts the local suites check (fixtures, onnx_mindir_read, safetensors)
    [ "$c" -eq 5 ] && [ "$g" -eq 13 ] && [ "$s" -ge 20 ]
}

@test "a OneFlow snapshot and a training run's directory in the bucket mount as on disk" {
    local snap=$FIXTURES/oneflow/legacy_v2_java_mlp_adam run=$FIXTURES/mindspore_run_dir/qishna_lenet_modelcheckpoint
    cp -r "$snap" "$S3/snap"
    mount_fg "$S3/snap" "$T/o" -o ro
    local d n=0
    for d in "$snap"/*/; do
        [ -f "$d/out" ] || continue
        cmp "$d/out" "$T/o/$(basename "$d")/out"
        n=$((n + 1))
    done
    [ "$n" -ge 12 ]
    cp -r "$run" "$S3/run"
    # new files on shared storage count once settled (run_shared.bats)
    mount_fg "$S3/run" "$T/r" -o ro,settle=1,poll=0.2
    M=$T/r
    for f in "$run"/*.ckpt; do
        until_listed "$(basename "$f" .ckpt)"
    done
    for f in "$run"/*.ckpt; do
        d=$(basename "$f" .ckpt)
        run $ORACLE check "$T/r/$d" "$f"
        echo "$d: $output"
        [ "$status" -eq 0 ]
    done
}

@test "a run directory in the bucket is followed while another client PUTs a checkpoint straight to the server: listed within poll + settle, read right, latest follows; its DELETE takes it away" {
    local run=$FIXTURES/mindspore_run_dir/qishna_lenet_modelcheckpoint
    mkdir "$S3/run"
    cp "$run/checkpoint_lenet-1_1875.ckpt" "$S3/run/net-1_10.ckpt"
    M=$T/r
    mount_fg "$S3/run" "$M" -o ro,settle=1,poll=0.5
    [[ $(getfattr --only-values -n user.ckptfs.watch "$M") == "poll every 0.5 s and inotify (fuse.s3fs)" ]]
    until_listed net-1_10
    s3_put "$run/checkpoint_lenet-2_1875.ckpt" run/net-1_20.ckpt
    until_listed net-1_20
    $ORACLE check "$M/net-1_20" "$run/checkpoint_lenet-2_1875.ckpt"
    [ "$(readlink "$M/latest")" = net-1_20 ]
    [ "$(curl -s -o /dev/null -w '%{http_code}' -X DELETE "$S3_URL/run/net-1_10.ckpt")" = 204 ]
    until_gone net-1_10
    $ORACLE check "$M/net-1_20" "$run/checkpoint_lenet-2_1875.ckpt"
}

@test "a distributed checkpoint whose ranks and strategy live in the bucket: the oracle's merged tree" {
    $DIST gen "$T/gen" --ranks 4 --case tp4x2 --seed 4
    $DIST merge "$T/gen/strategy.ckpt" "$T/gen/dist" "$T/want"
    cp -r "$T/gen/dist" "$S3/dist"
    cp "$T/gen/strategy.ckpt" "$S3/strategy.ckpt"
    mount_fg "$S3/dist" "$T/m" -o "strategy=$S3/strategy.ckpt"
    ls -A "$T/want" | LC_ALL=C sort >"$T/names"
    ls -A "$T/m" | LC_ALL=C sort | diff "$T/names" -
    [ "$(wc -l <"$T/names")" -gt 3 ]
    local d
    for d in "$T/want"/*/; do
        diff "$d/meta" "$T/m/$(basename "$d")/meta"
        cmp "$d/out" "$T/m/$(basename "$d")/out"
    done
}

@test "ckptfs-dump, ckptfs-stat and ckptfs-convert read from the bucket" {
    local f=$MS/goldenstick_test_linears_woq_predict_2stage_fp32.ckpt
    mkdir "$S3/t"
    cp "$f" "$S3/t/a.ckpt"
    cp -r "$FIXTURES/oneflow/legacy_v2_java_mlp_adam" "$S3/t/snap"
    # dump: the oracle's tensors; each extent's bytes, read through s3fs,
    # are the tensor's bytes as the oracle parses them
    "$BUILD/ckptfs-dump" "$S3/t/a.ckpt" | grep -v "^#" >"$T/dump"
    $ORACLE parse "$f" | $PY -c 'import json, sys
for e in json.load(sys.stdin): print(e["tag"], e["nbytes"], e["sha256"])' >"$T/want"
    [ "$(wc -l <"$T/dump")" -eq "$(wc -l <"$T/want")" ]
    local name type shape size ext off len
    while IFS=$'\t' read -r name type shape size ext; do
        off=${ext%+*} len=${ext#*+}
        grep -qx "$name $size $(dd if="$S3/t/a.ckpt" bs=65536 iflag=skip_bytes,count_bytes \
            skip="$off" count="$len" status=none | sha256sum | cut -d' ' -f1)" "$T/want"
    done <"$T/dump"
    $STAT_ORACLE expect "$f" --hist 4 >"$T/expect.json"
    "$BUILD/ckptfs-stat" --json --hist=4 "$S3/t/a.ckpt" >"$T/got.json"
    $STAT_ORACLE compare "$T/expect.json" "$T/got.json"
    $OF_ORACLE stat "$S3/t/snap" --hist 4 >"$T/expect.json"
    "$BUILD/ckptfs-stat" --json --hist=4 "$S3/t/snap" >"$T/got.json"
    $STAT_ORACLE compare "$T/expect.json" "$T/got.json"
    # convert from the bucket to local disk
    "$BUILD/ckptfs-convert" "$S3/t/a.ckpt" "$T/a.safetensors"
    "$BUILD/ckptfs-convert" "$S3/t/snap" "$T/snap.ckpt"
    $CMP "$f" "$T/a.safetensors"
    $CMP "$FIXTURES/oneflow/legacy_v2_java_mlp_adam" "$T/snap.ckpt"
}

@test "ckptfs-convert writes into the bucket: the objects are the oracle's, nothing else left" {
    local f=$MS/goldenstick_test_linears_woq_predict_2stage_fp32.ckpt
    mkdir "$S3/c"
    "$BUILD/ckptfs-convert" "$f" "$S3/c/a.safetensors"
    "$BUILD/ckptfs-convert" "$S3/c/a.safetensors" "$S3/c/b.ckpt"
    s3_get c/a.safetensors "$T/a.safetensors"
    s3_get c/b.ckpt "$T/b.ckpt"
    $CMP "$f" "$T/a.safetensors" "$T/b.ckpt"
    [ "$(s3_keys c/ | LC_ALL=C sort | tr '\n' ' ')" = "c/ c/a.safetensors c/b.ckpt " ]
}

@test "a .ckpt in the bucket edited with dd and saved: the object is the edit, by the oracle; no temporary, journal or lock object left" {
    local f=$MS/goldenstick_test_linears_woq_predict_2stage_fp32.ckpt
    mkdir "$S3/w"
    cp "$f" "$S3/w/model.ckpt"
    chmod 0644 "$S3/w/model.ckpt"
    mount_fg "$S3/w/model.ckpt" "$T/m" -o rw,commit=manual
    printf '\x00\x00\x80\x3f' | dd of="$T/m/linear1.bias/out" bs=1 seek=8 conv=notrunc status=none
    touch "$T/m/snapshot_done"
    # a second save in the same mount, after s3fs's attribute cache expired:
    # the saved object is not taken for another client's change
    sleep 1.5
    printf '\x00\x00\x00\x40' | dd of="$T/m/linear1.bias/out" bs=1 seek=0 conv=notrunc status=none
    unmount "$T/m"
    s3_get w/model.ckpt "$T/saved"
    [ "$($PY - "$REPO/tests/oracle/ckpt_oracle.py" "$T/saved" <<'PY'
import importlib.util, sys
import numpy as np
spec = importlib.util.spec_from_file_location("oracle", sys.argv[1])
o = importlib.util.module_from_spec(spec)
spec.loader.exec_module(o)
entries, _ = o.load_reference(sys.argv[2])
e = next(e for e in entries if e.tag == b"linear1.bias")
print(" ".join("%g" % v for v in np.frombuffer(e.out, "<f4")[:3]))
PY
)" = "2 $($PY - "$REPO/tests/oracle/ckpt_oracle.py" "$f" <<'PY'
import importlib.util, sys
import numpy as np
spec = importlib.util.spec_from_file_location("oracle", sys.argv[1])
o = importlib.util.module_from_spec(spec)
spec.loader.exec_module(o)
entries, _ = o.load_reference(sys.argv[2])
e = next(e for e in entries if e.tag == b"linear1.bias")
print("%g" % np.frombuffer(e.out, "<f4")[1])
PY
) 1" ]
    # every other byte as it was
    [ "$(cmp -l "$f" "$T/saved" | wc -l)" -le 8 ]
    [ "$(s3_keys w/ | LC_ALL=C sort | tr '\n' ' ')" = "w/ w/model.ckpt " ]
}

# The keys s3rver logs as stored or copied into, since the log's line n.
s3_written_keys() {
    tail -n "+$1" "$S3_DIR/s3rver.log" |
        sed -n 's/.*Stored object "\([^"]*\)".*/\1/p; s/.*Copied object .* with key of "\([^"]*\)".*/\1/p'
}

# s3rver's own store is not atomic (its HEADs find an object missing while
# another client's PUT rewrites it), so other clients' view is judged from
# the server's log of writes: with no .fuse_hidden step, the model's key is
# only ever replaced by one copy, never moved aside and deleted first.
@test "a save in the bucket replaces each object in one server-side copy: the model is never moved aside (no .fuse_hidden step)" {
    local f=$MS/goldenstick_test_linears_woq_predict_2stage_fp32.ckpt src=$ONNX_FIX/external_burn
    mkdir "$S3/w" "$S3/x"
    cp "$f" "$S3/w/model.ckpt"
    cp "$src"/multi_external_files.onnx "$src"/multi_external_*.bin "$S3/x/"
    chmod 0644 "$S3"/w/* "$S3"/x/*
    mount_fg "$S3/w/model.ckpt" "$T/m" -o rw,commit=manual
    mount_fg "$S3/x/multi_external_files.onnx" "$T/o" -o rw,commit=manual
    local from
    from=$(($(wc -l <"$S3_DIR/s3rver.log") + 1))
    for i in 1 2 3; do
        printf '\x00\x00\x80\x3f' | dd of="$T/m/linear1.bias/out" bs=1 seek=$((4 * i)) conv=notrunc status=none
        touch "$T/m/snapshot_done"
        head -c 64 /dev/urandom >"$T/o/weight/out"
        touch "$T/o/snapshot_done"
    done
    s3_written_keys "$from" >"$T/written"
    # each save's temporaries, then one copy onto each model file; never an
    # object moved aside first
    ! grep -q fuse_hidden "$T/written" || { cat "$T/written"; false; }
    [ "$(grep -cx w/model.ckpt "$T/written")" -eq 3 ]
    [ "$(grep -cx x/multi_external_weights.bin "$T/written")" -eq 3 ]
    # the mount serves the saved files, and they are the objects
    s3_get w/model.ckpt "$T/saved"
    $PY - "$REPO/tests/oracle/ckpt_oracle.py" "$T/saved" "$T/m/linear1.bias/out" <<'PY'
import importlib.util, sys
spec = importlib.util.spec_from_file_location("oracle", sys.argv[1])
o = importlib.util.module_from_spec(spec)
spec.loader.exec_module(o)
entries, _ = o.load_reference(sys.argv[2])
e = next(e for e in entries if e.tag == b"linear1.bias")
assert e.out == open(sys.argv[3], "rb").read()
assert e.out[4:16] == b"\x00\x00\x80\x3f" * 3
PY
    mkdir "$T/x"
    for k in multi_external_files.onnx multi_external_weights.bin multi_external_bias.bin; do
        s3_get "x/$k" "$T/x/$k"
    done
    $GRAPH values "$T/x/multi_external_files.onnx" weight | diff <(f4_values "$T/o/weight/out") -
    unmount "$T/m"
    unmount "$T/o"
    [ "$(s3_keys w/ | tr '\n' ' ')" = "w/ w/model.ckpt " ]
}

@test "an ONNX model with two external data files in the bucket: the three-file save (journal) is the oracle's edit, nothing left" {
    local src=$ONNX_FIX/external_burn
    mkdir "$S3/x"
    cp "$src"/multi_external_files.onnx "$src"/multi_external_*.bin "$S3/x/"
    chmod 0644 "$S3"/x/*
    head -c 64 /dev/urandom >"$T/w.bin"
    head -c 16 /dev/urandom >"$T/b.bin"
    mount_fg "$S3/x/multi_external_files.onnx" "$T/m" -o rw,commit=manual
    cp "$T/w.bin" "$T/m/weight/out"
    cp "$T/b.bin" "$T/m/bias/out"
    unmount "$T/m"
    mkdir "$T/got"
    for k in multi_external_files.onnx multi_external_weights.bin multi_external_bias.bin; do
        s3_get "x/$k" "$T/got/$k"
    done
    $GRAPH values "$T/got/multi_external_files.onnx" weight | diff <(f4_values "$T/w.bin") -
    $GRAPH values "$T/got/multi_external_files.onnx" bias | diff <(f4_values "$T/b.bin") -
    [ "$(s3_keys x/ | LC_ALL=C sort | tr '\n' ' ')" = "x/ x/multi_external_bias.bin x/multi_external_files.onnx x/multi_external_weights.bin " ]
}

@test "another client's same-size rewrite of the object is never overwritten: edits and the save refused" {
    local f=$MS/mindarmour_checkpoint_lenet-10_1875.ckpt
    mkdir "$S3/r"
    cp "$f" "$S3/r/lenet.ckpt"
    mount_fg "$S3/r/lenet.ckpt" "$T/m" -o rw,commit=manual
    printf '\x00\x00\x80\x3f' | dd of="$T/m/fc3.bias/out" conv=notrunc status=none
    # the other client's version: same size, one tensor changed, stored a
    # second later (s3fs keeps mtimes in whole seconds)
    cp "$f" "$T/theirs"
    printf 'ZZZZ' | dd of="$T/theirs" bs=1 seek=300000 conv=notrunc status=none
    sleep 1.1
    s3_put "$T/theirs" r/lenet.ckpt
    sleep 1.5 # past stat_cache_expire=1
    run touch "$T/m/snapshot_done"
    [ "$status" -ne 0 ]
    getfattr --only-values -n user.ckptfs.last_error "$T/m" | grep -q 'changed on disk since it was mounted'
    unmount "$T/m" || true
    s3_get r/lenet.ckpt "$T/after"
    cmp "$T/theirs" "$T/after"
}

# kill9_saves MODEL_KEY EDIT CHECK ROUNDS: ROUNDS times, mount the model in the
# bucket writable, EDIT (a function, given the mount and the round), start a
# save and kill -9 the daemon at a random moment within it; then CHECK (given
# the round) judges the objects.  A writable mount of the next round finishes
# or cleans what the kill left.
kill9_saves() {
    local key=$1 edit=$2 check=$3 rounds=$4 i pid
    for i in $(seq 1 "$rounds"); do
        mount_fg "$S3/$key" "$T/m$i" -o rw,commit=manual
        pid=$(daemon_pid)
        "$edit" "$T/m$i" "$i"
        touch "$T/m$i/snapshot_done" 2>/dev/null &
        sleep "0.$(printf '%03d' $((RANDOM % 250)))"
        kill -9 "$pid" 2>/dev/null || true
        wait $! 2>/dev/null || true
        # a killed daemon's mount answers ENOTCONN, which mountpoint(1)
        # does not count as a mount point: detach it here
        wait "$pid" 2>/dev/null || true
        fusermount3 -uz "$T/m$i" 2>/dev/null || true
        unmount "$T/m$i" || true
        "$check" "$i"
    done
}

ckpt_edit() {
    head -c 192000 /dev/urandom >"$T/new$2"
    cp "$T/new$2" "$1/fc1.weight/out"
}

# the object holds the oracle's LeNet with fc1.weight one of the versions
# written so far (any older round's or the fixture's), every other tensor
# the fixture's; no checkpoint besides it in the directory
ckpt_check() {
    local got
    s3_get k/lenet.ckpt "$T/got"
    $ORACLE parse "$T/got" | $PY -c 'import json, sys
for e in json.load(sys.stdin): print(e["tag"], e["sha256"])' >"$T/got.sums"
    diff <(grep -v '^fc1\.weight ' "$T/fix.sums") <(grep -v '^fc1\.weight ' "$T/got.sums")
    got=$(awk '$1 == "fc1.weight" {print $2}' "$T/got.sums")
    sha "$T/new$1" >>"$T/versions"
    grep -qx "$got" "$T/versions" || { echo "round $1: fc1.weight is no version written" >&2; return 1; }
    if [ "$got" = "$(tail -1 "$T/versions")" ]; then echo new; else echo old; fi >>"$T/outcomes"
    [ -z "$(temporaries k/)" ] || echo "temporary left" >>"$T/outcomes"
    [ "$(s3_keys k/ | grep -v '/\.' | tr '\n' ' ')" = "k/ k/lenet.ckpt " ]
}

@test "kill -9 during saves of a .ckpt in the bucket: the object is always a whole old or new model; leftovers are hidden temporaries, removed by the next writable mount" {
    local f=$MS/mindarmour_checkpoint_lenet-10_1875.ckpt
    mkdir "$S3/k"
    cp "$f" "$S3/k/lenet.ckpt"
    chmod 0644 "$S3/k/lenet.ckpt"
    $ORACLE parse "$f" | $PY -c 'import json, sys
for e in json.load(sys.stdin): print(e["tag"], e["sha256"])' >"$T/fix.sums"
    awk '$1 == "fc1.weight" {print $2}' "$T/fix.sums" >"$T/versions"
    kill9_saves k/lenet.ckpt ckpt_edit ckpt_check 8
    echo "# outcomes: $(sort "$T/outcomes" | uniq -c | tr '\n' ' ')" >&3
    # the next writable mount removes any temporary a kill left
    mount_fg "$S3/k/lenet.ckpt" "$T/last" -o rw,commit=manual
    [ -z "$(temporaries k/)" ]
    unmount "$T/last"
    [ "$(s3_keys k/ | tr '\n' ' ')" = "k/ k/lenet.ckpt " ]
}

onnx_edit() {
    head -c 64 /dev/urandom >"$T/new$2"
    cp "$T/new$2" "$1/weight/out"
    cp "$T/new$2" "$T/newb$2"
    truncate -s 16 "$T/newb$2"
    cp "$T/newb$2" "$1/bias/out"
}

# after recovery (a writable mount finishes an interrupted commit), the
# model's two tensors are one round's pair: weight and bias from the same save
onnx_check() {
    local w b k
    [ -z "$(s3_keys x/ | grep -- '-journal$')" ] || echo "journal left" >>"$T/outcomes"
    mount_fg "$S3/x/multi_external_files.onnx" "$T/rec$1" -o rw,commit=manual
    unmount "$T/rec$1"
    mkdir -p "$T/got"
    for k in multi_external_files.onnx multi_external_weights.bin multi_external_bias.bin; do
        s3_get "x/$k" "$T/got/$k"
    done
    w=$($GRAPH values "$T/got/multi_external_files.onnx" weight | sha256sum | cut -d' ' -f1)
    b=$($GRAPH values "$T/got/multi_external_files.onnx" bias | sha256sum | cut -d' ' -f1)
    echo "$(f4_values "$T/new$1" | sha256sum | cut -d' ' -f1) $(f4_values "$T/newb$1" | sha256sum | cut -d' ' -f1)" >>"$T/pairs"
    grep -qx "$w $b" "$T/pairs" || { echo "round $1: weight and bias from different saves" >&2; return 1; }
    if [ "$w $b" = "$(tail -1 "$T/pairs")" ]; then echo new; else echo old; fi >>"$T/outcomes"
    [ -z "$(temporaries x/)" ]
}

@test "kill -9 during three-file saves (journal) in the bucket: after the next writable mount, always one save's whole pair" {
    local src=$ONNX_FIX/external_burn
    mkdir "$S3/x"
    cp "$src"/multi_external_files.onnx "$src"/multi_external_*.bin "$S3/x/"
    chmod 0644 "$S3"/x/*
    echo "$($GRAPH values "$src/multi_external_files.onnx" weight | sha256sum | cut -d' ' -f1) $($GRAPH values "$src/multi_external_files.onnx" bias | sha256sum | cut -d' ' -f1)" >"$T/pairs"
    kill9_saves x/multi_external_files.onnx onnx_edit onnx_check 6
    echo "# outcomes: $(sort "$T/outcomes" | uniq -c | tr '\n' ' ')" >&3
}

# mountpoint-s3 is not in Debian; s3fs mounted under its name ("fuse" of
# source "mountpoint-s3", as mountpoint-s3's own mounts show in
# /proc/self/mountinfo) stands in for it.  What is tested is ckptfs's
# side: no save is tried where rename is missing, and nothing is written.
@test "on mountpoint-s3 (no rename): -o rw is refused in one line, a default mount is read-only and reads right, convert into it writes nothing" {
    local f=$MS/goldenstick_test_linears_woq_predict_2stage_fp32.ckpt mp=$S3_DIR/mp
    mkdir "$S3/p"
    cp "$f" "$S3/p/model.ckpt"
    chmod 0644 "$S3/p/model.ckpt"
    s3fs_mount "$mp" fsname=mountpoint-s3
    grep -q " $mp .* - fuse mountpoint-s3 " /proc/self/mountinfo
    mkdir "$T/m"
    run "$CKPTFS" -o rw "$mp/p/model.ckpt" "$T/m"
    [ "$status" -ne 0 ]
    [ "${#lines[@]}" -eq 1 ]
    [[ "$output" == *"$mp/p/model.ckpt: on mountpoint-s3, which cannot rename, no save can replace it"*"nothing was written"* ]]
    # the owner's write bit would make it writable by default: read-only here, said
    mount_fg "$mp/p/model.ckpt" "$T/m"
    grep -q "mountpoint-s3, which cannot rename.*; mounted read-only" "$T/daemon.log"
    ! printf x | dd of="$T/m/linear1.bias/out" conv=notrunc status=none 2>/dev/null || false
    $ORACLE check "$T/m" "$f"
    unmount "$T/m"
    run "$BUILD/ckptfs-convert" "$f" "$mp/p/copy.safetensors"
    [ "$status" -ne 0 ]
    [[ "$output" == *"mountpoint-s3, which cannot rename"* ]]
    [ "$(s3_keys p/ | tr '\n' ' ')" = "p/ p/model.ckpt " ]
}
