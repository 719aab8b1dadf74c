#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Processes racing the saves of a writable ckptfs mount (tests/bats/concurrent.bats).

    race.py gen OUT --count N --min-kib A --max-kib B [--seed S]
        a checkpoint of N Float32 tensors t.0 .. t.N-1 of A..B KiB each, every one
        holding its own random bytes (so a read served from the wrong tensor or the
        wrong offset shows), written by the oracle's encoder
    race.py extract MODEL TAG OUT
        the tensor's bytes, as the oracle parses the model, into OUT
    race.py race MNT MODEL [--writers W] [--readers R] [--rounds N] [--seed S]
        W writer processes, each rewriting its own disjoint set of tensors' out
        files (pwrite of patterns drawn from the seed: ranges and whole
        tensors) for N rounds, while a saver process loops saves (touch
        snapshot_done, create, fsync of a file and of the root), R reader
        processes check the tensors nobody writes (stat, 4 KiB reads, meta,
        listings, user.ckptfs.type), and the mount's automatic save runs too.
        Then a last save, and the model file, parsed by the oracle, must hold
        exactly the last bytes each writer wrote to each of its tensors, and the
        original bytes elsewhere.

The tensors of writer k are those with i % (W + 1) == k; the readers take
i % (W + 1) == W.  Every failure names the process, the tensor and the first
differing byte.  Exit status: 0 passed, 1 a mismatch or an error.
"""

import argparse
import hashlib
import json
import multiprocessing as mp
import os
import random
import subprocess
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "oracle"))

import numpy as np  # noqa: E402

import ckpt_oracle as co  # noqa: E402

KIB = 1 << 10


def first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def cmd_gen(a):
    rng = np.random.default_rng(a.seed)
    sizes = rng.integers(a.min_kib, a.max_kib + 1, size=a.count) * KIB

    def chunks():
        for i, n in enumerate(sizes):
            content = rng.bytes(int(n))
            yield co.record(co.tensor_value("t.%d" % i, "Float32", [int(n) // 4], content))

    co.write_file(a.out, chunks())


def load(model):
    entries, _crc = co.load_reference(model)
    return {e.dirname.decode(): e for e in entries}, [e.dirname.decode() for e in entries]


def cmd_extract(a):
    by_name, _ = load(a.model)
    with open(a.out, "wb") as f:
        f.write(by_name[a.tag].out)


# ---------------------------------------------------------------------------------------
# The race.
# ---------------------------------------------------------------------------------------

def owner(i, writers):
    return i % (writers + 1)


def writer(k, a, names, start, result_q):
    """Writer k: N rounds over its tensors; reports the sha256 of what it last wrote."""
    mine = [n for i, n in enumerate(names) if owner(i, a.writers) == k]
    want = {n: bytearray(start[n]) for n in mine}
    order = random.Random("%d/writer/%d" % (a.seed, k))
    writes = 0
    for rnd in range(a.rounds):
        order.shuffle(mine)
        for n in mine:
            rng = np.random.default_rng([a.seed, k, rnd, int(n.split(".")[1])])
            size = len(want[n])
            if rng.random() < 0.2:
                off, data = 0, rng.bytes(size)
            else:
                off = int(rng.integers(0, size))
                data = rng.bytes(int(rng.integers(1, min(256 * KIB, size - off) + 1)))
            path = os.path.join(a.mnt, n, "out")
            fd = os.open(path, os.O_WRONLY)
            try:
                if os.pwrite(fd, data, off) != len(data):
                    raise AssertionError("writer %d: short pwrite to %s" % (k, n))
            finally:
                os.close(fd)
            want[n][off:off + len(data)] = data
            writes += 1
            if rng.random() < 0.3:
                # A writer reads its own bytes back, whatever save is running.
                fd = os.open(path, os.O_RDONLY)
                try:
                    got = os.pread(fd, len(data), off)
                finally:
                    os.close(fd)
                if got != data:
                    raise AssertionError("writer %d: %s reads back wrong at byte %d of the %d "
                                         "written at %d" % (k, n, first_diff(got, data),
                                                            len(data), off))
    result_q.put(("writer", k, writes, {n: hashlib.sha256(want[n]).hexdigest() for n in mine}))


def saver(a, names, stop, result_q):
    """Saves in a loop until told to stop: every one must succeed (every tensor always
    has its size, so nothing can refuse a save)."""
    rng = random.Random("%d/saver" % a.seed)
    snap = os.path.join(a.mnt, "snapshot_done")
    saves = 0
    while not stop.is_set():
        how = rng.choice(["touch", "touch", "create", "fsync", "fsyncdir"])
        if how == "touch":
            p = subprocess.run(["touch", snap], stderr=subprocess.PIPE)
            err = p.stderr.decode().strip()
            # touch is a lookup, an open (or create: the save) and a futimens of
            # the open file: a writer may make the tree dirty between them, which
            # takes the name snapshot_done away but not the file touch holds.
            if p.returncode != 0:
                raise AssertionError("saver: touch snapshot_done failed: %s (last_error %r)" % (
                    err, last_error(a.mnt)))
        else:
            try:
                if how == "create":
                    fd = os.open(snap, os.O_WRONLY | os.O_CREAT, 0o644)
                elif how == "fsync":
                    fd = os.open(os.path.join(a.mnt, rng.choice(names), "meta"), os.O_RDONLY)
                else:
                    fd = os.open(a.mnt, os.O_RDONLY | os.O_DIRECTORY)
                try:
                    if how != "create":
                        os.fsync(fd)
                finally:
                    os.close(fd)
            except OSError as exc:
                raise AssertionError("saver: save by %s failed: %s (last_error %r)" % (
                    how, exc, last_error(a.mnt))) from None
        saves += 1
    result_q.put(("saver", 0, saves, None))


def last_error(mnt):
    try:
        return os.getxattr(mnt, "user.ckptfs.last_error").decode(errors="replace")
    except OSError:
        return None


def reader(k, a, names, start, stop, result_q):
    """Reader k: the tensors nobody writes always read as they are in the model, and the
    tree always lists every tensor: never an error, never another tensor's bytes."""
    theirs = [n for i, n in enumerate(names) if owner(i, a.writers) == a.writers]
    rng = random.Random("%d/reader/%d" % (a.seed, k))
    listed = sorted(names)
    checks = 0
    while not stop.is_set() or checks == 0:
        n = rng.choice(theirs)
        d = os.path.join(a.mnt, n)
        want = start[n]
        what = rng.randrange(6)
        if what == 0:
            st = os.stat(os.path.join(d, "out"))
            if st.st_size != len(want):
                raise AssertionError("reader %d: %s/out st_size %d, expected %d" % (
                    k, n, st.st_size, len(want)))
        elif what == 1:
            off = rng.randrange(0, len(want) - 4096 + 1) // 4096 * 4096
            fd = os.open(os.path.join(d, "out"), os.O_RDONLY)
            try:
                got = os.pread(fd, 4096, off)
            finally:
                os.close(fd)
            if got != want[off:off + 4096]:
                raise AssertionError("reader %d: %s/out at %d: first difference at byte %d" % (
                    k, n, off, first_diff(got, want[off:off + 4096])))
        elif what == 2:
            with open(os.path.join(d, "meta"), "rb") as f:
                got = f.read()
            if got != co.meta_bytes([len(want) // 4], "kFloat"):
                raise AssertionError("reader %d: %s/meta reads %r" % (k, n, got))
        elif what == 3:
            t = os.getxattr(d, "user.ckptfs.type")
            if t != b"Float32":
                raise AssertionError("reader %d: %s user.ckptfs.type %r" % (k, n, t))
        elif what == 4:
            got = sorted(os.listdir(d))
            if got != ["meta", "out"]:
                raise AssertionError("reader %d: %s lists %r" % (k, n, got))
        else:
            got = sorted(x for x in os.listdir(a.mnt) if x != "snapshot_done")
            if got != listed:
                raise AssertionError("reader %d: the root lists %d names, expected %d" % (
                    k, len(got), len(listed)))
        checks += 1
    result_q.put(("reader", k, checks, None))


def guarded(fn, name, result_q, *args):
    try:
        fn(*args)
    except BaseException as exc:  # noqa: BLE001 - every failure goes to the parent
        result_q.put(("error", name, 0, "%s\n%s" % (exc, traceback.format_exc())))


def cmd_race(a):
    by_name, names = load(a.model)
    start = {n: by_name[n].out for n in names}
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    stop = ctx.Event()
    writers = [ctx.Process(target=guarded, args=(writer, "writer %d" % k, q, k, a, names,
                                                 start, q)) for k in range(a.writers)]
    others = [ctx.Process(target=guarded, args=(saver, "saver", q, a, names, stop, q))]
    others += [ctx.Process(target=guarded, args=(reader, "reader %d" % k, q, k, a, names, start,
                                                 stop, q)) for k in range(a.readers)]
    for p in writers + others:
        p.start()
    results, errors = [], []
    # The writers' results first; an error anywhere stops the rest.
    import queue
    while len([r for r in results if r[0] == "writer"]) < a.writers and not errors:
        try:
            r = q.get(timeout=a.guard)
        except queue.Empty:  # a deadlock guard, not a timing check
            errors.append(("error", "race", 0, "no result in %ds: a process hangs" % a.guard))
            break
        (errors if r[0] == "error" else results).append(r)
    stop.set()
    for p in writers + others:
        p.join(a.guard)
        if p.is_alive():
            errors.append(("error", "race", 0, "pid %d still runs after %ds" % (p.pid, a.guard)))
            p.kill()
            p.join()
    while not q.empty():
        r = q.get()
        (errors if r[0] == "error" else results).append(r)
    if errors:
        for _k, name, _n, msg in errors:
            print("FAIL %s: %s" % (name, msg), file=sys.stderr)
        return 1
    for p in writers + others:
        if p.exitcode != 0:
            print("FAIL a process exited %d" % p.exitcode, file=sys.stderr)
            return 1
    want = {n: hashlib.sha256(start[n]).hexdigest() for n in names}
    for kind, k, count, shas in results:
        if kind == "writer":
            want.update(shas)
    counts = {}
    for kind, _k, count, _extra in results:
        counts[kind] = counts.get(kind, 0) + count
    # The last save, then the file holds exactly the last bytes of every writer.
    p = subprocess.run(["touch", os.path.join(a.mnt, "snapshot_done")], stderr=subprocess.PIPE)
    if p.returncode != 0:
        print("FAIL the last save: %s" % p.stderr.decode().strip(), file=sys.stderr)
        return 1
    saved, saved_names = load(a.model)
    if saved_names != names:
        print("FAIL the saved file lists %r..., expected %r..." % (saved_names[:5], names[:5]),
              file=sys.stderr)
        return 1
    bad = [n for n in names if hashlib.sha256(saved[n].out).hexdigest() != want[n]]
    for n in names:  # and the mount shows the same
        with open(os.path.join(a.mnt, n, "out"), "rb") as f:
            if hashlib.sha256(f.read()).hexdigest() != want[n]:
                bad.append(n + " (through the mount)")
    if bad:
        print("FAIL %d tensors do not hold their writer's last bytes: %s" % (len(bad), bad[:8]),
              file=sys.stderr)
        return 1
    print("ok: %d writes by %d writers, %d saves by the saver, %d reader checks; the file "
          "holds every writer's last bytes"
          % (counts.get("writer", 0), a.writers, counts.get("saver", 0), counts.get("reader", 0)))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("gen")
    p.add_argument("out")
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--min-kib", type=int, required=True)
    p.add_argument("--max-kib", type=int, required=True)
    p.add_argument("--seed", type=int, default=1)
    p = sub.add_parser("extract")
    p.add_argument("model")
    p.add_argument("tag")
    p.add_argument("out")
    p = sub.add_parser("race")
    p.add_argument("mnt")
    p.add_argument("model")
    p.add_argument("--writers", type=int, default=4)
    p.add_argument("--readers", type=int, default=2)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--guard", type=int, default=600,
                   help="seconds without progress after which the run is declared hung")
    a = ap.parse_args()
    if a.cmd == "gen":
        cmd_gen(a)
    elif a.cmd == "extract":
        cmd_extract(a)
    else:
        return cmd_race(a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
