#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""map_oracle: whether a mapped model loads where the map says it does.

The consumers are the real ones: torch's load_state_dict(strict=True) on
PyTorch modules written here from the networks' definitions
(../shared/fixtures/mindspore_bridge/SOURCES.md and its model_sources/,
the MindSpore model-zoo LeNet5), and the values are compared with the
source read by the protobuf runtime (ckpt_oracle) or by the safetensors
reference parser (safetensors_oracle), never by ckptfs.

  map_oracle.py lenet SRC.ckpt OUT.pt|OUT.safetensors
  map_oracle.py lstm-crf SRC.ckpt OUT.pt|OUT.safetensors
      OUT loads strictly into the module, and every tensor equals the
      source's tensor the map names it from (optimizer state dropped,
      embedding_table -> weight)
  map_oracle.py bn-to-ms SRC.safetensors OUT.ckpt
      a PyTorch BatchNorm's names (weight, bias, running_mean, running_var,
      num_batches_tracked) as MindSpore's BatchNorm holds them (gamma, beta,
      moving_mean, moving_variance; no num_batches_tracked), values equal
  map_oracle.py bn-back SRC.safetensors BACK.pt
      BACK (SRC mapped to MindSpore and back) loads strictly into torch
      BatchNorm2d modules shaped as SRC's, with SRC's values, and
      num_batches_tracked the 0-d int64 zero torch starts from
  map_oracle.py save-module lenet|lstm-crf OUT.pt [HIDDEN]
      torch.save of a fresh module's state_dict (the LSTM's hidden size
      HIDDEN, default 128): a target for ckptfs-diff --strict
  map_oracle.py module-keys lenet|lstm-crf
      the module's state_dict keys, sorted bytewise, one a line
  map_oracle.py names FILE NAME...
      FILE's tensor names (a .ckpt or .safetensors) are exactly NAME...
Exit 0 when it holds; else 1 with one line saying what differs.
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

import ckpt_oracle as co  # noqa: E402
import safetensors_oracle as so  # noqa: E402


def fail(msg):
    print(f"map_oracle: {msg}", file=sys.stderr)
    sys.exit(1)


def ckpt_arrays(path):
    """name -> numpy array, by the protobuf runtime."""
    entries, _ = co.load_reference(path)
    out = {}
    for e in entries:
        dt = np.dtype(e.np_dtype)
        out[e.tag.decode()] = np.frombuffer(e.out, dt).reshape(e.dims)
    return out


def st_arrays(path):
    out = {}
    for e in so.load_reference(path).entries:
        out[e.tag.decode()] = np.frombuffer(e.out, np.dtype(e.np_dtype)).reshape(e.shape)
    return out


def load_any(path):
    if path.endswith(".ckpt"):
        return ckpt_arrays(path)
    if path.endswith(".safetensors"):
        return st_arrays(path)
    sd = torch.load(path, map_location="cpu")
    return {k: v.numpy() for k, v in sd.items()}


class LeNet5(nn.Module):
    """MindSpore model zoo's LeNet5 (convs without bias), as torch."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, bias=False)
        self.conv2 = nn.Conv2d(6, 16, 5, bias=False)
        self.fc1 = nn.Linear(400, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)


class LstmCrf(nn.Module):
    """customize_service.py's LSTM_CRF (SOURCES.md): Embedding, a
    bidirectional LSTM, the CRF's Linear and its three transition tensors."""

    def __init__(self, hidden=128):
        super().__init__()
        self.em = nn.Embedding(1535, 256)
        self.bilstm = nn.LSTM(256, hidden, batch_first=True, bidirectional=True)
        self.crf_hidden_fc = nn.Linear(2 * hidden, 11)
        self.crf = nn.Module()
        self.crf.start_transitions = nn.Parameter(torch.zeros(11))
        self.crf.end_transitions = nn.Parameter(torch.zeros(11))
        self.crf.transitions = nn.Parameter(torch.zeros(11, 11))


def strict_load(module, path, source, rename):
    got = load_any(path)
    sd = {k: torch.from_numpy(np.array(v)) for k, v in got.items()}
    try:
        module.load_state_dict(sd, strict=True)
    except RuntimeError as exc:
        fail(f"{path}: load_state_dict(strict=True): {str(exc).splitlines()[0]} "
             f"{sorted(set(sd) ^ set(module.state_dict()))}")
    want = ckpt_arrays(source)
    for name, value in module.state_dict().items():
        src = rename.get(name, name)
        if src not in want:
            fail(f"{name}: no {src} in {source}")
        if not np.array_equal(value.numpy(), want[src]):
            fail(f"{name}: values differ from {source}'s {src}")


