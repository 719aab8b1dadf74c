#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# ckptfs-stat: the statistics of a model's tensors, checked against numpy
# (tests/oracle/stat_oracle.py, which parses each file with the format
# oracles and computes every number on the whole tensor at once): counts,
# min, max and histogram counts exactly, mean and std within 1e-9.

load helpers

# the oracles' calls through one Python that imported them (helpers.bash)
setup_file() { pyserve_file_start numpy "$REPO/tests/oracle/ckpt_oracle.py" "$REPO/tests/oracle/stat_oracle.py" "$REPO/tests/oracle/dist_oracle.py" "$REPO/tests/oracle/envelope_oracle.py" "$REPO/tests/oracle/iteration_oracle.py"; }
teardown_file() { pyserve_file_stop; }

STAT_ORACLE="$PY $REPO/tests/oracle/stat_oracle.py"
ENVELOPE="$PY $REPO/tests/oracle/envelope_oracle.py"
DIST="$PY $REPO/tests/oracle/dist_oracle.py"
ITER="$PY $REPO/tests/oracle/iteration_oracle.py"
STAT=$BUILD/ckptfs-stat
LENET_CKPT=$MS/mindarmour_checkpoint_lenet-10_1875.ckpt
# The fixtures' encrypted MindIR files name their key: "0123456789ABCDEF".
FIXTURE_KEY=30313233343536373839414243444546

setup() {
    T=$BATS_TEST_TMPDIR
}

# check_stat MODEL BINS [ORACLE OPTIONS...]: ckptfs-stat --json --hist=BINS
# MODEL (with $STAT_ENV in its environment) agrees with the oracle.
check_stat() {
    local model=$1 bins=$2
    shift 2
    $STAT_ORACLE expect "$model" --hist "$bins" "$@" >"$T/expect.json"
    env ${STAT_ENV:-} "$STAT" --json --hist="$bins" ${STAT_OPTS:-} "$model" >"$T/got.json"
    $STAT_ORACLE compare "$T/expect.json" "$T/got.json"
}

