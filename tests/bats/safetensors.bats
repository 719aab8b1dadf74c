#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# safetensors models mount like checkpoints: every real fixture and every
# file the independent oracle (tests/oracle/safetensors_oracle.py, json +
# numpy) generates shows the oracle's tree, types and metadata; mounting
# reads the header only; hostile files are refused in one line with an
# offset, nothing mounted.  Saves: an unchanged tree or a same-size edit
# keeps every other byte; any other change lays the file out as the
# reference writer does (the oracle's writer gives the same bytes); new
# files come from -o create, a checkpoint's or a OneFlow snapshot's tree
# copied in.

load helpers

ST_ORACLE="$PY $REPO/tests/oracle/safetensors_oracle.py"
ST=$FIXTURES/safetensors

teardown() {
    # a file wrongly accepted was mounted as a daemon: take it down too
    if mountpoint -q "$BATS_TEST_TMPDIR/m"; then
        fusermount3 -u "$BATS_TEST_TMPDIR/m" || fusermount3 -uz "$BATS_TEST_TMPDIR/m"
    fi
    ckptfs_teardown
}

# check_mount FILE: mounted, the tree is the oracle's
check_mount() {
    mount_fg "$1" "$BATS_TEST_TMPDIR/m" -o ro
    run $ST_ORACLE check "$BATS_TEST_TMPDIR/m" "$1"
    echo "$1: $output"
    [ "$status" -eq 0 ]
    umount_wait "$BATS_TEST_TMPDIR/m" "$(tail -1 "$BATS_TEST_TMPDIR/mounts" | cut -d' ' -f1)"
    sed -i '$d' "$BATS_TEST_TMPDIR/mounts"
}

