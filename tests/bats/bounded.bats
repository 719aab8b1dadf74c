#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# Bounded resources: what a mount may take of $TMPDIR (a zstd model without
# a seek table is decompressed there), of descriptors (edits under a low
# RLIMIT_NOFILE, and a save still possible), and of memory (str values).
# Expected contents come from the zstd command, ckpt_oracle.py and
# python3-numpy, never from ckptfs.

load helpers

setup() {
    M=$BATS_TEST_TMPDIR/m
    T=$BATS_TEST_TMPDIR/tmpfs # a small TMPDIR, mounted by the tests that need it
    mkdir -p "$M" "$T"
}

teardown() {
    local rc=0
    ckptfs_teardown || rc=1
    # A refused mount must not be left behind, whatever the test saw.
    if mountpoint -q "$M"; then
        fusermount3 -u "$M" || fusermount3 -uz "$M" || true
        rc=1
    fi
    if mountpoint -q "$T"; then
        umount "$T"
    fi
    return "$rc"
}

# small_tmpdir MIB: a tmpfs of MIB MiB at $T.
small_tmpdir() {
    mount -t tmpfs -o "size=$1m,mode=1777" tmpfs "$T"
}

# used DIR: bytes in use on DIR's filesystem.
used() { df -B1 --output=used "$1" | tail -1 | tr -d ' '; }

# refused_mount MODEL [options]: ckptfs refuses MODEL with exactly one line
# of output (in $output), and nothing is mounted.
refused_mount() {
    local model=$1
    shift
    run "$CKPTFS" "$@" "$model" "$M"
    echo "status $status: $output"
    [ "$status" -ne 0 ]
    [ "${#lines[@]}" -eq 1 ]
    ! mountpoint -q "$M" || false
}

# zeros_zst MIB OUT [zstd options]: MIB MiB of zeros compressed by zstd, from
# a pipe; --stream-size makes zstd declare the size in the frame header,
# --no-content-size makes it not.
zeros_zst() {
    local mib=$1 out=$2
    shift 2
    head -c "${mib}M" /dev/zero | zstd -q "$@" -c >"$out"
}

@test "tmp_max: a 13 KB zstd file declaring 400 MiB is refused before anything is written, in one line naming the sizes" {
    small_tmpdir 64
    zeros_zst 400 "$BATS_TEST_TMPDIR/bomb.ckpt.zst" --stream-size=419430400
    [ "$(stat -c %s "$BATS_TEST_TMPDIR/bomb.ckpt.zst")" -lt 20000 ]
    before=$(used "$T")
    TMPDIR=$T refused_mount "$BATS_TEST_TMPDIR/bomb.ckpt.zst" -o tmp_max=1M
    [[ $output == *"bomb.ckpt.zst: decompresses to 419430400 bytes"* ]]
    [[ $output == *"1048576-byte limit"* ]]
    [[ $output == *"-o tmp_max=SIZE"* ]]
    [ "$(used "$T")" = "$before" ]
    # ckptfs-dump takes the same option and says the same.
    TMPDIR=$T run "$BUILD/ckptfs-dump" -o tmp_max=1M "$BATS_TEST_TMPDIR/bomb.ckpt.zst"
    [ "$status" -eq 1 ]
    [[ $output == *"decompresses to 419430400 bytes"*"1048576-byte limit"* ]]
}

@test "tmp_max by default: 4 GiB declared by a 150 KB file is refused, naming the default rule" {
    zeros_zst 4096 "$BATS_TEST_TMPDIR/bomb.ckpt.zst" -1 --stream-size=4294967296
    TMPDIR=$BATS_TEST_TMPDIR refused_mount "$BATS_TEST_TMPDIR/bomb.ckpt.zst"
    [[ $output == *"decompresses to 4294967296 bytes"*"268435456-byte limit"* ]]
    [[ $output == *"64 times the compressed size"* ]]
}

@test "tmp_max: a zstd file without a declared size stops as its output passes the limit; nothing left" {
    small_tmpdir 64
    zeros_zst 400 "$BATS_TEST_TMPDIR/bomb.ckpt.zst" --no-content-size
    before=$(used "$T")
    TMPDIR=$T refused_mount "$BATS_TEST_TMPDIR/bomb.ckpt.zst" -o tmp_max=8M
    [[ $output == *"bomb.ckpt.zst: offset "*"passes "*"bytes (no declared size)"*"8388608-byte limit"* ]]
    [ "$(used "$T")" = "$before" ]
}

