#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Independent test oracle for ckptfs's merged mount of a MindSpore distributed checkpoint
(`ckptfs -o strategy=STRATEGY_FILE DIST_DIR M`).

It shares no code with the C program.  The strategy file is decoded by the official protobuf
runtime (descriptors built at run time, like ckpt_oracle.py; no protoc), rank files are read
with ckpt_oracle's reference parser, and the merge follows MindSpore's own Python code:

  mindspore/python/mindspore/parallel/_tensor.py
      _get_tensor_strategy, _rank_to_coordinate, _convert_to_new_device_coordinate,
      _coordinate_to_rank, _get_tensor_slice_index   -> which slice a rank holds
      _chunk_tensor / _chunk_tensor_by_strategy, _load_tensor, _load_tensor_by_layout
                                                       -> `gen` (how a rank's slice is cut)
      _reshape_param_data                              -> `merge` (slices put back together)
      _extract_layout_item, _construct_tensor_layout_for_opt_shard
                                                       -> optimizer shard (both directions)
  mindspore/python/mindspore/parallel/_parallel_serialization.py
      _build_protobuf_strategy, _convert_to_list (stage-prefixed names), _extract_layout_map,
      _transform_parallel_checkpoint (opt-shard full shape, params absent from the strategy
      taken from rank `rank_id % device_num` = rank 0 for the merged model)
  mindspore/python/mindspore/train/serialization.py
      merge_sliced_parameter, _merge_param_with_strategy (evenness check, field, uneven
      param_split_shape)

`gen` cuts slices with the *load-side* functions (_load_tensor + _load_tensor_by_layout's
optimizer-shard split) while `merge` reassembles with the *merge-side* functions
(_reshape_param_data on the layout _construct_tensor_layout_for_opt_shard builds), so the
self-check gen -> merge == full model exercises two different MindSpore code paths.

    /usr/bin/python3 dist_oracle.py parse STRATEGY              (JSON on stdout)
    /usr/bin/python3 dist_oracle.py gen OUT_DIR --ranks N --case CASE [--seed S]
                                        [--format ckpt|safetensors]   (format of the ranks)
    /usr/bin/python3 dist_oracle.py merge STRATEGY DIST_DIR OUT_TREE [--strict-replicas]
    /usr/bin/python3 dist_oracle.py tree CKPT OUT_TREE          (expected tree of one plain
                                                                 checkpoint, .ckpt or
                                                                 .safetensors: meta/out/
                                                                 snapshot_done)
    /usr/bin/python3 dist_oracle.py strategy OUT --dev D1[,D2..] NAME=TMAP[:STEP:SIZE] ...
                                                                (a ParallelStrategyMap as
                                                                 MindSpore writes it; TMAP
                                                                 like 0,-1)
    /usr/bin/python3 dist_oracle.py bad-strategy OUT --case C   (a strategy `parse` refuses)
    /usr/bin/python3 dist_oracle.py bad-dist OUT_DIR --case C   (a tp2 set `merge` refuses)

Merge rules (what the mount must do):
* Ranks: DIST_DIR/rank_<id>/ for id 0..prod(dev_matrix)-1, each with exactly one checkpoint
  file, *.ckpt or *.safetensors (MindSpore's save_checkpoint(format="safetensors"));
  a missing rank, a rank beyond the device count, or zero/several checkpoint files: refused.
  A .safetensors rank's types are its dtypes (F32...): a set mixing the two formats
  therefore disagrees on every parameter's type; packed sub-byte dtypes cannot be split.
  Every rank must hold the same parameter names.
* Every parameter the strategy names (without its '<stage>-' prefix) must be one rank 0
  holds: a strategy naming others is another run's (or model's) and is refused, naming
  the first such parameter (strategy file order) and rank_0.
* A parameter in the strategy (name looked up without a '<stage>-' prefix): every rank
  must have the same type and the same local shape (MindSpore's even split), the
  tensor_map one entry per dimension; full shape = local * split per dimension (and * the
  optimizer shard size on dim 0).  A slice held by several ranks (replicas) is taken from
  the lowest rank; --strict-replicas refuses replicas whose bytes differ.  A parameter
  whose tensor_map is all -1 is therefore rank 0's copy, shapes agreeing across ranks.
* A parameter absent from the strategy: rank 0's tensor as stored.
* Refused as unsupported: field != 0, a non-empty param_split_shape (uneven split),
  pipeline strategies (any stage other than 0), map tensors.
* The strategy parse skips unknown fields (like MindSpore's protobuf runtime) but refuses a
  missing required field, no layout item, dev_matrix/tensor_map count != 1, dev_matrix
  dims < 1, tensor_map values outside [-1, len(dev_matrix)-1] or naming one axis twice,
  negative field/step, size < -1, size -1 with step 0, step != model-parallel shard count
  or step*size not dividing the device count (opt shard on), duplicate names, and a '-' in
  a name that is not '<digits>-<name without ->'.

Exit status: 0 success; 1 refused (one line on stderr) or usage error.
"""

import argparse
import json
import os
import re
import sys

import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckpt_oracle as co  # noqa: E402  (checkpoint reader/writer, meta text, dir names)
import safetensors_oracle as st  # noqa: E402  (.safetensors ranks: reader and writer)

# ---------------------------------------------------------------------------------------
# node_strategy.proto (package mindspore.straspb, proto2), as decoded in SOURCES.md.
# Dims are declared int64 (wire-compatible with MindSpore's int32/int64/uint32 varints;
# the oracle range-checks them itself).
# ---------------------------------------------------------------------------------------

_F = descriptor_pb2.FieldDescriptorProto
_OPT, _REQ, _REP = _F.LABEL_OPTIONAL, _F.LABEL_REQUIRED, _F.LABEL_REPEATED
_PKG = "mindspore.straspb"


def _strategy_file():
    fdp = descriptor_pb2.FileDescriptorProto(name="node_strategy.proto", package=_PKG, syntax="proto2")
    add = co._add_field
    m = fdp.message_type.add(name="ParallelStrategy")
    add(m, "dim", 1, _REP, _F.TYPE_UINT32)
    m = fdp.message_type.add(name="ParallelStrategys")
    add(m, "stage", 1, _REQ, _F.TYPE_UINT32)
    add(m, "parallel_strategy", 2, _REP, _F.TYPE_MESSAGE, f".{_PKG}.ParallelStrategy")
    m = fdp.message_type.add(name="ParallelStrategyItem")
    add(m, "node_name", 1, _REQ, _F.TYPE_STRING)
    add(m, "parallel_strategys", 2, _REQ, _F.TYPE_MESSAGE, f".{_PKG}.ParallelStrategys")
    for name in ("DevMatrix", "TensorMap", "ParamSplitShape", "IndicesOffset"):
        m = fdp.message_type.add(name=name)
        add(m, "dim", 1, _REP, _F.TYPE_INT64)
    m = fdp.message_type.add(name="ParallelLayouts")
    add(m, "dev_matrix", 1, _REP, _F.TYPE_MESSAGE, f".{_PKG}.DevMatrix")
    add(m, "tensor_map", 2, _REP, _F.TYPE_MESSAGE, f".{_PKG}.TensorMap")
    add(m, "param_split_shape", 3, _REP, _F.TYPE_MESSAGE, f".{_PKG}.ParamSplitShape")
    add(m, "indices_offset", 4, _REP, _F.TYPE_MESSAGE, f".{_PKG}.IndicesOffset")
    add(m, "field", 5, _REQ, _F.TYPE_INT32)
    add(m, "opt_weight_shard_step", 6, _REQ, _F.TYPE_INT32)
    add(m, "opt_weight_shard_size", 7, _REQ, _F.TYPE_INT32)
    m = fdp.message_type.add(name="ParallelLayoutItem")
    add(m, "param_name", 1, _REQ, _F.TYPE_STRING)
    add(m, "parallel_layouts", 2, _REQ, _F.TYPE_MESSAGE, f".{_PKG}.ParallelLayouts")
    m = fdp.message_type.add(name="ParallelStrategyMap")
    add(m, "current_stage", 1, _REQ, _F.TYPE_UINT32)
    add(m, "parallel_strategy_item", 2, _REP, _F.TYPE_MESSAGE, f".{_PKG}.ParallelStrategyItem")
    add(m, "parallel_layout_item", 3, _REP, _F.TYPE_MESSAGE, f".{_PKG}.ParallelLayoutItem")
    return fdp


_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_strategy_file())


def _cls(name):
    desc = _POOL.FindMessageTypeByName(f"{_PKG}.{name}")
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(desc)
    return message_factory.MessageFactory(_POOL).GetPrototype(desc)


ParallelStrategyMap = _cls("ParallelStrategyMap")


class Refused(Exception):
    pass


# ---------------------------------------------------------------------------------------
# Layout arithmetic (mindspore/python/mindspore/parallel/_tensor.py).
# ---------------------------------------------------------------------------------------


def tensor_strategy(dev_mat, tensor_map):
    """_get_tensor_strategy: tensor_map value k means dev_mat[len-1-k]; -1 means not split."""
    return [1 if k == -1 else dev_mat[-k - 1] for k in tensor_map]


def rank_to_coordinate(rank, dev_mat):
    """_rank_to_coordinate: row-major (last device dimension varies fastest)."""
    coord = [0] * len(dev_mat)
    for i in range(len(dev_mat) - 1, -1, -1):
        coord[i] = rank % dev_mat[i]
        rank //= dev_mat[i]
    return coord


def tensor_slice_index(dev_mat, strategy, tensor_map, rank):
    """_get_tensor_slice_index = _convert_to_new_device_coordinate + _coordinate_to_rank:
    the row-major index of the rank's slice in the grid of `strategy` blocks."""
    coord = rank_to_coordinate(rank, dev_mat)
    new = [0 if k == -1 else coord[len(coord) - 1 - k] for k in tensor_map]
    index, size = 0, 1
    for c, s in zip(reversed(new), reversed(strategy)):
        index += size * c
        size *= s
    return index


def chunk_tensor(arr, strategy):
    """_chunk_tensor_by_strategy: recursive np.split, dim 0 outermost -> row-major blocks."""
    if len(strategy) != arr.ndim:
        raise Refused(f"tensor_map has {len(strategy)} entries for a {arr.ndim}-d tensor")

    def rec(a, depth):
        axis = a.ndim - depth
        s = strategy[axis]
        if a.shape[axis] % s:
            raise Refused(f"dimension {axis} of size {a.shape[axis]} is not divisible by its split {s}")
        parts = np.split(a, s, axis)
        if depth == 1:
            return parts
        return [p for part in parts for p in rec(part, depth - 1)]

    return rec(arr, arr.ndim) if arr.ndim else [arr]


def reshape_param_data(slices_by_rank, dev_mat, tensor_map, name=""):
    """_reshape_param_data: put each rank's slice at its slice index, then concatenate the
    row-major block grid back, innermost tensor dimension first.  MindSpore overwrites a slot
    for every replica (the last rank wins); the oracle keeps the *first* (lowest) rank, which
    is what transform_checkpoints delivers for destination rank 0 (its all-gather groups run
    along the split device axes at replica coordinate 0).  Real replicas are byte-identical;
    see --strict-replicas."""
    strategy = tensor_strategy(dev_mat, tensor_map)
    count = int(np.prod(strategy)) if strategy else 1
    blocks, source = [None] * count, [None] * count
    for rank, arr in enumerate(slices_by_rank):
        idx = tensor_slice_index(dev_mat, strategy, tensor_map, rank)
        if blocks[idx] is None:
            blocks[idx], source[idx] = arr, rank
        elif REPLICA_CHECK and blocks[idx].tobytes() != arr.tobytes():
            raise Refused(f"{name}: replicas disagree: rank {source[idx]} and rank {rank} hold different "
                          f"data for slice {idx}")
    n = len(strategy)
    for i in range(n):
        s = strategy[n - 1 - i]
        blocks = [np.concatenate(blocks[j * s:(j + 1) * s], axis=n - 1 - i) for j in range(len(blocks) // s)]
    return blocks[0]


REPLICA_CHECK = False


def opt_shard_layout(dev_mat, tensor_map, step, size, full_shape):
    """_construct_tensor_layout_for_opt_shard: the optimizer shard further splits the rank's
    model-parallel slice along dim 0.  Expressed as an ordinary layout on the full tensor
    reshaped to [s0, full0/s0, full1, ...]: dev_matrix [repeat?, size, s0, s1, ...],
    tensor_map [m0, L, m1, ...] (m_i = L-1-i if s_i > 1 else -1).  So rank r holds model-
    parallel block (r % step) in row-major order over the strategy s, and the
    ((r // step) % size)-th dim-0 chunk of that block; r // (step*size) is a replica index."""
    strategy = tensor_strategy(dev_mat, tensor_map)
    L = len(strategy)
    new_dev = list(strategy)
    new_map = [-1 if v == 1 else L - 1 - i for i, v in enumerate(strategy)]
    new_map.insert(1, L)
    new_dev.insert(0, size)
    repeat = int(np.prod(dev_mat)) // (step * size)
    if repeat > 1:
        new_dev.insert(0, repeat)
    new_shape = list(full_shape)
    new_shape[0] = strategy[0]
    new_shape.insert(1, full_shape[0] // strategy[0])
    return new_dev, new_map, new_shape


# ---------------------------------------------------------------------------------------
# Strategy file.
# ---------------------------------------------------------------------------------------

STAGE_RE = re.compile(r"^([0-9]+)-(.*)$")


def parse_strategy(path):
    """Decode and validate; returns (current_stage, {param_name: layout dict}) in file order."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise Refused(f"cannot read strategy: {exc.strerror}") from None
    if not data:  # _check_strategy_file
        raise Refused("strategy file is empty")
    msg = ParallelStrategyMap()
    try:
        msg.ParseFromString(data)  # proto2: missing required fields raise too
    except Exception as exc:  # noqa: BLE001 - DecodeError, RuntimeWarning...
        raise Refused(f"not a ParallelStrategyMap: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    if not msg.IsInitialized():  # proto2 required fields (the Python runtime parses without them)
        raise Refused(f"not a ParallelStrategyMap: missing {', '.join(msg.FindInitializationErrors()[:3])}")
    # Unknown fields (a newer MindSpore's additions) are skipped, as MindSpore's own protobuf
    # runtime skips them; a known field with the wrong wire type counts as unknown too.
    if not msg.parallel_layout_item:  # _build_protobuf_strategy
        raise Refused("strategy has no parallel_layout_item")
    layouts = {}
    for item in msg.parallel_layout_item:
        name = item.param_name
        lay = item.parallel_layouts
        if name in layouts:
            raise Refused(f"{name!r}: duplicate parallel_layout_item")
        if len(lay.dev_matrix) != 1 or len(lay.tensor_map) != 1:
            raise Refused(f"{name!r}: {len(lay.dev_matrix)} dev_matrix and {len(lay.tensor_map)} tensor_map "
                          "entries (want exactly one each)")
        if len(lay.param_split_shape) > 1 or len(lay.indices_offset) > 1:
            raise Refused(f"{name!r}: more than one param_split_shape/indices_offset")
        dev = list(lay.dev_matrix[0].dim)
        tmap = list(lay.tensor_map[0].dim)
        if not dev or any(d < 1 or d > 2 ** 31 - 1 for d in dev):
            raise Refused(f"{name!r}: bad dev_matrix {dev}")
        if any(k < -1 or k >= len(dev) for k in tmap):
            raise Refused(f"{name!r}: tensor_map {tmap} refers outside dev_matrix {dev}")
        used = [k for k in tmap if k != -1]
        if len(used) != len(set(used)):
            raise Refused(f"{name!r}: tensor_map {tmap} uses a device dimension twice")
        split = list(lay.param_split_shape[0].dim) if lay.param_split_shape else []
        offs = list(lay.indices_offset[0].dim) if lay.indices_offset else []
        field, step, size = lay.field, lay.opt_weight_shard_step, lay.opt_weight_shard_size
        if field < 0 or step < 0 or size < -1:
            raise Refused(f"{name!r}: negative field/opt_weight_shard_step/opt_weight_shard_size "
                          f"({field}/{step}/{size})")
        ndev = int(np.prod(dev))
        if size == -1:  # _extract_layout_item
            if step == 0:
                raise Refused(f"{name!r}: opt_weight_shard_size -1 with opt_weight_shard_step 0")
            size = ndev // step
        if step and size:  # _construct_tensor_layout_for_opt_shard's preconditions
            mp = int(np.prod(tensor_strategy(dev, tmap))) if tmap else 1
            if step != mp:
                raise Refused(f"{name!r}: opt_weight_shard_step {step} is not the model parallel "
                              f"shard count {mp}")
            if ndev % (step * size):
                raise Refused(f"{name!r}: opt shard {step}x{size} does not divide {ndev} devices")
        stage, origin = 0, name
        if "-" in name:  # _convert_to_list: "<stage>-<name>" in merged pipeline strategies
            m = STAGE_RE.match(name)
            if not m or "-" in m.group(2):
                raise Refused(f"{name!r}: '-' in a name that is not '<stage>-<name>'")
            stage, origin = int(m.group(1)), m.group(2)
        layouts[name] = {"dev_matrix": dev, "tensor_map": tmap, "param_split_shape": split,
                         "indices_offset": offs, "field": field, "opt_weight_shard_step": step,
                         "opt_weight_shard_size": lay.opt_weight_shard_size,
                         "opt_shard_size_resolved": size, "stage": stage, "name": origin}
    return msg.current_stage, layouts


def layout_map(layouts):
    """_convert_to_list(strategy, rank_id=None): key by the name without its stage prefix;
    when several stages list a parameter the lowest stage's layout wins."""
    out = {}
    for lay in layouts.values():
        cur = out.get(lay["name"])
        if cur is None or lay["stage"] < cur["stage"]:
            stages = (cur["stages"] if cur else []) + [lay["stage"]]
            out[lay["name"]] = dict(lay, stages=stages)
        else:
            cur["stages"].append(lay["stage"])
    return out


def cmd_parse(path):
    current, layouts = parse_strategy(path)
    doc = {}
    for name, lay in layouts.items():
        doc[name] = {k: lay[k] for k in ("dev_matrix", "tensor_map", "field", "opt_weight_shard_step",
                                         "opt_weight_shard_size", "param_split_shape", "stage", "name")}
    sys.stdout.write(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")


# ---------------------------------------------------------------------------------------
# Writing strategy files (as MindSpore writes them).
# ---------------------------------------------------------------------------------------


def strategy_bytes(params, stage=0, current_stage=1):
    """params: [(name, dev, tmap, step, size)].  One ParallelStrategyItem per parameter
    (`<Op>_<name>`, stage, one ParallelStrategy per input) and one ParallelLayoutItem with
    empty param_split_shape/indices_offset sub-messages and field 0."""
    msg = ParallelStrategyMap(current_stage=current_stage)
    for name, dev, tmap, step, size in params:
        item = msg.parallel_strategy_item.add(node_name=f"MatMul_{name}")
        item.parallel_strategys.stage = stage
        item.parallel_strategys.parallel_strategy.add(dim=tensor_strategy(dev, tmap))
        lay = msg.parallel_layout_item.add(param_name=name).parallel_layouts
        lay.dev_matrix.add(dim=dev)
        lay.tensor_map.add(dim=tmap)
        lay.param_split_shape.add()
        lay.indices_offset.add()
        lay.field = 0
        lay.opt_weight_shard_step = step
        lay.opt_weight_shard_size = size
    return msg.SerializeToString()


def cmd_strategy(out, dev, specs):
    """`strategy OUT --dev 2 NAME=0,-1 NAME2=-1,0:STEP:SIZE ...`: a hand-derived strategy
    (e.g. for rank files whose own run's strategy is not at hand)."""
    try:
        dev = [int(d) for d in dev.split(",")]
    except ValueError:
        raise SystemExit(f"--dev {dev!r}: want integers like 2 or 2,2") from None
    params = []
    for spec in specs:
        name, eq, rest = spec.rpartition("=")
        if not eq or not name:
            raise SystemExit(f"{spec!r}: want NAME=TMAP[:STEP:SIZE]")
        tmap, *opt = rest.split(":")
        if len(opt) not in (0, 2):
            raise SystemExit(f"{spec!r}: the optimizer shard is :STEP:SIZE")
        try:
            tmap = [int(k) for k in tmap.split(",")] if tmap else []
            step, size = (int(opt[0]), int(opt[1])) if opt else (0, 0)
        except ValueError:
            raise SystemExit(f"{spec!r}: TMAP, STEP and SIZE are integers") from None
        params.append((name, dev, tmap, step, size))
    co.write_file(out, [strategy_bytes(params)])


# ---------------------------------------------------------------------------------------
# gen: a full model, its strategy, and each rank's slice.
# ---------------------------------------------------------------------------------------

# (name, type, full shape, tensor_map or None = absent from the strategy, opt step, opt size)
CASES = {
    "tp2": ([2], [
        ("model.embed.weight", "Float16", [16, 6], [-1, -1], 0, 0),       # replicated
        ("model.layers.0.wq.weight", "Float32", [8, 6], [0, -1], 0, 0),   # dim 0
        ("model.layers.0.wo.weight", "Float16", [6, 8], [-1, 0], 0, 0),   # dim 1
        ("model.layers.0.conv.weight", "Float32", [3, 4, 5], [-1, 0, -1], 0, 0),  # middle dim
        ("model.layers.0.bias", "Int32", [8], [0], 0, 0),                 # 1-D split
        ("model.layers.0.norm.weight", "Float32", [6], [-1], 0, 0),       # 1-D replicated
        ("global_step", "Int32", [1], None, 0, 0),                        # not in the strategy
        ("learning_rate", "Float32", [], None, 0, 0),                     # scalar, not in it
    ]),
    "tp4x2": ([2, 2], [
        ("net.both.weight", "Float32", [8, 6], [1, 0], 0, 0),             # two dims
        ("net.both_t.weight", "Float16", [6, 8], [0, 1], 0, 0),           # two dims, swapped axes
        ("net.outer.weight", "Int32", [8, 4], [1, -1], 0, 0),             # dim 0 on outer axis, 2 replicas
        ("net.inner.weight", "Float32", [4, 8], [-1, 0], 0, 0),           # dim 1 on inner axis, 2 replicas
        ("net.mid.weight", "Float16", [2, 4, 6], [-1, 1, 0], 0, 0),       # middle + last dims
        ("net.vec", "Float32", [8], [0], 0, 0),                           # 1-D, 2 replicas
        ("net.norm", "Float32", [5], [-1], 0, 0),                         # replicated x4
        ("net.emb", "Float16", [4, 3, 2], [-1, -1, -1], 0, 0),            # 3-D replicated
        ("global_step", "Int32", [1], None, 0, 0),
    ]),
    # dev_matrix [2,2] with the parallel optimizer (opt_weight_shard_step = model-parallel
    # shard count, as _construct_tensor_layout_for_opt_shard requires).
    "optshard": ([2, 2], [
        ("opt.rows.weight", "Float32", [8, 6], [0, -1], 2, 2),            # mp dim 0 x opt 2
        ("opt.cols.weight", "Float16", [6, 4], [-1, 0], 2, 2),            # mp dim 1, opt dim 0
        ("opt.dp.weight", "Float32", [8, 3], [-1, -1], 1, -1),            # pure opt shard, size -1 -> 4
        ("opt.rep.weight", "Int32", [6, 3], [-1, -1], 1, 2),              # opt 2 x 2 replicas
        ("opt.vec", "Float32", [8], [0], 2, 2),                           # 1-D
        ("opt.none.weight", "Float32", [4, 6], [1, 0], 0, 0),             # no opt shard
        ("global_step", "Int32", [1], None, 0, 0),
    ]),
}


def local_slice(full, dev, tmap, step, size, rank):
    """What rank `rank` saves: _load_tensor (model-parallel slice by _get_tensor_slice_index
    over the *original* dev_matrix) then, with an optimizer shard, _load_tensor_by_layout's
    np.split(slice, group_size)[rank_in_group], the group being the ranks that share the
    model-parallel slice inside this rank's block of step*size ranks, spaced `step` apart."""
    strategy = tensor_strategy(dev, tmap)
    idx = tensor_slice_index(dev, strategy, tmap, rank)
    part = chunk_tensor(full, strategy)[idx]
    if step and size:
        if idx != rank % step:
            raise Refused(f"layout {dev}/{tmap}: slice {idx} of rank {rank} is not rank % step "
                          "(MindSpore's opt-shard transform assumes it)")
        base = rank - rank % (step * size) + rank % step
        group = [base + k * step for k in range(size)]
        if part.shape[0] % size:
            raise Refused(f"dimension 0 of size {part.shape[0]} is not divisible by opt shard {size}")
        part = np.split(part, size)[group.index(rank)]
    return part


def random_array(rng, ms_type, dims):
    return np.frombuffer(co.random_tensor(rng, ms_type, dims), dtype=co.MS_TYPES[ms_type][2]).reshape(dims)


# MindSpore type -> safetensors dtype, for `gen --format safetensors`
ST_DTYPES = {"Float16": "F16", "Float32": "F32", "Float64": "F64", "BFloat16": "BF16",
             "Int8": "I8", "Int16": "I16", "Int32": "I32", "Int64": "I64", "UInt8": "U8",
             "UInt16": "U16", "UInt32": "U32", "UInt64": "U64", "Bool": "BOOL",
             "Complex64": "C64"}


def cmd_gen(out_dir, ranks, case, seed, fmt="ckpt"):
    dev, specs = CASES[case]
    if int(np.prod(dev)) != ranks:
        raise Refused(f"case {case} needs --ranks {int(np.prod(dev))}")
    rng = np.random.default_rng(seed)
    fulls = [(name, t, dims, random_array(rng, t, dims), tmap, step, size)
             for name, t, dims, tmap, step, size in specs]
    os.makedirs(out_dir, exist_ok=True)
    co.write_file(os.path.join(out_dir, "full.ckpt"),
                  [co.record(co.tensor_value(n, t, d, a.tobytes())) for n, t, d, a, *_ in fulls])
    with open(os.path.join(out_dir, "strategy.ckpt"), "wb") as f:
        f.write(strategy_bytes([(n, list(dev), tmap, step, size)
                                for n, _t, _d, _a, tmap, step, size in fulls if tmap is not None]))
    for rank in range(ranks):
        d = os.path.join(out_dir, "dist", f"rank_{rank}")
        os.makedirs(d, exist_ok=True)
        parts = []
        for n, t, dims, arr, tmap, step, size in fulls:
            if tmap is None:
                part = arr
            else:
                if step and size == -1:
                    size = ranks // step
                part = local_slice(arr, dev, tmap, step, size, rank)
            parts.append((n, t, list(part.shape), np.ascontiguousarray(part).tobytes()))
        if fmt == "safetensors":
            data = st.serialize([(n, ST_DTYPES[t], shape, b) for n, t, shape, b in parts])
            co.write_file(os.path.join(d, f"checkpoint_{rank}.safetensors"), [data])
        else:
            co.write_file(os.path.join(d, f"checkpoint_{rank}.ckpt"),
                          [co.record(co.tensor_value(*p)) for p in parts])


# ---------------------------------------------------------------------------------------
# merge.
# ---------------------------------------------------------------------------------------

RANK_RE = re.compile(r"^rank_(0|[1-9][0-9]*)$")


def read_ranks(dist_dir, device_num):
    """rank_<id>/ directories, each with exactly one *.ckpt or *.safetensors
    (transform_checkpoints' layout).
    Returns [ {name: Entry} in file order ] indexed by rank."""
    try:
        names = os.listdir(dist_dir)
    except OSError as exc:
        raise Refused(f"cannot list {dist_dir}: {exc.strerror}") from None
    found = {}
    for n in names:
        m = RANK_RE.match(n)
        if m and os.path.isdir(os.path.join(dist_dir, n)):
            found[int(m.group(1))] = os.path.join(dist_dir, n)
    missing = [r for r in range(device_num) if r not in found]
    if missing:
        raise Refused(f"rank_{missing[0]} missing ({device_num} ranks expected)")
    extra = sorted(r for r in found if r >= device_num)
    if extra:
        raise Refused(f"rank_{extra[0]} beyond the strategy's {device_num} devices")
    ranks = []
    for r in range(device_num):
        ckpts = sorted(n for n in os.listdir(found[r]) if n.endswith((".ckpt", ".safetensors")))
        if len(ckpts) != 1:
            raise Refused(f"rank_{r} holds {len(ckpts)} checkpoint files (.ckpt, .safetensors; "
                          "want exactly one)")
        try:
            entries = load_entries(os.path.join(found[r], ckpts[0]))
        except co.Refused as exc:
            raise Refused(f"rank_{r}/{ckpts[0]}: {exc}") from None
        table = {}
        for e in entries:
            if e.part is not None:
                raise Refused(f"rank_{r}/{ckpts[0]}: map tensor {e.tag!r} cannot be merged")
            table[e.tag] = e
        ranks.append(table)
    return ranks


def load_entries(path):
    """The tensors of one .ckpt (ckpt_oracle) or .safetensors (safetensors_oracle) file."""
    if path.endswith(".safetensors"):
        return st.load_reference(path).entries
    return co.load_reference(path)[0]


def entry_types(e):
    """(numpy dtype to slice it with, or None when it cannot be; OneFlow type) of an entry."""
    if isinstance(e, st.Entry):
        _bits, of_type, np_type, kind = st.MAPPING[e.ms_type]
        return (np_type if kind == "num" else None), of_type
    of_type, _size, np_type = co.MS_TYPES.get(e.ms_type, (None, None, None))
    return (None if e.ms_type == "Int4" else np_type), of_type


def merge_param(name, entries, lay):
    """One parameter from all ranks -> (dims, bytes) of the merged tensor."""
    types = {e.ms_type for e in entries}
    if len(types) != 1:
        r = next(i for i, e in enumerate(entries) if e.ms_type != entries[0].ms_type)
        raise Refused(f"{name}: rank_{r} holds {entries[r].ms_type}, rank_0 {entries[0].ms_type}")
    ms_type = entries[0].ms_type
    np_type, of_type = entry_types(entries[0])
    if np_type is None:
        raise Refused(f"{name}: type {ms_type} cannot be merged")
    shapes = {tuple(e.dims) for e in entries}
    dev, tmap = lay["dev_matrix"], lay["tensor_map"]
    step, size = lay["opt_weight_shard_step"], lay["opt_shard_size_resolved"]
    strategy = tensor_strategy(dev, tmap)
    opt = bool(step and size)
    replicated = all(s == 1 for s in strategy) and not opt
    if len(shapes) != 1:  # merge_sliced_parameter: is_even, and transform needs one shape
        what = "replicated" if replicated else "sliced"
        r = next(i for i, e in enumerate(entries) if list(e.dims) != list(entries[0].dims))
        raise Refused(f"{name}: rank_{r} holds a {what} parameter of shape "
                      f"{list(entries[r].dims)}, rank_0 {list(entries[0].dims)}")
    if lay["field"]:
        raise Refused(f"{name}: field {lay['field']} (_reshape_param_data_with_weight) is not supported")
    if lay["param_split_shape"]:
        raise Refused(f"{name}: uneven split (param_split_shape {lay['param_split_shape']}) is not supported")
    local = list(entries[0].dims)
    if len(tmap) != len(local):  # _construct_from_to_tensor_layout
        raise Refused(f"{name}: tensor_map {tmap} has {len(tmap)} entries, the tensor has {len(local)} dims")
    full = [d * s for d, s in zip(local, strategy)]
    arrays = [np.frombuffer(e.out, dtype=np_type).reshape(local) for e in entries]
    if opt:
        if not full:
            raise Refused(f"{name}: optimizer shard of a 0-d tensor")
        full[0] *= size  # _transform_parallel_checkpoint: origin_tensor_shape
        new_dev, new_map, new_shape = opt_shard_layout(dev, tmap, step, size, full)
        new_local = [d // s for d, s in zip(new_shape, tensor_strategy(new_dev, new_map))]
        merged = reshape_param_data([a.reshape(new_local) for a in arrays], new_dev, new_map, name).reshape(full)
    else:
        merged = reshape_param_data(arrays, dev, tmap, name)
    assert list(merged.shape) == full
    return of_type, full, np.ascontiguousarray(merged).tobytes()


def merge(strategy_path, dist_dir):
    """Returns the expected tree as [(tag bytes, OneFlow type, dims, out bytes)] in rank 0
    order."""
    _current, layouts = parse_strategy(strategy_path)
    lmap = layout_map(layouts)
    stages = sorted({lay["stage"] for lay in layouts.values()})
    if stages != [0]:
        raise Refused(f"pipeline strategy (stages {stages}) is not supported by the oracle")
    devnums = {int(np.prod(lay["dev_matrix"])) for lay in lmap.values()}
    if len(devnums) != 1:  # _get_device_num_from_strategy takes the first; one stage = one count
        raise Refused(f"layouts disagree on the device count ({sorted(devnums)})")
    device_num = devnums.pop()
    ranks = read_ranks(dist_dir, device_num)
    names0 = list(ranks[0])
    for r, table in enumerate(ranks[1:], 1):
        if set(table) != set(names0):
            diff = sorted(set(table) ^ set(names0))[0]
            raise Refused(f"rank_{r} and rank_0 hold different parameters (e.g. "
                          f"{diff.decode('utf-8', 'surrogateescape')!r})")
    # A strategy naming parameters the ranks lack is from another run (or another model):
    # merging it would silently apply layouts that describe none of these tensors.
    have = {t.decode("utf-8", "surrogateescape") for t in names0}
    for name in lmap:  # file order of the strategy (lowest stage's entry)
        if name not in have:
            raise Refused(f"strategy names {name!r} but rank_0 has no such parameter")
    out = []
    for tag in names0:
        name = tag.decode("utf-8", "surrogateescape")
        lay = lmap.get(name)
        if lay is None:  # not in the strategy: rank 0's copy as stored
            e = ranks[0][tag]
            out.append((tag, entry_types(e)[1], e.dims, e.out))
            continue
        out.append((tag, *merge_param(name, [t[tag] for t in ranks], lay)))
    return out


def write_tree(out_tree, items):
    root = os.fsencode(out_tree)
    os.makedirs(root, exist_ok=True)
    for tag, of_type, dims, data in items:
        if of_type is None:
            raise Refused(f"{tag!r}: its type has no OneFlow meta in this oracle")
        d = os.path.join(root, co.dir_name(tag))
        os.mkdir(d)
        co.write_file(os.path.join(d, b"meta"), [co.meta_bytes(dims, of_type)])
        co.write_file(os.path.join(d, b"out"), [data])
    co.write_file(os.path.join(root, b"snapshot_done"), [])


def cmd_tree(ckpt, out_tree):
    try:
        entries = load_entries(ckpt)
    except co.Refused as exc:
        raise Refused(str(exc)) from None
    write_tree(out_tree, [(e.tag, entry_types(e)[1], e.dims, e.out) for e in entries
                          if e.part is None])


# ---------------------------------------------------------------------------------------
# Malformed inputs.
# ---------------------------------------------------------------------------------------

GOOD = [("a.weight", [2], [0, -1], 0, 0), ("b.weight", [2], [-1, 0], 0, 0)]


def _layout_msg(name, dev, tmap, step=0, size=0, field=0):
    msg = ParallelStrategyMap(current_stage=1)
    lay = msg.parallel_layout_item.add(param_name=name).parallel_layouts
    lay.dev_matrix.add(dim=dev)
    lay.tensor_map.add(dim=tmap)
    lay.param_split_shape.add()
    lay.indices_offset.add()
    lay.field, lay.opt_weight_shard_step, lay.opt_weight_shard_size = field, step, size
    return msg


def bad_strategy(case):
    good = strategy_bytes(GOOD)
    simple = {
        "empty": b"",
        "truncated": good[:len(good) - 3],
        "garbage": b"\xff" * 16,
        "checkpoint": co.record(co.tensor_value("x", "Float32", [2], b"\0" * 8)),
        "nolayouts": ParallelStrategyMap(current_stage=1).SerializeToString(),
        "nocurrentstage": good[2:],  # drops `08 01`: required current_stage missing
    }
    if case in simple:
        return simple[case]
    layouts = {
        "mapoutofrange": ("w", [2, 2], [2, -1]),
        "mapbelow": ("w", [2], [-2, 0]),
        "mapdup": ("w", [2, 2], [0, 0]),
        "devzero": ("w", [2, 0], [0, -1]),
        "devempty": ("w", [], [-1]),
        "badstage": ("x-w", [2], [0]),
        "twodashes": ("0-w-x", [2], [0]),
        "optstep": ("w", [2, 2], [0, -1], 4, 1),          # step != model-parallel count 2
        "optdivide": ("w", [2, 3], [0, -1], 3, 4),        # 6 devices not a multiple of 12
        "optnostep": ("w", [2], [-1], 0, -1),
        "negfield": ("w", [2], [0], 0, 0, -1),
    }
    if case in layouts:
        return _layout_msg(*layouts[case]).SerializeToString()
    if case == "dupname":
        return strategy_bytes(GOOD + GOOD[:1])
    if case in ("nodevmatrix", "twotensormaps"):
        msg = _layout_msg("w", [2], [0])
        lay = msg.parallel_layout_item[0].parallel_layouts
        if case == "nodevmatrix":
            del lay.dev_matrix[:]
        else:
            lay.tensor_map.add(dim=[0])
        return msg.SerializeToString()
    raise SystemExit(f"unknown bad-strategy case {case!r}")


BAD_STRATEGY_CASES = ["empty", "truncated", "garbage", "checkpoint", "nolayouts", "nocurrentstage",
                      "mapoutofrange", "mapbelow", "mapdup", "devzero", "devempty",
                      "badstage", "twodashes", "optstep", "optdivide", "optnostep", "negfield",
                      "dupname", "nodevmatrix", "twotensormaps"]

BAD_DIST_CASES = ["missingrank", "extrarank", "twockpts", "nockpt", "replshape", "splitshape",
                  "dtype", "ndim", "missingparam", "uneven", "pipeline"]


def bad_dist(out_dir, case):
    """A tp2 set (gen) with one defect that `merge` must refuse."""
    cmd_gen(out_dir, 2, "tp2", 7)
    dist = os.path.join(out_dir, "dist")
    r1 = os.path.join(dist, "rank_1", "checkpoint_1.ckpt")
    strat = os.path.join(out_dir, "strategy.ckpt")

    def rewrite_rank1(fn):
        entries, _ = co.load_reference(r1)
        recs = []
        for e in entries:
            v = fn(e)
            if v is not None:
                recs.append(co.record(v))
        co.write_file(r1, recs)

    if case == "missingrank":
        os.remove(r1)
        os.rmdir(os.path.dirname(r1))
    elif case == "extrarank":
        os.makedirs(os.path.join(dist, "rank_2"))
        os.link(r1, os.path.join(dist, "rank_2", "checkpoint_2.ckpt"))
    elif case == "twockpts":
        os.link(r1, os.path.join(dist, "rank_1", "checkpoint_1b.ckpt"))
    elif case == "nockpt":
        os.rename(r1, r1 + ".bak")
    elif case == "ndim":  # the strategy's tensor_map has 3 entries for a 2-d parameter
        msg = ParallelStrategyMap()
        msg.ParseFromString(open(strat, "rb").read())
        for item in msg.parallel_layout_item:
            if item.param_name == "model.layers.0.wo.weight":
                item.parallel_layouts.tensor_map[0].dim.insert(0, -1)
        co.write_file(strat, [msg.SerializeToString()])
    elif case in ("replshape", "splitshape", "dtype", "missingparam"):
        target = {"replshape": b"model.embed.weight", "splitshape": b"model.layers.0.wq.weight",
                  "dtype": b"model.layers.0.bias",
                  "missingparam": b"model.layers.0.wo.weight"}[case]

        def fn(e):
            tag = e.tag.decode()
            if e.tag != target:
                return co.tensor_value(tag, e.ms_type, e.ckpt_dims, e.out)
            if case == "missingparam":
                return None
            elem = co.MS_TYPES[e.ms_type][1]
            if case in ("replshape", "splitshape"):
                dims = [e.dims[0] - 1] + e.dims[1:]
                return co.tensor_value(tag, e.ms_type, dims, e.out[:elem * int(np.prod(dims))])
            return co.tensor_value(tag, "UInt32", e.dims, e.out)  # dtype
        rewrite_rank1(fn)
    elif case == "uneven":
        msg = _layout_msg("model.layers.0.wq.weight", [2], [0, -1])
        msg.parallel_layout_item[0].parallel_layouts.param_split_shape[0].dim.extend([3, 5])
        co.write_file(strat, [msg.SerializeToString()])
    elif case == "pipeline":
        msg = ParallelStrategyMap()
        msg.ParseFromString(open(strat, "rb").read())
        for item in msg.parallel_layout_item:
            item.param_name = "1-" + item.param_name
        co.write_file(strat, [msg.SerializeToString()])
    else:
        raise SystemExit(f"unknown bad-dist case {case!r}")


# ---------------------------------------------------------------------------------------
# CLI.
# ---------------------------------------------------------------------------------------


def main(argv=None):
    global REPLICA_CHECK
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("parse", help="decode a ParallelStrategyMap; JSON per parameter")
    p.add_argument("strategy")
    p = sub.add_parser("gen", help="full model, strategy and per-rank checkpoints")
    p.add_argument("out_dir")
    p.add_argument("--ranks", type=int, required=True)
    p.add_argument("--case", required=True, choices=sorted(CASES))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--format", choices=["ckpt", "safetensors"], default="ckpt",
                   help="the ranks' file format (full.ckpt and the strategy stay as they are)")
    p = sub.add_parser("merge", help="expected merged tree of a distributed checkpoint")
    p.add_argument("strategy")
    p.add_argument("dist_dir")
    p.add_argument("out_tree")
    p.add_argument("--strict-replicas", action="store_true",
                   help="refuse when replicas of a slice differ in content")
    p = sub.add_parser("tree", help="expected tree of one plain checkpoint")
    p.add_argument("ckpt")
    p.add_argument("out_tree")
    p = sub.add_parser("strategy", help="write a ParallelStrategyMap from layouts given by hand")
    p.add_argument("out")
    p.add_argument("--dev", required=True, help="dev_matrix, e.g. 2 or 2,2")
    p.add_argument("params", nargs="+", metavar="NAME=TMAP[:STEP:SIZE]",
                   help="tensor_map like 0,-1; optional optimizer shard step and size")
    p = sub.add_parser("bad-strategy", help="write a strategy file that parse refuses")
    p.add_argument("out")
    p.add_argument("--case", required=True, choices=BAD_STRATEGY_CASES)
    p = sub.add_parser("bad-dist", help="write a tp2 set with a defect that merge refuses")
    p.add_argument("out_dir")
    p.add_argument("--case", required=True, choices=BAD_DIST_CASES)
    args = ap.parse_args(argv)
    try:
        if args.cmd == "parse":
            cmd_parse(args.strategy)
        elif args.cmd == "gen":
            cmd_gen(args.out_dir, args.ranks, args.case, args.seed, args.format)
        elif args.cmd == "merge":
            REPLICA_CHECK = args.strict_replicas
            write_tree(args.out_tree, merge(args.strategy, args.dist_dir))
        elif args.cmd == "tree":
            cmd_tree(args.ckpt, args.out_tree)
        elif args.cmd == "strategy":
            cmd_strategy(args.out, args.dev, args.params)
        elif args.cmd == "bad-strategy":
            co.write_file(args.out, [bad_strategy(args.case)])
        elif args.cmd == "bad-dist":
            bad_dist(args.out_dir, args.case)
    except Refused as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
