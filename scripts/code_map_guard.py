#!/usr/bin/env python3
"""Code map guard: fails when a source file under crates/*/src,
crates/*/benches, crates/*/examples or examples/ is not named in
ARCHITECTURE.md (by its file name or, for a Rust file, its module name), so
that the map a newcomer reads first never silently misses a room.

Usage: scripts/code_map_guard.py
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PATTERNS = ("crates/*/src/**/*", "crates/*/benches/**/*", "crates/*/examples/**/*", "examples/**/*")


def main():
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    missing = []
    for pattern in PATTERNS:
        for path in sorted(ROOT.glob(pattern)):
            if not path.is_file() or path.suffix in (".sql", ".md"):
                continue
            names = {path.name}
            if path.suffix == ".rs":
                names.add(path.stem)
            if not any(n in text for n in names):
                missing.append(path.relative_to(ROOT).as_posix())
    if missing:
        for m in missing:
            print(f"code map guard: {m} is not named in ARCHITECTURE.md", file=sys.stderr)
        print("add it to the code map (a line on what it is for)", file=sys.stderr)
        sys.exit(1)
    print("code map guard: every source file is named in ARCHITECTURE.md")


if __name__ == "__main__":
    main()
