#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# Editing ONNX and MindIR models through a mount: the saved file is checked
# with the real consumers (python3-onnx, onnx.checker, onnxruntime-node, the
# protobuf runtime with tests/oracle/mind_ir.proto), never with ckptfs.

load helpers

# the oracles' calls through one Python that imported them (helpers.bash)
setup_file() { pyserve_file_start numpy "$REPO/tests/oracle/ckpt_oracle.py" onnx "$REPO/tests/oracle/graph_oracle.py"; }
teardown_file() { pyserve_file_stop; }

ORT_RUN="node $REPO/tests/ort/run_model.js"

# busy CMD...: CMD fails, and says so with EBUSY's text.
busy() {
    run "$@"
    [ "$status" -ne 0 ]
    [[ "$output" == *"Device or resource busy"* ]]
}

# logged TEXT: the daemon (in the foreground: stderr) gave TEXT as a reason.
logged() {
    grep -qF -- "$1" "$BATS_TEST_TMPDIR/daemon.log"
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

@test "an initializer a node reads: rm -r, rmdir and mv are EBUSY naming the node; the tree stays saveable" {
    local m mnt=$BATS_TEST_TMPDIR/m node before
    m=$(work_copy "$ONNX_FIX/tiny_conv2d.onnx")
    before=$(sha "$m")
    node=$($GRAPH_ORACLE users "$m" 2 | head -1)
    [ "$node" = "#0 (Conv)" ] # the Conv has no name
    mount_fg "$m" "$mnt" -o commit=manual
    busy rm -r "$mnt/2"
    logged "tensor '2' is an input of node '$node'; it cannot be deleted or renamed"
    busy rmdir "$mnt/1"
    busy mv "$mnt/2" "$mnt/bias"
    busy rm -rf "$mnt/1" "$mnt/2"
    # replacing it by another directory deletes it too; its emptied directory comes back
    mkdir "$mnt/new"
    rm "$mnt/2/meta" "$mnt/2/out"
    busy mv -T "$mnt/new" "$mnt/2"
    rmdir "$mnt/new"
    # the tree is the file's, snapshot_done included: nothing was left pending
    $GRAPH_ORACLE check "$mnt" "$m"
    touch "$mnt/snapshot_done"
    [ "$(sha "$m")" = "$before" ]
    # and a later edit saves
    $PY -c 'import numpy as np,sys; np.array([1,2,3,4],dtype="<f4").tofile(sys.argv[1])' "$mnt/2/out"
    touch "$mnt/snapshot_done"
    [ "$($GRAPH_ORACLE values "$m" 2 | tr '\n' ' ')" = "1.0 2.0 3.0 4.0 " ]
    $PY -c 'import onnx,sys; onnx.checker.check_model(sys.argv[1])' "$m"
}

@test "a MindIR parameter a node reads (GRAPH: prefix in the file) is EBUSY; a later save works" {
    local m mnt=$BATS_TEST_TMPDIR/m node before
    m=$(work_copy "$MS/mindspore_old_version_mindir_2.mindir")
    before=$(sha "$m")
    node=$($GRAPH_ORACLE users "$m" dense1.bias | head -1)
    [ "$node" = "163_1_construct_wrapper.29:[CNode]43:25" ]
    mount_fg "$m" "$mnt" -o commit=manual
    busy rm -r "$mnt/dense1.bias"
    logged "tensor 'dense1.bias' is an input of node '$node'"
    busy mv "$mnt/lstm.weight_ih_l0" "$mnt/w_ih"
    node=$($GRAPH_ORACLE users "$m" lstm.weight_ih_l0 | head -1)
    logged "tensor 'lstm.weight_ih_l0' is an input of node '$node'"
    $GRAPH_ORACLE check "$mnt" "$m"
    touch "$mnt/snapshot_done"
    [ "$(sha "$m")" = "$before" ]
    $PY -c 'import numpy as np,sys; np.arange(4,dtype="<f4").tofile(sys.argv[1])' "$mnt/dense1.bias/out"
    touch "$mnt/snapshot_done"
    [ "$($GRAPH_ORACLE values "$m" dense1.bias | tr '\n' ' ')" = "0.0 1.0 2.0 3.0 " ]
    diff <($GRAPH_ORACLE list "$MS/mindspore_old_version_mindir_2.mindir" | grep -v '^dense1.bias') \
         <($GRAPH_ORACLE list "$m" | grep -v '^dense1.bias')
}

@test "a main-graph initializer read only inside an If branch is EBUSY naming the inner node" {
    local m mnt=$BATS_TEST_TMPDIR/m node before t=model.first_layer.0.dw_conv.0.weight
    m=$(work_copy "$ONNX_FIX/silero_vad_legacy.onnx")
    before=$(sha "$m")
    node=$($GRAPH_ORACLE users "$m" "$t" | head -1)
    [ "$node" = "Conv_137" ]
    mount_fg "$m" "$mnt" -o commit=manual
    busy rm -r "$mnt/$t"
    logged "tensor '$t' is an input of node 'Conv_137'"
    [ -s "$mnt/$t/out" ]
    touch "$mnt/snapshot_done"
    [ "$(sha "$m")" = "$before" ]
}

@test "Constant and subgraph tensors live in their node: rm -r and mv are always EBUSY" {
    local m mnt=$BATS_TEST_TMPDIR/m before sub holder
    m=$(work_copy "$MS/mindspore_ori_net.mindir")
    before=$(sha "$m")
    mount_fg "$m" "$mnt" -o commit=manual
    busy rm -r "$mnt/x%const"
    logged "tensor 'x%const' is held by node 'x'"
    busy mv "$mnt/x%const" "$mnt/y%const"
    $GRAPH_ORACLE check "$mnt" "$m"
    touch "$mnt/snapshot_done"
    [ "$(sha "$m")" = "$before" ]

    m=$(work_copy "$ONNX_FIX/silero_vad_v5_subgraphs.onnx")
    before=$(sha "$m")
    # the first tensor inside a subgraph: an unnamed Constant of If_0's else_branch
    read -r sub holder < <($PY - "$m" <<'PY'
import sys, onnx
if_node = [n for n in onnx.load(sys.argv[1]).graph.node if n.op_type == "If"][0]
g = [a.g for a in if_node.attribute if a.name == "else_branch"][0]
c = [n for n in g.node if n.op_type == "Constant"][0]
print(c.output[0] + "%@" + if_node.name + ".else_branch", c.name or "-")
PY
)
    [ "$holder" = "-" ]
    mnt=$BATS_TEST_TMPDIR/m2
    mount_fg "$m" "$mnt" -o commit=manual
    busy rm -r "$mnt/$sub"
    logged "tensor '$sub' is the value of a Constant node"
    busy mv "$mnt/$sub" "$mnt/renamed"
    busy mv "$mnt/Constant_0_output%const" "$mnt/c"
    $GRAPH_ORACLE check "$mnt" "$m"
    touch "$mnt/snapshot_done"
    [ "$(sha "$m")" = "$before" ]
}

@test "Silero's ConstantOfShape values: an edit is saved in place in the node, onnxruntime runs it, rmdir and mv are EBUSY naming the node" {
    local m mnt=$BATS_TEST_TMPDIR/m d='h_zeros%@If_177.else_branch' spec before after
    m=$(work_copy "$ONNX_FIX/silero_vad_legacy.onnx")
    $GRAPH_ORACLE list "$m" | grep -q "^$d"$'\tFLOAT\t\\[1\\]\t4\t'
    spec=$($PY -c 'import json; print(json.dumps({"input": {"dims": [1, 512], "data": [((i * 7) % 13 - 6) / 10 for i in range(512)]}, "sr": {"dims": [], "type": "int64", "data": [16000]}, "h": {"dims": [2, 1, 64], "data": [0] * 128}, "c": {"dims": [2, 1, 64], "data": [0] * 128}}))')
    before=$(cd "$REPO/tests/ort" && $ORT_RUN "$m" "$spec" 2>/dev/null)
    [[ "$before" == *'"output":{"dims":[1,1]'* ]]
    mount_fg "$m" "$mnt" -o commit=manual
    busy rmdir "$mnt/$d"
    logged "tensor '$d' is held by node 'ConstantOfShape_338'; it cannot be deleted or renamed"
    busy rm -r "$mnt/$d"
    busy mv "$mnt/$d" "$mnt/h_zeros"
    [ -s "$mnt/$d/out" ]
    $PY -c 'import numpy as np,sys; np.array([0.25],dtype="<f4").tofile(sys.argv[1])' "$mnt/$d/out"
    touch "$mnt/snapshot_done"
    [ "$($GRAPH_ORACLE values "$m" "$d")" = 0.25 ]
    # in place: the same size, only the value's bytes differ, and the model is
    # the original with that one attribute tensor changed
    [ "$(stat -c %s "$m")" -eq "$(stat -c %s "$ONNX_FIX/silero_vad_legacy.onnx")" ]
    [ "$(cmp -l "$ONNX_FIX/silero_vad_legacy.onnx" "$m" | wc -l)" -le 4 ]
    $PY - "$m" "$ONNX_FIX/silero_vad_legacy.onnx" <<'PY'
import sys, onnx
from onnx import numpy_helper
new, old = onnx.load(sys.argv[1]), onnx.load(sys.argv[2])
def node(model):
    g = [a.g for a in model.graph.node[1].attribute if a.name == "then_branch"][0]
    n = [n for n in g.node if n.name == "If_177"][0]
    g = [a.g for a in n.attribute if a.name == "else_branch"][0]
    return [n for n in g.node if n.name == "ConstantOfShape_338"][0]
assert numpy_helper.to_array(node(new).attribute[0].t).tolist() == [0.25]
node(new).attribute[0].t.CopyFrom(node(old).attribute[0].t)
assert new.SerializeToString() == old.SerializeToString()
onnx.checker.check_model(sys.argv[1])
PY
    # the saved model runs; h of its declared [2, batch, 64] takes If_177's
    # then branch, so the outputs are the original's
    after=$(cd "$REPO/tests/ort" && $ORT_RUN "$m" "$spec" 2>/dev/null)
    [ "$after" = "$before" ]
    fusermount3 -u "$mnt"
    mount_fg "$m" "$BATS_TEST_TMPDIR/again" -o ro
    $GRAPH_ORACLE check "$BATS_TEST_TMPDIR/again" "$m"
}

@test "a main-graph ConstantOfShape value (OUTPUT%const of an unnamed node): edited, onnxruntime's output follows; rmdir names '#1 (ConstantOfShape)'" {
    local m=$BATS_TEST_TMPDIR/fill.onnx mnt=$BATS_TEST_TMPDIR/m spec
    # Y = X + ConstantOfShape(Shape(X), value=0.25), nodes without names
    $PY - "$m" <<'PY'
import sys
import numpy as np
from onnx import TensorProto, checker, helper, numpy_helper, save
nodes = [helper.make_node("Shape", ["X"], ["S"]),
         helper.make_node("ConstantOfShape", ["S"], ["F"],
                          value=numpy_helper.from_array(np.array([0.25], np.float32))),
         helper.make_node("Add", ["X", "F"], ["Y"])]
g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [3])],
                      [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [3])])
