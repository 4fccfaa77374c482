#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The headers as doxygen reads them (`./x docs` runs this, then doxygen on its output): the
internals kept out of the API reference, but not the public members the internals carry.

Every ``namespace ...detail {`` block (``detail``, ``asyncband::mpsc::detail``,
``bridge_detail``...) is wrapped in ``\\cond`` ... ``\\endcond``, so doxygen never sees it,
except for the *carriers*: the detail classes whose public members are part of a public type,

- bases of a public class (``class latch : public detail::wait_functions<latch>``), and
- classes a public alias names (``using sender = detail::bounded_sender<...>``),

and, transitively, the public bases of a carrier (bounded_sender -> sender_handle). A
carrier keeps its doc comment and its definition; its ``protected:`` sections read as
``private:`` (nobody derives from these classes), so that doxygen, which shows no private
members, shows none of them either. Public pages then list the inherited members inline
(INLINE_INHERITED_MEMB), and doxygen warns about any of them that is undocumented.

The carriers are found in every header at each run, so a new public type built on a detail
class needs no configuration. Markers go at the ends of existing lines: the line numbers in
doxygen's warnings stay those of the header. (A copy of the tree rather than doxygen's
FILTER_PATTERNS: doxygen would start this script twice per header, and Python's start-up
alone made that half a minute.)

It also lists, in OUT_DIR/documented.tsv, every declaration with a /// comment that doxygen
must show (public, and not hidden in a detail namespace), for docs_check.py --complete:
doxygen drops some without a warning (the members of an undocumented namespace, the macros of
an undocumented file, the members after an unparenthesised trailing requires-clause).

Usage: doxygen_filter.py INCLUDE_DIR OUT_DIR
  writes every INCLUDE_DIR/**/*.hpp to the same path under OUT_DIR, filtered, and
  OUT_DIR/documented.tsv (scope, name, file:line per line)
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

NAMESPACE = re.compile(r"^\s*namespace\s+((?:\w+::)*\w+)\s*\{")
DETAIL = re.compile(r"(^|::|_)detail$")
CLASS_HEAD = re.compile(r"^\s*(?:template\s*<.*>\s*)?(class|struct)\s+"
                        r"(?:\[\[[^\]]*\]\]\s*)?(\w+)\b")
ALIAS = re.compile(r"^\s*using\s+\w+\s*=\s*(?:typename\s+)?((?:\w+::)*\w+)")
DOCUMENTED = "documented.tsv"
COND, ENDCOND = " /** \\cond */", "/** \\endcond */ "


def code_of(line: str, in_comment: bool) -> tuple[str, bool]:
    """The line without comments and literals (their braces do not count); and whether a
    /* comment is still open at its end."""
    if not in_comment and not any(c in line for c in "/\"'"):
        return line, False  # most lines
    out, i, n = [], 0, len(line)
    while i < n:
        if in_comment:
            end = line.find("*/", i)
            if end < 0:
                return "".join(out), True
            in_comment, i = False, end + 2
        elif line.startswith("//", i):
            break
        elif line.startswith("/*", i):
            in_comment, i = True, i + 2
        elif line[i] in "\"'":
            quote, i = line[i], i + 1
            while i < n and line[i] != quote:
                i += 2 if line[i] == "\\" else 1
            i += 1
            out.append(" ")
        else:
            out.append(line[i])
            i += 1
    return "".join(out), in_comment


def strip_template_args(text: str) -> str:
    previous = None
    while previous != text:
        previous, text = text, re.sub(r"<[^<>]*>", "", text)
    return text


@dataclass
class ClassDef:
    name: str
    in_detail: bool
    bases: list[str]  # public bases, qualified as written, template arguments dropped
    first: int  # first line shown for a carrier: its doc comment, template<>, head
    nested: bool = False  # in a class rather than a namespace
    last: int = -1  # the line with the closing brace


@dataclass
class Documented:
    """A declaration with a /// comment right above it, in a public part of a class or
    namespace: doxygen must show it."""

    scope: str  # the innermost enclosing namespace or class, unqualified ("*": a macro)
    name: str
    line: int
    visible: bool  # not private/protected, nor in a class that is
    detail_class: str | None  # the namespace-scope class it is in, when in a detail namespace
    in_detail: bool


@dataclass
class Scope:
    kind: str  # file, namespace, class
    depth: int  # brace depth inside it
    name: str
    detail: bool  # a detail namespace, or in one
    visible: bool  # what is declared here now is public (classes: public access, visible class)
    what: object = None  # class: its ClassDef; outermost detail namespace: the line it opens on
    detail_class: str | None = None


@dataclass
class Scan:
    classes: list[ClassDef] = field(default_factory=list)
    aliases: list[str] = field(default_factory=list)  # public aliases' targets
    detail_open: dict[int, int] = field(default_factory=dict)  # open line -> close line
    documented: list[Documented] = field(default_factory=list)


