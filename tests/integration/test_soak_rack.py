# SPDX-License-Identifier: BSD-3-Clause
"""Soak (meson: soak): jobs join and leave one PBox again and again (two phub-bench jobs at a
time, a new job name each round), and after every round, once nothing is in flight: every
model exact, no job left on the PBox, its DPDK heap back to the bytes and blocks it had before
the first job, its resident memory flat after the first round, and its counters consistent
(pushes = workers x segments optimized; segments optimized and pushes grown by exactly what
the round's jobs did).

                     R-tor: bridge br0
         +--------------+-----------+-----------+-----------+
        tp0            tw1         tw2         tw3         tw4
         |              |           |           |           |
  R-pbox: phub-pbox    R-w1        R-w2        R-w3        R-w4
                       job "a" of each round    job "b" of each round

meson runs 8 rounds (about half a minute); the long run, by hand as root:

  PHUB_SOAK_DURATION=180 python3 -m pytest tests/integration/test_soak_rack.py
"""

import os
import time

from phubrack.rack import MIXED, expect, rss_kb
from phubrack.rackconfig import key_segments

RACK_PREFIX = "pf"
RACK_IDS = (150, 100)
EXACT = ('r["verified"]', 'r["bitwise"]')
ROUNDS = int(os.environ.get("PHUB_SOAK_ROUNDS") or 8)
DURATION = int(os.environ.get("PHUB_SOAK_DURATION") or 0)
# Both jobs: 2 workers, SGD; a, 6 keys of 20,000 elements (342 segments); b, the mixed layout
# of odd key sizes (200 segments). ITERATIONS each, plus the initial-model round.
ITERATIONS = 5


def state(rack):
    """What the PBox says now: stats, jobs, heap, and its resident set in kB."""
    s = rack.telemetry("/phub/stats", "/phub/jobs", "/eal/heap_info,0")
    assert {"/phub/stats", "/phub/jobs", "/eal/heap_info"} <= set(s), \
        "the PBox's telemetry did not answer: %s" % s
    s["rss_kb"] = rss_kb(rack.pbox_pid())
    return s


def check_round(rnd, first, prev, now):
    """The PBox is back where it was after round RND; one line of figures."""
    st, h0, h = now["/phub/stats"], first["/eal/heap_info"], now["/eal/heap_info"]
    segments = (6 * key_segments(20000) + sum(map(key_segments, MIXED))) * (ITERATIONS + 1)
    grown = st["segments_optimized"] - prev["/phub/stats"]["segments_optimized"]
    pushed = st["pushes"] - prev["/phub/stats"]["pushes"]
    checks = {
        "no job left": now["/phub/jobs"] == {},
        "heap bytes as at start": h["Alloc_size"] == h0["Alloc_size"],
        "heap blocks as at start": h["Alloc_count"] == h0["Alloc_count"],
        "pushes = 2 x segments optimized": st["pushes"] == 2 * st["segments_optimized"],
        "segments optimized grew by %d" % segments: grown == segments,
        "pushes grew by %d" % (2 * segments): pushed == 2 * segments,
        "nothing lost in the PBox": st["tx_dropped"] == 0 and st["encode_errors"] == 0,
    }
    # Resident memory: pages of the EAL's memory and of the pools are touched once; after the
    # first round it must not keep growing (1 MB of slack for the allocator and telemetry).
    if rnd > 1:
        checks["resident memory flat"] = now["rss_kb"] <= prev["rss_kb"] + 1024
    bad = [k for k, ok in checks.items() if not ok]
    print("round %d: heap %d B in %d blocks (start %d B in %d), RSS %d kB (start %d), "
          "segments optimized %d (+%d), pushes %d (+%d)" % (
              rnd, h["Alloc_size"], h["Alloc_count"], h0["Alloc_size"], h0["Alloc_count"],
              now["rss_kb"], first["rss_kb"], st["segments_optimized"], grown, st["pushes"],
              pushed))
    assert not bad, "round %d: the PBox is not back where it was: %s" % (rnd, ", ".join(bad))


def test_soak(rack):
    rack.up(4)
    prefix_b = rack.netns_alias("jb", 3, 4)
    mixed = rack.layout(MIXED)
    first = prev = state(rack)
    start = time.monotonic()
    rounds = 1000000 if DURATION else ROUNDS
    rnd = 0
    while rnd < rounds and not (DURATION and time.monotonic() - start >= DURATION):
        rnd += 1
        a = rack.bench_bg(2, "--connect-timeout-ms", 60000, "--job", "soak-%d-a" % rnd,
                          "--nonce", rnd * 7919, "--keys", 6, "--key-elems", 20000,
                          "--optimizer", "sgd", "--iterations", ITERATIONS, name="a%d" % rnd,
                          bench_timeout=100)
        b = rack.bench_bg(2, "--connect-timeout-ms", 60000, "--job", "soak-%d-b" % rnd,
                          "--nonce", rnd * 104729, "--layout", mixed, "--optimizer", "sgd",
                          "--iterations", ITERATIONS, name="b%d" % rnd, prefix=prefix_b,
                          bench_timeout=100)
        for run in (a, b):
            run.wait(200)
            expect(run.report(), *EXACT)
        # LEAVE is answered before the job is freed: give the main lcore a moment.
        for _ in range(10):
            now = state(rack)
            if now["/phub/jobs"] == {}:
                break
            time.sleep(0.2)
        check_round(rnd, first, prev, now)
        prev = now
    print("soak: %d rounds, %d jobs in %.0f s" % (rnd, rnd * 2, time.monotonic() - start))
    assert rnd >= 2, "fewer than 2 rounds ran"
