# SPDX-License-Identifier: Apache-2.0
# Shared setup for the bats suites: paths, the oracle, and mounts that are
# always torn down (teardown unmounts every mount the test made, waits for
# each daemon it started and fails the test if a daemon exited non-zero —
# which is also how sanitizer reports in the daemon surface).

REPO=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)
BUILD=${CKPTFS_BUILD:-$REPO/build}
CKPTFS=$BUILD/ckptfs
# The physical path: ckptfs names a model by its real path in messages, and
# ../shared may be a symbolic link.
FIXTURES=$(cd "$REPO/../shared/fixtures" 2>/dev/null && pwd -P)
MS=$FIXTURES/mindspore
PY=/usr/bin/python3
# A file whose setup_file called pyserve_file_start: its oracles' calls go
# through one Python that imported them (and torch, onnx, numpy) once.
if [ -n "${PYSERVE_SOCK:-}" ] && [ -S "$PYSERVE_SOCK" ]; then
    PY="/usr/bin/python3 -S -I $REPO/tests/oracle/pyserve.py call $PYSERVE_SOCK"
fi
ORACLE="$PY $REPO/tests/oracle/ckpt_oracle.py"
# Saved indexes (on by default) go to a directory of this run, never the
# user's ~/.cache; a suite's second mount of a file then loads its index.
export XDG_CACHE_HOME=$BATS_RUN_TMPDIR/cache

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

# sanitized: the ckptfs under test is an ASan or TSan build, whose shadow
# memory no address-space or data limit leaves room for.
sanitized() { ldd "$CKPTFS" | grep -q 'lib[at]san'; }

# running_child PID: PID is a child of this shell that has not exited.
# Not `kill -0`: pid_max is 32768 on the test machines and bash reaps a
# background child as soon as it exits, so its pid is soon another
# process's; a guard that polled kill -0 once took a clean exit for a
# daemon alive 120 s after its unmount, and killed that other process.
running_child() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) } # after "pid (comm) ": state, ppid, ...
    set -- $stat
    [ "$1" != Z ] && [ "$2" = "$$" ]
}