model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
model.ir_version = 8
checker.check_model(model)
save(model, sys.argv[1])
PY
    [ "$($GRAPH_ORACLE list "$m" | cut -f1)" = 'F%const' ]
    spec='{"X": {"dims": [3], "data": [1, 2, 3]}}'
    [[ "$(cd "$REPO/tests/ort" && $ORT_RUN "$m" "$spec" 2>/dev/null)" == *'"data":[1.25,2.25,3.25]'* ]]
    mount_fg "$m" "$mnt" -o commit=manual
    busy rmdir "$mnt/F%const"
    logged "tensor 'F%const' is held by node '#1 (ConstantOfShape)'"
    busy mv "$mnt/F%const" "$mnt/G%const"
    $PY -c 'import numpy as np,sys; np.array([-2],dtype="<f4").tofile(sys.argv[1])' "$mnt/F%const/out"
    touch "$mnt/snapshot_done"
    [ "$($GRAPH_ORACLE values "$m" F%const)" = -2.0 ]
    [[ "$(cd "$REPO/tests/ort" && $ORT_RUN "$m" "$spec" 2>/dev/null)" == *'"data":[-1,0,1]'* ]]
    $PY -c 'import onnx,sys; onnx.checker.check_model(sys.argv[1])' "$m"
}

@test "initializers no node reads can be deleted and renamed; the result loads" {
    local m=$BATS_TEST_TMPDIR/spare.onnx mnt=$BATS_TEST_TMPDIR/m spec
    # Add(X, bias), plus two initializers that nothing reads
    $PY - "$m" <<'PY'
import sys
import numpy as np
from onnx import TensorProto, checker, helper, numpy_helper, save
init = [numpy_helper.from_array(np.array([1, 2, 3], dtype=np.float32), "bias"),
        numpy_helper.from_array(np.array([4, 5, 6], dtype=np.float32), "spare"),
        numpy_helper.from_array(np.array([7, -8], dtype=np.int64), "old.name")]
g = helper.make_graph([helper.make_node("Add", ["X", "bias"], ["Y"], name="add")], "g",
                      [helper.make_tensor_value_info("X", TensorProto.FLOAT, [3])],
                      [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [3])], init)
