#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Copies the Markdown pages of the reference for doxygen, fixing what doxygen 1.9.4 reads apart
from GitHub, so that the originals stay written for GitHub:

- Heading ids. GitHub makes `## From plain threads: the blocking twins` the anchor
  `#from-plain-threads-the-blocking-twins`; doxygen makes none, so `[...](#anchor)` links fail.
  The copy appends `{#id}` (doxygen's heading-id syntax; GitHub would show it) to each heading.
- Links to files. A link to another page of the set becomes doxygen's `@ref` to that page's id
  (its first heading's slug; the main page's is `index`) or to the heading it names; a link to
  anything else
  (an example, a header: doxygen cannot resolve a file it does not read) keeps only its text.
- A README.md below the top level would be taken for a second main page: its copy is renamed
  (docs/bench/README.md -> docs/bench/benchmarks.md).

usage: markdown_pages.py OUT_DIR PAGE.md...   (paths relative to the repository; the first page
       is the main page and keeps its name)
"""
import os
import posixpath
import re
import sys

LINK = re.compile(r"(?<!\!)\[([^\]]+)\]\(([^)\s]+)\)")


def github_slug(title):
    slug = re.sub(r"[`*]", "", title).strip().lower()
    slug = re.sub(r"[^\w\- ]", "", slug)  # GitHub keeps letters, digits, _, - and spaces
    return slug.replace(" ", "-")


def copy_name(path, main):
    if path != main and posixpath.basename(path) == "README.md":
        return posixpath.join(posixpath.dirname(path), "benchmarks.md" if "bench" in path else "index.md")
    return path


def rewrite_links(text, page, ids, anchors):
    here = posixpath.dirname(page)

    def fix(m):
        label, target = m.group(1), m.group(2)
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            return m.group(0)
        path, _, anchor = target.partition("#")
        resolved = posixpath.normpath(posixpath.join(here, path))
        if resolved in ids:  # doxygen's own reference: a heading id is global, a page has one
            return f"[{label}](@ref {anchor if anchor in anchors else ids[resolved]})"
        return label

    return LINK.sub(fix, text)


def page_id(text):
    """The id of a page: its first heading's GitHub slug."""
    m = re.search(r"^# (.*?)\s*$", text, re.M)
    return github_slug(m.group(1)) if m else None


def with_ids(text, taken, skip_first):
    """Gives each heading its GitHub id, but the main page's title (its id is doxygen's `index`)
    and an id another heading took first (doxygen's ids are global)."""
    out, fenced, first = [], False, True
    for line in text.splitlines(keepends=True):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        m = None if fenced else re.match(r"^(#{1,6}) (.*?)\s*$", line)
        if m and "{#" not in m.group(2) and not (skip_first and first):
            slug = github_slug(m.group(2))
            if slug not in taken:
                taken.add(slug)
                line = f"{m.group(1)} {m.group(2)} {{#{slug}}}\n"
        first = first and not m
        out.append(line)
    return "".join(out)


def main(argv):
    out_dir, pages = argv[1], argv[2:]
    texts = {}
    for page in pages:
        with open(page, encoding="utf-8") as src:
            texts[page] = src.read()
    ids = {p: ("index" if p == pages[0] else page_id(t)) for p, t in texts.items()}
    taken = set()
    for page in pages:  # first every id, since links point across pages
        texts[page] = with_ids(texts[page], taken, skip_first=page == pages[0])
    for page in pages:
        text = rewrite_links(texts[page], page, ids, taken)
        target = os.path.join(out_dir, copy_name(page, pages[0]))
        os.makedirs(os.path.dirname(target) or out_dir, exist_ok=True)
        with open(target, "w", encoding="utf-8") as dst:
            dst.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
