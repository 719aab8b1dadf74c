#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# PyTorch torch.save files: everything measured side by side in one run and
# reported as ratios (the machine is shared and noisy); each timing is the
# median of REPS runs.  The files are written by Debian's torch (1.13).
#
#   bench/bench_pytorch.sh [BUILD]    (env: REPS=3 TENSORS=256 SMALL_MIB=64 BIG_GIB=4)
#
# 1. mount time, 64 MiB against 4 GiB of the same tensor count (target
#    < 1.5), and the daemon's peak RSS;
# 2. the first read of every `out` through the daemon against `cat` of the
#    file and against torch.load of it (Debian's 1.13, weights_only, in the
#    same Python: the load alone, not the import);
# 3. saves of the 4 GiB file: one tensor's values edited (patched in place),
#    and one tensor renamed (the file laid out again, ZIP64 offsets), each
#    against `cp` of the file and `sync -f`; torch loads the renamed file.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=$(realpath "${1:-build}")
CKPTFS=$BUILD/ckptfs
REPS=${REPS:-3}
TENSORS=${TENSORS:-256}
SMALL_MIB=${SMALL_MIB:-64}
BIG_GIB=${BIG_GIB:-4}
PY=/usr/bin/python3
W=$(mktemp -d "${BENCH_DIR:-/var/tmp}/ckptfs-bench.XXXXXX")
M=$W/m
PIDS=()
. bench/bench_lib.sh
trap cleanup_mounts EXIT
mkdir -p "$M"

# gen OUT BYTES: TENSORS float32 tensors of BYTES in all, as torch.save writes them
gen() {
    $PY - "$1" "$2" "$TENSORS" <<'EOF'
import collections, sys, torch
out, size, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
each = size // n // 4
torch.save(collections.OrderedDict(
    (f"layers.{i}.weight", torch.full((each,), float(i))) for i in range(n)), out)
EOF
}

echo "# generating $TENSORS tensors in $SMALL_MIB MiB and $BIG_GIB GiB (torch $($PY -c 'import torch; print(torch.__version__)'))"
gen "$W/small.pt" $((SMALL_MIB << 20))
gen "$W/big.pt" $((BIG_GIB << 30))
cat "$W/small.pt" "$W/big.pt" >/dev/null # warm the page cache

echo "## 1. mount time and daemon memory"
for f in small big; do
    : >"$W/$f.times"
    for _ in $(seq "$REPS"); do
        mnt ro "$W/$f.pt"
        echo "$T_MOUNT" >>"$W/$f.times"
        [ "$f" = small ] || hwm=$(hwm_kib "$PID")
        umnt
    done
done
ts=$(median <"$W/small.times")
tb=$(median <"$W/big.times")
echo "mount $SMALL_MIB MiB: ${ts}s   mount $BIG_GIB GiB: ${tb}s   ratio: $(ratio "$tb" "$ts")  (target < 1.5)   daemon VmHWM after mount: ${hwm} KiB"

echo "## 2. first read of every out ($BIG_GIB GiB) against cat of the file and torch.load"
: >"$W/read.times"
: >"$W/cat.times"
: >"$W/load.times"
for _ in $(seq "$REPS"); do
    mnt ro "$W/big.pt"
    timed cat "$M"/*/out >>"$W/read.times"
    umnt
    timed cat "$W/big.pt" >>"$W/cat.times"
    $PY - "$W/big.pt" >>"$W/load.times" <<'EOF'
import sys, time, torch
t0 = time.monotonic()
sd = torch.load(sys.argv[1], weights_only=True)
print(f"{time.monotonic() - t0:.6f}")
EOF
done
tr=$(median <"$W/read.times")
tc=$(median <"$W/cat.times")
tl=$(median <"$W/load.times")
gb() { awk -v b=$((BIG_GIB << 30)) -v t="$1" 'BEGIN {printf "%.2f GB/s", b / t / 1e9}'; }
echo "read every out: ${tr}s ($(gb "$tr"))   cat of the file: ${tc}s ($(gb "$tc"))   torch.load: ${tl}s ($(gb "$tl"))"
echo "read / cat: $(ratio "$tr" "$tc") (time)   read / torch.load: $(ratio "$tr" "$tl") (time)"

echo "## 3. saves of the $BIG_GIB GiB file"
: >"$W/patch.times"
: >"$W/layout.times"
: >"$W/cp.times"
# fresh_mount: a copy of the big file, made durable (its writeback is not
# the save's), mounted writable: each save measured is a mount's first
fresh_mount() {
    cp "$W/big.pt" "$W/e.pt"
    sync -f "$W/e.pt"
    mnt rw "$W/e.pt"
}
for _ in $(seq "$REPS"); do
    fresh_mount
    printf 'abcd' | dd of="$M/layers.7.weight/out" bs=4 seek=3 conv=notrunc status=none
    timed touch "$M/snapshot_done" >>"$W/patch.times"
    umnt
    fresh_mount
    printf 'abcd' | dd of="$M/layers.7.weight/out" bs=4 seek=3 conv=notrunc status=none
    mv "$M/layers.9.weight" "$M/renamed"
    timed touch "$M/snapshot_done" >>"$W/layout.times"
    umnt
    t0=$(now)
    cp "$W/big.pt" "$W/c.pt"
    sync -f "$W/c.pt"
    awk -v a="$t0" -v b="$(now)" 'BEGIN {printf "%.6f\n", b - a}' >>"$W/cp.times"
    rm -f "$W/c.pt"
done
$PY - "$W/e.pt" <<'EOF'
import sys, torch
sd = torch.load(sys.argv[1], weights_only=True)
assert "renamed" in sd and "layers.9.weight" not in sd and len(sd) > 9
assert sd["layers.7.weight"].numpy().tobytes()[12:16] == b"abcd"
print(f"torch loads the saved file: {len(sd)} tensors")
EOF
tp=$(median <"$W/patch.times")
tlay=$(median <"$W/layout.times")
tcp=$(median <"$W/cp.times")
echo "one value edited (patched): ${tp}s   one tensor renamed (laid out again): ${tlay}s   cp + sync -f: ${tcp}s"
echo "patched / cp: $(ratio "$tp" "$tcp") (time)   laid out / cp: $(ratio "$tlay" "$tcp") (time)"
