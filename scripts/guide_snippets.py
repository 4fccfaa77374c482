#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Keeps the code blocks of docs/guide.md equal to the compiled regions they quote.

A region in examples/*.cpp runs from a line `// [guide:NAME]` to the next `// [guide:end]`
line (both excluded) and is compared dedented. In the guide, a line `<!-- snippet: NAME -->`
is followed by a ```cpp block holding that region.

  guide_snippets.py           check: every marked block equals its region, every region is
                              quoted, every marker names a region; exit 1 with a diff otherwise
  guide_snippets.py --update  rewrite the marked blocks of the guide from the regions
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "guide.md"
SOURCES = sorted((ROOT / "examples").glob("*.cpp"))

BEGIN = re.compile(r"^\s*// \[guide:([A-Za-z0-9_-]+)\]\s*$")
END = re.compile(r"^\s*// \[guide:end\]\s*$")
MARKER = re.compile(r"^<!-- snippet: ([A-Za-z0-9_-]+) -->\s*$")


def regions() -> tuple[dict[str, str], list[str]]:
    """name -> dedented text (no trailing newline), and the problems found."""
    found: dict[str, str] = {}
    problems: list[str] = []
    for src in SOURCES:
        name = None
        start = 0
        lines = src.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            if END.match(line):
                if name is None:
                    problems.append(f"{src.relative_to(ROOT)}:{i + 1}: [guide:end] without a region")
                    continue
                if name in found:
                    problems.append(f"{src.relative_to(ROOT)}:{start}: region '{name}' defined twice")
                found[name] = textwrap.dedent("\n".join(lines[start:i])).strip("\n")
                name = None
            elif (m := BEGIN.match(line)) is not None:
                if name is not None:
                    problems.append(f"{src.relative_to(ROOT)}:{i + 1}: region '{name}' not ended")
                name, start = m.group(1), i + 1
        if name is not None:
            problems.append(f"{src.relative_to(ROOT)}: region '{name}' not ended")
    return found, problems


def guide_blocks(lines: list[str]) -> list[tuple[str, int, int]]:
    """(name, first code line, end fence line) of every marked block, 0-based."""
    blocks = []
    i = 0
    while i < len(lines):
        m = MARKER.match(lines[i])
        if m is None:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        if j >= len(lines) or not lines[j].startswith("```cpp"):
            raise SystemExit(f"docs/guide.md:{i + 1}: snippet marker not followed by a ```cpp block")
        k = j + 1
        while k < len(lines) and lines[k].rstrip() != "```":
            k += 1
        if k >= len(lines):
            raise SystemExit(f"docs/guide.md:{j + 1}: code block not closed")
        blocks.append((m.group(1), j + 1, k))
        i = k + 1
    return blocks


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--update", action="store_true", help="rewrite the guide's blocks from the regions")
    args = ap.parse_args(argv)

    found, problems = regions()
    lines = GUIDE.read_text(encoding="utf-8").splitlines()
    blocks = guide_blocks(lines)
    quoted = {name for name, _, _ in blocks}
    problems += [f"docs/guide.md: snippet '{n}' names no region in examples/" for n in sorted(quoted - found.keys())]
    problems += [f"examples/: region '{n}' is not quoted in docs/guide.md" for n in sorted(found.keys() - quoted)]

    if args.update:
        for name, first, end in reversed(blocks):
            if name in found:
                lines[first:end] = found[name].split("\n")
        GUIDE.write_text("\n".join(lines) + "\n", encoding="utf-8")
    else:
        for name, first, end in blocks:
            if name not in found:
                continue
            have = lines[first:end]
            want = found[name].split("\n")
            if have != want:
                diff = difflib.unified_diff(want, have, f"examples ({name})", f"docs/guide.md:{first + 1}", lineterm="")
                problems.append("\n".join(diff))

    for p in problems:
        print(f"guide_snippets: {p}", file=sys.stderr)
    if problems and not args.update:
        print("guide_snippets: run `python3 scripts/guide_snippets.py --update` to copy the regions", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
