# Shared setup for the bats suites: paths, the oracle, and mounts that are
# always torn down (teardown unmounts every mount the test made, waits for
# each daemon it started and fails the test if a daemon exited non-zero —
# which is also how sanitizer reports in the daemon surface).

REPO=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)
BUILD=${CKPTFS_BUILD:-$REPO/build}
CKPTFS=$BUILD/ckptfs
FIXTURES=$(cd "$REPO/../shared/fixtures" 2>/dev/null && pwd)
MS=$FIXTURES/mindspore
PY=/usr/bin/python3
ORACLE="$PY $REPO/tests/oracle/ckpt_oracle.py"

# mount_fg MODEL MNT [ckptfs options...]: start a foreground daemon in the
# background and wait until the mount is live (or the daemon died).
mount_fg() {
    local model=$1 mnt=$2
    shift 2
    mkdir -p "$mnt"
    $CKPTFS -f "$@" "$model" "$mnt" 2>>"$BATS_TEST_TMPDIR/daemon.log" &
    local pid=$!
    echo "$pid $mnt" >>"$BATS_TEST_TMPDIR/mounts"
    # A bound on the wait so a broken build cannot hang CI; not a timing check.
    for _ in $(seq 1 600); do
        mountpoint -q "$mnt" && return 0
        kill -0 "$pid" 2>/dev/null || { cat "$BATS_TEST_TMPDIR/daemon.log" >&2; return 1; }
        sleep 0.05
    done
    echo "mount of $model did not come up" >&2
    return 1
}

# umount_wait MNT PID: unmount and collect the daemon's exit status (PID 0:
# a daemonized mount, whose process is not our child).
umount_wait() {
    local mnt=$1 pid=$2 status=0
    if mountpoint -q "$mnt"; then
        fusermount3 -u "$mnt" 2>/dev/null || fusermount3 -uz "$mnt" 2>/dev/null || true
    fi
    if [ -n "$pid" ] && [ "$pid" != 0 ]; then
        wait "$pid" 2>/dev/null || status=$?
    fi
    return "$status"
}

# A suite with its own cleanup defines teardown() and calls this.
ckptfs_teardown() {
    local failed=0
    if [ -f "$BATS_TEST_TMPDIR/mounts" ]; then
        # Newest first; every step runs even if one fails.
        while read -r pid mnt; do
            umount_wait "$mnt" "$pid" || { echo "daemon $pid for $mnt exited non-zero" >&2; failed=1; }
        done < <(tac "$BATS_TEST_TMPDIR/mounts")
        rm -f "$BATS_TEST_TMPDIR/mounts"
    fi
    if [ -s "$BATS_TEST_TMPDIR/daemon.log" ] && grep -q "Sanitizer\|runtime error" "$BATS_TEST_TMPDIR/daemon.log"; then
        cat "$BATS_TEST_TMPDIR/daemon.log" >&2
        failed=1
    fi
    # make tsan: ThreadSanitizer writes each report to $CKPTFS_TSAN_LOGS/tsan.PID
    # (log_path), whether the daemon still has a stderr or not.  A report
    # fails the test that was running; it is then kept in reported/.
    if [ -n "${CKPTFS_TSAN_LOGS:-}" ] && compgen -G "$CKPTFS_TSAN_LOGS/tsan.*" >/dev/null; then
        cat "$CKPTFS_TSAN_LOGS"/tsan.* >&2
        mkdir -p "$CKPTFS_TSAN_LOGS/reported"
        mv "$CKPTFS_TSAN_LOGS"/tsan.* "$CKPTFS_TSAN_LOGS/reported/"
        failed=1
    fi
    return "$failed"
}

teardown() { ckptfs_teardown; }

sha() { sha256sum "$1" | cut -d' ' -f1; }

# rewrite_outs MNT: write every tensor's out again with its own bytes (a
# save must then give back the identical files).
rewrite_outs() {
    local d
    for d in "$1"/*/; do
        cat "$d/out" >"$BATS_TEST_TMPDIR/bytes"
        cat "$BATS_TEST_TMPDIR/bytes" >"$d/out"
    done
}

# The -o option that selects the multi-threaded request loop, as `ckptfs
# --help` names it; empty when the build has none.  Suites run their
# concurrency cases once more with it.
MT_OPT=$("$CKPTFS" --help 2>&1 | grep -o -- '-o threads\(=[0-9]*\)\?\b\|-o multithread[a-z_]*' |
         head -1 | sed 's/^-o //')

ONNX_FIX=$FIXTURES/onnx
GRAPH_ORACLE="$PY $REPO/tests/oracle/graph_oracle.py"
