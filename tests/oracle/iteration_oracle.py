#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Independent test oracle for ckptfs mounts of a MindSpore Transformers "Checkpoint 2.0"
iteration directory (`ckptfs ITER_DIR M`, and each iteration_<digits>/ of a run mount).

No public example of such a directory or of its metadata.json exists (see the research
notes, /work/wt/iteration-research.md §5), so `gen` synthesizes them from the layout that
mindformers' own code writes and reads.  Sources (GitHub mindspore-ai/mindformers, file @ commit):
  mindformers/checkpoint/utils.py @ a827b44a3e7d52c79d6487472a9e56fd2a815c44
      get_checkpoint_name (file names), get_checkpoint_iter_dir, the tracker file,
      get_sharded_tensor_shard_id (storage_data keys)
  mindformers/checkpoint/checkpoint.py @ a827b44a3e7d52c79d6487472a9e56fd2a815c44
      save_checkpoint (one model + one opt file per rank, opt = names not in the model)
  mindformers/checkpoint/metadata.py @ 6d96f34de572777832223cdccec38ae9f8b7425a
      save_metadata (state_dict_metadata / storage_data), generate_default_metadata_...
  mindformers/checkpoint/sharded_tensor.py @ ca1f1bfde78e73c211aae4555707d0d7f728002b
      global_offset = the chunk's linear slice index, replica_id
  mindformers/checkpoint/fully_parallel.py @ 6d96f34de572777832223cdccec38ae9f8b7425a
      distribute_shards / BalancedSaveStrategy (remove_redundancy: the `dedup` case)
  mindformers/checkpoint/reshard.py @ 6d96f34de572777832223cdccec38ae9f8b7425a
      infer_slice_area_by_rank (which element block a device position holds)
  tests/st/test_ut/test_checkpoint/test_metadata.py @ 393336b60caadf9c441b8fff9e3b2cdbea93fed7
      the mock metadata.json (key order of layout, dtype strings such as "Float32")

