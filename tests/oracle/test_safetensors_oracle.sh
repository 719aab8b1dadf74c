#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Self-checks of tests/oracle/safetensors_oracle.py, without a mount (the C reader does
# not exist yet): every real file under ../shared/fixtures/safetensors parses to the
# facts SOURCES.md records (size, sha256, tensor count, dtypes, header length, padding,
# __metadata__) and to known values; the oracle's writer re-creates each real file byte
# for byte; `check` passes on a fake tree and fails on corrupted ones; every `bad` file
# is refused at the offset `bad` printed.  Exits non-zero on the first failure.
set -u

HERE=$(cd "$(dirname "$0")" && pwd)
ORACLE=(/usr/bin/python3 "$HERE/safetensors_oracle.py")
FIX=${SAFETENSORS_FIXTURES:-$(cd "$HERE/../../../shared/fixtures/safetensors" 2>/dev/null && pwd)}
T=$(mktemp -d)
trap 'pyserve_stop; rm -rf "$T"' EXIT
# The oracle's calls go through one Python that has imported it once.
. "$HERE/pyserve.sh"
pyserve_start "$T/py.sock" "${ORACLE[1]}" || exit 1
CHECKS=0

fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { CHECKS=$((CHECKS + 1)); }
oracle() { "${PYCALL[@]}" "${ORACLE[@]:1}" "$@"; }

[ -n "$FIX" ] && [ -f "$FIX/SOURCES.md" ] || fail "no fixtures (set SAFETENSORS_FIXTURES)"

# --- Real files against SOURCES.md ---------------------------------------------------

# The table rows: | `file` | repo | path | commit | size | sha256 | license | notes |
rows=$(grep -E '^\| `[^`]+\.safetensors` \|' "$FIX/SOURCES.md")
[ "$(printf '%s\n' "$rows" | wc -l)" -eq "$(find "$FIX" -name '*.safetensors' | wc -l)" ] \
    || fail "SOURCES.md rows and fixture files differ in number"
while IFS= read -r row; do
    file=$(printf '%s' "$row" | awk -F'|' '{print $2}' | tr -d ' `')
    size=$(printf '%s' "$row" | awk -F'|' '{print $6}' | tr -d ' ')
    sha=$(printf '%s' "$row" | awk -F'|' '{print $7}' | tr -d ' `')
    notes=$(printf '%s' "$row" | awk -F'|' '{print $9}')
    f="$FIX/$file"
    [ "$(stat -c %s "$f")" = "$size" ] || fail "$file: size differs from SOURCES.md"
    [ "$(sha256sum "$f" | cut -d' ' -f1)" = "$sha" ] || fail "$file: sha256 differs from SOURCES.md"
    oracle parse "$f" > "$T/p" || fail "$file: parse refused a real file"
    want_n=$(printf '%s' "$notes" | grep -oE '[0-9]+ tensors' | cut -d' ' -f1)
    got_n=$(grep -c '^tensor' "$T/p")
    [ "$got_n" = "$want_n" ] || fail "$file: $got_n tensors, SOURCES.md says $want_n"
    want_dt=$(printf '%s' "$notes" | grep -oE 'dtypes [^;]+' | cut -d' ' -f2- | tr -d ' ' | tr ',' '\n' | sort | paste -sd,)
    got_dt=$(awk -F'\t' '$1 == "tensor" {n[$3]++} END {for (d in n) print d "x" n[d]}' "$T/p" | sort | paste -sd,)
    [ "$got_dt" = "$want_dt" ] || fail "$file: dtypes $got_dt, SOURCES.md says $want_dt"
    want_h=$(printf '%s' "$notes" | grep -oE 'header_len=[0-9]+' | cut -d= -f2)
    want_pad=$(printf '%s' "$notes" | grep -oE '[0-9]+ trailing space pad' | cut -d' ' -f1)
    got=$(awk -F'\t' '$1 == "header" {print $2, $3}' "$T/p")
    [ "$got" = "$want_h pad=$want_pad" ] || fail "$file: header '$got', SOURCES.md says $want_h pad=$want_pad"
    want_meta=$(printf '%s' "$notes" | grep -oE '__metadata__=(none|\{[^}]*\})' | cut -d= -f2- | sed 's/": "/":"/g; s/", "/","/g')
    got_meta=$(awk -F'\t' '$1 == "__metadata__" {print $2}' "$T/p")
    [ "$got_meta" = "$want_meta" ] || fail "$file: __metadata__ $got_meta, SOURCES.md says $want_meta"
    ok
done <<< "$rows"

