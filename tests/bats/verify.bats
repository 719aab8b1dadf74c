#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# A save is read back before it replaces the model: the encoder never
# writes a file the reader refuses or reads differently, and when the
# read-back differs from the tree the save fails with one line and leaves
# the model and the edits as they were.  Checkpoints are written and read
# by the oracle (ckpt_oracle.py, MindSpore's loader rules: adjacent records
# of one tag are slices, a later non-adjacent one replaces the earlier);
# ONNX models by python3-onnx.

load helpers

# the oracles' calls through one Python that imported them (helpers.bash)
setup_file() { pyserve_file_start numpy "$REPO/tests/oracle/ckpt_oracle.py" "$REPO/tests/oracle/envelope_oracle.py"; }
teardown_file() { pyserve_file_stop; }

ENVELOPE="$PY $REPO/tests/oracle/envelope_oracle.py"
export ORACLE_PY=$REPO/tests/oracle/ckpt_oracle.py

setup() {
    M=$BATS_TEST_TMPDIR/m
    F=$BATS_TEST_TMPDIR/model.ckpt
}

# gen_ckpt OUT NAME...: one Float32 [2] record per NAME, in order; record i
# holds [i, i + 0.5].
gen_ckpt() {
    $PY - "$ORACLE_PY" "$@" <<'PY'
import importlib.util, sys
import numpy as np
spec = importlib.util.spec_from_file_location("oracle", sys.argv[1])
o = importlib.util.module_from_spec(spec)
spec.loader.exec_module(o)
o.write_file(sys.argv[2], [o.record(o.tensor_value(n, "Float32", [2],
                                                   np.array([i, i + 0.5], "<f4").tobytes()))
                           for i, n in enumerate(sys.argv[3:])])
PY
}

# parsed FILE: the oracle's reading of FILE, "tag=values" per tensor in order.
parsed() {
    $PY - "$ORACLE_PY" "$1" <<'PY'
import importlib.util, sys
import numpy as np
spec = importlib.util.spec_from_file_location("oracle", sys.argv[1])
o = importlib.util.module_from_spec(spec)
spec.loader.exec_module(o)
entries, _ = o.load_reference(sys.argv[2])
print(" ".join("%s=%s" % (e.tag.decode(), ",".join("%g" % v for v in np.frombuffer(e.out, "<f4")))
               for e in entries))
PY
}

# no_temporaries DIR: a failed save leaves nothing beside the model.
no_temporaries() {
    ! ls -a "$1" | grep -v 'ckptfs-lock$' | grep -q 'ckptfs-' || false
}

@test "[v, w, v] with w deleted: the replaced v is dropped, not joined to the live one" {
    gen_ckpt "$F" v w v
    # MindSpore's rule: the later v replaces the first, at its own place.
    [ "$(parsed "$F")" = "w=1,1.5 v=2,2.5" ]
    # Unchanged, the file re-encodes byte for byte, the replaced record kept.
    "$BUILD/ckptfs-reencode" "$F" "$BATS_TEST_TMPDIR/same.ckpt"
    cmp "$F" "$BATS_TEST_TMPDIR/same.ckpt"
    mount_fg "$F" "$M" -o rw,commit=manual
    rm -r "$M/w"
    touch "$M/snapshot_done"
    [ "$(parsed "$F")" = "v=2,2.5" ]
    run $ORACLE check "$M" "$F"
    echo "$output"
    [ "$status" -eq 0 ]
}

@test "[v, w, v, w] with w edited, automatic save: v stays the later v" {
    gen_ckpt "$F" v w v w
    [ "$(parsed "$F")" = "v=2,2.5 w=3,3.5" ]
    mount_fg "$F" "$M"
    $PY -c 'import numpy as n, sys; sys.stdout.buffer.write(n.array([7, 7.5], "<f4").tobytes())' \
        >"$BATS_TEST_TMPDIR/w.bin"
    cp "$BATS_TEST_TMPDIR/w.bin" "$M/w/out"
    # A bound on the wait for the automatic save, not a timing check.
    for _ in $(seq 1 400); do [ -e "$M/snapshot_done" ] && break; sleep 0.05; done
    [ -e "$M/snapshot_done" ]
    [ "$(parsed "$F")" = "v=2,2.5 w=7,7.5" ]
    run $ORACLE check "$M" "$F"
    echo "$output"
    [ "$status" -eq 0 ]
}

