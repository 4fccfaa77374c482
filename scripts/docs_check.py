#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks the generated API reference (`./x docs` runs it).

--complete: every declaration the headers document with /// and doxygen must show (listed by
doxygen_filter.py in headers/documented.tsv) is in the reference's search index. Doxygen
drops some without a warning (see doxygen_filter.py), and a warning-free build proves nothing
about those.

--render: opens pages in headless Chromium and checks they rendered. For each page below,
Chromium loads it from disk, runs its scripts (doxygen's navigation tree is built by
JavaScript) and prints the resulting DOM. The check fails if a page did not load,
its title is not the expected one, the navigation tree is empty, an expected name is missing
(the members a public class inherits from a detail base included: they show that the header
filter and INLINE_INHERITED_MEMB worked), or a link in it points to a file that does not exist.
The main page is also taken as a screenshot, which must not be blank (PNG decoded here).

Usage: docs_check.py [--complete] [--render] DOCS_DIR
  DOCS_DIR is build/docs (html/ and headers/ in it); without an option, both checks.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from html import unescape
from pathlib import Path
from urllib.parse import unquote

from doxygen_filter import DOCUMENTED, strip_template_args  # scripts/, next to this one

# page, expected title (doxygen: "<project>: <page title>"), names its content must show
PAGES = [
    ("index.html", "asyncband: asyncband", ["Primitives", "A short example", "How it works"]),
    ("asyncband-design.html", "asyncband: asyncband design", ["The waiter core"]),
    ("using-asyncband.html", "asyncband: Using asyncband",  # docs/guide.md (its heading's id)
     ["Which kind of channel to use?", "Cancellation", "From cppcoro"]),
    ("namespaceasyncband.html", "asyncband: asyncband Namespace Reference",  # free functions
     ["mutex", "semaphore", "lock_owned", "acquire_owned", "when_any", "block_on", "resume_on"]),
    ("namespaceasyncband_1_1mpsc.html", "asyncband: asyncband::mpsc Namespace Reference",
     ["bounded", "unbounded", "sender", "receiver", "permit"]),
    ("classasyncband_1_1mutex.html", "asyncband: asyncband::mutex< T > Class Template Reference",
     ["lock", "try_lock", "lock_blocking", "lock_timeout", "is_locked", "mutex_guard"]),
    ("classasyncband_1_1mpsc_1_1receiver.html",
     "asyncband: asyncband::mpsc::receiver< T > Class Template Reference",
     ["recv", "try_recv", "recv_blocking", "capacity"]),
    ("classasyncband_1_1detail_1_1bounded__sender.html",  # mpsc::sender, mpmc::sender
     "asyncband: asyncband::detail::bounded_sender< State > Class Template Reference",
     ["send", "try_send", "reserve", "closed", "is_closed"]),
    ("classasyncband_1_1latch.html", "asyncband: asyncband::latch Class Reference",
     ["count_down", "wait", "wait_blocking", "wait_timeout"]),
]
NOT_LOADED = ["ERR_FILE_NOT_FOUND", "ERR_ACCESS_DENIED", "This page isn't working",
              "couldn't be accessed"]


def fail(message: str) -> None:
    print(f"docs_check: FAILED: {message}", file=sys.stderr)
    sys.exit(1)


def chromium(profile: Path, *args: str) -> str:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        fail("chromium not found (`./x docs --check` installs Debian's chromium)")
    command = [browser, "--headless", "--disable-gpu", "--no-sandbox", f"--user-data-dir={profile}",
               "--virtual-time-budget=5000", *args]  # time for the page's scripts
    run = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    if run.returncode != 0:
        fail(f"{' '.join(command)} exited with {run.returncode}:\n{run.stderr[-2000:]}")
    return run.stdout


def check_page(html_dir: Path, profile: Path, page: str, title: str, names: list[str]) -> int:
    path = html_dir / page
    if not path.is_file():
        fail(f"{path} does not exist (doxygen named the page otherwise?)")
    dom = chromium(profile, "--dump-dom", path.as_uri())
    for marker in NOT_LOADED:
        if marker in dom:
            fail(f"{page}: Chromium did not load it ({marker})")
    found = re.search(r"<title>(.*?)</title>", dom, re.S)
    if found is None or unescape(found.group(1)).strip() != title:
        fail(f"{page}: title {found and unescape(found.group(1)).strip()!r}, expected {title!r}")
    tree = re.search(r'id="nav-tree-contents"(.*?)id="doc-content"', dom, re.S)
    if tree is None or tree.group(1).count("<li") < 3:
        fail(f"{page}: the navigation tree is missing or empty (did its JavaScript run?)")
    content = dom[dom.find('id="doc-content"'):]  # the page itself, not the navigation tree
    text = unescape(re.sub(r"<[^>]+>", " ", content))
    missing = [n for n in names if not re.search(rf"(?<![\w:]){re.escape(n)}(?!\w)", text)]
    if 'id="doc-content"' not in dom or missing:
        fail(f"{page}: rendered without {', '.join(missing) or 'its content'}")
    links = {unquote(h.split("#")[0]) for h in re.findall(r'href="([^"]+)"', dom)}
    local = [h for h in links if h and not re.match(r"^[a-z]+:", h)]
    broken = sorted(h for h in local if not (path.parent / h).exists())
    if broken:
        fail(f"{page}: links to missing files: {', '.join(broken[:10])}")
    print(f"docs_check: {page}: '{title}', {len(names)} names, {len(local)} local links OK")
    return len(local)


