#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Callgrind dumps of bench/callgrind_paths -> a markdown table of instructions per operation.

bench/callgrind_paths, run under ``valgrind --tool=callgrind --collect-atstart=no``, dumps
callgrind's counts once per path (``CALLGRIND_DUMP_STATS_AT(name)``: a file whose ``desc:
Trigger: Client Request: NAME`` line names the path and whose ``totals:`` line is its count of
executed instructions, Ir) and writes ``name<TAB>iterations`` per path on stdout. This script
reads both and prints one row per path, in the program's order:

  | path | instructions per operation (Ir/N) | relative to the peer |

Names are ``family/case/impl``. An ``asyncband`` row's last cell compares it with every other
row of the same family/case (a peer): Ir(asyncband) / Ir(peer), ``< 1`` meaning fewer
instructions. Rows of the ``baseline`` impl (the loop alone) compare with nothing.

Every path listed must have exactly one dump and every client-request dump must be listed, so
a path that crashed or a stale dump from another run fails the script (exit 1).

Usage:
  callgrind_table.py PATHS DUMP...     # PATHS: the program's stdout; DUMP: callgrind.out.N files
"""

from __future__ import annotations

import argparse
import re
import signal
import sys
from pathlib import Path

TRIGGER = re.compile(r"^desc: Trigger: Client Request: (.+)$")
TOTALS = re.compile(r"^(totals|summary): (\d+)")
EVENTS = re.compile(r"^events: (.+)$")
NOT_OURS = "baseline"


class Problem(Exception):
    """A dump or the path list does not say what it should."""


def read_paths(path: Path) -> list[tuple[str, int]]:
    """The program's stdout: (name, iterations) per path, in order."""
    paths = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        name, sep, count = line.partition("\t")
        if not sep or not count.strip().isdigit() or int(count) <= 0:
            raise Problem(f"{path}: not 'name<TAB>iterations': {line!r}")
        paths.append((name, int(count)))
    if not paths:
        raise Problem(f"{path}: no paths")
    return paths


def read_dump(path: Path) -> tuple[str, int] | None:
    """(trigger name, Ir total) of a client-request dump; None for any other dump (the one at
    program termination)."""
    name = None
    totals = {}
    events = None
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if m := TRIGGER.match(line):
            name = m.group(1).strip()
        elif m := EVENTS.match(line):
            events = m.group(1).split()
        elif m := TOTALS.match(line):
            totals[m.group(1)] = int(m.group(2))
    if name is None:
        return None
    if not events or events[0] != "Ir":
        raise Problem(f"{path}: its first event is not Ir (events: {events})")
    # `totals:` ends the file; `summary:` (in its header) says the same and is the fallback.
    total = totals.get("totals", totals.get("summary"))
    if total is None:
        raise Problem(f"{path}: no totals: or summary: line")
    return name, total


def collect(paths: list[tuple[str, int]], dumps: list[Path]) -> list[tuple[str, float]]:
    """(name, Ir per operation) per listed path, after checking that dumps and list agree."""
    counts: dict[str, int] = {}
    for dump in dumps:
        found = read_dump(dump)
        if found is None:
            continue
        name, total = found
        if name in counts:
            raise Problem(f"two dumps for {name} (stale files from another run?)")
        counts[name] = total
    listed = {name for name, _ in paths}
    if missing := [name for name, _ in paths if name not in counts]:
        raise Problem(f"no dump for: {', '.join(missing)}")
    if extra := sorted(set(counts) - listed):
        raise Problem(f"dumps of unlisted paths: {', '.join(extra)}")
    return [(name, counts[name] / iterations) for name, iterations in paths]


def split_name(name: str) -> tuple[str, str]:
    """(family/case, impl)."""
    head, sep, impl = name.rpartition("/")
    if not sep or "/" not in head:
        raise Problem(f"not family/case/impl: {name}")
    return head, impl


def relative(name: str, per_op: dict[str, float]) -> str:
    """For an asyncband row: its count over each peer's of the same family/case."""
    case, impl = split_name(name)
    if impl != "asyncband":
        return ""
    cells = []
    for other, ir in per_op.items():
        other_case, other_impl = split_name(other)
        if other_case == case and other_impl not in ("asyncband", NOT_OURS) and ir > 0:
            cells.append(f"{per_op[name] / ir:.2f}x {other_impl}")
    return ", ".join(cells)


def table(rows: list[tuple[str, float]]) -> str:
    per_op = dict(rows)
    lines = [
        "| path | instructions per operation (Ir/N) | relative to the peer |",
        "|---|---:|---|",
    ]
    for name, ir in rows:
        lines.append(f"| `{name}` | {ir:.1f} | {relative(name, per_op)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", type=Path, help="bench/callgrind_paths's stdout (name<TAB>iterations lines)")
    ap.add_argument("dumps", type=Path, nargs="+", help="callgrind's dump files (callgrind.out.N)")
    args = ap.parse_args(argv)
    try:
        rows = collect(read_paths(args.paths), args.dumps)
    except (Problem, OSError) as e:
        print(f"callgrind_table: {e}", file=sys.stderr)
        return 1
    sys.stdout.write(table(rows))
    return 0


if __name__ == "__main__":
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(main(sys.argv[1:]))
