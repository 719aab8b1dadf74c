#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# OneFlow snapshot directories as input of ckptfs-dump, ckptfs-stat and
# ckptfs-diff (issue 15): the real fixtures in ../shared/fixtures/oneflow
# and snapshots written by the independent oracle (tests/oracle/
# oneflow_oracle.py: Python's own pickler and unpickler, protobuf's
# text_format for meta, numpy for out).  Every expected listing and every
# statistic comes from the oracle; hostile snapshots are refused in one
# line naming the file (and, in pickled_data, the byte offset), never
# executed, never blocking.

load helpers

OF="$PY $REPO/tests/oracle/oneflow_oracle.py"
STAT_ORACLE="$PY $REPO/tests/oracle/stat_oracle.py"
FX=$FIXTURES/oneflow
DUMP=$BUILD/ckptfs-dump
STAT=$BUILD/ckptfs-stat
DIFF=$BUILD/ckptfs-diff

setup() {
    T=$BATS_TEST_TMPDIR
}

# agree DIR: ckptfs-dump's tensor lines and ckptfs-stat --json --hist=4
# are the oracle's.
agree() {
    $OF dump "$1" >"$T/dump.expect"
    "$DUMP" "$1" >"$T/dump.got"
    head -1 "$T/dump.got" | grep -q ": format oneflow, "
    grep -v "^#" "$T/dump.got" | diff - "$T/dump.expect"
    $OF stat "$1" --hist 4 >"$T/stat.expect"
    "$STAT" --json --hist=4 -j 2 "$1" >"$T/stat.got"
    $STAT_ORACLE compare "$T/stat.expect" "$T/stat.got"
}

# placed DIR: every extent ckptfs-dump DIR prints is FILE:OFF+LEN, FILE a
# regular file of DIR whose LEN bytes at OFF, as dd reads them, are that
# tensor's bytes as the oracle reads them from the snapshot (by SHA-256).
placed() {
    $OF sums "$1" >"$T/sums"
    "$DUMP" "$1" | grep -v "^#" >"$T/placed"
    [ "$(wc -l <"$T/placed")" -eq "$(wc -l <"$T/sums")" ]
    [ -z "$(cut -f1 "$T/sums" | sort | uniq -d)" ]
    local name type shape size ext file off len want got
    while IFS=$'\t' read -r name type shape size ext; do
        [[ $ext =~ ^([^:,]+):([0-9]+)\+([0-9]+)$ ]] || { echo "$name: extent $ext"; return 1; }
        file=$1/${BASH_REMATCH[1]} off=${BASH_REMATCH[2]} len=${BASH_REMATCH[3]}
        [ -f "$file" ]
        [ ! -L "$file" ]
        [ "$len" -eq "$size" ]
        want=$(awk -F'\t' -v n="$name" '$1 == n { print $2 }' "$T/sums")
        got=$(dd if="$file" bs=65536 iflag=skip_bytes,count_bytes skip="$off" count="$len" \
              status=none | sha256sum | cut -d' ' -f1)
        [ -n "$want" ] && [ "$got" = "$want" ] || { echo "$name: $ext: $got, not $want"; return 1; }
    done <"$T/placed"
}

# refused TOOL-ARGS... : exit status 1 (2 for ckptfs-diff) and one line.
refused() {
    run "$@"
    [ "$status" -eq 1 ] || [ "$status" -eq 2 ]
    [ "${#lines[@]}" -eq 1 ]
}

# copy FIXTURE: a writable copy in $T/FIXTURE.
copy() {
    cp -r "$FX/$1" "$T/$1"
    chmod -R u+w "$T/$1"
}

@test "legacy fixture (snapshot_done, 13 variables): dump and stat are the oracle's" {
    agree "$FX/legacy_v2_java_mlp_adam"
    grep -q "legacy layout, snapshot_done" "$T/dump.got"
    [ "$(wc -l <"$T/dump.expect")" -eq 13 ]
    placed "$FX/legacy_v2_java_mlp_adam"
}

@test "nn.Graph save (model.mlir beside meta/out, no snapshot_done): model.mlir is no tensor" {
    agree "$FX/graph_save_affine_with_parameter"
    [ "$(cut -f1 "$T/dump.expect" | tr '\n' ' ')" = "model.a model.b " ]
    placed "$FX/graph_save_affine_with_parameter"
}

@test "pickled fixture: weight then bias, as pickled_data lists them, from tensor_5 and tensor_6" {
    agree "$FX/new_pickled_3x3_i3o3_conv2d_params"
    grep -q ", pickled_data$" "$T/dump.got"
    [ "$(grep -v "^#" "$T/dump.got" | cut -f1-3 | tr '\t\n' ' |')" = \
      "weight float32 [3,3,3,3]|bias float32 [3]|" ]
    # each extent in its own out: 3*3*3*3 and 3 floats
    [ "$(grep -v "^#" "$T/dump.got" | cut -f5 | tr '\n' ' ')" = \
      "tensor_5/out:0+324 tensor_6/out:0+12 " ]
    placed "$FX/new_pickled_3x3_i3o3_conv2d_params"
}

