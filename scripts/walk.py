#!/usr/bin/env python3
"""One request's walk through the code, from a real trace: the files a reader opens, in order.

`docs/src/layout.md`'s "One deduction, file by file" says which files a reader opens to
follow one `POST /deduct_stock/{variant}` through the code. This script makes that list
from a trace of the running service, so that the page cannot drift from the code
(`scripts/walk.sh` starts the service, sends the request, records its trace inside gdb
with `scripts/walk_record.py`, then runs this file to print the walk; what both use is in
`scripts/walk_nodes.py`). Standard library only.

Recording (inside gdb: `gdb -p PID -ex 'source scripts/walk_record.py'`, WALK_TRACE set)
    The function table is `nm -S -C --defined-only` of the binary: every function whose
    start `addr2line` places under `crates/seckill/src/` or `crates/seckill-lock/src/`
    (an absolute or relative DWARF path, normalised to that suffix). Compiler glue whose
    name is no workspace path (`core::ptr::drop_in_place<...>`, vtable shims, generic
    library code instantiated with a workspace type) is left out. One internal breakpoint
    per start address; its `stop()` records the hit and answers False, so the threads go
    on. A hit's record: a sequence number, the time, the thread, the callee's node, and
    the nodes of the workspace frames above it on the stack, innermost first (frames of
    other code skipped).

Nodes
    A function's node is its file and its demangled name with generic arguments and
    trailing `::{{closure}}` parts stripped: an async fn's constructor, its body (the
    `{{closure}}` the runtime polls) and every monomorphised copy are one node, and a
    closure or async block belongs to the fn it is written in. A function's piece (one
    symbol) is async when it is an `async fn`'s constructor or body (the fn's line in the
    source says `async fn`) or an async block (its line says `async`): a sync fn that
    only holds an async block (a `Drop` that spawns a clean-up) is no step unless the
    block runs. Closures that DWARF places in a macro's file (tracing's events, tokio's
    `select!`) have no breakpoint; a call from one is the enclosing fn's.

The walk (`scripts/walk.py TRACE [--all-calls] [--check FILE]`)
    The call tree from the route handler, routes/deduct.rs's function for
    `/deduct_stock/{variant}`: a node's children in the order they were first called,
    each (caller, callee) edge once (a future polled again crosses edges already seen: no
    new call), a node's children expanded where it is first met, and a callee the walk
    already reached from inside the same caller (a closure that makes the future, then
    the caller polling it) not walked to again. Default: the async fns
    only, the caller of a hit being the nearest async frame above it (the sequence of
    awaits: where a request waits is its path; synchronous helpers are read by their
    name in place); `--all-calls`: every workspace function.
    Work on a task of its own has no workspace caller on its stack. A task whose
    outermost workspace frame was never seen before the request and first runs while the
    request is in flight (from the handler's first hit to its last) was started or woken
    by it: its calls join the tree, marked "on another task"; when its root is not in the
    tree yet, it hangs under the async fn the request was last seen in before the task
    first ran (where the request was waiting for it), in time order. Everything else is
    filtered out and counted: hits before the request (idle timers, subscriptions, the
    expiry sweep), tasks seen before it, and frames above the handler (middleware).

The counting rule (a depth-first walk of that tree)
    An *entry* is a call whose callee's file differs from its caller's file. *Files* are
    the distinct files met, the handler's included. A *return* is an entry into a file the
    walk had already entered and left: calling back into a file, not coming back to the
    caller when a callee finishes. The list has one line per entry (the handler's file
    first): the file and the fns of that file met from there without leaving it, then
    `(again)` on a return; the last line says `VARIANT: F files, R returns`.

`--check FILE`
    FILE holds, per variant and mode, the block this script prints, markers included:
    `<!-- walk token -->` (or `<!-- walk token all-calls -->`), the numbered entries, the
    summary line, `<!-- /walk -->`. Blank lines and how an entry is wrapped or indented
    do not count. Exits 1 with a unified diff when a block differs or is missing.
"""

