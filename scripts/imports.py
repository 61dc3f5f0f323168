#!/usr/bin/env python3
"""The import graph of a crate's modules (the seckill crate's, or --crate's, or --all's), and its circles.

Maps every file under crates/seckill/src to its top-level module (src/variants/section.rs
-> variants, src/error.rs -> error; lib.rs and main.rs are skipped) and collects each
`crate::X` path outside comments and strings (`use crate::X`, `use crate::{X, Y}`, a
`crate::X::f()` in code). `super::` stays inside a module and is ignored. Prints:
  - the graph: module -> the modules it uses,
  - the circles: strongly connected components of more than one module, with their sizes,
  - for each edge inside a circle, the file:line of the uses that make it
    (`[test]` marks a use under #[cfg(test)]).
With --within MOD, the same for the files of one module (src/MOD/*.rs), following
`super::x`, `crate::MOD::x` and mod.rs's `x::` paths, and mod.rs's `pub use` re-exports.

Run from the repository root:
  scripts/imports.py [--max-cycle 3] [--no-tests] [--within variants] [--crate seckill-bench | --all]
--max-cycle N exits 1 when a circle has more than N modules (for CI).
Standard library only; it reads the sources and never builds them.
"""
import argparse
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "crates/seckill/src"
# Comments (line and nested block are both cut short enough), strings and char literals.
TOKENS = re.compile(r'//[^\n]*|/\*.*?\*/|r(#*)".*?"\1|"(?:\\.|[^"\\])*"|\'(?:\\.|[^\\\'\n])\'', re.S)


def strip(text):
    """The code alone: comments and literals blanked, line numbers kept."""
    return TOKENS.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def heads(code, prefix):
    """(offset, name) of each `prefix::name`, and of each top-level name in `prefix::{..}`."""
    for m in re.finditer(r"(?<![\w:])" + prefix + r"::(\w+|\{)", code):
        if m.group(1) != "{":
            yield m.start(1), m.group(1)
            continue
        depth, at = 1, m.end()
        for tok in re.finditer(r"[{}]|\w+(?:::\w+)*", code[at:]):
            if tok.group(0) == "{":
                depth += 1
            elif tok.group(0) == "}":
                depth -= 1
                if depth == 0:
                    break
            elif depth == 1 and tok.group(0) not in ("self", "super"):
                yield at + tok.start(), tok.group(0).split("::")[0]


def scan(path, prefixes):
    """[(line, name, in_test)] for the paths in one file after any of `prefixes`."""
    code = strip(path.read_text())
    tests = code.find("#[cfg(test)]")
    out = []
    for prefix in prefixes:
        for at, name in heads(code, prefix):
            out.append((code.count("\n", 0, at) + 1, name, tests >= 0 and at > tests))
    return out


def sccs(graph):
    """Tarjan's strongly connected components."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
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
            found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def module_uses(no_tests):
    """node -> {node: [where]}, one node per top-level module."""
    files = [p for p in sorted(SRC.rglob("*.rs")) if p.relative_to(SRC).parts[0] not in ("lib.rs", "main.rs")]
    nodes = {p: p.relative_to(SRC).parts[0].removesuffix(".rs") for p in files}
    uses = {n: defaultdict(list) for n in nodes.values()}
    for path, node in nodes.items():
        for line, name, test in scan(path, ["crate"]):
            if name in uses and name != node and not (test and no_tests):
                uses[node][name].append(f"{path.relative_to(SRC)}:{line}" + " [test]" * test)
    return uses


def file_uses(module, no_tests):
    """The same for the files of one module: src/MOD/x.rs -> x, mod.rs -> mod."""
    root = SRC / module
    files = {p.stem: p for p in sorted(root.glob("*.rs"))}
    reexport = {}  # a name mod.rs re-exports -> the file that defines it
    for m in re.finditer(r"pub(?:\([\w ]+\))? use (\w+)::\{?([^;}]*)", strip(files["mod"].read_text())):
        for name in re.findall(r"\w+", m.group(2)):
            reexport[name] = m.group(1)
    uses = {n: defaultdict(list) for n in files}
    for node, path in files.items():
        found = scan(path, ["crate::" + module, "self" if node == "mod" else "super"])
        if node == "mod":  # mod.rs names its children bare: `lua::SPEC`, `pub use lost::X`
            code = strip(path.read_text())
            tests = code.find("#[cfg(test)]")
            for m in re.finditer(r"(?<![\w:])(\w+)::", code):
                found.append((code.count("\n", 0, m.start()) + 1, m.group(1), tests >= 0 and m.start() > tests))
        for line, name, test in found:
            target = name if name in files else reexport.get(name, "mod")
            if target in uses and target != node and not (test and no_tests):
                uses[node][target].append(f"{path.relative_to(SRC)}:{line}" + " [test]" * test)
    return uses


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-cycle", type=int, metavar="N", help="fail when a circle has more than N modules")
    ap.add_argument("--no-tests", action="store_true", help="leave out uses under #[cfg(test)]")
    ap.add_argument("--within", metavar="MOD", help="the files of one module instead of the modules")
    ap.add_argument("--crate", metavar="NAME", default="seckill",
                    help="the crate under crates/ to read (default: seckill)")
    ap.add_argument("--all", action="store_true",
                    help="every crate under crates/, one after the other (with --max-cycle: each)")
    args = ap.parse_args()
    if args.all:
        worst = 0
        for crate in sorted(p.parent.parent.name for p in ROOT.glob("crates/*/src/lib.rs")):
            print(f"#### {crate}")
            worst = max(worst, report(crate, args))
            print()
        if args.max_cycle is not None and worst > args.max_cycle:
            print(f"FAIL: a circle of {worst} > --max-cycle {args.max_cycle}", file=sys.stderr)
            sys.exit(1)
        return
    biggest = report(args.crate, args)
    if args.max_cycle is not None and biggest > args.max_cycle:
        print(f"\nFAIL: a circle of {biggest} > --max-cycle {args.max_cycle}", file=sys.stderr)
        sys.exit(1)


def report(crate, args):
    """Prints one crate's graph and circles; returns the size of its biggest circle."""
    global SRC
    SRC = ROOT / "crates" / crate / "src"
    uses = file_uses(args.within, args.no_tests) if args.within else module_uses(args.no_tests)
    graph = {n: sorted(deps) for n, deps in uses.items()}

    print(f"== uses ({len(graph)} nodes, {sum(map(len, graph.values()))} edges)")
    for node in sorted(graph):
        print(f"{node:12} -> {', '.join(graph[node]) or '-'}")
    circles = sorted((c for c in sccs(graph) if len(c) > 1), key=len, reverse=True)
    print(f"\n== circles ({len(circles)})")
    for comp in circles:
        print(f"[{len(comp)}] {' '.join(comp)}")
    for comp in circles:
        print(f"\n== edges inside [{len(comp)}] {comp[0]}...")
        for node in comp:
            for dep in graph[node]:
                if dep in comp:
                    print(f"{node} -> {dep}: {' '.join(dict.fromkeys(uses[node][dep]))}")
    return max(map(len, circles), default=0)


if __name__ == "__main__":
    main()
