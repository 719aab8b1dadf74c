# SPDX-License-Identifier: Apache-2.0
"""One Python for a file of oracle calls: the imports paid once, not per call.

The oracles are command-line scripts that the self-checks and the bats
files run by the hundred, and most of each run is the interpreter starting
and importing numpy, onnx or torch.  This serves those runs from one
process that has done its imports:

  pyserve.py serve SOCKET [MODULE|SCRIPT.py...]
      import MODULE... (tests/oracle on the path), compile SCRIPT.py...
      (the oracles the calls will run; each imported too, for its own
      imports), listen on the Unix socket
      SOCKET; for each call, fork a child of that process, which runs the
      call and exits.  The parent keeps nothing of a call: each one starts
      from the same state, as a fresh process would, only imported.
  pyserve.py call SOCKET SCRIPT ARGS...   (python3 -S -I: no site, ~20 ms)
      run `python3 SCRIPT ARGS...` in a child of the server, with this
      process's standard input, output and error (passed over the socket),
      its working directory, umask and environment, and exit with its
      status.
      SCRIPT "-" reads the program from standard input, as python3 - does;
      "-c CODE" runs CODE, as python3 -c does.

A call behaves as the command would: sys.argv, __name__ == "__main__",
sys.exit codes and messages, an uncaught exception's traceback and exit
status 1; killed by signal N, status 128 + N, as the shell reports it.  The
server gone, the call exits 1 with a line on stderr.  What it cannot be is
a new process of its caller: the oracle's os.getpid() is the server's
child's, its resource limits and credentials the server's, and killing the
call does not stop that child; so no caller that sets those (ulimit,
setpriv, another user) or kills an oracle may use it.
"""
import array
import os
import socket
import struct
import sys


