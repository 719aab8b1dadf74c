#!/usr/bin/env bash
# run.sh FUZZER RUNS: fuzz the .ckpt reader and writer from a corpus seeded with the real
# fixtures (copied to a temporary directory, never into the repository).
# Deterministic: fixed seed, fixed number of runs.  Prints one TAP line.
set -u
cd "$(dirname "$0")/../.."
fuzzer=$1
runs=${2:-200000}
corpus=$(mktemp -d)
trap 'rm -rf "$corpus"' EXIT
for f in ../shared/fixtures/mindspore/*.ckpt; do
    [ -s "$f" ] && cp "$f" "$corpus/"
done
cp ../shared/fixtures/oneflow/legacy_v2_java_mlp_adam/dense1-weight/meta "$corpus/meta"
if "$fuzzer" -seed=1 -runs="$runs" -max_len=4096 -timeout=10 -rss_limit_mb=1024 \
    "$corpus" >"$corpus.log" 2>&1; then
    echo "ok - fuzz: $runs inputs through the .ckpt reader and writer, no crash, every accepted input re-encoded to itself ($(grep -o 'cov: [0-9]*' "$corpus.log" | tail -1))"
    rm -f "$corpus.log"
else
    tail -40 "$corpus.log"
    echo "not ok - fuzz: the .ckpt reader failed on an input (log above; crash file in $(pwd))"
    rm -f "$corpus.log"
    exit 1
fi
