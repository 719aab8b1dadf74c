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
