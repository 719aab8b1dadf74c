#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# A Hugging Face model folder (config.json beside model.safetensors,
# model.safetensors.index.json or pytorch_model.bin, as save_pretrained
# writes it) is the one model file transformers' from_pretrained would load
# from it: ckptfs-stat, -dump, -diff, -convert and the mount given the
# folder do what they do given that file.  The folders are made here from
# a real fixture (torchtune's gemma_hf_checkpoint.safetensors); what the
# file itself gives is the reference, and a converted set is read back by
# hand in Python (json and struct, no safetensors package), the .bin by
# torch.

load helpers

GEMMA=$FIXTURES/safetensors/torchtune/gemma_hf_checkpoint.safetensors

teardown() {
    ckptfs_teardown
    mountpoint -q "$BATS_TEST_TMPDIR/small" && umount "$BATS_TEST_TMPDIR/small"
    return 0
}

setup() {
    T=$BATS_TEST_TMPDIR
    F=$T/gemma
    mkdir "$F"
    cp "$GEMMA" "$F/model.safetensors"
    chmod u+w "$F/model.safetensors"
    # only looked for, never read: a real one's first keys
    printf '{"architectures": ["GemmaForCausalLM"], "model_type": "gemma"}\n' >"$F/config.json"
}

# sharded DIR: DIR a folder of the gemma model cut into shards of at most
# 8KB (model.safetensors.index.json and model-0000N-of-0000M.safetensors)
sharded() {
    mkdir -p "$1"
    "$BUILD/ckptfs-convert" -q -o max_shard_size=8KB "$GEMMA" "$1/model.safetensors.index.json"
    printf '{"model_type": "gemma"}\n' >"$1/config.json"
}

# same_output CMD... -- A B: CMD A and CMD B both succeed and print the same
same_output() {
    local cmd=() a b
    while [ "$1" != -- ]; do cmd+=("$1"); shift; done
    a=$2 b=$3
    run "${cmd[@]}" "$a"
    echo "$a: $output"
    [ "$status" -eq 0 ]
    local first=$output
    run "${cmd[@]}" "$b"
    [ "$status" -eq 0 ]
    [ "$output" = "$first" ]
}

@test "the folder's model.safetensors: stat, dump (--json too) and diff give what the file gives; the dump names the file chosen" {
    same_output "$BUILD/ckptfs-stat" -- "$F" "$F/model.safetensors"
    same_output "$BUILD/ckptfs-stat" --json --hist=8 -- "$F" "$F/model.safetensors"
    same_output "$BUILD/ckptfs-dump" -- "$F" "$F/model.safetensors"
    same_output "$BUILD/ckptfs-dump" --json -- "$F" "$F/model.safetensors"
    run "$BUILD/ckptfs-dump" "$F"
    [ "${lines[0]}" = "# $F/model.safetensors: format safetensors, 11 tensors (11 records), index memory 2204 bytes" ]
    run "$BUILD/ckptfs-diff" "$F" "$GEMMA"
    echo "$output"
    [ "$status" -eq 0 ]
    [ "$output" = identical ]
    run "$BUILD/ckptfs-diff" "$GEMMA" "$F/"
    [ "$status" -eq 0 ]
    [ "$output" = identical ]
}

@test "the folder converts as its file does: the same bytes out" {
    "$BUILD/ckptfs-convert" -q "$F" "$T/a.ckpt"
    "$BUILD/ckptfs-convert" -q "$F/model.safetensors" "$T/b.ckpt"
    cmp "$T/a.ckpt" "$T/b.ckpt"
    "$BUILD/ckptfs-convert" -q "$F" "$T/a.safetensors"
    cmp "$T/a.safetensors" "$GEMMA"
}

