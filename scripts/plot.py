#!/usr/bin/env python3
"""Turns the bench results into SVG bar charts and markdown tables.

Reads
  - criterion's output: <target>/criterion/**/new/{benchmark,estimates}.json
    (the median point estimate, divided by the bench's throughput elements
    when it declares some, so every figure is per task / per yield / per
    round trip / per lock);
  - the summaries of the table-printing benches:
    <target>/gofer-bench/{million,blocking}.json;
  - <target>/gofer-bench/run.env, written by scripts/bench.sh (date, load).

Writes
  - docs/bench/<scenario>.svg: one horizontal grouped bar chart per
    scenario, gofer beside its peers (log scale when the bars differ by more
    than 20x); reference figures for Go and libgo, which are not run here,
    are hatched;
  - docs/bench/table.md: the machine, the results table with gofer/peer
    ratios, and the goals;
  - the same fragment into BENCHMARKS.md, between the
    <!-- bench-table:start --> and <!-- bench-table:end --> markers.

Never loses a figure: a row of BENCHMARKS.md's table (or a goal, or a line
under the table) is replaced only by a new measurement of the same thing.
Rows this run did not measure (a fresh clone has no target/, and a partial
run only some benches) are kept as they are, and stderr says which; with
nothing new at all, no file is written. Files are replaced atomically (a
temporary file renamed over the old one).

<target> is $CARGO_TARGET_DIR when set, else ./target. Python 3 standard
library only. Run from anywhere: `python3 scripts/plot.py`.
"""

import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
if not TARGET.is_absolute():
    TARGET = ROOT / TARGET
CRITERION = TARGET / "criterion"
SUMMARIES = TARGET / "gofer-bench"
OUT = ROOT / "docs" / "bench"
BENCHMARKS = ROOT / "BENCHMARKS.md"
START, END = "<!-- bench-table:start -->", "<!-- bench-table:end -->"
# What scripts/bench.sh runs by default.
ALL_BENCHES = ["core", "chan", "sync", "throughput", "throughput_may1", "throughput_may2",
               "blocking", "million"]

# Reference figures measured on this machine kind for runtimes that cannot
# be built here (see BENCHMARKS.md). (low, high or None).
REF = {
    "spawn_join": [("Go", 160, 184), ("libgo", 358, None)],
    "yield": [("libgo", 13.3, None), ("Go", 56, None)],
    "rendezvous": [("Go", 216, None), ("libgo", 518, None)],
    "parked_rss": [("Go", 2714, None)],
    "rescue": [("Go", 10, 18), ("libgo", 101, None)],
}

COLORS = {
    "gofer": "#1f6fb4",
    "tokio": "#e8743b",
    "may": "#2c9f4b",
    "crossbeam": "#8e63b8",
    "parking_lot": "#8c564b",
    "std": "#7f7f7f",
    "Go": "#17a2b8",
    "libgo": "#b5a42a",
}


# --------------------------------------------------------------- loading


# When the result files read were written: the run's date when
# scripts/bench.sh did not record one.
RESULT_TIMES = []


def load_criterion():
    """{(group, bench id): (ns per element, elements)} from criterion."""
    out = {}
    if not CRITERION.is_dir():
        return out
    for bj in CRITERION.glob("**/new/benchmark.json"):
        est = bj.parent / "estimates.json"
        try:
            meta = json.loads(bj.read_text())
            median = json.loads(est.read_text())["median"]["point_estimate"]
        except (OSError, ValueError, KeyError):
            continue
        bench = meta["function_id"]
        if meta.get("value_str"):
            bench += "/" + meta["value_str"]
        elements = 1
        tp = meta.get("throughput") or {}
        if "Elements" in tp:
            elements = tp["Elements"]
        out[(meta["group_id"], bench)] = (median / elements, elements)
        RESULT_TIMES.append(est.stat().st_mtime)
    return out


def load_json(name):
    path = SUMMARIES / f"{name}.json"
    try:
        data = json.loads(path.read_text())
        RESULT_TIMES.append(path.stat().st_mtime)
        return data
    except (OSError, ValueError):
        return None


def load_run_env(name="run.env"):
    env = {}
    try:
        for line in (SUMMARIES / name).read_text().splitlines():
            if "=" in line:
                k, v = line.split("=", 1)
                env[k.strip()] = v.strip()
    except OSError:
        pass
    return env


# --------------------------------------------------------------- scenarios


def bar(label, runtime, value, kind="run", high=None, base=False):
    """One bar. `base` marks the gofer figure its group's ratios divide."""
    return {"label": label, "runtime": runtime, "value": value, "kind": kind, "high": high,
            "base": base}


