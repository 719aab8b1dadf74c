#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# ckptfs benchmark of seekable zstd at the speed of its data: what a mount
# and a one-tensor save cost against the zstd command doing all the work.
# Measured side by side in one run, reported as ratios (the machine is
# shared and noisy); each timing is the median of REPS rounds.
#
#   bench/bench_zstd.sh [BUILD]   (env: REPS=3 GIB=1 TENSORS=4096 SEED=1)
#
# One 1 GiB checkpoint of 4096 Float32 tensors (256 KiB each, N(0, 0.02)
# values, as bench_envelope.sh) is stored twice:
#   own:    as ckptfs writes it (`ckptfs-reencode --all` of the `zstd -3`
#           file): frames cut where each payload starts and ends, so every
#           record header sits in a small frame of its own;
#   oracle: zstd's seekable format cut every 2 MiB regardless of records
#           (envelope_oracle.py zstd-seekable), as other tools write it.
# 1. mount time (a fresh read-only mount: every record header is read)
#    vs `zstd -d -c FILE >/dev/null` of the same file;
# 2. save of a one-tensor edit (a writable mount, one 256 KiB out
#    rewritten, `touch snapshot_done`, which returns once the new file is
#    written, read back and renamed in place) vs `zstd -3` of the plain
#    model into a file, made durable (sync -f): a full recompression; and
#    against a copy of the compressed file made durable (`cp --reflink=never`
#    + sync -f), what a save that replaces the file whole through the page
#    cache pays at least (the save writes past it: codec/io/direct_out.h).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=$(realpath "${1:-build}")
CKPTFS=$BUILD/ckptfs
REPS=${REPS:-3}
SIZE=$(( ${GIB:-1} << 30 ))
TENSORS=${TENSORS:-4096}
SEED=${SEED:-1}
ORACLE=tests/oracle/envelope_oracle.py
PY=/usr/bin/python3

base=${TMPDIR:-/tmp}
need_kib=$((6 * SIZE >> 10))
avail_kib=$(df -Pk "$base" | awk 'NR == 2 {print $4}')
if [ "$avail_kib" -lt "$need_kib" ]; then
    echo "# skipped: $((avail_kib >> 20)) GiB free in $base, the benchmark needs $((need_kib >> 20)) GiB"
    exit 0
fi
for t in zstd getfattr; do
    command -v "$t" >/dev/null || { echo "# skipped: $t is missing (make deps)"; exit 0; }
done

W=$(mktemp -d "$base/ckptfs-bench-zstd.XXXXXX")
M=$W/m
PIDS=()
. bench/bench_lib.sh
trap cleanup_mounts EXIT


