#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Saves over object storage (issue 28): what one save of a 256 MiB model of
# 2,000 Float32 tensors in the bucket costs, for each format (.ckpt,
# .safetensors, .onnx with its raw_data inline), in bytes on the loopback,
# requests and time, against its floor: reading the old file once and
# writing the new one once (2 x its size; s3fs's rename is a server-side
# copy, which crosses no socket).  Also counts the objects a save moved
# aside (.fuse_hiddenN: libfuse renames an open target away first, and the
# model's key is missing meanwhile for every other client).
#
#   bench/bench_s3_save.sh [BUILD [BASELINE]]   (env: REPS=3 MIB=256
#                                                TENSORS=2000 BENCH_DIR=/var/tmp)
#
# BASELINE, another build (an older commit's, say), is measured side by
# side in the same run, rounds alternated.  Each round PUTs the original
# model straight to the server, mounts it -o rw,commit=manual over s3fs,
# writes 4 bytes into one tensor, drops the caches, then measures
# `touch M/snapshot_done` (the save, returned once durable) and unmounts.
# The s3rver and s3fs setup is bench_lib.sh's (as tests/bats/s3_helpers.bash),
# plus s3fs's nomultipart: s3fs copies an object of multipart_threshold
# (25 MB) or more, as a rename does, by a multipart copy (UploadPartCopy),
# which s3rver does not implement (HTTP 501, then EIO from the rename, for
# any build); nomultipart makes each upload one PUT and each copy one
# CopyObject.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILDS=("$(realpath "${1:-build}")")
[ -n "${2:-}" ] && BUILDS+=("$(realpath "$2")")
REPS=${REPS:-3}
SIZE=$(( ${MIB:-256} << 20 ))
N=${TENSORS:-2000}
FORMATS=(ckpt safetensors onnx)
PY=/usr/bin/python3
[ "$(id -u)" = 0 ] || { echo "bench_s3_save.sh drops the page cache: run it as root" >&2; exit 1; }
W=$(mktemp -d "${BENCH_DIR:-/var/tmp}/ckptfs-s3save.XXXXXX")
M=$W/m
PID=
S3FS_OPTS=${S3FS_OPTS:-use_path_request_style,stat_cache_expire=1,dbglevel=warn,nomultipart}
. bench/bench_lib.sh

# the daemon's process is gone or a zombie (this machine's init reaps a
# reparented daemon late: not ckptfs's time)
exited() {
    local st
    st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 0
    [ -z "$st" ] || [ "$st" = Z ]
}
unmount_wait() {
    fusermount3 -u "$M"
    while ! exited "$PID"; do sleep 0.01; done
    PID=
}
cleanup() {
    set +e # every step, whatever failed
    mountpoint -q "$M" && fusermount3 -u "$M"
    if [ -n "$PID" ]; then
        for _ in $(seq 1 500); do exited "$PID" && break; sleep 0.01; done
    fi
    s3_bench_stop
    rm -rf "$W"
}
trap cleanup EXIT

export HOME=$W/home XDG_CACHE_HOME=$W/home/.cache
mkdir -p "$HOME" "$M" "$W/local" "$W/r"

echo "# generating $N tensors in $((SIZE >> 20)) MiB: .ckpt, .safetensors, .onnx (raw_data inline)"
$PY bench/gen_ckpt.py "$W/local/t.ckpt" --size "$SIZE" --count "$N"
$PY bench/gen_ckpt.py "$W/local/t.safetensors" --size "$SIZE" --count "$N" --safetensors
$PY bench/gen_onnx.py "$W/local/t.onnx" --size "$SIZE" --count "$N" --inline
s3_bench_start "$W/s3"

requests() { sed 's/\x1b\[[0-9;]*m//g' "$S3_LOG" | grep -cE '^info: .* [1-5][0-9][0-9] [0-9.]+m?s ([0-9.]+[kmgt]?b|-)$' || true; }
hidden() { grep -c 'with key of ".*fuse_hidden\|Stored object ".*fuse_hidden' "$S3_LOG" || true; }

# save_once B F: one measured save of model F with build number B;
# appends "seconds lo_bytes requests hidden_objects" to $W/r/F.B.
save_once() {
    local b=$1 f=$2 ckptfs=${BUILDS[$1]}/ckptfs lo q h t0 d
    s3_put "$W/local/t.$f" "s.$f"
    sleep 1.1 # past stat_cache_expire: s3fs shows the object just PUT
    "$ckptfs" -o rw,commit=manual "$S3/s.$f" "$M"
    PID=$(getfattr --absolute-names --only-values -n user.ckptfs.pid "$M")
    d=$(ls "$M" | awk 'NR == 1') # awk reads all: no SIGPIPE under pipefail
    printf '\x00\x00\x80\x3f' | dd of="$M/$d/out" conv=notrunc status=none
    drop_caches
    lo=$(lo_rx) q=$(requests) h=$(hidden) t0=$(now)
    touch "$M/snapshot_done"
    echo "$(awk -v a="$t0" -v b="$(now)" 'BEGIN {printf "%.6f", b - a}') $(( $(lo_rx) - lo )) $(( $(requests) - q )) $(( $(hidden) - h ))" \
        >>"$W/r/$f.$b"
    unmount_wait
}

echo "# $REPS rounds: one save of each model, by each build: ${BUILDS[*]}"
for r in $(seq "$REPS"); do
    for f in "${FORMATS[@]}"; do
        for b in "${!BUILDS[@]}"; do save_once "$b" "$f"; done
    done
    echo "round $r done"
done

col() { awk -v k="$2" '{print $k}' "$W/r/$1" | median; }
mib() { awk -v b="$1" 'BEGIN {printf "%.2f MiB", b / 1048576}'; }
row() {
    printf '| %-44s |' "$1"
    shift
    printf ' %-24s |' "$@"
    echo
}
echo
echo "## $N tensors, $((SIZE >> 20)) MiB; medians of $REPS; s3fs -o $S3FS_OPTS"
row "measure" "${FORMATS[@]}"
echo "|---|---|---|---|"
for b in "${!BUILDS[@]}"; do
    label=${BUILDS[$b]}
    [ "$b" = 0 ] && label="build $label" || label="baseline $label"
    echo "| **$label** | | | |"
    vals=() rats=() hids=() times=()
    for f in "${FORMATS[@]}"; do
        vals+=("$(mib "$(col "$f.$b" 2)"), $(col "$f.$b" 3) req")
        rats+=("$(ratio "$(col "$f.$b" 2)" $((2 * $(stat -c %s "$W/local/t.$f"))))")
        times+=("$(col "$f.$b" 1) s")
        hids+=("$(awk '{s += $4} END {print s + 0}' "$W/r/$f.$b") in $REPS saves")
    done
    row "save: lo bytes, requests" "${vals[@]}"
    row "save / (read the old + write the new), bytes" "${rats[@]}"
    row "save: time" "${times[@]}"
    row "objects moved aside (.fuse_hidden)" "${hids[@]}"
done
