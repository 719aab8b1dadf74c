#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
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
# Each stage says how long it took, and bats each test (--timing), so a
# slow CI run's log tells where the time went.
started=$SECONDS
took() { echo "# $1 took $((SECONDS - started)) s"; started=$SECONDS; }
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
took "unit tests"

echo "== fuzzing (deterministic: fixed seed and run count)"
"$(pwd)/tests/fuzz/run.sh" "$BUILD/fuzz-ckpt" "${FUZZ_RUNS:-200000}" | tee "$log/fuzz"
count "$log/fuzz" "${PIPESTATUS[0]}"
took "fuzzing"

# selfcheck NAME SCRIPT: an oracle's self-check (the oracle alone, no mount),
# counted as one test; on failure, the lines that say why.
selfcheck() {
    local name=$1 script=$2 out="$log/$(basename "$2" .sh)"
    echo "== oracle self-checks: the $name oracle"
    if bash "$script" >"$out" 2>&1; then
        echo "ok - $name oracle: $(tail -1 "$out")" | tee "$out.tap"
    else
        grep -E '^(not ok|#|FAIL)' "$out" | tail -20
        echo "not ok - $name oracle self-check failed" | tee "$out.tap"
    fi
    count "$out.tap" 0
}
selfcheck safetensors tests/oracle/test_safetensors_oracle.sh
selfcheck distributed-merge tests/oracle/test_dist_oracle.sh
selfcheck iteration-directory tests/oracle/test_iteration_oracle.sh
selfcheck template-fill tests/oracle/test_fill_oracle.sh
took "oracle self-checks"

echo "== bats suites"
bats --tap --timing tests/bats | tee "$log/bats"
count "$log/bats" "${PIPESTATUS[0]}"
took "bats suites"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
