#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# The layering rule (issue 40, docs/design.md): no include circle and no
# call circle between the modules of codec/, save/, fs/ and tools/ (a .c
# with its .h), checked by tests/tools/module_cycles.py over the sources and
# the objects of the build under test; and the checker's self-test, which
# plants circles in a temporary tree, so that a broken checker cannot pass.

load helpers

@test "module_cycles: finds planted include and call circles, passes a layered tree" {
    run $PY "$REPO/tests/tools/module_cycles.py" --self-test
    echo "$output"
    [ "$status" -eq 0 ]
}

@test "no include or call circle between modules (beyond tests/tools/module_cycles.known)" {
    run $PY "$REPO/tests/tools/module_cycles.py" --root "$REPO" --build "$BUILD"
    echo "$output"
    [ "$status" -eq 0 ]
}

# The front-end knows no format: it reaches formats, envelopes and
# collections through codec/'s interfaces and registry (format.h, view.h,
# collection.h, envelope.h, registry.h, open_path.h, run_dir.h) only.
@test "fs/ includes no header of a format's, an envelope's or a collection's folder" {
    run grep -nE '#include "\.\./codec/(ckpt|onnx_mindir|safetensors|pytorch|oneflow|pb|pickle|cipher|zstd|collections)/' \
        "$REPO"/fs/*.c "$REPO"/fs/*.h
    echo "$output"
    [ "$status" -eq 1 ]
}

# save/ owns saving: a format writes through codec/io/ and never reaches up
# into save/ (its lock and journal recovery are the caller's write claim,
# save/write_claim.h); and save/ reaches formats through the registry and
# codec/io/'s interfaces only (a template's format: codec/io/target.h).
@test "codec/ includes no header of save/, and save/ no header of a format's, an envelope's or a collection's folder" {
    run grep -rnE '#include "(\.\./)+save/' "$REPO"/codec --include='*.c' --include='*.h'
    echo "$output"
    [ "$status" -eq 1 ]
    run grep -nE '#include "\.\./codec/(ckpt|onnx_mindir|safetensors|pytorch|oneflow|pb|pickle|cipher|zstd|collections)/' \
        "$REPO"/save/*.c "$REPO"/save/*.h
    echo "$output"
    [ "$status" -eq 1 ]
}