def _send_msg(sock, data, fds=()):
    head = struct.pack("!I", len(data))
    if fds:
        sock.sendmsg([head + data],
                     [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
    else:
        sock.sendall(head + data)


def _recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def call(path, argv):
    import json
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError as e:
        print("pyserve: no server at %s: %s" % (path, e), file=sys.stderr)
        return 1
    mask = os.umask(0)
    os.umask(mask)
    req = json.dumps({"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ),
                      "umask": mask}).encode()
    _send_msg(sock, req, fds=[0, 1, 2])
    reply = _recv_exact(sock, 4)
    if reply is None:
        print("pyserve: the call %s ended without a status (killed?)" % " ".join(argv),
              file=sys.stderr)
        return 1
    return struct.unpack("!i", reply)[0]


def _run(argv):
    """In the child: the call, as python3 would run it; its exit status."""
    import traceback
    sys.argv = list(argv)
    try:
        import types
        main = types.ModuleType("__main__")
        main.__builtins__ = __builtins__
        if argv[0] == "-":
            code = compile(sys.stdin.read(), "<stdin>", "exec")
            sys.path[0:0] = [""]
        elif argv[0] == "-c":
            code = compile(argv[1], "<string>", "exec")
            sys.argv = ["-c"] + list(argv[2:])
            sys.path[0:0] = [""]
        else:
            path = os.path.abspath(argv[0])
            sys.path.insert(0, os.path.dirname(path))
            code = _compiled(path)
            if code is None:
                with open(path, "rb") as f:
                    code = compile(f.read(), argv[0], "exec")
            main.__file__ = argv[0]
        # PYTHONPATH as python3 reads it: after the script's directory
        extra = [d for d in os.environ.get("PYTHONPATH", "").split(os.pathsep) if d]
        sys.path[1:1] = extra
        sys.modules["__main__"] = main
        _globals.append(main.__dict__)
        exec(code, main.__dict__)
        status = 0
    except SystemExit as e:
        if e.code is None:
            status = 0
        elif isinstance(e.code, int):
            status = e.code & 0xFF
        else:
            print(e.code, file=sys.stderr)
            status = 1
    except BaseException:  # as the interpreter would: the traceback, status 1
        traceback.print_exc()
        status = 1
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except Exception:
            status = status or 1
    return status


_globals = []  # the call's __main__ namespace, cleared at its end
_code = {}  # path: (mtime, code), the scripts named to serve, compiled there


def _compiled(path):
    try:
        mtime = os.stat(path).st_mtime_ns
    except OSError:
        return None
    hit = _code.get(path)
    return hit[1] if hit and hit[0] == mtime else None


def _exit(status):
    """The runner's end, as python3's for what a call can see: what it left
    unreferenced collected (files flushed and closed, finalizers run), then
    atexit, the standard streams flushed.  Not the interpreter's whole
    teardown, which would touch, and so copy, every page the server shares
    with this child."""
    import atexit
    import gc
    for g in _globals:
        g.clear()
    gc.collect()
    try:
        atexit._run_exitfuncs()
    except BaseException:
        status = status or 1
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except Exception:
            status = status or 1
    os._exit(status)


def _handle(conn):
    """In a child of the server: one call.  Its runner is another child,
    which exits as a python3 process does (its files flushed and closed,
    atexit run); this one waits for it and sends its status."""
    import json
    head, fds, _, _ = _recvmsg_fds(conn, 4)
    (n,) = struct.unpack("!I", head)
    req = json.loads(_recv_exact(conn, n))
    pid = os.fork()
    if pid == 0:
        conn.close()
        for i, fd in enumerate(fds[:3]):
            os.dup2(fd, i)
        for fd in fds:
            os.close(fd)
        enc, err = sys.stdout.encoding, sys.stdout.errors
        sys.stdin = open(0, "r", encoding=enc, errors=err, closefd=False)
        sys.stdout = open(1, "w", encoding=enc, errors=err, closefd=False)
        sys.stderr = open(2, "w", encoding=enc, errors="backslashreplace", closefd=False)
        os.chdir(req["cwd"])
        os.umask(req["umask"])
        os.environ.clear()
        os.environ.update(req["env"])
        return req["argv"]  # the runner: main runs it
    for fd in fds:
        os.close(fd)
    _, wstatus = os.waitpid(pid, 0)
    if os.WIFSIGNALED(wstatus):
        status = 128 + os.WTERMSIG(wstatus)
    else:
        status = os.WEXITSTATUS(wstatus)
    conn.sendall(struct.pack("!i", status))
    return None


def _recvmsg_fds(conn, n):
    fds = array.array("i")
    msg, anc, flags, addr = conn.recvmsg(n, socket.CMSG_SPACE(3 * fds.itemsize))
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[:len(data) - (len(data) % fds.itemsize)])
    if len(msg) < n:
        msg += _recv_exact(conn, n - len(msg))
    return msg, list(fds), flags, addr


def serve(path, modules):
    import importlib
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    for m in modules:
        if m.endswith(".py"):  # a script: compiled now, run by each call
            script = os.path.abspath(m)
            with open(script, "rb") as f:
                src = f.read()
            _code[script] = (os.stat(script).st_mtime_ns, compile(src, m, "exec"))
            sys.path.insert(0, os.path.dirname(script))
            # and imported, by name, for what it imports (not as __main__)
            importlib.import_module(os.path.basename(script)[:-3])
        else:
            importlib.import_module(m)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path + ".new")
    sock.listen(64)
    os.rename(path + ".new", path)  # there only once it listens
    import gc
    gc.freeze()  # the children's collections leave the imports' pages alone
    base_path = list(sys.path)
    while True:
        conn, _ = sock.accept()
        pid = os.fork()
        if pid == 0:
            sock.close()
            sys.path[:] = base_path
            return conn
        conn.close()
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            pass


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "serve":
        conn = serve(sys.argv[2], sys.argv[3:])  # returns in a call's child
        try:
            argv = _handle(conn)
        except BaseException:
            import traceback
            traceback.print_exc()
            os._exit(1)
        if argv is None:  # the call's status sent
            os._exit(0)
        _exit(_run(argv))  # the runner
    elif len(sys.argv) >= 4 and sys.argv[1] == "call":
        sys.exit(call(sys.argv[2], sys.argv[3:]))
    else:
        print("usage: pyserve.py serve SOCKET [MODULE...] | call SOCKET SCRIPT ARGS...",
              file=sys.stderr)
        sys.exit(2)