Two independent paths, so that the self-check (tests/oracle/test_iteration_oracle.sh) bites:
`gen` cuts each rank's slice with reshard.py's infer_slice_area_by_rank (element ranges from
the device coordinates) and numbers it with sharded_tensor.py's rule (row-major over the
per-dimension split counts); `tree` only reads metadata.json and the files, unravels
global_offset[0] over axis_fragmentations and places each block at coord * local_shape.

    /usr/bin/python3 iteration_oracle.py gen OUT_DIR --case CASE [--seed S] [--prefix P]
        OUT_DIR/iteration_00000010/ (metadata.json, common.json, the safetensors files),
        OUT_DIR/latest_checkpointed_iteration.txt ("10", no newline) and
        OUT_DIR/full.safetensors (every tensor of model and opt, whole)
    /usr/bin/python3 iteration_oracle.py tree ITER_DIR OUT_TREE   (the expected mount)
    /usr/bin/python3 iteration_oracle.py bad OUT_DIR --case C
        OUT_DIR/iteration_00000010/ with one defect; prints "FILE<TAB>PARAM" that the
        refusal must name (PARAM "-" when no one parameter is at fault; FILE "A|B" when
        naming either will do: a name in two files)
    /usr/bin/python3 iteration_oracle.py file-tree FILE OUT_TREE  (the tree of one plain file)
    /usr/bin/python3 iteration_oracle.py names ITER_DIR           (tensor names in mount order)
    /usr/bin/python3 iteration_oracle.py attrs ITER_DIR           (NAME DTYPE [SHAPE] BYTES, tab-
                                                                   separated, in mount order)
    /usr/bin/python3 iteration_oracle.py mutate ITER_DIR --seed S (one random change to
        metadata.json's shapes, splits, chunks, storage keys or file names; prints it)

gen cases:
  single    no metadata.json: model-0000000-0000001 + opt-0000000-0000001, whole tensors
  tp2       device_matrix [2,2] (dp, mp), 4 ranks: splits on dim 0, dim 1, both, one axis
            of a 1-D tensor, replicated, a scalar; chunk order not sorted ([0,1] map);
            default save: every rank's file holds its slice, storage_data lists every holder
  dedup     remove_redundancy over [2,2,2], 8 ranks: each slice once, in the file of the
            rank distribute_shards picks; file index != rank (opt: ranks 0,1,2,4 write)
  multiaxis [2,2,2] (dp, cp, tp) with tensor_map entries that are lists ([[1,0],-1], ...)
  full      tp2's metadata.json, but every file holds whole tensors (integrated_save)
  unlisted  tp2 plus tensors metadata.json does not list, each in one file (model file 2,
            opt file 1): shown as stored
  unlistedrep  tp2 plus a tensor metadata.json does not list, whole in every rank's model
            file (a replicated buffer): shown as the first file, in (kind, index) order,
            holds it (the lead's rule in SPEC-iter.md)
  variants  tp2 with "layout": null when unsplit, "mesh_shape", no rank_group (older forms)
  large     [2,2] slices of several pages each
  names     parameter names holding ' " / % non-ASCII, a leading dot, "snapshot_done"
  random    a random layout and save mode from --seed (random_case)

The mount's rules (what `tree` computes):
  * files: ^(?:(.*)-)?(model|opt)-(\\d{7,})-(\\d{7,})\\.safetensors$, taken in (kind, index)
    order, model first; a tensor name takes its place at its first appearance (header order
    within a file, as safetensors_oracle lists a file);
  * no metadata.json: every tensor as stored; a name in two files is refused;
  * metadata.json: for each name of state_dict_metadata: the chunks' global_offset[0] must be
    exactly 0..prod(axis_fragmentations)-1, each local_shape global_shape/axis_fragmentations;
    slice s is read from the first storage_data["('<name>', (<s>,))"] entry's file, whose
    tensor <name> must have shape local_shape (or global_shape: then it is the whole tensor)
    and one dtype across files; a name only in the files is shown as its first file holds it;
  * refused: malformed JSON or types, interleaved_parallel true, a missing or repeated chunk,
    a missing storage entry, a file that is absent or lacks the tensor, a wrong shape or dtype.

Exit status: 0 success; 1 refused (one line on stderr, "refused: ...") or usage error.
"""

import argparse
import json
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckpt_oracle as co  # noqa: E402  (meta text, file writer)
import safetensors_oracle as so  # noqa: E402  (safetensors reader/writer, dtype table, dir names)

ITERATION = 10
ITER_NAME = f"iteration_{ITERATION:08d}"
FILE_RE = re.compile(r"^(?:(?P<prefix>.*)-)?(?P<kind>model|opt)-(?P<i>\d{7,})-(?P<n>\d{7,})"
                     r"\.safetensors$", re.S)
KEY_RE = re.compile(r"^\((['\"])(?P<name>.*)\1, \((?P<s>\d+),\)\)$", re.S)
# str(mindspore dtype) as metadata.json's properties.dtype holds it
MS_DTYPE = {"F32": "Float32", "F16": "Float16", "BF16": "BFloat16", "I32": "Int32",
            "I64": "Int64", "U8": "UInt8", "BOOL": "Bool", "F64": "Float64"}


class Refused(Exception):
    pass


# ---------------------------------------------------------------------------------------
# Layout arithmetic, the writer's side (reshard.py infer_slice_area_by_rank).
# ---------------------------------------------------------------------------------------


def as_axes(m):
    return list(m) if isinstance(m, list) else [m]


def devnum(dev, k):
    return 1 if k == -1 else dev[-k - 1]


def dev_coords(dev, i):
    """Device coordinates of flattened position i, row-major (last dimension fastest)."""
    out = []
    for n in reversed(dev):
        out.append(i % n)
        i //= n
    return out[::-1]


def slice_area(dev, tmap, i, gshape):
    """infer_slice_area_by_rank: per tensor dim (sid, split, [start, stop))."""
    coord = dev_coords(dev, i)
    res = []
    for d, m in enumerate(tmap):
        axes = as_axes(m)
        split = int(np.prod([devnum(dev, k) for k in axes]))
        sid, coef = 0, 1
        for k in reversed(axes):
            if k != -1:
                sid += coord[-k - 1] * coef
                coef *= devnum(dev, k)
        size = gshape[d] // split
        res.append((sid, split, (sid * size, sid * size + size)))
    return res


def slice_index(area):
    """sharded_tensor.py's global_offset: sum(coord * stride), strides built right to left."""
    s, stride = 0, 1
    for sid, split, _ in reversed(area):
        s += sid * stride
        stride *= split
    return s


# ---------------------------------------------------------------------------------------
# Cases.  A parameter: (name, safetensors dtype, global shape, tensor_map, kind).
# ---------------------------------------------------------------------------------------

TP2_DEV = ([2, 2], ["dp", "mp"])
TP2 = [
    ("model.layers.0.attention.wq.weight", "F32", [8, 6], [0, -1], "model"),   # dim 0 by mp
    ("model.layers.0.attention.wo.weight", "BF16", [6, 8], [-1, 0], "model"),  # dim 1 by mp
    ("model.layers.0.mlp.w1.weight", "F32", [8, 6], [1, 0], "model"),          # both, no replica
    ("model.layers.0.mlp.w2.weight", "F16", [4, 6], [0, 1], "model"),          # chunks 0,2,1,3
    ("model.layers.0.attention.bias", "F32", [8], [0], "model"),               # 1-D
    ("model.norm.weight", "F32", [6], [-1], "model"),                          # replicated
    ("model.pos_ids", "I32", [4, 4], [1, -1], "model"),                        # dim 0 by dp
    ("model.scale", "F32", [], [], "model"),                                   # scalar
    ("adam_m.model.layers.0.attention.wq.weight", "F32", [8, 6], [0, -1], "opt"),
    ("adam_v.model.layers.0.attention.wq.weight", "F32", [8, 6], [0, -1], "opt"),
    ("adam_m.model.layers.0.mlp.w1.weight", "F32", [8, 6], [1, 0], "opt"),
    ("adam_m.model.norm.weight", "F32", [6], [-1], "opt"),
    ("global_step", "I64", [1], [-1], "opt"),
]
MULTI_DEV = ([2, 2, 2], ["dp", "cp", "tp"])
MULTI = [
    ("model.embed.weight", "F32", [8, 6], [[1, 0], -1], "model"),      # dim 0 by cp*tp
    ("model.proj.weight", "BF16", [4, 8], [-1, [2, 1]], "model"),       # dim 1 by dp*cp
    ("model.ffn.weight", "F32", [8, 6], [2, 0], "model"),               # research §3.5
    ("model.mix.weight", "F16", [4, 4, 8], [0, -1, [2, 1]], "model"),   # three axes, 3-D
    ("model.norm.weight", "F32", [6], [-1], "model"),
    ("adam_m.model.embed.weight", "F32", [8, 6], [[1, 0], -1], "opt"),
    ("adam_m.model.ffn.weight", "F32", [8, 6], [2, 0], "opt"),
    ("global_step", "I64", [1], [-1], "opt"),
]
DEDUP = [
    ("model.embed.weight", "F32", [8, 6], [0, -1], "model"),
    ("model.ffn.weight", "F32", [8, 6], [2, 0], "model"),
    ("model.mix.weight", "BF16", [8, 4], [[2, 1], 0], "model"),
    ("model.norm.weight", "F32", [6], [-1], "model"),
    ("model.scale", "F32", [], [], "model"),
    # opt: the larger shards held by ranks 0,2,4,6 / 1,3,5,7 go to ranks 0 and 1, the
    # smaller by 0,1,4,5 / 2,3,6,7 to 4 and 2: files 0,1,2,3 are ranks 0,1,2,4
    ("adam_m.model.embed.weight", "F32", [8, 6], [0, -1], "opt"),
    ("adam_m.model.small", "F32", [4, 2], [1, -1], "opt"),
]
SINGLE = [
    ("model.embed.weight", "F32", [8, 6], None, "model"),
    ("model.proj.weight", "BF16", [4, 8], None, "model"),
    ("model.norm.weight", "F16", [6], None, "model"),
    ("model.scale", "F32", [], None, "model"),
    ("adam_m.model.embed.weight", "F32", [8, 6], None, "opt"),
    ("global_step", "I64", [1], None, "opt"),
]
LARGE = [  # slices of several pages: reads cross slice rows and file extents
    ("model.embed.weight", "F32", [1024, 96], [1, 0], "model"),
    ("model.lm_head.weight", "BF16", [96, 1024], [-1, [1, 0]], "model"),
    ("model.norm.weight", "F32", [96], [-1], "model"),
    ("adam_m.model.embed.weight", "F32", [1024, 96], [0, -1], "opt"),
]
NAMES = [  # storage_data keys are repr()s: a name holding ' is in double quotes
    ("model.it's.weight", "F32", [4, 6], [0, -1], "model"),
    ('model.say "hi".weight', "F32", [4, 6], [-1, 0], "model"),
    ("model/a/b.weight", "F16", [4], [0], "model"),
    (".hidden", "F32", [2, 2], [1, 0], "model"),
    ("100%.bias", "F32", [4], [-1], "model"),
    ("模型.权重", "BF16", [4, 4], [1, -1], "model"),
    ("snapshot_done", "F32", [2], [0], "model"),
    ("adam_m.model.it's.weight", "F32", [4, 6], [0, -1], "opt"),
]
CASES = {"single": (([1], ["dp"]), SINGLE), "tp2": (TP2_DEV, TP2), "dedup": (MULTI_DEV, DEDUP),
         "multiaxis": (MULTI_DEV, MULTI), "full": (TP2_DEV, TP2), "unlisted": (TP2_DEV, TP2),
         "unlistedrep": (TP2_DEV, TP2),
         "variants": (TP2_DEV, TP2), "large": (TP2_DEV, LARGE), "names": (TP2_DEV, NAMES)}
GEN_CASES = list(CASES) + ["random"]
RANDOM_DTYPES = ["F32", "F16", "BF16", "I32", "I64", "U8"]


def random_case(rng):
    """A random layout: device matrix of 1-3 axes (at most 8 devices), 2-7 parameters of
    0-3 dims, each dim unsplit or split by one or two unused axes (a list, first major),
    a random save mode.  Returns ((dev, alias), params, mode)."""
    while True:
        dev = [int(x) for x in rng.choice([1, 2, 2, 3], size=int(rng.integers(1, 4)))]
        if np.prod(dev) <= 8:
            break
    alias = ["dp", "cp", "tp"][-len(dev):]
    params = []
    for p in range(int(rng.integers(2, 8))):
        free = [int(k) for k in rng.permutation(len(dev))]
        tmap, shape = [], []
        for _ in range(int(rng.integers(0, 4))):
            take = 0
            if free and rng.random() >= 0.4:
                take = int(rng.integers(1, min(2, len(free)) + 1))
            axes, free = free[:take], free[take:]
            if not axes:
                tmap.append(-1)
            elif len(axes) == 1 and rng.random() < 0.8:
                tmap.append(axes[0])
            else:
                tmap.append(axes)  # a list, also of one axis
            split = int(np.prod([devnum(dev, k) for k in axes])) if axes else 1
            shape.append(split * int(rng.integers(1, 4)))
        kind = "model" if p == 0 or rng.random() < 0.6 else "opt"
        name = f"model.layers.{p}.weight" if kind == "model" else f"adam_m.model.layers.{p}.weight"
        params.append((name, str(rng.choice(RANDOM_DTYPES)), shape, tmap, kind))
    return (dev, alias), params, str(rng.choice(["default", "default", "dedup", "dedup", "full"]))


def random_array(rng, dtype, shape):
    data = so.random_data(rng, dtype, shape)
    return np.frombuffer(data, dtype=so.MAPPING[dtype][2]).reshape(shape)


def file_name(prefix, kind, i, n):
    """utils.py get_checkpoint_name + ".safetensors"."""
    base = f"{kind}-{i:07d}-{n:07d}"
    return (base if prefix is None else f"{prefix}-{base}") + ".safetensors"


def write_st(path, tensors):
    """save_checkpoint(format="safetensors"): {"format": "ms"} metadata, the writer's order."""
    co.write_file(path, [so.serialize([(n, d, list(a.shape), np.ascontiguousarray(a).tobytes())
                                       for n, d, a in tensors], {"format": "ms"})])


def param_meta(dtype, gshape, tmap, dev, alias):
    """state_dict_metadata[name] (metadata.py save_metadata; key order as written)."""
    ranks = int(np.prod(dev))
    areas = [slice_area(dev, tmap, i, gshape) for i in range(ranks)]
    idx = [slice_index(a) for a in areas]
    frag = [a[1] for a in areas[0]]
    local = [g // f for g, f in zip(gshape, frag)]
    chunks = []
    for s in idx:  # distinct offsets in rank order
        if {"global_offset": [s], "local_shape": local} not in chunks:
            chunks.append({"global_offset": [s], "local_shape": local})
    return {
        "properties": {"dtype": MS_DTYPE[dtype],
                       "replica_id": [idx[:i].count(s) for i, s in enumerate(idx)],
                       "allow_shape_mismatch": False, "allow_to_save": True},
        "global_shape": list(gshape),
        "axis_fragmentations": frag,
        "layout": {"device_matrix": list(dev), "tensor_map": tmap, "interleaved_parallel": False,
                   "alias_name": list(alias), "rank_list": list(range(ranks))},
        "chunk": chunks,
    }, areas, idx


def variants(sdm, storage):
    """Forms other mindformers/MindSpore versions write (research notes §3.2-3.3, §6):
    "layout": null for an unsplit parameter (PyNative, layout_adapter.py), "mesh_shape" for
    "device_matrix" (newer Layout classes; mindformers reads the layout by position), and
    storage entries without rank_group (metadata.py at mindspore-lab 2a8805de)."""
    for pm in sdm.values():
        lay = pm["layout"]
        if all(k == -1 for k in lay["tensor_map"]):
            pm["layout"] = None
        else:
            pm["layout"] = {("mesh_shape" if k == "device_matrix" else k): v
                            for k, v in lay.items()}
    for entries in storage.values():
        for e in entries:
            del e["rank_group"]


def shard_key(name, s):
    """utils.py get_sharded_tensor_shard_id: str(tuple((name, (s,))))."""
    return str((name, (s,)))


def distribute_shards(coverage, sizes, total_ranks):
    """fully_parallel.py distribute_shards: fewest holders first, then larger, then id;
    the least-loaded holder (the lowest of equals) stores it."""
    loads = {r: 0 for r in range(total_ranks)}
    out = {}
    for sid, holders in sorted(((k, tuple(sorted(v))) for k, v in coverage.items()),
                               key=lambda it: (len(it[1]), -sizes[it[0]], it[0])):
        pick = min(holders, key=lambda r: loads[r])
        out[sid] = (pick, holders)
        loads[pick] += sizes[sid]
    return out


def gen(out_dir, case, seed, prefix):
    rng = np.random.default_rng(seed)
    if case == "random":
        (dev, alias), params, mode = random_case(rng)
    else:
        (dev, alias), params = CASES[case]
        mode = case if case in ("dedup", "full") else "default"
    ranks = int(np.prod(dev))
    it = os.path.join(out_dir, ITER_NAME)
    os.makedirs(it)
    fulls = [(n, d, random_array(rng, d, g), tmap, kind) for n, d, g, tmap, kind in params]
    extra = []
    if case == "unlisted":
        # not in metadata.json, each in one file that is not file 0: (name, dtype, array,
        # kind, the one rank whose file holds it)
        extra = [("model.rotary.inv_freq", "F32", random_array(rng, "F32", [3]), "model", 2),
                 ("opt.loss_scale", "F32", random_array(rng, "F32", []), "opt", 1)]
    if case == "unlistedrep":  # a buffer every rank saves whole (None: every rank)
        extra = [("model.rotary.inv_freq", "F32", random_array(rng, "F32", [3]), "model", None)]
    write_st(os.path.join(out_dir, "full.safetensors"),
             [(n, d, a) for n, d, a, *_ in fulls] + [(n, d, a) for n, d, a, *_ in extra])
    with open(os.path.join(out_dir, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write(str(ITERATION))
    with open(os.path.join(it, "common.json"), "w") as f:  # checkpoint.py CommonInfo
        json.dump({"epoch_num": 1, "step_num": ITERATION, "global_step": ITERATION,
                   "loss_scale": 1.0, "global_batch_size": 8}, f, indent=4)

    if case == "single":
        for kind in ("model", "opt"):
            write_st(os.path.join(it, file_name(prefix, kind, 0, 1)),
                     [(n, d, a) for n, d, a, _t, k in fulls if k == kind])
        return

    sdm, storage = {}, {}
    per_rank = {(k, r): [] for k in ("model", "opt") for r in range(ranks)}
    shards = {"model": {}, "opt": {}}  # kind -> key -> (holders, bytes, name, dtype, array)
    for n, d, arr, tmap, kind in fulls:
        meta, areas, idx = param_meta(d, list(arr.shape), tmap, dev, alias)
        sdm[n] = meta
        for r in range(ranks):  # rank_list is 0..ranks-1: position r is rank r
            part = arr[tuple(slice(*a[2]) for a in areas[r])]
            if mode == "full":
                part = arr
            per_rank[(kind, r)].append((n, d, part))
            key = shard_key(n, idx[r])
            holders = shards[kind].setdefault(key, ([], part.nbytes, n, d, part))[0]
            holders.append(r)
    if mode != "dedup":
        for kind in ("model", "opt"):
            for r in range(ranks):
                tensors = per_rank[(kind, r)]
                if extra:
                    tensors = tensors + [(n, d, a) for n, d, a, k, only in extra
                                         if k == kind and only in (None, r)]
                write_st(os.path.join(it, file_name(prefix, kind, r, ranks)), tensors)
            for key, (holders, *_x) in shards[kind].items():
                storage[key] = [{"file_name": file_name(prefix, kind, r, ranks), "storage_rank": r,
                                 "rank_group": holders} for r in holders]
    else:
        for kind in ("model", "opt"):
            plan = distribute_shards({k: v[0] for k, v in shards[kind].items()},
                                     {k: v[1] for k, v in shards[kind].items()}, ranks)
            writers = sorted({pick for pick, _ in plan.values()})
            files = {r: file_name(prefix, kind, i, len(writers)) for i, r in enumerate(writers)}
            for r in writers:
                write_st(os.path.join(it, files[r]),
                         [(v[2], v[3], v[4]) for k, v in shards[kind].items() if plan[k][0] == r])
            for key in shards[kind]:
                pick, holders = plan[key]
                storage[key] = [{"file_name": files[pick], "storage_rank": pick,
                                 "rank_group": list(holders)}]
    if case == "variants":
        variants(sdm, storage)
    with open(os.path.join(it, "metadata.json"), "w", encoding="utf-8") as f:
        f.write(json.dumps({"state_dict_metadata": sdm, "storage_data": storage},
                           ensure_ascii=False, indent=4))


# ---------------------------------------------------------------------------------------
# tree: the reader's side (metadata.json + safetensors headers only).
# ---------------------------------------------------------------------------------------


def list_files(it):
    """[(name, kind, i)] of the weight files, in (kind, index) order, model first."""
    found = []
    for n in os.listdir(it):
        m = FILE_RE.match(n)
        if m and os.path.isfile(os.path.join(it, n)):
            found.append((0 if m.group("kind") == "model" else 1, int(m.group("i")), n))
    if not found:
        raise Refused(f"{it}: no model-/opt- safetensors file")
    return [n for _k, _i, n in sorted(found)]


class Files:
    """Parsed safetensors files of the iteration directory, read on first use."""

    def __init__(self, it):
        self.it, self.cache = it, {}

    def get(self, name):
        if name not in self.cache:
            path = os.path.join(self.it, name)
            if "/" in name or not FILE_RE.match(name) or not os.path.isfile(path):
                self.cache[name] = None
            else:
                try:
                    self.cache[name] = {e.tag.decode(): e for e in
                                        so.load_reference(path).entries}
                except so.Refused as exc:
                    raise Refused(f"{name}: {exc}") from None
        return self.cache[name]


def _ints(v, what, positive=False):
    least = 1 if positive else 0
    if not isinstance(v, list) or not all(type(x) is int and x >= least for x in v):
        raise Refused(f"metadata.json: {what} is not a list of integers >= {least}: {v!r}")
    return v


def load_metadata(it):
    try:
        with open(os.path.join(it, "metadata.json"), "rb") as f:
            doc = json.loads(f.read().decode("utf-8"),
                             parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    except FileNotFoundError:
        return None
    except (ValueError, UnicodeDecodeError) as exc:
        raise Refused(f"metadata.json: not JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("state_dict_metadata"), dict) \
            or not isinstance(doc.get("storage_data"), dict):
        raise Refused("metadata.json: no state_dict_metadata/storage_data objects")
    params = {}
    for name, pm in doc["state_dict_metadata"].items():
        if not isinstance(pm, dict):
            raise Refused(f"metadata.json: {name}: not an object")
        g = _ints(pm.get("global_shape"), f"{name}: global_shape")
        frag = _ints(pm.get("axis_fragmentations"), f"{name}: axis_fragmentations", True)
        if len(frag) != len(g) or any(x % f for x, f in zip(g, frag)):
            raise Refused(f"metadata.json: {name}: axis_fragmentations {frag} do not divide {g}")
        lay = pm.get("layout")
        if lay is not None:
            if not isinstance(lay, dict):
                raise Refused(f"metadata.json: {name}: layout is not an object")
            if lay.get("interleaved_parallel", False) is not False:
                raise Refused(f"metadata.json: {name}: interleaved_parallel layout")
        chunks = pm.get("chunk")
        if not isinstance(chunks, list):
            raise Refused(f"metadata.json: {name}: chunk is not a list")
        local = [x // f for x, f in zip(g, frag)]
        seen = set()
        for c in chunks:
            if not isinstance(c, dict):
                raise Refused(f"metadata.json: {name}: a chunk is not an object")
            off = _ints(c.get("global_offset"), f"{name}: global_offset")
            if len(off) != 1:
                raise Refused(f"metadata.json: {name}: global_offset {off} is not one slice index")
            if _ints(c.get("local_shape"), f"{name}: local_shape") != local:
                raise Refused(f"metadata.json: {name}: chunk local_shape {c['local_shape']} "
                              f"!= {local}")
            if off[0] in seen:  # save_metadata writes each (offset, shape) once
                raise Refused(f"metadata.json: {name}: slice {off[0]} has two chunks")
            seen.add(off[0])
        count = int(np.prod(frag)) if frag else 1
        if seen != set(range(count)):
            raise Refused(f"metadata.json: {name}: chunks {sorted(seen)} are not 0..{count - 1}")
        params[name] = (g, frag, local)
    storage = {}
    for key, entries in doc["storage_data"].items():
        m = KEY_RE.match(key)
        if not m:
            raise Refused(f"metadata.json: storage_data key {key!r} is not ('<name>', (<slice>,))")
        if not isinstance(entries, list) or not entries or not all(
                isinstance(e, dict) and isinstance(e.get("file_name"), str) for e in entries):
            raise Refused(f"metadata.json: storage_data {key!r}: not a list of file entries")
        storage[(m.group("name"), int(m.group("s")))] = entries[0]["file_name"]
    return params, storage


def assemble(name, g, frag, local, storage, files):
    """The whole tensor: (dtype, shape, bytes)."""
    dtype, full = None, None
    for s in range(int(np.prod(frag)) if frag else 1):
        fname = storage.get((name, s))
        if fname is None:
            raise Refused(f"metadata.json: {name}: no storage_data entry for slice {s}")
        entries = files.get(fname)
        if entries is None:
            raise Refused(f"metadata.json: {name}: slice {s} is stored in {fname!r}, which is not "
                          "a shard file of the directory")
        e = entries.get(name)
        if e is None:
            raise Refused(f"{fname}: {name}: slice {s} is not in the file")
        if dtype is None:
            dtype = e.ms_type
        elif e.ms_type != dtype:
            raise Refused(f"{fname}: {name}: slice {s} is {e.ms_type}, slice 0 is {dtype}")
        arr = np.frombuffer(e.out, dtype=so.MAPPING[dtype][2]).reshape(e.shape)
        if e.shape == g:  # a whole tensor (integrated save)
            return dtype, g, e.out
        if e.shape != local:
            raise Refused(f"{fname}: {name}: slice {s} has shape {e.shape}, not {local} or {g}")
        if full is None:
            full = np.zeros(g, dtype=arr.dtype)
        coord = np.unravel_index(s, frag) if frag else ()
        full[tuple(slice(c * n, c * n + n) for c, n in zip(coord, local))] = arr
    return dtype, g, full.tobytes()


def expected(it):
    """[(name, dtype, shape, bytes)] in the mount's order."""
    names = list_files(it)
    files = Files(it)
    order, first = [], {}
    for fname in names:
        for tag in files.get(fname):
            if tag not in first:
                first[tag] = fname
                order.append(tag)
    meta = load_metadata(it)
    if meta is None:
        for fname in names:
            for tag in files.get(fname):
                if first[tag] != fname:
                    raise Refused(f"{fname}: {tag}: also in {first[tag]} (no metadata.json)")
        params, storage = {}, {}
    else:
        params, storage = meta
        missing = [n for n in params if n not in first]
        if missing:  # in no file at all: its storage entry names a file that lacks it
            order += missing
    out = []
    for name in order:
        if name in params:
            out.append((name, *assemble(name, *params[name], storage, files)))
        else:
            e = files.get(first[name])[name]
            out.append((name, e.ms_type, e.shape, e.out))
    return out


def write_tree(out_tree, items):
    root = os.fsencode(out_tree)
    os.makedirs(root)
    for name, dtype, shape, data in items:
        d = os.path.join(root, so.escape_name(name.encode("utf-8")))
        os.mkdir(d)
        co.write_file(os.path.join(d, b"meta"), [co.meta_bytes(shape, so.MAPPING[dtype][1])])
        co.write_file(os.path.join(d, b"out"), [data])
    co.write_file(os.path.join(root, b"snapshot_done"), [])


# ---------------------------------------------------------------------------------------
# bad: a tp2 set (dupname: a single set) with one defect.
# ---------------------------------------------------------------------------------------

BAD_CASES = ["missingchunk", "missingfile", "missingtensor", "wrongshape", "wrongdtype", "notjson",
             "badtypes", "interleaved", "dupname", "outside", "absolute", "badkey", "chunkshape",
             "outofrange", "nostorage"]
VICTIM = "model.layers.0.mlp.w1.weight"  # split on both axes: slice 1 is only in rank 1's file


def rewrite(path, fn):
    """Rewrite a safetensors file with fn applied to its [(name, dtype, shape, bytes)]."""
    tensors = [(e.tag.decode(), e.ms_type, e.shape, e.out) for e in so.load_reference(path).entries]
    co.write_file(path, [so.serialize(fn(tensors), {"format": "ms"})])


def bad(out_dir, case, seed):
    gen(out_dir, "single" if case == "dupname" else "tp2", seed, None)
    it = os.path.join(out_dir, ITER_NAME)
    mpath = os.path.join(it, "metadata.json")
    rank1 = file_name(None, "model", 1, 4)
    doc = None if case == "dupname" else json.loads(open(mpath, encoding="utf-8").read())
    if case == "missingchunk":
        pm = doc["state_dict_metadata"][VICTIM]
        pm["chunk"] = [c for c in pm["chunk"] if c["global_offset"] != [1]]
        del doc["storage_data"][shard_key(VICTIM, 1)]
        res = ("metadata.json", VICTIM)
    elif case == "missingfile":
        os.unlink(os.path.join(it, rank1))
        res = (rank1, "-")
    elif case == "missingtensor":
        rewrite(os.path.join(it, rank1), lambda ts: [t for t in ts if t[0] != VICTIM])
        res = (rank1, VICTIM)
    elif case == "wrongshape":  # [3, 4] for [4, 3]: same bytes, another shape
        rewrite(os.path.join(it, rank1), lambda ts: [(n, d, [3, 4] if n == VICTIM else s, b)
                                                     for n, d, s, b in ts])
        res = (rank1, VICTIM)
    elif case == "wrongdtype":  # F16 [4, 3] where the other slices are F32
        rewrite(os.path.join(it, rank1), lambda ts: [(n, "F16", s, b[:len(b) // 2]) if n == VICTIM
                                                     else (n, d, s, b) for n, d, s, b in ts])
        res = (rank1, VICTIM)
    elif case == "notjson":
        text = open(mpath, encoding="utf-8").read()
        co.write_file(mpath, [text[:len(text) // 2].encode("utf-8")])
        doc = None
        res = ("metadata.json", "-")
    elif case == "badtypes":
        doc["state_dict_metadata"][VICTIM]["global_shape"] = "8, 6"
        res = ("metadata.json", VICTIM)
    elif case == "interleaved":
        doc["state_dict_metadata"][VICTIM]["layout"]["interleaved_parallel"] = True
        res = ("metadata.json", VICTIM)
    elif case in ("outside", "absolute"):
        # a storage entry naming a real shard file outside the iteration directory
        outside = os.path.join(out_dir, rank1)
        with open(os.path.join(it, rank1), "rb") as f:
            co.write_file(outside, [f.read()])
        entry = doc["storage_data"][shard_key(VICTIM, 1)][0]
        entry["file_name"] = "../" + rank1 if case == "outside" else os.path.abspath(outside)
        res = ("metadata.json", VICTIM)
    elif case == "badkey":  # ('name', 1): the offset is no tuple
        st = doc["storage_data"]
        st[str((VICTIM, 1))] = st.pop(shard_key(VICTIM, 1))
        res = ("metadata.json", VICTIM)
    elif case == "chunkshape":
        doc["state_dict_metadata"][VICTIM]["chunk"][1]["local_shape"] = [4, 4]
        res = ("metadata.json", VICTIM)
    elif case == "outofrange":  # slice 3 listed as 4 (of 0..3)
        pm = doc["state_dict_metadata"][VICTIM]
        next(c for c in pm["chunk"] if c["global_offset"] == [3])["global_offset"] = [4]
        doc["storage_data"][shard_key(VICTIM, 4)] = doc["storage_data"].pop(shard_key(VICTIM, 3))
        res = ("metadata.json", VICTIM)
    elif case == "nostorage":
        del doc["storage_data"][shard_key(VICTIM, 1)]
        res = ("metadata.json", VICTIM)
    else:  # dupname: the opt file also holds a model tensor
        opt = os.path.join(it, file_name(None, "opt", 0, 1))
        model = {e.tag.decode(): e for e in
                 so.load_reference(os.path.join(it, file_name(None, "model", 0, 1))).entries}
        e = model["model.norm.weight"]
        rewrite(opt, lambda ts: ts + [("model.norm.weight", e.ms_type, e.shape, e.out)])
        res = (file_name(None, "opt", 0, 1) + "|" + file_name(None, "model", 0, 1),
               "model.norm.weight")
    if doc is not None:
        with open(mpath, "w", encoding="utf-8") as f:
            f.write(json.dumps(doc, ensure_ascii=False, indent=4))
    os.unlink(os.path.join(out_dir, "full.safetensors"))  # no full model: it is no checkpoint
    return res


def _mutation(doc, files, rng):
    """Apply one random change to doc; returns what was changed."""
    sdm, st = doc["state_dict_metadata"], doc["storage_data"]
    name = str(rng.choice(sorted(sdm)))
    pm = sdm[name]
    keys = [k for k in st if KEY_RE.match(k) and KEY_RE.match(k).group("name") == name]
    what = int(rng.integers(0, 9))
    if what == 0 and pm["global_shape"]:
        d = int(rng.integers(len(pm["global_shape"])))
        pm["global_shape"][d] += int(rng.choice([-1, 1, pm["global_shape"][d]]))
        return f"{name}: global_shape {pm['global_shape']}"
    if what == 1 and pm["axis_fragmentations"]:
        d = int(rng.integers(len(pm["axis_fragmentations"])))
        pm["axis_fragmentations"][d] = int(rng.choice([0, 1, 2, 3, -1]))
        return f"{name}: axis_fragmentations {pm['axis_fragmentations']}"
    if what == 2:
        c = pm["chunk"][int(rng.integers(len(pm["chunk"])))]
        c["global_offset"] = [int(rng.integers(-1, len(pm["chunk"]) + 1))]
        return f"{name}: a chunk's global_offset {c['global_offset']}"
    if what == 3:
        pm["chunk"].append(dict(pm["chunk"][0]))
        return f"{name}: chunk 0 twice"
    if what == 4 and keys:
        k = str(rng.choice(keys))
        st[k][0]["file_name"] = str(rng.choice(files))
        return f"{k}: first entry's file_name {st[k][0]['file_name']}"
    if what == 5 and keys:
        k = str(rng.choice(keys))
        st[k].reverse()
        return f"{k}: entries reversed"
    if what == 6:
        field = str(rng.choice(["global_shape", "axis_fragmentations", "chunk"]))
        pm[field] = [None, "x", 3, {"a": 1}][int(rng.integers(4))]
        return f"{name}: {field} {pm[field]!r}"
    if what == 7:
        c = pm["chunk"][int(rng.integers(len(pm["chunk"])))]
        if c["local_shape"]:
            c["local_shape"][int(rng.integers(len(c["local_shape"])))] += int(rng.choice([-1, 1]))
        else:
            c["local_shape"] = [1]
        return f"{name}: a chunk's local_shape {c['local_shape']}"
    if keys:
        st[str((name, (0, 0)))] = st.pop(keys[0])
    return f"{name}: storage key {keys[0] if keys else '-'} with a 2-tuple offset"


def mutate(it, seed):
    """One random change to metadata.json's fields that decide the assembly (shapes, split
    counts, chunks, storage keys and file names); returns what was changed.  The change may
    leave the set valid (a mount must then equal `tree`) or not (both must refuse)."""
    path = os.path.join(it, "metadata.json")
    doc = json.loads(open(path, encoding="utf-8").read())
    files = sorted(n for n in os.listdir(it) if FILE_RE.match(n))
    what = _mutation(doc, files, np.random.default_rng(seed))
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(doc, ensure_ascii=False, indent=4))
    return what


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("gen", help="write OUT_DIR/iteration_00000010 and full.safetensors")
    p.add_argument("out")
    p.add_argument("--case", required=True, choices=GEN_CASES)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--prefix", default=None, help="file name prefix (free text, may hold '-')")
    p = sub.add_parser("tree", help="the expected tree of a mount of ITER_DIR")
    p.add_argument("iter_dir")
    p.add_argument("out")
    p = sub.add_parser("file-tree", help="the tree of one plain safetensors file")
    p.add_argument("file")
    p.add_argument("out")
    p = sub.add_parser("attrs", help="name, dtype, [shape], bytes of each tensor, in order")
    p.add_argument("iter_dir")
    p = sub.add_parser("mutate", help="one random change to ITER_DIR's metadata.json")
    p.add_argument("iter_dir")
    p.add_argument("--seed", type=int, default=0)
    p = sub.add_parser("names", help="tensor names in the mount's order")
    p.add_argument("iter_dir")
    p = sub.add_parser("bad", help="a set with one defect; prints FILE<TAB>PARAM to name")
    p.add_argument("out")
    p.add_argument("--case", required=True, choices=BAD_CASES)
    p.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    try:
        if args.cmd == "gen":
            gen(args.out, args.case, args.seed, args.prefix)
        elif args.cmd == "tree":
            write_tree(args.out, expected(args.iter_dir))
        elif args.cmd == "file-tree":
            write_tree(args.out, [(e.tag.decode(), e.ms_type, e.shape, e.out)
                                  for e in so.load_reference(args.file).entries])
        elif args.cmd == "names":
            for name, *_ in expected(args.iter_dir):
                print(name)
        elif args.cmd == "mutate":
            print(mutate(args.iter_dir, args.seed))
        elif args.cmd == "attrs":
            for name, dtype, shape, data in expected(args.iter_dir):
                print(f"{name}\t{dtype}\t{co.shape_text(shape).decode()}\t{len(data)}")
        else:
            print("\t".join(bad(args.out, args.case, args.seed)))
    except Refused as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
