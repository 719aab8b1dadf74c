#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# The layering rule (issue 40, docs/design.md): no include circle and no
# call circle between the modules of codec/, export/, fs/ and tools/ (a .c
# with its .h), checked by tests/tools/module_cycles.py over the sources and
# the objects of the build under test; and the checker's self-test, which
# plants circles in a temporary tree, so that a broken checker cannot pass.

load helpers

@test "module_cycles: finds planted include and call circles, passes a layered tree" {
    run $PY "$REPO/tests/tools/module_cycles.py" --self-test
    echo "$output"
    [ "$status" -eq 0 ]
}

@test "no include or call circle between modules (beyond tests/tools/module_cycles.known)" {
    run $PY "$REPO/tests/tools/module_cycles.py" --root "$REPO" --build "$BUILD"
    echo "$output"
    [ "$status" -eq 0 ]
}
