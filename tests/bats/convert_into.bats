#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# ckptfs-convert --into: a graph filled with a checkpoint's tensors.  The
# oracle (tests/oracle/fill_oracle.py: onnx, the protobuf runtime, numpy)
# makes the checkpoints from the templates' own tensors with other values,
# then checks every tensor of OUT against the checkpoint or the template and
# the rest of the graph against the template; onnx's checker and
# onnxruntime-node run the filled ONNX models, against the same fill done
# by onnx's numpy_helper.  Templates with external data are saved by onnx
# itself (save_model with save_as_external_data): OUT gets "<OUT>.data",
# checked by the oracle field by field, and the template's directory is
# compared by sha256 of every file before and after.  The oracle itself is
# checked on wrong fills by tests/oracle/test_fill_oracle.sh.

load helpers

bats_require_minimum_version 1.5.0

CONVERT=$BUILD/ckptfs-convert
FILL="$PY $REPO/tests/oracle/fill_oracle.py"
ORT_RUN="node $REPO/tests/ort/run_model.js"
LENET_MINDIR=$MS/mindspore_ori_net.mindir
LENET_CKPT=$MS/mindarmour_checkpoint_lenet-10_1875.ckpt
CONV=$ONNX_FIX/tiny_conv2d.onnx
SILERO=$ONNX_FIX/silero_vad_legacy.onnx

setup() {
    T=$BATS_TEST_TMPDIR
}

# ort MODEL SPEC: onnxruntime's outputs as JSON.
ort() {
    (cd "$REPO/tests/ort" && $ORT_RUN "$1" "$2")
}

# save_external IN OUT [KEY=VALUE...]: IN saved by onnx as OUT with external data:
# one=1|0 (all_tensors_to_one_file), threshold=BYTES (size_threshold), attrs=1
# (convert_attribute: Constant nodes' values too), location=NAME (the one file).
save_external() {
    $PY - "$@" <<'PY'
import os, sys, onnx
kw = dict(a.split("=", 1) for a in sys.argv[3:])
m = onnx.load(sys.argv[1])
os.makedirs(os.path.dirname(sys.argv[2]), exist_ok=True)
onnx.save_model(m, sys.argv[2], save_as_external_data=True,
                all_tensors_to_one_file=kw.get("one", "1") == "1",
                location=kw.get("location"), size_threshold=int(kw.get("threshold", "0")),
                convert_attribute=kw.get("attrs") == "1")
PY
}

# tree_sum DIR: the sha256 of every file beneath DIR, hidden ones included, by name.
tree_sum() {
    (cd "$1" && find . -type f -print0 | sort -z | xargs -0 sha256sum)
}

# silero_spec: inputs for silero_vad (as the inline test gives them).
silero_spec() {
    $PY -c 'import json; print(json.dumps({"input": {"dims": [1, 512], "data": [((i * 7) % 13 - 6) / 10 for i in range(512)]}, "sr": {"dims": [], "type": "int64", "data": [16000]}, "h": {"dims": [2, 1, 64], "data": [0.1] * 128}, "c": {"dims": [2, 1, 64], "data": [0.1] * 128}}))'
}

# refused EXPECTED CMD...: CMD fails with status 1 and one line holding
# EXPECTED on stderr; nothing is left in $T/out (no OUT, no temporary file).
refused() {
    local want=$1
    shift
    run --separate-stderr "$@"
    echo "status $status: $stderr"
    [ "$status" -eq 1 ]
    [[ "$stderr" == *"$want"* ]]
    [ "$(printf '%s\n' "$stderr" | wc -l)" -eq 1 ]
    [ -z "$(ls -A "$T/out")" ]
}

@test "ONNX: tiny_conv2d filled from a .ckpt passes the checker and runs as onnx's own fill does" {
    local spec
    $FILL ckpt "$CONV" "$T/w.ckpt" --seed 3
    run --separate-stderr "$CONVERT" --into "$CONV" "$T/w.ckpt" "$T/out.onnx"
    [ "$status" -eq 0 ]
    [ "$stderr" = "ckptfs-convert: $T/out.onnx: filled 2 of 2 initializers; 0 template initializers kept; 0 checkpoint tensors unused" ]
    [ "$($FILL check "$CONV" "$T/w.ckpt" "$T/out.onnx" --checker)" = "ok: 2 filled, 0 kept" ]
    $FILL pyfill "$CONV" "$T/w.ckpt" "$T/py.onnx"
    spec=$($PY -c 'import json; print(json.dumps({"0": {"dims": [2,3,7,5], "data": [(i % 11) / 4 - 1 for i in range(210)]}}))')
    [ "$(ort "$T/out.onnx" "$spec")" = "$(ort "$T/py.onnx" "$spec")" ]
    [ "$(ort "$T/out.onnx" "$spec")" != "$(ort "$CONV" "$spec")" ]
}

@test "ONNX: silero_vad with one initializer missing and optimizer moments extra: reported, checked, run" {
    local spec out
    $FILL ckpt "$SILERO" "$T/w.ckpt" --skip model.decoder.decoder.1.bias \
        --extra moments.a --extra moments.b --extra global_step
    run --separate-stderr "$CONVERT" --into "$SILERO" "$T/w.ckpt" "$T/out.onnx"
    [ "$status" -eq 0 ]
    [ "$stderr" = "ckptfs-convert: $T/out.onnx: filled 68 of 69 initializers; 1 template initializers kept: model.decoder.decoder.1.bias; 3 checkpoint tensors unused: moments.a, moments.b, global_step" ]
    [ "$($FILL check "$SILERO" "$T/w.ckpt" "$T/out.onnx" --checker)" = "ok: 68 filled, 1 kept" ]
    # the tensors inside the If subgraphs are part of the graph: kept as they were
    [ "$($GRAPH_ORACLE list "$T/out.onnx" | grep '%@' | md5sum)" = "$($GRAPH_ORACLE list "$SILERO" | grep '%@' | md5sum)" ]
    $FILL pyfill "$SILERO" "$T/w.ckpt" "$T/py.onnx"
    spec=$($PY -c 'import json; print(json.dumps({"input": {"dims": [1, 512], "data": [((i * 7) % 13 - 6) / 10 for i in range(512)]}, "sr": {"dims": [], "type": "int64", "data": [16000]}, "h": {"dims": [2, 1, 64], "data": [0.1] * 128}, "c": {"dims": [2, 1, 64], "data": [0.1] * 128}}))')
    out=$(ort "$T/out.onnx" "$spec")
    [[ "$out" == *'"output":{"dims":[1,1]'* ]]
    [ "$out" = "$(ort "$T/py.onnx" "$spec")" ]
    [ "$out" != "$(ort "$SILERO" "$spec")" ]
}

