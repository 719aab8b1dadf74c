#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# MindSpore-encrypted models (AES-GCM / AES-CBC, 64 MiB blocks, and the
# v1.3-1.6 legacy layout): mounted with a key, refused without the right one,
# saved encrypted again.  Every expected value comes from the independent
# oracles: envelope_oracle.py (python3-cryptography) encrypts, decrypts and
# lays out the files, ckpt_oracle.py / graph_oracle.py read the plaintexts.

load helpers

# the oracles' calls through one Python that imported them (helpers.bash)
setup_file() { pyserve_file_start numpy "$REPO/tests/oracle/ckpt_oracle.py" "$REPO/tests/oracle/envelope_oracle.py" "$REPO/tests/oracle/split_mindir.py"; }
teardown_file() { pyserve_file_stop; }

ENVELOPE="$PY $REPO/tests/oracle/envelope_oracle.py"
SPLIT="$PY $REPO/tests/oracle/split_mindir.py"
MIB64=67108864

# hex_of TEXT: the bytes of TEXT in hex (the key as the oracle takes it).
hex_of() { printf %s "$1" | od -An -vtx1 | tr -d ' \n'; }

# A test may hold an out open (HOLD); close it first, or the unmount would
# wait for it.
teardown() {
    if [ -n "${HOLD:-}" ]; then exec {HOLD}>&-; fi
    ckptfs_teardown
}

setup() {
    M=$BATS_TEST_TMPDIR/m
    KEY=$BATS_TEST_TMPDIR/key
    (umask 077 && printf '0123456789ABCDEF' >"$KEY")
    KHEX=$(hex_of 0123456789ABCDEF)
    PLAIN=$BATS_TEST_TMPDIR/plain.ckpt
    cp "$MS/goldenstick_test_linears_woq_predict_2stage_fp32.ckpt" "$PLAIN"
    chmod 644 "$PLAIN"
}

# encrypt MODE IN OUT [oracle options]: OUT is IN encrypted with the test key.
encrypt() {
    local mode=$1 in=$2 out=$3
    shift 3
    $ENVELOPE encrypt --mode "$mode" --key-hex "${EKHEX:-$KHEX}" "$@" "$in" "$out"
}

# decrypt IN OUT: the oracle's plaintext of IN (fails if any block is bad).
decrypt() { $ENVELOPE decrypt --key-hex "${EKHEX:-$KHEX}" "$1" "$2"; }

# layout FILE EXPR: a Python expression over the oracle's layout of FILE
# (L: the JSON, B: its blocks).
layout() {
    $ENVELOPE layout "$1" | $PY -c 'import json,sys
L = json.load(sys.stdin); B = L["blocks"]
v = eval(sys.argv[1])
print(v if isinstance(v, (str, int)) else json.dumps(v))' "$2"
}

# ivs FILE: the IVs of FILE's blocks, one a line.
ivs() { layout "$1" '"\n".join(b["iv"] for b in B)'; }

# try_mount MODEL [ckptfs options...]: a daemonized mount attempt (so one
# that wrongly succeeds returns too, and teardown unmounts it); sets
# $status and $output.
try_mount() {
    local model=$1
    shift
    mkdir -p "$M"
    echo "0 $M" >>"$BATS_TEST_TMPDIR/mounts"
    run "$CKPTFS" "$@" "$model" "$M"
    echo "$output"
}

# refused SHA: the last try_mount failed, mounted nothing and left the model
# with the sha256 SHA.
refused() {
    [ "$status" -ne 0 ]
    ! mountpoint -q "$M" || false
    [ "$(sha "$MODEL")" = "$1" ]
}

# gen_ckpt OUT TAG:NFLOATS...: a checkpoint of random Float32 tensors,
# encoded as MindSpore writes them (ckpt_oracle's encoder); OUT.offsets gets
# "TAG DATA_OFFSET NBYTES" per tensor (where its bytes sit in OUT).
gen_ckpt() {
    PYTHONPATH=$REPO/tests/oracle $PY - "$@" <<'PY'
import sys
import numpy as np
import ckpt_oracle as co
out = sys.argv[1]
rng = np.random.default_rng(len(sys.argv))
pos = 0
with open(out, "wb") as f, open(out + ".offsets", "w") as offs:
    for spec in sys.argv[2:]:
        tag, n = spec.split(":")
        content = rng.standard_normal(int(n)).astype("<f4").tobytes()
        rec, o = co.encode_value(tag, "Float32", [int(n)], content)
        data = o["content"] + 1 + len(co.varint(len(content)))
        assert rec[data:data + len(content)] == content
        offs.write("%s %d %d\n" % (tag, pos + data, len(content)))
        f.write(rec)
        pos += len(rec)
PY
}

# straddle_check MNT PLAIN.ckpt WINDOW OFFSET...: for each plaintext OFFSET
# inside a tensor (PLAIN.ckpt.offsets), the out bytes from OFFSET-WINDOW to
# OFFSET+WINDOW (clipped to the tensor) read through the mount equal the
# plain file's; also reads that end and start exactly at OFFSET.
straddle_check() {
    $PY - "$@" <<'PY'
import os, sys
mnt, plain, w = sys.argv[1], sys.argv[2], int(sys.argv[3])
tensors = [(t, int(o), int(n)) for t, o, n in
           (l.split() for l in open(plain + ".offsets"))]
data = open(plain, "rb").read()
checked = 0
for off in map(int, sys.argv[4:]):
    hit = [(t, o, n) for t, o, n in tensors if o < off < o + n]
    if not hit:
        continue
    t, o, n = hit[0]
    fd = os.open(os.path.join(mnt, t, "out"), os.O_RDONLY)
    for a, b in ((off - w, off + w), (off - w, off), (off, off + w)):
        a, b = max(a, o), min(b, o + n)
        got = os.pread(fd, b - a, a - o)
        assert got == data[a:b], "%s: read %d..%d (plaintext) differs" % (t, a, b)
    os.close(fd)
    checked += 1
assert checked, "no offset fell inside a tensor"
print("straddling reads ok at", checked, "offsets")
PY
}