def refs(key):
    return [bar(f"{n} (reference)", n, lo, "ref", hi) for n, lo, hi in REF.get(key, [])]


def build_scenarios(crit, million, blocking):
    """Each scenario: key, title, unit, fmt, groups [(label, [bars])], note."""

    def c(group, bench):
        v = crit.get((group, bench))
        return v[0] if v else None

    def cbars(group, spec):
        return [bar(label, rt, c(group, bench)) for bench, rt, label in spec]

    def plural(n):
        return f"{n} worker{'s' if n > 1 else ''}"

    sc = []
    sc.append({
        "key": "spawn_join",
        "title": "Spawn + join of 100,000 no-op tasks",
        "unit": "ns per task",
        "goal": 150,
        "groups": [("", cbars("spawn_join_100k", [
            ("gofer/outside", "gofer", "gofer, spawned from outside"),
            ("gofer/inside_task", "gofer", "gofer, spawned inside a task"),
            ("tokio/inside_task", "tokio", "tokio (2 workers), inside a task"),
            ("may/outside", "may", "may (1 worker), from outside"),
        ]) + refs("spawn_join"))],
    })
    sc.append({
        "key": "yield",
        "title": "Yield ping-pong: two tasks on one worker",
        "unit": "ns per yield",
        "goal": 12,
        "groups": [("", cbars("yield_pingpong", [
            ("gofer", "gofer", "gofer"),
            ("tokio", "tokio", "tokio current_thread"),
            ("may", "may", "may (1 worker)"),
        ]) + refs("yield"))],
    })
    sc.append({
        "key": "throughput",
        "title": "Yield throughput: 1,000 tasks yielding",
        "unit": "ns per yield (lower is better)",
        "groups": [
            (plural(n), cbars("throughput", [
                (f"gofer/{n}", "gofer", "gofer"),
                (f"tokio/{n}", "tokio",
                 "tokio current_thread" if n == 1 else "tokio multi_thread(2)"),
                (f"may/{n}", "may", "may"),
            ]))
            for n in (1, 2)
        ],
    })
    sc.append({
        "key": "rendezvous",
        "title": "Rendezvous channel ping-pong (capacity 0)",
        "unit": "ns per round trip",
        "goal": 150,
        "groups": [("", cbars("rendezvous", [
            ("gofer", "gofer", "gofer, one worker"),
            ("gofer_select", "gofer", "gofer, echo in select!"),
            ("crossbeam_threads", "crossbeam", "crossbeam-channel, 2 threads"),
        ]) + refs("rendezvous"))],
    })
    sc.append({
        "key": "bounded1",
        "title": "Channel ping-pong, capacity 1",
        "unit": "ns per round trip",
        "groups": [("", cbars("bounded1", [
            ("gofer", "gofer", "gofer, one worker"),
            ("tokio_mpsc", "tokio", "tokio mpsc(1), current_thread"),
            ("tokio_oneshot", "tokio", "tokio oneshot replies"),
            ("may_mpsc", "may", "may mpsc, 1 worker"),
            ("crossbeam_threads", "crossbeam", "crossbeam-channel, 2 threads"),
        ]))],
    })
    sc.append({
        "key": "mutex_uncontended",
        "title": "Mutex lock + unlock, uncontended",
        "unit": "ns per lock/unlock",
        "groups": [("", cbars("mutex_uncontended", [
            ("gofer", "gofer", "gofer::sync::Mutex"),
            ("parking_lot", "parking_lot", "parking_lot::Mutex"),
            ("std", "std", "std::sync::Mutex"),
        ]))],
    })
    sc.append({
        "key": "mutex_contended",
        "title": "Mutex, 4 workers on one counter",
        "unit": "ns per increment",
        "groups": [("", cbars("mutex_contended", [
            ("gofer/4_tasks", "gofer", "gofer, 4 tasks on 2 workers"),
            ("gofer/4_threads", "gofer", "gofer, 4 threads"),
            ("parking_lot/4_threads", "parking_lot", "parking_lot, 4 threads"),
            ("std/4_threads", "std", "std, 4 threads"),
        ]))],
    })

    cases = (million or {}).get("cases", {})
    million_spec = [
        ("gofer_dense_100k", "gofer", "gofer dense 16 KiB, 100k"),
        ("gofer_dense_1m", "gofer", "gofer dense 16 KiB, 1M"),
        ("gofer_guarded_30k", "gofer", "gofer guarded 256 KiB, 30k"),
        ("may_30k", "may", "may 32 KiB, 30k"),
    ]

    def mbars(field, per_task=False):
        return [bar(label, rt, mval(k, field, per_task), base=k == "gofer_dense_1m")
                for k, rt, label in million_spec]

    def mval(key, field, per_task=False):
        row = cases.get(key)
        if not row:
            return None
        v = row[field]
        return v / row["n"] if per_task else v

    sc.append({
        "key": "parked_rss",
        "title": "Memory per task parked in recv()",
        "unit": "bytes resident per task",
        "fmt": "bytes",
        "goal": 4.5 * 1024,
        "goal_label": "4.5 KiB",
        "groups": [("", mbars("rss_per_task_bytes") + refs("parked_rss"))],
    })
    sc.append({
        "key": "parked_time",
        "title": "Parking N tasks in recv() and waking them",
        "unit": "ns per task",
        "groups": [
            (glabel, mbars(field, True))
            for glabel, field in (("spawn + park", "spawn_park_ns"),
                                  ("wake (send) + join", "wake_join_ns"))
        ],
    })

    resc = (blocking or {}).get("rescue", {})

    def bval(key, q):
        row = resc.get(key)
        return row[f"{q}_ns"] / 1e6 if row else None

    sc.append({
        "key": "rescue",
        "title": "Rescue: a task queued behind a thread blocked 20 ms",
        "unit": "ms until the queued task runs",
        "groups": [
            (f"{what}, {q}", [
                bar("gofer", "gofer", bval(f"gofer_{k}", q)),
                bar("may", "may", bval(f"may_{k}", q)),
            ])
            for k, what in (("kernel", "blocked in the kernel"), ("cpu", "CPU-bound"))
            for q in ("p50", "p99")
        ] + [("reference, not run here", refs("rescue"))],
    })
    return sc


