#!/usr/bin/env python3
"""Functions longer than a limit, in a crate's src/ (default: crates/seckill/src, 80 lines).

A function's length is from its `fn` line to its closing brace, doc comments and
attributes left out; comments and strings are blanked first so that braces in them do not
count. Prints `lines  file:line  name`, longest first; exits 1 with --fail when any is over.

  scripts/long-fns.py [--limit 80] [--crate seckill] [--fail]
Standard library only; it reads the sources and never builds them.
"""
import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOKENS = re.compile(r'//[^\n]*|/\*.*?\*/|r(#*)".*?"\1|"(?:\\.|[^"\\])*"|\'(?:\\.|[^\\\'\n])\'', re.S)
FN = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?fn\s+(\w+)", re.M)


def blank(text):
    return TOKENS.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def functions(path):
    code = blank(path.read_text(encoding="utf-8"))
    for m in FN.finditer(code):
        open_at = code.find("{", m.end())
        semi = code.find(";", m.end())
        if open_at < 0 or (0 <= semi < open_at):
            continue  # a declaration without a body (a trait method)
        depth, i = 0, open_at
        while i < len(code):
            if code[i] == "{":
                depth += 1
            elif code[i] == "}":
                depth -= 1
                if depth == 0:
                    break
            i += 1
        start = code.count("\n", 0, m.start()) + 1
        end = code.count("\n", 0, i) + 1
        yield m.group(1), start, end - start + 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=80)
    ap.add_argument("--crate", default="seckill")
    ap.add_argument("--fail", action="store_true")
    args = ap.parse_args()
    src = ROOT / "crates" / args.crate / "src"
    long = []
    for path in sorted(src.rglob("*.rs")):
        for name, line, length in functions(path):
            if length > args.limit:
                long.append((length, f"{path.relative_to(ROOT)}:{line}", name))
    for length, where, name in sorted(long, reverse=True):
        print(f"{length:5}  {where}  {name}")
    print(f"{len(long)} function(s) over {args.limit} lines in crates/{args.crate}/src")
    if args.fail and long:
        sys.exit(1)


if __name__ == "__main__":
    main()
