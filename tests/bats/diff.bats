#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# ckptfs-diff: two models compared tensor by tensor, checked against numpy
# (tests/oracle/diff_oracle.py, which parses both files with the format
# oracles, computes every difference on whole tensors at once, and writes
# the changed models compared here): statuses, bit identity and the largest
# absolute and relative differences exactly; exit status as diff(1)'s.

load helpers

# the oracles' calls through one Python that imported them (helpers.bash)
setup_file() { pyserve_file_start numpy "$REPO/tests/oracle/ckpt_oracle.py" "$REPO/tests/oracle/diff_oracle.py" "$REPO/tests/oracle/dist_oracle.py" "$REPO/tests/oracle/envelope_oracle.py"; }
teardown_file() { pyserve_file_stop; }

DIFF_ORACLE="$PY $REPO/tests/oracle/diff_oracle.py"
ENVELOPE="$PY $REPO/tests/oracle/envelope_oracle.py"
DIST="$PY $REPO/tests/oracle/dist_oracle.py"
DIFF=$BUILD/ckptfs-diff
LENET=$MS/mindarmour_checkpoint_lenet-10_1875.ckpt

setup() {
    T=$BATS_TEST_TMPDIR
}

# check_diff A B STATUS [ckptfs-diff options...]: ckptfs-diff --json A B
# exits STATUS and reports what the oracle computes.
check_diff() {
    local a=$1 b=$2 want=$3
    shift 3
    $DIFF_ORACLE expect "$a" "$b" ${ORACLE_KEY:+--key-hex $ORACLE_KEY} >"$T/expect.json"
    run "$DIFF" --json "$@" "$a" "$b"
    printf '%s\n' "$output" >"$T/got.json"
    [ "$status" -eq "$want" ] || { echo "exit $status, wanted $want"; return 1; }
    $DIFF_ORACLE compare "$T/expect.json" "$T/got.json"
}