# --------------------------------------------------------------- the table as it stands


def split_row(line):
    return [c.strip() for c in line.strip().strip("|").split("|")]


def unbold(cell):
    return cell[2:-2] if cell.startswith("**") and cell.endswith("**") and len(cell) > 4 else cell


def scenario_title(cell):
    return re.sub(r"\s*\(\[chart\]\([^)]*\)\)$", "", cell)


def parse_section(text):
    """The generated section of BENCHMARKS.md as it stands.

    {"machine": [line], "scenarios": [(title, [row])], "extra": [line],
    "goals": [(goal, line)]}; a row is {"line", "cells", "name"}, `name`
    being the implementation cell without its bold marks.
    """
    old = {"machine": [], "scenarios": [], "extra": [], "goals": []}
    part, table_lines = None, 0
    for line in text.splitlines():
        if line.startswith("### "):
            part = {"### Machine and run": "machine", "### Results (medians)": "results",
                    "### Goals": "goals"}.get(line.strip())
            table_lines = 0
            continue
        if part == "machine" and line.startswith("- "):
            old["machine"].append(line)
        elif part in ("results", "goals") and line.startswith("|"):
            table_lines += 1
            if table_lines <= 2:  # the header and the alignment row
                continue
            cells = split_row(line)
            if part == "goals":
                old["goals"].append((cells[0], line))
            elif len(cells) == 5:
                if cells[0] or not old["scenarios"]:
                    old["scenarios"].append((scenario_title(cells[0]), []))
                old["scenarios"][-1][1].append({"line": line, "cells": cells,
                                                "name": unbold(cells[2])})
        elif part == "results" and line.startswith("- "):
            old["extra"].append(line)
    return old


def parse_value(text):
    """(value, high) from a median cell: "1,187", "4,422 B", "10.0–18.0"."""
    nums = re.findall(r"\d[\d,]*(?:\.\d+)?", text)
    try:
        vals = [float(n.replace(",", "")) for n in nums]
    except ValueError:
        return None, None
    if len(vals) == 1:
        return vals[0], None
    if len(vals) == 2:
        return vals[0], vals[1]
    return None, None


def is_fresh(b):
    """Measured in this run (or a reference figure), not kept from the table."""
    return b["value"] is not None and "kept" not in b


def base_of(bars):
    """The bar a group's ratios divide, if it was measured in this run.

    The one marked as base, else the first gofer bar. If that figure was kept
    from the previous table, nothing: a ratio between two runs' figures would
    pass for one run's.
    """
    runs = [b for b in bars if b["kind"] == "run"]
    spec = (next((b for b in runs if b["base"]), None)
            or next((b for b in runs if b["runtime"] == "gofer"), None))
    return spec if spec is not None and is_fresh(spec) else None


