#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A map's cost (issue 41): the same .ckpt mounted with a rename-only map
# (-o map=, every tensor renamed) and without, in turns in one run, so the
# machine's noise falls on both alike: the mount of many small tensors
# (where renaming is per tensor), the first read of every `out` of a large
# model, and `cat` of the file itself as the limit.  Goal: mapped/plain
# within 1.1 for the mount and the read.
#
#   bench/bench_map.sh BUILD    (env: REPS=5 TENSORS=10000 MIB=1024)
set -euo pipefail
cd "$(dirname "$0")/.."
CKPTFS=$(realpath "$1")/ckptfs
REPS=${REPS:-5}
N=${TENSORS:-10000}
MIB=${MIB:-1024}
W=$(mktemp -d "${BENCH_DIR:-/var/tmp}/ckptfs-map.XXXXXX")
M=$W/m
PIDS=()
. bench/bench_lib.sh
trap cleanup_mounts EXIT

gen_many_and_big
printf 'about every name renamed\ninvertible\nreplace layer. block.\n' >"$W/rename.map"
"$CKPTFS" --help >/dev/null

# one_round SIDE OPTS: one sample of each measure into $W/SIDE.MEASURE.
one_round() {
    local side=$1 opts=$2 t
    mnt "$opts" "$W/many.ckpt"
    echo "$T_MOUNT" >>"$W/$side.mount"
    umnt
    mnt "$opts" "$W/big.ckpt"
    echo "$T_MOUNT" >>"$W/$side.bigmount"
    t=$(now); cat "$M"/*/out >/dev/null; elapsed "$t" >>"$W/$side.read"
    umnt
}
for _ in $(seq "$REPS"); do
    one_round plain ro
    one_round mapped "ro,map=$W/rename.map"
    t=$(now); cat "$W/big.ckpt" >/dev/null; elapsed "$t" >>"$W/cat.read"
done
mnt "ro,map=$W/rename.map" "$W/many.ckpt"
[ -d "$M/block.0.weight" ] # the map was applied
umnt

printf '%-44s %12s %12s %8s\n' "measure (median of $REPS)" "plain" "mapped" "ratio"
for m in bigmount mount read; do
    case $m in
    bigmount) what="mount, $MIB MiB in 64 tensors (s)" ;;
    mount) what="mount, $N tensors (s)" ;;
    read) what="first read of every out, $MIB MiB (s)" ;;
    esac
    a=$(median <"$W/plain.$m")
    b=$(median <"$W/mapped.$m")
    printf '%-44s %12s %12s %8s\n' "$what" "$a" "$b" "$(ratio "$b" "$a")"
done
c=$(median <"$W/cat.read")
b=$(median <"$W/mapped.read")
printf '%-44s %12s %12s %8s\n' "mapped read against cat of the file (s)" "$c" "$b" "$(ratio "$b" "$c")"
