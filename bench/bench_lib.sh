# SPDX-License-Identifier: Apache-2.0
# Helpers shared by the benchmark scripts (sourced; they set CKPTFS and W).

now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN {printf "%.6f\n", b - a}'; }

# gen_many_and_big: $W/many.ckpt ($N tensors of 64 bytes) and $W/big.ckpt
# ($MIB MiB in 64 tensors), read once into the page cache; $M made.
gen_many_and_big() {
    echo "# generating $N small tensors and $MIB MiB in 64 tensors"
    /usr/bin/python3 bench/gen_ckpt.py "$W/many.ckpt" --size $((N * 64)) --count "$N"
    /usr/bin/python3 bench/gen_ckpt.py "$W/big.ckpt" --size $((MIB << 20)) --count 64
    cat "$W/many.ckpt" "$W/big.ckpt" >/dev/null
    mkdir -p "$M"
}

# mount_timed MODEL MNT -> prints seconds; the daemonized command returns
# when the mount is live, so its run time is the mount time.
mount_timed() {
    local t0 t1
    t0=$(now)
    "$CKPTFS" -o ro "$1" "$2" || return
    t1=$(now)
    MOUNTS+=("$2")
    awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.6f\n", b - a}'
}
daemon_pid() { pgrep -n -f -- "$CKPTFS -o ro $1 $2"; }
hwm_kib() { awk '/^VmHWM/ {print $2}' "/proc/$1/status"; }
timed() { local t0; t0=$(now); "$@" >/dev/null; awk -v a="$t0" -v b="$(now)" 'BEGIN {printf "%.6f\n", b - a}'; }

