#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# The progress bar of the long operations beside ckptfs-convert's (issue
# 39): ckptfs-stat's and ckptfs-diff's reads of big models, and the
# decompression at open of a zstd file without a seek table, by the tools
# and by the mount command.  Each runs with a pseudo-terminal as stderr
# (on_tty) and stdout to a file: the bar is on the terminal, its first
# line at 0% and its last at 100% of the right total, then cleared; stdout
# is byte for byte what it is without a terminal.  Without a terminal, or
# with -q, stderr stays empty.  Only the first and the last line are
# asserted: those are always drawn (ck_progress_start, ck_progress_end),
# whereas the ones between depend on how fast the machine is.

load helpers

STAT=$BUILD/ckptfs-stat
DIFF=$BUILD/ckptfs-diff
DUMP=$BUILD/ckptfs-dump
ENVELOPE="$PY $REPO/tests/oracle/envelope_oracle.py"

setup() {
    T=$BATS_TEST_TMPDIR
    M=$T/m
}

# big_st FILE SEED: a 64 MiB safetensors file, two F32 tensors of 32 MiB
# ("a" [4096, 2048], "b" [2048, 4096]) of numpy's normal numbers from SEED.
big_st() {
    $PY - "$1" "$2" <<'PY'
import json, struct, sys
import numpy as np
rng = np.random.default_rng(int(sys.argv[2]))
ts = {"a": rng.standard_normal((4096, 2048), dtype=np.float32),
      "b": rng.standard_normal((2048, 4096), dtype=np.float32)}
hdr, off = {}, 0
for k, v in ts.items():
    hdr[k] = {"dtype": "F32", "shape": list(v.shape), "data_offsets": [off, off + v.nbytes]}
    off += v.nbytes
h = json.dumps(hdr).encode()
h += b" " * (-len(h) % 8)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    for v in ts.values():
        f.write(v.tobytes())
PY
}

# on_tty OUT CMD...: run CMD with stdout to OUT, stdin from /dev/null and
# stderr a pseudo-terminal (raw: the bytes as written); what CMD wrote on
# the terminal is printed on stdout, and the status is CMD's.  Read until
# no process holds the terminal (a mount's daemon lets go of it when it
# detaches).
on_tty() {
    $PY - "$@" <<'PY'
import os, subprocess, sys, tty
master, slave = os.openpty()
tty.setraw(slave)
with open(sys.argv[1], "wb") as out:
    p = subprocess.Popen(sys.argv[2:], stdin=subprocess.DEVNULL, stdout=out, stderr=slave)
os.close(slave)
seen = b""
while True:
    try:
        b = os.read(master, 65536)
    except OSError: # EIO: the last holder closed it
        break
    if not b:
        break
    seen += b
sys.stdout.buffer.write(seen)
sys.exit(p.wait())
PY
}

# bars FILE: each bar drawn in FILE (a terminal's bytes), one line each:
# its first drawing, " | ", its last, with ESC written as "^[" -- and
# "cleared" after it when the line was then cleared.  Fails on any byte
# outside a bar.
bars() {
    $PY - "$1" <<'PY'
import re, sys
data = open(sys.argv[1], "rb").read().decode()
draw = r"\r\[[#-]{24}\] +\d+% [^\r\x1b]*\x1b\[K"
bar = re.compile("((?:%s)+)(\r\x1b\[K)?" % draw)
pos = 0
while pos < len(data):
    m = bar.match(data, pos)
    if m is None:
        sys.exit("not a bar at byte %d: %r" % (pos, data[pos:pos + 80]))
    lines = re.findall(draw, m.group(1))
    show = lambda s: s.replace("\r", "").replace("\x1b", "^[")
    print(show(lines[0]) + " | " + show(lines[-1]) + (" cleared" if m.group(2) else ""))
    pos = m.end()
PY
}

# human BYTES: the size as the bar prints it ("64.0 MiB").
human() {
    $PY -c '
v = float('"$1"'); u = 0
while v >= 1024 and u < 4: v /= 1024; u += 1
print(("%.0f %s" if u == 0 else "%.1f %s") % (v, ["B", "KiB", "MiB", "GiB", "TiB"][u]))'
}