def merge_previous(sc, old, notes):
    """Keeps the previous table's rows for what this run did not measure.

    A scenario with no new measurement keeps all its rows as they were
    (`s["kept_rows"]`). In one with some, a bar without a new figure takes
    its previous row (`b["kept"]`, its value parsed back for the chart), a
    reference row is redone only if its group's gofer figure is new, and
    rows this script does not make any more are kept at the end. Appends
    what it kept to `notes`.
    """
    by_title = dict(old["scenarios"])
    for s in sc:
        rows = by_title.get(s["title"], [])
        by_name = {r["name"]: r for r in rows}
        measured = any(b["kind"] == "run" and b["value"] is not None
                       for _, bs in s["groups"] for b in bs)
        s["kept_rows"], s["extra_rows"] = [], []
        if not measured:
            s["groups"] = []
            s["kept_rows"] = rows
            if rows:
                notes.append((s["title"], "all rows"))
            continue
        used, kept_names = set(), []
        for glabel, bs in s["groups"]:
            for b in bs:
                b["name"] = b["label"] + (f" — {glabel}" if glabel else "")
                row = by_name.get(esc(b["name"]))
                if row is not None:
                    used.add(row["name"])
                if b["kind"] == "run" and b["value"] is None and row is not None:
                    b["kept"] = row["cells"]
                    b["value"], b["high"] = parse_value(row["cells"][3])
                    kept_names.append(b["name"])
        s["groups"] = [(g, [b for b in bs if b["value"] is not None or "kept" in b])
                       for g, bs in s["groups"]]
        s["groups"] = [(g, bs) for g, bs in s["groups"] if bs]
        first_base = base_of([b for _, bs in s["groups"] for b in bs])
        for _, bs in s["groups"]:
            base = base_of(bs) or first_base
            for b in bs:
                row = by_name.get(esc(b["name"]))
                if b["kind"] == "ref" and base is None and row is not None:
                    b["kept"] = row["cells"]
                    kept_names.append(b["name"])
            for b in bs:
                b["ratio_base"] = base
        s["extra_rows"] = [r for r in rows if r["name"] not in used]
        for r in s["extra_rows"]:
            print(f"plot.py: {s['title']}: the row '{r['name']}' is not one this script makes; "
                  f"kept (delete it by hand if it is obsolete)", file=sys.stderr)
        if kept_names:
            notes.append((s["title"], ", ".join(kept_names)))
    titles = {s["title"] for s in sc}
    for title, rows in old["scenarios"]:
        if title not in titles:
            sc.append({"key": None, "title": title, "groups": [], "kept_rows": rows,
                       "extra_rows": []})
            notes.append((title, "all rows (a scenario this script does not make any more)"))
    return sc


# --------------------------------------------------------------- formatting


def fmt_num(v):
    if v >= 100:
        return f"{v:,.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def fmt_value(v, s, high=None):
    if s.get("fmt") == "bytes":
        text = f"{v:,.0f} B"
        return text if high is None else f"{v:,.0f}–{high:,.0f} B"
    text = fmt_num(v)
    return text if high is None else f"{fmt_num(v)}–{fmt_num(high)}"


def esc(t):
    return t.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# --------------------------------------------------------------- SVG


def nice_ticks(hi):
    """Linear ticks from 0 to at least hi."""
    if hi <= 0:
        return [0, 1]
    raw = hi / 5
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    n = math.ceil(hi / step)
    return [i * step for i in range(n + 1)]