@test "every real safetensors fixture mounts as the oracle's tree (names, meta, out, numpy reads)" {
    n=0
    for f in "$ST"/*/*.safetensors; do
        check_mount "$f"
        n=$((n + 1))
    done
    [ "$n" -ge 20 ]
}

@test "generated files: every dtype of the format, 0-d, empty tensors, metadata, the 2022 unpadded layout, hostile names, 3000 tensors" {
    for c in alltypes scalars empty metadata_ms unpadded names; do
        $ST_ORACLE gen "$BATS_TEST_TMPDIR/$c.safetensors" --case "$c"
        check_mount "$BATS_TEST_TMPDIR/$c.safetensors"
    done
    $ST_ORACLE gen "$BATS_TEST_TMPDIR/many.safetensors" --case many --count 3000
    check_mount "$BATS_TEST_TMPDIR/many.safetensors"
}

@test "xattrs: each tensor's safetensors dtype, and __metadata__ on the root only when the file has it" {
    f=$BATS_TEST_TMPDIR/a.safetensors
    $ST_ORACLE gen "$f" --case alltypes
    mount_fg "$f" "$BATS_TEST_TMPDIR/m"
    # the oracle's parse: tensor DIR DTYPE ...
    $ST_ORACLE parse "$f" | grep '^tensor' | while IFS=$'\t' read -r _ dir dtype _; do
        got=$(getfattr --absolute-names --only-values -n user.ckptfs.type "$BATS_TEST_TMPDIR/m/$dir")
        [ "$got" = "$dtype" ] || { echo "$dir: $got, not $dtype"; false; }
    done
    run getfattr --absolute-names -n user.ckptfs.metadata "$BATS_TEST_TMPDIR/m"
    [ "$status" -ne 0 ]
    [[ $output == *"No such attribute"* ]]
    umount_wait "$BATS_TEST_TMPDIR/m" "$(tail -1 "$BATS_TEST_TMPDIR/mounts" | cut -d' ' -f1)"
    : >"$BATS_TEST_TMPDIR/mounts"

    for f in "$BATS_TEST_TMPDIR/ms.safetensors" "$ST/peft-gpt2-lora/adapter_model.safetensors"; do
        [ -e "$f" ] || $ST_ORACLE gen "$f" --case metadata_ms
        want=$($ST_ORACLE parse "$f" | sed -n 's/^__metadata__\t//p')
        mount_fg "$f" "$BATS_TEST_TMPDIR/m"
        getfattr --absolute-names -d "$BATS_TEST_TMPDIR/m" | grep -q '^user.ckptfs.metadata='
        got=$(getfattr --absolute-names --only-values -n user.ckptfs.metadata "$BATS_TEST_TMPDIR/m")
        echo "$f: oracle $want, ckptfs $got"
        [ "$got" = "$want" ]
        umount_wait "$BATS_TEST_TMPDIR/m" "$(tail -1 "$BATS_TEST_TMPDIR/mounts" | cut -d' ' -f1)"
        : >"$BATS_TEST_TMPDIR/mounts"
    done
}

@test "mounting a 4 GiB safetensors file reads its header, not tensor bytes; reads come from the file's extents" {
    f=$BATS_TEST_TMPDIR/big.safetensors
    # Two 2 GiB tensors and a small one, the data section sparse: a file
    # the safetensors writer would lay out the same way (F32 first).
    $PY - "$f" <<'EOF'
import json, struct, sys
big = 512 << 20  # elements of 4 bytes
hdr = {"a": {"dtype": "F32", "shape": [big], "data_offsets": [0, 4 * big]},
       "b": {"dtype": "F32", "shape": [big], "data_offsets": [4 * big, 8 * big]},
       "c": {"dtype": "U8", "shape": [4], "data_offsets": [8 * big, 8 * big + 4]}}
text = json.dumps(hdr, separators=(",", ":")).encode()
text += b" " * (-len(text) % 8)
with open(sys.argv[1], "wb") as out:
    out.write(struct.pack("<Q", len(text)) + text)
    out.truncate(8 + len(text) + 8 * big)
    out.seek(0, 2)
    out.write(b"\x01\x02\x03\x04")
EOF
    CKPTFS="env ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0 strace -y -o $BATS_TEST_TMPDIR/trace -e trace=pread64 $CKPTFS" \
        mount_fg "$f" "$BATS_TEST_TMPDIR/m" -o ro
    ls -lR "$BATS_TEST_TMPDIR/m" >/dev/null
    [ "$(od -An -tx1 "$BATS_TEST_TMPDIR/m/c/out" | tr -d ' ')" = 01020304 ]
    umount_wait "$BATS_TEST_TMPDIR/m" "$(tail -1 "$BATS_TEST_TMPDIR/mounts" | cut -d' ' -f1)"
    : >"$BATS_TEST_TMPDIR/mounts"
    # the reads of the mount: the file's first bytes (is it encrypted or
    # compressed?), the header's length and the header; then cat's 4 bytes
    total=$(grep -F 'big.safetensors>' "$BATS_TEST_TMPDIR/trace" | sed -E 's/.*= ([0-9]+)$/\1/' |
        awk '{s += $1} END {print s + 0}')
    hdr=$(( $(od -An -tu8 -N8 "$f") + 8 ))
    echo "read $total bytes; header and length $hdr; file $(stat -c %s "$f")"
    [ "$total" -ge "$hdr" ]
    [ "$total" -le $((hdr + 64 + 4)) ]
}

@test "an unchanged tree, and every tensor rewritten with its own bytes, save to the identical file (every fixture)" {
    for f in "$ST"/*/*.safetensors; do
        for all in "" --all; do
            rm -f "$BATS_TEST_TMPDIR/out.safetensors"
            "$BUILD/ckptfs-reencode" $all "$f" "$BATS_TEST_TMPDIR/out.safetensors"
            cmp "$f" "$BATS_TEST_TMPDIR/out.safetensors" || { echo "$all $f"; false; }
        done
    done
}

# patch FILE OFF HEX: what FILE should be after writing bytes HEX at OFF
patched() {
    $PY - "$@" <<'EOF2'
import sys
data = bytearray(open(sys.argv[1], "rb").read())
new = bytes.fromhex(sys.argv[3])
data[int(sys.argv[2]):int(sys.argv[2]) + len(new)] = new
sys.stdout.buffer.write(data)
EOF2
}

