#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Model-based random test of a writable ckptfs mount (in the spirit of fsx,
and of mountpoint-s3's reference model tests).

A seed drives random sequences of operations through ordinary file APIs on a
real FUSE mount: ranged writes (pwrite), truncates, meta edits (in several of
the text forms protobuf's text_format accepts, written in place or renamed
over), a new tensor (mkdir + meta + out), `rm -r` and `mv` of a tensor
directory, saves (touch snapshot_done, fsync of a file or the root), unmount
and remount, and kill -9 of the daemon followed by `fusermount3 -uz` and a
remount.  A Python reference model (tensor directory -> type, shape, bytes,
in order) predicts every result, including the refusals: EBUSY for a tensor
a graph node reads, ENOTEMPTY, EEXIST, EINVAL for a bad name or meta, a save
that fails while a tensor's out does not match its meta.  After kill -9, or
an unmount whose save fails, the reference rolls back to the last save and
the files must be byte for byte the last saved ones.  With automatic saves
(--auto) the reference keeps every valid state since the last known save,
and the file must hold one of them.

After every save: the tree read through the mount equals the reference; the
file, parsed by an independent oracle (tests/oracle/ckpt_oracle.py,
python3-onnx through graph_oracle.py, MindIR through protobuf; decrypted by
envelope_oracle.py or `zstd -d` first; safetensors by safetensors_oracle.py; PyTorch
by torch.load), equals
the reference, names and order included; snapshot_done exists; an ONNX model
passes onnx.checker and keeps each tensor's storage (raw, typed, external
file); a split MindIR keeps MindSpore's data file layout.  Formats: see FORMATS
and MANUAL_FORMATS.  Half the checkpoints and ONNX models hold a tensor over
1 MiB, so that edits cross the decrypted pages and the zstd frames.  The
MANUAL_FORMATS run with manual saves and one client thread only (their
reference does not model automatic or concurrent saves yet).

safetensors-set: three shards cut at random, each checked as a safetensors file
below; the index byte for byte what transformers writes; new tensors in the last
shard.  pytorch: a flat state dict torch 1.13 wrote, with a tied pair; each save
read by torch.load(weights_only=True); an edit of one of the pair unties it, as the
tree shows them apart.

safetensors (manual saves, one thread): the file made by safetensors_oracle's writer
holds every dtype with a OneFlow type, F8 and F4 (shown as bytes without w bits: every
edit refused with EACCES), 0-d and empty tensors, names to escape and __metadata__; half the seeds in
the 2022 layout (name order, unpadded).  A meta of kChar or kComplex128, or a name
holding NUL (directory %00), is accepted, the save refused (EINVAL).  After each save,
besides dtypes, shapes, bytes, order and __metadata__: when every tensor of the last
file kept its name, dtype and shape and none was added, every byte outside the changed
tensors is the last file's; otherwise the file is byte for byte the oracle writer's
layout of its own tensors.

    model_test.py --ckptfs build/ckptfs --format ckpt --seed 1 --steps 300
    model_test.py --ckptfs build/ckptfs --format all --seeds 1-200 --steps 2000
    model_test.py --ckptfs build/ckptfs --format all --seeds 1-20 --steps 2000 --auto --commit-delay 0

(the long runs: about 300 steps a second, some 25 minutes per format).

--threads N: N client threads at once, each on its own tensors (the free ones
dealt round-robin; new ones it makes), with pwrite, reshapes, new types, mv,
rm -r, mkdir and refused metas, each asking for saves (touch, create, fsync)
while the others edit.  After each of its saves a thread checks that the file
holds every edit it made before, in the tree's order, and that the mount shows
them; other threads' tensors may have changed since and are not compared then.
Edits that leave a tensor incomplete for a moment (a new type: meta then out;
mkdir; rm -r) never overlap a save, so every save must succeed.  touch and
create are several requests, and another thread's edit may take the name
snapshot_done away between them; they must succeed all the same (the inode they
hold stays snapshot_done, as an unlinked file stays open).  When the threads
end, the whole tree is completed, saved, checked and remounted as in a
single-threaded run.  --mount-opts passes more -o options (the multi-threaded
loop).  It found a save dropping the buffer of a meta open for writing (the
next write failed with EBADF).

--avoid steers the generator clear of the defects this test found, now fixed
and kept as seeded regressions in tests/bats/random_ops.bats, to bisect older
builds: superseded-gap (superseded .ckpt records saved next to each other after
the tensor between them was deleted), dl-default (an inline ONNX tensor's
explicit data_location: DEFAULT dropped on rewrite), empty-ckpt (a .ckpt
emptied by deleting its last tensor), autosave-tmpfile (automatic saves stopped
for good by a file created in the mount), meta-across-save (the EBADF above).