model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
model.ir_version = 8
checker.check_model(model)
save(model, sys.argv[1])
PY
    [ -z "$($GRAPH_ORACLE users "$m" spare)" ]
    [ -z "$($GRAPH_ORACLE users "$m" old.name)" ]
    [ "$($GRAPH_ORACLE users "$m" bias)" = "add" ]
    mount_fg "$m" "$mnt" -o commit=manual
    busy rm -r "$mnt/bias"
    logged "tensor 'bias' is an input of node 'add'"
    rm -r "$mnt/spare"
    mv "$mnt/old.name" "$mnt/new.name"
    touch "$mnt/snapshot_done"
    $PY - "$m" <<'PY'
import sys, onnx
from onnx import numpy_helper
onnx.checker.check_model(sys.argv[1])
g = onnx.load(sys.argv[1]).graph
assert [t.name for t in g.initializer] == ["bias", "new.name"], [t.name for t in g.initializer]
assert list(numpy_helper.to_array(g.initializer[1])) == [7, -8]
PY
    spec='{"X": {"dims": [3], "data": [10, 20, 30]}}'
    [[ "$(cd "$REPO/tests/ort" && $ORT_RUN "$m" "$spec" 2>/dev/null)" == *'"data":[11,22,33]'* ]]
}

@test "a directory made in the mount is free to delete once saved, in that mount and after a remount" {
    local m mnt=$BATS_TEST_TMPDIR/m
    m=$(work_copy "$ONNX_FIX/tiny_conv2d.onnx")
    mount_fg "$m" "$mnt" -o commit=manual
    busy rm -r "$mnt/2" # the readers of this file are now known ...
    mkdir "$mnt/extra"
    $ORACLE meta-of 2 kFloat >"$mnt/extra/meta"
    $PY -c 'import numpy as np,sys; np.array([1,2],dtype="<f4").tofile(sys.argv[1])' "$mnt/extra/out"
    touch "$mnt/snapshot_done"
    [ -z "$($GRAPH_ORACLE users "$m" extra)" ]
    rm -r "$mnt/extra" # ... and forgotten with the file they were of
    busy rm -r "$mnt/2"
    touch "$mnt/snapshot_done"
    cmp "$ONNX_FIX/tiny_conv2d.onnx" "$m"
    mkdir "$mnt/extra2"
    $ORACLE meta-of 2 kFloat >"$mnt/extra2/meta"
    $PY -c 'import numpy as np,sys; np.array([1,2],dtype="<f4").tofile(sys.argv[1])' "$mnt/extra2/out"
    touch "$mnt/snapshot_done"
    fusermount3 -u "$mnt"
    mnt=$BATS_TEST_TMPDIR/again
    mount_fg "$m" "$mnt" -o commit=manual
    [ -z "$($GRAPH_ORACLE users "$m" extra2)" ]
    mv "$mnt/extra2" "$mnt/extra3"
    touch "$mnt/snapshot_done"
    rm -r "$mnt/extra3"
    touch "$mnt/snapshot_done"
    cmp "$ONNX_FIX/tiny_conv2d.onnx" "$m"
    $PY -c 'import onnx,sys; onnx.checker.check_model(sys.argv[1])' "$m"
}

