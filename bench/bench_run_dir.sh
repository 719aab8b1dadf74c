#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The run-directory mount (issue 14): "a directory of 1,000 checkpoints of
# 1,000 tensors each mounts in milliseconds and stays within a few tens of
# MiB however much is browsed".  Everything side by side in one run; each
# timing is the median of REPS runs, each on a fresh mount (the run's files
# in the page cache).
#
#   bench/bench_run_dir.sh [BUILD]   (env: REPS=3 N_CKPT=1000 N_TENSORS=1000 KEEP=0)
#
# The run: one .ckpt of N_TENSORS tiny Float32 tensors (bench/gen_ckpt.py,
# 16 bytes of data each), copied N_CKPT times as ModelCheckpoint names it
# (lenet-<epoch>_1875.ckpt) and chmod 0400 as MindSpore leaves a finished
# one, in a directory under /var/tmp (removed at the end unless KEEP=1).
#
# 1. mount time: `ckptfs RUN_DIR M` (daemonized: it returns when the mount
#    is live) against `ckptfs -o ro ONE.ckpt M` of one of those checkpoints
#    and against `ls -l RUN_DIR` on ext4.
# 2. `ls -l M` (the root, N_CKPT entries and `latest`), first on the fresh
#    mount and again, against `ls -l RUN_DIR`.
# 3. a. opening every checkpoint: one `ls M/<name>` per checkpoint on a
#    fresh mount (its index opened, its tensors listed), per checkpoint
#    against a fresh one-checkpoint mount plus `ls` of its root;
#    b. browsing everything: one `cat M/<name>/*/meta` per checkpoint,
#    every checkpoint in turn, per checkpoint against a fresh one-checkpoint
#    mount plus the same cat.  With the default index cache (32M), with
#    -o index_cache=8M, and writable (-o rw: each checkpoint opened takes
#    its writer lock, as an edit would need).
# 4. the daemon's memory (VmRSS after mount, after the listing, after the
#    browse; VmHWM, the peak) and its open descriptors after the browse,
#    read from /proc/PID/status of the daemon itself (a run mount opens no
#    checkpoint before it forks, so the daemon's figures are all of it),
#    and the number of cats or ls's that failed (0 expected).
# Small checkpoints are the hard case for the bound (each open one's fixed
# cost against its charged index bytes): try N_CKPT=5000 N_TENSORS=10.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=$(realpath "${1:-build}")
CKPTFS=$BUILD/ckptfs
REPS=${REPS:-3}
N_CKPT=${N_CKPT:-1000}
N_TENSORS=${N_TENSORS:-1000}
KEEP=${KEEP:-0}
STEP=1875
W=$(mktemp -d "${BENCH_DIR:-/var/tmp}/ckptfs-run.XXXXXX")
RUN=$W/run
M=$W/m
ONE=$W/one.ckpt
PIDS=()
ERRS=0
. bench/bench_lib.sh

# cleanup: unmount $M, end only the daemons this script started (by pid,
# if one outlived its mount), remove $W unless KEEP=1.
cleanup() {
    mountpoint -q "$M" && fusermount3 -u "$M"
    for p in "${PIDS[@]}"; do
        kill -0 "$p" 2>/dev/null || continue
        [[ "$(tr '\0' ' ' <"/proc/$p/cmdline")" == "$CKPTFS "*" $M " ]] && kill "$p"
    done
    if [ "$KEEP" = 1 ]; then echo "# kept: $W"; else rm -rf "$W"; fi
}
trap cleanup EXIT

rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
fds() { find "/proc/$1/fd" -mindepth 1 | wc -l; }
ms() { awk -v s="$1" 'BEGIN {printf "%8.2f ms", s * 1000}'; }
mib() { awk -v k="$1" 'BEGIN {printf "%6.1f MiB", k / 1024}'; }
max() { sort -g | tail -1; }