# Known values.
values() { oracle values "$FIX/$1" "$2" | paste -sd' '; }
[ "$(values lerobot/pusht_frame_0.safetensors next.done)" = "False" ] || fail "frame_0 next.done"
[ "$(values lerobot/pusht_frame_0.safetensors index)" = "0" ] || fail "frame_0 index"
r=$(values lerobot/pusht_frame_0.safetensors next.reward)
awk -v r="$r" 'BEGIN {d = r - 0.1903; exit !(d < 5e-5 && d > -5e-5)}' || fail "frame_0 next.reward $r"
[ "$(values burn/boolean.safetensors buffer)" = "True False True" ] || fail "burn boolean"
[ "$(values hf-safetensors-samples/overall.safetensors b)" = "-3 -2 -1 0 1 2" ] || fail "overall b"
[ "$(values hf-safetensors-samples/overall.safetensors f)" = "-3.0 -2.0 -1.0 0.0 1.0 2.0" ] || fail "overall f"
[ "$(values hf-safetensors-samples/overall.safetensors B)" = "253 254 255 0 1 2" ] || fail "overall B"
[ "$(values hf-safetensors-samples/overall.safetensors e)" = "-3.0 -2.0 -1.0 0.0 1.0 2.0" ] || fail "overall e"
# Data order = dtype rank then name: frame_0 is I64*3, F32*5, BOOL*2.
order=$(oracle parse "$FIX/lerobot/pusht_frame_0.safetensors" | awk -F'\t' '$1 == "tensor" {print $3}' | uniq -c | awk '{print $2 $1}' | paste -sd,)
[ "$order" = "I643,F325,BOOL2" ] || fail "frame_0 data order $order"
ok