import os
import argparse
import bisect
import difflib
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from walk_nodes import HANDLER_FILE, MAX_FRAMES, decode  # noqa: E402


# --- the walk ------------------------------------------------------------------------------

class Trace:
    """A recorded trace: its header (the nodes, the breakpoints) and its hits, each
    (seq, time, thread, (callee, async), ((node, async), ...) above it)."""

    def __init__(self, path):
        self.hits, self.end = [], {}
        with open(path, encoding="utf-8") as f:
            self.header = json.loads(f.readline())
            for line in f:
                if line.startswith("H "):
                    fields = line.split()
                    self.hits.append((int(fields[1]), float(fields[2]), int(fields[3]),
                                      decode(fields[4]), tuple(map(decode, fields[5:]))))
                elif line.startswith("E "):
                    self.end = json.loads(line[2:])
        self.nodes = self.header["nodes"]


class Walk:
    """The tree from the handler in one mode; its entries, files and returns."""

    def __init__(self, trace, all_calls=False, handler=None):
        self.trace, self.all_calls = trace, all_calls
        name = handler or trace.header.get("handler") or "deduct_named"
        found = [i for i, n in enumerate(trace.nodes)
                 if n["file"] == HANDLER_FILE and n["name"].endswith("::" + name)]
        if not found:
            raise SystemExit("walk.py: no %s in %s in the trace" % (name, HANDLER_FILE))
        self.handler = found[0]
        self.notes = []
        self._select()
        self._edges()

    def _mine(self, hit):
        """Whether a hit is the request's own: the handler, or under it on the stack."""
        return hit[3][0] == self.handler or any(n == self.handler for n, _ in hit[4])

    @staticmethod
    def _root(hit):
        """A hit's task, by its outermost workspace frame."""
        return hit[4][-1][0] if hit[4] else hit[3][0]

    def _select(self):
        """The request's hits, and the tasks it set going: a task (by its outermost
        workspace frame) never seen before the request, first seen while it was in flight."""
        hits, nodes = self.trace.hits, self.trace.nodes
        self.request = [hit for hit in hits if self._mine(hit)]
        if not self.request:
            raise SystemExit("walk.py: the handler was never called in the trace")
        self.first, self.last = self.request[0][0], self.request[-1][0]
        seen_before, first_seen = set(), {}
        for hit in hits:
            if self._mine(hit):
                continue
            if hit[0] < self.first:
                seen_before.add(self._root(hit))
            else:
                first_seen.setdefault(self._root(hit), hit[0])
        self.tasks = {root: seq for root, seq in first_seen.items()
                      if root >= 0 and root not in seen_before and seq <= self.last}
        before = [hit for hit in hits if hit[0] < self.first]
        others = [hit for hit in hits if hit[0] >= self.first and not self._mine(hit)
                  and self._root(hit) not in self.tasks]
        above = set()
        for hit in self.request:
            stack = [n for n, _ in hit[4]]
            cut = stack.index(self.handler) + 1 if self.handler in stack else 0
            above.update(nodes[n]["display"] for n in stack[cut:] if n >= 0)

        def roots(some):
            return ", ".join(sorted({nodes[self._root(h)]["display"] for h in some
                                     if self._root(h) >= 0})) or "none"

        self.notes.append("filtered out: %d hits before the request (tasks: %s); %d hits "
                          "during or after it on tasks seen before it or first run after "
                          "it (%s); frames above the handler: %s"
                          % (len(before), roots(before), len(others), roots(others),
                             ", ".join(sorted(above)) or "none"))
        self.notes.append("tasks set going by the request: %s" % (", ".join(
            "%s (hit %d)" % (nodes[r]["display"], s)
            for r, s in sorted(self.tasks.items(), key=lambda kv: kv[1])) or "none"))

    def _kept(self, node, is_async):
        return node == self.handler or self.all_calls or is_async

    def _edges(self):
        h, nodes = self.handler, self.trace.nodes
        edges = {}  # (caller, callee) -> [first seq, on another task]
        roots = {}  # callees with no caller: a task's outermost step, first seen at
        waiting = []  # (seq, the innermost async fn the request was in)
        for hit in self.trace.hits:
            seq, _, _, (callee, is_async), stack = hit
            mine = self._mine(hit)
            if mine:
                stack = stack[:[n for n, _ in stack].index(h) + 1] if callee != h else ()
            elif self._root(hit) not in self.tasks:
                continue
            here = next((n for n, a in ((callee, is_async),) + stack if a or n == h), None)
            if here is not None:
                waiting.append((seq, here))
            if callee == h or not self._kept(callee, is_async):
                continue
            caller = next((n for n, a in stack
                           if n != callee and n >= 0 and self._kept(n, a)), None)
            if caller is None:
                roots.setdefault(callee, seq)
                continue
            # On another task: called straight from the outermost frame of a task that is
            # not the request's (a block the request spawned; a task whose root is new to
            # the tree is marked where it is hung, below).
            other = not mine and caller == self._root(hit)
            edges.setdefault((caller, callee), [seq, other])
        self.edges = edges
        # A task's root not reached from the handler hangs under the async fn the request
        # was last seen in before the task first ran: where it waited for it.
        seqs = [s for s, _ in waiting]
        self.hung = []
        for root, seq in sorted(roots.items(), key=lambda kv: kv[1]):
            if root in self._reached():
                continue
            i = bisect.bisect_left(seqs, seq) - 1
            at = waiting[i][1] if i >= 0 else h
            for (caller, _), edge in self.edges.items():
                if caller == root:
                    edge[1] = False  # the root is marked, not its calls
            self.edges[(at, root)] = [seq, True]
            self.hung.append("%s under %s" % (nodes[root]["display"], nodes[at]["display"]))
        if self.hung:
            self.notes.append("another task's root hung where the request waited: "
                              + ", ".join(self.hung))

    def _reached(self):
        children = {}
        for a, b in self.edges:
            children.setdefault(a, []).append(b)
        seen, todo = {self.handler}, [self.handler]
        while todo:
            for b in children.get(todo.pop(), []):
                if b not in seen:
                    seen.add(b)
                    todo.append(b)
        return seen

    def entries(self):
        """[(file, [fns], again)]: one per entry into a file, in the order a reader meets
        them (depth first, children in the order first called), the handler's file first."""
        nodes = self.trace.nodes
        children = {}
        for (a, b), (seq, other) in self.edges.items():
            children.setdefault(a, []).append((seq, b, other))
        for kids in children.values():
            kids.sort()
        items, files, expanded = [], set(), {}

        def label(node, other):
            return "`%s`%s" % (nodes[node]["display"], " (on another task)" if other else "")

        def visit(node, item):
            if node in expanded:  # its calls are listed where it was first met
                return
            mark = expanded[node] = len(expanded)
            for _, child, other in children.get(node, []):
                if expanded.get(child, -1) > mark:
                    continue  # already reached from here, through a helper
                f = nodes[child]["file"]
                if f == nodes[node]["file"]:
                    if label(child, other) not in item[1]:
                        item[1].append(label(child, other))
                    visit(child, item)
                else:
                    entry = (f, [label(child, other)], f in files)
                    files.add(f)
                    items.append(entry)
                    visit(child, entry)

        top = (nodes[self.handler]["file"], [label(self.handler, False)], False)
        files.add(top[0])
        items.append(top)
        visit(self.handler, top)
        return items

    def block(self):
        """What the page holds: the markers, the numbered entries and the summary."""
        items = self.entries()
        variant = self.trace.header.get("variant") or "request"
        mode = " all-calls" if self.all_calls else ""
        out = ["<!-- walk %s%s -->" % (variant, mode)]
        for n, (f, names, again) in enumerate(items, 1):
            out.append("%d. `%s` — %s%s" % (n, f, ", ".join(names), " (again)" if again else ""))
        files = len({f for f, _, _ in items})
        returns = sum(1 for _, _, again in items if again)
        out += ["", "%s: %d files, %d returns" % (variant, files, returns), "<!-- /walk -->"]
        return out