def svg_chart(s):
    bars = [b for _, bs in s["groups"] for b in bs]
    values = [v for b in bars for v in (b["value"], b["high"]) if v] + (
        [s["goal"]] if s.get("goal") else [])
    lo_v, hi_v = min(values), max(values)
    log = hi_v / lo_v > 20
    if log:
        lo_e, hi_e = math.floor(math.log10(lo_v)), math.ceil(math.log10(hi_v))
        if lo_v < 2 * 10 ** lo_e:  # keep the shortest bar visible
            lo_e -= 1
        if hi_e == lo_e:
            hi_e += 1
        ticks = [10 ** e for e in range(lo_e, hi_e + 1)]
        axis_lo, axis_hi = ticks[0], ticks[-1]
    else:
        ticks = nice_ticks(hi_v)
        axis_lo, axis_hi = 0, ticks[-1]

    left, plot_w, right = 250, 400, 120
    width = left + plot_w + right
    row_h, head_h, top = 22, 24, 56

    def x(v):
        if log:
            f = (math.log10(v) - math.log10(axis_lo)) / (math.log10(axis_hi) - math.log10(axis_lo))
        else:
            f = (v - axis_lo) / (axis_hi - axis_lo)
        return left + plot_w * max(0.0, min(1.0, f))

    rows, y = [], top
    for glabel, bs in s["groups"]:
        if glabel:
            rows.append(("head", glabel, y))
            y += head_h
        for b in bs:
            rows.append(("bar", b, y))
            y += row_h
        y += 6
    plot_bottom = y
    height = plot_bottom + 52

    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
         f'viewBox="0 0 {width} {height}" font-family="Helvetica, Arial, sans-serif" font-size="12">',
         '<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
         'patternTransform="rotate(45)"><rect width="6" height="6" fill="white"/>'
         '<line x1="0" y1="0" x2="0" y2="6" stroke="#555" stroke-width="2.5"/></pattern></defs>',
         f'<rect width="{width}" height="{height}" fill="white"/>',
         f'<text x="{width / 2}" y="24" text-anchor="middle" font-size="15" font-weight="bold">'
         f'{esc(s["title"])}</text>']
    for t in ticks:
        tx = x(t)
        o.append(f'<line x1="{tx:.1f}" y1="{top - 4}" x2="{tx:.1f}" y2="{plot_bottom}" '
                 f'stroke="#ddd" stroke-width="1"/>')
        if not log:
            label = fmt_value(t, s) if s.get("fmt") == "bytes" else (
                f"{t:,.0f}" if all(float(u).is_integer() for u in ticks) else f"{t:g}")
        elif t < 1:
            label = f"{t:g}"
        else:
            label = f"{t:,.0f}" if t < 1e7 else f"1e{round(math.log10(t))}"
        o.append(f'<text x="{tx:.1f}" y="{plot_bottom + 16}" text-anchor="middle" fill="#444">'
                 f'{esc(label)}</text>')
    o.append(f'<line x1="{left}" y1="{top - 4}" x2="{left}" y2="{plot_bottom}" stroke="#333"/>')
    o.append(f'<line x1="{left}" y1="{plot_bottom}" x2="{left + plot_w}" y2="{plot_bottom}" stroke="#333"/>')
    axis_title = s["unit"] + (" (log scale)" if log else "") + "; lower is better"
    if "is better" in s["unit"]:  # the unit says which way itself
        axis_title = s["unit"] + (" (log scale)" if log else "")
    o.append(f'<text x="{left + plot_w / 2}" y="{plot_bottom + 36}" text-anchor="middle" '
             f'fill="#222">{esc(axis_title)}</text>')

    if s.get("goal"):
        gx = x(s["goal"])
        o.append(f'<line x1="{gx:.1f}" y1="{top - 8}" x2="{gx:.1f}" y2="{plot_bottom}" '
                 f'stroke="#c0392b" stroke-width="1.5" stroke-dasharray="5,3"/>')
        o.append(f'<text x="{gx + 4:.1f}" y="{top - 10}" fill="#c0392b">'
                 f'goal ≤ {esc(s.get("goal_label") or fmt_value(s["goal"], s))}</text>')
    for kind, item, ry in rows:
        if kind == "head":
            o.append(f'<text x="8" y="{ry + 16}" font-weight="bold" fill="#222">{esc(item)}</text>')
            continue
        b = item
        color = COLORS.get(b["runtime"], "#999")
        x0, x1 = x(axis_lo), x(b["value"])
        bh = row_h - 6
        by = ry + 3
        o.append(f'<text x="{left - 8}" y="{by + bh - 3}" text-anchor="end" fill="#222">'
                 f'{esc(b["label"])}</text>')
        if b["kind"] == "ref":
            o.append(f'<rect x="{x0:.1f}" y="{by}" width="{max(x1 - x0, 1):.1f}" height="{bh}" '
                     f'fill="url(#hatch)" stroke="{color}" stroke-width="2" opacity="0.9"/>')
        else:
            o.append(f'<rect x="{x0:.1f}" y="{by}" width="{max(x1 - x0, 1):.1f}" height="{bh}" '
                     f'fill="{color}"/>')
        end = x1
        if b["high"]:
            x2 = x(b["high"])
            mid = by + bh / 2
            o.append(f'<line x1="{x1:.1f}" y1="{mid}" x2="{x2:.1f}" y2="{mid}" stroke="#222" stroke-width="1.5"/>')
            o.append(f'<line x1="{x2:.1f}" y1="{by + 2}" x2="{x2:.1f}" y2="{by + bh - 2}" stroke="#222" stroke-width="1.5"/>')
            end = x2
        o.append(f'<text x="{end + 5:.1f}" y="{by + bh - 3}" fill="#222" stroke="white" '
                 f'stroke-width="3" paint-order="stroke">'
                 f'{esc(fmt_value(b["value"], s, b["high"]))}</text>')
    o.append("</svg>")
    return "\n".join(o) + "\n"


