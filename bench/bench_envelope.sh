#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# ckptfs benchmark of encrypted and zstd-compressed models (the envelopes).
# Everything is measured side by side in one run and reported as ratios,
# because the machine is shared and noisy; each timing is the median of REPS
# runs, each on a fresh mount (so the kernel's page cache of the mount is
# empty and every `out` byte goes through the daemon once).
#
#   bench/bench_envelope.sh [BUILD]   (env: REPS=3 GIB=1 TENSORS=256 RANDN=2000 SEED=1
#                                       CONTENT=weights|repeat)
#
# One 1 GiB checkpoint of 256 Float32 tensors (4 MiB each) is stored five ways:
# plain, AES-GCM and AES-CBC in MindSpore's block layout (envelope_oracle.py
# encrypt, 64 MiB blocks), seekable zstd with 2 MiB frames (envelope_oracle.py
# zstd-seekable), the same after ckptfs itself saved it (an rw mount, one
# tensor rewritten, `touch snapshot_done`), and plain zstd (the `zstd`
# command, no seek table: decompressed into a temp file at mount).
# CONTENT=weights (the default) fills the tensors with N(0, 0.02) float32
# values: zstd -3 keeps about 92% of the bytes (float32 weights compress
# little) and decompresses them at under 1 GB/s.  CONTENT=repeat uses
# bench/gen_ckpt.py (one random MiB repeated: each 2 MiB frame is half raw,
# half one long match, so it compresses 2:1 and decompression is nearly a
# memcpy).  Also measured: the save of a one-tensor edit of the seekable
# model vs `zstd -3` into a file, and the compressed sizes.
#
# 1. read throughput, encrypted: `cat` of every out (first read after mount)
#    vs `openssl enc -d` of the same ciphertext, block by block (dd | openssl;
#    GCM as AES-128-CTR from counter iv[0:12]||00000002, its keystream);
#    mount time vs the plain file (GCM authenticates the whole file at mount);
#    daemon peak RSS after reading 1 GiB at cache_size 4M, 16M (default), 64M.
# 2. read throughput, seekable zstd: `cat` of every out vs `zstd -d -c FILE`.
# 3. random 4 KiB pread latency (RANDN distinct pages of random out files,
#    seeded), median and p99, plain vs encrypted vs seekable zstd mounts.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=$(realpath "${1:-build}")
CKPTFS=$BUILD/ckptfs
REPS=${REPS:-3}
SIZE=$(( ${GIB:-1} << 30 ))
TENSORS=${TENSORS:-256}
RANDN=${RANDN:-2000}
SEED=${SEED:-1}
CONTENT=${CONTENT:-weights}
ORACLE=tests/oracle/envelope_oracle.py
PY=/usr/bin/python3
FRAME=$((2 << 20))

base=${TMPDIR:-/tmp}
need_kib=$((8 << 20))
avail_kib=$(df -Pk "$base" | awk 'NR == 2 {print $4}')
if [ "$avail_kib" -lt "$need_kib" ]; then
    echo "# skipped: $((avail_kib >> 20)) GiB free in $base, the benchmark needs about 8 GiB"
    exit 0
fi
for t in openssl zstd dd getfattr; do
    command -v "$t" >/dev/null || { echo "# skipped: $t is missing (make deps)"; exit 0; }
done

W=$(mktemp -d "$base/ckptfs-bench-env.XXXXXX")
M=$W/m
PIDS=()
. bench/bench_lib.sh
trap cleanup_mounts EXIT

gbps() { awk -v s="$1" -v b="$2" 'BEGIN {printf "%.2f GB/s", b / s / 1e9}'; }
mib() { awk -v k="$1" 'BEGIN {printf "%.1f MiB", k / 1024}'; }
# dec_blocks FILE CIPHER BLOCKS: openssl over every block's ciphertext,
# extracted with dd (BLOCKS: "offset length iv" per line), plaintext to stdout.
dec_blocks() {
    local off len iv
    while read -r off len iv; do
        dd if="$1" iflag=skip_bytes,count_bytes skip="$off" count="$len" bs=1M status=none |
            openssl enc -d "-$2" -K "$KEYHEX" -iv "$iv"
    done <"$3"
}