def blocks_in(text):
    found, current, name = {}, None, None
    for line in text.splitlines():
        m = re.fullmatch(r"\s*<!-- walk (\S+(?: all-calls)?) -->\s*", line)
        if m:
            name, current = m.group(1), [line.strip()]
            continue
        if current is not None:
            current.append(line.rstrip())
            if line.strip() == "<!-- /walk -->":
                found[name] = current
                current = None
    return found


SUMMARY = re.compile(r"\S+: \d+ files, \d+ returns")


def normalised(lines):
    """A block's lines as entries: blank lines dropped, a wrapped entry joined again
    (a line that starts no entry, no marker and no summary continues the one above)."""
    out = []
    for line in lines:
        text = " ".join(line.split())
        if not text:
            continue
        if not out or re.match(r"\d+\. ", text) or text.startswith("<!--") or \
                SUMMARY.fullmatch(text):
            out.append(text)
        else:
            out[-1] += " " + text
    return out


def check(path, blocks):
    """Compares each block with FILE's; prints a unified diff per difference."""
    doc = blocks_in(Path(path).read_text(encoding="utf-8"))
    failed = False
    for block in blocks:
        key = block[0][len("<!-- walk "):-len(" -->")]
        if key not in doc:
            print("walk.py: %s has no block `<!-- walk %s -->` ... `<!-- /walk -->`"
                  % (path, key), file=sys.stderr)
        have, want = normalised(doc.get(key, [])), normalised(block)
        if have != want:
            failed = True
            sys.stdout.writelines(difflib.unified_diff(
                [l + "\n" for l in have], [l + "\n" for l in want],
                "%s (walk %s)" % (path, key), "the trace (walk %s)" % key))
    if failed:
        print("walk.py: %s differs from the walk the trace gives" % path, file=sys.stderr)
    return failed


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("traces", nargs="+", help="trace files recorded by walk.sh")
    parser.add_argument("--all-calls", action="store_true",
                        help="every workspace function, not only the async ones")
    parser.add_argument("--handler", help="the handler's fn name (default: read from the route)")
    parser.add_argument("--check", metavar="FILE", help="compare with FILE's walk blocks")
    parser.add_argument("--notes", action="store_true", help="say what was filtered, and the "
                        "trace's numbers (on stderr)")
    args = parser.parse_args(argv)
    blocks = []
    for path in args.traces:
        trace = Trace(path)
        walk = Walk(trace, args.all_calls, args.handler)
        block = walk.block()
        blocks.append(block)
        print("\n".join(block))
        if args.notes:
            h = trace.header
            print("# %s: %d breakpoints (%d not inserted) set in %.1f s; %d hits in all, %d "
                  "the request's; %d workspace fns addr2line could not place, %d placed in "
                  "other code (macros); %d calls (edges) in the tree"
                  % (h.get("variant"), h["breakpoints"], h.get("failed", 0), h["insert_s"],
                     len(trace.hits), len(walk.request), len(h.get("unplaced", [])),
                     h.get("outside", 0), len(walk.edges)), file=sys.stderr)
            for note in walk.notes:
                print("# " + note, file=sys.stderr)
            cut = sum(1 for hit in trace.hits if hit[4] and hit[4][-1][0] < 0)
            if cut:
                print("# %d hits with their stack cut (the unwinder gave up, or deeper than "
                      "%d frames): a caller may be missing" % (cut, MAX_FRAMES), file=sys.stderr)
            if trace.end.get("lost_count"):
                print("# %d hits lost to errors in the recorder: %s"
                      % (trace.end["lost_count"], "; ".join(trace.end["lost"][:3])),
                      file=sys.stderr)
            if h.get("stale"):
                print("# sources changed since the binary was built (an async fn is told by "
                      "its source line, which may have moved): " + ", ".join(h["stale"]),
                      file=sys.stderr)
    if args.check and check(args.check, blocks):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
