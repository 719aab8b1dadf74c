#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# The split MindIR layouts (<prefix>_graph.mindir + <prefix>_variables/),
# made from a real MindIR by tests/oracle/split_mindir.py as MindSpore's
# _split_save writes them, mounted and edited; checked with the protobuf
# runtime and tests/oracle/mind_ir.proto (graph_oracle.py), never ckptfs.

load helpers

# the oracles' calls through one Python that imported them (helpers.bash)
setup_file() { pyserve_file_start numpy "$REPO/tests/oracle/ckpt_oracle.py" onnx "$REPO/tests/oracle/graph_oracle.py" "$REPO/tests/oracle/split_mindir.py"; }
teardown_file() { pyserve_file_stop; }

SPLIT="$PY $REPO/tests/oracle/split_mindir.py"
SRC=$MS/mindspore_ori_net.mindir

# split [ARGS...]: a split copy of ori_net in the test's directory; prints
# the graph file's path.
split() {
    local d=$BATS_TEST_TMPDIR/model
    mkdir -p "$d"
    $SPLIT "$SRC" "$d/net" "$@"
    echo "$d/net_graph.mindir"
}

# snapshot MODEL: the graph file and every variables file, for cmp.
snapshot() {
    cp -r "$(dirname "$1")" "$BATS_TEST_TMPDIR/before"
}

# The layout MindSpore's loader expects of data_0 (mindspore-formats.md 4.4),
# and each parameter's values.
check_layout() {
    PYTHONPATH=$REPO/tests/oracle $PY - "$1" <<'PY'
import os, sys
import graph_oracle
pb = graph_oracle.mindir_module()
m = pb.ModelProto()
m.ParseFromString(open(sys.argv[1], "rb").read())
base = os.path.dirname(sys.argv[1])
for t in m.graph.parameter:
    e = t.external_data
    data = open(os.path.join(base, e.location), "rb").read()
    assert data[0] == 1 and data[1:64] == bytes(63), "front info"
    assert len(data) % 64 == 0, "data file not padded to 64"
    assert e.offset % 64 == 0 and e.offset >= 64, (t.name, e.offset)
    assert not t.HasField("raw_data"), t.name
print("layout ok")
PY
}

@test "split MindIR (v1.6+ and v2.3+ order): mounted tensor by tensor as the oracle reads it" {
    for order in "" --sorted; do
        rm -rf "$BATS_TEST_TMPDIR/model"
        m=$(split $order)
        mount_fg "$m" "$BATS_TEST_TMPDIR/m$order" -o ro
        $GRAPH_ORACLE check "$BATS_TEST_TMPDIR/m$order" "$m"
        [ "$(getfattr --only-values -n user.ckptfs.name "$BATS_TEST_TMPDIR/m$order/conv1.weight")" = \
          "17_1_construct.Default_wrapper.5:conv1.weight" ]
    done
}

@test "split MindIR: all tensors rewritten give back identical files; an edit stays in place" {
    local m mnt=$BATS_TEST_TMPDIR/m
    m=$(split --sorted)
    snapshot "$m"
    mount_fg "$m" "$mnt" -o commit=manual
    rewrite_outs "$mnt"
    touch "$mnt/snapshot_done"
    diff -r -x '*.ckptfs-lock' "$BATS_TEST_TMPDIR/before" "$(dirname "$m")"
    $PY -c 'import numpy as np,sys; np.full(150, 0.25, dtype="<f4").tofile(sys.argv[1])' "$mnt/conv1.weight/out"
    touch "$mnt/snapshot_done"
    cmp "$BATS_TEST_TMPDIR/before/net_graph.mindir" "$m"
    [ "$($GRAPH_ORACLE values "$m" conv1.weight | sort -u)" = "0.25" ]
    check_layout "$m"
}

