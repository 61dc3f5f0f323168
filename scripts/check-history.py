#!/usr/bin/env python3
"""Checks a history seckill-check wrote (--history DIR) by the rule of Jepsen's counter
checker, independently of seckill-check's own verdict.

Every buy is an `add` to the units that left the stock; the final `read` is what did
(initial - left). Walking the operations in order, as Jepsen's counter checker does: an
`invoke` of an add raises the upper bound by its value; its `ok` raises the lower bound by
the ok's value (0 for a resend answered with a sale already counted) and moves the upper
bound from the invoke's value to the ok's; a `fail` takes the invoke's value back off the
upper bound; an `info` stays in the upper bound only (it may have sold). A read is valid when lower-at-its-invoke <= value <= upper-at-its-
completion. A read below the lower bound is lost updates (sales acknowledged that never left
the stock); above the upper bound, units taken that no request could have sold.

  python3 scripts/check-history.py run/history/*.json

Prints one line per file, as elle-cli does (`<file>\\t<valid?>`), then the reads that
failed; exits 1 when any history is invalid, 2 when a file is not a history.
A history is one JSON array, as elle-cli reads JSON (`java -jar elle-cli.jar --model
counter FILE.json`), whose counter model applies this rule.
"""

import json
import sys


def check(path):
    lower = upper = 0
    reads = {}  # process -> lower bound at the read's invoke
    invoked = {}  # process -> the value its add was invoked with
    errors = []
    with open(path, encoding="utf-8") as text:
        history = json.load(text)
    if not isinstance(history, list):
        raise ValueError("not a JSON array of operations")
    for number, op in enumerate(history):
        kind, f, value = op["type"], op["f"], op.get("value")
        if f == "add":
            if kind == "invoke":
                invoked[op["process"]] = value
                upper += value
            elif kind == "ok":
                lower += value
                upper += value - invoked.pop(op["process"], value)
            elif kind == "fail":
                upper -= invoked.pop(op["process"], value)
            elif kind == "info":
                invoked.pop(op["process"], None)
            else:
                raise ValueError(f"operation {number}: unknown type {kind!r}")
        elif f == "read":
            if kind == "invoke":
                reads[op["process"]] = lower
            elif kind == "ok":
                least = reads.pop(op["process"], lower)
                if not least <= value <= upper:
                    errors.append({"operation": number, "value": value, "expected": [least, upper]})
        else:
            raise ValueError(f"operation {number}: unknown f {f!r}")
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
            print(f"  read of {error['value']} at operation {error['operation']}: expected {least}..{most} ({why})")
        invalid |= bool(errors)
    return 1 if invalid else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
