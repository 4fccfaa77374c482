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

With ``--docs DIR`` it also writes the benchmark pages: DIR/README.md (the run it
comes from: date, machine, compiler, commit; then per family a chart and the
table), one chart per family (DIR/<family>.svg, grouped horizontal bars of
every implementation per case, log scale where a family's times span more than
30x, +-stddev where the run has it), and DIR/results.json, the data they were
made from (so that ``--docs`` can remake them from it). The charts need
matplotlib; the tables do not.

Usage:
  bench_report.py [--metric real_time|cpu_time] [--per-peer] FILE [FILE...]
  bench_report.py --docs DIR [--note TEXT] [--context KEY=VALUE...] [--png] FILE [FILE...]
  bench_report.py --merge OUT [--context KEY=VALUE...] FILE [FILE...]   # merge JSON outputs

``--context`` adds entries to the run's context (x bench records the CPU
model, compiler, flags, commit and options this way; for an older JSON they can
be given by hand).
"""

from __future__ import annotations

import argparse
import io
import json
import re
import signal
import socket
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


def read_all(paths: list[str]) -> list[dict]:
    """Every file's JSON, the empty ones left out."""
    return [data for data in map(read_json, paths) if data is not None]


def load(paths: list[str]) -> list[dict]:
    return [b for data in read_all(paths) for b in data.get("benchmarks", [])]


def load_context(paths: list[str]) -> dict:
    """The first file's context (a merged file has one for the whole run)."""
    files = read_all(paths)
    return dict(files[0].get("context", {})) if files else {}


def load_executables(paths: list[str]) -> list[dict]:
    """The per-executable contexts a merged file lists."""
    return [e for data in read_all(paths) for e in data.get("executables", [])]


def merge(out: str, paths: list[str], extra_context: dict[str, str] | None = None) -> None:
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
    merged["context"].update(extra_context or {})
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


def collect(benches: list[dict], metric: str, spreads: dict | None = None):
    """-> {family: {case: {impl: median ns}}} preserving first-seen order. If `spreads` is a
    dict, it is filled likewise with the standard deviation where the run has it."""
    aggregates: dict[str, float] = {}
    stddevs: dict[str, float] = {}
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
            elif b.get("aggregate_name") == "stddev":
                stddevs[run_name] = value_ns
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
        if spreads is not None:
            if run_name in stddevs:
                spreads.setdefault(family, {}).setdefault(case, {})[impl] = stddevs[run_name]
            elif len(iterations.get(run_name, [])) > 1:
                spreads.setdefault(family, {}).setdefault(case, {})[impl] = statistics.stdev(iterations[run_name])
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


def metric_label(metric: str) -> str:
    return "median real time" if metric == "real_time" else "median CPU time"


def report(paths: list[str], metric: str, per_peer: bool, out=sys.stdout) -> int:
    benches = load(paths)
    table, impls = collect(benches, metric)
    if not table:
        print("no benchmark results", file=out)
        return 1
    print(f"# Benchmark report ({metric_label(metric)}; ratio < 1: asyncband faster)\n", file=out)
    for family, cases in table.items():
        print(f"## {family}\n", file=out)
        family_table(cases, impls[family], per_peer, out)
    return 0


def family_table(cases, fam_impls: list[str], per_peer: bool, out) -> None:
    """One family's markdown table: a row per case, a column per implementation, and the
    ratio of ours to the fastest peer."""
    ours = [i for i in fam_impls if is_ours(i)]
    peers = [i for i in fam_impls if not is_ours(i)]
    cols = ours + peers
    header = ["case"] + cols
    if peers:
        for o in ours:
            header.append(f"{o}/best peer")
            if per_peer:
                header.extend(f"{o}/{p}" for p in peers)
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


# ---------------------------------------------------------------------------------------------
# --docs: the benchmark pages (docs/bench/)

SPDX = "SPDX-License-Identifier: Apache-2.0"
OURS_COLOR = "#1f6fb4"
PEER_COLORS = ["#e8853a", "#5aa55a", "#9a6fc0", "#b5835a", "#d97fbf", "#8c8c8c", "#b8b83c", "#4fb8c7", "#c94c4c"]