# mount_m [OPTS] SRC: mount SRC on $M (daemonized), time it; sets T_MOUNT
# (seconds) and PID (the daemon's, by its root's user.ckptfs.pid, else by
# its command line).
mount_m() {
    local args=() t0
    [ $# = 2 ] && [ -n "$1" ] && args=(-o "$1")
    t0=$(now)
    "$CKPTFS" "${args[@]}" "${@: -1}" "$M"
    T_MOUNT=$(awk -v a="$t0" -v b="$(now)" 'BEGIN {printf "%.6f", b - a}')
    PID=$(getfattr --absolute-names --only-values -n user.ckptfs.pid "$M" 2>/dev/null ||
          pgrep -n -f -- "^$CKPTFS ${args[*]:+${args[*]} }${*: -1} $M\$")
    PIDS+=("$PID")
}
# browse: every checkpoint's every meta, one cat per checkpoint; counts
# the cats that failed in ERRS.
browse() {
    local n
    for n in "${NAMES[@]}"; do cat -- "$M/$n"/*/meta || ERRS=$((ERRS + 1)); done 2>/dev/null
}
# open_all: look into every checkpoint (its index opened, its tensors listed).
open_all() {
    local n
    for n in "${NAMES[@]}"; do ls -- "$M/$n" || ERRS=$((ERRS + 1)); done 2>/dev/null
}

echo "# generating: $N_CKPT checkpoints of $N_TENSORS tensors (one file, copied) in $RUN"
/usr/bin/python3 bench/gen_ckpt.py "$ONE" --size $((N_TENSORS * 16)) --count "$N_TENSORS"
mkdir "$RUN" "$M"
for ((e = 1; e <= N_CKPT; e++)); do
    cp "$ONE" "$RUN/lenet-${e}_$STEP.ckpt"
done
chmod 0400 "$RUN"/*.ckpt
echo "# one checkpoint: $(stat -c %s "$ONE") bytes; the run: $(du -sk "$RUN" | cut -f1) KiB on disk"
cat "$RUN"/*.ckpt "$ONE" >/dev/null # the page cache

# What the mount shows: one directory per checkpoint and `latest`.
mount_m "" "$RUN"
NAMES=()
for d in "$M"/*; do [ "${d##*/}" = latest ] || NAMES+=("${d##*/}"); done
latest=$(readlink "$M/latest" || echo none)
first=$(cat -- "$M/${NAMES[0]}"/*/meta | wc -c)
umnt
if [ "${#NAMES[@]}" != "$N_CKPT" ] || [ "$latest" != "lenet-${N_CKPT}_$STEP" ] || [ "$first" = 0 ]; then
    echo "# wrong tree: ${#NAMES[@]} checkpoints listed (want $N_CKPT), latest -> $latest," \
        "$first bytes of metas in ${NAMES[0]:-none}" >&2
    exit 1
fi
echo "# the mount lists $N_CKPT checkpoints, latest -> $latest"

CFGS=(default 8M rw)
# label CFG: how a configuration is mounted, as the report names it
label() { case $1 in default) echo default ;; rw) echo "-o rw" ;; *) echo "index_cache=$1" ;; esac; }
for c in "${CFGS[@]}" one; do
    for k in mount ls1 ls2 browse open rss_mount rss_ls rss_browse hwm fds; do : >"$W/$c.$k"; done
done
: >"$W/ext4.ls"
for _ in $(seq "$REPS"); do
    timed ls -l "$RUN" >>"$W/ext4.ls"
    # one checkpoint: mount, then its every meta
    mount_m ro "$ONE"
    echo "$T_MOUNT" >>"$W/one.mount"
    timed sh -c 'cat -- "$1"/*/meta' sh "$M" >>"$W/one.browse"
    umnt
    mount_m ro "$ONE"
    timed ls -- "$M" >>"$W/one.open"
    umnt
    for c in "${CFGS[@]}"; do
        case $c in default) opts= ;; rw) opts=rw ;; *) opts="index_cache=$c" ;; esac
        mount_m "$opts" "$RUN"
        echo "$T_MOUNT" >>"$W/$c.mount"
        rss_kib "$PID" >>"$W/$c.rss_mount"
        timed ls -l "$M" >>"$W/$c.ls1"
        timed ls -l "$M" >>"$W/$c.ls2"
        rss_kib "$PID" >>"$W/$c.rss_ls"
        timed browse >>"$W/$c.browse"
        rss_kib "$PID" >>"$W/$c.rss_browse"
        hwm_kib "$PID" >>"$W/$c.hwm"
        fds "$PID" >>"$W/$c.fds"
        umnt
        mount_m "$opts" "$RUN"
        timed open_all >>"$W/$c.open"
        umnt
    done
