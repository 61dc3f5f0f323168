#!/usr/bin/env python3
"""Every command in the docs still runs as written: the docs' shell blocks, checked and run.

Reads every fenced shell block (```sh, bash, console, shell) of README.md, docs/src/*.md
and loadtest/README.md and checks each command line against the repository (always):
  - a repository script it names exists and is executable; a subcommand of a script that
    takes one (`scripts/cluster.sh start`) is one its `case "${1:-}"` handles; a variable
    set before a script is one the script (or a script it calls) reads;
  - flags given to `seckill serve` (also `cargo run ... -- serve` and SECKILL_SERVE_ARGS),
    to `seckill-bench` (also through scripts/demo.sh, perf.sh, partial-failure.sh) are
    flags the binaries' --help lists, `--suite` and `--variants` values ones it knows;
    `cargo -p P --test T` names a crate and a test target that exist;
  - a URL on the service (curl, oha) is a route: crates/seckill/openapi.json, with its
    methods and its JSON bodies' fields, or else a `.route("...")` in
    crates/seckill/src/routes; /deduct_stock/VARIANT names a variant, and its query only
    the knobs that variant takes (crates/seckill/src/variants); a `jq` after it reads
    fields the answer's schema has.
Comments, output (a console block's lines without `$ `) and lines with a <placeholder> are
skipped. A block opts out with an HTML comment on the line before it (blank lines allowed):
  <!-- docs-commands: skip (reason) -->     neither checked nor run
  <!-- docs-commands: no-run (reason) -->   checked, never run
and the reason is printed.

With --run, the blocks that start a cluster (`scripts/cluster.sh start`, scripts/demo.sh)
run in order, each under `bash -euo pipefail` from the repository root with a timeout,
followed by `scripts/cluster.sh stop` whatever happened. They run as written, with one
deviation: the release build they would make is not made. The environment has
SKIP_BUILD=1 and BIN=--bin (target/debug/seckill), and `target/release/seckill-bench` /
`target/release/seckill` / `target/release/seckill-check` in a block are the --bench /
--bin / --check binaries: scripts/test.sh has just built those (cargo test, cargo build
-p seckill-bench), and a second, release
build would take minutes on every run. cluster.sh's own settings (REDIS, INSTANCES, RUN_DIR, ...) are unset, so that a
block sees what a reader's shell has. A line that needs a tool that is not installed
(oha, jmeter, docker, mdbook, or any command not on the PATH) is left out and reported as
skipped, not failed. Refuses to start while a cluster runs in ./run.

Run from the repository root:
  scripts/docs-commands.py [--run [-v] [--only FILE[:LINE]]] [--bin target/debug/seckill]
                           [--bench target/debug/seckill-bench]
                           [--check target/debug/seckill-check] [--timeout 300]
Exits 1 on any problem or failed block. Standard library only; it never builds.
"""
import argparse
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import parse_qsl

ROOT = Path(__file__).resolve().parent.parent
DOCS = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs/src").glob("*.md")), "loadtest/README.md"]
FENCE = re.compile(r"^\s*```\s*(\S*)")
SHELLS = {"sh", "bash", "console", "shell"}
MARKER = re.compile(r"<!--\s*docs-commands:\s*(skip|no-run)\s*(?:\((.*)\))?\s*-->")
PLACEHOLDER = re.compile(r"<[^<>\s&][^<>]*>")
SERVICE_URL = re.compile(r"^(?:https?://)?(?:localhost|127\.0\.0\.1)(?::\d+)?(/[^?#]*)?(?:\?([^#]*))?$")
ASSIGN = re.compile(r"^([A-Za-z_]\w*)=(.*)$", re.S)
REDIRECT = {">", ">>", "<", ">&", "&>", "<<", "<<<", ">|"}
SEPARATORS = {"|", "||", "&&", ";", "&"}
BUILTINS = {"cd", "echo", "export", "set", "unset", "test", "[", "true", "false", ":", "printf",
            "read", "source", ".", "for", "do", "done", "if", "then", "else", "fi", "while",
            "kill", "wait", "exit", "trap", "type", "command", "ulimit"}
