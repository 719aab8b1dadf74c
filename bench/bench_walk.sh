#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Metadata walks and parallel first reads: ckptfs (read-only) side by side
# with squashfuse_ll (the same tree as a squashfs image) and with the same
# tree copied to the local ext4 disk, in one run.  Each timing is the median
# of REPS runs; ratios are ckptfs's time over the other's.
#
#   bench/bench_walk.sh [BUILD]   (env: REPS=3 MANY=100000 READ_MIB=1024 READ_TENSORS=64)
#
# 1. `find` and `ls -lR` of MANY small tensors: the first walk after
#    dropping the caches (echo 3 >/proc/sys/vm/drop_caches) on a fresh
#    mount, then a second walk on that mount.  Targets: ckptfs's first walk
#    at most 0.5x squashfuse_ll's; its second at most ext4's (ratio <= 1).
#    ckptfs is also timed with -o busy_poll=0 (its loop sleeps at once
#    when idle, fuse/session_loop.c): "poll/sleep" is the gain of polling.
# 2. The first read of every `out` of a READ_MIB model by 1, 2 and 4
#    parallel `cat`s (the outs dealt round-robin), on a fresh mount each
#    time, the model file and the image in the page cache; against
#    squashfuse_ll and against reading the model file itself in 1, 2 and 4
#    ranges.  Targets: ahead of squashfuse_ll at every count; never slower
#    with more readers than with one.
#
# Needs root (drop_caches, the FUSE bdi's read_ahead_kb).  squashfuse and
# squashfs-tools are installed from Debian here when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=$(realpath "${1:-build}")
CKPTFS=$BUILD/ckptfs
REPS=${REPS:-3}
MANY=${MANY:-100000}
READ_BYTES=$(( ${READ_MIB:-1024} << 20 ))
READ_TENSORS=${READ_TENSORS:-64}
W=$(mktemp -d "${BENCH_DIR:-/var/tmp}/ckptfs-walk.XXXXXX")
MOUNTS=()
cleanup() {
    for m in "${MOUNTS[@]}"; do mountpoint -q "$m" && fusermount3 -u "$m"; done
    rm -rf "$W"
}
trap cleanup EXIT
. bench/bench_lib.sh

if ! command -v squashfuse_ll >/dev/null || ! command -v mksquashfs >/dev/null; then
    echo "# installing squashfuse and squashfs-tools (Debian)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq squashfuse squashfs-tools >/dev/null
fi

drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches; }
# mount_fs KIND MNT: a fresh read-only mount of the tree of that kind
mount_fs() {
    case $1 in
    ckptfs) "$CKPTFS" -o ro "$SRC_CKPT" "$2" ;;
    ckptfs_sleep) "$CKPTFS" -o ro,busy_poll=0 "$SRC_CKPT" "$2" ;;
    squashfuse_ll) squashfuse_ll "$SRC_SQFS" "$2" ;;
    esac
    MOUNTS+=("$2")
}
umount_fs() { fusermount3 -u "$1"; }
KINDS="ckptfs ckptfs_sleep squashfuse_ll ext4"

echo "# generating: $MANY tiny tensors; $((READ_BYTES >> 20)) MiB in $READ_TENSORS tensors"
/usr/bin/python3 bench/gen_ckpt.py "$W/many.ckpt" --size $((MANY * 16)) --count "$MANY"
/usr/bin/python3 bench/gen_ckpt.py "$W/big.ckpt" --size "$READ_BYTES" --count "$READ_TENSORS"
mkdir -p "$W/m" "$W/s"
for f in many big; do
    "$CKPTFS" -o ro "$W/$f.ckpt" "$W/m"
    cp -r "$W/m" "$W/$f.ext4"
    fusermount3 -u "$W/m"
done
# The walk tree with squashfs's default compression; the data image with
# its data uncompressed (-noD), as the model file is.
mksquashfs "$W/many.ext4" "$W/many.sqfs" -noappend -quiet -no-progress >/dev/null
mksquashfs "$W/big.ext4" "$W/big.sqfs" -noappend -quiet -no-progress -noD >/dev/null

