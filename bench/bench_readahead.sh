#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Read-ahead: the first read of every `out` of a READ_MIB model through a
# read-only mount with the FUSE bdi's read_ahead_kb at 128 (the kernel's
# default), 1024 and 4096, by 1 and 4 parallel `cat`s, fresh mount each
# time, the model file in the page cache.  Given OLD_BUILD too, both builds
# alternate round by round; MAX_READ_ALT=N adds BUILD with -o max_read=N.
# Prints each median and its ratio to 128 KiB (below 1: larger read-ahead
# is a gain).  Needs root (read_ahead_kb).
#
#   bench/bench_readahead.sh [BUILD [OLD_BUILD]]   (env: REPS=5 READ_MIB=1024 READ_TENSORS=64 MAX_READ_ALT=)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILDS=("$(realpath "${1:-build}")")
OPTS=(ro)
if [ -n "${MAX_READ_ALT:-}" ]; then BUILDS+=("${BUILDS[0]}"); OPTS+=("ro,max_read=$MAX_READ_ALT"); fi
if [ -n "${2:-}" ]; then BUILDS+=("$(realpath "$2")"); OPTS+=(ro); fi
REPS=${REPS:-5}
READ_BYTES=$(( ${READ_MIB:-1024} << 20 ))
W=$(mktemp -d "${BENCH_DIR:-/var/tmp}/ckptfs-ra.XXXXXX")
MOUNTS=("$W/m")
cleanup() {
    mountpoint -q "$W/m" && fusermount3 -u "$W/m"
    rm -rf "$W"
}
trap cleanup EXIT
. bench/bench_lib.sh

/usr/bin/python3 bench/gen_ckpt.py "$W/big.ckpt" --size "$READ_BYTES" --count "${READ_TENSORS:-64}"
cat "$W/big.ckpt" >/dev/null
mkdir -p "$W/m"
readers() { read_round_robin "$W/m" "$1"; }
for _ in $(seq "$REPS"); do
    for b in "${!BUILDS[@]}"; do
        for ra in 128 1024 4096; do
            for p in 1 4; do
                "${BUILDS[b]}/ckptfs" -o "${OPTS[b]}" "$W/big.ckpt" "$W/m"
                echo "$ra" >"/sys/class/bdi/$(mountpoint -d "$W/m")/read_ahead_kb"
                timed readers "$p" >>"$W/t.$b.$ra.$p"
                fusermount3 -u "$W/m"
            done
        done
    done
done
echo "# first read of $((READ_BYTES >> 20)) MiB, median of $REPS, seconds (ratio to read_ahead_kb=128)"
for b in "${!BUILDS[@]}"; do
    for p in 1 4; do
        base=$(median <"$W/t.$b.128.$p")
        line="${BUILDS[b]} -o ${OPTS[b]}, $p reader(s):"
        for ra in 128 1024 4096; do
            t=$(median <"$W/t.$b.$ra.$p")
            line+=$(printf '  ra %4s KiB %.3fs (%s)' "$ra" "$t" "$(ratio "$t" "$base")")
        done
        echo "$line"
    done
done