# Words before a command that are not one.
KEYWORDS = {"do", "then", "else", "!", "{", "time"}
# A command after which the next words are another command.
WRAPPERS = {"sudo", "env", "time", "nohup", "exec", "timeout"}


class Block:
    def __init__(self, file, line, lang, lines, marker):
        self.file, self.line, self.lang, self.lines, self.marker = file, line, lang, lines, marker
        self.starts_cluster = False

    def where(self):
        return f"{self.file}:{self.line}"


def blocks():
    """Every fenced shell block of the docs, with the marker on the line before it."""
    found = []
    for rel in DOCS:
        path = ROOT / rel
        if not path.exists():
            continue
        text = path.read_text().splitlines()
        i = 0
        while i < len(text):
            m = FENCE.match(text[i])
            if not m:
                i += 1
                continue
            start, lang, body = i, m.group(1).lower(), []
            i += 1
            while i < len(text) and not FENCE.match(text[i]):
                body.append((i + 1, text[i]))
                i += 1
            i += 1  # the closing fence
            if lang not in SHELLS:
                continue
            before = next((t for t in reversed(text[:start]) if t.strip()), "")
            mk = MARKER.search(before)
            marker = (mk.group(1), mk.group(2) or "no reason given") if mk else None
            found.append(Block(rel, start + 1, lang, body, marker))
    return found


def command_lines(block):
    """(line, text, kind) of each logical line: kind is None for a command, else why skipped."""
    out, pending, first = [], "", None
    for line, text in block.lines:
        if block.lang == "console":
            if pending:
                text = text.strip()
            elif text.lstrip().startswith("$ "):
                text = text.lstrip()[2:]
            else:
                if text.strip():
                    out.append((line, text, "output"))
                continue
        if first is None:
            first = line
        if text.rstrip().endswith("\\"):
            pending += text.rstrip()[:-1] + " "
            continue
        text, pending, at, first = pending + text, "", first, None
        stripped = text.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            out.append((at, text, "comment"))
        elif PLACEHOLDER.search(strip_comment(stripped)):
            out.append((at, text, "placeholder"))
        else:
            out.append((at, text, None))
    return out


def strip_comment(text):
    """The line without a trailing `# comment` (outside quotes)."""
    quote = None
    for i, c in enumerate(text):
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or text[i - 1].isspace()):
            return text[:i].rstrip()
    return text


def substitutions(text):
    """The line with each $(...) replaced by a word, and the texts inside them."""
    inner, out, i = [], [], 0
    while i < len(text):
        if text.startswith("$(", i):
            depth, j = 1, i + 2
            while j < len(text) and depth:
                depth += {"(": 1, ")": -1}.get(text[j], 0)
                j += 1
            inner.append(text[i + 2:j - 1])
            out.append(f"__SUBST{len(inner)}__")
            i = j
        else:
            out.append(text[i])
            i += 1
    return "".join(out), inner


def simple_commands(text):
    """[(words, piped)] for each simple command, those inside $(...) too; piped: after a |."""
    text, inner = substitutions(strip_comment(text))
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        tokens = list(lexer)
    except ValueError:
        return [([text], False)]
    found, words, piped, skip = [], [], False, False
    for k, tok in enumerate(tokens):
        if skip:
            skip = False
        elif tok in SEPARATORS:
            if words:
                found.append((words, piped))
            words, piped = [], tok == "|"
        elif tok in REDIRECT:
            if words and words[-1].isdigit():
                words.pop()
            skip = True
        else:
            words.append(tok)
    if words:
        found.append((words, piped))
    for sub in inner:
        found.extend(simple_commands(sub))
    return found


