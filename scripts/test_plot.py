#!/usr/bin/env python3
"""Checks that scripts/plot.py never loses a figure of BENCHMARKS.md.

Each test copies plot.py, BENCHMARKS.md and docs/bench/ into a scratch
directory, puts fake bench results (or none) under its target/, runs the
script there and compares the files. Standard library only:

    python3 scripts/test_plot.py        # exits non-zero if a test fails
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
START, END = "<!-- bench-table:start -->", "<!-- bench-table:end -->"

# Every criterion figure the results table is made of: group -> bench ids.
CRITERION = {
    "spawn_join_100k": ["gofer/outside", "gofer/inside_task", "tokio/inside_task", "may/outside"],
    "yield_pingpong": ["gofer", "tokio", "may"],
    "throughput": ["gofer/1", "tokio/1", "may/1", "gofer/2", "tokio/2", "may/2"],
    "rendezvous": ["gofer", "gofer_select", "crossbeam_threads"],
    "bounded1": ["gofer", "tokio_mpsc", "tokio_oneshot", "may_mpsc", "crossbeam_threads"],
    "mutex_uncontended": ["gofer", "parking_lot", "std"],
    "mutex_contended": ["gofer/4_tasks", "gofer/4_threads", "parking_lot/4_threads",
                        "std/4_threads"],
}
MILLION_CASES = ["gofer_dense_100k", "gofer_dense_1m", "gofer_guarded_30k", "may_30k"]
RESCUE_CASES = ["gofer_kernel", "may_kernel", "gofer_cpu", "may_cpu"]


def section(text):
    i, j = text.index(START), text.index(END)
    return text[i:j]


def outside(text):
    i, j = text.index(START), text.index(END)
    return text[:i] + text[j:]


def results_rows(text):
    """The rows of the generated results table."""
    part = section(text).split("### Results (medians)")[1].split("### Goals")[0]
    return [line for line in part.splitlines() if line.startswith("|")][2:]


def by_scenario(rows):
    """Results rows grouped by scenario title (the first cell of its first row)."""
    out, title = {}, None
    for row in rows:
        first = row.strip("|").split("|")[0].strip()
        if first:
            title = first
        out.setdefault(title, []).append(row)
    return out


def goal_rows(text):
    part = section(text).split("### Goals")[1]
    return [line for line in part.splitlines() if line.startswith("|")][2:]


def extra_lines(text):
    part = section(text).split("### Results (medians)")[1].split("### Goals")[0]
    return [line for line in part.splitlines() if line.startswith("- ")]


class Scratch:
    """A copy of the files plot.py reads and writes."""

    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="gofer-plot-test-"))
        (self.dir / "scripts").mkdir()
        shutil.copy(REPO / "scripts" / "plot.py", self.dir / "scripts" / "plot.py")
        shutil.copy(REPO / "BENCHMARKS.md", self.dir / "BENCHMARKS.md")
        shutil.copytree(REPO / "docs" / "bench", self.dir / "docs" / "bench")
        self.target = self.dir / "target"

    def close(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def benchmarks(self):
        return (self.dir / "BENCHMARKS.md").read_text(encoding="utf-8")

    def chart(self, key):
        return (self.dir / "docs" / "bench" / f"{key}.svg").read_text(encoding="utf-8")

    def snapshot(self):
        """Every file's bytes, by path relative to the scratch directory."""
        return {p.relative_to(self.dir): p.read_bytes()
                for p in self.dir.rglob("*") if p.is_file() and "target" not in p.parts}

    def criterion(self, group, bench, ns_per_element, elements=1):
        d = self.target / "criterion" / group / bench.replace("/", "_") / "new"
        d.mkdir(parents=True, exist_ok=True)
        (d / "benchmark.json").write_text(json.dumps({
            "group_id": group, "function_id": bench, "value_str": None,
            "throughput": {"Elements": elements}}))
        (d / "estimates.json").write_text(json.dumps(
            {"median": {"point_estimate": ns_per_element * elements}}))

    def summary(self, name, data):
        d = self.target / "gofer-bench"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{name}.json").write_text(json.dumps(data))

    def full_run(self, scale=1.0):
        """A result for every figure of the table, 'scale' times a base value."""
        for gi, (group, benches) in enumerate(CRITERION.items()):
            for bi, bench in enumerate(benches):
                self.criterion(group, bench, scale * (10 * (gi + 1) + bi + 0.5), elements=10)
        self.summary("million", {"cases": {
            k: {"n": 1000, "rss_per_task_bytes": scale * (4000 + i),
                "spawn_park_ns": scale * 1000 * (1000 + i), "wake_join_ns": scale * 1000 * (500 + i)}
            for i, k in enumerate(MILLION_CASES)},
            "guarded_ceiling": {"max_map_count": 65530, "ran": 30717, "stack_exhausted": True,
                                "starved": 2, "error": "no stack"}})
        self.summary("blocking", {"idle_cpu_percent": 0.0123, "rescue": {
            k: {"p50_ns": scale * 1e6 * (1 + i), "p99_ns": scale * 1e6 * (2 + i)}
            for i, k in enumerate(RESCUE_CASES)}})

    def run(self):
        env = dict(os.environ)
        env.pop("CARGO_TARGET_DIR", None)
        p = subprocess.run([sys.executable, str(self.dir / "scripts" / "plot.py")],
                           capture_output=True, text=True, env=env, timeout=120)
        if p.returncode != 0:
            raise AssertionError(f"plot.py failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
        leftovers = [p.name for p in self.dir.rglob("*.tmp")]
        if leftovers:
            raise AssertionError(f"temporary files left behind: {leftovers}")
        return p


class PlotKeepsData(unittest.TestCase):
    def setUp(self):
        self.s = Scratch()
        self.before = self.s.benchmarks()

    def tearDown(self):
        self.s.close()

    def test_without_results_nothing_is_written(self):
        files = self.s.snapshot()
        p = self.s.run()
        self.assertEqual(self.s.snapshot(), files, "a file changed")
        self.assertIn("left as they are", p.stderr)

    def test_results_of_benches_outside_the_table_write_nothing(self):
        self.s.criterion("fiber", "gofer", 11.5)
        files = self.s.snapshot()
        p = self.s.run()
        self.assertEqual(self.s.snapshot(), files, "a file changed")
        self.assertIn("left as they are", p.stderr)

    def test_one_new_result_changes_only_its_row(self):
        self.s.criterion("bounded1", "tokio_mpsc", 300.0)
        p = self.s.run()
        after = self.s.benchmarks()
        self.assertEqual(outside(after), outside(self.before), "text outside the markers changed")
        old_rows, new_rows = results_rows(self.before), results_rows(after)
        self.assertEqual(len(new_rows), len(old_rows))
        changed = [(a, b) for a, b in zip(old_rows, new_rows) if a != b]
        self.assertEqual(len(changed), 1, changed)
        self.assertIn("tokio mpsc(1), current_thread", changed[0][0])
        # Its gofer figure is from an earlier run: no ratio across runs.
        self.assertEqual(changed[0][1], "|  |  | tokio mpsc(1), current_thread | 300 |  |")
        self.assertEqual(goal_rows(after), goal_rows(self.before))
        self.assertEqual(extra_lines(after), extra_lines(self.before))
        self.assertIn("Not measured in this run, kept as they were", section(after))
        self.assertIn("kept as they were", p.stderr)
        # The chart shows the new bar and keeps the others.
        chart = self.s.chart("bounded1")
        self.assertIn(">300<", chart)
        self.assertIn("may mpsc, 1 worker", chart)
        table_md = (self.s.dir / "docs" / "bench" / "table.md").read_text(encoding="utf-8")
        self.assertEqual(section(after), START + "\n" + table_md)

    def test_a_full_run_replaces_every_row(self):
        self.s.full_run()
        self.s.run()
        after = self.s.benchmarks()
        self.assertEqual(outside(after), outside(self.before))
        self.assertNotIn("kept as they were", section(after))
        new_rows = results_rows(after)
        self.assertEqual(len(new_rows), len(results_rows(self.before)))
        old_set = set(results_rows(self.before))
        # Every measured row is new; only reference rows may equal the old ones
        # (their ratio changes with gofer's figure, so none should).
        self.assertFalse(old_set & set(new_rows), old_set & set(new_rows))
        self.assertTrue(all("not measured" not in g for g in goal_rows(after)))
        self.assertIn("- Idle scheduler (2 Processers + Dispatcher, after running tasks): 0.012 %",
                      section(after))

    def test_a_second_run_with_the_same_results_changes_nothing(self):
        self.s.full_run()
        self.s.run()
        first = self.s.snapshot()
        self.s.run()
        self.assertEqual(self.s.snapshot(), first)

    def test_a_second_partial_run_with_the_same_results_changes_nothing(self):
        self.s.criterion("bounded1", "tokio_mpsc", 300.0)
        self.s.run()
        first = self.s.snapshot()
        self.s.run()
        self.assertEqual(self.s.snapshot(), first)

    def test_a_partial_run_keeps_the_rows_of_the_benches_it_did_not_run(self):
        self.s.full_run()
        self.s.run()
        full = self.s.benchmarks()
        shutil.rmtree(self.s.target)
        for bench in CRITERION["yield_pingpong"]:
            self.s.criterion("yield_pingpong", bench, 99.0)
        self.s.run()
        after = self.s.benchmarks()
        old, new = by_scenario(results_rows(full)), by_scenario(results_rows(after))
        self.assertEqual(list(old), list(new))
        for title in old:
            if not title.startswith("Yield ping-pong"):
                self.assertEqual(old[title], new[title], title)
        title = next(t for t in new if t.startswith("Yield ping-pong"))
        changed = [b for a, b in zip(old[title], new[title]) if a != b]
        # The three measured rows, and the two reference rows whose ratio
        # divides the new gofer figure.
        self.assertEqual(len(changed), 5, changed)
        self.assertIn("| **gofer** | 99.0 | 1 |", new[title][0])
        goals = dict((re.split(r"\s*\|\s*", g)[1], g) for g in goal_rows(after))
        self.assertIn("99.0 ns", goals["yield ≤ 12 ns"])
        self.assertEqual([g for g in goal_rows(after) if "yield ≤ 12" not in g],
                         [g for g in goal_rows(full) if "yield ≤ 12" not in g])

    def test_rows_the_script_does_not_make_are_kept(self):
        text = self.before.replace(
            "|  |  | tokio oneshot replies |",
            "|  |  | some other channel | 999 | 0.12 |\n|  |  | tokio oneshot replies |", 1)
        (self.s.dir / "BENCHMARKS.md").write_text(text, encoding="utf-8")
        self.s.full_run()
        p = self.s.run()
        self.assertIn("|  |  | some other channel | 999 | 0.12 |", self.s.benchmarks())
        self.assertIn("some other channel", p.stderr)


class ServerPlotsTest(unittest.TestCase):
    """scripts/server_plots.py draws what the server scripts wrote, and
    leaves its charts alone when BENCHMARKS.md has none of it."""

    HTTP = """<!-- http-bench:start -->
| connections | wrk threads | server | requests/s | p99 latency | server CPU | CPU per request | errors | load (1 min) |
|---:|---:|---|---:|---:|---:|---:|---:|---:|
| 100 | 1 | gofer | 1234 | 1.00 ms | 90 % | 4.25 us | 0 | 1.0 |
| 100 | 1 | tokio | 2345 | 1.00 ms | 90 % | 5.50 us | 0 | 1.0 |
| 100 | 2 | gofer | 9999 | 1.00 ms | 90 % | 7.75 us | 0 | 1.0 |

| connections | server | round trips/s | p50 | p99 | server CPU | CPU per round trip | errors |
|---:|---|---:|---:|---:|---:|---:|---:|
| 100 | gofer | 3456 | 0.1ms | 1.0ms | 90 % | 3.70us | 0 |
<!-- http-bench:end -->
<!-- redis-bench:start -->
| clients | pipeline | test | redis-server req/s | gofer req/s | gofer ÷ redis | p50 / p99 ms, redis | p50 / p99 ms, gofer | server CPU µs/req, redis | gofer |
|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|
| 50 | 1 | SET | 100 | 400 | 4.00 | 0 / 0 | 0 / 0 | 1 | 1 |
| 50 | 1 | GET | 100 | 100 | 1.00 | 0 / 0 | 0 / 0 | 1 | 1 |
<!-- redis-bench:end -->
"""

    def setUp(self):
        self.dir = Path(tempfile.mkdtemp(prefix="gofer-server-plots-test-"))
        (self.dir / "scripts").mkdir()
        for name in ("plot.py", "server_plots.py"):
            shutil.copy(REPO / "scripts" / name, self.dir / "scripts" / name)

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def run_it(self, text):
        (self.dir / "BENCHMARKS.md").write_text(text, encoding="utf-8")
        return subprocess.run([sys.executable, str(self.dir / "scripts" / "server_plots.py")],
                              capture_output=True, text=True, check=True)

    def chart(self, key):
        return (self.dir / "docs" / "bench" / f"{key}.svg").read_text(encoding="utf-8")

    def test_the_tables_become_charts(self):
        self.run_it("# Benchmarks\n\n" + self.HTTP)
        rps = self.chart("http_rps")
        # The least wrk thread count only: the -t2 row is left out.
        self.assertIn(">1,234<", rps)
        self.assertIn(">2,345<", rps)
        self.assertNotIn("9,999", rps)
        self.assertIn(">4.25<", self.chart("http_cpu"))
        self.assertIn(">3,456<", self.chart("echo"))
        # Geometric means per cell: redis-server 100, gofer 200.
        redis = self.chart("redis")
        self.assertIn(">200<", redis)
        self.assertIn(">100<", redis)

    def test_no_tables_no_charts(self):
        p = self.run_it("# Benchmarks\n\nnothing generated here\n")
        self.assertFalse((self.dir / "docs" / "bench").exists())
        self.assertIn("no chart written", p.stderr)


class MdSectionTest(unittest.TestCase):
    """scripts/md_section.py replaces only its block, or appends one."""

    def test_replace_then_append(self):
        d = Path(tempfile.mkdtemp(prefix="gofer-md-section-test-"))
        try:
            (d / "scripts").mkdir()
            for name in ("plot.py", "md_section.py"):
                shutil.copy(REPO / "scripts" / name, d / "scripts" / name)
            doc = d / "BENCHMARKS.md"
            doc.write_text("a\n<!-- x:start -->\nold\n<!-- x:end -->\nb\n", encoding="utf-8")

            def run(name, block):
                subprocess.run([sys.executable, str(d / "scripts" / "md_section.py"), name, "New"],
                               input=block, text=True, capture_output=True, check=True)

            run("x", "new\n")
            self.assertEqual(doc.read_text(), "a\n<!-- x:start -->\nnew\n<!-- x:end -->\nb\n")
            run("y", "more")
            self.assertEqual(doc.read_text(), "a\n<!-- x:start -->\nnew\n<!-- x:end -->\nb\n\n"
                                              "## New\n\n<!-- y:start -->\nmore\n<!-- y:end -->\n")
        finally:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    unittest.main(verbosity=2)
