#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""Unit test of cpu_window.py (meson test cpu_window, suite unit): a window's CPU seconds from
a synthetic record, interpolated between samples; an instant outside the record is an error,
never a guess; and the sampler's own lines on this machine."""

import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import cpu_window  # noqa: E402

T = cpu_window.TICK


class Window(unittest.TestCase):
    # monotonic, busy, idle, irq, process A, process B (cumulative ticks)
    ROWS = [[10.0, 0, 0, 0, 0, 0],
            [11.0, 2 * T, 0, T // 2, T, 0],
            [12.0, 3 * T, T, T, T + T // 2, T // 4]]

    def test_whole_samples(self):
        w = cpu_window.window(self.ROWS, 10.0, 12.0)
        self.assertAlmostEqual(w["wall_s"], 2.0)
        self.assertAlmostEqual(w["busy_s"], 3.0)
        self.assertAlmostEqual(w["idle_s"], 1.0)
        self.assertAlmostEqual(w["irq_s"], 1.0)
        self.assertEqual(len(w["processes_s"]), 2)
        self.assertAlmostEqual(w["processes_s"][0], 1.5)
        self.assertAlmostEqual(w["processes_s"][1], 0.25)

    def test_interpolated(self):
        # Half of the first second (1 busy s) and half of the second (0.5 busy s).
        w = cpu_window.window(self.ROWS, 10.5, 11.5)
        self.assertAlmostEqual(w["busy_s"], 1.5)
        self.assertAlmostEqual(w["processes_s"][0], 0.75)

    def test_outside_the_record(self):
        with self.assertRaises(ValueError):
            cpu_window.window(self.ROWS, 9.0, 11.0)
        with self.assertRaises(ValueError):
            cpu_window.window(self.ROWS, 11.0, 12.5)

    def test_load_drops_cut_lines(self):
        with tempfile.NamedTemporaryFile("w", delete=False) as f:
            f.write("1.0 1 2 3 4\n2.0 2 3 4 5\n3.0 3 4\n")
        try:
            self.assertEqual(cpu_window.load(f.name), [[1.0, 1, 2, 3, 4], [2.0, 2, 3, 4, 5]])
        finally:
            os.unlink(f.name)

    def test_sampler(self):
        # The sampler watching this process (through a PID file) and one that does not exist.
        with tempfile.TemporaryDirectory() as d:
            me, gone = os.path.join(d, "me.pid"), os.path.join(d, "gone.pid")
            with open(me, "w") as f:
                f.write("%d\n" % os.getpid())
            out = os.path.join(d, "samples")
            with open(out, "w") as f:
                p = subprocess.Popen([sys.executable, os.path.join(HERE, "cpu_window.py"),
                                      "sample", me, gone], stdout=f)
            # The sampler's first line before the busy spell: on a loaded machine its start
            # may take longer than the spell, which it would then not see.
            t0 = time.monotonic()
            while time.monotonic() - t0 < 30:
                with open(out) as f:
                    if f.read().count("\n") >= 1:
                        break
                time.sleep(0.02)
            busy_from = time.process_time()
            t0 = time.monotonic()
            while time.process_time() - busy_from < 0.3 and time.monotonic() - t0 < 10:
                pass  # busy: this process's ticks must grow
            time.sleep(0.2)
            p.terminate()
            p.wait()
            rows = cpu_window.load(out)
            self.assertGreaterEqual(len(rows), 3)
            w = cpu_window.window(rows, rows[0][0], rows[-1][0])
            self.assertGreater(w["processes_s"][0], 0.1)
            self.assertEqual(w["processes_s"][1], 0)
            self.assertGreater(w["busy_s"], 0.1)

    def test_sleep_cost(self):
        # Every sleep lasts at least what it asked; its CPU is some, and less than its wall time
        # (a thread that burned its sleep would not be sleeping).
        out = subprocess.run([sys.executable, os.path.join(HERE, "cpu_window.py"), "sleep-cost"],
                             capture_output=True, text=True, check=True).stdout
        c = json.loads(out)
        self.assertEqual(c["samples"], 2000)
        self.assertGreaterEqual(c["wall_us"], c["sleep_us"])
        self.assertGreaterEqual(c["cpu_us"], 0)
        self.assertLess(c["cpu_us"], c["wall_us"])


if __name__ == "__main__":
    unittest.main()
