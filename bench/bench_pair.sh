#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Two builds of ckptfs side by side on the same files, in one run: the
# mount, a walk, the first read and a save, each timed as the median of
# REPS runs taken in turns (A, B, A, B, ...) so that the machine's noise
# falls on both alike; then FUSE requests per tensor (bench_requests.sh,
# exact counts).  For a restructuring whose behaviour must not change
# (issue 40): every ratio B/A should be within noise of 1.
#
#   bench/bench_pair.sh BUILD_A BUILD_B    (env: REPS=5 TENSORS=10000 MIB=256)
#
# BUILD_A is the build before (e.g. a worktree of the older commit, built
# with `make BUILD=...`), BUILD_B the one after; each holds a ckptfs.
set -euo pipefail
cd "$(dirname "$0")/.."
A=$(realpath "$1")/ckptfs
B=$(realpath "$2")/ckptfs
REPS=${REPS:-5}
N=${TENSORS:-10000}
MIB=${MIB:-256}
W=$(mktemp -d "${BENCH_DIR:-/var/tmp}/ckptfs-pair.XXXXXX")
M=$W/m
PIDS=()
CKPTFS=$A
. bench/bench_lib.sh
trap cleanup_mounts EXIT

gen_many_and_big

# one_round SIDE BIN: one sample of each measure into $W/SIDE.MEASURE.
one_round() {
    local side=$1 t
    CKPTFS=$2
    mnt ro "$W/many.ckpt"
    echo "$T_MOUNT" >>"$W/$side.mount"
    t=$(now); find "$M" >/dev/null; elapsed "$t" >>"$W/$side.walk"
    umnt
    mnt ro "$W/big.ckpt"
    t=$(now); cat "$M"/*/out >/dev/null; elapsed "$t" >>"$W/$side.read"
    umnt
    mnt commit=manual "$W/big.ckpt"
    printf '%04d' "$RANDOM" | dd of="$M/layer.7.weight/out" bs=1 seek=1000 conv=notrunc status=none
    t=$(now); touch "$M/snapshot_done"; elapsed "$t" >>"$W/$side.save"
    umnt
}
for _ in $(seq "$REPS"); do
    one_round a "$A"
    one_round b "$B"
done

printf '%-44s %12s %12s %8s\n' "measure (median of $REPS)" "A" "B" "B/A"
for m in mount walk read save; do
    case $m in
    mount) what="mount, $N tensors (s)" ;;
    walk) what="find, first walk of $N tensors (s)" ;;
    read) what="first read of every out, $MIB MiB (s)" ;;
    save) what="save of a one-tensor edit, $MIB MiB (s)" ;;
    esac
    a=$(median <"$W/a.$m")
    b=$(median <"$W/b.$m")
    printf '%-44s %12s %12s %8s\n' "$what" "$a" "$b" "$(ratio "$b" "$a")"
done
echo
echo "# FUSE requests per tensor (A as BASE, B as the build measured)"
BASE=$A TENSORS=1000 bench/bench_requests.sh "$(dirname "$B")"