@test "a same-size edit through the mount changes those bytes and nothing else" {
    f=$BATS_TEST_TMPDIR/mnist.safetensors
    cp "$ST/burn/mnist.safetensors" "$f"
    chmod 0644 "$f"
    # where conv1.bias's data starts: the oracle's offsets
    off=$($PY -c '
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
print(8 + n + json.loads(b[8:8 + n])["conv1.bias"]["data_offsets"][0] + 4)' "$f")
    patched "$f" "$off" 11223344 >"$BATS_TEST_TMPDIR/want"
    mount_fg "$f" "$BATS_TEST_TMPDIR/m" -o commit=manual
    printf '\x11\x22\x33\x44' | dd of="$BATS_TEST_TMPDIR/m/conv1.bias/out" bs=1 seek=4 conv=notrunc status=none
    touch "$BATS_TEST_TMPDIR/m/snapshot_done"
    cmp "$BATS_TEST_TMPDIR/want" "$f"
    run $ST_ORACLE check "$BATS_TEST_TMPDIR/m" "$f"
    [ "$status" -eq 0 ]
}

@test "adding, removing, renaming and reshaping tensors lays the file out as the reference writer does, __metadata__ kept" {
    f=$BATS_TEST_TMPDIR/lora.safetensors
    cp "$ST/peft-gpt2-lora/adapter_model.safetensors" "$f"
    chmod 0644 "$f"
    M=$BATS_TEST_TMPDIR/m
    mount_fg "$f" "$M" -o commit=manual
    a=base_model.model.transformer.h.0.attn.c_attn.lora_A.weight
    mkdir "$M/added.i64"
    printf 'shape {\n  dim: 3\n}\ndata_type: kInt64\n' >"$M/added.i64/meta"
    head -c 24 /dev/urandom >"$M/added.i64/out"
    rm -r "$M/base_model.model.score.weight"
    mv "$M/$a" "$M/renamed.lora_A"
    printf 'shape {\n  dim: 768\n  dim: 8\n}\ndata_type: kFloat\n' >"$M/renamed.lora_A/meta"
    touch "$M/snapshot_done"
    # the oracle's writer, given the saved file's tensors and metadata,
    # writes the same bytes
    $ST_ORACLE rewrite "$f" "$BATS_TEST_TMPDIR/ref.safetensors"
    cmp "$BATS_TEST_TMPDIR/ref.safetensors" "$f"
    run $ST_ORACLE check "$M" "$f"
    [ "$status" -eq 0 ]
    $ST_ORACLE parse "$f" >"$BATS_TEST_TMPDIR/p"
    grep -x $'__metadata__\t{"format":"pt"}' "$BATS_TEST_TMPDIR/p"
    grep $'^tensor\tadded.i64\tI64\t\[3\]\t24\t' "$BATS_TEST_TMPDIR/p"
    grep $'^tensor\trenamed.lora_A\tF32\t\[768,8\]\t' "$BATS_TEST_TMPDIR/p"
    ! grep $'\tbase_model.model.score.weight\t' "$BATS_TEST_TMPDIR/p" || false
    [ "$(grep -c '^tensor' "$BATS_TEST_TMPDIR/p")" -eq 25 ]
}

@test "-o create: a checkpoint's tree (and back) and a OneFlow snapshot copied in become safetensors files; a type safetensors lacks is refused, naming the tensor" {
    M=$BATS_TEST_TMPDIR/m
    S=$BATS_TEST_TMPDIR/src
    mount_fg "$MS/goldenstick_test_sq_predict_simplenet_2stage_fp.ckpt" "$S" -o ro
    f=$BATS_TEST_TMPDIR/from_ckpt.safetensors
    mount_fg "$f" "$M" -o create,commit=manual
    cp -r "$S/." "$M/"
    touch "$M/snapshot_done"
    diff -r "$S" "$M"
    run $ST_ORACLE check "$M" "$f"
    [ "$status" -eq 0 ]
    # and back: that safetensors mount's tree copied into a new checkpoint
    B=$BATS_TEST_TMPDIR/back
    mount_fg "$BATS_TEST_TMPDIR/back.ckpt" "$B" -o create,commit=manual
    cp -r "$M/." "$B/"
    touch "$B/snapshot_done"
    diff -r "$S" "$B"
    run $ORACLE check "$B" "$BATS_TEST_TMPDIR/back.ckpt"
    [ "$status" -eq 0 ]

    f=$BATS_TEST_TMPDIR/from_oneflow.safetensors
    M2=$BATS_TEST_TMPDIR/m2
    mount_fg "$f" "$M2" -o create,commit=manual
    cp -r "$FIXTURES/oneflow/legacy_v2_java_mlp_adam/." "$M2/"
    touch "$M2/snapshot_done"
    diff -r "$FIXTURES/oneflow/legacy_v2_java_mlp_adam" "$M2"
    run $ST_ORACLE check "$M2" "$f"
    [ "$status" -eq 0 ]

    # str values (kChar) have no safetensors dtype: the save is refused
    # with the reason, and the edits stay for another try
    $ORACLE gen "$BATS_TEST_TMPDIR/a.ckpt" --case alltypes
    S2=$BATS_TEST_TMPDIR/src2
    mount_fg "$BATS_TEST_TMPDIR/a.ckpt" "$S2" -o ro
    M3=$BATS_TEST_TMPDIR/m3
    mount_fg "$BATS_TEST_TMPDIR/typed.safetensors" "$M3" -o create,commit=manual
    # snapshot_done is copied last and its save refused: cp says so
    run cp -r "$S2/." "$M3/"
    [ "$status" -ne 0 ]
    [[ $output == *"snapshot_done"* ]]
    run touch "$M3/snapshot_done"
    [ "$status" -ne 0 ]
    err=$(getfattr --absolute-names --only-values -n user.ckptfs.last_error "$M3")
    echo "$err"
    [[ $err == *"typed.safetensors: tensor '"*"': type k"*" has no safetensors dtype"* ]]
    # the refused saves wrote nothing, and the edits stay for another try
    [ ! -e "$BATS_TEST_TMPDIR/typed.safetensors" ]
    [ -d "$M3/$(ls "$S2" | grep -v snapshot_done | head -1)" ]
    for t in "$M3"/*/; do rm -r "$t"; done # so that the unmount has nothing to save
}

@test "names a safetensors header cannot hold are refused at the save, in one line naming them: __metadata__, bytes that are not UTF-8" {
    M=$BATS_TEST_TMPDIR/m
    f=$BATS_TEST_TMPDIR/n.safetensors
    mount_fg "$f" "$M" -o create,commit=manual
    for name in __metadata__ $'bad\xff\xfe'; do
        mkdir "$M/$name"
        printf 'shape {\n  dim: 1\n}\ndata_type: kFloat\n' >"$M/$name/meta"
        head -c 4 /dev/zero >"$M/$name/out"
        run touch "$M/snapshot_done"
        [ "$status" -ne 0 ]
        err=$(getfattr --absolute-names --only-values -n user.ckptfs.last_error "$M")
        echo "$err"
        case $name in
        __metadata__) [[ $err == *"n.safetensors: a tensor cannot be named '__metadata__'"* ]] ;;
        *) [[ $err == *"n.safetensors: tensor 'bad"*"': safetensors names are UTF-8"* ]] ;;
        esac
        [ ! -e "$f" ]
        rm -r "$M/$name"
    done
}

# refuse CASE RULE [TEXT]: the oracle's hostile file is refused before
# anything is mounted, in one line naming the file and an offset, and left
# as it was.  RULE says which offset: "exact" (the oracle's), "json" (the
# JSON library's: at or just after the oracle's, within the header),
# "header" (8: a field of the header, the line names the tensor or key) or
# "data" (in the data section: the line names the bytes at fault).
refuse() {
    local f=$BATS_TEST_TMPDIR/$1.safetensors want before off hdr size
    want=$($ST_ORACLE bad "$f" --case "$1")
    before=$(sha "$f")
    mkdir -p "$BATS_TEST_TMPDIR/m"
    run "$CKPTFS" "$f" "$BATS_TEST_TMPDIR/m"
    echo "$1: oracle offset $want; ckptfs said: $output"
    [ "$status" -ne 0 ]
    [ "${#lines[@]}" -eq 1 ]
    [[ $output == "ckptfs: $f: "* ]]
    ! mountpoint -q "$BATS_TEST_TMPDIR/m" || false
    [ "$(sha "$f")" = "$before" ]
    [ -z "${3:-}" ] || [[ $output == *"$3"* ]]
    off=$(sed -nE 's/^ckptfs: [^:]*: offset ([0-9]+): .*/\1/p' <<<"$output")
    size=$(stat -c %s "$f")
    case $2 in
    exact) [ "$off" = "$want" ] ;;
    json)
        hdr=$(( $(od -An -tu8 -N8 "$f") + 8 ))
        [ "$off" -ge "$want" ] && [ "$off" -le "$hdr" ] ;;
    header) [ "$off" = 8 ] ;;
    data)
        hdr=$(( $(od -An -tu8 -N8 "$f") + 8 ))
        [ "$off" -ge "$hdr" ] && [ "$off" -le "$size" ] ;;
    esac
}

