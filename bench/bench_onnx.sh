#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# ckptfs ONNX benchmark: models whose weights are in an external data file.
# Everything is measured side by side in one run and reported as ratios,
# because the machine is shared and noisy; each timing is the median of REPS
# runs.
#
#   bench/bench_onnx.sh [BUILD]     (env: REPS=5 TENSORS=256 SMALL_MIB=64 BIG_GIB=1)
#
# 1. mount time (warm, and cold where the page cache can be dropped) and
#    daemon peak RSS, 64 MiB vs 1 GiB of external data with the same tensor
#    count (targets: time ratio < 1.5, RSS < 32 MiB); for comparison, a
#    single-file model with the same tensors as raw_data, and the time of
#    indexing alone (ckptfs-dump);
# 2. warm read throughput: `cat` of every out file vs `cat` of the external
#    data file (first read through the daemon, and re-read with the kernel's
#    cache), the same for a .ckpt of the same tensors, and the daemon's peak
#    RSS after reading everything.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=$(realpath "${1:-build}")
CKPTFS=$BUILD/ckptfs
DUMP=$BUILD/ckptfs-dump
REPS=${REPS:-5}
TENSORS=${TENSORS:-256}
SMALL=$(( ${SMALL_MIB:-64} << 20 ))
BIG=$(( ${BIG_GIB:-1} << 30 ))
# raw_data in one file is bound by protobuf's 2 GiB limit.
INLINE=$(( BIG < (1 << 30) ? BIG : (1 << 30) ))
W=$(mktemp -d "${BENCH_DIR:-/var/tmp}/ckptfs-bench-onnx.XXXXXX")
MOUNTS=()
PIDS=()
cleanup() {
    for m in "${MOUNTS[@]}"; do mountpoint -q "$m" && fusermount3 -u "$m"; done
    # Only the daemons this script started, by pid, if one outlived its mount.
    for p in "${PIDS[@]}"; do
        kill -0 "$p" 2>/dev/null || continue
        [[ "$(tr '\0' ' ' <"/proc/$p/cmdline")" == "$CKPTFS -o ro $W/"* ]] && kill "$p"
    done
    rm -rf "$W"
}
trap cleanup EXIT

. bench/bench_lib.sh
# unmount MNT PID: unmount and wait for the daemon to exit.
unmount() {
    fusermount3 -u "$1"
    while kill -0 "$2" 2>/dev/null; do sleep 0.02; done
}
# mount_rep MODEL: one timed mount and unmount, for the medians.
mount_rep() {
    local t p
    t=$(mount_timed "$W/$1" "$W/m")
    p=$(daemon_pid "$W/$1" "$W/m")
    PIDS+=("$p")
    unmount "$W/m" "$p"
    echo "$t"
}
mib() { awk -v b="$1" 'BEGIN {printf "%g", b / 1048576}'; }