def public_bases(clause: str) -> list[str]:
    """Public bases in a base clause (the text after the class name's ':')."""
    bases = []
    for part in strip_template_args(clause).split(","):
        words = part.split()
        if not words or "private" in words or "protected" in words:
            continue
        if words[0] == "public" or len(words) == 1:
            bases.append(words[-1])
    return bases


def declared_name(text: str) -> str | None:
    """The name a declaration (its text up to a `(`, `{`, `;` or `=`) declares; None for what
    the completeness check leaves out (friends, operators, destructors, namespaces)."""
    text = re.sub(r"\[\[.*?\]\]", "", text)
    text = re.sub(r"\b(decltype|alignas|noexcept)\s*\((?:[^()]|\([^()]*\))*\)", "", text).strip()
    if re.match(r"^(friend|namespace|static_assert)\b", text) or "operator" in text:
        return None
    for pattern in (r"^(?:class|struct|union)\s+(\w+)", r"^enum\s+(?:class\s+|struct\s+)?(\w+)",
                    r"^using\s+(\w+)\s*=", r"^concept\s+(\w+)"):
        m = re.match(pattern, text)
        if m:
            return m.group(1)
    if text.startswith("using"):
        return None
    pointer = re.search(r"\(\s*\*\s*(\w+)\s*\)\s*\(", text)  # a function pointer: void (*fn)(...)
    if pointer:
        return pointer.group(1)
    cut = min((i for i in (text.find(c) for c in "({;=") if i >= 0), default=len(text))
    words = re.findall(r"~?\w+", strip_template_args(text[:cut]))
    return words[-1] if words and not words[-1].startswith("~") else None


def scan(lines: list[str]) -> Scan:
    """Classes and public aliases, detail blocks and where each ends, and the documented
    declarations."""
    result = Scan()
    scopes = [Scope("file", 0, "", False, True)]
    depth, in_comment, head, head_first = 0, False, None, 0
    documented, in_template, in_requires, decl, decl_line = False, False, False, None, 0
    conditions: list[bool] = []  # #if blocks: True for the ASYNCBAND_TESTING-only ones
    for number, line in enumerate(lines):
        stripped = line.strip()
        directive = re.match(r"^#\s*(if|ifdef|ifndef|else|elif|endif)\b(.*)", stripped)
        if directive:
            kind, rest = directive.groups()
            if kind.startswith("if"):
                conditions.append(kind == "ifdef" and rest.strip() == "ASYNCBAND_TESTING")
            elif kind == "endif" and conditions:
                conditions.pop()
            elif conditions:
                conditions[-1] = False
        testing_only = any(conditions)
        code, in_comment = code_of(line, in_comment)
        top = scopes[-1]
        at_scope = depth == top.depth
        opened = None
        access = top.kind == "class" and re.match(r"^\s*(public|private|protected)\s*:", code)
        if at_scope and access:
            top.visible = access.group(1) == "public" and scopes[-2].visible
        # A /// block (not `///<` after a member, nor a group's `/// @}`) documents what follows.
        if at_scope and stripped.startswith("///") and not stripped.startswith("///<"):
            documented = stripped not in ("/// @}", "///@}")
        elif stripped.startswith("#"):
            macro = re.match(r"^#\s*define\s+(\w+)", stripped)
            if macro and documented and not testing_only:
                result.documented.append(
                    Documented("*", macro.group(1), number + 1, True, None, False))
            documented = False
        elif at_scope and head is None and code.strip() and not testing_only and not access:
            if decl is None and (in_template or re.match(r"^\s*template\s*<", code)):
                in_template = not code.rstrip().endswith(">")
            elif decl is None and (in_requires or re.match(r"^\s*requires\b", code)):
                in_requires = code.rstrip().endswith(("&&", "||"))
            else:
                if decl is None:
                    decl, decl_line = "", number
                decl += " " + code
                cls = CLASS_HEAD.match(decl)
                if cls or re.search(r"[({;=]", decl):
                    name = (cls.group(2) if cls else declared_name(decl)) if documented else None
                    if name:
                        result.documented.append(Documented(
                            top.name, name, decl_line + 1, top.visible, top.detail_class,
                            top.detail))
                    documented, decl = False, None
        if at_scope and top.kind in ("file", "namespace", "class"):
            ns = NAMESPACE.match(code) if top.kind != "class" else None
            cls = CLASS_HEAD.match(code)
            alias = ALIAS.match(code)
            if ns:
                detail = top.detail or bool(DETAIL.search(ns.group(1)))
                opened = Scope("namespace", 0, ns.group(1).split("::")[-1], detail, True,
                               None if top.detail or not detail else number)
            elif cls and head is None:
                head, head_first = code, number
                # The doc comment and template<> lines just above belong to the class.
                while head_first > 0 and re.match(r"^\s*(///|template\b)", lines[head_first - 1]):
                    head_first -= 1
            elif head is None and alias and "detail::" in alias.group(1):
                if not top.detail and top.kind != "class":
                    result.aliases.append(alias.group(1))
        elif head is not None:
            head += " " + code
        if head is not None and ("{" in code or ";" in code):
            cls = CLASS_HEAD.match(head)
            text = head[: head.find("{")] if "{" in head else ""
            if text and cls and (";" not in code or code.find("{") < code.find(";")):
                rest = strip_template_args(text[cls.end():])  # result<T&> : public ...
                clause = rest.split(":", 1)[1] if re.match(r"^\s*(final\s*)?:[^:]", rest) else ""
                cd = ClassDef(cls.group(2), top.detail, public_bases(clause), head_first,
                              top.kind == "class")
                result.classes.append(cd)
                struct = cls.group(1) == "struct"
                opened = Scope("class", 0, cd.name, top.detail, top.visible and struct, cd,
                               top.detail_class or (cd.name if top.detail else None))
            head = None
        for ch in code:
            if ch == "{":
                depth += 1
                if opened is not None:
                    opened.depth = depth
                    scopes.append(opened)
                    opened = None
            elif ch == "}":
                if len(scopes) > 1 and depth == scopes[-1].depth:
                    closed = scopes.pop()
                    documented, decl = False, None
                    if closed.kind == "class":
                        closed.what.last = number
                    elif closed.what is not None:
                        result.detail_open[closed.what] = number
                depth -= 1
    return result


