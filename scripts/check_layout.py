#!/usr/bin/env python3
"""Fails when a Rust source file passes 500 lines (issue 24: "files <= 500 lines"), unless it is
listed in scripts/layout-allow.txt with a line count it may not exceed. The list is a ratchet
of today's long files: a listed file may shrink, never grow; entries that are no longer needed
are printed so they can be trimmed.

    python3 scripts/check_layout.py            # check (a phase of scripts/test.sh)
    python3 scripts/check_layout.py --update   # rewrite the list from the tree as it is
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ALLOW = ROOT / "scripts" / "layout-allow.txt"
LIMIT = 500


def line_counts() -> dict[str, int]:
    out = {}
    for f in sorted((ROOT / "crates").rglob("*.rs")):
        if "target" in f.parts:
            continue
        with open(f, "rb") as fh:
            out[str(f.relative_to(ROOT))] = sum(1 for _ in fh)
    return out


def read_allow() -> dict[str, int]:
    allow = {}
    if ALLOW.exists():
        for line in ALLOW.read_text().splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                count, path = line.split(maxsplit=1)
                allow[path] = int(count)
    return allow


def main() -> int:
    counts = line_counts()
    if "--update" in sys.argv[1:]:
        long = {p: n for p, n in counts.items() if n > LIMIT}
        ALLOW.write_text(
            f"# Rust files allowed past {LIMIT} lines, with the most lines each may have "
            "(scripts/check_layout.py; split them, then shrink this list).\n"
            + "".join(f"{n} {p}\n" for p, n in sorted(long.items()))
        )
        print(f"check_layout: wrote {len(long)} entries to {ALLOW.relative_to(ROOT)}")
        return 0
    allow = read_allow()
    bad = []
    for path, n in counts.items():
        if n <= LIMIT:
            continue
        if path not in allow:
            bad.append(f"{path}: {n} lines (> {LIMIT}); split it by what it does")
        elif n > allow[path]:
            bad.append(f"{path}: {n} lines, grew past its allowed {allow[path]}; split it instead")
    for path, n in allow.items():
        if counts.get(path, 0) <= LIMIT:
            print(f"check_layout: {path} is no longer long; remove it from {ALLOW.name}")
        elif counts[path] < n:
            print(f"check_layout: {path} shrank to {counts[path]}; lower its entry in {ALLOW.name}")
    for b in bad:
        print(f"check_layout: {b}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