def cmd_bn_to_ms(src, out):
    torch_side = st_arrays(src)
    ms_side = ckpt_arrays(out)
    names = {"weight": "gamma", "bias": "beta", "running_mean": "moving_mean",
             "running_var": "moving_variance"}
    want = {}
    for name, value in torch_side.items():
        prefix, _, last = name.rpartition(".")
        group = prefix + "." if prefix else ""
        if last == "num_batches_tracked":
            continue
        if group + "running_mean" in torch_side and last in names:
            want[group + names[last]] = value
        else:
            want[name] = value
    if list(want) != list(ms_side):
        fail(f"{out}: names {list(ms_side)}, not {list(want)}")
    for name, value in want.items():
        if ms_side[name].shape != value.shape or not np.array_equal(ms_side[name], value):
            fail(f"{out}: {name} differs from {src}'s")


def cmd_bn_back(src, back):
    torch_side = st_arrays(src)
    net = nn.Module()
    for name, value in torch_side.items():
        if name.endswith(".running_mean"):
            net.add_module(name[:-len(".running_mean")], nn.BatchNorm2d(value.shape[0]))
    sd = {k: torch.from_numpy(np.array(v)) for k, v in load_any(back).items()}
    try:
        net.load_state_dict(sd, strict=True)
    except RuntimeError as exc:
        fail(f"{back}: load_state_dict(strict=True): {str(exc).splitlines()[0]}")
    for name, value in net.state_dict().items():
        if name.endswith(".num_batches_tracked"):
            if value.dtype != torch.int64 or value.dim() != 0 or int(value) != 0:
                fail(f"{back}: {name} is {value!r}, not tensor(0) of int64")
        elif not np.array_equal(value.numpy(), torch_side[name]):
            fail(f"{back}: {name} differs from {src}'s")


class HfLlama(nn.Module):
    """Hugging Face's LlamaForCausalLM parameters (no bias, as HF's Llama),
    written by hand: transformers is not a Debian package."""

    def __init__(self, vocab, dim, ffn, layers, kv_dim):
        super().__init__()
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(vocab, dim)
        self.model.layers = nn.ModuleList()
        for _ in range(layers):
            layer = nn.Module()
            layer.self_attn = nn.Module()
            for proj, (i, o) in {"q_proj": (dim, dim), "k_proj": (dim, kv_dim),
                                 "v_proj": (dim, kv_dim), "o_proj": (dim, dim)}.items():
                setattr(layer.self_attn, proj, nn.Linear(i, o, bias=False))
            layer.mlp = nn.Module()
            layer.mlp.gate_proj = nn.Linear(dim, ffn, bias=False)
            layer.mlp.up_proj = nn.Linear(dim, ffn, bias=False)
            layer.mlp.down_proj = nn.Linear(ffn, dim, bias=False)
            layer.input_layernorm = nn.Module()
            layer.input_layernorm.weight = nn.Parameter(torch.zeros(dim))
            layer.post_attention_layernorm = nn.Module()
            layer.post_attention_layernorm.weight = nn.Parameter(torch.zeros(dim))
            self.model.layers.append(layer)
        self.model.norm = nn.Module()
        self.model.norm.weight = nn.Parameter(torch.zeros(dim))
        self.lm_head = nn.Linear(dim, vocab, bias=False)