# --------------------------------------------------------------- markdown


def sh(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def machine_lines(run_env, previous):
    cpu = "?"
    try:
        m = re.search(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M)
        cpu = m.group(1) if m else "?"
    except OSError:
        pass
    mem = "?"
    try:
        m = re.search(r"^MemTotal:\s*(\d+) kB", Path("/proc/meminfo").read_text(), re.M)
        mem = f"{int(m.group(1)) / 2**20:.0f} GiB" if m else "?"
    except OSError:
        pass
    maps = sh(["cat", "/proc/sys/vm/max_map_count"])
    lines = [
        f"- Machine: {os.cpu_count()} vCPU ({cpu}), {mem} RAM, Linux {platform.release()}, "
        f"`vm.max_map_count` {maps}",
        f"- Toolchain: {sh(['rustc', '--version'])}",
    ]
    if not run_env and RESULT_TIMES:
        def utc(t):
            return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t))
        lines.append(f"- Run: {utc(min(RESULT_TIMES))} to {utc(max(RESULT_TIMES))} (when the result "
                     f"files were written: the benches ran without scripts/bench.sh)")
    if run_env:
        lines.append(f"- Run: {run_env.get('started', '?')} to {run_env.get('finished', '?')}")
        lines.append(f"- Load average (1, 5, 15 min) before the run: {run_env.get('load_before', '?')}; "
                     f"after: {run_env.get('load_after', '?')}")
        ran = run_env.get("benches", "").split()
        if set(ran) != set(ALL_BENCHES):
            lines.append(f"- This run covered only: {' '.join(ran)}; the other figures come from an "
                         f"earlier run")
            if previous:
                lines.append(f"- Earlier run ({previous.get('benches', '?')}): "
                             f"{previous.get('started', '?')} to {previous.get('finished', '?')}, "
                             f"load average before {previous.get('load_before', '?')}, "
                             f"after {previous.get('load_after', '?')}")
    return lines


def ratio_text(g, v):
    if g is None or v is None or v == 0:
        return ""
    r = g / v
    return f"{r:.2f}" if r >= 0.1 else f"{r:.2g}"


def results_table(sc):
    out = ["| Scenario | Unit | Implementation | Median | gofer ÷ this |",
           "|---|---|---|---:|---:|"]
    for s in sc:
        if not s["groups"]:
            out += [r["line"] for r in s["kept_rows"]]
            continue
        cells = []
        for _, bs in s["groups"]:
            for b in bs:
                if "kept" in b:
                    cells.append(b["kept"][2:5])
                    continue
                base = b["ratio_base"]
                gofer = base["value"] if base else None
                is_base = b is base
                cell = f"**{esc(b['name'])}**" if is_base else esc(b["name"])
                ratio = "1" if is_base else ratio_text(gofer, b["value"] if not b["high"] else
                                                       (b["value"] + b["high"]) / 2)
                cells.append([cell, fmt_value(b["value"], s, b["high"]), ratio])
        cells += [r["cells"][2:5] for r in s["extra_rows"]]
        for i, (cell, median, ratio) in enumerate(cells):
            scen = f"{s['title']} ([chart](docs/bench/{s['key']}.svg))" if i == 0 else ""
            unit = s["unit"].replace(" (lower is better)", "") if i == 0 else ""
            out.append(f"| {scen} | {unit} | {cell} | {median} | {ratio} |")
    return out