# kill_while_writing DIR OUT CMD...: run CMD in the background and kill -9
# it once a temporary file (.*ckptfs-*, not the lock) is in DIR and before
# it ends; a run that finished first proves nothing, so up to 5 tries, each
# after removing what it wrote (DIR/OUT, DIR/OUT.data, the temporaries).
# Fails unless one run was killed with DIR/OUT absent.
kill_while_writing() {
    local dir=$1 out=$2 pid killed _
    shift 2
    for _ in 1 2 3 4 5; do
        killed=
        "$@" 2>/dev/null &
        pid=$!
        while running_child $pid &&
              [ -z "$(ls -A "$dir" | grep '\.ckptfs-' | grep -v lock)" ]; do
            :
        done
        running_child $pid && kill -9 $pid 2>/dev/null && killed=1
        wait $pid || true
        [ -n "$killed" ] && [ ! -e "$dir/$out" ] && return 0
        rm -rf "${dir:?}/$out" "$dir/$out.data" "$dir"/.*ckptfs-*
    done
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

# unmount MNT: unmount a mount_fg mount now (teardown forgets it); the
# status is its daemon's exit status.
unmount() {
    local pid
    pid=$(awk -v m="$1" '$2 == m {print $1}' "$BATS_TEST_TMPDIR/mounts")
    [ -n "$pid" ]
    awk -v m="$1" '$2 != m' "$BATS_TEST_TMPDIR/mounts" >"$BATS_TEST_TMPDIR/mounts.new"
    mv "$BATS_TEST_TMPDIR/mounts.new" "$BATS_TEST_TMPDIR/mounts"
    umount_wait "$1" "$pid"
}

# mount_refused ARGS...: `ckptfs ARGS... $M` refuses before mounting: exit 1, nothing on stdout,
# one stderr line starting `ckptfs: ` (kept in $BATS_TEST_TMPDIR/err), $M no mount and still empty
mount_refused() {
    mkdir -p "$M"
    echo "0 $M" >>"$BATS_TEST_TMPDIR/mounts"   # torn down if it did mount
    local st=0
    $CKPTFS "$@" "$M" >"$BATS_TEST_TMPDIR/out" 2>"$BATS_TEST_TMPDIR/err" </dev/null || st=$?
    echo "exit $st: $(cat "$BATS_TEST_TMPDIR/err")"
    [ "$st" -eq 1 ]
    [ ! -s "$BATS_TEST_TMPDIR/out" ]
    [ "$(wc -l <"$BATS_TEST_TMPDIR/err")" -eq 1 ]
    grep -q '^ckptfs: ' "$BATS_TEST_TMPDIR/err"
    ! mountpoint -q "$M" || false
    ! grep -qF " $M " /proc/mounts || false
    [ -z "$(ls -A "$M")" ]
}

# daemon_pid: the pid of the newest mount_fg daemon.
daemon_pid() { tail -1 "$BATS_TEST_TMPDIR/mounts" | cut -d' ' -f1; }

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
    # The object store (s3_helpers.bash) the mounts above may have read
    # from, once they are down.
    if declare -F s3_stop >/dev/null; then
        s3_stop || { echo "the s3fs mount or s3rver did not stop" >&2; failed=1; }
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

# A run directory's mount at $M (run_mount, iteration_dir).  listed NAME: NAME
# is in its root listing.  until_listed NAME / until_gone NAME: a bounded wait
# for the daemon to follow the directory (a bound so that a broken build
# cannot hang, not a time limit).
listed() { ls -A "$M" | grep -qxF -- "$1"; }
# root_names: its root listing, sorted bytewise, one a line.
root_names() { ls -A "$M" | LC_ALL=C sort; }
# mounted_tree DIR: every entry's path, type, mode, size and mtime; then
# every xattr (but the daemon's pid, which differs between two daemons):
# how a run's checkpoint is compared with a mount of it alone.
mounted_tree() {
    (cd "$1" && find . -printf '%P %y %m %s %T@\n' | LC_ALL=C sort &&
        getfattr -R -d -m - . 2>/dev/null | grep -v '^user\.ckptfs\.pid=')
}
# same_as_mount ENTRY DIR MNT LINES: DIR mounted alone at MNT shows the
# tree the run mount's ENTRY shows (mounted_tree), of more than LINES
# lines, and the run lists ENTRY with the mode and time of MNT's root.
same_as_mount() {
    local listed
    listed=$(stat -c '%A %Y' "$1")
    mount_fg "$2" "$3"
    mounted_tree "$1" >"$BATS_TEST_TMPDIR/run.tree"
    mounted_tree "$3" >"$BATS_TEST_TMPDIR/one.tree"
    diff "$BATS_TEST_TMPDIR/one.tree" "$BATS_TEST_TMPDIR/run.tree"
    [ "$(wc -l <"$BATS_TEST_TMPDIR/one.tree")" -gt "$4" ]
    [ "$listed" = "$(stat -c '%A %Y' "$3")" ]
}
# run_dir_setup: T the test's directory, D an empty run directory in it,
# M where it is to be mounted (run_dcp, run_oneflow).
run_dir_setup() {
    T=$BATS_TEST_TMPDIR
    M=$T/m
    D=$T/run
    mkdir "$D"
}
until_listed() {
    local i
    for i in $(seq 1 400); do listed "$1" && return 0; sleep 0.05; done
    echo "$1 never appeared in the listing: $(ls -A "$M" | tr '\n' ' ')" >&2
    return 1
}
until_gone() {
    local i
    for i in $(seq 1 400); do listed "$1" || return 0; sleep 0.05; done
    echo "$1 never left the listing" >&2
    return 1
}

# readers_agree MNT EXPECTED: four readers in parallel each cat every out of
# MNT; each copy must equal EXPECTED's (a tree of the same names).
readers_agree() {
    local mnt=$1 expected=$2 p d pids=()
    for p in 1 2 3 4; do
        (for d in "$mnt"/*/; do
             cat "$d/out" >"$BATS_TEST_TMPDIR/r$p.$(basename "$d")" || exit 1
         done) &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p"; done
    for p in 1 2 3 4; do
        for d in "$expected"/*/; do
            cmp "$d/out" "$BATS_TEST_TMPDIR/r$p.$(basename "$d")"
        done
    done
}

# The -o option that selects the multi-threaded request loop, as `ckptfs
# --help` names it; empty when the build has none.  Suites run their
# concurrency cases once more with it.
MT_OPT=$("$CKPTFS" --help 2>&1 | grep -o -- '-o threads\(=[0-9]*\)\?\b\|-o multithread[a-z_]*' |
         head -1 | sed 's/^-o //')

ONNX_FIX=$FIXTURES/onnx
GRAPH_ORACLE="$PY $REPO/tests/oracle/graph_oracle.py"

# pyserve_file_start MODULE|SCRIPT.py... (in setup_file): one Python for the
# file's oracle calls (tests/oracle/pyserve.py), which has imported
# MODULE... and SCRIPT.py... once; every test's $PY, and the oracles' commands
# made of it, then run through it: the same arguments, streams, directory,
# environment and exit status, without an interpreter's start and imports
# each.  Only for files that never kill an oracle's process (killing a call
# would not stop the server's child running it).  pyserve_file_stop (in
# teardown_file) stops it, by its pid.
pyserve_file_start() {
    local i
    export PYSERVE_SOCK=$BATS_FILE_TMPDIR/py.sock
    # fd 3 closed: bats waits for it; the server is ours until teardown_file
    /usr/bin/python3 "$REPO/tests/oracle/pyserve.py" serve "$PYSERVE_SOCK" "$@" \
        </dev/null >/dev/null 2>>"$BATS_FILE_TMPDIR/pyserve.log" 3>&- &
    export PYSERVE_PID=$!
    # Bounded, so a broken install cannot hang a run; not a timing check.
    for i in $(seq 1 1200); do
        [ -S "$PYSERVE_SOCK" ] && return 0
        [ -d "/proc/$PYSERVE_PID" ] || break
        sleep 0.05
    done
    cat "$BATS_FILE_TMPDIR/pyserve.log" >&2
    return 1
}
pyserve_file_stop() {
    local i
    [ -n "${PYSERVE_PID:-}" ] || return 0
    kill "$PYSERVE_PID" 2>/dev/null || return 0
    for i in $(seq 1 200); do # gone, or a zombie of the file's own shell
        case $(cut -d' ' -f3 "/proc/$PYSERVE_PID/stat" 2>/dev/null) in '' | Z) return 0 ;; esac
        sleep 0.05
    done
    echo "pyserve $PYSERVE_PID did not stop" >&2
    return 1
}