@test "refused: shorter than the header length, a header past the end, over the 100 MB limit" {
    refuse short exact "too short"
    refuse headerpast exact "runs past the end of the file"
    refuse toolarge exact "over the limit of 100000000"
}

@test "refused: not JSON, not an object, junk or NUL padding after it, bad UTF-8, a lone surrogate" {
    refuse notjson json "not valid JSON"
    refuse notobject exact "not a JSON object"
    refuse trailingjunk json "not valid JSON"
    refuse nulpad json "not valid JSON"
    refuse badutf8 json "not valid JSON"
    refuse surrogate json "not valid JSON"
}

@test "refused: a duplicate tensor name, even one the reference would keep silently" {
    refuse dupkey json "duplicate object key"
    refuse dupsame json "duplicate object key"
}

@test "refused: unknown dtype, negative or fractional dims, an overflowing shape, a missing member, bad __metadata__, nesting past the reference's limit" {
    refuse baddtype header "tensor 'victim' in the header: unknown dtype 'F128'"
    refuse negdim header "tensor 'victim' in the header"
    refuse floatdim header "tensor 'victim' in the header"
    refuse overflow header "tensor 'victim' in the header"
    refuse missing header "tensor 'victim' in the header"
    refuse metanotobj header "__metadata__"
    refuse metanonstr header "__metadata__"
    refuse deep header "deeper than 127 levels"
}

