#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Requests during a save (issue 12): how long a stat of a meta and a 4 KiB
# read of an out take while a big save runs, against the save's duration and
# against the same requests on an idle mount; the first lookup of a tensor
# during a save started by touch (a create) and by fsync (issue 26); and
# `find` over many tensors
# on a writable mount (automatic save on) against a read-only mount of the
# same file.  For BUILD and, side by side in the same run, an OTHER build
# (the commit before the saver thread, say).
#
#   bench/bench_save.sh [BUILD [OTHER]]
#     env: GIB=4 (model size) TENSORS=8 (its tensors) SAMPLES=40 (idle samples)
#          REPS=3 (find runs) FIND_TENSORS=100000 OPTS= (extra -o options, e.g.
#          the multi-threaded loop)
#
# Targets: during a save, median latency < 50 ms and max < 0.05x the save's
# duration; find on the writable mount <= 1.2x the read-only one.
set -euo pipefail
cd "$(dirname "$0")/.."
GIB=${GIB:-4}
TENSORS=${TENSORS:-8}
SAMPLES=${SAMPLES:-40}
REPS=${REPS:-3}
FIND_TENSORS=${FIND_TENSORS:-100000}
OPTS=${OPTS:-}
W=$(mktemp -d "${BENCH_DIR:-/var/tmp}/ckptfs-save.XXXXXX")
cleanup() {
    local m
    for m in "$W/m" "$W/ro"; do
        mountpoint -q "$m" && fusermount3 -u "$m"
    done
    rm -rf "$W"
}
trap cleanup EXIT
mkdir "$W/m" "$W/ro"

. bench/bench_lib.sh

# The sampler: starts the save (touch snapshot_done) itself, so that its
# clock and the save's share one origin; from 0.3 s into the save until it
# returns, a stat of META and a 4 KiB read of OUT every ~50 ms, each at a
# fresh offset (a page the kernel has not cached, so the read reaches the
# daemon).  With --idle, SAMPLES rounds on the idle mount instead.
cat >"$W/sample.py" <<'PY'
import os, subprocess, sys, threading, time
mode, mnt, meta, out = sys.argv[1:5]
samples = int(sys.argv[5])
size = os.stat(out).st_size
lat, k = [], [0]

def once():
    off = (k[0] * (8 << 20) + 4096 * k[0]) % max(size - 4096, 1) // 4096 * 4096
    k[0] += 1
    t0 = time.perf_counter()
    os.stat(meta)
    fd = os.open(out, os.O_RDONLY)
    try:
        os.pread(fd, 4096, off)
    finally:
        os.close(fd)
    lat.append((time.perf_counter() - t0, t0))

if mode == "idle":
    for _ in range(samples):
        once()
        time.sleep(0.05)
    dur = 0.0
else:
    end = []
    t_start = time.perf_counter()
    p = subprocess.Popen(["touch", os.path.join(mnt, "snapshot_done")])
    waiter = threading.Thread(target=lambda: (p.wait(), end.append(time.perf_counter())))
    waiter.start()
    time.sleep(0.3)
    while not end:
        t = time.perf_counter()
        once()
        left = 0.05 - (time.perf_counter() - t)
        if left > 0 and not end:
            time.sleep(left)
    waiter.join()
    if p.returncode != 0:
        sys.exit("the save failed")
    dur = end[0] - t_start
if mode == "idle":
    t_start = lat[0][1]