@test "free space: a TMPDIR on a 64 MiB tmpfs refuses 400 MiB, declared or not, naming the free bytes" {
    small_tmpdir 64
    zeros_zst 400 "$BATS_TEST_TMPDIR/a.ckpt.zst" --stream-size=419430400
    zeros_zst 400 "$BATS_TEST_TMPDIR/b.ckpt.zst" --no-content-size
    before=$(used "$T")
    TMPDIR=$T refused_mount "$BATS_TEST_TMPDIR/a.ckpt.zst" -o tmp_max=1G
    [[ $output == *"decompresses to 419430400 bytes (declared by its frames), but $T has "*" bytes free"* ]]
    [ "$(used "$T")" = "$before" ]
    TMPDIR=$T refused_mount "$BATS_TEST_TMPDIR/b.ckpt.zst" -o tmp_max=1G
    [[ $output == *"(no declared size), but $T has "*" bytes free"* ]]
    [ "$(used "$T")" = "$before" ]
}

@test "a real zstd model still mounts within a small tmp_max, declared size or not" {
    small_tmpdir 64
    $ORACLE gen "$BATS_TEST_TMPDIR/plain.ckpt" --case alltypes
    zstd -q "$BATS_TEST_TMPDIR/plain.ckpt" -o "$BATS_TEST_TMPDIR/a.ckpt.zst"
    zstd -q --no-content-size -c "$BATS_TEST_TMPDIR/plain.ckpt" >"$BATS_TEST_TMPDIR/b.ckpt.zst"
    size=$(stat -c %s "$BATS_TEST_TMPDIR/plain.ckpt")
    for f in a b; do
        TMPDIR=$T mount_fg "$BATS_TEST_TMPDIR/$f.ckpt.zst" "$M" -o ro,tmp_max=$size
        run $ORACLE check "$M" "$BATS_TEST_TMPDIR/plain.ckpt"
        echo "$output"
        [ "$status" -eq 0 ]
        fusermount3 -u "$M"
    done
    # One byte less is refused.
    TMPDIR=$T refused_mount "$BATS_TEST_TMPDIR/a.ckpt.zst" -o tmp_max=$((size - 1))
    [[ $output == *"decompresses to $size bytes"* ]]
    # Several frames (with and without checksums) and a skippable frame:
    # their declared sizes are summed.
    head -c 1000 "$BATS_TEST_TMPDIR/plain.ckpt" | zstd -q --stream-size=1000 -c >"$BATS_TEST_TMPDIR/c.ckpt.zst"
    printf '\x50\x2a\x4d\x18\x04\x00\x00\x00abcd' >>"$BATS_TEST_TMPDIR/c.ckpt.zst"
    tail -c +1001 "$BATS_TEST_TMPDIR/plain.ckpt" | zstd -q --no-check --stream-size=$((size - 1000)) -c \
        >>"$BATS_TEST_TMPDIR/c.ckpt.zst"
    cmp <(zstd -q -d -c "$BATS_TEST_TMPDIR/c.ckpt.zst") "$BATS_TEST_TMPDIR/plain.ckpt"
    TMPDIR=$T refused_mount "$BATS_TEST_TMPDIR/c.ckpt.zst" -o tmp_max=$((size - 1))
    [[ $output == *"decompresses to $size bytes (declared by its frames)"* ]]
    TMPDIR=$T mount_fg "$BATS_TEST_TMPDIR/c.ckpt.zst" "$M" -o ro,tmp_max=$size
    run $ORACLE check "$M" "$BATS_TEST_TMPDIR/plain.ckpt"
    echo "$output"
    [ "$status" -eq 0 ]
}

@test "-o tmp_max with a bad size is refused" {
    $ORACLE gen "$BATS_TEST_TMPDIR/plain.ckpt" --case alltypes
    refused_mount "$BATS_TEST_TMPDIR/plain.ckpt" -o tmp_max=lots
    [[ $output == *"-o tmp_max=lots: give a size"* ]]
}

# low_nofile_ckptfs: a ckptfs that starts with `ulimit -n 64` (soft and hard,
# so the daemon cannot raise it back), for mount_fg: CKPTFS=$LOW mount_fg ...
low_nofile_ckptfs() {
    LOW=$BATS_TEST_TMPDIR/ckptfs-nofile-64
    printf '#!/bin/bash\nulimit -n 64 || exit 99\nexec "%s" "$@"\n' "$CKPTFS" >"$LOW"
    chmod +x "$LOW"
}