# expect_edit ORIG.ckpt NEW.ckpt TAG OFFSET HEX: the oracle's parse of NEW
# is ORIG's with only TAG's bytes at OFFSET replaced by HEX.
expect_edit() {
    PYTHONPATH=$REPO/tests/oracle $PY - "$@" <<'PY'
import sys
import ckpt_oracle as co
old, _ = co.load_reference(sys.argv[1])
new, _ = co.load_reference(sys.argv[2])
tag, off, patch = sys.argv[3].encode(), int(sys.argv[4]), bytes.fromhex(sys.argv[5])
assert [(e.tag, e.ms_type, e.dims) for e in old] == [(e.tag, e.ms_type, e.dims) for e in new]
for a, b in zip(old, new):
    want = a.out
    if a.tag == tag:
        want = want[:off] + patch + want[off + len(patch):]
    assert b.out == want, "tensor %r differs" % a.tag
print("edit ok")
PY
}

# ---------------------------------------------------------------------------
# Reading

@test "AES-GCM .ckpt with -o key_file mounts exactly like the plain model" {
    F=$BATS_TEST_TMPDIR/enc.ckpt
    encrypt AES-GCM "$PLAIN" "$F"
    [ "$(layout "$F" 'L["mode"]')" = AES-GCM ]
    before=$(sha "$F")
    mount_fg "$F" "$M" -o key_file="$KEY"
    $ORACLE check "$M" "$PLAIN"
    mount_fg "$PLAIN" "$BATS_TEST_TMPDIR/p" -o ro
    diff <(cd "$M" && ls -A) <(cd "$BATS_TEST_TMPDIR/p" && ls -A)
    for d in "$BATS_TEST_TMPDIR"/p/*/; do
        n=$(basename "$d")
        cmp "$d/meta" "$M/$n/meta"
        cmp "$d/out" "$M/$n/out"
    done
    # Nothing edited: the unmount leaves the encrypted file as it was.
    unmount "$M"
    [ "$(sha "$F")" = "$before" ]
}

@test "AES-CBC .ckpt with the key in CKPTFS_KEY_HEX mounts like the plain model" {
    F=$BATS_TEST_TMPDIR/enc.ckpt
    cp "$MS/mindarmour_checkpoint_lenet-10_1875.ckpt" "$PLAIN"
    encrypt AES-CBC "$PLAIN" "$F"
    [ "$(layout "$F" 'L["mode"]')" = AES-CBC ]
    CKPTFS_KEY_HEX=$KHEX mount_fg "$F" "$M" -o ro
    $ORACLE check "$M" "$PLAIN"
    mount_fg "$PLAIN" "$BATS_TEST_TMPDIR/p" -o ro
    [ "$(cat "$M"/*/out | sha256sum)" = "$(cat "$BATS_TEST_TMPDIR"/p/*/out | sha256sum)" ]
}

@test "small blocks (oracle --block-size): every out, and reads straddling each block boundary" {
    P=$BATS_TEST_TMPDIR/multi.ckpt
    gen_ckpt "$P" a:3000 b:50000 c:7 d:20000
    bs=4096
    for mode in AES-GCM AES-CBC; do
        F=$BATS_TEST_TMPDIR/enc-$mode.ckpt
        encrypt "$mode" "$P" "$F" --block-size $bs
        [ "$(layout "$F" 'len(B)')" -gt 50 ]
        mount_fg "$F" "$M.$mode" -o ro,key_file="$KEY"
        $ORACLE check "$M.$mode" "$P"
        straddle_check "$M.$mode" "$P" 100 $(seq $bs $bs "$(stat -c %s "$P")")
        # A read of one whole tensor across many blocks, through cat.
        [ "$(sha "$M.$mode/b/out")" = "$($PY -c 'import sys,hashlib
o, n = map(int, sys.argv[2:4])
print(hashlib.sha256(open(sys.argv[1], "rb").read()[o:o + n]).hexdigest())' "$P" \
            $(awk '$1 == "b" {print $2, $3}' "$P.offsets"))" ]
    done
}

@test "the v1.7 GCM fixture mounts with its key: the oracle's 0-parameter ModelProto" {
    FIX=$MS/mindspore_add_encrpty_key_0123456789ABCDEF.mindir
    decrypt "$FIX" "$BATS_TEST_TMPDIR/plain.mindir"
    [ "$(stat -c %s "$BATS_TEST_TMPDIR/plain.mindir")" -eq "$(layout "$FIX" 'B[0]["cipher_len"]')" ]
    [ -z "$($GRAPH_ORACLE list "$BATS_TEST_TMPDIR/plain.mindir")" ]
    mount_fg "$FIX" "$M" -o key_file="$KEY"
    $GRAPH_ORACLE check "$M" "$BATS_TEST_TMPDIR/plain.mindir"
    [ "$(ls -A "$M")" = snapshot_done ]
    [ -f "$M/snapshot_done" ]
}

@test "the v1.3-1.6 legacy fixture mounts read-only with the tree of its plaintext; -o rw is refused" {
    MODEL=$BATS_TEST_TMPDIR/legacy.mindir
    cp "$MS/mindspore_add_encrpty_key_0123456789ABCDEF_v1.3legacy.mindir" "$MODEL"
    chmod 644 "$MODEL"
    before=$(sha "$MODEL")
    # The oracle agrees its plaintext is the plain fixture.
    decrypt "$MODEL" "$BATS_TEST_TMPDIR/dec.mindir"
    cmp "$BATS_TEST_TMPDIR/dec.mindir" "$MS/mindspore_add_no_encrpty.mindir"
    [ "$(layout "$MODEL" 'L["mode"]')" = legacy ]
    try_mount "$MODEL" -o rw,key_file="$KEY"
    refused "$before"
    [[ $output == *"does not write"* ]]
    # Without -o rw it mounts read-only, although the file is writable.
    mount_fg "$MODEL" "$BATS_TEST_TMPDIR/l" -o key_file="$KEY"
    mount_fg "$MS/mindspore_add_no_encrpty.mindir" "$BATS_TEST_TMPDIR/p" -o ro
    [ "$(cd "$BATS_TEST_TMPDIR/l" && ls -A)" = "$(cd "$BATS_TEST_TMPDIR/p" && ls -A)" ]
    [ -f "$BATS_TEST_TMPDIR/l/snapshot_done" ]
    $GRAPH_ORACLE check "$BATS_TEST_TMPDIR/l" "$MS/mindspore_add_no_encrpty.mindir"
    run touch "$BATS_TEST_TMPDIR/l/new"
    [ "$status" -ne 0 ]
    [[ $output == *"Read-only file system"* ]]
    [ "$(sha "$MODEL")" = "$before" ]
}

# ---------------------------------------------------------------------------
# Keys and refusals

@test "a key file readable or writable by group or others is refused (chmod 600)" {
    MODEL=$BATS_TEST_TMPDIR/enc.ckpt
    encrypt AES-GCM "$PLAIN" "$MODEL"
    before=$(sha "$MODEL")
    for mode in 640 620 604 602 644 660 666; do
        chmod "$mode" "$KEY"
        try_mount "$MODEL" -o key_file="$KEY"
        refused "$before"
        [[ $output == *"chmod 600"* ]]
    done
    chmod 400 "$KEY"
    mount_fg "$MODEL" "$M.ok" -o ro,key_file="$KEY"
    $ORACLE check "$M.ok" "$PLAIN"
}

@test "a key of another length than 16, 24 or 32 bytes is refused (file and CKPTFS_KEY_HEX)" {
    MODEL=$BATS_TEST_TMPDIR/enc.ckpt
    encrypt AES-GCM "$PLAIN" "$MODEL"
    before=$(sha "$MODEL")
    for n in 0 1 15 17 23 25 31 33 64; do
        (umask 077 && head -c "$n" /dev/zero | tr '\0' 'k' >"$BATS_TEST_TMPDIR/k$n")
        try_mount "$MODEL" -o key_file="$BATS_TEST_TMPDIR/k$n"
        refused "$before"
        [[ $output == *"a key is 16, 24 or 32"* ]]
        [ "$n" -eq 0 ] && continue
        CKPTFS_KEY_HEX=$(head -c "$n" /dev/zero | tr '\0' 'k' | od -An -vtx1 | tr -d ' \n') \
            try_mount "$MODEL"
        refused "$before"
        [[ $output == *"16, 24 or 32"* ]]
    done
}

@test "an encrypted model without a key is refused, naming the mode" {
    for mode in AES-GCM AES-CBC; do
        MODEL=$BATS_TEST_TMPDIR/enc-$mode.ckpt
        encrypt "$mode" "$PLAIN" "$MODEL"
        before=$(sha "$MODEL")
        try_mount "$MODEL"
        refused "$before"
        [[ $output == *"$MODEL"*"encrypted ($mode); give -o key_file="* ]]
    done
    # The v1.7 fixture too (ckptfs-dump says the same).
    MODEL=$MS/mindspore_add_encrpty_key_0123456789ABCDEF.mindir
    try_mount "$MODEL"
    refused "$(sha "$MODEL")"
    [[ $output == *"encrypted (AES-GCM); give -o key_file="* ]]
}

@test "a wrong key is refused: GCM names the tag of block 0, CBC the file" {
    (umask 077 && printf 'FEDCBA9876543210' >"$BATS_TEST_TMPDIR/wrong")
    MODEL=$BATS_TEST_TMPDIR/enc.ckpt
    encrypt AES-GCM "$PLAIN" "$MODEL"
    before=$(sha "$MODEL")
    try_mount "$MODEL" -o key_file="$BATS_TEST_TMPDIR/wrong"
    refused "$before"
    [[ $output == *"$MODEL: block 0 at offset 0: AES-GCM tag mismatch"* ]]
    # The oracle agrees that key is wrong.
    ! EKHEX=$(hex_of FEDCBA9876543210) decrypt "$MODEL" "$BATS_TEST_TMPDIR/dec" || false
    # CBC: usually the padding, rarely garbage the parser refuses.
    MODEL=$BATS_TEST_TMPDIR/enc-cbc.ckpt
    encrypt AES-CBC "$PLAIN" "$MODEL"
    before=$(sha "$MODEL")
    try_mount "$MODEL" -o key_file="$BATS_TEST_TMPDIR/wrong"
    refused "$before"
    [[ $output == *"$MODEL"* ]]
    # The legacy layout has no tag: a wrong key gives garbage the parser refuses.
    MODEL=$MS/mindspore_add_encrpty_key_0123456789ABCDEF_v1.3legacy.mindir
    try_mount "$MODEL" -o key_file="$BATS_TEST_TMPDIR/wrong"
    refused "$(sha "$MODEL")"
    [[ $output == *"$MODEL"* ]]
}

@test "a tampered block N is refused naming block N and its file offset (GCM any byte, CBC the padding)" {
    P=$BATS_TEST_TMPDIR/multi.ckpt
    gen_ckpt "$P" a:30000 b:7
    for mode in AES-GCM AES-CBC; do
        F=$BATS_TEST_TMPDIR/enc-$mode.ckpt
        encrypt "$mode" "$P" "$F" --block-size 20000
        last=$(($(layout "$F" 'len(B)') - 1))
        [ "$last" -ge 4 ]
        for n in 0 2 $last; do
            MODEL=$BATS_TEST_TMPDIR/t-$mode-$n.ckpt
            if [ $mode = AES-GCM ]; then byte=777; else byte=-17; fi
            [ $n = "$last" ] && [ $mode = AES-GCM ] && byte=-1
            $ENVELOPE tamper "$F" "$MODEL" --block "$n" --byte "$byte"
            ! decrypt "$MODEL" "$BATS_TEST_TMPDIR/dec" || false
            off=$(layout "$MODEL" "B[$n]['offset']")
            try_mount "$MODEL" -o key_file="$KEY"
            refused "$(sha "$MODEL")"
            [[ $output == *"$MODEL: block $n at offset $off: "* ]]
            if [ $mode = AES-GCM ]; then
                [[ $output == *"AES-GCM tag mismatch"* ]]
            else
                [[ $output == *"AES-CBC padding is invalid"* ]]
            fi
        done
    done
}

@test "a file cut inside its last block is refused naming that block" {
    P=$BATS_TEST_TMPDIR/multi.ckpt
    gen_ckpt "$P" a:30000 b:7
    for mode in AES-GCM AES-CBC; do
        F=$BATS_TEST_TMPDIR/enc-$mode.ckpt
        encrypt "$mode" "$P" "$F" --block-size 20000
        last=$(($(layout "$F" 'len(B)') - 1))
        off=$(layout "$F" "B[$last]['offset']")
        size=$(stat -c %s "$F")
        # cut in the ciphertext, in the header, and one byte short
        for cut in $(((off + size) / 2)) $((off + 10)) $((size - 1)); do
            MODEL=$BATS_TEST_TMPDIR/cut-$mode-$cut.ckpt
            head -c "$cut" "$F" >"$MODEL"
            ! $ENVELOPE layout "$MODEL" || false
            try_mount "$MODEL" -o key_file="$KEY"
            refused "$(sha "$MODEL")"
            [[ $output == *"$MODEL: block $last at offset $off: "* ]]
            [[ $output == *"past the end of the file"* || $output == *"truncated"* ]]
        done
    done
}

@test "option misuse: a key for a plain file, enc_mode without a key or on ONNX, another mode than the file's" {
    MODEL=$PLAIN
    before=$(sha "$MODEL")
    try_mount "$MODEL" -o key_file="$KEY"
    refused "$before"
    [[ $output == *"not encrypted, but a key was given"* ]]
    CKPTFS_KEY_HEX=$KHEX try_mount "$MODEL"
    refused "$before"
    [[ $output == *"not encrypted, but a key was given"* ]]
    try_mount "$MODEL" -o enc_mode=AES-GCM
    refused "$before"
    MODEL=$BATS_TEST_TMPDIR/tiny.onnx
    cp "$ONNX_FIX/tiny_conv2d.onnx" "$MODEL"
    chmod 644 "$MODEL"
    try_mount "$MODEL" -o key_file="$KEY",enc_mode=AES-GCM
    refused "$(sha "$MODEL")"
    [[ $output == *"$MODEL"* ]]
    for mode in AES-GCM AES-CBC; do
        other=AES-CBC
        [ $mode = AES-CBC ] && other=AES-GCM
        MODEL=$BATS_TEST_TMPDIR/enc-$mode.ckpt
        encrypt "$mode" "$PLAIN" "$MODEL"
        try_mount "$MODEL" -o key_file="$KEY",enc_mode=$other
        refused "$(sha "$MODEL")"
        [[ $output == *"a save keeps the file's mode"* ]]
        # the file's own mode is accepted
        mount_fg "$MODEL" "$M.$mode" -o ro,key_file="$KEY",enc_mode=$mode
        $ORACLE check "$M.$mode" "$PLAIN"
    done
}

# ---------------------------------------------------------------------------
# Saving

@test "an unchanged tree saved: same plaintext, same mode, fresh IVs (GCM and CBC)" {
    P=$BATS_TEST_TMPDIR/lenet.ckpt
    cp "$MS/mindarmour_checkpoint_lenet-10_1875.ckpt" "$P"
    for mode in AES-GCM AES-CBC; do
        F=$BATS_TEST_TMPDIR/enc-$mode.ckpt
        encrypt "$mode" "$P" "$F"
        cp "$F" "$F.old"
        mount_fg "$F" "$M.$mode" -o key_file="$KEY",commit=manual
        rewrite_outs "$M.$mode"
        [ ! -e "$M.$mode/snapshot_done" ]
        touch "$M.$mode/snapshot_done"
        ! cmp -s "$F" "$F.old" || false
        decrypt "$F" "$BATS_TEST_TMPDIR/dec"
        cmp "$BATS_TEST_TMPDIR/dec" "$P"
        [ "$(layout "$F" 'L["mode"]')" = "$mode" ]
        [ "$(layout "$F" 'len(B)')" -eq 1 ]
        [ -z "$(comm -12 <(ivs "$F" | sort) <(ivs "$F.old" | sort))" ]
        $ORACLE check "$M.$mode" "$P"
    done
}

@test "an in-place edit is saved encrypted: the oracle's plaintext has exactly that edit" {
    for mode in AES-GCM AES-CBC; do
        F=$BATS_TEST_TMPDIR/enc-$mode.ckpt
        encrypt "$mode" "$PLAIN" "$F"
        ivs "$F" >"$F.ivs"
        mount_fg "$F" "$M.$mode" -o key_file="$KEY",commit=manual
        printf '\x00\x00\x80\x3f\x00\x00\x00\xc0' |
            dd of="$M.$mode/linear2.weight/out" bs=1 seek=12 conv=notrunc status=none
        touch "$M.$mode/snapshot_done"
        [ "$(layout "$F" 'L["mode"]')" = "$mode" ]
        [ -z "$(comm -12 <(ivs "$F" | sort) <(sort "$F.ivs"))" ]
        decrypt "$F" "$BATS_TEST_TMPDIR/dec-$mode.ckpt"
        expect_edit "$PLAIN" "$BATS_TEST_TMPDIR/dec-$mode.ckpt" linear2.weight 12 0000803f000000c0
        # The plaintext, mounted as a plain model, shows what the mount shows.
        mount_fg "$BATS_TEST_TMPDIR/dec-$mode.ckpt" "$BATS_TEST_TMPDIR/p-$mode" -o ro
        cmp "$BATS_TEST_TMPDIR/p-$mode/linear2.weight/out" "$M.$mode/linear2.weight/out"
        $ORACLE check "$M.$mode" "$BATS_TEST_TMPDIR/dec-$mode.ckpt"
        # The edited bytes are nowhere in clear in the file.
        $PY -c 'import sys
sys.exit(bytes.fromhex(sys.argv[1]) in open(sys.argv[2], "rb").read())' 0000803f000000c0 "$F"
    done
}

@test "a reshape, a new and a deleted tensor in an encrypted model: saved encrypted, read back by the oracle" {
    F=$BATS_TEST_TMPDIR/enc.ckpt
    encrypt AES-GCM "$PLAIN" "$F"
    mount_fg "$F" "$M" -o key_file="$KEY",commit=manual
    $ORACLE meta-of 3,10 kFloat >"$M/linear1.weight/meta"
    mkdir "$M/extra.bias"
    $ORACLE meta-of 3 kFloat >"$M/extra.bias/meta"
    $PY -c 'import numpy as np,sys; np.array([1,2,3],dtype="<f4").tofile(sys.argv[1])' "$M/extra.bias/out"
    rm -r "$M/linear2.bias"
    touch "$M/snapshot_done"
    decrypt "$F" "$BATS_TEST_TMPDIR/dec.ckpt"
    $ORACLE check "$M" "$BATS_TEST_TMPDIR/dec.ckpt"
    $ORACLE parse "$BATS_TEST_TMPDIR/dec.ckpt" | $PY -c 'import json,sys
e = {t["tag"]: t for t in json.load(sys.stdin)}
assert sorted(e) == ["extra.bias", "linear1.bias", "linear1.weight", "linear2.weight"], sorted(e)
assert e["linear1.weight"]["dims"] == [3, 10], e["linear1.weight"]
assert e["extra.bias"]["dims"] == [3], e["extra.bias"]'
    # Mounted again with the key, the saved model is what the oracle read.
    mount_fg "$F" "$M.again" -o ro,key_file="$KEY"
    $ORACLE check "$M.again" "$BATS_TEST_TMPDIR/dec.ckpt"
}

@test "an encrypted single-file MindIR: mounted as the oracle reads its plaintext, an edit saved encrypted" {
    P=$BATS_TEST_TMPDIR/net.mindir
    cp "$MS/mindspore_ori_net.mindir" "$P"
    chmod 644 "$P"
    for mode in AES-GCM AES-CBC; do
        F=$BATS_TEST_TMPDIR/enc-$mode.mindir
        encrypt "$mode" "$P" "$F"
        ivs "$F" >"$F.ivs"
        mount_fg "$F" "$M.$mode" -o key_file="$KEY",commit=manual
        $GRAPH_ORACLE check "$M.$mode" "$P"
        $PY -c 'import numpy as np,sys; np.full(150, 0.25, dtype="<f4").tofile(sys.argv[1])' "$M.$mode/conv1.weight/out"
        touch "$M.$mode/snapshot_done"
        [ "$(layout "$F" 'L["mode"]')" = "$mode" ]
        [ -z "$(comm -12 <(ivs "$F" | sort) <(sort "$F.ivs"))" ]
        decrypt "$F" "$BATS_TEST_TMPDIR/dec-$mode.mindir"
        [ "$($GRAPH_ORACLE values "$BATS_TEST_TMPDIR/dec-$mode.mindir" conv1.weight | sort -u)" = 0.25 ]
        diff <($GRAPH_ORACLE list "$P" | grep -v '^conv1\.weight') \
             <($GRAPH_ORACLE list "$BATS_TEST_TMPDIR/dec-$mode.mindir" | grep -v '^conv1\.weight')
        $GRAPH_ORACLE check "$M.$mode" "$BATS_TEST_TMPDIR/dec-$mode.mindir"
    done
}

@test "-o enc_mode on a plain .ckpt: the first save writes it encrypted, the plaintext byte for byte" {
    for mode in AES-GCM AES-CBC; do
        F=$BATS_TEST_TMPDIR/plain-$mode.ckpt
        cp "$PLAIN" "$F"
        mount_fg "$F" "$M.$mode" -o key_file="$KEY",enc_mode=$mode,commit=manual
        # Unsaved until saved encrypted; the tensors are the plain file's.
        [ ! -e "$M.$mode/snapshot_done" ]
        for d in $(cd "$M.$mode" && ls -d */); do
            $ORACLE parse "$PLAIN" | $PY -c 'import json,sys,hashlib
