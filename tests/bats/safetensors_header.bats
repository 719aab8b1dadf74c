#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# The safetensors header as a stream (codec/safetensors/safetensors_reader.c: parsed in
# one pass into the index, in chunks, with no JSON document): every refusal
# the reference makes, and the stricter ones ckptfs keeps, wherever the fault
# sits (far into a 100 000-tensor header, inside a key, inside
# "__metadata__", inside a member the reader ignores, across the reader's
# 1 MiB chunks); what is valid still mounts; and the memory a header costs is
# that of the same tensors' .ckpt, not a multiple of the header's size.
# Hostile headers are written here (write_st, json + struct), refusals checked
# against the oracle's layout rules: one line naming the file and an offset
# inside the header.

load helpers

ST_ORACLE="$PY $REPO/tests/oracle/safetensors_oracle.py"

teardown() {
    if mountpoint -q "$BATS_TEST_TMPDIR/m"; then
        fusermount3 -u "$BATS_TEST_TMPDIR/m" || fusermount3 -uz "$BATS_TEST_TMPDIR/m"
    fi
    ckptfs_teardown
}

# write_st FILE HEADER_PY: FILE holds the header HEADER_PY evaluates to (a
# bytes expression, in which T(name, begin) is the JSON text of a one-float
# F32 tensor at data offset begin, as bytes) padded with spaces to a multiple
# of 8, then DATA bytes of data (env, default 8).
write_st() {
    DATA=${DATA:-8} $PY - "$1" "$2" <<'PYEOF'
import os, struct, sys
def T(name, begin):
    return b'%s:{"dtype":"F32","shape":[1],"data_offsets":[%d,%d]}' % (name, begin, begin + 4)
head = eval(sys.argv[2])
head += b" " * (-len(head) % 8)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(head)) + head + b"\x01" * int(os.environ["DATA"]))
PYEOF
}

# refused NAME HEADER_PY WHAT: that header is refused in one line naming the
# file and an offset inside the header, with WHAT in it; nothing mounted.
refused() {
    local f=$BATS_TEST_TMPDIR/$1.safetensors off hdr
    write_st "$f" "$2"
    mkdir -p "$BATS_TEST_TMPDIR/m"
    run "$CKPTFS" "$f" "$BATS_TEST_TMPDIR/m"
    echo "$1: $output"
    [ "$status" -ne 0 ]
    [ "${#lines[@]}" -eq 1 ]
    [[ $output == "ckptfs: $f: offset "* ]]
    [[ $output == *"$3"* ]]
    ! mountpoint -q "$BATS_TEST_TMPDIR/m" || false
    off=$(sed -nE 's/^ckptfs: [^:]*: offset ([0-9]+): .*/\1/p' <<<"$output")
    hdr=$(( $(od -An -tu8 -N8 "$f") + 8 ))
    [ "$off" -ge 8 ] && [ "$off" -le "$hdr" ] || false
}

# accepted NAME HEADER_PY DIR...: that header mounts and shows each DIR.
accepted() {
    local f=$BATS_TEST_TMPDIR/$1.safetensors d
    shift
    write_st "$f" "$1"
    shift
    mount_fg "$f" "$BATS_TEST_TMPDIR/m" -o ro
    for d in "$@"; do
        [ -f "$BATS_TEST_TMPDIR/m/$d/out" ] || { echo "$f: no $d"; ls "$BATS_TEST_TMPDIR/m"; false; }
    done
    unmount "$BATS_TEST_TMPDIR/m"
}

# A header of N one-float tensors t0..t<N-1>, then MORE (bytes, from data
# offset 4N on) before the closing brace.
many() { echo "b'{' + b','.join(T(b'\"t%d\"' % i, 4 * i) for i in range($1)) + $2 + b'}'"; }

@test "a duplicate tensor name 100 000 tensors after the first is refused" {
    DATA=400004 refused dupfar "$(many 100000 "b',' + T(b'\"t0\"', 400000)")" \
        "duplicate object key 't0'"
    DATA=400004 refused dupmeta "$(many 100000 "b',\"__metadata__\":null,\"__metadata__\":{}'")" \
        "duplicate object key '__metadata__'"
}

@test "duplicate keys inside a tensor, inside __metadata__ and inside a member the reader ignores are refused; equal keys in different objects are not duplicates" {
    refused dupdtype "b'{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}'" \
        "duplicate object key 'dtype'"
    refused dupmetakey "b'{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"},' + T(b'\"a\"', 0) + b',' + T(b'\"b\"', 4) + b'}'" \
        "duplicate object key 'k'"
    refused dupignored "b'{\"a\":{\"x\":{\"k\":1,\"y\":[{\"k\":1}],\"k\":2},\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},' + T(b'\"b\"', 4) + b'}'" \
        "duplicate object key 'k'"
    accepted sameinother "b'{\"a\":{\"x\":{\"k\":1},\"y\":{\"k\":{\"k\":2}},\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"b\":{\"x\":{\"k\":1},\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}'" a b
}