@test "out without meta (OneFlow's ONNX loader output) is refused, naming the entry" {
    for tool in "$DUMP" "$STAT"; do
        refused "$tool" "$FX/legacy_outonly_onnx_models_tmp"
        [[ "$output" == *"legacy_outonly_onnx_models_tmp/14: \`out\` without \`meta\`"* ]]
    done
    refused "$DIFF" "$FX/legacy_outonly_onnx_models_tmp" "$FX/legacy_v2_java_mlp_adam"
    [ "$status" -eq 2 ]
    [[ "$output" == *"/14: \`out\` without \`meta\`"* ]]
}

@test "diff: the legacy fixture and a .ckpt the oracle made of it are identical; a change found" {
    $PY "$REPO/tests/oracle/ckpt_oracle.py" from-oneflow "$FX/legacy_v2_java_mlp_adam" "$T/l.ckpt"
    run "$DIFF" "$FX/legacy_v2_java_mlp_adam" "$T/l.ckpt"
    [ "$status" -eq 0 ]
    [ "$output" = identical ]
    copy legacy_v2_java_mlp_adam
    printf '\x01' | dd of="$T/legacy_v2_java_mlp_adam/dense2-bias/out" bs=1 seek=5 conv=notrunc
    run "$DIFF" "$T/legacy_v2_java_mlp_adam" "$T/l.ckpt"
    [ "$status" -eq 1 ]
    [[ "$output" == *"values differ: dense2-bias: "* ]]
    [[ "$output" == *"1 of 13 in both with other bytes"* ]]
    run "$DIFF" "$FX/new_pickled_3x3_i3o3_conv2d_params" "$FX/new_pickled_3x3_i3o3_conv2d_params"
    [ "$status" -eq 0 ]
}

@test "Python's pickles, protocols 2 to 5: names with '/', dots, unicode, '%', 300 bytes" {
    for p in 2 3 4 5; do
        $OF gen "$T/p$p" --case pickled --protocol "$p" --seed "$p"
        agree "$T/p$p"
        placed "$T/p$p"
        grep -qF 'héllo%2Fwörld' "$T/dump.got"
        grep -q '^x\{237\}%~[0-9a-f]\{16\}	' "$T/dump.got"
    done
    $OF gen "$T/plain" --case plain-dict --protocol 2
    agree "$T/plain"
    $OF gen "$T/v1" --case oneflow-1.0 --protocol 4
    agree "$T/v1"
    [ "$(wc -l <"$T/dump.expect")" -eq 3 ]
    placed "$T/v1"
}

@test "dump: each extent in its tensor's own out, empty ones too (at one offset of the source)" {
    copy graph_save_affine_with_parameter
    local d=$T/graph_save_affine_with_parameter e
    for e in e1 e2 model.0; do
        mkdir "$d/$e"
        printf 'shape {\n  dim: 0\n}\ndata_type: kFloat\n' >"$d/$e/meta"
        : >"$d/$e/out"
    done
    agree "$d"
    placed "$d"
    # the oracle's order (bytewise): three empty tensors, then model.a's 12 floats
    [ "$(cut -f5 "$T/dump.expect" | tr '\n' ' ')" = \
      "e1/out:0+0 e2/out:0+0 model.0/out:0+0 model.a/out:0+48 model.b/out:0+16 " ]
}

