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

<target> is $CARGO_TARGET_DIR when set, else ./target. Python 3 standard
library only. Run from anywhere: `python3 scripts/plot.py`.
"""

import json
import math
import os
import platform
import re
import subprocess
import sys
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
    return out


def load_json(name):
    try:
        return json.loads((SUMMARIES / f"{name}.json").read_text())
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
    for s in sc:
        s["groups"] = [(g, [b for b in bars if b["value"] is not None]) for g, bars in s["groups"]]
        s["groups"] = [(g, bars) for g, bars in s["groups"] if bars]
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
    if "lower is better" in s["unit"]:
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


def base_bar(bars):
    """The bar a group's ratios divide: the one marked, else the first gofer bar."""
    return (next((b for b in bars if b["base"] and b["kind"] == "run"), None)
            or next((b for b in bars if b["runtime"] == "gofer" and b["kind"] == "run"), None))


def results_table(sc):
    out = ["| Scenario | Unit | Implementation | Median | gofer ÷ this |",
           "|---|---|---|---:|---:|"]
    for s in sc:
        first = True
        first_base = base_bar([b for _, bb in s["groups"] for b in bb])
        for glabel, bs in s["groups"]:
            # A group of references only compares with the scenario's first gofer figure.
            base = base_bar(bs) or first_base
            gofer = base["value"] if base else None
            for b in bs:
                name = b["label"] + (f" — {glabel}" if glabel else "")
                is_base = b is base
                cell = f"**{esc(name)}**" if is_base else esc(name)
                ratio = "1" if is_base else ratio_text(gofer, b["value"] if not b["high"] else
                                                       (b["value"] + b["high"]) / 2)
                scen = f"{s['title']} ([chart](docs/bench/{s['key']}.svg))" if first else ""
                unit = s["unit"].replace(" (lower is better)", "") if first else ""
                out.append(f"| {scen} | {unit} | {cell} | {fmt_value(b['value'], s, b['high'])} | {ratio} |")
                first = False
    return out


def goals_table(crit, million, blocking):
    def c(group, bench):
        v = crit.get((group, bench))
        return v[0] if v else None

    rows = []

    def goal(name, measured, met):
        verdict = "—" if met is None else ("**met**" if met else "**not met**")
        rows.append(f"| {name} | {measured} | {verdict} |")

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
    return ["| Goal | Measured (gofer) | Verdict |", "|---|---|---|"] + rows


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


def fragment(sc, crit, million, blocking, run_env, previous):
    parts = ["<!-- generated by scripts/plot.py from the last run of scripts/bench.sh; "
             "edits here are overwritten -->", "", "### Machine and run", ""]
    parts += machine_lines(run_env, previous)
    parts += ["", "### Results (medians)", "",
              "Every figure is a cost (time or memory per unit), so lower is better. "
              "*gofer ÷ this* divides the group's gofer figure (bold) by each row's: "
              "below 1, gofer costs less. Reference rows (Go, libgo) were measured separately on "
              "this machine kind and are not re-run; a range is compared at its middle.", ""]
    parts += results_table(sc)
    extra = extra_lines(crit, million, blocking)
    if extra:
        parts += [""] + extra
    parts += ["", "### Goals", ""]
    parts += goals_table(crit, million, blocking)
    return "\n".join(parts) + "\n"


def main():
    crit = load_criterion()
    million, blocking = load_json("million"), load_json("blocking")
    run_env = load_run_env()
    if not crit and not million and not blocking:
        sys.exit(f"no results under {TARGET}: run scripts/bench.sh (or cargo bench) first")
    sc = build_scenarios(crit, million, blocking)
    OUT.mkdir(parents=True, exist_ok=True)
    for s in sc:
        if any(b["kind"] == "run" for _, bs in s["groups"] for b in bs):
            (OUT / f"{s['key']}.svg").write_text(svg_chart(s))
            print(f"wrote {(OUT / (s['key'] + '.svg')).relative_to(ROOT)}")
        else:
            print(f"skipped {s['key']}: no measurement")
    frag = fragment(sc, crit, million, blocking, run_env, load_run_env("run-previous.env"))
    (OUT / "table.md").write_text(frag)
    print(f"wrote {(OUT / 'table.md').relative_to(ROOT)}")
    if BENCHMARKS.exists():
        text = BENCHMARKS.read_text()
        i, j = text.find(START), text.find(END)
        if i < 0 or j < i:
            print(f"{BENCHMARKS.name}: markers {START} ... {END} not found; left alone")
        else:
            BENCHMARKS.write_text(text[: i + len(START)] + "\n" + frag + text[j:])
            print(f"updated {BENCHMARKS.name}")


if __name__ == "__main__":
    main()