class Facts:
    """What the commands are checked against: the binaries' --help, the API, the sources."""

    def __init__(self, bin_path, bench_path, check_path):
        self.notes = []
        self.serve = self.help([bin_path, "serve", "--help"], "seckill serve")
        self.subcommands = set()
        if self.serve is not None:
            top = run_text([bin_path, "--help"])
            listed = top.split("Commands:")[-1].split("Options:")[0]
            self.subcommands = set(re.findall(r"^  (\w[\w-]*)  ", listed, re.M))
        self.bench = self.help([bench_path, "--help"], "seckill-bench")
        self.check = self.help([check_path, "--help"], "seckill-check")
        self.openapi = json.loads((ROOT / "crates/seckill/openapi.json").read_text())
        self.routes = self.router_routes()
        self.variants = self.variant_knobs()
        self.crates = {}
        for toml in ROOT.glob("crates/*/Cargo.toml"):
            m = re.search(r'^name\s*=\s*"([^"]+)"', toml.read_text(), re.M)
            if m:
                self.crates[m.group(1)] = toml.parent

    def help(self, argv, what):
        """{--flag: (takes a value, [possible values])} from a binary's --help, or None."""
        if not Path(argv[0]).exists():
            self.notes.append(f"{argv[0]} is not built: flags of {what} not checked")
            return None
        flags, last = {}, None
        for line in run_text(argv).splitlines():
            # Option lines are indented 2 or 6 spaces, their descriptions 10.
            m = re.match(r"^\s{2,6}(?:(-\w), )?(--[\w-]+)(?: <([\w-]+)>)?", line)
            if m:
                last = m.group(2)
                flags[last] = (m.group(3) is not None, [])
                if m.group(1):
                    flags[m.group(1)] = flags[last]
                continue
            v = re.match(r"^\s+- ([\w-]+):", line)
            if v and last:
                flags[last][1].append(v.group(1))
        return flags

    def router_routes(self):
        """Every route string of crates/seckill/src/routes, with the prefix it is nested under."""
        src = ROOT / "crates/seckill/src/routes"
        nested = re.findall(r'\.nest\("([^"]+)",\s*(\w+)::router', (src / "mod.rs").read_text())
        nests = {mod: prefix for prefix, mod in nested}
        routes = set()
        for f in src.glob("*.rs"):
            for r in re.findall(r'\.route\(\s*"([^"]+)"', f.read_text()):
                routes.add(nests.get(f.stem, "") + r)
        return routes

    def variant_knobs(self):
        """{variant: knob names, or None when its Spec could not be read} from the sources."""
        src = ROOT / "crates/seckill/src"
        consts, lists = {}, {}
        for f in src.rglob("*.rs"):
            text = f.read_text()
            for name, knob in re.findall(r'const (\w+): Knob = Knob \{\s*name: "(\w+)"', text):
                consts[name] = knob
            for name, body in re.findall(r"const (\w+): &\[Knob\] = &\[(.*?)\];", text, re.S):
                lists[(f.stem, name)] = body
        variants = {}
        # One file a variant, or a directory of its own (its mod.rs).
        files = sorted((src / "variants").glob("*.rs")) + sorted((src / "variants").glob("*/mod.rs"))
        for f in files:
            spec = re.search(r"static SPEC: Spec = Spec \{(.*?)\n\};", f.read_text(), re.S)
            named = spec and re.search(r'^\s*name: "(\w+)"', spec.group(1), re.M)
            if not named:
                continue
            name = named.group(1)
            m = re.search(r"^\s*knobs: (?:&\[(.*?)\]|([\w:]+)),", spec.group(1), re.M | re.S)
            body = None
            if m and m.group(1) is not None:
                body = m.group(1)
            elif m:
                *mod, ident = m.group(2).split("::")
                body = lists.get((mod[-1] if mod else f.stem, ident))
            knobs = None
            if body is not None:
                idents = [re.match(r"\s*([\w:]+)", e).group(1).split("::")[-1] for e in split_top(body) if e.strip()]
                if all(i in consts for i in idents):
                    knobs = {consts[i] for i in idents}
            if knobs is None:
                self.notes.append(f"the knobs of variant {name} could not be read from {f.relative_to(ROOT)}: its query not checked")
            variants[name] = knobs
        return variants

    def route(self, path):
        """(openapi path or router route, {methods} or None) for a path, or (None, None)."""
        for api, ops in self.openapi["paths"].items():
            if re.fullmatch(re.sub(r"\{[^}]+\}", "[^/]+", api), path):
                return api, {m.upper() for m in ops if m != "parameters"}
        for r in self.routes:
            if re.fullmatch(re.sub(r"\{[^}]+\}", "[^/]+", r), path):
                return r, None
        return None, None

    def schema(self, ref_or_schema):
        while "$ref" in ref_or_schema:
            *_, kind, name = ref_or_schema["$ref"].split("/")
            ref_or_schema = self.openapi["components"][kind][name]
        return ref_or_schema