echo "# generating: $TENSORS tensors in $((SIZE >> 20)) MiB ($CONTENT); encrypting (AES-GCM, AES-CBC); seekable zstd, 2 MiB frames"
if [ "$CONTENT" = repeat ]; then
    $PY bench/gen_ckpt.py "$W/plain.ckpt" --size "$SIZE" --count "$TENSORS"
else
    # gen_ckpt.py's layout (its varint and field), float32 N(0, 0.02) content.
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
fi
head -c 16 /dev/urandom >"$W/key"
chmod 600 "$W/key"
KEYHEX=$(od -An -tx1 "$W/key" | tr -d ' \n')
$PY "$ORACLE" encrypt --mode AES-GCM --key-hex "$KEYHEX" "$W/plain.ckpt" "$W/gcm.ckpt"
$PY "$ORACLE" encrypt --mode AES-CBC --key-hex "$KEYHEX" "$W/plain.ckpt" "$W/cbc.ckpt"
# Each block's ciphertext (offset, length) and the IV openssl needs: the GCM
# header is magic, tag, block_size, iv_len, iv, cipher_len (48 bytes), the
# CBC one has no tag (32 bytes).
for m in gcm cbc; do
    $PY "$ORACLE" layout "$W/$m.ckpt" | $PY -c '
import json, sys
lay = json.load(sys.stdin)
gcm = lay["mode"] == "AES-GCM"
for b in lay["blocks"]:
    iv = b["iv"][:24] + "00000002" if gcm else b["iv"]
    print(b["offset"] + (48 if gcm else 32), b["cipher_len"], iv)' >"$W/$m.blocks"
done
$PY "$ORACLE" zstd-seekable --frame-size "$FRAME" "$W/plain.ckpt" "$W/seek.ckpt.zst"
zstd -q -3 -c "$W/plain.ckpt" >"$W/stream.ckpt.zst"
mkdir "$M"
cat "$W"/*.ckpt "$W"/*.zst >/dev/null # warm the page cache

# Does this build mount zstd?
ZSTD=1
if ! "$CKPTFS" -o ro "$W/seek.ckpt.zst" "$M" 2>"$W/zstd.err"; then
    ZSTD=0
    echo "# this build does not mount zstd ($(head -1 "$W/zstd.err")): zstd parts skipped"
else
    PID=$(getfattr --absolute-names --only-values -n user.ckptfs.pid "$M")
    PIDS+=("$PID")
    umnt
    # ckptfs's own output: one tensor rewritten through a writable mount,
    # saved (that tensor's frames compressed by ckptfs's writer, the rest
    # of the oracle's frames copied).
    cp "$W/seek.ckpt.zst" "$W/own.ckpt.zst"
    mnt rw,commit=manual "$W/own.ckpt.zst"
    head -c $((SIZE / TENSORS)) /dev/urandom >"$W/new.out"
    cp "$W/new.out" "$M/layer.7.weight/out"
    t_save=$(timed touch "$M/snapshot_done")
    umnt
    rm "$W/new.out"
    # The same work by the zstd command: level 3 into a file, made durable.
    t_zstd3=$(timed sh -c 'zstd -q -3 -c "$1" >"$2" && sync -f "$2"' sh "$W/plain.ckpt" "$W/z3.zst")
    rm "$W/z3.zst"
    frames=$($PY "$ORACLE" frame-boundaries "$W/own.ckpt.zst" | wc -l)
    second=$($PY "$ORACLE" frame-boundaries "$W/own.ckpt.zst" | sed -n 2p)
    cat "$W/own.ckpt.zst" >/dev/null
fi
(cd "$W" && stat -c '#   %n: %s bytes' -- *.ckpt *.zst)
[ "$ZSTD" = 1 ] && echo "#   own.ckpt.zst: $frames frames, the second at plaintext offset $second"

# Correctness of the baselines and the mounts: openssl's output is the
# plaintext; the last tensor reads the same through every mount.
dec_blocks "$W/gcm.ckpt" aes-128-ctr "$W/gcm.blocks" | cmp - "$W/plain.ckpt"
dec_blocks "$W/cbc.ckpt" aes-128-cbc "$W/cbc.blocks" | cmp - "$W/plain.ckpt"
last=layer.$((TENSORS - 1)).weight/out
mnt ro "$W/plain.ckpt"
cp "$M/$last" "$W/ref.out"
out_bytes=$(stat -c %s "$M"/*/out | awk '{s += $1} END {print s}')
umnt
KO=ro,key_file=$W/key
KINDS="plain gcm cbc"
[ "$ZSTD" = 1 ] && KINDS="$KINDS seek own stream"
declare -A FILE=([plain]=plain.ckpt [gcm]=gcm.ckpt [cbc]=cbc.ckpt
                 [seek]=seek.ckpt.zst [own]=own.ckpt.zst [stream]=stream.ckpt.zst)
