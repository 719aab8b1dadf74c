#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# ckptfs-convert: every fixture to .ckpt, .safetensors and a OneFlow
# snapshot directory and back, each output read by an independent oracle
# (tests/oracle/convert_oracle.py: ckpt_oracle's protobuf runtime,
# safetensors_oracle's json + numpy, graph_oracle's python3-onnx, a OneFlow
# reader of its own with text_format + numpy) and compared with the same
# oracles' reading of IN; encrypted output decrypted by envelope_oracle,
# compressed output by zstd(1); the refusals, -f, kill -9, a read-only and
# a full filesystem, the progress bar on a terminal.

load helpers

CONVERT=$BUILD/ckptfs-convert
DIFF=$BUILD/ckptfs-diff
CMP="$PY $REPO/tests/oracle/convert_oracle.py compare"
ENVELOPE="$PY $REPO/tests/oracle/envelope_oracle.py"
DIST="$PY $REPO/tests/oracle/dist_oracle.py"
ITER="$PY $REPO/tests/oracle/iteration_oracle.py"
# The fixtures' encrypted MindIR files name their key: "0123456789ABCDEF".
FIXTURE_KEY=30313233343536373839414243444546

setup() {
    T=$BATS_TEST_TMPDIR
}

teardown() {
    ckptfs_teardown
    for d in "$T/small" "$T/ro"; do
        mountpoint -q "$d" && umount "$d"
    done
    return 0
}

# nothing_left DIR: no file of a convert is left in DIR (OUT's writer lock
# aside, which a clean exit removes too).
nothing_left() {
    [ -z "$(ls -A "$1" | grep -- '\.ckptfs-')" ] || { ls -la "$1"; false; }
}