echo "# generating: $TENSORS Float32 tensors in $((SIZE >> 20)) MiB; zstd -3; ckptfs-reencode --all; the oracle's 2 MiB frames"
$PY - "$W/plain.ckpt" "$SIZE" "$TENSORS" "$SEED" <<'EOF'
import sys
sys.path.insert(0, "bench")
import numpy as np
from gen_ckpt import varint, field
out, size, count, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
per = max(4, size // count // 4 * 4)
rng = np.random.default_rng(seed)
with open(out, "wb") as f:
    for i in range(count):
        n = per // 4
        head_t = varint(1 << 3) + varint(n) + field(2, b"Float32") + varint(3 << 3 | 2) + varint(per)
        value_head = (field(1, b"layer.%d.weight" % i) + varint(2 << 3 | 2)
                      + varint(len(head_t) + per) + head_t)
        f.write(varint(1 << 3 | 2) + varint(len(value_head) + per) + value_head)
        x = rng.standard_normal(n, dtype=np.float32)
        x *= np.float32(0.02)
        f.write(x.tobytes())
EOF
zstd -q -3 -c "$W/plain.ckpt" >"$W/stream.ckpt.zst"
"$BUILD/ckptfs-reencode" --all "$W/stream.ckpt.zst" "$W/own.ckpt.zst"
$PY "$ORACLE" zstd-seekable --frame-size $((2 << 20)) "$W/plain.ckpt" "$W/oracle.ckpt.zst"
rm "$W/stream.ckpt.zst"
zstd -q -d -c "$W/own.ckpt.zst" | cmp - "$W/plain.ckpt"
PER=$((SIZE / TENSORS / 4 * 4))
head -c "$PER" /dev/urandom >"$W/new.out"
# The plaintext the edit must give: layer.7.weight's bytes replaced.
EDIT_OFF=$("$BUILD/ckptfs-dump" "$W/plain.ckpt" | awk -F'\t' '$1 == "layer.7.weight" {split($NF, a, "+"); print a[1]}')
cp "$W/plain.ckpt" "$W/want.ckpt"
dd if="$W/new.out" of="$W/want.ckpt" bs=1M oflag=seek_bytes seek="$EDIT_OFF" conv=notrunc status=none
mkdir "$M"
frames() { $PY "$ORACLE" frame-boundaries "$1" | wc -l; }
echo "# own.ckpt.zst: $(stat -c %s "$W/own.ckpt.zst") bytes, $(frames "$W/own.ckpt.zst") frames;" \
     "oracle.ckpt.zst: $(stat -c %s "$W/oracle.ckpt.zst") bytes, $(frames "$W/oracle.ckpt.zst") frames;" \
     "plain: $(stat -c %s "$W/plain.ckpt") bytes"

for k in own oracle; do
    : >"$W/$k.mount"; : >"$W/$k.zstdd"; : >"$W/$k.save"
done
: >"$W/zstd3"; : >"$W/floor"
for _ in $(seq "$REPS"); do
    for k in own oracle; do
        cat "$W/$k.ckpt.zst" >/dev/null # both from the page cache
        mnt ro "$W/$k.ckpt.zst"
        echo "$T_MOUNT" >>"$W/$k.mount"
        umnt
        timed zstd -q -d -c "$W/$k.ckpt.zst" >>"$W/$k.zstdd"
        # the save: a fresh copy of the file each round
        cp "$W/$k.ckpt.zst" "$W/e.ckpt.zst"
        sync -f "$W/e.ckpt.zst"
        mnt rw,commit=manual "$W/e.ckpt.zst"
        cp "$W/new.out" "$M/layer.7.weight/out"
        timed touch "$M/snapshot_done" >>"$W/$k.save"
        umnt
        zstd -q -d -c "$W/e.ckpt.zst" | cmp - "$W/want.ckpt"
        [ "$k" = own ] && E_FRAMES=$(frames "$W/e.ckpt.zst")
        [ "$k" = own ] && E_SHARED=$($PY - "$W/own.ckpt.zst" "$W/e.ckpt.zst" <<'EOF'
import struct, sys
def frames(p):
    d = open(p, "rb").read()
    n, desc, _ = struct.unpack("<IBI", d[-9:])
    es = 12 if desc & 0x80 else 8
    start = len(d) - 9 - n * es - 8
    c, out = 0, []
    for i in range(n):
        cs, ds = struct.unpack_from("<II", d, start + 8 + i * es)
        out.append(d[c:c + cs])
        c += cs
    return out
old = set(frames(sys.argv[1]))
print(sum(f in old for f in frames(sys.argv[2])))
EOF
)
        rm "$W/e.ckpt.zst"
    done
    timed sh -c 'zstd -q -3 -c "$1" >"$2" && sync -f "$2"' sh "$W/plain.ckpt" "$W/z3.zst" >>"$W/zstd3"
    rm "$W/z3.zst"
    # A copy of the file through the page cache, on disk (no reflinks
    # here; on XFS or btrfs cp shares the extents).
    timed sh -c 'cp --reflink=never "$1" "$2" && sync -f "$2"' sh "$W/own.ckpt.zst" "$W/floor.zst" >>"$W/floor"
    rm "$W/floor.zst"
done
declare -A MT ZD SV
for k in own oracle; do
    MT[$k]=$(median <"$W/$k.mount")
    ZD[$k]=$(median <"$W/$k.zstdd")
    SV[$k]=$(median <"$W/$k.save")
done
Z3=$(median <"$W/zstd3")
FL=$(median <"$W/floor")
echo "## 1. mount ($REPS rounds, median)"
printf '%-36s mount %7.3fs   zstd -d of the file %6.3fs   ratio %5.3f\n' \
    "own (frames cut at payloads)" "${MT[own]}" "${ZD[own]}" "$(ratio "${MT[own]}" "${ZD[own]}")"
printf '%-36s mount %7.3fs   zstd -d of the file %6.3fs   ratio %5.3f\n' \
    "oracle (2 MiB frames across records)" "${MT[oracle]}" "${ZD[oracle]}" "$(ratio "${MT[oracle]}" "${ZD[oracle]}")"
echo "## 2. save of a one-tensor edit ($REPS rounds, median) vs zstd -3 of the plain model into a file, sync -f: ${Z3}s"
printf '%-36s save %7.3fs   ratio %5.3f   (%s of the %s frames written are the old file'"'"'s, copied)\n' \
    "own" "${SV[own]}" "$(ratio "${SV[own]}" "$Z3")" "$E_SHARED" "$E_FRAMES"
printf '%-36s save %7.3fs   ratio %5.3f\n' "oracle" "${SV[oracle]}" "$(ratio "${SV[oracle]}" "$Z3")"
printf '%-36s       %7.3fs   ratio %5.3f   (own save / cp %5.2f)\n' "cp of the file + sync -f" \
    "$FL" "$(ratio "$FL" "$Z3")" "$(ratio "${SV[own]}" "$FL")"