@test "every .ckpt and MindIR fixture against a copy of itself: identical, exit 0" {
    n=0
    for f in "$MS"/*.ckpt "$MS"/*.mindir "$FIXTURES"/onnx/*.onnx; do
        [ -f "$f" ] || continue
        case $f in *encrpty_key*) continue ;; esac
        "$BUILD/ckptfs-stat" "$f" >/dev/null 2>&1 || continue # refused by the codec
        cp "$f" "$T/copy.${f##*.}"
        run "$DIFF" "$f" "$T/copy.${f##*.}"
        echo "$f: $status: $output"
        [ "$status" -eq 0 ] && [ "$output" = "identical" ] || false
        run "$DIFF" -q "$f" "$T/copy.${f##*.}"
        [ "$status" -eq 0 ] && [ -z "$output" ] || false
        n=$((n + 1))
    done
    [ "$n" -ge 9 ]
    cp "$LENET" "$T/copy.ckpt"
    check_diff "$LENET" "$T/copy.ckpt" 0
}

@test "a .ckpt against its safetensors conversion (F32 for Float32): identical, both ways" {
    $DIFF_ORACLE write "$LENET" "$T/lenet.safetensors"
    run "$DIFF" "$LENET" "$T/lenet.safetensors"
    [ "$status" -eq 0 ] && [ "$output" = "identical" ] || false
    run "$DIFF" "$T/lenet.safetensors" "$LENET"
    [ "$status" -eq 0 ] && [ "$output" = "identical" ] || false
    check_diff "$LENET" "$T/lenet.safetensors" 0
    # every safetensors fixture against its .ckpt conversion, and back
    n=0
    while IFS= read -r f; do
        $DIFF_ORACLE write "$f" "$T/conv.ckpt" 2>/dev/null || continue # no MindSpore type
        run "$DIFF" "$T/conv.ckpt" "$f"
        echo "$f: $status: $output"
        [ "$status" -eq 0 ] && [ "$output" = "identical" ] || false
        n=$((n + 1))
    done < <(find "$FIXTURES/safetensors" -name '*.safetensors' | sort)
    [ "$n" -ge 10 ]
}

@test "the same tensors in another file order: identical" {
    $DIFF_ORACLE write "$LENET" "$T/permuted.ckpt" --permute
    ! cmp -s "$LENET" "$T/permuted.ckpt" || false
    run "$DIFF" "$LENET" "$T/permuted.ckpt"
    [ "$status" -eq 0 ] && [ "$output" = "identical" ] || false
    check_diff "$T/permuted.ckpt" "$LENET" 0
}

@test "one element changed: exit 1, one line, max abs and rel numpy's, any chunking" {
    $DIFF_ORACLE write "$LENET" "$T/perturbed.ckpt" --set fc1.weight 47999 0.125
    cd "$T"
    run "$DIFF" "$LENET" perturbed.ckpt
    echo "$output"
    [ "$status" -eq 1 ]
    [ "${#lines[@]}" -eq 2 ]
    [[ ${lines[0]} == "values differ: fc1.weight: max abs "*", max rel "* ]]
    sum="differ: 0 only in A, 0 only in B, 0 changed type or shape,"
    [ "${lines[1]}" = "$sum 1 of 18 in both with other bytes" ]
    for opts in "-j 1" "-j 3 --chunk=8" "-j2 --chunk=4K" "--chunk=1M"; do
        check_diff "$LENET" perturbed.ckpt 1 $opts
        cp got.json "got-${opts// /}.json"
    done
    # the maxima do not depend on the threads or the chunks: the same document
    cmp got--j1.json got--j3--chunk=8.json
    cmp got--j1.json got--j2--chunk=4K.json
    run "$DIFF" -q "$LENET" perturbed.ckpt
    [ "$status" -eq 1 ] && [ -z "$output" ] || false
}

@test "a tensor removed, one added, one reshaped, one retyped: one line each, exit 1" {
    $DIFF_ORACLE write "$LENET" "$T/changed.safetensors" --remove fc2.bias --add extra.w \
        --reshape conv1.weight --retype momentum
    cd "$T"
    run "$DIFF" "$LENET" changed.safetensors
    echo "$output"
    [ "$status" -eq 1 ]
    [ "${#lines[@]}" -eq 5 ]
    [ "${lines[0]}" = "shape differs: conv1.weight: float32 [6,1,5,5], float32 [150]" ]
    [ "${lines[1]}" = "only in $LENET: fc2.bias" ]
    [ "${lines[2]}" = "type differs: momentum: float64 [], float32 []" ]
    [ "${lines[3]}" = "only in changed.safetensors: extra.w" ]
    sum="differ: 1 only in A, 1 only in B, 2 changed type or shape,"
    [ "${lines[4]}" = "$sum 0 of 15 in both with other bytes" ]
    check_diff "$LENET" changed.safetensors 1
    check_diff changed.safetensors "$LENET" 1
}

@test "NaN beside NaN is equal; beside a number NaN; opposite infinities; integer extremes" {
    $DIFF_ORACLE gen "$T/a.ckpt" --case nan-a
    $DIFF_ORACLE gen "$T/b.ckpt" --case nan-b
    $DIFF_ORACLE gen "$T/b.safetensors" --case nan-b
    check_diff "$T/a.ckpt" "$T/b.ckpt" 1 -j 2 --chunk=8
    check_diff "$T/a.ckpt" "$T/b.safetensors" 1
    # The oracle's own view of what must be there, so that the check means something.
    $PY - "$T/got.json" <<'PY'
import json, sys
t = {x["name"]: x for x in json.load(open(sys.argv[1]))["tensors"]}
assert t["f32.same_nan"]["max_abs"] == 0 and not t["f32.same_nan"]["bit_identical"]
assert t["f32.nan_vs_num"]["max_abs"] == "nan", t["f32.nan_vs_num"]
assert t["f32.inf"]["max_abs"] == "inf", t["f32.inf"]
assert t["i64.extremes"]["max_abs"] == float(2 ** 64 - 1) and t["i64.extremes"]["max_rel"] == 2
assert t["f64.zeros"]["status"] == "differ" and t["f64.zeros"]["max_abs"] == 0
assert t["f32.equal"]["status"] == "identical"
PY
    run "$DIFF" "$T/a.ckpt" "$T/b.ckpt"
    [ "$status" -eq 1 ]
    [[ $output == *"values differ: f32.nan_vs_num: max abs nan, max rel nan"* ]]
    [[ $output == *"values differ: f32.inf: max abs inf, max rel nan"* ]]
}

@test "an encrypted model against its plain one: identical, one key for both" {
    hex=000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f
    printf '%s' "$hex" | xxd -r -p >"$T/key"
    chmod 600 "$T/key"
    # ' -inf': argparse would take -inf for an option
    $DIFF_ORACLE write "$LENET" "$T/changed.ckpt" --set fc3.bias 0 ' -inf'
    for mode in AES-GCM AES-CBC; do
        $ENVELOPE encrypt --mode $mode --key-hex $hex "$LENET" "$T/enc.ckpt"
        run "$DIFF" -o key_file="$T/key" "$T/enc.ckpt" "$LENET"
        [ "$status" -eq 0 ] && [ "$output" = "identical" ] || false
        run env CKPTFS_KEY_HEX=$hex "$DIFF" "$LENET" "$T/enc.ckpt"
        [ "$status" -eq 0 ] && [ "$output" = "identical" ] || false
        $ENVELOPE encrypt --mode $mode --key-hex $hex "$T/changed.ckpt" "$T/enc2.ckpt"
        ORACLE_KEY=$hex check_diff "$T/enc.ckpt" "$T/enc2.ckpt" 1 -o key_file="$T/key"
    done
    run env -u CKPTFS_KEY_HEX "$DIFF" "$LENET" "$T/enc.ckpt"
    [ "$status" -eq 2 ] && [ "${#lines[@]}" -eq 1 ] && [[ $output == *"$T/enc.ckpt"* ]]
}

@test "a distributed checkpoint (-o strategy for both) against itself: identical" {
    $DIST gen "$T/d" --ranks 2 --case tp2 --seed 3
    cp -r "$T/d/dist" "$T/dist2"
    run "$DIFF" -o strategy="$T/d/strategy.ckpt" -j 2 --chunk=8 "$T/d/dist" "$T/dist2"
    echo "$output"
    [ "$status" -eq 0 ] && [ "$output" = "identical" ] || false
}

@test "a missing or corrupt file: exit 2, one line naming the file as given" {
    cd "$T"
    run "$DIFF" no-such.ckpt "$LENET"
    [ "$status" -eq 2 ] && [ "${#lines[@]}" -eq 1 ]
    [[ $output == "ckptfs-diff: no-such.ckpt: "* ]]
    run "$DIFF" "$LENET" no-such.ckpt
    [ "$status" -eq 2 ] && [ "${#lines[@]}" -eq 1 ]
    [[ $output == "ckptfs-diff: no-such.ckpt: "* ]]
    off=$($ORACLE bad bad.ckpt --case truncated)
    run "$DIFF" "$LENET" bad.ckpt
    echo "$output"
    [ "$status" -eq 2 ] && [ "${#lines[@]}" -eq 1 ]
    [[ $output == "ckptfs-diff: bad.ckpt: offset $off: "* ]]
}

@test "usage errors exit 2 with one line; --help and --version exit 0" {
    for args in "" "$LENET" "--bogus $LENET $LENET" \
                "-j 0 $LENET $LENET" "-j" "-jx $LENET $LENET" "--chunk=0 $LENET $LENET" \
                "-o tmp_max=0 $LENET $LENET"; do
        run "$DIFF" $args
        echo "[$args] $status: $output"
        [ "$status" -eq 2 ]
        [ "${#lines[@]}" -eq 1 ]
        [[ $output == *"usage: ckptfs-diff"* ]]
    done
    run "$DIFF" --help
    [ "$status" -eq 0 ] && [[ $output == "usage: ckptfs-diff "* ]] || false
    [[ $output == *"2 trouble"* ]]
    run "$DIFF" --version
    [ "$status" -eq 0 ]
    # the mount's version, word for word
    [ "$output" = "ckptfs-diff $("$CKPTFS" --version | head -1 | cut -d' ' -f2)" ]
}

@test "a model and its conversion (.safetensors, .ckpt) are identical: one name per tensor, the mount's, in every tool (ONNX Constants, MindIR GRAPH: parameters)" {
    for m in "$ONNX_FIX"/ppocrv4_rec_constants.onnx "$ONNX_FIX"/silero_vad_legacy.onnx \
             "$ONNX_FIX"/silero_vad_v5_subgraphs.onnx "$MS"/mindspore_ori_net.mindir; do
        b=$T/$(basename "$m")
        "$BUILD/ckptfs-convert" "$m" "$b.safetensors"
        "$BUILD/ckptfs-convert" "$m" "$b.ckpt"
        for out in "$b.safetensors" "$b.ckpt"; do
            run "$DIFF" "$m" "$out"
            echo "$m $out: $output"
            [ "$status" -eq 0 ]
            [[ ${lines[-1]} == *identical* ]]
        done
        # the names written are the mount's directory names, the name's %XX
        # escapes (only where a path needs them) decoded; header read with json
        mount_fg "$m" "$T/mnt" -o ro
        ls "$T/mnt" | grep -vx snapshot_done >"$T/dirs"
        unmount "$T/mnt"
        $PY - "$b.safetensors" "$T/dirs" <<'PY'
import json, re, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
names = sorted(k.encode() for k in json.loads(b[8:8 + n]) if k != "__metadata__")
def unesc(d):
    """The escaped name decoded, the generated suffix (from the first % that is
    not an escape: %const, %@NODE.ATTR, %dup2...) kept as shown."""
    g = re.search(rb"%(?![0-9A-F]{2})", d)
    cut = g.start() if g else len(d)
    return re.sub(rb"%([0-9A-F]{2})", lambda m: bytes([int(m[1], 16)]), d[:cut]) + d[cut:]
dirs = sorted(unesc(d) for d in open(sys.argv[2], "rb").read().splitlines())
assert names == dirs, (set(names) ^ set(dirs))
PY
    done
}

# The tensors TENSOR patterns select, in the order ckptfs-diff must list
# them: Python's fnmatch over the names the oracle reads, each pattern's in
# the oracle's order (A's, then B's), a name once, at its first pattern.
fnmatch_order() {
    $PY - "$@" <<'PY'
import fnmatch, json, sys
names = [t["name"] for t in json.load(open(sys.argv[1]))["tensors"]]
out = []
for p in sys.argv[2:]:
    out += [n for n in names if n not in out and (n == p or fnmatch.fnmatchcase(n, p))]
print("\n".join(out))
PY
}

@test "TENSOR globs: only those tensors, in the order of the patterns, each once" {
    $DIFF_ORACLE write "$LENET" "$T/changed.safetensors" --remove fc2.bias --add extra.w \
        --reshape conv1.weight --retype momentum --set fc1.weight 7 0.5
    $DIFF_ORACLE expect "$LENET" "$T/changed.safetensors" >"$T/expect.json"
    for pats in "fc*" "*.bias conv*" "fc3.* fc* moment?m" "[cf]*1.* extra.*" "*"; do
        set -f
        run "$DIFF" --json "$LENET" "$T/changed.safetensors" $pats
        want=$(fnmatch_order "$T/expect.json" $pats)
        set +f
        got=$(printf '%s\n' "$output" | $PY -c '
import json, sys
print("\n".join(t["name"] for t in json.load(sys.stdin)["tensors"]))')
        echo "[$pats] $status: got $got, want $want"
        [ -n "$want" ] && [ "$got" = "$want" ]
        [ "$status" -eq 1 ]
    done
    # the selected tensors alone decide the exit status
    run "$DIFF" "$LENET" "$T/changed.safetensors" 'conv2.*' fc3.bias
    [ "$status" -eq 0 ] && [ "$output" = "identical" ] || false
    # a pattern that selects nothing in A or B: trouble, naming it
    cd "$T"
    run "$DIFF" "$LENET" changed.safetensors 'fc*' 'nothing*'
    [ "$status" -eq 2 ]
    [ "$output" = "ckptfs-diff: $LENET, changed.safetensors: no tensor nothing*" ]
}
