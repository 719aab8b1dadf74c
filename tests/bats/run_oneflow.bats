#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# OneFlow snapshot directories inside a training run's directory: a run
# mount, and ckptfs-dump RUN, show each subdirectory holding the file its
# writer writes last (snapshot_done for the legacy layout, pickled_data for
# flow.save's pickled one; codec/oneflow/oneflow_dir.c cites the source)
# as one read-only snapshot named as the directory, complete as a file is
# (read-only, or unchanged for -o settle seconds).  A legacy snapshot
# without snapshot_done yet, and one whose writer gives no signal (an
# nn.Graph save), are not listed.  The snapshots are the real fixtures,
# copied; every tensor's bytes are checked against the fixture's own `out`
# files and the independent oracle (tests/oracle/oneflow_oracle.py: numpy,
# protobuf, Python's unpickler); names and `latest` are expected from the
# rules (codec/run_dir.c), never from the mount.

load helpers

OF="$PY $REPO/tests/oracle/oneflow_oracle.py"
FX=$FIXTURES/oneflow
LEGACY=$FX/legacy_v2_java_mlp_adam
PICKLED=$FX/new_pickled_3x3_i3o3_conv2d_params
# SimpleCheckPointManager's names: "snapshot_" + %Y%m%d_%H%M%S_%f
S1=snapshot_20260101_000000_000000
S2=snapshot_20260102_000000_000000
S4=snapshot_20260104_000000_000000

# Every mount is mount_fg's, taken down by the helpers' teardown
# (ckptfs_teardown), a test failed or not.
setup() { run_dir_setup; }

# snap NAME FIXTURE [STAMP]: FIXTURE copied to $D/NAME, writable as its
# writer leaves it, every file and directory's mtime STAMP (touch -d) when
# given, else just written.
snap() {
    cp -r "$2" "$D/$1"
    chmod -R u+w "$D/$1"
    if [ -n "${3:-}" ]; then
        find "$D/$1" -depth -exec touch -h -d "$3" {} +
    fi
}

# exact MNT_SNAP SRC_SNAP: every tensor the oracle reads from SRC_SNAP has,
# in the mount's MNT_SNAP/<name>/out, the oracle's bytes (by SHA-256), and
# no other tensor is shown.
exact() {
    local name want got n=0
    while IFS=$'\t' read -r name want; do
        got=$(sha256sum <"$1/$name/out" | cut -d' ' -f1)
        [ "$got" = "$want" ] || { echo "$1/$name/out: $got, not $want"; return 1; }
        n=$((n + 1))
    done < <($OF sums "$2")
    [ "$n" -gt 0 ]
    [ "$(find "$1/" -mindepth 1 -maxdepth 1 -type d | wc -l)" -eq "$n" ]
}

@test "a run of legacy and pickled snapshots: listed, latest the newest complete, not one without snapshot_done, nor a graph save, nor a link; bytes the fixture's; ckptfs-dump lists them as oneflow" {
    snap "$S1" "$LEGACY" '2026-01-01 00:00:00'
    snap "$S2" "$LEGACY" '2026-01-02 00:00:00'
    snap epoch_3 "$PICKLED" '2026-01-03 00:00:00'
    snap "$S4" "$LEGACY"                  # being written: no snapshot_done yet
    rm "$D/$S4/snapshot_done"
    snap graph "$FX/graph_save_affine_with_parameter" '2026-01-05 00:00:00'
    ln -s "$S1" "$D/linked"
    mount_fg "$D" "$M" -o settle=1
    printf '%s\n' epoch_3 latest "$S1" "$S2" | diff - <(root_names)
    [ "$(readlink "$M/latest")" = epoch_3 ]
    # byte-exact: against the fixture's own out files, and the oracle
    for t in "$LEGACY"/*/; do
        t=$(basename "$t")
        cmp "$M/$S2/$t/out" "$LEGACY/$t/out"
    done
    exact "$M/$S2" "$LEGACY"
    exact "$M/epoch_3" "$PICKLED"
    exact "$M/latest" "$PICKLED"
    [ -f "$M/$S1/snapshot_done" ]
    run touch "$M/$S1/snapshot_done"      # a directory checkpoint is read-only
    [ "$status" -ne 0 ]
    "$BUILD/ckptfs-dump" -o settle=3600 "$D" >"$T/dump"
    cat "$T/dump"
    head -1 "$T/dump" | grep -q ', 3 checkpoints (3 complete), latest epoch_3$'
    printf '%s\t%s\toneflow\t-\tcomplete\n' epoch_3 epoch_3 "$S1" "$S1" "$S2" "$S2" |
        diff - <(tail -n +2 "$T/dump")
    # snapshot_done written last: the snapshot appears once settled, newest
    touch "$D/$S4/snapshot_done"
    until_listed "$S4"
    [ "$(readlink "$M/latest")" = "$S4" ]
    exact "$M/$S4" "$LEGACY"
}

@test "a pickled snapshot too fresh is not latest, it is once settled or read-only; equal times: the last name, as SimpleCheckPointManager's sorted list" {
    snap "$S1" "$LEGACY" '2026-01-01 00:00:00'
    snap "$S2" "$LEGACY" '2026-01-01 00:00:00'
    snap epoch_9 "$PICKLED"               # just written, writable
    run "$BUILD/ckptfs-dump" -o settle=3600 "$D"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ ${lines[0]} == *", 3 checkpoints (2 complete), latest $S2" ]]
    [ "${lines[1]}" = "epoch_9"$'\tepoch_9\toneflow\t-\tbeing written' ]
    mount_fg "$D" "$M" -o settle=3600
    printf '%s\n' latest "$S1" "$S2" | diff - <(root_names)
    [ "$(readlink "$M/latest")" = "$S2" ]
    # made read-only, the directory too (nothing can be added to it):
    # complete at once
    chmod -R a-w "$D/epoch_9"
    until_listed epoch_9
    [ "$(readlink "$M/latest")" = epoch_9 ]
    exact "$M/epoch_9" "$PICKLED"
    run "$BUILD/ckptfs-dump" -o settle=3600 "$D"
    [[ ${lines[0]} == *", 3 checkpoints (3 complete), latest epoch_9" ]]
}

@test "a run's OneFlow snapshot is what a mount of that directory shows: modes, sizes, times, xattrs; the root lists it with the same mode and time" {
    snap "$S1" "$LEGACY" '2026-01-01 00:00:00'
    snap epoch_3 "$PICKLED" '2026-01-03 00:00:00'
    chmod 0440 "$D/$S1/dense1-bias/out"
    touch -h -d '2026-01-01 00:00:07' "$D/$S1/snapshot_done"     # written last
    touch -h -d '2026-01-03 00:00:05' "$D/epoch_3/pickled_data"
    mount_fg "$D" "$M"
    same_as_mount "$M/$S1" "$D/$S1" "$T/one.legacy" 30
    same_as_mount "$M/epoch_3" "$D/epoch_3" "$T/one.pickled" 5
    # the newest file's time: the one written last
    [ "$(stat -c %Y "$M/$S1")" = "$(date -d '2026-01-01 00:00:07' +%s)" ]
    [ "$(stat -c %Y "$M/epoch_3")" = "$(date -d '2026-01-03 00:00:05' +%s)" ]
}
