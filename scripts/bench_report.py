#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Google Benchmark JSON -> markdown tables for asyncband.

Benchmark names are ``family/case/impl`` optionally followed by extra argument
segments (``/1024``) and Google Benchmark suffixes (``/real_time``,
``/threads:4``, ``/iterations:N``, ``/repeats:N``, ``/min_time:X`` ...);
aggregate entries carry ``_mean``/``_median``/... (read from the JSON
``aggregate_name`` field, not parsed from the name).

One table per family: one row per case (extra args and thread counts are part
of the case label), one column per implementation, cells = median real time
(median over repetitions; if the run had no aggregates, the median of the
individual runs). Implementations whose name starts with ``asyncband`` are
"ours"; every other implementation is a peer. For each of ours a column
``<ours>/best peer`` gives time(ours) / time(fastest peer) (< 1 means asyncband
is faster), with the fastest peer named; ``--per-peer`` adds a ratio column
per peer.

Usage:
  bench_report.py [--metric real_time|cpu_time] [--per-peer] FILE [FILE...]
  bench_report.py --merge OUT FILE [FILE...]   # merge several JSON outputs
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import statistics
import sys
from collections import OrderedDict, defaultdict
from pathlib import Path

TO_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}

# Suffix segments appended by Google Benchmark that are not part of the case identity.
DROP_SUFFIX = re.compile(
    r"^(real_time|manual_time|process_time|iterations:\d+|repeats:\d+|min_time:[0-9.]+[sx]?|"
    r"min_warmup_time:[0-9.]+)$"
)
THREADS = re.compile(r"^threads:(\d+)$")
AGG_NAME = re.compile(r"_(mean|median|stddev|cv)$")


def read_json(path: str) -> dict | None:
    """A Google Benchmark JSON output; None for an empty file, which is what an executable
    writes when --benchmark_filter matches none of its benchmarks."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if not text.strip():
        return None
    return json.loads(text)


def load(paths: list[str]) -> list[dict]:
    benches: list[dict] = []
    for p in paths:
        data = read_json(p)
        if data is not None:
            benches.extend(data.get("benchmarks", []))
    return benches


def merge(out: str, paths: list[str]) -> None:
    merged: dict = {"context": None, "executables": [], "benchmarks": []}
    for p in paths:
        data = read_json(p)
        if data is None:
            continue  # the filter matched nothing in this executable
        exe = Path(p).stem
        if merged["context"] is None:
            merged["context"] = data.get("context", {})
        merged["executables"].append({"name": exe, "context": data.get("context", {})})
        for b in data.get("benchmarks", []):
            b = dict(b)
            b.setdefault("executable", exe)
            merged["benchmarks"].append(b)
    if merged["context"] is None:
        merged["context"] = {}
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        json.dump(merged, f, indent=2)
        f.write("\n")


def split_name(run_name: str) -> tuple[str, str, str]:
    """'family/case/impl[/args][/suffixes]' -> (family, case label, impl)."""
    segs = run_name.split("/")
    core: list[str] = []
    threads = None
    for s in segs:
        m = THREADS.match(s)
        if m:
            threads = m.group(1)
        elif not DROP_SUFFIX.match(s):
            core.append(s)
    if len(core) >= 3:
        family, case, impl, extra = core[0], core[1], core[2], core[3:]
    elif len(core) == 2:
        family, case, impl, extra = core[0], "-", core[1], []
    else:
        family, case, impl, extra = "(ungrouped)", core[0] if core else run_name, "?", []
    if extra:
        case += "/" + "/".join(extra)
    if threads is not None:
        case += f" (threads:{threads})"
    return family, case, impl


def collect(benches: list[dict], metric: str):
    """-> {family: {case: {impl: median ns}}} preserving first-seen order."""
    aggregates: dict[str, float] = {}
    iterations: dict[str, list[float]] = defaultdict(list)
    order: list[str] = []
    for b in benches:
        if b.get("error_occurred"):
            continue
        if metric not in b:
            continue
        run_name = b.get("run_name") or AGG_NAME.sub("", b["name"])
        value_ns = float(b[metric]) * TO_NS.get(b.get("time_unit", "ns"), 1.0)
        if run_name not in order:
            order.append(run_name)
        if b.get("run_type") == "aggregate":
            if b.get("aggregate_name") == "median":
                aggregates[run_name] = value_ns
        else:
            iterations[run_name].append(value_ns)

    table: "OrderedDict[str, OrderedDict[str, OrderedDict[str, float]]]" = OrderedDict()
    impls: "OrderedDict[str, list[str]]" = OrderedDict()
    for run_name in order:
        if run_name in aggregates:
            v = aggregates[run_name]
        elif iterations.get(run_name):
            v = statistics.median(iterations[run_name])
        else:
            continue
        family, case, impl = split_name(run_name)
        table.setdefault(family, OrderedDict()).setdefault(case, OrderedDict())[impl] = v
        fam_impls = impls.setdefault(family, [])
        if impl not in fam_impls:
            fam_impls.append(impl)
    return table, impls


def fmt_time(ns: float) -> str:
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.3g} ns"


def fmt_ratio(r: float) -> str:
    return f"{r:.2f}x"


def is_ours(impl: str) -> bool:
    return impl.lower().startswith("asyncband")


def report(paths: list[str], metric: str, per_peer: bool, out=sys.stdout) -> int:
    benches = load(paths)
    table, impls = collect(benches, metric)
    if not table:
        print("no benchmark results", file=out)
        return 1
    label = "median real time" if metric == "real_time" else "median CPU time"
    print(f"# Benchmark report ({label}; ratio < 1: asyncband faster)\n", file=out)
    for family, cases in table.items():
        fam_impls = impls[family]
        ours = [i for i in fam_impls if is_ours(i)]
        peers = [i for i in fam_impls if not is_ours(i)]
        cols = ours + peers
        header = ["case"] + cols
        if peers:
            for o in ours:
                header.append(f"{o}/best peer")
                if per_peer:
                    header.extend(f"{o}/{p}" for p in peers)
        print(f"## {family}\n", file=out)
        print("| " + " | ".join(header) + " |", file=out)
        print("|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|", file=out)
        for case, row in cases.items():
            cells = [case] + [fmt_time(row[c]) if c in row else "-" for c in cols]
            if peers:
                present = [(row[p], p) for p in peers if p in row]
                best = min(present) if present else None
                for o in ours:
                    if o in row and best is not None and best[0] > 0:
                        cells.append(f"{fmt_ratio(row[o] / best[0])} ({best[1]})")
                    else:
                        cells.append("-")
                    if per_peer:
                        for p in peers:
                            if o in row and p in row and row[p] > 0:
                                cells.append(fmt_ratio(row[o] / row[p]))
                            else:
                                cells.append("-")
            print("| " + " | ".join(cells) + " |", file=out)
        print(file=out)
    return 0


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="Google Benchmark JSON files (merged or not)")
    ap.add_argument("--merge", metavar="OUT", help="merge FILES into OUT instead of reporting")
    ap.add_argument("--metric", choices=("real_time", "cpu_time"), default="real_time")
    ap.add_argument("--per-peer", action="store_true", help="also a ratio column per peer")
    args = ap.parse_args(argv)
    for p in args.files:
        if not Path(p).is_file():
            print(f"bench_report: no such file: {p}", file=sys.stderr)
            return 2
    if args.merge:
        merge(args.merge, args.files)
        return 0
    return report(args.files, args.metric, args.per_peer)


if __name__ == "__main__":
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(main(sys.argv[1:]))
