#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Independent test oracle for ckptfs mounts of PyTorch Distributed Checkpoint (DCP) directories.

Debian's torch 1.13 cannot write DCP (its distributed checkpoint modules do not import on
Python 3.11), so this oracle writes DCP directories itself, as PyTorch 2.x's FileSystemWriter
does, from PyTorch's own source (pytorch/pytorch torch/distributed/checkpoint/metadata.py at
57ba412974d8, filesystem.py at b639d82d83d4; PyTorch 2.0's TensorProperties from
torch/distributed/_shard/sharded_tensor/metadata.py; the safetensors variant from the newer
filesystem.py's _write_item/_write_files_from_queue):
  - `.metadata` is pickle.dump (default protocol) of Metadata; the dataclasses below are stubs
    that behave as PyTorch's (fields, __getstate__, MetadataIndex's __init__) and are pickled
    under their real module paths, registered in sys.modules only while pickling;
  - `__<rank>_0.distcp` per rank: its byte items first (each the bytes of torch.save(obj), as
    the default planner makes them), then its tensor chunks, each torch.save'd into the stream
    at its offset (a chunk whose storage is larger than it is cloned first: _SerialCpuLoader);
  - storage_data maps MetadataIndex(fqn, chunk offsets or None, chunk index) to
    _StorageInfo(relative_path, offset, length); planner_data maps fqn to its key path.