@test "the folder mounts as its file: the same tree, writable as the file is, a write saved into model.safetensors" {
    mount_fg "$F" "$T/m"
    mount_fg "$GEMMA" "$T/ref" -o ro
    diff -r "$T/m" "$T/ref"
    grep -qF "$F/model.safetensors $T/m fuse.ckptfs rw," /proc/mounts
    [ ! -e "$T/m/latest" ] && [ ! -e "$T/m/model" ]
    # the first two bytes of a tensor, through the folder's mount
    t=model.layers.0.input_layernorm.weight
    printf '\x00\x3c' | dd of="$T/m/$t/out" bs=1 count=2 conv=notrunc status=none
    unmount "$T/m"
    run $PY -c '
import json, struct, sys
f = open(sys.argv[1], "rb")
n = struct.unpack("<Q", f.read(8))[0]
h = json.loads(f.read(n))
f.seek(8 + n + h[sys.argv[2]]["data_offsets"][0])
print(f.read(2).hex())' "$F/model.safetensors" "$t"
    echo "$output"
    [ "$output" = 003c ]
    # the fixture's own bytes there were not those
    run $PY -c '
import json, struct, sys
f = open(sys.argv[1], "rb")
n = struct.unpack("<Q", f.read(8))[0]
h = json.loads(f.read(n))
f.seek(8 + n + h[sys.argv[2]]["data_offsets"][0])
print(f.read(2).hex())' "$GEMMA" "$t"
    [ "$output" != 003c ]
}

@test "a read-only model.safetensors mounts read-only through its folder, as the file does" {
    chmod a-w "$F/model.safetensors"
    mount_fg "$F" "$T/m"
    grep -qF "$F/model.safetensors $T/m fuse.ckptfs ro," /proc/mounts
}

@test "a sharded folder (model.safetensors.index.json): stat, dump, diff, convert and the mount as the index's" {
    S=$T/sharded
    sharded "$S"
    [ "$(ls "$S"/model-*-of-*.safetensors | wc -l)" -gt 1 ]
    same_output "$BUILD/ckptfs-stat" -- "$S" "$S/model.safetensors.index.json"
    same_output "$BUILD/ckptfs-dump" -- "$S" "$S/model.safetensors.index.json"
    run "$BUILD/ckptfs-dump" "$S"
    [[ "${lines[0]}" == "# $S/model.safetensors.index.json: format safetensors-set, 11 tensors"* ]]
    run "$BUILD/ckptfs-diff" "$S" "$F"
    echo "$output"
    [ "$status" -eq 0 ]
    [ "$output" = identical ]
    "$BUILD/ckptfs-convert" -q "$S" "$T/s.safetensors"
    cmp "$T/s.safetensors" "$GEMMA"
    mount_fg "$S" "$T/m" -o ro
    mount_fg "$S/model.safetensors.index.json" "$T/ref" -o ro
    diff -r "$T/m" "$T/ref"
    grep -qF "$S/model.safetensors.index.json $T/m fuse.ckptfs ro," /proc/mounts
}

@test "a folder's pytorch_model.bin: the model torch loads from it, named in messages" {
    P=$T/pt
    mkdir "$P"
    "$BUILD/ckptfs-convert" -q "$GEMMA" "$P/pytorch_model.bin"
    printf '{"model_type": "gemma"}\n' >"$P/config.json"
    same_output "$BUILD/ckptfs-dump" -- "$P" "$P/pytorch_model.bin"
    run "$BUILD/ckptfs-dump" "$P"
    [[ "${lines[0]}" == "# $P/pytorch_model.bin: format pytorch, 11 tensors"* ]]
    # torch's names, dtypes (torch.float32 printed float32) and shapes are the dump's
    $PY -c '
import sys, torch
sd = torch.load(sys.argv[1], map_location="cpu")
for k, v in sd.items():
    print("%s\t%s\t[%s]" % (k, str(v.dtype).removeprefix("torch."), ",".join(map(str, v.shape))))' "$P/pytorch_model.bin" | sort >"$T/torch"
    "$BUILD/ckptfs-dump" "$P" | grep -v "^#" | cut -f1-3 | sort >"$T/dump"
    diff "$T/torch" "$T/dump"
    [ "$(wc -l <"$T/dump")" -eq 11 ]
    run "$BUILD/ckptfs-diff" "$P" "$F"
    [ "$status" -eq 0 ]
    [ "$output" = identical ]
}

