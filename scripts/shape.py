#!/usr/bin/env python3
"""Three rules of the code's shape, over every crate's src/ (crates/*/src/**/*.rs).

tests/, examples/ and benches/ are not read. Code under #[cfg(test)] (an inline
`#[cfg(test)] mod tests { .. }`, or the file of a `#[cfg(test)] mod x;`, `#[path]` followed)
is left out of rules 1 and 2. Comments and strings are blanked first (as in
scripts/imports.py), so that braces and words in them do not count.

  1. impls: a type's inherent impls in at most two files. An inherent impl is `impl Foo {`,
     `impl<T: X> Foo<T> {`, `impl<'a> Foo<'a> {`, with or without a where-clause; a trait
     impl (`impl Trait for Foo`) is not one. Types are told apart by (crate, name): two
     crates' `Foo`s are two types, and within a crate two modules' `Foo`s are counted as one
     type, so each violation lists where the name is defined and every impl's file and
     module, for a human to tell.
  2. fns: a function at most --limit lines (80). Its length is from its `fn` line to its
     closing brace, doc comments and attributes left out.
  3. outcomes: an outcome's name spelled once. The names crates/seckill/src/outcome/mod.rs
     spells (its `Outcome::NAMES`, its `&str` name constants such as `Outcome::DEDUCTED`
     and `WAITING`, and the refusals `TurnedAway::name` and `Counter::field` answer) must
     not be a whole string literal (`"sold_out"`) in any other .rs file of
     crates/seckill/src, except under crates/seckill/src/scripts/ (which decodes Lua's
     refusal names). A name inside a longer string (a sentence, a format string) is fine.
     A literal in test code counts, marked [test]. The same literals in the crate's
     non-Rust files (the page's .js, .html) are listed apart, for information only: they
     never fail the check (--no-info leaves them out).

Prints per rule its violations, `file:line  what`, and a summary line.
Run from anywhere:
  scripts/shape.py [--rule impls|fns|outcomes] [--limit 80] [--crate NAME] [--no-info] [--fail]
--rule runs one rule (default: all three); --crate reads one crate for rules 1 and 2
(rule 3 reads crates/seckill/src only); --fail exits 1 when any rule is violated (for
scripts/test.sh). Standard library only; it reads the sources and never builds them.
"""
import argparse
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Comments (line and nested block are both cut short enough), strings and char literals.
TOKENS = re.compile(r'//[^\n]*|/\*.*?\*/|r(#*)".*?"\1|"(?:\\.|[^"\\])*"|\'(?:\\.|[^\\\'\n])\'', re.S)
# A function's `fn` line: leading blanks on that line only (a `\s*` would run back over the
# blanked doc comments and the empty line above).
FN = re.compile(r"^[ \t]*(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?"
                r"(?:extern\s+)?fn\s+(\w+)", re.M)
IMPL = re.compile(r"^[ \t]*(?:unsafe\s+)?impl\b", re.M)
DEFINES = re.compile(r"^[ \t]*(?:pub(?:\([^)]*\))?\s+)?(?:struct|enum|union|trait|type)\s+(\w+)", re.M)
ATTR = re.compile(r"\s*#!?\[")
OUTCOME = ROOT / "crates/seckill/src/outcome/mod.rs"
OUTCOME_EXEMPT = ROOT / "crates/seckill/src/scripts"


def blank(text):
    """The code alone: comments and literals blanked, every offset and line kept."""
    return TOKENS.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def line_of(code, at):
    return code.count("\n", 0, at) + 1


