#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# zstd-compressed models (model.ckpt.zst, .onnx.zst, .mindir.zst): mounted
# as the model they hold, read frame by frame when the file is in zstd's
# seekable format, saved back in the seekable format.  Every expected value
# comes from outside ckptfs: the `zstd` command, envelope_oracle.py (seekable
# files, frame layouts, encryption), ckpt_oracle.py / graph_oracle.py (the
# plaintexts), python3-onnx and onnxruntime-node, and the plain fixtures.

load helpers

# The ckptfs mounts first (a model may sit on RAMFS), then RAMFS.
teardown() {
    local status=0
    ckptfs_teardown || status=$?
    if [ -n "${RAMFS:-}" ]; then umount "$RAMFS" || status=1; fi
    return "$status"
}

ENVELOPE="$PY $REPO/tests/oracle/envelope_oracle.py"
ORT_RUN="node $REPO/tests/ort/run_model.js"
LENET=$MS/mindarmour_checkpoint_lenet-10_1875.ckpt
KHEX=30313233343536373839414243444546 # the bytes of 0123456789ABCDEF
FRAME=2097152                         # what a save puts in each frame

setup() {
    M=$BATS_TEST_TMPDIR/m
    D=$BATS_TEST_TMPDIR/models # the models' directory (atomicity checks list it)
    mkdir -p "$D"
}

# zst SRC OUT [zstd options]: OUT is SRC compressed by the zstd command
# (one frame, no seek table), writable.
zst() {
    local src=$1 out=$2
    shift 2
    zstd -q -f "$@" "$src" -o "$out"
    chmod 644 "$out"
}

# seekable SRC OUT FRAME_SIZE [oracle options]: OUT is SRC in zstd's
# seekable format, cut by the oracle into FRAME_SIZE-byte frames.
seekable() {
    local src=$1 out=$2 n=$3
    shift 3
    $ENVELOPE zstd-seekable --frame-size "$n" "$@" "$src" "$out"
    chmod 644 "$out"
}

# unz FILE: `zstd -d` of FILE on stdout.
unz() { zstd -q -d -c "$1"; }

# written FILE PLAINTEXT: FILE is what a save writes: the oracle accepts its
# seek table and frames, every frame holds 1 byte to 2 MiB (a save cuts
# frames at 2 MiB, where large payloads start and end, and around the
# frames it copies), and `zstd -d` gives exactly PLAINTEXT.  Prints the
# number of frames.
written() {
    $ENVELOPE zstd-layout "$1" >"$BATS_TEST_TMPDIR/layout.json" || return 1
    cmp <(unz "$1") "$2" >&2 || return 1
    $PY - "$BATS_TEST_TMPDIR/layout.json" "$(stat -c %s "$2")" "$FRAME" <<'PY'
import json, sys
d = [f["decompressed"] for f in json.load(open(sys.argv[1]))["frames"]]
size, frame = int(sys.argv[2]), int(sys.argv[3])
assert sum(d) == size, (sum(d), size)
assert d and all(0 < x <= frame for x in d), d
print(len(d))
PY
}

# zframes FILE: one line per frame of FILE's seek table, "D_OFF D_SIZE
# SHA256" (the plaintext range, the hash of the compressed frame bytes).
# Its own small parser of the seekable format, not ckptfs's nor the
# oracle's: the checks below prove that a save copied frames.
zframes() {
    $PY - "$1" <<'PY'
import hashlib, struct, sys
data = open(sys.argv[1], "rb").read()
n, desc, magic = struct.unpack("<IBI", data[-9:])
assert magic == 0x8F92EAB1 and desc & 0x7C == 0, "no seek table"
es = 12 if desc & 0x80 else 8
start = len(data) - 9 - n * es - 8
assert start >= 0 and struct.unpack_from("<II", data, start) == (0x184D2A5E, n * es + 9)
c = d = 0
for i in range(n):
    cs, ds = struct.unpack_from("<II", data, start + 8 + i * es)
    print(d, ds, hashlib.sha256(data[c:c + cs]).hexdigest())
    c += cs
    d += ds
assert c == start, "frames do not end where the seek table starts"
PY
}

# kept_frames OLD NEW LO HI [inside]: every frame of OLD whose plaintext
# lies wholly before LO or at or after HI (with "inside": wholly in
# [LO, HI)) is in NEW, the same compressed bytes at the same plaintext
# offset.  Prints how many.
kept_frames() {
    $PY - <(zframes "$1") <(zframes "$2") "$3" "$4" "${5:-outside}" <<'PY'
import sys
old = [l.split() for l in open(sys.argv[1])]
new = {(int(a), int(b), h) for a, b, h in (l.split() for l in open(sys.argv[2]))}
lo, hi, inside = int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "inside"
want = [(int(a), int(b), h) for a, b, h in old
        if (lo <= int(a) and int(a) + int(b) <= hi if inside
            else int(a) + int(b) <= lo or int(a) >= hi)]
missing = [f for f in want if f not in new]
assert want and not missing, ("frames not copied", len(missing), missing[:3])
print(len(want))
PY
}

# dump_says FILE TEXT: ckptfs-dump's header line of FILE ends with TEXT.
dump_says() {
    local head
    head=$("$BUILD/ckptfs-dump" "$1" | head -1)
    echo "dump: $head"
    [[ $head == *", $2" ]]
}

# extents PLAIN.ckpt: "DIR OFFSET LENGTH" per tensor: where its bytes sit in
# the plain file.  The ranges are ckptfs-dump's, but each is held to the
# oracle: the bytes there must hash to the oracle's sha256 of that tensor,
# and every tensor of the oracle's parse must be listed once.
extents() {
    "$BUILD/ckptfs-dump" "$1" >"$BATS_TEST_TMPDIR/dump" || return 1
    $ORACLE parse "$1" >"$BATS_TEST_TMPDIR/parse.json" || return 1
    $PY - "$1" "$BATS_TEST_TMPDIR/dump" "$BATS_TEST_TMPDIR/parse.json" <<'PY'
import hashlib, json, sys
data = open(sys.argv[1], "rb").read()
ref = {e["dir"]: e for e in json.load(open(sys.argv[3]))}
seen = []
for line in open(sys.argv[2]):
    if line.startswith("#"):
        continue
    f = line.rstrip("\n").split("\t")
    d, off, n = f[0], *map(int, f[-1].split("+"))
    e = ref[d]
    assert n == e["nbytes"], (d, n, e["nbytes"])
    assert hashlib.sha256(data[off:off + n]).hexdigest() == e["sha256"], d
    seen.append(d)
    print(d, off, n)
assert sorted(seen) == sorted(ref), (seen, list(ref))
PY
}

# holder EXTENTS OFFSET: the tensor whose bytes hold plaintext OFFSET, and
# where they start ("DIR START").
holder() {
    awk -v o="$2" '$2 <= o && o < $2 + $3 { print $1, $2; exit }' "$1"
}

