#!/usr/bin/env python3
"""What `scripts/walk.py` and `scripts/walk_record.py` share: where the workspace is, a
function's node (its file and its name, generics and closures stripped), the binary's
function table, and how a trace writes a node. Standard library only; imported, not run.
(scripts/walk.py's docstring says how the trace is made and how it is walked.)"""

import bisect
import os
import re
import subprocess
import time
from pathlib import Path

ROOT = Path(os.environ.get("WALK_ROOT") or Path(__file__).resolve().parent.parent)
WORKSPACE_FILE = re.compile(r"(?:^|/)(crates/seckill(?:-lock)?/src/.+\.rs)$")
WORKSPACE_NAME = re.compile(r"\bseckill(?:_lock)?::")
HANDLER_FILE = "crates/seckill/src/routes/deduct.rs"
ROUTE = re.compile(r'"/deduct_stock/\{variant\}"\s*,\s*(?:get|post)\((\w+)\)')
MAX_FRAMES = 256


# --- names -------------------------------------------------------------------------------

def strip_generics(name):
    """`a::B<T>::c<U>` -> `a::B::c`; a `<` that opens a path segment (`<X as T>`) stays."""
    out, depth, i = [], 0, 0
    while i < len(name):
        c = name[i]
        if c == "-" and name.startswith("->", i):
            if depth == 0:
                out.append("->")
            i += 2
            continue
        if c == "<":
            opens_segment = i == 0 or name[i - 1] in ":< " or name.startswith("<impl ", i)
            if depth > 0 or not opens_segment:
                depth += 1
                i += 1
                continue
        elif c == ">" and depth > 0:
            depth -= 1
            i += 1
            continue
        if depth == 0:
            out.append(c)
        i += 1
    return "".join(out)


def segments(name):
    """The `::`-separated segments of a path, `<...>` groups kept whole."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(name):
        if name.startswith("->", i):
            i += 2
            continue
        c = name[i]
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif depth == 0 and name.startswith("::", i):
            parts.append(name[start:i])
            start = i + 2
            i += 2
            continue
        i += 1
    parts.append(name[start:])
    return parts


def node_name(symbol):
    """A symbol's node name: generics and trailing `{{closure}}`-like parts stripped."""
    parts = segments(strip_generics(symbol))
    while len(parts) > 1 and parts[-1].startswith("{{"):
        parts.pop()
    return "::".join(parts)


def display_name(name):
    """`seckill::variants::section::<impl seckill::..::Deduction>::sold` -> `Deduction::sold`."""
    parts = segments(name)
    while len(parts) > 1 and re.fullmatch(r"[a-z_][a-z0-9_]*", parts[0]):
        parts.pop(0)
    short = "::".join(parts)
    short = re.sub(r"\b[a-z_][a-z0-9_]*::", "", short)  # module paths inside <...>
    short = re.sub(r"<impl ([^<>]+) for ([^<>]+)>", r"<\2 as \1>", short)
    short = re.sub(r"<impl ([^<>]+)>", r"\1", short)
    return short


# --- the function table ------------------------------------------------------------------

def workspace_file(path):
    m = WORKSPACE_FILE.search(path.replace("\\", "/"))
    return m.group(1) if m else None