declare -A OPTS=([plain]=ro [gcm]=$KO [cbc]=$KO [seek]=ro [own]=ro [stream]=ro)
for k in $KINDS; do
    mnt "${OPTS[$k]}" "$W/${FILE[$k]}"
    cmp "$M/$last" "$W/ref.out"
    umnt
done

echo "## 1, 2. read throughput: cat of every out, first read after a fresh mount ($REPS rounds)"
declare -A HWM
for k in $KINDS ossl.gcm ossl.cbc zstd.seek zstd.stream; do : >"$W/$k.read"; : >"$W/$k.mount"; done
for _ in $(seq "$REPS"); do
    for k in $KINDS; do
        mnt "${OPTS[$k]}" "$W/${FILE[$k]}"
        echo "$T_MOUNT" >>"$W/$k.mount"
        timed cat "$M"/*/out >>"$W/$k.read"
        h=$(hwm_kib "$PID")
        [ "${HWM[$k]:-0}" -gt "$h" ] || HWM[$k]=$h
        umnt
        case $k in
        gcm) timed dec_blocks "$W/gcm.ckpt" aes-128-ctr "$W/gcm.blocks" >>"$W/ossl.gcm.read" ;;
        cbc) timed dec_blocks "$W/cbc.ckpt" aes-128-cbc "$W/cbc.blocks" >>"$W/ossl.cbc.read" ;;
        seek) timed zstd -d -c "$W/seek.ckpt.zst" >>"$W/zstd.seek.read" ;;
        stream) timed zstd -d -c "$W/stream.ckpt.zst" >>"$W/zstd.stream.read" ;;
        esac
    done
done
declare -A R MT
for k in $KINDS ossl.gcm ossl.cbc zstd.seek zstd.stream; do R[$k]=$(median <"$W/$k.read"); done
for k in $KINDS; do MT[$k]=$(median <"$W/$k.mount"); done
line() { # KIND LABEL
    printf '%-38s mount %7.3fs (%5.1fx plain)   cat %6.3fs %s (%4.2fx plain)   peak RSS %s\n' \
        "$2" "${MT[$1]}" "$(ratio "${MT[$1]}" "${MT[plain]}")" "${R[$1]}" \
        "$(gbps "${R[$1]}" "$out_bytes")" "$(ratio "${R[$1]}" "${R[plain]}")" "$(mib "${HWM[$1]}")"
}
line plain "plain .ckpt"
line gcm "AES-GCM"
line cbc "AES-CBC"
echo "openssl enc -d (dd | openssl per 64 MiB block): GCM as CTR ${R[ossl.gcm]}s $(gbps "${R[ossl.gcm]}" "$out_bytes"), CBC ${R[ossl.cbc]}s $(gbps "${R[ossl.cbc]}" "$out_bytes")"
echo "ratio ckptfs/openssl (time): AES-GCM $(ratio "${R[gcm]}" "${R[ossl.gcm]}")   AES-CBC $(ratio "${R[cbc]}" "${R[ossl.cbc]}")"
echo "mount encrypted/plain: AES-GCM $(ratio "${MT[gcm]}" "${MT[plain]}")  AES-CBC $(ratio "${MT[cbc]}" "${MT[plain]}")  (GCM authenticates every block at mount)"

# The memory bound: peak RSS after reading the whole model at other cache sizes.
mem=""
for cs in 4M 64M; do
    mnt "$KO,cache_size=$cs" "$W/gcm.ckpt"
    t=$(timed cat "$M"/*/out)
    mem="$mem   cache_size=$cs: $(mib "$(hwm_kib "$PID")") (cat ${t}s)"
    umnt
