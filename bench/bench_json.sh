#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# ckptfs benchmark of the JSON libraries that could parse safetensors
# headers (jansson, json-c, cJSON: Debian's libjansson-dev, libjson-c-dev,
# libcjson-dev), and a probe of how each treats hostile headers.
#
#   bench/bench_json.sh   (env: REPS=5 TENSORS=100000 BIG_BYTES=99900000
#                          REPS_BIG=3 SEED=1; BIG_BYTES=0 skips the big one)
#
# Built here with cc and pkg-config, apart from the project's Makefile: the
# libraries are a candidate's, not ckptfs's.  bench_json.c is built once per
# library, as jansson and json-c export the same symbol names.
# 1. a header of TENSORS tensors, and one of about BIG_BYTES bytes (the
#    reference implementation refuses headers over 100 000 000 bytes): per
#    library, the median of parse, walk (every dtype, shape, data_offsets
#    read and type-checked) and free, and the memory the document holds;
# 2. the answers to hostile inputs (a-g), merged by test.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-5}
REPS_BIG=${REPS_BIG:-3}
TENSORS=${TENSORS:-100000}
BIG_BYTES=${BIG_BYTES:-99900000}
SEED=${SEED:-1}
PY=/usr/bin/python3
LIBS=(JANSSON:jansson JSONC:json-c CJSON:libcjson)

for l in "${LIBS[@]}"; do
    if ! pkg-config --exists "${l#*:}"; then
        echo "missing ${l#*:}: apt-get install libjansson-dev libjson-c-dev libcjson-dev pkg-config" >&2
        exit 1
    fi
done

W=$(mktemp -d "${TMPDIR:-/tmp}/bench_json.XXXXXX")
trap 'rm -rf "$W"' EXIT

echo "## build"
for l in "${LIBS[@]}"; do
    cc -std=gnu11 -O2 -Wall -Wextra -Werror -DUSE_"${l%%:*}" \
        -o "$W/bench_json_${l%%:*}" bench/bench_json.c \
        $(pkg-config --cflags --libs "${l#*:}")
    echo "${l#*:} $(pkg-config --modversion "${l#*:}")"
done

# bench_all FILE REPS: one table, a row per library and flag set.
bench_all() {
    local l header=--header
    for l in "${LIBS[@]}"; do
        "$W/bench_json_${l%%:*}" bench "$1" "$2" $header
        header=
    done
}

echo "## 1. parse + walk + free"
$PY bench/gen_st_header.py "$W/h.json" --tensors "$TENSORS" --seed "$SEED"
bench_all "$W/h.json" "$REPS"
if [ "$BIG_BYTES" -gt 0 ]; then
    $PY bench/gen_st_header.py "$W/big.json" --tensors 1 \
        --target-bytes "$BIG_BYTES" --seed "$SEED"
    bench_all "$W/big.json" "$REPS_BIG"
fi

echo "## 2. hostile input"
for l in "${LIBS[@]}"; do
    "$W/bench_json_${l%%:*}" behave
done | sort -s -t'|' -k1,1n | awk -F'|' '
    $1 != last { printf "\n### %s\n", $2; last = $1 }
    { printf "- %s: %s\n", $3, substr($0, length($1 $2 $3) + 4) }'