@test "split MindIR: a resized and a new parameter are appended to data_0, 64-byte aligned" {
    local m mnt=$BATS_TEST_TMPDIR/m
    m=$(split)
    mount_fg "$m" "$mnt"
    $ORACLE meta-of 3,5 kFloat >"$mnt/conv2.weight/meta.new"
    $PY -c 'import numpy as np,sys; np.arange(15,dtype="<f4").tofile(sys.argv[1])' "$mnt/conv2.weight/out"
    mv "$mnt/conv2.weight/meta.new" "$mnt/conv2.weight/meta"
    mkdir "$mnt/fc.bias"
    $ORACLE meta-of 3 kFloat >"$mnt/fc.bias/meta"
    $PY -c 'import numpy as np,sys; np.array([1,2,3],dtype="<f4").tofile(sys.argv[1])' "$mnt/fc.bias/out"
    touch "$mnt/snapshot_done"
    check_layout "$m"
    [ "$($GRAPH_ORACLE values "$m" conv2.weight | tr '\n' ' ')" = "0.0 1.0 2.0 3.0 4.0 5.0 6.0 7.0 8.0 9.0 10.0 11.0 12.0 13.0 14.0 " ]
    [ "$($GRAPH_ORACLE values "$m" fc.bias | tr '\n' ' ')" = "1.0 2.0 3.0 " ]
    PYTHONPATH=$REPO/tests/oracle $PY - "$m" <<'PY'
import os, sys
import graph_oracle
pb = graph_oracle.mindir_module()
m = pb.ModelProto()
m.ParseFromString(open(sys.argv[1], "rb").read())
names = [t.name for t in m.graph.parameter]
assert names[-1] == "17_1_construct.Default_wrapper.5:fc.bias", names
assert m.graph.parameter[-1].external_data.location == "net_variables/data_0"
PY
}

@test "split MindIR: a data file whose front info is not little-endian is refused" {
    local m
    m=$(split --front 0)
    mkdir "$BATS_TEST_TMPDIR/m"
    run "$CKPTFS" -f "$m" "$BATS_TEST_TMPDIR/m"
    echo "$output"
    [ "$status" -ne 0 ]
    [ "${#lines[@]}" -eq 1 ]
    [[ "$output" == "ckptfs: $m: data file "*"net_variables/data_0: offset 0: header byte 0 says big-endian"* ]]
    ! mountpoint -q "$BATS_TEST_TMPDIR/m" || false
}

@test "legacy split MindIR (v1.2-1.5, GraphProto data files): mounted, edited, round-tripped" {
    local m mnt=$BATS_TEST_TMPDIR/m
    m=$(split --legacy)
    snapshot "$m"
    mount_fg "$m" "$mnt" -o commit=manual
    $GRAPH_ORACLE check "$mnt" "$m"
    rewrite_outs "$mnt"
    touch "$mnt/snapshot_done"
    diff -r -x '*.ckptfs-lock' "$BATS_TEST_TMPDIR/before" "$(dirname "$m")"
    $PY -c 'import numpy as np,sys; np.full(150, -1.5, dtype="<f4").tofile(sys.argv[1])' "$mnt/conv1.weight/out"
    mkdir "$mnt/fc.bias"
    $ORACLE meta-of 2 kFloat >"$mnt/fc.bias/meta"
    $PY -c 'import numpy as np,sys; np.array([7,8],dtype="<f4").tofile(sys.argv[1])' "$mnt/fc.bias/out"
    touch "$mnt/snapshot_done"
    # The graph file is untouched; the parameters changed in data_0.
    cmp "$BATS_TEST_TMPDIR/before/net_graph.mindir" "$m"
    [ "$($GRAPH_ORACLE values "$m" conv1.weight | sort -u)" = "-1.5" ]
    [ "$($GRAPH_ORACLE values "$m" fc.bias | tr '\n' ' ')" = "7.0 8.0 " ]
    # The new parameter joins the (last) variables file, prefixed like the rest.
    PYTHONPATH=$REPO/tests/oracle $PY - "$(dirname "$m")/net_variables/data_0" \
        "$BATS_TEST_TMPDIR/before/net_variables/data_0" <<'PY'
import sys
import graph_oracle
pb = graph_oracle.mindir_module()
def names(path):
    g = pb.GraphProto()
    g.ParseFromString(open(path, "rb").read())
    return [t.name for t in g.parameter]
old = names(sys.argv[2])
assert names(sys.argv[1]) == old + [old[0].split(":")[0] + ":fc.bias"], names(sys.argv[1])
PY
}
