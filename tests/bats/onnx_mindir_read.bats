#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# Real ONNX and MindIR models mounted read-only and compared, tensor by
# tensor, with tests/oracle/graph_oracle.py (python3-onnx's numpy_helper for
# ONNX; the official protobuf runtime with tests/oracle/mind_ir.proto for
# MindIR).

load helpers

# the oracles' calls through one Python that imported them (helpers.bash)
setup_file() { pyserve_file_start numpy "$REPO/tests/oracle/ckpt_oracle.py" onnx "$REPO/tests/oracle/graph_oracle.py"; }
teardown_file() { pyserve_file_stop; }

check_fixture() {
    local model=$1 mnt=$BATS_TEST_TMPDIR/m$2
    mount_fg "$model" "$mnt" -o ro
    run $GRAPH_ORACLE check "$mnt" "$model"
    echo "$model: $output"
    [ "$status" -eq 0 ]
}

@test "every readable ONNX fixture matches numpy_helper tensor by tensor" {
    local n=0
    for f in "$ONNX_FIX"/*.onnx "$ONNX_FIX"/external_burn/*.onnx; do
        case $f in *dangling*) continue ;; esac
        check_fixture "$f" "$n"
        n=$((n + 1))
    done
    [ "$n" -eq 9 ]
}

@test "every plain MindIR fixture matches the protobuf runtime tensor by tensor" {
    local n=0
    for f in "$MS"/*.mindir; do
        case $f in *encrpty_key*) continue ;; esac
        check_fixture "$f" "$n"
        n=$((n + 1))
    done
    [ "$n" -eq 4 ]
}

@test "weights in Constant nodes and If subgraphs are shown (PaddleOCR, Silero v5)" {
    mount_fg "$ONNX_FIX/ppocrv4_rec_constants.onnx" "$BATS_TEST_TMPDIR/p" -o ro
    [ "$(ls "$BATS_TEST_TMPDIR/p" | grep -c '%const$')" -eq 325 ]
    [ "$(getfattr --only-values -n user.ckptfs.name "$BATS_TEST_TMPDIR/p/batch_norm2d_148.b_0%const")" = batch_norm2d_148.b_0 ]
    mount_fg "$ONNX_FIX/silero_vad_v5_subgraphs.onnx" "$BATS_TEST_TMPDIR/s" -o ro
    [ "$(ls "$BATS_TEST_TMPDIR/s" | grep -c '%@If_0\.then_branch$')" -gt 0 ]
    [ "$(ls "$BATS_TEST_TMPDIR/s" | grep -c '%@If_0\.else_branch$')" -gt 0 ]
    # the oracle's count: 341 weights and the 4 ConstantOfShape values
    [ "$($GRAPH_ORACLE list "$ONNX_FIX/silero_vad_v5_subgraphs.onnx" | wc -l)" -eq 345 ]
    [ "$(ls "$BATS_TEST_TMPDIR/s" | grep -vc snapshot_done)" -eq 345 ]
    # the one top-level Constant is stored in int64_data: decoded to 8 LE bytes
    [ "$(od -An -tx1 "$BATS_TEST_TMPDIR/s/Constant_0_output%const/out" | wc -w)" -eq 8 ]
}

@test "every tensor attribute of every node is shown: Silero's ConstantOfShape values, two If levels deep" {
    local m=$ONNX_FIX/silero_vad_legacy.onnx mnt=$BATS_TEST_TMPDIR/v d
    # from the ONNX file: 263 tensors, 4 of them ConstantOfShape values
    [ "$($GRAPH_ORACLE list "$m" | wc -l)" -eq 263 ]
    $PY - "$m" >"$BATS_TEST_TMPDIR/want" <<'PY'
import sys, onnx
from onnx import numpy_helper
def walk(g, outer):
    for n in g.node:
        for a in n.attribute:
            if n.op_type == "ConstantOfShape":
                t = numpy_helper.to_array(a.t)
                print("%s%%@%s\t%s\t%s" % (n.output[0], outer, t.dtype, t.tobytes().hex()))
            for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                walk(sub, n.name + "." + a.name)
walk(onnx.load(sys.argv[1]).graph, "")
PY
    [ "$(wc -l <"$BATS_TEST_TMPDIR/want")" -eq 4 ]
    mount_fg "$m" "$mnt" -o ro
    [ "$(ls "$mnt" | grep -vc snapshot_done)" -eq 263 ]
    while IFS=$'\t' read -r d dtype hex; do
        [ "$dtype" = float32 ]
        [ "$(od -An -vtx1 "$mnt/$d/out" | tr -d ' \n')" = "$hex" ]
        [ "$(cat "$mnt/$d/meta")" = "$($ORACLE meta-of 1 kFloat)" ]
        [ "$(getfattr --only-values -n user.ckptfs.name "$mnt/$d")" = "${d%%%@*}" ]
    done <"$BATS_TEST_TMPDIR/want"
    [ -d "$mnt/h_zeros%@If_177.else_branch" ]
    $GRAPH_ORACLE check "$mnt" "$m"
}

@test "attribute tensors of any op: OUTPUT%const, a TENSORS list and a second tensor attribute get %dup, as the oracle names them" {
    local m=$BATS_TEST_TMPDIR/attrs.onnx mnt=$BATS_TEST_TMPDIR/a
    # a ConstantOfShape in the main graph, and a node of a custom domain with a
    # TENSOR attribute, a TENSORS one of two and a graph holding one more
    # (onnx.helper writes attributes sorted by name: branch, scale, tables)
    $PY - "$m" <<'PY'
import sys
import numpy as np
from onnx import TensorProto, helper, numpy_helper, save
arr = lambda v, dt: numpy_helper.from_array(np.array(v, dtype=dt))
inner = helper.make_graph([helper.make_node("ConstantOfShape", ["s"], ["z"], name="cos_in",
                                            value=arr([7], np.int32))], "branch", [],
                          [helper.make_tensor_value_info("z", TensorProto.INT32, None)])
custom = helper.make_node("Thing", ["X"], ["T", "T2"], name="thing", domain="my.domain",
                          scale=arr([1.5, 2.5], np.float32),
                          tables=[arr([[1, 2]], np.int64), arr([3], np.int64)],
                          branch=inner)
g = helper.make_graph([helper.make_node("ConstantOfShape", ["S"], ["Y"],
                                        value=arr([0.25], np.float32)), custom],
                      "g", [helper.make_tensor_value_info("S", TensorProto.INT64, [1]),
                            helper.make_tensor_value_info("X", TensorProto.FLOAT, [1])],
                      [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13),
                                         helper.make_opsetid("my.domain", 1)]), sys.argv[1])
PY
    [ "$($GRAPH_ORACLE list "$m" | cut -f1 | tr '\n' ' ')" = "Y%const z%@thing.branch T%const T%const%dup2 T%const%dup3 " ]
    mount_fg "$m" "$mnt" -o ro
    $GRAPH_ORACLE check "$mnt" "$m"
    [ "$($GRAPH_ORACLE values "$m" T%const%dup3 | tr '\n' ' ')" = "3 " ]
}

@test "typed fields are shown as little-endian raw bytes (keras2onnx float_data/int64_data)" {
    local m=$ONNX_FIX/typed_fields_keras2onnx.onnx mnt=$BATS_TEST_TMPDIR/k
    mount_fg "$m" "$mnt" -o ro
    # an int64_data tensor and a float_data one, read with numpy against the oracle
    for d in $($GRAPH_ORACLE list "$m" | awk -F'\t' '$2 == "INT64" || $2 == "FLOAT" {print $1}' | head -20); do
        $PY -c 'import numpy as np,sys; print("\n".join(repr(v.item()) for v in np.fromfile(sys.argv[1], dtype=sys.argv[2]).ravel()))' \
            "$mnt/$d/out" "$(getfattr --only-values -n user.ckptfs.type "$mnt/$d" | sed 's/INT64/<i8/;s/FLOAT/<f4/')" >"$BATS_TEST_TMPDIR/got"
        $GRAPH_ORACLE values "$m" "$d" >"$BATS_TEST_TMPDIR/want"
        cmp "$BATS_TEST_TMPDIR/got" "$BATS_TEST_TMPDIR/want"
    done
}

@test "MindIR parameters lose the graph prefix in the directory, keep it in user.ckptfs.name" {
    mount_fg "$MS/mindspore_ori_net.mindir" "$BATS_TEST_TMPDIR/m" -o ro
    [ -d "$BATS_TEST_TMPDIR/m/conv1.weight" ]
    [ "$(getfattr --only-values -n user.ckptfs.name "$BATS_TEST_TMPDIR/m/conv1.weight")" = "17_1_construct.Default_wrapper.5:conv1.weight" ]
    # the fc weights are Constant nodes
    [ "$(cat "$BATS_TEST_TMPDIR/m/x%const/meta")" = "$($ORACLE meta-of 400,120 kFloat)" ]
}

@test "external data is served from the side file at its offset (mixed_data)" {
    local mnt=$BATS_TEST_TMPDIR/x
    mount_fg "$ONNX_FIX/external_burn/mixed_data.onnx" "$mnt" -o ro
    cmp "$mnt/weight/out" <(dd if="$ONNX_FIX/external_burn/mixed_data.bin" bs=65536 skip=1 count=1 status=none | head -c 16384)
}

@test "a missing external data file is a clear mount error (fp16_dangling_external)" {
    mkdir "$BATS_TEST_TMPDIR/none"
    run "$CKPTFS" -f -o ro "$ONNX_FIX/fp16_dangling_external.onnx" "$BATS_TEST_TMPDIR/none"
    [ "$status" -ne 0 ]
    [[ "$output" == *"fp16_dangling_external.onnx: tensor 'fc1.weight': external data file"*"2efa3527-1996-11ef-8eaf-0068ebc1adf8.data: No such file or directory"* ]]
    [ "${#lines[@]}" -eq 1 ]
}

# Byte flips and other mutations are the fuzz stage's (tests/fuzz/run.sh:
# 200,000 inputs each through the ONNX and MindIR readers and writers).
@test "every truncation of small ONNX/MindIR files is refused naming the file, or read; never a crash" {
    local dump=$BUILD/ckptfs-dump
    for f in "$ONNX_FIX/tiny_conv2d.onnx" "$MS/mindspore_relu.mindir"; do
        local ext=${f##*.} size
        size=$(stat -c %s "$f")
        for ((n = 0; n < size; n++)); do
            head -c "$n" "$f" >"$BATS_TEST_TMPDIR/t.$ext"
            run "$dump" "$BATS_TEST_TMPDIR/t.$ext"
            # refused with the file named, or read: never a signal
            [ "$status" -lt 128 ]
            [ "$status" -eq 0 ] || [[ "$output" == *"t.$ext"* ]]
        done
    done
}

@test "a MindIR Constant whose tensor has a data type and no data is a type, not a tensor: the rest mounts (MindSpore's bprop graphs)" {
    local m=$BATS_TEST_TMPDIR/bprop.mindir mnt=$BATS_TEST_TMPDIR/b
    # as ops/bprop_mindir/BroadcastTo_bprop.mindir: a ValueNode Constant whose
    # TENSORS value is INT16 (MindIR code 4), dims [], without data, beside a
    # parameter
    $PY - "$m" "$REPO/tests/oracle" <<'PY'
import sys
sys.path.insert(0, sys.argv[2])
import graph_oracle
pb = graph_oracle.mindir_module()
m = pb.ModelProto(ir_version="0.1.1", producer_name="MindSpore", model_version="2.2.0",
                  mind_ir_version=1,
                  little_endian=True)
g = m.graph
g.name = "bprop_graph"
p = g.parameter.add(name="bprop_graph:w", data_type=1, dims=[2])
p.raw_data = b"\x00\x00\x80\x3f\x00\x00\x00\x40"
n = g.node.add(op_type="Constant", name="[ValueNode]37", output=["[ValueNode]37"])
a = n.attribute.add(name="value", type=pb.AttributeProto.TENSORS)
a.tensors.add(data_type=4)
open(sys.argv[1], "wb").write(m.SerializeToString())
PY
    [ "$($GRAPH_ORACLE list "$m" | cut -f1 | tr '\n' ' ')" = "w " ]
    mount_fg "$m" "$mnt" -o ro
    [ "$(ls "$mnt" | tr '\n' ' ')" = "snapshot_done w " ]
    $GRAPH_ORACLE check "$mnt" "$m"
}
