#!/usr/bin/env python3
"""The import graph of a transit-release checkout, by file and by room: cycles and arrows that run up.

    python3 tests/import_graph.py [/path/to/checkout]     (tests/test_import_graph.py asserts the same)

A room is a folder of ``transit_release/`` (``accounting``, ``integrity``, ...), a root module of it (``noise``), or
one of the top-level packages (``flows``, ``tasks``, ``schemas``). Reported:

* every import from the library (``transit_release``, ``cli`` excepted: the command sits above the flows) into
  ``flows``, ``tasks`` or ``transit_release.cli`` (an arrow up: the library must never need its orchestration);
* every cycle between files (strongly connected components), top-level and function-level imports alike,
  each edge marked ``lazy`` when it is inside a function;
* every cycle between rooms.
Exit status 1 when there is an arrow up or a cycle between rooms.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

TOP = ("transit_release", "flows", "tasks", "schemas")


def modules(root: Path) -> dict[str, Path]:
    out = {}
    for top in TOP:
        for path in sorted((root / top).rglob("*.py")):
            rel = path.relative_to(root).with_suffix("")
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            out[".".join(parts)] = path
    return out


def resolve(name: str, mods: dict[str, Path]) -> str | None:
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def edges(root: Path, mods: dict[str, Path]) -> dict[tuple[str, str], bool]:
    """(importer, imported) -> True when every such import is inside a function (lazy)."""
    found: dict[tuple[str, str], bool] = {}
    for mod, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        lazy_nodes = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lazy_nodes.update(id(n) for n in ast.walk(node))
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [f"{node.module}.{a.name}" for a in node.names] or [node.module]
            for t in targets:
                if t.split(".")[0] not in TOP:
                    continue
                dst = resolve(t, mods)
                if dst is None or dst == mod:
                    continue
                lazy = id(node) in lazy_nodes
                found[(mod, dst)] = found.get((mod, dst), True) and lazy
    return found


def room(mod: str) -> str:
    parts = mod.split(".")
    if parts[0] != "transit_release":
        return parts[0]
    if len(parts) == 1:
        return "transit_release"
    return "transit_release." + parts[1]


def sccs(nodes, succ):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in succ.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in nodes:
        if v not in index:
            visit(v)
    return out


def main() -> int:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    mods = modules(root)
    found = edges(root, mods)
    bad = 0
    up = [(a, b, lazy) for (a, b), lazy in found.items()
          if a.startswith("transit_release") and not a.startswith("transit_release.cli")
          and (b.split(".")[0] in ("flows", "tasks") or b.startswith("transit_release.cli"))]
    print(f"{len(mods)} modules, {len(found)} import edges")
    for a, b, lazy in sorted(up):
        print(f"ARROW UP: {a} -> {b}{' (lazy)' if lazy else ''}")
        bad += 1
    succ = defaultdict(set)
    for a, b in found:
        succ[a].add(b)
    for comp in sccs(sorted(mods), succ):
        print("FILE CYCLE:", ", ".join(comp))
        for a in comp:
            for b in sorted(succ[a] & set(comp)):
                print(f"    {a} -> {b}{' (lazy)' if found[(a, b)] else ''}")
    rsucc = defaultdict(set)
    redges = defaultdict(list)
    for (a, b), lazy in found.items():
        ra, rb = room(a), room(b)
        if ra != rb and rb != "transit_release":  # the package face (version, telemetry-off) is under everything
            rsucc[ra].add(rb)
            redges[(ra, rb)].append(f"{a} -> {b}{' (lazy)' if lazy else ''}")
    for comp in sccs(sorted({room(m) for m in mods}), rsucc):
        print("ROOM CYCLE:", ", ".join(comp))
        for a in comp:
            for b in sorted(rsucc[a] & set(comp)):
                for e in redges[(a, b)]:
                    print(f"    {e}")
        bad += 1
    print("ok" if not bad else f"{bad} problem(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
