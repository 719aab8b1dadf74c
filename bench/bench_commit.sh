#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Commit benchmark: saving a one-tensor edit of a 4 GiB checkpoint, as a
# ratio to `cp` of the same file measured in the same run (median of REPS),
# and the daemon's peak RSS meanwhile.  Targets: ratio <= 1.3, RSS < 64 MiB.
#
#   bench/bench_commit.sh [BUILD]        (env: REPS=3 GIB=4 TENSORS=256)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=$(realpath "${1:-build}")
CKPTFS=$BUILD/ckptfs
REPS=${REPS:-3}
SIZE=$(( ${GIB:-4} << 30 ))
TENSORS=${TENSORS:-256}
W=$(mktemp -d "${BENCH_DIR:-/var/tmp}/ckptfs-commit.XXXXXX")
cleanup() {
    mountpoint -q "$W/m" && fusermount3 -u "$W/m"
    rm -rf "$W"
}
trap cleanup EXIT
now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN {printf "%.6f\n", b - a}'; }

echo "# generating $((SIZE >> 30)) GiB in $TENSORS tensors"
/usr/bin/python3 bench/gen_ckpt.py "$W/model.ckpt" --size "$SIZE" --count "$TENSORS"
cat "$W/model.ckpt" >/dev/null
mkdir "$W/m"
: >"$W/cp.times"
: >"$W/commit.times"
hwm=0
for i in $(seq "$REPS"); do
    t=$(now); cp "$W/model.ckpt" "$W/copy.ckpt"; sync -f "$W/copy.ckpt"; elapsed "$t" >>"$W/cp.times"
    rm -f "$W/copy.ckpt"
    "$CKPTFS" -o commit=manual "$W/model.ckpt" "$W/m"
    pid=$(pgrep -n -f -- "$CKPTFS -o commit=manual $W/model.ckpt $W/m")
    printf '%04d' "$i" | dd of="$W/m/layer.7.weight/out" bs=1 seek=1000 conv=notrunc status=none
    t=$(now); touch "$W/m/snapshot_done"; elapsed "$t" >>"$W/commit.times"
    h=$(awk '/^VmHWM/ {print $2}' "/proc/$pid/status")
    [ "$h" -gt "$hwm" ] && hwm=$h
    fusermount3 -u "$W/m"
    while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
done
tc=$(median <"$W/cp.times")
tm=$(median <"$W/commit.times")
echo "cp of the model (with fsync): ${tc}s"
echo "save of a one-tensor edit (touch snapshot_done, durable on return): ${tm}s"
echo "ratio save/cp: $(awk -v a="$tm" -v b="$tc" 'BEGIN {printf "%.2f", a / b}')  (target <= 1.3)"
echo "daemon peak RSS during the saves: ${hwm} KiB  (target < 65536 KiB)"
