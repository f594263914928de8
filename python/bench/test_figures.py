#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""Unit test of figures.py (meson test figures, suite unit): synthetic results in, every PNG
and every point of figures.md out, and a figure without data left out, not invented."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

try:
    import matplotlib  # noqa: F401 (figures.py needs it)
except ImportError:
    print("SKIP: figures.py needs python3-matplotlib (scripts/setup.sh installs it)")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
META = {"date": "2026-11-26 05:00 UTC", "cpus": 2, "commit": "abc1234", "quick": False,
        "command": "cmd", "load": "0.50 .. 0.70"}


def write(d, name, rows=None, doc=None):
    with open(os.path.join(d, name), "w") as f:
        if doc is not None:
            json.dump(doc, f)
        else:
            f.write("".join(json.dumps(r) + "\n" for r in rows))
    with open(os.path.join(d, "meta-%s.json" % name.split(".")[0]), "w") as f:
        json.dump(dict(META, figure=name), f)


class FiguresTest(unittest.TestCase):
    def run_figures(self, data, out):
        return subprocess.run([sys.executable, os.path.join(HERE, "figures.py"), "--data", data,
                               "--out", out], capture_output=True, text=True)

    def test_every_figure_and_its_table(self):
        with tempfile.TemporaryDirectory() as d:
            write(d, "workers.jsonl", [
                {"target": "pbox", "workers": 1, "pushes_per_s": 100000},
                {"target": "pbox", "workers": 1, "pushes_per_s": 120000},
                {"target": "pbox", "workers": 1, "pushes_per_s": 90000},
                {"target": "testpmd", "workers": 1, "rx_pps": 200000},
                {"target": "pbox", "workers": 4, "pushes_per_s": 110000},
                {"target": "testpmd", "workers": 4, "rx_pps": 220000}])
            write(d, "chunks.jsonl", [
                {"chunk_bytes": 1048576, "job_iterations_per_s": 9.0, "goodput_gbps": 4.8,
                 "pbox_cpu_share": 0.3, "load": 1.0, "verified": True},
                {"chunk_bytes": 4096, "job_iterations_per_s": 12.5, "goodput_gbps": 6.5,
                 "pbox_cpu_share": 0.4, "load": 1.0, "verified": True}])
            write(d, "jobs.json", doc={"rows": [
                {"jobs": 1, "per_job_mean": 40.0, "per_job_vs_first": 1.0, "total": 40.0,
                 "pbox_ns_per_push": 900, "exact": True},
                {"jobs": 2, "per_job_mean": 30.0, "per_job_vs_first": 0.75, "total": 60.0,
                 "pbox_ns_per_push": 950, "exact": True}]})
            models = []
            for system, rate in (("phub", 4.0), ("ps-style", 3.2), ("gloo", 5.0)):
                models.append({"system": system, "model": "resnet50", "workers": 2,
                               "exchanges_per_s": rate, "p50_ms": 250,
                               "verified": True if system != "gloo" else None,
                               "pbox_cpu_share": 0.6 if system != "gloo" else None})
            write(d, "models.jsonl", models)
            r = self.run_figures(d, d)
            self.assertEqual(r.returncode, 0, r.stderr)
            for png in ("fig15-workers.png", "fig16-chunks.png", "fig18-jobs.png", "models.png"):
                with open(os.path.join(d, png), "rb") as f:
                    self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n", png)
            with open(os.path.join(d, "figures.md")) as f:
                md = f.read()
            # Medians, not the best run: 100000 of 90000, 100000, 120000; ratio 0.50.
            self.assertIn("| 1 | 100000 | 200000 | 0.50 |", md)
            # Rows sorted by chunk size, whatever order they were run in.
            self.assertLess(md.index("| 4096 |"), md.index("| 1048576 |"))
            self.assertIn("| 2 | 30.0 | 0.75 | 60.0 | 950 | yes |", md)
            # 250 ms, 312 ms, 200 ms per exchange; PHub at 0.80 of gloo's rate.
            self.assertIn("| resnet50 | 2 | 250 | 312 | 200 | 0.80 | 60% | yes |", md)
            self.assertIn("load 0.50 .. 0.70", md)

    def test_a_figure_without_data_is_left_out(self):
        with tempfile.TemporaryDirectory() as d:
            write(d, "jobs.json", doc={"rows": [
                {"jobs": 1, "per_job_mean": 40.0, "per_job_vs_first": 1.0, "total": 40.0,
                 "pbox_ns_per_push": 900, "exact": False}]})
            r = self.run_figures(d, d)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("no workers.jsonl", r.stderr)
            self.assertFalse(os.path.exists(os.path.join(d, "models.png")))
            with open(os.path.join(d, "figures.md")) as f:
                self.assertIn("| 1 | 40.0 | 1.00 | 40.0 | 900 | NO |", f.read())
            r = self.run_figures(os.path.join(d, "nothing"), d)
            self.assertEqual(r.returncode, 1)


def p3_row(target, workers, urgent_us, bulk_us):
    """One bench-packet-path --p3-bulk result: two keys per job."""
    return {"target": target, "seg": 8192, "workers": workers, "window": 32, "priority": 0,
            "key_done_p50_us": urgent_us,
            "bulk": {"workers": 4, "window": 64, "priority": 128, "key_done_p50_us": bulk_us}}


class P3FigureTest(unittest.TestCase):
    def run_p3(self, rows, png, *extra):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "p3.jsonl")
            with open(path, "w") as f:
                f.write("".join(json.dumps(r) + "\n" for r in rows))
            return subprocess.run([sys.executable, os.path.join(HERE, "p3_figure.py"), path, png]
                                  + list(extra), capture_output=True, text=True)

    def test_medians_per_key_and_the_png(self):
        sys.path.insert(0, HERE)
        import p3_figure
        rows = [p3_row("p3-off", 2, [900, 100], [50, 5]), p3_row("p3-off", 2, [700, 300], [70, 7]),
                p3_row("p3-off", 2, [800, 200], [60, 6])]
        self.assertEqual(p3_figure.per_key(rows, "key_done_p50_us"), [800, 200])
        self.assertEqual(p3_figure.per_key(rows, "bulk.key_done_p50_us"), [60, 6])
        self.assertEqual([m for m, _ in p3_figure.modes(
            rows + [p3_row("p3-hold512", 2, [1, 1], [1, 1]), p3_row("p3-on", 2, [1, 1], [1, 1]),
                    p3_row("p3-hold128", 2, [1, 1], [1, 1])])],
            ["off", "on", "hold128", "hold512"])
        with tempfile.TemporaryDirectory() as out:
            png = os.path.join(out, "p3.png")
            r = self.run_p3(rows + [p3_row("p3-hold128", 2, [400, 300], [90, 9])], png)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(png, "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")

    def test_no_rows_for_the_size_is_an_error_not_an_empty_plot(self):
        with tempfile.TemporaryDirectory() as out:
            png = os.path.join(out, "p3.png")
            r = self.run_p3([p3_row("p3-off", 2, [1, 1], [1, 1])], png, "--workers", "4")
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("no --p3-bulk rows for segment 8192, W 4", r.stderr)
            self.assertFalse(os.path.exists(png))


if __name__ == "__main__":
    unittest.main()