@test "ONNX: typed-field initializers (float_data, int64_data) filled from safetensors" {
    local m=$ONNX_FIX/typed_fields_keras2onnx.onnx
    $FILL ckpt "$m" "$T/w.safetensors" --seed 5
    run --separate-stderr "$CONVERT" --into "$m" "$T/w.safetensors" "$T/out.onnx"
    [ "$status" -eq 0 ]
    [[ "$stderr" == *": filled 101 of 101 initializers; 0 template initializers kept; 0 checkpoint"* ]]
    [ "$($FILL check "$m" "$T/w.safetensors" "$T/out.onnx")" = "ok: 101 filled, 0 kept" ]
}

@test "ONNX: every element type (float16, bfloat16, double, the integers) filled byte for byte" {
    local m=$ONNX_FIX/dtypes_burn.onnx
    $FILL ckpt "$m" "$T/w.ckpt" --seed 7
    "$CONVERT" --into "$m" "$T/w.ckpt" "$T/out.onnx"
    [ "$($FILL check "$m" "$T/w.ckpt" "$T/out.onnx")" = "ok: 12 filled, 0 kept" ]
    $FILL ckpt "$m" "$T/w.safetensors" --seed 8
    "$CONVERT" --into "$m" "$T/w.safetensors" "$T/out2.onnx"
    [ "$($FILL check "$m" "$T/w.safetensors" "$T/out2.onnx")" = "ok: 12 filled, 0 kept" ]
}

