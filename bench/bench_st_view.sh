#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# -o as=safetensors: numpy reading every tensor of the mounted view
# (np.fromfile at the header's data_offsets, one read per tensor) against the
# same on the file ckptfs-convert writes for the model, side by side in one
# run (the machine is shared and noisy); each timing is the median of REPS.
# The model is a .ckpt written by bench/gen_ckpt.py.
#
#   bench/bench_st_view.sh [BUILD]    (env: REPS=3 TENSORS=256 MIB=256 SHARD=)
#
# SHARD=64MB: the view is a sharded set (-o max_shard_size), read shard by
# shard through its index, against the set ckptfs-convert writes.
#
# view, first read:  a fresh mount each time, so every byte comes through the
#                    daemon (spliced from the .ckpt's extents);
# view, cached:      the same again on that mount (the kernel's page cache);
# tree's outs:       cat of every `out` of the same model mounted as a tree (a
#                    fresh mount each time): the daemon's own floor;
# file:              the converted file on disk (in the page cache: it was just
#                    written, as the .ckpt was, so both sides read memory);
# and the daemon's peak RSS (VmHWM) once it has served every byte: the
# header and a few words per tensor, whatever MIB is.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=$(realpath "${1:-build}")
CKPTFS=$BUILD/ckptfs
REPS=${REPS:-3}
TENSORS=${TENSORS:-256}
MIB=${MIB:-256}
PY=/usr/bin/python3
W=$(mktemp -d "${BENCH_DIR:-/var/tmp}/ckptfs-bench.XXXXXX")
M=$W/m
PIDS=()
. bench/bench_lib.sh
trap cleanup_mounts EXIT
mkdir -p "$M"

SHARD=${SHARD:-}
$PY bench/gen_ckpt.py "$W/model.ckpt" --size $((MIB << 20)) --count "$TENSORS"
if [ -n "$SHARD" ]; then
    mkdir "$W/conv"
    "$BUILD/ckptfs-convert" -q -o max_shard_size="$SHARD" "$W/model.ckpt" \
        "$W/conv/model.safetensors.index.json"
    VIEW_OPTS=ro,as=safetensors,max_shard_size=$SHARD
    FILE=$W/conv/model.safetensors.index.json VIEWED=$M/model.safetensors.index.json
else
    "$BUILD/ckptfs-convert" -q "$W/model.ckpt" "$W/conv.safetensors"
    VIEW_OPTS=ro,as=safetensors
    FILE=$W/conv.safetensors VIEWED=$M/model.safetensors
fi

# read_all FILE: seconds for numpy to read every tensor of FILE by its header
# (of a set's index: of each shard its weight map names)
read_all() {
    $PY - "$1" <<'EOF'
import json, os, struct, sys, time
import numpy as np
DT = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64,
      "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_,
      "BF16": np.uint16}


def read_file(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        header.pop("__metadata__", None)
        total = 0
        for h in header.values():
            b, e = h["data_offsets"]
            dt = np.dtype(DT[h["dtype"]])
            f.seek(8 + n + b)
            total += np.fromfile(f, dtype=dt, count=(e - b) // dt.itemsize).nbytes
    assert total == sum(h["data_offsets"][1] - h["data_offsets"][0] for h in header.values())
    return total


t0 = time.perf_counter()
path = sys.argv[1]
if path.endswith(".index.json"):
    with open(path) as f:
        index = json.load(f)
    shards = sorted(set(index["weight_map"].values()))
    total = sum(read_file(os.path.join(os.path.dirname(path), s)) for s in shards)
    assert total == index["metadata"]["total_size"]
else:
    read_file(path)
print(f"{time.perf_counter() - t0:.6f}")
EOF
}

first=() cached=() file=() tree=()
for _ in $(seq "$REPS"); do
    mnt "$VIEW_OPTS" "$W/model.ckpt"
    cmp -n 4096 "$VIEWED" "$FILE"   # the index, or the header's first bytes
    first+=("$(read_all "$VIEWED")")
    cached+=("$(read_all "$VIEWED")")
    hwm=$(hwm_kib "$PID")
    umnt
    file+=("$(read_all "$FILE")")
    mnt ro "$W/model.ckpt"
    tree+=("$(timed cat "$M"/*/out)")
    umnt
done
f=$(printf '%s\n' "${first[@]}" | median)
c=$(printf '%s\n' "${cached[@]}" | median)
d=$(printf '%s\n' "${file[@]}" | median)
o=$(printf '%s\n' "${tree[@]}" | median)
echo "numpy reading $TENSORS tensors, $MIB MiB${SHARD:+ in shards of $SHARD} (median of $REPS):"
echo "  view, first read  ${f} s   ratio to the file $(ratio "$f" "$d")"
echo "  view, cached      ${c} s   ratio to the file $(ratio "$c" "$d")"
echo "  tree's outs (cat) ${o} s   ratio to the file $(ratio "$o" "$d")"
echo "  converted file    ${d} s"
echo "  daemon VmHWM after serving it all: ${hwm} KiB"