@test "from_pretrained's order: model.safetensors before the index, either before pytorch_model.bin" {
    "$BUILD/ckptfs-convert" -q -o max_shard_size=8KB "$GEMMA" "$F/model.safetensors.index.json"
    "$BUILD/ckptfs-convert" -q "$GEMMA" "$F/pytorch_model.bin"
    run "$BUILD/ckptfs-dump" "$F"
    [[ "${lines[0]}" == "# $F/model.safetensors: "* ]]
    rm "$F/model.safetensors"
    run "$BUILD/ckptfs-dump" "$F"
    [[ "${lines[0]}" == "# $F/model.safetensors.index.json: "* ]]
    rm "$F"/model*
    run "$BUILD/ckptfs-dump" "$F"
    [[ "${lines[0]}" == "# $F/pytorch_model.bin: "* ]]
}

@test "without config.json, or with it but no model file of those names, a folder is a run directory as before; config.json makes the first one the model" {
    D=$T/run
    mkdir "$D"
    cp "$GEMMA" "$D/model.safetensors"
    run "$BUILD/ckptfs-stat" "$D"
    echo "$output"
    [ "$status" -eq 1 ]
    [[ "$output" == "ckptfs-stat: $D: is a training run's directory of 1 checkpoint; name one, as $D/latest (model) or $D/NAME (ckptfs-dump $D lists them)" ]]
    run "$BUILD/ckptfs-dump" "$D"
    [ "$status" -eq 0 ]
    [[ "${lines[0]}" == "# $D: run directory, 1 checkpoint"* ]]
    mount_fg "$D" "$T/m" -o ro
    [ -d "$T/m/model" ] && [ -L "$T/m/latest" ]
    unmount "$T/m"
    # config.json beside a file of another name: still a run
    mv "$D/model.safetensors" "$D/gemma.safetensors"
    printf '{}\n' >"$D/config.json"
    run "$BUILD/ckptfs-dump" "$D"
    [[ "${lines[0]}" == "# $D: run directory, 1 checkpoint"* ]]
    run "$BUILD/ckptfs-diff" "$D" "$GEMMA"
    [ "$status" -ne 0 ]
    [[ "$output" == *"$D: is a training run's directory of 1 checkpoint; "* ]]
    # a config.json that is a directory is none
    mv "$D/gemma.safetensors" "$D/model.safetensors"
    rm "$D/config.json"
    mkdir "$D/config.json"
    run "$BUILD/ckptfs-dump" "$D"
    [[ "${lines[0]}" == "# $D: run directory, 1 checkpoint"* ]]
    # and a real one makes it the model
    rmdir "$D/config.json"
    printf '{}\n' >"$D/config.json"
    run "$BUILD/ckptfs-dump" "$D"
    [[ "${lines[0]}" == "# $D/model.safetensors: format safetensors"* ]]
}

