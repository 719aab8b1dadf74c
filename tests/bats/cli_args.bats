#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# The arguments ckptfs-stat, ckptfs-diff and ckptfs-convert read alike
# (cli_open.h): `--` ends the options, so that a path may start with '-';
# a bad option, a missing or an extra argument is named in one line that
# ends with the usage, exit 2; --help answers on stdout, exit 0.  What the
# tools make of paths after `--` is checked by the oracles (stat_oracle,
# convert_oracle); the messages word for word, as the tools have always
# printed them.

load helpers

STAT=$BUILD/ckptfs-stat
DIFF=$BUILD/ckptfs-diff
CONVERT=$BUILD/ckptfs-convert
LENET=$MS/mindarmour_checkpoint_lenet-10_1875.ckpt
OTHER=$MS/mindscience_SciAI_example_net_10000.ckpt
U_STAT="usage: ckptfs-stat [OPTIONS] MODEL [TENSOR...] (try --help)"
U_DIFF="usage: ckptfs-diff [OPTIONS] A B [TENSOR...] (try --help)"
U_CONVERT="usage: ckptfs-convert [OPTIONS] IN OUT (try --help)"

setup() {
    T=$BATS_TEST_TMPDIR
    cd "$T" # "-m.ckpt" below is a path of $T, and a path only after --
}

# usage_error EXPECTED CMD...: CMD exits 2 printing exactly EXPECTED.
usage_error() {
    local want=$1
    shift
    run "$@"
    [ "$status" -eq 2 ] || { echo "[$*] exit $status: $output"; return 1; }
    [ "$output" = "$want" ] || { echo "[$*] printed: $output"; return 1; }
}

@test "-- before paths starting with '-': stat, diff and convert take them as paths" {
    cp "$LENET" ./-m.ckpt
    cp "$LENET" ./-n.ckpt
    cp "$OTHER" ./-o.ckpt
    $PY "$REPO/tests/oracle/stat_oracle.py" expect "$LENET" --hist 4 >expect.json
    "$STAT" --json --hist=4 -- -m.ckpt >got.json
    $PY "$REPO/tests/oracle/stat_oracle.py" compare expect.json got.json
    run "$DIFF" -q -- -m.ckpt -n.ckpt
    [ "$status" -eq 0 ]
    run "$DIFF" -q -- -m.ckpt -o.ckpt
    [ "$status" -eq 1 ]
    "$CONVERT" -q -- -m.ckpt -out.safetensors
    $PY "$REPO/tests/oracle/convert_oracle.py" compare "$LENET" "$T/-out.safetensors"
    # after --, an option's spelling is a path too
    run "$STAT" -- -m.ckpt --json
    [ "$status" -eq 1 ] && [ "$output" = "ckptfs-stat: -m.ckpt: no tensor --json" ] || false
    # without --, each is refused as an option
    usage_error "ckptfs-stat: bad option -m.ckpt; $U_STAT" "$STAT" -m.ckpt
    usage_error "ckptfs-diff: bad option -m.ckpt; $U_DIFF" "$DIFF" -m.ckpt -n.ckpt
    usage_error "ckptfs-convert: bad option -m.ckpt; $U_CONVERT" "$CONVERT" -m.ckpt x.ckpt
    [ ! -e x.ckpt ]
}

@test "usage errors: what is wrong, then the usage, in one line; the first bad word ends the reading" {
    usage_error "ckptfs-stat: no MODEL given; $U_STAT" "$STAT"
    usage_error "ckptfs-stat: bad option --bogus; $U_STAT" "$STAT" --bogus "$LENET"
    usage_error "ckptfs-stat: bad option --bogus; $U_STAT" "$STAT" "$LENET" --bogus --help
    usage_error "ckptfs-stat: bad option -o tmp_max=0; $U_STAT" "$STAT" -o tmp_max=0 "$LENET"
    usage_error "ckptfs-stat: bad option -o nosuch=1; $U_STAT" "$STAT" -o nosuch=1 "$LENET"
    usage_error "ckptfs-stat: bad option -o; $U_STAT" "$STAT" "$LENET" -o
    usage_error "ckptfs-stat: bad option -j 0; $U_STAT" "$STAT" -j 0 "$LENET"
    usage_error "ckptfs-stat: bad option --hist=0; $U_STAT" "$STAT" --hist=0 "$LENET"
    usage_error "ckptfs-diff: no A and B given; $U_DIFF" "$DIFF"
    usage_error "ckptfs-diff: no B given; $U_DIFF" "$DIFF" "$LENET"
    usage_error "ckptfs-diff: no B given; $U_DIFF" "$DIFF" -- "$LENET"
    # after A and B, TENSOR patterns: one that selects nothing is trouble, exit 2
    usage_error "ckptfs-diff: $LENET, $LENET: no tensor C" "$DIFF" "$LENET" "$LENET" C D
    usage_error "ckptfs-diff: $LENET, $LENET: no tensor -q" "$DIFF" -- "$LENET" "$LENET" -q
    usage_error "ckptfs-diff: bad option --hist; $U_DIFF" "$DIFF" --hist "$LENET" "$LENET"
    usage_error "ckptfs-diff: bad option -jx; $U_DIFF" "$DIFF" -jx "$LENET" "$LENET"
    usage_error "ckptfs-convert: no IN and OUT given; $U_CONVERT" "$CONVERT"
    usage_error "ckptfs-convert: no OUT given; $U_CONVERT" "$CONVERT" "$LENET"
    usage_error "ckptfs-convert: an argument too many: extra; $U_CONVERT" \
        "$CONVERT" "$LENET" x.ckpt extra
    usage_error "ckptfs-convert: bad option --to onnx; $U_CONVERT" \
        "$CONVERT" --to onnx "$LENET" x.ckpt
    usage_error "ckptfs-convert: bad option -o enc_mode=ROT13; $U_CONVERT" \
        "$CONVERT" -o enc_mode=ROT13 "$LENET" x.ckpt
    usage_error "ckptfs-convert: bad option --json; $U_CONVERT" "$CONVERT" --json "$LENET" x.ckpt
    [ ! -e x.ckpt ]
}

@test "--help anywhere before a bad word: the usage on stdout, exit 0, nothing else done" {
    for tool in "$STAT" "$DIFF" "$CONVERT"; do
        run "$tool" "$LENET" --help x.ckpt
        [ "$status" -eq 0 ]
        [[ ${lines[0]} == "usage: $(basename "$tool") "* ]]
        "$tool" "$LENET" --help 2>err >/dev/null
        [ ! -s err ]
    done
    [ ! -e x.ckpt ]
}
