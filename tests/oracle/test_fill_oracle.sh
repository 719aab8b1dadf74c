#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Self-checks of tests/oracle/fill_oracle.py (the oracle of ckptfs-convert
# --into), without ckptfs: onnx's own fill (`pyfill`) passes `check`, and
# `check` fails on the models a wrong fill would give: the template itself,
# one byte of a filled tensor changed, a kept tensor changed, a node or a
# tensor's name changed, a MindIR parameter renamed; `ckpt` refuses a name
# the template lacks; with an external-data template, onnx's fill saved with
# its data in "<OUT>.data" passes, and inline, in another file or with two
# tensors at one offset it fails.
set -u

HERE=$(cd "$(dirname "$0")" && pwd)
ORACLE=(/usr/bin/python3 "$HERE/fill_oracle.py")
FIX=$(cd "$HERE/../../../shared/fixtures" 2>/dev/null && pwd)
. "$HERE/selfcheck.sh"

# fails DESCRIPTION COMMAND...: ok when COMMAND exits 1 with a fill_oracle line
fails() {
    local what=$1 rc
    shift
    "$@" >/dev/null 2>"$T/err"
    rc=$?
    if [ $rc -eq 1 ] && grep -q '^fill_oracle: ' "$T/err"; then
        ok "$what ($(head -c 100 "$T/err"))"
    else
        nok "$what: exit $rc, $(head -3 "$T/err")"
    fi
}

CONV=$FIX/onnx/tiny_conv2d.onnx
SILERO=$FIX/onnx/silero_vad_legacy.onnx
LENET=$FIX/mindspore/mindspore_ori_net.mindir

check "ckpt of tiny_conv2d" oracle ckpt "$CONV" "$T/w.ckpt" --seed 4
check "ckpt of silero_vad, one left out" oracle ckpt "$SILERO" "$T/s.safetensors" \
    --skip model.decoder.decoder.1.bias
check "onnx's own fill passes check (tiny_conv2d)" \
    oracle pyfill "$CONV" "$T/w.ckpt" "$T/py.onnx"
check "... and check" oracle check "$CONV" "$T/w.ckpt" "$T/py.onnx" --checker
check "onnx's own fill passes check (silero_vad, safetensors)" \
    oracle pyfill "$SILERO" "$T/s.safetensors" "$T/spy.onnx"
check "... and check" oracle check "$SILERO" "$T/s.safetensors" "$T/spy.onnx" --checker
fails "the template is not its fill" oracle check "$CONV" "$T/w.ckpt" "$CONV"

# edit PY_EXPR IN OUT: the model IN with one change made by onnx
edit() {
    py "$1" "$2" "$3" <<'PY'
import sys, onnx
m = onnx.load(sys.argv[2])
g = m.graph
exec(sys.argv[1])
onnx.save(m, sys.argv[3])
PY
}
edit 'b = bytearray(g.initializer[1].raw_data); b[5] ^= 1; g.initializer[1].raw_data = bytes(b)' \
    "$T/py.onnx" "$T/flip.onnx"
fails "one byte of a filled tensor" oracle check "$CONV" "$T/w.ckpt" "$T/flip.onnx"
edit 'i = [t.name for t in g.initializer].index("model.decoder.decoder.1.bias")
b = bytearray(g.initializer[i].raw_data); b[0] ^= 1; g.initializer[i].raw_data = bytes(b)' \
    "$T/spy.onnx" "$T/kept.onnx"
fails "a kept tensor changed" oracle check "$SILERO" "$T/s.safetensors" "$T/kept.onnx"
edit 'g.node[0].name = "other"' "$T/py.onnx" "$T/node.onnx"
fails "a node renamed" oracle check "$CONV" "$T/w.ckpt" "$T/node.onnx"
edit 'g.output[0].name = "out"' "$T/py.onnx" "$T/output.onnx"
fails "an output renamed" oracle check "$CONV" "$T/w.ckpt" "$T/output.onnx"
edit 'g.initializer[0].name = "x"' "$T/py.onnx" "$T/name.onnx"
fails "an initializer renamed" oracle check "$CONV" "$T/w.ckpt" "$T/name.onnx"

