# SPDX-License-Identifier: Apache-2.0
# Sourced by the oracle self-checks and the bats helpers: one Python
# (tests/oracle/pyserve.py) that has imported numpy, onnx, torch and the
# oracles once, for the hundreds of oracle calls of one file of cases.
#
# pyserve_start SOCKET MODULE|SCRIPT.py...: start it, listening on SOCKET,
#   and set PYCALL, the command that runs `python3 ARGS...` through it
#   ("${PYCALL[@]}" SCRIPT ARGS, or - for a program on stdin): the same
#   arguments, streams, directory, environment and exit status.  With
#   PYSERVE=0 in the environment no server: PYCALL is python3 itself.
# pyserve_stop: stop it (by its pid; nothing if none was started).
PYSERVE_PY=$(dirname "${BASH_SOURCE[0]}")/pyserve.py
PYCALL=(/usr/bin/python3)
PYSERVE_PID=
pyserve_start() {
    local sock=$1 i
    shift
    PYCALL=(/usr/bin/python3)
    [ "${PYSERVE:-1}" != 0 ] || return 0
    /usr/bin/python3 "$PYSERVE_PY" serve "$sock" "$@" </dev/null >/dev/null &
    PYSERVE_PID=$!
    # Bounded, so a broken install cannot hang a run; not a timing check.
    # The socket appears (renamed into place) only once it listens.
    for i in $(seq 1 1200); do
        if [ -S "$sock" ]; then
            PYCALL=(/usr/bin/python3 -S -I "$PYSERVE_PY" call "$sock")
            return 0
        fi
        [ -d "/proc/$PYSERVE_PID" ] || break
        sleep 0.05
    done
    echo "pyserve: the server did not start" >&2
    pyserve_stop
    return 1
}
pyserve_stop() {
    [ -n "$PYSERVE_PID" ] || return 0
    kill "$PYSERVE_PID" 2>/dev/null
    wait "$PYSERVE_PID" 2>/dev/null
    PYSERVE_PID=
    PYCALL=(/usr/bin/python3)
}