# straddle MNT PLAIN SEEKABLE: for every frame boundary of SEEKABLE (the
# oracle's) inside a tensor, the 8 bytes around it (clipped to the tensor),
# read from the tensor's out with O_DIRECT (so ckptfs gets exactly that
# read, not the kernel's readahead), equal the plain file's bytes there.
# Prints how many boundaries were checked.
straddle() {
    local mnt=$1 plain=$2 z=$3 n=0 b d off len s c
    extents "$plain" >"$BATS_TEST_TMPDIR/extents" || return 1
    $ENVELOPE frame-boundaries "$z" >"$BATS_TEST_TMPDIR/boundaries" || return 1
    while read -r b; do
        while read -r d off len; do
            [ "$b" -ge "$off" ] && [ "$b" -lt $((off + len)) ] || continue
            s=$((b - 4))
            [ "$s" -ge "$off" ] || s=$off
            c=$((b + 4 - s))
            [ $((s + c)) -le $((off + len)) ] || c=$((off + len - s))
            dd if="$mnt/$d/out" of="$BATS_TEST_TMPDIR/straddle.got" iflag=direct,skip_bytes,count_bytes \
               skip=$((s - off)) count=$c bs=$c status=none || return 1
            dd if="$plain" of="$BATS_TEST_TMPDIR/straddle.want" iflag=skip_bytes,count_bytes \
               skip=$s count=$c bs=$c status=none || return 1
            [ "$(stat -c %s "$BATS_TEST_TMPDIR/straddle.want")" -eq "$c" ] || return 1
            cmp "$BATS_TEST_TMPDIR/straddle.got" "$BATS_TEST_TMPDIR/straddle.want" >&2 ||
                { echo "boundary $b in $d: bytes differ" >&2; return 1; }
            n=$((n + 1))
        done <"$BATS_TEST_TMPDIR/extents"
    done <"$BATS_TEST_TMPDIR/boundaries"
    echo "$n"
}

# patched SRC OUT OFFSET TEXT: OUT is SRC with TEXT's bytes at OFFSET (the
# plaintext an in-place edit of those bytes must give).
patched() {
    cp "$1" "$2"
    chmod 644 "$2"
    printf %s "$4" | dd of="$2" bs=1 seek="$3" conv=notrunc status=none
    ! cmp -s "$1" "$2" || false # the edit changes something
}

# poke MNT DIR OFFSET TEXT: write TEXT at OFFSET of DIR's out in the mount.
poke() {
    printf %s "$4" | dd of="$1/$2/out" bs=1 seek="$3" conv=notrunc status=none
}

