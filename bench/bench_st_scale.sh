#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# safetensors headers at scale: the same N one-float tensors (bench/gen_ckpt.py,
# with and without --safetensors) as a .ckpt and a .safetensors, side by side
# in one run, for N = SMALL and BIG; each time is the median of REPS runs.
#
#   bench/bench_st_scale.sh [BUILD]   (env: REPS=5 SMALL=100000 BIG=1000000)
#
# For each file, in rounds that alternate the two formats (the machine is
# shared): the mount's start-up until the mount is live (the daemonized
# command returns then), the peak RSS of a foreground mount
# (VmHWM once live: the header parse sets it), and `ckptfs-dump` (header
# parse and index, every tensor listed) with its peak RSS from
# /usr/bin/time.  Printed: safetensors/ckpt ratios (target <= 1.5 for time
# and memory at both sizes) and BIG/SMALL ratios of each (linear growth:
# about BIG/SMALL).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=$(realpath "${1:-build}")
CKPTFS=$BUILD/ckptfs
REPS=${REPS:-5}
SMALL=${SMALL:-100000}
BIG=${BIG:-1000000}
W=$(mktemp -d "${BENCH_DIR:-/var/tmp}/ckptfs-st-scale.XXXXXX")
MOUNTS=()
cleanup() {
    for m in "${MOUNTS[@]}"; do mountpoint -q "$m" && fusermount3 -u "$m"; done
    rm -rf "$W"
}
trap cleanup EXIT
. bench/bench_lib.sh

echo "# generating: $SMALL and $BIG tensors of one float, as .ckpt and .safetensors"
for n in "$SMALL" "$BIG"; do
    for ext in ckpt safetensors; do
        st=$([ "$ext" = safetensors ] && echo --safetensors || true)
        /usr/bin/python3 bench/gen_ckpt.py "$W/$n.$ext" --size $((n * 4)) --count "$n" $st
        cat "$W/$n.$ext" >/dev/null
    done
done
mkdir -p "$W/m"

# times N: REPS rounds, each mounting (until live) and dumping the .ckpt
# then the .safetensors, so that both see the same load; appends
# "mount_s dump_s" per round to $W/N.EXT.t.
times() {
    local f
    for _ in $(seq "$REPS"); do
        for f in "$W/$1.ckpt" "$W/$1.safetensors"; do
            t=$(mount_timed "$f" "$W/m")
            fusermount3 -u "$W/m"
            d=$(timed "$BUILD/ckptfs-dump" "$f")
            echo "$t $d" >>"$f.t"
        done
    done
}
# memory FILE: "mount_hwm_kib dump_maxrss_kib" to FILE.mem.
memory() {
    local f=$1 pid
    # In the foreground: a daemon forks after the header is parsed.
    "$CKPTFS" -f -o ro "$f" "$W/m" &
    pid=$!
    MOUNTS+=("$W/m")
    until mountpoint -q "$W/m"; do sleep 0.05; done
    hm=$(hwm_kib "$pid")
    fusermount3 -u "$W/m"
    wait "$pid"
    hd=$(/usr/bin/time -f %M "$BUILD/ckptfs-dump" "$f" 2>&1 >/dev/null | tail -1)
    echo "$hm $hd" >"$f.mem"
}
col() { awk -v c="$1" '{print $c}' "$2" | median; }

echo "## mount (until live) and ckptfs-dump: median of $REPS; peak RSS"
for n in "$SMALL" "$BIG"; do
    times "$n"
    for ext in ckpt safetensors; do memory "$W/$n.$ext"; done
    for what in 1:mount 2:dump; do
        c=${what%%:*}
        tc=$(col "$c" "$W/$n.ckpt.t"); ts=$(col "$c" "$W/$n.safetensors.t")
        mc=$(awk -v c="$c" '{print $c}' "$W/$n.ckpt.mem")
        ms=$(awk -v c="$c" '{print $c}' "$W/$n.safetensors.mem")
        echo "$n ${what#*:} $tc $ts $mc $ms" >>"$W/rows"
        printf '%-8s %-5s time: ckpt %8.4fs  safetensors %8.4fs  ratio %5.2f   peak RSS: ckpt %8d KiB  safetensors %8d KiB  ratio %5.2f\n' \
            "$n" "${what#*:}" "$tc" "$ts" "$(ratio "$ts" "$tc")" "$mc" "$ms" "$(ratio "$ms" "$mc")"
    done
done

echo "## growth, $BIG/$SMALL tensors (linear: about $(ratio "$BIG" "$SMALL"))"
for what in mount dump; do
    read -r _ _ tc1 ts1 mc1 ms1 < <(awk -v n="$SMALL" -v w="$what" '$1 == n && $2 == w' "$W/rows")
    read -r _ _ tc2 ts2 mc2 ms2 < <(awk -v n="$BIG" -v w="$what" '$1 == n && $2 == w' "$W/rows")
    printf '%-5s time: ckpt %6.2f  safetensors %6.2f   peak RSS: ckpt %6.2f  safetensors %6.2f\n' \
        "$what" "$(ratio "$tc2" "$tc1")" "$(ratio "$ts2" "$ts1")" "$(ratio "$mc2" "$mc1")" \
        "$(ratio "$ms2" "$ms1")"
done