A failure prints the seed, the step, the operation, a short diff (tensor
and first differing byte) and the log of every operation so far; the run is
reproducible from the seed (manual-save runs exactly; with automatic saves
the timing of the saves is the daemon's, which the reference allows for).
Exit status: 0 all passed, 1 a mismatch, 2 usage or setup error.
"""

import argparse
import contextlib
import errno
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import random as pyrandom

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "oracle"))

import numpy as np  # noqa: E402
from google.protobuf import text_format  # noqa: E402

import ckpt_oracle as co  # noqa: E402
import envelope_oracle as eo  # noqa: E402

FIXTURES = os.path.join(os.path.dirname(REPO), "shared", "fixtures")
ORI_NET = os.path.join(FIXTURES, "mindspore", "mindspore_ori_net.mindir")
KEY_HEX = "30313233343536373839414243444546"
MIB = 1 << 20

ITEMSIZE = {"kFloat": 4, "kDouble": 8, "kFloat16": 2, "kBFloat16": 2, "kInt8": 1, "kInt16": 2,
            "kInt32": 4, "kInt64": 8, "kUInt8": 1, "kUInt16": 2, "kUInt32": 4, "kUInt64": 8,
            "kBool": 1, "kComplex64": 8, "kComplex128": 16, "kChar": 1}
EDIT_TYPES = [t for t in ITEMSIZE if t != "kChar"]

FORMATS = ["ckpt", "ckpt-superseded", "onnx-external", "mindir-split", "mindir",
           "ckpt-gcm", "ckpt-cbc", "mindir-gcm", "ckpt-zst", "onnx-zst"]
# Formats run with manual saves and one client thread only, and not part of --format all
# (their reference does not yet model the tensor order of automatic or concurrent saves).
MANUAL_FORMATS = ["safetensors", "safetensors-set", "pytorch"]


class Mismatch(Exception):
    """The mount or the file differs from the reference."""


# ---------------------------------------------------------------------------------------
# Values.  Every byte written is taken from a valid value of the tensor's type at the
# same byte position, so the oracles (which read typed ONNX fields as numbers) see the
# exact bytes: no NaN payloads, booleans 0 or 1.
# ---------------------------------------------------------------------------------------

def valid_bytes(rng, of_type, nelem):
    n = max(nelem, 0)
    if of_type in ("kFloat", "kDouble", "kFloat16"):
        dt = {"kFloat": "<f4", "kDouble": "<f8", "kFloat16": "<f2"}[of_type]
        return (rng.standard_normal(n) * 4).astype(dt).tobytes()
    if of_type == "kBFloat16":
        f = rng.standard_normal(n).astype("<f4").view("<u4")
        return (f >> 16).astype("<u2").tobytes()
    if of_type in ("kComplex64", "kComplex128"):
        z = rng.standard_normal(n) + 1j * rng.standard_normal(n)
        return z.astype("<c8" if of_type == "kComplex64" else "<c16").tobytes()
    if of_type == "kBool":
        return rng.integers(0, 2, size=n, dtype=np.uint8).tobytes()
    if of_type == "kChar":
        return bytes(rng.integers(0x61, 0x7b, size=n, dtype=np.uint8))
    dt = np.dtype({"kInt8": "i1", "kInt16": "<i2", "kInt32": "<i4", "kInt64": "<i8",
                   "kUInt8": "u1", "kUInt16": "<u2", "kUInt32": "<u4",
                   "kUInt64": "<u8"}[of_type])
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max, size=n, dtype=dt, endpoint=True).tobytes()


def slice_of_valid(rng, of_type, off, n):
    """n bytes for byte offset off: the same positions of a valid array."""
    size = ITEMSIZE.get(of_type or "kUInt8", 1)
    first = off // size
    last = (off + n + size - 1) // size
    buf = valid_bytes(rng, of_type or "kUInt8", last - first)
    start = off - first * size
    return buf[start:start + n]


def nbytes_of(of_type, dims):
    n = ITEMSIZE[of_type]
    for d in dims:
        n *= d
    return n


def meta_text(rng, of_type, dims):
    """A meta for (type, dims) in one of the forms protobuf's text parser accepts; checked
    against text_format itself so the test never asks ckptfs for more than protobuf."""
    canonical = co.meta_bytes(dims, of_type)
    form = rng.integers(0, 6)
    msg = co.VariableMetaInfo()
    text_format.Parse(canonical.decode(), msg)
    if form == 0:
        text = canonical.decode()
    elif form == 1:
        text = text_format.MessageToString(msg, as_one_line=True)
    elif form == 2:
        text = "# written by model_test\n" + canonical.decode().replace("\n", "  # c\n", 1)
    elif form == 3:
        text = "data_type: %d\nshape { %s}\n" % (
            co._DATA_TYPE_ENUM.values_by_name[of_type].number,
            "".join("dim: %d " % d for d in dims))
    elif form == 4:
        text = text_format.MessageToString(msg, use_short_repeated_primitives=True)
    else:
        text = "shape:{%s} data_type:%s" % (" ".join("dim:%d" % d for d in dims), of_type)
    back = co.VariableMetaInfo()
    text_format.Parse(text, back)
    assert back == msg, (text, msg)
    return text.encode()


BAD_METAS = [b"shape {\n  dim: 3\n}\ndata_type: kFloat32\n", b"shape { dim: 3\ndata_type: kFloat\n",
             b"shape {\n}\ndata_type: kFloat\nbogus: 1\n", b"shape { dim: x }\ndata_type: kInt8\n",
             b"garbage"]


def check_bad_metas():
    for text in BAD_METAS:
        try:
            text_format.Parse(text.decode(), co.VariableMetaInfo())
        except text_format.ParseError:
            continue
        raise AssertionError("protobuf accepts the 'bad' meta %r" % text)


# ---------------------------------------------------------------------------------------
# The reference: an ordered list of tensors.  Each is a tuple
#   (dirname bytes, of_type or None, dims tuple or None, data bytes or None, store)
# of_type None: no meta (a new directory); data None: no out.  store is the storage the
# tensor had in the original file (ONNX: raw/typed/ext:LOCATION, "+dl" when the inline
# tensor carried an explicit data_location), carried by renames; None for new tensors.
# ---------------------------------------------------------------------------------------

D, T, S, B, ST = range(5)


def valid_entry(e):
    if e[T] is None or e[B] is None:
        return False
    return e[T] == "kChar" or len(e[B]) == nbytes_of(e[T], e[S])


def state_valid(state):
    return all(valid_entry(e) for e in state)


def view(state):
    """What the file must hold: (dirname, meta bytes, out) in order."""
    return [(e[D], co.meta_bytes(list(e[S]), e[T]), e[B]) for e in state]


def unescape(dirname):
    """A tensor's name from its directory name (the listing rule reversed)."""
    if dirname == b"%":
        return b""
    out, i = bytearray(), 0
    while i < len(dirname):
        if dirname[i] == 0x25:
            out.append(int(dirname[i + 1:i + 3], 16))
            i += 3
        else:
            out.append(dirname[i])
            i += 1
    return bytes(out)


def first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def diff_views(want, got, what):
    """A short description of the first difference, or None."""
    wn, gn = [w[0] for w in want], [g[0] for g in got]
    if wn != gn:
        missing = [n for n in wn if n not in gn]
        extra = [n for n in gn if n not in wn]
        if missing or extra:
            return "%s: tensors missing %r, unexpected %r" % (what, missing[:5], extra[:5])
        k = first_diff(wn, gn)
        return "%s: order differs at position %d: expected %r, found %r" % (what, k, wn[k], gn[k])
    for (name, wm, wo), (_n, gm, go_) in zip(want, got):
        if wm != gm:
            return "%s: tensor %r: meta %r, expected %r" % (what, name, gm, wm)
        if wo != go_:
            return "%s: tensor %r: out of %d bytes, expected %d; first difference at byte %d" % (
                what, name, len(go_), len(wo), first_diff(wo, go_))
    return None


# ---------------------------------------------------------------------------------------
# Models: build the file, and parse it back with the independent oracles.
# ---------------------------------------------------------------------------------------

_MINDIR_PB = None


def mindir_pb():
    global _MINDIR_PB
    if _MINDIR_PB is None:
        import graph_oracle
        _MINDIR_PB = graph_oracle.mindir_module()
    return _MINDIR_PB


def graph_entries(path, mindir):
    """Oracle view of an ONNX or MindIR model, plus the busy directories (Constant values,
    subgraph tensors, and initializers/parameters some node reads) and the storages."""
    import graph_oracle as go
    w = go.Walker(path, mindir, mindir_pb() if mindir else None)
    entries = w.walk()
    graphs = [w.model.graph] + (list(w.model.functions) if mindir else [])
    busy = set()
    for e in entries:
        if not e.top or any(True for g in graphs for _r in go.readers(g, e.tag)):
            busy.add(e.dirname)
    stores = {}
    tensors = list(w.model.graph.parameter if mindir else w.model.graph.initializer)
    by_name = {}
    for t in tensors:
        by_name[t.name.encode()] = t
    for e in entries:
        t = by_name.get(e.tag) if e.top else None
        if t is None:
            continue
        if mindir:
            stores[e.dirname] = ("ext:" + t.external_data.location) if t.HasField("external_data") \
                else "inline"
        elif t.HasField("data_location") and t.data_location == 1:
            kv = {x.key: x.value for x in t.external_data}
            stores[e.dirname] = "ext:" + kv.get("location", "?")
        else:
            kind = "raw" if t.HasField("raw_data") else "typed"
            if len([f for f in ("float_data", "int32_data", "int64_data", "double_data",
                                "uint64_data", "string_data") if len(getattr(t, f))]) == 0 \
                    and not t.HasField("raw_data"):
                kind = "empty"
            stores[e.dirname] = kind + ("+dl" if t.HasField("data_location") else "")
    return [(e.dirname, e.meta, e.out) for e in entries], busy, stores, entries


class Model:
    """One model on disk: its files, how to parse it, its mount options."""

    fmt = None
    mindir = False
    graph = False

    def __init__(self, tmp, rng, avoid=()):
        self.tmp = tmp
        self.rng = rng
        self.avoid = avoid
        self.opts = []
        self.env = {}
        self.reader_names = []  # names some node reads that are not tensors (ONNX)
        self.gaps = set()  # .ckpt tensors between two records of one tag

    def files(self):
        """Every file of the model (model file, data files), for byte comparisons."""
        out = [self.path]
        for extra in getattr(self, "data_files", []):
            out.append(extra)
        return out

    def plain_bytes(self):
        with open(self.path, "rb") as f:
            return f.read()

    def parse(self):
        """(view, busy dirnames, stores)."""
        raise NotImplementedError

    def initial_state(self):
        v, busy, stores = self.parse()
        state = []
        for name, meta, out in v:
            msg = co.VariableMetaInfo()
            text_format.Parse(meta.decode(), msg)
            of_type = co._DATA_TYPE_ENUM.values_by_number[msg.data_type].name
            state.append((name, of_type, tuple(msg.shape.dim), out,
                          "gap" if name in self.gaps else stores.get(name)))
        return state, busy

    edit_types = EDIT_TYPES
    extra_ops = []

    def frozen(self, e):
        return e[T] == "kChar"

    def readonly(self, e):
        """A tensor every edit of which is refused with EACCES (rm -r and mv included)."""
        return False

    def saveable(self, state):
        """Beyond complete tensors: whether the format can hold every tensor's type."""
        return True

    def unsaveable(self, e):
        """A tensor's type the format cannot hold: op_complete retypes it."""
        return False

    def bad_name(self, e):
        """A tensor's name the format cannot hold: op_complete renames it."""
        return False

    def settle(self, state):
        """A save succeeded: the reference as the file now holds it (order, storage)."""
        return state

    def invariants(self, state):
        """Extra checks of the saved file (layout); returns a message or None."""
        return None


def ckpt_view(buf):
    entries, crc = co.reference_parse(buf)
    if crc == "mismatch":
        raise Mismatch("the saved file's CRC-32 trailer does not match its body")
    return [(e.dirname, e.meta, e.out) for e in entries], crc


def ckpt_records(rng, superseded):
    R, V = co.record, co.tensor_value
    recs = []
    specs = [("net.conv1.weight", "Float32", [2, 3, 4]), ("net.fc.weight", "Float16", [3, 4]),
             ("net.fc.bias", "Float64", [5]), ("net.bf16", "BFloat16", [3, 2]),
             ("t.int8", "Int8", [5]), ("t.int16", "Int16", [3, 2]), ("t.int64", "Int64", [2, 3]),
             ("t.uint8", "UInt8", [7]), ("t.uint32", "UInt32", [2, 2]), ("t.bool", "Bool", [3]),
             ("t.complex64", "Complex64", [2]), ("t/slash", "Float32", [2]),
             ("empty_3d", "Float32", [2, 0, 3])]
    if superseded:
        # [v, w, v]: the first v is superseded (the tree shows w, v); s is three adjacent
        # slices; dup is replaced by a sliced later value; an unknown top-level field
        # (v0.5's model_type) sits between records.
        recs += [R(V("v", "Float32", [4], co.random_tensor(rng, "Float32", [4]))),
                 R(V("w", "Int32", [3], co.random_tensor(rng, "Int32", [3]))),
                 R(V("v", "Float64", [2], co.random_tensor(rng, "Float64", [2])))]
        recs += co.gen_records("repeat", rng, 0)
        recs += co.gen_records("sliced", rng, 0)
        recs += [R(V("a", "Int16", [2], co.random_tensor(rng, "Int16", [2]))),
                 R(V("b", "UInt8", [3], co.random_tensor(rng, "UInt8", [3]))),
                 R(V("a", "UInt8", [4], co.random_tensor(rng, "UInt8", [4]))),
                 R(V("c", "Float32", [1], co.random_tensor(rng, "Float32", [1]))),
                 R(V("a", "Int8", [2], co.random_tensor(rng, "Int8", [2])))]
        return recs + big_record(rng)
    for tag, t, dims in specs:
        recs.append(R(V(tag, t, dims, co.random_tensor(rng, t, dims))))
    recs += [R(V("scalar", "Float32", [], co.random_tensor(rng, "Float32", []))),
             R(V("scalar_dims0", "Float64", [0], co.random_tensor(rng, "Float64", []))),
             R(V("empty_1d", "Int32", [0], b"")),
             R(co.str_value("info.str", "h\u00e9llo"))]
    return recs + big_record(rng)


def big_record(rng):
    """Half the models hold a tensor over 3 MiB: edits then cross the 1 MiB pages of an
    encrypted model and the 2 MiB frames of a zstd one."""
    if rng.integers(0, 2):
        return []
    n = 3 * MIB + 123
    return [co.record(co.tensor_value("big.blob", "UInt8", [n], co.random_bytes(rng, n)))]


class Ckpt(Model):
    fmt = "ckpt"

    def build(self, superseded=False, crc=False):
        recs = ckpt_records(self.rng, superseded)
        if crc:
            import zlib
            recs.append(b"crc_num" + zlib.crc32(b"".join(recs)).to_bytes(10, "big"))
        self.path = os.path.join(self.tmp, "net.ckpt")
        self.plain = b"".join(recs)
        self.write_model(self.plain)
        self.crc = crc
        if superseded:
            self.gaps = {b"w", b"other.a", b"other.b", b"b", b"c"}

    def write_model(self, plain):
        with open(self.path, "wb") as f:
            f.write(plain)

    def parse(self):
        v, crc = ckpt_view(self.plain_bytes())
        if crc != ("ok" if self.crc else "absent"):
            raise Mismatch("CRC trailer %s, expected %s" % (crc, "ok" if self.crc else "absent"))
        return v, set(), {}


class CkptCipher(Ckpt):
    def build(self, mode):
        self.mode = mode
        super().build(superseded=bool(self.rng.integers(0, 2)))

    def write_model(self, plain):
        self.path = os.path.join(self.tmp, "net.ckpt")
        src = os.path.join(self.tmp, "plain.tmp")
        with open(src, "wb") as f:
            f.write(plain)
        eo.cmd_encrypt(argparse.Namespace(mode=self.mode, key_hex=KEY_HEX, inp=src, out=self.path,
                                          block_size=64 << 20, force_block_size=False))
        os.unlink(src)
        if self.mode == "AES-GCM":
            key = os.path.join(self.tmp, "net.key")
            fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.write(fd, bytes.fromhex(KEY_HEX))
            os.close(fd)
            self.opts = ["key_file=" + key]
        else:
            self.env = {"CKPTFS_KEY_HEX": KEY_HEX}

    def plain_bytes(self):
        out = os.path.join(self.tmp, "decrypted.tmp")
        try:
            eo.cmd_decrypt(argparse.Namespace(key_hex=KEY_HEX, inp=self.path, out=out,
                                              expect_mode=self.mode))
        except SystemExit as exc:
            raise Mismatch("the saved file does not decrypt as %s: exit %s" % (self.mode, exc))
        with open(out, "rb") as f:
            data = f.read()
        os.unlink(out)
        return data


def unzstd(path):
    p = subprocess.run(["zstd", "-q", "-d", "-c", path], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
    if p.returncode != 0:
        raise Mismatch("zstd -d refuses the saved file: %s" % p.stderr.decode().strip())
    return p.stdout


class CkptZst(Ckpt):
    def build(self):
        super().build(superseded=bool(self.rng.integers(0, 2)))

    def write_model(self, plain):
        src = os.path.join(self.tmp, "net.ckpt")
        with open(src, "wb") as f:
            f.write(plain)
        subprocess.run(["zstd", "-q", "-f", "--rm", src, "-o", src + ".zst"], check=True)
        self.path = src + ".zst"

    def plain_bytes(self):
        return unzstd(self.path)


def build_onnx(tmp, rng, path, external, dl_default=True):
    """An ONNX model made with onnx.helper: initializers in every storage (raw_data,
    typed fields, external data in two files, one inline with an explicit
    data_location DEFAULT), two read by nodes, a Constant, and an If whose branches hold a
    tensor each."""
    import onnx
    from onnx import TensorProto, helper
    data_files = {}

    def raw(name, code, of_type, dims, explicit_default=False):
        t = helper.make_tensor(name, code, dims, valid_bytes(rng, of_type, int(np.prod(dims))),
                               raw=True)
        if explicit_default:
            t.data_location = TensorProto.DEFAULT
        return t

    def typed(name, code, of_type, dims):
        arr = np.frombuffer(valid_bytes(rng, of_type, int(np.prod(dims))),
                            dtype={"kFloat": "<f4", "kDouble": "<f8", "kInt64": "<i8",
                                   "kInt8": "i1", "kUInt64": "<u8", "kBool": "u1",
                                   "kInt32": "<i4", "kUInt16": "<u2"}[of_type])
        if of_type == "kBool":
            arr = arr.astype(bool)
        return helper.make_tensor(name, code, dims, arr.ravel().tolist())

    def ext(name, code, of_type, dims, location):
        data = valid_bytes(rng, of_type, int(np.prod(dims)))
        buf = data_files.setdefault(location, bytearray())
        buf += bytes(-len(buf) % 16)
        off = len(buf)
        buf += data
        t = helper.make_tensor(name, code, dims, data, raw=True)
        onnx.external_data_helper.set_external_data(t, location, off, len(data))
        t.data_location = TensorProto.EXTERNAL
        t.ClearField("raw_data")
        return t

    F = TensorProto
    if external:
        inits = [ext("used_w", F.FLOAT, "kFloat", [4], "weights.bin"),
                 ext("free_ext1", F.FLOAT, "kFloat", [3, 4], "weights.bin"),
                 ext("free_ext2", F.INT64, "kInt64", [5], "sub/extra.bin"),
                 ext("free_ext3", F.FLOAT16, "kFloat16", [2, 3], "weights.bin")]
        if rng.integers(0, 2):  # over 1 MiB: appended 4096-aligned when resized
            inits.append(ext("big_ext", F.FLOAT, "kFloat", [400000], "weights.bin"))
    else:
        inits = [raw("used_w", F.FLOAT, "kFloat", [4])]
        if rng.integers(0, 2):  # across the 2 MiB frames of a zstd save
            inits.append(raw("big_raw", F.FLOAT, "kFloat", [600000]))
    inits += [typed("used_b", F.FLOAT, "kFloat", [4]),
              raw("free_raw", F.DOUBLE, "kDouble", [3]),
              raw("free_raw_dl", F.INT32, "kInt32", [4], explicit_default=dl_default),
              typed("free_f", F.FLOAT, "kFloat", [2, 2]),
              typed("free_i64", F.INT64, "kInt64", [3]),
              typed("free_i8", F.INT8, "kInt8", [5]),
              typed("free_bool", F.BOOL, "kBool", [4]),
              typed("free_u64", F.UINT64, "kUInt64", [2]),
              typed("free_d", F.DOUBLE, "kDouble", [2]),
              typed("free_u16", F.UINT16, "kUInt16", [3]),
              raw("free_scalar", F.FLOAT, "kFloat", []),
              raw("free_empty", F.FLOAT, "kFloat", [0]),
              raw("free_bf16", F.BFLOAT16, "kBFloat16", [3])]
    then_g = helper.make_graph([helper.make_node("Identity", ["t_init"], ["t_out"])], "then",
                               [], [helper.make_tensor_value_info("t_out", F.FLOAT, [4])],
                               initializer=[raw("t_init", F.FLOAT, "kFloat", [4])])
    else_g = helper.make_graph(
        [helper.make_node("Constant", [], ["e_out"], value=raw("e_val", F.FLOAT, "kFloat", [4]))],
        "else", [], [helper.make_tensor_value_info("e_out", F.FLOAT, [4])])
    nodes = [helper.make_node("Add", ["X", "used_w"], ["A"], name="add0"),
             helper.make_node("Mul", ["A", "used_b"], ["Y0"], name="mul0"),
             helper.make_node("Constant", [], ["k"], value=raw("k_val", F.FLOAT, "kFloat", [4])),
             helper.make_node("Add", ["Y0", "k"], ["Y"], name="add1"),
             helper.make_node("If", ["cond"], ["Z"], name="If_0", then_branch=then_g,
                              else_branch=else_g)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("X", F.FLOAT, [4]),
                                       helper.make_tensor_value_info("cond", F.BOOL, [])],
                          [helper.make_tensor_value_info("Y", F.FLOAT, [4]),
                           helper.make_tensor_value_info("Z", F.FLOAT, [4])],
                          initializer=inits)
    m = helper.make_model(g, producer_name="model_test", opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    for loc, buf in data_files.items():
        p = os.path.join(tmp, loc)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(buf)
    with open(path, "wb") as f:
        f.write(m.SerializeToString())
    onnx.checker.check_model(path)
    return [os.path.join(tmp, loc) for loc in data_files]


class Onnx(Model):
    graph = True

    def build(self, external=True):
        self.path = os.path.join(self.tmp, "model.onnx")
        self.data_files = build_onnx(self.tmp, self.rng, self.path, external,
                                     "dl-default" not in self.avoid)
        self.reader_names = [b"X", b"cond"]

    def model_path(self):
        return self.path

    def parse(self):
        v, busy, stores, _ = graph_entries(self.model_path(), False)
        return v, busy, stores

    def invariants(self, state):
        import onnx
        try:
            onnx.checker.check_model(self.model_path())
        except Exception as exc:  # noqa: BLE001 - any checker complaint is a failure
            return "onnx.checker refuses the saved model: %s" % str(exc).splitlines()[0]
        return None


class OnnxZst(Onnx):
    def build(self):
        plain = os.path.join(self.tmp, "model.onnx")
        self.data_files = build_onnx(self.tmp, self.rng, plain, False,
                                     "dl-default" not in self.avoid)
        subprocess.run(["zstd", "-q", "-f", "--rm", plain, "-o", plain + ".zst"], check=True)
        self.path = plain + ".zst"
        self.reader_names = [b"X", b"cond"]

    def model_path(self):
        p = os.path.join(self.tmp, "plain", "model.onnx")
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(unzstd(self.path))
        return p


class MindIR(Model):
    graph = True
    mindir = True

    def build(self, split):
        self.split = split
        if split:
            prefix = os.path.join(self.tmp, "net")
            args = [sys.executable, os.path.join(REPO, "tests", "oracle", "split_mindir.py"),
                    ORI_NET, prefix] + (["--sorted"] if self.rng.integers(0, 2) else [])
            subprocess.run(args, check=True)
            self.path = prefix + "_graph.mindir"
            self.data_files = [prefix + "_variables/data_0"]
        else:
            self.path = os.path.join(self.tmp, "net.mindir")
            shutil.copyfile(ORI_NET, self.path)
        os.chmod(self.path, 0o644)

    def parse(self):
        v, busy, stores, _ = graph_entries(self.path, True)
        return v, busy, stores

    def invariants(self, state):
        if not self.split:
            return None
        # The layout MindSpore's loader expects of a split model (formats 4.4).
        pb = mindir_pb()
        m = pb.ModelProto()
        with open(self.path, "rb") as f:
            m.ParseFromString(f.read())
        for t in m.graph.parameter:
            if not t.HasField("external_data") or t.HasField("raw_data"):
                return "parameter %r is not external data" % t.name
            e = t.external_data
            with open(os.path.join(self.tmp, e.location), "rb") as f:
                data = f.read()
            if data[:64] != b"\1" + bytes(63) or len(data) % 64:
                return "data file %s: front info or 64-byte padding broken" % e.location
            if e.offset % 64 or e.offset < 64:
                return "parameter %r at offset %d: not 64-byte aligned past the front info" % (
                    t.name, e.offset)
        return None


class MindIRCipher(MindIR):
    """ori_net.mindir encrypted with AES-GCM, as mindspore.export(enc_key=...) writes it."""

    def build(self):
        self.split = False
        plain = os.path.join(self.tmp, "plain.tmp")
        shutil.copyfile(ORI_NET, plain)
        self.path = os.path.join(self.tmp, "net.mindir")
        eo.cmd_encrypt(argparse.Namespace(mode="AES-GCM", key_hex=KEY_HEX, inp=plain, out=self.path,
                                          block_size=64 << 20, force_block_size=False))
        os.unlink(plain)
        self.env = {"CKPTFS_KEY_HEX": KEY_HEX}

    def model_path(self):
        p = os.path.join(self.tmp, "plain", "net.mindir")
        os.makedirs(os.path.dirname(p), exist_ok=True)
        try:
            eo.cmd_decrypt(argparse.Namespace(key_hex=KEY_HEX, inp=self.path, out=p,
                                              expect_mode="AES-GCM"))
        except SystemExit as exc:
            raise Mismatch("the saved file does not decrypt as AES-GCM: exit %s" % exc)
        return p

    def parse(self):
        v, busy, stores, _ = graph_entries(self.model_path(), True)
        return v, busy, stores


# safetensors: the oracle is safetensors_oracle (json + numpy), never ckptfs code.
# OneFlow meta type -> the dtype a changed tensor is saved as; kChar and kComplex128 have
# none (the save is refused).  A kUInt8 meta on an F8 tensor keeps F8 (tree_edit.c), which the
# reference models through the dtype the tensor has in the file (its ST).
ST_DTYPE = {"kBool": "BOOL", "kUInt8": "U8", "kInt8": "I8", "kInt16": "I16", "kUInt16": "U16",
            "kFloat16": "F16", "kBFloat16": "BF16", "kInt32": "I32", "kUInt32": "U32",
            "kFloat": "F32", "kComplex64": "C64", "kDouble": "F64", "kInt64": "I64",
            "kUInt64": "U64"}
ST_METADATA = {"format": "pt", "note": "h\u00e9llo \"quoted\"", "empty": ""}


def st_oracle():
    import safetensors_oracle
    return safetensors_oracle


class Safetensors(Model):
    """A safetensors file made by the oracle's writer: every OneFlow-typed dtype, F8 and F4
    (shown as bytes, read-only), 0-d and empty tensors, names to escape, __metadata__.
    Half the seeds use the 2022 layout (name order, header unpadded), so that a save which
    keeps the layout is told apart from one which lays the file out anew.

    Each tensor's ST is (name, dtype, shape) as in the last saved file (None: added since):
    the writer keeps the file's layout only when every tensor of the file is still there
    under its name, with its dtype and shape, and none was added."""

    edit_types = EDIT_TYPES + ["kChar"]  # kChar and kComplex128: saves refused
    extra_ops = [("op_readonly", 2)]

    def tensors(self):
        """The tensors of a new model: (name, dtype, shape, bytes)."""
        so = st_oracle()
        rng = self.rng
        specs = [("net.w", "F32", [2, 3]), ("net.b", "F32", [3]), ("half", "F16", [3, 2]),
                 ("bf", "BF16", [3]), ("dbl", "F64", [2]), ("i8", "I8", [5]), ("i16", "I16", [3, 2]),
                 ("i32", "I32", [4]), ("i64", "I64", [2, 3]), ("u8", "U8", [7]), ("u16", "U16", [3]),
                 ("u32", "U32", [2, 2]), ("u64", "U64", [2]), ("flags", "BOOL", [3]),
                 ("z", "C64", [2]), ("fp8", "F8_E4M3", [2, 3]), ("fp8b", "F8_E5M2", [4]),
                 ("fp4", "F4", [6]), ("a/slash", "F32", [2]), ("n\u00fc", "I32", [1]),
                 ("scalar", "F32", []), ("step", "I64", []), ("empty", "F32", [0]),
                 ("empty3", "F16", [2, 0, 3]), ("bools0", "BOOL", [0])]
        if rng.integers(0, 2):  # over 1 MiB: copied around the changed bytes
            specs.append(("big.blob", "U8", [3 * MIB + 123]))
        return [(n, d, s, so.random_data(rng, d, s)) for n, d, s in specs]

    def build(self):
        so = st_oracle()
        tensors = self.tensors()
        self.unpadded = bool(self.rng.integers(0, 2))
        self.path = os.path.join(self.tmp, "model.safetensors")
        with open(self.path, "wb") as f:
            f.write(so.serialize(tensors, ST_METADATA, unpadded=self.unpadded))
        self.last = None

    def load(self):
        so = st_oracle()
        with open(self.path, "rb") as f:
            data = f.read()
        try:
            p = so.reference_parse(data)
        except so.Refused as exc:
            raise Mismatch("safetensors_oracle refuses the saved file: %s" % exc)
        if p.metadata != ST_METADATA:
            raise Mismatch("__metadata__ is %r, expected %r" % (p.metadata, ST_METADATA))
        return data, p

    def parse(self):
        data, p = self.load()
        if self.last is None:
            self.last = (data, p)
        stores = {e.dirname: (e.tag, e.ms_type, tuple(e.shape)) for e in p.entries}
        return [(e.dirname, e.meta, e.out) for e in p.entries], set(), stores

    @staticmethod
    def packed(e):
        return e[ST] is not None and st_oracle().MAPPING[e[ST][1]][3] == "flat"

    def readonly(self, e):
        # F8 and the sub-byte floats: OneFlow has no such type; ckptfs shows their bytes
        # without w bits and refuses every edit (write, meta, rm -r, mv) with EACCES.
        return e[ST] is not None and e[ST][1] in st_oracle().MAPPING and \
            ST_DTYPE.get(st_oracle().MAPPING[e[ST][1]][1]) != e[ST][1]

    def frozen(self, e):
        return self.readonly(e)

    def dtype(self, e):
        """The dtype tensor e is saved as (None: none exists)."""
        if e[ST] is not None and st_oracle().MAPPING[e[ST][1]][1] == e[T]:
            return e[ST][1]
        return ST_DTYPE.get(e[T])

    def file_shape(self, e):
        return e[ST][2] if self.packed(e) else tuple(e[S])

    def unsaveable(self, e):
        return e[T] is not None and self.dtype(e) is None

    def bad_name(self, e):
        # valid for the format, but ckptfs's JSON library cannot hold NUL in a key
        return b"\0" in unescape(e[D])

    def saveable(self, state):
        return not any(self.unsaveable(e) or self.bad_name(e) for e in state)

    def keeps_layout(self, state):
        """Every tensor of the last file there under its name, dtype and shape; none added."""
        return len(state) == len(self.last[1].entries) and all(
            e[ST] is not None and e[ST] == (unescape(e[D]), self.dtype(e), self.file_shape(e))
            for e in state)

    def settle(self, state):
        self.kept = self.keeps_layout(state)
        if not self.kept:
            rank = st_oracle().RANK
            state = sorted(state, key=lambda e: (-rank[self.dtype(e)], unescape(e[D])))
        return [e[:ST] + ((unescape(e[D]), self.dtype(e), self.file_shape(e)),) for e in state]

    def invariants(self, state):
        data, p = self.load()
        old, old_p = self.last
        self.last = (data, p)
        return check_st_file(data, p, old, old_p, self.kept)


def check_st_file(data, p, old, old_p, kept):
    """A saved safetensors file against the last one: in the reference writer's layout, or
    (kept) every byte outside the changed tensors the last file's.  None, or what is wrong."""
    so = st_oracle()
    if not kept:
        want = so.serialize([(e.tag.decode("utf-8"), e.ms_type, e.shape, e.out)
                             for e in p.entries], p.metadata)
        if data != want:
            k = first_diff(data, want)
            return ("the saved file (new layout) is not the reference writer's layout: "
                    "first difference at byte %d of %d (the oracle's rewrite: %d bytes): "
                    "%r, the rewrite %r" % (k, len(data), len(want), data[max(0, k - 16):k + 8],
                                            want[max(0, k - 16):k + 8]))
        return None
    # The same layout: every byte outside the changed tensors is the last file's.
    if len(data) != len(old):
        return "the layout was kept but the file is %d bytes, was %d" % (len(data), len(old))
    start = 8 + old_p.header_len
    differs = np.frombuffer(data, np.uint8) != np.frombuffer(old, np.uint8)
    outs = {x.tag: x.out for x in p.entries}
    for e in old_p.entries:
        if outs.get(e.tag) != e.out:
            differs[start + e.begin:start + e.end] = False
    if differs.any():
        i = int(np.argmax(differs))
        return "the layout was kept but byte %d (%s) changed: 0x%02x, was 0x%02x" % (
            i, "header" if i < start else "data of an unchanged tensor", data[i], old[i])
    return None


# PyTorch: the oracle is torch itself (Debian's 1.13, torch.load with weights_only), never
# ckptfs code.  OneFlow meta type -> the torch dtype a changed tensor is saved as; kChar has
# none (the save is refused), and torch 1.13 has no unsigned 16, 32 and 64-bit storages,
# so no tensor is given those types here (ckptfs writes them, as torch >= 2.3 reads them).
def pt_types():
    import torch
    return {"kFloat": torch.float32, "kDouble": torch.float64, "kFloat16": torch.float16,
            "kBFloat16": torch.bfloat16, "kInt8": torch.int8, "kInt16": torch.int16,
            "kInt32": torch.int32, "kInt64": torch.int64, "kUInt8": torch.uint8,
            "kBool": torch.bool, "kComplex64": torch.complex64,
            "kComplex128": torch.complex128}


# The numpy type torch.from_numpy takes each from (bfloat16: its bits, viewed after).
PT_NUMPY = {"kFloat": "<f4", "kDouble": "<f8", "kFloat16": "<f2", "kBFloat16": "<i2",
            "kInt8": "i1", "kInt16": "<i2", "kInt32": "<i4", "kInt64": "<i8", "kUInt8": "u1",
            "kBool": "?", "kComplex64": "<c8", "kComplex128": "<c16"}


class PyTorch(Model):
    """A torch.save file of a flat state dict (written by torch 1.13): every type torch 1.13
    stores, 0-d and empty tensors, names to escape, and a tied pair (one tensor under two
    names: one storage).  An edit of one of a tied pair gives it a storage of its own, so
    every tensor is its own in the reference, as the tree shows them.  A meta of kChar, or
    a name that is not UTF-8 or holds NUL, is accepted, the save refused.  The file's order
    is the tree's (renames in place, new tensors at the end of the one dict)."""

    edit_types = [t for t in EDIT_TYPES if t not in ("kUInt16", "kUInt32", "kUInt64")] + \
        ["kChar"]

    def build(self):
        import torch
        types = pt_types()
        specs = [("net.w", "kFloat", [2, 3]), ("net.b", "kFloat", [3]), ("half", "kFloat16", [3, 2]),
                 ("bf", "kBFloat16", [3]), ("dbl", "kDouble", [2]), ("i8", "kInt8", [5]),
                 ("i16", "kInt16", [3, 2]), ("i32", "kInt32", [4]), ("i64", "kInt64", [2, 3]),
                 ("u8", "kUInt8", [7]), ("flags", "kBool", [3]), ("z", "kComplex64", [2]),
                 ("zz", "kComplex128", [1]), ("a/slash", "kFloat", [2]), ("n\u00fc", "kInt32", [1]),
                 ("scalar", "kFloat", []), ("empty", "kFloat", [0]), ("empty3", "kFloat16", [2, 0, 3])]
        if self.rng.integers(0, 2):  # over 1 MiB: copied around the changed bytes
            specs.append(("big.blob", "kUInt8", [3 * MIB + 123]))
        d = {}
        for name, t, dims in specs:
            n = int(np.prod(dims)) if dims else 1
            raw = valid_bytes(self.rng, t, n)
            arr = np.frombuffer(raw, PT_NUMPY[t]).copy()
            ten = torch.from_numpy(arr.reshape(dims))
            d[name] = ten.view(torch.bfloat16) if t == "kBFloat16" else ten
        d["tied.b"] = d["net.w"]  # the same tensor again: one storage
        self.path = os.path.join(self.tmp, "model.pt")
        torch.save(d, self.path)

    def parse(self):
        import torch
        try:
            d = torch.load(self.path, weights_only=True)
        except Exception as exc:  # noqa: BLE001 - any refusal is the mismatch
            raise Mismatch("torch.load refuses the saved file: %s" % exc)
        by_dtype = {v: k for k, v in pt_types().items()}
        v = []
        for name, t in d.items():
            t = t.detach().contiguous()
            of_type = by_dtype[t.dtype]
            out = (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()
            v.append((co.escape_tag(name.encode("utf-8")), co.meta_bytes(list(t.shape), of_type),
                      out))
        return v, set(), {}

    def unsaveable(self, e):
        return e[T] not in pt_types()

    def bad_name(self, e):
        raw = unescape(e[D])
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            return True
        return b"\0" in raw

    def saveable(self, state):
        return not any(self.unsaveable(e) or self.bad_name(e) for e in state)


class SafetensorsSet(Safetensors):
    """A Hugging Face sharded set: the safetensors model's tensors split over three shards
    (model-0000k-of-00003.safetensors, each with __metadata__, each padded or not) and an
    index as transformers writes it.  Each shard follows the single-file rules on its own:
    its layout kept, or the reference writer's.  A tensor stays in its shard, renamed or
    not; new tensors go to the last shard the index lists; a shard left without tensors is
    written empty and leaves the index.  The index is always what transformers would write
    for the shards (json.dumps(indent=2, sort_keys=True), total_size their bytes), and the
    tree lists the shards in name order, each in its header's order."""

    SHARDS = ["model-%05d-of-00003.safetensors" % (k + 1) for k in range(3)]

    def build(self):
        so = st_oracle()
        tensors = self.tensors()
        self.path = os.path.join(self.tmp, "model.safetensors.index.json")
        self.data_files = [os.path.join(self.tmp, s) for s in self.SHARDS]
        cut = sorted(self.rng.choice(np.arange(1, len(tensors)), size=2, replace=False))
        parts = [tensors[:cut[0]], tensors[cut[0]:cut[1]], tensors[cut[1]:]]
        weight_map = {}
        for shard, path, part in zip(self.SHARDS, self.data_files, parts):
            with open(path, "wb") as f:
                f.write(so.serialize(part, ST_METADATA, unpadded=bool(self.rng.integers(0, 2))))
            weight_map.update((t[0], shard) for t in part)
        with open(self.path, "wb") as f:
            f.write(so.index_text({"metadata": {"total_size": sum(len(t[3]) for t in tensors)},
                                   "weight_map": weight_map}))
        self.last = None

    def load(self):
        """{shard: (bytes, parse)} of the shards the index lists, in name order."""
        so = st_oracle()
        try:
            index, shards = so.load_set(self.path)
        except (so.Refused, co.CheckFailed, OSError, ValueError, KeyError) as exc:
            raise Mismatch("safetensors_oracle refuses the saved set: %s" % exc)
        want = so.index_text({"metadata": {"total_size": sum(len(e.out) for _, p in shards
                                                             for e in p.entries)},
                              "weight_map": {e.tag.decode("utf-8"): s for s, p in shards
                                             for e in p.entries}})
        with open(self.path, "rb") as f:
            got = f.read()
        if got != want:
            k = first_diff(got, want)
            raise Mismatch("the index is not what transformers writes for the shards: byte %d: "
                           "%r, expected %r" % (k, got[max(0, k - 20):k + 20],
                                                want[max(0, k - 20):k + 20]))
        out = {}
        for shard, p in shards:
            if p.metadata != ST_METADATA:
                raise Mismatch("%s: __metadata__ is %r, expected %r" % (shard, p.metadata,
                                                                        ST_METADATA))
            with open(os.path.join(self.tmp, shard), "rb") as f:
                out[shard] = (f.read(), p)
        return out

    def parse(self):
        files = self.load()
        if self.last is None:
            self.last = files
        entries = [(s, e) for s, (_, p) in files.items() for e in p.entries]
        stores = {e.dirname: (e.tag, e.ms_type, tuple(e.shape), s) for s, e in entries}
        return [(e.dirname, e.meta, e.out) for _, e in entries], set(), stores

    def settle(self, state):
        rank = st_oracle().RANK
        shards = list(self.last)
        by = {s: [] for s in shards}
        for e in state:
            by[e[ST][3] if e[ST] is not None else shards[-1]].append(e)
        self.kept = {}
        out = []
        for s in shards:
            es = by[s]
            self.kept[s] = len(es) == len(self.last[s][1].entries) and all(
                e[ST] is not None and e[ST][:3] == (unescape(e[D]), self.dtype(e),
                                                     self.file_shape(e)) for e in es)
            if not self.kept[s]:
                es = sorted(es, key=lambda e: (-rank[self.dtype(e)], unescape(e[D])))
            out += [e[:ST] + ((unescape(e[D]), self.dtype(e), self.file_shape(e), s),)
                    for e in es]
        return out

    def invariants(self, state):
        so = st_oracle()
        files = self.load()
        for shard, (old, old_p) in self.last.items():
            if shard in files:
                data, p = files[shard]
            else:  # left without tensors: written empty, out of the index
                with open(os.path.join(self.tmp, shard), "rb") as f:
                    data = f.read()
                try:
                    p = so.reference_parse(data)
                except so.Refused as exc:
                    return "%s, emptied: the oracle refuses it: %s" % (shard, exc)
                if p.entries:
                    return "%s holds tensors but is not in the index" % shard
            msg = check_st_file(data, p, old, old_p, self.kept[shard])
            if msg:
                return "%s: %s" % (shard, msg)
        self.last = files
        return None


def make_model(fmt, tmp, rng, avoid=()):
    if fmt == "ckpt":
        m = Ckpt(tmp, rng, avoid)
        m.build(crc=bool(rng.integers(0, 2)))
    elif fmt == "ckpt-superseded":
        m = Ckpt(tmp, rng, avoid)
        m.build(superseded=True)
    elif fmt == "ckpt-gcm":
        m = CkptCipher(tmp, rng, avoid)
        m.build("AES-GCM")
    elif fmt == "ckpt-cbc":
        m = CkptCipher(tmp, rng, avoid)
        m.build("AES-CBC")
    elif fmt == "ckpt-zst":
        m = CkptZst(tmp, rng, avoid)
        m.build()
    elif fmt == "onnx-external":
        m = Onnx(tmp, rng, avoid)
        m.build()
    elif fmt == "onnx-zst":
        m = OnnxZst(tmp, rng, avoid)
        m.build()
    elif fmt == "mindir-split":
        m = MindIR(tmp, rng, avoid)
        m.build(split=True)
    elif fmt == "mindir":
        m = MindIR(tmp, rng, avoid)
        m.build(split=False)
    elif fmt == "mindir-gcm":
        m = MindIRCipher(tmp, rng, avoid)
        m.build()
    elif fmt == "safetensors":
        m = Safetensors(tmp, rng, avoid)
        m.build()
    elif fmt == "safetensors-set":
        m = SafetensorsSet(tmp, rng, avoid)
        m.build()
    elif fmt == "pytorch":
        m = PyTorch(tmp, rng, avoid)
        m.build()
    else:
        raise SystemExit("unknown format %r (one of %s)" % (fmt, ", ".join(FORMATS + MANUAL_FORMATS)))
    m.fmt = fmt
    return m


# ---------------------------------------------------------------------------------------
# The mount.
# ---------------------------------------------------------------------------------------

class Mount:
    def __init__(self, binary, model, mnt, opts, env, log_path):
        self.binary, self.model, self.mnt = binary, model, mnt
        self.opts, self.env, self.log_path = opts, env, log_path
        self.proc = None

    def start(self):
        os.makedirs(self.mnt, exist_ok=True)
        args = [self.binary, "-f"]
        if self.opts:
            args += ["-o", ",".join(self.opts)]
        args += [self.model, self.mnt]
        env = dict(os.environ)
        env.update(self.env)
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(args, stdout=log, stderr=log, env=env)
        log.close()
        for _ in range(1200):  # a bound so a broken build cannot hang; not a timing check
            if is_mount(self.mnt):
                return
            if self.proc.poll() is not None:
                raise Mismatch("the daemon exited %d before mounting: %s" % (
                    self.proc.returncode, tail(self.log_path)))
            time.sleep(0.02)
        raise Mismatch("the mount did not come up")

    def unmount(self):
        """fusermount3 -u, then the daemon's exit status (its save at unmount)."""
        subprocess.run(["fusermount3", "-u", self.mnt], stderr=subprocess.DEVNULL)
        rc = self.proc.wait()
        self.proc = None
        return rc

    def kill9(self):
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.proc = None
        subprocess.run(["fusermount3", "-uz", self.mnt], stderr=subprocess.DEVNULL)

    def cleanup(self):
        """Whatever happened: unmount, and end the daemon this object started."""
        if self.proc is not None and self.proc.poll() is None:
            subprocess.run(["fusermount3", "-u", self.mnt], stderr=subprocess.DEVNULL)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if is_mount(self.mnt):
            subprocess.run(["fusermount3", "-uz", self.mnt], stderr=subprocess.DEVNULL)
        self.proc = None


def is_mount(path):
    try:
        return os.path.ismount(path)
    except OSError:
        return False


def tail(path, n=5):
    try:
        with open(path, "rb") as f:
            return b" | ".join(f.read().splitlines()[-n:]).decode(errors="replace")
    except OSError:
        return ""


def sha_files(paths):
    out = {}
    for p in paths:
        with open(p, "rb") as f:
            out[p] = hashlib.sha256(f.read()).hexdigest()
    return out


# ---------------------------------------------------------------------------------------
# The run.
# ---------------------------------------------------------------------------------------

class Run:
    def __init__(self, args, fmt, seed, steps, auto, tmp):
        self.args, self.fmt, self.seed, self.steps, self.auto = args, fmt, seed, steps, auto
        self.tmp = tmp
        self.r = pyrandom.Random("%s/%d" % (fmt, seed))
        self.np = np.random.default_rng([seed, FORMATS.index(fmt) if fmt in FORMATS else 99])
        self.log = []
        self.step = 0
        self.new_count = 0
        self.saves = 0
        self.failed_saves = 0

    # -- bookkeeping --------------------------------------------------------------------

    def note(self, text):
        self.log.append("step %d: %s" % (self.step, text))
        if self.args.trace:
            print("  " + self.log[-1], file=sys.stderr, flush=True)

    def fail(self, msg):
        raise Mismatch(msg)

    def p(self, *parts):
        return os.path.join(os.fsencode(self.mnt), *parts)

    def idx(self, dirname):
        for i, e in enumerate(self.state):
            if e[D] == dirname:
                return i
        return -1

    def track(self):
        """The file now holds the tree as it is: each tensor is the file's of its name."""
        self.origin = {e[D]: e[D] for e in self.state}

    def set(self, i, **kw):
        if "d" in kw and kw["d"] != self.state[i][D]:
            # origin: the name of the file's tensor each directory shows (None: new)
            self.origin[kw["d"]] = self.origin.pop(self.state[i][D], None)
        e = list(self.state[i])
        for k, v in kw.items():
            e[{"t": T, "s": S, "b": B, "d": D}[k]] = v
        self.state[i] = tuple(e)
        self.primitive()

    def primitive(self):
        """A file operation finished (no descriptor open): with automatic saves, any valid
        state may be what the daemon saved."""
        if self.auto and self.saveable():
            if not self.candidates or self.candidates[-1] != self.state:
                self.candidates.append(list(self.state))

    def saveable(self):
        """Whether a save must succeed.  A checkpoint without any tensor is not a model
        (MindSpore's loader and ckptfs's reader refuse one): its save must fail, leaving the
        file as it was."""
        if self.model.fmt.startswith("ckpt") and not self.state:
            return False
        return state_valid(self.state) and self.model.saveable(self.state)

    def busy(self, e):
        return e[D] in self.busy_set

    def expect_errno(self, fn, want, what):
        try:
            fn()
        except OSError as exc:
            if exc.errno != want:
                self.fail("%s: errno %s (%s), expected %s" % (
                    what, errno.errorcode.get(exc.errno, exc.errno), exc.strerror,
                    errno.errorcode.get(want, want) if want else "success"))
            return exc.errno
        if want:
            self.fail("%s: succeeded, expected %s" % (what, errno.errorcode[want]))
        return 0

    # -- checks -------------------------------------------------------------------------

    def parse_file(self):
        try:
            v, busy, _stores = self.model.parse()
        except Mismatch:
            raise
        except Exception as exc:  # noqa: BLE001 - the oracle refusing the file is a failure
            self.fail("the oracle refuses the saved file: %s" % exc)
        return v, busy

    def model_file(self):
        """The plain model file the graph oracle reads."""
        return self.model.model_path() if hasattr(self.model, "model_path") else self.model.path

    def check_stores(self, state=None):
        if not self.model.graph:
            return
        _v, _b, stores, _e = graph_entries(self.model_file(), self.model.mindir)
        for e in self.state if state is None else state:
            if e[ST] is None:
                continue
            got = stores.get(e[D])
            want = e[ST]
            if want.startswith("ext:") or want == "inline":
                ok = got == want
            else:
                base, dl = want.split("+")[0], want.endswith("+dl")
                gbase = (got or "").split("+")[0]
                ok = gbase in (base, "empty") or (base == "empty" and gbase in ("raw", "typed"))
                if dl and got is not None and not got.endswith("+dl"):
                    self.fail("tensor %r: its explicit data_location (DEFAULT) was lost in the "
                              "saved file (stored as %s)" % (e[D], got))
            if not ok:
                self.fail("tensor %r: stored as %s in the saved file, expected %s" % (e[D], got, want))

    def check_file(self, want_state):
        v, busy = self.parse_file()
        d = diff_views(view(want_state), v, "saved file")
        if d:
            self.fail(d)
        msg = self.model.invariants(want_state)
        if msg:
            self.fail(msg)
        for d, _dirs, files in os.walk(self.model.tmp):
            left = [f for f in files if ".ckptfs-" in f and not f.endswith(".ckptfs-lock")]
            if left:
                self.fail("a save left %r in %s" % (left, d))
        return busy

    def read_tree(self, order=False):
        """The mount's view, checked entry by entry against the reference."""
        root = os.fsencode(self.mnt)
        names = [n for n in os.listdir(root) if n != b"snapshot_done"]
        want = [e[D] for e in self.state]
        if sorted(names) != sorted(want):
            missing = [n for n in want if n not in names]
            extra = [n for n in names if n not in want]
            self.fail("mount listing: missing %r, unexpected %r" % (missing[:5], extra[:5]))
        if order and names != want:
            k = first_diff(names, want)
            self.fail("mount listing order differs at %d: %r, expected %r" % (k, names[k], want[k]))
        for e in self.state:
            self.check_entry(e)

    def check_entry(self, e):
        d = self.p(e[D])
        listing = sorted(os.listdir(d))
        want = sorted(([b"meta"] if e[T] is not None else []) + ([b"out"] if e[B] is not None else []))
        if listing != want:
            self.fail("tensor %r: directory holds %r, expected %r" % (e[D], listing, want))
        if e[T] is not None:
            with open(os.path.join(d, b"meta"), "rb") as f:
                got = f.read()
            wm = co.meta_bytes(list(e[S]), e[T])
            if got != wm:
                self.fail("tensor %r: meta reads %r, expected %r" % (e[D], got, wm))
            shape = os.getxattr(d, b"user.ckptfs.shape")
            if shape != co.shape_text(list(e[S])):
                self.fail("tensor %r: user.ckptfs.shape is %r, expected %r" % (
                    e[D], shape, co.shape_text(list(e[S]))))
        if not self.model.mindir and e[D] not in self.nontop:
            name = os.getxattr(d, b"user.ckptfs.name")
            if name != unescape(e[D]):
                self.fail("tensor %r: user.ckptfs.name is %r, expected %r" % (
                    e[D], name, unescape(e[D])))
        if e[B] is not None:
            path = os.path.join(d, b"out")
            st = os.stat(path)
            with open(path, "rb") as f:
                got = f.read()
            if st.st_size != len(e[B]) or got != e[B]:
                self.fail("tensor %r: out reads %d bytes (st_size %d), expected %d; first "
                          "difference at byte %d" % (e[D], len(got), st.st_size, len(e[B]),
                                                     first_diff(got, e[B])))

    def after_save(self, how):
        """The save succeeded: tree, file, snapshot_done."""
        self.saves += 1
        if not os.path.exists(self.p(b"snapshot_done")):
            self.fail("%s succeeded but snapshot_done is missing" % how)
        self.read_tree()
        self.state = self.model.settle(self.state)
        self.busy_set = self.check_file(self.state)
        self.check_stores()
        # An emptied inline tensor has no storage left to keep.
        if self.model.graph:
            self.state = [e[:ST] + (None,) if not e[B] and e[ST] and not e[ST].startswith("ext:")
                          else e for e in self.state]
        self.saved = list(self.state)
        self.saved_sha = sha_files(self.model.files())
        self.candidates = [list(self.state)]
        self.track()

    def held_save(self, need):
        """What a save asked by fsync of tensor `need` (None: the root) writes when tensors
        block it: ckptfs holds their edits back (saved as the file has them, under the
        file's name; new ones left out) and saves the rest.  The file's state, or None when
        the save fails as a whole (EINVAL): `need` blocks it, a held tensor's old name is
        another directory's now, a held new tensor was made before a new one it would
        save, or what is left is no model the format can hold."""
        blocked = {e[D] for e in self.state if not valid_entry(e)}
        names = {e[D] for e in self.state}
        saved = {e[D]: e for e in self.saved}
        if need in blocked:
            return None
        news = [e[D] in blocked for e in self.state if self.origin.get(e[D]) is None]
        if any(news[i] and not news[j] for i in range(len(news)) for j in range(i, len(news))):
            return None  # a held new tensor made before a new one it would save
        out = []
        for e in self.state:
            if e[D] not in blocked:
                out.append(e)
                continue
            o = self.origin.get(e[D])
            if o is None:
                continue
            if o != e[D] and o in names:
                return None
            out.append(saved[o])
        if self.model.fmt.startswith("ckpt") and not out:
            return None
        return out if state_valid(out) and self.model.saveable(out) else None

    def after_held_save(self, how, file_state):
        """A save that held tensors back: the file holds file_state, the tree still the
        held edits (snapshot_done stays absent)."""
        self.saves += 1
        if os.path.exists(self.p(b"snapshot_done")):
            self.fail("%s held tensors back but snapshot_done exists" % how)
        self.read_tree()
        file_state = self.model.settle(file_state)
        self.busy_set = self.check_file(file_state)
        self.check_stores(file_state)
        if self.model.graph:
            file_state = [e[:ST] + (None,) if not e[B] and e[ST] and not e[ST].startswith("ext:")
                          else e for e in file_state]
        # The tree in the file's order (a .ckpt: as it was), the held new tensors where
        # new tensors go when they are saved at last: after the others (ONNX, MindIR:
        # after the main graph's).
        blocked = {e[D] for e in self.state if not valid_entry(e)}
        by_file_name = {}
        for e in self.state:
            if e[D] not in blocked:
                by_file_name[e[D]] = e
            elif self.origin.get(e[D]) is not None:
                by_file_name[self.origin[e[D]]] = e
        held_new = [e for e in self.state if e[D] in blocked and self.origin.get(e[D]) is None]
        if not self.model.fmt.startswith("ckpt"):
            shown = [by_file_name[f[D]] for f in file_state]
            tops = [i for i, e in enumerate(shown) if e[D] not in self.nontop]
            at = tops[-1] + 1 if tops and self.model.graph else len(shown)
            self.state = shown[:at] + held_new + shown[at:]
        stored = {e[D]: e[ST] for e in file_state}
        self.state = [e if e[D] in blocked else e[:ST] + (stored[e[D]],) for e in self.state]
        for e in self.state:
            if e[D] not in blocked:
                self.origin[e[D]] = e[D]
        self.saved = list(file_state)
        self.saved_sha = sha_files(self.model.files())
        self.candidates = [list(file_state)]

    def after_failed_save(self, how):
        self.failed_saves += 1
        if os.path.exists(self.p(b"snapshot_done")):
            self.fail("%s failed but snapshot_done exists" % how)
        if self.auto:
            self.sync_auto("a failed %s" % how)
        elif sha_files(self.model.files()) != self.saved_sha:
            self.fail("%s failed but the model's files changed" % how)

    def sync_auto(self, why):
        """Automatic saves: the file holds one of the valid states since the last known
        save; that one becomes the last known save."""
        v, busy = self.parse_file()
        for cand in reversed(self.candidates):
            if diff_views(view(cand), v, "") is None:
                self.saved = list(cand)
                self.saved_sha = sha_files(self.model.files())
                self.candidates = [list(cand)]
                self.busy_set = busy
                return cand
        self.fail("after %s the file holds none of the %d states a save could have written: %s"
                  % (why, len(self.candidates), diff_views(view(self.saved), v, "vs last known save")))

    def rollback(self, why):
        """The daemon died or its last save failed: the files hold one of the states a save
        may have written (manual saves: exactly the last one, byte for byte)."""
        if not self.auto:
            if sha_files(self.model.files()) != self.saved_sha:
                self.fail("after %s the model's files are not the last saved ones" % why)
            self.state = list(self.saved)
            self.track()
            return
        self.state = list(self.sync_auto(why))
        self.track()

    # -- operations ---------------------------------------------------------------------

    def pick(self, pred):
        cands = [e for e in self.state if pred(e)]
        return self.r.choice(cands) if cands else None

    def editable(self, e):
        return not self.model.frozen(e)

    def op_write(self):
        e = self.pick(lambda e: e[B] is not None and self.editable(e))
        if e is None:
            return
        size = len(e[B])
        grow = size == 0 or self.r.random() < 0.08
        if grow:
            off = self.r.randint(0, size)
            n = self.r.randint(1, 16)
        elif size > MIB and self.r.random() < 0.7:
            # across a 1 MiB decrypted page or a 2 MiB zstd frame, sometimes a long run
            off = self.r.randint(1, size // MIB) * MIB + self.r.randint(-40, 40)
            off = min(size - 1, max(0, off))
            n = self.r.randint(1, min(self.r.choice([64, 300 << 10]), size - off))
        else:
            off = self.r.randrange(size)
            n = self.r.randint(1, min(64, size - off))
        data = slice_of_valid(self.np, e[T], off, n)
        if off + n <= size and self.r.random() < 0.15:
            self.op_memmap(e, off, data)
            return
        self.note("pwrite %r off %d len %d%s" % (e[D], off, n,
                                                 " (grows)" if off + n > size else ""))
        fd = os.open(self.p(e[D], b"out"), os.O_WRONLY)
        try:
            if os.pwrite(fd, data, off) != n:
                self.fail("short pwrite")
        finally:
            os.close(fd)
        old = e[B]
        new = old[:off] + bytes(max(0, off - len(old))) + data + old[off + n:]
        self.set(self.idx(e[D]), b=new)

    def op_memmap(self, e, off, data):
        """A write through a shared mapping, as np.memmap(mode="r+") makes.  Its flush is
        msync(MS_SYNC), which the kernel turns into an fsync: a save."""
        i = self.idx(e[D])
        new = e[B][:off] + data + e[B][off + len(data):]
        held = self.holds()
        if held and self.auto:
            return  # which file an automatic save left is known only once one succeeds
        self.state[i] = e[:B] + (new,) + e[B + 1:]
        self.primitive()
        ok = self.saveable()
        file_state = self.held_save(e[D]) if held else None
        self.note("memmap r+ %r off %d len %d, flush (a save: expect %s)" % (
            e[D], off, len(data), "success" if ok else "success, holding incomplete "
            "tensors back" if file_state is not None else "EINVAL"))
        mm = np.memmap(self.p(e[D], b"out"), dtype=np.uint8, mode="r+")
        try:
            mm[off:off + len(data)] = np.frombuffer(data, dtype=np.uint8)
            self.expect_errno(mm.flush, 0 if ok or file_state is not None else errno.EINVAL,
                              "msync")
        finally:
            del mm
        if ok:
            self.after_save("msync")
        elif file_state is not None:
            self.after_held_save("msync", file_state)
        else:
            self.after_failed_save("msync")

    def op_held_fd(self):
        """Descriptors that stay open across edits and a save: a reader opened first, a
        writer that writes before and after the save; both then read the reference."""
        e = self.pick(lambda e: e[B] is not None and len(e[B]) > 0 and self.editable(e))
        if e is None:
            return
        path = self.p(e[D], b"out")
        rfd = os.open(path, os.O_RDONLY)
        wfd = None
        try:
            os.pread(rfd, len(e[B]) + 1, 0)
            wfd = os.open(path, os.O_RDWR)
            for round_ in (1, 2):
                e = self.state[self.idx(e[D])]
                size = len(e[B])
                off = self.r.randrange(size)
                n = self.r.randint(1, min(64, size - off))
                data = slice_of_valid(self.np, e[T], off, n)
                self.note("held fd: pwrite %r off %d len %d" % (e[D], off, n))
                if os.pwrite(wfd, data, off) != n:
                    self.fail("short pwrite")
                i = self.idx(e[D])
                self.state[i] = e[:B] + (e[B][:off] + data + e[B][off + n:],) + e[B + 1:]
                if round_ == 1:
                    self.op_save(self.r.choice(["touch", "fsyncdir"]))
            want = self.state[self.idx(e[D])][B]
            for fd, what in ((rfd, "reader"), (wfd, "writer")):
                got = os.pread(fd, len(want) + 1, 0)
                if got != want:
                    self.fail("held fd: the %s opened before the edits reads %d bytes, expected "
                              "%d; first difference at byte %d" % (
                                  what, len(got), len(want), first_diff(got, want)))
        finally:
            os.close(rfd)
            if wfd is not None:
                os.close(wfd)
        self.primitive()

    def op_truncate(self):
        e = self.pick(lambda e: e[B] is not None and self.editable(e))
        if e is None:
            return
        size = len(e[B])
        if e[T] is not None and self.r.random() < 0.5:
            n = nbytes_of(e[T], e[S]) if e[T] != "kChar" else size
        else:
            n = self.r.randint(0, size + 8)
        self.note("truncate %r to %d (was %d)" % (e[D], n, size))
        os.truncate(self.p(e[D], b"out"), n)
        self.set(self.idx(e[D]), b=e[B][:n] + bytes(max(0, n - size)))

    def new_shape(self):
        ndim = self.r.choice([0, 1, 1, 2, 2, 3])
        dims = tuple(self.r.choice([0, 1, 2, 3, 4, 5]) if self.r.random() < 0.05
                     else self.r.randint(1, 5) for _ in range(ndim))
        return self.r.choice(self.model.edit_types), dims

    def write_file(self, path, data, how):
        """Replace a file's content: in place (O_TRUNC), or a temporary file renamed over
        it (what rsync and editors do)."""
        if how == "rename" and "autosave-tmpfile" in self.args.avoid and self.auto:
            how = "inplace"
        if how == "rename":
            tmp = path + b".tmp~"
            with open(tmp, "wb") as f:
                f.write(data)
            os.rename(tmp, path)
        else:
            with open(path, "wb") as f:
                f.write(data)

    def op_meta(self):
        e = self.pick(lambda e: e[T] is not None and e[B] is not None and self.editable(e))
        if e is None:
            return
        i = self.idx(e[D])
        if self.r.random() < 0.3 and e[S]:
            # reshape: same type and element count, out kept
            n = 1
            for d in e[S]:
                n *= d
            dims = (n,) if len(e[S]) > 1 else ((1, n) if self.r.random() < 0.5 else (n,))
            how = self.r.choice(["inplace", "rename"])
            self.note("meta %r: reshape %s -> %s (%s)" % (e[D], list(e[S]), list(dims), how))
            self.write_file(self.p(e[D], b"meta"), meta_text(self.np, e[T], list(dims)), how)
            self.set(i, s=dims)
            return
        of_type, dims = self.new_shape()
        out = valid_bytes(self.np, of_type, nbytes_of(of_type, dims) // ITEMSIZE[of_type])
        how_m, how_o = self.r.choice(["inplace", "rename"]), self.r.choice(["inplace", "rename"])
        meta_first = self.r.random() < 0.5
        self.note("meta %r: %s %s -> %s %s (meta %s, out %s, %s first)" % (
            e[D], e[T], list(e[S]), of_type, list(dims), how_m, how_o,
            "meta" if meta_first else "out"))
        for part in (("meta", "out") if meta_first else ("out", "meta")):
            if part == "meta":
                self.write_file(self.p(e[D], b"meta"), meta_text(self.np, of_type, list(dims)), how_m)
                self.set(i, t=of_type, s=dims)
            else:
                self.write_file(self.p(e[D], b"out"), out, how_o)
                self.set(i, b=out)

    def op_bad_meta(self):
        e = self.pick(lambda e: e[T] is not None and self.editable(e))
        if e is None:
            return
        text = self.r.choice(BAD_METAS)
        how = self.r.choice(["inplace", "rename"])
        if "autosave-tmpfile" in self.args.avoid and self.auto:
            how = "inplace"
        self.note("bad meta %r: %r (%s), expect EINVAL" % (e[D], text, how))
        path = self.p(e[D], b"meta")

        def inplace():
            fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
            try:
                os.write(fd, text)
            finally:
                os.close(fd)  # the close (flush) reports the invalid meta

        def renamed():
            tmp = path + b".bad~"
            with open(tmp, "wb") as f:
                f.write(text)
            try:
                os.rename(tmp, path)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)

        self.expect_errno(inplace if how == "inplace" else renamed, errno.EINVAL, "bad meta")
        self.check_entry(self.state[self.idx(e[D])])

    def new_name(self):
        self.new_count += 1
        k = self.new_count
        kind = self.r.random()
        if kind < 0.1:
            return ("new/%d" % k).encode()
        if kind < 0.15:
            return (".hidden%d" % k).encode()
        if kind < 0.2:
            return ("n\u00fc%d" % k).encode()
        if kind < 0.25 and self.model.fmt.startswith("ckpt"):
            return ("100%%-%d" % k).encode()
        if kind < 0.25 and self.model.fmt.startswith("safetensors"):
            return ("nul\0%d" % k).encode()  # a save is refused (EINVAL)
        if kind < 0.3 and self.model.fmt.startswith("safetensors") and \
                "st-control-names" not in self.args.avoid:
            # JSON escapes \u001b (the reference writer, serde_json, writes lowercase hex)
            return ("ctl\x1b%d\x1f" % k).encode()
        return ("new.%d" % k).encode()

    def insert_new(self, entry):
        """A new tensor goes after the last tensor of the main graph (a checkpoint: at the
        end): where the encoders put it."""
        tops = [i for i, e in enumerate(self.state) if e[D] not in self.nontop]
        self.state.insert(tops[-1] + 1 if tops else len(self.state), entry)
        self.origin[entry[D]] = None
        self.primitive()

    def op_mkdir(self):
        r = self.r.random()
        if r < 0.05 and self.state:
            e = self.r.choice(self.state)
            self.note("mkdir %r (exists), expect EEXIST" % e[D])
            self.expect_errno(lambda: os.mkdir(self.p(e[D])), errno.EEXIST, "mkdir")
            return
        if r < 0.1:
            bad = b"bad%zz" + str(self.new_count).encode()
            self.note("mkdir %r, expect EINVAL" % bad)
            self.expect_errno(lambda: os.mkdir(self.p(bad)), errno.EINVAL, "mkdir")
            return
        name = co.escape_tag(self.new_name())
        of_type, dims = self.new_shape()
        out = valid_bytes(self.np, of_type, nbytes_of(of_type, dims) // ITEMSIZE[of_type])
        parts = self.r.choice([["meta", "out"], ["out", "meta"], ["meta", "out"], ["meta"], [],
                               ["out"]])
        self.note("mkdir %r, then %s (%s %s)" % (name, "+".join(parts) or "nothing", of_type,
                                                 list(dims)))
        os.mkdir(self.p(name))
        self.insert_new((name, None, None, None, None))
        for part in parts:
            i = self.idx(name)
            if part == "meta":
                self.write_file(self.p(name, b"meta"), meta_text(self.np, of_type, list(dims)),
                                self.r.choice(["inplace", "rename"]))
                self.set(i, t=of_type, s=dims)
            else:
                self.write_file(self.p(name, b"out"), out, self.r.choice(["inplace", "rename"]))
                self.set(i, b=out)

    def op_complete(self):
        """Make every tensor saveable again: a missing meta or out is written, an out of the
        wrong size truncated to the meta's."""
        for e in list(self.state):
            if self.model.bad_name(e):
                self.new_count += 1
                target = co.escape_tag(b"renamed.%d" % self.new_count)
                self.note("complete %r: mv to %r" % (e[D], target))
                os.rename(self.p(e[D]), self.p(target))
                self.set(self.idx(e[D]), d=target)
                e = self.state[self.idx(target)]
            if valid_entry(e) and not self.model.unsaveable(e):
                continue
            i = self.idx(e[D])
            if self.model.unsaveable(e) and e[B] is not None:
                # a type the format cannot hold (safetensors: kChar, kComplex128): its
                # bytes as kUInt8
                self.note("complete %r: meta %s -> kUInt8 [%d]" % (e[D], e[T], len(e[B])))
                self.write_file(self.p(e[D], b"meta"), meta_text(self.np, "kUInt8", [len(e[B])]),
                                "inplace")
                self.set(i, t="kUInt8", s=(len(e[B]),))
                continue
            if e[T] is None:
                if e[B] is not None:
                    of_type, dims = "kUInt8", (len(e[B]),)
                else:
                    of_type, dims = self.new_shape()
                    if self.model.unsaveable((e[D], of_type, dims, None, e[ST])):
                        of_type = "kUInt8"
                self.note("complete %r: meta %s %s" % (e[D], of_type, list(dims)))
                self.write_file(self.p(e[D], b"meta"), meta_text(self.np, of_type, list(dims)),
                                "inplace")
                self.set(i, t=of_type, s=dims)
                e = self.state[i]
            want = nbytes_of(e[T], e[S])
            if e[B] is None:
                out = valid_bytes(self.np, e[T], want // ITEMSIZE[e[T]])
                self.note("complete %r: out of %d bytes" % (e[D], want))
                self.write_file(self.p(e[D], b"out"), out, "inplace")
                self.set(i, b=out)
            elif len(e[B]) != want:
                self.note("complete %r: truncate out %d -> %d" % (e[D], len(e[B]), want))
                os.truncate(self.p(e[D], b"out"), want)
                self.set(i, b=e[B][:want] + bytes(max(0, want - len(e[B]))))

    def revert_busy(self, e):
        """rm -r of a tensor the graph needs: meta and out come back as in the model file."""
        i = self.idx(e[D])
        s = [x for x in self.saved if x[D] == e[D]][0]
        self.state[i] = (e[D], s[T], s[S], s[B], e[ST])
        self.primitive()

    def op_rm(self):
        # Known defect (issue 11): with --avoid superseded-gap, never delete a tensor that
        # sits between two records of one tag.
        gap_ok = "superseded-gap" not in self.args.avoid
        e = self.pick(lambda e: gap_ok or e[ST] != "gap")
        if e is None:
            return
        if self.model.readonly(e):
            self.note("rm -r %r (read-only), expect EACCES" % e[D])
            self.expect_errno(lambda: shutil.rmtree(self.p(e[D])), errno.EACCES, "rm -r")
            self.check_entry(e)
            return
        if "empty-ckpt" in self.args.avoid and self.model.fmt.startswith("ckpt") and \
                len(self.state) == 1:
            return
        if self.busy(e):
            if self.auto:
                # what comes back is the file's version: make it known first
                if not self.saveable():
                    return
                self.op_save("touch")
            self.note("rm -r %r, expect EBUSY (meta and out come back as saved)" % e[D])
            self.expect_errno(lambda: shutil.rmtree(self.p(e[D])), errno.EBUSY, "rm -r")
            self.revert_busy(e)
            return
        self.note("rm -r %r" % e[D])
        shutil.rmtree(self.p(e[D]))
        del self.state[self.idx(e[D])]
        self.origin.pop(e[D], None)
        self.primitive()

    def op_mv(self):
        e = self.pick(lambda e: True)
        if e is None:
            return
        r = self.r.random()
        others = [x for x in self.state if x[D] != e[D]]
        replaced = None
        if r < 0.15 and others:
            t = self.r.choice(others)
            target = t[D]
            # rename(2) replaces an empty directory (a new one without meta and out)
            if t[T] is None and t[B] is None:
                want, replaced = (errno.EBUSY if self.busy(t) else 0), t
            else:
                want = errno.ENOTEMPTY
        elif r < 0.2:
            target, want = b"bad%zz" + str(self.new_count).encode(), errno.EINVAL
        elif r < 0.3 and self.model.reader_names and not self.auto:
            # a name a node reads: free now, busy once saved
            target, want = self.r.choice(self.model.reader_names), 0
            if self.idx(target) >= 0:
                target = co.escape_tag(self.new_name())
        else:
            target, want = co.escape_tag(self.new_name()), 0
        if self.busy(e):
            want = errno.EBUSY
        if self.model.readonly(e):
            want, replaced = errno.EACCES, None
        self.note("mv %r %r%s" % (e[D], target, ", expect %s" % errno.errorcode[want] if want else ""))
        if self.expect_errno(lambda: os.rename(self.p(e[D]), self.p(target)), want, "mv") == 0:
            if replaced is not None:
                del self.state[self.idx(replaced[D])]
                self.origin.pop(replaced[D], None)
            self.set(self.idx(e[D]), d=target)

    def holds(self):
        """Whether an fsync now is a save that holds tensors back: some are incomplete."""
        return not state_valid(self.state) and bool(self.state)

    def op_save(self, how=None):
        how = how or self.r.choice(["touch", "touch", "create", "fsync", "fsyncdir"])
        if how in ("fsync", "fsyncdir") and self.holds():
            if self.auto:
                how = "touch"  # see op_memmap
            else:
                return self.op_held_save(how)
        ok = self.saveable()
        empty = not self.state and self.model.fmt.startswith("ckpt")
        self.note("save (%s), expect %s" % (how, "success" if ok else "failure: no tensor at all"
                                            if empty else "EINVAL: a tensor is incomplete" if
                                            not state_valid(self.state) else
                                            "EINVAL: a type or name the format cannot hold"))
        path = self.p(b"snapshot_done")

        def run():
            if how == "create":
                fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
                os.close(fd)
            elif how == "fsync":
                e = self.pick(lambda e: e[B] is not None)
                fd = os.open(self.p(e[D], b"out") if e else os.fsencode(self.mnt), os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            else:
                fd = os.open(os.fsencode(self.mnt), os.O_RDONLY | os.O_DIRECTORY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)

        if how == "touch":
            p = subprocess.run(["touch", path], stderr=subprocess.PIPE)
            failed = p.returncode != 0
            if failed != (not ok):
                self.fail("save (touch): %s, expected %s (%s)" % (
                    "failed" if failed else "succeeded", "failure" if not ok else "success",
                    p.stderr.decode().strip()))
        elif empty:
            try:
                run()
                self.fail("save (%s) of a checkpoint without tensors succeeded" % how)
            except OSError:
                pass
        else:
            self.expect_errno(run, 0 if ok else errno.EINVAL, "save (%s)" % how)
        if ok:
            self.after_save(how)
        else:
            self.after_failed_save(how)

    def op_held_save(self, how):
        """fsync of an out (or of the root) while tensors are incomplete: ckptfs saves
        around them unless the fsync'd one is among them (held_save)."""
        e = self.pick(lambda e: e[B] is not None) if how == "fsync" else None
        path = self.p(e[D], b"out") if e else os.fsencode(self.mnt)
        file_state = self.held_save(e[D] if e else None)
        self.note("save (%s of %r), expect %s" % (how, e[D] if e else b"/", "EINVAL" if
                                                 file_state is None else
                                                 "success, holding incomplete tensors back"))

        def run():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

        self.expect_errno(run, 0 if file_state is not None else errno.EINVAL, "save (%s)" % how)
        if file_state is not None:
            self.after_held_save(how, file_state)
        else:
            self.after_failed_save(how)

    def op_readonly(self):
        """An edit of a tensor the format's reader shows read-only (safetensors: F8, F4),
        refused with EACCES; the tensor reads as before."""
        e = self.pick(self.model.readonly)
        if e is None:
            return
        path = self.p(e[D])
        what = self.r.choice(["pwrite", "truncate", "meta", "rm out"])
        self.note("%s on read-only %r, expect EACCES" % (what, e[D]))

        def run():
            if what == "pwrite":
                fd = os.open(os.path.join(path, b"out"), os.O_WRONLY)
                try:
                    os.pwrite(fd, b"\0", 0)
                finally:
                    os.close(fd)
            elif what == "truncate":
                os.truncate(os.path.join(path, b"out"), 0)
            elif what == "meta":
                with open(os.path.join(path, b"meta"), "wb") as f:
                    f.write(meta_text(self.np, "kUInt8", [len(e[B])]))
            else:
                os.unlink(os.path.join(path, b"out"))

        self.expect_errno(run, errno.EACCES, what)
        self.check_entry(e)

    def op_check(self):
        if self.r.random() < 0.3:
            self.note("read the whole tree")
            self.read_tree()
        else:
            e = self.pick(lambda e: True)
            if e is not None:
                self.note("read %r" % e[D])
                self.check_entry(e)

    def op_remount(self):
        ok = self.saveable()
        self.note("unmount (saves: expect exit %d) and remount" % (0 if ok else 1))
        rc = self.mount.unmount()
        if rc != (0 if ok else 1):
            self.fail("the daemon exited %d at unmount, expected %d (%s)" % (
                rc, 0 if ok else 1, tail(self.mount.log_path, 2)))
        if ok:
            self.state = self.model.settle(self.state)
            self.saved = list(self.state)
            self.saved_sha = sha_files(self.model.files())
            self.candidates = [list(self.state)]
            self.track()
            self.busy_set = self.check_file(self.state)
            self.check_stores()
        else:
            self.rollback("an unmount whose save failed")
        self.mount.start()
        self.read_tree(order=True)

    def op_kill(self):
        self.note("kill -9 the daemon, fusermount3 -uz, remount (unsaved edits are lost)")
        self.mount.kill9()
        # the next mount finishes a multi-file save the kill interrupted (automatic saves)
        self.mount.start()
        self.rollback("kill -9")
        self.read_tree(order=True)
        if not self.auto and not os.path.exists(self.p(b"snapshot_done")):
            self.fail("after kill -9 and a remount, snapshot_done is missing")

    def op_idle(self):
        """Automatic saves: wait past commit_delay; a valid tree is then saved."""
        delay = self.args.commit_delay
        self.note("idle %.1fs (automatic save expected: %s)" % (delay + 0.2, self.saveable()))
        time.sleep(delay + 0.2)
        if not self.saveable():
            return
        for _ in range(500):  # bounded wait for the daemon's save
            if os.path.exists(self.p(b"snapshot_done")):
                break
            time.sleep(0.02)
        else:
            self.fail("no automatic save %.1fs after the last edit of a valid tree" % delay)
        self.after_save("automatic save")

    OPS = [("op_write", 20), ("op_truncate", 5), ("op_meta", 10), ("op_bad_meta", 2),
           ("op_mkdir", 6), ("op_complete", 8), ("op_rm", 5), ("op_mv", 6), ("op_save", 10),
           ("op_check", 6), ("op_remount", 2), ("op_kill", 2), ("op_held_fd", 3)]

    def choose(self):
        ops = list(self.OPS) + self.model.extra_ops
        if self.auto:
            ops.append(("op_idle", 2))
        total = sum(w for _, w in ops)
        x = self.r.uniform(0, total)
        for name, w in ops:
            x -= w
            if x <= 0:
                return name
        return ops[-1][0]

    # -- main ---------------------------------------------------------------------------

    def setup(self):
        """The model, the reference state and the mount (not started); the options."""
        model_dir = os.path.join(self.tmp, "model")
        os.makedirs(model_dir)
        self.model = make_model(self.fmt, model_dir, self.np, self.args.avoid)
        self.state, self.busy_set = self.model.initial_state()
        # Constant values and subgraph tensors: never removed, renamed or added to.
        self.nontop = set()
        if self.model.graph:
            _v, _b, _s, entries = graph_entries(self.model_file(), self.model.mindir)
            self.nontop = {e.dirname for e in entries if not e.top}
        self.saved = list(self.state)
        self.saved_sha = sha_files(self.model.files())
        self.candidates = [list(self.state)]
        self.track()
        self.mnt = os.path.join(self.tmp, "mnt")
        opts = list(self.model.opts)
        opts.append("commit_delay=%g" % self.args.commit_delay if self.auto else "commit=manual")
        if self.args.mount_opts:
            opts.append(self.args.mount_opts)
        self.mount = Mount(self.args.ckptfs, self.model.path, self.mnt, opts, self.model.env,
                           os.path.join(self.tmp, "daemon.log"))
        return opts

    def run(self):
        opts = self.setup()
        try:
            self.note("mount %s (%s)" % (os.path.basename(self.model.path), ",".join(opts)))
            self.mount.start()
            self.read_tree(order=True)
            for self.step in range(1, self.steps + 1):
                if TERMINATED:
                    raise SystemExit(143)
                getattr(self, self.choose())()
            self.step += 1
            self.op_complete()
            self.op_save("touch")
            self.op_remount()
        finally:
            self.mount.cleanup()


# ---------------------------------------------------------------------------------------
# --threads N: client threads racing each other's saves.
# ---------------------------------------------------------------------------------------

class Fence:
    """Saves never overlap the edit sequences that leave a tensor incomplete for a
    moment (a new type: meta, then out; mkdir, meta, out; rm -r: out and meta, then the
    directory), so that every save must succeed.  Saves overlap each other, and those
    sequences each other; plain edits (pwrite, reshape, mv, a refused meta) race all."""

    def __init__(self):
        self.cv = threading.Condition()
        self.n = {"save": 0, "incomplete": 0}

    @contextlib.contextmanager
    def hold(self, kind):
        other = "incomplete" if kind == "save" else "save"
        with self.cv:
            while self.n[other]:
                self.cv.wait()
            self.n[kind] += 1
        try:
            yield
        finally:
            with self.cv:
                self.n[kind] -= 1
                self.cv.notify_all()


class Worker:
    """One client thread: random operations on its own tensors only, so that what it
    expects of them does not depend on the other threads; saves of the whole tree."""

    def __init__(self, run, k, mine):
        self.run, self.k, self.mine = run, k, list(mine)
        self.r = pyrandom.Random("%s/%d/thread%d" % (run.fmt, run.seed, k))
        self.np = np.random.default_rng([run.seed, FORMATS.index(run.fmt)
                                         if run.fmt in FORMATS else 99, 1000 + k])
        self.count = 0
        self.step = 0

    def note(self, text):
        self.run.log.append("thread %d step %d: %s" % (self.k, self.step, text))
        if self.run.args.trace:
            print("  " + self.run.log[-1], file=sys.stderr, flush=True)

    def entry(self, name):
        with self.run.lock:
            return self.run.state[self.run.idx(name)]

    def update(self, name, **kw):
        with self.run.lock:
            i = self.run.idx(name)
            e = list(self.run.state[i])
            for key, v in kw.items():
                e[{"t": T, "s": S, "b": B, "d": D}[key]] = v
            self.run.state[i] = tuple(e)

    def new_shape(self):
        ndim = self.r.choice([0, 1, 1, 2, 2, 3])
        return self.r.choice(EDIT_TYPES), tuple(self.r.randint(1, 5) for _ in range(ndim))

    def fresh_name(self, prefix):
        self.count += 1
        return co.escape_tag(("%s%d.%d" % (prefix, self.k, self.count)).encode())

    # -- operations on its own tensors --------------------------------------------------

    def op_write(self, n):
        e = self.entry(n)
        size = len(e[B])
        if size == 0:
            return
        if size > MIB and self.r.random() < 0.5:
            off = min(size - 1, self.r.randint(1, size // MIB) * MIB + self.r.randint(-40, 40))
            k = self.r.randint(1, min(self.r.choice([64, 300 << 10]), size - off))
        else:
            off = self.r.randrange(size)
            k = self.r.randint(1, min(64, size - off))
        data = slice_of_valid(self.np, e[T], off, k)
        self.note("pwrite %r off %d len %d" % (n, off, k))
        fd = os.open(self.run.p(n, b"out"), os.O_WRONLY)
        try:
            if os.pwrite(fd, data, off) != k:
                self.run.fail("short pwrite")
        finally:
            os.close(fd)
        self.update(n, b=e[B][:off] + data + e[B][off + k:])

    def op_reshape(self, n):
        e = self.entry(n)
        if not e[S]:
            return
        count = 1
        for d in e[S]:
            count *= d
        dims = (count,) if len(e[S]) > 1 else (1, count)
        how = self.r.choice(["inplace", "rename"])
        self.note("meta %r: reshape %s -> %s (%s)" % (n, list(e[S]), list(dims), how))
        with self.meta_fence():
            self.run.write_file(self.run.p(n, b"meta"), meta_text(self.np, e[T], list(dims)), how)
        self.update(n, s=dims)

    def meta_fence(self):
        """--avoid meta-across-save: no save while a meta is open for writing."""
        if "meta-across-save" in self.run.args.avoid:
            return self.run.fence.hold("incomplete")
        return contextlib.nullcontext()

    def op_retype(self, n):
        of_type, dims = self.new_shape()
        out = valid_bytes(self.np, of_type, nbytes_of(of_type, dims) // ITEMSIZE[of_type])
        meta_first = self.r.random() < 0.5
        self.note("meta %r -> %s %s, and its out (%s first)" % (
            n, of_type, list(dims), "meta" if meta_first else "out"))
        with self.run.fence.hold("incomplete"):
            for part in (("meta", "out") if meta_first else ("out", "meta")):
                if part == "meta":
                    self.run.write_file(self.run.p(n, b"meta"),
                                        meta_text(self.np, of_type, list(dims)), "inplace")
                    self.update(n, t=of_type, s=dims)
                else:
                    self.run.write_file(self.run.p(n, b"out"), out, "inplace")
                    self.update(n, b=out)

    def op_mv(self, n):
        target = self.fresh_name("t")
        self.note("mv %r %r" % (n, target))
        os.rename(self.run.p(n), self.run.p(target))
        self.update(n, d=target)
        self.mine[self.mine.index(n)] = target

    def op_rm(self, n):
        with self.run.fence.hold("incomplete"), self.run.lock:
            if self.run.model.fmt.startswith("ckpt") and len(self.run.state) < 2:
                return
            self.note("rm -r %r" % n)
            shutil.rmtree(self.run.p(n))
            del self.run.state[self.run.idx(n)]
        self.mine.remove(n)

    def op_mkdir(self, _n):
        name = self.fresh_name("n")
        of_type, dims = self.new_shape()
        out = valid_bytes(self.np, of_type, nbytes_of(of_type, dims) // ITEMSIZE[of_type])
        # Under the run's lock: new tensors go to the end in the order of their mkdir.
        with self.run.fence.hold("incomplete"), self.run.lock:
            self.note("mkdir %r, meta %s %s, out" % (name, of_type, list(dims)))
            os.mkdir(self.run.p(name))
            self.run.write_file(self.run.p(name, b"meta"), meta_text(self.np, of_type, list(dims)),
                                "inplace")
            self.run.write_file(self.run.p(name, b"out"), out, "inplace")
            tops = [i for i, e in enumerate(self.run.state) if e[D] not in self.run.nontop]
            self.run.state.insert(tops[-1] + 1 if tops else len(self.run.state),
                                  (name, of_type, dims, out, None))
        self.mine.append(name)

    def op_bad_meta(self, n):
        text = self.r.choice(BAD_METAS)
        self.note("bad meta %r: %r, expect EINVAL" % (n, text))

        def inplace():
            fd = os.open(self.run.p(n, b"meta"), os.O_WRONLY | os.O_TRUNC)
            try:
                os.write(fd, text)
            finally:
                os.close(fd)

        with self.meta_fence():
            self.run.expect_errno(inplace, errno.EINVAL, "bad meta")
        self.run.check_entry(self.entry(n))

    def op_check(self, n):
        self.note("read %r" % n)
        self.run.check_entry(self.entry(n))

    def op_save(self, _n):
        how = self.r.choice(["touch", "create", "fsync", "fsyncdir"])
        snap = self.run.p(b"snapshot_done")
        with self.run.fence.hold("save"):
            self.note("save (%s)" % how)
            if how == "touch":
                p = subprocess.run(["touch", snap], stderr=subprocess.PIPE)
                if p.returncode != 0:
                    self.run.fail("save (touch) failed: %s" % p.stderr.decode().strip())
            else:
                try:
                    if how == "create":
                        fd = os.open(snap, os.O_WRONLY | os.O_CREAT, 0o644)
                    elif how == "fsync" and self.mine:
                        fd = os.open(self.run.p(self.r.choice(self.mine), b"out"), os.O_RDONLY)
                    else:
                        fd = os.open(os.fsencode(self.run.mnt), os.O_RDONLY | os.O_DIRECTORY)
                    try:
                        if how != "create":
                            os.fsync(fd)
                    finally:
                        os.close(fd)
                except OSError as exc:
                    # touch and create are several requests: another thread's edit
                    # between them takes the name snapshot_done away, not the file.
                    self.run.fail("save (%s): %s" % (how, exc))
        self.check_saved(how)

    def check_saved(self, how):
        """The save returned: the file holds every edit this thread made before it (the
        save that answers a request begins after it), in the tree's order; the mount
        shows them.  Other threads' tensors may have changed since: not checked here."""
        with self.run.lock:
            mine = [e for e in self.run.state if e[D] in self.mine]
        for e in mine:
            self.run.check_entry(e)
        with self.run.parse_lock:
            v, _busy = self.run.parse_file()
        got = {name: (meta, out) for name, meta, out in v}
        order = [name for name, _m, _o in v if name in self.mine]
        want = view(mine)
        for name, meta, out in want:
            if name not in got:
                self.run.fail("thread %d: after its save (%s) the file has no tensor %r" % (
                    self.k, how, name))
            gm, go_ = got[name]
            if gm != meta:
                self.run.fail("thread %d: after its save (%s) tensor %r has meta %r in the file, "
                              "expected %r" % (self.k, how, name, gm, meta))
            if go_ != out:
                self.run.fail("thread %d: after its save (%s) tensor %r has %d bytes in the file, "
                              "expected %d; first difference at byte %d" % (
                                  self.k, how, name, len(go_), len(out), first_diff(go_, out)))
        if order != [w[0] for w in want]:
            self.run.fail("thread %d: its tensors are in the file in the order %r, expected %r" % (
                self.k, order, [w[0] for w in want]))
        self.run.saves += 1

    OPS = [("op_write", 30), ("op_reshape", 8), ("op_retype", 6), ("op_mv", 5), ("op_rm", 2),
           ("op_mkdir", 4), ("op_bad_meta", 2), ("op_check", 8), ("op_save", 12)]

    def run_steps(self, steps):
        total = sum(w for _, w in self.OPS)
        for self.step in range(1, steps + 1):
            if TERMINATED or self.run.stop.is_set():
                return
            x = self.r.uniform(0, total)
            for name, w in self.OPS:
                x -= w
                if x <= 0:
                    break
            if not self.mine and name not in ("op_mkdir", "op_save"):
                continue
            getattr(self, name)(self.r.choice(self.mine) if self.mine else None)


class ThreadedRun(Run):
    """--threads N: N client threads at once, each on its own tensors (the free ones,
    dealt round-robin: no graph node reads them, not a str), each saving the whole tree
    now and then and checking its own tensors in the saved file.  Then, single-threaded,
    the whole tree is completed, saved and checked, and remounted, as in Run."""

    def run(self):
        self.lock = threading.RLock()
        self.parse_lock = threading.Lock()
        self.fence = Fence()
        self.stop = threading.Event()
        opts = self.setup()
        free = [e[D] for e in self.state if self.editable(e) and not self.busy(e)
                and e[D] not in self.nontop and e[ST] != "gap"]
        n = self.args.threads
        workers = [Worker(self, k, free[k::n]) for k in range(n)]
        errors = []

        def body(w):
            try:
                w.run_steps(max(1, self.steps // n))
            except BaseException as exc:  # noqa: BLE001 - reported by the main thread
                errors.append((w, exc, traceback.format_exc()))
                self.stop.set()

        try:
            self.note("mount %s (%s), %d threads" % (os.path.basename(self.model.path),
                                                      ",".join(opts), n))
            self.mount.start()
            self.read_tree(order=True)
            threads = [threading.Thread(target=body, args=(w,)) for w in workers]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.step = sum(w.step for w in workers)
            if errors:
                w, exc, tb = errors[0]
                if isinstance(exc, Mismatch):
                    raise exc
                raise Mismatch("thread %d: %s: %s\n%s" % (w.k, type(exc).__name__, exc, tb))
            self.step += 1
            self.op_complete()
            self.op_save("touch")
            self.op_remount()
        finally:
            self.mount.cleanup()


def parse_seeds(text):
    out = []
    for part in text.split(","):
        if "-" in part:
            a, b = part.split("-")
            out.extend(range(int(a), int(b) + 1))
        elif part:
            out.append(int(part))
    return out


TERMINATED = []


def on_sigterm(_signum, _frame):
    """SIGTERM (a CI timeout, a killed bats) ends the run between two steps, through the
    finally clauses that unmount what it mounted; a second one ends it at once."""
    if TERMINATED:
        raise SystemExit(143)
    TERMINATED.append(True)


def main():
    signal.signal(signal.SIGTERM, on_sigterm)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ckptfs", default=os.path.join(REPO, "build", "ckptfs"))
    ap.add_argument("--format", default="ckpt", help="one of %s, or all (all but %s)" % (
        ", ".join(FORMATS + MANUAL_FORMATS), ", ".join(MANUAL_FORMATS)))
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--seeds", default=None, help="e.g. 1-200 or 1,5,9")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--auto", action="store_true", help="automatic saves instead of commit=manual")
    ap.add_argument("--commit-delay", type=float, default=1.0)
    ap.add_argument("--trace", action="store_true", help="print each operation as it runs")
    ap.add_argument("--avoid", default="", help="comma-separated known defects (issue 11) the "
                    "generator steers clear of: dl-default (no ONNX tensor with an explicit "
                    "data_location DEFAULT), superseded-gap (no rm -r of a .ckpt tensor between "
                    "two records of one tag), empty-ckpt (never rm -r a checkpoint's last "
                    "tensor), autosave-tmpfile (with --auto, no temporary file renamed over "
                    "meta or out), meta-across-save (with --threads, no save while a meta is "
                    "open for writing: issue 12, the save drops its buffer), st-control-names "
                    "(no safetensors tensor named with a control character: ckptfs's header "
                    "escapes it as \\u001B, the reference writer as \\u001b)")
    ap.add_argument("--threads", type=int, default=1,
                    help="N client threads at once, each on its own tensors, saving concurrently "
                    "(the steps are shared among them; no remount or kill -9 until they end)")
    ap.add_argument("--mount-opts", default="", help="more -o options for the daemon (with "
                    "--threads: the multi-threaded loop, say)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("--tmpdir", default=None, help="where the runs' directories are made")
    args = ap.parse_args()
    args.avoid = [a for a in args.avoid.split(",") if a]
    for a in args.avoid:
        if a not in ("dl-default", "superseded-gap", "empty-ckpt", "autosave-tmpfile",
                     "meta-across-save", "st-control-names"):
            ap.error("--avoid: unknown %r" % a)
    check_bad_metas()
    if not os.access(args.ckptfs, os.X_OK):
        print("model_test: %s is not executable" % args.ckptfs, file=sys.stderr)
        return 2
    seeds = parse_seeds(args.seeds) if args.seeds else [args.seed if args.seed is not None else 1]
    formats = FORMATS if args.format == "all" else args.format.split(",")
    if (args.auto or args.threads > 1) and set(formats) & set(MANUAL_FORMATS):
        ap.error("%s: manual saves and one thread only (no --auto, no --threads)" %
                 ", ".join(MANUAL_FORMATS))
    total_steps = 0
    start = time.monotonic()
    for fmt in formats:
        for seed in seeds:
            tmp = tempfile.mkdtemp(prefix="ckptfs-random-", dir=args.tmpdir)
            run = (ThreadedRun if args.threads > 1 else Run)(args, fmt, seed, args.steps,
                                                             args.auto, tmp)
            ok = False
            try:
                run.run()
                ok = True
            except Mismatch as exc:
                report(run, "MISMATCH: %s" % exc)
            except Exception as exc:  # noqa: BLE001 - an unexpected error is a failure too
                report(run, "ERROR: %s: %s\n%s" % (type(exc).__name__, exc, traceback.format_exc()))
            total_steps += run.step
            if ok:
                print("ok format %s seed %d%s: %d steps, %d saves, %d refused saves" % (
                    fmt, seed, " (auto)" if args.auto else "", run.step, run.saves,
                    run.failed_saves), flush=True)
            if ok and not args.keep:
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                print("  (files kept in %s)" % tmp, file=sys.stderr)
            if not ok:
                return 1
    print("%d steps in %.1fs" % (total_steps, time.monotonic() - start))
    return 0


def report(run, msg):
    print("FAIL format %s seed %d%s step %d" % (run.fmt, run.seed, " (auto)" if run.auto else "",
                                                run.step), file=sys.stderr)
    print("  " + msg, file=sys.stderr)
    print("  reproduce: tests/random/model_test.py --format %s --seed %d --steps %d%s%s%s --trace" % (
        run.fmt, run.seed, run.steps, " --auto" if run.auto else "",
        " --threads %d" % run.args.threads if run.args.threads > 1 else "",
        " --avoid " + ",".join(run.args.avoid) if run.args.avoid else ""), file=sys.stderr)
    print("  operations:", file=sys.stderr)
    for line in run.log[-60:]:
        print("    " + line, file=sys.stderr)
    if len(run.log) > 60:
        print("    (%d earlier operations not shown)" % (len(run.log) - 60), file=sys.stderr)
    log = getattr(getattr(run, "mount", None), "log_path", None)
    if log and os.path.exists(log):
        print("  daemon log: " + tail(log, 4), file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
