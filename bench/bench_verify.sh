#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Cost of a save's read-back check (save/verify.c) next to the encode it
# checks: a one-tensor edit of a GIB GiB checkpoint of TENSORS tensors,
# plain, AES-GCM (MindSpore's layout) and seekable zstd (2 MiB frames);
# median of REPS, nothing committed.
#
#   bench/bench_verify.sh [BUILD]   (env: REPS=3 GIB=1 TENSORS=256
#                                          KINDS="plain gcm zstd")
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=$(realpath "${1:-build}")
REPS=${REPS:-3}
SIZE=$(( ${GIB:-1} << 30 ))
TENSORS=${TENSORS:-256}
KINDS=${KINDS:-plain gcm zstd}
W=$(mktemp -d "${BENCH_DIR:-/var/tmp}/ckptfs-verify.XXXXXX")
trap 'rm -rf "$W"' EXIT
KHEX=30313233343536373839414243444546
cc -O2 -I. -D_FILE_OFFSET_BITS=64 -o "$W/verify_cost" bench/verify_cost.c "$BUILD/libckptfs.a" \
    -lz -lzstd -lcrypto -ljansson -lyajl -lprotobuf-c -lm
echo "# generating $((SIZE >> 20)) MiB in $TENSORS tensors"
/usr/bin/python3 bench/gen_ckpt.py "$W/plain.ckpt" --size "$SIZE" --count "$TENSORS"
declare -A FILE=([plain]=plain.ckpt [gcm]=gcm.ckpt [zstd]=plain.ckpt.zst)
for k in $KINDS; do
    case $k in
    gcm) /usr/bin/python3 tests/oracle/envelope_oracle.py encrypt --mode AES-GCM \
             --key-hex "$KHEX" "$W/plain.ckpt" "$W/gcm.ckpt" ;;
    zstd) /usr/bin/python3 tests/oracle/envelope_oracle.py zstd-seekable \
              --frame-size 2097152 "$W/plain.ckpt" "$W/plain.ckpt.zst" ;;
    esac
done
for k in $KINDS; do
    f=${FILE[$k]}
    cat "$W/$f" >/dev/null
    printf '%-6s ' "$k"
    if [ "$k" = gcm ]; then
        CKPTFS_KEY_HEX=$KHEX "$W/verify_cost" "$W/$f" layer.7.weight "$REPS"
    else
        "$W/verify_cost" "$W/$f" layer.7.weight "$REPS"
    fi
done