done

med() { median <"$W/$1"; }
lsx=$(med ext4.ls); one=$(med one.mount); onecat=$(med one.browse)
echo "## 1. mount time (median of $REPS; daemonized, returns when live)"
for c in "${CFGS[@]}"; do
    r=$(med "$c.mount")
    printf 'run dir, %d checkpoints, %-17s %s   one checkpoint: %s   ls -l RUN_DIR (ext4): %s   run/one %6.2f  run/ls %6.2f\n' \
        "$N_CKPT" "$(label "$c"):" "$(ms "$r")" "$(ms "$one")" "$(ms "$lsx")" "$(ratio "$r" "$one")" "$(ratio "$r" "$lsx")"
done
echo "## 2. ls -l of the root, $N_CKPT entries (median of $REPS)"
for c in "${CFGS[@]}"; do
    a=$(med "$c.ls1"); b=$(med "$c.ls2")
    printf 'ls -l M, %-17s first %s  again %s   ls -l RUN_DIR (ext4): %s   first/ext4 %6.2f  again/ext4 %6.2f\n' \
        "$(label "$c"):" "$(ms "$a")" "$(ms "$b")" "$(ms "$lsx")" "$(ratio "$a" "$lsx")" "$(ratio "$b" "$lsx")"
done
echo "## 3a. opening every checkpoint: one ls of M/<name> per checkpoint, on a fresh mount (median of $REPS)"
oneopen=$(awk -v a="$one" -v b="$(med one.open)" 'BEGIN {print a + b}')
for c in "${CFGS[@]}"; do
    t=$(med "$c.open")
    per=$(awk -v t="$t" -v n="$N_CKPT" 'BEGIN {print t / n}')
    printf '%-17s %8.3fs  = %s per checkpoint opened   one-checkpoint mount + ls: %s   per checkpoint/one %6.2f\n' \
        "$(label "$c"):" "$t" "$(ms "$per")" "$(ms "$oneopen")" "$(ratio "$per" "$oneopen")"
done
echo "## 3b. browsing everything: one cat of <name>/*/meta per checkpoint, $N_CKPT x $N_TENSORS metas (median of $REPS)"
for c in "${CFGS[@]}"; do
    t=$(med "$c.browse")
    per=$(awk -v t="$t" -v n="$N_CKPT" 'BEGIN {print t / n}')
    onep=$(awk -v a="$one" -v b="$onecat" 'BEGIN {print a + b}')
    printf '%-17s browse %8.3fs  = %s per checkpoint opened   one-checkpoint mount + cat: %s   per checkpoint/one %6.2f\n' \
        "$(label "$c"):" "$t" "$(ms "$per")" "$(ms "$onep")" "$(ratio "$per" "$onep")"
done
echo "## 4. daemon memory (median of $REPS; VmHWM and descriptors: the largest of $REPS)"
for c in "${CFGS[@]}"; do
    printf '%-17s VmRSS after mount %s  after ls -l %s  after browsing %s   VmHWM %s   open descriptors after browsing %d\n' \
        "$(label "$c"):" "$(mib "$(med "$c.rss_mount")")" "$(mib "$(med "$c.rss_ls")")" "$(mib "$(med "$c.rss_browse")")" \
        "$(mib "$(max <"$W/$c.hwm")")" "$(max <"$W/$c.fds")"
done
limit=$(awk '/^Max open files/ {print $4}' "/proc/$$/limits")
hwm=$(max <"$W/default.hwm")
echo "bound: VmHWM $(mib "$hwm") with the default index cache, $(mib "$(max <"$W/8M.hwm")") with 8M," \
    "$(mib "$(max <"$W/rw.hwm")") with -o rw" \
    "($([ "$hwm" -lt 65536 ] && echo within || echo OVER) 64 MiB); open descriptors at most" \
    "$(cat "$W"/*.fds | max) (soft limit here $limit); failed cats or ls: $ERRS"
echo "targets: the run mount in milliseconds (it stats the files, opens none: about an ext4 ls -l RUN_DIR); the listing leaves VmRSS as after mount;"
echo "         VmHWM after browsing everything within a few tens of MiB (< 64 MiB), lower with index_cache 8M"