@test "every tensor of every fixture: mv is EBUSY naming the oracle's first reader, or inside a node" {
    local n=0 f m mnt dir node top=$BATS_TEST_TMPDIR/top inner=$BATS_TEST_TMPDIR/inner
    for f in "$ONNX_FIX"/{tiny_conv2d,silero_vad_legacy,silero_vad_v5_subgraphs,ppocrv4_rec_constants,typed_fields_keras2onnx,dtypes_burn}.onnx \
             "$MS"/mindspore_{ori_net,old_version_mindir_2}.mindir; do
        m=$(work_copy "$f")
        mnt=$BATS_TEST_TMPDIR/m$n
        $GRAPH_ORACLE users "$m" >"$top" # main-graph tensors and their first reader
        $GRAPH_ORACLE list "$m" | cut -f1 | { grep -vxFf <(cut -f1 "$top") || true; } >"$inner"
        mount_fg "$m" "$mnt" -o commit=manual
        while IFS=$'\t' read -r dir node; do
            if mv "$mnt/$dir" "$mnt/$dir.x" 2>"$BATS_TEST_TMPDIR/err"; then
                [ -z "$node" ] || { echo "$f: '$dir' was renamed, but $node reads it"; return 1; }
                mv "$mnt/$dir.x" "$mnt/$dir"
            elif ! grep -q "Device or resource busy" "$BATS_TEST_TMPDIR/err" || [ -z "$node" ] ||
                 ! logged "tensor '$dir' is an input of node '$node';"; then
                echo "$f: '$dir': $(cat "$BATS_TEST_TMPDIR/err"); the oracle's reader: '$node'"
                return 1
            fi
        done <"$top"
        while read -r dir; do
            if mv "$mnt/$dir" "$mnt/moved" 2>"$BATS_TEST_TMPDIR/err" ||
               ! grep -q "Device or resource busy" "$BATS_TEST_TMPDIR/err"; then
                echo "$f: '$dir' lives in a node, but mv said: $(cat "$BATS_TEST_TMPDIR/err")"
                return 1
            fi
        done <"$inner"
        $GRAPH_ORACLE check "$mnt" "$m" # nothing changed, snapshot_done still there
        n=$((n + 1))
    done
    [ "$n" -eq 8 ]
}