def hf_permute(w, heads):
    """transformers' convert_llama_weights_to_hf.py permute, in numpy."""
    d1, d2 = w.shape
    return w.reshape(heads, d1 // heads // 2, 2, d2).transpose(0, 2, 1, 3).reshape(d1, d2)


def cmd_meta_hf(src, mapped, heads, kv_heads):
    meta = {k: v.numpy() for k, v in torch.load(src, map_location="cpu").items()
            if k != "rope.freqs"}
    vocab, dim = meta["tok_embeddings.weight"].shape
    layers = 1 + max(int(k.split(".")[1]) for k in meta if k.startswith("layers."))
    net = HfLlama(vocab, dim, meta["layers.0.feed_forward.w1.weight"].shape[0], layers,
                  meta["layers.0.attention.wk.weight"].shape[0])
    sd = {k: torch.from_numpy(np.array(v)) for k, v in load_any(mapped).items()}
    try:
        net.load_state_dict(sd, strict=True)
    except RuntimeError as exc:
        fail(f"{mapped}: load_state_dict(strict=True): {str(exc).splitlines()[0]}")
    meta_name = {"model.embed_tokens.weight": "tok_embeddings.weight",
                 "model.norm.weight": "norm.weight", "lm_head.weight": "output.weight"}
    parts = {"self_attn.q_proj": "attention.wq", "self_attn.k_proj": "attention.wk",
             "self_attn.v_proj": "attention.wv", "self_attn.o_proj": "attention.wo",
             "mlp.gate_proj": "feed_forward.w1", "mlp.down_proj": "feed_forward.w2",
             "mlp.up_proj": "feed_forward.w3", "input_layernorm": "attention_norm",
             "post_attention_layernorm": "ffn_norm"}
    for name, value in net.state_dict().items():
        if name in meta_name:
            want = meta[meta_name[name]]
        else:
            n, part = re.fullmatch(r"model\.layers\.(\d+)\.(.+)\.weight", name).groups()
            want = meta[f"layers.{n}.{parts[part]}.weight"]
            if part == "self_attn.q_proj":
                want = hf_permute(want, heads)
            elif part == "self_attn.k_proj":
                want = hf_permute(want, kv_heads)
        if not np.array_equal(value.numpy(), want):
            fail(f"{mapped}: {name} differs from {src}'s, permuted as transformers does")


def cmd_save_meta(out):
    """A Meta-format Llama state dict (torchtune's FullModelMetaCheckpointer
    names) of distinct values, with grouped-query attention: 4 heads of 8,
    2 KV heads; and Meta's rope.freqs, which the map drops."""
    g = torch.Generator().manual_seed(41)
    dim, kv, ffn, vocab = 32, 16, 64, 50
    sd = {"tok_embeddings.weight": torch.randn(vocab, dim, generator=g)}
    for i in range(2):
        p = f"layers.{i}."
        for name, shape in (("attention.wq", (dim, dim)), ("attention.wk", (kv, dim)),
                            ("attention.wv", (kv, dim)), ("attention.wo", (dim, dim)),
                            ("feed_forward.w1", (ffn, dim)), ("feed_forward.w2", (dim, ffn)),
                            ("feed_forward.w3", (ffn, dim)), ("attention_norm", (dim,)),
                            ("ffn_norm", (dim,))):
            sd[p + name + ".weight"] = torch.randn(*shape, generator=g)
    sd["norm.weight"] = torch.randn(dim, generator=g)
    sd["output.weight"] = torch.randn(vocab, dim, generator=g)
    sd["rope.freqs"] = torch.randn(4, generator=g)
    torch.save(sd, out)


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "lenet":
        strict_load(LeNet5(), args[1], args[0], {})
    elif cmd == "lstm-crf":
        strict_load(LstmCrf(), args[1], args[0], {"em.weight": "em.embedding_table"})
    elif cmd == "bn-to-ms":
        cmd_bn_to_ms(args[0], args[1])
    elif cmd == "bn-back":
        cmd_bn_back(args[0], args[1])
    elif cmd == "meta-hf":
        cmd_meta_hf(args[0], args[1], int(args[2]), int(args[3]))
    elif cmd == "save-meta":
        cmd_save_meta(args[0])
    elif cmd == "hf-q-bytes":  # SRC LAYER HEADS: HF's q_proj rows, as bytes
        w = torch.load(args[0])[f"layers.{args[1]}.attention.wq.weight"].numpy()
        sys.stdout.buffer.write(hf_permute(w, int(args[2])).astype("<f4").tobytes())
    elif cmd == "save-module":
        net = LeNet5() if args[0] == "lenet" else LstmCrf(int(args[2]) if len(args) > 2 else 128)
        torch.save(net.state_dict(), args[1])
    elif cmd == "module-keys":
        net = LeNet5() if args[0] == "lenet" else LstmCrf()
        print("\n".join(sorted(net.state_dict(), key=lambda k: k.encode())))
    elif cmd == "names":
        got = list(load_any(args[0]))
        if got != args[1:]:
            fail(f"{args[0]}: names {got}, not {args[1:]}")
    else:
        fail(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
