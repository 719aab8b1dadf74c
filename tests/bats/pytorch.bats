#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# PyTorch torch.save files (.pt, .pth, .bin) mount as the tree PyTorch
# itself loads: every real fixture and every file Debian's torch 1.13
# writes here (every dtype, views of shared storages at offsets and with
# strides, nested training checkpoints with numbers beside the tensors,
# Parameters, names that need escaping, ZIP64) shows, through a real
# mount, what torch.load(weights_only=True) returns
# (tests/oracle/pytorch_oracle.py).  Mounting reads no storage bytes;
# hostile files are refused in one line naming the offset, nothing is
# executed or mounted.  Saves write edited values in place (torch loads
# them, zipfile checks the CRCs) or lay the file out again as torch.save
# would (renames, removals, new tensors, untied edits), keeping every value
# the tree does not show; ckptfs-convert and -o create write new files.

load helpers

PT_ORACLE="$PY $REPO/tests/oracle/pytorch_oracle.py"
PT=$FIXTURES/pytorch
M=$BATS_TEST_TMPDIR/m
T=$BATS_TEST_TMPDIR

# the oracle's calls (torch imported each time: most of a call) through one
# Python (helpers.bash); no test kills an oracle
setup_file() { pyserve_file_start torch "$REPO/tests/oracle/pytorch_oracle.py"; }
teardown_file() { pyserve_file_stop; }

teardown() {
    # a file wrongly accepted was mounted as a daemon: take it down too
    if mountpoint -q "$M"; then
        fusermount3 -u "$M" || fusermount3 -uz "$M"
    fi
    ckptfs_teardown
}

# check_mount FILE [--trusted]: mounted read-only, the tree is what torch loads
check_mount() {
    mount_fg "$1" "$M" -o ro
    run $PT_ORACLE check "$M" "$@"
    echo "$1: $output"
    [ "$status" -eq 0 ]
    unmount "$M"
}