echo "## 1. walks of $MANY tensors (median of $REPS; first: caches dropped, fresh mount)"
SRC_CKPT=$W/many.ckpt SRC_SQFS=$W/many.sqfs
for walk in find "ls -lR"; do
    key=${walk%% *}
    for kind in $KINDS; do
        : >"$W/$key.$kind.1"; : >"$W/$key.$kind.2"
    done
    for _ in $(seq "$REPS"); do
        for kind in $KINDS; do
            dir=$W/many.ext4
            drop_caches
            if [ "$kind" != ext4 ]; then
                mount_fs "$kind" "$W/m"
                dir=$W/m
            fi
            timed $walk "$dir" >>"$W/$key.$kind.1"
            timed $walk "$dir" >>"$W/$key.$kind.2"
            [ "$kind" = ext4 ] || umount_fs "$W/m"
        done
    done
    for n in 1 2; do
        c=$(median <"$W/$key.ckptfs.$n"); s=$(median <"$W/$key.squashfuse_ll.$n")
        e=$(median <"$W/$key.ext4.$n"); z=$(median <"$W/$key.ckptfs_sleep.$n")
        label=$([ "$n" = 1 ] && echo "first walk " || echo "second walk")
        printf '%-7s %s: ckptfs %8.3fs (busy_poll=0 %8.3fs)  squashfuse_ll %8.3fs  ext4 %8.3fs   ckptfs/squashfuse_ll %5.2f  ckptfs/ext4 %5.2f  poll/sleep %5.2f\n' \
            "$walk" "$label" "$c" "$z" "$s" "$e" "$(ratio "$c" "$s")" "$(ratio "$c" "$e")" "$(ratio "$c" "$z")"
    done
done
echo "targets: first walk ckptfs/squashfuse_ll <= 0.5; second walk ckptfs/ext4 <= 1"

echo "## 2. first read of every out, $((READ_BYTES >> 20)) MiB (median of $REPS; fresh mount; source in page cache)"
SRC_CKPT=$W/big.ckpt SRC_SQFS=$W/big.sqfs
cat "$W/big.ckpt" "$W/big.sqfs" >/dev/null
readers() { read_round_robin "$@"; }
# file_ranges P: the model file read by P dd's, one range each
file_ranges() {
    local p=$1 i part=$((READ_BYTES / $1))
    for ((i = 0; i < p; i++)); do
        dd if="$W/big.ckpt" of=/dev/null bs=1M iflag=skip_bytes,count_bytes skip=$((i * part)) \
            count="$part" status=none &
    done
    wait
}
# one_read KIND P [READ_AHEAD_KB]: time the first read on a fresh mount
one_read() {
    mount_fs "$1" "$W/m"
    [ -z "${3:-}" ] || echo "$3" >"/sys/class/bdi/$(mountpoint -d "$W/m")/read_ahead_kb"
    timed readers "$W/m" "$2"
    umount_fs "$W/m"
}
for p in 1 2 4; do
    : >"$W/r.c.$p"; : >"$W/r.z.$p"; : >"$W/r.ra.$p"; : >"$W/r.s.$p"; : >"$W/r.f.$p"
    for _ in $(seq "$REPS"); do
        one_read ckptfs "$p" >>"$W/r.c.$p"
        one_read ckptfs_sleep "$p" >>"$W/r.z.$p"
        one_read ckptfs "$p" 1024 >>"$W/r.ra.$p"
        one_read squashfuse_ll "$p" >>"$W/r.s.$p"
        timed file_ranges "$p" >>"$W/r.f.$p"
    done
done
gbps() { awk -v s="$1" -v b="$READ_BYTES" 'BEGIN {printf "%5.2f GB/s", b / s / 1e9}'; }
c1=$(median <"$W/r.c.1")
for p in 1 2 4; do
    c=$(median <"$W/r.c.$p"); ra=$(median <"$W/r.ra.$p"); s=$(median <"$W/r.s.$p")
    f=$(median <"$W/r.f.$p"); z=$(median <"$W/r.z.$p")
    printf '%d reader(s): ckptfs %s (read_ahead_kb=1024: %s, busy_poll=0: %s)  squashfuse_ll %s  file %s   time ckptfs/squashfuse_ll %5.2f  ckptfs/file %5.2f  ckptfs vs 1 reader %5.2f  ra1024/ra128 %5.2f  poll/sleep %5.2f\n' \
        "$p" "$(gbps "$c")" "$(gbps "$ra")" "$(gbps "$z")" "$(gbps "$s")" "$(gbps "$f")" "$(ratio "$c" "$s")" \
        "$(ratio "$c" "$f")" "$(ratio "$c" "$c1")" "$(ratio "$ra" "$c")" "$(ratio "$c" "$z")"
done
echo "targets: time ckptfs/squashfuse_ll < 1 at every count; ckptfs vs 1 reader <= 1"
