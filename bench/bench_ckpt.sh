#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# ckptfs .ckpt benchmark.  Everything is measured side by side in one run and
# reported as ratios, because the machine is shared and noisy; each timing is
# the median of REPS runs.
#
#   bench/bench_ckpt.sh [BUILD]     (env: REPS=5 TENSORS=256 SMALL_MIB=64 BIG_GIB=4 MANY=100000)
#
# 1. mount time (warm, and cold where the page cache can be dropped) and
#    daemon peak RSS, 64 MiB vs 4 GiB checkpoints with the same tensor count
#    (targets: time ratio < 1.5, RSS < 32 MiB);
# 2. warm read throughput: `cat` of every out file vs `cat` of the model file
#    (first read through the daemon, and re-read with the kernel's cache);
# 3. `find` and `ls -lR` of a 100 000-tensor checkpoint vs the same tree
#    copied to the local disk.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=$(realpath "${1:-build}")
CKPTFS=$BUILD/ckptfs
REPS=${REPS:-5}
TENSORS=${TENSORS:-256}
SMALL=$(( ${SMALL_MIB:-64} << 20 ))
BIG=$(( ${BIG_GIB:-4} << 30 ))
MANY=${MANY:-100000}
W=$(mktemp -d "${BENCH_DIR:-/var/tmp}/ckptfs-bench.XXXXXX")
MOUNTS=()
cleanup() {
    for m in "${MOUNTS[@]}"; do mountpoint -q "$m" && fusermount3 -u "$m"; done
    rm -rf "$W"
}
trap cleanup EXIT

. bench/bench_lib.sh

echo "# generating: $TENSORS tensors in $((SMALL >> 20)) MiB and $((BIG >> 30)) GiB; $MANY tiny tensors"
/usr/bin/python3 bench/gen_ckpt.py "$W/small.ckpt" --size "$SMALL" --count "$TENSORS"
/usr/bin/python3 bench/gen_ckpt.py "$W/big.ckpt" --size "$BIG" --count "$TENSORS"
/usr/bin/python3 bench/gen_ckpt.py "$W/many.ckpt" --size $((MANY * 16)) --count "$MANY"
mkdir -p "$W/m"
cat "$W/small.ckpt" "$W/big.ckpt" "$W/many.ckpt" >/dev/null # warm the page cache

echo "## 1. mount time and daemon memory"
for f in small big; do
    : >"$W/$f.times"
    for _ in $(seq "$REPS"); do
        mount_timed "$W/$f.ckpt" "$W/m" >>"$W/$f.times"
        fusermount3 -u "$W/m"
        sleep 0.2
    done
done
ts=$(median <"$W/small.times")
tb=$(median <"$W/big.times")
echo "mount 64 MiB: ${ts}s   mount 4 GiB: ${tb}s   ratio big/small: $(ratio "$tb" "$ts")  (target < 1.5)"
# Cold page cache too, where the system lets us drop it (root): each record
# header is then a read from the disk.
if sync && echo 3 2>/dev/null >/proc/sys/vm/drop_caches; then
    for f in small big; do
        : >"$W/$f.cold"
        for _ in $(seq "$REPS"); do
            sync
            echo 3 >/proc/sys/vm/drop_caches
            mount_timed "$W/$f.ckpt" "$W/m" >>"$W/$f.cold"
            fusermount3 -u "$W/m"
        done
    done
    cs=$(median <"$W/small.cold")
    cb=$(median <"$W/big.cold")
    echo "cold cache: mount 64 MiB: ${cs}s   mount 4 GiB: ${cb}s   ratio big/small: $(ratio "$cb" "$cs")"
    cat "$W/small.ckpt" "$W/big.ckpt" "$W/many.ckpt" >/dev/null
fi

mount_timed "$W/big.ckpt" "$W/m" >/dev/null
pid=$(daemon_pid "$W/big.ckpt" "$W/m")
after_mount=$(hwm_kib "$pid")

echo "## 2. warm read throughput (4 GiB, $TENSORS tensors)"
read_mount=$(timed cat "$W"/m/*/out)
: >"$W/file.times"
: >"$W/reread.times"
for _ in $(seq "$REPS"); do
    timed cat "$W/big.ckpt" >>"$W/file.times"
    timed cat "$W"/m/*/out >>"$W/reread.times"
done
after_read=$(hwm_kib "$pid")
fusermount3 -u "$W/m"
: >"$W/first.times"
echo "$read_mount" >>"$W/first.times"
for _ in $(seq $((REPS - 1))); do
    mount_timed "$W/big.ckpt" "$W/m" >/dev/null
    timed cat "$W"/m/*/out >>"$W/first.times"
    fusermount3 -u "$W/m"
done
tf=$(median <"$W/file.times")
t1=$(median <"$W/first.times")
t2=$(median <"$W/reread.times")
gbps() { awk -v s="$1" -v b="$BIG" 'BEGIN {printf "%.2f GB/s", b / s / 1e9}'; }
echo "cat model file: $(gbps "$tf")"
echo "cat all out, first read through the daemon: $(gbps "$t1")  ratio $(ratio "$tf" "$t1")"
echo "cat all out, re-read (kernel page cache, keep_cache): $(gbps "$t2")  ratio $(ratio "$tf" "$t2")  (target >= 0.6)"
echo "daemon peak RSS (VmHWM): after mount ${after_mount} KiB, after reading 4 GiB ${after_read} KiB  (target < 32768 KiB)"

mount_timed "$W/small.ckpt" "$W/m" >/dev/null
pid=$(daemon_pid "$W/small.ckpt" "$W/m")
cat "$W"/m/*/out >/dev/null
echo "daemon peak RSS, 64 MiB checkpoint after reading it: $(hwm_kib "$pid") KiB"
fusermount3 -u "$W/m"

echo "## 3. metadata: $MANY tensors"
tm=$(mount_timed "$W/many.ckpt" "$W/m")
pid=$(daemon_pid "$W/many.ckpt" "$W/m")
echo "mount: ${tm}s, daemon RSS $(hwm_kib "$pid") KiB"
cp -r "$W/m" "$W/local"
: >"$W/find.fuse"; : >"$W/find.local"; : >"$W/ls.fuse"; : >"$W/ls.local"
for _ in $(seq "$REPS"); do
    timed find "$W/m" >>"$W/find.fuse"
    timed find "$W/local" >>"$W/find.local"
    timed ls -lR "$W/m" >>"$W/ls.fuse"
    timed ls -lR "$W/local" >>"$W/ls.local"
done
fusermount3 -u "$W/m"
cold_find=$( mount_timed "$W/many.ckpt" "$W/m" >/dev/null; timed find "$W/m")
cold_ls=$(timed ls -lR "$W/m")
fusermount3 -u "$W/m"
ff=$(median <"$W/find.fuse"); fl=$(median <"$W/find.local")
lf=$(median <"$W/ls.fuse"); ll=$(median <"$W/ls.local")
echo "find: mount ${ff}s (first after mounting ${cold_find}s), local copy ${fl}s, ratio $(ratio "$ff" "$fl")"
echo "ls -lR: mount ${lf}s (first after mounting ${cold_ls}s), local copy ${ll}s, ratio $(ratio "$lf" "$ll")"