e = {t["dir"]: t for t in json.load(sys.stdin)}[sys.argv[1]]
assert hashlib.sha256(open(sys.argv[2], "rb").read()).hexdigest() == e["sha256"], sys.argv[1]' \
                "${d%/}" "$M.$mode/$d/out"
        done
        rewrite_outs "$M.$mode"
        touch "$M.$mode/snapshot_done"
        [ "$(layout "$F" 'L["mode"]')" = "$mode" ]
        $ORACLE check "$M.$mode" "$PLAIN"
        $ENVELOPE decrypt --key-hex "$KHEX" --expect-mode "$mode" "$F" "$BATS_TEST_TMPDIR/dec"
        cmp "$BATS_TEST_TMPDIR/dec" "$PLAIN"
        # From now on the file needs the key.
        MODEL=$F
        try_mount "$F" -o ro
        refused "$(sha "$F")"
        mount_fg "$F" "$M.$mode.again" -o ro,key_file="$KEY"
        $ORACLE check "$M.$mode.again" "$PLAIN"
    done
}

# README: "With -o enc_mode, the plain model counts as unsaved: the next
# save (automatic after commit_delay, unless commit=manual) writes it
# encrypted" -- with no edit at all too.
@test "-o enc_mode on a plain .ckpt with no edit: unsaved; touch, unmount or commit_delay encrypts it" {
    for how in touch unmount delay; do
        F=$BATS_TEST_TMPDIR/plain-$how.ckpt
        cp "$PLAIN" "$F"
        if [ $how = delay ]; then
            mount_fg "$F" "$M.$how" -o key_file="$KEY",enc_mode=AES-GCM,commit_delay=0.1
        else
            mount_fg "$F" "$M.$how" -o key_file="$KEY",enc_mode=AES-GCM,commit=manual
        fi
        case $how in
        touch) [ ! -e "$M.$how/snapshot_done" ]
               touch "$M.$how/snapshot_done" ;;
        unmount) unmount "$M.$how" ;;
        delay) for _ in $(seq 1 200); do [ -e "$M.$how/snapshot_done" ] && break; sleep 0.05; done
               [ -e "$M.$how/snapshot_done" ] ;;
        esac
        [ "$(layout "$F" 'L["mode"]')" = AES-GCM ]
        decrypt "$F" "$BATS_TEST_TMPDIR/dec-$how"
        cmp "$BATS_TEST_TMPDIR/dec-$how" "$PLAIN"
    done
}