lat.sort()
worst = lat[-1]
# count, median, p95, max, the max's start into the save, the save's duration
print("%d %.6f %.6f %.6f %.3f %.6f" % (len(lat), lat[(len(lat) - 1) // 2][0],
                                       lat[(len(lat) * 95 - 1) // 100][0], worst[0],
                                       worst[1] - t_start, dur))
PY

# The first lookup (issue 26): starts the save with HOW (touch: creating
# snapshot_done; fsync: of a meta), waits until its temporary file is
# beside the model, then stats a tensor directory not looked up before and
# reads 4 KiB of its out; prints that latency and the save's duration.
cat >"$W/first.py" <<'PY'
import os, subprocess, sys, time
how, mnt, model, tensor = sys.argv[1:5]
d, base = os.path.split(model)
t0 = time.perf_counter()
if how == "touch":
    p = subprocess.Popen(["touch", os.path.join(mnt, "snapshot_done")])
else:
    p = subprocess.Popen(["/usr/bin/python3", "-c", "import os, sys; os.fsync(os.open(sys.argv[1], os.O_RDONLY))",
                          os.path.join(mnt, "layer.0.weight", "meta")])
while p.poll() is None and not any(n.startswith("." + base + ".ckptfs-") and not n.endswith("-lock")
                                   for n in os.listdir(d)):
    time.sleep(0.001)
t1 = time.perf_counter()
os.stat(os.path.join(mnt, tensor))
fd = os.open(os.path.join(mnt, tensor, "out"), os.O_RDONLY)
os.pread(fd, 4096, 0)
os.close(fd)
t2 = time.perf_counter()
running = p.poll() is None
p.wait()
if p.returncode != 0:
    sys.exit("the save failed")
print("%.6f %.6f %s" % (t2 - t1, time.perf_counter() - t0, "during" if running else "after"))
PY

# first_lookup BUILD HOW: the first lookup of a tensor while HOW's save runs.
first_lookup() {
    local b=$1 how=$2 lat dur when
    sync
    "$b/ckptfs" -o commit=manual${OPTS:+,$OPTS} "$W/model.ckpt" "$W/m"
    printf '%04d' "$RANDOM" | dd of="$W/m/layer.0.weight/out" bs=1 seek=4096 conv=notrunc \
        status=none
    read -r lat dur when < <(/usr/bin/python3 "$W/first.py" "$how" "$W/m" "$W/model.ckpt" \
        layer.3.weight)
    fusermount3 -u "$W/m"
    while pgrep -f -- "$b/ckptfs -o commit=manual" >/dev/null; do sleep 0.1; done
    echo "$b: save started by $how, ${dur}s: first stat + 4 KiB read of a tensor ${lat}s" \
        "(ended $when the save), ratio $(ratio "$lat" "$dur")"
}

# during_save BUILD: idle latency, then the latency during one save.
during_save() {
    local b=$1 n med p95 mx at dur idle_med idle_max
    # no writeback of earlier runs' files under this one's save
    sync
    "$b/ckptfs" -o commit=manual${OPTS:+,$OPTS} "$W/model.ckpt" "$W/m"
    read -r n idle_med p95 idle_max at dur < <(/usr/bin/python3 "$W/sample.py" idle "$W/m" \
        "$W/m/layer.1.weight/meta" "$W/m/layer.1.weight/out" "$SAMPLES")
    printf '%04d' "$RANDOM" | dd of="$W/m/layer.0.weight/out" bs=1 seek=4096 conv=notrunc \
        status=none
    read -r n med p95 mx at dur < <(/usr/bin/python3 "$W/sample.py" save "$W/m" \
        "$W/m/layer.2.weight/meta" "$W/m/layer.2.weight/out" 0)
    fusermount3 -u "$W/m"
    # the next mount waits for this daemon's exit (the writer lock)
    while pgrep -f -- "$b/ckptfs -o commit=manual" >/dev/null; do sleep 0.1; done
    echo "$b: idle: stat+4KiB read median ${idle_med}s max ${idle_max}s ($SAMPLES samples)"
    echo "$b: during a save of ${dur}s: $n samples, median ${med}s p95 ${p95}s max ${mx}s" \
        "(issued ${at}s into the save);" \
        "median/idle $(ratio "$med" "$idle_med"), max/save $(ratio "$mx" "$dur")" \
        "(targets: median < 0.05s, max/save < 0.05)"
}

# find_ratio BUILD: find over the many-tensor model, writable vs read-only.
find_ratio() {
    local b=$1 rw ro i
    "$b/ckptfs" -o rw${OPTS:+,$OPTS} "$W/many.ckpt" "$W/m"
    "$b/ckptfs" -o ro${OPTS:+,$OPTS} "$W/many.ckpt" "$W/ro"
    find "$W/m" >/dev/null
    find "$W/ro" >/dev/null
    : >"$W/rw.times"
    : >"$W/ro.times"
    for i in $(seq "$REPS"); do
        timed find "$W/m" >>"$W/rw.times"
        timed find "$W/ro" >>"$W/ro.times"
    done
    rw=$(median <"$W/rw.times")
    ro=$(median <"$W/ro.times")
    fusermount3 -u "$W/m"
    fusermount3 -u "$W/ro"
    while pgrep -f -- "$b/ckptfs -o r[wo]" >/dev/null; do sleep 0.1; done
    echo "$b: find over $FIND_TENSORS tensors: writable (automatic save) ${rw}s," \
        "read-only ${ro}s, ratio $(ratio "$rw" "$ro")  (target <= 1.2)"
}

echo "# $GIB GiB in $TENSORS tensors; $FIND_TENSORS small tensors"
/usr/bin/python3 bench/gen_ckpt.py "$W/model.ckpt" --size $((GIB << 30)) --count "$TENSORS"
/usr/bin/python3 bench/gen_ckpt.py "$W/many.ckpt" --size $((FIND_TENSORS * 16)) \
    --count "$FIND_TENSORS"
cat "$W/model.ckpt" >/dev/null
echo "## 1. a stat and a 4 KiB read while a one-tensor edit of $GIB GiB is saved"
for b in "${1:-build}" ${2:+"$2"}; do
    during_save "$(realpath "$b")"
done
echo "## 2. the first lookup of a tensor during a save started by touch (create) or fsync"
for b in "${1:-build}" ${2:+"$2"}; do
    first_lookup "$(realpath "$b")" touch
    first_lookup "$(realpath "$b")" fsync
done
echo "## 3. find: writable mount with the automatic save vs read-only"
for b in "${1:-build}" ${2:+"$2"}; do
    find_ratio "$(realpath "$b")"
done
