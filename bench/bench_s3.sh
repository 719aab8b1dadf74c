#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Mounts and reads over object storage (issue 28): a 256 MiB model of 2,000
# Float32 tensors in each format (.ckpt, .safetensors, .onnx with its
# raw_data inline), PUT into a bucket of s3rver (npm, tests/s3/) on
# 127.0.0.1 and mounted with s3fs (Debian), as tests/bats/s3_helpers.bash
# does.  What travels is counted on the loopback (/proc/net/dev, `lo`
# receive bytes: HTTP bodies plus headers and TCP/IP framing) and in
# requests (s3rver logs one line per answered request); the kernel's caches
# are dropped before every measured operation (echo 3 > drop_caches; root).
# Everything is measured side by side in one run, rounds alternated; each
# figure is the median of REPS rounds.
#
#   bench/bench_s3.sh [BUILD]    (env: REPS=3 MIB=256 TENSORS=2000
#                                 S3FS_OPTS=... STRACE=1 BENCH_DIR=/var/tmp)
#
# 1. first mount: `ckptfs -o ro BUCKET/MODEL M`, `ls M`, unmount (and the
#    daemon gone), with no saved index (HOME and XDG_CACHE_HOME point into
#    the run's temporary directory, emptied first);
# 2. the floor of each format, read through the same s3fs mount: the byte
#    ranges the format makes necessary, found by bench/format_floor.py from
#    the local copy (independently of ckptfs: each .ckpt record up to its
#    tensor_content data; the safetensors length and JSON header; an ONNX
#    model but its initializers' raw_data), then pread exactly, in order
#    (target: first mount / floor <= 1.3);
# 3. second mount: the same as 1 with the saved index of 1 present (target:
#    the .ckpt's no dearer than the safetensors floor);
# 4. the same mounts of the local copy: bytes ckptfs read (rchar of
#    /proc/PID/io; a foreground ckptfs, since a daemonized one indexes the
#    model before it forks) against the format's header bytes;
# 5. reading every out: a mount with the index present, caches dropped, then
#    `cat M/*/out` against `cat BUCKET/MODEL` through s3fs (caches dropped
#    before each), alternated (target: time within 1.3x of cat); the same
#    pair from the local copy shows what the second FUSE hop costs, and
#    `cat` of the same tree copied to ext4 what reading N files costs any
#    filesystem against one file's stream (the last row: the outs over s3fs
#    against cat of the object plus that per-file cost);
# 6. (STRACE=1, the default; not timed) the sizes of the reads the daemon
#    asks of the s3fs file while `cat M/*/out` runs, from strace.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=$(realpath "${1:-build}")
CKPTFS=$BUILD/ckptfs
REPS=${REPS:-3}
SIZE=$(( ${MIB:-256} << 20 ))
N=${TENSORS:-2000}
FORMATS=(ckpt safetensors onnx)
PY=/usr/bin/python3
[ "$(id -u)" = 0 ] || { echo "bench_s3.sh drops the page cache: run it as root" >&2; exit 1; }
W=$(mktemp -d "${BENCH_DIR:-/var/tmp}/ckptfs-s3.XXXXXX")
M=$W/m
PIDS=()
. bench/bench_lib.sh

cleanup() {
    set +e # every step, whatever failed
    mountpoint -q "$M" && fusermount3 -u "$M"
    for p in "${PIDS[@]}"; do
        kill -0 "$p" 2>/dev/null || continue
        [[ "$(tr '\0' ' ' <"/proc/$p/cmdline")" == "$CKPTFS "*" $M "* ]] && kill "$p"
    done
    [ -n "${SPID:-}" ] && kill "$SPID" 2>/dev/null
    # the daemon over the bucket gone before s3fs is unmounted
    for p in "${PIDS[@]}"; do
        for _ in $(seq 1 200); do exited "$p" && break; sleep 0.01; done
    done
    s3_bench_stop
    rm -rf "$W"
}
trap cleanup EXIT

# A home of the run's own: the saved indexes never touch the real cache.
export HOME=$W/home XDG_CACHE_HOME=$W/home/.cache
IDX=$XDG_CACHE_HOME/ckptfs
mkdir -p "$HOME" "$M" "$W/local" "$W/r"

echo "# generating $N tensors in $((SIZE >> 20)) MiB: .ckpt, .safetensors, .onnx (raw_data inline)"
$PY bench/gen_ckpt.py "$W/local/t.ckpt" --size "$SIZE" --count "$N"
$PY bench/gen_ckpt.py "$W/local/t.safetensors" --size "$SIZE" --count "$N" --safetensors
$PY bench/gen_onnx.py "$W/local/t.onnx" --size "$SIZE" --count "$N" --inline
for f in "${FORMATS[@]}"; do
    $PY bench/format_floor.py ranges "$f" "$W/local/t.$f" >"$W/$f.ranges"
