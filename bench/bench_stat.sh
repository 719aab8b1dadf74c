#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# ckptfs-stat at the speed of reading its model: for each element type, the
# time of `ckptfs-stat -j1` and `-j2` over a model in the page cache against
# `cat` of the same file, for BUILD and, side by side in the same run, for
# an OLD build (an older commit, say).  Each timing is the median of REPS
# rounds, the machine being shared and noisy.
#
#   bench/bench_stat.sh [BUILD [OLD]]   (env: REPS=5 MIB=1024 NUMPY=0 SEED=1
#                                        TYPES="F32 F16 BF16 I8 I32" (and F64)
#                                        BENCH_DIR=/var/tmp)
#
# Each model is a safetensors file of MIB MiB: four large tensors holding
# nearly all of it plus four small ones, N(0, 0.02) values (integers: uniform
# over the type), with one element in 2^20 NaN, one in 2^22 +Inf and -Inf,
# and one in 2^10 zero, so that the statistics' slow path (a block holding a
# non-finite value) is taken as often as in a model with a few bad values.
# Beside each wall-clock time, the CPU time (user + system) of the same
# runs, which the other loads of a shared machine disturb less.
# With NUMPY=1, numpy's time for the same numbers (min, max, mean and std in
# float64 of the finite values, NaN/Inf/zero counts) over the file as a
# memory map, in the same interpreter (its start-up not counted).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=$(realpath "${1:-build}")
OLD=${2:+$(realpath "$2")}
REPS=${REPS:-5}
MIB=${MIB:-1024}
TYPES=${TYPES:-F32 F16 BF16 I8 I32}
NUMPY=${NUMPY:-0}
SEED=${SEED:-1}
PY=/usr/bin/python3

base=${BENCH_DIR:-/var/tmp}
need_kib=$(( (MIB + 64) * 1024 ))
avail_kib=$(df -Pk "$base" | awk 'NR == 2 {print $4}')
if [ "$avail_kib" -lt "$need_kib" ]; then
    echo "# skipped: $((avail_kib >> 10)) MiB free in $base, the benchmark needs $MIB MiB"
    exit 0
fi
W=$(mktemp -d "$base/ckptfs-bench-stat.XXXXXX")
trap 'rm -rf "$W"' EXIT
. bench/bench_lib.sh

# wall_cpu CMD...: "WALL CPU" seconds of CMD (its output dropped).
wall_cpu() {
    local TIMEFORMAT='%3R %3U %3S' # bash's: to the millisecond
    { time "$@" >/dev/null; } 2>"$W/time"
    awk '{printf "%.3f %.3f\n", $1, $2 + $3}' "$W/time"
}
# col N: column N of stdin's lines
col() { awk -v n="$1" '{print $n}'; }