@test "every real PyTorch fixture mounts as the tree torch.load gives (names, types, meta, out, numpy reads)" {
    n=0
    for f in "$PT"/*.pt "$PT"/*.pth; do
        check_mount "$f"
        n=$((n + 1))
    done
    [ "$n" -eq 5 ]
}

@test "files torch.save writes: every dtype, views (tied, offsets, transposes, every other column, stride 0, Fortran order), Parameters, escaped names, 3000 tensors" {
    for c in alltypes views params names; do
        $PT_ORACLE gen "$T/$c.pt" --case "$c"
        check_mount "$T/$c.pt"
    done
    $PT_ORACLE gen "$T/many.pth" --case many --count 3000
    check_mount "$T/many.pth"
    # the strided views are gathers of their storage, not copies
    "$BUILD/ckptfs-dump" "$T/views.pt" | grep -P '^transposed\t.*\tstrided, 4-byte runs$'
    "$BUILD/ckptfs-dump" "$T/views.pt" | grep -P '^rows\t(?!.*strided)'
}

@test "a training checkpoint: nested dicts and lists joined with '.', an optimizer's int keys, numbers as read-only 0-d tensors, strings and None counted, not shown" {
    f=$T/train.bin
    $PT_ORACLE gen "$f" --case nested
    # torch 1.13's weights-only loader has no BINFLOAT: the oracle loads
    # the file it wrote itself in full (pytorch_oracle.load_entries)
    check_mount "$f" --trusted
    run "$BUILD/ckptfs-dump" "$f"
    [ "$status" -eq 0 ]
    [[ ${lines[0]} == *", 3 values neither tensors nor numbers not shown (the first: 'optimizer.param_groups.0.foreach')" ]]
    mount_fg "$f" "$M"
    [ "$(getfattr --absolute-names --only-values -n user.ckptfs.type "$M/epoch")" = int ]
    [ "$(getfattr --absolute-names --only-values -n user.ckptfs.type "$M/lr")" = float ]
    [ "$(getfattr --absolute-names --only-values -n user.ckptfs.type "$M/optimizer.state.0.exp_avg")" = torch.float32 ]
    [ "$($PY -c 'import struct,sys; print(struct.unpack("<q", open(sys.argv[1],"rb").read())[0])' "$M/step/out")" = -70000000000 ]
    [ ! -e "$M/name" ] && [ ! -e "$M/nothing" ]
    run sh -c "echo 1 >'$M/epoch/out'"
    [ "$status" -ne 0 ]
    unmount "$M"
}

@test "ZIP64: the same records with every ZIP64 structure (Python's zipfile) mount as the same tree" {
    for c in views nested; do
        $PT_ORACLE gen "$T/$c.pt" --case "$c"
        $PT_ORACLE zip64 "$T/$c.pt" "$T/$c-64.pt"
        check_mount "$T/$c-64.pt" --trusted
    done
}

@test "mounting reads no storage bytes: at most the central directory, the local headers, byteorder and data.pkl" {
    f=$T/big.pt
    $PT_ORACLE gen "$f" --case big --count 16
    limit=$($PT_ORACLE overhead "$f")
    env ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" \
        strace -f -y -e trace=read,pread64 -o "$T/trace" "$BUILD/ckptfs-dump" "$f" >/dev/null
    read=$(awk -v f="<$(realpath "$f")>" 'index($0, f) && $NF ~ /^[0-9]+$/ {n += $NF} END {print n + 0}' "$T/trace")
    echo "read $read of $(stat -c %s "$f") bytes; $limit are not storages" >&3
    [ "$read" -gt 0 ]
    [ "$read" -le "$limit" ]
}

@test "hostile files are refused in one line naming the offset or record, nothing executed, nothing mounted" {
    rm -f /tmp/ckptfs-pytorch-oracle-executed
    mkdir -p "$M"
    $PT_ORACLE bad-all "$T" >"$T/bad-cases"
    [ "$(wc -l <"$T/bad-cases")" -eq "$($PT_ORACLE bad-cases | wc -w)" ]
    while IFS=$'\t' read -r c want; do
        f=$T/bad-$c.pt
        run "$BUILD/ckptfs-dump" "$f"
        echo "$c: $output"
        [ "$status" -ne 0 ]
        [ "${#lines[@]}" -eq 1 ]
        [[ $output == *"$want"* ]]
        run "$CKPTFS" -o ro "$f" "$M"
        [ "$status" -ne 0 ]
        [[ $output == *"$want"* ]]
        ! mountpoint -q "$M" || false
    done <"$T/bad-cases"
    [ ! -e /tmp/ckptfs-pytorch-oracle-executed ]
}

# save_edit FILE NAME [--trusted]: NAME's out given new random bytes through
# a writable mount and saved; the oracle checks the file
save_edit() {
    local f=$1 name=$2
    shift 2
    cp "$f" "$T/orig.pt"
    mount_fg "$f" "$M" -o rw
    size=$(stat -c %s "$M/$name/out")
    head -c "$size" /dev/urandom >"$T/new.out"
    dd if="$T/new.out" of="$M/$name/out" conv=notrunc,fsync status=none
    touch "$M/snapshot_done"
    unmount "$M"
    run $PT_ORACLE edit-check "$T/orig.pt" "$f" "$name" "$T/new.out" "$@"
    echo "$f $name: $output"
    [ "$status" -eq 0 ]
}

@test "an edit of a tensor's values is saved in place: torch loads the edit, every CRC is right, only the record and its CRC fields change" {
    # a file with data descriptors (torch 1.13, here) and CRCs in the local
    # headers (the fixtures' newer writers)
    $PT_ORACLE gen "$T/alltypes.pt" --case alltypes
    save_edit "$T/alltypes.pt" t0.float32
    save_edit "$T/alltypes.pt" t3.bfloat16
    cp "$PT/torchtune_tiny_fair_checkpoint.pt" "$T/fair.pt"
    save_edit "$T/fair.pt" layers.0.attention.wq.weight
    cp "$PT/candle_test.pt" "$T/candle.pt"
    save_edit "$T/candle.pt" test
}

@test "an unchanged tree saves to the identical file, for every fixture and generated file" {
    for c in alltypes views nested params names; do
        $PT_ORACLE gen "$T/$c.pt" --case "$c"
    done
    for f in "$PT"/*.pt "$PT"/*.pth "$T"/*.pt; do
        "$BUILD/ckptfs-reencode" "$f" "$T/again.pt"
        cmp "$f" "$T/again.pt"
    done
}

# new_tensor DIR SRC: a tensor directory DIR copied from tensor directory SRC
new_tensor() {
    mkdir "$1" && cp "$2/meta" "$1/meta" && cp "$2/out" "$1/out"
}

@test "renames, moves, removals, new tensors and new shapes lay the file out again as torch.save would: every value the tree does not show is kept" {
    f=$T/train.pt
    $PT_ORACLE gen "$f" --case nested
    cp "$f" "$T/orig.pt"
    mount_fg "$f" "$M" -o rw
    mv "$M/model.0.weight" "$M/model.0.w2"                 # renamed within its dict
    mv "$M/optimizer.state.0.exp_avg" "$M/moved"           # out of its dict
    rm -r "$M/model.1.bias"
    new_tensor "$M/model.extra.t" "$M/model.0.bias"        # into the dict "model"
    new_tensor "$M/top" "$M/model.0.bias"
    $ORACLE meta-of 2,6 kFloat >"$M/model.1.weight/meta"
    head -c 48 /dev/urandom >"$M/model.1.weight/out"
    cp "$M/model.1.weight/out" "$T/w.out"
    touch "$M/snapshot_done"
    unmount "$M"
    # torch's own load of the saved file (trusted: the oracle wrote the
    # original, and it holds floats, which 1.13's weights-only loader lacks)
    $PY - "$T/orig.pt" "$f" "$T/w.out" <<'EOF2'
import sys, torch, zipfile
o, d = torch.load(sys.argv[1]), torch.load(sys.argv[2])
w = open(sys.argv[3], "rb").read()
assert list(d) == list(o) + ["moved", "top"], list(d)
assert list(d["model"]) == ["0.w2", "0.bias", "1.weight", "extra.t"], list(d["model"])
assert d["model"]._metadata == o["model"]._metadata
assert torch.equal(d["model"]["0.w2"], o["model"]["0.weight"])
assert torch.equal(d["model"]["extra.t"], o["model"]["0.bias"])
assert d["model"]["1.weight"].shape == (2, 6)
assert d["model"]["1.weight"].numpy().tobytes() == w
assert torch.equal(d["moved"], o["optimizer"]["state"][0]["exp_avg"])
assert list(d["optimizer"]["state"][0]) == ["step", "exp_avg_sq"]
assert d["optimizer"]["param_groups"] == o["optimizer"]["param_groups"]
for k in ("epoch", "step", "lr", "best", "name", "nothing", "history"):
    assert repr(d[k]) == repr(o[k]), k
names = zipfile.ZipFile(sys.argv[2]).namelist()
assert names[0].endswith("/data.pkl") and names[-1].endswith("/version"), names
assert zipfile.ZipFile(sys.argv[2]).testzip() is None
print("ok")
EOF2
    check_mount "$f" --trusted
}

@test "an edit of a tied weight or a view gives that tensor a storage of its own; the tensors it shared with keep theirs, still shared" {
    f=$T/views.pt
    $PT_ORACLE gen "$f" --case views
    cp "$f" "$T/orig.pt"
    mount_fg "$f" "$M" -o rw
    head -c 192 /dev/urandom >"$T/tied.out"
    head -c 192 /dev/urandom >"$T/t.out"
    cp "$T/tied.out" "$M/tied/out"
    cp "$T/t.out" "$M/transposed/out"
    touch "$M/snapshot_done"
    unmount "$M"
    $PY - "$T/orig.pt" "$f" "$T/tied.out" "$T/t.out" <<'EOF2'
import sys, torch
o, d = (torch.load(p, weights_only=True) for p in sys.argv[1:3])
tied, t = (open(p, "rb").read() for p in sys.argv[3:5])
assert d["tied"].numpy().tobytes() == tied
assert d["transposed"].contiguous().numpy().tobytes() == t and d["transposed"].is_contiguous()
ptr = lambda k: d[k].storage().data_ptr()
assert ptr("tied") != ptr("base") and ptr("transposed") != ptr("base")
for k in ("base", "rows", "cols", "inner", "row", "elem", "flipped_halves", "empty_view"):
    assert ptr(k) == ptr("base"), k
    assert d[k].stride() == o[k].stride() and torch.equal(d[k], o[k]), k
assert len({ptr(k) for k in d}) == len({o[k].storage().data_ptr() for k in o}) + 2
print("ok")
EOF2
    check_mount "$f"
}

# refused_save FILE WANT CMD...: CMD changes the tree of FILE's writable
# mount; the save is refused with WANT in its one line, the file untouched
refused_save() {
    local f=$1 want=$2
    shift 2
    before=$(sha "$f")
    mount_fg "$f" "$M" -o rw
    "$@"
    run touch "$M/snapshot_done"
    [ "$status" -ne 0 ]
    err=$(getfattr --absolute-names --only-values -n user.ckptfs.last_error "$M")
    echo "$err"
    [[ $err == *"$want"* ]]
    unmount "$M" || true
    [ "$(sha "$f")" = "$before" ]
}

@test "what a PyTorch file cannot hold is refused at the save in one line, the file untouched: a list item removed or renamed, a name of a value not shown" {
    f=$T/train.pt
    $PT_ORACLE gen "$f" --case nested
    refused_save "$f" "an item of a list or tuple ('history...') was removed" rm -r "$M/history.2"
    refused_save "$f" "tensor 'hist': an item of a list or tuple is named by its place" \
        mv "$M/history.2" "$M/hist"
    refused_save "$f" "tensor 'name': the file holds a value of that name that the tree does not show" \
        new_tensor "$M/name" "$M/model.0.bias"
    # renamed in its place (the top dict) to the key of a value not shown
    mount_fg "$f" "$M" -o rw
    mv "$M/model.0.bias" "$M/moved"
    touch "$M/snapshot_done"
    unmount "$M"
    refused_save "$f" "tensor 'nothing': the file holds a value of that name" \
        mv "$M/moved" "$M/nothing"
}

@test "ckptfs-convert writes .pt files torch loads (weights_only) from any model; -o create makes one from a copied OneFlow snapshot" {
    ST=$FIXTURES/safetensors
    src=$(ls "$ST"/*/*.safetensors | head -1)
    "$BUILD/ckptfs-convert" "$src" "$T/from-st.pt"
    $PT_ORACLE same-as-safetensors "$T/from-st.pt" "$src"
    # laid out as torch.save lays a file out: its name the top directory,
    # every record's bytes on a 64-byte boundary, every CRC right
    $PY - "$T/from-st.pt" <<'EOF2'
