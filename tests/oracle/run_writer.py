#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""A training run's checkpoint writer, as MindSpore's ModelCheckpoint callback behaves, for
testing a live run-directory mount (tests/bats/run_mount.bats).

    /usr/bin/python3 run_writer.py RUN_DIR PRISTINE_DIR [--prefix P] [--runs E,E,...]
                     [--step S] [--keep K] [--pieces N] [--pause SECONDS]
                     [--overlap I,...] [--via-tmp I,...] [--seed N]

Each entry of --runs is one training run (one ModelCheckpoint) saving once per epoch, E
epochs, into RUN_DIR.  Written from ModelCheckpoint's behaviour (mindspore/train/callback/
_checkpoint.py and serialization.py, as mindspore-formats.md 2.2 and the
mindspore_run_dir fixture describe it):

* names `<prefix>-<epoch>_<step>.ckpt`; a run that finds checkpoints of its prefix already
  in the directory (`_chg_ckpt_file_name_if_same_exist`) takes the prefix `<prefix>_<n>`,
  n one more than the largest suffix found (`<prefix>-...` counts as suffix 0);
* before a save, when the run's own checkpoints (`<run prefix>-*.ckpt` with no letter after
  the prefix) already number keep_checkpoint_max, the oldest by mtime is removed
  (CheckpointManager.remove_oldest_ckpoint_file: chmod S_IWRITE, then os.remove);
* a save writes the file with mode 0644 (here in --pieces writes, --pause seconds apart,
  cut at record boundaries, so that every partial state is itself a well-formed shorter
  checkpoint), closes it and chmods it 0400.  Saves listed in --via-tmp (0-based, counted
  over all runs) write `<name>.tmp` and rename it to the final name before the chmod
  (MindSpore 2.4+).  A save listed in --overlap starts (its removal of the oldest, its
  open and first piece) when the previous save has written half of its pieces, and the
  two then go on in turns (an asynchronous save still running when the next begins).