done

s3_bench_start "$W/s3"
for f in "${FORMATS[@]}"; do s3_put "$W/local/t.$f" "t.$f"; done
ls -l "$S3" >/dev/null

# requests: the requests s3rver has answered so far (one log line each,
# "info: PATH STATUS TIME SIZE").
requests() { sed 's/\x1b\[[0-9;]*m//g' "$S3_LOG" | grep -cE '^info: .* [1-5][0-9][0-9] [0-9.]+m?s ([0-9.]+[kmgt]?b|-)$' || true; }

# measure NAME CMD...: drop caches, run CMD, append "seconds lo_bytes
# requests" to $W/r/NAME.
measure() {
    local name=$1 b q t0
    shift
    drop_caches
    b=$(lo_rx) q=$(requests) t0=$(now)
    "$@" >/dev/null
    echo "$(awk -v a="$t0" -v b="$(now)" 'BEGIN {printf "%.6f", b - a}') $(( $(lo_rx) - b )) $(( $(requests) - q ))" \
        >>"$W/r/$name"
}

# exited PID: the process is gone or a zombie (this machine's init reaps
# the reparented daemon up to 1.5 s late: that is not ckptfs's time).
exited() {
    local st
    st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 0
    [ -z "$st" ] || [ "$st" = Z ]
}
# mount_ls_umount MODEL: a mount as a user makes one: mount, list the
# root, unmount; returns once the daemon is gone.  UP: the seconds until
# the mount was live (the daemonized command returns then).
mount_ls_umount() {
    local t0
    t0=$(now)
    "$CKPTFS" -o ro "$1" "$M"
    UP=$(awk -v a="$t0" -v b="$(now)" 'BEGIN {printf "%.6f", b - a}')
    PID=$(getfattr --absolute-names --only-values -n user.ckptfs.pid "$M")
    PIDS+=("$PID")
    ls "$M" >/dev/null
    fusermount3 -u "$M"
    while ! exited "$PID"; do sleep 0.01; done
}
# mount_up NAME MODEL: mount_ls_umount measured as NAME, the time until
# the mount was live in NAME.up.
mount_up() {
    measure "$1" mount_ls_umount "$2"
    echo "$UP" >>"$W/r/$1.up"
}
# local_mount NAME MODEL: the same mount of a local file, in the foreground
# (-f): a daemonized ckptfs indexes the model before it forks, so the
# daemon's own counters (user.ckptfs.pid) miss those reads.  Appends to
# $W/r/NAME the bytes the process read (rchar of /proc/PID/io; it counts
# the FUSE requests read from /dev/fuse too, under 1 KiB for an `ls`).
local_mount() {
    local i
    drop_caches
    "$CKPTFS" -f -o ro "$2" "$M" &
    PID=$!
    PIDS+=("$PID")
    for i in $(seq 1 1000); do mountpoint -q "$M" && break; sleep 0.01; done
    ls "$M" >/dev/null
    awk '/^rchar/ {print $2}' "/proc/$PID/io" >>"$W/r/$1"
    fusermount3 -u "$M"
    wait "$PID"
}
read_outs() { cat "$M"/*/out; }
# mounted_read NAME MODEL: mount (the index present), drop caches, measure
# `cat M/*/out` as NAME; NAME.mount gets the mount's own cost.
mounted_read() {
    measure "$1.mount" "$CKPTFS" -o ro "$2" "$M"
    PID=$(getfattr --absolute-names --only-values -n user.ckptfs.pid "$M")
    PIDS+=("$PID")
    measure "$1" read_outs
    fusermount3 -u "$M"
    while ! exited "$PID"; do sleep 0.01; done
}

echo "# $REPS rounds: floor, first mount, second mount over s3fs; first and second mount of the local copy"
for r in $(seq "$REPS"); do
    for f in "${FORMATS[@]}"; do
        measure "$f.floor" $PY bench/format_floor.py read "$S3/t.$f" "$W/$f.ranges"
        rm -rf "$IDX"
        mount_up "$f.first" "$S3/t.$f"
        mount_up "$f.second" "$S3/t.$f"
        rm -rf "$IDX"
        local_mount "$f.lfirst" "$W/local/t.$f"
        local_mount "$f.lsecond" "$W/local/t.$f"
    done
    echo "round $r done"
done

echo "# $REPS rounds: cat of every out after a fresh mount against cat of the object (s3fs, then local)"
for f in "${FORMATS[@]}"; do # the saved index of each model, as after any first mount
    mount_ls_umount "$S3/t.$f"
    mount_ls_umount "$W/local/t.$f"
    # the same tree copied to ext4: what reading N files costs any
    # filesystem, against one file's stream
    "$CKPTFS" -o ro "$W/local/t.$f" "$M"
    PID=$(getfattr --absolute-names --only-values -n user.ckptfs.pid "$M")
    PIDS+=("$PID")
    mkdir -p "$W/tree.$f"
    cp -r "$M"/. "$W/tree.$f"/
    fusermount3 -u "$M"
    while ! exited "$PID"; do sleep 0.01; done
done
tree_outs() { cat "$W/tree.$1"/*/out; }
for r in $(seq "$REPS"); do
    for f in "${FORMATS[@]}"; do
        measure "$f.cat" cat "$S3/t.$f"
        mounted_read "$f.outs" "$S3/t.$f"
        measure "$f.lcat" cat "$W/local/t.$f"
        mounted_read "$f.louts" "$W/local/t.$f"
        measure "$f.tree" tree_outs "$f"
    done
    echo "round $r done"
done

# col NAME K: the median of column K of $W/r/NAME
col() { awk -v k="$2" '{print $k}' "$W/r/$1" | median; }
hdr() { awk '{s += $2} END {print s}' "$W/$1.ranges"; }
mib() { awk -v b="$1" 'BEGIN {printf "%.2f MiB", b / 1048576}'; }
row() { # LABEL VALUE...: one line of the table
    local label=$1
    shift
    printf '| %-46s |' "$label"
    printf ' %-21s |' "$@"
    echo
}
rows() { # LABEL FUNCTION: a row with FUNCTION F for each format F
    local label=$1 fn=$2 vals=() f
    for f in "${FORMATS[@]}"; do vals+=("$($fn "$f")"); done
    row "$label" "${vals[@]}"
}
echo
echo "## $N tensors, $((SIZE >> 20)) MiB; medians of $REPS; s3fs -o $S3FS_OPTS"
row "measure" "${FORMATS[@]}"
echo "|---|---|---|---|"
f_size() { mib "$(stat -c %s "$W/local/t.$1")"; }
rows "file size" f_size
st_floor=$(col safetensors.floor 2)
f_hdr() { echo "$(hdr "$1") B in $(wc -l <"$W/$1.ranges") ranges"; }
f_floor() { echo "$(mib "$(col "$1.floor" 2)"), $(col "$1.floor" 3) req"; }
f_first() { echo "$(mib "$(col "$1.first" 2)"), $(col "$1.first" 3) req"; }
f_first_t() { echo "$(col "$1.first.up" 1) s, $(col "$1.first" 1) s"; }
f_first_r() { ratio "$(col "$1.first" 2)" "$(col "$1.floor" 2)"; }
f_second() { echo "$(mib "$(col "$1.second" 2)"), $(col "$1.second" 3) req"; }
f_second_t() { echo "$(col "$1.second.up" 1) s, $(col "$1.second" 1) s"; }
f_second_r() { ratio "$(col "$1.second" 2)" "$(col "$1.floor" 2)"; }
f_second_st() { ratio "$(col "$1.second" 2)" "$st_floor"; }
f_lfirst() { echo "$(col "$1.lfirst" 1) B, $(ratio "$(col "$1.lfirst" 1)" "$(hdr "$1")")x"; }
f_lsecond() { echo "$(col "$1.lsecond" 1) B, $(ratio "$(col "$1.lsecond" 1)" "$(hdr "$1")")x"; }
f_lsecond_st() { ratio "$(col "$1.lsecond" 1)" "$(col safetensors.lsecond 1)"; }
f_outs() { echo "$(col "$1.outs" 1) s, $(mib "$(col "$1.outs" 2)")"; }
f_cat() { echo "$(col "$1.cat" 1) s, $(mib "$(col "$1.cat" 2)")"; }
f_outs_r() { ratio "$(col "$1.outs" 1)" "$(col "$1.cat" 1)"; }
f_mo() { # mount + reads, against cat: time, bytes
    local t b
    t=$(awk '{print $1}' "$W/r/$1.outs" | paste -d' ' - <(awk '{print $1}' "$W/r/$1.outs.mount") | awk '{print $1 + $2}' | median)
    b=$(awk '{print $2}' "$W/r/$1.outs" | paste -d' ' - <(awk '{print $2}' "$W/r/$1.outs.mount") | awk '{print $1 + $2}' | median)
    echo "$(ratio "$t" "$(col "$1.cat" 1)") time, $(ratio "$b" "$(col "$1.cat" 2)") bytes"
}
f_mount_r() { echo "$(col "$1.outs.mount" 1) s, $(mib "$(col "$1.outs.mount" 2)")"; }
f_louts() { echo "$(col "$1.louts" 1) s against $(col "$1.lcat" 1) s"; }
f_louts_r() { ratio "$(col "$1.louts" 1)" "$(col "$1.lcat" 1)"; }
f_tree() { echo "$(col "$1.tree" 1) s, $(ratio "$(col "$1.tree" 1)" "$(col "$1.lcat" 1)") of the file"; }
f_louts_tree() { ratio "$(col "$1.louts" 1)" "$(col "$1.tree" 1)"; }
f_outs_tree() { # over s3fs, against cat of the object plus what N files cost on ext4
    awk -v o="$(col "$1.outs" 1)" -v c="$(col "$1.cat" 1)" -v t="$(col "$1.tree" 1)" \
        -v l="$(col "$1.lcat" 1)" 'BEGIN {printf "%.2f", o / (c + t - l)}'
}
rows "header bytes (the format's own)" f_hdr
rows "floor over s3fs: lo bytes, requests" f_floor
rows "first mount: lo bytes, requests" f_first
rows "first mount: time live, time to unmounted" f_first_t
rows "first mount / floor, bytes (target <= 1.3)" f_first_r
rows "second mount: lo bytes, requests" f_second
rows "second mount: time live, time to unmounted" f_second_t
rows "second mount / floor, bytes" f_second_r
rows "second / safetensors floor (.ckpt: <= 1)" f_second_st
rows "local first mount: rchar, / header bytes" f_lfirst
rows "local second mount: rchar, / header bytes" f_lsecond
rows "local second / local safetensors mount" f_lsecond_st
rows "mount for the reads (index present)" f_mount_r
rows "cat M/*/out: time, lo bytes" f_outs
rows "cat of the object via s3fs: time, lo bytes" f_cat
rows "outs / cat, time (target <= 1.3)" f_outs_r
rows "mount + outs / cat" f_mo
rows "local: cat M/*/out against cat of the file" f_louts
rows "local: outs / cat, time" f_louts_r
rows "same tree on ext4: cat of its outs" f_tree
rows "local: outs / the ext4 tree, time" f_louts_tree
rows "outs / (cat + the ext4 tree's per-file cost)" f_outs_tree

if [ "${STRACE:-1}" = 1 ]; then
    echo
    echo "## the daemon's reads of the s3fs file during cat M/*/out (strace; not timed)"
    for f in "${FORMATS[@]}"; do
        "$CKPTFS" -o ro "$S3/t.$f" "$M"
        PID=$(getfattr --absolute-names --only-values -n user.ckptfs.pid "$M")
        PIDS+=("$PID")
        fd=
        for l in /proc/"$PID"/fd/*; do
            [ "$(readlink "$l")" = "$S3/t.$f" ] && fd=$(basename "$l")
        done
        drop_caches
        strace -f -e trace=pread64,read,preadv,preadv2,splice -o "$W/strace.$f" -p "$PID" 2>/dev/null &
        SPID=$!
        sleep 1 # attached
        read_outs >/dev/null
        kill "$SPID"
        wait "$SPID" 2>/dev/null || true
        SPID=
        fusermount3 -u "$M"
        while ! exited "$PID"; do sleep 0.01; done
        # calls on the model's descriptor: count, MiB asked, median and largest size asked
        $PY - "$W/strace.$f" "$fd" "$f" <<'PY'
import re, statistics, sys
path, fd, fmt = sys.argv[1:]
asked = {}
for line in open(path):
    m = re.search(r"\b(pread64|read|preadv2?|splice)\((\d+), (.*)", line)
    if not m or m.group(2) != fd:
        continue
    args = re.sub(r'"(?:[^"\\]|\\.)*"(\.\.\.)?', "S", m.group(3)).split(", ")
    n = args[3] if m.group(1) == "splice" else args[1]
    asked.setdefault(m.group(1), []).append(int(n))
for call, v in sorted(asked.items()):
    print("%s: %s on the model, %d calls, %.2f MiB asked, median %d B, largest %d B"
          % (fmt, call, len(v), sum(v) / 1048576, statistics.median(v), max(v)))
PY
    done
fi
