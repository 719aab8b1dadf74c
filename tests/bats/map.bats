#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# Maps between frameworks' names (codec/map/, docs/maps.md) on real files:
# MindSpore checkpoints through the shipped maps load strictly into torch
# modules written from the networks' definitions, with the values the
# protobuf runtime reads from the source (tests/oracle/map_oracle.py); a
# PyTorch-written BatchNorm becomes MindSpore's names; MindFormers' Llama
# names become Hugging Face's and back, byte for byte.  The language's
# rules and refusals are unit tests (tests/unit/test_map.c); here, what
# only the programs and a mount show.

load helpers

BRIDGE=$FIXTURES/mindspore_bridge
LENET=$MS/mindarmour_checkpoint_lenet-10_1875.ckpt
LSTM=$BRIDGE/competition_lstm_crf_20_63.ckpt
LLAMA=$FIXTURES/mindspore_distributed/golden-stick_llama2-13b-fp16_2p/rank_0/checkpoint_0.ckpt
BN=$FIXTURES/safetensors/burn/batch_norm2d.safetensors
TORCHTUNE=$FIXTURES/pytorch/torchtune_tiny_fair_checkpoint.pt
MAP_ORACLE="$PY $REPO/tests/oracle/map_oracle.py"

setup() {
    T=$BATS_TEST_TMPDIR
    M=$T/m
}

@test "ckptfs --maps lists the shipped maps scripts name, each with where its rules come from" {
    run "$CKPTFS" --maps
    [ "$status" -eq 0 ]
    for name in mindspore-to-torch torch-to-mindspore hf-to-mindformers-llama \
                mindformers-to-hf-llama mindcv-to-torchvision-resnet torchvision-to-mindcv-resnet \
                meta-to-hf-llama; do
        line=$(printf '%s\n' "$output" | awk -F'\t' -v n="$name" '$1 == n')
        [ -n "$line" ] || { echo "no $name"; false; }
        [[ "$(cut -f3 <<<"$line")" == *framework-names.md* ]]
    done
    [[ "$(printf '%s\n' "$output" | awk -F'\t' '$1 == "hf-to-mindformers-llama" {print $2}')" == invertible ]]
    [[ "$(printf '%s\n' "$output" | awk -F'\t' '$1 == "mindspore-to-torch" {print $2}')" == one-way ]]
}

@test "LeNet (.ckpt with Momentum state) converted with mindspore-to-torch loads strictly into torch's LeNet5" {
    "$BUILD/ckptfs-convert" --map mindspore-to-torch "$LENET" "$T/lenet.pt"
    $MAP_ORACLE lenet "$LENET" "$T/lenet.pt"
}

