#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# -o as=safetensors: the mounted model as one read-only file, MNT/model.safetensors, whose
# bytes are those `ckptfs-convert MODEL x.safetensors` writes (compared with cmp), read back
# independently (tests/oracle/convert_oracle.py: safetensors_oracle's json + numpy reader
# against ckpt_oracle's protobuf runtime or the safetensors oracle; for PyTorch files,
# pytorch_oracle.py same-as-safetensors: torch.load against json + numpy), read at odd
# offsets across the header's end and the tensors' boundaries (O_DIRECT, so each range
# reaches the daemon as asked, not as the page cache would round it), by another user as
# the files on disk allow, and refused in one line where it cannot be a safetensors file.

load helpers

CONVERT=$BUILD/ckptfs-convert
CMP="$PY $REPO/tests/oracle/convert_oracle.py compare"
PT="$PY $REPO/tests/oracle/pytorch_oracle.py"
DIST="$PY $REPO/tests/oracle/dist_oracle.py"
V=model.safetensors

setup() {
    T=$BATS_TEST_TMPDIR
    M=$T/m
}

# ranges FILE: "OFFSET COUNT" lines around FILE's header end and each tensor's first byte
# (read by the header's own data_offsets, with json), plus spans over several tensors and
# the file's tail from an odd offset.
ranges() {
    $PY - "$1" <<'EOF'
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(n))
    size = f.seek(0, 2)
header.pop("__metadata__", None)
starts = sorted({8 + n + h["data_offsets"][0] for h in header.values()} | {8 + n})
out = [(0, 5), (3, 17), (size - 1, 1), (size - 7, 100)]
for b in starts[:40]:
    out += [(max(b - 3, 0), 7), (max(b - 1, 0), 2), (max(b - 5, 0), 4099)]
out += [(8 + n - 11, size), (8 + n + 13, 65536 + 5)]
for o, c in out:
    print(o, c)
EOF
}

# same_ranges VIEW FILE: each range of ranges read from VIEW with O_DIRECT equals FILE's
same_ranges() {
    local off count
    ranges "$2" >"$T/ranges"
    [ -s "$T/ranges" ]
    while read -r off count; do
        dd if="$1" iflag=direct,skip_bytes,count_bytes skip="$off" count="$count" bs=1M \
            status=none >"$T/got"
        dd if="$2" iflag=skip_bytes,count_bytes skip="$off" count="$count" bs=1M \
            status=none >"$T/want"
        cmp "$T/got" "$T/want" || { echo "range $off+$count differs" >&2; return 1; }
    done <"$T/ranges"
}

# viewed MODEL [options...]: MODEL mounted as safetensors at $M (with $MOUNT_OPTS too), and
# converted by ckptfs-convert (with the options) to $T/conv.safetensors; the two files are one
viewed() {
    local model=$1
    shift
    mount_fg "$model" "$M" -o "as=safetensors${MOUNT_OPTS:-}" "$@"
    rm -f "$T/conv.safetensors"
    "$CONVERT" -q "$@" "$model" "$T/conv.safetensors"
    # ranges first: the daemon's own answers, before cmp fills the page cache
    same_ranges "$M/$V" "$T/conv.safetensors"
    cmp "$M/$V" "$T/conv.safetensors"
    [ "$(ls -A "$M")" = "$V" ]
}

@test "a .ckpt: the view is ckptfs-convert's file, and holds the checkpoint's tensors" {
    for f in mindarmour_checkpoint_lenet-10_1875.ckpt goldenstick_test_linears_woq_predict_2stage_fp32.ckpt; do
        viewed "$MS/$f"
        $CMP "$MS/$f" "$M/$V"
        unmount "$M"
    done
}

@test "a zstd-compressed .ckpt: bytes decoded (ck_model_read), not spliced" {
    zstd -q "$MS/mindarmour_checkpoint_lenet-10_1875.ckpt" -o "$T/lenet.ckpt.zst"
    viewed "$T/lenet.ckpt.zst"
    $CMP "$MS/mindarmour_checkpoint_lenet-10_1875.ckpt" "$M/$V"
}

@test "a safetensors file: laid out again as safetensors' writer does, as ckptfs-convert" {
    local f=$FIXTURES/safetensors/hf-safetensors-samples/H.safetensors
    viewed "$f"
    $CMP "$f" "$M/$V"
}

@test "PyTorch .pt: strided views are gathers, served in row-major order; every dtype" {
    $PT gen "$T/views.pt" --case views --seed 3
    viewed "$T/views.pt"
    $PT same-as-safetensors "$T/views.pt" "$M/$V"
    unmount "$M"
    # the same replies copied by libfuse instead of spliced
    MOUNT_OPTS=,nosplice viewed "$T/views.pt"
    unmount "$M"
    # a read over more small tensors than a reply splices (64): the rest copied
    $PT gen "$T/many.pt" --case many --count 400 --seed 5
    viewed "$T/many.pt"
    $PT same-as-safetensors "$T/many.pt" "$M/$V"
    unmount "$M"
    # every type of alltypes safetensors has (complex128 has no dtype there: refused below)
    $PT gen "$T/all.pt" --case alltypes --seed 4
    $PY -c 'import sys, torch
d = torch.load(sys.argv[1], weights_only=True)
torch.save({k: v for k, v in d.items() if v.dtype != torch.complex128}, sys.argv[2])' \
        "$T/all.pt" "$T/st.pt"
    viewed "$T/st.pt"
    $PT same-as-safetensors "$T/st.pt" "$M/$V"
}