def split_top(text):
    """Comma-separated items at bracket depth 0."""
    items, depth, cur = [], 0, ""
    for c in text:
        depth += {"(": 1, "[": 1, ")": -1, "]": -1}.get(c, 0)
        if c == "," and depth == 0:
            items.append(cur)
            cur = ""
        else:
            cur += c
    return items + [cur]


def run_text(argv):
    return subprocess.run(argv, capture_output=True, text=True, timeout=60).stdout


def case_patterns(script_text, subject):
    """The patterns of a script's top-level `case SUBJECT in`, or None."""
    m = re.search(r"^case " + re.escape(subject) + r" in\n(.*?)^esac", script_text, re.M | re.S)
    if not m:
        return None
    pats = set()
    for p in re.findall(r"^\s*([\w|* -]+)\)", m.group(1), re.M):
        pats.update(x.strip() for x in p.split("|"))
    return pats - {"*"}


class Checker:
    def __init__(self, facts):
        self.f = facts
        self.problems = []

    def bad(self, where, msg):
        self.problems.append(f"{where}: {msg}")

    def line(self, where, text):
        """Checks one command line; returns whether it starts a cluster."""
        starts, prev = False, None
        for words, piped in simple_commands(text):
            env = {}
            while words and words[0] in KEYWORDS:
                words = words[1:]
            while words and ASSIGN.match(words[0]):
                k, v = ASSIGN.match(words[0]).groups()
                env[k] = v
                words = words[1:]
            while words and words[0] in WRAPPERS:
                words = words[1:]
                while words and (words[0].startswith("-") or ASSIGN.match(words[0]) or words[0][:1].isdigit()):
                    words = words[1:]
            if not words:
                continue
            cmd, args = words[0].removeprefix("./"), words[1:]
            if cmd == "scripts/cluster.sh" and args[:1] == ["start"] or cmd == "scripts/demo.sh":
                starts = True
            if cmd == "jq" and piped and prev:
                self.jq(where, prev, args)
            prev = None
            if Path(cmd).name in ("seckill", "seckill-bench", "seckill-check") or cmd.startswith("target/"):
                self.binary(where, Path(cmd).name, args)
            elif "/" in cmd and not cmd.startswith(("/", "$", "~", "__SUBST")):
                self.script(where, cmd, args, env)
            elif cmd == "cargo":
                self.cargo(where, args, env)
            elif cmd in ("curl", "oha"):
                prev = self.urls(where, cmd, args)
        return starts

    def binary(self, where, name, args):
        if name == "seckill-bench":
            self.flags(where, args, self.f.bench, "seckill-bench")
        elif name == "seckill":
            if not args or args[0] in ("-h", "--help", "-V", "--version"):
                return
            if self.f.subcommands and args[0] not in self.f.subcommands:
                self.bad(where, f"seckill has no subcommand {args[0]!r} (it has: {', '.join(sorted(self.f.subcommands))})")
            elif args[0] == "serve":
                self.flags(where, args[1:], self.f.serve, "seckill serve")
        elif name == "seckill-check":
            self.flags(where, args, self.f.check, "seckill-check")
            for arg in args:
                if arg.endswith(".toml") and not set("*?[") & set(arg) and not (ROOT / arg).is_file():
                    self.bad(where, f"seckill-check: no target file {arg}")
        else:
            self.bad(where, f"target/…/{name}: not a binary of this workspace (seckill, seckill-bench, seckill-check)")

    def flags(self, where, args, known, what):
        """Each --flag is one `what` knows; --suite and --variants name values it knows."""
        if known is None:
            return
        for i, a in enumerate(args):
            if not a.startswith("-") or a == "-" or re.match(r"^-\d", a):
                continue
            name, _, value = a.partition("=")
            if name not in known:
                self.bad(where, f"{what} has no flag {name}")
                continue
            takes, values = known[name]
            if takes and not value and i + 1 < len(args):
                value = args[i + 1]
            if values and value and not value.startswith("__SUBST"):
                for v in value.split(",") if name == "--variants" else [value]:
                    if v not in values:
                        self.bad(where, f"{what} {name}: {v!r} is not one of {', '.join(values)}")

    def script(self, where, path, args, env):
        file = ROOT / path
        if not file.is_file():
            self.bad(where, f"{path} does not exist")
            return
        if not os.access(file, os.X_OK):
            self.bad(where, f"{path} is not executable")
        if file.suffix not in (".sh", ".py", ""):
            return
        text = file.read_text()
        subs = case_patterns(text, '"${1:-}"')
        if subs is not None:
            if not args:
                self.bad(where, f"{path} needs a subcommand: {'|'.join(sorted(subs))}")
            elif args[0] not in subs:
                self.bad(where, f"{path} has no subcommand {args[0]!r} (it has: {'|'.join(sorted(subs))})")
        if re.search(r"^#.*\[extra seckill-bench flags", text, re.M):
            self.flags(where, args, self.f.bench, f"seckill-bench (through {path})")
        if path == "loadtest/run.sh":
            tools = case_patterns(text, '"$tool"') or set()
            if args[:1] and args[0] not in tools:
                self.bad(where, f"loadtest/run.sh takes {'|'.join(sorted(tools))}, not {args[0]!r}")
            if len(args) > 1:
                self.variant(where, args[1], parse_qsl(env.get("KNOBS", ""), keep_blank_values=True))
        if path == "loadtest/jmeter.sh":
            self.jmeter(where, args)
        # A variable set before the script is one it, or a script it names, reads.
        called = set(re.findall(r"\b((?:scripts|loadtest)/[\w-]+\.sh)\b", text))
        readers = [text] + [(ROOT / p).read_text() for p in called if (ROOT / p).is_file()]
        for var in env:
            if not any(re.search(r"\b" + var + r"\b", t) for t in readers):
                self.bad(where, f"{path} does not read {var}")
        if "SECKILL_SERVE_ARGS" in env:
            serve_args = shlex.split(env["SECKILL_SERVE_ARGS"])
            self.flags(where, serve_args, self.f.serve, "seckill serve (SECKILL_SERVE_ARGS)")

    def jmeter(self, where, args):
        plan = next((args[i + 1] for i, a in enumerate(args[:-1]) if a == "-t"), None)
        props = set(re.findall(r"__P\((\w+)", (ROOT / plan).read_text())) if plan and (ROOT / plan).is_file() else None
        if plan and props is None:
            self.bad(where, f"{plan} does not exist")
        for a in args:
            m = re.match(r"^-J(\w+)=(.*)$", a)
            if m and props is not None and m.group(1) not in props:
                self.bad(where, f"{plan} reads no property {m.group(1)} (it reads: {', '.join(sorted(props))})")
            if m and m.group(1) == "variant":
                self.variant(where, m.group(2), [])

    def cargo(self, where, args, env):
        cut = args.index("--") if "--" in args else len(args)
        own, rest = args[:cut], args[cut + 1:]
        crate = next((own[i + 1] for i, a in enumerate(own[:-1]) if a in ("-p", "--package")), None)
        test = next((own[i + 1] for i, a in enumerate(own[:-1]) if a == "--test"), None)
        binary = next((own[i + 1] for i, a in enumerate(own[:-1]) if a == "--bin"), None)
        if own[:1] == ["install"]:
            return
        if crate and crate not in self.f.crates:
            self.bad(where, f"no crate {crate} (crates: {', '.join(sorted(self.f.crates))})")
            return
        if test:
            dirs = [self.f.crates[crate]] if crate else list(self.f.crates.values())
            found = [d for d in dirs if (d / f"tests/{test}.rs").exists() or (d / f"tests/{test}/main.rs").exists()]
            if not found:
                self.bad(where, f"no test target {test} in {crate or 'any crate'}")
            for var in env:
                files = [p for d in found for p in [d / f"tests/{test}.rs", *(d / "tests").glob(f"{test}/**/*.rs")]]
                if found and not any(p.is_file() and var in p.read_text() for p in files):
                    self.bad(where, f"test {test} does not read {var}")
        if own[:1] == ["run"]:
            if "seckill-bench" in (crate, binary):
                self.flags(where, rest, self.f.bench, "seckill-bench")
            elif rest[:1] == ["serve"]:
                self.flags(where, rest[1:], self.f.serve, "seckill serve")

    def urls(self, where, cmd, args):
        """Checks each service URL; returns (openapi path, method) of the last, for a jq after it."""
        method, body, last = None, None, None
        for i, a in enumerate(args):
            nxt = args[i + 1] if i + 1 < len(args) else ""
            if cmd == "curl" and a in ("-X", "--request") or cmd == "oha" and a in ("-m", "--method"):
                method = nxt.upper()
            elif cmd == "curl" and a.startswith("-X") and len(a) > 2:
                method = a[2:].upper()
            elif cmd == "curl" and a in ("-d", "--data", "--data-raw", "--data-binary", "--json"):
                body, method = nxt, method or "POST"
        for i, a in enumerate(args):
            regex = cmd == "oha" and i > 0 and args[i - 1] == "--rand-regex-url"
            url = a.replace("\\?", "?").replace("\\.", ".") if regex else a
            m = SERVICE_URL.match(url)
            if m and re.search(r"(localhost|127\.0\.0\.1)", a):
                last = self.url(where, m.group(1) or "/", m.group(2), method or "GET", body)
        return last

    def url(self, where, path, query, method, body):
        api, methods = self.f.route(path)
        if api is None:
            self.bad(where, f"{path}: no such route (crates/seckill/openapi.json, crates/seckill/src/routes)")
            return None
        if methods is not None and method not in methods:
            self.bad(where, f"{method} {path}: {api} takes {', '.join(sorted(methods))}")
            return None
        params = parse_qsl(query or "", keep_blank_values=True)
        if api == "/deduct_stock/{variant}":
            self.variant(where, path.rsplit("/", 1)[1], params)
        op = self.f.openapi["paths"].get(api, {}).get(method.lower(), {})
        schema = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
        if schema and body is not None:
            try:
                given = json.loads(body)
            except ValueError:
                self.bad(where, f"{path}: the body is not JSON: {body}")
                return None
            schema = self.f.schema(schema)
            props = schema.get("properties", {})
            for k in given:
                if schema.get("additionalProperties") is False and k not in props:
                    self.bad(where, f"{path}: the body's field {k!r} is not one it takes ({', '.join(props)})")
            for k in schema.get("required", []):
                if k not in given:
                    self.bad(where, f"{path}: the body lacks {k!r}")
        return (api, method)

    def variant(self, where, name, params):
        if name not in self.f.variants:
            self.bad(where, f"no variant {name!r} (variants: {', '.join(self.f.variants)})")
            return
        knobs = self.f.variants[name]
        names = [k for k, _ in params]
        for k in set(names):
            if names.count(k) > 1:
                self.bad(where, f"{name}: parameter {k} given twice")
            # Every variant takes these (crates/seckill/src/knobs/mod.rs, ALWAYS).
            if knobs is not None and k not in knobs | {"product", "user", "pass"}:
                self.bad(where, f"variant {name} takes no parameter {k} (it takes: product, user, pass, {', '.join(sorted(knobs))})")

    def jq(self, where, prev, args):
        """The top-level fields a jq filter reads are in the piped answer's schema."""
        api, method = prev
        answer = self.f.openapi["paths"].get(api, {}).get(method.lower(), {}).get("responses", {}).get("200")
        schema = self.f.schema(answer).get("content", {}).get("application/json", {}).get("schema") if answer else None
        props = self.f.schema(schema).get("properties") if schema else None
        flt = next((a for a in args if not a.startswith("-")), "")
        if not props or not flt:
            return
        names = re.findall(r"(?<![\w\]\)])\.(\w+)", flt)
        for obj in re.findall(r"\{([^{}]*)\}", flt):
            names += [w.strip() for w in obj.split(",") if re.fullmatch(r"\s*\w+\s*", w)]
        for n in dict.fromkeys(names):
            if n not in props:
                self.bad(where, f"jq reads .{n}, which {api}'s answer does not have")


