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

# Each format's regression and corpus inputs replayed whole, then a short
# campaign (longer ones: make fuzz, docs/guide.md "Fuzzing").
echo "== fuzzing (deterministic: the replay, then a fixed seed and run count)"
"$(pwd)/tests/fuzz/run.sh" "$BUILD/fuzz-ckpt" "${FUZZ_RUNS:-30000}" | tee "$log/fuzz"
count "$log/fuzz" "${PIPESTATUS[0]}"
took "fuzzing"

# selfcheck NAME SCRIPT: an oracle's self-check (the oracle alone, no mount),
# one TAP line in $log/NAME.tap; on failure, the lines that say why in
# $log/NAME.why.  They are Python processes by the hundred, so the four run
# side by side.
selfcheck() {
    local name=$1 out="$log/$1"
    if bash "$2" >"$out" 2>&1; then
        echo "ok - $name oracle: $(tail -1 "$out")" >"$out.tap"
    else
        grep -E '^(not ok|#|FAIL)' "$out" | tail -20 >"$out.why"
        echo "not ok - $name oracle self-check failed" >"$out.tap"
    fi
}
echo "== oracle self-checks"
checks=(safetensors:tests/oracle/test_safetensors_oracle.sh
        distributed-merge:tests/oracle/test_dist_oracle.sh
        iteration-directory:tests/oracle/test_iteration_oracle.sh
        template-fill:tests/oracle/test_fill_oracle.sh)
for c in "${checks[@]}"; do selfcheck "${c%%:*}" "${c#*:}" & done
wait
for c in "${checks[@]}"; do
    name=${c%%:*}
    [ ! -s "$log/$name.why" ] || cat "$log/$name.why"
    if [ -f "$log/$name.tap" ]; then cat "$log/$name.tap"; count "$log/$name.tap" 0
    else echo "not ok - $name oracle self-check did not finish"; failed=$((failed + 1)); fi
done
took "oracle self-checks"

# The suites' files run side by side, TEST_JOBS at a time (the cores by
# default; GNU parallel, as bats needs): every test makes its own
# directories, mounts, ports and daemons.  A file's tests run in order.
echo "== bats suites"
bats --tap --timing --jobs "${TEST_JOBS:-$(nproc)}" --no-parallelize-within-files tests/bats |
    tee "$log/bats"
count "$log/bats" "${PIPESTATUS[0]}"
took "bats suites"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
