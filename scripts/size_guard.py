#!/usr/bin/env python3
"""Size guard: fails when a Rust source file outside the tests passes 800
lines, or a function passes 120 lines, unless scripts/size-budget.txt lists
it with a reason and a ceiling. The budget only ratchets down: an entry
whose file or function has grown past its ceiling fails, and one that is
back under the limit (or gone) is reported so that it can be deleted.

Usage: scripts/size_guard.py [--write-budget]
  --write-budget  rewrite the budget with today's offenders (keeping the
                  reasons already written); for seeding, never to get green.
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUDGET = ROOT / "scripts" / "size-budget.txt"
FILE_LIMIT = 800
FN_LIMIT = 120

FN_START = re.compile(
    r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:default\s+)?(?:const\s+)?(?:async\s+)?"
    r"(?:unsafe\s+)?(?:extern\s+\"[^\"]*\"\s+)?fn\s+([A-Za-z_][A-Za-z0-9_]*)"
)
STRING = re.compile(r'"(?:\\.|[^"\\])*"')
CHAR = re.compile(r"'(?:\\.|[^'\\])'")


def sources():
    """Rust files that are not tests: crates' src, benches and examples,
    and the top-level examples."""
    for pattern in ("crates/*/src/**/*.rs", "crates/*/benches/**/*.rs",
                    "crates/*/examples/**/*.rs", "examples/**/*.rs"):
        yield from sorted(ROOT.glob(pattern))


def code_of(line):
    """The line without its comment, strings and char literals (their
    braces are not the code's)."""
    line = STRING.sub('""', line)
    line = CHAR.sub("' '", line)
    return line.split("//", 1)[0]


def functions(lines):
    """(name, first line, length) of each function with a body."""
    out = []
    i = 0
    while i < len(lines):
        m = FN_START.match(lines[i])
        if not m:
            i += 1
            continue
        depth, opened, j = 0, False, i
        while j < len(lines):
            code = code_of(lines[j])
            if not opened and ";" in code and "{" not in code:
                break  # a declaration without a body (a trait's)
            for ch in code:
                if ch == "{":
                    depth += 1
                    opened = True
                elif ch == "}":
                    depth -= 1
            if opened and depth <= 0:
                out.append((m.group(1), i + 1, j - i + 1))
                break
            j += 1
        i += 1
    return out


def measure():
    """{key: size} of everything over its limit; keys are `path` for a
    file and `path::name@line-less` for a function (`path::name`)."""
    found = {}
    for path in sources():
        rel = path.relative_to(ROOT).as_posix()
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        if len(lines) > FILE_LIMIT:
            found[rel] = len(lines)
        seen = {}
        for name, _, length in functions(lines):
            if length > FN_LIMIT:
                key = f"{rel}::{name}"
                seen[key] = max(seen.get(key, 0), length)
        found.update(seen)
    return found


def read_budget():
    """{key: (ceiling, reason)} from the budget file."""
    budget = {}
    if not BUDGET.exists():
        return budget
    for n, raw in enumerate(BUDGET.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 2)
        if len(parts) < 3 or not parts[1].isdigit():
            sys.exit(f"{BUDGET.name}:{n}: want `KEY CEILING REASON`, got {raw!r}")
        budget[parts[0]] = (int(parts[1]), parts[2])
    return budget


def write_budget(found, budget):
    header = (
        "# Files over 800 lines and functions over 120, each with its ceiling\n"
        "# and why it may stay for now (scripts/size_guard.py). Lower a ceiling\n"
        "# when the thing shrinks; delete the line when it is under the limit.\n"
        "# KEY CEILING REASON\n"
    )
    rows = []
    for key in sorted(found):
        reason = budget.get(key, (0, "to split: over the limit when the guard began"))[1]
        rows.append(f"{key} {found[key]} {reason}")
    BUDGET.write_text(header + "\n".join(rows) + "\n")


def main():
    found = measure()
    budget = read_budget()
    if "--write-budget" in sys.argv:
        write_budget(found, budget)
        print(f"wrote {len(found)} entries to {BUDGET.relative_to(ROOT)}")
        return
    failures, stale = [], []
    for key, size in sorted(found.items()):
        limit = FN_LIMIT if "::" in key else FILE_LIMIT
        if key not in budget:
            failures.append(f"{key}: {size} lines, over the limit of {limit} and not in the budget")
        elif size > budget[key][0]:
            failures.append(f"{key}: {size} lines, past its budgeted {budget[key][0]}")
    for key, (ceiling, _) in sorted(budget.items()):
        if key not in found:
            stale.append(f"{key}: now under the limit (or gone): delete its budget line")
        elif found[key] < ceiling:
            stale.append(f"{key}: {found[key]} lines, budgeted {ceiling}: lower its ceiling")
    for line in stale:
        print(f"note: {line}")
    if failures:
        for line in failures:
            print(f"size guard: {line}", file=sys.stderr)
        print("split the file or function, or (with a reason) budget it in scripts/size-budget.txt",
              file=sys.stderr)
        sys.exit(1)
    print(f"size guard: {len(found)} budgeted, none grew")


if __name__ == "__main__":
    main()