def goals_table(crit, million, blocking):
    def c(group, bench):
        v = crit.get((group, bench))
        return v[0] if v else None

    rows = []

    def goal(name, measured, met):
        verdict = "—" if met is None else ("**met**" if met else "**not met**")
        rows.append((name, f"| {name} | {measured} | {verdict} |", measured != "not measured"))

    out_, in_ = c("spawn_join_100k", "gofer/outside"), c("spawn_join_100k", "gofer/inside_task")
    if out_ is not None or in_ is not None:
        parts = []
        if out_ is not None:
            parts.append(f"{out_:.0f} ns from outside ({'meets' if out_ <= 150 else 'misses'})")
        if in_ is not None:
            parts.append(f"{in_:.0f} ns inside a task ({'meets' if in_ <= 150 else 'misses'})")
        best = min(v for v in (out_, in_) if v is not None)
        goal("spawn + join ≤ 150 ns", "; ".join(parts), best <= 150)
    else:
        goal("spawn + join ≤ 150 ns", "not measured", None)

    y = c("yield_pingpong", "gofer")
    goal("yield ≤ 12 ns", f"{y:.1f} ns" if y else "not measured", (y <= 12) if y else None)

    r = c("rendezvous", "gofer")
    goal("rendezvous ping-pong ≤ 150 ns", f"{r:.0f} ns" if r else "not measured",
         (r <= 150) if r else None)

    t1, t2 = c("throughput", "gofer/1"), c("throughput", "gofer/2")
    if t1 and t2:
        goal("2-worker yield throughput ≥ 1.8 × one worker",
             f"{t1 / t2:.2f}× ({t1:.1f} → {t2:.1f} ns per yield)", t1 / t2 >= 1.8)
    else:
        goal("2-worker yield throughput ≥ 1.8 × one worker", "not measured", None)

    row = ((million or {}).get("cases") or {}).get("gofer_dense_1m")
    if row:
        b = row["rss_per_task_bytes"]
        goal("1M parked tasks ≤ 4.5 KiB each", f"{b:,.0f} B = {b / 1024:.2f} KiB", b <= 4.5 * 1024)
    else:
        goal("1M parked tasks ≤ 4.5 KiB each", "not measured", None)
    return rows


def extra_lines(crit, million, blocking):
    lines = []
    sp = []
    for rt in ("gofer", "tokio", "may"):
        a, b = crit.get(("throughput", f"{rt}/1")), crit.get(("throughput", f"{rt}/2"))
        if a and b:
            sp.append(f"{rt} {a[0] / b[0]:.2f}×")
    if sp:
        lines.append("- Two-worker speedup of yield throughput (one-worker time ÷ two-worker time): "
                     + ", ".join(sp) + ".")
    if blocking and "idle_cpu_percent" in blocking:
        lines.append(f"- Idle scheduler (2 Processers + Dispatcher, after running tasks): "
                     f"{blocking['idle_cpu_percent']:.3f} % of one core.")
    ceil = (million or {}).get("guarded_ceiling")
    if ceil:
        lines.append(
            f"- Guarded stacks past the map-count ceiling (`vm.max_map_count` {ceil['max_map_count']}): "
            f"{ceil['ran']:,} parked tasks ran, then `Builder::spawn` returned "
            f"`SpawnError::StackExhausted` ({'yes' if ceil['stack_exhausted'] else 'NO'}); "
            f"{ceil['starved']:,} tasks admitted before that got no stack and ended with a "
            f"`JoinError` (`is_stack_exhausted()`). Error text: “{ceil['error']}”")
    return lines


# The opening of each line under the results table: a line is replaced only
# by a new one with the same opening.
EXTRA_KEYS = ("- Two-worker speedup", "- Idle scheduler", "- Guarded stacks past")


def extra_key(line):
    return next((k for k in EXTRA_KEYS if line.startswith(k)), line)


def merge_lines(new, old, notes, what):
    """New (key, line) pairs, with old ones kept where no new line has their key."""
    new_keys = {k for k, _ in new}
    out, seen = [], set()
    for k, line in old:
        if k in new_keys:
            if k not in seen:
                out += [nl for nk, nl in new if nk == k]
                seen.add(k)
        else:
            out.append(line)
            notes.append((what, k.lstrip("- ")))
    out += [nl for nk, nl in new if nk not in seen]
    return out


KEPT_LINE = "- Not measured in this run, kept as they were from the previous version of this table"