import struct, sys, zipfile
pt = sys.argv[1]
z, raw = zipfile.ZipFile(pt), open(pt, "rb").read()
assert z.testzip() is None
assert z.namelist()[0] == "from-st/data.pkl", z.namelist()
for i in z.infolist():
    nl, xl = struct.unpack("<HH", raw[i.header_offset + 26:i.header_offset + 30])
    assert (i.header_offset + 30 + nl + xl) % 64 == 0, i.filename
print("ok")
EOF2
    "$BUILD/ckptfs-convert" "$REPO/tests/demo/checkpoint_lenet-10_1875.ckpt" "$T/lenet.pt"
    "$BUILD/ckptfs-diff" "$REPO/tests/demo/checkpoint_lenet-10_1875.ckpt" "$T/lenet.pt"
    $PY -c 'import sys, torch; print(len(torch.load(sys.argv[1], weights_only=True)))' "$T/lenet.pt"
    # a new file from a OneFlow snapshot copied in, entry by entry
    SNAP=$FIXTURES/oneflow/legacy_v2_java_mlp_adam
    mount_fg "$T/new.pt" "$M" -o create
    for e in "$SNAP"/dense*; do cp -r "$e" "$M/"; done
    touch "$M/snapshot_done"
    unmount "$M"
    $PY - "$T/new.pt" "$SNAP" <<'EOF2'
