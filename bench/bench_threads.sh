#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One request thread or libfuse's pool (-o threads): the first read of
# every `out` of a SIZE model by 1, 2 and 4 readers at once (page cache
# dropped before each run), and `find` over COUNT tensors, for both loops
# side by side; best of REPS.  Decides ckptfs's default (docs/benchmarks.md).
#
#   bench/bench_threads.sh [BUILD]   (env: SIZE=1073741824 TENSORS=64 COUNT=100000 REPS=3)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=$(realpath "${1:-build}")
CKPTFS=$BUILD/ckptfs
SIZE=${SIZE:-1073741824}
TENSORS=${TENSORS:-64}
COUNT=${COUNT:-100000}
REPS=${REPS:-3}
W=$(mktemp -d "${BENCH_DIR:-/var/tmp}/ckptfs-threads.XXXXXX")
cleanup() {
    mountpoint -q "$W/m" && fusermount3 -u "$W/m"
    rm -rf "$W"
}
trap cleanup EXIT
mkdir "$W/m"

. bench/bench_lib.sh

# readers N: N readers of every out (page cache dropped first); seconds.
readers() {
    sync
    echo 3 >/proc/sys/vm/drop_caches
    timed read_round_robin "$W/m" "$1"
}

# best_of CMD...: the smallest of REPS runs.
best_of() {
    for _ in $(seq "$REPS"); do "$@"; done | sort -g | head -1
}

walk() {
    echo 3 >/proc/sys/vm/drop_caches
    timed find "$W/m"
}

# run LABEL MODEL OPTS: mount, measure, unmount.
run() {
    local label=$1 model=$2 opts=$3 what=$4
    "$CKPTFS" -o "ro$opts" "$model" "$W/m"
    if [ "$what" = read ]; then
        for n in 1 2 4; do echo "$label readers=$n $(best_of readers "$n")"; done
    else
        echo "$label find $(best_of walk)"
    fi
    fusermount3 -u "$W/m"
}

/usr/bin/python3 bench/gen_ckpt.py "$W/big.ckpt" --size "$SIZE" --count "$TENSORS" >/dev/null
/usr/bin/python3 tests/oracle/ckpt_oracle.py gen "$W/many.ckpt" --case many --count "$COUNT"
echo "# first read of $TENSORS outs ($SIZE bytes); find over $COUNT tensors; best of $REPS (s)"
{
    run one "$W/big.ckpt" "" read
    run pool "$W/big.ckpt" ",threads" read
    run one "$W/many.ckpt" "" find
    run pool "$W/many.ckpt" ",threads" find
} | tee "$W/results"
for what in "readers=1" "readers=2" "readers=4" "find"; do
    a=$(awk -v w="$what" '$1 == "one" && $2 == w {print $3}' "$W/results")
    b=$(awk -v w="$what" '$1 == "pool" && $2 == w {print $3}' "$W/results")
    echo "$what: pool/one $(ratio "$b" "$a")"
done