@test "convert to a new directory's model.safetensors.index.json creates the directory; the index and shards, read by hand, hold the model" {
    out=$T/new/model.safetensors.index.json
    [ ! -e "$T/new" ]
    "$BUILD/ckptfs-convert" -q -o max_shard_size=8KB "$F" "$out"
    [ -d "$T/new" ]
    [ "$(stat -c %a "$T/new")" = "$(printf '%o' $((0777 & ~$(umask))))" ]
    $PY - "$out" "$GEMMA" <<'EOF'
import json, os, struct, sys
out, ref = sys.argv[1], sys.argv[2]
def read(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
        h.pop("__metadata__", None)
        base = 8 + n
        t = {}
        for k, v in h.items():
            a, b = v["data_offsets"]
            f.seek(base + a)
            t[k] = (v["dtype"], v["shape"], f.read(b - a))
        return t
want = read(ref)
idx = json.load(open(out))
wm = idx["weight_map"]
assert set(wm) == set(want), (sorted(wm), sorted(want))
got, total = {}, 0
d = os.path.dirname(out)
shards = sorted(set(wm.values()))
assert len(shards) > 1, shards
for s in shards:
    t = read(os.path.join(d, s))
    assert all(wm[k] == s for k in t), s
    got.update(t)
    total += sum(len(v[2]) for v in t.values())
assert got == want
assert idx["metadata"]["total_size"] == total, (idx["metadata"], total)
print(len(shards), "shards", len(got), "tensors")
EOF
    # and the new folder, with a config.json, is the model again
    printf '{}\n' >"$T/new/config.json"
    run "$BUILD/ckptfs-diff" "$T/new" "$F"
    [ "$status" -eq 0 ]
    [ "$output" = identical ]
}

@test "convert to a set in a missing directory makes one level, not more; a file OUT's missing directory is not made" {
    run "$BUILD/ckptfs-convert" -q "$F" "$T/a/b/model.safetensors.index.json"
    echo "$output"
    [ "$status" -eq 1 ]
    [[ "$output" == "ckptfs-convert: $T/a/b/model.safetensors.index.json: cannot create its directory $T/a/b: "* ]]
    [ ! -e "$T/a" ]
    # a file OUT's missing directory is not made
    run "$BUILD/ckptfs-convert" -q "$F" "$T/c/model.safetensors"
    [ "$status" -eq 1 ]
    [ ! -e "$T/c" ]
}

@test "a Hub cache snapshot (snapshots/REV/ of links into blobs/) is a model folder too" {
    C=$T/hub/models--google--gemma
    mkdir -p "$C/blobs" "$C/snapshots/rev"
    cp "$GEMMA" "$C/blobs/1"
    printf '{}\n' >"$C/blobs/2"
    ln -s ../../blobs/1 "$C/snapshots/rev/model.safetensors"
    ln -s ../../blobs/2 "$C/snapshots/rev/config.json"
    run "$BUILD/ckptfs-dump" "$C/snapshots/rev"
    [ "$status" -eq 0 ]
    [[ "${lines[0]}" == "# $C/snapshots/rev/model.safetensors: format safetensors, 11 tensors"* ]]
    run "$BUILD/ckptfs-diff" "$C/snapshots/rev" "$GEMMA"
    [ "$status" -eq 0 ]
    [ "$output" = identical ]
}

@test "a folder's broken model file is refused as the file is, the message naming the folder and the file chosen; nothing mounted" {
    head -c 500 "$GEMMA" >"$F/model.safetensors"
    want="$F/model.safetensors: offset 0: a header of 1096 bytes runs past the end of the file (500 bytes)"
    run "$BUILD/ckptfs-stat" "$F"
    [ "$status" -eq 1 ]
    [ "$output" = "ckptfs-stat: $want" ]
    run "$BUILD/ckptfs-dump" "$F"
    [ "$status" -eq 1 ]
    [ "$output" = "ckptfs-dump: $want" ]
    M=$T/m
    mount_refused "$F"
    [ "$(cat "$T/err")" = "ckptfs: $want" ]
}

@test "a set's directory that convert made is removed again when nothing is written (ENOSPC)" {
    [ "$(id -u)" = 0 ] || skip "mounting a tmpfs needs root"
    S=$T/small
    mkdir "$S"
    mount -t tmpfs -o size=64k tmpfs "$S"
    run "$BUILD/ckptfs-convert" -q "$F" "$S/new/model.safetensors.index.json"
    echo "$output"
    [ "$status" -eq 1 ]
    [[ "$output" == *"No space left on device"* ]]
    [ -z "$(ls -A "$S")" ]
}
