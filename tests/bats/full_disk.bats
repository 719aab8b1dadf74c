#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# A save that runs out of space (a 2 MiB tmpfs) fails like any other: the
# reason, the model untouched, the edits kept, no temporary file left;
# ckptfs-convert names the file it was writing.

load helpers

teardown() {
    ckptfs_teardown
    mountpoint -q "$BATS_TEST_TMPDIR/small" && umount "$BATS_TEST_TMPDIR/small"
    return 0
}

@test "ENOSPC during a save: refused with the reason, model and edits intact" {
    [ "$(id -u)" = 0 ] || skip "mounting a tmpfs needs root"
    S=$BATS_TEST_TMPDIR/small
    mkdir "$S"
    mount -t tmpfs -o size=2m tmpfs "$S"
    $PY "$REPO/bench/gen_ckpt.py" "$S/model.ckpt" --size $((1200 << 10)) --count 4
    before=$(sha "$S/model.ckpt")
    mount_fg "$S/model.ckpt" "$BATS_TEST_TMPDIR/m" -o commit=manual
    $PY -c 'f = open("'"$BATS_TEST_TMPDIR"'/m/layer.1.weight/out", "r+b"); f.seek(8); f.write(b"ckpt"); f.close()'
    run touch "$BATS_TEST_TMPDIR/m/snapshot_done"
    [ "$status" -ne 0 ]
    [[ $output == *"No space left on device"* ]]
    [[ $(getfattr --only-values -n user.ckptfs.last_error "$BATS_TEST_TMPDIR/m") == *"No space left on device"* ]]
    # how much it needed (the tensors' bytes, by the oracle's count) and how
    # much was free when it began (df's count now: the failed save's
    # temporary file is gone, the edits' spill file is there as it was)
    need=$($ORACLE parse "$S/model.ckpt" | $PY -c 'import json,sys
print(sum(e["nbytes"] for e in json.load(sys.stdin)))')
    free=$(df -B1 --output=avail "$S" | tail -1)
    want=$($PY -c 'import sys
def h(n):
    if n < 1024: return "%d bytes" % n
    v, u = n / 1024, 0
    while v >= 1024 and u < 3: v, u = v / 1024, u + 1
    return ("%.1f %s" if v < 10 else "%.0f %s") % (v, ["KiB", "MiB", "GiB", "TiB"][u])
print("needs about %s in %s, where %s was free" % (h(int(sys.argv[1])), sys.argv[3], h(int(sys.argv[2]))))' "$need" "$free" "$S")
    echo "want: $want"
    grep -qF "No space left on device; the new version $want" "$BATS_TEST_TMPDIR/daemon.log"
    [ "$(sha "$S/model.ckpt")" = "$before" ]
    [ -z "$(ls -A "$S" | grep ckptfs- | grep -vx "\.model\.ckpt\.ckptfs-lock")" ]
    [ "$(dd if="$BATS_TEST_TMPDIR/m/layer.1.weight/out" bs=1 skip=8 count=4 status=none)" = ckpt ]
}

@test "ENOSPC in ckptfs-convert (and --into): the message names OUT, the file written, not IN or the template" {
    [ "$(id -u)" = 0 ] || skip "mounting a tmpfs needs root"
    S=$BATS_TEST_TMPDIR/small
    mkdir "$S"
    mount -t tmpfs -o size=64k tmpfs "$S"
    local tmpl=$MS/mindspore_ori_net.mindir ckpt=$MS/mindarmour_checkpoint_lenet-10_1875.ckpt
    run timeout 60 "$BUILD/ckptfs-convert" -q --into "$tmpl" "$ckpt" "$S/out.mindir"
    echo "$output"
    [ "$status" -ne 0 ] && [ "$status" -ne 124 ] || false
    [[ $output == *"$S/out.mindir: writing the new version failed"*"No space left on device"* ]]
    [[ $output != *"$tmpl"* ]]
    for out in out.safetensors out.ckpt; do
        run timeout 60 "$BUILD/ckptfs-convert" -q "$ckpt" "$S/$out"
        echo "$output"
        [ "$status" -ne 0 ] && [ "$status" -ne 124 ] || false
        [[ $output == *"$S/$out: writing the new version failed"*"No space left on device"* ]]
        [[ $output != *"$ckpt"* ]]
    done
    [ -z "$(ls -A "$S")" ]
}
