#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# The layering rule (issue 40, docs/design.md): no include circle and no
# call circle between the modules of codec/, save/, mount/, fuse/ and tools/ (a .c
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
@test "mount/ and fuse/ include no header of a format's, an envelope's or a collection's folder" {
    run grep -nE '#include "\.\./codec/(ckpt|onnx_mindir|safetensors|pytorch|oneflow|pb|pickle|cipher|zstd|collections)/' \
        "$REPO"/mount/*.c "$REPO"/mount/*.h "$REPO"/fuse/*.c "$REPO"/fuse/*.h
    echo "$output"
    [ "$status" -eq 1 ]
}

# The filesystem's logic has no libfuse in it (issue 40): mount/ includes no
# FUSE header, directly or through a header of fuse/, so that its
# operations are driven without the kernel (tests/unit/test_mount_ops.c).
@test "mount/ includes no FUSE header, nor a header of fuse/" {
    run grep -nE '#include [<"](fuse[^">]*|\.\./fuse/[^">]*)[">]' "$REPO"/mount/*.c "$REPO"/mount/*.h
    echo "$output"
    [ "$status" -eq 1 ]
    # and the check sees an include that is there
    run grep -cE '#include [<"](fuse[^">]*|\.\./fuse/[^">]*)[">]' "$REPO"/fuse/reply.h
    [ "$output" -ge 1 ]
}
