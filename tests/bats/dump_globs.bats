#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# ckptfs-dump MODEL TENSOR...: the tensors names or shell globs select, in
# the order of the patterns, checked against Python's fnmatch over the
# tensors the format oracle reads (stat_oracle.py expect), and the same
# lines as the full listing has for them.

load helpers

STAT_ORACLE="$PY $REPO/tests/oracle/stat_oracle.py"
DUMP=$BUILD/ckptfs-dump

setup() {
    T=$BATS_TEST_TMPDIR
}

# want_order EXPECT.json PATTERN...: the directory names the patterns
# select; nothing when one of them selects none (an error, tested apart).
want_order() {
    $PY - "$@" <<'PY'
import fnmatch, json, sys
names = [t["dir"] for t in json.load(open(sys.argv[1]))["tensors"]]
out = []
for p in sys.argv[2:]:
    hit = [n for n in names if n == p or fnmatch.fnmatchcase(n, p)]
    if not hit:
        sys.exit(0)
    out += [n for n in hit if n not in out]
print("\n".join(out))
PY
}

@test "globs on fixtures: the patterns' order, file order within one, each tensor once" {
    n=0
    for f in "$MS/mindarmour_checkpoint_lenet-10_1875.ckpt" \
             $(find "$FIXTURES/safetensors" -name '*.safetensors' | sort | head -3); do
        $STAT_ORACLE expect "$f" >"$T/expect.json" 2>/dev/null || continue
        "$DUMP" "$f" >"$T/all"
        for pats in "*" "*.bias *" "?[a-m]* *weight*"; do
            set -f
            want=$(want_order "$T/expect.json" $pats)
            [ -n "$want" ] || { set +f; continue; }
            "$DUMP" "$f" $pats >"$T/some"
            set +f
            got=$(grep -v "^#" "$T/some" | cut -f1)
            echo "$f [$pats]: got $got; want $want"
            [ "$got" = "$want" ]
            # each line as the full listing has it
            [ "$(head -1 "$T/some")" = "$(head -1 "$T/all")" ]
            while IFS= read -r line; do
                grep -qxF -- "$line" "$T/all"
            done < <(grep -v "^#" "$T/some")
            n=$((n + 1))
        done
    done
    [ "$n" -ge 4 ]
}

@test "a pattern that selects nothing: exit 1, one line naming it, nothing on stdout" {
    cd "$T"
    cp "$MS/mindarmour_checkpoint_lenet-10_1875.ckpt" lenet.ckpt
    run "$DUMP" lenet.ckpt 'fc*' 'zz*'
    [ "$status" -eq 1 ] && [ "$output" = "ckptfs-dump: lenet.ckpt: no tensor zz*" ] || false
    [ -z "$("$DUMP" lenet.ckpt no.such 2>/dev/null)" ]
    # a RUN_DIR takes no TENSOR
    mkdir run
    run "$DUMP" run 'fc*'
    [ "$status" -eq 2 ] && [ "${#lines[@]}" -eq 1 ] && [[ $output == *"usage: ckptfs-dump"* ]]
}
