#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# Checkpoints written the way MindSpore's writer does, by the oracle with the
# official protobuf runtime, covering every variant of the format; each mount
# is compared tensor by tensor with the oracle's reference parse.

load helpers

check_case() {
    $ORACLE gen "$BATS_TEST_TMPDIR/$1.ckpt" --case "$1"
    mount_fg "$BATS_TEST_TMPDIR/$1.ckpt" "$BATS_TEST_TMPDIR/m"
    run $ORACLE check "$BATS_TEST_TMPDIR/m" "$BATS_TEST_TMPDIR/$1.ckpt"
    echo "$output"
    [ "$status" -eq 0 ]
}

@test "all types, both scalar forms, empty tensors, str values" { check_case alltypes; }
@test "one big Checkpoint message (v0.1 style)" { check_case oneshot; }
@test "a tensor sliced over adjacent values is joined" { check_case sliced; }
@test "a later repeat of a tag replaces the earlier one; v0.5 model_type skipped" { check_case repeat; }
@test "packed dims" { check_case packed; }
@test "CRC trailer is verified and stripped" { check_case crc; }
@test "names that need escaping, over-long names, NUL bytes" { check_case names; }
@test "map tensors: three directories, adjacent records joined" { check_case maptensor; }
@test "Int4 and random_op values" { check_case int4; }

@test "a CRC mismatch refuses the mount, -o nocrc skips the check" {
    $ORACLE gen "$BATS_TEST_TMPDIR/bad.ckpt" --case crcbad
    mkdir "$BATS_TEST_TMPDIR/m"
    run "$CKPTFS" "$BATS_TEST_TMPDIR/bad.ckpt" "$BATS_TEST_TMPDIR/m"
    [ "$status" -ne 0 ]
    [[ $output == *"bad.ckpt: offset "*"CRC mismatch"* ]]
    ! mountpoint -q "$BATS_TEST_TMPDIR/m" || false
    mount_fg "$BATS_TEST_TMPDIR/bad.ckpt" "$BATS_TEST_TMPDIR/m" -o nocrc
    run $ORACLE check "$BATS_TEST_TMPDIR/m" "$BATS_TEST_TMPDIR/bad.ckpt"
    [ "$status" -eq 0 ]
}

@test "str values read as UTF-8 text with cat" {
    $ORACLE gen "$BATS_TEST_TMPDIR/a.ckpt" --case alltypes
    mount_fg "$BATS_TEST_TMPDIR/a.ckpt" "$BATS_TEST_TMPDIR/m"
    want=$($ORACLE parse "$BATS_TEST_TMPDIR/a.ckpt" | $PY -c '
import json,sys
for e in json.load(sys.stdin):
    if e["type"] == "str": print(e["dir"])')
    [ -n "$want" ]
    for d in $want; do
        [ "$(getfattr --only-values -n user.ckptfs.type "$BATS_TEST_TMPDIR/m/$d")" = str ]
        grep -q "data_type: kChar" "$BATS_TEST_TMPDIR/m/$d/meta"
        iconv -f UTF-8 -t UTF-8 "$BATS_TEST_TMPDIR/m/$d/out" >/dev/null
    done
}

@test "files over 4 GiB: tensors past the 2 and 4 GiB marks, reads across them" {
    $ORACLE bigfile "$BATS_TEST_TMPDIR/big.ckpt" --size-gib 4.2
    [ "$(stat -c %s "$BATS_TEST_TMPDIR/big.ckpt")" -gt 4509715660 ]
    mount_fg "$BATS_TEST_TMPDIR/big.ckpt" "$BATS_TEST_TMPDIR/m"
    run $ORACLE check-big "$BATS_TEST_TMPDIR/m" "$BATS_TEST_TMPDIR/big.ckpt"
    echo "$output"
    [ "$status" -eq 0 ]
}

@test "100 000 random reads at any offset and size match the file (python)" {
    $ORACLE gen "$BATS_TEST_TMPDIR/s.ckpt" --case sliced
    mount_fg "$BATS_TEST_TMPDIR/s.ckpt" "$BATS_TEST_TMPDIR/m"
    $ORACLE parse "$BATS_TEST_TMPDIR/s.ckpt" >"$BATS_TEST_TMPDIR/ref.json"
    $PY - "$BATS_TEST_TMPDIR/m" "$BATS_TEST_TMPDIR/ref.json" <<'PY'
import hashlib, json, os, random, sys
root, ref = sys.argv[1], json.load(open(sys.argv[2]))
rng = random.Random(7)
for e in ref:
    path = os.path.join(root, e["dir"], "out")
    data = open(path, "rb").read()
    assert hashlib.sha256(data).hexdigest() == e["sha256"], e["dir"]
    fd = os.open(path, os.O_RDONLY)
    for _ in range(100000 // len(ref)):
        off = rng.randrange(0, len(data) + 8)
        n = rng.randrange(0, 300)
        assert os.pread(fd, n, off) == data[off:off + n], (e["dir"], off, n)
    os.close(fd)
PY
}