def indexed(html_dir: Path) -> set[tuple[str, str]]:
    """(scope, name) of every entry of doxygen's search index: the scope is the innermost
    namespace, class or file, unqualified, as the headers' list has it."""
    # ['id',['name',['url',1,'scope or qualified name'],...]]
    quoted = r"'((?:[^'\\]|\\.)*)'"
    reference = re.compile(rf"\['[^']*',\d+,{quoted}\]")
    entry = re.compile(rf"\['[^']*',\[{quoted},((?:{reference.pattern},?)+)\]\]")
    keys = set()
    for js in sorted((html_dir / "search").glob("all_*.js")):
        for m in entry.finditer(js.read_text()):
            name = strip_template_args(unescape(m.group(1))).strip()
            for ref in reference.findall(m.group(2)):
                # A reference is the entry's scope, or its qualified name (with the arguments).
                qualified = strip_template_args(unescape(ref).split("(")[0])
                parts = [p.strip() for p in qualified.split("::")]
                if parts[-1] == name:
                    keys.add((parts[-2] if len(parts) > 1 else "", name))
                else:
                    keys.add((parts[-1], name))
                keys.add(("*", name))
    return keys


def check_complete(docs_dir: Path) -> None:
    listed = docs_dir / "headers" / DOCUMENTED
    if not listed.is_file():
        fail(f"{listed} does not exist (scripts/doxygen_filter.py writes it)")
    keys = indexed(docs_dir / "html")
    rows = [line.split("\t") for line in listed.read_text().splitlines() if line]
    missing = [(where, f"{scope}::{name}" if scope not in ("", "*") else name)
               for scope, name, where in rows if (scope, name) not in keys]
    if missing:
        listing = "\n".join(f"  {where}: {name}" for where, name in missing)
        fail(f"{len(missing)} documented declaration(s) missing from the reference, "
             f"doxygen said nothing:\n"
             f"{listing}\n(is the namespace documented? a trailing requires-clause before them?)")
    print(f"docs_check: all {len(rows)} documented public declarations are in the reference")


def png_colours(png: bytes) -> int:
    """Distinct colours in an 8-bit RGB(A), non-interlaced PNG (what Chromium writes)."""
    if png[:8] != b"\x89PNG\r\n\x1a\n":
        fail("the screenshot is not a PNG")
    pos, idat, width, height, channels = 8, b"", 0, 0, 0
    while pos < len(png):
        length, kind = struct.unpack(">I4s", png[pos:pos + 8])
        data = png[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour_type, _, _, interlace = struct.unpack(">IIBBBBB", data)
            channels = {2: 3, 6: 4}.get(colour_type, 0)
            if depth != 8 or channels == 0 or interlace:
                fail(f"unexpected screenshot format (depth {depth}, colour type {colour_type})")
        elif kind == b"IDAT":
            idat += data
        pos += 12 + length
    raw, stride, colours = zlib.decompress(idat), width * channels, set()
    previous = bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        for x in range(stride):
            left = line[x - channels] if x >= channels else 0
            up, up_left = previous[x], previous[x - channels] if x >= channels else 0
            if kind == 1:
                line[x] = (line[x] + left) & 0xFF
            elif kind == 2:
                line[x] = (line[x] + up) & 0xFF
            elif kind == 3:
                line[x] = (line[x] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - up_left
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - up_left)
                best = left if pa <= pb and pa <= pc else up if pb <= pc else up_left
                line[x] = (line[x] + best) & 0xFF
        if y % 4 == 0:
            colours.update(bytes(line[i:i + 3]) for i in range(0, stride, channels * 4))
        previous = line
    return len(colours)


def check_render(html_dir: Path) -> None:
    check_dir = html_dir.parent / "check"
    check_dir.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="docs_check_profile_") as profile:
        for page, title, names in PAGES:
            check_page(html_dir, Path(profile), page, title, names)
        shot = check_dir / "index.png"
        shot.unlink(missing_ok=True)
        chromium(Path(profile), "--window-size=1280,900", f"--screenshot={shot}",
                 (html_dir / "index.html").as_uri())
        if not shot.is_file():
            fail("Chromium wrote no screenshot of index.html")
        colours = png_colours(shot.read_bytes())
        if colours < 16:
            fail(f"the screenshot of index.html ({shot}) is blank: {colours} colours")
        print(f"docs_check: index.html screenshot ({shot}): {colours} colours OK")
    print(f"docs_check: {len(PAGES)} pages rendered")


def main() -> int:
    args = sys.argv[1:]
    options = {a for a in args if a.startswith("--")}
    rest = [a for a in args if not a.startswith("--")]
    if len(rest) != 1 or options - {"--complete", "--render"}:
        print(__doc__.rsplit("Usage: ", 1)[1].strip(), file=sys.stderr)
        return 2
    docs_dir = Path(rest[0]).resolve()
    if not (docs_dir / "html" / "index.html").is_file():
        fail(f"no {docs_dir / 'html' / 'index.html'}: run `./x docs` first")
    if not options or "--complete" in options:
        check_complete(docs_dir)
    if not options or "--render" in options:
        check_render(docs_dir / "html")
    return 0


if __name__ == "__main__":
    sys.exit(main())
