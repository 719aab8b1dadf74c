#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# Models with external data: edits saved back into the data files, atomic
# across all the files of the model (the journal of codec/io/commit_group.h),
# and the 2 GiB rule.  Checked with python3-onnx, onnx.checker and
# onnxruntime-node, never with ckptfs.

load helpers

ORT_RUN="node $REPO/tests/ort/run_model.js"
EXT=$ONNX_FIX/external_burn

# ext_copy: a writable copy of external_burn/ in the test's directory.
ext_copy() {
    local d=$BATS_TEST_TMPDIR/ext
    mkdir -p "$d"
    cp "$EXT"/* "$d/"
    chmod 644 "$d"/*
    echo "$d"
}

# The model's initializers as python3-onnx loads them (external data
# resolved), one "name values..." line each.
onnx_values() {
    $PY - "$1" <<'PY'
import sys, onnx
from onnx import numpy_helper
m = onnx.load(sys.argv[1])
for t in m.graph.initializer:
    print(t.name, *numpy_helper.to_array(t).ravel().tolist())
PY
}

# Each initializer's external_data entries, as stored.
onnx_locations() {
    $PY - "$1" <<'PY'
import sys, onnx
m = onnx.load(sys.argv[1], load_external_data=False)
for t in m.graph.initializer:
    print(t.name, t.data_location, *("%s=%s" % (e.key, e.value) for e in t.external_data))
PY
}

@test "every external-data model: all tensors rewritten through the mount give back identical files" {
    local d n=0
    d=$(ext_copy)
    for f in external_data mixed_data multi_external_files; do
        mount_fg "$d/$f.onnx" "$BATS_TEST_TMPDIR/m$n" -o commit=manual
        rewrite_outs "$BATS_TEST_TMPDIR/m$n"
        touch "$BATS_TEST_TMPDIR/m$n/snapshot_done"
        n=$((n + 1))
    done
    for f in "$EXT"/*; do cmp "$f" "$d/$(basename "$f")"; done
    # Nothing but the live mounts' lock files.
    [ -z "$(ls -A "$d" | grep '^\.' | grep -v '\.ckptfs-lock$')" ]
}

@test "external data edited in place: only the tensor's range changes, onnxruntime sees it" {
    local d mnt=$BATS_TEST_TMPDIR/m spec
    d=$(ext_copy)
    mount_fg "$d/external_data.onnx" "$mnt"
    $PY -c 'import numpy as np,sys; np.array([10,-20,30.5,-40],dtype="<f4").tofile(sys.argv[1])' "$mnt/bias/out"
    touch "$mnt/snapshot_done"
    # The model file is unchanged, the data file only in bias's bytes 384..399.
    cmp "$EXT/external_data.onnx" "$d/external_data.onnx"
    cmp -l "$EXT/external_data.bin" "$d/external_data.bin" | awk '$1 < 385 || $1 > 400 {exit 1}'
    [ "$(onnx_values "$d/external_data.onnx" | grep '^bias')" = "bias 10.0 -20.0 30.5 -40.0" ]
    $PY -c 'import onnx,sys; onnx.checker.check_model(sys.argv[1])' "$d/external_data.onnx"
    spec='{"X": {"dims": [1,4], "data": [0,0,0,0]}}'
    out=$(cd "$REPO/tests/ort" && $ORT_RUN "$d/external_data.onnx" "$spec")
    $PY -c 'import json,sys; assert json.loads(sys.argv[1])["Y"]["data"] == [10,-20,30.5,-40], sys.argv[1]' "$out"
}

@test "a resized external tensor is appended to its data file; unreferenced bytes are kept" {
    local d mnt=$BATS_TEST_TMPDIR/m
    d=$(ext_copy)
    mount_fg "$d/mixed_data.onnx" "$mnt"
    $ORACLE meta-of 64,32 kFloat >"$mnt/weight/meta.new"
    $PY -c 'import numpy as np,sys; np.arange(2048,dtype="<f4").tofile(sys.argv[1])' "$mnt/weight/out"
    mv "$mnt/weight/meta.new" "$mnt/weight/meta"
    touch "$mnt/snapshot_done"
    # The old data file is a prefix of the new one (nothing referenced moved).
    cmp -n 81920 "$EXT/mixed_data.bin" "$d/mixed_data.bin"
    onnx_locations "$d/mixed_data.onnx" | tee "$BATS_TEST_TMPDIR/locs"
    grep -qx 'weight 1 location=mixed_data.bin offset=81920 length=8192' "$BATS_TEST_TMPDIR/locs"
    grep -qx 'bias 0' "$BATS_TEST_TMPDIR/locs"
    [ "$(stat -c %s "$d/mixed_data.bin")" -eq $((81920 + 8192)) ]
    $PY - "$d/mixed_data.onnx" <<'PY'
import sys, numpy as np, onnx
from onnx import numpy_helper
m = onnx.load(sys.argv[1])
w = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}["weight"]
assert w.shape == (64, 32) and (w.ravel() == np.arange(2048, dtype="<f4")).all()
PY
}

@test "a save of several files is atomic: killed at each rename, the next mount sees all old or all new" {
    local d mnt=$BATS_TEST_TMPDIR/m old new
    command -v strace >/dev/null
    d=$(ext_copy)
    files="multi_external_files.onnx multi_external_weights.bin multi_external_bias.bin"
    state() { (cd "$d" && cat $files | sha256sum | cut -d' ' -f1); }
    edit() {
        $PY -c 'import numpy as np,sys; np.array([9,8,7,6],dtype="<f4").tofile(sys.argv[1])' "$1/bias/out"
        $ORACLE meta-of 2,4 kFloat >"$1/weight/meta.new"
        $PY -c 'import numpy as np,sys; np.arange(8,dtype="<f4").tofile(sys.argv[1])' "$1/weight/out"
        mv "$1/weight/meta.new" "$1/weight/meta"
    }
    mkdir "$BATS_TEST_TMPDIR/orig"
    cp "$d"/multi_* "$BATS_TEST_TMPDIR/orig/"
    old=$(state)
    mount_fg "$d/multi_external_files.onnx" "$mnt" -o commit=manual
    edit "$mnt"
    touch "$mnt/snapshot_done"
    new=$(state)
    [ "$new" != "$old" ]
    # One writable mount at a time: end this one before the others.
    umount_wait "$mnt" "$(tail -1 "$BATS_TEST_TMPDIR/mounts" | cut -d' ' -f1)"
    sed -i '$d' "$BATS_TEST_TMPDIR/mounts"
    # The renames of a save: the journal's, both data files', the model's;
    # then the journal is unlinked.  Kill the daemon as each one starts.
    for when in renameat:1 renameat:2 renameat:3 renameat:4 unlinkat:1; do
        cp "$BATS_TEST_TMPDIR"/orig/multi_* "$d/"
        mkdir -p "$mnt.$when"
        strace -f -o /dev/null -e trace="${when%:*}" -e inject="${when%:*}:signal=KILL:when=${when#*:}" \
            "$CKPTFS" -f -o commit=manual "$d/multi_external_files.onnx" "$mnt.$when" &
        pid=$!
        for _ in $(seq 1 600); do mountpoint -q "$mnt.$when" && break; sleep 0.05; done
        edit "$mnt.$when"
        run touch "$mnt.$when/snapshot_done"
        wait "$pid" || true
        fusermount3 -uz "$mnt.$when" 2>/dev/null || true
        # The next writable mount finishes or forgets the save (a read-only
        # one changes nothing: it refuses while a journal is there).
        mount_fg "$d/multi_external_files.onnx" "$mnt.$when.after"
        got=$(state)
        echo "killed at $when: $([ "$got" = "$old" ] && echo old || echo new)"
        if [ "$when" = renameat:1 ]; then [ "$got" = "$old" ]; else [ "$got" = "$new" ]; fi
        [ -z "$(ls -A "$d" | grep '^\.multi.*journal')" ]
        # What python3-onnx loads is the state the files say.
        if [ "$got" = "$new" ]; then
            [ "$(onnx_values "$d/multi_external_files.onnx" | tr '\n' ' ')" = \
              "weight 0.0 1.0 2.0 3.0 4.0 5.0 6.0 7.0 bias 9.0 8.0 7.0 6.0 " ]
        fi
        # It holds the model's writer lock: end it before the next round.
        umount_wait "$mnt.$when.after" "$(tail -1 "$BATS_TEST_TMPDIR/mounts" | cut -d' ' -f1)"
        sed -i '$d' "$BATS_TEST_TMPDIR/mounts"
    done
    # A writable mount also removes what the killed saves left behind.
    mount_fg "$d/multi_external_files.onnx" "$mnt.rw"
    [ -z "$(ls -A "$d" | grep '^\.' | grep -vx '\.multi_external_files\.onnx\.ckptfs-lock')" ]
}

@test "an ONNX model that would pass 2 GiB is saved with its new tensor in <model>.data" {
    local m mnt=$BATS_TEST_TMPDIR/m
    m=$BATS_TEST_TMPDIR/tiny.onnx
    cp "$ONNX_FIX/tiny_conv2d.onnx" "$m"
    chmod 644 "$m"
    mount_fg "$m" "$mnt" -o commit=manual
    mkdir "$mnt/big"
    $ORACLE meta-of 536870912 kFloat >"$mnt/big/meta"
    truncate -s $((2 << 30)) "$mnt/big/out"
    printf 'ckptfs!!' | dd of="$mnt/big/out" bs=1 seek=$((1 << 30)) conv=notrunc status=none
    touch "$mnt/snapshot_done"
    [ "$(stat -c %s "$m")" -lt $((1 << 20)) ]
    $PY - "$m" "$ONNX_FIX/tiny_conv2d.onnx" <<'PY'
import os, sys, onnx
from onnx import numpy_helper
m = onnx.load(sys.argv[1], load_external_data=False)
orig = onnx.load(sys.argv[2])
inits = {t.name: t for t in m.graph.initializer}
big = inits.pop("big")
kv = {e.key: e.value for e in big.external_data}
assert big.data_location == 1 and kv["location"] == "tiny.onnx.data", kv
assert int(kv["length"]) == 2 << 30 and list(big.dims) == [536870912], kv
with open(os.path.join(os.path.dirname(sys.argv[1]), kv["location"]), "rb") as f:
    f.seek(int(kv.get("offset", "0")) + (1 << 30))
    assert f.read(8) == b"ckptfs!!"
for t in orig.graph.initializer:  # the others are where they were, unchanged
    assert (numpy_helper.to_array(inits[t.name]) == numpy_helper.to_array(t)).all()
onnx.checker.check_model(sys.argv[1])
PY
}

@test "external locations: sub/w.bin is not w.bin; ./w.bin is w.bin, and a save writes it once with both edits" {
    local d=$BATS_TEST_TMPDIR/loc mnt=$BATS_TEST_TMPDIR/m
    mkdir -p "$d/sub"
    $PY - "$d" <<'PY'
import os, sys, numpy as np, onnx
from onnx import helper, TensorProto
d = sys.argv[1]
np.full(4, 1, "<f4").tofile(os.path.join(d, "sub", "w.bin"))
np.arange(8, dtype="<f4").tofile(os.path.join(d, "w.bin"))
def ext(name, loc, off):
    t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=[4])
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", loc), ("offset", str(off)), ("length", "16")):
        e = t.external_data.add(); e.key, e.value = k, v
    return t
inits = [ext("a", "sub/w.bin", 0), ext("b", "w.bin", 0), ext("c", "./w.bin", 16)]
nodes = [helper.make_node("Add", ["a", "b"], ["ab"]), helper.make_node("Add", ["ab", "c"], ["y"])]
g = helper.make_graph(nodes, "g", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], inits)
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), os.path.join(d, "m.onnx"))
PY
    mount_fg "$d/m.onnx" "$mnt"
    $GRAPH_ORACLE check "$mnt" "$d/m.onnx"
    $PY -c 'import numpy as np,sys; np.full(4, 5, "<f4").tofile(sys.argv[1]); np.full(4, 7, "<f4").tofile(sys.argv[2])' \
        "$mnt/b/out" "$mnt/c/out"
    touch "$mnt/snapshot_done"
    [ "$(onnx_values "$d/m.onnx" | tr '\n' ' ')" = "a 1.0 1.0 1.0 1.0 b 5.0 5.0 5.0 5.0 c 7.0 7.0 7.0 7.0 " ]
    out=$(cd "$REPO/tests/ort" && $ORT_RUN "$d/m.onnx" '{}')
    $PY -c 'import json,sys; assert json.loads(sys.argv[1])["y"]["data"] == [13]*4, sys.argv[1]' "$out"
}
