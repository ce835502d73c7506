#!/usr/bin/env python3
"""The import graph of gofer's `src/`, by folder, and its layer check.

Reads every `src/**/*.rs`, collects what each file names of the crate
(`use crate::...`, `use super::...`, and `crate::a::b` / `super::a` paths
written in code; comments and string literals are skipped), resolves each
name to the file of the module it belongs to (a name re-exported from
`lib.rs`, such as `crate::Scheduler`, resolves to where it is defined), and
prints:

- the folder-level graph: for each top-level folder (or file) of `src/`,
  the others it imports, with the number of imports and the files making
  them;
- the cycles: among folders (any is an error), and among the files inside
  each folder (listed, allowed);
- the imports that go up the layer order: a folder importing a folder that
  ARCHITECTURE.md's tree lists after it.

The layer order is read from ARCHITECTURE.md, section "The tree": the
entries of `src/` in the order they are listed, bottom layer first
(`lib.rs`, the crate root, is left out: it re-exports every layer). Entries
on one line (`io/ net/`) share a layer.

- the files missing from their folder's table: every folder's `mod.rs`
  opens with a table of its files and subfolders, and ARCHITECTURE.md's
  tree names every entry of `src/` and of `src/runtime/`; a file or folder
  that none of them names is listed.

One upward import is allowed, by name, with its reason (`ALLOWED_UP`): the
runtime's call that keeps the hooked symbols linked. It is printed apart,
and left out of the folder graph and its cycles.

Exits 1 if an import goes up the layer order (other than the allowed one),
a cycle spans two folders, or a file is missing from its table; 0
otherwise. Standard library only:

    python3 scripts/modgraph.py            # the report
    python3 scripts/modgraph.py --edges    # also every file-level import
"""

import argparse
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"


