#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# safetensors against .ckpt: the same tensors (bench/gen_ckpt.py, with and
# without --safetensors) mounted read-only side by side in one run; each
# timing is the median of REPS runs.
#
#   bench/bench_safetensors.sh [BUILD]   (env: REPS=5 MANY=100000 BIG_GIB=4 TENSORS=256)
#
# 1. mount time and daemon memory (VmHWM: the peak, which parsing a header
#    sets; VmRSS: what stays; both of a foreground mount, whose one process
#    parsed the header) for MANY tiny tensors and for BIG_GIB in TENSORS
#    tensors;
# 2. the first read of every `out` of the big model (fresh mount, the file in
#    the page cache) and the re-read, against `cat` of the file.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=$(realpath "${1:-build}")
CKPTFS=$BUILD/ckptfs
REPS=${REPS:-5}
MANY=${MANY:-100000}
BIG=$(( ${BIG_GIB:-4} << 30 ))
TENSORS=${TENSORS:-256}
W=$(mktemp -d "${BENCH_DIR:-/var/tmp}/ckptfs-st.XXXXXX")
MOUNTS=()
cleanup() {
    for m in "${MOUNTS[@]}"; do mountpoint -q "$m" && fusermount3 -u "$m"; done
    rm -rf "$W"
}
trap cleanup EXIT
. bench/bench_lib.sh

echo "# generating: $MANY tiny tensors and $((BIG >> 30)) GiB in $TENSORS tensors, as .ckpt and .safetensors"
for ext in ckpt safetensors; do
    st=$([ "$ext" = safetensors ] && echo --safetensors || true)
    /usr/bin/python3 bench/gen_ckpt.py "$W/many.$ext" --size $((MANY * 16)) --count "$MANY" $st
    /usr/bin/python3 bench/gen_ckpt.py "$W/big.$ext" --size "$BIG" --count "$TENSORS" $st
done
mkdir -p "$W/m"
rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }

echo "## 1. mount time and daemon memory (median of $REPS)"
for f in many big; do
    for ext in ckpt safetensors; do
        cat "$W/$f.$ext" >/dev/null
        : >"$W/$f.$ext.t"
        for _ in $(seq "$REPS"); do
            mount_timed "$W/$f.$ext" "$W/m" >>"$W/$f.$ext.t"
            fusermount3 -u "$W/m"
        done
        # Memory in the foreground: a daemon forks after the header is
        # parsed, and its child's peak would not show the parse.
        "$CKPTFS" -f -o ro "$W/$f.$ext" "$W/m" &
        pid=$!
        MOUNTS+=("$W/m")
        until mountpoint -q "$W/m"; do sleep 0.05; done
        echo "$(hwm_kib "$pid") $(rss_kib "$pid")" >"$W/$f.$ext.mem"
        fusermount3 -u "$W/m"
        wait "$pid"
    done
    tc=$(median <"$W/$f.ckpt.t"); ts=$(median <"$W/$f.safetensors.t")
    read -r hc rc <"$W/$f.ckpt.mem"; read -r hs rs <"$W/$f.safetensors.mem"
    printf '%-5s mount: ckpt %8.4fs  safetensors %8.4fs  ratio %5.2f   peak RSS: ckpt %6d KiB  safetensors %6d KiB   RSS after: ckpt %6d KiB  safetensors %6d KiB\n' \
        "$f" "$tc" "$ts" "$(ratio "$ts" "$tc")" "$hc" "$hs" "$rc" "$rs"
done

echo "## 2. reads of every out, $((BIG >> 30)) GiB (median of $REPS; fresh mount; the file in the page cache)"
gbps() { awk -v s="$1" -v b="$BIG" 'BEGIN {printf "%5.2f GB/s", b / s / 1e9}'; }
for ext in ckpt safetensors; do
    : >"$W/first.$ext"; : >"$W/again.$ext"; : >"$W/file.$ext"
    for _ in $(seq "$REPS"); do
        timed cat "$W/big.$ext" >>"$W/file.$ext"
        mount_timed "$W/big.$ext" "$W/m" >/dev/null
        timed cat "$W"/m/*/out >>"$W/first.$ext"
        timed cat "$W"/m/*/out >>"$W/again.$ext"
        fusermount3 -u "$W/m"
    done
    f=$(median <"$W/file.$ext"); a=$(median <"$W/first.$ext"); b=$(median <"$W/again.$ext")
    printf '%-11s cat of the file %s   first read %s (time/file %5.2f)   re-read %s (time/file %5.2f)\n' \
        "$ext" "$(gbps "$f")" "$(gbps "$a")" "$(ratio "$a" "$f")" "$(gbps "$b")" "$(ratio "$b" "$f")"
done