The bytes of each checkpoint are first written to PRISTINE_DIR/<name>.ckpt (complete, via
a temporary name and rename), so that a test can compare what it saw with them after the
writer deleted the live file.  Each checkpoint holds a LeNet5-like network with its
optimizer state (records made with ckpt_oracle's encoders), contents random per save.
One line per event on stdout: `start NAME`, `done NAME`, `remove NAME`.
"""

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckpt_oracle as co  # noqa: E402

NET = [("conv1.weight", [6, 1, 5, 5]), ("conv2.weight", [16, 6, 5, 5]), ("fc1.weight", [120, 160]),
       ("fc1.bias", [120]), ("fc2.weight", [84, 120]), ("fc2.bias", [84]), ("fc3.weight", [10, 84]),
       ("fc3.bias", [10])]


def checkpoint_records(rng, global_step):
    recs = [co.record(co.tensor_value(tag, "Float32", dims, co.random_tensor(rng, "Float32", dims)))
            for tag, dims in NET]
    recs.append(co.record(co.tensor_value("learning_rate", "Float32", [0],
                                          co.random_tensor(rng, "Float32", []))))
    recs.append(co.record(co.tensor_value("momentum", "Float32", [0], np.float32(0.9).tobytes())))
    recs += [co.record(co.tensor_value("moments." + tag, "Float32", dims,
                                       co.random_tensor(rng, "Float32", dims))) for tag, dims in NET]
    recs.append(co.record(co.tensor_value("global_step", "Int32", [1],
                                          np.int32(global_step).tobytes())))
    return recs


def pieces_of(recs, n):
    """The records in n groups of consecutive records (fewer when there are fewer)."""
    n = max(1, min(n, len(recs)))
    bounds = [round(i * len(recs) / n) for i in range(n + 1)]
    return [b"".join(recs[bounds[i]:bounds[i + 1]]) for i in range(n)]


def renamed_prefix(directory, prefix):
    """_chg_ckpt_file_name_if_same_exist."""
    suffix = 0
    for name in os.listdir(directory):
        if not name.endswith(".ckpt") or name.endswith("_breakpoint.ckpt"):
            continue
        if not name.startswith(prefix) or len(name) <= len(prefix) or name[len(prefix)].isalpha():
            continue
        rest = name[len(prefix):]
        i = rest.find("-")
        if i == 0:
            suffix = max(suffix, 1)
        elif i > 0 and rest[1:i].isdigit():
            suffix = max(suffix, int(rest[1:i]) + 1)
    return f"{prefix}_{suffix}" if suffix else prefix


def own_checkpoints(directory, prefix):
    """CheckpointManager.update_ckpoint_filelist."""
    out = []
    for name in os.listdir(directory):
        if name.endswith(".ckpt") and name.startswith(prefix + "-"):
            mid = name[len(prefix):-5]
            if not any(c.isalpha() for c in mid):
                out.append(os.path.join(directory, name))
    return out


def say(*words):
    print(*words, flush=True)


def save(run_dir, pristine_dir, name, pieces, via_tmp):
    """A generator: one step per piece written; the last step closes and chmods."""
    data = b"".join(pieces)
    tmp = os.path.join(pristine_dir, "." + name + ".part")
    co.write_file(tmp, [data])
    os.rename(tmp, os.path.join(pristine_dir, name + ".ckpt"))
    final = os.path.join(run_dir, name + ".ckpt")
    path = os.path.join(run_dir, name + ".tmp") if via_tmp else final
    say("start", name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    os.fchmod(fd, 0o644)  # whatever the umask
    for piece in pieces:
        view = memoryview(piece)
        while view:
            view = view[os.write(fd, view):]
        yield
    os.close(fd)
    if via_tmp:
        os.rename(path, final)
    os.chmod(final, 0o400)
    say("done", name)


def remove_oldest(run_dir, prefix, keep):
    files = own_checkpoints(run_dir, prefix)
    if keep and 0 < keep <= len(files):
        oldest = min(files, key=os.path.getmtime)
        os.chmod(oldest, 0o200)
        os.remove(oldest)
        say("remove", os.path.basename(oldest)[:-5])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run_dir")
    ap.add_argument("pristine_dir")
    ap.add_argument("--prefix", default="lenet")
    ap.add_argument("--runs", default="4,4", help="epochs of each run, comma-separated")
    ap.add_argument("--step", type=int, default=10)
    ap.add_argument("--keep", type=int, default=3)
    ap.add_argument("--pieces", type=int, default=6)
    ap.add_argument("--pause", type=float, default=0.1)
    ap.add_argument("--overlap", default="", help="0-based save numbers that overlap the previous")
    ap.add_argument("--via-tmp", default="", help="0-based save numbers written as .tmp then renamed")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    overlap = {int(x) for x in args.overlap.split(",") if x}
    via_tmp = {int(x) for x in args.via_tmp.split(",") if x}
    rng = np.random.default_rng(args.seed)

    number = 0
    for epochs in (int(e) for e in args.runs.split(",")):
        prefix = renamed_prefix(args.run_dir, args.prefix)
        running = None  # the previous save, when the next one may overlap it
        for epoch in range(1, epochs + 1):
            name = f"{prefix}-{epoch}_{args.step}"
            pieces = pieces_of(checkpoint_records(rng, epoch * args.step), args.pieces)
            if number in overlap and running is not None:
                # the previous save has written half its pieces (see below); this one starts
                remove_oldest(args.run_dir, prefix, args.keep)
                this = save(args.run_dir, args.pristine_dir, name, pieces, number in via_tmp)
                gens = [running, this]
                while gens:
                    for g in list(gens):
                        try:
                            next(g)
                        except StopIteration:
                            gens.remove(g)
                    time.sleep(args.pause)
                running = None
            else:
                if running is not None:
                    for _ in running:
                        time.sleep(args.pause)
                remove_oldest(args.run_dir, prefix, args.keep)
                g = save(args.run_dir, args.pristine_dir, name, pieces, number in via_tmp)
                if number + 1 in overlap and epoch < epochs:
                    for _ in range(len(pieces) // 2):
                        next(g)
                        time.sleep(args.pause)
                    running = g
                else:
                    for _ in g:
                        time.sleep(args.pause)
            number += 1
        if running is not None:
            for _ in running:
                time.sleep(args.pause)
    return 0


if __name__ == "__main__":
    sys.exit(main())