# gen TYPE OUT: the model described above, written 16 MiB at a time.
gen() {
    $PY - "$1" "$2" "$((MIB << 20))" "$SEED" <<'EOF'
import json, sys
import numpy as np
kind, out, size, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
dt = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<f4", "I8": "i1", "I32": "<i4"}[kind]
item = 2 if kind == "BF16" else np.dtype(dt).itemsize
rng = np.random.default_rng(seed)
small = [4096 + 1, 1000, 17, 1]
big = (size - sum(small) * item) // item // 4
counts = [big] * 4 + small
header, off = {}, 0
for i, n in enumerate(counts):
    name = "layer.%d.weight" % i if i < 4 else "small.%d" % i
    header[name] = {"dtype": kind, "shape": [n], "data_offsets": [off, off + n * item]}
    off += n * item
h = json.dumps(header).encode()
h += b" " * (-len(h) % 8)

def piece(n):
    if kind[0] == "I":
        info = np.iinfo(np.dtype(dt))
        return rng.integers(info.min, info.max, size=n, dtype=np.dtype(dt), endpoint=True)
    v = rng.standard_normal(n, dtype=np.float32) * np.float32(0.02)
    for every, x in ((1 << 20, np.nan), (1 << 22, np.inf), (1 << 22, -np.inf), (1 << 10, 0.0)):
        v[rng.integers(0, n, size=max(1, n // every))] = x
    if kind == "BF16":
        return (v.view("<u4") >> 16).astype("<u2")
    return v.astype(dt)

with open(out, "wb") as f:
    f.write(len(h).to_bytes(8, "little") + h)
    for n in counts:
        while n:
            k = min(n, (16 << 20) // item)
            f.write(piece(k).tobytes())
            n -= k
EOF
}

# numpy_time TYPE FILE: seconds numpy takes for the same numbers.
numpy_time() {
    $PY - "$1" "$2" <<'EOF'
import json, sys, time
import numpy as np
kind, path = sys.argv[1], sys.argv[2]
t0 = time.perf_counter()
with open(path, "rb") as f:
    hlen = int.from_bytes(f.read(8), "little")
    header = json.loads(f.read(hlen))
raw = np.memmap(path, dtype="u1", mode="r")
for name, e in header.items():
    a, b = e["data_offsets"]
    x = raw[8 + hlen + a:8 + hlen + b]
    if kind == "BF16":
        x = (x.view("<u2").astype("<u4") << 16).view("<f4")
    else:
        x = x.view({"F64": "<f8", "F32": "<f4", "F16": "<f2", "I8": "i1", "I32": "<i4"}[kind])
    counts = None
    if x.dtype.kind == "f":
        counts = (np.isnan(x).sum(), np.isposinf(x).sum(), np.isneginf(x).sum())
        x = x[np.isfinite(x)]
    x64 = x.astype(np.float64)
    _ = (counts, (x == 0).sum(), x.min(), x.max(), x64.mean(), x64.std())
print("%.6f" % (time.perf_counter() - t0))
EOF
}

builds=("$BUILD")
[ -n "$OLD" ] && builds+=("$OLD")
echo "# $(nproc) CPUs, $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo);" \
     "load average $(cut -d' ' -f1-3 /proc/loadavg); $REPS rounds, medians (s)"
echo "# new: $BUILD${OLD:+; old: $OLD}"
for k in $TYPES; do
    f=$W/$k.safetensors
    gen "$k" "$f"
    : >"$W/cat"
    : >"$W/numpy"
    for i in "${!builds[@]}"; do : >"$W/j1.$i"; : >"$W/j2.$i"; done
    for _ in $(seq "$REPS"); do
        cat "$f" >/dev/null # into the page cache
        timed cat "$f" >>"$W/cat"
        for i in "${!builds[@]}"; do
            wall_cpu "${builds[i]}/ckptfs-stat" -j1 "$f" >>"$W/j1.$i"
            wall_cpu "${builds[i]}/ckptfs-stat" -j2 "$f" >>"$W/j2.$i"
        done
        [ "$NUMPY" = 1 ] && numpy_time "$k" "$f" >>"$W/numpy"
    done
    # Both builds must agree on the numbers (the table, bar the timing).
    if [ -n "$OLD" ] && ! cmp -s <("$BUILD/ckptfs-stat" "$f") <("$OLD/ckptfs-stat" "$f"); then
        echo "# $k: the two builds print different statistics:"
        diff <("$OLD/ckptfs-stat" "$f") <("$BUILD/ckptfs-stat" "$f") | head -8 || true
    fi
    C=$(median <"$W/cat")
    printf '%-5s %5d MiB  cat %6.3f' "$k" "$MIB" "$C"
    [ "$NUMPY" = 1 ] && printf '  numpy %6.3f' "$(median <"$W/numpy")"
    printf '\n'
    for i in "${!builds[@]}"; do
        J1=$(col 1 <"$W/j1.$i" | median)
        J2=$(col 1 <"$W/j2.$i" | median)
        printf '      %-5s  -j1 %6.3f (%5.2fx cat)  -j2 %6.3f (%5.2fx cat)  -j1/-j2 %4.2f' \
            "$([ "$i" = 0 ] && echo new || echo old)" "$J1" "$(ratio "$J1" "$C")" \
            "$J2" "$(ratio "$J2" "$C")" "$(ratio "$J1" "$J2")"
        printf '  cpu -j1 %6.3f -j2 %6.3f\n' "$(col 2 <"$W/j1.$i" | median)" \
            "$(col 2 <"$W/j2.$i" | median)"
    done
    rm "$f"
done
