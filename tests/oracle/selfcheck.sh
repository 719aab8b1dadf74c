# SPDX-License-Identifier: Apache-2.0
# Shared by the oracle self-check scripts (test_dist_oracle.sh,
# test_iteration_oracle.sh), sourced after they set ORACLE (the oracle's
# command): a scratch directory $T, TAP-like ok/not ok lines, and the
# summary that ends them.  These checks run the oracles alone, no mount.

T=$(mktemp -d)
trap 'pyserve_stop; rm -rf "$T"' EXIT
# The oracle's calls go through one Python that has imported it once
# (pyserve.sh); a `sh -c` given "${ORACLE[@]}" runs it directly.
. "$(dirname "${BASH_SOURCE[0]}")/pyserve.sh"
pyserve_start "$T/py.sock" "${ORACLE[1]}" || exit 1
N=0
FAILED=0

ok() { N=$((N + 1)); echo "ok $N - $1"; }
nok() { N=$((N + 1)); FAILED=$((FAILED + 1)); echo "not ok $N - $1"; }
check() { # check DESCRIPTION COMMAND...: ok when COMMAND succeeds
    local what=$1
    shift
    if "$@" > "$T/out" 2> "$T/err"; then
        ok "$what"
    else
        nok "$what"
        sed 's/^/#   /' "$T/err" | tail -5
    fi
}
refused() { # refused DESCRIPTION COMMAND...: ok when COMMAND exits 1 with exactly one stderr line
    local what=$1 rc
    shift
    "$@" > /dev/null 2> "$T/err"
    rc=$?
    if [ $rc -eq 1 ] && [ "$(wc -l < "$T/err")" -eq 1 ] && grep -q '^refused: ' "$T/err"; then
        ok "$what ($(cut -c1-100 "$T/err"))"
    else
        nok "$what: exit $rc, stderr: $(head -3 "$T/err")"
    fi
}
oracle() { "${PYCALL[@]}" "${ORACLE[@]:1}" "$@"; }
py() { "${PYCALL[@]}" - "$@"; }

# The last line: how many checks, and the exit status.
summary() {
    if [ "$FAILED" -eq 0 ]; then
        echo "ok: $N checks"
    else
        echo "FAIL: $FAILED of $N checks failed"
        exit 1
    fi
}
