#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Bounded resources: the daemon's peak RSS (VmHWM) with many `str` values,
# and the descriptors it holds with many edited tensors, for BUILD and,
# side by side, for an OTHER build (an older commit, say).
#
#   bench/bench_bounded.sh [BUILD [OTHER]]   (env: STRS=100000 CHARS=1024 EDITS=200)
set -euo pipefail
cd "$(dirname "$0")/.."
STRS=${STRS:-100000}
CHARS=${CHARS:-1024}
EDITS=${EDITS:-200}
W=$(mktemp -d "${BENCH_DIR:-/var/tmp}/ckptfs-bounded.XXXXXX")
cleanup() {
    mountpoint -q "$W/m" && fusermount3 -u "$W/m"
    rm -rf "$W"
}
trap cleanup EXIT
mkdir "$W/m"

. bench/bench_lib.sh

# str_rss BUILD: mount the str model read-only, read every out, report.
str_rss() {
    local b=$1 pid
    "$b/ckptfs" -f -o ro "$W/strs.ckpt" "$W/m" & pid=$!
    until mountpoint -q "$W/m"; do kill -0 "$pid"; sleep 0.1; done
    local after_mount; after_mount=$(hwm_kib "$pid")
    find "$W/m" -name out -exec cat {} + >/dev/null
    echo "$b: VmHWM after mount ${after_mount} KiB, after reading every out $(hwm_kib "$pid") KiB"
    fusermount3 -u "$W/m"
    wait "$pid"
}

# edit_fds BUILD: edit EDITS tensors, report the daemon's open descriptors.
edit_fds() {
    local b=$1 pid
    cp "$W/many.ckpt" "$W/edit.ckpt"
    "$b/ckptfs" -f -o commit=manual "$W/edit.ckpt" "$W/m" & pid=$!
    until mountpoint -q "$W/m"; do kill -0 "$pid"; sleep 0.1; done
    for i in $(seq 0 $((EDITS - 1))); do
        printf 'abcd' | dd of="$W/m/layer.$i.w/out" conv=notrunc status=none
    done
    echo "$b: $EDITS edited tensors: $(ls "/proc/$pid/fd" | wc -l) open descriptors"
    fusermount3 -u "$W/m"
    wait "$pid" || true
}

echo "# $STRS str values of $CHARS characters"
/usr/bin/python3 tests/oracle/ckpt_oracle.py gen "$W/strs.ckpt" --case strs --count "$STRS" \
    --str-chars "$CHARS"
echo "file: $(stat -c %s "$W/strs.ckpt") bytes"
/usr/bin/python3 tests/oracle/ckpt_oracle.py gen "$W/many.ckpt" --case many --count "$EDITS"
for b in "${1:-build}" ${2:+"$2"}; do
    str_rss "$(realpath "$b")"
    edit_fds "$(realpath "$b")"
done
