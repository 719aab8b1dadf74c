#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# A run directory holding files that are named as checkpoints but do not
# open (issue 39): text in a .ckpt, a real checkpoint cut short.  `latest`
# is the newest that opens; one that does not says why on its entry
# (user.ckptfs.error), in the root's user.ckptfs.last_error and in
# ckptfs-dump's listing; fixed in place (a good file renamed over it), it
# opens.  Expected names come from how the files were made, trees from the
# oracle's own parse of the files.

load helpers

RUN=$FIXTURES/mindspore_run_dir/qishna_lenet_modelcheckpoint

setup() {
    T=$BATS_TEST_TMPDIR
    M=$T/m
    D=$T/run
}

fixture() { echo "$RUN/checkpoint_lenet-$1_1875.ckpt"; }

GOOD=checkpoint_lenet-2_1875
CUT=checkpoint_lenet-3_1875

# Epochs 1 and 2 whole; epoch 3 cut short in its last tensor's content; a
# text file named text.ckpt, the newest.  All read-only (complete), each
# newer than the last: text.ckpt is not numbered, so the newest is by time.
broken_dir() {
    mkdir "$D"
    cp "$(fixture 1)" "$D/checkpoint_lenet-1_1875.ckpt"
    cp "$(fixture 2)" "$D/$GOOD.ckpt"
    local size
    size=$(stat -c %s "$(fixture 3)")
    head -c $((size - 1000)) "$(fixture 3)" >"$D/$CUT.ckpt"
    echo "just some text, not a checkpoint" >"$D/text.ckpt"
    chmod 0400 "$D"/*
    touch -d '-4 hours' "$D/checkpoint_lenet-1_1875.ckpt"
    touch -d '-3 hours' "$D/$GOOD.ckpt"
    touch -d '-2 hours' "$D/$CUT.ckpt"
    touch -d '-1 hour' "$D/text.ckpt"
}

# The reader's message for a file that does not open names the file, then
# an offset in it.
names_file_and_offset() { grep -q -- "$1: offset [0-9]"; }

@test "latest is the newest checkpoint that opens, past a newer text file and a truncated copy" {
    broken_dir
    mount_fg "$D" "$M"
    [ "$(readlink "$M/latest")" = "$GOOD" ]
    ls "$M/latest/" >/dev/null
    $ORACLE check "$M/latest" "$D/$GOOD.ckpt"
    # the broken ones are still listed: their entries say why
    ls "$M" | grep -qx text
    ls "$M" | grep -qx "$CUT"
}

@test "a checkpoint that does not open: ls fails, its entry's user.ckptfs.error and the root's last_error say why, naming the file" {
    broken_dir
    mount_fg "$D" "$M"
    run ls "$M/text/"
    [ "$status" -ne 0 ]
    getfattr --only-values -n user.ckptfs.last_error "$M" >"$T/last"
    cat "$T/last"
    grep -qF "$M/text: " "$T/last"
    names_file_and_offset "$D/text.ckpt" <"$T/last"
    getfattr --only-values -n user.ckptfs.error "$M/text" | names_file_and_offset "$D/text.ckpt"
    # the truncated one: its reason is that a record runs past the end
    run ls "$M/$CUT/"
    [ "$status" -ne 0 ]
    getfattr --only-values -n user.ckptfs.last_error "$M" | names_file_and_offset "$D/$CUT.ckpt"
    getfattr --only-values -n user.ckptfs.error "$M/$CUT" >"$T/why"
    cat "$T/why"
    names_file_and_offset "$D/$CUT.ckpt" <"$T/why"
    grep -q 'past the end' "$T/why"
    # one that opens has no error
    run getfattr --only-values -n user.ckptfs.error "$M/$GOOD"
    [ "$status" -ne 0 ]
    [[ $output == *"No such attribute"* ]]
}

@test "ckptfs-dump of the run directory marks the two as not opening, with the reason, and latest the newest that opens" {
    broken_dir
    "$BUILD/ckptfs-dump" "$D" >"$T/dump"
    cat "$T/dump"
    head -1 "$T/dump" | grep -q "latest $GOOD\$"
    awk -F'\t' '$1 == "text" {print $5}' "$T/dump" >"$T/text"
    grep -q '^does not open: ' "$T/text"
    names_file_and_offset "$D/text.ckpt" <"$T/text"
    awk -F'\t' -v n="$CUT" '$1 == n {print $5}' "$T/dump" >"$T/cut"
    grep -q '^does not open: ' "$T/cut"
    names_file_and_offset "$D/$CUT.ckpt" <"$T/cut"
    for n in checkpoint_lenet-1_1875 "$GOOD"; do
        [ "$(awk -F'\t' -v n="$n" '$1 == n {print $5}' "$T/dump")" = complete ]
    done
    "$BUILD/ckptfs-dump" --json "$D" >"$T/json"
    $PY - "$T/json" "$GOOD" "$CUT" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["latest"] == sys.argv[2], d["latest"]
by = {c["name"]: c for c in d["checkpoints"]}
for n in ("text", sys.argv[3]):
    assert by[n]["complete"] and by[n]["opens"] is False and by[n]["error"], by[n]
assert by[sys.argv[2]]["opens"] is True and "error" not in by[sys.argv[2]], by[sys.argv[2]]
EOF
}

# until_latest NAME: a bounded wait for `latest` to follow the directory (a
# bound so that a broken build cannot hang, not a time limit).
until_latest() {
    local i
    for i in $(seq 1 400); do [ "$(readlink "$M/latest")" = "$1" ] && return 0; sleep 0.05; done
    echo "latest never became $1: $(readlink "$M/latest")" >&2
    return 1
}

@test "a checkpoint fixed in place (a good file renamed over it) then opens, and is latest when newest" {
    broken_dir
    mount_fg "$D" "$M"
    [ "$(readlink "$M/latest")" = "$GOOD" ]
    getfattr --only-values -n user.ckptfs.error "$M/text" | names_file_and_offset "$D/text.ckpt"
    run ls "$M/$CUT/"
    [ "$status" -ne 0 ]
    # the truncated one rewritten whole; text.ckpt replaced by a checkpoint
    cp "$(fixture 3)" "$D/.$CUT.tmp"
    chmod 0400 "$D/.$CUT.tmp"
    touch -d '-90 minutes' "$D/.$CUT.tmp"
    mv "$D/.$CUT.tmp" "$D/$CUT.ckpt"
    until_latest "$CUT"
    ls "$M/$CUT/" >/dev/null
    $ORACLE check "$M/$CUT" "$D/$CUT.ckpt"
    $ORACLE check "$M/latest" "$D/$CUT.ckpt"
    cp "$(fixture 1)" "$D/.text.tmp"
    chmod 0400 "$D/.text.tmp"
    mv "$D/.text.tmp" "$D/text.ckpt"
    until_latest text
    ls "$M/text/" >/dev/null
    $ORACLE check "$M/text" "$D/text.ckpt"
    run getfattr --only-values -n user.ckptfs.error "$M/text"
    [ "$status" -ne 0 ]
    [[ $output == *"No such attribute"* ]]
}

@test "latest that opened once but fails when looked into (replaced by a file of the same name, size and mtime) moves to the next newest that opens" {
    broken_dir
    mount_fg "$D" "$M"
    [ "$(readlink "$M/latest")" = "$GOOD" ]
    # A file the listing cannot tell from the one it checked: same size and
    # mtime, renamed over it.  Only opening it tells.
    size=$(stat -c %s "$D/$GOOD.ckpt")
    { echo "not a checkpoint any more"; head -c $((size - 26)) /dev/zero; } >"$D/.$GOOD.tmp"
    [ "$(stat -c %s "$D/.$GOOD.tmp")" -eq "$size" ]
    touch -r "$D/$GOOD.ckpt" "$D/.$GOOD.tmp"
    chmod 0400 "$D/.$GOOD.tmp"
    mv "$D/.$GOOD.tmp" "$D/$GOOD.ckpt"
    # until the look into it fails (it may be listed again meanwhile)
    for _ in $(seq 1 400); do
        ls "$M/$GOOD/" >/dev/null 2>&1 || break
        sleep 0.05
    done
    run ls "$M/$GOOD/"
    [ "$status" -ne 0 ]
    until_latest checkpoint_lenet-1_1875
    ls "$M/latest/" >/dev/null
    getfattr --only-values -n user.ckptfs.last_error "$M" | names_file_and_offset "$D/$GOOD.ckpt"
}

@test "the tools take a run's checkpoints by the names a mount shows: RUN/latest (the newest that opens) and RUN/NAME; RUN itself says how to name one" {
    broken_dir
    "$BUILD/ckptfs-dump" --json "$D/latest" >"$T/latest.json"
    "$BUILD/ckptfs-dump" --json "$D/checkpoint_lenet-1_1875" >"$T/first.json"
    $ORACLE parse "$D/$GOOD.ckpt" >"$T/oracle.json"
    $PY - "$T/latest.json" "$T/first.json" "$T/oracle.json" "$D" "$GOOD" <<'EOF'
import json, sys
latest, first, oracle = (json.load(open(p)) for p in sys.argv[1:4])
d, good = sys.argv[4], sys.argv[5]
assert latest["file"] == f"{d}/{good}.ckpt", latest["file"]
assert first["file"] == f"{d}/checkpoint_lenet-1_1875.ckpt", first["file"]
assert [t["name"] for t in latest["tensors"]] == [e["tag"] for e in oracle]
assert [t["bytes"] for t in latest["tensors"]] == [e["nbytes"] for e in oracle]
EOF
    # the same bytes as the file itself, other bytes than epoch 1's
    run "$BUILD/ckptfs-diff" "$D/latest" "$D/$GOOD.ckpt"
    [ "$status" -eq 0 ]
    run "$BUILD/ckptfs-diff" "$D/latest" "$D/checkpoint_lenet-1_1875"
    [ "$status" -eq 1 ]
    # the run itself: one line, naming latest's checkpoint and how to list them
    run "$BUILD/ckptfs-stat" "$D"
    [ "$status" -ne 0 ]
    [ "${#lines[@]}" -eq 1 ]
    [[ $output == *"$D: is a training run's directory of 4 checkpoints"* ]]
    [[ $output == *"$D/latest ($GOOD)"* && $output == *"ckptfs-dump $D"* ]]
    # a name the run does not show is not found, as on disk
    run "$BUILD/ckptfs-stat" "$D/nothing"
    [ "$status" -ne 0 ]
    [[ $output == *"$D/nothing: cannot open: No such file or directory"* ]]
}

@test "the mount takes them too: ckptfs RUN/latest mounts the newest that opens as one model, RUN/NAME that checkpoint; a run with none that opens is refused in one line" {
    broken_dir
    mount_fg "$D/latest" "$M"
    [ -e "$M/snapshot_done" ] && [ ! -e "$M/latest" ]
    $ORACLE check "$M" "$D/$GOOD.ckpt"
    unmount "$M"
    mount_fg "$D/checkpoint_lenet-1_1875" "$M"
    $ORACLE check "$M" "$D/checkpoint_lenet-1_1875.ckpt"
    unmount "$M"
    mkdir "$T/none"
    echo "not a checkpoint" >"$T/none/text.ckpt"
    chmod 0400 "$T/none/text.ckpt"
    # daemonized, so that one that wrongly mounts returns and teardown unmounts it
    echo "0 $M" >>"$T/mounts"
    run "$CKPTFS" "$T/none/latest" "$M" 3>&-
    [ "$status" -ne 0 ] && [ "${#lines[@]}" -eq 1 ]
    [[ $output == "ckptfs: $T/none/latest: the run has no complete checkpoint that opens (ckptfs-dump $T/none says why)" ]]
    ! mountpoint -q "$M"
}

@test "RUN/latest of a run whose checkpoints all fail to open says so, and a file really named latest is that file" {
    mkdir "$D"
    echo "not a checkpoint" >"$D/text.ckpt"
    chmod 0400 "$D/text.ckpt"
    run "$BUILD/ckptfs-stat" "$D/latest"
    [ "$status" -ne 0 ]
    [[ $output == *"$D/latest: the run has no complete checkpoint that opens (ckptfs-dump $D says why)"* ]]
    cp "$(fixture 1)" "$D/latest"
    "$BUILD/ckptfs-dump" --json "$D/latest" >"$T/json"
    $PY -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["file"].endswith("/latest"), d["file"]' "$T/json"
}