# read_round_robin DIR P: P cats at once over DIR's outs, dealt round-robin.
read_round_robin() {
    local dir=$1 p=$2 i j outs
    outs=("$dir"/*/out)
    for ((i = 0; i < p; i++)); do
        local mine=()
        for ((j = i; j < ${#outs[@]}; j += p)); do mine+=("${outs[j]}"); done
        cat "${mine[@]}" >/dev/null &
    done
    wait
}

# Mounts on $M of models under $W, timed, their daemons tracked by pid (set
# W, M, CKPTFS and PIDS=() first; `trap cleanup_mounts EXIT`).
# mnt OPTS MODEL: mount on $M; sets T_MOUNT (seconds) and PID.  Not in a
# subshell, so that PIDS keeps the daemon for the cleanup.
mnt() {
    local t0
    t0=$(now)
    "$CKPTFS" -o "$1" "$2" "$M"
    T_MOUNT=$(awk -v a="$t0" -v b="$(now)" 'BEGIN {printf "%.6f", b - a}')
    PID=$(getfattr --absolute-names --only-values -n user.ckptfs.pid "$M" 2>/dev/null ||
          pgrep -n -f -- "$CKPTFS -o $1 $2 $M")
    PIDS+=("$PID")
}
# umnt: unmount $M and wait for the daemon ($PID) to exit.
umnt() {
    fusermount3 -u "$M"
    while kill -0 "$PID" 2>/dev/null; do sleep 0.02; done
}
# cleanup_mounts: unmount $M, end only the daemons mnt started (by pid, if
# one outlived its mount), remove $W.
cleanup_mounts() {
    mountpoint -q "$M" && fusermount3 -u "$M"
    for p in "${PIDS[@]}"; do
        kill -0 "$p" 2>/dev/null || continue
        [[ "$(tr '\0' ' ' <"/proc/$p/cmdline")" == "$CKPTFS -o "*" $W/"* ]] && kill "$p"
    done
    rm -rf "$W"
}


# Object storage, as tests/bats/s3_helpers.bash sets it up (without bats):
# s3rver (npm, tests/s3/node_modules: `make deps`) on 127.0.0.1, a port the
# kernel picks, one bucket, and s3fs (Debian) mounting it.
# s3_bench_start DIR: starts both under DIR (data/, mnt/, s3rver.log,
# s3fs.log); sets S3 (the s3fs mount), S3_URL (http://127.0.0.1:PORT/BUCKET),
# S3_LOG (s3rver's log: one line per answered request), S3RVER_PID, S3FS_PID.
# S3FS_OPTS: those of the tests (path requests, attributes kept 1 s).
S3_BUCKET=ckpt
S3FS_OPTS=${S3FS_OPTS:-use_path_request_style,stat_cache_expire=1,dbglevel=warn}
S3RVER_PID=
S3FS_PID=
s3_bench_start() {
    local d=$1 i port=
    local js=$PWD/tests/s3/node_modules/s3rver/bin/s3rver.js
    [ -f "$js" ] || { echo "s3rver is not installed: make deps" >&2; return 1; }
    command -v s3fs >/dev/null || { echo "s3fs is not installed: make deps" >&2; return 1; }
    mkdir -p "$d/data" "$d/mnt"
    S3_LOG=$d/s3rver.log
    : >"$S3_LOG" # before the server's own redirection, which runs in the background
    node "$js" -d "$d/data" -a 127.0.0.1 -p 0 --configure-bucket "$S3_BUCKET" >"$S3_LOG" 2>&1 &
    S3RVER_PID=$!
    for i in $(seq 1 400); do
        port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$S3_LOG")
        [ -n "$port" ] && break
        kill -0 "$S3RVER_PID" 2>/dev/null || { cat "$S3_LOG" >&2; return 1; }
        sleep 0.05
    done
    [ -n "$port" ] || { echo "s3rver did not start" >&2; return 1; }
    S3_URL=http://127.0.0.1:$port/$S3_BUCKET
    for i in $(seq 1 200); do
        [ "$(curl -s -o /dev/null -w '%{http_code}' "$S3_URL")" = 200 ] && break
        sleep 0.05
    done
    echo 'S3RVER:S3RVER' >"$d/passwd" # s3rver's default key pair
    chmod 0600 "$d/passwd"
    S3=$d/mnt
    s3fs "$S3_BUCKET" "$S3" -f -o "url=http://127.0.0.1:$port,passwd_file=$d/passwd,$S3FS_OPTS" \
        >"$d/s3fs.log" 2>&1 &
    S3FS_PID=$!
    for i in $(seq 1 400); do
        mountpoint -q "$S3" && return 0
        kill -0 "$S3FS_PID" 2>/dev/null || { cat "$d/s3fs.log" >&2; return 1; }
        sleep 0.05
    done
    echo "s3fs did not mount the bucket" >&2
    return 1
}
# s3_bench_stop: unmount s3fs (lazily if a mount over it was left) and stop
# both servers, by the pids s3_bench_start recorded.
s3_bench_stop() {
    if [ -n "$S3FS_PID" ]; then
        mountpoint -q "$S3" && { fusermount3 -u "$S3" 2>/dev/null || fusermount3 -uz "$S3"; }
        kill -0 "$S3FS_PID" 2>/dev/null && { sleep 0.5; kill "$S3FS_PID" 2>/dev/null; }
        wait "$S3FS_PID" 2>/dev/null || true
        S3FS_PID=
    fi
    if [ -n "$S3RVER_PID" ]; then
        kill "$S3RVER_PID" 2>/dev/null || true
        wait "$S3RVER_PID" 2>/dev/null || true
        S3RVER_PID=
    fi
}
# s3_put FILE KEY: PUT FILE into the bucket as KEY, straight to the server.
s3_put() {
    local code
    code=$(curl -s -o /dev/null -w '%{http_code}' -X PUT -T "$1" "$S3_URL/$2")
    [ "$code" = 200 ] || { echo "PUT $2: HTTP $code" >&2; return 1; }
}
# lo_rx: bytes received on the loopback interface so far.
lo_rx() { awk -F'[: ]+' '$2 == "lo" {print $3}' /proc/net/dev; }
# drop_caches: write back, then drop the page cache, dentries and inodes
# (also what the kernel keeps of s3fs's and ckptfs's files).
drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches; }
