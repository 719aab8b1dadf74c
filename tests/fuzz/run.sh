#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run.sh FUZZER RUNS [FORMAT...]: fuzz the reader and writer of each format
# (all by default): ckpt, onnx, mindir, safetensors, safetensors-set (seeded
# by its regression inputs only: the index; the fuzzer writes the shards);
# the envelopes ckpt.enc, mindir.enc, ckpt.zst; the strategy file of a
# distributed checkpoint, an iteration directory's metadata.json, a OneFlow
# snapshot's pickled_data; and saved-index, the file of a saved .ckpt index
# (its body: the fuzzer frames it again), seeded with the indexes
# ckptfs-dump, from FUZZER's directory, saves for the fuzzer's own checkpoint
# and for the fixtures, and saved-index-onnx, the same for an ONNX model's
# (its message layout); pytorch, a torch.save file (its ZIP records and its
# pickle); dcp, a PyTorch Distributed Checkpoint's .metadata, beside the
# data files of one the test oracle writes.
#
# Each format, in two steps, one TAP line:
#  1. replay: every input in tests/fuzz/regress/FORMAT (each found a defect
#     once) and in tests/fuzz/corpus/FORMAT (the coverage corpus: a longer
#     run's inputs, minimized by libFuzzer's -merge=1; `make fuzz-corpus`
#     makes it again) is run once, whole;
#  2. a fresh campaign, fixed seed (-seed=1) and RUNS inputs (counting the
#     corpus's own first pass), from a corpus seeded with the real fixtures,
#     the generated seeds below, and both of those folders (copied to a
#     temporary directory, never into the repository).
# Envelope seeds are the fixtures encrypted by the test oracle (key
# "0123456789ABCDEF", small blocks, every mode) or compressed by zstd
# (plain, and seekable with small frames).
#
# Knobs (the environment): FUZZ_SECONDS=S fuzzes each format for S seconds
# instead of RUNS inputs (no longer deterministic); FUZZ_JOBS=N fuzzes N
# formats side by side (1 by default: on the 2-core machine two took longer
# than one after the other, the runs are page-fault bound); FUZZ_MERGE=1
# then minimizes each format's campaign into tests/fuzz/corpus/FORMAT (the
# inputs that add coverage beyond the fixtures, the generated seeds and the
# regression inputs, which are seeded anyway).  `make fuzz` and `make
# fuzz-corpus` pass them (docs/guide.md, "Fuzzing").
# To replay a crash file: CKPTFS_FUZZ_FORMAT=FORMAT FUZZER FILE
set -u
cd "$(dirname "$0")/../.."
fuzzer=$1
runs=${2:-200000}
shift $(($# < 2 ? $# : 2))
[ $# -gt 0 ] || set -- ckpt onnx mindir safetensors safetensors-set ckpt.enc mindir.enc ckpt.zst \
    strategy iteration oneflow saved-index saved-index-onnx pytorch dcp map
build=$(dirname "$fuzzer") # ckptfs-dump, beside it, writes the saved-index seeds
# Each input is written to a file in $TMPDIR (decoded typed fields to another):
# on tmpfs that is free, on a disk it takes most of the run.
if [ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then
    export TMPDIR=/dev/shm
fi

seeds() { # seeds FORMAT: the fixture files that seed its corpus
    case $1 in
    ckpt) echo ../shared/fixtures/mindspore/*.ckpt \
        ../shared/fixtures/oneflow/legacy_v2_java_mlp_adam/dense1-weight/meta ;;
    onnx) echo ../shared/fixtures/onnx/*.onnx ;;
    safetensors) echo ../shared/fixtures/safetensors/*/*.safetensors ;;
    mindir | mindir.enc) echo ../shared/fixtures/mindspore/*.mindir ;;
    strategy) echo ../shared/fixtures/mindspore_distributed/*/*strategy*.ckpt ;;
    iteration) ;; # seeded by iteration_seeds
    oneflow) echo ../shared/fixtures/oneflow/new_pickled_3x3_i3o3_conv2d_params/pickled_data ;;
    pytorch) echo ../shared/fixtures/pytorch/candle_*.pt* \
        ../shared/fixtures/pytorch/torchtune_tiny_state_dict_with_one_key.pt ;;
    map) echo maps/*.map ;;
    ckpt.*) echo ../shared/fixtures/mindspore/goldenstick_test_*.ckpt \
        ../shared/fixtures/mindspore/mindscience_SciAI_example_net_10000.ckpt ;;
    esac
}

# wrap FORMAT FILE OUT-PREFIX: the envelope seeds made from one fixture.
oracle="/usr/bin/python3 tests/oracle/envelope_oracle.py"
wrap() {
    case $1 in
    *.enc)
        cp "$2" "$3" # the real encrypted MindIR fixture has this key
        for mode in AES-GCM AES-CBC legacy; do
            $oracle encrypt --mode $mode --key-hex 30313233343536373839414243444546 \
                --block-size 256 "$2" "$3-$mode" || return 1
        done ;;
    *.zst)
        zstd -q -c "$2" >"$3-plain.zst" &&
            $oracle zstd-seekable "$2" "$3-seekable.zst" --frame-size 256 --checksums ;;
    *) cp "$2" "$3" ;;
    esac
}

# strategy_seeds DIR: strategies, written by the test oracle, that fit the
# fuzzer's four rank checkpoints (tensors w [4,6], b [2,4,2], v [8], s [],
# e [3,0]; see fuzz_ckpt.c): each way of cutting them, and optimizer shards.
strategy_seeds() {
    /usr/bin/python3 - "$1" <<'PYEND'
import os, sys
sys.path.insert(0, "tests/oracle")
from dist_oracle import strategy_bytes
out = sys.argv[1]
sets = {
    "dim0": [("w", [4], [0, -1], 0, 0), ("v", [4], [0], 0, 0)],
    "grid": [("w", [2, 2], [1, 0], 0, 0), ("b", [2, 2], [-1, 1, 0], 0, 0),
             ("v", [2, 2], [0], 0, 0), ("s", [2, 2], [], 0, 0)],
    "inner": [("b", [4], [-1, -1, 0], 0, 0), ("e", [4], [-1, 0], 0, 0)],
    "opt": [("w", [2, 2], [0, -1], 2, 2), ("v", [2, 2], [-1], 1, -1),
            ("b", [2, 2], [-1, 0, -1], 2, 2)],
}
for name, params in sets.items():
    with open(os.path.join(out, "gen-" + name), "wb") as f:
        f.write(strategy_bytes(params))
PYEND
}

# iteration_seeds DIR: metadata.json files that fit the fuzzer's two shard
# files (w [2,3] F32, v [4] I32, s [] F16 in model-000000{0,1}-0000002):
# w cut along dim 0 or dim 1 or not at all, v cut or not.
iteration_seeds() {
    /usr/bin/python3 - "$1" <<'PYEND'
import json, os, sys
out = sys.argv[1]
def meta(params):
    sdm, sd = {}, {}
    for name, full, frag, local in params:
        n = 1
        for f in frag:
            n *= f
        sdm[name] = {"properties": {"dtype": "Float32"}, "global_shape": full,
                     "axis_fragmentations": frag,
                     "layout": {"device_matrix": [2], "tensor_map": [0], "interleaved_parallel": False,
                                "alias_name": ["tp"], "rank_list": [0, 1]},
                     "chunk": [{"global_offset": [s], "local_shape": local} for s in range(n)]}
        for s in range(n):
            sd[str((name, (s,)))] = [{"file_name": "model-%07d-0000002.safetensors" % (s % 2),
                                      "storage_rank": s % 2, "rank_group": [s % 2]}]
    return {"state_dict_metadata": sdm, "storage_data": sd}
seeds = {
    "rows": [("w", [4, 3], [2, 1], [2, 3]), ("v", [8], [2], [4]), ("s", [], [], [])],
    "cols": [("w", [2, 6], [1, 2], [2, 3]), ("v", [4], [1], [4]), ("s", [], [], [])],
    "whole": [("w", [2, 3], [1, 1], [2, 3]), ("v", [4], [1], [4]), ("s", [], [], [])],
}
for name, params in seeds.items():
    with open(os.path.join(out, "gen-" + name), "w") as f:
        json.dump(meta(params), f, indent=4)
PYEND
}

# oneflow_seeds DIR: pickled_data files of Python's pickler, protocols 2 to
# 5, for the fuzzer's tensor_5 and tensor_6 (the oracle's stand-ins for
# OneFlow's classes give the globals OneFlow's pickle names).
oneflow_seeds() {
    /usr/bin/python3 - "$1" <<'PYEND'
import collections, os, pickle, sys
sys.path.insert(0, "tests/oracle")
from oneflow_oracle import Parameter, Tensor
for p in range(2, 6):
    data = collections.OrderedDict([("conv.weight", Parameter("tensor_5")),
                                    ("a/b", Tensor("tensor_6"))])
    data._metadata = collections.OrderedDict([("", {"version": 1})])
    with open(os.path.join(sys.argv[1], "gen-p%d" % p), "wb") as f:
        pickle.dump({"protocol_version": 1, "data": data}, f, protocol=p)
PYEND
}

# index_bodies DIR MODEL...: the index ckptfs-dump saves for each MODEL
# that keeps one, into DIR, named after its model (the store names them by
# the hash of a temporary path), stripped of the header and the checksum
# that the fuzzer puts back around every input; prints how many.
index_bodies() {
    local tmp f ix n=0 out=$1
    shift
    tmp=$(mktemp -d) || return 1
    for f in "$@"; do
        rm -rf "$tmp/index"
        "$build/ckptfs-dump" -o index_dir="$tmp/index" "$f" >/dev/null 2>&1 || continue
        for ix in "$tmp"/index/*.ckidx; do
            [ -s "$ix" ] || continue
            tail -c +25 "$ix" | head -c -32 >"$out/gen-$(basename "$f")"
            n=$((n + 1))
        done
    done
    rm -rf "$tmp"
    echo "$n"
}
# saved_index_seeds DIR: those of the fuzzer's own checkpoint
# (CKPTFS_FUZZ_MODEL_TO, see fuzz_ckpt.c) and of the fixture checkpoints.
saved_index_seeds() {
    local tmp n
    tmp=$(mktemp -d) || return 1
    if ! CKPTFS_FUZZ_FORMAT=saved-index CKPTFS_FUZZ_MODEL_TO="$tmp/fuzz.ckpt" "$fuzzer"; then
        rm -rf "$tmp"
        return 1
    fi
    n=$(index_bodies "$1" "$tmp/fuzz.ckpt" ../shared/fixtures/mindspore/*.ckpt)
    rm -rf "$tmp"
    [ "$n" -gt 1 ] # the fuzzer's own, and at least one fixture's
}

# saved-index-onnx: the indexes ckptfs-dump saves for the ONNX fixtures,
# decoded against a copy of one of them (CKPTFS_FUZZ_ONNX).
export CKPTFS_FUZZ_ONNX=../shared/fixtures/onnx/dtypes_burn.onnx
onnx_index_seeds() { [ "$(index_bodies "$1" ../shared/fixtures/onnx/*.onnx)" -gt 1 ]; }

# dcp: the input is .metadata, beside the data files of a checkpoint the
# test oracle writes (tests/oracle/dcp_oracle.py, case mixed: tensors cut
# by rows and by a grid, a strided one, values saved as bytes, over four
# ranks), which seeds the corpus with its own.
dcp_dir=$(mktemp -d)
export CKPTFS_FUZZ_DCP=$dcp_dir/mixed
dcp_seeds() {
    /usr/bin/python3 tests/oracle/dcp_oracle.py gen "$CKPTFS_FUZZ_DCP" --case mixed &&
        cp "$CKPTFS_FUZZ_DCP/.metadata" "$1/gen-mixed"
}

# fuzz_one FORMAT: replay FORMAT's regression and corpus inputs, then seed
# a corpus and fuzz it; one TAP line.
fuzz_one() {
    local format=$1 seeds corpus n=0 t0=$SECONDS f what seeded=1 kept replayed limit
    local kept_dir=tests/fuzz/corpus/$format
    seeds=$(mktemp -d)
    corpus=$(mktemp -d)
    case $format in
    strategy) strategy_seeds "$seeds" ;;
    iteration) iteration_seeds "$seeds" ;;
    oneflow) oneflow_seeds "$seeds" ;;
    saved-index) saved_index_seeds "$seeds" ;;
    saved-index-onnx) onnx_index_seeds "$seeds" ;;
    dcp) dcp_seeds "$seeds" ;;
    esac || seeded=0
    for f in $(seeds "$format") tests/fuzz/regress/"$format"/*; do
        [ -s "$f" ] || continue
        n=$((n + 1))
        case $f in
        tests/fuzz/regress/*) cp "$f" "$seeds/$n-$(basename "$f")" ;;
        *) wrap "$format" "$f" "$seeds/$n-$(basename "$f")" || seeded=0 ;;
        esac
    done
    cp -p "$seeds"/. "$corpus"/ -r
    for f in "$kept_dir"/*; do
        [ -s "$f" ] && cp "$f" "$corpus/c-$(basename "$f")"
    done
    # 1. the replay, each file whole (no -max_len): the regression inputs
    # and the kept corpus, in one process.
    set -- $(ls tests/fuzz/regress/"$format"/* "$kept_dir"/* 2>/dev/null)
    replayed=$#
    if [ "$seeded" = 0 ]; then
        echo "not ok - fuzz: the $format corpus could not be seeded"
        rm -rf "$seeds" "$corpus"
        return
    fi
    if [ $# -gt 0 ] && ! CKPTFS_FUZZ_FORMAT=$format "$fuzzer" -timeout=10 -rss_limit_mb=1024 \
        "$@" >"$corpus.log" 2>&1; then
        tail -40 "$corpus.log"
        echo "not ok - fuzz: the $format reader or writer failed on a regression or corpus input (log above)"
        rm -rf "$seeds" "$corpus" "$corpus.log"
        return
    fi
    # 2. the campaign
    if [ -n "${FUZZ_SECONDS:-}" ]; then
        limit="-max_total_time=$FUZZ_SECONDS"
    else
        limit="-runs=$runs"
    fi
    if CKPTFS_FUZZ_FORMAT=$format "$fuzzer" -seed=1 "$limit" -max_len=4096 -timeout=10 \
        -rss_limit_mb=1024 "$corpus" >"$corpus.log" 2>&1; then
        case $format in
        strategy) what="every accepted merge of its four ranks read back whole (no writer)" ;;
        iteration) what="every accepted metadata.json's tensors read back whole (no writer)" ;;
        oneflow) what="every accepted pickled_data's tensors read back whole (no writer)" ;;
        dcp) what="every accepted .metadata's tensors assembled and read back whole (no writer)" ;;
        saved-index) what="every input framed again refused in one line, or finalized and its tensors read through their CRC checks (no writer)" ;;
        saved-index-onnx) what="every input framed again refused in one line, or finalized, its tensors read through their CRC checks and its layout checked (no writer)" ;;
        *.*) what="every accepted input saved again and reopened as the same tensors" ;;
        *) what="every accepted input re-encoded to itself" ;;
        esac
        runs_done=$(grep -o '^Done [0-9]* runs' "$corpus.log" | grep -o '[0-9]*' | tail -1)
        kept=
        if [ "${FUZZ_MERGE:-}" = 1 ]; then
            kept=$(merge_into "$format" "$seeds" "$corpus") || {
                echo "not ok - fuzz: the $format corpus could not be minimized into $kept_dir"
                rm -rf "$seeds" "$corpus" "$corpus.log"
                return
            }
            kept=", $kept inputs kept in $kept_dir"
        fi
        echo "ok - fuzz: $replayed regression and corpus inputs replayed whole, then ${runs_done:-$runs} inputs through the $format reader (and writer), no crash, $what ($(grep -o 'cov: [0-9]*' "$corpus.log" | tail -1)$kept, $((SECONDS - t0)) s)"
    else
        tail -40 "$corpus.log"
        echo "not ok - fuzz: the $format reader or writer failed on an input (log above; crash file in $(pwd))"
    fi
    rm -rf "$seeds" "$corpus" "$corpus.log"
}

# merge_into FORMAT SEEDS CORPUS: tests/fuzz/corpus/FORMAT made again: the
# inputs of CORPUS (the campaign's, the old kept ones among them) that add
# coverage beyond SEEDS (the fixtures, the generated seeds, the regression
# inputs: make test seeds them anyway), by libFuzzer's -merge=1; prints how
# many.
merge_into() {
    local format=$1 seeds=$2 corpus=$3 min f n=0
    min=$(mktemp -d) || return 1
    for f in "$seeds"/*; do cp "$f" "$min/seed-$(basename "$f")"; done
    if ! CKPTFS_FUZZ_FORMAT=$format "$fuzzer" -merge=1 -max_len=4096 -timeout=10 \
        -rss_limit_mb=1024 "$min" "$corpus" >"$min.log" 2>&1; then
        tail -20 "$min.log" >&2
        rm -rf "$min" "$min.log"
        return 1
    fi
    rm -f "$min"/seed-*
    rm -rf "tests/fuzz/corpus/$format"
    mkdir -p "tests/fuzz/corpus/$format"
    for f in "$min"/*; do
        [ -f "$f" ] || continue
        cp "$f" "tests/fuzz/corpus/$format/"
        n=$((n + 1))
    done
    rm -rf "$min" "$min.log"
    echo "$n"
}

# One format after another by default (see FUZZ_JOBS above).  A format that
# printed no "ok" line failed.  Side by side, each format's line is printed
# whole once it is done, in the order they end.
failed=0
outs=$(mktemp -d)
jobs_max=${FUZZ_JOBS:-1}
i=0
for format in "$@"; do
    i=$((i + 1))
    if [ "$jobs_max" -le 1 ]; then
        fuzz_one "$format" 2>&1 | tee "$outs/$i"
    else
        while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n; done
        (fuzz_one "$format" >"$outs/$i" 2>&1; cat "$outs/$i") &
    fi
done
wait
for f in "$outs"/*; do
    grep -q '^ok - ' "$f" && ! grep -q '^not ok' "$f" || failed=1
done
[ "$i" -gt 0 ] || failed=1
rm -rf "$outs"
rm -rf "$dcp_dir"
exit "$failed"
