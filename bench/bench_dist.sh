#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The merged mount of a distributed checkpoint (issue 14): "reading a merged
# 1 GiB tensor split over 8 generated ranks along dim 0 and along dim 1,
# against reading the same bytes from one plain checkpoint, in one run".
#
#   bench/bench_dist.sh [BUILD]   (env: REPS=3 ROWS=16384 COLS=16384 RANKS=8 KEEP=0)
#
# bench/gen_dist.py writes, under a directory in /var/tmp (removed at the end
# unless KEEP=1; about 3 GiB), one Float32 tensor [ROWS, COLS] of random
# bytes as a plain .ckpt, and the same tensor as two RANKS-rank distributed
# checkpoints with their strategy files (dist_oracle.py's): split along dim 0
# (each rank's file one extent of the merged out) and along dim 1 (the merged
# out a strided gather, runs of COLS/RANKS*4 bytes alternating ranks).
#
# 0. once: each merged mount lists what the plain mount lists, and its meta
#    and out equal the plain mount's (cmp), whose out equals the tensor bytes
#    at the end of plain.ckpt; so the timings are of correct reads.
# 1. `cat` of the whole out, each on a fresh mount, from: the plain mount
#    (`ckptfs -o ro plain.ckpt M`), the dim-0 merged mount, the dim-1 merged
#    mount (`ckptfs -o ro,strategy=S DIST_DIR M`), and `cat` of plain.ckpt
#    itself (the limit).  Cold: the page cache dropped (as bench_ckpt.sh
#    does, where the system lets us: root) after the mount, before the read;
#    warm: the sources read into the page cache first, so the read is the
#    daemon's first one.  REPS rounds, the four alternating in each (each
#    round starting at the next); medians and time ratios (dim0/plain,
#    dim1/plain, plain/cat).
# 2. each daemon's VmHWM after the read (/proc/PID/status of the daemon):
#    the dim-1 gather must stay bounded like the plain read.
# 3. once, not timed: FUSE READ requests per cat of out (the `-d` request
#    log of a foreground mount, as bench_requests.sh counts them) and the
#    daemon's system calls per READ (strace -c -f of another, quiet,
#    foreground mount), e.g. how many pieces a dim-1 reply is spliced from.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=$(realpath "${1:-build}")
CKPTFS=$BUILD/ckptfs
REPS=${REPS:-3}
ROWS=${ROWS:-16384}
COLS=${COLS:-16384}
RANKS=${RANKS:-8}
KEEP=${KEEP:-0}
BYTES=$((ROWS * COLS * 4))
W=$(mktemp -d "${BENCH_DIR:-/var/tmp}/ckptfs-dist.XXXXXX")
M=$W/m
M2=$W/m2
PIDS=()
. bench/bench_lib.sh

# cleanup: unmount both mountpoints, end only the daemons this script
# started (by pid, if one outlived its mount), remove $W unless KEEP=1.
cleanup() {
    local m p
    for m in "$M" "$M2"; do mountpoint -q "$m" && fusermount3 -u "$m"; done
    for p in "${PIDS[@]}"; do
        kill -0 "$p" 2>/dev/null || continue
        [[ "$(tr '\0' ' ' <"/proc/$p/cmdline")" == *"$CKPTFS "*" $W/"* ]] && kill "$p"
    done
    if [ "$KEEP" = 1 ]; then echo "# kept: $W"; else rm -rf "$W"; fi
}
trap cleanup EXIT

die() { echo "# $*" >&2; exit 1; }
gbps() { awk -v s="$1" -v b="$BYTES" 'BEGIN {printf "%5.2f GB/s", b / s / 1e9}'; }
mib() { awk -v k="$1" 'BEGIN {printf "%6.1f MiB", k / 1024}'; }
max() { sort -g | tail -1; }

