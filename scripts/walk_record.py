#!/usr/bin/env python3
"""Records one request's trace inside gdb: `gdb -p PID -ex 'source scripts/walk_record.py'`
with WALK_TRACE (the trace to write), WALK_READY, WALK_VARIANT, WALK_BINARY and WALK_ROOT
set, as `scripts/walk.sh` runs it. `scripts/walk.py`'s docstring says what is recorded;
`scripts/walk.py TRACE` walks it. Standard library (and gdb's module) only."""

import json
import os
import time
from pathlib import Path
import sys

import gdb  # present only inside gdb

# gdb gives this file no path of its own: the shared part sits beside it.
sys.path.insert(0, os.path.join(os.environ.get("WALK_ROOT") or ".", "scripts"))
from walk_nodes import MAX_FRAMES, Table, code, handler_name  # noqa: E402


# --- recording, inside gdb -----------------------------------------------------------------

def load_base(pid, binary):
    """Where a position-independent binary was loaded (0 for a fixed-address one)."""
    with open(binary, "rb") as f:
        header = f.read(18)
    if header[16] != 3:  # ET_DYN
        return 0
    real = os.path.realpath(binary)
    with open("/proc/%d/maps" % pid, encoding="utf-8") as maps:
        for line in maps:
            fields = line.split()
            if len(fields) >= 6 and fields[2] == "00000000" and \
                    os.path.realpath(fields[5]) == real:
                return int(fields[0].split("-")[0], 16)
    raise RuntimeError("%s is not mapped in process %d" % (binary, pid))


def record_in_gdb():
    binary = os.environ.get("WALK_BINARY") or gdb.current_progspace().filename
    trace_path = os.environ["WALK_TRACE"]
    for command in ("set pagination off", "set confirm off", "set height 0",
                    "set print thread-events off", "set print inferior-events off",
                    "set breakpoint always-inserted on", "handle all nostop noprint pass",
                    "handle SIGINT stop print nopass"):
        gdb.execute(command, to_string=True)
    table = Table(binary)
    pid = gdb.selected_inferior().pid
    base = load_base(pid, binary)
    lines, seq, errors = [], [0], []

    def record(piece):
        """One hit: the callee and the workspace frames above it, innermost first, each
        `NODE` or `NODEa` (an async piece); a frame of the same node as the one below it
        is folded into it."""
        stack, flags = [], []
        frame, depth = gdb.newest_frame().older(), 0
        try:
            while frame is not None and depth < MAX_FRAMES:
                found = table.piece_at(frame.pc() - 1 - base)  # pc - 1: the call, not after
                if found is not None:
                    if stack and stack[-1] == found[0]:
                        flags[-1] = flags[-1] or found[1]
                    else:
                        stack.append(found[0])
                        flags.append(found[1])
                frame, depth = frame.older(), depth + 1
            if frame is not None:
                raise gdb.error("deeper than %d frames" % MAX_FRAMES)
        except gdb.error:
            stack.append(-1)  # the unwinder gave up, or too deep: the stack is cut here
            flags.append(False)
        seq[0] += 1
        lines.append("H %d %.6f %d %s %s\n" % (
            seq[0], time.monotonic(), gdb.selected_thread().ptid[1], code(*piece),
            " ".join(code(n, a) for n, a in zip(stack, flags))))

    class Hit(gdb.Breakpoint):
        def __init__(self, address, piece):
            super().__init__("*0x%x" % address, internal=True)
            self.silent = True
            self.piece = piece

        def stop(self):
            try:
                record(self.piece)
            except Exception as err:  # a hit lost, never a stop: counted, and said
                errors.append(repr(err))
            return False

    started = time.monotonic()
    breakpoints, failed = [], 0
    for start, _, node, is_async in table.ranges:
        try:
            breakpoints.append(Hit(base + start, (node, is_async)))
        except gdb.error:
            failed += 1
    inserted = time.monotonic() - started
    header = {"binary": binary, "variant": os.environ.get("WALK_VARIANT", ""),
              "nodes": table.nodes, "breakpoints": len(breakpoints), "failed": failed,
              "insert_s": round(inserted, 2), "table_s": round(table.seconds, 2),
              "unplaced": table.unplaced, "outside": table.outside,
              "stale": table.stale, "handler": handler_name(table)}
    with open(trace_path, "w", encoding="utf-8") as trace:
        trace.write(json.dumps(header) + "\n")
    print("walk.py: %d breakpoints in %.1f s (function table %.1f s); tracing"
          % (len(breakpoints), inserted, table.seconds), flush=True)
    ready = os.environ.get("WALK_READY")
    if ready:
        Path(ready).write_text("%.6f\n" % time.monotonic(), encoding="utf-8")
    stops = []
    gdb.events.stop.connect(stops.append)
    for _ in range(100):  # until walk.sh sends the service SIGINT (which is not passed on)
        try:
            gdb.execute("continue")
        except (gdb.error, KeyboardInterrupt) as err:
            print("walk.py: continue ended: %s" % err, flush=True)
        if not gdb.selected_inferior().pid:
            break  # the service exited
        if stops and isinstance(stops[-1], gdb.SignalEvent) and \
                stops[-1].stop_signal == "SIGINT":
            break
    with open(trace_path, "a", encoding="utf-8") as trace:
        trace.writelines(lines)
        trace.write("E " + json.dumps({"hits": seq[0], "stopped": time.monotonic(),
                                       "lost": errors[:20], "lost_count": len(errors)}) + "\n")
    print("walk.py: %d hits recorded, %d lost" % (seq[0], len(errors)), flush=True)
    if not gdb.selected_inferior().pid:
        return
    for b in breakpoints:
        b.delete()
    gdb.execute("detach")


if os.environ.get("WALK_TRACE"):
    record_in_gdb()
