#!/usr/bin/env python3
"""Puts a generated block into BENCHMARKS.md, for the bench scripts.

    some-command | python3 scripts/md_section.py NAME HEADING

Replaces what lies between `<!-- NAME:start -->` and `<!-- NAME:end -->`
with standard input; without those markers, appends a `## HEADING` section
holding them. Nothing else in the file is touched, and the file is replaced
in one rename (scripts/plot.py's `write_atomic`). Standard library only.
"""

import importlib.util
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "BENCHMARKS.md"


def main():
    if len(sys.argv) != 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    name, heading = sys.argv[1], sys.argv[2]
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    block = start + "\n" + sys.stdin.read().rstrip("\n") + "\n" + end
    text = DOC.read_text(encoding="utf-8")
    if start in text and end in text:
        text = re.sub(re.escape(start) + ".*?" + re.escape(end), lambda _: block, text, flags=re.S)
    else:
        text = text.rstrip("\n") + f"\n\n## {heading}\n\n" + block + "\n"
    spec = importlib.util.spec_from_file_location("plot", Path(__file__).with_name("plot.py"))
    plot = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plot)
    plot.write_atomic(DOC, text)
    print(f"== {name} written into BENCHMARKS.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
