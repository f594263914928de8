# SPDX-License-Identifier: BSD-3-Clause
"""The packet-path benchmark's floors (meson: packet-path-floor): phub-loadgen --reflect-ackv,
--reflect-acks, --reflect and --reflect-ackv --reflect-sum in one short run of
scripts/bench-packet-path beside the PBox and testpmd: every server answered, the floor summed
every datagram with no bad checksum (the script checks its counters), sent one ACK-sized frame
per W frames less one (floor-ackv far fewer), the summing floor aggregated every group of W
frames (the script checks its count), the PBox completed whole-model exchanges with ACKV and
with one ACK per PUSH, every frame sent back came back as the PUSH it was, and every generator
reported its own busy share.
"""

import json
import os
import shutil
import subprocess

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("PHUB_BUILD_DIR", os.path.join(ROOT, "build"))


def runs(text):
    """The JSON objects of bench-packet-path --json, one after another."""
    dec, out, i = json.JSONDecoder(), [], 0
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i == len(text):
            return out
        obj, i = dec.raw_decode(text, i)
        out.append(obj)


def busy(r):
    """Every generator says how busy it was (near 1.0 it may have set the rate, not the
    server)."""
    return 0 < r["generator_busy"] <= 1.01


# One run per server, each a condition on it.
CHECKS = [
    ("pbox", lambda r: r["exchanges"] > 0 and r["errors"] == 0 and r["pushes_per_s"] > 0
     and busy(r)),
    # ACKV (the default): fewer ACKs than PUSHes, most taken by MODELs of the same burst; one
    # ACK per PUSH (phub-loadgen --no-ackv, target pbox-acks) on the same PBox: every PUSH, no
    # ACKV.
    ("pbox", lambda r: r["acks"] * 2 < r["pushes"]),
    ("pbox-acks", lambda r: r["exchanges"] > 0 and r["errors"] == 0 and r["ackv"] == 0
     and r["acks"] >= r["pushes"] and busy(r)),
    # Every full-size frame a server sent back read and parsed as the PUSH it was (stale: not).
    ("testpmd", lambda r: r["rx_pps"] > 0 and r["stale"] == 0 and busy(r)),
    # W = 2: one ACK-sized frame per two frames of a worker, within what is in flight at the
    # end.
    ("floor", lambda r: r["rx_pps"] > 0 and r["acks"] > 0 and 0.45 < r["acks"] / r["rx_pkts"]
     < 0.55 and r["stale"] == 0 and busy(r)),
    ("floor-plain", lambda r: r["rx_pps"] > 0 and r["acks"] == 0 and r["stale"] == 0
     and busy(r)),
    # ACKV's floor: at most one ACK-sized frame per worker and burst, far fewer than floor's.
    ("floor-ackv", lambda r: r["rx_pps"] > 0 and r["acks"] / r["rx_pkts"] < 0.45
     and r["stale"] == 0 and busy(r)),
    # The same with the aggregation's work: the frames still come back whole, as they went.
    ("floor-ackv-sum", lambda r: r["rx_pps"] > 0 and r["acks"] / r["rx_pkts"] < 0.45
     and r["stale"] == 0 and busy(r)),
]


def test_packet_path_floor(tmp_path):
    if os.geteuid() != 0 or not shutil.which("dpdk-testpmd"):
        pytest.skip("needs root and dpdk-testpmd")
    out = tmp_path / "floor.json"
    p = subprocess.run([os.path.join(ROOT, "scripts", "bench-packet-path"), "--build", BUILD,
                        "--sizes", "1024", "--workers", "2", "--repeat", "1", "--duration", "1",
                        "--floors", "floor-ackv floor floor-plain floor-ackv-sum",
                        "--json", str(out)], timeout=240)
    assert p.returncode == 0, "bench-packet-path exited %d" % p.returncode
    results = runs(out.read_text())
    for target, cond in CHECKS:
        mine = [r for r in results if r.get("target") == target]
        assert sum(1 for r in mine if cond(r)) == 1, \
            "%s: not as it should be: %s" % (target, mine)
    print("packet-path floor: ok")
