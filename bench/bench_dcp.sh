#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# PyTorch Distributed Checkpoint directories: everything measured side by
# side in one run and reported as ratios (the machine is shared and
# noisy); each timing is the median of REPS runs.  The checkpoint is
# written by the test oracle as PyTorch 2.x's FileSystemWriter writes one
# (tests/oracle/dcp_oracle.py, case big: 256x256 float32 tensors, each cut
# by rows over two ranks).
#
#   bench/bench_dcp.sh [BUILD]    (env: REPS=3 GIB=1)
#
# 1. mount time and the daemon's peak RSS;
# 2. the first read of every `out` through the daemon against `cat` of the
#    data files and against the assembly PyTorch's own tools do
#    (dcp_to_torch_save's work: torch.load of every chunk, placed into its
#    tensor; the oracle's, in the same Python, the load alone);
# 3. ckptfs-convert of the directory to one safetensors file against `cp`
#    of the data files.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=$(realpath "${1:-build}")
CKPTFS=$BUILD/ckptfs
REPS=${REPS:-3}
GIB=${GIB:-1}
PY=/usr/bin/python3
W=$(mktemp -d "${BENCH_DIR:-/var/tmp}/ckptfs-bench.XXXXXX")
M=$W/m
PIDS=()
. bench/bench_lib.sh
trap cleanup_mounts EXIT
mkdir -p "$M"

count=$((GIB * 4096)) # 256 KiB a tensor
echo "# generating a DCP checkpoint of $count tensors ($GIB GiB) over 2 ranks"
$PY tests/oracle/dcp_oracle.py gen "$W/d" --case big --count "$count"
cat "$W"/d/*.distcp >/dev/null # warm the page cache
bytes=$(cat "$W"/d/*.distcp | wc -c)

echo "## 1. mount time and daemon memory"
: >"$W/mount.times"
for _ in $(seq "$REPS"); do
    mnt ro "$W/d"
    echo "$T_MOUNT" >>"$W/mount.times"
    hwm=$(hwm_kib "$PID")
    umnt
done
echo "mount: $(median <"$W/mount.times")s for $count tensors ($((count * 2)) chunks)   daemon VmHWM after mount: ${hwm} KiB"

echo "## 2. first read of every out against cat of the data files and PyTorch-style assembly"
: >"$W/read.times"
: >"$W/cat.times"
: >"$W/load.times"
for _ in $(seq "$REPS"); do
    mnt ro "$W/d"
    timed cat "$M"/*/out >>"$W/read.times"
    umnt
    timed cat "$W"/d/*.distcp >>"$W/cat.times"
    $PY - "$W/d" >>"$W/load.times" <<'EOF'
import sys, time
sys.path.insert(0, "tests/oracle")
import dcp_oracle
t0 = time.monotonic()
dcp_oracle.assemble(sys.argv[1])
print(f"{time.monotonic() - t0:.6f}")
EOF
done
tr=$(median <"$W/read.times")
tc=$(median <"$W/cat.times")
tl=$(median <"$W/load.times")
gb() { awk -v b="$bytes" -v t="$1" 'BEGIN {printf "%.2f GB/s", b / t / 1e9}'; }
echo "read every out: ${tr}s ($(gb "$tr"))   cat of the data files: ${tc}s ($(gb "$tc"))   torch.load of every chunk, assembled: ${tl}s ($(gb "$tl"))"
echo "read / cat: $(ratio "$tr" "$tc") (time)   read / assembly: $(ratio "$tr" "$tl") (time)"

echo "## 3. ckptfs-convert to safetensors against cp of the data files"
: >"$W/convert.times"
: >"$W/cp.times"
for _ in $(seq "$REPS"); do
    timed "$BUILD/ckptfs-convert" "$W/d" "$W/x.safetensors" >>"$W/convert.times"
    rm -f "$W/x.safetensors"
    timed cp "$W"/d/__0_0.distcp "$W"/d/__1_0.distcp "$W/" >>"$W/cp.times"
    rm -f "$W"/__*.distcp
done
tv=$(median <"$W/convert.times")
tp=$(median <"$W/cp.times")
echo "convert: ${tv}s   cp: ${tp}s   convert / cp: $(ratio "$tv" "$tp") (time)"
