#!/usr/bin/env bats
# Editing ONNX and MindIR models through a mount: the saved file is checked
# with the real consumers (python3-onnx, onnx.checker, onnxruntime-node, the
# protobuf runtime with tests/oracle/mind_ir.proto), never with ckptfs.

load helpers

ORT_RUN="node $REPO/tests/ort/run_model.js"

# unmount_refused MNT: unmount the last mount, whose final save must fail
# (the daemon exits 1 and the model stays as it was).
unmount_refused() {
    local pid status=0
    pid=$(tail -1 "$BATS_TEST_TMPDIR/mounts" | cut -d' ' -f1)
    umount_wait "$1" "$pid" || status=$?
    : >"$BATS_TEST_TMPDIR/mounts"
    [ "$status" -eq 1 ]
}

# work_copy FIXTURE: a writable copy in the test's directory; prints its path.
work_copy() {
    local dst=$BATS_TEST_TMPDIR/$(basename "$1")
    cp "$1" "$dst"
    chmod 644 "$dst"
    echo "$dst"
}

@test "rewriting every tensor through the mount gives back the identical file" {
    local n=0
    for f in "$ONNX_FIX"/{tiny_conv2d,silero_vad_legacy,silero_vad_v5_subgraphs,ppocrv4_rec_constants,typed_fields_keras2onnx,dtypes_burn}.onnx \
             "$MS"/mindspore_{ori_net,old_version_mindir_2}.mindir; do
        local m mnt=$BATS_TEST_TMPDIR/m$n
        m=$(work_copy "$f")
        mount_fg "$m" "$mnt" -o commit=manual
        for d in "$mnt"/*/; do
            [ -w "$d/out" ] || continue # read-only types
            cat "$d/out" >"$BATS_TEST_TMPDIR/tmp.out"
            cat "$BATS_TEST_TMPDIR/tmp.out" >"$d/out"
            cat "$d/meta" >"$BATS_TEST_TMPDIR/tmp.meta"
            cat "$BATS_TEST_TMPDIR/tmp.meta" >"$d/meta"
        done
        touch "$mnt/snapshot_done"
        cmp "$f" "$m"
        n=$((n + 1))
    done
    [ "$n" -eq 8 ]
}

@test "tiny_conv2d: a new Conv bias moves onnxruntime's output by exactly that bias" {
    local m mnt=$BATS_TEST_TMPDIR/m spec
    m=$(work_copy "$ONNX_FIX/tiny_conv2d.onnx")
    spec=$($PY -c 'import json; print(json.dumps({"0": {"dims": [2,3,7,5], "data": [0.5]*210}}))')
    before=$(cd "$REPO/tests/ort" && $ORT_RUN "$m" "$spec" 2>/dev/null)
    mount_fg "$m" "$mnt"
    $PY -c 'import numpy as np,sys; np.array([1.5,-2,3.25,40],dtype="<f4").tofile(sys.argv[1])' "$mnt/2/out"
    touch "$mnt/snapshot_done"
    after=$(cd "$REPO/tests/ort" && $ORT_RUN "$m" "$spec" 2>/dev/null)
    $PY - "$before" "$after" "$ONNX_FIX/tiny_conv2d.onnx" <<'PY'
import json, sys
import numpy as np
from onnx import load, numpy_helper
b, a = (np.array(json.loads(x)["3"]["data"]).reshape(json.loads(x)["3"]["dims"]) for x in sys.argv[1:3])
old = numpy_helper.to_array([t for t in load(sys.argv[3]).graph.initializer if t.name == "2"][0])
new = np.array([1.5, -2, 3.25, 40], dtype=np.float32)
diff = (a - b).transpose(1, 0, 2, 3).reshape(4, -1)
assert np.allclose(diff, (new - old)[:, None], atol=1e-5), (diff[:, :3], new - old)
PY
    $PY -c 'import onnx,sys; onnx.checker.check_model(sys.argv[1])' "$m"
}

@test "MindIR: an edited and an added parameter parse with the protobuf runtime" {
    local m mnt=$BATS_TEST_TMPDIR/m
    m=$(work_copy "$MS/mindspore_old_version_mindir_2.mindir")
    mount_fg "$m" "$mnt"
    $PY -c 'import numpy as np,sys; np.arange(4,dtype="<f4").tofile(sys.argv[1])' "$mnt/dense1.bias/out"
    mkdir "$mnt/extra.scale"
    $ORACLE meta-of 2,3 kDouble >"$mnt/extra.scale/meta"
    $PY -c 'import numpy as np,sys; np.linspace(0,1,6).astype("<f8").tofile(sys.argv[1])' "$mnt/extra.scale/out"
    touch "$mnt/snapshot_done"
    [ "$(getfattr --only-values -n user.ckptfs.name "$mnt/extra.scale")" = "163_1_construct_wrapper.29:extra.scale" ]
    [ "$($GRAPH_ORACLE values "$m" dense1.bias | tr '\n' ' ')" = "0.0 1.0 2.0 3.0 " ]
    [ "$($GRAPH_ORACLE values "$m" extra.scale | tr '\n' ' ')" = "0.0 0.2 0.4 0.6000000000000001 0.8 1.0 " ]
    # the rest of the graph is as it was: 36 nodes, the other 5 parameters unchanged
    run $GRAPH_ORACLE list "$m"
    [ "${#lines[@]}" -eq 7 ]
    diff <($GRAPH_ORACLE list "$MS/mindspore_old_version_mindir_2.mindir" | grep -v '^dense1.bias') \
         <($GRAPH_ORACLE list "$m" | grep -v '^dense1.bias\|^extra.scale')
    fusermount3 -u "$mnt"
    mount_fg "$m" "$BATS_TEST_TMPDIR/again" -o ro
    $GRAPH_ORACLE check "$BATS_TEST_TMPDIR/again" "$m"
}

@test "typed fields stay typed: keras2onnx int64_data and float_data edits" {
    local m mnt=$BATS_TEST_TMPDIR/m
    m=$(work_copy "$ONNX_FIX/typed_fields_keras2onnx.onnx")
    read -r i64 f32 < <($PY - "$m" <<'PY'
import sys, onnx
g = onnx.load(sys.argv[1]).graph
i = [t.name for t in g.initializer if t.int64_data and len(t.int64_data) >= 2][0]
f = [t.name for t in g.initializer if t.float_data][0]
print(i.replace("%", "%25").replace("/", "%2F"), f.replace("%", "%25").replace("/", "%2F"))
PY
)
    mount_fg "$m" "$mnt"
    n=$(( $(stat -c %s "$mnt/$i64/out") / 8 ))
    $PY -c 'import numpy as np,sys; np.arange(-3, int(sys.argv[2])-3, dtype="<i8").tofile(sys.argv[1])' "$mnt/$i64/out" "$n"
    $PY -c 'import numpy as np,sys; a=np.fromfile(sys.argv[1],dtype="<f4"); (a*2).tofile(sys.argv[1])' "$mnt/$f32/out"
    touch "$mnt/snapshot_done"
    $PY - "$m" "$ONNX_FIX/typed_fields_keras2onnx.onnx" "$i64" "$f32" <<'PY'
import sys, onnx
import numpy as np
from onnx import numpy_helper
new, old = (onnx.load(p).graph for p in sys.argv[1:3])
dec = lambda s: s.replace("%2F", "/").replace("%25", "%")
i64, f32 = dec(sys.argv[3]), dec(sys.argv[4])
get = lambda g, n: [t for t in g.initializer if t.name == n][0]
ti, tf = get(new, i64), get(new, f32)
assert ti.int64_data and not ti.raw_data, "int64 tensor left int64_data"
assert tf.float_data and not tf.raw_data, "float tensor left float_data"
assert list(ti.int64_data) == list(range(-3, len(ti.int64_data) - 3))
assert np.array_equal(numpy_helper.to_array(tf), numpy_helper.to_array(get(old, f32)) * 2)
others = [(t.name, t.SerializeToString()) for t in new.initializer if t.name not in (i64, f32)]
assert others == [(t.name, t.SerializeToString()) for t in old.initializer if t.name not in (i64, f32)]
assert [n.SerializeToString() for n in new.node] == [n.SerializeToString() for n in old.node]
PY
}

@test "a new directory becomes an initializer onnxruntime still loads with" {
    local m mnt=$BATS_TEST_TMPDIR/m
    m=$(work_copy "$ONNX_FIX/silero_vad_legacy.onnx")
    mount_fg "$m" "$mnt"
    mkdir "$mnt/my.extra"
    $ORACLE meta-of 3 kInt64 >"$mnt/my.extra/meta"
    $PY -c 'import numpy as np,sys; np.array([7,-8,9],dtype="<i8").tofile(sys.argv[1])' "$mnt/my.extra/out"
    touch "$mnt/snapshot_done"
    $PY - "$m" <<'PY'
import sys, onnx
from onnx import numpy_helper
g = onnx.load(sys.argv[1]).graph
t = [t for t in g.initializer if t.name == "my.extra"]
assert len(t) == 1 and list(numpy_helper.to_array(t[0])) == [7, -8, 9]
onnx.checker.check_model(sys.argv[1])
PY
    (cd "$REPO/tests/ort" && node -e "require('onnxruntime-node').InferenceSession.create(process.argv[1]).then(s => console.log(s.inputNames.join(',')))" "$m")
}

@test "deleting or renaming a tensor a node uses is EBUSY naming the node; nothing saved" {
    local m mnt=$BATS_TEST_TMPDIR/m
    m=$(work_copy "$ONNX_FIX/tiny_conv2d.onnx")
    before=$(sha "$m")
    mount_fg "$m" "$mnt"
    rm -r "$mnt/2"
    run touch "$mnt/snapshot_done"
    [ "$status" -ne 0 ]
    [[ "$(getfattr --only-values -n user.ckptfs.last_error "$mnt")" == *"tensor '2' is an input of node"* ]]
    [ "$(sha "$m")" = "$before" ]
    unmount_refused "$mnt"
    [ "$(sha "$m")" = "$before" ]
}

@test "a Constant's tensor cannot be deleted (EBUSY, the node named)" {
    local m mnt=$BATS_TEST_TMPDIR/m
    m=$(work_copy "$MS/mindspore_ori_net.mindir")
    before=$(sha "$m")
    mount_fg "$m" "$mnt"
    rm -r "$mnt/x%const"
    run touch "$mnt/snapshot_done"
    [ "$status" -ne 0 ]
    [[ "$(getfattr --only-values -n user.ckptfs.last_error "$mnt")" == *"is held by node 'x'"* ]]
    unmount_refused "$mnt"
    [ "$(sha "$m")" = "$before" ]
}