import os, sys, numpy as np, torch
d = torch.load(sys.argv[1], weights_only=True)
dirs = sorted(e for e in os.listdir(sys.argv[2]) if e.startswith("dense"))
assert sorted(d) == dirs, (sorted(d), dirs)
for k in dirs:
    assert d[k].numpy().tobytes() == open(os.path.join(sys.argv[2], k, "out"), "rb").read(), k
print("ok", len(d))
EOF2
}

@test "the tools take .pt files: convert to safetensors (json + numpy read it as torch loads the .pt), stat, diff" {
    f=$T/views.pt
    $PT_ORACLE gen "$f" --case views
    "$BUILD/ckptfs-convert" "$f" "$T/views.safetensors"
    $PT_ORACLE same-as-safetensors "$f" "$T/views.safetensors"
    # stat reads the strided view as torch does: the base's elements
    "$BUILD/ckptfs-stat" "$f" >"$T/stat"
    [ "$(awk '$1 == "transposed" {print $2, $3, $4, $5, $6}' "$T/stat")" = \
      "$(awk '$1 == "base" {print $2, "[8,6]", $4, $5, $6}' "$T/stat")" ]
    run "$BUILD/ckptfs-diff" "$f" "$T/views.safetensors"
    echo "$output"
    [ "$status" -eq 0 ]
}