@test "IR 3 (initializers are graph inputs): a new one is declared, a renamed one's declaration follows it, a deleted one's goes" {
    local m mnt=$BATS_TEST_TMPDIR/m spec
    m=$(work_copy "$ONNX_FIX/tiny_conv2d.onnx")
    mount_fg "$m" "$mnt" -o commit=manual
    mkdir "$mnt/extra" "$mnt/spare"
    for d in extra spare; do
        $ORACLE meta-of 2 kFloat >"$mnt/$d/meta"
        $PY -c 'import numpy as np,sys; np.array([1,2],dtype="<f4").tofile(sys.argv[1])' "$mnt/$d/out"
    done
    touch "$mnt/snapshot_done"
    mv "$mnt/extra" "$mnt/renamed"
    rm -r "$mnt/spare"
    touch "$mnt/snapshot_done"
    $PY - "$m" "$ONNX_FIX/tiny_conv2d.onnx" <<'PY'
import sys, onnx
m, orig = onnx.load(sys.argv[1]), onnx.load(sys.argv[2])
assert m.ir_version < 4
inputs = [i.name for i in m.graph.input]
assert inputs == [i.name for i in orig.graph.input] + ["renamed"], inputs
t = m.graph.input[-1].type.tensor_type
assert t.elem_type == 1 and [d.dim_value for d in t.shape.dim] == [2], t
onnx.checker.check_model(sys.argv[1])
PY
    spec=$($PY -c 'import json; print(json.dumps({"0": {"dims": [2,3,7,5], "data": [0.5]*210}}))')
    (cd "$REPO/tests/ort" && $ORT_RUN "$m" "$spec" >/dev/null)
}