@test "refused: sizes that are not shape x dtype, sub-byte counts, offsets reversed, past the end, overlapping, with a gap or trailing bytes" {
    refuse sizemismatch data "tensor 'victim'"
    refuse subbyte data "tensor 'victim'"
    refuse beginend data "tensor 'victim'"
    refuse pastend data "tensor 'victim'"
    refuse overlap data "tensor 'victim' overlaps"
    refuse gap data "no tensor holds, before tensor 'victim'"
    refuse trailing exact "after the last tensor's data"
}

@test "accepted where the reference accepts: 127 levels of nesting, __metadata__ null" {
    f=$BATS_TEST_TMPDIR/deepok.safetensors
    run $ST_ORACLE bad "$f" --case deepok
    [ "$output" = - ]
    check_mount "$f"
    f=$BATS_TEST_TMPDIR/null.safetensors
    $PY - "$f" <<'EOF2'
import json, struct, sys
text = json.dumps({"__metadata__": None, "a": {"dtype": "I16", "shape": [2], "data_offsets": [0, 4]}},
                  separators=(",", ":")).encode()
text += b" " * (-len(text) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(text)) + text + b"\x01\x00\xff\xff")
EOF2
    check_mount "$f"
}

@test "a tensor name holding NUL is refused in one line (valid JSON, but no directory name can hold it)" {
    f=$BATS_TEST_TMPDIR/nul.safetensors
    $ST_ORACLE gen "$f" --case nulname
    mkdir -p "$BATS_TEST_TMPDIR/m"
    run "$CKPTFS" "$f" "$BATS_TEST_TMPDIR/m"
    [ "$status" -ne 0 ]
    [ "${#lines[@]}" -eq 1 ]
    [[ $output == "ckptfs: $f: offset "*"NUL"* ]]
    ! mountpoint -q "$BATS_TEST_TMPDIR/m" || false
}

