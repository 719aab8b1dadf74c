#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# Crash safety: kill -9 the daemon at random moments while it saves a
# 256 MiB model; the file must always be the complete old or the complete
# new model, and the next mount removes what the interrupted save left.
# Also: every real checkpoint, all tensors rewritten with the same bytes
# through the mount, saves to exactly the original file.

load helpers

@test "kill -9 during a save of a 256 MiB model: always the old or the new file" {
    W=$BATS_TEST_TMPDIR
    $PY "$REPO/bench/gen_ckpt.py" "$W/orig.ckpt" --size $((256 << 20)) --count 16
    old=$(sha "$W/orig.ckpt")
    # The new version, saved once without interruption (saves are deterministic).
    cp "$W/orig.ckpt" "$W/model.ckpt"
    mount_fg "$W/model.ckpt" "$W/m" -o commit=manual
    printf 'ckpt' | dd of="$W/m/layer.3.weight/out" bs=1 seek=4096 conv=notrunc status=none
    touch "$W/m/snapshot_done"
    umount_wait "$W/m" "$(tail -1 "$W/mounts" | cut -d' ' -f1)"
    : >"$W/mounts"
    new=$(sha "$W/model.ckpt")
    [ "$new" != "$old" ]
    seen_old=0 seen_new=0
    for i in $(seq 1 8); do
        cp "$W/orig.ckpt" "$W/model.ckpt"
        mkdir -p "$W/m"
        "$CKPTFS" -f -o commit=manual "$W/model.ckpt" "$W/m" 2>>"$W/crash.log" &
        pid=$!
        for _ in $(seq 1 600); do mountpoint -q "$W/m" && break; sleep 0.05; done
        printf 'ckpt' | dd of="$W/m/layer.3.weight/out" bs=1 seek=4096 conv=notrunc status=none
        touch "$W/m/snapshot_done" 2>/dev/null &
        toucher=$!
        sleep "0.$((RANDOM % 40))"
        kill -9 "$pid"
        wait "$pid" 2>/dev/null || true
        wait "$toucher" 2>/dev/null || true
        fusermount3 -uz "$W/m" 2>/dev/null || true
        got=$(sha "$W/model.ckpt")
        echo "round $i: $([ "$got" = "$old" ] && echo old || echo new)"
        [ "$got" = "$old" ] || [ "$got" = "$new" ]
        [ "$got" = "$old" ] && seen_old=$((seen_old + 1)) || seen_new=$((seen_new + 1))
    done
    echo "old $seen_old, new $seen_new"
    # The next writable mount removes any temporary file a kill left behind
    # (its own lock file, .model.ckpt.ckptfs-lock, is no save's).
    mount_fg "$W/model.ckpt" "$W/m2"
    [ -z "$(ls -A "$W" | grep '^\.model\.ckpt\.ckptfs-' | grep -vx '\.model\.ckpt\.ckptfs-lock')" ]
}

@test "every real checkpoint: all tensors rewritten through the mount save to the identical file" {
    local n=0
    for f in "$MS"/*.ckpt; do
        case $f in *strategy*|*EMPTY*) continue ;; esac
        # One file each: a model has one writable mount at a time.
        cp "$f" "$BATS_TEST_TMPDIR/c$n.ckpt"
        chmod 0644 "$BATS_TEST_TMPDIR/c$n.ckpt"
        mount_fg "$BATS_TEST_TMPDIR/c$n.ckpt" "$BATS_TEST_TMPDIR/m$n" -o commit=manual
        for d in "$BATS_TEST_TMPDIR/m$n"/*/; do
            cat "$d/out" >"$BATS_TEST_TMPDIR/bytes"
            cp "$BATS_TEST_TMPDIR/bytes" "$d/out"
        done
        [ ! -e "$BATS_TEST_TMPDIR/m$n/snapshot_done" ]
        touch "$BATS_TEST_TMPDIR/m$n/snapshot_done"
        cmp "$f" "$BATS_TEST_TMPDIR/c$n.ckpt"
        n=$((n + 1))
    done
    [ "$n" -eq 5 ]
}
