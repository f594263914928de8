#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""The PHub paper's figures redrawn from scripts/bench-figures' raw results.

Reads DATA (workers.jsonl, chunks.jsonl, jobs.json, models.jsonl and each figure's
meta-<figure>.json), writes fig15-workers.png, fig16-chunks.png, fig18-jobs.png,
models.png and figures.md (every plotted point in a table, with the command, the load and
the PBox's CPU share) into OUT. A figure whose data is missing is left out and said so.
"""

import argparse
import json
import os
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 (after the backend)

SYSTEMS = ("phub", "ps-style", "gloo")
LABELS = {"phub": "PHub", "ps-style": "ps-style (4 MB chunks)", "gloo": "gloo, 25 MB buckets"}


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def load(data, name):
    """The figure's rows and meta, or (None, None) when it was not run."""
    path = os.path.join(data, name)
    meta_path = os.path.join(data, "meta-%s.json" % name.split(".")[0])
    if not os.path.exists(path) or not os.path.exists(meta_path):
        return None, None
    with open(meta_path) as f:
        meta = json.load(f)
    if name.endswith(".jsonl"):
        return read_jsonl(path), meta
    with open(path) as f:
        return json.load(f), meta


def caption(meta):
    q = " (quick run: fewer points)" if meta.get("quick") else ""
    return "%s, commit %s, %d CPUs, load %s%s" % (meta["date"], meta["commit"], meta["cpus"],
                                                 meta["load"], q)


def finish(fig, meta, path):
    fig.text(0.01, 0.005, caption(meta), fontsize=7, color="0.35")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def human_bytes(n):
    """4096 -> '4K', 1048576 -> '1M'."""
    for unit, size in (("M", 1 << 20), ("K", 1 << 10)):
        if n >= size and n % size == 0:
            return "%d%s" % (n // size, unit)
    return str(n)


def lines_figure(xs, series, xlabel, ylabel, title, png, meta, out, md):
    """Two lines against integer xs, from 0 up; the figure's heading in md."""
    fig, ax = plt.subplots(figsize=(6.4, 4))
    for (ys, label), style in zip(series, ("o-", "s--")):
        ax.plot(xs, ys, style, label=label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    ax.set_xticks(xs)
    ax.legend()
    ax.set_title(title)
    finish(fig, meta, os.path.join(out, png))
    md.append("### %s (%s)\n" % (title, png))
    md.append("`%s`; %s.\n" % (meta["command"], caption(meta)))


def workers_figure(rows, meta, out, md):
    """Fig 15: PUSH datagrams/s of the PBox and frames/s of testpmd against W (medians)."""
    by = {}
    for r in rows:
        rate = r.get("pushes_per_s") if r["target"] == "pbox" else r.get("rx_pps")
        by.setdefault((r["target"], r["workers"]), []).append(rate or 0)
    ws = sorted({w for _, w in by})
    pbox = [statistics.median(by.get(("pbox", w), [0])) for w in ws]
    tpmd = [statistics.median(by.get(("testpmd", w), [0])) for w in ws]
    lines_figure(ws, [([p / 1e3 for p in pbox], "phub-pbox: PUSH datagrams/s"),
                      ([t / 1e3 for t in tpmd], "testpmd macswap: frames/s")],
                 "emulated workers W (8 KB segments, one memif port, one data lcore)",
                 "thousands per second", "Packet path vs workers (PHub Fig. 15)",
                 "fig15-workers.png", meta, out, md)
    md.append("| W | PBox PUSH/s (median) | testpmd frames/s (median) | ratio |")
    md.append("|---|---|---|---|")
    for w, p, t in zip(ws, pbox, tpmd):
        md.append("| %d | %.0f | %.0f | %.2f |" % (w, p, t, p / t if t else 0))
    md.append("")


def chunks_figure(rows, meta, out, md):
    """Fig 16: job iterations/s and goodput against the chunk size."""
    rows = sorted(rows, key=lambda r: r["chunk_bytes"] if "chunk_bytes" in r else 0)
    cs = [r["chunk_bytes"] for r in rows]
    fig, ax = plt.subplots(figsize=(6.4, 4))
    ax.semilogx(cs, [r["job_iterations_per_s"] for r in rows], "o-", base=2,
                label="job iterations/s")
    ax.set_xticks(cs)
    ax.set_xticklabels([human_bytes(c) for c in cs], fontsize=8)
    ax.set_xlabel("chunk size, 16 MB model, 2 workers")
    ax.set_ylabel("job iterations/s")
    ax.set_ylim(bottom=0)
    ax2 = ax.twinx()
    ax2.semilogx(cs, [r["pbox_cpu_share"] * 100 for r in rows], "x:", base=2, color="C1",
                 label="PBox CPU %")
    ax2.set_ylabel("PBox CPU share (%)")
    ax2.set_ylim(bottom=0)
    lines = ax.get_lines() + ax2.get_lines()
    ax.legend(lines, [line.get_label() for line in lines], loc="lower center")
    ax.set_title("Chunk size sweep (PHub Fig. 16)")
    finish(fig, meta, os.path.join(out, "fig16-chunks.png"))
    md.append("### Chunk size (fig16-chunks.png)\n")
    md.append("`%s`; %s.\n" % (meta["command"], caption(meta)))
    md.append("| chunk | job it/s | goodput Gbit/s | PBox CPU | load | exact |")
    md.append("|---|---|---|---|---|---|")
    for r in rows:
        md.append("| %d | %.2f | %.2f | %.0f%% | %.2f | %s |" % (
            r["chunk_bytes"], r["job_iterations_per_s"], r["goodput_gbps"],
            r["pbox_cpu_share"] * 100, r["load"], "yes" if r["verified"] else "NO"))
    md.append("")


def jobs_figure(doc, meta, out, md):
    """Fig 18: per-job rate relative to one job alone, and the total, against jobs."""
    rows = doc["rows"]
    js = [r["jobs"] for r in rows]
    lines_figure(js, [([r["total"] for r in rows], "total exchanges/s"),
                      ([r["per_job_mean"] for r in rows], "per job (mean)")],
                 "concurrent jobs on one PBox (1 worker each)", "exchanges/s",
                 "Concurrent jobs (PHub Fig. 18)", "fig18-jobs.png", meta, out, md)
    md.append("| jobs | per job exch/s | vs one job | total | PBox ns/PUSH | exact |")
    md.append("|---|---|---|---|---|---|")
    for r in rows:
        md.append("| %d | %.1f | %.2f | %.1f | %.0f | %s |" % (
            r["jobs"], r["per_job_mean"], r["per_job_vs_first"], r["total"],
            r["pbox_ns_per_push"], "yes" if r["exact"] else "NO"))
    md.append("")


def models_figure(rows, meta, out, md):
    """Exchange time (ms) by model for each system, one panel per worker count."""
    models = list(dict.fromkeys(r["model"] for r in rows))
    ns = sorted({r["workers"] for r in rows})
    get = {(r["system"], r["model"], r["workers"]): r for r in rows}
    fig, axes = plt.subplots(1, len(ns), figsize=(5.2 * len(ns), 4), squeeze=False)
    width = 0.8 / len(SYSTEMS)
    for ax, n in zip(axes[0], ns):
        for k, system in enumerate(SYSTEMS):
            ms = [1e3 / get[(system, m, n)]["exchanges_per_s"] if (system, m, n) in get and
                  get[(system, m, n)]["exchanges_per_s"] else 0 for m in models]
            ax.bar([i + (k - 1) * width for i in range(len(models))], ms, width,
                   label=LABELS[system])
        ax.set_xticks(range(len(models)))
        ax.set_xticklabels(models)
        ax.set_ylabel("ms per exchange (lower is better)")
        ax.set_title("N = %d workers" % n)
        ax.legend(fontsize=8)
    fig.suptitle("Exchange time by model: PHub, ps-style, gloo")
    finish(fig, meta, os.path.join(out, "models.png"))
    md.append("### Exchange time by model (models.png)\n")
    md.append("`%s`; %s.\n" % (meta["command"], caption(meta)))
    md.append("| model | N | PHub ms | ps-style ms | gloo ms | PHub / gloo speed | PBox CPU "
              "(PHub) | exact |")
    md.append("|---|---|---|---|---|---|---|---|")
    for m in models:
        for n in ns:
            p, s, g = (get.get((x, m, n)) for x in SYSTEMS)

            def ms(r):
                return 1e3 / r["exchanges_per_s"] if r and r["exchanges_per_s"] else 0

            md.append("| %s | %d | %.0f | %.0f | %.0f | %.2f | %s | %s |" % (
                m, n, ms(p), ms(s), ms(g),
                p["exchanges_per_s"] / g["exchanges_per_s"] if p and g else 0,
                "%.0f%%" % (p["pbox_cpu_share"] * 100) if p else "-",
                "yes" if p and s and p["verified"] and s["verified"] else "NO"))
    md.append("")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    md = ["# Figures (made by scripts/bench-figures)", ""]
    drawn = 0
    for name, draw in (("workers.jsonl", workers_figure), ("chunks.jsonl", chunks_figure),
                       ("jobs.json", jobs_figure), ("models.jsonl", models_figure)):
        rows, meta = load(args.data, name)
        if rows is None:
            print("figures: no %s in %s: that figure is left out" % (name, args.data),
                  file=sys.stderr)
            continue
        draw(rows, meta, args.out, md)
        drawn += 1
    with open(os.path.join(args.out, "figures.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("figures: %d drawn in %s" % (drawn, args.out), file=sys.stderr)
    return 0 if drawn else 1


if __name__ == "__main__":
    sys.exit(main())
