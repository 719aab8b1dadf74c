#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# make demo: the main job on a real model, start to end.  Mount the LeNet
# checkpoint MindArmour ships (tests/demo/SOURCES.md), look at its tree and
# one tensor's numbers, edit that tensor with cp, save with ckptfs-umount,
# and read the saved file back with an independent reader (the protobuf
# runtime through tests/oracle/ckpt_oracle.py, no ckptfs code).  Every
# command is printed as a user would type it; the work happens in a fresh
# temporary directory, removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
BUILD=$(realpath "${1:-build}")
PY=/usr/bin/python3
export PATH=$BUILD:$REPO/mount-helpers:$PATH

dir=$(mktemp -d)
trap 'mountpoint -q "$dir/lenet" && fusermount3 -u "$dir/lenet"; rm -rf "$dir"' EXIT
cd "$dir"
cp "$REPO/tests/demo/checkpoint_lenet-10_1875.ckpt" lenet.ckpt
mkdir lenet

# run CMD...: print it as typed, then run it.
run() { printf '\n$ %s\n' "$*"; "$@"; }
# sh LINE: the same for a shell pipeline.
sh() { printf '\n$ %s\n' "$1"; bash -c "$1"; }

echo "ckptfs demo in $dir (a copy of tests/demo/checkpoint_lenet-10_1875.ckpt)"
run ckptfs -o rw lenet.ckpt lenet
run ls lenet
run cat lenet/fc3.bias/meta
run ckptfs-stat lenet.ckpt fc3.bias fc3.weight
sh "$PY -c 'import numpy; print(numpy.fromfile(\"lenet/fc3.bias/out\", \"<f4\"))'"

# The edit: fc3.bias set to 0, 1, ..., 9, written by numpy and copied in.
sh "$PY -c 'import numpy; numpy.arange(10, dtype=\"<f4\").tofile(\"bias.bin\")'"
run cp bias.bin lenet/fc3.bias/out
run ckptfs-umount lenet

echo
echo "# The saved lenet.ckpt, read by the protobuf runtime (tests/oracle/ckpt_oracle.py):"
sh "$PY - lenet.ckpt <<'EOF'
import sys, numpy
sys.path.insert(0, '$REPO/tests/oracle')
import ckpt_oracle
entries, _ = ckpt_oracle.load_reference(sys.argv[1])
bias = {e.tag.decode(): e for e in entries}['fc3.bias']
print(len(entries), 'tensors; fc3.bias', bias.dims, numpy.frombuffer(bias.out, '<f4'))
assert (numpy.frombuffer(bias.out, '<f4') == numpy.arange(10)).all()
EOF"
echo
echo "demo: the edit was saved into lenet.ckpt, in MindSpore's own format."
