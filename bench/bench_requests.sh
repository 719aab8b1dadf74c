#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# FUSE requests per tensor for find, ls -lR (first and second walk) and cat
# on a read-only mount, counted from the `-d` request log of a foreground
# daemon (one line "opcode: NAME" per request): a count, not a timing, so
# it is exact and does not depend on the machine.
#
#   bench/bench_requests.sh [BUILD]     (env: TENSORS=1000)
#
# Each walk runs on a fresh mount; the second walk right after the first
# (-1: first walk, -2: second).  Counts are per tensor; the few requests
# for the root (INIT, STATFS, ...) show as 0.00.
# BASE=path/to/old/ckptfs adds a column for another build, side by side.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=$(realpath "${1:-build}")
N=${TENSORS:-1000}
W=$(mktemp -d "${BENCH_DIR:-/var/tmp}/ckptfs-req.XXXXXX")
PIDS=()
cleanup() {
    mountpoint -q "$W/m" && fusermount3 -u "$W/m"
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$W"
}
trap cleanup EXIT

/usr/bin/python3 bench/gen_ckpt.py "$W/t.ckpt" --size $((N * 16)) --count "$N"
mkdir -p "$W/m"

# run BIN LOG CMD...: mount BIN -d -o ro, run each ";"-separated phase,
# and print one "phase opcode count" line per opcode seen in each phase.
phases() {
    local bin=$1 log=$2
    shift 2
    "$bin" -d -o ro "$W/t.ckpt" "$W/m" >/dev/null 2>"$log" &
    PIDS+=($!)
    for _ in $(seq 1 600); do mountpoint -q "$W/m" && break; sleep 0.05; done
    local phase=0 from
    for cmd in "$@"; do
        phase=$((phase + 1))
        from=$(wc -l <"$log")
        sh -c "$cmd" >/dev/null
        sleep 0.1 # the log line of the last reply is written after it
        tail -n +"$((from + 1))" "$log" |
            awk -v p="$phase" 'match($0, /opcode: [A-Z_]+/) {print p, substr($0, RSTART + 8, RLENGTH - 8)}'
    done
    fusermount3 -u "$W/m"
    wait "${PIDS[-1]}" || true
}

count() { # BIN -> lines "WALK OPCODE COUNT"
    local bin=$1
    {
        phases "$bin" "$W/log" "find $W/m" "find $W/m" | sed 's/^1/find-1/; s/^2/find-2/'
        phases "$bin" "$W/log" "ls -lR $W/m" "ls -lR $W/m" | sed 's/^1/ls-1/; s/^2/ls-2/'
        phases "$bin" "$W/log" "cat $W/m/*/out" "cat $W/m/*/out" | sed 's/^1/cat-1/; s/^2/cat-2/'
    } | sort | uniq -c | awk '{print $2, $3, $1}'
}

# per-tensor summary: WALK total/N and the opcodes
summary() {
    awk -v n="$N" '{t[$1] += $3; d[$1] = d[$1] sprintf(" %s %.2f", $2, $3 / n)}
        END {split("find-1 find-2 ls-1 ls-2 cat-1 cat-2", w, " ")
             for (i = 1; i <= 6; i++) printf "%-7s %6.2f  (%s )\n", w[i], t[w[i]] / n, d[w[i]]}'
}

echo "# FUSE requests per tensor, read-only mount, $N tensors (-d log)"
count "$BUILD/ckptfs" >"$W/new"
if [ -n "${BASE:-}" ]; then
    count "$BASE" >"$W/old"
    echo "## $BASE"
    summary <"$W/old"
fi
echo "## $BUILD/ckptfs"
summary <"$W/new"
