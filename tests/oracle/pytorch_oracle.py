#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Independent test oracle for ckptfs mounts of PyTorch torch.save files.

The reader here is PyTorch itself (Debian's python3-torch 1.13): every file is read with
torch.load(f, weights_only=True), never with ckptfs's code.  The expected tree follows the
rules codec/pytorch/pt_reader.h and pt_leaf.h give for PyTorch files, applied to what torch.load returns:
  - dicts (plain or OrderedDict), lists and tuples nest; a leaf's name is its keys and
    indices joined with '.' (int keys in decimal: an optimizer's state);
  - a tensor (or Parameter) is shown with its elements row-major, whatever its strides
    (out = tensor.contiguous() as bytes; bfloat16 as its 16-bit patterns);
  - a Python int, float or bool is a 0-d int64, float64 or bool (types "int", "float",
    "bool"); any other value (str, None, ...) is not shown.
The meta text, directory-name escaping and tree checks are ckpt_oracle's.

    /usr/bin/python3 pytorch_oracle.py gen OUT --case NAME [--seed N] [--count N]
    /usr/bin/python3 pytorch_oracle.py check MOUNTPOINT FILE [--trusted]
    /usr/bin/python3 pytorch_oracle.py parse FILE [--trusted]  (a line a leaf: DIR TYPE SHAPE SHA)
    /usr/bin/python3 pytorch_oracle.py zip64 IN OUT    (IN's records rewritten by Python's
                                                        zipfile with every ZIP64 structure)
    /usr/bin/python3 pytorch_oracle.py bad-all DIR   (every bad case as DIR/bad-CASE.pt; prints CASE<TAB>what the refusal names)
    /usr/bin/python3 pytorch_oracle.py attack-all DIR  (every file of issue 39's attacks on the
                                  save path as DIR/attack-CASE.pt, byte by byte; torch loads each)
    /usr/bin/python3 pytorch_oracle.py attack-check CASE ORIG SAVED [NEW_OUT]
                                  (SAVED is ORIG after that case's edit, as it must be)
    /usr/bin/python3 pytorch_oracle.py edit-check ORIG SAVED NAME NEW_OUT [--trusted]
                                  (SAVED is ORIG with NAME's values NEW_OUT, in place)

Cases of gen: alltypes, views, nested, params, names, many, big.
    /usr/bin/python3 pytorch_oracle.py same-as-safetensors PT ST  (PT holds ST's tensors)
    /usr/bin/python3 pytorch_oracle.py overhead FILE   (the bytes of FILE that are not
                                                        storages: all a mount may read)
"""

import argparse
import collections
import hashlib
import io
import json
import os
import pickle
import struct
import sys
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
import torch  # noqa: E402

import ckpt_oracle as co  # noqa: E402  (escaping, meta text, tree checks)

# torch dtype -> (PyTorch's name, OneFlow type, numpy dtype of out or None)
TYPES = {
    torch.float32: ("torch.float32", "kFloat", np.float32),
    torch.float64: ("torch.float64", "kDouble", np.float64),
    torch.float16: ("torch.float16", "kFloat16", np.float16),
    torch.bfloat16: ("torch.bfloat16", "kBFloat16", None),
    torch.int64: ("torch.int64", "kInt64", np.int64),
    torch.int32: ("torch.int32", "kInt32", np.int32),
    torch.int16: ("torch.int16", "kInt16", np.int16),
    torch.int8: ("torch.int8", "kInt8", np.int8),
    torch.uint8: ("torch.uint8", "kUInt8", np.uint8),
    torch.bool: ("torch.bool", "kBool", np.bool_),
    torch.complex64: ("torch.complex64", "kComplex64", np.complex64),
    torch.complex128: ("torch.complex128", "kComplex128", np.complex128),
}


class Entry:
    """One tensor directory (the attributes ckpt_oracle.check_tensor_dir reads)."""

    def __init__(self, name, type_name, of_type, dims, out, np_dtype):
        self.tag = name.encode("utf-8")
        self.part = None
        self.ms_type = type_name
        self.dims = list(dims)
        self.out = out
        self.np_dtype = np_dtype
        self.dirname = co.escape_tag(self.tag)
        self.meta = co.meta_bytes(self.dims, of_type)


def tensor_bytes(t):
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def flatten(obj, name, out):
    if isinstance(obj, dict):
        for k, v in obj.items():
            if not isinstance(k, (str, int)) or isinstance(k, bool):
                raise SystemExit(f"a key ckptfs does not name: {k!r}")
            flatten(v, f"{name}.{k}" if name else str(k), out)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            flatten(v, f"{name}.{i}" if name else str(i), out)
    elif isinstance(obj, torch.Tensor):
        type_name, of_type, np_dtype = TYPES[obj.dtype]
        out.append(Entry(name, type_name, of_type, obj.shape, tensor_bytes(obj), np_dtype))
    elif isinstance(obj, bool):
        out.append(Entry(name, "bool", "kBool", [], bytes([obj]), np.bool_))
    elif isinstance(obj, int):
        out.append(Entry(name, "int", "kInt64", [], struct.pack("<q", obj), np.int64))
    elif isinstance(obj, float):
        out.append(Entry(name, "float", "kDouble", [], struct.pack("<d", obj), np.float64))


def load_entries(path, trusted=False):
    """torch.load with weights_only=True; torch 1.13's weights-only unpickler lacks BINFLOAT
    (a Python float), so a file this oracle wrote itself (trusted) that holds floats is
    loaded in full."""
    out = []
    flatten(torch.load(path, weights_only=not trusted), "", out)
    return out


# ---------------------------------------------------------------------------------------
# Files written by torch.save.
# ---------------------------------------------------------------------------------------


def random_tensor(g, dtype, shape):
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_complex:
        return torch.randn(shape, generator=g, dtype=dtype)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    info = torch.iinfo(dtype)
    return torch.randint(info.min, info.max, shape, generator=g, dtype=torch.int64).to(dtype)


def gen_object(case, g, count):
    if case == "alltypes":
        d = collections.OrderedDict()
        for i, dt in enumerate(TYPES):
            d[f"t{i}.{str(dt)[6:]}"] = random_tensor(g, dt, (3, 5))
        d["scalar0d"] = torch.tensor(2.5)
        d["empty"] = torch.zeros(0, 4)
        d["bf16_0d"] = torch.tensor(1.25, dtype=torch.bfloat16)
        return d
    if case == "views":
        base = torch.randn(6, 8, generator=g)
        cube = torch.arange(24, dtype=torch.int64).reshape(4, 3, 2)
        return {
            "base": base,
            "tied": base,                   # the same tensor twice: one storage
            "transposed": base.t(),         # stride (1, 8)
            "rows": base[2:5],              # a storage offset, contiguous
            "cols": base[:, ::2],           # every other column
            "inner": base[:, 2:6],          # rows of a wider tensor
            "row": base[3],
            "elem": base[1, 2],             # 0-d, at an offset
            "expanded": torch.arange(4.0).expand(3, 4),  # stride 0
            "fortran": cube.permute(2, 1, 0),            # (1, 2, 6): Fortran order
            "flipped_halves": base.view(2, 3, 8).transpose(0, 1),
            "bf16_t": base.to(torch.bfloat16).t(),
            "empty_view": base[:, 3:3],
        }
    if case == "nested":
        model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        model(torch.randn(2, 4, generator=g)).sum().backward()
        opt.step()
        return {
            "model": model.state_dict(),
            "optimizer": opt.state_dict(),
            "epoch": 3,
            "step": -70000000000,
            "lr": 0.001,
            "best": True,
            "name": "run-1",
            "nothing": None,
            "history": [1.5, 2.5, torch.ones(2)],
        }
    if case == "params":
        lin = torch.nn.Linear(3, 2)
        return {"weight": lin.weight, "bias": lin.bias,
                "frozen": torch.nn.Parameter(torch.ones(2, 2), requires_grad=False)}
    if case == "names":
        return {"a/b": torch.ones(1), "50%": torch.ones(1), ".hidden": torch.ones(1),
                "snapshot_done": torch.ones(1), "ünïcode": torch.ones(1),
                "x" * 300: torch.ones(1), "sp ace": torch.ones(1)}
    if case == "big":
        return {f"w{i}": random_tensor(g, torch.float32, (256, 256)) for i in range(count)}
    if case == "many":
        return collections.OrderedDict(
            (f"layer.{i}.weight", random_tensor(g, torch.float32, (i % 7 + 1, 3)))
            for i in range(count))
    raise SystemExit(f"unknown case {case}")


def cmd_gen(out, case, seed, count):
    g = torch.Generator().manual_seed(seed)
    torch.save(gen_object(case, g, count), out)


# ---------------------------------------------------------------------------------------
# ZIP64: the same records through Python's zipfile with every ZIP64 structure.
# ---------------------------------------------------------------------------------------


def cmd_zip64(src, dst):
    """zipfile writes ZIP64 fields past its limits; with the limits at 0, every size and
    offset and the end of the directory are ZIP64 (APPNOTE 4.3.14, 4.5.3), in a small file.
    torch.load reads the result (checked here; in full: IN is a file gen wrote)."""
    zipfile.ZIP64_LIMIT = 0
    zipfile.ZIP_FILECOUNT_LIMIT = 0
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            with zout.open(info.filename, "w", force_zip64=True) as w:
                w.write(zin.read(info))
    with open(dst, "rb") as f:
        data = f.read()
    if data.find(b"PK\x06\x06") < 0 or data.find(b"PK\x06\x07") < 0:
        raise SystemExit("zip64: no ZIP64 end records written")
    torch.load(dst)


# ---------------------------------------------------------------------------------------
# Hostile files: each prints a fragment of the one line ckptfs must refuse it with.
# ---------------------------------------------------------------------------------------

SENTINEL = "/tmp/ckptfs-pytorch-oracle-executed"


def write_zip(out, pkl, records=(), top="archive", byteorder=b"little", method=zipfile.ZIP_STORED):
    with zipfile.ZipFile(out, "w", method) as z:
        z.writestr(f"{top}/data.pkl", pkl)
        if byteorder is not None:
            z.writestr(f"{top}/byteorder", byteorder)
        for name, data in records:
            z.writestr(f"{top}/data/{name}", data)
        z.writestr(f"{top}/version", b"3\n")


def tensor_body(key=b"0", numel=4, offset=0, size=(4,), stride=(1,), cls=b"FloatStorage",
                m0=2):
    """_rebuild_tensor_v2(...) as torch.save pickles it (protocol 2), opcode by opcode; its
    memo indices from m0 on."""
    def tup(v):
        return b"(" + b"".join(b"J" + struct.pack("<i", x) for x in v) + b"t"

    def put(i):
        return b"q" + bytes([m0 + i])
    return (b"ctorch._utils\n_rebuild_tensor_v2\n" + put(0) + b"((X\x07\x00\x00\x00storage" +
            put(1) + b"ctorch\n" + cls + b"\n" + put(2) + b"X" + struct.pack("<I", len(key)) +
            key + b"X\x03\x00\x00\x00cpuJ" + struct.pack("<i", numel) + b"tQJ" +
            struct.pack("<i", offset) + tup(size) + tup(stride) +
            b"\x89ccollections\nOrderedDict\n)Rt" + put(3) + b"R" + put(4))


def tensor_pickle(**kw):
    """{'w': tensor}."""
    return b"\x80\x02}q\x00X\x01\x00\x00\x00wq\x01" + tensor_body(**kw) + b"s."


def bad_file(out, case):
    f32 = bytes(16)
    if case.startswith("global:"):  # a global named, then called: refused where it is named
        module, name = case[7:].rsplit(".", 1)
        write_zip(out, b"\x80\x02c" + f"{module}\n{name}\n".encode() + b")R.")
        return f"offset 2: global {module}.{name} is not one of the classes of a PyTorch state dict"
    if case == "global":
        # os.system("touch SENTINEL") if it were ever executed
        pkl = (b"\x80\x02cos\nsystem\nX" + struct.pack("<I", len("touch " + SENTINEL)) +
               ("touch " + SENTINEL).encode() + b"\x85R.")
        write_zip(out, pkl)
        return "offset 2: global os.system is not one of the classes of a PyTorch state dict"
    if case == "stack_global":
        pkl = b"\x80\x04\x8c\x08builtins\x8c\x04eval\x93."
        write_zip(out, pkl)
        return "offset 18: global builtins.eval"
    if case == "missing_storage":
        write_zip(out, tensor_pickle(key=b"7"), [("0", f32)])
        return "tensor 'w': its storage's record is not in the archive"
    if case == "short_storage":
        write_zip(out, tensor_pickle(numel=8), [("0", f32)])
        return "tensor 'w': its storage is longer than its record"
    if case == "past_storage":
        write_zip(out, tensor_pickle(size=(2, 3), stride=(3, 1)), [("0", f32)])
        return "tensor 'w': its size, stride and offset reach past its storage"
    if case == "offset_past":
        write_zip(out, tensor_pickle(offset=4, size=(1,)), [("0", f32)])
        return "reach past its storage"
    if case == "size_overflow":
        write_zip(out, tensor_pickle(size=(2 ** 31 - 1,) * 3, stride=(0, 0, 0)), [("0", f32)])
        return "tensor 'w': its size makes more bytes than a file holds"
    if case == "deep":
        pkl = b"\x80\x02" + b"}X\x01\x00\x00\x00k" * 40 + b"N" + b"s" * 40 + b"."
        write_zip(out, pkl)
        return "containers nested deeper than ckptfs reads"
    if case == "memo":
        write_zip(out, b"\x80\x02}j\xff\xff\xff\x7f.")
        return "offset 3: a memo index that was never stored"
    if case == "persid_not_tuple":
        write_zip(out, tensor_pickle().replace(b"tQJ", b"tNQJ", 1))
        return "a tensor whose storage is not a persistent id"
    if case == "legacy":
        with open(out, "wb") as f:
            f.write(pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2) + pickle.dumps(1001, protocol=2))
        return "a PyTorch file from before 1.6"
    if case == "compressed":
        write_zip(out, tensor_pickle(), [("0", f32)], method=zipfile.ZIP_DEFLATED)
        return "compressed (torch.save stores every record"
    if case == "big_endian":
        write_zip(out, tensor_pickle(), [("0", f32)], byteorder=b"big")
        return "byteorder is not \"little\""
    if case == "not_zip":
        with open(out, "wb") as f:
            f.write(b"\x80\x02}q\x00.")
        return "not a PyTorch file"
    if case == "bare_tensor":
        write_zip(out, b"\x80\x02" + tensor_body(m0=0) + b".", [("0", f32)])
        return "a value without a name"
    if case == "unknown_storage":
        write_zip(out, tensor_pickle(cls=b"QInt8Storage"), [("0", f32)])
        return "global torch.QInt8Storage is not one of"
    if case == "two_tops":
        with zipfile.ZipFile(out, "w") as z:
            z.writestr("a/data.pkl", tensor_pickle())
            z.writestr("b/data/0", f32)
        return "a record outside the archive's top directory"
    raise SystemExit(f"unknown case {case}")


BAD_CASES = ["global", "stack_global", "missing_storage", "short_storage", "past_storage",
             "offset_past", "size_overflow", "deep", "memo", "persid_not_tuple", "legacy",
             "compressed", "big_endian", "not_zip", "bare_tensor", "unknown_storage", "two_tops"]
# Globals outside the allow-list that real pickles carry (the dangerous ones, numpy
# values older training scripts saved, PyTorch's own that weights_only refuses or that
# no dense state dict holds): each refused by name.
BAD_CASES += ["global:" + g for g in (
    "subprocess.Popen", "builtins.exec", "builtins.getattr", "posix.system", "nt.system",
    "__builtin__.eval", "torch.load", "torch.storage._load_from_bytes",
    "torch._utils._rebuild_qtensor", "torch._utils._rebuild_sparse_tensor",
    "numpy.core.multiarray._reconstruct", "numpy.core.multiarray.scalar", "numpy.dtype",
    "collections.Counter", "torch.float32", "argparse.Namespace")]


# ---------------------------------------------------------------------------------------
# Attacks on the save path (issue 39): files torch loads (weights_only) whose saves went
# wrong.  Each is a real file: written byte by byte, loaded by torch here.
# ---------------------------------------------------------------------------------------


def zip_by_hand(out, records, tail=b""):
    """A ZIP archive of stored records, each (name, data, flags, local extra, after, offset):
    after is the bytes that follow its data (a data descriptor, or nothing); offset, when
    not None, is where its central directory entry says its local header is (the caller
    has put that header there); else its header is written here.  tail: bytes before the
    central directory."""
    body, central = bytearray(), bytearray()
    for name, data, flags, extra, after, at in records:
        name = name.encode()
        crc = zipfile.crc32(data)
        if at is None:
            at = len(body)
            body += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, flags, 0, 0, 0x21, crc,
                                len(data), len(data), len(name), len(extra))
            body += name + extra + data + after
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, flags, 0, 0, 0x21,
                               crc, len(data), len(data), len(name), 0, 0, 0, 0, 0, at) + name
    body += tail
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(records), len(records), len(central),
                      len(body), 0)
    with open(out, "wb") as f:
        f.write(bytes(body) + bytes(central) + end)


def local_header(name, data, flags=0, extra=b""):
    return struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, flags, 0, 0, 0x21, zipfile.crc32(data),
                       len(data), len(data), len(name), len(extra)) + name.encode() + extra


SHARED_DEPTH = 40


def shared_tuple_pickle():
    """OrderedDict {'w': tensor} whose _metadata (BUILD: a value the tree does not show) is
    one tuple referenced twice per level (BINGET), SHARED_DEPTH deep: 2^40 paths, 40 nodes."""
    m = 7  # tensor_body(m0=2) puts 2..6
    t = b")q" + bytes([m])
    for i in range(SHARED_DEPTH):
        t += b"h" + bytes([m + i]) + b"\x86q" + bytes([m + i + 1])  # (t, t): t on the stack
    return (b"\x80\x02ccollections\nOrderedDict\nq\x00)Rq\x01(X\x01\x00\x00\x00w" +
            tensor_body(m0=2) + b"u}X\x09\x00\x00\x00_metadata" + t + b"sb.")


def attack_file(out, case):
    f32 = struct.pack("<4f", 1.5, -2.0, 3.25, 4.0)
    if case == "shared_tuple":
        write_zip(out, shared_tuple_pickle(), [("0", f32)])
    elif case == "overlap":
        # 'a' and 'b' are records data/0 and data/1; data/1's local header is hidden at the
        # end of data/0's extra field, so that data/1's bytes are data/0's
        pkl = (b"\x80\x02}q\x00(X\x01\x00\x00\x00a" + tensor_body(key=b"0", m0=1) +
               b"X\x01\x00\x00\x00b" + tensor_body(key=b"1", m0=6) + b"u.")
        hidden = local_header("archive/data/1", f32)
        extra = struct.pack("<HH", 0xCAFE, len(hidden)) + hidden
        head = local_header("archive/data.pkl", pkl) + pkl
        head += local_header("archive/byteorder", b"little") + b"little"
        a_at = len(head)
        b_at = a_at + 30 + len("archive/data/0") + 4
        zip_by_hand(out, [("archive/data.pkl", pkl, 0, b"", b"", None),
                          ("archive/byteorder", b"little", 0, b"", b"", None),
                          ("archive/data/0", f32, 0, extra, b"", None),
                          ("archive/data/1", f32, 0, b"", b"", b_at),
                          ("archive/version", b"3\n", 0, b"", b"", None)])
        with open(out, "rb") as f:
            raw = f.read()
        if raw[a_at:b_at] == raw[b_at:b_at] or raw[b_at:b_at + 4] != b"PK\x03\x04":
            raise SystemExit("overlap: the hidden header is not where it should be")
    elif case == "no_descriptor":
        # data/0 flagged (bit 3) as followed by a data descriptor that is not there: its
        # CRC and sizes are in its local header, the next record's header follows its bytes
        pkl = tensor_pickle()
        zip_by_hand(out, [("archive/data.pkl", pkl, 0, b"", b"", None),
                          ("archive/byteorder", b"little", 0, b"", b"", None),
                          ("archive/data/0", f32, 0x08, b"", b"", None),
                          ("archive/version", b"3\n", 0, b"", b"", None)])
    elif case == "hidden_tensor":
        # OrderedDict {'w': tensor on data/1} whose _metadata (not shown) is a tensor on
        # data/0: a save that renumbers the storages must renumber its key too
        g32 = struct.pack("<4f", 9.0, 8.0, 7.0, 6.0)
        pkl = (b"\x80\x02ccollections\nOrderedDict\nq\x00)Rq\x01(X\x01\x00\x00\x00w" +
               tensor_body(key=b"1", m0=2) + b"u}X\x09\x00\x00\x00_metadata" +
               tensor_body(key=b"0", m0=7) + b"sb.")
        write_zip(out, pkl, [("0", f32), ("1", g32)])
    else:
        raise SystemExit(f"unknown attack {case}")
    d = torch.load(out, weights_only=True)  # a real file: torch loads it
    if case == "overlap" and not torch.equal(d["a"], d["b"]):
        raise SystemExit("overlap: torch does not read one set of bytes for both")


ATTACKS = ["shared_tuple", "overlap", "no_descriptor", "hidden_tensor"]


def shared_ok(v, depth):
    """v is the shared tuple of that depth: equal, and its two items one object."""
    for _ in range(depth):
        if not isinstance(v, tuple) or len(v) != 2 or v[0] is not v[1]:
            return False
        v = v[0]
    return v == ()


def cmd_attack_check(case, orig, saved, new_out):
    o, d = (torch.load(p, weights_only=True) for p in (orig, saved))
    with zipfile.ZipFile(saved) as z:
        if z.testzip() is not None:
            raise SystemExit(f"zipfile: bad CRC-32 in {z.testzip()}")
        pkl = [i for i in z.infolist() if i.filename.endswith("/data.pkl")][0]
    if case == "shared_tuple":
        # the rename (w -> w2) laid the file out again; the hidden value is kept, shared
        if list(d) != ["w2"] or not torch.equal(d["w2"], o["w"]):
            raise SystemExit(f"shared_tuple: the tensors are not as renamed: {list(d)}")
        # (== of two such values walks 2^40 paths: their structure is checked instead)
        if not shared_ok(o._metadata, SHARED_DEPTH) or not shared_ok(d._metadata, SHARED_DEPTH):
            raise SystemExit("shared_tuple: _metadata is not the shared tuple it was")
        if pkl.file_size > 4096:  # linear in the original's ~600 bytes, not 2^40
            raise SystemExit(f"shared_tuple: data.pkl is {pkl.file_size} bytes")
    elif case == "overlap":
        want = open(new_out, "rb").read()
        if d["a"].numpy().tobytes() != want:
            raise SystemExit("overlap: 'a' is not its edit")
        if not torch.equal(d["b"], o["b"]):
            raise SystemExit("overlap: 'b' changed with 'a'")
    elif case == "no_descriptor":
        want = open(new_out, "rb").read()
        if list(d) != ["w"] or d["w"].numpy().tobytes() != want:
            raise SystemExit("no_descriptor: 'w' is not its edit")
    elif case == "hidden_tensor":
        if list(d) != ["w2"] or not torch.equal(d["w2"], o["w"]):
            raise SystemExit(f"hidden_tensor: the tensors are not as renamed: {list(d)}")
        if not torch.equal(d._metadata, o._metadata):
            raise SystemExit(f"hidden_tensor: _metadata is {d._metadata}, was {o._metadata}")
    else:
        raise SystemExit(f"unknown attack {case}")
    print(f"ok {case}")


# ---------------------------------------------------------------------------------------
# Checks.
# ---------------------------------------------------------------------------------------


def cmd_check(mount, path, trusted):
    entries = load_entries(path, trusted)
    co.check_mounted(mount, entries)
    print(f"ok {len(entries)} leaves")


def cmd_same_as_safetensors(pt, st):
    """PT (torch's load, weights_only) holds ST's tensors (read with json + numpy, as
    safetensors_oracle reads a file), by name, shape and bytes (row-major)."""
    with open(st, "rb") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
        header = json.loads(fh.read(n))
        data = fh.read()
    header.pop("__metadata__", None)
    d = torch.load(pt, weights_only=True)
    if sorted(d) != sorted(header):
        raise SystemExit(f"names differ: {sorted(set(d) ^ set(header))[:5]}")
    for k, h in header.items():
        b, e = h["data_offsets"]
        v = d[k].contiguous()
        if v.dtype == torch.bfloat16:
            v = v.view(torch.int16)
        if list(v.shape) != h["shape"] or v.numpy().tobytes() != data[b:e]:
            raise SystemExit(f"tensor {k!r} differs")
    print(f"ok {len(header)} tensors")


def cmd_parse(path, trusted):
    for e in load_entries(path, trusted):
        print("\t".join([os.fsdecode(e.dirname), e.ms_type, co.shape_text(e.dims).decode(),
                         hashlib.sha256(e.out).hexdigest()[:16]]))


def cmd_overhead(path):
    with zipfile.ZipFile(path) as z:
        storages = sum(i.file_size for i in z.infolist() if "/data/" in i.filename)
    print(os.path.getsize(path) - storages)


def leaf_values(path, trusted):
    return {e.tag.decode(): e for e in load_entries(path, trusted)}


def cmd_edit_check(orig, saved, name, new_out, trusted):
    """SAVED is ORIG with tensor NAME's out replaced by NEW_OUT's bytes, written as ckptfs
    writes values in place: torch loads it (every other leaf as it was), Python's zipfile
    finds every record's CRC-32 right, and the only bytes that differ are the tensor's
    storage record and the CRC fields of that record (old CRC replaced by the new)."""
    want = open(new_out, "rb").read()
    a, b = leaf_values(orig, trusted), leaf_values(saved, trusted)
    if sorted(a) != sorted(b):
        raise SystemExit(f"leaves differ: {sorted(set(a) ^ set(b))}")
    for k in a:
        exp = want if k == name else a[k].out
        if b[k].out != exp or b[k].dims != a[k].dims or b[k].ms_type != a[k].ms_type:
            raise SystemExit(f"leaf {k!r}: not as expected after the edit")
    with zipfile.ZipFile(saved) as z:
        bad = z.testzip()
        if bad is not None:
            raise SystemExit(f"zipfile: bad CRC-32 in {bad}")
    x, y = open(orig, "rb").read(), open(saved, "rb").read()
    if len(x) != len(y):
        raise SystemExit(f"size {len(y)}, the original's {len(x)}")
    with zipfile.ZipFile(orig) as z:
        info = [i for i in z.infolist() if i.filename.endswith("/data/" + leaf_key(orig, name))]
    if len(info) != 1:
        raise SystemExit(f"no one record for {name}")
    i = info[0]
    nlen, xlen = struct.unpack("<HH", x[i.header_offset + 26:i.header_offset + 30])
    begin = i.header_offset + 30 + nlen + xlen
    end = begin + i.file_size
    old_crc, new_crc = struct.pack("<I", i.CRC), struct.pack("<I", zipfile.crc32(want))
    crc_fields = 0
    pos = 0
    while pos < len(x):
        if begin <= pos < end or x[pos] == y[pos]:
            pos += 1
            continue
        at = next((p for p in range(pos - 3, pos + 1)
                   if x[p:p + 4] == old_crc and y[p:p + 4] == new_crc), None)
        if at is None:
            raise SystemExit(f"byte {pos} changed, outside the record and its CRC fields")
        crc_fields += 1
        pos = at + 4
    print(f"ok: record [{begin}, {end}), {crc_fields} CRC fields")


def leaf_key(path, name):
    """The storage key of tensor NAME (a top-level key here), read by torch's own loader."""
    keys = {}

    class Find(pickle.Unpickler):
        def persistent_load(self, pid):
            return pid[2]

        def find_class(self, module, cls):
            if (module, cls) == ("torch._utils", "_rebuild_tensor_v2"):
                return lambda key, *rest: key
            if (module, cls) == ("collections", "OrderedDict"):
                return collections.OrderedDict
            if module == "torch" and cls.endswith("Storage"):
                return cls
            if (module, cls) == ("torch._utils", "_rebuild_parameter"):
                return lambda t, *rest: t
            raise pickle.UnpicklingError(f"{module}.{cls}")
    with zipfile.ZipFile(path) as z:
        pkl = [n for n in z.namelist() if n.endswith("/data.pkl")][0]
        keys = Find(io.BytesIO(z.read(pkl))).load()
    return keys[name]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("gen")
    p.add_argument("out")
    p.add_argument("--case", required=True)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--count", type=int, default=100)
    p = sub.add_parser("check")
    p.add_argument("mount")
    p.add_argument("file")
    p.add_argument("--trusted", action="store_true", help="a file gen wrote (see load_entries)")
    p = sub.add_parser("parse")
    p.add_argument("file")
    p.add_argument("--trusted", action="store_true")
    p = sub.add_parser("zip64")
    p.add_argument("src")
    p.add_argument("dst")
    sub.add_parser("bad-cases")
    p = sub.add_parser("bad-all", help="every bad case as DIR/bad-CASE.pt; prints CASE<TAB>message")
    p.add_argument("dir")
    p = sub.add_parser("attack-all", help="every attack as DIR/attack-CASE.pt")
    p.add_argument("dir")
    p = sub.add_parser("attack-check")
    p.add_argument("case", choices=ATTACKS)
    p.add_argument("orig")
    p.add_argument("saved")
    p.add_argument("new_out", nargs="?")
    p = sub.add_parser("edit-check")
    p.add_argument("orig")
    p.add_argument("saved")
    p.add_argument("name")
    p.add_argument("new_out")
    p.add_argument("--trusted", action="store_true")
    p = sub.add_parser("same-as-safetensors")
    p.add_argument("pt")
    p.add_argument("st")
    p = sub.add_parser("overhead")
    p.add_argument("file")
    a = ap.parse_args(argv)
    if a.cmd == "gen":
        cmd_gen(a.out, a.case, a.seed, a.count)
    elif a.cmd == "check":
        cmd_check(a.mount, a.file, a.trusted)
    elif a.cmd == "parse":
        cmd_parse(a.file, a.trusted)
    elif a.cmd == "zip64":
        cmd_zip64(a.src, a.dst)
    elif a.cmd == "same-as-safetensors":
        cmd_same_as_safetensors(a.pt, a.st)
    elif a.cmd == "overhead":
        cmd_overhead(a.file)
    elif a.cmd == "edit-check":
        cmd_edit_check(a.orig, a.saved, a.name, a.new_out, a.trusted)
    elif a.cmd == "attack-all":  # one process: importing torch costs seconds
        for c in ATTACKS:
            attack_file(os.path.join(a.dir, "attack-%s.pt" % c), c)
            print(c)
    elif a.cmd == "attack-check":
        cmd_attack_check(a.case, a.orig, a.saved, a.new_out)
    elif a.cmd == "bad-cases":
        print(" ".join(BAD_CASES))
    elif a.cmd == "bad-all":  # one process: importing torch costs seconds
        for c in BAD_CASES:
            print("%s\t%s" % (c, bad_file(os.path.join(a.dir, "bad-%s.pt" % c), c)))


if __name__ == "__main__":
    main()
