#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# ckptfs-diff's mean abs, RMS and relative norm, and --atol/--rtol, checked
# against numpy (tests/oracle/tolerance_oracle.py, which writes the two
# models from values it chose and reads them back by itself): each
# statistic as printed, the exit status as numpy.allclose decides it.

load helpers

TOL="$PY $REPO/tests/oracle/tolerance_oracle.py"
DIFF=$BUILD/ckptfs-diff

setup() {
    T=$BATS_TEST_TMPDIR
    $TOL gen "$T"
    A=$T/a.safetensors
    B=$T/b.safetensors
}

@test "mean abs, rms and rel norm of each differing tensor: numpy's, any chunking" {
    run "$DIFF" "$A" "$B"
    printf '%s\n' "$output" >"$T/out.txt"
    echo "$output"
    [ "$status" -eq 1 ]
    $TOL text "$A" "$B" "$T/out.txt"
    # b all zeros, a not: the relative norm is infinite (numpy: inf too)
    [[ $output == *"values differ: to_zeros: "*", rel norm inf"* ]]
    for opts in "-j 1" "-j 3 --chunk=8" "-j 2 --chunk=4K"; do
        "$DIFF" --json $opts "$A" "$B" >"$T/got.json" || [ $? -eq 1 ]
        $TOL json "$A" "$B" "$T/got.json"
    done
}

@test "b and a both zeros with other bytes (-0.0): rel norm 0" {
    $PY - "$T" <<'PY'
import json, struct, sys
import numpy as np
def write(path, arr):
    h = json.dumps({"z": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + arr.astype("<f4").tobytes())
write(sys.argv[1] + "/z1.safetensors", np.zeros(4, np.float32))
write(sys.argv[1] + "/z2.safetensors", -np.zeros(4, np.float32))
PY
    run "$DIFF" "$T/z1.safetensors" "$T/z2.safetensors"
    echo "$output"
    [ "$status" -eq 1 ]
    [ "${lines[0]}" = "values differ: z: max abs 0, max rel 0, mean abs 0, rms 0, rel norm 0" ]
    # equal values: within any tolerance, so exit 0
    run "$DIFF" --atol 0 "$T/z1.safetensors" "$T/z2.safetensors"
    [ "$status" -eq 0 ]
    [[ ${lines[0]} == "values close: z: "* ]]
}

# check_tol ATOL RTOL: ckptfs-diff --atol ATOL --rtol RTOL exits as
# numpy.allclose decides, text and --json alike.
check_tol() {
    local want
    want=$($TOL allclose "$A" "$B" "$1" "$2")
    run "$DIFF" --atol "$1" --rtol="$2" "$A" "$B"
    echo "atol $1 rtol $2: $status (numpy $want): $output"
    [ "$status" -eq "$want" ]
    run "$DIFF" -q --atol="$1" --rtol "$2" -j 3 --chunk=16 "$A" "$B"
    [ "$status" -eq "$want" ] && [ -z "$output" ]
    run "$DIFF" --json --atol "$1" --rtol "$2" "$A" "$B"
    [ "$status" -eq "$want" ]
    printf '%s\n' "$output" | $PY -c '
import json, sys
d = json.load(sys.stdin)
assert d["within_tolerance"] == (sys.argv[1] == "0"), d["within_tolerance"]' "$want"
}

@test "--atol and --rtol: exit 0 just inside numpy.allclose's tolerance, 1 just outside" {
    n=0
    for edge in "atol 0" "atol 1e-3" "rtol 0.3" "rtol 2.5"; do
        set -- $edge
        read -r inside outside < <($TOL edge "$A" "$B" $edge)
        if [ "$1" = atol ]; then
            check_tol "$inside" "$2"; check_tol "$outside" "$2"
        else
            check_tol "$2" "$inside"; check_tol "$2" "$outside"
        fi
        n=$((n + 1))
    done
    [ "$n" -eq 4 ]
    # the edges are numpy's: inside exits 0, outside 1 (the oracle asserts it)
    read -r inside outside < <($TOL edge "$A" "$B" atol 0)
    run "$DIFF" --atol "$inside" "$A" "$B"
    [ "$status" -eq 0 ] && [[ ${lines[-1]} == "identical within tolerance "* ]]
    run "$DIFF" --atol "$outside" "$A" "$B"
    [ "$status" -eq 1 ]
    [[ $output == *"values differ: i32: "* ]]   # the one that needs the most
    # the tolerance as given, to its last digit
    [ "${lines[-1]}" = "within tolerance (atol $outside, rtol 0): 4 of the 5 with other bytes" ]
}

@test "NaN beside NaN is within tolerance, beside a number never; infinities only themselves" {
    $TOL gen "$T" --case nan
    run "$DIFF" --atol 1e-3 "$A" "$B"
    echo "$output"
    [ "$status" -eq "$($TOL allclose "$A" "$B" 1e-3 0)" ]
    [[ $output == *"values close: nan_both: "* ]]
    [[ $output == *"values differ: nan_one: "* ]]
    run "$DIFF" --atol 1e300 --rtol 1e300 "$A" "$B"
    [ "$status" -eq 1 ] && [ "$($TOL allclose "$A" "$B" 1e300 1e300)" -eq 1 ]
}

@test "a tolerance given, the other differences still count: a missing tensor is exit 1" {
    $PY - "$A" "$T/fewer.safetensors" <<'PY'
import json, struct, sys
data = open(sys.argv[1], "rb").read()
(n,) = struct.unpack("<Q", data[:8])
h = json.loads(data[8:8 + n])
body = data[8 + n:]
lo, hi = h.pop("same")["data_offsets"]
for t in h.values():  # the bytes after the removed tensor's move up
    if isinstance(t, dict) and "data_offsets" in t and t["data_offsets"][0] >= hi:
        t["data_offsets"] = [o - (hi - lo) for o in t["data_offsets"]]
hb = json.dumps(h).encode()
open(sys.argv[2], "wb").write(struct.pack("<Q", len(hb)) + hb + body[:lo] + body[hi:])
PY
    run "$DIFF" --atol 1e9 "$A" "$T/fewer.safetensors"
    [ "$status" -eq 1 ]
    [[ $output == *"only in $A: same"* ]]
}

@test "--atol and --rtol values: a negative, NaN, infinite or missing one is a usage error" {
    for args in "--atol -1" "--atol nan" "--rtol inf" "--atol=" "--rtol x" "--atol 1e999"; do
        run "$DIFF" $args "$A" "$B"
        echo "[$args] $status: $output"
        [ "$status" -eq 2 ] && [ "${#lines[@]}" -eq 1 ]
        [[ $output == *"usage: ckptfs-diff"* ]]
    done
    run "$DIFF" "$A" "$B" --atol
    [ "$status" -eq 2 ] && [ "${#lines[@]}" -eq 1 ]
}