@test "MindIR: the real LeNet graph filled from the real LeNet checkpoint (the <graph>: prefix kept)" {
    run --separate-stderr "$CONVERT" --into "$LENET_MINDIR" "$LENET_CKPT" "$T/out.mindir"
    [ "$status" -eq 0 ]
    [ "$stderr" = "ckptfs-convert: $T/out.mindir: filled 2 of 2 parameters; 0 template parameters kept; 16 checkpoint tensors unused: fc1.weight, fc1.bias, fc2.weight, fc2.bias, fc3.weight, fc3.bias (+10 more)" ]
    [ "$($FILL check "$LENET_MINDIR" "$LENET_CKPT" "$T/out.mindir")" = "ok: 2 filled, 0 kept" ]
    # the parameters keep their full names in the file
    $PY -c 'import sys; sys.path.insert(0, sys.argv[1]); import graph_oracle as go
m = go.mindir_module().ModelProto(); m.ParseFromString(open(sys.argv[2], "rb").read())
assert [p.name for p in m.graph.parameter] == ["17_1_construct.Default_wrapper.5:conv2.weight", "17_1_construct.Default_wrapper.5:conv1.weight"], m.graph.parameter' \
        "$REPO/tests/oracle" "$T/out.mindir"
    # and the mount shows the checkpoint's values
    mount_fg "$T/out.mindir" "$T/m" -o ro
    cmp "$T/m/conv1.weight/out" <($PY -c '
import sys; sys.path.insert(0, sys.argv[1]); import ckpt_oracle as co
sys.stdout.buffer.write(next(e.out for e in co.load_reference(sys.argv[2])[0] if e.tag == b"conv1.weight"))' "$REPO/tests/oracle" "$LENET_CKPT")
}

@test "MindIR: a 6-parameter LSTM graph, renamed tensors mapped back by --map (a parameter named with or without its prefix)" {
    local m=$MS/mindspore_old_version_mindir_2.mindir
    $FILL ckpt "$m" "$T/w.ckpt" --rename dense1.bias=head.b --rename lstm.weight_ih_l0=rnn.wi \
        --extra rnn.unused
    cat >"$T/names.map" <<'EOF'
# checkpoint name    template name
head.b  dense1.bias

	rnn.wi		163_1_construct_wrapper.29:lstm.weight_ih_l0   
EOF
    run --separate-stderr "$CONVERT" --into "$m" --map "$T/names.map" "$T/w.ckpt" "$T/out.mindir"
    [ "$status" -eq 0 ]
    [[ "$stderr" == *": filled 6 of 6 parameters; 0 template parameters kept; 1 checkpoint tensors unused: rnn.unused" ]]
    [ "$($FILL check "$m" "$T/w.ckpt" "$T/out.mindir" --map "$T/names.map")" = "ok: 6 filled, 0 kept" ]
    # without the map the renamed two are reported on both sides
    run --separate-stderr "$CONVERT" --into "$m" "$T/w.ckpt" "$T/out2.mindir"
    [[ "$stderr" == *": filled 4 of 6 parameters; 2 template parameters kept: dense1.bias, lstm.weight_ih_l0; 3 checkpoint tensors unused: head.b, rnn.wi, rnn.unused" ]]
    [ "$($FILL check "$m" "$T/w.ckpt" "$T/out2.mindir")" = "ok: 4 filled, 2 kept" ]
}

@test "--map: a mapped tensor wins over the checkpoint's tensor of that name, which is reported" {
    # one checkpoint holding both a "2" and an "ema.2"
    $PY -c 'import sys; sys.path.insert(0, sys.argv[1]); import fill_oracle as fo, numpy as np
fo.write_ckpt(sys.argv[2], [("1", "Float32", [4,3,3,2], np.float32(np.arange(72)).tobytes()),
    ("2", "Float32", [4], np.float32([1,2,3,4]).tobytes()),
    ("ema.2", "Float32", [4], np.float32([5,6,7,8]).tobytes())])' "$REPO/tests/oracle" "$T/w.ckpt"
    echo "ema.2 2" >"$T/names.map"
    run --separate-stderr "$CONVERT" --into "$CONV" --map "$T/names.map" "$T/w.ckpt" "$T/out.onnx"
    [ "$status" -eq 0 ]
    [[ "$stderr" == *": filled 2 of 2 initializers; 0 template initializers kept; 1 checkpoint tensors unused: 2" ]]
    [ "$($FILL check "$CONV" "$T/w.ckpt" "$T/out.onnx" --map "$T/names.map" --checker)" = "ok: 2 filled, 0 kept" ]
    [ "$($GRAPH_ORACLE values "$T/out.onnx" 2 | tr '\n' ' ')" = "5.0 6.0 7.0 8.0 " ]
}

@test "--strict: an initializer the checkpoint lacks is an error, and nothing is written" {
    $FILL ckpt "$SILERO" "$T/w.ckpt" --skip model.decoder.decoder.1.bias --skip model_8k.decoder.decoder.1.bias
    mkdir "$T/out"
    refused "ckptfs-convert: $SILERO: 2 initializers have no tensor in $T/w.ckpt (--strict): model.decoder.decoder.1.bias, model_8k.decoder.decoder.1.bias" \
        "$CONVERT" --into "$SILERO" --strict "$T/w.ckpt" "$T/out/x.onnx"
    "$CONVERT" --into "$SILERO" "$T/w.ckpt" "$T/out/x.onnx" 2>/dev/null
    [ "$($FILL check "$SILERO" "$T/w.ckpt" "$T/out/x.onnx")" = "ok: 67 filled, 2 kept" ]
}

@test "a shape or a type mismatch is refused naming the tensor and both types and shapes; nothing written" {
    mkdir "$T/out"
    $FILL ckpt "$CONV" "$T/shape.ckpt" --reshape 1
    refused "ckptfs-convert: $T/shape.ckpt: tensor '1' is float32 [2,3,3,4], but $CONV's initializer '1' is float32 [4,3,3,2]: shapes differ" \
        "$CONVERT" --into "$CONV" "$T/shape.ckpt" "$T/out/x.onnx"
    $FILL ckpt "$CONV" "$T/type.ckpt" --retype 2
    refused "ckptfs-convert: $T/type.ckpt: tensor '2' is int32 [4], but $CONV's initializer '2' is float32 [4]: types differ" \
        "$CONVERT" --into "$CONV" "$T/type.ckpt" "$T/out/x.onnx"
    $FILL ckpt "$ONNX_FIX/dtypes_burn.onnx" "$T/bf.safetensors" --retype const_bf16
    refused "tensor 'const_bf16' is float16 [2,3], but $ONNX_FIX/dtypes_burn.onnx's initializer 'const_bf16' is bfloat16 [2,3]: types differ" \
        "$CONVERT" --into "$ONNX_FIX/dtypes_burn.onnx" "$T/bf.safetensors" "$T/out/x.onnx"
    $FILL ckpt "$LENET_MINDIR" "$T/m.ckpt" --reshape conv1.weight
    refused "tensor 'conv1.weight' is float32 [5,5,1,6], but $LENET_MINDIR's parameter 'conv1.weight' is float32 [6,1,5,5]: shapes differ" \
        "$CONVERT" --into "$LENET_MINDIR" "$T/m.ckpt" "$T/out/x.mindir"
    # a scalar is not a [1]
    $PY -c 'import sys; sys.path.insert(0, sys.argv[1]); import fill_oracle as fo, numpy as np
fo.write_ckpt(sys.argv[2], [("2", "Float32", [], np.float32([1]).tobytes())])' "$REPO/tests/oracle" "$T/s.ckpt"
    refused "tensor '2' is float32 [], but $CONV's initializer '2' is float32 [4]: shapes differ" \
        "$CONVERT" --into "$CONV" "$T/s.ckpt" "$T/out/x.onnx"
}

@test "a malformed or wrong --map is refused with its line; nothing written" {
    mkdir "$T/out"
    $FILL ckpt "$CONV" "$T/w.ckpt" --rename 1=a --rename 2=b
    run_map() { refused "$1" "$CONVERT" --into "$CONV" --map "$T/names.map" "$T/w.ckpt" "$T/out/x.onnx"; }
    printf 'a 1\nb\n' >"$T/names.map"
    run_map "$T/names.map:2: expected 'CKPT_NAME TEMPLATE_NAME', found 1 name"
    printf 'a 1 x\n' >"$T/names.map"
    run_map "$T/names.map:1: expected 'CKPT_NAME TEMPLATE_NAME', found 3 names or more"
    printf '# c\na 1\nnope 2\n' >"$T/names.map"
    run_map "$T/names.map:3: 'nope' is not a tensor of $T/w.ckpt"
    printf 'a 1\nb nope\n' >"$T/names.map"
    run_map "$T/names.map:2: 'nope' is not an initializer of $CONV"
    printf 'a 1\na 2\n' >"$T/names.map"
    run_map "$T/names.map:2: 'a' is mapped twice"
    printf 'a 1\nb 1\n' >"$T/names.map"
    run_map "$T/names.map:2: '1' is filled twice"
    printf 'a 1\nb\0 2\n' >"$T/names.map"
    run_map "$T/names.map: offset 5: a NUL byte: not a text file"
    { printf 'a 1\nb '; head -c 70000 /dev/zero | tr '\0' x; printf ' 2\n'; } >"$T/names.map"
    run_map "$T/names.map:2: line longer than 65536 bytes"
    printf 'a \x01\\\n' >"$T/names.map"
    run_map "$T/names.map:1: '\\x01\\x5c' is not an initializer of $CONV"
    rm "$T/names.map"
    mkdir "$T/names.map"
    run_map "$T/names.map: not a regular file"
    rmdir "$T/names.map"
    mkfifo "$T/names.map"
    run_map "$T/names.map: not a regular file"
    rm "$T/names.map"
    run_map "$T/names.map: No such file or directory"
    # the good map works
    printf 'a 1\r\nb 2\n' >"$T/names.map"
    "$CONVERT" --into "$CONV" --map "$T/names.map" "$T/w.ckpt" "$T/out/x.onnx" 2>/dev/null
    [ "$($FILL check "$CONV" "$T/w.ckpt" "$T/out/x.onnx" --map "$T/names.map" --checker)" = "ok: 2 filled, 0 kept" ]
}

@test "OUT: an existing one is kept without -f and replaced with -f; a name of another format refused" {
    mkdir "$T/out"
    $FILL ckpt "$CONV" "$T/w.ckpt"
    echo keep >"$T/o.onnx"
    run --separate-stderr "$CONVERT" --into "$CONV" "$T/w.ckpt" "$T/o.onnx"
    [ "$status" -eq 1 ]
    [ "$stderr" = "ckptfs-convert: $T/o.onnx: exists (give -f to replace it)" ]
    [ "$(cat "$T/o.onnx")" = keep ]
    # what a killed fill of OUT left goes; files of other names stay
    echo partial >"$T/.o.onnx.ckptfs-Ab3dE9"
    echo other >"$T/.o.onnx.ckptfs-other"
    "$CONVERT" --into "$CONV" -f "$T/w.ckpt" "$T/o.onnx" 2>/dev/null
    [ ! -e "$T/.o.onnx.ckptfs-Ab3dE9" ]
    rm "$T/.o.onnx.ckptfs-other"
    [ "$($FILL check "$CONV" "$T/w.ckpt" "$T/o.onnx" --checker)" = "ok: 2 filled, 0 kept" ]
    refused "ckptfs-convert: $T/out/x.ckpt: named as a checkpoint, but the filled template is ONNX" \
        "$CONVERT" --into "$CONV" "$T/w.ckpt" "$T/out/x.ckpt"
    refused "ckptfs-convert: $LENET_CKPT: a checkpoint, not an ONNX or MindIR graph: --into takes a graph to fill" \
        "$CONVERT" --into "$LENET_CKPT" "$T/w.ckpt" "$T/out/x.onnx"
    refused "ckptfs-convert: $T/out/x.onnx.zst: named as zstd-compressed, but the filled template is not" \
        "$CONVERT" --into "$CONV" "$T/w.ckpt" "$T/out/x.onnx.zst"
    # a compressed template gives a compressed OUT
    zstd -q "$CONV" -o "$T/t.onnx.zst"
    refused "ckptfs-convert: $T/out/x.onnx: the filled template is zstd-compressed as the template is: name it .zst" \
        "$CONVERT" --into "$T/t.onnx.zst" "$T/w.ckpt" "$T/out/x.onnx"
    "$CONVERT" --into "$T/t.onnx.zst" "$T/w.ckpt" "$T/z.onnx.zst" 2>/dev/null
    zstd -q -d "$T/z.onnx.zst" -o "$T/z.onnx"
    [ "$($FILL check "$CONV" "$T/w.ckpt" "$T/z.onnx" --checker)" = "ok: 2 filled, 0 kept" ]
    [ -z "$(ls -A "$T" | grep -i ckptfs)" ]
}

@test "a split MindIR template is refused naming its data file; so is a checkpoint the reader refuses" {
    mkdir "$T/out"
    $FILL ckpt "$CONV" "$T/w.ckpt"
    # a split MindIR, current and legacy layout
    $PY "$REPO/tests/oracle/split_mindir.py" "$LENET_MINDIR" "$T/split/lenet"
    refused "ckptfs-convert: $T/split/lenet_graph.mindir: keeps tensor data in $T/split/lenet_variables/data_0: a split MindIR template is not supported (export it with its data inline first)" \
        "$CONVERT" --into "$T/split/lenet_graph.mindir" "$LENET_CKPT" "$T/out/x.mindir"
    $PY "$REPO/tests/oracle/split_mindir.py" "$LENET_MINDIR" "$T/legacy/lenet" --legacy
    refused "ckptfs-convert: $T/legacy/lenet_graph.mindir: keeps tensor data in $T/legacy/lenet_variables/data_0: a split MindIR template is not supported" \
        "$CONVERT" --into "$T/legacy/lenet_graph.mindir" "$LENET_CKPT" "$T/out/x.mindir"
    head -c 100 "$T/w.ckpt" >"$T/cut.ckpt"
    refused "ckptfs-convert: $T/cut.ckpt: " "$CONVERT" --into "$CONV" "$T/cut.ckpt" "$T/out/x.onnx"
}

@test "ONNX external data in one file: OUT gets <OUT>.data, the template's directory is untouched, OUT runs as onnx's fill" {
    local before spec
    save_external "$CONV" "$T/t/model.onnx" location=weights.bin
    before=$(tree_sum "$T/t")
    $FILL ckpt "$T/t/model.onnx" "$T/w.safetensors" --seed 3
    mkdir "$T/out"
    run --separate-stderr "$CONVERT" --into "$T/t/model.onnx" "$T/w.safetensors" "$T/out/f.onnx"
    [ "$status" -eq 0 ]
    [ "$stderr" = "ckptfs-convert: $T/out/f.onnx: filled 2 of 2 initializers; 0 template initializers kept; 0 checkpoint tensors unused" ]
    [ "$(ls -A "$T/out" | tr '\n' ' ')" = "f.onnx f.onnx.data " ]
    [ "$(tree_sum "$T/t")" = "$before" ]
    [ "$($FILL check "$T/t/model.onnx" "$T/w.safetensors" "$T/out/f.onnx" --checker)" = "ok: 2 filled, 0 kept, 2 external" ]
    $FILL pyfill "$T/t/model.onnx" "$T/w.safetensors" "$T/py.onnx"
    spec=$($PY -c 'import json; print(json.dumps({"0": {"dims": [2,3,7,5], "data": [(i % 11) / 4 - 1 for i in range(210)]}}))')
    [ "$(ort "$T/out/f.onnx" "$spec")" = "$(ort "$T/py.onnx" "$spec")" ]
    [ "$(ort "$T/out/f.onnx" "$spec")" != "$(ort "$T/t/model.onnx" "$spec")" ]
}

@test "ONNX external data, some tensors inline: inline ones stay inline, kept and subgraph tensors move to <OUT>.data" {
    local before out
    # onnx's default: tensors of 1 KiB and more external, the rest inline
    save_external "$SILERO" "$T/t/model.onnx" location=weights.bin threshold=1024
    before=$(tree_sum "$T/t")
    # one external and one inline initializer kept
    $FILL ckpt "$T/t/model.onnx" "$T/w.ckpt" --skip model.encoder.11.0.proj.weight \
        --skip model.decoder.decoder.1.bias
    mkdir "$T/out"
    run --separate-stderr "$CONVERT" --into "$T/t/model.onnx" "$T/w.ckpt" "$T/out/f.onnx"
    [ "$status" -eq 0 ]
    [ "$stderr" = "ckptfs-convert: $T/out/f.onnx: filled 67 of 69 initializers; 2 template initializers kept: model.encoder.11.0.proj.weight, model.decoder.decoder.1.bias; 0 checkpoint tensors unused" ]
    [ "$(ls -A "$T/out" | tr '\n' ' ')" = "f.onnx f.onnx.data " ]
    [ "$(tree_sum "$T/t")" = "$before" ]
    # the If subgraphs' initializers were external too: 52 in all, as in the template
    [ "$($FILL check "$T/t/model.onnx" "$T/w.ckpt" "$T/out/f.onnx" --checker)" = "ok: 67 filled, 2 kept, 52 external" ]
    $FILL pyfill "$T/t/model.onnx" "$T/w.ckpt" "$T/py.onnx"
    out=$(ort "$T/out/f.onnx" "$(silero_spec)")
    [[ "$out" == *'"output":{"dims":[1,1]'* ]]
    [ "$out" = "$(ort "$T/py.onnx" "$(silero_spec)")" ]
    [ "$out" != "$(ort "$T/t/model.onnx" "$(silero_spec)")" ]
}

@test "ONNX external data in one file per tensor, Constant values too: all of it goes to the one <OUT>.data" {
    local before out
    save_external "$SILERO" "$T/t/model.onnx" one=0 threshold=1024
    [ "$(ls "$T/t" | wc -l)" -eq 53 ]
    before=$(tree_sum "$T/t")
    $FILL ckpt "$T/t/model.onnx" "$T/w.ckpt" --seed 9
    mkdir "$T/out"
    "$CONVERT" --into "$T/t/model.onnx" "$T/w.ckpt" "$T/out/f.onnx" 2>/dev/null
    [ "$(ls -A "$T/out" | tr '\n' ' ')" = "f.onnx f.onnx.data " ]
    [ "$(tree_sum "$T/t")" = "$before" ]
    [ "$($FILL check "$T/t/model.onnx" "$T/w.ckpt" "$T/out/f.onnx" --checker)" = "ok: 69 filled, 0 kept, 52 external" ]
    $FILL pyfill "$T/t/model.onnx" "$T/w.ckpt" "$T/py.onnx"
    out=$(ort "$T/out/f.onnx" "$(silero_spec)")
    [[ "$out" == *'"output":{"dims":[1,1]'* ]]
    [ "$out" = "$(ort "$T/py.onnx" "$(silero_spec)")" ]
    # every tensor, Constant nodes' values included (onnxruntime runs neither
    # this template nor its fill: its shape inference wants small subgraph
    # tensors inline)
    save_external "$SILERO" "$T/a/model.onnx" one=0 attrs=1
    [ "$(ls "$T/a" | wc -l)" -eq 264 ]
    before=$(tree_sum "$T/a")
    "$CONVERT" --into "$T/a/model.onnx" "$T/w.ckpt" "$T/out/a.onnx" 2>/dev/null
    [ "$(tree_sum "$T/a")" = "$before" ]
    [ "$($FILL check "$T/a/model.onnx" "$T/w.ckpt" "$T/out/a.onnx" --checker)" = "ok: 69 filled, 0 kept, 263 external" ]
}

@test "OUT beside an external-data template: only OUT and OUT.data are created; an existing OUT.data needs -f" {
    local before
    save_external "$CONV" "$T/t/model.onnx" location=weights.bin
    $FILL ckpt "$T/t/model.onnx" "$T/w.ckpt" --seed 1
    $FILL ckpt "$T/t/model.onnx" "$T/w2.ckpt" --seed 2
    before=$(tree_sum "$T/t")
    "$CONVERT" --into "$T/t/model.onnx" "$T/w.ckpt" "$T/t/f.onnx" 2>/dev/null
    [ "$(ls -A "$T/t" | tr '\n' ' ')" = "f.onnx f.onnx.data model.onnx weights.bin " ]
    [ "$(tree_sum "$T/t" | grep -v ' ./f\.onnx')" = "$before" ]
    [ "$($FILL check "$T/t/model.onnx" "$T/w.ckpt" "$T/t/f.onnx" --checker)" = "ok: 2 filled, 0 kept, 2 external" ]
    # OUT.data alone is not replaced without -f, OUT stays absent
    rm "$T/t/f.onnx"
    echo keep >"$T/t/f.onnx.data"
    run --separate-stderr "$CONVERT" --into "$T/t/model.onnx" "$T/w.ckpt" "$T/t/f.onnx"
    [ "$status" -eq 1 ]
    [ "$stderr" = "ckptfs-convert: $T/t/f.onnx.data: exists (give -f to replace it)" ]
    [ "$(cat "$T/t/f.onnx.data")" = keep ]
    [ ! -e "$T/t/f.onnx" ]
    # with -f both are written; again with -f over both, from another checkpoint
    "$CONVERT" --into "$T/t/model.onnx" -f "$T/w.ckpt" "$T/t/f.onnx" 2>/dev/null
    [ "$($FILL check "$T/t/model.onnx" "$T/w.ckpt" "$T/t/f.onnx" --checker)" = "ok: 2 filled, 0 kept, 2 external" ]
    run --separate-stderr "$CONVERT" --into "$T/t/model.onnx" "$T/w2.ckpt" "$T/t/f.onnx"
    [ "$stderr" = "ckptfs-convert: $T/t/f.onnx: exists (give -f to replace it)" ]
    "$CONVERT" --into "$T/t/model.onnx" -f "$T/w2.ckpt" "$T/t/f.onnx" 2>/dev/null
    [ "$($FILL check "$T/t/model.onnx" "$T/w2.ckpt" "$T/t/f.onnx" --checker)" = "ok: 2 filled, 0 kept, 2 external" ]
    [ "$(ls -A "$T/t" | tr '\n' ' ')" = "f.onnx f.onnx.data model.onnx weights.bin " ]
    [ "$(tree_sum "$T/t" | grep -v ' ./f\.onnx')" = "$before" ]
}

@test "refused: <OUT>.data that is a file of the template or the checkpoint (by name or by link) or a directory; nothing written" {
    local before
    # the template's data file is "w.onnx.data": an OUT "w.onnx" beside it would take it
    save_external "$CONV" "$T/t/model.onnx" location=w.onnx.data
    $FILL ckpt "$T/t/model.onnx" "$T/w.ckpt"
    before=$(tree_sum "$T/t")
    mkdir "$T/out"
    refused "ckptfs-convert: $T/t/w.onnx.data: is $T/t/model.onnx or one of its files: OUT's data would go there (name OUT otherwise)" \
        "$CONVERT" --into "$T/t/model.onnx" -f "$T/w.ckpt" "$T/t/w.onnx"
    [ "$(tree_sum "$T/t")" = "$before" ]
    ln -s "$T/t/w.onnx.data" "$T/out/s.onnx.data"
    ln "$T/t/w.onnx.data" "$T/out/h.onnx.data"
    mkdir "$T/out/d.onnx.data"
    cp "$T/w.ckpt" "$T/out/c.onnx.data"
    for o in s h d; do
        run --separate-stderr "$CONVERT" --into "$T/t/model.onnx" -f "$T/w.ckpt" "$T/out/$o.onnx"
        echo "$o: $status $stderr"
        [ "$status" -eq 1 ]
    done
    run --separate-stderr "$CONVERT" --into "$T/t/model.onnx" -f "$T/w.ckpt" "$T/out/s.onnx"
    [ "$stderr" = "ckptfs-convert: $T/out/s.onnx.data: is $T/t/model.onnx or one of its files: OUT's data would go there (name OUT otherwise)" ]
    run --separate-stderr "$CONVERT" --into "$T/t/model.onnx" -f "$T/w.ckpt" "$T/out/h.onnx"
    [ "$stderr" = "ckptfs-convert: $T/out/h.onnx.data: is $T/t/model.onnx or one of its files: OUT's data would go there (name OUT otherwise)" ]
    run --separate-stderr "$CONVERT" --into "$T/t/model.onnx" -f "$T/w.ckpt" "$T/out/d.onnx"
    [ "$stderr" = "ckptfs-convert: $T/out/d.onnx.data: is a directory" ]
    run --separate-stderr "$CONVERT" --into "$T/t/model.onnx" -f "$T/out/c.onnx.data" "$T/out/c.onnx"
    [ "$stderr" = "ckptfs-convert: $T/out/c.onnx.data: is $T/out/c.onnx.data or one of its files: OUT's data would go there (name OUT otherwise)" ]
    [ "$(ls -A "$T/out" | tr '\n' ' ')" = "c.onnx.data d.onnx.data h.onnx.data s.onnx.data " ]
    [ "$(tree_sum "$T/t")" = "$before" ]
    cmp "$T/w.ckpt" "$T/out/c.onnx.data"
}

@test "a zstd-compressed ONNX template with external data gives OUT.zst and a plain <OUT.zst>.data" {
    save_external "$SILERO" "$T/t/model.onnx" location=weights.bin threshold=1024
    zstd -q --rm "$T/t/model.onnx"
    $FILL ckpt "$SILERO" "$T/w.ckpt" --seed 4
    mkdir "$T/out"
    "$CONVERT" --into "$T/t/model.onnx.zst" "$T/w.ckpt" "$T/out/f.onnx.zst" 2>/dev/null
    [ "$(ls -A "$T/out" | tr '\n' ' ')" = "f.onnx.zst f.onnx.zst.data " ]
    zstd -q -d "$T/out/f.onnx.zst" -o "$T/out/f.onnx"
    zstd -q -d "$T/t/model.onnx.zst" -o "$T/t/model.onnx"
    [ "$($FILL check "$T/t/model.onnx" "$T/w.ckpt" "$T/out/f.onnx" --data-file f.onnx.zst.data --checker)" = "ok: 69 filled, 0 kept, 52 external" ]
}

@test "kill -9 mid-fill of a 256 MiB external-data template leaves neither OUT nor OUT.data; the next fill cleans up" {
    local before
    $PY "$REPO/bench/gen_ckpt.py" "$T/big.ckpt" --size $((256 << 20)) --count 8
    $FILL template "$T/big.ckpt" "$T/inline.onnx"
    save_external "$T/inline.onnx" "$T/t/model.onnx" location=weights.bin
    rm "$T/inline.onnx"
    before=$(tree_sum "$T/t")
    mkdir "$T/o"
    kill_while_writing "$T/o" f.onnx "$CONVERT" --into "$T/t/model.onnx" "$T/big.ckpt" "$T/o/f.onnx"
    [ ! -e "$T/o/f.onnx" ] && [ ! -e "$T/o/f.onnx.data" ] || false
    [ -n "$(ls -A "$T/o" | grep '\.ckptfs-')" ]   # what it left behind
    [ "$(tree_sum "$T/t")" = "$before" ]
    "$CONVERT" -q --into "$T/t/model.onnx" "$T/big.ckpt" "$T/o/f.onnx" 2>/dev/null
    [ -z "$(ls -A "$T/o" | grep '\.ckptfs-' | grep -v lock)" ]
    [ "$(ls -A "$T/o" | grep -v lock | tr '\n' ' ')" = "f.onnx f.onnx.data " ]
    [ "$($FILL check "$T/t/model.onnx" "$T/big.ckpt" "$T/o/f.onnx")" = "ok: 8 filled, 0 kept, 8 external" ]
    [ "$(tree_sum "$T/t")" = "$before" ]
}

@test "killed at each rename of OUT and OUT.data: all old, or once the journal is in place all new after the next fill or writable mount" {
    local o when journal
    command -v strace >/dev/null
    save_external "$CONV" "$T/t/model.onnx" location=weights.bin
    $FILL ckpt "$T/t/model.onnx" "$T/a.ckpt" --seed 1
    $FILL ckpt "$T/t/model.onnx" "$T/b.ckpt" --seed 2
    # kill_at WHEN ARGS...: the fill, killed as the WHENth such call starts
    kill_at() {
        local when=$1
        shift
        run strace -f -o /dev/null -e trace="${when%:*}" \
            -e inject="${when%:*}:signal=KILL:when=${when#*:}" "$CONVERT" --into "$T/t/model.onnx" "$@"
        [ "$status" -ne 0 ]
    }
    # The renames of the fill: the journal's, OUT.data's, OUT's; then the
    # journal is unlinked.
    for when in renameat:1 renameat:2 renameat:3 unlinkat:1; do
        # a first fill, OUT absent: the next fill finishes it (and then
        # refuses to replace it without -f) or, killed before the journal,
        # finds nothing and fills
        o=$T/first.$when
        mkdir "$o"
        kill_at "$when" "$T/b.ckpt" "$o/f.onnx"
        journal=$(ls -A "$o" | grep -c 'ckptfs-journal$' || true)
        echo "first, killed at $when: journal $journal"
        if [ "$when" = renameat:1 ]; then
            [ "$journal" -eq 0 ] && [ ! -e "$o/f.onnx" ] && [ ! -e "$o/f.onnx.data" ] || false
        else
            [ "$journal" -eq 1 ]
        fi
        run --separate-stderr "$CONVERT" --into "$T/t/model.onnx" "$T/b.ckpt" "$o/f.onnx"
        if [ "$when" = renameat:1 ]; then
            [ "$status" -eq 0 ]
        else
            [ "$status" -eq 1 ] && [ "$stderr" = "ckptfs-convert: $o/f.onnx: exists (give -f to replace it)" ] || false
        fi
        [ "$($FILL check "$T/t/model.onnx" "$T/b.ckpt" "$o/f.onnx" --checker)" = "ok: 2 filled, 0 kept, 2 external" ]
        [ "$(ls -A "$o" | grep -v 'ckptfs-lock$' | tr '\n' ' ')" = "f.onnx f.onnx.data " ]
        # a fill replacing OUT and OUT.data: the next writable mount of OUT
        # finishes it or removes what it left
        o=$T/again.$when
        mkdir "$o"
        "$CONVERT" --into "$T/t/model.onnx" "$T/a.ckpt" "$o/f.onnx" 2>/dev/null
        kill_at "$when" -f "$T/b.ckpt" "$o/f.onnx"
        journal=$(ls -A "$o" | grep -c 'ckptfs-journal$' || true)
        echo "replacing, killed at $when: journal $journal"
        if [ "$when" = renameat:1 ]; then
            [ "$journal" -eq 0 ]
            [ "$($FILL check "$T/t/model.onnx" "$T/a.ckpt" "$o/f.onnx")" = "ok: 2 filled, 0 kept, 2 external" ]
        else
            [ "$journal" -eq 1 ]
        fi
        mount_fg "$o/f.onnx" "$T/m.$when"
        unmount "$T/m.$when"
        [ "$(ls -A "$o" | grep -v 'ckptfs-lock$' | tr '\n' ' ')" = "f.onnx f.onnx.data " ]
        if [ "$when" = renameat:1 ]; then
            [ "$($FILL check "$T/t/model.onnx" "$T/a.ckpt" "$o/f.onnx" --checker)" = "ok: 2 filled, 0 kept, 2 external" ]
        else
            [ "$($FILL check "$T/t/model.onnx" "$T/b.ckpt" "$o/f.onnx" --checker)" = "ok: 2 filled, 0 kept, 2 external" ]
        fi
    done
}

@test "a distributed checkpoint (-o strategy), slices cut along later dimensions included, fills a graph of its tensors" {
    local s D
    for s in 1 2 3 4 5 6; do
        D=$T/$s
        $PY "$REPO/tests/oracle/dist_random.py" gen "$D" --seed "$s" >/dev/null
        $FILL template "$D/full.ckpt" "$D/t.onnx"
        "$CONVERT" --into "$D/t.onnx" -o strategy="$D/strategy.ckpt" "$D/dist" "$D/out.onnx" 2>/dev/null
        # every tensor filled with the merged bytes: the full model the ranks were cut from
        run $FILL check "$D/t.onnx" "$D/full.ckpt" "$D/out.onnx" --checker
        echo "seed $s: $output"
        [ "$status" -eq 0 ]
        [[ "$output" == "ok: "*" filled, 0 kept" ]]
    done
}

@test "usage: --strict needs --into, --into takes no target options (exit 2); OUT may not be CKPT or TEMPLATE" {
    mkdir "$T/out"
    $FILL ckpt "$CONV" "$T/w.ckpt"
    for args in "--strict $T/w.ckpt $T/out/x.ckpt" \
                "--into $CONV --to ckpt $T/w.ckpt $T/out/x.onnx" \
                "--into $CONV -o zstd_level=3 $T/w.ckpt $T/out/x.onnx" \
                "--into=$CONV $T/w.ckpt" "--into $CONV --map= $T/w.ckpt $T/out/x.onnx"; do
        run --separate-stderr "$CONVERT" $args
        echo "$args: $status $stderr"
        [ "$status" -eq 2 ]
        [[ "$stderr" == "ckptfs-convert: "*"usage: ckptfs-convert"* ]]
    done
    [ -z "$(ls -A "$T/out")" ]
    # an ONNX model's initializers fill a template too, but not in place
    "$CONVERT" --into "$CONV" "$T/w.ckpt" "$T/w.onnx" 2>/dev/null
    cp "$T/w.onnx" "$T/w2.onnx"
    run --separate-stderr "$CONVERT" --into "$CONV" -f "$T/w2.onnx" "$T/w2.onnx"
    [ "$status" -eq 1 ]
    [ "$stderr" = "ckptfs-convert: $T/w2.onnx: is $T/w2.onnx or one of its files: write it elsewhere" ]
    cmp "$T/w.onnx" "$T/w2.onnx"
    "$CONVERT" --into "$CONV" "$T/w.onnx" "$T/out/from_onnx.onnx" 2>/dev/null
    cmp "$T/w.onnx" "$T/out/from_onnx.onnx"
    rm "$T/out/from_onnx.onnx"
    cp "$CONV" "$T/t.onnx"
    run --separate-stderr "$CONVERT" --into="$T/t.onnx" -f "$T/w.ckpt" "$T/t.onnx"
    [ "$status" -eq 1 ]
    [ "$stderr" = "ckptfs-convert: $T/t.onnx: is $T/t.onnx or one of its files: write it elsewhere" ]
    cmp "$CONV" "$T/t.onnx"
    # the = forms
    "$CONVERT" --into="$CONV" --map="$T/empty.map" -q "$T/w.ckpt" "$T/out/x.onnx" 2>/dev/null && false
    : >"$T/empty.map"
    "$CONVERT" --into="$CONV" --map="$T/empty.map" -q "$T/w.ckpt" "$T/out/x.onnx" 2>/dev/null
    [ "$($FILL check "$CONV" "$T/w.ckpt" "$T/out/x.onnx" --checker)" = "ok: 2 filled, 0 kept" ]
}

@test "an encrypted MindIR template gives an OUT encrypted the same way, with the LeNet checkpoint's weights" {
    local key=30313233343536373839414243444546 env="$PY $REPO/tests/oracle/envelope_oracle.py"
    $env encrypt --mode AES-GCM --key-hex "$key" "$LENET_MINDIR" "$T/enc.mindir"
    CKPTFS_KEY_HEX=$key "$CONVERT" --into "$T/enc.mindir" "$LENET_CKPT" "$T/out.mindir" 2>/dev/null
    ! cmp -s "$T/out.mindir" "$T/enc.mindir" || false
    $env decrypt --key-hex "$key" --expect-mode AES-GCM "$T/out.mindir" "$T/plain.mindir"
    [ "$($FILL check "$LENET_MINDIR" "$LENET_CKPT" "$T/plain.mindir")" = "ok: 2 filled, 0 kept" ]
    # one key from the environment opens an encrypted checkpoint and template alike
    $env encrypt --mode AES-CBC --key-hex "$key" "$LENET_CKPT" "$T/enc.ckpt"
    CKPTFS_KEY_HEX=$key "$CONVERT" --into "$T/enc.mindir" "$T/enc.ckpt" "$T/out2.mindir" 2>/dev/null
    $env decrypt --key-hex "$key" --expect-mode AES-GCM "$T/out2.mindir" "$T/plain2.mindir"
    [ "$($FILL check "$LENET_MINDIR" "$LENET_CKPT" "$T/plain2.mindir")" = "ok: 2 filled, 0 kept" ]
    # without the key the template is refused, nothing written
    mkdir "$T/out"
    refused "$T/enc.mindir: " "$CONVERT" --into "$T/enc.mindir" "$LENET_CKPT" "$T/out/x.mindir"
}

@test "random --map files: each is taken or refused with one line, never a crash, and nothing half-written" {
    local m
    mkdir "$T/out"
    $FILL ckpt "$CONV" "$T/w.ckpt" --rename 1=a --rename 2=b
    $PY - "$T/maps" <<'PY'
import os, random, sys
rng = random.Random(15)
os.mkdir(sys.argv[1])
# mostly well-formed lines, valid or not for this pair of models, and some noise
lines = [b"a 1", b"b 2"] * 4 + [b"b\t 1", b" a  2\r", b"# c", b"#a 1 2", b"", b"  ", b"1 2", b"a",
         b"a 1 x", b"a\xff 1", b"b 2\x00", b"\\ 2", b"a" * 70000 + b" 1"]
for i in range(60):
    data = b"\n".join(rng.choice(lines) if rng.random() < 0.9 else
                      bytes(rng.randrange(256) for _ in range(rng.randrange(1, 8)))
                      for _ in range(rng.randrange(0, 5)))
    open(os.path.join(sys.argv[1], "%02d.map" % i), "wb").write(data + rng.choice([b"", b"\n"]))
PY
    for m in $(seq -w 0 59); do
        run --separate-stderr "$CONVERT" --into "$CONV" --map "$T/maps/$m.map" "$T/w.ckpt" "$T/out/x.onnx"
        echo "$m: $status $stderr"
        [ "$status" -eq 0 ] || [ "$status" -eq 1 ]
        [ "$(printf '%s\n' "$stderr" | wc -l)" -eq 1 ]
        [[ "$stderr" == "ckptfs-convert: "* ]]
        if [ "$status" -eq 0 ]; then
            $FILL check "$CONV" "$T/w.ckpt" "$T/out/x.onnx" --map "$T/maps/$m.map" --checker
            rm "$T/out/x.onnx"
        fi
        [ -z "$(ls -A "$T/out")" ]
    done
}