def local_cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def run_facts(ctx: dict, metric: str) -> "OrderedDict[str, str]":
    """What the page and the figures say about the run: its date, machine, compiler, source."""
    facts: "OrderedDict[str, str]" = OrderedDict()
    facts["date"] = str(ctx.get("date", "not recorded"))
    cpu = ctx.get("cpu_model")
    if not cpu and ctx.get("host_name") and ctx.get("host_name") == socket.gethostname():
        cpu = local_cpu_model()
        if cpu:
            cpu += " (read when the report was made, on the same host)"
    machine = cpu or "CPU model not recorded"
    if ctx.get("num_cpus"):
        machine += f", {ctx['num_cpus']} CPUs"
    if ctx.get("mhz_per_cpu"):
        machine += f" at {ctx['mhz_per_cpu']} MHz"
    if ctx.get("host_name"):
        machine += f", host `{ctx['host_name']}`"
    facts["machine"] = machine
    compiler = str(ctx.get("compiler", "not recorded"))
    if ctx.get("flags"):
        compiler += f", `{ctx['flags']}`"
    facts["compiler"] = compiler
    facts["source"] = str(ctx.get("commit", "not recorded"))
    if ctx.get("options"):
        facts["options"] = str(ctx["options"])
    if ctx.get("library_build_type"):
        facts["Google Benchmark library"] = f"{ctx['library_build_type']} build"
    facts["metric"] = (f"{metric_label(metric)} per benchmark iteration (the measured time where a benchmark "
                       "times itself), over the repetitions")
    return facts


def figure_caption(facts: "OrderedDict[str, str]") -> str:
    machine = facts["machine"].split(", host")[0].replace(" (read when the report was made, on the same host)", "")
    compiler = facts["compiler"].replace("`", "")
    if compiler.startswith("not recorded"):
        compiler = "compiler not recorded"
    return f"{machine}; {compiler}; run {facts['date']}"


def file_stem(family: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "_", family)


def plot_family(family: str, cases, fam_impls: list[str], spread, colors: dict[str, str], caption: str,
                metric: str, base: Path, formats: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    plt.rcParams["svg.hashsalt"] = "asyncband-bench"  # stable ids: regenerating changes only what changed
    plt.rcParams["svg.fonttype"] = "none"
    plt.rcParams["font.size"] = 9

    order = [i for i in fam_impls if is_ours(i)] + [i for i in fam_impls if not is_ours(i)]
    case_names = list(cases.keys())
    values = [v for row in cases.values() for v in row.values() if v > 0]
    log = bool(values) and max(values) / min(values) > 30
    slot = 0.8 / len(order)
    height = max(2.4, 0.22 * len(case_names) * len(order) + 0.35 * len(case_names) + 1.6)
    fig, ax = plt.subplots(figsize=(10, height))
    for j, impl in enumerate(order):
        ys, xs, errs = [], [], []
        for k, case in enumerate(case_names):
            v = cases[case].get(impl)
            if v is None or v <= 0:
                continue
            ys.append(len(case_names) - 1 - k + 0.4 - slot * (j + 0.5))
            xs.append(v)
            sd = (spread.get(case, {}) if spread else {}).get(impl, 0.0)
            errs.append(min(sd, v * 0.95))  # a log axis cannot go to zero
        if not xs:
            continue
        ax.barh(ys, xs, height=slot * 0.9, color=colors[impl], label=impl,
                xerr=errs if any(errs) else None, error_kw={"elinewidth": 0.8, "capsize": 1.5, "ecolor": "#333333"})
        for y, x, e in zip(ys, xs, errs):  # the value, past its error bar
            ax.text((x + e) * 1.08 if log else x + e + max(values) * 0.01, y, fmt_time(x), va="center",
                    ha="left", fontsize=7)
    ax.set_yticks(range(len(case_names)))
    ax.set_yticklabels(list(reversed(case_names)))
    if log:
        ax.set_xscale("log")
        ax.set_xlim(min(values) / 2, max(values) * 4)
    else:
        ax.set_xlim(0, max(values) * 1.18)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: fmt_time(x) if x > 0 else "0"))
    ax.set_xlabel(f"{metric_label(metric)} per iteration ({'log scale; ' if log else ''}lower is better)")
    ax.grid(axis="x", color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.set_title(f"{family}: asyncband vs peers", loc="left", fontsize=11)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)  # beside, never on a bar
    fig.text(0.01, 0.005, caption, fontsize=7, color="#555555", ha="left", va="bottom")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    for fmt in formats:
        path = base.with_suffix("." + fmt)
        if fmt == "svg":
            fig.savefig(path, format="svg", metadata={"Date": None})
            text = path.read_text(encoding="utf-8").split("\n", 1)
            # After the XML declaration: the license line ./x lint looks for.
            path.write_text(f"{text[0]}\n<!-- {SPDX} -->\n{text[1]}", encoding="utf-8")
        else:
            fig.savefig(path, format=fmt, dpi=110, metadata={"Software": None})
    plt.close(fig)