# The four sources: CFG -> mount options and source (none for cat), and the
# files a warm read finds in the page cache.
opts() { case $1 in plain) echo ro ;; dim0 | dim1) echo "ro,strategy=$W/$1/strategy.ckpt" ;; esac; }
src() { case $1 in plain) echo "$W/plain.ckpt" ;; dim0 | dim1) echo "$W/$1/dist" ;; esac; }
warm_up() {
    case $1 in
    cat | plain) cat "$W/plain.ckpt" >/dev/null ;;
    *) cat "$W/$1"/dist/rank_*/*.ckpt >/dev/null ;;
    esac
}
COLD=0
sync && echo 3 2>/dev/null >/proc/sys/vm/drop_caches && COLD=1
drop() { if [ "$COLD" = 1 ]; then sync; echo 3 >/proc/sys/vm/drop_caches; fi; }

# read_once CFG MODE: one timed read of the whole out (or of plain.ckpt for
# cat) into $W/CFG.MODE; for a mount, a fresh one, and its daemon's VmHWM
# after the read into $W/CFG.hwm.
read_once() {
    local cfg=$1 mode=$2
    if [ "$mode" = warm ]; then warm_up "$cfg"; fi
    if [ "$cfg" = cat ]; then
        if [ "$mode" = cold ]; then drop; fi
        timed cat "$W/plain.ckpt" >>"$W/cat.$mode"
        return
    fi
    mnt "$(opts "$cfg")" "$(src "$cfg")"
    if [ "$mode" = cold ]; then drop; fi
    timed cat "$M"/*/out >>"$W/$cfg.$mode"
    hwm_kib "$PID" >>"$W/$cfg.hwm"
    umnt
}

echo "# generating: Float32 [$ROWS, $COLS] ($((BYTES >> 20)) MiB), plain and split over" \
    "$RANKS ranks along dim 0 and dim 1, in $W"
/usr/bin/python3 bench/gen_dist.py "$W" --rows "$ROWS" --cols "$COLS" --ranks "$RANKS"
mkdir "$M" "$M2"
echo "# on disk: $(du -sh "$W" | cut -f1); plain.ckpt $(stat -c %s "$W/plain.ckpt") bytes," \
    "a rank's file $(stat -c %s "$W/dim1/dist/rank_0/checkpoint_0.ckpt") bytes"