def strip_comments_and_strings(text):
    """The code of a Rust file with comments, strings and chars blanked."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
            out.append(" ")
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and not (
            i and (text[i - 1].isalnum() or text[i - 1] == "_")
        ):
            m = re.match(r'r(#*)"', text[i:])
            end = text.find('"' + m.group(1), i + len(m.group(0)))
            i = n if end < 0 else end + 1 + len(m.group(1))
            out.append('""')
        elif c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
            out.append('""')
        elif c == "'":
            # A char literal ('a', '\n', '\u{..}') or a lifetime ('a).
            m = re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\.|[^\\'])'", text[i:])
            if m:
                i += len(m.group(0))
                out.append("' '")
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def module_path(path):
    """`src/runtime/io/uring.rs` -> ["runtime", "io", "uring"]."""
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts == ["lib"]:
        return []
    if parts[-1] == "mod":
        parts.pop()
    return parts


def unit_of(mod):
    """The top-level entry of `src/` a module lives in."""
    if not mod:
        return "lib.rs"
    if (SRC / mod[0]).is_dir():
        return mod[0] + "/"
    return mod[0] + ".rs"


USE_RE = re.compile(r"\buse\s+([^;]+);")
PATH_RE = re.compile(r"(?<![\w:])((?:crate|super|self)(?:\s*::\s*(?:super|[A-Za-z_]\w*))+)")


def expand_use_tree(tree):
    """`a::{b, c::{d as e, *}}` -> [[a, b], [a, c, d], [a, c]]."""
    tokens = re.findall(r"::|[{},*]|\w+", tree)
    pos = 0

    def parse(prefix):
        nonlocal pos
        paths = []
        cur = list(prefix)
        while pos < len(tokens):
            t = tokens[pos]
            if t == "::":
                pos += 1
            elif t == "{":
                pos += 1
                while pos < len(tokens) and tokens[pos] != "}":
                    paths += parse(cur)
                    if pos < len(tokens) and tokens[pos] == ",":
                        pos += 1
                pos += 1
                return paths
            elif t in (",", "}"):
                break
            elif t == "*":
                pos += 1
            elif t == "as":
                pos += 2
            elif t == "self":
                pos += 1
            else:
                cur.append(t)
                pos += 1
        paths.append(cur)
        return paths

    return parse([])


class Crate:
    def __init__(self):
        self.files = sorted(SRC.rglob("*.rs"))
        self.modules = {tuple(module_path(f)): f for f in self.files}
        self.code = {f: strip_comments_and_strings(f.read_text()) for f in self.files}
        self.root_names = self._root_names()

    def _root_names(self):
        """Names usable as `crate::NAME` that lib.rs re-exports or that a
        `#[macro_export]` macro defines, mapped to their module."""
        names = {}
        lib = self.code[SRC / "lib.rs"]
        for m in USE_RE.finditer(lib):
            for path in expand_use_tree(m.group(1)):
                if len(path) >= 2 and path[0] not in ("std", "core", "alloc"):
                    names[path[-1]] = self.resolve(list(path))
        for f, code in self.code.items():
            for m in re.finditer(r"#\[macro_export\][^\n]*\n(?:\s*#\[[^\]]*\]\s*)*\s*macro_rules!\s*(\w+)", code):
                names.setdefault(m.group(1), tuple(module_path(f)))
        return names

    def resolve(self, path, base=()):
        """The longest module prefix of `path` (after `crate`/`super`/`self`)."""
        mod = list(base)
        i = 0
        if path and path[0] == "crate":
            mod, i = [], 1
        while i < len(path) and path[i] in ("super", "self"):
            if path[i] == "super":
                mod = mod[:-1]
            i += 1
        rest = path[i:]
        best = tuple(mod)
        cur = list(mod)
        for name in rest:
            cur.append(name)
            if tuple(cur) in self.modules:
                best = tuple(cur)
            else:
                break
        if best == () and rest and rest[0] in getattr(self, "root_names", {}):
            return self.root_names[rest[0]]
        return best

    def imports(self):
        """(file, module imported) pairs, one per distinct pair."""
        out = defaultdict(set)
        for f, code in self.code.items():
            me = tuple(module_path(f))
            blocks = inline_modules(code)
            paths = []
            for m in USE_RE.finditer(code):
                for p in expand_use_tree(m.group(1)):
                    if p and p[0] in ("crate", "super", "self"):
                        paths.append((m.start(), p))
            for m in PATH_RE.finditer(code):
                paths.append((m.start(), [s.strip() for s in m.group(1).split("::")]))
            for at, p in paths:
                inside = [b for b in blocks if b[0] <= at < b[1]]
                if any(b[3] for b in inside):
                    continue  # test-only or loom-only code
                # `super` is relative to the innermost module, inline ones
                # (`mod imp { use super::x; }`) included.
                base = me + tuple(b[2] for b in sorted(inside))
                target = self.resolve(p, base)
                if target != me and target in self.modules:
                    out[f].add(target)
        return out


TEST_CFG = re.compile(r"#\[cfg\((?:[^\]]*\b(?:test|loom)\b)[^\]]*\)\]")


def inline_modules(code):
    """(start, end, name, test_only) of each `mod name { ... }` in code."""
    out = []
    for m in re.finditer(r"\bmod\s+(\w+)\s*\{", code):
        depth, i = 1, m.end()
        while i < len(code) and depth:
            depth += {"{": 1, "}": -1}.get(code[i], 0)
            i += 1
        # The attributes just before it.
        attrs = re.search(r"((?:#\[[^\]]*\]\s*)*)(?:pub(?:\([^)]*\))?\s+)?$", code[: m.start()])
        test_only = bool(attrs and TEST_CFG.search(attrs.group(1)))
        out.append((m.start(), i, m.group(1), test_only))
    return out


# Imports up the layer order that are there on purpose: (from file, to
# file) -> why. Each is printed under its own heading, never silently.
ALLOWED_UP = {
    ("runtime/scheduler.rs", "hooks/mod.rs"): (
        "the link anchor of the hooks: building a scheduler calls hooks::keep(), "
        "so that every program that runs tasks links the hooked symbols (the "
        "linker drops archive members nothing references, and no layer below "
        "the hooks may name them otherwise)"
    ),
}


def missing_from_tables():
    """Files and folders that their folder's table (or ARCHITECTURE's tree) omits."""
    out = []
    for d in sorted(p for p in SRC.rglob("*") if p.is_dir()):
        m = d / "mod.rs"
        if not m.exists():
            out.append(f"{d.relative_to(SRC)}/: no mod.rs")
            continue
        # The table may be module docs (`//!`) or, in a public module whose
        # docs users read, a plain comment (`//`) after them.
        docs = "\n".join(l for l in m.read_text().splitlines() if l.startswith("//"))
        for c in sorted(d.iterdir()):
            if c.name == "mod.rs":
                continue
            name = c.name + "/" if c.is_dir() else c.name
            if c.suffix != ".rs" and not c.is_dir():
                continue
            stem = c.name[:-3] if c.suffix == ".rs" else c.name
            if f"`{name}" not in docs and f"`{stem}`" not in docs:
                out.append(f"{c.relative_to(SRC)}: not in {m.relative_to(SRC)}'s table")
    text = (ROOT / "ARCHITECTURE.md").read_text()
    tree = re.search(r"## The tree\s*```text\n(.*?)```", text, re.S)
    words = set(tree.group(1).split()) if tree else set()
    for base in (SRC, SRC / "runtime"):
        for c in sorted(base.iterdir()):
            if c.name in ("mod.rs", "lib.rs"):
                continue
            name = c.name + "/" if c.is_dir() else c.name
            if name not in words:
                out.append(f"{c.relative_to(SRC)}: not in ARCHITECTURE.md's tree")
    return out


def read_layers():
    text = (ROOT / "ARCHITECTURE.md").read_text()
    m = re.search(r"## The tree\s*```text\n(.*?)```", text, re.S)
    if not m:
        sys.exit("modgraph: no ```text block under '## The tree' in ARCHITECTURE.md")
    layers = []
    in_src = False
    for line in m.group(1).splitlines():
        if line.startswith("src/"):
            in_src = True
            continue
        if not in_src:
            continue
        if line and not line.startswith(" "):
            break  # the next top-level entry (tests/, bench/)
        # An entry of src/: two spaces, then one or more names, then text.
        em = re.match(r"  ((?:[\w.]+/?\s)+)", line + " ")
        if not em or line.startswith("   "):
            continue
        names = [w for w in em.group(1).split() if w.endswith("/") or w.endswith(".rs")]
        names = [w for w in names if (SRC / w.rstrip("/")).exists() and w != "lib.rs"]
        if names:
            layers.append(names)
    return layers


def sccs(nodes, edges):
    """Tarjan's strongly connected components with more than one node."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--edges", action="store_true", help="list every file-level import")
    args = ap.parse_args()

    crate = Crate()
    imports = crate.imports()
    rel = lambda f: str(f.relative_to(SRC))

    file_edges = defaultdict(set)
    unit_edges = defaultdict(lambda: defaultdict(set))  # from -> to -> files
    allowed_edges = set()  # (from file, to file) pairs of ALLOWED_UP that occur
    for f, targets in imports.items():
        for t in targets:
            tf = crate.modules[t]
            file_edges[rel(f)].add(rel(tf))
            a, b = unit_of(module_path(f)), unit_of(list(t))
            if a != b and (rel(f), rel(tf)) not in ALLOWED_UP:
                unit_edges[a][b].add(rel(f))
            elif a != b:
                allowed_edges.add((rel(f), rel(tf)))

    print("== folder graph (an arrow: imports from)")
    for a in sorted(unit_edges):
        for b in sorted(unit_edges[a]):
            files = sorted(unit_edges[a][b])
            shown = ", ".join(files[:4]) + (f", +{len(files) - 4}" if len(files) > 4 else "")
            print(f"  {a:12} -> {b:12} {len(files):3} file(s): {shown}")

    bad = False
    print("\n== cycles between folders")
    folder_cycles = sccs(set(unit_edges), {a: set(bs) for a, bs in unit_edges.items()})
    for comp in folder_cycles:
        print("  " + " <-> ".join(comp))
        bad = True
    if not folder_cycles:
        print("  none")

    print("\n== cycles among the files of one folder")
    by_unit = defaultdict(set)
    for f in crate.files:
        by_unit[unit_of(module_path(f))].add(rel(f))
    for u in sorted(by_unit):
        inner = {f: {t for t in file_edges.get(f, ()) if t in by_unit[u]} for f in by_unit[u]}
        for comp in sccs(by_unit[u], inner):
            print(f"  {u}: " + ", ".join(comp))

    layers = read_layers()
    rank = {name: i for i, names in enumerate(layers) for name in names}
    print("\n== layer order (ARCHITECTURE.md, 'The tree'; bottom first)")
    print("  " + " < ".join(" ".join(names) for names in layers))
    print("\n== imports up the layer order")
    ups = 0
    for a in sorted(unit_edges):
        if a == "lib.rs":
            continue
        for b in sorted(unit_edges[a]):
            if a not in rank or b not in rank:
                print(f"  {a} -> {b}: not in the layer order of ARCHITECTURE.md")
                ups += 1
            elif rank[b] > rank[a]:
                files = sorted(unit_edges[a][b])
                print(f"  {a} -> {b}: {', '.join(files)}")
                ups += 1
    if not ups:
        print("  none")
    print("\n== allowed upward imports (ALLOWED_UP)")
    for f, t in sorted(allowed_edges):
        print(f"  {f} -> {t}: {ALLOWED_UP[(f, t)]}")
    if not allowed_edges:
        print("  none")
    bad = bad or ups > 0

    print("\n== files missing from their folder's table")
    missing = missing_from_tables()
    for m in missing:
        print("  " + m)
    if not missing:
        print("  none")
    bad = bad or bool(missing)

    if args.edges:
        print("\n== file imports")
        for f in sorted(file_edges):
            print(f"  {f} -> {', '.join(sorted(file_edges[f]))}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