# one_bar FILE TOTAL: FILE holds exactly one bar, from 0 to TOTAL (as
# human prints it), then cleared.
one_bar() {
    run bars "$1"
    echo "$output"
    [ "$status" -eq 0 ] && [ "${#lines[@]}" -eq 1 ]
    [[ ${lines[0]} == "[------------------------]   0% 0 B / $2  0 B/s  ETA --:--^[[K | "* ]]
    [[ ${lines[0]} == *" | [########################] 100% $2 / $2  "*"/s  ETA 0:00^[[K cleared" ]]
}

# no_tty_same CMD...: CMD without a terminal prints the same stdout as the
# run on_tty left in $T/tty.out, nothing on stderr, and no \r anywhere.
no_tty_same() {
    local st=0
    "$@" >"$T/plain.out" 2>"$T/plain.err" || st=$?
    cmp "$T/tty.out" "$T/plain.out"
    [ ! -s "$T/plain.err" ] || { cat "$T/plain.err"; false; }
    ! grep -q $'\r' "$T/plain.out" || false
    return "$st"
}

@test "ckptfs-stat on a terminal: a bar over the bytes read, cleared before the table; none with -q or without a terminal" {
    f=$T/a.safetensors
    big_st "$f" 1
    # Several threads counting at once (-j 4, small chunks): one draws.
    on_tty "$T/tty.out" "$STAT" -j 4 --chunk=256K "$f" >"$T/tty"
    one_bar "$T/tty" "64.0 MiB"
    no_tty_same "$STAT" -j 4 --chunk=256K "$f"
    grep -q '^a  *float32  *\[4096,2048\]  *8388608 ' "$T/tty.out"
    # A histogram is a second pass: twice the bytes.
    on_tty "$T/tty.out" "$STAT" --hist=4 "$f" >"$T/tty"
    one_bar "$T/tty" "128.0 MiB"
    no_tty_same "$STAT" --hist=4 "$f"
    grep -q '^histogram of b (4 bins' "$T/tty.out"
    on_tty "$T/tty.out" "$STAT" --json "$f" >"$T/tty"
    one_bar "$T/tty" "64.0 MiB"
    no_tty_same "$STAT" --json "$f"
    # -q on a terminal: nothing on it, the same table.
    on_tty "$T/tty.out" "$STAT" -q "$f" >"$T/tty"
    [ ! -s "$T/tty" ] || { cat -v "$T/tty"; false; }
    no_tty_same "$STAT" "$f"
}

@test "ckptfs-diff on a terminal: a bar over both models' bytes, cleared before the report; none with -q or without a terminal" {
    big_st "$T/a.safetensors" 1
    big_st "$T/b.safetensors" 2
    st=0
    on_tty "$T/tty.out" "$DIFF" -j 4 --chunk=256K "$T/a.safetensors" "$T/b.safetensors" \
        >"$T/tty" || st=$?
    [ "$st" -eq 1 ] # they differ
    one_bar "$T/tty" "128.0 MiB"
    st=0
    no_tty_same "$DIFF" -j 4 --chunk=256K "$T/a.safetensors" "$T/b.safetensors" || st=$?
    [ "$st" -eq 1 ]
    grep -q '^values differ: a: ' "$T/tty.out"
    # One tensor selected: its bytes in both.
    on_tty "$T/tty.out" "$DIFF" --json "$T/a.safetensors" "$T/a.safetensors" b >"$T/tty"
    one_bar "$T/tty" "64.0 MiB"
    no_tty_same "$DIFF" --json "$T/a.safetensors" "$T/a.safetensors" b
    # -q: nothing printed anywhere, the status says it.
    st=0
    on_tty "$T/tty.out" "$DIFF" -q "$T/a.safetensors" "$T/b.safetensors" >"$T/tty" || st=$?
    [ "$st" -eq 1 ] && [ ! -s "$T/tty" ] && [ ! -s "$T/tty.out" ] || false
}