# MindIR: the LeNet graph and its checkpoint, parameters through the protobuf runtime
check "ckpt of LeNet's MindIR" oracle ckpt "$LENET" "$T/l.ckpt"
py "$LENET" "$T/l.ckpt" "$T/l.mindir" "$HERE" <<'PY'
import sys
sys.path.insert(0, sys.argv[4])
import fill_oracle as fo
g = fo.Graph(sys.argv[1])
ck = fo.read_ckpt(sys.argv[2])
for p in g.list:
    p.raw_data = ck[g.shown(p)][2]
open(sys.argv[3], "wb").write(g.model.SerializeToString())
PY
check "a MindIR filled by the protobuf runtime passes check" \
    oracle check "$LENET" "$T/l.ckpt" "$T/l.mindir"
py "$T/l.mindir" "$T/l2.mindir" "$HERE" <<'PY'
import sys
sys.path.insert(0, sys.argv[3])
import fill_oracle as fo
g = fo.Graph(sys.argv[1])
g.list[0].name = g.list[0].name.split(":", 1)[1]
open(sys.argv[2], "wb").write(g.model.SerializeToString())
PY
fails "a MindIR parameter without its <graph>: prefix" \
    oracle check "$LENET" "$T/l.ckpt" "$T/l2.mindir"
fails "ckpt --skip of a name the template lacks" oracle ckpt "$CONV" "$T/x.ckpt" --skip nope

# External data: a template saved by onnx with every tensor in one data file; onnx's own
# fill saved the same way into "<OUT>.data" passes, other layouts do not.
# save_ext IN OUT LOCATION [EDIT]: IN saved by onnx with its tensors in LOCATION, after EDIT
save_ext() {
    py "$@" <<'PY'
import os, sys, onnx
m = onnx.load(sys.argv[1])
if len(sys.argv) > 4:
    exec(sys.argv[4])
onnx.save_model(m, sys.argv[2], save_as_external_data=True, all_tensors_to_one_file=True,
                location=sys.argv[3], size_threshold=0)
PY
}
mkdir "$T/ext" "$T/o"
save_ext "$CONV" "$T/ext/t.onnx" weights.bin
check "ckpt of an external-data template" oracle ckpt "$T/ext/t.onnx" "$T/e.ckpt" --seed 6
oracle pyfill "$T/ext/t.onnx" "$T/e.ckpt" "$T/o/inline.onnx"
save_ext "$T/o/inline.onnx" "$T/o/f.onnx" f.onnx.data
check "onnx's fill saved with its data in <OUT>.data passes" \
    oracle check "$T/ext/t.onnx" "$T/e.ckpt" "$T/o/f.onnx" --checker
fails "... and its data inline does not" oracle check "$T/ext/t.onnx" "$T/e.ckpt" "$T/o/inline.onnx"
save_ext "$T/o/inline.onnx" "$T/o/g.onnx" other.data
fails "... nor in a file of another name" oracle check "$T/ext/t.onnx" "$T/e.ckpt" "$T/o/g.onnx"
py "$T/o/f.onnx" "$T/o/h.onnx" <<'PY'
import shutil, sys, onnx
m = onnx.load(sys.argv[1], load_external_data=False)
m.graph.initializer[1].external_data[1].value = m.graph.initializer[0].external_data[1].value
onnx.save(m, sys.argv[2])
shutil.copy(sys.argv[1] + ".data", sys.argv[2] + ".data")
PY
fails "... nor two tensors at one offset" oracle check "$T/ext/t.onnx" "$T/e.ckpt" "$T/o/h.onnx"
save_ext "$T/ext/t.onnx" "$T/o/k.onnx" k.onnx.data
fails "the external template saved elsewhere is not its fill" \
    oracle check "$T/ext/t.onnx" "$T/e.ckpt" "$T/o/k.onnx"
summary
