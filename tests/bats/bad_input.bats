#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# Malformed files are refused before anything is mounted: non-zero exit, one
# line naming the file, the byte offset (as the oracle locates it) and the
# problem; the file is never modified.

load helpers

# refuse CASE EXPECTED-TEXT
refuse() {
    local f=$BATS_TEST_TMPDIR/$1.ckpt
    off=$($ORACLE bad "$f" --case "$1")
    before=$(sha "$f")
    mkdir -p "$BATS_TEST_TMPDIR/m"
    run "$CKPTFS" "$f" "$BATS_TEST_TMPDIR/m"
    echo "oracle offset $off; ckptfs said: $output"
    [ "$status" -ne 0 ]
    [ "${#lines[@]}" -eq 1 ]
    [[ $output == "ckptfs: $f: offset $off: "*"$2"* ]]
    ! mountpoint -q "$BATS_TEST_TMPDIR/m" || false
    [ "$(sha "$f")" = "$before" ]
}

@test "truncated record" { refuse truncated "runs past the end of the file"; }
@test "a length that runs past the end of the file" { refuse pastend "runs past the end of the file"; }
@test "a varint longer than 10 bytes" { refuse longvarint "varint longer than 10 bytes"; }
@test "a wrong wire type" { refuse wiretype "has wire type varint, expected length-delimited"; }
@test "a negative dim" { refuse negdim "negative dim -3"; }
@test "dims whose product overflows" { refuse overflow "overflow the byte count"; }
@test "content length not prod(dims) x itemsize" { refuse sizemismatch "content is 40 bytes but dims [3,4] of Float32 need 48"; }
@test "an unknown tensor_type, named" { refuse badtype "unknown tensor_type 'Float128'"; }
@test "an AES-GCM magic before a header that does not add up says so" { refuse encgcm "encrypted MindSpore model (AES-GCM"; }

# refuse_envelope CASE EXPECTED-TEXT: refused in one line naming the file,
# with no offset when the reason is not in the bytes (a key is missing).
refuse_envelope() {
    local f=$BATS_TEST_TMPDIR/$1.ckpt
    $ORACLE bad "$f" --case "$1" >/dev/null
    before=$(sha "$f")
    mkdir -p "$BATS_TEST_TMPDIR/m"
    run "$CKPTFS" "$f" "$BATS_TEST_TMPDIR/m"
    echo "ckptfs said: $output"
    [ "$status" -ne 0 ]
    [ "${#lines[@]}" -eq 1 ]
    [[ $output == "ckptfs: $f: "*"$2"* ]]
    ! mountpoint -q "$BATS_TEST_TMPDIR/m" || false
    [ "$(sha "$f")" = "$before" ]
}

@test "an AES-CBC encrypted file without a key says how to give one" {
    refuse_envelope enccbc "encrypted (AES-CBC); give -o key_file=PATH or CKPTFS_KEY_HEX"
}
@test "a damaged zstd file says it is zstd" { refuse_envelope zstd "zstd"; }

@test "a missing model file" {
    mkdir "$BATS_TEST_TMPDIR/m"
    run "$CKPTFS" "$BATS_TEST_TMPDIR/nope.ckpt" "$BATS_TEST_TMPDIR/m"
    [ "$status" -ne 0 ]
    [[ $output == *"nope.ckpt: cannot open: No such file or directory"* ]]
}

@test "a directory given as the model is a run directory: -o create of it is refused in one line, nothing mounted" {
    mkdir "$BATS_TEST_TMPDIR/m" "$BATS_TEST_TMPDIR/run"
    run "$CKPTFS" -o create "$BATS_TEST_TMPDIR/run" "$BATS_TEST_TMPDIR/m"
    [ "$status" -ne 0 ]
    [ "${#lines[@]}" -eq 1 ]
    [[ $output == *"/run: -o create is for one model, not a run directory" ]]
    ! mountpoint -q "$BATS_TEST_TMPDIR/m" || false
}

@test "every truncation of a real checkpoint is refused cleanly or is a record boundary" {
    f=$MS/goldenstick_test_linears_woq_predict_2stage_fp32.ckpt
    size=$(stat -c %s "$f")
    mkdir "$BATS_TEST_TMPDIR/m"
    refused=0
    for cut in $(seq 1 $((size - 1))); do
        head -c "$cut" "$f" >"$BATS_TEST_TMPDIR/cut.ckpt"
        if "$BUILD/ckptfs-dump" "$BATS_TEST_TMPDIR/cut.ckpt" >/dev/null 2>"$BATS_TEST_TMPDIR/err"; then
            # only a cut between records may parse: the oracle must agree
            $ORACLE parse "$BATS_TEST_TMPDIR/cut.ckpt" >/dev/null
        else
            [ "$(wc -l <"$BATS_TEST_TMPDIR/err")" -eq 1 ]
            grep -q "cut.ckpt: offset [0-9]*: " "$BATS_TEST_TMPDIR/err"
            refused=$((refused + 1))
        fi
    done
    [ "$refused" -gt $((size - 10)) ]
}
