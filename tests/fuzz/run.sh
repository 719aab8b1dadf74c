#!/usr/bin/env bash
# run.sh FUZZER RUNS [FORMAT...]: fuzz the reader and writer of each format
# (ckpt, onnx, mindir; all three by default) from a corpus seeded with the
# real fixtures and the regression inputs in tests/fuzz/regress/FORMAT
# (copied to a temporary directory, never into the repository).
# Deterministic: fixed seed, fixed number of runs per format.  Prints one TAP
# line per format.  To replay a crash file: CKPTFS_FUZZ_FORMAT=FORMAT FUZZER FILE
set -u
cd "$(dirname "$0")/../.."
fuzzer=$1
runs=${2:-200000}
shift $(($# < 2 ? $# : 2))
[ $# -gt 0 ] || set -- ckpt onnx mindir
# Each input is written to a file in $TMPDIR (decoded typed fields to another):
# on tmpfs that is free, on a disk it takes most of the run.
if [ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then
    export TMPDIR=/dev/shm
fi

seeds() { # seeds FORMAT: the fixture files that seed its corpus
    case $1 in
    ckpt) echo ../shared/fixtures/mindspore/*.ckpt \
        ../shared/fixtures/oneflow/legacy_v2_java_mlp_adam/dense1-weight/meta ;;
    onnx) echo ../shared/fixtures/onnx/*.onnx ;;
    mindir) echo ../shared/fixtures/mindspore/*.mindir ;;
    esac
}

failed=0
for format in "$@"; do
    corpus=$(mktemp -d)
    n=0
    for f in $(seeds "$format") tests/fuzz/regress/"$format"/*; do
        [ -s "$f" ] || continue
        n=$((n + 1))
        cp "$f" "$corpus/$n-$(basename "$f")"
    done
    if CKPTFS_FUZZ_FORMAT=$format "$fuzzer" -seed=1 -runs="$runs" -max_len=4096 -timeout=10 \
        -rss_limit_mb=1024 "$corpus" >"$corpus.log" 2>&1; then
        echo "ok - fuzz: $runs inputs through the $format reader and writer, no crash, every accepted input re-encoded to itself ($(grep -o 'cov: [0-9]*' "$corpus.log" | tail -1))"
    else
        tail -40 "$corpus.log"
        echo "not ok - fuzz: the $format reader or writer failed on an input (log above; crash file in $(pwd))"
        failed=1
    fi
    rm -rf "$corpus" "$corpus.log"
done
exit "$failed"