@test "pickled: no tensors, and 10,000 in a shuffled order (the pickle's, not sorted)" {
    $OF gen "$T/empty" --case empty
    agree "$T/empty"
    [ "$(grep -v "^#" "$T/dump.got" | wc -l)" -eq 0 ]
    $OF gen "$T/many" --case many --count 10000 --protocol 2
    agree "$T/many"
    [ "$(wc -l <"$T/dump.expect")" -eq 10000 ]
    ! cut -f1 "$T/dump.expect" | sort -C || false
}

@test "legacy, 5,000 tensors with 64 descriptors allowed: escaped names decoded, bytewise order" {
    $OF gen "$T/big" --case legacy --count 5000
    (
        ulimit -n 64
        agree "$T/big"
        run "$DIFF" -j 2 "$T/big" "$T/big"
        [ "$status" -eq 0 ]
    )
    grep -q '^block1%2Fw	' "$T/dump.got"
}

@test "hostile pickles are refused at their offset, never run" {
    for c in same-object dup-key system reduce-other deep-mark huge-len magic-not-none; do
        $OF gen "$T/$c" --case "$c"
        refused "$DUMP" "$T/$c"
        [[ "$output" == "ckptfs-dump: $T/$c/pickled_data: offset "[0-9]*": "* ]]
    done
    [ ! -e "$T/system/PWNED" ]
    refused "$DUMP" "$T/system"
    [[ "$output" == *"global posix.system is not one of the classes"* ]]
    refused "$DUMP" "$T/reduce-other"
    [[ "$output" == *"global collections.Counter"* ]]
    refused "$DUMP" "$T/dup-key"
    [[ "$output" == *"the name 'wa' is given twice"* ]]
    refused "$DUMP" "$T/same-object"
    [[ "$output" == *"tensor directory 'tensor_"*"' is given twice"* ]]
    # Python's unpickler, unrestricted (OneFlow's classes stood in for),
    # runs the command: the test would see it
    run $PY -c "import sys; sys.path.insert(0, sys.argv[1]); import oneflow_oracle, pickle; \
        pickle.load(open(sys.argv[2], 'rb'))" "$REPO/tests/oracle" "$T/system/pickled_data"
    [ -e "$T/system/PWNED" ]
}

@test "the fixture's pickled_data cut at every byte: each refused with an offset" {
    copy new_pickled_3x3_i3o3_conv2d_params
    local d=$T/new_pickled_3x3_i3o3_conv2d_params n
    cp "$d/pickled_data" "$T/whole"
    for n in $(seq 0 189); do
        head -c "$n" "$T/whole" >"$d/pickled_data"
        refused "$DUMP" "$d"
        [[ "$output" == *"/pickled_data: offset "* ]] || { echo "at $n: $output"; false; }
    done
}

@test "hostile directories: links, a FIFO, sizes, garbage, missing and unlisted tensors" {
    local p=$T/new_pickled_3x3_i3o3_conv2d_params l=$T/graph_save_affine_with_parameter
    copy new_pickled_3x3_i3o3_conv2d_params
    copy graph_save_affine_with_parameter
    mv "$l/model.a/out" "$T/a.out"
    ln -s "$T/a.out" "$l/model.a/out"
    refused "$DUMP" "$l"
    [[ "$output" == *"model.a/out: a symbolic link"* ]]
    rm "$l/model.a/out"
    mkfifo "$l/model.a/out"
    refused "$DUMP" "$l"
    [[ "$output" == *"model.a/out: is a FIFO, not a regular file"* ]]
    rm "$l/model.a/out"
    head -c 44 "$T/a.out" >"$l/model.a/out"
    refused "$STAT" "$l"
    [[ "$output" == *"model.a/out: 44 bytes, where meta's shape and kFloat make 48"* ]]
    cp "$T/a.out" "$l/model.a/out"
    printf 'shape { dim: 3 }\ndata_type: kNoSuch\n' >"$l/model.b/meta"
    refused "$DUMP" "$l"
    [[ "$output" == *"model.b/meta: meta line 2: unknown or unsupported data_type"* ]]
    rm -r "$l/model.b"
    ln -s "$T/a.out" "$l/model.c"
    refused "$DUMP" "$l"
    [[ "$output" == *"/model.c: a symbolic link"* ]]

    printf '\x80\x04garbage' >"$T/garbage"
    cp "$p/pickled_data" "$T/pickle"
    cp "$T/garbage" "$p/pickled_data"
    refused "$DUMP" "$p"
    [[ "$output" == *"pickled_data: offset 2: opcode 0x67 is not one"* ]]
    cp "$T/pickle" "$p/pickled_data"
    mv "$p/tensor_6" "$p/tensor_9"
    refused "$DUMP" "$p"
    [[ "$output" == *"/tensor_6: missing, where pickled_data keeps tensor 'bias'"* ]]
    mv "$p/tensor_9" "$T/t9"
    mkdir "$p/tensor_6"
    refused "$DUMP" "$p"
    [[ "$output" == *"/tensor_6: no \`meta\` and no \`out\`"* ]]
    rmdir "$p/tensor_6"
    mv "$T/t9" "$p/tensor_6"
    cp -r "$p/tensor_6" "$p/tensor_9"
    refused "$DUMP" "$p"
    [[ "$output" == *"/tensor_9: a tensor directory that pickled_data does not list"* ]]
    rm -r "$p/tensor_9"
    run "$DUMP" "$p"
    [ "$status" -eq 0 ]
}

# ---- mounted (issue 27: the mount opens what the tools open) -----------

# mounted_as_oracle DIR MNT: MNT lists DIR's tensors as the oracle names
# them, then snapshot_done; each meta is the ckpt oracle's for the type and
# shape the OneFlow oracle reads, each out the bytes it reads (by SHA-256).
mounted_as_oracle() {
    local name type shape size ext sum
    $OF dump --meta-types "$1" >"$T/m.expect"
    $OF sums "$1" >"$T/m.sums"
    [ "$(ls "$2" | grep -vx snapshot_done | sort)" = "$(cut -f1 "$T/m.expect" | sort)" ]
    [ "$(ls -f "$2" | grep -vx '\.\|\.\.' | tail -1)" = snapshot_done ]
    [ -f "$2/snapshot_done" ] && [ ! -s "$2/snapshot_done" ] || false
    while IFS=$'\t' read -r name type shape size ext; do
        shape=${shape#[}
        cmp <($ORACLE meta-of "${shape%]}" "$type") "$2/$name/meta"
        sum=$(awk -F'\t' -v n="$name" '$1 == n { print $2 }' "$T/m.sums")
        [ "$(sha "$2/$name/out")" = "$sum" ] || { echo "$name: out differs"; return 1; }
        [ "$(stat -c %s "$2/$name/out")" -eq "$size" ]
    done <"$T/m.expect"
}

@test "mount: the legacy and the pickled fixtures show the oracle's metas and outs, read-only" {
    M=$T/m
    mount_fg "$FX/legacy_v2_java_mlp_adam" "$M"
    mounted_as_oracle "$FX/legacy_v2_java_mlp_adam" "$M"
    [ "$(wc -l <"$T/m.expect")" -eq 13 ]
    first=$(head -1 "$T/m.expect" | cut -f1)
    run sh -c "echo x >'$M/$first/out'"
    [ "$status" -ne 0 ]
    [[ $output == *"Read-only file system"* ]]
    unmount "$M"
    mount_fg "$FX/new_pickled_3x3_i3o3_conv2d_params" "$M"
    mounted_as_oracle "$FX/new_pickled_3x3_i3o3_conv2d_params" "$M"
    [ "$(ls "$M" | tr '\n' ' ')" = "bias snapshot_done weight " ]
}

@test "mount: -o rw of a snapshot is refused in one line; out without meta, as the tools refuse it" {
    mkdir "$T/m"
    run "$CKPTFS" -f -o rw "$FX/legacy_v2_java_mlp_adam" "$T/m"
    echo "$output"
    [ "$status" -eq 1 ]
    [ "${#lines[@]}" -eq 1 ]
    [[ $output == *"a OneFlow snapshot directory is mounted read-only"* ]]
    run "$CKPTFS" -f "$FX/legacy_outonly_onnx_models_tmp" "$T/m"
    [ "$status" -eq 1 ]
    [ "${#lines[@]}" -eq 1 ]
    [[ "$output" == *"legacy_outonly_onnx_models_tmp/14: \`out\` without \`meta\`"* ]]
    ! mountpoint -q "$T/m" || false
}

# nobody MNT CMD...: CMD as another user without root's groups, in MNT.
nobody() {
    (cd "$1" && shift && setpriv --reuid=65534 --regid=65534 --clear-groups "$@")
}

@test "mount, another user (allow_other): an out that user cannot read on disk is EACCES, as on disk" {
    copy new_pickled_3x3_i3o3_conv2d_params
    s=$T/new_pickled_3x3_i3o3_conv2d_params
    chmod 0755 "$T" "$s" "$s"/tensor_*
    chmod 0644 "$s"/pickled_data "$s"/tensor_*/*
    chmod 0600 "$s/tensor_5/out"
    ! nobody "$s" cat tensor_5/out >/dev/null || false
    M=$T/m
    mount_fg "$s" "$M" -o allow_other
    cmp "$s/tensor_5/out" "$M/weight/out" # the owner reads it
    run nobody "$M" cat weight/out
    [ "$status" -ne 0 ]
    [[ $output == *"Permission denied"* ]]
    nobody "$M" cat bias/out | cmp "$s/tensor_6/out" -
    chmod 0644 "$s/tensor_5/out"
    nobody "$M" cat weight/out | cmp "$s/tensor_5/out" -
}

@test "mount: an out replaced after the mount is an I/O error naming it, never the new bytes" {
    copy new_pickled_3x3_i3o3_conv2d_params
    s=$T/new_pickled_3x3_i3o3_conv2d_params
    M=$T/m
    mount_fg "$s" "$M" -o log="$T/log"
    head -c 12 /dev/urandom >"$T/other"
    mv "$T/other" "$s/tensor_6/out"
    run cat "$M/bias/out"
    [ "$status" -ne 0 ]
    [[ $output == *"Input/output error"* ]]
    grep -q "tensor_6/out: changed since the snapshot was opened" "$T/log"
    cmp "$s/tensor_5/out" "$M/weight/out"
}