@test "the LSTM-CRF checkpoint through a mapped mount's safetensors view loads strictly into its torch module" {
    mount_fg "$LSTM" "$M" -o as=safetensors,map=mindspore-to-torch
    $MAP_ORACLE lstm-crf "$LSTM" "$M/model.safetensors"
    # and the tree of a mapped mount names the tensors as the view does
    mount_fg "$LSTM" "$T/tree" -o map=mindspore-to-torch
    [ -f "$T/tree/em.weight/out" ]
    [ ! -e "$T/tree/em.embedding_table" ]
    cmp "$T/tree/em.weight/out" <($PY -c 'import sys; sys.path.insert(0, sys.argv[1]); import ckpt_oracle as co
e = [e for e in co.load_reference(sys.argv[2])[0] if e.tag == b"em.embedding_table"][0]
sys.stdout.buffer.write(e.out)' "$REPO/tests/oracle" "$LSTM")
}

@test "the bridge to OneFlow: a mapped mount of a MindSpore checkpoint copied with cp -r is a OneFlow snapshot under PyTorch's names, the checkpoint's bytes" {
    mount_fg "$LSTM" "$M" -o map=mindspore-to-torch
    mkdir "$T/snap"
    cp -r "$M/." "$T/snap/"
    [ -f "$T/snap/snapshot_done" ]
    # read by the OneFlow oracle (its own meta and out parsing), against
    # the protobuf runtime's tensors of the source, renamed as the
    # reference says (embedding_table -> weight)
    $PY "$REPO/tests/oracle/oneflow_oracle.py" sums "$T/snap" >"$T/got"
    $ORACLE parse "$LSTM" | $PY -c 'import json, sys
for e in json.load(sys.stdin):
    print(e["dir"].replace("em.embedding_table", "em.weight") + "\t" + e["sha256"])' |
        LC_ALL=C sort >"$T/want"
    diff "$T/want" "$T/got"
    # the names are the torch module's, which OneFlow's mirrors
    diff <(cut -f1 "$T/got") <($MAP_ORACLE module-keys lstm-crf)
}

@test "ckptfs-diff --strict: a mapped checkpoint against a torch-written target, as load_state_dict(strict=True) reports it" {
    $MAP_ORACLE save-module lenet "$T/lenet_target.pt"
    run "$BUILD/ckptfs-diff" --strict --map mindspore-to-torch "$LENET" "$T/lenet_target.pt"
    [ "$status" -eq 0 ]
    [[ "$output" == *"strict: the 8 tensors match by name and shape"* ]]
    # without the map, the optimizer state is unexpected
    run "$BUILD/ckptfs-diff" --strict "$LENET" "$T/lenet_target.pt"
    [ "$status" -eq 1 ]
    grep -qx 'unexpected: moments.fc1.weight' <<<"$output"
    grep -qx 'unexpected: learning_rate' <<<"$output"
    [[ "${lines[-1]}" == "strict: 0 missing, 10 unexpected, 0 of another shape" ]]
    # a module of another hidden size: size mismatches named with both shapes
    $MAP_ORACLE save-module lstm-crf "$T/lstm64.pt" 64
    run "$BUILD/ckptfs-diff" --strict --map mindspore-to-torch "$LSTM" "$T/lstm64.pt"
    [ "$status" -eq 1 ]
    grep -qF "size mismatch: bilstm.weight_hh_l0: [512,128] in $LSTM, [256,64] in $T/lstm64.pt" <<<"$output"
    [[ "${lines[-1]}" == "strict: 0 missing, 0 unexpected, 9 of another shape" ]]
}

@test "a PyTorch BatchNorm (burn's safetensors) with torch-to-mindspore is MindSpore's BatchNorm, num_batches_tracked dropped" {
    "$BUILD/ckptfs-convert" --map torch-to-mindspore "$BN" "$T/bn.ckpt"
    $MAP_ORACLE bn-to-ms "$BN" "$T/bn.ckpt"
}

@test "the BatchNorm mapped to MindSpore and back with mindspore-to-torch loads strictly into torch's BatchNorm2d: num_batches_tracked added as a 0-d int64 zero" {
    "$BUILD/ckptfs-convert" --map torch-to-mindspore "$BN" "$T/bn.ckpt"
    "$BUILD/ckptfs-convert" --map mindspore-to-torch "$T/bn.ckpt" "$T/bn.pt"
    $MAP_ORACLE bn-back "$BN" "$T/bn.pt"
    # the mapped mount shows it too, a zero read from no file
    mount_fg "$T/bn.ckpt" "$M" -o map=mindspore-to-torch
    grep -q 'data_type: kInt64' "$M/norm1.num_batches_tracked/meta"
    cmp "$M/norm1.num_batches_tracked/out" <(head -c 8 /dev/zero)
}

@test "MindFormers Llama names become Hugging Face's, and hf-to-mindformers-llama gives the file back byte for byte" {
    "$BUILD/ckptfs-dump" --map mindformers-to-hf-llama "$LLAMA" >"$T/dump"
    # HF LlamaForCausalLM's keys for one layer, written from HF's naming
    # (framework-names.md §4.3), in the file's order
    want="model.embed_tokens.weight model.layers.0.post_attention_layernorm.weight
model.layers.0.input_layernorm.weight model.layers.0.self_attn.q_proj.weight
model.layers.0.self_attn.k_proj.weight model.layers.0.self_attn.v_proj.weight
model.layers.0.self_attn.o_proj.weight model.layers.0.mlp.gate_proj.weight
model.layers.0.mlp.down_proj.weight model.layers.0.mlp.up_proj.weight model.norm.weight
lm_head.weight"
    [ "$(grep -v '^#' "$T/dump" | cut -f1 | xargs)" = "$(echo $want)" ]
    "$BUILD/ckptfs-convert" --map mindformers-to-hf-llama "$LLAMA" "$T/hf.ckpt"
    $MAP_ORACLE names "$T/hf.ckpt" $want
    "$BUILD/ckptfs-convert" --map hf-to-mindformers-llama "$T/hf.ckpt" "$T/back.ckpt"
    cmp "$LLAMA" "$T/back.ckpt"
}

@test "a Meta-format Llama through meta-to-hf-llama (GQA head counts as the map's params) loads strictly into HF's Llama, q/k rows permuted as transformers does: converted and mounted" {
    $MAP_ORACLE save-meta "$T/meta.pt"
    local map=meta-to-hf-llama:n_heads=4:n_kv_heads=2
    "$BUILD/ckptfs-convert" --map $map "$T/meta.pt" "$T/hf.pt"
    $MAP_ORACLE meta-hf "$T/meta.pt" "$T/hf.pt" 4 2
    mount_fg "$T/meta.pt" "$M" -o as=safetensors,map=$map
    $MAP_ORACLE meta-hf "$T/meta.pt" "$M/model.safetensors" 4 2
    # the tree: a read across rows of a gathered tensor, at an odd offset
    mount_fg "$T/meta.pt" "$T/tree" -o map=$map
    cmp <(dd if="$T/tree/model.layers.1.self_attn.q_proj.weight/out" bs=1 skip=301 count=1000 status=none) \
        <($MAP_ORACLE hf-q-bytes "$T/meta.pt" 1 4 | dd bs=1 skip=301 count=1000 status=none)
    # torchtune's checkpoint (its values all equal: its names and shapes)
    "$BUILD/ckptfs-convert" --map meta-to-hf-llama:n_heads=4 "$TORCHTUNE" "$T/tt.pt"
    $MAP_ORACLE meta-hf "$TORCHTUNE" "$T/tt.pt" 4 4
    # the head counts are not in the file: without them, one line says so
    run "$BUILD/ckptfs-dump" --map meta-to-hf-llama "$T/meta.pt"
    [ "$status" -ne 0 ]
    [[ "$output" == *"meta-to-hf-llama.map: line "*": the map needs n_heads"* ]]
    run "$BUILD/ckptfs-dump" --map meta-to-hf-llama:n_heads=5 "$T/meta.pt"
    [ "$status" -ne 0 ]
    [[ "$output" == *"tensor 'layers.0.attention.wq.weight' [32,32]: its first dim is not a whole number of heads"* ]]
}

@test "a mapped mount is read-only: -o rw refused in one line, a write EROFS; a run directory and -o create refuse a map" {
    mount_refused -o rw,map=mindspore-to-torch "$LENET"
    grep -q 'saving edits back through a map is not built yet' "$T/err"
    mount_fg "$LENET" "$T/ro" -o map=mindspore-to-torch
    run touch "$T/ro/snapshot_done"
    [ "$status" -ne 0 ]
    [[ "$output" == *"Read-only file system"* ]]
    [ -d "$T/ro/fc1.weight" ]
    [ ! -e "$T/ro/moments.fc1.weight" ]
    mkdir "$T/run"
    cp "$LENET" "$T/run/a.ckpt"
    mount_refused -o map=mindspore-to-torch "$T/run"
    grep -q 'maps one model, not a run directory' "$T/err"
    mount_refused -o create,map=mindspore-to-torch "$T/new.ckpt"
}

@test "a hostile map is refused in one line naming its file and line: two names made one, a rule not built, a map too large" {
    printf 'not-invertible test\n# two BatchNorm weights\nsegment gamma weight\nsegment beta weight\n' >"$T/two.map"
    cp "$BN" "$T/bn.safetensors"
    "$BUILD/ckptfs-convert" --map torch-to-mindspore "$T/bn.safetensors" "$T/bn.ckpt"
    mount_refused -o map="$T/two.map" "$T/bn.ckpt"
    grep -q "two.map: line 4: '.*' and '.*' would both be named 'norm1.weight'" "$T/err"
    grep -q "'norm1.gamma'" "$T/err"
    grep -q "'norm1.beta'" "$T/err"
    printf 'not-invertible test\ncast * float32\n' >"$T/cast.map"
    mount_refused -o map="$T/cast.map" "$LENET"
    grep -q "cast.map: line 2: 'cast' rules are not built yet" "$T/err"
    head -c 2000000 /dev/zero | tr '\0' '#' >"$T/big.map"
    mount_refused -o map="$T/big.map" "$LENET"
    grep -q 'a map is at most' "$T/err"
    mount_refused -o map=no-such-map "$LENET"
    grep -q "no such map" "$T/err"
    run "$BUILD/ckptfs-dump" --map "$T/two.map" "$T/bn.ckpt"
    [ "$status" -ne 0 ]
    [[ "$output" == *"line 4"* ]]
}
