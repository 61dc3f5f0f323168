#!/usr/bin/env python3
"""Checks a history seckill-check wrote (--history DIR) by the rule of Jepsen's counter
checker, independently of seckill-check's own verdict.

Every buy is an `add` to the units that left the stock; the final `read` is what did
(initial - left). Walking the operations in order: an `invoke` of an add raises the upper
bound by its value, a `fail` lowers it again, an `ok` raises the lower bound by its value
(0 for a resend answered with a sale already counted), an `info` stays in the upper bound
only (it may have sold). A read is valid when lower-at-its-invoke <= value <= upper-at-its-
completion. A read below the lower bound is lost updates (sales acknowledged that never left
the stock); above the upper bound, units taken that no request could have sold.

  python3 scripts/check-history.py run/history/*.jsonl

Prints one line per file, as elle-cli does (`<file>\\t<valid?>`), then the reads that
failed; exits 1 when any history is invalid, 2 when a file is not a history.
The same files are read by elle-cli (`java -jar elle-cli.jar --model counter FILE`), whose
counter model applies this rule.
"""

import json
import sys


def check(path):
    lower = upper = 0
    reads = {}  # process -> lower bound at the read's invoke
    errors = []
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            op = json.loads(line)
            kind, f, value = op["type"], op["f"], op.get("value")
            if f == "add":
                if kind == "invoke":
                    upper += value
                elif kind == "ok":
                    lower += value
                elif kind == "fail":
                    upper -= value
                elif kind != "info":
                    raise ValueError(f"line {number}: unknown type {kind!r}")
            elif f == "read":
                if kind == "invoke":
                    reads[op["process"]] = lower
                elif kind == "ok":
                    least = reads.pop(op["process"], lower)
                    if not least <= value <= upper:
                        errors.append({"line": number, "value": value, "expected": [least, upper]})
            else:
                raise ValueError(f"line {number}: unknown f {f!r}")
    return errors


def main(paths):
    if not paths:
        print(__doc__, file=sys.stderr)
        return 2
    invalid = False
    for path in paths:
        try:
            errors = check(path)
        except (OSError, ValueError, KeyError, TypeError) as err:
            print(f"{path}: not a history: {err}", file=sys.stderr)
            return 2
        print(f"{path}\t{'true' if not errors else 'false'}")
        for error in errors:
            least, most = error["expected"]
            why = "lost updates" if error["value"] < least else "taken, never sold"
            print(f"  read of {error['value']} at line {error['line']}: expected {least}..{most} ({why})")
        invalid |= bool(errors)
    return 1 if invalid else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