def fragment(sc, crit, million, blocking, run_env, previous, old, notes):
    results = results_table(sc)
    extra = merge_lines([(extra_key(x), x) for x in extra_lines(crit, million, blocking)],
                        [(extra_key(x), x) for x in old["extra"]], notes, "lines under the table")
    new_goals = goals_table(crit, million, blocking)
    goals = merge_lines([(n, line) for n, line, measured in new_goals if measured],
                        old["goals"], notes, "goals")
    # A goal neither measured now nor in the previous table says so.
    have = {n for n, _ in old["goals"]}
    goals += [line for n, line, measured in new_goals if not measured and n not in have]
    order = [n for n, _, _ in new_goals]
    goals.sort(key=lambda line: order.index(split_row(line)[0])
               if split_row(line)[0] in order else len(order))

    parts = ["<!-- generated by scripts/plot.py from the runs of scripts/bench.sh; a row is "
             "replaced only by a new measurement -->", "", "### Machine and run", ""]
    parts += machine_lines(run_env, previous)
    if notes:
        groups = {}
        for title, what in notes:
            groups.setdefault(title, []).append(what)
        kept = "; ".join(f"{title} ({', '.join(whats)})" for title, whats in groups.items())
        old_run = next((line[len("- Run: "):] for line in old["machine"]
                        if line.startswith("- Run: ")), None)
        new_run = next((line[len("- Run: "):] for line in parts if line.startswith("- Run: ")),
                       None)
        old_kept = next((line for line in old["machine"] if line.startswith(KEPT_LINE + " (")),
                        None)
        end = old_kept.find("): ", len(KEPT_LINE)) if old_kept else -1
        if old_run is None:
            when = "`git log -p BENCHMARKS.md` says when they were measured"
        elif old_run == new_run and end > 0:
            # The same run plotted again: what it kept still comes from where it did.
            when = old_kept[len(KEPT_LINE) + 2:end]
        elif old_kept:
            when = (f"that version's run was {old_run}, and it kept some rows from earlier ones: "
                    f"`git log -p BENCHMARKS.md` says when each was measured")
        else:
            when = f"measured in the run of {old_run}"
        parts.append(f"{KEPT_LINE} ({when}): {kept}")
    parts += ["", "### Results (medians)", "",
              "Every figure is a cost (time or memory per unit), so lower is better. "
              "*gofer ÷ this* divides the group's gofer figure (bold) by each row's: "
              "below 1, gofer costs less. Reference rows (Go, libgo) were measured separately on "
              "this machine kind and are not re-run; a range is compared at its middle.", ""]
    parts += results
    if extra:
        parts += [""] + extra
    parts += ["", "### Goals", ""]
    parts += ["| Goal | Measured (gofer) | Verdict |", "|---|---|---|"] + goals
    return "\n".join(parts) + "\n"


def write_atomic(path, text):
    """Replaces `path` with `text` in one rename: a reader (or a crash) sees
    the old file or the new one, never a part."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if path.exists():
            shutil.copymode(path, tmp)
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def previous_section():
    """The generated section as it stands: BENCHMARKS.md's, else table.md."""
    if BENCHMARKS.exists():
        text = BENCHMARKS.read_text(encoding="utf-8")
        i, j = text.find(START), text.find(END)
        if 0 <= i < j:
            return text[i + len(START):j]
    try:
        return (OUT / "table.md").read_text(encoding="utf-8")
    except OSError:
        return ""


def main():
    crit = load_criterion()
    million, blocking = load_json("million"), load_json("blocking")
    run_env = load_run_env()
    old = parse_section(previous_section())
    notes = []
    sc = merge_previous(build_scenarios(crit, million, blocking), old, notes)
    fresh = [s for s in sc if any(is_fresh(b) and b["kind"] == "run"
                                  for _, bs in s["groups"] for b in bs)]
    extra_new = extra_lines(crit, million, blocking)
    goals_new = [n for n, _, measured in goals_table(crit, million, blocking) if measured]
    if not fresh and not extra_new and not goals_new:
        print(f"plot.py: no new results under {TARGET} (run scripts/bench.sh, or cargo bench, "
              f"first): BENCHMARKS.md, docs/bench/table.md and the charts are left as they are",
              file=sys.stderr)
        return
    OUT.mkdir(parents=True, exist_ok=True)
    for s in fresh:
        chart = dict(s, groups=[(g, [b for b in bs if b["value"] is not None])
                                for g, bs in s["groups"]])
        chart["groups"] = [(g, bs) for g, bs in chart["groups"] if bs]
        write_atomic(OUT / f"{s['key']}.svg", svg_chart(chart))
        print(f"wrote {(OUT / (s['key'] + '.svg')).relative_to(ROOT)}")
    frag = fragment(sc, crit, million, blocking, run_env, load_run_env("run-previous.env"), old,
                    notes)
    for title, what in notes:
        print(f"plot.py: no new result for {title}: {what}; kept as they were", file=sys.stderr)
    write_atomic(OUT / "table.md", frag)
    print(f"wrote {(OUT / 'table.md').relative_to(ROOT)}")
    if BENCHMARKS.exists():
        text = BENCHMARKS.read_text(encoding="utf-8")
        i, j = text.find(START), text.find(END)
        if i < 0 or j < i:
            print(f"plot.py: {BENCHMARKS.name}: markers {START} ... {END} not found; left alone",
                  file=sys.stderr)
        else:
            write_atomic(BENCHMARKS, text[: i + len(START)] + "\n" + frag + text[j:])
            print(f"updated {BENCHMARKS.name}")


if __name__ == "__main__":
    main()
