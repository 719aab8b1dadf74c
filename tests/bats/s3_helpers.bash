# SPDX-License-Identifier: Apache-2.0
# Object storage for the bats suites: s3rver (npm, tests/s3/, a fake S3
# server) on 127.0.0.1 and s3fs (Debian) mounting its bucket, as the
# storage of docs/guide.md "Shared and object storage".  Load it after
# helpers: ckptfs_teardown calls s3_stop once the ckptfs mounts over the
# bucket are down, so both servers stop even when the test failed.
#
# s3_start: sets S3 (the s3fs mount of the bucket), S3_URL
# (http://127.0.0.1:PORT/BUCKET, for another client's requests), S3_PORT.
# s3_put FILE KEY: another client's write, straight to the server.
# s3_get KEY OUT: another client's read.

S3RVER_JS=$REPO/tests/s3/node_modules/s3rver/bin/s3rver.js
S3_BUCKET=ckpt

# The s3fs options every mount uses, and why:
#  url=...,use_path_request_style: s3rver answers http://HOST:PORT/BUCKET/KEY
#    (no virtual-host buckets on 127.0.0.1);
#  stat_cache_expire=1: another client's change is seen within a second
#    (the default keeps sizes and mtimes for 900 s, so a save's "changed on
#    disk" check would compare against stale attributes);
#  dbglevel=warn: s3fs's own complaints reach s3fs.log.
S3FS_OPTS="use_path_request_style,stat_cache_expire=1,dbglevel=warn"

s3_start() {
    S3_DIR=$BATS_TEST_TMPDIR/s3
    mkdir -p "$S3_DIR/data" "$S3_DIR/mnt"
    [ -f "$S3RVER_JS" ] || { echo "s3rver is not installed: make deps" >&2; return 1; }
    command -v s3fs >/dev/null || { echo "s3fs is not installed: make deps" >&2; return 1; }
    # Port 0: the kernel picks a free port and s3rver logs which.  The log
    # is made here, before the server starts: the background job opens its
    # redirection only once it runs, and a sed of a log not there yet fails
    # the test (bats runs it under set -e).
    : >"$S3_DIR/s3rver.log"
    node "$S3RVER_JS" -d "$S3_DIR/data" -a 127.0.0.1 -p 0 \
        --configure-bucket "$S3_BUCKET" >>"$S3_DIR/s3rver.log" 2>&1 &
    S3RVER_PID=$!
    echo "$S3RVER_PID" >"$S3_DIR/s3rver.pid"
    local i
    S3_PORT=
    # Bounded waits, so that a broken install cannot hang a run; not timing checks.
    for i in $(seq 1 400); do
        S3_PORT=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$S3_DIR/s3rver.log")
        [ -n "$S3_PORT" ] && break
        running_child "$S3RVER_PID" || { cat "$S3_DIR/s3rver.log" >&2; return 1; }
        sleep 0.05
    done
    [ -n "$S3_PORT" ] || { echo "s3rver did not start: $(cat "$S3_DIR/s3rver.log")" >&2; return 1; }
    S3_URL=http://127.0.0.1:$S3_PORT/$S3_BUCKET
    for i in $(seq 1 200); do
        [ "$(curl -s -o /dev/null -w '%{http_code}' "$S3_URL")" = 200 ] && break
        sleep 0.05
    done
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$S3_URL")" = 200 ] ||
        { echo "bucket $S3_BUCKET does not answer" >&2; return 1; }
    # s3rver takes any well-formed signature; its default key pair.
    echo 'S3RVER:S3RVER' >"$S3_DIR/passwd"
    chmod 0600 "$S3_DIR/passwd"
    S3=$S3_DIR/mnt
    s3fs_mount "$S3"
}

# s3fs_mount MNT [OPTIONS]: another s3fs mount of the bucket at MNT, with
# OPTIONS added to S3FS_OPTS (fsname=mountpoint-s3: the name mountpoint-s3
# mounts under); s3_stop unmounts it.
s3fs_mount() {
    local mnt=$1 pid i
    mkdir -p "$mnt"
    : >>"$S3_DIR/s3fs.log" # there for the cat below, whenever s3fs dies
    s3fs "$S3_BUCKET" "$mnt" -f \
        -o "url=http://127.0.0.1:$S3_PORT,passwd_file=$S3_DIR/passwd,$S3FS_OPTS${2:+,$2}" \
        >>"$S3_DIR/s3fs.log" 2>&1 &
    pid=$!
    echo "$pid $mnt" >>"$S3_DIR/s3fs.mounts"
    for i in $(seq 1 400); do
        mountpoint -q "$mnt" && return 0
        running_child "$pid" || { cat "$S3_DIR/s3fs.log" >&2; return 1; }
        sleep 0.05
    done
    echo "s3fs did not mount the bucket: $(cat "$S3_DIR/s3fs.log")" >&2
    return 1
}

# s3_stop: unmount s3fs and stop s3rver, each by the pid s3_start recorded;
# every step runs even if one fails.  Called by ckptfs_teardown.
s3_stop() {
    local d=$BATS_TEST_TMPDIR/s3 pid failed=0
    [ -d "$d" ] || return 0
    local mnt
    # the last mounted first; each by the pid s3fs_mount recorded
    while read -r pid mnt; do
        # Busy means a mount over the bucket was left behind (a killed
        # daemon's): detach it all the same, and fail the test.
        if mountpoint -q "$mnt" && ! fusermount3 -u "$mnt" 2>/dev/null; then
            echo "the bucket's s3fs mount $mnt is busy: a mount over it was left" >&2
            grep -F " $BATS_TEST_TMPDIR/" /proc/self/mounts >&2
            fusermount3 -uz "$mnt" 2>/dev/null
            failed=1
        fi
        # s3fs -f exits once unmounted; a pid that is not our child is left alone.
        if running_child "$pid"; then
            wait "$pid" 2>/dev/null || true
        fi
    done < <(tac "$d/s3fs.mounts" 2>/dev/null)
    rm -f "$d/s3fs.mounts"
    if [ -f "$d/s3rver.pid" ]; then
        pid=$(cat "$d/s3rver.pid")
        running_child "$pid" && kill "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null || true
        rm -f "$d/s3rver.pid"
    fi
    return "$failed"
}

# s3_put FILE KEY: another client's PUT of FILE as KEY (s3rver takes
# unsigned requests); fails unless the server answers 200.
s3_put() {
    local code
    code=$(curl -s -o /dev/null -w '%{http_code}' -X PUT --data-binary "@$1" "$S3_URL/$2")
    [ "$code" = 200 ] || { echo "PUT $2: HTTP $code" >&2; return 1; }
}

# s3_get KEY OUT: another client's GET of KEY into OUT; fails unless 200.
s3_get() {
    local code
    code=$(curl -s -o "$2" -w '%{http_code}' "$S3_URL/$1")
    [ "$code" = 200 ] || { echo "GET $1: HTTP $code" >&2; return 1; }
}

# s3_keys [PREFIX]: the bucket's keys under PREFIX, one a line, as the
# server lists them (not through s3fs, whose listings are cached).
s3_keys() {
    curl -s "$S3_URL?list-type=2&max-keys=1000&prefix=${1:-}" |
        grep -o '<Key>[^<]*</Key>' | sed 's/<Key>\(.*\)<\/Key>/\1/'
}