@test "a zstd file without a seek table: its decompression at open draws a bar in ckptfs-dump and ckptfs-stat; a seekable one none" {
    f=$T/a.safetensors
    big_st "$f" 1
    # The frame declares its content size: the bar counts the plaintext.
    zstd -q -1 "$f" -o "$T/sized.safetensors.zst"
    on_tty "$T/tty.out" "$DUMP" "$T/sized.safetensors.zst" >"$T/tty"
    one_bar "$T/tty" "64.0 MiB"
    no_tty_same "$DUMP" "$T/sized.safetensors.zst"
    grep -q $'^a\tfloat32\t\\[4096,2048\\]\t33554432\t' "$T/tty.out"
    # From a pipe zstd declares no size: the bar counts the compressed
    # bytes of the file's size.
    zstd -q -1 -c <"$f" >"$T/piped.safetensors.zst"
    packed=$(human "$(stat -c %s "$T/piped.safetensors.zst")")
    on_tty "$T/tty.out" "$DUMP" "$T/piped.safetensors.zst" >"$T/tty"
    one_bar "$T/tty" "$packed"
    no_tty_same "$DUMP" "$T/piped.safetensors.zst"
    # ckptfs-stat: the decompression's bar, then the reads'.
    on_tty "$T/tty.out" "$STAT" "$T/piped.safetensors.zst" >"$T/tty"
    run bars "$T/tty"
    echo "$output"
    [ "$status" -eq 0 ] && [ "${#lines[@]}" -eq 2 ]
    [[ ${lines[0]} == *"] 100% $packed / $packed  "*" cleared" ]]
    [[ ${lines[1]} == "[------------------------]   0% 0 B / 64.0 MiB  "*"] 100% 64.0 MiB / 64.0 MiB  "*" cleared" ]]
    no_tty_same "$STAT" "$T/piped.safetensors.zst"
    "$STAT" "$f" | cmp - "$T/tty.out"
    # -q: none.
    on_tty "$T/tty.out" "$DUMP" -q "$T/sized.safetensors.zst" >"$T/tty"
    [ ! -s "$T/tty" ] || { cat -v "$T/tty"; false; }
    # A seekable file is read frame by frame, nothing decompressed at open.
    $ENVELOPE zstd-seekable --frame-size 4194304 "$f" "$T/seek.safetensors.zst"
    on_tty "$T/tty.out" "$DUMP" "$T/seek.safetensors.zst" >"$T/tty"
    [ ! -s "$T/tty" ] || { cat -v "$T/tty"; false; }
}

@test "ckptfs mounting a zstd file without a seek table: the bar on a terminal before it detaches; none without one" {
    f=$T/a.safetensors
    big_st "$f" 1
    zstd -q -1 "$f" -o "$T/a.safetensors.zst"
    chmod 644 "$T/a.safetensors.zst"
    mkdir -p "$M"
    echo "0 $M" >>"$T/mounts" # a daemon: teardown unmounts it
    on_tty "$T/tty.out" "$CKPTFS" "$T/a.safetensors.zst" "$M" >"$T/tty"
    one_bar "$T/tty" "64.0 MiB"
    [ ! -s "$T/tty.out" ]
    mountpoint -q "$M"
    # The tree serves the plaintext: tensor a is the file's first 32 MiB of data.
    data=$($PY -c 'import struct, sys; print(8 + struct.unpack("<Q", open(sys.argv[1], "rb").read(8))[0])' "$f")
    tail -c +$((data + 1)) "$f" | head -c 33554432 | cmp - "$M/a/out"
    fusermount3 -u "$M"
    # Not a terminal: nothing on stderr.
    "$CKPTFS" "$T/a.safetensors.zst" "$M" >"$T/plain.out" 2>"$T/plain.err"
    mountpoint -q "$M"
    [ ! -s "$T/plain.out" ] && [ ! -s "$T/plain.err" ] || { cat "$T/plain.err"; false; }
    [ "$(stat -c %s "$M/b/out")" -eq 33554432 ]
}
