#!/usr/bin/env bash
# Run every test (C unit tests, a fixed fuzzing run of the reader, then the
# bats suites against real FUSE mounts) with the binaries in BUILD, and end
# with "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
BUILD=$(realpath "${1:-build}")
export CKPTFS_BUILD=$BUILD
if [ ! -d ../shared/fixtures ]; then
    echo "run-all: ../shared/fixtures not found beside the repository" >&2
    echo "0 passed, 1 failed"
    exit 1
fi
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT

passed=0
failed=0
count() { # count TAP results in a log file; a runner that died counts as a failure
    local file=$1 status=$2 p f
    p=$(grep -c '^ok ' "$file")
    f=$(grep -c '^not ok ' "$file")
    if [ "$status" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; echo "runner exited $status" ; fi
    passed=$((passed + p))
    failed=$((failed + f))
}

echo "== unit tests"
"$BUILD/unit-tests" | tee "$log/unit"
count "$log/unit" "${PIPESTATUS[0]}"

echo "== fuzzing (deterministic: fixed seed and run count)"
"$(pwd)/tests/fuzz/run.sh" "$BUILD/fuzz-ckpt" "${FUZZ_RUNS:-200000}" | tee "$log/fuzz"
count "$log/fuzz" "${PIPESTATUS[0]}"

echo "== oracle self-checks (the safetensors oracle against the real fixtures)"
if bash tests/oracle/test_safetensors_oracle.sh >"$log/oracle" 2>&1; then
    echo "ok - safetensors oracle: $(tail -1 "$log/oracle")" | tee "$log/oracle.tap"
else
    tail -20 "$log/oracle"
    echo "not ok - safetensors oracle self-check failed" | tee "$log/oracle.tap"
fi
count "$log/oracle.tap" 0

echo "== oracle self-checks (the distributed-merge oracle against the real fixtures)"
if bash tests/oracle/test_dist_oracle.sh >"$log/distoracle" 2>&1; then
    echo "ok - distributed-merge oracle: $(tail -1 "$log/distoracle")" | tee "$log/distoracle.tap"
else
    grep -E '^(not ok|#)' "$log/distoracle" | tail -20
    echo "not ok - distributed-merge oracle self-check failed" | tee "$log/distoracle.tap"
fi
count "$log/distoracle.tap" 0

echo "== oracle self-checks (the iteration-directory oracle: generated Checkpoint 2.0 sets)"
if bash tests/oracle/test_iteration_oracle.sh >"$log/iteroracle" 2>&1; then
    echo "ok - iteration-directory oracle: $(tail -1 "$log/iteroracle")" | tee "$log/iteroracle.tap"
else
    grep -E '^(not ok|#)' "$log/iteroracle" | tail -20
    echo "not ok - iteration-directory oracle self-check failed" | tee "$log/iteroracle.tap"
fi
count "$log/iteroracle.tap" 0

echo "== bats suites"
bats --tap tests/bats | tee "$log/bats"
count "$log/bats" "${PIPESTATUS[0]}"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
