#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# Malformed ONNX and MindIR models are refused before anything is mounted:
# non-zero exit, one line naming the file, the byte offset (as
# tests/oracle/graph_oracle.py locates it in the bytes the official protobuf
# code wrote) and the problem; neither the model nor its external data file
# is modified.

load helpers

teardown() {
    # a model wrongly accepted was mounted as a daemon: take it down too
    if mountpoint -q "$BATS_TEST_TMPDIR/m"; then
        fusermount3 -u "$BATS_TEST_TMPDIR/m" || fusermount3 -uz "$BATS_TEST_TMPDIR/m"
    fi
    ckptfs_teardown
}

# refuse EXT CASE EXPECTED-TEXT
refuse() {
    local f=$BATS_TEST_TMPDIR/$2.$1 off before side_before=
    off=$($GRAPH_ORACLE bad "$f" --case "$2")
    before=$(sha "$f")
    [ ! -e "$f.data" ] || side_before=$(sha "$f.data")
    mkdir -p "$BATS_TEST_TMPDIR/m"
    run "$CKPTFS" "$f" "$BATS_TEST_TMPDIR/m"
    echo "oracle offset $off; ckptfs said: $output"
    [ "$status" -ne 0 ]
    [ "${#lines[@]}" -eq 1 ]
    [[ $output == "ckptfs: $f: offset $off: "*"$3"* ]]
    ! mountpoint -q "$BATS_TEST_TMPDIR/m" || false
    [ "$(sha "$f")" = "$before" ]
    [ ! -e "$f.data" ] || [ "$(sha "$f.data")" = "$side_before" ]
}

@test "ONNX: truncated in the middle of a tensor" {
    refuse onnx truncated "runs past the end of the file"
}
@test "MindIR: truncated in the middle of a tensor" {
    refuse mindir truncated "runs past the end of the file"
}
@test "ONNX: a raw_data length past the end of the file" {
    refuse onnx pastend "length 16383 runs past the end of its message"
}
@test "MindIR: a raw_data length past the end of the file" {
    refuse mindir pastend "length 16383 runs past the end of its message"
}
@test "ONNX: If subgraphs nested 33 deep (the limit is 32)" {
    refuse onnx deep "graphs nested deeper than the limit of 32"
}
@test "MindIR: subgraphs nested 33 deep (the limit is 32)" {
    refuse mindir deep "graphs nested deeper than the limit of 32"
}
@test "ONNX: a negative dim, the tensor named" {
    refuse onnx negdim "tensor 'neg': negative dim -3"
}
@test "MindIR: a negative dim, the tensor named" {
    refuse mindir negdim "tensor 'main:neg': negative dim -3"
}
@test "ONNX: dims whose product overflows" {
    refuse onnx overflow "tensor 'over': dims overflow the byte count"
}
@test "MindIR: dims whose product overflows" {
    refuse mindir overflow "tensor 'main:over': dims overflow the byte count"
}
@test "ONNX: more dims than ckptfs shows" {
    refuse onnx manydims "tensor 'many': more than 64 dims"
}
@test "MindIR: more dims than ckptfs shows" {
    refuse mindir manydims "tensor 'main:many': more than 64 dims"
}
@test "ONNX: raw_data not prod(dims) x itemsize" {
    refuse onnx sizemismatch "tensor 'mismatch': raw_data holds 40 bytes but its dims and type FLOAT need 48"
}
@test "MindIR: raw_data not prod(dims) x itemsize" {
    refuse mindir sizemismatch "tensor 'main:mismatch': raw_data holds 40 bytes but its dims and type FLOAT need 48"
}
@test "ONNX: float_data not prod(dims) values" {
    refuse onnx typedmismatch "tensor 'typed': float_data holds 20 bytes but its dims and type FLOAT need 24"
}
@test "MindIR: float_data not prod(dims) values" {
    refuse mindir typedmismatch "tensor 'main:typed': float_data holds 20 bytes but its dims and type FLOAT need 24"
}
@test "ONNX: float_data with the wrong wire type" {
    refuse onnx typedwire "float_data field 4 has wire type varint, expected 32-bit"
}
@test "MindIR: float_data with the wrong wire type" {
    refuse mindir typedwire "float_data field 3 has wire type varint, expected 32-bit"
}
@test "ONNX: an unknown data_type" {
    refuse onnx badtype "tensor 'badtype': unknown data_type 99"
}
@test "MindIR: an unknown data_type" {
    refuse mindir badtype "tensor 'main:badtype': unknown data_type 99"
}
@test "ONNX: an external data offset past the end of the data file" {
    refuse onnx extoff "tensor 'ext': external data offset 4096 is past the end of 'extoff.onnx.data' (1024 bytes)"
}
@test "MindIR: an external data offset past the end of the data file" {
    refuse mindir extoff "tensor 'main:ext': external data offset 4096 is past the end of 'extoff.mindir.data' (1024 bytes)"
}
@test "ONNX: an external data length past the end of the data file" {
    refuse onnx extlen "tensor 'ext': external data range 1000+48 runs past the end of 'extlen.onnx.data' (1024 bytes)"
}
@test "MindIR: an external data length past the end of the data file" {
    refuse mindir extlen "tensor 'main:ext': external data range 1000+48 runs past the end of 'extlen.mindir.data' (1024 bytes)"
}
@test "ONNX: an external data length not prod(dims) x itemsize" {
    refuse onnx extsize "tensor 'ext': its external data holds 40 bytes but its dims and type FLOAT need 48"
}
@test "MindIR: an external data length not prod(dims) x itemsize" {
    refuse mindir extsize "tensor 'main:ext': its external data holds 40 bytes but its dims and type FLOAT need 48"
}
@test "MindIR: external data inside the data file's 64-byte front info" {
    refuse mindir extheader "tensor 'main:ext': external data offset 16 is inside the 64-byte header of 'extheader.mindir.data'"
}

# accept EXT CASE: the oracle's model is valid, mounts at $BATS_TEST_TMPDIR/EXT
# and matches the protobuf runtime's view tensor by tensor.
accept() {
    local f=$BATS_TEST_TMPDIR/$2.$1
    [ "$($GRAPH_ORACLE bad "$f" --case "$2")" = - ]
    mount_fg "$f" "$BATS_TEST_TMPDIR/$1" -o ro
    run $GRAPH_ORACLE check "$BATS_TEST_TMPDIR/$1" "$f"
    echo "$output"
    [ "$status" -eq 0 ]
}

# The limit is exact: 32 nested graphs mount, and show the innermost tensor.
@test "graphs nested exactly 32 deep mount (ONNX and MindIR)" {
    local ext
    for ext in onnx mindir; do
        accept $ext deep32
        [ "$(ls "$BATS_TEST_TMPDIR/$ext" | grep -c 'deep%@If_31\.then_branch$')" -eq 1 ]
    done
}

# Not bad at all: protobuf allows a packed run of no values.
@test "an empty packed int64_data of a 0-element tensor mounts (ONNX and MindIR)" {
    local ext
    for ext in onnx mindir; do
        accept $ext emptypacked
        [ "$(stat -c %s "$BATS_TEST_TMPDIR/$ext/empty/out")" -eq 0 ]
    done
}