# each_way IN [OPTIONS...]: IN converted to .ckpt, .safetensors and a OneFlow
# snapshot, each equal to IN by the oracles (or refused, for a type or name
# the target cannot hold, in one line naming IN and the tensor, nothing
# written).  $T/made: how many conversions were made.
each_way() {
    local in=$1 ref=$1 o out outs=()
    shift
    [ -n "${REF:-}" ] && ref=$REF
    rm -rf "$T/out" && mkdir "$T/out"
    for o in x.ckpt x.safetensors snap; do
        out=$T/out/$o/$o
        mkdir "$T/out/$o"
        if [ $o = snap ]; then
            run "$CONVERT" "$@" --to oneflow "$in" "$out"
        else
            run "$CONVERT" "$@" "$in" "$out"
        fi
        if [ "$status" -ne 0 ]; then
            echo "$in -> $o: $output" >&2
            [ "$status" -eq 1 ] && [ "${#lines[@]}" -eq 1 ]
            [[ $output == *"$in: tensor '"*"cannot hold"* || $output == *"$in: has no tensors"* ]]
            [ -z "$(ls -A "$T/out/$o")" ]
            continue
        fi
        [ -z "$output" ]
        nothing_left "$T/out/$o"
        outs+=("$out")
    done
    [ ${#outs[@]} -eq 0 ] || $CMP "$ref" "${outs[@]}"
    echo ${#outs[@]} >"$T/made"
}

@test "every .ckpt and MindIR fixture to .ckpt, .safetensors and a OneFlow snapshot: as IN" {
    total=0
    for f in "$MS"/*.ckpt "$MS"/*.mindir "$FIXTURES"/mindspore_misc/*.ckpt; do
        case $f in *EMPTY*|*strategy*) continue ;; esac
        opts=() REF=
        if [[ $f == *encrpty_key* ]]; then
            # The oracle reads the plaintext envelope_oracle decrypts.
            $ENVELOPE decrypt --key-hex $FIXTURE_KEY "$f" "$T/plain.mindir"
            REF=$T/plain.mindir
            export CKPTFS_KEY_HEX=$FIXTURE_KEY
        fi
        echo "== $f"
        each_way "$f"
        unset CKPTFS_KEY_HEX
        total=$((total + $(cat "$T/made")))
    done
    [ "$total" -ge 25 ]
}

@test "every safetensors and ONNX fixture to .ckpt, .safetensors and a snapshot: as IN" {
    total=0
    while read -r f; do
        echo "== $f"
        each_way "$f"
        total=$((total + $(cat "$T/made")))
    done < <(find "$FIXTURES/safetensors" "$FIXTURES/onnx" -name '*.safetensors' -o \
                  -name '*.onnx' ! -name 'fp16_dangling_external.onnx' | sort)
    [ "$total" -ge 60 ]
}

@test "OneFlow snapshots as IN (legacy, graph save, pickled; generated pickles): each way" {
    OF=$FIXTURES/oneflow
    for f in "$OF"/legacy_v2_java_mlp_adam "$OF"/graph_save_affine_with_parameter \
             "$OF"/new_pickled_3x3_i3o3_conv2d_params; do
        echo "== $f"
        each_way "$f"
        [ "$(cat "$T/made")" -eq 3 ]
    done
    # The pickle's names, in its order, not tensor_5 and tensor_6.
    run "$PY" "$REPO/tests/oracle/convert_oracle.py" list "$T/out/x.ckpt/x.ckpt"
    [ "${lines[0]%%$'\t'*}" = weight ] && [ "${lines[1]%%$'\t'*}" = bias ]
    # Python's own pickler, protocols 2 and 5: names with dots, '/', unicode, '%'.
    for p in 2 5; do
        rm -rf "$T/gen" && "$PY" "$REPO/tests/oracle/oneflow_oracle.py" gen "$T/gen" \
            --case pickled --protocol $p --seed $p
        each_way "$T/gen"
        [ "$(cat "$T/made")" -ge 2 ]
    done
    # out without meta: refused, naming the entry, nothing written.
    run "$CONVERT" "$OF/legacy_outonly_onnx_models_tmp" "$T/none.ckpt"
    [ "$status" -eq 1 ] && [ "${#lines[@]}" -eq 1 ]
    [[ $output == *"legacy_outonly_onnx_models_tmp/"*"without \`meta\`"* ]]
    [ ! -e "$T/none.ckpt" ]
}

@test "and back: ckpt -> safetensors -> ckpt -> OneFlow -> (a create mount) ckpt, identical" {
    for f in "$MS/mindarmour_checkpoint_lenet-10_1875.ckpt" \
             "$FIXTURES/mindspore_misc/mindformers_golden_router.ckpt"; do
        rm -rf "$T/w" && mkdir "$T/w"
        "$CONVERT" "$f" "$T/w/a.safetensors"
        "$CONVERT" "$T/w/a.safetensors" "$T/w/b.ckpt"
        "$CONVERT" "$T/w/b.ckpt" "$T/w/snap/"
        $CMP "$f" "$T/w/a.safetensors" "$T/w/b.ckpt" "$T/w/snap"
        run "$DIFF" "$f" "$T/w/a.safetensors"
        [ "$status" -eq 0 ] && [ "$output" = identical ] || false
        run "$DIFF" "$f" "$T/w/b.ckpt"
        [ "$status" -eq 0 ] && [ "$output" = identical ] || false
        # The snapshot is what the mount shows: copied into a new model as
        # the guide says.  (GNU cp copies a directory's entries in inode
        # order, which often puts snapshot_done and pickled_data before the
        # tensors: that snapshot_done is the copy's own, and its save waits.)
        mount_fg "$T/w/c.ckpt" "$T/m" -o create
        cp -r "$T/w/snap/." "$T/m/"
        touch "$T/m/snapshot_done"
        unmount "$T/m"
        $CMP "$f" "$T/w/c.ckpt"
    done
    # From safetensors and ONNX to a .ckpt and back to safetensors.
    for f in "$FIXTURES/safetensors/burn/mnist.safetensors" "$FIXTURES/onnx/tiny_conv2d.onnx"; do
        rm -rf "$T/w" && mkdir "$T/w"
        "$CONVERT" "$f" "$T/w/a.ckpt"
        "$CONVERT" "$T/w/a.ckpt" "$T/w/b.safetensors"
        "$CONVERT" "$T/w/b.safetensors" "$T/w/snap/"
        $CMP "$f" "$T/w/a.ckpt" "$T/w/b.safetensors" "$T/w/snap"
        run "$DIFF" "$f" "$T/w/b.safetensors"
        [ "$status" -eq 0 ] && [ "$output" = identical ] || false
    done
    # The names a OneFlow directory cannot spell as they are: escaped as the
    # mount escapes them (/, %, a leading dot, snapshot_done, NUL, hashed
    # long names), and back.
    $PY "$REPO/tests/oracle/ckpt_oracle.py" gen "$T/names.ckpt" --case names --seed 2
    "$CONVERT" "$T/names.ckpt" "$T/names/"
    $CMP "$T/names.ckpt" "$T/names"
    [ -d "$T/names/a%2Fb%2Fc" ] && [ -d "$T/names/%73napshot_done" ] || false
    "$CONVERT" "$T/names.ckpt" "$T/names2.ckpt"
    $CMP "$T/names.ckpt" "$T/names2.ckpt"
}

@test "a distributed checkpoint (-o strategy), an iteration directory, a sharded set: the whole" {
    for c in tp2:2 tp4x2:4; do
        n=${c#*:} c=${c%:*}
        $DIST gen "$T/$c" --ranks "$n" --case $c --seed 5
        for o in x.ckpt x.safetensors snap/; do
            "$CONVERT" -o strategy="$T/$c/strategy.ckpt" "$T/$c/dist" "$T/$c/$o"
            $CMP "$T/$c/full.ckpt" "$T/$c/${o%/}"
        done
        run "$DIFF" "$T/$c/full.ckpt" "$T/$c/x.safetensors"
        [ "$output" = identical ]
    done
    $ITER gen "$T/g" --case random --seed 7
    for o in x.ckpt x.safetensors; do
        "$CONVERT" "$T/g/iteration_00000010" "$T/g/$o"
        $CMP "$T/g/full.safetensors" "$T/g/$o"
    done
    # Its bf16 tensors have no OneFlow snapshot to go to.
    run "$CONVERT" "$T/g/iteration_00000010" "$T/g/snap/"
    [ "$status" -eq 1 ] && [[ $output == *"tensor '"*"kBFloat16"* ]] || false
    # A sharded safetensors set, by its index.
    mkdir "$T/set"
    $PY "$REPO/tests/oracle/safetensors_oracle.py" gen-set "$T/set" --shards 3 --count 7 --seed 4
    for o in x.ckpt x.safetensors; do
        "$CONVERT" "$T/set/model.safetensors.index.json" "$T/$o"
    done
    $CMP "$T/set/model.safetensors.index.json" "$T/x.ckpt" "$T/x.safetensors"
}

@test "encrypted and compressed OUT: envelope_oracle decrypts, zstd -d decompresses, to IN" {
    f=$MS/mindarmour_checkpoint_lenet-10_1875.ckpt
    KEY=$T/key
    (umask 077 && printf '0123456789ABCDEF' >"$KEY")
    for mode in AES-GCM AES-CBC; do
        "$CONVERT" -o enc_mode=$mode -o key_file="$KEY" "$f" "$T/$mode.ckpt"
        $ENVELOPE decrypt --key-hex $FIXTURE_KEY --expect-mode $mode "$T/$mode.ckpt" \
            "$T/$mode.plain.ckpt"
        $CMP "$f" "$T/$mode.plain.ckpt"
        # And an encrypted IN back to a plain OUT, with the same key.
        CKPTFS_KEY_HEX=$FIXTURE_KEY "$CONVERT" "$T/$mode.ckpt" "$T/$mode.back.safetensors"
        $CMP "$f" "$T/$mode.back.safetensors"
        # One key from the environment serves an encrypted IN and OUT alike.
        CKPTFS_KEY_HEX=$FIXTURE_KEY "$CONVERT" -o enc_mode=$mode "$T/$mode.ckpt" "$T/$mode.again.ckpt"
        $ENVELOPE decrypt --key-hex $FIXTURE_KEY --expect-mode $mode "$T/$mode.again.ckpt" \
            "$T/$mode.again.plain.ckpt"
        $CMP "$f" "$T/$mode.again.plain.ckpt"
    done
    for o in x.ckpt.zst x.safetensors.zst; do
        "$CONVERT" -o zstd_level=5 "$f" "$T/$o"
        zstd -q -d "$T/$o" -o "$T/${o%.zst}"
        $CMP "$f" "$T/${o%.zst}"
        "$CONVERT" "$T/$o" "$T/$o.snap/"
        $CMP "$f" "$T/$o.snap"
    done
    # Without a key, enc_mode is refused before anything is written.
    run env -u CKPTFS_KEY_HEX "$CONVERT" -o enc_mode=AES-GCM "$f" "$T/nokey.ckpt"
    [ "$status" -eq 1 ] && [[ $output == *"needs a key"* ]] || false
    [ ! -e "$T/nokey.ckpt" ]
}

# A checkpoint with a str value and a bf16 tensor beside a plain one.
str_bf16_ckpt() {
    $PY -c '
import sys
sys.path.insert(0, sys.argv[1])
import ckpt_oracle as co
co.write_file(sys.argv[2], [co.record(co.tensor_value(b"w", "Float32", [2], bytes(8))),
                            co.record(co.tensor_value(b"half", "BFloat16", [3], bytes(6))),
                            co.record(co.str_value(b"info.name", "lenet"))])
' "$REPO/tests/oracle" "$1"
}

@test "refused before anything is written, naming the tensor: str, bf16, map parts, clashes" {
    str_bf16_ckpt "$T/s.ckpt"
    mkdir "$T/o"
    run "$CONVERT" "$T/s.ckpt" "$T/o/x.safetensors"
    [ "$status" -eq 1 ] && [ "${#lines[@]}" -eq 1 ]
    [[ $output == *"$T/s.ckpt: tensor 'info.name': safetensors cannot hold it: a str value"* ]]
    run "$CONVERT" "$T/s.ckpt" "$T/o/snap/"
    [ "$status" -eq 1 ] && [ "${#lines[@]}" -eq 1 ]
    [[ $output == *"tensor 'half': a OneFlow snapshot cannot hold it"*"kBFloat16 since 0.5.0"* ]]
    [[ $output == *"no release (0.5 to 1.0) loads it"* ]]
    [ -z "$(ls -A "$T/o")" ]
    # A .ckpt holds them all.
    "$CONVERT" "$T/s.ckpt" "$T/o/x.ckpt"
    $CMP "$T/s.ckpt" "$T/o/x.ckpt"
    rm "$T/o/x.ckpt"
    # Unsigned types wider than a byte: no OneFlow release loads them.
    run "$CONVERT" "$FIXTURES/safetensors/hf-safetensors-samples/H.safetensors" "$T/o/h/"
    [ "$status" -eq 1 ] && [[ $output == *"tensor 'H'"*kUInt16* ]] || false
    # A type safetensors has no dtype for.
    $PY "$REPO/tests/oracle/ckpt_oracle.py" gen "$T/all.ckpt" --case alltypes --seed 1
    run "$CONVERT" "$T/all.ckpt" "$T/o/x.safetensors"
    [ "$status" -eq 1 ] && [[ $output == *"tensor 't.complex128'"*": type complex128 has no safetensors dtype" ]] || false
    # A map parameter's parts.
    $PY "$REPO/tests/oracle/ckpt_oracle.py" gen "$T/map.ckpt" --case maptensor --seed 1
    for o in x.ckpt x.safetensors snap/; do
        run "$CONVERT" "$T/map.ckpt" "$T/o/$o"
        [ "$status" -eq 1 ] && [[ $output == *"tensor 'emb': a MindSpore map parameter's key"* ]] || false
    done
    # A name that safetensors cannot hold.
    $PY "$REPO/tests/oracle/ckpt_oracle.py" gen "$T/names.ckpt" --case names --seed 1
    run "$CONVERT" "$T/names.ckpt" "$T/o/x.safetensors"
    [ "$status" -eq 1 ] && [[ $output == *"tensor 'nul\\x00byte'"*"NUL byte"* ]] || false
    # Two ONNX tensors that would share a name in a file: the initializer
    # "w%const" and the Constant node "w" (shown as w%25const and w%const).
    $PY -c '
import sys, numpy as np, onnx
from onnx import helper, numpy_helper
w = numpy_helper.from_array(np.ones(2, np.float32), "w%const")
c = helper.make_node("Constant", [], ["w"], value=numpy_helper.from_array(np.zeros(2, np.float32)))
add = helper.make_node("Add", ["w", "w%const"], ["y"])
g = helper.make_graph([c, add], "g", [], [helper.make_tensor_value_info("y", 1, [2])], [w])
onnx.save(helper.make_model(g), sys.argv[1])' "$T/clash.onnx"
    run "$CONVERT" "$T/clash.onnx" "$T/o/x.safetensors"
    [ "$status" -eq 1 ] && [[ $output == *"another tensor has the same name"* ]] || false
    # ... while a OneFlow snapshot tells them apart, as the mount does.
    "$CONVERT" "$T/clash.onnx" "$T/o/snap/"
    $CMP "$T/clash.onnx" "$T/o/snap"
    rm -r "$T/o/snap"
    [ -z "$(ls -A "$T/o")" ]
}

@test "an existing OUT: refused without -f, replaced with it; a directory only if a snapshot" {
    f=$MS/mindarmour_checkpoint_lenet-10_1875.ckpt
    g=$FIXTURES/safetensors/burn/mnist.safetensors
    echo old >"$T/x.ckpt"
    run "$CONVERT" "$f" "$T/x.ckpt"
    [ "$status" -eq 1 ] && [[ $output == *"$T/x.ckpt: exists (give -f to replace it)"* ]] || false
    [ "$(cat "$T/x.ckpt")" = old ]
    "$CONVERT" -f "$f" "$T/x.ckpt"
    $CMP "$f" "$T/x.ckpt"
    # A OneFlow snapshot.
    "$CONVERT" "$f" "$T/snap/"
    run "$CONVERT" "$g" "$T/snap"
    [ "$status" -eq 1 ] && [[ $output == *"exists (give -f"* ]] || false
    $CMP "$f" "$T/snap"
    "$CONVERT" --force "$g" "$T/snap"
    $CMP "$g" "$T/snap"
    nothing_left "$T"
    # An empty directory is filled, -f or not.
    mkdir "$T/empty"
    "$CONVERT" "$f" "$T/empty"
    $CMP "$f" "$T/empty"
    # Anything else is never replaced, -f or not.
    mkdir -p "$T/home/docs" && echo keep >"$T/home/docs/notes.txt"
    run "$CONVERT" -f "$f" "$T/home"
    [ "$status" -eq 1 ] && [[ $output == *"$T/home: exists and is not a OneFlow snapshot"* ]] || false
    [ "$(cat "$T/home/docs/notes.txt")" = keep ]
    mkdir "$T/d.ckpt"
    run "$CONVERT" -f "$f" "$T/d.ckpt" --to ckpt
    [ "$status" -eq 1 ] && [[ $output == *"$T/d.ckpt: is a directory"* ]] || false
    run "$CONVERT" -f --to oneflow "$f" "$T/x.ckpt"
    [ "$status" -eq 1 ] && [[ $output == *"exists and is not a directory"* ]] || false
    $CMP "$f" "$T/x.ckpt"
}

@test "OUT is IN, or held writable by a mount: refused, nothing changed" {
    cp "$MS/mindarmour_checkpoint_lenet-10_1875.ckpt" "$T/a.ckpt"
    before=$(sha256sum <"$T/a.ckpt")
    run "$CONVERT" -f "$T/a.ckpt" "$T/a.ckpt"
    [ "$status" -eq 1 ] && [[ $output == *"$T/a.ckpt: is the model being converted"* ]] || false
    ln "$T/a.ckpt" "$T/hard.ckpt"
    run "$CONVERT" -f "$T/a.ckpt" "$T/hard.ckpt"
    [ "$status" -eq 1 ] && [[ $output == *"is the model being converted"* ]] || false
    [ "$(sha256sum <"$T/a.ckpt")" = "$before" ]
    "$CONVERT" "$T/a.ckpt" "$T/b.ckpt"
    mount_fg "$T/b.ckpt" "$T/m" -o commit=manual
    run "$CONVERT" -f "$MS/mindquantum_hackathon01_Mr_Tang754_model.ckpt" "$T/b.ckpt"
    [ "$status" -eq 1 ] && [[ $output == *"$T/b.ckpt: mounted writable by pid"* ]] || false
    $CMP "$T/a.ckpt" "$T/b.ckpt"
}

@test "kill -9 mid-convert of a 256 MiB model leaves OUT absent; the next convert cleans up" {
    $PY "$REPO/bench/gen_ckpt.py" "$T/big.ckpt" --size $((256 << 20)) --count 8
    mkdir "$T/o"
    for o in big.safetensors snap; do
        to=()
        [ $o = snap ] && to=(--to oneflow)
        kill_while_writing "$T/o" "$o" "$CONVERT" "${to[@]}" "$T/big.ckpt" "$T/o/$o"
        [ ! -e "$T/o/$o" ]
        [ -n "$(ls -A "$T/o" | grep '\.ckptfs-')" ]   # what it left behind
        "$CONVERT" -q "${to[@]}" "$T/big.ckpt" "$T/o/$o"
        nothing_left "$T/o"
        $CMP "$T/big.ckpt" "$T/o/$o"
        rm -rf "$T/o/$o"
    done
}

@test "leftovers are removed only when they are a convert's own: no link followed, nothing else" {
    f=$MS/mindarmour_checkpoint_lenet-10_1875.ckpt
    mkdir -p "$T/o" "$T/victim/d"
    echo keep >"$T/victim/d/out"
    echo keep >"$T/victim/top"
    # A link with a leftover's name, and a tree deeper than a snapshot's.
    ln -s "$T/victim" "$T/o/.snap.ckptfs-AAAAAA"
    mkdir -p "$T/o/.snap.ckptfs-BBBBBB/a/b"
    echo keep >"$T/o/.snap.ckptfs-BBBBBB/a/b/c"
    # A real leftover: the shape of a snapshot being written.
    mkdir -p "$T/o/.snap.ckptfs-CCCCCC/w"
    : >"$T/o/.snap.ckptfs-CCCCCC/w/out"
    "$CONVERT" "$f" "$T/o/snap/"
    $CMP "$f" "$T/o/snap"
    [ "$(cat "$T/victim/d/out")" = keep ] && [ "$(cat "$T/victim/top")" = keep ] || false
    [ -L "$T/o/.snap.ckptfs-AAAAAA" ]
    [ "$(cat "$T/o/.snap.ckptfs-BBBBBB/a/b/c")" = keep ]
    [ ! -e "$T/o/.snap.ckptfs-CCCCCC" ]
    # -f replaces a snapshot, never a link to one.
    ln -s "$T/o/snap" "$T/o/link"
    run "$CONVERT" -f "$f" "$T/o/link"
    [ "$status" -eq 1 ] && [[ $output == *"$T/o/link: exists and is not a directory"* ]] || false
    [ -L "$T/o/link" ]
}

@test "a read-only and a full filesystem: refused with the reason, nothing left" {
    [ "$(id -u)" = 0 ] || skip "mounting a tmpfs needs root"
    f=$MS/mindarmour_checkpoint_lenet-10_1875.ckpt
    mkdir "$T/ro" "$T/small"
    mount -t tmpfs -o size=1m,ro tmpfs "$T/ro"
    for o in x.ckpt x.safetensors snap/; do
        run "$CONVERT" "$f" "$T/ro/$o"
        [ "$status" -eq 1 ] && [[ $output == *"$T/ro/"*"Read-only file system"* ]] || false
    done
    [ -z "$(ls -A "$T/ro")" ]
    # 3 MB into 2 MiB.
    mount -t tmpfs -o size=2m tmpfs "$T/small"
    $PY "$REPO/bench/gen_ckpt.py" "$T/mid.ckpt" --size $((3 << 20)) --count 6
    for o in x.ckpt x.safetensors snap/; do
        run "$CONVERT" "$T/mid.ckpt" "$T/small/$o"
        [ "$status" -eq 1 ] && [[ $output == *"$T/small/"*"No space left on device"* ]] || false
        [ -z "$(ls -A "$T/small")" ] || { ls -la "$T/small"; false; }
    done
}

@test "the progress bar: on a terminal, bytes of the total, rate, ETA, the total last; else none" {
    # 48 MiB: the bar is redrawn as the bytes flow (16 MiB steps at most).
    f=$T/mid.ckpt
    $PY "$REPO/bench/gen_ckpt.py" "$f" --size $((48 << 20)) --count 3
    total=$($PY -c '
import sys; sys.path.insert(0, sys.argv[1])
import convert_oracle as c
print(sum(len(t.out) for t in c.read(sys.argv[2])))' "$REPO/tests/oracle" "$f")
    human=$($PY -c '
v = float('"$total"'); u = 0
while v >= 1024 and u < 4: v /= 1024; u += 1
print(("%.0f %s" if u == 0 else "%.1f %s") % (v, ["B", "KiB", "MiB", "GiB", "TiB"][u]))')
    for o in x.ckpt x.safetensors snap/; do
        # script(1) gives the convert a terminal; what it drew is its stdout.
        script -qec "'$CONVERT' '$f' '$T/$o'" /dev/null >"$T/tty"
        $CMP "$f" "$T/${o%/}"
        log=$(cat -v "$T/tty")
        echo "$log"
        [[ $log == "^M[------------------------]   0% 0 B / $human "*"/s  ETA "* ]]
        # The last bar drawn shows the whole, then the line is cleared.
        last=${log##*^M[}
        [[ $last == "########################] 100% $human / $human "*"ETA 0:00^[[K^M^[[K"* ]]
        [ "$(grep -o '\^M\[' <<<"$log" | wc -l)" -ge 2 ]
        rm -rf "$T/${o%/}"
    done
    # --quiet on a terminal, and no terminal: nothing at all.
    script -qec "'$CONVERT' -q '$f' '$T/q.ckpt'" /dev/null >"$T/tty"
    [ ! -s "$T/tty" ]
    $CMP "$f" "$T/q.ckpt"
    run "$CONVERT" "$f" "$T/n.ckpt"
    [ "$status" -eq 0 ] && [ -z "$output" ] || false
}

@test "usage: --help and --version exit 0; usage errors 2; a model that cannot be read 1" {
    run "$CONVERT" --help
    [ "$status" -eq 0 ] && [[ ${lines[0]} == "usage: ckptfs-convert "* ]] || false
    run "$CONVERT" --version
    [ "$status" -eq 0 ] && [[ $output == "ckptfs-convert "* ]] || false
    f=$MS/mindarmour_checkpoint_lenet-10_1875.ckpt
    for args in "" "$f" "--to" "--to onnx $f $T/x" "--bogus $f $T/x.ckpt" "$f $T/x.ckpt extra" \
                "$f $T/x.npz" "-o enc_mode=AES-GCM $f $T/x.safetensors" \
                "-o enc_mode=ROT13 $f $T/x.ckpt" "-o zstd_level=99 $f $T/x.ckpt.zst" \
                "-o zstd_level=3 $f $T/x.ckpt"; do
        run "$CONVERT" $args
        echo "[$args] $status $output"
        [ "$status" -eq 2 ] && [ "${#lines[@]}" -eq 1 ]
        [[ $output == "ckptfs-convert: "* ]]
    done
    [ -z "$(ls -A "$T" | grep -v -e '^bats' -e mounts)" ] || ls -la "$T"
    run "$CONVERT" "$T/missing.ckpt" "$T/x.ckpt"
    [ "$status" -eq 1 ] && [[ $output == "ckptfs-convert: $T/missing.ckpt: "* ]] || false
    run "$CONVERT" "$MS/mindscience_phylstm_your_file_EMPTY.ckpt" "$T/x.ckpt"
    [ "$status" -eq 1 ] && [[ $output == *"your_file_EMPTY.ckpt: empty file"* ]] || false
    [ ! -e "$T/x.ckpt" ]
}

# empty_huge FILE: a safetensors file whose tensor 'big' is F32 [2^62, 0]
# (valid: 0 elements) beside 'w', F32 [2].
empty_huge() {
    $PY - "$1" <<'PY'
import json, struct, sys
h = {"big": {"dtype": "F32", "shape": [2**62, 0], "data_offsets": [0, 0]},
     "w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}
b = json.dumps(h).encode()
open(sys.argv[1], "wb").write(struct.pack("<Q", len(b)) + b + struct.pack("<2f", 1.5, -2))
PY
}

@test "a shape OUT's reader would refuse ([2^62, 0] of F32 is 2^64 bytes before the 0) is refused before anything is written, naming the tensor" {
    empty_huge "$T/e.safetensors"
    mkdir "$T/o"
    run timeout 60 "$CONVERT" -q "$T/e.safetensors" "$T/o/x.ckpt"
    [ "$status" -eq 1 ] && [ "${#lines[@]}" -eq 1 ]
    [ "$output" = "ckptfs-convert: $T/e.safetensors: tensor 'big': a MindSpore checkpoint cannot hold it: dims [4611686018427387904,0] make a byte count past 2^64-1 (at dim 0)" ]
    run timeout 60 "$CONVERT" -q "$T/e.safetensors" "$T/o/snap/"
    [ "$status" -eq 1 ]
    [[ $output == *"$T/e.safetensors: tensor 'big': a OneFlow snapshot cannot hold it: dims [4611686018427387904,0]"* ]]
    [ -z "$(ls -A "$T/o")" ]
    # safetensors counts elements: 2^62 x 0 is 0, and it is written
    timeout 60 "$CONVERT" -q "$T/e.safetensors" "$T/o/x.safetensors"
    $PY -c '
import json, struct, sys
d = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", d[:8])[0]
h = json.loads(d[8:8 + n])
assert h["big"]["shape"] == [2**62, 0] and struct.unpack("<2f", d[8 + n:]) == (1.5, -2), h' "$T/o/x.safetensors"
}
