#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# PyTorch Distributed Checkpoint directories inside a training run's
# directory (torchtitan's <dump>/checkpoint/step-<N>/): a run mount shows
# each subdirectory whose .metadata is a pickle as one read-only snapshot
# named as the directory, once .metadata (written last by DCP's
# FileSystemWriter) is there; a symlinked one is not followed; a hostile
# one fails on access alone.  The DCP directories are written, and read
# back, by the independent oracle (tests/oracle/dcp_oracle.py, which
# assembles each tensor with torch itself); the .ckpt beside them by
# ckpt_oracle.  Names and `latest` are expected from the files and the
# rules (run_dir.c), never from the mount.

load helpers

DCP_ORACLE="$PY $REPO/tests/oracle/dcp_oracle.py"

setup() { run_dir_setup; }

teardown() {
    if mountpoint -q "$M"; then
        fusermount3 -u "$M" || fusermount3 -uz "$M"
    fi
    ckptfs_teardown
}

# step NAME CASE STAMP: a DCP directory $D/NAME of the oracle's CASE, read-only
# (complete), every file's mtime STAMP (touch -d)
step() {
    $DCP_ORACLE gen "$D/$1" --case "$2"
    chmod 0400 "$D/$1"/.metadata "$D/$1"/*.distcp
    touch -h -d "$3" "$D/$1"/.metadata "$D/$1"/*.distcp
}

@test "a run with two DCP step directories and a .ckpt: all three listed, latest the newest by time, each DCP tree what the oracle assembles; ckptfs-dump lists them as dcp" {
    $ORACLE gen "$D/net-1_1.ckpt" --case alltypes
    chmod 0400 "$D/net-1_1.ckpt"
    touch -d '2026-01-01 00:00:00' "$D/net-1_1.ckpt"
    step step-10 dim0 '2026-01-02 00:00:00'
    step step-20 grid '2026-01-03 00:00:00'
    mkdir "$D/logs"                      # a directory that is no checkpoint
    echo x >"$D/logs/run.log"
    mount_fg "$D" "$M"
    printf '%s\n' latest net-1_1 step-10 step-20 | diff - <(root_names)
    [ "$(readlink "$M/latest")" = step-20 ]
    $DCP_ORACLE check "$M/step-10" "$D/step-10"
    $DCP_ORACLE check "$M/step-20" "$D/step-20"
    $DCP_ORACLE check "$M/latest" "$D/step-20"
    $ORACLE check "$M/net-1_1" "$D/net-1_1.ckpt"
    "$BUILD/ckptfs-dump" "$D" >"$T/dump"
    cat "$T/dump"
    head -1 "$T/dump" | grep -q ', 3 checkpoints (3 complete), latest step-20$'
    grep -qP '^step-10\tstep-10\tdcp\t-\tcomplete$' "$T/dump"
    grep -qP '^step-20\tstep-20\tdcp\t-\tcomplete$' "$T/dump"
    # the newer .ckpt moves latest: the rule is time, whatever the names
    touch -d '2026-01-04 00:00:00' "$D/net-1_1.ckpt"
    for _ in $(seq 1 400); do
        [ "$(readlink "$M/latest")" = net-1_1 ] && break
        sleep 0.05
    done
    [ "$(readlink "$M/latest")" = net-1_1 ]
}

@test "a step directory with data files only is not listed; it appears once .metadata is renamed into place, also in a directory made while mounted" {
    $DCP_ORACLE gen "$T/g30" --case dim0
    $DCP_ORACLE gen "$T/g40" --case mixed
    step step-10 single '2026-01-02 00:00:00'
    mkdir "$D/step-30"
    cp "$T"/g30/*.distcp "$D/step-30/"
    mount_fg "$D" "$M" -o settle=1
    printf '%s\n' latest step-10 | diff - <(root_names)
    mkdir "$D/step-40"
    cp "$T"/g40/*.distcp "$D/step-40/"
    sleep 1.5                            # settled: only .metadata is missing
    printf '%s\n' latest step-10 | diff - <(root_names)
    [ ! -e "$M/step-30" ]
    # FileSystemWriter's commit: .metadata.tmp written, then renamed
    cp "$T/g30/.metadata" "$D/step-30/.metadata.tmp"
    mv "$D/step-30/.metadata.tmp" "$D/step-30/.metadata"
    until_listed step-30
    $DCP_ORACLE check "$M/step-30" "$T/g30"
    cp "$T/g40/.metadata" "$D/step-40/.metadata.tmp"
    mv "$D/step-40/.metadata.tmp" "$D/step-40/.metadata"
    until_listed step-40
    $DCP_ORACLE check "$M/step-40" "$T/g40"
    printf '%s\n' latest step-10 step-30 step-40 | diff - <(root_names)
}

@test "links are not followed: a symlinked step directory, a symlinked .metadata, a .hidden one are not listed" {
    step step-10 single '2026-01-02 00:00:00'
    $DCP_ORACLE gen "$T/outside" --case dim0
    ln -s "$T/outside" "$D/step-20"
    mkdir "$D/step-30"
    cp "$T"/outside/*.distcp "$D/step-30/"
    ln -s "$T/outside/.metadata" "$D/step-30/.metadata"
    $DCP_ORACLE gen "$D/.step-40" --case single
    "$BUILD/ckptfs-dump" "$D" | tail -n +2 | cut -f1 | diff <(echo step-10) -
    mount_fg "$D" "$M"
    printf '%s\n' latest step-10 | diff - <(root_names)
    run ls "$M/step-20"
    [ "$status" -ne 0 ]
    run ls "$M/step-30"
    [ "$status" -ne 0 ]
}

# refused_ro CMD...: CMD fails with EROFS or EACCES
refused_ro() {
    run "$@"
    echo "$*: $output"
    [ "$status" -ne 0 ]
    [[ $output == *"Read-only file system"* || $output == *"Permission denied"* ]]
}

@test "-o rw: a DCP snapshot stays read-only (EROFS/EACCES, files unchanged) while a .ckpt beside it is writable" {
    $ORACLE gen "$D/net-1_1.ckpt" --case alltypes
    $DCP_ORACLE gen "$D/step-10" --case dim0
    touch -d '2026-01-02 00:00:00' "$D/net-1_1.ckpt" "$D/step-10"/.metadata "$D/step-10"/*.distcp
    (cd "$D/step-10" && sha256sum .metadata *.distcp) >"$T/sums"
    mount_fg "$D" "$M" -o rw
    [ "$(stat -c %A "$M/step-10")" = dr-xr-xr-x ]
    [ "$(stat -c %A "$M/net-1_1")" = drwxr-xr-x ]
    t=$(ls "$M/step-10" | grep -v snapshot_done | head -1)
    refused_ro sh -c "printf x | dd of='$M/step-10/$t/out' conv=notrunc status=none"
    refused_ro truncate -s 0 "$M/step-10/$t/out"
    refused_ro mkdir "$M/step-10/new"
    refused_ro rm -r "$M/step-10/$t"
    $DCP_ORACLE check "$M/step-10" "$D/step-10"
    unmount "$M"
    (cd "$D/step-10" && sha256sum -c --quiet) <"$T/sums"
    ! ls -A "$D/step-10" | grep -v -e '^\.metadata$' -e '\.distcp$' || false
}

@test "a hostile .metadata in a step directory: listed, looking into it fails (EIO, one log line naming it), nothing executed; the rest of the run still works" {
    rm -f /tmp/ckptfs-dcp-oracle-executed
    step step-10 dim0 '2026-01-02 00:00:00'
    $DCP_ORACLE bad-all "$D" global truncated dotdot symlink past_end | tr '\t' ' ' >"$T/wants"
    [ "$(wc -l <"$T/wants")" -eq 5 ]
    find "$D"/bad-* -type f -exec chmod 0400 {} +   # complete: read-only
    mount_fg "$D" "$M" -o log="$T/log"
    { echo latest; echo step-10; sed 's/ .*//; s/^/bad-/' "$T/wants"; } | LC_ALL=C sort |
        diff - <(root_names)
    while read -r c want; do
        run ls "$M/bad-$c"
        echo "$c: $output"
        [ "$status" -ne 0 ]
        [[ $output == *"Input/output error"* ]]
        grep "bad-$c" "$T/log"
        [ "$(grep -c "bad-$c/" "$T/log")" -eq 1 ]
        grep "bad-$c/" "$T/log" | grep -qF -- "$want"
    done <"$T/wants"
    [ ! -e /tmp/ckptfs-dcp-oracle-executed ]
    $DCP_ORACLE check "$M/step-10" "$D/step-10"
}

@test "a run's DCP snapshot is what a mount of that directory shows: modes, sizes, times, xattrs; the root lists it with the same mode and time" {
    step step-10 mixed '2026-01-02 00:00:00'
    chmod 0440 "$D/step-10/__1_0.distcp"
    touch -h -d '2026-01-02 00:00:05' "$D/step-10/.metadata"
    mount_fg "$D" "$M"
    same_as_mount "$M/step-10" "$D/step-10" "$T/one" 10
    [ "$(stat -c '%A %Y' "$M/step-10")" = "dr-x------ $(date -d '2026-01-02 00:00:05' +%s)" ]
}