@test "a PyTorch Distributed Checkpoint: chunks cut by rows, grids even and uneven, a transpose, safetensors data files" {
    local c
    for c in dim0 grid uneven strided safetensors; do
        $PY "$REPO/tests/oracle/dcp_oracle.py" gen "$T/$c" --case "$c"
        viewed "$T/$c"
        $PY "$REPO/tests/oracle/dcp_oracle.py" same-as-safetensors "$T/$c" "$M/$V"
        unmount "$M"
    done
}

@test "a merged distributed checkpoint (-o strategy): tensors cut along later dims as gathers" {
    $DIST gen "$T/g" --ranks 4 --case tp4x2 --seed 2
    viewed "$T/g/dist" -o strategy="$T/g/strategy.ckpt"
    # the oracle's full model is what the ranks were cut from
    $CMP "$T/g/full.ckpt" "$M/$V"
    unmount "$M"
    # four readers at once on libfuse's threads, past the page cache
    local p pids=()
    MOUNT_OPTS=,threads viewed "$T/g/dist" -o strategy="$T/g/strategy.ckpt"
    for p in 1 2 3 4; do
        dd if="$M/$V" iflag=direct bs=$((p * 4096 + 512)) status=none >"$T/r$p" &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p"; done
    for p in 1 2 3 4; do cmp "$T/r$p" "$T/conv.safetensors"; done
}

@test "an iteration directory: its shards' slices assembled, as ckptfs-convert assembles them" {
    $PY "$REPO/tests/oracle/iteration_oracle.py" gen "$T/it" --case tp2 --seed 7
    viewed "$T/it/iteration_00000010"
    # the oracle's full model is what the slices were cut from
    $CMP "$T/it/full.safetensors" "$M/$V"
}

@test "stat: one read-only regular file of the exact size, the model's mode and mtime; no snapshot_done" {
    cp "$MS/mindarmour_checkpoint_lenet-10_1875.ckpt" "$T/model.ckpt"
    chmod 640 "$T/model.ckpt"
    touch -d '2024-02-03 04:05:06' "$T/model.ckpt"
    viewed "$T/model.ckpt"
    [ "$(stat -c '%F %a %s %Y' "$M/$V")" = \
      "regular file 440 $(stat -c %s "$T/conv.safetensors") $(stat -c %Y "$T/model.ckpt")" ]
    [ ! -e "$M/snapshot_done" ]
    run sh -c "printf x >>'$M/$V'"
    [ "$status" -ne 0 ]
    run touch "$M/new"
    [ "$status" -ne 0 ]
    cmp "$M/$V" "$T/conv.safetensors"
}

# nobody CMD...: CMD as another user without root's groups, in the mount
nobody() {
    (cd "$M" && setpriv --reuid=65534 --regid=65534 --clear-groups "$@")
}

@test "allow_other: another user reads the view of a 0644 model, not of a 0600 one" {
    cp "$MS/mindarmour_checkpoint_lenet-10_1875.ckpt" "$T/model.ckpt"
    chmod 644 "$T/model.ckpt"
    MOUNT_OPTS=,allow_other viewed "$T/model.ckpt"
    nobody cat "$V" | cmp - "$T/conv.safetensors"
    unmount "$M"
    chmod 600 "$T/model.ckpt"
    mount_fg "$T/model.ckpt" "$M" -o as=safetensors,allow_other
    run nobody cat "$V"
    [ "$status" -ne 0 ]
    [[ $output == *"Permission denied"* ]]
    cmp "$M/$V" "$T/conv.safetensors"   # its owner reads
}

@test "refused in one line: -o rw, -o create, a type safetensors lacks, another view, a run directory" {
    local f=$MS/mindarmour_checkpoint_lenet-10_1875.ckpt
    mount_refused -o as=safetensors,rw "$f"
    grep -q 'as=safetensors is read-only: -o rw' "$T/err"
    mount_refused -o as=safetensors,create "$T/new.ckpt"
    grep -q 'as=safetensors is read-only: -o create' "$T/err"
    mount_refused -o as=onnx "$f"
    grep -q 'as=onnx' "$T/err"
    # ckptfs-convert's refusal, word for word
    $PT gen "$T/all.pt" --case alltypes --seed 4
    mount_refused -o as=safetensors "$T/all.pt"
    run "$CONVERT" -q "$T/all.pt" "$T/x.safetensors"
    [ "$status" -eq 1 ]
    [ "$(cat "$T/err")" = "ckptfs: ${output#ckptfs-convert: }" ]
    [[ $output == *"tensor 't11.complex128': safetensors cannot hold it: type complex128 has no safetensors dtype" ]]
    [ ! -e "$T/x.safetensors" ]
    mkdir -p "$T/run"
    cp "$f" "$T/run/a.ckpt"
    mount_refused -o as=safetensors "$T/run"
    grep -q 'not a run directory' "$T/err"
}

@test "-o as=NAME is looked up by format name: a format without a view, or no format, refused naming the views" {
    local f=$MS/mindarmour_checkpoint_lenet-10_1875.ckpt
    mount_refused -o as=onnx "$f"
    grep -qx 'ckptfs: -o as=onnx: that format has no view; the formats with a view: safetensors' "$T/err"
    mount_refused -o as=nosuch "$f"
    grep -qx 'ckptfs: -o as=nosuch: no format is called that; the formats with a view: safetensors' "$T/err"
}