def write_docs(paths: list[str], out_dir: str, metric: str, per_peer: bool, note: str | None,
               extra_context: dict[str, str], formats: list[str]) -> int:
    benches = load(paths)
    ctx = load_context(paths)
    ctx.update(extra_context)
    if note:
        ctx["note"] = note  # kept in DIR/results.json: remaking the page from it keeps the note
    note = ctx.get("note")
    spreads: dict = {}
    table, impls = collect(benches, metric, spreads)
    if not table:
        print("bench_report: no benchmark results", file=sys.stderr)
        return 1
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("bench_report: the charts need matplotlib (Debian: apt-get install python3-matplotlib)", file=sys.stderr)
        return 3

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for old in list(out.glob("*.svg")) + list(out.glob("*.png")):
        old.unlink()  # charts of families this run does not have

    # The data the pages are made from, with the context given here, so that --docs can remake them.
    data = {"_license": SPDX, "context": ctx, "executables": load_executables(paths), "benchmarks": benches}
    (out / "results.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")

    peers = sorted({i for fam in impls.values() for i in fam if not is_ours(i)})
    colors = {p: PEER_COLORS[k % len(PEER_COLORS)] for k, p in enumerate(peers)}
    colors.update({i: OURS_COLOR for fam in impls.values() for i in fam if is_ours(i)})
    facts = run_facts(ctx, metric)
    caption = figure_caption(facts)

    page = io.StringIO()
    print("# asyncband benchmarks\n", file=page)  # a document: no SPDX line (design.md, Packaging)
    print("Generated by `./x report` (scripts/bench_report.py) from [results.json](results.json), "
          "the data of the run below; do not edit by hand. `./x bench --report` runs the benchmarks "
          "and regenerates this page; `./x report docs/bench/results.json` remakes it from the data "
          "here. Ratios below 1 mean asyncband is faster; the charts show every implementation per "
          "case, with the standard deviation over the repetitions where the run has it.\n", file=page)
    print("| run | |", file=page)
    print("| --- | --- |", file=page)
    for key, value in facts.items():
        print(f"| {key} | {value} |", file=page)
    print(file=page)
    if note:
        print(note.strip() + "\n", file=page)
    print("Families: " + ", ".join(f"[{f}](#{file_stem(f).lower()})" for f in table) + "\n", file=page)
    for family, cases in table.items():
        stem = file_stem(family)
        plot_family(family, cases, impls[family], spreads.get(family), colors, caption, metric, out / stem, formats)
        print(f"## {family}\n", file=page)
        print(f"![{family}: asyncband vs peers]({stem}.{formats[0]})\n", file=page)
        family_table(cases, impls[family], per_peer, page)
    (out / "README.md").write_text(page.getvalue(), encoding="utf-8")
    print(f"bench_report: wrote {out / 'README.md'} and {len(table)} chart(s)", file=sys.stderr)
    return 0


def parse_context(items: list[str]) -> dict[str, str]:
    ctx = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"bench_report: --context wants KEY=VALUE, got '{item}'")
        ctx[key] = value
    return ctx



def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="Google Benchmark JSON files (merged or not)")
    ap.add_argument("--merge", metavar="OUT", help="merge FILES into OUT instead of reporting")
    ap.add_argument("--metric", choices=("real_time", "cpu_time"), default="real_time")
    ap.add_argument("--per-peer", action="store_true", help="also a ratio column per peer")
    ap.add_argument("--docs", metavar="DIR", help="write DIR/README.md, a chart per family and DIR/results.json")
    ap.add_argument("--note", help="--docs: a paragraph for the page, where the data comes from (kept in "
                    "the context, as `note`)")
    ap.add_argument("--png", action="store_true", help="--docs: PNG charts besides the SVG ones")
    ap.add_argument("--context", action="append", default=[], metavar="KEY=VALUE",
                    help="--merge, --docs: add or replace an entry of the run's context")
    args = ap.parse_args(argv)
    for p in args.files:
        if not Path(p).is_file():
            print(f"bench_report: no such file: {p}", file=sys.stderr)
            return 2
    extra = parse_context(args.context)
    if args.merge:
        merge(args.merge, args.files, extra)
        return 0
    if args.docs:
        formats = ["svg", "png"] if args.png else ["svg"]
        return write_docs(args.files, args.docs, args.metric, args.per_peer, args.note, extra, formats)
    return report(args.files, args.metric, args.per_peer)


if __name__ == "__main__":
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(main(sys.argv[1:]))