@test "ulimit -n 64: 200 edited tensors (writes and rsync-style renames) are all kept, and the save succeeds" {
    $ORACLE gen "$BATS_TEST_TMPDIR/many.ckpt" --case many --count 210
    chmod 644 "$BATS_TEST_TMPDIR/many.ckpt"
    $ORACLE parse "$BATS_TEST_TMPDIR/many.ckpt" >"$BATS_TEST_TMPDIR/orig.json"
    low_nofile_ckptfs
    CKPTFS=$LOW mount_fg "$BATS_TEST_TMPDIR/many.ckpt" "$M" -o commit=manual
    pid=$(tail -1 "$BATS_TEST_TMPDIR/mounts" | cut -d' ' -f1)
    grep -E "^Max open files +64 +64 " "/proc/$pid/limits"
    # Tensors 0-99 are written in place, 100-199 through a temporary file
    # renamed over out (as rsync does); each write is checked by its exit
    # status, so none may fail silently.  The expected bytes go to a JSON
    # file for the check after the save.
    run $PY - "$M" "$BATS_TEST_TMPDIR/want.json" <<'PY'
import json, os, sys
import numpy as np
mnt, want = sys.argv[1], {}
rng = np.random.default_rng(7)
for i in range(200):
    d = os.path.join(mnt, f"layer.{i}.w")
    data = rng.standard_normal(4).astype("<f4").tobytes()
    if i < 100:
        with open(os.path.join(d, "out"), "r+b") as f:
            f.write(data)
    else:
        tmp = os.path.join(d, ".out.tmp")
        with open(tmp, "wb") as f:
            f.write(data)
        os.rename(tmp, os.path.join(d, "out"))
    want[f"layer.{i}.w"] = data.hex()
json.dump(want, open(sys.argv[2], "w"))
PY
    echo "$output"
    [ "$status" -eq 0 ]
    # The edits hold no descriptor each: the daemon has a handful open.
    nfd=$(ls "/proc/$pid/fd" | wc -l)
    echo "descriptors: $nfd"
    [ "$nfd" -lt 16 ]
    # Every edit reads back, then the save succeeds and says so.
    run $PY - "$M" "$BATS_TEST_TMPDIR/want.json" <<'PY'
import json, os, sys
for d, h in json.load(open(sys.argv[2])).items():
    got = open(os.path.join(sys.argv[1], d, "out"), "rb").read().hex()
    assert got == h, (d, got, h)
PY
    [ "$status" -eq 0 ]
    touch "$M/snapshot_done"
    [ -e "$M/snapshot_done" ]
    [ -z "$(getfattr --only-values -n user.ckptfs.last_error "$M" 2>/dev/null)" ]
    # The oracle's parse of the saved file holds exactly the edits.
    $ORACLE parse "$BATS_TEST_TMPDIR/many.ckpt" >"$BATS_TEST_TMPDIR/parse.json"
    run $PY - "$BATS_TEST_TMPDIR/parse.json" "$BATS_TEST_TMPDIR/want.json" "$BATS_TEST_TMPDIR/orig.json" <<'PY'
import hashlib, json, sys
got = {e["dir"]: e for e in json.load(open(sys.argv[1]))}
want = json.load(open(sys.argv[2]))
assert len(got) == 210, len(got)
for d, h in want.items():
    assert got[d]["sha256"] == hashlib.sha256(bytes.fromhex(h)).hexdigest(), d
    assert got[d]["dims"] == [4] and got[d]["type"] == "Float32", got[d]
orig = {e["dir"]: e for e in json.load(open(sys.argv[3]))}
for d in orig:
    if d not in want:
        assert got[d] == orig[d], d
PY
    echo "$output"
    [ "$status" -eq 0 ]
}

