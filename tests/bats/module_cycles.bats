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

# The ground floor knows no envelope (issue 40): a kind's state and options
# (a cipher's mode and key, a zstd level) are private to its folder,
# reached through the kind's hooks (envelope_kind.h), so the core, the
# envelope interface and walk and the model-level headers neither include
# a header of codec/cipher/ or codec/zstd/ nor name their types.
@test "codec/core/ and the envelope and model-level headers include nothing of codec/cipher/ or codec/zstd/" {
    local files=("$REPO"/codec/core/*.c "$REPO"/codec/core/*.h "$REPO"/codec/envelope_kind.h
                 "$REPO"/codec/envelope.h "$REPO"/codec/envelope.c "$REPO"/codec/format.h
                 "$REPO"/codec/registry.h "$REPO"/codec/view.h "$REPO"/codec/collection.h
                 "$REPO"/codec/open_path.h "$REPO"/codec/run_dir.h)
    run grep -nE '#include "(\.\./)*(cipher|zstd)/' "${files[@]}"
    echo "$output"
    [ "$status" -eq 1 ]
    run grep -nwE 'ck_cipher_mode|ck_key|ck_key_wipe|ck_ms_layout|CK_AES_GCM|CK_AES_CBC|CK_KEY_ENV|CK_ZSTD_LEVEL_DEFAULT|ZSTD_[A-Za-z]+' \
        "${files[@]}"
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
