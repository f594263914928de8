# SPDX-License-Identifier: BSD-3-Clause
"""Where the machine's CPU went during a benchmark's timed window.

The benchmarks run PHub's or gloo's workers, the PBoxes and the virtual links on the same few
CPUs, so a figure only means something beside what those CPUs did while it was measured.
`sample` runs beside a benchmark and prints, every 50 ms on CLOCK_MONOTONIC, the machine's
cumulative CPU ticks (busy, idle, interrupts) and each watched process's (user + system);
`window()` turns two instants of that record into CPU seconds, interpolated, so that a
benchmark's JSON report (timed_from_monotonic_s, timed_to_monotonic_s) finds the CPU of exactly
its timed exchanges.

    python3 cpu_window.py sample PIDFILE... > samples     # until killed
    python3 cpu_window.py window samples T0 T1            # one JSON object
    python3 cpu_window.py sleep-cost                      # one JSON object

`sleep-cost` measures what blocking costs on this machine: a thread that sleeps when it has
nothing to do (a PBox's data lcore under the adaptive idle policy, libphub's progress thread in
ppoll) pays it at every wake-up. It differs by an order of magnitude between hosts (a
paravirtualised guest traps every timer and context switch), and with it the CPU an iteration
of a job on shared CPUs takes.
"""

import json
import os
import resource
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")
PERIOD_S = 0.05


def machine_ticks():
    """Cumulative (busy, idle, irq + softirq) ticks of all CPUs (/proc/stat's first line)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = v
    return user + nice + system + irq + softirq + steal, idle + iowait, irq + softirq


def process_ticks(pidfile):
    """User + system ticks of the process whose PID the file holds; 0 while there is none."""
    try:
        with open(pidfile) as f:
            pid = int(f.read().split()[0])
        with open(f"/proc/{pid}/stat") as f:
            p = f.read().rsplit(")", 1)[1].split()
        return int(p[11]) + int(p[12])
    except (OSError, ValueError, IndexError):
        return 0


def sample(pidfiles, out=sys.stdout):
    while True:
        busy, idle, irq = machine_ticks()
        procs = " ".join(str(process_ticks(p)) for p in pidfiles)
        print(f"{time.monotonic():.4f} {busy} {idle} {irq} {procs}".rstrip(), file=out,
              flush=True)
        time.sleep(PERIOD_S)


def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            try:
                rows.append([float(x) for x in line.split()])
            except ValueError:
                continue
    # A line cut short by the sampler's end has fewer fields than the others.
    width = max((len(r) for r in rows), default=0)
    return [r for r in rows if len(r) == width]


def at(rows, t):
    """The cumulative ticks at instant t, interpolated between the two samples around it."""
    for a, b in zip(rows, rows[1:]):
        if a[0] <= t <= b[0]:
            f = (t - a[0]) / (b[0] - a[0]) if b[0] > a[0] else 0
            return [x + f * (y - x) for x, y in zip(a[1:], b[1:])]
    raise ValueError("no CPU samples around %.3f (samples %s to %s)" % (
        t, rows[0][0] if rows else "-", rows[-1][0] if rows else "-"))


def window(rows, t0, t1):
    """CPU seconds between t0 and t1: machine busy, idle, irq, and each process's."""
    c0, c1 = at(rows, t0), at(rows, t1)
    d = [(b - a) / TICK for a, b in zip(c0, c1)]
    return {"wall_s": t1 - t0, "ncpu": os.cpu_count(), "busy_s": d[0], "idle_s": d[1],
            "irq_s": d[2], "processes_s": d[3:]}


def sleep_cost(n=2000, sleep_s=1e-6):
    """Wall and CPU microseconds of one sleep of sleep_s, the mean of n."""
    def cpu():
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime
    t0, c0 = time.monotonic(), cpu()
    for _ in range(n):
        time.sleep(sleep_s)
    t1, c1 = time.monotonic(), cpu()
    return {"sleep_us": sleep_s * 1e6, "wall_us": round((t1 - t0) / n * 1e6, 1),
            "cpu_us": round((c1 - c0) / n * 1e6, 2), "samples": n}


def main(argv):
    if len(argv) >= 2 and argv[1] == "sample":
        sample(argv[2:])
        return 0
    if len(argv) == 2 and argv[1] == "sleep-cost":
        print(json.dumps(sleep_cost()))
        return 0
    if len(argv) == 5 and argv[1] == "window":
        print(json.dumps(window(load(argv[2]), float(argv[3]), float(argv[4]))))
        return 0
    print(__doc__.strip(), file=sys.stderr)
    return 2


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except KeyboardInterrupt:
        sys.exit(0)
    except BrokenPipeError:
        sys.exit(0)
