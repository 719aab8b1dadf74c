#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""module_cycles: no include circle and no call circle between modules (issue 40).

A module is a .c with its .h (codec/envelope.c and codec/envelope.h are the
module codec/envelope); a header without a .c, or a .c without a header, is a
module of its own.  Two graphs are built over the C code of the source folders
(codec/, save/, mount/, fuse/, tools/, mount-helpers/):

  include  A -> B when a file of A has `#include "..."` naming a file of B
           (resolved relative to the including file, as the compiler does);
  call     A -> B when A's object (BUILD/A.o) has an undefined symbol that
           B's object defines (`nm`), i.e. code in A calls or uses B.

Every strongly connected component of more than one module is a circle, and
the layering rule is that there are none: a lower layer never reaches up, so
each module can be read, tested and replaced with only what is below it.
One line per circle, the modules in the order of a walk through all of them,
then the edges inside it (which include, which symbol), so the line says
where to cut.  Exits 1 on any circle, 2 on a usage error, 0 otherwise.

The layers, bottom up: codec/core/ (the model opens a file as the format and
envelope kinds it is handed, and reaches the saved index through
ck_index_hooks); codec/envelope, codec/io/writer and the formats and envelope
kinds; codec/registry (their tables, and ck_model_open by a file's name); the
collections (which open their files through the registry); codec/open_path
(the collections' table, ck_open_path); then save/'s encoder, tools/ and fs/.
Where a lower layer must reach up, the caller hands it down (a table, a
function pointer).  A circle that cannot be broken at once may be listed in
tests/tools/module_cycles.known: the check then tolerates it, and fails when it
is gone, so the list only shrinks (it is empty today).
tests/bats/module_cycles.bats runs this on the build under test in `make test`,
and the --self-test.

    tests/tools/module_cycles.py [--root DIR] [--build DIR] [--includes-only]
    tests/tools/module_cycles.py --self-test

--build defaults to ROOT/build; without objects there (not built yet) the
call graph is an error, not an empty pass.  --self-test plants an include
circle and a call circle in a temporary tree (and a clean tree beside it)
and checks that they are found, so the check cannot silently pass.
"""

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile

SOURCE_DIRS = ("codec", "save", "mount", "fuse", "tools", "mount-helpers")
# Files that are C: .inc is a fragment a .c includes (tools/stats_kernel.inc).
C_EXTS = (".c", ".h", ".inc")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def module_of(rel):
    """A file's module: its path without the extension."""
    return os.path.splitext(rel)[0]


def source_files(root):
    """The C files of the source folders, as paths relative to root."""
    out = []
    for d in SOURCE_DIRS:
        top = os.path.join(root, d)
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames.sort()
            for f in sorted(filenames):
                if f.endswith(C_EXTS):
                    out.append(os.path.relpath(os.path.join(dirpath, f), root))
    return out


def include_graph(root, files):
    """Edges module -> {module: [why...]} from the quoted includes."""
    known = set(files)
    edges = collections.defaultdict(lambda: collections.defaultdict(list))
    for rel in files:
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        for name in INCLUDE_RE.findall(text):
            target = os.path.normpath(os.path.join(os.path.dirname(rel), name))
            # Not one of ours (a generated protobuf-c header in BUILD/gen):
            # outside the graph.
            if target not in known:
                continue
            a, b = module_of(rel), module_of(target)
            if a != b:
                edges[a][b].append("%s includes %s" % (rel, target))
    return edges


def nm_symbols(obj, defined):
    """The global symbols obj defines (defined=True) or needs."""
    args = ["nm", "-P", "--defined-only" if defined else "--undefined-only", obj]
    res = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         universal_newlines=True, check=False)
    if res.returncode != 0:
        raise RuntimeError("nm %s: %s" % (obj, res.stderr.strip()))
    out = set()
    for line in res.stdout.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        sym, kind = parts[0], parts[1]
        # Lower-case kinds are local (static) symbols, which no other
        # object can reach; w/v weak references are needed, not defined.
        if defined and (kind.islower() or kind in "UVW"):
            continue
        out.add(sym)
    return out


def call_graph(root, build, files):
    """Edges module -> {module: [why...]} from the objects' symbols: each
    source .c's object BUILD/PATH.o (the library's and the programs' objects;
    not the fuzzer's or the unit tests' copies)."""
    objs = {}
    for rel in files:
        if rel.endswith(".c"):
            obj = os.path.join(build, os.path.splitext(rel)[0] + ".o")
            if os.path.exists(obj):
                objs[module_of(rel)] = obj
    if not objs:
        raise RuntimeError("no objects in %s: build first (make)" % build)
    definer = collections.defaultdict(set)
    needs = {}
    for mod, obj in objs.items():
        for sym in nm_symbols(obj, True):
            definer[sym].add(mod)
        needs[mod] = nm_symbols(obj, False)
    edges = collections.defaultdict(lambda: collections.defaultdict(list))
    for a, syms in needs.items():
        for sym in sorted(syms):
            for b in definer.get(sym, ()):
                if a != b:
                    edges[a][b].append(sym)
    return edges, len(objs)


def sccs(nodes, edges):
    """Tarjan's strongly connected components (iterative), each sorted."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = 0
    for start in sorted(nodes):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, {}))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, {})))))
                    advanced = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                out.append(sorted(comp))
    return out


def walk(comp, edges):
    """A closed walk through every module of comp, within comp: from the
    first, each time the shortest way to the nearest module not yet seen,
    and at the end the shortest way back (for a simple circle, the circle)."""
    members = set(comp)

    def bfs(src, goals):
        prev = {src: None}
        queue = collections.deque([src])
        while queue:
            v = queue.popleft()
            for w in sorted(edges.get(v, {})):
                if w in members and w not in prev:
                    prev[w] = v
                    if w in goals:
                        path = [w]
                        while prev[path[-1]] is not None:
                            path.append(prev[path[-1]])
                        return path[::-1]
                    queue.append(w)
        return None

    path = [comp[0]]
    seen = {comp[0]}
    while len(seen) < len(members):
        step = bfs(path[-1], members - seen)
        path += step[1:]
        seen.update(step)
    # Back to the start (never the last module reached: that was new).
    back = bfs(path[-1], {comp[0]})
    return path + back[1:]


def read_known(path):
    """The circles tolerated for now: {(kind, frozenset of modules)}.  One
    a line, "include|call MODULE MODULE ...", # to the end of a line a
    comment.  A circle broken must leave the list (it only shrinks)."""
    known = set()
    if path is None or not os.path.exists(path):
        return known
    with open(path) as fh:
        for n, line in enumerate(fh, 1):
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            if words[0] not in ("include", "call") or len(words) < 3:
                raise RuntimeError("%s:%d: not \"include|call MODULE MODULE...\"" % (path, n))
            known.add((words[0], frozenset(words[1:])))
    return known


def report(kind, edges, nodes, known):
    """Print each circle of one graph; return (new ones, known ones found)."""
    new, seen = 0, set()
    for comp in sccs(nodes, edges):
        if len(comp) < 2:
            continue
        line = "%s circle (%d modules): %s" % (kind, len(comp), " -> ".join(walk(comp, edges)))
        if (kind, frozenset(comp)) in known:
            seen.add((kind, frozenset(comp)))
            print("known " + line)
            continue
        new += 1
        print(line)
        members = set(comp)
        for a in comp:
            for b in sorted(edges.get(a, {})):
                if b in members:
                    why = edges[a][b]
                    more = " (+%d more)" % (len(why) - 4) if len(why) > 4 else ""
                    print("    %s -> %s: %s%s" % (a, b, ", ".join(why[:4]), more))
    return new, seen


def check(root, build, includes_only=False, known_path=None):
    """Both graphs of root; the number of failures: circles not in the
    known list, and listed ones no longer there."""
    known = read_known(known_path)
    files = source_files(root)
    nodes = {module_of(f) for f in files}
    inc = include_graph(root, files)
    n, seen = report("include", inc, nodes, known)
    nobj = 0
    if not includes_only:
        calls, nobj = call_graph(root, build, files)
        m, seen_calls = report("call", calls, nodes, known)
        n += m
        seen |= seen_calls
    for kind, comp in sorted(known - seen, key=lambda k: (k[0], sorted(k[1]))):
        if includes_only and kind == "call":
            continue
        # Broken (or changed): the list must say so, so it only shrinks.
        print("gone %s circle (%d modules): %s: take it out of %s" %
              (kind, len(comp), " ".join(sorted(comp)), known_path))
        n += 1
    print("module_cycles: %d modules, %d objects, %d new circle%s or stale entr%s, %d known" %
          (len(nodes), nobj, n, "" if n == 1 else "s", "y" if n == 1 else "ies", len(seen)))
    return n


def self_test():
    """Plant circles in a temporary tree; a checker that misses them fails."""
    cc = os.environ.get("CC", "cc")
    tmp = tempfile.mkdtemp(prefix="module_cycles.")
    failures = 0
    try:
        def tree(name, files):
            root = os.path.join(tmp, name)
            for rel, text in files.items():
                path = os.path.join(root, rel)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w") as fh:
                    fh.write(text)
            for rel in files:
                if rel.endswith(".c"):
                    obj = os.path.join(root, "build", rel[:-2] + ".o")
                    os.makedirs(os.path.dirname(obj), exist_ok=True)
                    subprocess.run([cc, "-c", "-o", obj, os.path.join(root, rel)], check=True)
            return root

        # Include circle: a.h includes b.h (through ../, as a subfolder's
        # file does), b.c includes a.h.  Call circle: c calls d, d calls c,
        # with no include between them (the declarations are local).
        circles = tree("circles", {
            "codec/a.h": '#include "../save/b.h"\nint a(void);\n',
            "codec/a.c": '#include "a.h"\nint a(void) { return 1; }\n',
            "save/b.h": "int b(void);\n",
            "save/b.c": '#include "b.h"\n#include "../codec/a.h"\nint b(void) { return 2; }\n',
            "mount/c.c": "int d(int);\nint c(int n) { return n ? d(n - 1) : 0; }\n",
            "mount/d.c": "int c(int);\nint d(int n) { return n ? c(n - 1) : 0; }\n",
        })
        # The same modules layered: b below a, d below c.
        clean = tree("clean", {
            "codec/a.h": '#include "../save/b.h"\nint a(void);\n',
            "codec/a.c": '#include "a.h"\nint a(void) { return b(); }\n',
            "save/b.h": "int b(void);\n",
            "save/b.c": '#include "b.h"\nint b(void) { return 2; }\n',
            "mount/c.c": "int d(int);\nint c(int n) { return d(n); }\n",
            "mount/d.c": "int d(int n) { return n; }\n",
        })
        # The known list: the planted circles listed pass; a listed one
        # that is not there (broken, or changed) fails.
        listed = os.path.join(tmp, "listed")
        with open(listed, "w") as fh:
            fh.write("# planted\ninclude save/b codec/a\ncall mount/c mount/d\n")
        stale = os.path.join(tmp, "stale")
        with open(stale, "w") as fh:
            fh.write("include save/b codec/a\ncall mount/c mount/d\ninclude mount/c mount/d\n")
        cases = (("planted circles", circles, [], 2, 1),
                 ("layered tree", clean, [], 0, 0),
                 ("planted circles listed as known", circles, ["--known", listed], 0, 0),
                 ("a known circle gone", circles, ["--known", stale], 0, 1))
        for name, root, extra, want, rc in cases:
            cmd = [sys.executable, os.path.abspath(__file__), "--root", root] + extra
            res = subprocess.run(cmd, stdout=subprocess.PIPE, universal_newlines=True, check=False)
            out = res.stdout
            lines = [l for l in out.splitlines() if l.startswith(("include circle", "call circle"))]
            ok = len(lines) == want and res.returncode == rc
            if want:
                ok = ok and any(l.startswith("include circle (2 modules): "
                                             "codec/a -> save/b -> codec/a") for l in lines)
                ok = ok and any(l.startswith("call circle (2 modules): mount/c -> mount/d -> mount/c")
                                for l in lines)
            if extra == ["--known", stale]:
                ok = ok and "gone include circle (2 modules): mount/c mount/d" in out
            print("%s - self-test: %s (exit %d)" % ("ok" if ok else "not ok", name, res.returncode))
            if not ok:
                sys.stdout.write(out)
                failures += 1
    finally:
        shutil.rmtree(tmp)
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--root", default=os.path.join(here, "..", ".."))
    ap.add_argument("--build", help="the objects' folder (default ROOT/build)")
    ap.add_argument("--includes-only", action="store_true", help="no call graph (nothing built)")
    ap.add_argument("--known", help="the circles tolerated for now "
                    "(default tests/tools/module_cycles.known beside this script, "
                    "for the repository's own root)")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        sys.exit(1 if self_test() else 0)
    root = os.path.abspath(args.root)
    build = os.path.abspath(args.build or os.path.join(root, "build"))
    try:
        known = args.known
        here = os.path.dirname(os.path.abspath(__file__))
        if known is None and os.path.samefile(root, os.path.join(here, "..", "..")):
            known = os.path.join(here, "module_cycles.known")
        n = check(root, build, args.includes_only, known)
    except RuntimeError as e:
        print("module_cycles: %s" % e, file=sys.stderr)
        sys.exit(2)
    sys.exit(1 if n else 0)


if __name__ == "__main__":
    main()