@test "bytes that are not UTF-8 are refused in a key, in __metadata__ and in an ignored member: overlong forms, encoded surrogates, past U+10FFFF" {
    refused overlongkey "b'{' + T(b'\"a\\xc0\\xaf\"', 0) + b',' + T(b'\"b\"', 4) + b'}'" "not UTF-8"
    refused surrogatekey "b'{' + T(b'\"a\\xed\\xa0\\x80\"', 0) + b',' + T(b'\"b\"', 4) + b'}'" "not UTF-8"
    refused pastmaxkey "b'{' + T(b'\"a\\xf5\\x80\\x80\\x80\"', 0) + b',' + T(b'\"b\"', 4) + b'}'" "not UTF-8"
    refused metavalue "b'{\"__metadata__\":{\"k\":\"\\xe0\\x80\\xaf\"},' + T(b'\"a\"', 0) + b',' + T(b'\"b\"', 4) + b'}'" "not UTF-8"
    refused metakey "b'{\"__metadata__\":{\"\\xf4\\x90\\x80\\x80\":\"v\"},' + T(b'\"a\"', 0) + b',' + T(b'\"b\"', 4) + b'}'" "not UTF-8"
    refused ignored "b'{\"a\":{\"note\":[\"\\xc1\\xbf\"],\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},' + T(b'\"b\"', 4) + b'}'" "not UTF-8"
    # far into a big header
    DATA=400004 refused farkey "$(many 100000 "b',' + T(b'\"z\\xc0\\x80\"', 400000)")" "not UTF-8"
}

@test "lone surrogate escapes are refused wherever they are, also across the reader's 1 MiB chunks; a pair is a character" {
    refused lonekey "b'{' + T(b'\"a\\\\ud800\"', 0) + b',' + T(b'\"b\"', 4) + b'}'" "lone surrogate"
    refused lonelow "b'{' + T(b'\"a\\\\udc00\"', 0) + b',' + T(b'\"b\"', 4) + b'}'" "lone surrogate"
    refused highthenascii "b'{\"__metadata__\":{\"k\":\"\\\\uD800\\\\u0041\"},' + T(b'\"a\"', 0) + b',' + T(b'\"b\"', 4) + b'}'" "lone surrogate"
    refused highthenend "b'{\"a\":{\"note\":\"\\\\ud83d\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},' + T(b'\"b\"', 4) + b'}'" "lone surrogate"
    # the escape's first CUT bytes before file offset 8 + 2^20, the rest after
    for cut in 1 2 4 6 7; do
        refused "chunk$cut" "b'{\"__metadata__\":{\"k\":\"' + b'x' * ((1 << 20) - 22 - $cut) + b'\\\\ud800\\\\n\"},' + T(b'\"a\"', 0) + b',' + T(b'\"b\"', 4) + b'}'" "lone surrogate"
    done
    accepted pair "b'{' + T(b'\"smile\\\\ud83d\\\\ude00\"', 0) + b',' + T(b'\"b\"', 4) + b'}'" "smile😀" b
    accepted pairacross "b'{\"__metadata__\":{\"k\":\"' + b'x' * ((1 << 20) - 22 - 8) + b'\\\\ud83d\\\\ude00\"},' + T(b'\"a\"', 0) + b',' + T(b'\"b\"', 4) + b'}'" a b
}

@test "NUL in a string, an integer past 2^63, and nesting past 127 levels inside an ignored member are refused" {
    refused nulmeta "b'{\"__metadata__\":{\"k\":\"a\\\\u0000b\"},' + T(b'\"a\"', 0) + b',' + T(b'\"b\"', 4) + b'}'" "NUL"
    refused bigint "b'{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,9223372036854775808]},' + T(b'\"b\"', 4) + b'}'" "not valid JSON"
    refused deepignored "b'{\"a\":{\"x\":' + b'[' * 126 + b']' * 126 + b',\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},' + T(b'\"b\"', 4) + b'}'" "deeper than 127 levels"
    accepted deepok "b'{\"a\":{\"x\":' + b'[' * 125 + b']' * 125 + b',\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},' + T(b'\"b\"', 4) + b'}'" a b
}

@test "a header ending inside a value, or followed by anything but spaces, is refused at the header's end or the byte at fault" {
    refused cut "b'{' + T(b'\"a\"', 0) + b',' + T(b'\"b\"', 4)" "not valid JSON"
    refused twovalues "b'{' + T(b'\"a\"', 0) + b',' + T(b'\"b\"', 4) + b'}{}'" "not valid JSON"
    refused empty "b''" "not valid JSON"
}

# peak_kib MODEL: the peak RSS (VmHWM) of a foreground mount of MODEL, once live.
peak_kib() {
    mount_fg "$1" "$BATS_TEST_TMPDIR/m" -o ro
    awk '/^VmHWM/ {print $2}' "/proc/$(daemon_pid)/status"
    unmount "$BATS_TEST_TMPDIR/m"
}

@test "a header of 100 000 tensors costs the memory of the same tensors' .ckpt, not a multiple of the header" {
    for ext in ckpt safetensors; do
        st=$([ $ext = safetensors ] && echo --safetensors || true)
        $PY "$REPO/bench/gen_ckpt.py" "$BATS_TEST_TMPDIR/many.$ext" --size 400000 --count 100000 $st
    done
    ckpt=$(peak_kib "$BATS_TEST_TMPDIR/many.ckpt")
    st=$(peak_kib "$BATS_TEST_TMPDIR/many.safetensors")
    echo "peak RSS: ckpt $ckpt KiB, safetensors $st KiB"
    # The bound the issue sets: 1.5 times the .ckpt's (a JSON document of
    # the 8 MB header was 4 times).
    [ $((st * 2)) -le $((ckpt * 3)) ]
}