@test "ulimit -n 64: 100 other files at once, interleaved writes, truncates and renames read back as on a plain file" {
    $ORACLE gen "$BATS_TEST_TMPDIR/many.ckpt" --case many --count 4
    chmod 644 "$BATS_TEST_TMPDIR/many.ckpt"
    low_nofile_ckptfs
    CKPTFS=$LOW mount_fg "$BATS_TEST_TMPDIR/many.ckpt" "$M" -o commit=manual
    mkdir "$BATS_TEST_TMPDIR/ref"
    cp "$M/layer.0.w/out" "$BATS_TEST_TMPDIR/ref/out0"
    # The same random operations on files of the mount (two tensors' out,
    # two other files, one renamed over an out midway, and 100 more other
    # files, as rsync --delay-updates keeps) and on plain files; after each
    # one every file must read the same.
    run $PY - "$M" "$BATS_TEST_TMPDIR/ref" <<'PY'
import os, random, sys
mnt, ref = sys.argv[1], sys.argv[2]
files = {"out0": f"{mnt}/layer.0.w/out", "out1": f"{mnt}/layer.1.w/out",
         "x": f"{mnt}/notes.bin", "y": f"{mnt}/layer.2.w/.out.tmp"}
open(f"{ref}/out1", "wb").write(open(files["out1"], "rb").read())
for k in ("x", "y"):
    open(files[k], "wb").close()
    open(f"{ref}/{k}", "wb").close()
rng = random.Random(11)
for i in range(100):
    files[f"n{i}"] = f"{mnt}/n{i}"
    data = os.urandom(rng.randrange(0, 5000))
    open(files[f"n{i}"], "wb").write(data)
    open(f"{ref}/n{i}", "wb").write(data)
main = ["out0", "out1", "x", "y"]
def same(step, keys):
    for k in keys:
        a, b = open(files[k], "rb").read(), open(f"{ref}/{k}", "rb").read()
        assert a == b, (step, k, len(a), len(b))
same("start", files)
for step in range(400):
    k = rng.choice(main) if rng.random() < 0.8 else f"n{rng.randrange(100)}"
    if rng.random() < 0.25:
        n = rng.randrange(0, 300000)
        os.truncate(files[k], n)
        os.truncate(f"{ref}/{k}", n)
    else:
        off, data = rng.randrange(0, 300000), os.urandom(rng.randrange(1, 70000))
        for p in (files[k], f"{ref}/{k}"):
            with open(p, "r+b") as f:
                f.seek(off)
                f.write(data)
    if step == 200:  # rsync: the temporary file becomes the out
        os.rename(files["y"], f"{mnt}/layer.2.w/out")
        files["y"] = f"{mnt}/layer.2.w/out"
    same(step, main + [k])
same("end", files)
for k in ("out0", "out1", "y"):  # sizes their meta accepts: the unmount saves
    os.truncate(files[k], 16)
PY
    echo "$output"
    [ "$status" -eq 0 ]
}

@test "20,000 str values mount under ulimit -d 32M and read as the oracle says; a renamed and a rewritten one are saved" {
    # 80 MB of UTF-32 text: held in memory it would pass the data limit
    # (the mount would fail: out of memory); memory must not grow with it.
    $ORACLE gen "$BATS_TEST_TMPDIR/strs.ckpt" --case strs --count 20000 --str-chars 1024
    chmod 644 "$BATS_TEST_TMPDIR/strs.ckpt"
    $ORACLE parse "$BATS_TEST_TMPDIR/strs.ckpt" >"$BATS_TEST_TMPDIR/orig.json"
    LOW=$BATS_TEST_TMPDIR/ckptfs-data-32m
    # AddressSanitizer's shadow memory cannot live under a data limit: a
    # sanitized build (make asan) checks the rest without it.
    local limit=32768
    ! sanitized || limit=unlimited
    printf '#!/bin/bash\nulimit -d %s || exit 99\nexec "%s" "$@"\n' "$limit" "$CKPTFS" >"$LOW"
    chmod +x "$LOW"
    CKPTFS=$LOW mount_fg "$BATS_TEST_TMPDIR/strs.ckpt" "$M" -o commit=manual
    pid=$(tail -1 "$BATS_TEST_TMPDIR/mounts" | cut -d' ' -f1)
    [ "$limit" = unlimited ] || grep -E "^Max data size +33554432 +33554432 " "/proc/$pid/limits"
    run $ORACLE check "$M" "$BATS_TEST_TMPDIR/strs.ckpt"
    echo "$output"
    [ "$status" -eq 0 ]
    # Edits of str values: a rename (re-encoded from the decoded text) and
    # new text; the saved file, parsed by the oracle, holds both.
    mv "$M/note.1" "$M/renamed.1"
    printf 'h\xc3\xa9llo \xe4\xb8\xad' >"$M/note.2/out"
    touch "$M/snapshot_done"
    fusermount3 -u "$M"
    $ORACLE parse "$BATS_TEST_TMPDIR/strs.ckpt" >"$BATS_TEST_TMPDIR/parse.json"
    run $PY - "$BATS_TEST_TMPDIR/parse.json" "$BATS_TEST_TMPDIR/orig.json" <<'PY'
import hashlib, json, sys
got = {e["dir"]: e for e in json.load(open(sys.argv[1]))}
orig = {e["dir"]: e for e in json.load(open(sys.argv[2]))}
assert "note.1" not in got and len(got) == 20200, len(got)
assert got["renamed.1"]["type"] == "str", got["renamed.1"]
assert got["renamed.1"]["sha256"] == orig["note.1"]["sha256"], got["renamed.1"]
for d in orig:
    if d not in ("note.1", "note.2"):
        assert got[d] == orig[d], d
assert got["note.2"]["sha256"] == hashlib.sha256("héllo 中".encode()).hexdigest(), got["note.2"]
PY
    echo "$output"
    [ "$status" -eq 0 ]
}
