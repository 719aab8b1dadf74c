#!/usr/bin/env bash
# make demo: generate a small checkpoint the way MindSpore writes one, mount
# it, show the tree and one tensor, unmount.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=$(realpath "${1:-build}")
dir=$(mktemp -d)
trap 'fusermount3 -u "$dir/mnt" 2>/dev/null || true; rm -rf "$dir"' EXIT

/usr/bin/python3 tests/oracle/ckpt_oracle.py gen "$dir/demo.ckpt" --case alltypes
mkdir "$dir/mnt"
echo "\$ ckptfs demo.ckpt mnt"
"$BUILD/ckptfs" "$dir/demo.ckpt" "$dir/mnt"
echo "\$ ls mnt | head"
ls "$dir/mnt" | head
echo "\$ ls -l mnt/net.conv1.weight"
ls -l "$dir/mnt/net.conv1.weight"
echo "\$ cat mnt/net.conv1.weight/meta"
cat "$dir/mnt/net.conv1.weight/meta"
echo "\$ getfattr -d mnt/net.conv1.weight"
getfattr -d --absolute-names "$dir/mnt/net.conv1.weight" | sed "s|$dir/||"
echo "\$ python3 -c 'numpy.fromfile(\"mnt/net.conv1.weight/out\", \"<f4\").reshape(2,3,4)'"
/usr/bin/python3 -c 'import numpy, sys; print(numpy.fromfile(sys.argv[1], "<f4").reshape(2, 3, 4))' \
    "$dir/mnt/net.conv1.weight/out"
echo "\$ cat mnt/info.str_unicode/out"
cat "$dir/mnt/info.str_unicode/out"; echo
echo "\$ fusermount3 -u mnt"
fusermount3 -u "$dir/mnt"