@test "a new tensor of a shape ONNX's reader would refuse ([2^62, 2, 0] of int8: 2^63 bytes before the 0) is refused at the save, naming it, before anything is written" {
    local m mnt=$BATS_TEST_TMPDIR/m
    m=$(work_copy "$ONNX_FIX/tiny_conv2d.onnx")
    local before
    before=$(sha256sum <"$m")
    mount_fg "$m" "$mnt" -o commit=manual
    mkdir "$mnt/huge"
    printf 'shape {\n  dim: 4611686018427387904\n  dim: 2\n  dim: 0\n}\ndata_type: kInt8\n' >"$mnt/huge/meta"
    : >"$mnt/huge/out"
    run touch "$mnt/snapshot_done"
    [ "$status" -ne 0 ]
    err=$(getfattr --absolute-names --only-values -n user.ckptfs.last_error "$mnt")
    echo "$err"
    [[ $err == *"$m: tensor 'huge': ONNX cannot hold it: dims [4611686018427387904,2,0] make a byte count past 2^63-1 (at dim 1); nothing was saved" ]]
    [ "$(sha256sum <"$m")" = "$before" ]
    rm -r "$mnt/huge" # so that the unmount has nothing to save
}

@test "a STRING initializer has no w bits on a writable mount and opening it for writing is EACCES; a FLOAT one stays writable" {
    local f=$BATS_TEST_TMPDIR/str.onnx m=$BATS_TEST_TMPDIR/m
    $PY - "$f" <<'PY'
import sys
import numpy as np
from onnx import TensorProto, helper, numpy_helper, save
s = helper.make_tensor("labels", TensorProto.STRING, [2], [b"cat", b"dog"])
w = numpy_helper.from_array(np.array([1.5, 2.5], dtype=np.float32), "w")
g = helper.make_graph([helper.make_node("Add", ["X", "w"], ["Y"])], "g",
                      [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2])],
                      [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2])], [s, w])
save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), sys.argv[1])
PY
    chmod 0644 "$f"
    mount_fg "$f" "$m" -o commit=manual
    [ "$(stat -c %A "$m/labels/out") $(stat -c %A "$m/labels/meta") $(stat -c %A "$m/labels")" = "-r--r--r-- -r--r--r-- dr-xr-xr-x" ]
    [ "$(stat -c %A "$m/w/out") $(stat -c %A "$m/w")" = "-rw-r--r-- drwxr-xr-x" ]
    run bash -c "printf x > '$m/labels/out'"
    [ "$status" -ne 0 ]
    [[ $output == *"Permission denied"* ]]
    [ "$(cat "$m/labels/out" | tr '\0' ' ')" = "cat dog " ]
}