def needs(text):
    """The tools a line needs that are not installed."""
    missing = []
    for words, _ in simple_commands(text):
        while words and (words[0] in KEYWORDS or ASSIGN.match(words[0])):
            words = words[1:]
        if not words:
            continue
        cmd = words[0]
        tools = [cmd] if "/" not in cmd and cmd not in BUILTINS and not cmd.startswith("__SUBST") else []
        if cmd.removeprefix("./") == "loadtest/run.sh" and len(words) > 1:
            tools.append(words[1])
        if cmd.removeprefix("./") == "loadtest/jmeter.sh":
            tools.append("jmeter")
        missing += [t for t in tools if shutil.which(t) is None]
    return list(dict.fromkeys(missing))


def cluster_settings():
    """The variables scripts/cluster.sh reads from the environment (its header's list)."""
    text = (ROOT / "scripts/cluster.sh").read_text()
    return set(re.findall(r"^#\s+([A-Z_]+)=", text, re.M)) | set(re.findall(r"^([A-Z_]+)=\$\{\1:-", text, re.M))


def run_block(block, args, env):
    """Runs one block as written (but for the binaries), then stops the cluster. (ok, seconds, output, skipped)."""
    lines, skipped = [], []
    for line, text, kind in command_lines(block):
        text = re.sub(r"\btarget/release/seckill-bench\b", shlex.quote(args.bench), text)
        text = re.sub(r"\btarget/release/seckill-check\b", shlex.quote(args.check), text)
        text = re.sub(r"\btarget/release/seckill\b(?!-)", shlex.quote(args.bin), text)
        missing = needs(text) if kind is None else []
        if missing:
            skipped.append(f"{block.file}:{line}: {', '.join(missing)} not installed: {text.strip()}")
            note = f"docs-commands: skipped, {', '.join(missing)} not installed: {text.strip()}"
            text = f"echo {shlex.quote(note)} >&2"
        lines.append(text)
    with tempfile.TemporaryFile(mode="w+") as log:
        start = time.monotonic()
        proc = subprocess.Popen(["bash", "-euo", "pipefail", "-c", "\n".join(lines)], cwd=ROOT, env=env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        ok = False
        try:
            ok = proc.wait(timeout=args.timeout) == 0
        except subprocess.TimeoutExpired:
            log.write(f"\ndocs-commands: timed out after {args.timeout} s\n")
        finally:
            # Timed out or interrupted: the block's own session goes, then the cluster.
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            log.flush()
            stop = subprocess.run(["scripts/cluster.sh", "stop"], cwd=ROOT, env=env, stdout=log,
                                  stderr=subprocess.STDOUT, timeout=120)
            ok = ok and stop.returncode == 0
        seconds = time.monotonic() - start
        log.seek(0)
        return ok, seconds, log.read(), skipped


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", action="store_true", help="also run the blocks that start a cluster")
    ap.add_argument("--bin", default="target/debug/seckill", help="the service's binary (BIN for cluster.sh)")
    ap.add_argument("--bench", default="target/debug/seckill-bench", help="the bench's binary")
    ap.add_argument("--check", default="target/debug/seckill-check", help="seckill-check's binary")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every block's output, not only a failed one's tail")
    ap.add_argument("--only", metavar="FILE[:LINE]", help="run only the blocks whose file:line starts with this")
    ap.add_argument("--timeout", type=int, default=300, metavar="S", help="each block's time limit, seconds")
    args = ap.parse_args()
    args.bin, args.bench = (str((ROOT / p).resolve()) if not os.path.isabs(p) else p for p in (args.bin, args.bench))

    facts = Facts(args.bin, args.bench, args.check)
    check = Checker(facts)
    found = blocks()
    checked, passed_over, opted_out = 0, {}, []
    for block in found:
        if block.marker and block.marker[0] == "skip":
            opted_out.append(f"{block.where()}: skip ({block.marker[1]})")
            continue
        for line, text, kind in command_lines(block):
            if kind:
                passed_over[kind] = passed_over.get(kind, 0) + 1
                continue
            checked += 1
            block.starts_cluster |= check.line(f"{block.file}:{line}", text)

    files = len({b.file for b in found})
    skipped_lines = ", ".join(f"{n} {k}" for k, n in sorted(passed_over.items())) or "none"
    print(f"== {len(found)} shell blocks in {files} files; {checked} command lines checked "
          f"(passed over: {skipped_lines})")
    for note in facts.notes:
        print(f"not checked: {note}")
    for s in opted_out:
        print(f"opted out: {s}")
    for b in found:
        if b.marker and b.marker[0] == "no-run":
            print(f"checked, never run: {b.where()} ({b.marker[1]})")
    idle = [b.where() for b in found if not b.starts_cluster and not b.marker]
    print(f"checked, not run (they start no cluster): {', '.join(idle)}")
    print(f"\n== problems ({len(check.problems)})")
    for p in check.problems:
        print(p)

    failed = bool(check.problems)
    if args.run:
        failed |= run_all(found, args)
    else:
        starting = [b for b in found if b.starts_cluster and not b.marker]
        print(f"\n== run: not asked (--run would run {len(starting)} blocks that start a cluster)")
    sys.exit(1 if failed else 0)


def run_all(found, args):
    """--run: the blocks that start a cluster, one at a time; returns whether any failed."""
    print("\n== run", flush=True)
    for path in (args.bin, args.bench):
        if not Path(path).exists():
            print(f"FAIL: {path} is not built; --run uses the built binaries and never builds")
            return True
    status = subprocess.run(["scripts/cluster.sh", "status"], cwd=ROOT, capture_output=True, text=True).stdout
    if "running (pid" in status:
        print(f"FAIL: a cluster already runs in ./run (scripts/cluster.sh status):\n{status}stop it first")
        return True
    env = {k: v for k, v in os.environ.items() if k not in cluster_settings()}
    env.update(BIN=args.bin, SKIP_BUILD="1")
    failed, total, skipped, ran = False, 0.0, [], 0
    for block in found:
        if not block.starts_cluster or block.marker or args.only and not block.where().startswith(args.only):
            continue
        ok, seconds, output, block_skips = run_block(block, args, env)
        ran, total = ran + 1, total + seconds
        skipped += block_skips
        print(f"{'ok  ' if ok else 'FAIL'} {block.where()}  {seconds:.1f} s", flush=True)
        if not ok or args.verbose:
            failed |= not ok
            shown = output.rstrip().splitlines()
            print("  " + "\n  ".join(shown if args.verbose else shown[-40:]))
    print(f"ran {ran} blocks in {total:.1f} s")
    for s in skipped:
        print(f"skipped: {s}")
    return failed


if __name__ == "__main__":
    main()