# The writer: every real file comes out byte for byte (2022 samples: --unpadded).
while IFS= read -r f; do
    case $f in */hf-safetensors-samples/*) flag=--unpadded ;; *) flag= ;; esac
    oracle rewrite "$f" "$T/re" $flag || fail "rewrite $f"
    cmp -s "$f" "$T/re" || fail "$f: the oracle's writer does not reproduce it"
    ok
done < <(find "$FIX" -name '*.safetensors' | sort)

# --- check on fake trees --------------------------------------------------------------

fake() { rm -rf "$T/tree"; oracle fake-tree "$T/tree" "$1" || fail "fake-tree $1"; }
while IFS= read -r f; do
    fake "$f"
    oracle check "$T/tree" "$f" > /dev/null || fail "check of a fake tree of $f"
    ok
done < <(find "$FIX" -name '*.safetensors' | sort)

for c in alltypes scalars empty metadata_ms many unpadded names; do
    oracle gen "$T/$c.st" --case "$c" --count 50 --seed 3 || fail "gen $c"
    oracle gen "$T/$c.again" --case "$c" --count 50 --seed 3
    cmp -s "$T/$c.st" "$T/$c.again" || fail "gen $c is not deterministic"
    oracle parse "$T/$c.st" > "$T/p" || fail "parse of gen $c"
    read -r hlen pad < <(awk -F'\t' '$1 == "header" {sub("pad=", "", $3); print $2, $3}' "$T/p")
    if [ "$c" = unpadded ]; then
        [ $((hlen % 8)) -ne 0 ] && [ "$pad" -eq 0 ] || fail "gen unpadded: header $hlen pad $pad"
        flag=--unpadded
    else
        [ $((hlen % 8)) -eq 0 ] && [ "$pad" -lt 8 ] || fail "gen $c: header $hlen pad $pad"
        flag=
    fi
    oracle rewrite "$T/$c.st" "$T/re" $flag && cmp -s "$T/$c.st" "$T/re" || fail "gen $c: rewrite differs"
    fake "$T/$c.st"
    oracle check "$T/tree" "$T/$c.st" > /dev/null || fail "check of a fake tree of gen $c"
    ok
done
[ "$(grep -c '^tensor' < <(oracle parse "$T/alltypes.st"))" -eq 22 ] || fail "alltypes: not 22 dtypes"
[ "$(grep -c '^tensor' < <(oracle parse "$T/many.st"))" -eq 50 ] || fail "many: not --count tensors"
oracle parse "$T/metadata_ms.st" | grep -x $'__metadata__\t{"format":"ms"}' >/dev/null || fail "metadata_ms"
oracle parse "$T/scalars.st" | grep $'\tF32\t\\[\\]\t4\t' >/dev/null || fail "scalars: no 0-d F32"
oracle parse "$T/empty.st" | grep $'\tF16\t\\[2,0,3\\]\t0\t' >/dev/null || fail "empty: no [2,0,3]"
oracle parse "$T/names.st" | grep $'^tensor\t%\t' >/dev/null || fail "names: the empty name is not %"
ok

# A corrupted tree must fail with status 1.  Base: the alltypes file.
F="$T/alltypes.st"
corrupt() {  # corrupt WHAT COMMAND...: build a fresh tree, run COMMAND in it, expect failure
    local what=$1
    shift
    fake "$F"
    (cd "$T/tree" && "$@") || fail "corruption '$what' could not be made"
    oracle check "$T/tree" "$F" > /dev/null 2> "$T/err"
    local rc=$?
    [ $rc -eq 1 ] || fail "check passed or errored ($rc) on a tree with $what"
    ok
}
flip() { printf '\x5a' | dd of="$1" bs=1 seek="$2" conv=notrunc status=none; }
corrupt "a flipped out byte" flip t.f32/out 5
corrupt "a short out" truncate -s -1 t.i64/out
corrupt "a long out" sh -c 'printf x >> t.u8/out'
corrupt "a wrong meta" sed -i 's/kFloat$/kDouble/' t.f32/meta
corrupt "a wrong F8 meta" sed -i 's/kUInt8/kInt8/' t.f8_e4m3/meta
corrupt "no snapshot_done" rm snapshot_done
corrupt "a non-empty snapshot_done" sh -c 'echo x > snapshot_done'
corrupt "an extra directory" mkdir extra
corrupt "a missing tensor" rm -r t.bool
corrupt "an extra file in a tensor dir" touch t.f16/junk
corrupt "a wrong type xattr" setfattr -n user.ckptfs.type -v F16 t.bf16
corrupt "a wrong shape xattr" setfattr -n user.ckptfs.shape -v '[8]' t.f4

# --- Hostile files ----------------------------------------------------------------------

cases=$(oracle bad --help | grep -oE '\{[a-z0-9,]+\}' | head -1 | tr -d '{}' | tr ',' ' ')
[ -n "$cases" ] || fail "no bad cases listed"
for c in $cases; do
    off=$(oracle bad "$T/bad" --case "$c") || fail "bad $c"
    oracle parse "$T/bad" > /dev/null 2> "$T/err"
    rc=$?
    if [ "$off" = - ]; then
        [ $rc -eq 0 ] || fail "bad $c is meant valid but parse refused it: $(cat "$T/err")"
    else
        [ $rc -eq 2 ] || fail "bad $c: parse exited $rc, not 2"
        [ "$(wc -l < "$T/err")" -eq 1 ] || fail "bad $c: stderr is not one line"
        grep -q "refused at offset $off: " "$T/err" || fail "bad $c: want offset $off, got: $(cat "$T/err")"
        oracle check "$T" "$T/bad" > /dev/null 2>&1
        [ $? -eq 2 ] || fail "bad $c: check did not refuse the file"
    fi
    ok
done

# --- Sharded sets ----------------------------------------------------------------------

S=$T/set
mkdir "$S"
oracle gen-set "$S" --shards 3 --count 10 || fail "gen-set"
[ "$(ls "$S" | wc -l)" -eq 4 ] || fail "gen-set: not 3 shards and an index"
n=$(oracle parse "$S/model.safetensors.index.json" | grep -c '^tensor') || fail "parse of a set"
[ "$n" -eq 10 ] || fail "parse of a set: $n tensors, not 10"
ok
# the index the oracle would write for the shards is the one gen-set wrote
oracle index "$S/model.safetensors.index.json" | cmp -s - "$S/model.safetensors.index.json" ||
    fail "index differs from gen-set's"
ok
# the set's tree, materialised, passes check; one tensor fewer does not
rm -rf "$T/settree"
oracle fake-tree "$T/settree" "$S/model.safetensors.index.json" || fail "fake-tree of a set"
oracle check "$T/settree" "$S/model.safetensors.index.json" > /dev/null || fail "check of a set"
rm -r "$T/settree/model.layers.4.weight"
oracle check "$T/settree" "$S/model.safetensors.index.json" > /dev/null 2>&1 && fail "check missed a removal"
ok
# every inconsistent set is refused by parse (those the OS refuses aside)
for c in unlisted wrongshard phantom twoshards; do
    rm -rf "$T/bad-$c" && mkdir "$T/bad-$c"
    oracle bad-set "$T/bad-$c" --case "$c" > /dev/null || fail "bad-set $c"
    oracle parse "$T/bad-$c/model.safetensors.index.json" > /dev/null 2>&1 &&
        fail "bad-set $c: parse accepted it"
    ok
done
# a wrong total_size is refused
/usr/bin/python3 - "$S/model.safetensors.index.json" <<'EOF2'
import json, sys
p = sys.argv[1]
i = json.load(open(p))
i["metadata"]["total_size"] += 1
open(p, "w").write(json.dumps(i, indent=2, sort_keys=True) + "\n")
EOF2
oracle parse "$S/model.safetensors.index.json" > /dev/null 2>&1 && fail "a wrong total_size was accepted"
ok

echo "ok: $CHECKS checks"