# refused_str MODEL DIR [mount options]: a str value ending in U+0000 is
# stored as UTF-32 and read back without it (numpy's rule, and the
# reader's), so the save must fail verification and change nothing.
refused_str() {
    local model=$1 dir=$2
    shift 2
    cp "$model" "$BATS_TEST_TMPDIR/before"
    mount_fg "$model" "$M" -o rw,commit=manual "$@"
    printf 'abc\0' >"$M/info.str_ascii/out"
    run touch "$M/snapshot_done"
    echo "$output"
    [ "$status" -ne 0 ]
    [[ $output == *"Input/output error"* ]]
    cmp "$model" "$BATS_TEST_TMPDIR/before"
    no_temporaries "$dir"
    run getfattr --absolute-names --only-values -n user.ckptfs.last_error "$M"
    echo "$output"
    [ "${#lines[@]}" -eq 1 ]
    [[ $output == *" $M/snapshot_done: $model: the saved file does not read back as the tree, nothing was saved: "\
"tensor 'info.str_ascii': 3 bytes, the tree's out has 4" ]]
    # The edit stays; corrected, it saves.
    [ "$(cat "$M/info.str_ascii/out" | od -An -c | tr -d ' \n')" = 'abc\0' ]
    printf 'abc' >"$M/info.str_ascii/out"
    touch "$M/snapshot_done"
    [ "$(cat "$M/info.str_ascii/out")" = abc ]
}

@test "a str edit the reader would read back shorter is refused by the verification" {
    $ORACLE gen "$F" --case alltypes
    refused_str "$F" "$BATS_TEST_TMPDIR"
    run $ORACLE check "$M" "$F"
    echo "$output"
    [ "$status" -eq 0 ]
}

@test "verification reads through the envelope: zstd and AES-GCM models" {
    $ORACLE gen "$F" --case alltypes
    zstd -q "$F" -o "$F.zst"
    refused_str "$F.zst" "$BATS_TEST_TMPDIR"
    fusermount3 -u "$M"
    zstd -qdc "$F.zst" >"$BATS_TEST_TMPDIR/plain.ckpt"
    $ORACLE parse "$BATS_TEST_TMPDIR/plain.ckpt" >"$BATS_TEST_TMPDIR/parse.json"
    [ "$($PY -c 'import json,sys; print([e["sha256"] for e in json.load(sys.stdin) if e["tag"] == "info.str_ascii"][0])' \
        <"$BATS_TEST_TMPDIR/parse.json")" = "$(printf abc | sha256sum | cut -d' ' -f1)" ]

    local key=$BATS_TEST_TMPDIR/key.d/key
    mkdir -m 700 "$BATS_TEST_TMPDIR/key.d"
    (umask 077 && printf '0123456789ABCDEF' >"$key")
    mkdir "$BATS_TEST_TMPDIR/enc"
    $ENVELOPE encrypt --mode AES-GCM --key-hex 30313233343536373839414243444546 "$F" \
        "$BATS_TEST_TMPDIR/enc/model.ckpt"
    refused_str "$BATS_TEST_TMPDIR/enc/model.ckpt" "$BATS_TEST_TMPDIR/enc" -o key_file="$key"
    # Nothing but the model in its directory: no decrypted bytes left.
    [ "$(ls -A "$BATS_TEST_TMPDIR/enc" | grep -vx '\.model\.ckpt\.ckptfs-lock')" = model.ckpt ]
}

@test "ONNX inlined by onnx load + save keeps data_location DEFAULT when rewritten" {
    mkdir "$BATS_TEST_TMPDIR/x"
    $PY - "$BATS_TEST_TMPDIR/x" <<'PY'
import sys, numpy as np, onnx
from onnx import helper, numpy_helper, TensorProto
d = sys.argv[1]
inits = [numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4), "w"),
         numpy_helper.from_array(np.arange(4, dtype=np.float32), "b"),
         numpy_helper.from_array(np.arange(3, dtype=np.int64), "s")]
g = helper.make_graph([helper.make_node("Gemm", ["x", "w", "b"], ["y"])], "g",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], inits)
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
onnx.save(m, d + "/ext.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
          location="ext.bin", size_threshold=0)
inlined = onnx.load(d + "/ext.onnx")
assert all(t.HasField("data_location") and t.data_location == TensorProto.DEFAULT
           for t in inlined.graph.initializer)
onnx.save(inlined, d + "/model.onnx")
PY
    local model=$BATS_TEST_TMPDIR/x/model.onnx
    cp "$model" "$BATS_TEST_TMPDIR/before.onnx"
    mount_fg "$model" "$M" -o rw,commit=manual
    rewrite_outs "$M"
    touch "$M/snapshot_done"
    cmp "$BATS_TEST_TMPDIR/before.onnx" "$model"
}
