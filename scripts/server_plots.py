#!/usr/bin/env python3
"""Charts of the server comparisons, from the tables the scripts write.

Reads the generated sections of BENCHMARKS.md:
  - <!-- http-bench:start --> ... <!-- http-bench:end -->, written by
    scripts/http_bench.sh: the wrk table (requests/s and CPU per request of
    each server at each connection count) and the echo table (round trips/s);
  - <!-- redis-bench:start --> ... <!-- redis-bench:end -->, written by
    scripts/redis_bench.sh: requests/s of redis-server and kv_server per test
    and cell.

Writes docs/bench/http_rps.svg, http_cpu.svg, echo.svg and redis.svg with
scripts/plot.py's bar charts (one group per connection count or cell, the
servers side by side). A section that is missing or has no rows leaves its
charts as they are: a chart changes only with a new run of its script.

Python 3 standard library only. Run from anywhere:
`python3 scripts/server_plots.py` (the two bench scripts run it).
"""

import importlib.util
import math
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "BENCHMARKS.md"
OUT = ROOT / "docs" / "bench"

_spec = importlib.util.spec_from_file_location("plot", Path(__file__).with_name("plot.py"))
plot = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(plot)

# Servers of the comparisons that plot.py has no colour for.
plot.COLORS.setdefault("hyper", "#c44e52")
plot.COLORS.setdefault("monoio", "#6b4c9a")
plot.COLORS.setdefault("gofer-uring", "#5fa2dd")
plot.COLORS.setdefault("redis-server", "#a83232")


def section(text, name):
    """The text between `<!-- NAME:start -->` and `<!-- NAME:end -->`."""
    m = re.search(rf"<!-- {name}:start -->(.*?)<!-- {name}:end -->", text, re.S)
    return m.group(1) if m else ""


def tables(text):
    """Every Markdown table in `text`: a list of (header cells, rows of cells)."""
    out, lines = [], text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("|") and i + 1 < len(lines) and re.match(r"\|[-:| ]+\|$", lines[i + 1]):
            head = plot.split_row(lines[i])
            rows, i = [], i + 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(plot.split_row(lines[i]))
                i += 1
            out.append((head, rows))
        else:
            i += 1
    return out


def number(cell):
    """The first number of a cell ("216,397", "4.41 us", "98 %"), or None."""
    m = re.search(r"[\d,]*\.?\d+", cell.replace("\u202f", ""))
    return float(m.group(0).replace(",", "")) if m else None


def find(tabs, first_cells):
    """The table whose header starts with `first_cells`."""
    for head, rows in tabs:
        if [h.lower() for h in head[: len(first_cells)]] == first_cells:
            return head, rows
    return None


def grouped(rows, key, runtime, value):
    """Groups of bars, in the rows' order: key(row) -> [bar per runtime]."""
    groups = {}
    for r in rows:
        v = value(r)
        if v is None:
            continue
        groups.setdefault(key(r), []).append(plot.bar(runtime(r), runtime(r), v, base=runtime(r) == "gofer"))
    return list(groups.items())


def http_charts(text):
    tabs = tables(section(text, "http-bench"))
    charts = []
    wrk = find(tabs, ["connections", "wrk threads", "server"])
    if wrk:
        head, rows = wrk
        col = {h.lower(): i for i, h in enumerate(head)}
        # One wrk thread count: the least, as BENCHMARKS.md's goals table quotes.
        threads = min(int(number(r[1])) for r in rows)
        rows = [r for r in rows if int(number(r[1])) == threads]

        def conns(r):
            return f"{r[0]} connections"

        charts.append({
            "key": "http_rps", "title": f"HTTP, wrk -t{threads}: requests/s",
            "unit": "requests/s; higher is better", "fmt": None,
            "groups": grouped(rows, conns, lambda r: r[2], lambda r: number(r[col["requests/s"]])),
        })
        charts.append({
            "key": "http_cpu", "title": f"HTTP, wrk -t{threads}: server CPU per request",
            "unit": "µs of CPU per request", "fmt": None,
            "groups": grouped(rows, conns, lambda r: r[2], lambda r: number(r[col["cpu per request"]])),
        })
    echo = find(tabs, ["connections", "server", "round trips/s"])
    if echo:
        _, rows = echo
        charts.append({
            "key": "echo", "title": "echo, 1 KiB messages: round trips/s",
            "unit": "round trips/s; higher is better", "fmt": None,
            "groups": grouped(rows, lambda r: f"{r[0]} connections", lambda r: r[1],
                              lambda r: number(r[2])),
        })
    return charts


def redis_chart(text):
    tabs = tables(section(text, "redis-bench"))
    found = find(tabs, ["clients", "pipeline", "test"])
    if not found:
        return []
    _, rows = found
    # Per cell, each server's geometric mean of requests/s over the tests.
    logs = {}
    for r in rows:
        cell = f"{r[0]} clients, -P {r[1]}"
        for server, cell_value in (("redis-server", r[3]), ("gofer", r[4])):
            v = number(cell_value)
            if v:
                logs.setdefault(cell, {}).setdefault(server, []).append(math.log(v))
    groups = [
        (cell, [plot.bar(s, s, math.exp(sum(ls) / len(ls)), base=s == "gofer") for s, ls in by.items()])
        for cell, by in logs.items()
    ]
    return [{
        "key": "redis", "title": "kv_server against redis-server (redis-benchmark)",
        "unit": "requests/s, geometric mean over the tests; higher is better", "fmt": None,
        "groups": groups,
    }]


def main():
    text = DOC.read_text(encoding="utf-8")
    charts = [c for c in http_charts(text) + redis_chart(text) if any(bs for _, bs in c["groups"])]
    if not charts:
        print("server_plots: no server table in BENCHMARKS.md, no chart written", file=sys.stderr)
        return 0
    OUT.mkdir(parents=True, exist_ok=True)
    for c in charts:
        path = OUT / f"{c['key']}.svg"
        plot.write_atomic(path, plot.svg_chart(c))
        print(f"== {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