def close_of(code, open_at):
    """The offset of the brace that closes the one at open_at (len(code) if none)."""
    depth = 0
    for i in range(open_at, len(code)):
        if code[i] == "{":
            depth += 1
        elif code[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    return len(code)


def skip_attrs(code, at):
    """The offset of the item after the attributes starting at `at`."""
    while True:
        m = ATTR.match(code, at)
        if not m:
            return at + len(code[at:]) - len(code[at:].lstrip())
        depth, i = 0, m.end() - 1
        while i < len(code):
            depth += {"[": 1, "]": -1}.get(code[i], 0)
            if depth == 0:
                break
            i += 1
        at = i + 1


class Source:
    """One .rs file: its text, its blanked code, and the spans of its #[cfg(test)] items."""

    def __init__(self, path):
        self.path = path
        self.rel = path.relative_to(ROOT)
        self.text = path.read_text(encoding="utf-8")
        self.code = blank(self.text)
        self.crate = self.rel.parts[1]
        self.test_spans = []  # (start, end) offsets of inline #[cfg(test)] items
        self.test_children = []  # the files of its `#[cfg(test)] mod x;`
        self.children = []  # the files of all its `mod x;`
        for m in re.finditer(r"^[ \t]*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", self.code, re.M):
            self.children.append(self.child(m.group(1), self.path_attr(m.start())))
        for m in re.finditer(r"#\[cfg\(test\)\]", self.code):
            item = skip_attrs(self.code, m.end())
            decl = re.match(r"(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", self.code[item:])
            if decl:
                self.test_children.append(self.child(decl.group(1), self.path_attr(item)))
                continue
            open_at, semi = self.code.find("{", item), self.code.find(";", item)
            end = semi if open_at < 0 or (0 <= semi < open_at) else close_of(self.code, open_at)
            self.test_spans.append((m.start(), end))

    def path_attr(self, item):
        """The `#[path = ".."]` among the attributes just above offset `item`, if any."""
        start = self.code.rfind("\n", 0, item)
        head = self.text[:start]
        attrs = []
        for line in reversed(head.split("\n")):
            if not line.strip().startswith("#["):
                break
            attrs.append(line)
        for line in attrs:
            m = re.search(r'#\[path\s*=\s*"([^"]+)"\]', line)
            if m:
                return m.group(1)
        return None

    def child(self, name, path_attr):
        """The file of `mod name;` declared here."""
        if path_attr:
            return (self.path.parent / path_attr).resolve()
        base = self.path.parent
        if self.path.name not in ("mod.rs", "lib.rs", "main.rs"):
            base = base / self.path.stem
        flat = base / f"{name}.rs"
        return (flat if flat.exists() else base / name / "mod.rs").resolve()

    def in_test(self, at):
        return any(start <= at <= end for start, end in self.test_spans)

    def module(self):
        """The module path its place under src/ gives it (`variants::lua`, `crate` for lib.rs)."""
        parts = list(self.rel.parts[3:])
        if parts[-1] in ("mod.rs", "lib.rs", "main.rs"):
            parts.pop()
            if not parts:
                return "crate" if self.rel.parts[-1] == "lib.rs" else "main"
        else:
            parts[-1] = parts[-1].removesuffix(".rs")
        return "::".join(parts)


def sources(crate=None):
    """Every crate's src/ files (or one crate's), and the set of whole test-only files."""
    files = {}
    for path in sorted(ROOT.glob("crates/*/src/**/*.rs")):
        if crate and path.relative_to(ROOT).parts[1] != crate:
            continue
        files[path.resolve()] = Source(path)
    test_files = {c for s in files.values() for c in s.test_children}
    grown = True
    while grown:  # a test-only file's own modules are test-only too
        more = {c for p in test_files if p in files for c in files[p].children}
        grown = not more <= test_files
        test_files |= more
    return files, test_files


# ---- rule 1: inherent impls in at most two files ----

def split_generics(code, at):
    """The offset just past a `<..>` starting at `at` (`->` inside it is not a close)."""
    depth, i = 0, at
    while i < len(code):
        c = code[i]
        if c == "<":
            depth += 1
        elif c == ">" and code[i - 1] != "-":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return i


def top_level(text):
    """`text` with everything inside <..>, (..) and [..] dropped."""
    out, depth = [], 0
    for i, c in enumerate(text):
        if c in "<([":
            depth += 1
        elif c in ")]" or (c == ">" and text[i - 1:i] != "-"):
            depth -= 1
        elif depth == 0:
            out.append(c)
    return "".join(out)


def inherent_impls(src):
    """[(line, self type's name, header)] for each inherent impl outside test code."""
    code = src.code
    found = []
    for m in IMPL.finditer(code):
        if src.in_test(m.start()):
            continue
        at = m.end()
        while at < len(code) and code[at] in " \t\n":
            at += 1
        if code.startswith("<", at):
            at = split_generics(code, at)
        brace, semi = code.find("{", at), code.find(";", at)
        if brace < 0 or (0 <= semi < brace):
            continue
        header = code[at:brace]
        header = re.split(r"\bwhere\b", top_level(header))[0]
        if re.search(r"\bfor\b", header):
            continue  # impl Trait for Type
        name = header.replace("dyn ", "").strip().split("::")[-1].strip()
        if not re.fullmatch(r"\w+", name):
            continue  # `impl $t` in a macro, or a shape this does not read
        found.append((line_of(code, m.start()), name, " ".join(code[m.start():brace].split())))
    return found


def rule_impls(files, test_files):
    impls = defaultdict(lambda: defaultdict(list))  # (crate, name) -> file -> [(line, header)]
    defined = defaultdict(list)  # (crate, name) -> [file:line]
    for path, src in files.items():
        if path in test_files:
            continue
        for line, name, header in inherent_impls(src):
            impls[(src.crate, name)][src].append((line, header))
        for m in DEFINES.finditer(src.code):
            if not src.in_test(m.start()):
                defined[(src.crate, m.group(1))].append(f"{src.rel}:{line_of(src.code, m.start())}")
    bad = sorted(((k, v) for k, v in impls.items() if len(v) > 2), key=lambda kv: (-len(kv[1]), kv[0]))
    print("== impls: a type's inherent impls in at most 2 files")
    for (crate, name), by_file in bad:
        where = ", ".join(defined[(crate, name)]) or "not defined in src/"
        many = "  (the name is defined more than once: maybe several types)" if len(defined[(crate, name)]) > 1 else ""
        print(f"{crate}::{name}: inherent impls in {len(by_file)} files; defined at {where}{many}")
        for src, blocks in sorted(by_file.items(), key=lambda kv: str(kv[0].rel)):
            for line, header in blocks:
                print(f"  {src.rel}:{line}  {header} {{  [{src.module()}]")
    types = len(impls)
    print(f"{len(bad)} type(s) of {types} with inherent impls have them in more than 2 files")
    return len(bad)


# ---- rule 2: functions at most --limit lines ----

def functions(src):
    """(name, line, length) of each function with a body, outside test code."""
    code = src.code
    for m in FN.finditer(code):
        if src.in_test(m.start()):
            continue
        open_at, semi = code.find("{", m.end()), code.find(";", m.end())
        if open_at < 0 or (0 <= semi < open_at):
            continue  # a declaration without a body (a trait method)
        start, end = line_of(code, m.start()), line_of(code, close_of(code, open_at))
        yield m.group(1), start, end - start + 1


def rule_fns(files, test_files, limit):
    long = []
    for path, src in files.items():
        if path in test_files:
            continue
        for name, line, length in functions(src):
            if length > limit:
                long.append((src.crate, -length, f"{src.rel}:{line}", name))
    print(f"\n== fns: a function at most {limit} lines")
    for crate, length, where, name in sorted(long):
        print(f"{where}  {name}: {-length} lines")
    per = defaultdict(int)
    for crate, *_ in long:
        per[crate] += 1
    split = ", ".join(f"{n} in {c}" for c, n in sorted(per.items()))
    print(f"{len(long)} function(s) over {limit} lines" + (f" ({split})" if split else ""))
    return len(long)


# ---- rule 3: outcome names spelled once ----

def literals(text):
    """(offset, content) of each Rust string literal in `text`."""
    for m in TOKENS.finditer(text):
        tok = m.group(0)
        if tok.startswith('"'):
            yield m.start(), tok[1:-1]
        elif tok.startswith("r"):
            hashes = len(m.group(1))
            yield m.start(), tok[2 + hashes:len(tok) - 1 - hashes]


def outcome_names():
    """name -> where outcome.rs spells it (`Outcome::NAMES`, `Outcome::DEDUCTED`, ...)."""
    src = Source(OUTCOME)
    code, text = src.code, src.text
    names = {}

    def take(start, end, label):
        for at, content in literals(text[start:end]):
            if not src.in_test(start + at) and re.fullmatch(r"[a-z_]+", content):
                names.setdefault(content, label)

    # The NAMES array, and every `const X: &str = ".."` (one name each).
    for m in re.finditer(r"\bconst\s+(\w+)\s*:\s*(&(?:'static\s+)?str|\[\s*&(?:'static\s+)?str\s*;[^\]]*\])\s*=", code):
        end = code.find(";", m.end())
        owner = enclosing_impl(code, m.start())
        take(m.end(), end, f"{owner}::{m.group(1)}" if owner else m.group(1))
    # The refusals named by a function of the file (`TurnedAway::name`, `Counter::field`).
    for m in re.finditer(r"\bfn\s+(name|field)\s*\(", code):
        open_at = code.find("{", m.end())
        owner = enclosing_impl(code, m.start())
        take(open_at, close_of(code, open_at), f"{owner}::{m.group(1)}()")
    return names


def enclosing_impl(code, at):
    """The type of the `impl X {` whose block holds offset `at`, if any."""
    for m in IMPL.finditer(code, 0, at):
        brace = code.find("{", m.end())
        if brace < at <= close_of(code, brace):
            header = re.split(r"\bfor\b", top_level(code[m.end():brace]))[-1]
            return header.strip().split("::")[-1]
    return None


def js_literals(text):
    """(offset, content) of each string literal of a .js/.html/.css file (comments skipped)."""
    tokens = re.compile(r'//[^\n]*|/\*.*?\*/|<!--.*?-->|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|`(?:\\.|[^`\\])*`', re.S)
    for m in tokens.finditer(text):
        tok = m.group(0)
        if tok[0] in "\"'`":
            yield m.start(), tok[1:-1]


def rule_outcomes(info):
    names = outcome_names()
    seckill = ROOT / "crates/seckill/src"
    found, other = [], []
    for path in sorted(seckill.rglob("*")):
        if not path.is_file() or path == OUTCOME or OUTCOME_EXEMPT in path.parents:
            continue
        if path.suffix == ".rs":
            src = Source(path)
            for at, content in literals(src.text):
                if content in names:
                    mark = "  [test]" if src.in_test(at) else ""
                    found.append(f"{src.rel}:{line_of(src.text, at)}  \"{content}\" ({names[content]}){mark}")
        elif info and path.suffix in (".js", ".html", ".css"):
            text = path.read_text(encoding="utf-8")
            for at, content in js_literals(text):
                if content in names:
                    other.append(f"{path.relative_to(ROOT)}:{line_of(text, at)}  \"{content}\" ({names[content]})")
    print("\n== outcomes: an outcome's name spelled once (in crates/seckill/src/outcome/mod.rs)")
    print(f"names: {', '.join(sorted(names))}")
    for line in found:
        print(line)
    print(f"{len(found)} literal(s) of an outcome's name outside outcome.rs and scripts/")
    if info:
        print("\n-- for information (not a failure): the same names in the crate's non-Rust files")
        for line in other:
            print(line)
        print(f"{len(other)} literal(s) in .js/.html/.css under crates/seckill/src")
    return len(found)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rule", choices=["impls", "fns", "outcomes"], help="run one rule (default: all)")
    ap.add_argument("--limit", type=int, default=80, help="a function's most lines (default: 80)")
    ap.add_argument("--crate", metavar="NAME", help="read one crate under crates/ for rules 1 and 2")
    ap.add_argument("--no-info", action="store_true", help="leave out rule 3's non-Rust list")
    ap.add_argument("--fail", action="store_true", help="exit 1 when any rule is violated")
    args = ap.parse_args()
    if args.crate and not (ROOT / "crates" / args.crate / "src").is_dir():
        ap.error(f"no crates/{args.crate}/src")
    files, test_files = sources(args.crate)
    failed = []
    if args.rule in (None, "impls") and rule_impls(files, test_files):
        failed.append("impls")
    if args.rule in (None, "fns") and rule_fns(files, test_files, args.limit):
        failed.append("fns")
    if args.rule in (None, "outcomes") and rule_outcomes(not args.no_info):
        failed.append("outcomes")
    if args.rule is None:
        print(f"\nshape: {', '.join(failed) + ' violated' if failed else 'all three rules hold'}")
    if args.fail and failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