The chunks inside are torch 1.13's torch.save archives (2.x adds records 1.13 does not write).
It reads them back on its own: `.metadata` through an Unpickler that resolves only the
classes named here, each chunk with torch.load(weights_only=True) placed at its offsets into
torch.zeros of the tensor's size (every element covered exactly once), byte items flattened
as pytorch_oracle does (a Python int/float/bool a 0-d int64/float64/bool; strings not shown).
torch 1.13's weights-only loader lacks BINFLOAT, so a byte item it refuses is loaded in full:
`check` and `parse` are only run on directories `gen` wrote.

    /usr/bin/python3 dcp_oracle.py gen DIR --case NAME [--seed N] [--count N]
    /usr/bin/python3 dcp_oracle.py check MOUNTPOINT DIR
    /usr/bin/python3 dcp_oracle.py parse DIR      (a line a leaf: DIR TYPE SHAPE SHA)
    /usr/bin/python3 dcp_oracle.py same-as-safetensors DIR FILE.safetensors
                    (FILE, read with json + numpy, holds DIR's tensors; numbers not compared)
    /usr/bin/python3 dcp_oracle.py fake-tree DIR OUT   (the expected tree, to test `check`)
    /usr/bin/python3 dcp_oracle.py bad-all DIR [CASE...] (each as DIR/bad-CASE; prints CASE<TAB>what the refusal must name)
    /usr/bin/python3 dcp_oracle.py bad-cases

Cases of gen: single, dim0, grid, uneven, strided, older, py310, safetensors, mixed, many,
big.  uneven: grids whose rows (and a cube's middle dimension) are cut unevenly, as FSDP
cuts rows with torch.chunk beside tensor parallelism's even column cuts.
py310 is single's checkpoint pickled as Python 3.8-3.10 pickle an Enum member: its class
called with its value (Enum.__reduce_ex__ before 3.11), not getattr(class, name).
"""

import argparse
import collections
import copyreg
import enum
import hashlib
import io
import json
import os
import pathlib
import pickle
import struct
import sys
import types
import uuid
from dataclasses import dataclass, field

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
import torch  # noqa: E402

import ckpt_oracle as co  # noqa: E402  (meta text, tree checks)
import pytorch_oracle as po  # noqa: E402  (Entry, flatten, TYPES, random_tensor)

CP = "torch.distributed.checkpoint.metadata"
FS = "torch.distributed.checkpoint.filesystem"
SHARD = "torch.distributed._shard.sharded_tensor.metadata"  # PyTorch 2.0 to 2.2
CURRENT_DCP_VERSION = "1.0.0"  # filesystem.py's, set on Metadata by finish()

# ---------------------------------------------------------------------------------------
# The dataclasses, as PyTorch 2.x defines them (metadata.py, filesystem.py).
# ---------------------------------------------------------------------------------------


@dataclass
class ChunkStorageMetadata:
    offsets: torch.Size
    sizes: torch.Size


class _MEM_FORMAT_ENCODING(enum.Enum):
    TORCH_CONTIGUOUS_FORMAT = 0
    TORCH_CHANNELS_LAST = 1
    TORCH_PRESERVE_FORMAT = 2


class MEM_FORMAT_ENCODING(enum.Enum):  # PyTorch 2.0's name, in SHARD
    TORCH_CONTIGUOUS_FORMAT = 0
    TORCH_CHANNELS_LAST = 1
    TORCH_PRESERVE_FORMAT = 2


_FORMATS = [torch.contiguous_format, torch.channels_last, torch.preserve_format]


@dataclass
class TensorProperties:
    dtype: torch.dtype = field(default_factory=torch.get_default_dtype)
    layout: torch.layout = field(default=torch.strided)
    requires_grad: bool = False
    memory_format: torch.memory_format = field(default=torch.contiguous_format)
    pin_memory: bool = False
    _encoding = _MEM_FORMAT_ENCODING  # the enum this class pickles its memory format as

    def __getstate__(self):
        # torch.memory_format cannot be pickled: PyTorch stores its enum member
        enc = list(self._encoding)[_FORMATS.index(self.memory_format)]
        return (self.dtype, self.layout, self.requires_grad, enc, self.pin_memory)

    def __setstate__(self, state):
        self.dtype, self.layout, self.requires_grad, enc, self.pin_memory = state
        if not isinstance(enc, (_MEM_FORMAT_ENCODING, MEM_FORMAT_ENCODING)):
            raise pickle.UnpicklingError(f"memory format encoding {enc!r}")
        self.memory_format = _FORMATS[enc.value]


@dataclass
class OldTensorProperties(TensorProperties):  # PyTorch 2.0's, pickled as SHARD.TensorProperties
    _encoding = MEM_FORMAT_ENCODING


@dataclass
class TensorStorageMetadata:
    properties: TensorProperties
    size: torch.Size
    chunks: list


@dataclass
class BytesStorageMetadata:
    pass


@dataclass
class StorageMeta:
    checkpoint_id: object = None
    save_id: object = None
    load_id: object = None
    modules: list = field(default_factory=list)


@dataclass
class Metadata:
    state_dict_metadata: dict
    planner_data: object = None
    storage_data: object = None
    storage_meta: object = None
    version: object = None


@dataclass
class OldMetadata:  # PyTorch 2.0 to 2.2: three fields
    state_dict_metadata: dict
    planner_data: object = None
    storage_data: object = None


@dataclass(frozen=True)
class MetadataIndex:
    fqn: str
    offset: object = None
    index: object = field(hash=False, compare=False, default=None)

    def __init__(self, fqn, offset=None, index=None):
        # as PyTorch's: offset only set when given (else the class default, not in __dict__)
        object.__setattr__(self, "fqn", fqn)
        object.__setattr__(self, "index", index)
        if offset is not None:
            object.__setattr__(self, "offset", torch.Size(offset))


@dataclass
class _StorageInfo:
    relative_path: str
    offset: int
    length: int
    transform_descriptors: object = None

    def __getstate__(self):  # newer filesystem.py: None fields left out of the pickle
        return {k: v for k, v in self.__dict__.items() if v is not None}


def _stub_modules(layout):
    """The modules pickle looks the classes up in, for layout "new" (2.3+) or "old" (2.0)."""
    place = {CP: {"ChunkStorageMetadata": ChunkStorageMetadata,
                  "TensorStorageMetadata": TensorStorageMetadata,
                  "BytesStorageMetadata": BytesStorageMetadata,
                  "MetadataIndex": MetadataIndex},
             FS: {"_StorageInfo": _StorageInfo}}
    if layout == "new":
        place[CP].update(Metadata=Metadata, StorageMeta=StorageMeta,
                         TensorProperties=TensorProperties,
                         _MEM_FORMAT_ENCODING=_MEM_FORMAT_ENCODING)
    else:
        place[CP]["Metadata"] = OldMetadata
        place[SHARD] = {"TensorProperties": OldTensorProperties,
                        "MEM_FORMAT_ENCODING": MEM_FORMAT_ENCODING}
    mods = {}
    for mod, classes in place.items():
        m = types.ModuleType(mod)
        for name, cls in classes.items():
            cls.__module__, cls.__qualname__ = mod, name
            setattr(m, name, cls)
        mods[mod] = m
    return mods


def _enum_by_value(member):
    """Enum.__reduce_ex__ of Python 3.10 and before: the class called with the value."""
    return type(member), (member.value,)


def pickle_with_stubs(obj, layout="new", enum_by_value=False, **kw):
    """pickle.dumps(obj) with the stubs registered in sys.modules under their real paths
    for the call only (restored after: torch stays as it was); enum_by_value: Enum
    members pickled as Python 3.10 and before pickle them."""
    mods = _stub_modules(layout)
    saved = {k: sys.modules.get(k) for k in mods}
    sys.modules.update(mods)
    try:
        if not enum_by_value:
            return pickle.dumps(obj, **kw)
        out = io.BytesIO()
        p = pickle.Pickler(out, **kw)
        p.dispatch_table = copyreg.dispatch_table.copy()
        p.dispatch_table.update({_MEM_FORMAT_ENCODING: _enum_by_value,
                                 MEM_FORMAT_ENCODING: _enum_by_value})
        p.dump(obj)
        return out.getvalue()
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


def dump_metadata(directory, md, layout="new", enum_by_value=False):
    """pickle.dump(metadata, f), default protocol, as filesystem.py's finish()."""
    data = pickle_with_stubs(md, layout, enum_by_value)
    with open(os.path.join(directory, ".metadata"), "wb") as f:
        f.write(data)
    return data


# ---------------------------------------------------------------------------------------
# Writing: a state dict saved over ranks.
# ---------------------------------------------------------------------------------------


@dataclass
class Saved:
    """What the ranks save: tensors[fqn] = (size, dtype, [(rank, offsets, local tensor)]) in
    rank order; values[fqn] = a non-tensor object (a byte item, saved once by rank 0);
    paths[fqn] = its key path in the state dict (the planner_data)."""
    ranks: int
    tensors: dict = field(default_factory=dict)
    values: dict = field(default_factory=dict)
    paths: dict = field(default_factory=dict)

    def whole(self, fqn, t, path=None):
        self.tensors[fqn] = (tuple(t.shape), t.dtype, [(0, (0,) * t.dim(), t)])
        self.paths[fqn] = path or (fqn,)

    def cut(self, fqn, t, pieces):
        """pieces: [(rank, offsets, sizes)] of t, each a separate local tensor (a rank's own
        allocation); pieces with no element are left out, as DCP leaves them."""
        chunks = []
        for rank, offs, sizes in pieces:
            if 0 in sizes:
                continue
            local = t
            for d, (o, s) in enumerate(zip(offs, sizes)):
                local = local.narrow(d, o, s)
            chunks.append((rank, tuple(offs), local.clone()))
        self.tensors[fqn] = (tuple(t.shape), t.dtype, chunks)
        self.paths[fqn] = (fqn,)

    def value(self, fqn, obj, path=None):
        self.values[fqn] = obj
        self.paths[fqn] = path or (fqn,)


def torch_save_bytes(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def st_blob(tensors, sharding):
    """safetensors.torch.save(tensors, metadata={DCP_SHARDING_INFO, DCP_VERSION}) as the
    safetensors format lays it out: header (JSON, padded with spaces to 8 bytes), then the
    tensors' bytes, larger dtypes first, by name."""
    st_names = {torch.float32: "F32", torch.float64: "F64", torch.float16: "F16",
                torch.bfloat16: "BF16", torch.int64: "I64", torch.int32: "I32",
                torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8", torch.bool: "BOOL"}
    order = sorted(tensors, key=lambda k: (-tensors[k].element_size(), k))
    header = {"__metadata__": {"DCP_SHARDING_INFO": json.dumps(sharding), "DCP_VERSION": "1.0"}}
    data, pos = [], 0
    for k in order:
        b = po.tensor_bytes(tensors[k])
        header[k] = {"dtype": st_names[tensors[k].dtype], "shape": list(tensors[k].shape),
                     "data_offsets": [pos, pos + len(b)]}
        data.append(b)
        pos += len(b)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(data)


def write_dcp(directory, s, layout="new", fmt="torch_save", enum_by_value=False):
    """Write s as FileSystemWriter does (single_file_per_rank, thread_count 1) and return
    the Metadata pickled to .metadata."""
    os.makedirs(directory, exist_ok=True)
    md, storage = {}, {}
    per_rank = collections.defaultdict(lambda: ([], []))
    for fqn, obj in s.values.items():
        md[fqn] = BytesStorageMetadata()
        per_rank[0][0].append((MetadataIndex(fqn), torch_save_bytes(obj)))
    props_cls = TensorProperties if layout == "new" else OldTensorProperties
    for fqn, (size, dtype, chunks) in s.tensors.items():
        tmd = TensorStorageMetadata(props_cls(dtype=dtype), torch.Size(size), [])
        md[fqn] = tmd
        for rank, offs, local in chunks:
            idx = MetadataIndex(fqn, offs, len(tmd.chunks))
            tmd.chunks.append(ChunkStorageMetadata(torch.Size(offs), torch.Size(local.shape)))
            per_rank[rank][1].append((idx, local))
    for rank in range(s.ranks):
        name = f"__{rank}_0.distcp"
        byte_items, tensor_items = per_rank[rank]
        with open(os.path.join(directory, name), "wb") as f:
            for idx, data in byte_items:
                storage[idx] = _StorageInfo(name, f.tell(), len(data))
                f.write(data)
            blob, sharding = {}, {}
            for idx, t in tensor_items:
                t = t.detach()
                if t.storage().size() != t.numel():  # _SerialCpuLoader
                    t = t.clone()
                at = f.tell()
                if fmt == "torch_save":
                    torch.save(t, f)
                    storage[idx] = _StorageInfo(name, at, f.tell() - at)
                else:  # nothing written per item: all of them point at the blob
                    storage[idx] = _StorageInfo(name, at, t.numel() * t.element_size())
                    blob[idx.fqn] = t
                    sharding[idx.fqn] = {"saved_offsets": list(idx.offset)}
            if fmt == "safetensors":
                f.write(st_blob(blob, sharding))
    if layout == "new":
        meta = Metadata(md, dict(s.paths), storage,
                        StorageMeta(checkpoint_id=pathlib.PosixPath(os.path.abspath(directory)),
                                    save_id=str(uuid.UUID(int=len(md)))),
                        CURRENT_DCP_VERSION)
    else:
        meta = OldMetadata(md, dict(s.paths), storage)
    dump_metadata(directory, meta, layout, enum_by_value)
    return meta


def rows(n, ranks):
    """torch.chunk's cut of n rows over ranks: ceil(n / ranks) each, the rest to the last."""
    step = -(-n // ranks)
    return [(r, min(r * step, n), max(0, min(step, n - r * step))) for r in range(ranks)]


def shard0(s, fqn, t, ranks):
    s.cut(fqn, t, [(r, (o,) + (0,) * (t.dim() - 1), (n,) + tuple(t.shape[1:]))
                   for r, o, n in rows(t.shape[0], ranks)])


def fsdp_tp(s, fqn, t, dp, tp):
    """t's rows cut over dp ranks as torch.chunk cuts them (the last ones shorter or empty),
    its columns evenly over tp: a 2-D DTensor [Shard(0), Shard(1)]."""
    cols = t.shape[1] // tp
    s.cut(fqn, t, [(r * tp + c, (o, c * cols), (n, cols))
                   for r, o, n in rows(t.shape[0], dp) for c in range(tp)])


def shard_dim(s, fqn, t, dim, ranks):
    pieces = []
    for r, o, n in rows(t.shape[dim], ranks):
        offs, sizes = [0] * t.dim(), list(t.shape)
        offs[dim], sizes[dim] = o, n
        pieces.append((r, tuple(offs), tuple(sizes)))
    s.cut(fqn, t, pieces)


def single_state(s, g):
    for i, dt in enumerate(po.TYPES):
        s.whole(f"model.t{i}.{str(dt)[6:]}", po.random_tensor(g, dt, (3, 5)))
    s.whole("model.layers.0.weight", po.random_tensor(g, torch.float32, (4, 3)),
            ("model", "layers.0.weight"))
    s.whole("optimizer.state.0.exp_avg", po.random_tensor(g, torch.float32, (4, 3)),
            ("optimizer", "state", 0, "exp_avg"))
    s.whole("scalar0d", torch.tensor(2.5))
    s.whole("empty", torch.zeros(0, 4))
    s.value("epoch", 7)
    s.value("optimizer.param_groups.0.lr", 0.001, ("optimizer", "param_groups", 0, "lr"))
    s.value("best", True)
    s.value("run_name", "run-1")


def gen_saved(case, g, count):
    if case in ("single", "older", "py310"):
        s = Saved(1)
        single_state(s, g)
        return s
    if case in ("dim0", "safetensors"):
        s = Saved(4)
        shard0(s, "layers.0.w_even", po.random_tensor(g, torch.float32, (8, 3)), 4)
        shard0(s, "layers.0.w_uneven", po.random_tensor(g, torch.float32, (10, 3)), 4)
        shard0(s, "layers.0.i64_uneven", po.random_tensor(g, torch.int64, (10,)), 4)
        shard0(s, "layers.1.two_rows", po.random_tensor(g, torch.float16, (2, 5)), 4)
        shard0(s, "layers.1.bf16", po.random_tensor(g, torch.bfloat16, (6, 2)), 4)
        s.whole("replicated.bias", po.random_tensor(g, torch.float32, (5,)))  # dedup: rank 0
        s.whole("small.step", torch.tensor(12, dtype=torch.int64))
        s.whole("small.mask", po.random_tensor(g, torch.bool, (3,)))
        s.value("epoch", 3)
        if case == "safetensors":  # one blob per file keys tensors by fqn: one chunk each
            s.tensors.pop("replicated.bias")
            s.tensors.pop("small.step")
            s.tensors.pop("small.mask")
        return s
    if case == "grid":
        s = Saved(4)
        shard_dim(s, "cols", po.random_tensor(g, torch.float32, (3, 8)), 1, 4)
        t = po.random_tensor(g, torch.float64, (4, 6))
        s.cut("grid2x2", t, [(2 * a + b, (2 * a, 3 * b), (2, 3)) for a in (0, 1) for b in (0, 1)])
        shard_dim(s, "cube", po.random_tensor(g, torch.int32, (2, 3, 8)), 2, 4)
        s.whole("norm", po.random_tensor(g, torch.float32, (3,)))
        return s
    if case == "uneven":
        s = Saved(8)
        fsdp_tp(s, "fsdp_tp", po.random_tensor(g, torch.float32, (10, 8)), 3, 2)
        fsdp_tp(s, "empty_rank", po.random_tensor(g, torch.bfloat16, (2, 6)), 3, 3)
        fsdp_tp(s, "long", po.random_tensor(g, torch.float16, (1001, 96)), 4, 2)
        t = po.random_tensor(g, torch.int16, (7, 5, 6))
        s.cut("cube", t, [(4 * a + 2 * b + c, (o0, o1, 3 * c), (n0, n1, 3))
                          for a, (_, o0, n0) in enumerate(rows(7, 2))
                          for b, (_, o1, n1) in enumerate(rows(5, 2)) for c in (0, 1)])
        s.whole("norm", po.random_tensor(g, torch.float32, (3,)))
        return s
    if case == "strided":
        s = Saved(1)
        base = po.random_tensor(g, torch.float32, (4, 6))
        s.whole("transposed", base.t())          # storage == numel: saved with its strides
        big = po.random_tensor(g, torch.int16, (8, 5))
        s.whole("rows_of_bigger", big[2:5])      # storage > numel: cloned by the loader
        s.whole("cols_of_bigger", big[:, 1:3])
        return s
    if case == "mixed":  # the fuzzer's: rows, a grid, a transpose, values, over 4 ranks
        s = Saved(4)
        shard0(s, "rows", po.random_tensor(g, torch.float32, (10, 3)), 4)
        t = po.random_tensor(g, torch.float64, (4, 6))
        s.cut("grid2x2", t, [(2 * a + b, (2 * a, 3 * b), (2, 3)) for a in (0, 1) for b in (0, 1)])
        s.whole("transposed", po.random_tensor(g, torch.int32, (4, 6)).t())
        s.value("epoch", 3)
        s.value("run_name", "run-1")
        return s
    if case == "many":
        s = Saved(2)
        for i in range(count):
            shard0(s, f"layer.{i}.weight", po.random_tensor(g, torch.float32, (i % 7 + 1, 3)), 2)
        return s
    if case == "big":
        s = Saved(2)
        for i in range(count):
            shard0(s, f"w{i}", po.random_tensor(g, torch.float32, (256, 256)), 2)
        return s
    raise SystemExit(f"unknown case {case}")


def cmd_gen(directory, case, seed, count):
    g = torch.Generator().manual_seed(seed)
    write_dcp(directory, gen_saved(case, g, count), layout="old" if case == "older" else "new",
              fmt="safetensors" if case == "safetensors" else "torch_save",
              enum_by_value=case == "py310")


# ---------------------------------------------------------------------------------------
# Reading back, on our own.
# ---------------------------------------------------------------------------------------


def _enum_member(cls, name):
    if cls not in (_MEM_FORMAT_ENCODING, MEM_FORMAT_ENCODING) or name not in cls.__members__:
        raise pickle.UnpicklingError(f"getattr({cls!r}, {name!r})")
    return cls[name]


def _layout(name):
    if name != "torch.strided":
        raise pickle.UnpicklingError(f"layout {name!r}")
    return torch.strided


READ_CLASSES = {
    (CP, "Metadata"): Metadata, (CP, "TensorStorageMetadata"): TensorStorageMetadata,
    (CP, "BytesStorageMetadata"): BytesStorageMetadata,
    (CP, "ChunkStorageMetadata"): ChunkStorageMetadata,
    (CP, "TensorProperties"): TensorProperties, (SHARD, "TensorProperties"): TensorProperties,
    (CP, "_MEM_FORMAT_ENCODING"): _MEM_FORMAT_ENCODING,
    (SHARD, "MEM_FORMAT_ENCODING"): MEM_FORMAT_ENCODING,
    (CP, "StorageMeta"): StorageMeta, (CP, "MetadataIndex"): MetadataIndex,
    (FS, "_StorageInfo"): _StorageInfo,
    ("torch", "Size"): torch.Size, ("torch", "strided"): torch.strided,
    ("torch.serialization", "_get_layout"): _layout,
    ("builtins", "getattr"): _enum_member,         # an Enum member since Python 3.11
    ("pathlib", "PosixPath"): pathlib.PosixPath,      # a path object, no file touched
}
READ_CLASSES.update({("torch", str(dt)[6:]): dt for dt in po.TYPES})


class MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        try:
            return READ_CLASSES[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"global {module}.{name} not allowed") from None


def read_metadata(directory):
    with open(os.path.join(directory, ".metadata"), "rb") as f:
        md = MetadataUnpickler(f).load()
    if not isinstance(md, Metadata):
        raise SystemExit(".metadata: not a Metadata")
    return md


def read_at(path, offset, length):
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(length)


def read_item(directory, info):
    """The item's file and its bytes (only those: a data file may be gigabytes)."""
    if os.path.basename(info.relative_path) != info.relative_path:
        raise SystemExit(f"relative_path {info.relative_path!r} outside the directory")
    path = os.path.join(directory, info.relative_path)
    if info.offset + info.length > os.path.getsize(path):
        raise SystemExit(f"{info.relative_path}: item past the end")
    return path, read_at(path, info.offset, info.length)


def load_chunk(directory, fqn, info):
    """A chunk: a torch.save archive (torch.load, weights_only), or a tensor of the
    safetensors blob at the item's offset (json + numpy)."""
    path, item = read_item(directory, info)
    if item[:2] == b"PK":
        return torch.load(io.BytesIO(item), weights_only=True)
    n = struct.unpack("<Q", read_at(path, info.offset, 8))[0]
    header = json.loads(read_at(path, info.offset + 8, n))
    h = header[fqn]
    np_types = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "BF16": np.int16,
                "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8,
                "U8": np.uint8, "BOOL": np.bool_}
    b, e = h["data_offsets"]
    base = info.offset + 8 + n
    arr = np.frombuffer(read_at(path, base + b, e - b),
                        dtype=np_types[h["dtype"]]).reshape(h["shape"])
    t = torch.from_numpy(arr.copy())
    return t.view(torch.bfloat16) if h["dtype"] == "BF16" else t


def load_value(item):
    try:
        return torch.load(io.BytesIO(item), weights_only=True)
    except pickle.UnpicklingError:  # torch 1.13 lacks BINFLOAT: our own file, see above
        return torch.load(io.BytesIO(item))


def assemble(directory):
    """{fqn: tensor or value} as DCP's load would give them, checked: chunks the metadata's
    dtype and sizes, inside the tensor, every element covered once."""
    md = read_metadata(directory)
    storage = md.storage_data
    out = {}
    for fqn, smd in md.state_dict_metadata.items():
        if isinstance(smd, BytesStorageMetadata):
            out[fqn] = load_value(read_item(directory, storage[MetadataIndex(fqn)])[1])
            continue
        dtype, size = smd.properties.dtype, tuple(smd.size)
        full = torch.zeros(size, dtype=dtype)
        cover = torch.zeros(size, dtype=torch.int32)
        for i, c in enumerate(smd.chunks):
            idx = MetadataIndex(fqn, c.offsets, i)
            if idx not in storage:
                raise SystemExit(f"{fqn}: chunk {i} has no storage_data entry")
            t = load_chunk(directory, fqn, storage[idx])
            if t.dtype != dtype or tuple(t.shape) != tuple(c.sizes):
                raise SystemExit(f"{fqn}: chunk {i} is {t.dtype} {tuple(t.shape)}, "
                                 f"metadata says {dtype} {tuple(c.sizes)}")
            dst, cov = full, cover
            for d, (o, n) in enumerate(zip(c.offsets, c.sizes)):
                if o + n > size[d]:
                    raise SystemExit(f"{fqn}: chunk {i} reaches past the tensor")
                dst, cov = dst.narrow(d, o, n), cov.narrow(d, o, n)
            dst.copy_(t)
            cov += 1
        if cover.numel() and not bool((cover == 1).all()):
            raise SystemExit(f"{fqn}: chunks do not cover the tensor exactly once")
        out[fqn] = full
    return out


def load_entries(directory):
    entries = []
    for fqn, obj in assemble(directory).items():
        po.flatten(obj, fqn, entries)
    return entries


def cmd_check(mount, directory):
    entries = load_entries(directory)
    co.check_mounted(mount, entries)
    print(f"ok {len(entries)} leaves")


def cmd_parse(directory):
    for e in load_entries(directory):
        print("\t".join([os.fsdecode(e.dirname), e.ms_type, co.shape_text(e.dims).decode(),
                         hashlib.sha256(e.out).hexdigest()[:16]]))


def cmd_fake_tree(directory, out):
    """The expected tree materialised (as ckpt_oracle.fake_tree), to test `check` itself."""
    root = os.fsencode(out)
    os.makedirs(root, exist_ok=True)
    open(os.path.join(root, b"snapshot_done"), "wb").close()
    for e in load_entries(directory):
        d = os.path.join(root, e.dirname)
        os.mkdir(d)
        for name, data in ((b"meta", e.meta), (b"out", e.out)):
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
        os.setxattr(d, b"user.ckptfs.name", e.tag)
        os.setxattr(d, b"user.ckptfs.type", e.ms_type.encode())
        os.setxattr(d, b"user.ckptfs.shape", co.shape_text(e.dims))


def cmd_same_as_safetensors(directory, st):
    """ST (read with json + numpy) holds exactly the DCP's tensors by name, shape and bytes.
    Numbers saved as byte items are not compared (whether they belong in a safetensors file
    is the converter's choice): names of ST that are no tensor of the DCP are an error, the
    DCP's numbers ST lacks are reported."""
    with open(st, "rb") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
        header = json.loads(fh.read(n))
        data = fh.read()
    header.pop("__metadata__", None)
    entries = {e.tag.decode(): e for e in load_entries(directory)}
    tensors = {k: e for k, e in entries.items() if e.ms_type not in ("int", "float", "bool")}
    numbers = sorted(set(entries) - set(tensors))
    missing, extra = sorted(set(tensors) - set(header)), sorted(set(header) - set(entries))
    if missing or extra:
        raise SystemExit(f"tensors missing {missing[:5]}, unexpected {extra[:5]}")
    for k, e in tensors.items():
        b, end = header[k]["data_offsets"]
        if header[k]["shape"] != e.dims or data[b:end] != e.out:
            raise SystemExit(f"tensor {k!r} differs")
    lacks = [k for k in numbers if k not in header]
    print(f"ok {len(tensors)} tensors" + (f"; numbers not in the file: {lacks}" if lacks else ""))


# ---------------------------------------------------------------------------------------
# Hostile directories: each prints a fragment of the one line ckptfs must refuse it with.
# ---------------------------------------------------------------------------------------

SENTINEL = "/tmp/ckptfs-dcp-oracle-executed"
FQN = "layer.weight"


def bad_base(d, fmt="torch_save"):
    """A good two-rank directory: FQN (4x3 float32) cut in two row chunks, and an int."""
    s = Saved(2)
    t = torch.arange(12, dtype=torch.float32).reshape(4, 3)
    shard0(s, FQN, t, 2)
    s.value("epoch", 1)
    return write_dcp(d, s, fmt=fmt)


def _chunk_key(meta, i=1):
    return MetadataIndex(FQN, meta.state_dict_metadata[FQN].chunks[i].offsets, i)


def _replace_item(d, meta, i, data):
    """Chunk i's item replaced by data, appended to its file (metadata rewritten)."""
    key = _chunk_key(meta, i)
    info = meta.storage_data[key]
    path = os.path.join(d, info.relative_path)
    at = os.path.getsize(path)
    with open(path, "ab") as f:
        f.write(data)
    meta.storage_data[key] = _StorageInfo(info.relative_path, at, len(data))
    dump_metadata(d, meta)


def bad_dir(d, case):
    meta = bad_base(d)
    chunks = meta.state_dict_metadata[FQN].chunks
    if case == "global":  # os.system("touch SENTINEL") if it were ever executed
        cmd = ("touch " + SENTINEL).encode()
        with open(os.path.join(d, ".metadata"), "wb") as f:
            f.write(b"\x80\x02cos\nsystem\nX" + struct.pack("<I", len(cmd)) + cmd + b"\x85R.")
        return "os.system"
    if case == "global_in_metadata":  # a class of the right module that PyTorch lacks
        data = dump_metadata(d, meta).replace(b"BytesStorageMetadata", b"BytesStorageMetaEvil")
        with open(os.path.join(d, ".metadata"), "wb") as f:
            f.write(data)
        return "BytesStorageMetaEvil"
    if case == "truncated":
        data = dump_metadata(d, meta)
        with open(os.path.join(d, ".metadata"), "wb") as f:
            f.write(data[:len(data) // 2])
        return ".metadata"
    if case == "no_storage_entry":
        del meta.storage_data[_chunk_key(meta)]
        dump_metadata(d, meta)
        return FQN
    if case in ("dotdot", "absolute", "symlink", "fifo"):
        key = _chunk_key(meta)
        info = meta.storage_data[key]
        src = os.path.join(d, info.relative_path)
        if case == "dotdot":
            os.rename(src, os.path.join(d, "..", "outside.distcp"))
            name = "../outside.distcp"
        elif case == "absolute":
            name = "/etc/passwd"
        elif case == "symlink":
            name = "link.distcp"
            os.symlink(info.relative_path, os.path.join(d, name))
        else:
            name = info.relative_path
            os.unlink(src)
            os.mkfifo(src)
        meta.storage_data[key] = _StorageInfo(name, info.offset, info.length)
        dump_metadata(d, meta)
        return name
    if case == "past_end":
        key = _chunk_key(meta)
        info = meta.storage_data[key]
        size = os.path.getsize(os.path.join(d, info.relative_path))
        meta.storage_data[key] = _StorageInfo(info.relative_path, info.offset,
                                              size - info.offset + 1)
        dump_metadata(d, meta)
        return info.relative_path
    if case in ("overlap", "gap"):
        # the second chunk (rows 2..3) moved up a row (rows 1..2 overlap the first) or its
        # sizes cut to one row (row 3 left uncovered)
        c = chunks[1]
        key = _chunk_key(meta)
        info = meta.storage_data.pop(key)
        if case == "overlap":
            chunks[1] = ChunkStorageMetadata(torch.Size([1, 0]), c.sizes)
            meta.storage_data[MetadataIndex(FQN, [1, 0], 1)] = info
        else:
            chunks[1] = ChunkStorageMetadata(c.offsets, torch.Size([1, 3]))
            meta.storage_data[key] = info
            _replace_item(d, meta, 1, torch_save_bytes(torch.zeros(1, 3)))
        dump_metadata(d, meta)
        return FQN
    if case == "chunk_dtype":
        _replace_item(d, meta, 1, torch_save_bytes(torch.zeros(2, 3, dtype=torch.float64)))
        return FQN
    if case == "chunk_shape":
        _replace_item(d, meta, 1, torch_save_bytes(torch.zeros(3, 2)))
        return FQN
    if case == "not_zip":
        _replace_item(d, meta, 1, bytes(200))
        return meta.storage_data[_chunk_key(meta)].relative_path
    if case == "size_overflow":
        smd = meta.state_dict_metadata[FQN]
        smd.size = torch.Size([2 ** 62, 2 ** 62])
        chunks[1] = ChunkStorageMetadata(torch.Size([2, 0]), torch.Size([2 ** 62 - 2, 2 ** 62]))
        info = meta.storage_data.pop(_chunk_key(meta))
        meta.storage_data[MetadataIndex(FQN, [2, 0], 1)] = info
        dump_metadata(d, meta)
        return FQN
    if case == "deep":
        # planner_data 100000 lists deep (5000 are read: an iterative unpickler needs no
        # recursion for them; this is deeper than a bounded stack holds): a protocol-2 pickle's (no frames; builtins not
        # renamed __builtin__) marker string replaced by EMPTY_LIST * 100000, APPEND * 99999
        # (pickle.dumps itself recurses too deep for this)
        meta.planner_data = "DEEPMARKER"
        data = pickle_with_stubs(meta, protocol=2, fix_imports=False)
        marker = b"X\x0a\x00\x00\x00DEEPMARKER"
        assert data.count(marker) == 1
        with open(os.path.join(d, ".metadata"), "wb") as f:
            f.write(data.replace(marker, b"]" * 100000 + b"a" * 99999))
        return "deeper than ckptfs allows"
    if case == "transform":
        key = _chunk_key(meta)
        info = meta.storage_data[key]
        meta.storage_data[key] = _StorageInfo(info.relative_path, info.offset, info.length,
                                              ["zstd"])
        dump_metadata(d, meta)
        return "transforms"
    if case == "uneven_last":  # columns cut 4 + 3: runs of two lengths, not interleaved
        for name in os.listdir(d):
            os.unlink(os.path.join(d, name))
        s = Saved(2)
        shard_dim(s, FQN, torch.arange(28, dtype=torch.float32).reshape(4, 7), 1, 2)
        write_dcp(d, s)
        return FQN
    if case == "st_sharding":  # a safetensors blob whose DCP_SHARDING_INFO names other rows
        for name in os.listdir(d):
            os.unlink(os.path.join(d, name))
        meta = bad_base(d, fmt="safetensors")
        key = _chunk_key(meta)
        info = meta.storage_data[key]
        path = os.path.join(d, info.relative_path)
        data = open(path, "rb").read()
        old = json.dumps({FQN: {"saved_offsets": [2, 0]}}).encode()
        new = json.dumps({FQN: {"saved_offsets": [0, 0]}}).encode()
        esc = lambda b: json.dumps(b.decode())[1:-1].encode()  # noqa: E731 (JSON in JSON)
        assert data.count(esc(old)) == 1
        with open(path, "wb") as f:
            f.write(data.replace(esc(old), esc(new)))
        return "DCP_SHARDING_INFO"
    raise SystemExit(f"unknown case {case}")


BAD_CASES = ["global", "global_in_metadata", "truncated", "no_storage_entry", "dotdot",
             "absolute", "symlink", "fifo", "past_end", "overlap", "gap", "chunk_dtype",
             "chunk_shape", "not_zip", "size_overflow", "deep", "transform", "st_sharding",
             "uneven_last"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("gen")
    p.add_argument("dir")
    p.add_argument("--case", required=True)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--count", type=int, default=2000)
    p = sub.add_parser("check")
    p.add_argument("mount")
    p.add_argument("dir")
    p = sub.add_parser("parse")
    p.add_argument("dir")
    p = sub.add_parser("same-as-safetensors")
    p.add_argument("dir")
    p.add_argument("st")
    p = sub.add_parser("fake-tree")
    p.add_argument("dir")
    p.add_argument("out")
    p = sub.add_parser("bad-all", help="each bad case (all by default) as DIR/bad-CASE; "
                       "prints CASE<TAB>message")
    p.add_argument("dir")
    p.add_argument("cases", nargs="*", metavar="CASE")
    sub.add_parser("bad-cases")
    a = ap.parse_args(argv)
    if a.cmd == "gen":
        cmd_gen(a.dir, a.case, a.seed, a.count)
    elif a.cmd == "check":
        cmd_check(a.mount, a.dir)
    elif a.cmd == "parse":
        cmd_parse(a.dir)
    elif a.cmd == "same-as-safetensors":
        cmd_same_as_safetensors(a.dir, a.st)
    elif a.cmd == "fake-tree":
        cmd_fake_tree(a.dir, a.out)
    elif a.cmd == "bad-all":  # one process: importing torch costs seconds
        unknown = sorted(set(a.cases) - set(BAD_CASES))
        if unknown:
            ap.error("no bad case %s" % ", ".join(unknown))
        for c in a.cases or BAD_CASES:
            print("%s\t%s" % (c, bad_dir(os.path.join(a.dir, "bad-" + c), c)))
    elif a.cmd == "bad-cases":
        print(" ".join(BAD_CASES))


if __name__ == "__main__":
    main()
