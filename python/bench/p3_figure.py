#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""P3 at the PBox, drawn from `scripts/bench-packet-path --p3 --p3-bulk B --json FILE`.

Per key (its priority: the urgent job's 0 + key, the bulk job's base + key) the median over
runs of each run's median time from an iteration's start to the key's last MODEL, one line per
PBox set-up (off, on, hold), the urgent job left and the bulk job right: the shape of P3's
per-layer figure. Writes OUT (a PNG) for one segment size and one urgent worker count.
"""

import argparse
import json
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 (after the backend)

STYLES = ("o-", "s--", "^-", "v-", "d-")


def modes(rows):
    """(target, label) of each PBox set-up in the results: off, on, then each hold."""
    names = sorted({r["target"][3:] for r in rows},
                   key=lambda m: (m != "off", m != "on", int(m[4:] or 0) if m[:4] == "hold" else 0))
    label = {"off": "arrival order (priority_order false)", "on": "each burst in priority order"}
    return [(n, label.get(n, "held across bursts, priority_hold %s" % n[4:])) for n in names]


def per_key(rows, field):
    """The median over runs of each key's value; [] without rows."""
    cols = [r[field] if field in r else r["bulk"][field.split(".")[1]] for r in rows]
    if not cols:
        return []
    return [statistics.median_low(c[k] for c in cols) for k in range(len(cols[0]))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", help="bench-packet-path --json FILE")
    ap.add_argument("out", help="the PNG to write")
    ap.add_argument("--seg", type=int, default=8192)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--note", default="", help="a line under the figure (load, CPU shares)")
    args = ap.parse_args()

    with open(args.results) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    rows = [r for r in rows if r.get("seg") == args.seg and r.get("workers") == args.workers
            and "bulk" in r]
    if not rows:
        sys.exit("%s: no --p3-bulk rows for segment %d, W %d" % (args.results, args.seg,
                                                                  args.workers))
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=False)
    for ax, job, field in ((axes[0], "urgent job", "key_done_p50_us"),
                           (axes[1], "bulk job", "bulk.key_done_p50_us")):
        for (mode, label), style in zip(modes(rows), STYLES):
            mine = [r for r in rows if r["target"] == "p3-" + mode]
            ys = per_key(mine, field)
            if not ys:
                continue
            base = mine[0]["priority"] if job == "urgent job" else mine[0]["bulk"]["priority"]
            xs = [base + k for k in range(len(ys))]
            ax.plot(xs, [y / 1000 for y in ys], style, markersize=3, label=label)
        first = rows[0] if job == "urgent job" else rows[0]["bulk"]
        ax.set_title("%s: %d workers, window %d" % (job, first["workers"], first["window"]))
        ax.set_xlabel("PUSH priority (key; lower is needed sooner)")
        ax.set_ylabel("time to the key's last MODEL (ms)")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
    fig.suptitle("P3 at the PBox: %d-byte segments, both jobs on one saturated PBox"
                 % args.seg)
    if args.note:
        fig.text(0.01, 0.005, args.note, fontsize=7, color="0.35")
    fig.tight_layout(rect=(0, 0.03, 1, 0.96))
    fig.savefig(args.out, dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main())
