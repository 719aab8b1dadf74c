#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# What a newcomer meets first: `make demo` in a fresh clone (no
# ../shared beside it), the demo's real checkpoint as its SOURCES.md
# describes it, and the license.

load helpers

DEMO_CKPT=tests/demo/checkpoint_lenet-10_1875.ckpt
ORACLE_PY=$REPO/tests/oracle/ckpt_oracle.py

@test "make demo in a fresh clone without ../shared: mounts the real LeNet, saves an edit the oracle reads" {
    git -C "$REPO" rev-parse --git-dir >/dev/null 2>&1 || skip "not a git checkout"
    clone=$BATS_TEST_TMPDIR/fresh/ckptfs
    git clone -q "$REPO" "$clone"
    [ ! -e "$clone/../shared" ]
    run make -C "$clone" demo
    echo "$output"
    [ "$status" -eq 0 ]
    # The tree the demo listed is the oracle's parse of the shipped file.
    expected=$($ORACLE parse "$REPO/$DEMO_CKPT" |
        $PY -c 'import json,sys; print("\n".join(sorted(e["dir"] for e in json.load(sys.stdin))))')
    listed=$(sed -n '/^\$ ls lenet$/,/^\$ /p' <<<"$output" | grep -v -e '^\$' -e '^$' -e '^snapshot_done$' | sort)
    [ "$listed" = "$expected" ]
    # fc3.bias as numpy read it through the mount, before the edit, is the
    # oracle's bytes of the original file.
    before=$($PY - "$ORACLE_PY" "$REPO/$DEMO_CKPT" <<'PY'
import importlib.util, sys, numpy
spec = importlib.util.spec_from_file_location("oracle", sys.argv[1])
oracle = importlib.util.module_from_spec(spec)
spec.loader.exec_module(oracle)
entries, _ = oracle.load_reference(sys.argv[2])
print(numpy.frombuffer({e.tag.decode(): e for e in entries}["fc3.bias"].out, "<f4"))
PY
)
    [[ "$output" == *"$before"* ]]
    # The saved file, read by the oracle: the edit, and the other 17 tensors.
    [[ "$output" == *"18 tensors; fc3.bias [10] [0. 1. 2. 3. 4. 5. 6. 7. 8. 9.]"* ]]
    # Nothing left behind: no mount, no temporary directory named in the output.
    dir=$(sed -n 's/^ckptfs demo in \([^ ]*\) .*/\1/p' <<<"$output")
    [ -n "$dir" ] && [ ! -e "$dir" ] || false
}

@test "the demo checkpoint is the file its SOURCES.md names (size and sha256)" {
    row=$(grep -F '`checkpoint_lenet-10_1875.ckpt`' "$REPO/tests/demo/SOURCES.md")
    [[ "$row" == *"| $(stat -c %s "$REPO/$DEMO_CKPT") |"* ]]
    [[ "$row" == *"\`$(sha256sum "$REPO/$DEMO_CKPT" | cut -d' ' -f1)\`"* ]]
    [[ "$row" == *"| Apache-2.0 "* ]]
}

@test "Apache-2.0: LICENSE is Debian's text, debian/copyright says so, every source file has its SPDX line" {
    cmp "$REPO/LICENSE" /usr/share/common-licenses/Apache-2.0
    grep -qx 'License: Apache-2.0' "$REPO/debian/copyright"
    ! grep -q 'none-chosen-yet' "$REPO/debian/copyright" || false
    git -C "$REPO" rev-parse --git-dir >/dev/null 2>&1 || skip "not a git checkout"
    missing=$(cd "$REPO" && git ls-files -- '*.c' '*.h' '*.inc' '*.proto' '*.js' '*.sh' '*.bats' \
            '*.bash' '*.py' Makefile debian/rules mount-helpers/ckptfs-umount mount-helpers/mount.ckptfs .ci/run |
        while read -r f; do
            head -3 "$f" | grep -q 'SPDX-License-Identifier: Apache-2.0' || echo "$f"
        done)
    [ -z "$missing" ] || { echo "no SPDX line: $missing"; false; }
}