class Table:
    """Workspace functions of a binary: where each starts and ends, and its node."""

    def __init__(self, binary):
        started = time.monotonic()
        self.binary = binary
        nm = subprocess.run(["nm", "-S", "-C", "--defined-only", binary],
                            capture_output=True, text=True, check=True).stdout
        symbols = {}
        for line in nm.splitlines():
            parts = line.split(" ", 3)
            if len(parts) != 4 or parts[2] not in ("t", "T", "w", "W"):
                continue
            start, size, symbol = int(parts[0], 16), int(parts[1], 16), parts[3]
            if size and WORKSPACE_NAME.search(strip_generics(symbol)):
                symbols.setdefault(start, (size, symbol))
        starts = sorted(symbols)
        places = self._addr2line(binary, starts)
        self.nodes, self.ranges, self.unplaced, self.outside = [], [], [], 0
        self.sources = {}
        index, lines, pieces = {}, {}, []
        for start in starts:
            size, symbol = symbols[start]
            dwarf, line = places.get(start, ("??", 0))
            rel = workspace_file(dwarf)
            if rel is None:
                if dwarf.startswith("??") or not line:
                    self.unplaced.append(symbol)
                else:
                    self.outside += 1  # a macro's code (tracing's), or another crate's
                continue
            name = node_name(symbol)
            key = (rel, name)
            if key not in index:
                index[key] = len(self.nodes)
                self.nodes.append({"file": rel, "name": name, "display": display_name(name),
                                   "async": False, "async_fn": False, "line": 0})
            node = self.nodes[index[key]]
            text = self._line(lines, dwarf, rel, line)
            self.sources.setdefault(rel, self._source(dwarf, rel))
            depth = len(segments(strip_generics(symbol))) - len(segments(name))
            if depth == 0:
                node["line"] = node["line"] or line
                node["async_fn"] = node["async_fn"] or bool(re.search(r"\basync\s+fn\b", text))
            says_async = bool(re.search(r"\basync\b", text))
            pieces.append((start, start + size, index[key], depth, says_async))
        # A piece is async: an `async fn` (its constructor), its body (the one `{{closure}}`
        # directly under it), or an async block or closure (`async` on its line).
        for start, end, n, depth, says_async in pieces:
            node = self.nodes[n]
            is_async = (node["async_fn"] and depth <= 1) or (depth > 0 and says_async)
            node["async"] = node["async"] or is_async
            self.ranges.append((start, end, n, is_async))
        self.ranges.sort()
        self.starts = [r[0] for r in self.ranges]
        built = os.stat(binary).st_mtime
        self.stale = sorted(rel for rel, path in self.sources.items()
                            if path.exists() and path.stat().st_mtime > built)
        self.seconds = time.monotonic() - started

    @staticmethod
    def _addr2line(binary, starts):
        query = "".join("0x%x\n" % s for s in starts)
        out = subprocess.run(["addr2line", "-e", binary, "-a"], input=query,
                             capture_output=True, text=True, check=True).stdout
        places, current = {}, None
        for line in out.splitlines():
            if line.startswith("0x"):
                current = int(line, 16)
                continue
            loc = re.sub(r" \(discriminator \d+\)$", "", line)
            path, _, num = loc.rpartition(":")
            places[current] = (path, int(num) if num.isdigit() else 0)
        return places

    @staticmethod
    def _source(dwarf, rel):
        """The file the binary was built from if its DWARF path is there, else this checkout's."""
        path = Path(dwarf)
        return path if path.is_absolute() and path.exists() else ROOT / rel

    @classmethod
    def _line(cls, cache, dwarf, rel, line):
        """A function's source line (with the lines after an attribute, up to its `fn`)."""
        if not line:
            return ""
        path = cls._source(dwarf, rel)
        if path not in cache:
            try:
                cache[path] = path.read_text(encoding="utf-8").splitlines()
            except OSError:
                cache[path] = []
        picked = []
        for t in cache[path][line - 1:line + 4]:
            picked.append(t)
            if not t.strip().startswith("#"):
                break
        return " ".join(picked)

    def piece_at(self, pc):
        """(node, async piece) of the function that holds pc, or None."""
        i = bisect.bisect_right(self.starts, pc) - 1
        if i >= 0 and pc < self.ranges[i][1]:
            return self.ranges[i][2:]
        return None


def code(node, is_async):
    return "%d%s" % (node, "a" if is_async else "")


def decode(text):
    return (int(text.rstrip("a")), text.endswith("a"))


def handler_name(table):
    """The name of routes/deduct.rs's function for `/deduct_stock/{variant}`, read from the
    source the binary was built from (its DWARF path), or this checkout's."""
    try:
        m = ROUTE.search(table.sources.get(HANDLER_FILE, ROOT / HANDLER_FILE)
                         .read_text(encoding="utf-8"))
    except OSError:
        m = None
    return m.group(1) if m else "deduct_named"
