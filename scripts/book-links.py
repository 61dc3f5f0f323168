#!/usr/bin/env python3
"""The book's links hold: every relative link and image in docs/src/*.md resolves inside
docs/src, and every page is in docs/src/SUMMARY.md.

mdbook serves docs/src and nothing else, so a link to `../../PERFORMANCE.md` or an image
at `../bench.svg` is broken in the rendered book even though it works on a forge. Checks,
for every `[text](target)` and `![alt](target)` outside code blocks and code spans:
  - a relative target exists, and resolves to a file under docs/src;
  - a `#fragment` names a heading of the page it points to (ids as mdbook makes them:
    lower case, letters, digits, `-` and `_` kept, spaces to `-`, the rest dropped);
and that every docs/src/*.md but SUMMARY.md is linked from SUMMARY.md.
Links with a scheme (https:, mailto:) are not followed.

Run from anywhere: scripts/book-links.py. Exits 1 on any problem. Standard library only.
"""
import re
import sys
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "docs" / "src"
FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"`+[^`]*`+")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HTML_SRC = re.compile(r"<(?:img|a)\b[^>]*?\b(?:src|href)=\"([^\"]+)\"")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def prose_lines(text):
    """(line number, line) outside fenced code blocks, with code spans blanked."""
    in_fence = False
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if not in_fence:
            yield n, CODE_SPAN.sub("", line)


def slug(heading):
    text = re.sub(r"<[^>]+>", "", heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link's text
    text = text.replace("`", "").strip().lower()
    out = []
    for ch in text:
        if ch.isalnum() or ch in "_-":
            out.append(ch)
        elif ch.isspace():
            out.append("-")
    return "".join(out)


def anchors(path):
    seen, ids = {}, set()
    for _, line in prose_lines(path.read_text(encoding="utf-8")):
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        ids.add(base if n == 0 else f"{base}-{n}")
    # Headings inside code spans were blanked above; read them again whole.
    for line in path.read_text(encoding="utf-8").splitlines():
        m = HEADING.match(line)
        if m:
            ids.add(slug(m.group(2)))
    return ids


def main():
    problems = []
    pages = sorted(SRC.glob("*.md"))
    cache = {}
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for n, line in prose_lines(text):
            targets = [m.group(1) for m in LINK.finditer(line)]
            targets += [m.group(1) for m in HTML_SRC.finditer(line)]
            for target in targets:
                if SCHEME.match(target):
                    continue
                where = f"{page.relative_to(ROOT)}:{n}"
                path, _, fragment = target.partition("#")
                dest = page if not path else (page.parent / unquote(path)).resolve()
                if path:
                    try:
                        dest.relative_to(SRC.resolve())
                    except ValueError:
                        problems.append(f"{where}: {target} points outside docs/src")
                        continue
                    if not dest.exists():
                        problems.append(f"{where}: {target} does not exist")
                        continue
                if fragment and dest.suffix == ".md":
                    if dest not in cache:
                        cache[dest] = anchors(dest)
                    if fragment not in cache[dest]:
                        problems.append(f"{where}: {target}: no heading #{fragment} in {dest.name}")
    summary = SRC / "SUMMARY.md"
    listed = set()
    for _, line in prose_lines(summary.read_text(encoding="utf-8")):
        for m in LINK.finditer(line):
            listed.add((SRC / m.group(1).partition("#")[0]).resolve())
    for page in pages:
        if page.name != "SUMMARY.md" and page.resolve() not in listed:
            problems.append(f"{page.relative_to(ROOT)}: not in docs/src/SUMMARY.md")
    for p in problems:
        print(p)
    print(f"book-links: {len(pages)} pages, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