def find_carriers(headers: dict[Path, list[str]]) -> set[str]:
    scans = [scan(lines) for lines in headers.values()]
    classes = [c for s in scans for c in s.classes if not c.nested]
    last = lambda name: name.split("::")[-1]  # noqa: E731
    detail_names = {c.name for c in classes if c.in_detail}
    wanted = [last(a) for s in scans for a in s.aliases]
    wanted += [last(b) for c in classes if not c.in_detail for b in c.bases if "detail::" in b]
    carriers: set[str] = set()
    while wanted:
        name = wanted.pop()
        if name in carriers or name not in detail_names:
            continue
        carriers.add(name)
        wanted += [last(b) for c in classes if c.in_detail and c.name == name for b in c.bases]
    return carriers


def parenthesize_trailing_requires(lines: list[str]) -> list[str]:
    """`f() const requires C {` -> `f() const requires(C) {`. Doxygen 1.9.4 reads a requires
    clause after a template head, or a parenthesised one after a declarator, but loses the
    members after an unparenthesised trailing one (the same meaning: C is a constraint either
    way)."""
    out = list(lines)
    for i, line in enumerate(out):
        m = re.match(r"^(\s+requires)\s+([^({\s].*)$", line)
        if not m:
            continue
        previous = next((p.strip() for p in reversed(out[:i]) if p.strip()), "")
        if not re.search(r"(\)|\bconst|\bnoexcept)$", previous):  # after a template head
            continue
        out[i] = f"{m.group(1)}({m.group(2)}"
        j = i  # the clause's last line: before a `{` or `;`, on its line or the next
        while not re.search(r"[{;]\s*$", out[j]) and j + 1 < len(out):
            if out[j + 1].strip().startswith("{"):
                break
            j += 1
        end = re.search(r"\s*[{;]\s*$", out[j])
        cut = end.start() if end else len(out[j].rstrip())
        out[j] = out[j][:cut] + ")" + out[j][cut:]
    return out


def filtered(lines: list[str], carriers: set[str]) -> list[str]:
    lines = parenthesize_trailing_requires(lines)
    s = scan(lines)
    out = list(lines)
    shown = [c for c in s.classes
             if c.in_detail and not c.nested and c.name in carriers and c.last >= 0]
    for number in s.detail_open:
        out[number] += COND
    for number in s.detail_open.values():
        out[number] = ENDCOND + out[number]
    for c in shown:
        out[c.first] = ENDCOND + out[c.first]
        out[c.last] += COND
        for i in range(c.first, c.last + 1):
            out[i] = re.sub(r"^(\s*)protected:", r"\1private:", out[i])
    return out


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__.rsplit("Usage: ", 1)[1].strip(), file=sys.stderr)
        return 2
    source, target = Path(sys.argv[1]), Path(sys.argv[2])
    headers = {p.relative_to(source): p.read_text().splitlines()
               for p in sorted(source.rglob("*.hpp"))}
    carriers = find_carriers(headers)
    shown = []
    for path, lines in headers.items():
        (target / path).parent.mkdir(parents=True, exist_ok=True)
        (target / path).write_text("\n".join(filtered(lines, carriers)) + "\n")
        shown += [f"{d.scope}\t{d.name}\t{source / path}:{d.line}" for d in scan(lines).documented
                  if d.visible and (not d.in_detail or d.detail_class in carriers)]
    (target / DOCUMENTED).write_text("\n".join(shown) + "\n")
    print(f"doxygen_filter: {len(headers)} headers; detail classes shown for the public members"
          f" they carry: {', '.join(sorted(carriers))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