# 0. The merged outs are the tensor: the plain mount (on $M2, kept for the
# comparison) against the tensor's bytes in its file, each merged mount
# against the plain mount.
ref() { local M=$M2; mnt ro "$W/plain.ckpt"; REF_PID=$PID; }
ref
cmp <(tail -c "$BYTES" "$W/plain.ckpt") "$M2"/*/out || die "plain mount: out is not the tensor"
for cfg in dim0 dim1; do
    mnt "$(opts "$cfg")" "$(src "$cfg")"
    [ "$(ls -A "$M")" = "$(ls -A "$M2")" ] ||
        die "$cfg: the merged root lists $(ls -A "$M" | tr '\n' ' ')"
    cmp "$M2"/*/meta "$M"/*/meta || die "$cfg: merged meta differs from the plain mount's"
    cmp "$M2"/*/out "$M"/*/out || die "$cfg: merged out differs from the plain mount's"
    umnt
done
(M=$M2 PID=$REF_PID umnt)
echo "# checked: both merged mounts list what the plain mount lists; meta and out equal its (cmp)"

CFGS=(cat plain dim0 dim1)
MODES=(warm)
[ "$COLD" = 1 ] && MODES=(cold warm)
for c in "${CFGS[@]}"; do : >"$W/$c.cold"; : >"$W/$c.warm"; : >"$W/$c.hwm"; done
# Round i starts at the i-th source, so that none is always first after the
# caches were dropped or always last.
for ((i = 0; i < REPS; i++)); do
    for mode in "${MODES[@]}"; do
        for ((j = 0; j < ${#CFGS[@]}; j++)); do
            read_once "${CFGS[(i + j) % ${#CFGS[@]}]}" "$mode"
        done
    done
done

med() { median <"$W/$1"; }
label() {
    case $1 in
    cat) echo "cat plain.ckpt (the limit)" ;;
    plain) echo "plain mount" ;;
    dim0) echo "merged, dim 0 ($RANKS extents)" ;;
    dim1) echo "merged, dim 1 (strided gather)" ;;
    esac
}
echo "## 1. cat of the whole out, $((BYTES >> 20)) MiB Float32 [$ROWS, $COLS]," \
    "$RANKS ranks (median of $REPS; fresh mount each)"
[ "$COLD" = 1 ] || echo "# no cold-cache reads: /proc/sys/vm/drop_caches is not writable here"
for c in "${CFGS[@]}"; do
    line=$(printf '%-31s' "$(label "$c")")
    for mode in "${MODES[@]}"; do
        t=$(med "$c.$mode")
        line+=$(printf '   %s %7.3fs %s' "$mode" "$t" "$(gbps "$t")")
    done
    echo "$line"
done
for mode in "${MODES[@]}"; do
    p=$(med "plain.$mode")
    echo "ratios (time), $mode: dim0/plain $(ratio "$(med "dim0.$mode")" "$p")" \
        "  dim1/plain $(ratio "$(med "dim1.$mode")" "$p")" \
        "  plain/cat $(ratio "$p" "$(med "cat.$mode")")"
done
echo "## 2. daemon VmHWM after reading the whole out (largest of $((REPS * ${#MODES[@]})))"
echo "plain $(mib "$(max <"$W/plain.hwm")")   dim 0 $(mib "$(max <"$W/dim0.hwm")")" \
    "  dim 1 $(mib "$(max <"$W/dim1.hwm")")"

# 3. Counts, not timings.  fg CFG CMD...: run CMD (a foreground ckptfs on
# $M, its output to $W/fg.log), one cat of out, unmount, wait for CMD.
fg() {
    local cfg=$1 fpid
    shift
    "$@" >/dev/null 2>"$W/fg.log" &
    fpid=$!
    for _ in $(seq 1 600); do mountpoint -q "$M" && break; sleep 0.05; done
    mountpoint -q "$M" || die "$cfg: the foreground mount did not come up"
    cat "$M"/*/out >/dev/null
    fusermount3 -u "$M"
    wait "$fpid" || true
}
# counts CFG: READ requests from the -d log; then the daemon's system calls
# from strace -c -f of a quiet (-f) mount, whose summary is written as the
# daemon exits.
counts() {
    local cfg=$1 reads
    fg "$cfg" "$CKPTFS" -d -o "$(opts "$cfg")" "$(src "$cfg")" "$M"
    reads=$(grep -c 'opcode: READ ' "$W/fg.log" || true)
    [ "$reads" -gt 0 ] || die "$cfg: no READ in the -d log"
    fg "$cfg" strace -f -c -o "$W/$cfg.strace" "$CKPTFS" -f -o "$(opts "$cfg")" "$(src "$cfg")" "$M"
    printf '%-31s %6d READs (%s KiB each on average)   per READ:' "$(label "$cfg")" "$reads" \
        "$(awk -v b="$BYTES" -v n="$reads" 'BEGIN {printf "%.0f", b / n / 1024}')"
    # strace -c's table: calls in column 4 (column 5 is errors when present).
    awk -v n="$reads" '$NF ~ /^[a-z_0-9]+$/ && $4 ~ /^[0-9]+$/ && $4 >= n / 2 {
        printf " %s %.2f", ($NF == "total" ? "all" : $NF), $4 / n }' "$W/$cfg.strace"
    echo
}
if command -v strace >/dev/null; then
    echo "## 3. one cat of out on a foreground mount: FUSE READs (-d log)," \
        "daemon system calls per READ (strace -c -f; calls made at least once per two READs)"
    for c in plain dim0 dim1; do counts "$c"; done
else
    echo "# no strace: section 3 skipped"
fi
echo "targets: dim 0 and dim 1 near the plain mount (ratios near 1);" \
    "VmHWM of dim 1 as low as plain's"