@test "out of memory while parsing a valid header is said to be memory, not invalid JSON" {
    # the plain build's test: a sanitizer's shadow memory does not fit
    ! sanitized || skip "an address-space limit leaves a sanitizer no room"
    local big=$BATS_TEST_TMPDIR/big.safetensors small=$BATS_TEST_TMPDIR/small.safetensors
    # 200,000 one-float tensors: a 17 MB header whose tensor index does
    # not fit in 60 MB of address space, beside a file that does.
    $PY - "$big" "$small" <<'PY'
import json, struct, sys
for path, n in ((sys.argv[1], 200000), (sys.argv[2], 1)):
    h = {f"layer.{i}.weight": {"dtype": "F32", "shape": [1], "data_offsets": [4 * i, 4 * i + 4]}
         for i in range(n)}
    b = json.dumps(h).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(b)) + b + bytes(4 * n))
PY
    # valid, to Python's json
    $PY -c '
import json, struct, sys
d = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", d[:8])[0]
assert len(json.loads(d[8:8 + n])) == 200000' "$big"
    local limited=(timeout 20 bash -c 'ulimit -v 60000 && exec "$@"' limited)
    # the limit lets the binary start and read a small file
    run "${limited[@]}" "$BUILD/ckptfs-dump" "$small"
    [ "$status" -eq 0 ]
    mkdir -p "$BATS_TEST_TMPDIR/m"
    run "${limited[@]}" "$CKPTFS" -f "$big" "$BATS_TEST_TMPDIR/m"
    echo "$output"
    [ "$status" -ne 0 ]
    [ "$status" -ne 124 ]
    [[ $output == "ckptfs: $big: out of memory while parsing the header"* ]]
    [[ $output != *"not valid JSON"* ]]
}

@test "a tensor the writer cannot write (F8_E4M3) has no w bits on a writable mount, and opening it for writing is EACCES; the others stay writable" {
    f=$BATS_TEST_TMPDIR/f8.safetensors m=$BATS_TEST_TMPDIR/m
    $PY - "$f" <<'PY'
import json, struct, sys
h = json.dumps({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                "q": {"dtype": "F8_E4M3", "shape": [4], "data_offsets": [8, 12]}}).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + bytes(range(12)))
PY
    chmod 0644 "$f"
    cp "$f" "$BATS_TEST_TMPDIR/before"
    mount_fg "$f" "$m" -o commit=manual
    [ "$(stat -c %A "$m/q/out") $(stat -c %A "$m/q/meta") $(stat -c %A "$m/q")" = "-r--r--r-- -r--r--r-- dr-xr-xr-x" ]
    [ "$(stat -c %A "$m/a/out") $(stat -c %A "$m/a")" = "-rw-r--r-- drwxr-xr-x" ]
    run bash -c "printf x > '$m/q/out'"
    [ "$status" -ne 0 ]
    [[ $output == *"Permission denied"* ]]
    run bash -c "printf x >> '$m/q/meta'"
    [[ $output == *"Permission denied"* ]]
    printf '\x01\x02\x03\x04' | dd of="$m/a/out" conv=notrunc status=none
    touch "$m/snapshot_done"
    [ "$($PY -c 'import sys; b=open(sys.argv[1],"rb").read(); print(b[-12:].hex())' "$f")" = "010203040405060708090a0b" ]
}
