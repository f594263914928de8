# SPDX-License-Identifier: BSD-3-Clause
"""The appliance and the soft PBox answer with the same bytes (one data-plane adapter core,
lib/dataplane): phub-parity runs one fixed exchange of two ranks against phub-pbox in a virtual
rack, then against phub-soft-pbox (2 data ports, as the rack's PBox has 2 data lcores) on the
worker's loopback, and the two transcripts must be equal line for line: every ACK, ACKV and
MODEL (headers and payloads), the LEAVE_ACKs and the JOIN_ACKs' headers. phub-parity prints
each answer's UDP payload with what must differ normalized (a session token as its rank's
index, a CSUM answer's CRC32C, checked first, as zeros; the JOIN_ACK body, which holds the
PBox's addresses and ports, left out); addresses and UDP ports are not compared.

         R-tor: bridge br0
        +--------------+
       tp0            tw1
        |              |
  R-pbox: phub-pbox    R-w1: phub-parity -> 10.R.0.1, then phub-soft-pbox on 127.0.0.1
"""

import difflib
import os
import subprocess
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("PHUB_BUILD_DIR", os.path.join(ROOT, "build"))


def program(var, *path):
    return os.environ.get(var) or os.path.join(BUILD, *path)


def transcript(rack, server, port):
    p = rack.exec(1, program("PHUB_PARITY", "tests", "integration", "phub-parity"),
                  "--server", server, "--port", str(port), timeout=120)
    assert p.returncode == 0, "phub-parity against %s failed:\n%s" % (server, p.stderr)
    return p.stdout.splitlines()


def test_parity(rack):
    rack.up(1)
    pbox = transcript(rack, rack.server, 47000)
    rack.exec(1, "ip", "link", "set", "lo", "up")
    soft = subprocess.Popen(["ip", "netns", "exec", rack.ns(1),
                             program("PHUB_SOFT_PBOX", "tests", "support", "phub-soft-pbox"),
                             "--port", "47000", "--lcores", "2"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(0.5)
        assert soft.poll() is None, "phub-soft-pbox did not start: " + soft.stderr.read()
        mine = transcript(rack, "127.0.0.1", 47000)
    finally:
        soft.terminate()
        soft.wait()
    answers = sum(1 for line in pbox if line.split(": ", 1)[1].startswith("to "))
    print("phub-pbox: %d lines, %d answers; phub-soft-pbox: %d lines" %
          (len(pbox), answers, len(mine)))
    assert answers >= 30, "too few answers to compare:\n" + "\n".join(pbox)
    assert not any("BAD_CRC" in line for line in pbox + mine), "an answer's CRC32C was wrong"
    assert pbox == mine, "the two PBoxes answered differently:\n" + "\n".join(
        line[:200] for line in difflib.unified_diff(pbox, mine, "phub-pbox", "phub-soft-pbox",
                                                   lineterm=""))
