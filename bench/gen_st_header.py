#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Write a safetensors header (the JSON only, without the 8-byte length
prefix) of N tensors, for bench_json: laid out as the safetensors writer
lays it out, so that the parsers see the sizes and shapes of a real one.

* `__metadata__` first ({"format": "pt"});
* tensor names of a transformer (model.layers.123.self_attn.q_proj.weight);
* dtype among F32/F16/BF16/I64, 1 to 4 dims, contiguous data_offsets
  [begin, end] with end - begin = prod(shape) * itemsize;
* compact separators, padded with spaces to a multiple of 8.

Deterministic for a given N and seed.  With --target-bytes the count is
raised until the header reaches that size (the 100 MB limit check).

usage: gen_st_header.py OUT [--tensors N] [--target-bytes B] [--seed S]
"""
import argparse
import json
import random

ITEMSIZE = {"F32": 4, "F16": 2, "BF16": 2, "I64": 8}
DTYPES = ["F32", "F16", "BF16", "I64"]
# The parameters of one decoder layer, with the rank of each: names and
# ranks as a Llama-style checkpoint has them.
LAYER_PARAMS = [
    ("self_attn.q_proj.weight", 2), ("self_attn.k_proj.weight", 2),
    ("self_attn.v_proj.weight", 2), ("self_attn.o_proj.weight", 2),
    ("self_attn.q_proj.bias", 1), ("mlp.gate_proj.weight", 2),
    ("mlp.up_proj.weight", 2), ("mlp.down_proj.weight", 2),
    ("input_layernorm.weight", 1), ("post_attention_layernorm.weight", 1),
    ("self_attn.rotary_emb.inv_freq", 1), ("mlp.experts.gate.weight", 3),
    ("conv.weight", 4),
]
DIMS = [1, 2, 3, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
# Rank 3 and 4 (experts, convolutions) with small dims, so that the offsets
# stay those of a real file (terabytes at most, not petabytes).
SMALL_DIMS = DIMS[:8]


def names():
    layer = 0
    while True:
        for suffix, rank in LAYER_PARAMS:
            yield "model.layers.%d.%s" % (layer, suffix), rank
        layer += 1


def tensors(rng):
    """Yields (name, entry) forever, data_offsets contiguous from 0."""
    offset = 0
    for name, rank in names():
        dtype = rng.choice(DTYPES)
        dims = DIMS if rank <= 2 else SMALL_DIMS
        shape = [rng.choice(dims) for _ in range(rank)]
        size = ITEMSIZE[dtype]
        for d in shape:
            size *= d
        entry = {"dtype": dtype, "shape": shape,
                 "data_offsets": [offset, offset + size]}
        offset += size
        yield name, entry


def header(count, target, seed):
    rng = random.Random(seed)
    doc = {"__metadata__": {"format": "pt"}}
    approx = 30
    gen = tensors(rng)
    while len(doc) - 1 < count or approx < target:
        name, entry = next(gen)
        doc[name] = entry
        # Estimated without serializing each time: key, quotes, separators.
        approx += len(name) + len(json.dumps(entry, separators=(",", ":"))) + 4
    text = json.dumps(doc, separators=(",", ":"))
    # The writer pads with spaces so that the data starts 8-aligned.
    return text + " " * (-len(text) % 8)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--tensors", type=int, default=100000)
    ap.add_argument("--target-bytes", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    text = header(a.tensors, a.target_bytes, a.seed)
    with open(a.out, "w", encoding="ascii") as f:
        f.write(text)
    print("%s: %d tensors, %d bytes" % (a.out, text.count('"dtype"'), len(text)))


if __name__ == "__main__":
    main()