@test "16, 24 and 32-byte keys (AES-128/192/256), both modes: mount, edit, save, oracle round trip" {
    for k in 0123456789ABCDEF 0123456789ABCDEFghijklmn 0123456789ABCDEFghijklmnopqrstuv; do
        (umask 077 && printf %s "$k" >"$BATS_TEST_TMPDIR/key${#k}")
        for mode in AES-GCM AES-CBC; do
            t=${#k}-$mode
            F=$BATS_TEST_TMPDIR/enc-$t.ckpt
            EKHEX=$(hex_of "$k") encrypt "$mode" "$PLAIN" "$F"
            mount_fg "$F" "$M.$t" -o key_file="$BATS_TEST_TMPDIR/key${#k}",commit=manual
            $ORACLE check "$M.$t" "$PLAIN"
            printf '\x11\x22\x33\x44' | dd of="$M.$t/linear1.bias/out" bs=1 seek=20 conv=notrunc status=none
            touch "$M.$t/snapshot_done"
            [ "$(layout "$F" 'L["mode"]')" = "$mode" ]
            EKHEX=$(hex_of "$k") decrypt "$F" "$BATS_TEST_TMPDIR/dec-$t.ckpt"
            expect_edit "$PLAIN" "$BATS_TEST_TMPDIR/dec-$t.ckpt" linear1.bias 20 11223344
            # Only this key opens it: the 16-byte prefix of a longer key does not.
            if [ ${#k} -gt 16 ]; then
                MODEL=$F
                try_mount "$F" -o key_file="$KEY"
                refused "$(sha "$F")"
            fi
        done
    done
}

@test "edits of an encrypted model never reach the disk in clear (held in memory until the save)" {
    mkdir "$BATS_TEST_TMPDIR/model" "$BATS_TEST_TMPDIR/tmp"
    F=$BATS_TEST_TMPDIR/model/enc.ckpt
    cp "$MS/mindarmour_checkpoint_lenet-10_1875.ckpt" "$PLAIN"
    encrypt AES-GCM "$PLAIN" "$F"
    TMPDIR=$BATS_TEST_TMPDIR/tmp mount_fg "$F" "$M" -o key_file="$KEY",commit=manual
    pid=$(daemon_pid)
    marker=$(head -c 8 /dev/urandom | od -An -vtx1 | tr -d ' \n')
    [ ${#marker} -eq 16 ]
    # One out still open for writing, one written and closed.
    exec {HOLD}<>"$M/fc1.weight/out"
    printf %s "$marker" >&"$HOLD"
    printf %s "$marker" | dd of="$M/conv2.weight/out" bs=1 seek=100 conv=notrunc status=none
    [ ! -e "$M/snapshot_done" ]
    [ "$(head -c 16 "$M/fc1.weight/out")" = "$marker" ]
    # No regular file below the model's directory or TMPDIR holds it ...
    run grep -r -l -F "$marker" "$BATS_TEST_TMPDIR/model" "$BATS_TEST_TMPDIR/tmp"
    [ "$status" -eq 1 ]
    # ... nor any file the daemon holds open (unlinked ones too), except
    # memory files; the edit is in one of those.
    in_memory=0
    for fd in /proc/"$pid"/fd/*; do
        [ -f "$fd" ] || continue
        grep -q -F "$marker" "$fd" || continue
        target=$(readlink "$fd")
        echo "marker in fd $fd -> $target"
        [[ $target == /memfd:* ]]
        in_memory=1
    done
    [ "$in_memory" -eq 1 ]
    exec {HOLD}>&-
    HOLD=
    touch "$M/snapshot_done"
    run grep -r -l -F "$marker" "$BATS_TEST_TMPDIR/model" "$BATS_TEST_TMPDIR/tmp"
    [ "$status" -eq 1 ]
    decrypt "$F" "$BATS_TEST_TMPDIR/dec.ckpt"
    [ "$(grep -c -a -F "$marker" "$BATS_TEST_TMPDIR/dec.ckpt")" -ge 1 ]
    $ORACLE check "$M" "$BATS_TEST_TMPDIR/dec.ckpt"
}

# ---------------------------------------------------------------------------
# Split MindIR: the graph file and each data file encrypted on their own

# split_enc MODE: a split copy of ori_net in model/ (plaintext kept in plain/),
# every file encrypted separately; prints the encrypted graph file's path.
split_enc() {
    local p=$BATS_TEST_TMPDIR/plain e=$BATS_TEST_TMPDIR/model f
    mkdir -p "$p"
    $SPLIT "$MS/mindspore_ori_net.mindir" "$p/net" >&2
    cp -r "$p" "$e"
    for f in $(cd "$e" && find . -type f); do
        encrypt "$1" "$p/$f" "$e/$f"
    done
    echo "$e/net_graph.mindir"
}

# BUG (ckptfs, build/ at a312154): this split model is refused with an empty
# message, "ckptfs:  (offsets in the decrypted content)", while ckptfs-dump
# (and the ASan build of ckptfs) open it.  fuse/main.c leaves its ck_error
# uninitialized, ck_group_recover() clears only msg, and
# ck_model_add_data_file() (codec/core/model.c) treats a non-zero errnum on entry
# as its own failure (gdb: errnum == 1 there).
@test "split MindIR, every file encrypted: mounted as the oracle reads the plain split, an edit saved encrypted" {
    m=$(split_enc AES-GCM)
    p=$BATS_TEST_TMPDIR/plain/net_graph.mindir
    ivs "$BATS_TEST_TMPDIR/model/net_variables/data_0" >"$BATS_TEST_TMPDIR/data_0.ivs"
    mount_fg "$m" "$M" -o key_file="$KEY",commit=manual
    $GRAPH_ORACLE check "$M" "$p"
    $PY -c 'import numpy as np,sys; np.full(150, -1.5, dtype="<f4").tofile(sys.argv[1])' "$M/conv1.weight/out"
    touch "$M/snapshot_done"
    # Every file is still encrypted, and decrypts.
    mkdir -p "$BATS_TEST_TMPDIR/dec/net_variables"
    for f in $(cd "$BATS_TEST_TMPDIR/plain" && find . -type f); do
        [ "$(layout "$BATS_TEST_TMPDIR/model/$f" 'L["mode"]')" = AES-GCM ]
        decrypt "$BATS_TEST_TMPDIR/model/$f" "$BATS_TEST_TMPDIR/dec/$f"
    done
    [ -z "$(ls -A "$BATS_TEST_TMPDIR/model" | grep '^\.' | grep -v '\.ckptfs-lock$')" ]
    # data_0 was written again, with fresh IVs.
    [ -z "$(comm -12 <(ivs "$BATS_TEST_TMPDIR/model/net_variables/data_0" | sort) \
                     <(sort "$BATS_TEST_TMPDIR/data_0.ivs"))" ]
    cmp "$BATS_TEST_TMPDIR/dec/net_graph.mindir" "$p"
    [ "$($GRAPH_ORACLE values "$BATS_TEST_TMPDIR/dec/net_graph.mindir" conv1.weight | sort -u)" = -1.5 ]
    [ "$($GRAPH_ORACLE values "$BATS_TEST_TMPDIR/dec/net_graph.mindir" conv2.weight)" = \
      "$($GRAPH_ORACLE values "$p" conv2.weight)" ]
    $GRAPH_ORACLE check "$M" "$BATS_TEST_TMPDIR/dec/net_graph.mindir"
}

@test "split MindIR: a data file left in clear beside an encrypted graph is refused" {
    m=$(split_enc AES-GCM)
    cp "$BATS_TEST_TMPDIR/plain/net_variables/data_0" "$BATS_TEST_TMPDIR/model/net_variables/data_0"
    MODEL=$m
    before=$(cat "$m" "$BATS_TEST_TMPDIR/model/net_variables/data_0" | sha256sum)
    try_mount "$m" -o key_file="$KEY"
    [ "$status" -ne 0 ]
    ! mountpoint -q "$M" || false
    [[ $output == *"net_variables/data_0: not encrypted, but its model"* ]]
    [ "$(cat "$m" "$BATS_TEST_TMPDIR/model/net_variables/data_0" | sha256sum)" = "$before" ]
}

# ---------------------------------------------------------------------------
# Over 64 MiB: several MindSpore blocks

# big_round_trip MODE: a ~72 MiB checkpoint encrypted by the oracle in MODE
# (two blocks, cut at 64 MiB of plaintext), read through the mount, edited
# across the cut, saved, and checked with the oracle.
big_round_trip() {
    local mode=$1 P=$BATS_TEST_TMPDIR/big.ckpt F=$BATS_TEST_TMPDIR/big-enc.ckpt
    gen_ckpt "$P" w0:10000000 w1:8000000 w2:256
    encrypt "$mode" "$P" "$F"
    ivs "$F" >"$F.ivs"
    [ "$(layout "$F" 'len(B)')" -eq 2 ]
    mount_fg "$F" "$M" -o key_file="$KEY",commit=manual
    $ORACLE check "$M" "$P"
    straddle_check "$M" "$P" 70000 $MIB64 $((MIB64 - 4096)) $((MIB64 + 1))
    # 16 bytes across the cut, in the tensor that holds plaintext offset 64 MiB.
    read -r t off _ < <(awk -v c=$MIB64 '$2 < c && c < $2 + $3' "$P.offsets")
    [ "$t" = w1 ]
    printf 'ACROSS-THE-CUT!!' | dd of="$M/$t/out" bs=1 seek=$((MIB64 - 8 - off)) conv=notrunc status=none
    cp "$P" "$BATS_TEST_TMPDIR/expected"
    printf 'ACROSS-THE-CUT!!' | dd of="$BATS_TEST_TMPDIR/expected" bs=1 seek=$((MIB64 - 8)) conv=notrunc status=none
    touch "$M/snapshot_done"
    decrypt "$F" "$BATS_TEST_TMPDIR/dec"
    cmp "$BATS_TEST_TMPDIR/dec" "$BATS_TEST_TMPDIR/expected"
    size=$(stat -c %s "$P")
    [ "$(layout "$F" 'L["mode"]')" = "$mode" ]
    [ "$(layout "$F" 'len(B)')" -eq 2 ]
    if [ "$mode" = AES-GCM ]; then
        [ "$(layout "$F" 'B[0]["cipher_len"]')" -eq $MIB64 ]
        [ "$(layout "$F" 'B[1]["cipher_len"]')" -eq $((size - MIB64)) ]
    else
        [ "$(layout "$F" 'B[0]["cipher_len"]')" -eq $((MIB64 + 16)) ]
        [ "$(layout "$F" 'B[1]["cipher_len"]')" -eq $(((size - MIB64) / 16 * 16 + 16)) ]
    fi
    [ -z "$(comm -12 <(ivs "$F" | sort) <(sort "$F.ivs"))" ]
    [ "$(ivs "$F" | sort -u | wc -l)" -eq 2 ]
    ! grep -q -F 'ACROSS-THE-CUT!!' "$F" || false
    $ORACLE check "$M" "$BATS_TEST_TMPDIR/dec"
}

@test "over 64 MiB, AES-GCM: reads across the 64 MiB block cut, an edit across it re-encrypted into 2 blocks" {
    big_round_trip AES-GCM
}

@test "over 64 MiB, AES-CBC: reads across the 64 MiB block cut, an edit across it re-encrypted into 2 blocks" {
    big_round_trip AES-CBC
}

@test "-o enc_mode on a plain .ckpt over 64 MiB: saved as 64 MiB blocks the oracle decrypts to the original" {
    P=$BATS_TEST_TMPDIR/big.ckpt
    F=$BATS_TEST_TMPDIR/big-work.ckpt
    gen_ckpt "$P" w0:9000000 w1:9000000
    cp "$P" "$F"
    mount_fg "$F" "$M" -o key_file="$KEY",enc_mode=AES-CBC,commit=manual
    rewrite_outs "$M"
    touch "$M/snapshot_done"
    [ "$(layout "$F" 'L["mode"]')" = AES-CBC ]
    [ "$(layout "$F" '[b["cipher_len"] for b in B][:-1]')" = "[$((MIB64 + 16))]" ]
    decrypt "$F" "$BATS_TEST_TMPDIR/dec"
    cmp "$BATS_TEST_TMPDIR/dec" "$P"
}