@test "a run directory lists .pt, .pth and pytorch_model*.bin checkpoints (not other .bin files) by their names without the extension" {
    D=$T/run
    mkdir "$D"
    cp "$PT/candle_test.pt" "$D/net-1_10.pt"
    cp "$PT/candle_test_with_key.pt" "$D/net-2_10.pth"
    cp "$PT/torchtune_tiny_state_dict_with_one_key.pt" "$D/pytorch_model.bin"
    head -c 64 /dev/zero >"$D/weights.bin" # an ONNX model's external data, say
    "$BUILD/ckptfs-dump" -o settle=0 "$D" | tail -n +2 | cut -f1-3 >"$T/got"
    cat "$T/got"
    printf '%s\t%s\t%s\n' net-1_10 net-1_10.pt pytorch net-2_10 net-2_10.pth pytorch \
        pytorch_model pytorch_model.bin pytorch | diff - "$T/got"
}

@test "ZIP64 sizes: ckptfs-convert's .pt of a tensor of more than 4 GiB loads in torch" {
    # numpy writes a safetensors file of one 4.3 GB int32 tensor whose element i is i
    # (torch.save of it takes 40 s here; bench/bench_pytorch.sh reads torch's own 4 GiB
    # files); its record in the .pt needs ZIP64 sizes, checked by zipfile, and torch.load
    # must give arange back
    local n=1075000000
    $PY - "$T/big.safetensors" "$n" <<'PYEOF'
import json, struct, sys
import numpy as np
n = int(sys.argv[2])
header = json.dumps({"w": {"dtype": "I32", "shape": [n], "data_offsets": [0, 4 * n]}}).encode()
header += b" " * (-len(header) % 8)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(header)) + header)
    for at in range(0, n, 1 << 27):
        np.arange(at, min(at + (1 << 27), n), dtype="<i4").tofile(f)
PYEOF
    "$BUILD/ckptfs-convert" -q "$T/big.safetensors" "$T/big.pt"
    rm "$T/big.safetensors"
    $PY - "$T/big.pt" "$n" <<'PYEOF'
import sys, zipfile, torch
import numpy as np
big = [i for i in zipfile.ZipFile(sys.argv[1]).infolist() if i.file_size >= 1 << 32]
assert len(big) == 1, big  # a ZIP64 size record
d = torch.load(sys.argv[1], weights_only=True)
assert list(d) == ["w"] and d["w"].dtype == torch.int32, list(d)
w, n, step = d["w"].numpy(), int(sys.argv[2]), 1 << 27
assert w.shape == (n,), w.shape
for at in range(0, n, step):
    assert np.array_equal(w[at:at + step], np.arange(at, min(at + step, n), dtype="<i4")), at
PYEOF
}