echo "# generating: $TENSORS tensors, external data of $(mib "$SMALL") MiB and $(mib "$BIG") MiB; raw_data inline of $(mib "$INLINE") MiB; a .ckpt of $(mib "$BIG") MiB"
/usr/bin/python3 bench/gen_onnx.py "$W/small.onnx" --size "$SMALL" --count "$TENSORS"
/usr/bin/python3 bench/gen_onnx.py "$W/big.onnx" --size "$BIG" --count "$TENSORS"
/usr/bin/python3 bench/gen_onnx.py "$W/inline.onnx" --size "$INLINE" --count "$TENSORS" --inline
/usr/bin/python3 bench/gen_ckpt.py "$W/ref.ckpt" --size "$BIG" --count "$TENSORS"
(cd "$W" && stat -c '#   %n: %s bytes' -- *)
mkdir -p "$W/m"
cat "$W"/*.onnx "$W"/*.data "$W/ref.ckpt" >/dev/null # warm the page cache

echo "## 1. mount time and daemon memory"
for f in small big inline; do
    : >"$W/$f.times"
    : >"$W/$f.index"
    for _ in $(seq "$REPS"); do
        mount_rep "$f.onnx" >>"$W/$f.times"
        timed "$DUMP" "$W/$f.onnx" >>"$W/$f.index"
    done
done
ts=$(median <"$W/small.times")
tb=$(median <"$W/big.times")
ti=$(median <"$W/inline.times")
echo "mount $(mib "$SMALL") MiB external: ${ts}s   mount $(mib "$BIG") MiB external: ${tb}s   ratio big/small: $(ratio "$tb" "$ts")  (target < 1.5)"
echo "mount $(mib "$INLINE") MiB raw_data in the .onnx: ${ti}s   ratio inline/external big: $(ratio "$ti" "$tb")"
echo "indexing alone (ckptfs-dump): small $(median <"$W/small.index")s   big $(median <"$W/big.index")s   inline $(median <"$W/inline.index")s"
# Cold page cache too, where the system lets us drop it (root).
if sync && echo 3 2>/dev/null >/proc/sys/vm/drop_caches; then
    for f in small big inline; do
        : >"$W/$f.cold"
        for _ in $(seq "$REPS"); do
            sync
            echo 3 >/proc/sys/vm/drop_caches
            mount_rep "$f.onnx" >>"$W/$f.cold"
        done
    done
    cs=$(median <"$W/small.cold")
    cb=$(median <"$W/big.cold")
    ci=$(median <"$W/inline.cold")
    echo "cold cache: mount small: ${cs}s   big: ${cb}s   ratio big/small: $(ratio "$cb" "$cs")   inline: ${ci}s"
    cat "$W"/*.onnx "$W"/*.data "$W/ref.ckpt" >/dev/null
fi

mount_timed "$W/inline.onnx" "$W/m" >/dev/null
pid=$(daemon_pid "$W/inline.onnx" "$W/m")
PIDS+=("$pid")
inline_mount=$(hwm_kib "$pid")
unmount "$W/m" "$pid"

echo "## 2. warm read throughput ($(mib "$BIG") MiB external data, $TENSORS tensors)"
# Each round: a fresh mount of the ONNX model (first read through the daemon,
# the data file, re-read), then the same for the .ckpt of the same tensors.
for f in first file reread ckpt.first ckpt.file ckpt.reread; do : >"$W/$f.times"; done
after_read=0
for i in $(seq "$REPS"); do
    mount_timed "$W/big.onnx" "$W/m" >/dev/null
    pid=$(daemon_pid "$W/big.onnx" "$W/m")
    PIDS+=("$pid")
    if [ "$i" = 1 ]; then
        after_mount=$(hwm_kib "$pid")
        out_bytes=$(stat -c %s "$W"/m/*/out | awk '{s += $1} END {print s}')
    fi
    timed cat "$W"/m/*/out >>"$W/first.times"
    if [ "$i" = 1 ]; then
        # One tensor's bytes must be its range of the data file, as onnx says.
        last=$((TENSORS - 1))
        read -r off len < <(/usr/bin/python3 -c '
import sys, onnx
t = {t.name: t for t in onnx.load(sys.argv[1], load_external_data=False).graph.initializer}[sys.argv[2]]
e = {e.key: e.value for e in t.external_data}
print(e["offset"], e["length"])' "$W/big.onnx" "layer.$last.weight")
        cmp <(tail -c +$((off + 1)) "$W/big.onnx.data" | head -c "$len") "$W/m/layer.$last.weight/out"
    fi
    timed cat "$W/big.onnx.data" >>"$W/file.times"
    timed cat "$W"/m/*/out >>"$W/reread.times"
    h=$(hwm_kib "$pid")
    if [ "$h" -gt "$after_read" ]; then after_read=$h; fi
    unmount "$W/m" "$pid"

    mount_timed "$W/ref.ckpt" "$W/m" >/dev/null
    pid=$(daemon_pid "$W/ref.ckpt" "$W/m")
    PIDS+=("$pid")
    if [ "$i" = 1 ]; then
        ckpt_out=$(stat -c %s "$W"/m/*/out | awk '{s += $1} END {print s}')
    fi
    timed cat "$W"/m/*/out >>"$W/ckpt.first.times"
    timed cat "$W/ref.ckpt" >>"$W/ckpt.file.times"
    timed cat "$W"/m/*/out >>"$W/ckpt.reread.times"
    unmount "$W/m" "$pid"
done
file_bytes=$(stat -c %s "$W/big.onnx.data")
ckpt_bytes=$(stat -c %s "$W/ref.ckpt")
tf=$(median <"$W/file.times")
t1=$(median <"$W/first.times")
t2=$(median <"$W/reread.times")
cf=$(median <"$W/ckpt.file.times")
c1=$(median <"$W/ckpt.first.times")
c2=$(median <"$W/ckpt.reread.times")
gbps() { awk -v s="$1" -v b="$2" 'BEGIN {printf "%.2f GB/s", b / s / 1e9}'; }
# tput_ratio TIME BYTES TIME0 BYTES0: throughput over throughput.
tput_ratio() { awk -v t="$1" -v b="$2" -v t0="$3" -v b0="$4" 'BEGIN {printf "%.2f", (b / t) / (b0 / t0)}'; }
echo "cat external data file: $(gbps "$tf" "$file_bytes")"
echo "cat all out, first read through the daemon: $(gbps "$t1" "$out_bytes")  ratio $(tput_ratio "$t1" "$out_bytes" "$tf" "$file_bytes")"
echo "cat all out, re-read (kernel page cache, keep_cache): $(gbps "$t2" "$out_bytes")  ratio $(tput_ratio "$t2" "$out_bytes" "$tf" "$file_bytes")  (target >= 0.6)"
echo "same tensors as a .ckpt: cat file $(gbps "$cf" "$ckpt_bytes"), first read $(gbps "$c1" "$ckpt_out"), re-read $(gbps "$c2" "$ckpt_out")"
echo "ONNX external / .ckpt: first read $(tput_ratio "$t1" "$out_bytes" "$c1" "$ckpt_out"), re-read $(tput_ratio "$t2" "$out_bytes" "$c2" "$ckpt_out")"
echo "daemon peak RSS (VmHWM): after mount ${after_mount} KiB, after reading $(mib "$out_bytes") MiB ${after_read} KiB  (target < 32768 KiB)"

mount_timed "$W/small.onnx" "$W/m" >/dev/null
pid=$(daemon_pid "$W/small.onnx" "$W/m")
PIDS+=("$pid")
cat "$W"/m/*/out >/dev/null
echo "daemon peak RSS: small model after reading it $(hwm_kib "$pid") KiB, inline model after mount ${inline_mount} KiB"
unmount "$W/m" "$pid"