@test "every tensor of every .ckpt and MindIR fixture: the statistics numpy computes" {
    n=0
    for f in "$MS"/*.ckpt "$MS"/*.mindir; do
        key=()
        case $f in *encrpty_key*) key=(--key-hex $FIXTURE_KEY) ;; esac
        if ! $STAT_ORACLE expect "$f" >/dev/null 2>&1 "${key[@]}"; then
            # A file the reference refuses (an empty file, a strategy file)
            # is refused by ckptfs-stat too, in one line naming it.
            run env ${key[1]:+CKPTFS_KEY_HEX=${key[1]}} "$STAT" "$f"
            echo "$f: $output"
            [ "$status" -eq 1 ] && [ "${#lines[@]}" -eq 1 ] && [[ $output == *"$f"* ]]
            continue
        fi
        echo "== $f"
        STAT_ENV=${key[1]:+CKPTFS_KEY_HEX=${key[1]}} check_stat "$f" 7 "${key[@]}"
        n=$((n + 1))
    done
    [ "$n" -ge 9 ]
}

@test "every tensor of every safetensors fixture: the statistics numpy computes" {
    n=0
    while IFS= read -r f; do
        echo "== $f"
        check_stat "$f" 5
        n=$((n + 1))
    done < <(find "$FIXTURES/safetensors" -name '*.safetensors' | sort)
    [ "$n" -ge 20 ]
}

@test "NaN, +/-Inf, zeros, float16, bfloat16, every integer type, bool, empty: exact in .ckpt" {
    $STAT_ORACLE gen "$T/special.ckpt" --case special
    check_stat "$T/special.ckpt" 10
    # The oracle's own view of what must be there, so that the check means something.
    $PY - "$T/got.json" <<'PY'
import json, sys
t = {x["dir"]: x for x in json.load(open(sys.argv[1]))["tensors"]}
f = t["special.f32"]
assert (f["nan"], f["posinf"], f["neginf"], f["zeros"]) == (3, 1, 2, 4), f
assert t["int.uint64"]["max"] == "18446744073709551615", t["int.uint64"]
assert t["int.int64"]["min"] == -2 ** 63 and t["int.int64"]["max"] == 2 ** 63 - 1
e = t["special.empty"]
assert e["count"] == 0 and e["min"] is None and e["mean"] is None and e["hist"] is None, e
a = t["special.all_nan"]
assert a["nan"] == 4 and a["min"] is None and a["std"] is None, a
for name in ("info.str", "quant.int4", "special.c64"):
    assert t[name]["numeric"] is False and "count" not in t[name], t[name]
PY
}

@test "every float16 and every bfloat16 bit pattern, in chunks of 4 KiB over 2 threads" {
    $STAT_ORACLE gen "$T/allbits.ckpt" --case allbits
    STAT_OPTS="-j 2 --chunk=4K" check_stat "$T/allbits.ckpt" 64
}

@test "the same values in safetensors (F16, BF16, every integer, BOOL, an F8 not numeric)" {
    $STAT_ORACLE gen "$T/special.safetensors" --case safetensors --seed 7
    check_stat "$T/special.safetensors" 9
    # its canonical name, ml_dtypes' and torch's (safetensors' own loader
    # takes F8_E4M3 as torch.float8_e4m3fn)
    grep -q '"type": "float8_e4m3fn"' "$T/got.json"
}

@test "tensors of several chunks: -j 1 and -j 4 print the same numbers, numpy's" {
    $STAT_ORACLE gen "$T/big.ckpt" --case big
    $STAT_ORACLE expect "$T/big.ckpt" --hist 16 >"$T/expect.json"
    for chunk in 4M 64K 4K; do
        "$STAT" --json --hist=16 -j 1 --chunk=$chunk "$T/big.ckpt" >"$T/j1.json"
        "$STAT" --json --hist=16 -j 4 --chunk=$chunk "$T/big.ckpt" >"$T/j4.json"
        "$STAT" --json --hist=16 -j3 --chunk=$chunk "$T/big.ckpt" >"$T/j3.json"
        # Partial results are merged in chunk order whatever thread made
        # them: not merely within rounding, identical.
        cmp "$T/j1.json" "$T/j4.json"
        cmp "$T/j1.json" "$T/j3.json"
        $STAT_ORACLE compare "$T/expect.json" "$T/j4.json"
    done
}

@test "a distributed checkpoint merged by -o strategy: the full model's numbers, any chunking" {
    for c in tp2:2 tp4x2:4; do
        n=${c#*:} c=${c%:*}
        $DIST gen "$T/$c" --ranks "$n" --case $c --seed 3
        $STAT_ORACLE expect "$T/$c/full.ckpt" --hist 6 >"$T/expect.json"
        # 8-byte chunks cut the interleaved runs of a tensor split along a
        # later dimension anywhere.
        for opts in "-j 1" "-j 3 --chunk=8" "-j 2 --chunk=24"; do
            "$STAT" --json --hist=6 $opts -o strategy="$T/$c/strategy.ckpt" "$T/$c/dist" \
                >"$T/got.json"
            $STAT_ORACLE compare "$T/expect.json" "$T/got.json"
        done
    done
}

@test "an iteration directory: the numbers of the full model it holds" {
    $ITER gen "$T/g" --case random --seed 7
    $STAT_ORACLE expect "$T/g/full.safetensors" --hist 3 >"$T/expect.json"
    "$STAT" --json --hist=3 -j 2 --chunk=16 "$T/g/iteration_00000010" >"$T/got.json"
    $STAT_ORACLE compare "$T/expect.json" "$T/got.json" --any-order
}

@test "named tensors only, in the order named; the same numbers as for the whole model" {
    $STAT_ORACLE gen "$T/special.ckpt" --case special
    $STAT_ORACLE expect "$T/special.ckpt" >"$T/expect.json"
    "$STAT" --json "$T/special.ckpt" int.uint64 special.f16 >"$T/got.json"
    $STAT_ORACLE compare "$T/expect.json" "$T/got.json" --names int.uint64 special.f16
    [ "$($PY -c 'import json,sys; print([t["dir"] for t in json.load(open(sys.argv[1]))["tensors"]])' \
        "$T/got.json")" = "['int.uint64', 'special.f16']" ]
}

@test "TENSOR globs on a fixture: the order of the patterns, file order within one, each once" {
    $STAT_ORACLE expect "$LENET_CKPT" >"$T/expect.json"
    for pats in "fc*" "fc3* conv* fc*" "*.bias *.weight" "conv?.weight [!cf]* learning_rate" \
                "*"; do
        set -f
        "$STAT" --json "$LENET_CKPT" $pats >"$T/got.json"
        # the oracle selects with Python's fnmatch over the tensors it read
        $STAT_ORACLE compare "$T/expect.json" "$T/got.json" --names $pats
        set +f
    done
    # the table too, and a tensor named twice is listed once
    set -f
    "$STAT" "$LENET_CKPT" 'fc2.*' 'conv1.*' fc2.bias >"$T/table"
    set +f
    [ "$(tail -n +2 "$T/table" | cut -d' ' -f1 | paste -sd,)" = "fc2.weight,fc2.bias,conv1.weight" ]
    # a glob that selects nothing: as an unknown name, exit 1
    cd "$T"
    cp "$LENET_CKPT" lenet.ckpt
    run "$STAT" lenet.ckpt 'fc*' 'zz*'
    [ "$status" -eq 1 ] && [ "$output" = "ckptfs-stat: lenet.ckpt: no tensor zz*" ] || false
}

@test "an unknown tensor name: exit 1, one line naming the file as given and the name" {
    $STAT_ORACLE gen "$T/special.ckpt" --case special
    cd "$T"
    run "$STAT" special.ckpt special.f32 no.such.tensor
    [ "$status" -eq 1 ]
    [ "${#lines[@]}" -eq 1 ]
    [ "$output" = "ckptfs-stat: special.ckpt: no tensor no.such.tensor" ]
}

@test "the table: aligned columns, 'not numeric' rows, '-' where there is no value" {
    $STAT_ORACLE gen "$T/special.ckpt" --case special
    "$STAT" "$T/special.ckpt" >"$T/table"
    cat "$T/table"
    head -1 "$T/table" | grep -Eq '^tensor +type +shape +count +min +max +mean +std +nan +\+inf +-inf +zeros$'
    # Numbers are right-aligned: every numeric row ends where the header does.
    width=$(head -1 "$T/table" | awk '{ print length }')
    grep -v 'not numeric' "$T/table" | awk -v w="$width" 'length != w { exit 1 }'
    grep -Eq '^info\.str +str +\[11\] +not numeric$' "$T/table"
    grep -Eq '^quant\.int4 +int4 +\[4,8\] +not numeric$' "$T/table"
    grep -Eq '^special\.empty +float32 +\[2,0,3\] +0 +- +- +- +- +0 +0 +0 +0$' "$T/table"
    grep -Eq '^int\.uint64 +uint64 +\[200\] +200 +0 +18446744073709551615 ' "$T/table"
    grep -Eq '^special\.f32 +float32 +\[1000\] +1000 .* 3 +1 +2 +4$' "$T/table"
}

@test "--hist in the table: one line a bin, the counts numpy.histogram gives" {
    $STAT_ORACLE gen "$T/special.ckpt" --case special
    $STAT_ORACLE expect "$T/special.ckpt" --hist 4 >"$T/expect.json"
    "$STAT" --hist=4 "$T/special.ckpt" special.f32 >"$T/table"
    cat "$T/table"
    grep -q '^histogram of special.f32 (4 bins, finite values):$' "$T/table"
    got=$(grep -A4 '^histogram of special.f32' "$T/table" | tail -4 | awk '{ print $4 }' | xargs)
    want=$($PY -c 'import json,sys
t = [x for x in json.load(open(sys.argv[1]))["tensors"] if x["dir"] == "special.f32"][0]
print(" ".join(map(str, t["hist"]["counts"])))' "$T/expect.json")
    [ "$got" = "$want" ]
    # --hist alone: 10 bins
    "$STAT" --hist "$T/special.ckpt" special.f16 | grep -c '^  \[' | grep -qx 10
}

@test "an encrypted model (AES-GCM, AES-CBC): with -o key_file or CKPTFS_KEY_HEX" {
    $STAT_ORACLE gen "$T/special.ckpt" --case special
    hex=000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f
    printf '%s' "$hex" | xxd -r -p >"$T/key"
    chmod 600 "$T/key"
    for mode in AES-GCM AES-CBC; do
        $ENVELOPE encrypt --mode $mode --key-hex $hex "$T/special.ckpt" "$T/enc.ckpt"
        STAT_OPTS="-o key_file=$T/key" check_stat "$T/enc.ckpt" 6 --key-hex $hex
        STAT_ENV=CKPTFS_KEY_HEX=$hex check_stat "$T/enc.ckpt" 6 --key-hex $hex
    done
    run env -u CKPTFS_KEY_HEX "$STAT" "$T/enc.ckpt"
    [ "$status" -eq 1 ] && [ "${#lines[@]}" -eq 1 ] && [[ $output == *"$T/enc.ckpt"* ]]
}

@test "a zstd model, with and without a seek table" {
    $STAT_ORACLE gen "$T/special.ckpt" --case special
    zstd -q "$T/special.ckpt" -o "$T/special.ckpt.zst"
    check_stat "$T/special.ckpt.zst" 8 --zstd
    $ENVELOPE zstd-seekable --frame-size 4096 "$T/special.ckpt" "$T/seek.ckpt.zst"
    check_stat "$T/seek.ckpt.zst" 8 --zstd
}

@test "a corrupt .ckpt: exit 1, one line naming the file as given and the offset" {
    cd "$T"
    off=$($ORACLE bad bad.ckpt --case truncated)
    run "$STAT" bad.ckpt
    echo "$output"
    [ "$status" -eq 1 ]
    [ "${#lines[@]}" -eq 1 ]
    [[ $output == "ckptfs-stat: bad.ckpt: offset $off: "* ]]
    run "$STAT" no-such.ckpt
    [ "$status" -eq 1 ] && [ "${#lines[@]}" -eq 1 ]
    [[ $output == "ckptfs-stat: no-such.ckpt: "* ]]
}

@test "usage errors exit 2 with one line; --help and --version exit 0" {
    $STAT_ORACLE gen "$T/special.ckpt" --case special
    for args in "" "--bogus $T/special.ckpt" "--hist=0 $T/special.ckpt" \
                "--hist=x $T/special.ckpt" "-j 0 $T/special.ckpt" "-j" "-jx $T/special.ckpt" \
                "--chunk=0 $T/special.ckpt" "-o tmp_max=0 $T/special.ckpt"; do
        run "$STAT" $args
        echo "[$args] $status: $output"
        [ "$status" -eq 2 ]
        [ "${#lines[@]}" -eq 1 ]
        [[ $output == *"usage: ckptfs-stat"* ]]
    done
    run "$STAT" --help
    [ "$status" -eq 0 ] && [[ $output == "usage: ckptfs-stat "* ]] || false
    run "$STAT" --version
    [ "$status" -eq 0 ]
    # the mount's version, word for word
    [ "$output" = "ckptfs-stat $("$CKPTFS" --version | head -1 | cut -d' ' -f2)" ]
}

@test "--hist-log: the counts numpy.histogram gives, bars 40*log10(c+1)/log10(max+1), at least 1" {
    $STAT_ORACLE expect "$LENET_CKPT" --hist 12 >"$T/expect.json"
    for t in fc1.weight conv1.weight fc3.bias; do
        "$STAT" --hist-log --hist=12 "$LENET_CKPT" "$t" >"$T/log"
        "$STAT" --hist=12 "$LENET_CKPT" "$t" >"$T/lin"
        cat "$T/log"
        grep -qxF "histogram of $t (12 bins, finite values, log scale):" "$T/log"
        # each bin: its count, and its bar's length, on either scale
        for f in log lin; do
            grep -A12 "^histogram of $t" "$T/$f" | tail -12 |
                sed 's/^.*[])] *//' | awk '{ print $1, length($2) }' >"$T/$f.bars"
        done
        $PY - "$T/expect.json" "$t" "$T/log.bars" "$T/lin.bars" <<'PY'
import json, math, sys
t = [x for x in json.load(open(sys.argv[1]))["tensors"] if x["dir"] == sys.argv[2]][0]
counts = t["hist"]["counts"]
most = max(counts)
def log_bar(c):
    if c == 0:
        return 0
    return min(40, max(1, int(40 * math.log10(c + 1) / math.log10(most + 1))))
for path, bar in ((sys.argv[3], log_bar), (sys.argv[4], lambda c: 40 * c // most)):
    got = [tuple(map(int, line.split())) for line in open(path)]
    want = [(c, bar(c)) for c in counts]
    assert got == want, (path, got, want)
# the log scale shows a tail the linear one hides
assert any(c > 0 and 40 * c // most == 0 for c in counts) or sys.argv[2] != "fc1.weight"
PY
    done
    # alone, --hist-log is --hist's 10 bins; the JSON is --hist's, counts only
    [ "$("$STAT" --hist-log "$LENET_CKPT" fc1.weight | grep -c '^  \[')" -eq 10 ]
    cmp <("$STAT" --json --hist=5 "$LENET_CKPT") <("$STAT" --json --hist-log --hist=5 "$LENET_CKPT")
}