# rewrite_all MNT: every writable out written again with its own bytes (a
# save then has to write the file, and give back the same plaintext).
rewrite_all() {
    local d
    for d in "$1"/*/; do
        [ -w "$d/out" ] || continue # read-only types
        cat "$d/out" >"$BATS_TEST_TMPDIR/bytes"
        cat "$BATS_TEST_TMPDIR/bytes" >"$d/out"
    done
}

# unmount MNT: unmount (a save of what is pending) and collect that daemon's
# exit status; the mount is then no longer teardown's.
unmount() {
    local pid status=0
    pid=$(awk -v m="$1" '$2 == m { p = $1 } END { print p }' "$BATS_TEST_TMPDIR/mounts")
    umount_wait "$1" "$pid" || status=$?
    grep -v "^$pid " "$BATS_TEST_TMPDIR/mounts" >"$BATS_TEST_TMPDIR/mounts.new" || true
    mv "$BATS_TEST_TMPDIR/mounts.new" "$BATS_TEST_TMPDIR/mounts"
    return "$status"
}

# try_mount MODEL [ckptfs options...]: a daemonized mount attempt at $R (one
# that wrongly succeeds is unmounted by teardown); sets $status, $output.
try_mount() {
    local model=$1
    shift
    R=$BATS_TEST_TMPDIR/r
    mkdir -p "$R"
    echo "0 $R" >>"$BATS_TEST_TMPDIR/mounts"
    run "$CKPTFS" "$@" "$model" "$R"
    echo "ckptfs said: $output"
}

# refused_once FILE SHA TEXT...: the last try_mount failed with one line
# naming FILE and holding every TEXT, mounted nothing, left FILE as SHA.
refused_once() {
    local f=$1 before=$2 t
    shift 2
    [ "$status" -ne 0 ]
    [ "${#lines[@]}" -eq 1 ]
    [[ $output == "ckptfs: $f: "* ]]
    for t in "$@"; do [[ $output == *"$t"* ]] || { echo "missing: $t"; return 1; }; done
    ! mountpoint -q "$R" || false
    [ "$(sha "$f")" = "$before" ]
}

# gen_big OUT: a checkpoint of about 5.4 MB of random Float32 tensors
# (ckpt_oracle's encoder), so that a save cuts it into three frames.
gen_big() {
    PYTHONPATH=$REPO/tests/oracle $PY - "$1" <<'PY'
import sys
import numpy as np
import ckpt_oracle as co
rng = np.random.default_rng(11)
shapes = [("embed.weight", 700000), ("layer.0.bias", 17), ("layer.1.weight", 400000),
          ("head.weight", 250000), ("head.bias", 3)]
co.write_file(sys.argv[1], [co.record(co.tensor_value(t, "Float32", [n],
              rng.standard_normal(n).astype("<f4").tobytes())) for t, n in shapes])
PY
}

@test "zstd of .ckpt fixtures mounts as the plain checkpoint (oracle check)" {
    local n=0 f z
    $ORACLE gen "$BATS_TEST_TMPDIR/alltypes.ckpt" --case alltypes
    for f in "$LENET" "$MS/mindquantum_hackathon01_Mr_Tang754_model.ckpt" \
             "$MS/goldenstick_test_linears_woq_predict_2stage_fp32.ckpt" \
             "$MS/mindscience_SciAI_example_net_10000.ckpt" "$BATS_TEST_TMPDIR/alltypes.ckpt"; do
        z=$D/$n.ckpt.zst
        zst "$f" "$z"
        dump_says "$z" zstd
        mount_fg "$z" "$M$n" -o ro
        $ORACLE check "$M$n" "$f"
        [ -e "$M$n/snapshot_done" ]
        n=$((n + 1))
    done
    [ "$n" -eq 5 ]
}

@test "zstd of ONNX fixtures mounts as the plain model (graph oracle check)" {
    local n=0 f z
    for f in "$ONNX_FIX"/{tiny_conv2d,silero_vad_legacy,typed_fields_keras2onnx,dtypes_burn}.onnx; do
        z=$D/$n.onnx.zst
        zst "$f" "$z"
        mount_fg "$z" "$M$n" -o ro
        $GRAPH_ORACLE check "$M$n" "$f"
        n=$((n + 1))
    done
    [ "$n" -eq 4 ]
    # one value read through the compressed mount, decoded by the oracle from the plain file
    cmp <($PY -c 'import numpy as np,sys; print("\n".join(repr(float(v)) for v in np.fromfile(sys.argv[1], "<f4")))' "${M}0/2/out") \
        <($GRAPH_ORACLE values "$ONNX_FIX/tiny_conv2d.onnx" 2)
}

@test "zstd of MindIR fixtures mounts as the plain model (graph oracle check)" {
    local n=0 f z
    for f in "$MS"/mindspore_{ori_net,old_version_mindir_2,relu}.mindir; do
        z=$D/$n.mindir.zst
        zst "$f" "$z"
        mount_fg "$z" "$M$n" -o ro
        $GRAPH_ORACLE check "$M$n" "$f"
        n=$((n + 1))
    done
    [ "$n" -eq 3 ]
}

@test "the zstd magic, not the name: a compressed model named without .zst mounts as the model" {
    zst "$LENET" "$D/x.ckpt.zst"
    cp "$D/x.ckpt.zst" "$D/y.ckpt"
    dump_says "$D/y.ckpt" zstd
    mount_fg "$D/y.ckpt" "$M.ckpt" -o ro
    $ORACLE check "$M.ckpt" "$LENET"
    zst "$ONNX_FIX/silero_vad_legacy.onnx" "$D/y.onnx"
    mount_fg "$D/y.onnx" "$M.onnx" -o ro
    $GRAPH_ORACLE check "$M.onnx" "$ONNX_FIX/silero_vad_legacy.onnx"
    seekable "$MS/mindspore_old_version_mindir_2.mindir" "$D/y.mindir" 1000
    dump_says "$D/y.mindir" "seekable zstd"
    mount_fg "$D/y.mindir" "$M.mindir" -o ro
    $GRAPH_ORACLE check "$M.mindir" "$MS/mindspore_old_version_mindir_2.mindir"
}

@test "seekable, 4096-byte frames: every tensor, and reads straddling every frame boundary" {
    seekable "$LENET" "$D/s.ckpt.zst" 4096
    dump_says "$D/s.ckpt.zst" "seekable zstd"
    [ "$($ENVELOPE frame-boundaries "$D/s.ckpt.zst" | wc -l)" -gt 100 ]
    mount_fg "$D/s.ckpt.zst" "$M" -o ro
    n=$(straddle "$M" "$LENET" "$D/s.ckpt.zst")
    echo "checked $n boundaries"
    [ "$n" -gt 100 ]
    $ORACLE check "$M" "$LENET"
}

@test "seekable with -o cache_size=4096: frames as large as the cache, and larger ones" {
    local n
    seekable "$LENET" "$D/a.ckpt.zst" 4096
    mount_fg "$D/a.ckpt.zst" "$M.a" -o ro,cache_size=4096
    n=$(straddle "$M.a" "$LENET" "$D/a.ckpt.zst")
    [ "$n" -gt 100 ]
    $ORACLE check "$M.a" "$LENET"
    # frames of an odd size, more than twice the cache, seek table checksums
    # and frame content sizes recorded
    seekable "$LENET" "$D/b.ckpt.zst" 10007 --checksums --content-size
    mount_fg "$D/b.ckpt.zst" "$M.b" -o ro,cache_size=4096
    n=$(straddle "$M.b" "$LENET" "$D/b.ckpt.zst")
    [ "$n" -gt 40 ]
    $ORACLE check "$M.b" "$LENET"
    # four readers at once, all through that one-page cache
    local pids=() p
    for p in 1 2 3 4; do
        $ORACLE check "$M.b" "$LENET" >"$BATS_TEST_TMPDIR/check$p" 2>&1 &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p"; done
}

@test "seekable ONNX and MindIR with odd frame sizes mount as the plain model" {
    seekable "$ONNX_FIX/silero_vad_legacy.onnx" "$D/a.onnx.zst" 65521
    seekable "$ONNX_FIX/tiny_conv2d.onnx" "$D/b.onnx.zst" 64
    seekable "$MS/mindspore_ori_net.mindir" "$D/c.mindir.zst" 3001 --checksums
    mount_fg "$D/a.onnx.zst" "$M.a" -o ro
    $GRAPH_ORACLE check "$M.a" "$ONNX_FIX/silero_vad_legacy.onnx"
    mount_fg "$D/b.onnx.zst" "$M.b" -o ro,cache_size=4096
    $GRAPH_ORACLE check "$M.b" "$ONNX_FIX/tiny_conv2d.onnx"
    mount_fg "$D/c.mindir.zst" "$M.c" -o ro
    $GRAPH_ORACLE check "$M.c" "$MS/mindspore_ori_net.mindir"
}

@test "zstd -T2 and concatenated frames (no seek table) mount as the plaintext" {
    zst "$ONNX_FIX/typed_fields_keras2onnx.onnx" "$D/t2.onnx.zst" -T2 -19
    dump_says "$D/t2.onnx.zst" zstd
    mount_fg "$D/t2.onnx.zst" "$M.t2" -o ro
    $GRAPH_ORACLE check "$M.t2" "$ONNX_FIX/typed_fields_keras2onnx.onnx"
    # the two halves of the plaintext compressed apart, then cat
    local h=$(( $(stat -c %s "$LENET") / 2 ))
    head -c "$h" "$LENET" >"$BATS_TEST_TMPDIR/a"
    tail -c +$((h + 1)) "$LENET" >"$BATS_TEST_TMPDIR/b"
    zstd -q "$BATS_TEST_TMPDIR/a" "$BATS_TEST_TMPDIR/b"
    cat "$BATS_TEST_TMPDIR"/{a,b}.zst >"$D/cat.ckpt.zst"
    cmp <(unz "$D/cat.ckpt.zst") "$LENET"
    dump_says "$D/cat.ckpt.zst" zstd
    mount_fg "$D/cat.ckpt.zst" "$M.cat" -o ro
    $ORACLE check "$M.cat" "$LENET"
    # and with an empty frame and a skippable frame between the halves
    printf '' | zstd -q -c >"$BATS_TEST_TMPDIR/empty.zst"
    printf '\x50\x2a\x4d\x18\x04\x00\x00\x00abcd' >"$BATS_TEST_TMPDIR/skip"
    cat "$BATS_TEST_TMPDIR"/{a.zst,empty.zst,skip,b.zst} >"$D/cat2.ckpt.zst"
    cmp <(unz "$D/cat2.ckpt.zst") "$LENET"
    mount_fg "$D/cat2.ckpt.zst" "$M.cat2" -o ro
    $ORACLE check "$M.cat2" "$LENET"
}

@test "plain zstd input: the save writes seekable 2 MiB frames with exactly the edit; at unmount too" {
    local f=$D/model.ckpt.zst d off
    zst "$LENET" "$f"
    extents "$LENET" >"$BATS_TEST_TMPDIR/ext"
    read -r d off < <(holder "$BATS_TEST_TMPDIR/ext" 100000)
    [ "$d" = fc1.weight ]
    patched "$LENET" "$BATS_TEST_TMPDIR/want1" 100000 'zstd-MARK'
    mount_fg "$f" "$M" -o commit=manual
    poke "$M" "$d" $((100000 - off)) 'zstd-MARK'
    touch "$M/snapshot_done"
    written "$f" "$BATS_TEST_TMPDIR/want1" >/dev/null
    dump_says "$f" "seekable zstd"
    # the oracle's parse: fc1.weight changed, every other tensor as it was
    unz "$f" >"$BATS_TEST_TMPDIR/got.ckpt"
    $PY - <($ORACLE parse "$LENET") <($ORACLE parse "$BATS_TEST_TMPDIR/got.ckpt") <<'PY'
import json, sys
old, new = (json.load(open(p)) for p in sys.argv[1:3])
assert [e["dir"] for e in old] == [e["dir"] for e in new]
diff = [a["dir"] for a, b in zip(old, new) if a != b]
assert diff == ["fc1.weight"], diff
PY
    # the mount now reads the saved file; a second edit is saved at unmount
    $ORACLE check "$M" "$BATS_TEST_TMPDIR/want1"
    read -r d off < <(holder "$BATS_TEST_TMPDIR/ext" 480000)
    [ "$d" = moments.fc2.weight ]
    patched "$BATS_TEST_TMPDIR/want1" "$BATS_TEST_TMPDIR/want2" 480000 'second'
    poke "$M" "$d" $((480000 - off)) 'second'
    unmount "$M"
    written "$f" "$BATS_TEST_TMPDIR/want2" >/dev/null
}

@test "seekable input: an edit straddling two input frames is saved; the next mount reads it back" {
    local f=$D/model.ckpt.zst d off
    seekable "$LENET" "$f" 4096
    extents "$LENET" >"$BATS_TEST_TMPDIR/ext"
    read -r d off < <(holder "$BATS_TEST_TMPDIR/ext" $((25 * 4096)))
    [ "$d" = fc1.weight ]
    patched "$LENET" "$BATS_TEST_TMPDIR/want" $((25 * 4096 - 5)) '0123456789'
    cp "$f" "$BATS_TEST_TMPDIR/old.zst"
    mount_fg "$f" "$M" -o commit=manual
    poke "$M" "$d" $((25 * 4096 - 5 - off)) '0123456789'
    touch "$M/snapshot_done"
    written "$f" "$BATS_TEST_TMPDIR/want" >/dev/null
    # every input frame that holds no byte of fc1.weight's record (its
    # header is under 256 bytes) is in the saved file as it was, at the
    # same plaintext offset (the edit changed no size)
    read -r d off len < <(grep '^fc1.weight ' "$BATS_TEST_TMPDIR/ext")
    kept_frames "$BATS_TEST_TMPDIR/old.zst" "$f" $((off - 256)) $((off + len))
    $ORACLE check "$M" "$BATS_TEST_TMPDIR/want"
    unmount "$M"
    mount_fg "$f" "$M.again" -o ro,cache_size=4096
    $ORACLE check "$M.again" "$BATS_TEST_TMPDIR/want"
}

@test "an unchanged tree saved gives back the identical plaintext: .ckpt, .onnx, .mindir; plain and seekable zstd" {
    local n=0 f z ino kind
    for f in "$LENET" "$MS/goldenstick_test_linears_woq_predict_2stage_fp32.ckpt" \
             "$ONNX_FIX"/{tiny_conv2d,silero_vad_legacy}.onnx \
             "$MS"/mindspore_{ori_net,old_version_mindir_2}.mindir; do
        for kind in plain seekable; do
            z=$D/$n.${f##*.}.zst
            if [ $kind = plain ]; then zst "$f" "$z"; else seekable "$f" "$z" 32749; fi
            ino=$(stat -c %i "$z")
            mount_fg "$z" "$M$n" -o commit=manual
            rewrite_all "$M$n"
            touch "$M$n/snapshot_done"
            unmount "$M$n"
            [ "$(stat -c %i "$z")" != "$ino" ] # the file was written again
            written "$z" "$f" >/dev/null || { echo "$f ($kind)"; return 1; }
            n=$((n + 1))
        done
    done
    [ "$n" -eq 12 ]
}

@test "a saved .onnx.zst decompresses to a model onnx.checker and onnxruntime-node accept, with the edit" {
    local f=$D/tiny.onnx.zst spec before after
    zst "$ONNX_FIX/tiny_conv2d.onnx" "$f"
    spec=$($PY -c 'import json; print(json.dumps({"0": {"dims": [2,3,7,5], "data": [0.5]*210}}))')
    before=$(cd "$REPO/tests/ort" && $ORT_RUN "$ONNX_FIX/tiny_conv2d.onnx" "$spec" 2>/dev/null)
    mount_fg "$f" "$M" -o commit=manual
    $PY -c 'import numpy as np,sys; np.array([1.5,-2,3.25,40],dtype="<f4").tofile(sys.argv[1])' "$M/2/out"
    touch "$M/snapshot_done"
    $ENVELOPE zstd-layout "$f" >/dev/null
    unz "$f" >"$BATS_TEST_TMPDIR/saved.onnx"
    [ "$($GRAPH_ORACLE values "$BATS_TEST_TMPDIR/saved.onnx" 2 | tr '\n' ' ')" = "1.5 -2.0 3.25 40.0 " ]
    diff <($GRAPH_ORACLE list "$ONNX_FIX/tiny_conv2d.onnx" | grep -v '^2	') \
         <($GRAPH_ORACLE list "$BATS_TEST_TMPDIR/saved.onnx" | grep -v '^2	')
    $PY -c 'import onnx,sys; onnx.checker.check_model(sys.argv[1])' "$BATS_TEST_TMPDIR/saved.onnx"
    after=$(cd "$REPO/tests/ort" && $ORT_RUN "$BATS_TEST_TMPDIR/saved.onnx" "$spec" 2>/dev/null)
    $PY - "$before" "$after" "$ONNX_FIX/tiny_conv2d.onnx" <<'PY'
import json, sys
import numpy as np
from onnx import load, numpy_helper
b, a = (np.array(json.loads(x)["3"]["data"]).reshape(json.loads(x)["3"]["dims"]) for x in sys.argv[1:3])
old = numpy_helper.to_array([t for t in load(sys.argv[3]).graph.initializer if t.name == "2"][0])
new = np.array([1.5, -2, 3.25, 40], dtype=np.float32)
diff = (a - b).transpose(1, 0, 2, 3).reshape(4, -1)
assert np.allclose(diff, (new - old)[:, None], atol=1e-5), (diff[:, :3], new - old)
PY
}

@test "a .mindir.zst edit is saved at unmount; the protobuf runtime reads the result" {
    local f=$D/net.mindir.zst
    seekable "$MS/mindspore_old_version_mindir_2.mindir" "$f" 2048
    mount_fg "$f" "$M" -o commit=manual
    $PY -c 'import numpy as np,sys; np.arange(4,dtype="<f4").tofile(sys.argv[1])' "$M/dense1.bias/out"
    unmount "$M"
    $ENVELOPE zstd-layout "$f" >/dev/null
    dump_says "$f" "seekable zstd"
    unz "$f" >"$BATS_TEST_TMPDIR/saved.mindir"
    [ "$($GRAPH_ORACLE values "$BATS_TEST_TMPDIR/saved.mindir" dense1.bias | tr '\n' ' ')" = "0.0 1.0 2.0 3.0 " ]
    diff <($GRAPH_ORACLE list "$MS/mindspore_old_version_mindir_2.mindir" | grep -v '^dense1.bias') \
         <($GRAPH_ORACLE list "$BATS_TEST_TMPDIR/saved.mindir" | grep -v '^dense1.bias')
}

@test "a model over 2 MiB is saved in several 2 MiB frames; remounted, everything reads back" {
    local plain=$BATS_TEST_TMPDIR/big.ckpt f=$D/big.ckpt.zst b d off n
    gen_big "$plain"
    [ "$(stat -c %s "$plain")" -gt $((2 * FRAME)) ]
    zst "$plain" "$f"
    extents "$plain" >"$BATS_TEST_TMPDIR/ext"
    # edits straddling the plaintext offsets where the saved frames will meet
    cp "$plain" "$BATS_TEST_TMPDIR/want"
    mount_fg "$f" "$M" -o commit=manual
    for b in $FRAME $((2 * FRAME)); do
        read -r d off < <(holder "$BATS_TEST_TMPDIR/ext" "$b")
        [ -n "$d" ]
        patched "$BATS_TEST_TMPDIR/want" "$BATS_TEST_TMPDIR/want.new" $((b - 3)) "edit@$b"
        mv "$BATS_TEST_TMPDIR/want.new" "$BATS_TEST_TMPDIR/want"
        poke "$M" "$d" $((b - 3 - off)) "edit@$b"
    done
    touch "$M/snapshot_done"
    n=$(written "$f" "$BATS_TEST_TMPDIR/want")
    [ "$n" -ge 3 ]
    dump_says "$f" "seekable zstd"
    unmount "$M"
    # the next mount reads the saved frames, with a cache smaller than one frame
    mount_fg "$f" "$M.again" -o ro,cache_size=4096
    $ORACLE check "$M.again" "$BATS_TEST_TMPDIR/want"
    n=$(straddle "$M.again" "$BATS_TEST_TMPDIR/want" "$f")
    [ "$n" -ge 2 ]
}

@test "-o zstd_level: 19 is no larger than the default, 1 is larger; all give the same plaintext" {
    local f=$ONNX_FIX/silero_vad_legacy.onnx lvl opt
    for lvl in 1 default 19; do
        zst "$f" "$D/$lvl.onnx.zst"
        opt=commit=manual
        [ $lvl = default ] || opt=$opt,zstd_level=$lvl
        mount_fg "$D/$lvl.onnx.zst" "$M.$lvl" -o "$opt"
        rewrite_all "$M.$lvl"
        touch "$M.$lvl/snapshot_done"
        unmount "$M.$lvl"
        written "$D/$lvl.onnx.zst" "$f" >/dev/null
    done
    s1=$(stat -c %s "$D/1.onnx.zst") s3=$(stat -c %s "$D/default.onnx.zst") s19=$(stat -c %s "$D/19.onnx.zst")
    echo "sizes: level 1 $s1, default $s3, level 19 $s19"
    [ "$s19" -le "$s3" ]
    [ "$s3" -lt "$s1" ]
}

@test "-o zstd_level out of zstd's range is refused naming the range; nothing mounted" {
    local f=$D/model.ckpt.zst before
    zst "$LENET" "$f"
    before=$(sha "$f")
    for lvl in 99 23; do
        try_mount "$f" -o zstd_level=$lvl
        [ "$status" -ne 0 ]
        [ "${#lines[@]}" -eq 1 ]
        [[ $output == *"zstd_level=$lvl"* ]]
        [[ $output == *"22"* ]] # zstd's highest level (zstd --ultra -22)
        ! mountpoint -q "$R" || false
        [ "$(sha "$f")" = "$before" ]
    done
}

@test "a truncated or damaged plain zstd file is refused at mount: one line, the file, the offset" {
    local f z size cut before
    zst "$LENET" "$D/whole.zst"
    size=$(stat -c %s "$D/whole.zst")
    for cut in 20 $((size / 2)) $((size - 1)); do
        f=$D/cut$cut.ckpt.zst
        head -c "$cut" "$D/whole.zst" >"$f"
        before=$(sha "$f")
        try_mount "$f"
        refused_once "$f" "$before" "offset $cut: " zstd truncated
    done
    # a flipped byte in the second of two concatenated frames: that frame's offset
    head -c 250000 "$LENET" >"$BATS_TEST_TMPDIR/a"
    tail -c +250001 "$LENET" >"$BATS_TEST_TMPDIR/b"
    zstd -q "$BATS_TEST_TMPDIR/a" "$BATS_TEST_TMPDIR/b"
    f=$D/flip.ckpt.zst
    cat "$BATS_TEST_TMPDIR"/{a,b}.zst >"$f"
    z=$(stat -c %s "$BATS_TEST_TMPDIR/a.zst")
    printf '\xff' | dd of="$f" bs=1 seek=$((z + 5000)) conv=notrunc status=none
    ! zstd -q -t "$f" 2>/dev/null || false # the zstd command agrees it is damaged
    before=$(sha "$f")
    try_mount "$f"
    refused_once "$f" "$before" "offset $z: " zstd
    # a seekable file cut inside its seek table
    seekable "$LENET" "$D/s.zst" 4096
    f=$D/cut-table.ckpt.zst
    head -c $(($(stat -c %s "$D/s.zst") - 5)) "$D/s.zst" >"$f"
    before=$(sha "$f")
    try_mount "$f"
    refused_once "$f" "$before" zstd
}

@test "a flipped byte in one frame of a seekable file: EIO for the tensors in that frame only, the frame named" {
    local f=$D/model.ckpt.zst k fo fc lo hi d off len before dmg
    seekable "$LENET" "$D/good.zst" 4096
    extents "$LENET" >"$BATS_TEST_TMPDIR/ext"
    # frame 10 (plaintext 40960..45055) lies inside fc1.weight, which no other tensor shares
    k=10
    read -r fo fc < <($ENVELOPE zstd-layout "$D/good.zst" | $PY -c 'import json,sys
f = json.load(sys.stdin)["frames"][int(sys.argv[1])]; print(f["offset"], f["compressed"])' $k)
    lo=$(sed -n "$((k + 1))p" <($ENVELOPE frame-boundaries "$D/good.zst"))
    hi=$(sed -n "$((k + 2))p" <($ENVELOPE frame-boundaries "$D/good.zst"))
    [ "$(holder "$BATS_TEST_TMPDIR/ext" "$lo" | cut -d' ' -f1)" = fc1.weight ]
    [ "$(holder "$BATS_TEST_TMPDIR/ext" $((hi - 1)) | cut -d' ' -f1)" = fc1.weight ]
    cp "$D/good.zst" "$f"
    printf '\x5a' | dd of="$f" bs=1 seek=$((fo + fc / 2)) conv=notrunc status=none
    ! cmp -s "$f" "$D/good.zst" || false
    ! $ENVELOPE zstd-layout "$f" >/dev/null 2>&1 || false # the oracle finds it too
    before=$(sha "$f")
    dmg=$(tail -c +$((fo + 1)) "$f" | head -c "$fc" | sha256sum | cut -c1-64)
    mount_fg "$f" "$M" -o commit=manual
    for _ in 1 2; do # and not served from a cache the second time
        run cat "$M/fc1.weight/out"
        [ "$status" -ne 0 ]
        [[ $output == *"Input/output error"* ]]
    done
    grep -q "$f: .*offset $fo: .*frame $k\b" "$BATS_TEST_TMPDIR/daemon.log"
    # bytes of fc1.weight outside that frame still read (O_DIRECT: exactly those)
    read -r d off len < <(grep '^fc1.weight ' "$BATS_TEST_TMPDIR/ext")
    cmp <(dd if="$M/fc1.weight/out" iflag=direct,skip_bytes,count_bytes skip=$((hi - off)) count=4096 bs=4096 status=none) \
        <(dd if="$LENET" iflag=skip_bytes,count_bytes skip=$hi count=4096 bs=4096 status=none)
    # every other tensor reads as the oracle parses it
    $ORACLE parse "$LENET" | $PY -c 'import hashlib, json, os, sys
for e in json.load(sys.stdin):
    if e["dir"] == "fc1.weight":
        continue
    got = open(os.path.join(sys.argv[1], e["dir"], "out"), "rb").read()
    assert hashlib.sha256(got).hexdigest() == e["sha256"], e["dir"]' "$M"
    # a save of an edit elsewhere copies the damaged frame as it is, without
    # decompressing it (as cp would): the edit is saved, the damage stays
    # where it was, and fc1.weight still fails to read
    poke "$M" conv1.weight 0 'XY'
    touch "$M/snapshot_done"
    [ "$(sha "$f")" != "$before" ]
    unmount "$M"
    [ "$(ls -A "$D")" = "$(printf 'good.zst\nmodel.ckpt.zst')" ]
    zframes "$f" | grep -q " $dmg\$"
    mount_fg "$f" "$M" -o ro
    run cat "$M/fc1.weight/out"
    [ "$status" -ne 0 ]
    [ "$(od -An -c -N2 "$M/conv1.weight/out" | tr -d ' ')" = XY ]
    unmount "$M"
}

@test "an encrypted model that is also zstd-compressed, either way round, is refused" {
    local key=$BATS_TEST_TMPDIR/key plain=$BATS_TEST_TMPDIR/plain.ckpt f before
    (umask 077 && printf '0123456789ABCDEF' >"$key")
    cp "$MS/goldenstick_test_linears_woq_predict_2stage_fp32.ckpt" "$plain"
    # zstd of an encrypted checkpoint, plain zstd and seekable
    $ENVELOPE encrypt --mode AES-GCM --key-hex $KHEX "$plain" "$BATS_TEST_TMPDIR/enc.ckpt"
    zst "$BATS_TEST_TMPDIR/enc.ckpt" "$D/a.ckpt.zst"
    seekable "$BATS_TEST_TMPDIR/enc.ckpt" "$D/b.ckpt.zst" 100
    # zstd of MindSpore's own encrypted MindIR (key 0123456789ABCDEF)
    zst "$MS/mindspore_add_encrpty_key_0123456789ABCDEF.mindir" "$D/c.mindir.zst"
    for f in "$D/a.ckpt.zst" "$D/b.ckpt.zst" "$D/c.mindir.zst"; do
        before=$(sha "$f")
        try_mount "$f"
        refused_once "$f" "$before" "not a MindSpore format"
        try_mount "$f" -o key_file="$key"
        refused_once "$f" "$before" compressed encrypted
    done
    # an encrypted file whose plaintext is zstd, AES-GCM and AES-CBC
    zstd -q -c "$plain" >"$BATS_TEST_TMPDIR/plain.zst"
    $ENVELOPE encrypt --mode AES-GCM --key-hex $KHEX "$BATS_TEST_TMPDIR/plain.zst" "$D/d.ckpt"
    $ENVELOPE encrypt --mode AES-CBC --key-hex $KHEX "$BATS_TEST_TMPDIR/plain.zst" "$D/e.ckpt"
    $ENVELOPE decrypt --key-hex $KHEX "$D/d.ckpt" - | cmp - "$BATS_TEST_TMPDIR/plain.zst"
    for f in "$D/d.ckpt" "$D/e.ckpt"; do
        before=$(sha "$f")
        try_mount "$f" -o key_file="$key"
        refused_once "$f" "$before" "not a MindSpore format"
        CKPTFS_KEY_HEX=$KHEX try_mount "$f"
        refused_once "$f" "$before" "not a MindSpore format"
    done
}

@test "a save replaces the file atomically: new inode, same name and mode, no temp file left, an open reader keeps the old bytes" {
    local f=$D/model.ckpt.zst ino old
    zst "$LENET" "$f"
    chmod 640 "$f"
    ino=$(stat -c %i "$f")
    old=$(sha "$f")
    exec 7<"$f" # a reader of the file as it was
    mount_fg "$f" "$M" -o commit=manual
    poke "$M" fc1.bias 0 'ABCD'
    # Beside the model, only the mount's lock file.
    [ "$(ls -A "$D" | grep -vx '\.model\.ckpt\.zst\.ckptfs-lock')" = model.ckpt.zst ]
    touch "$M/snapshot_done"
    [ "$(ls -A "$D" | grep -vx '\.model\.ckpt\.zst\.ckptfs-lock')" = model.ckpt.zst ]
    [ "$(stat -c %i "$f")" != "$ino" ]
    [ "$(stat -c %a "$f")" = 640 ]
    [ "$(sha256sum <&7 | cut -d' ' -f1)" = "$old" ]
    exec 7<&-
    $ENVELOPE zstd-layout "$f" >/dev/null
    unmount "$M"
    [ "$(ls -A "$D")" = model.ckpt.zst ]
}

@test "plain zstd is decompressed into an unlinked file in \$TMPDIR; a seekable file is not" {
    local td=$BATS_TEST_TMPDIR/tmp pid before
    mkdir "$td"
    zst "$LENET" "$D/p.ckpt.zst"
    seekable "$LENET" "$D/s.ckpt.zst" 65536
    TMPDIR=$td mount_fg "$D/p.ckpt.zst" "$M.p" -o ro
    pid=$(tail -1 "$BATS_TEST_TMPDIR/mounts" | cut -d' ' -f1)
    $ORACLE check "$M.p" "$LENET"
    [ -z "$(ls -A "$td")" ]
    for l in /proc/$pid/fd/*; do readlink "$l"; done >"$BATS_TEST_TMPDIR/fds"
    cat "$BATS_TEST_TMPDIR/fds"
    grep -q "^$td/.* (deleted)\$" "$BATS_TEST_TMPDIR/fds"
    TMPDIR=$td mount_fg "$D/s.ckpt.zst" "$M.s" -o ro
    pid=$(tail -1 "$BATS_TEST_TMPDIR/mounts" | cut -d' ' -f1)
    $ORACLE check "$M.s" "$LENET"
    for l in /proc/$pid/fd/*; do readlink "$l"; done >"$BATS_TEST_TMPDIR/fds"
    ! grep -q "^$td/" "$BATS_TEST_TMPDIR/fds" || false
    # nowhere to decompress to: refused, naming the directory
    before=$(sha "$D/p.ckpt.zst")
    TMPDIR=$BATS_TEST_TMPDIR/none try_mount "$D/p.ckpt.zst"
    refused_once "$D/p.ckpt.zst" "$before" "$BATS_TEST_TMPDIR/none"
}

# gen_multi OUT [drop NAME | rename OLD NEW]: a checkpoint of 24 Float32
# tensors (ckpt_oracle's encoder, MindSpore's encoding): small ones, ones
# of 100-300 KB, and 'big' of 5 MB (its payload spans three 2 MiB frames);
# the same tensors with one dropped or renamed (what a save must give).
gen_multi() {
    PYTHONPATH=$REPO/tests/oracle $PY - "$@" <<'PY'
import sys
import numpy as np
import ckpt_oracle as co
rng = np.random.default_rng(5)
sizes = [17, 25000, 3, 60000, 1250000, 40000, 5, 75000] * 3
names = ["t%02d" % i for i in range(len(sizes))]
names[12] = "big"
vals = [(n, rng.standard_normal(k).astype("<f4").tobytes()) for n, k in zip(names, sizes)]
args = sys.argv[2:]
if args[:1] == ["drop"]:
    vals = [v for v in vals if v[0] != args[1]]
elif args[:1] == ["rename"]:
    vals = [(args[2] if n == args[1] else n, b) for n, b in vals]
co.write_file(sys.argv[1], [co.record(co.tensor_value(n, "Float32", [len(b) // 4], b))
                            for n, b in vals])
PY
}

# shared_frames OLD NEW: how many of NEW's frames are frames of OLD, the
# same compressed bytes for the same plaintext size (wherever they sit).
shared_frames() {
    $PY - <(zframes "$1") <(zframes "$2") <<'PY'
import sys
old = {(b, h) for a, b, h in (l.split() for l in open(sys.argv[1]))}
print(sum((b, h) in old for a, b, h in (l.split() for l in open(sys.argv[2]))))
PY
}

# own_multi: $D/own.zst is gen_multi's model as ckptfs writes it
# (ckptfs-reencode --all re-encodes every tensor), the plaintext in
# $BATS_TEST_TMPDIR/plain.ckpt and its extents in .../ext.
own_multi() {
    gen_multi "$BATS_TEST_TMPDIR/plain.ckpt"
    extents "$BATS_TEST_TMPDIR/plain.ckpt" >"$BATS_TEST_TMPDIR/ext"
    zst "$BATS_TEST_TMPDIR/plain.ckpt" "$D/in.zst"
    "$BUILD/ckptfs-reencode" --all "$D/in.zst" "$D/own.zst"
    rm "$D/in.zst"
    chmod 644 "$D/own.zst"
    written "$D/own.zst" "$BATS_TEST_TMPDIR/plain.ckpt" >/dev/null
}

@test "a save by ckptfs starts a frame at every payload of 64 KiB or more, and one after it" {
    own_multi
    zframes "$D/own.zst" | cut -d' ' -f1 >"$BATS_TEST_TMPDIR/starts"
    local n=0 d off len
    while read -r d off len; do
        [ "$len" -ge 65536 ] || continue
        grep -qx "$off" "$BATS_TEST_TMPDIR/starts" || { echo "$d: no frame at $off"; return 1; }
        [ "$((off + len))" -eq "$(stat -c %s "$BATS_TEST_TMPDIR/plain.ckpt")" ] ||
            grep -qx "$((off + len))" "$BATS_TEST_TMPDIR/starts" ||
            { echo "$d: no frame after it"; return 1; }
        n=$((n + 1))
    done <"$BATS_TEST_TMPDIR/ext"
    [ "$n" -eq 15 ]
    # big's payload: frames of 2 MiB from its start
    read -r d off len < <(grep '^big ' "$BATS_TEST_TMPDIR/ext")
    grep -qx "$((off + FRAME))" "$BATS_TEST_TMPDIR/starts"
    grep -qx "$((off + 2 * FRAME))" "$BATS_TEST_TMPDIR/starts"
    # and the tree reads back through a mount with a cache of one page
    mount_fg "$D/own.zst" "$M" -o ro,cache_size=4096
    $ORACLE check "$M" "$BATS_TEST_TMPDIR/plain.ckpt"
}

@test "one-tensor edits of a multi-frame model: only the frames they touch are compressed again, the rest copied as they are" {
    own_multi
    local d off len b lo hi total kept
    total=$(zframes "$D/own.zst" | wc -l)
    [ "$total" -gt 30 ]
    # 1. one byte in a middle tensor
    cp "$D/own.zst" "$D/m.zst"
    read -r d off len < <(grep '^t09 ' "$BATS_TEST_TMPDIR/ext")
    patched "$BATS_TEST_TMPDIR/plain.ckpt" "$BATS_TEST_TMPDIR/want" $((off + 1000)) 'Q'
    mount_fg "$D/m.zst" "$M" -o commit=manual
    poke "$M" t09 1000 'Q'
    touch "$M/snapshot_done"
    written "$D/m.zst" "$BATS_TEST_TMPDIR/want" >/dev/null
    kept=$(kept_frames "$D/own.zst" "$D/m.zst" $((off - 256)) $((off + len)))
    [ "$kept" -ge $((total - 3)) ]
    $ORACLE check "$M" "$BATS_TEST_TMPDIR/want"
    unmount "$M"
    # 2. eight bytes across the first 2 MiB frame boundary inside big
    cp "$D/own.zst" "$D/m.zst"
    read -r d off len < <(grep '^big ' "$BATS_TEST_TMPDIR/ext")
    b=$((off + FRAME))
    patched "$BATS_TEST_TMPDIR/plain.ckpt" "$BATS_TEST_TMPDIR/want" $((b - 4)) 'ACROSS!!'
    mount_fg "$D/m.zst" "$M" -o commit=manual
    poke "$M" big $((FRAME - 4)) 'ACROSS!!'
    touch "$M/snapshot_done"
    written "$D/m.zst" "$BATS_TEST_TMPDIR/want" >/dev/null
    kept=$(kept_frames "$D/own.zst" "$D/m.zst" $((off - 256)) $((off + len)))
    [ "$kept" -ge $((total - 5)) ]
    unmount "$M"
    mount_fg "$D/m.zst" "$M" -o ro,cache_size=4096
    $ORACLE check "$M" "$BATS_TEST_TMPDIR/want"
    unmount "$M"
    # 3. the first byte of the first tensor and the last byte of the last:
    # the first and last frames; every frame between is copied
    cp "$D/own.zst" "$D/m.zst"
    read -r d lo len < <(head -1 "$BATS_TEST_TMPDIR/ext")
    read -r d hi len < <(tail -1 "$BATS_TEST_TMPDIR/ext")
    hi=$((hi + len - 1))
    [ "$hi" -eq $(($(stat -c %s "$BATS_TEST_TMPDIR/plain.ckpt") - 1)) ]
    patched "$BATS_TEST_TMPDIR/plain.ckpt" "$BATS_TEST_TMPDIR/want.1" "$lo" 'F'
    patched "$BATS_TEST_TMPDIR/want.1" "$BATS_TEST_TMPDIR/want" "$hi" 'L'
    mount_fg "$D/m.zst" "$M" -o commit=manual
    poke "$M" t00 0 'F'
    poke "$M" "$d" $((len - 1)) 'L'
    unmount "$M"
    written "$D/m.zst" "$BATS_TEST_TMPDIR/want" >/dev/null
    kept=$(kept_frames "$D/own.zst" "$D/m.zst" $((lo + 68)) $((hi - len - 256)) inside)
    [ "$kept" -ge $((total - 4)) ]
}

@test "a deleted or renamed tensor shifts every later byte: the save is exact, and later frames are still copied" {
    own_multi
    local total shared
    total=$(zframes "$D/own.zst" | wc -l)
    # deleted: t05 (40000 floats), between two frames' worth of tensors
    cp "$D/own.zst" "$D/m.zst"
    gen_multi "$BATS_TEST_TMPDIR/want" drop t05
    mount_fg "$D/m.zst" "$M" -o commit=manual
    rm -r "$M/t05"
    touch "$M/snapshot_done"
    written "$D/m.zst" "$BATS_TEST_TMPDIR/want" >/dev/null
    $ORACLE check "$M" "$BATS_TEST_TMPDIR/want"
    unmount "$M"
    shared=$(shared_frames "$D/own.zst" "$D/m.zst")
    echo "deleted: $shared of $total frames copied"
    [ "$shared" -ge $((total - 4)) ]
    # renamed: t03 to a longer name (its header grows), so every byte
    # after it moves; its payload's frames are the old ones
    cp "$D/own.zst" "$D/m.zst"
    gen_multi "$BATS_TEST_TMPDIR/want" rename t03 renamed.tensor.three
    mount_fg "$D/m.zst" "$M" -o commit=manual
    mv "$M/t03" "$M/renamed.tensor.three"
    touch "$M/snapshot_done"
    written "$D/m.zst" "$BATS_TEST_TMPDIR/want" >/dev/null
    $ORACLE check "$M" "$BATS_TEST_TMPDIR/want"
    unmount "$M"
    shared=$(shared_frames "$D/own.zst" "$D/m.zst")
    echo "renamed: $shared of $total frames copied"
    [ "$shared" -ge $((total - 2)) ]
    # a file ckptfs did not write (4 KiB frames across records, seek-table
    # checksums): correct, the checksums kept, frames away from the edit copied
    seekable "$BATS_TEST_TMPDIR/plain.ckpt" "$D/s.zst" 4096 --checksums
    cp "$D/s.zst" "$D/old.zst"
    gen_multi "$BATS_TEST_TMPDIR/want" drop t05
    mount_fg "$D/s.zst" "$M" -o commit=manual
    rm -r "$M/t05"
    unmount "$M"
    written "$D/s.zst" "$BATS_TEST_TMPDIR/want" >/dev/null
    [ "$($ENVELOPE zstd-layout "$D/s.zst" | $PY -c 'import json,sys; print(json.load(sys.stdin)["descriptor"])')" = 128 ]
    total=$(zframes "$D/old.zst" | wc -l)
    shared=$(shared_frames "$D/old.zst" "$D/s.zst")
    echo "oracle's file: $shared of $total frames copied"
    [ "$shared" -ge $((total - 45)) ]
}

# save_t09_edit MODEL: mount MODEL, change bytes of t09's out, save,
# unmount; want is then the plaintext MODEL must hold.
save_t09_edit() {
    local d off len
    read -r d off len < <(grep '^t09 ' "$BATS_TEST_TMPDIR/ext")
    patched "$BATS_TEST_TMPDIR/plain.ckpt" "$BATS_TEST_TMPDIR/want" $((off + 500)) 'EDITED'
    mount_fg "$1" "$M" -o commit=manual
    poke "$M" t09 500 'EDITED'
    touch "$M/snapshot_done"
    unmount "$M"
}

@test "a save writes past the page cache where the filesystem can (only the frames read back stay cached), and plainly on ramfs, which cannot" {
    own_multi
    local size res
    case $(stat -f -c %T "$D") in
    ext2/ext3 | xfs | btrfs) ;;
    *) skip "$D is not on a filesystem with direct I/O" ;;
    esac
    cp "$D/own.zst" "$D/m.zst"
    save_t09_edit "$D/m.zst"
    # What the save itself left in the page cache: the verification and the
    # mount's reopen read the frames holding record headers and t09's; the
    # ~18 MB of other payload frames were written, not cached.
    size=$(stat -c %s "$D/m.zst")
    res=$(fincore --bytes --noheadings --output RES "$D/m.zst")
    echo "cached after the save: $res of $size bytes"
    [ "$res" -lt $((size / 4)) ]
    written "$D/m.zst" "$BATS_TEST_TMPDIR/want" >/dev/null
    # ramfs takes no O_DIRECT: the same save through plain writes.
    RAMFS=$BATS_TEST_TMPDIR/ramfs
    mkdir -p "$RAMFS"
    mount -t ramfs ramfs "$RAMFS"
    cp "$D/own.zst" "$RAMFS/m.zst"
    chmod 644 "$RAMFS/m.zst"
    save_t09_edit "$RAMFS/m.zst"
    written "$RAMFS/m.zst" "$BATS_TEST_TMPDIR/want" >/dev/null
    cmp "$D/m.zst" "$RAMFS/m.zst"
}

@test "an unchanged seekable model saved again (ckptfs-reencode) is the same file, byte for byte" {
    own_multi
    "$BUILD/ckptfs-reencode" "$D/own.zst" "$D/again.zst"
    cmp "$D/own.zst" "$D/again.zst"
    seekable "$LENET" "$D/s.zst" 3000 --checksums
    "$BUILD/ckptfs-reencode" "$D/s.zst" "$D/s2.zst"
    cmp "$D/s.zst" "$D/s2.zst"
}