done
echo "AES-GCM daemon peak RSS after reading $((out_bytes >> 20)) MiB: cache_size=16M (default): $(mib "${HWM[gcm]}")$mem"

if [ "$ZSTD" = 1 ]; then
    line seek "seekable zstd (oracle, 2 MiB frames)"
    line own "seekable zstd (saved by ckptfs)"
    line stream "zstd command (no seek table)"
    echo "zstd -d -c: seekable ${R[zstd.seek]}s $(gbps "${R[zstd.seek]}" "$out_bytes"), zstd command's file ${R[zstd.stream]}s $(gbps "${R[zstd.stream]}" "$out_bytes")"
    echo "ratio ckptfs/zstd -d (time): seekable (oracle) $(ratio "${R[seek]}" "${R[zstd.seek]}")   seekable (saved by ckptfs) $(ratio "${R[own]}" "${R[zstd.seek]}")"
    echo "no seek table (decompressed into a temp file at mount): mount $(ratio "${MT[stream]}" "${R[zstd.stream]}")x zstd -d, then cat $(ratio "${R[stream]}" "${R[zstd.stream]}")x zstd -d"
    sz() { stat -c %s "$W/$1"; }
    echo "compressed size / plain: oracle (zstd -3 per 2 MiB frame) $(ratio "$(sz seek.ckpt.zst)" "$(sz plain.ckpt)")   saved by ckptfs $(ratio "$(sz own.ckpt.zst)" "$(sz plain.ckpt)")   zstd command $(ratio "$(sz stream.ckpt.zst)" "$(sz plain.ckpt)")"
    echo "save of a one-tensor edit (copies the frames it does not touch; bench_zstd.sh has the 4096-tensor case): ${t_save}s   zstd -3 of the plain model into a file, with sync -f: ${t_zstd3}s   ratio $(ratio "$t_save" "$t_zstd3")"
fi

echo "## 3. random 4 KiB pread latency: $RANDN distinct pages in random out files (seed $SEED), fresh mount each series ($REPS rounds)"
cat >"$W/randread.py" <<'EOF'
import glob, os, random, sys, time
mnt, n, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
paths = sorted(glob.glob(os.path.join(mnt, "*", "out")))
fds = [os.open(p, os.O_RDONLY) for p in paths]  # opened before timing
pages = [os.fstat(fd).st_size // 4096 for fd in fds]
starts, total = [], 0
for p in pages:
    starts.append(total)
    total += p
rng = random.Random(seed)
picks = rng.sample(range(total), n)
lat = []
import bisect
for g in picks:
    i = bisect.bisect_right(starts, g) - 1
    off = (g - starts[i]) * 4096
    t0 = time.perf_counter_ns()
    got = os.pread(fds[i], 4096, off)
    lat.append(time.perf_counter_ns() - t0)
    assert len(got) == 4096
lat.sort()
print("%.1f %.1f" % (lat[len(lat) // 2] / 1e3, lat[min(len(lat) - 1, len(lat) * 99 // 100)] / 1e3))
EOF
LKINDS="plain gcm cbc"
[ "$ZSTD" = 1 ] && LKINDS="$LKINDS seek"
for k in $LKINDS; do : >"$W/$k.med"; : >"$W/$k.p99"; done
for _ in $(seq "$REPS"); do
    for k in $LKINDS; do
        mnt "${OPTS[$k]}" "$W/${FILE[$k]}"
        # (command substitution: the reader has exited, and closed its
        # files, before the unmount)
        read -r med p99 <<<"$($PY "$W/randread.py" "$M" "$RANDN" "$SEED")"
        echo "$med" >>"$W/$k.med"
        echo "$p99" >>"$W/$k.p99"
        umnt
    done
done
declare -A LNAME=([plain]="plain .ckpt" [gcm]="AES-GCM" [cbc]="AES-CBC" [seek]="seekable zstd (2 MiB frames)")
for k in $LKINDS; do
    lm=$(median <"$W/$k.med")
    lp=$(median <"$W/$k.p99")
    printf '%-30s median %8.1f us   p99 %8.1f us   median ratio to plain %6.1f\n' \
        "${LNAME[$k]}" "$lm" "$lp" "$(ratio "$lm" "$(median <"$W/plain.med")")"
done
