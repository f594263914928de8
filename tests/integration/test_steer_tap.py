# SPDX-License-Identifier: BSD-3-Clause
"""The tap steering (app/pbox/steer_tap.c, drivers-cfg/bpf/steer_tap.bpf.c), meson: steer_tap:
every datagram for UDP port base+1+k must land in Rx queue k of a net_tap port, everything else
(control port, other ports, IP fragments, ARP, ICMP, IPv6) in queue 0; then the rate.

  R-w1 10.9.0.101             R-tor                 R-pbox
  udp_send, raw    eth0 ---- tw1 [br0] tp0 ---- pv0 [pbr0] pt0 ==tap== steer_tap_check
  frames (steer_frames.py)                                      DPDK net_tap0, Q Rx queues,
                                                                steering: 47001+k -> queue k

PHUB_STEER_QUEUES (default 4) sets Q. Takes about 15 s; the rate phase loads both CPUs 3 s.
"""

import collections
import os
import subprocess
import sys
import time

import pytest

from phubrack import rack as rack_mod
from phubrack.rack import wait_until

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("PHUB_BUILD_DIR", os.path.join(HERE, "..", "..", "build"))
CHECK = os.environ.get("PHUB_STEER_TAP_CHECK") or os.path.join(BUILD, "tests", "integration",
                                                               "steer_tap_check")
VRACK = os.environ.get("PHUB_VRACK") or os.path.join(HERE, "..", "..", "scripts", "virtual-rack")
UDP_SEND = os.environ.get("PHUB_UDP_SEND") or os.path.join(BUILD, "tests", "integration",
                                                           "udp_send")
QUEUES = int(os.environ.get("PHUB_STEER_QUEUES") or 4)
BASE = 47000
RACK_ID = 9
PBOX_IP = "10.%d.0.1" % RACK_ID
PER_PORT = 200  # paced datagrams per data port
PER_KIND = 20   # raw frames per data port and kind of tag
PORT_SPAN = 64  # the ports steer_tap_check counts one by one, from BASE


@pytest.fixture
def rack():
    """Rack st<pid> of id 9, a worker and a PBox namespace with one net_tap port's worth of
    plumbing: no PBox, steer_tap_check takes its place."""
    why = rack_mod.can_run()
    if why:
        pytest.skip(why)
    r = rack_mod.Rack("st%d" % os.getpid(), RACK_ID, VRACK, None, None)
    try:
        r.plumb(1, "--ports", 1, "--lcores", QUEUES, "--driver", "tap")
        yield r
    finally:
        r.close()


class Receiver:
    """steer_tap_check on a new net_tap port pt0 in the PBox namespace, steering attached, pt0
    in the rack; mac is its port's."""

    def __init__(self, rack, name, *args):
        self.rack = rack
        self.run = rack.start(["ip", "netns", "exec", rack.ns("pbox"), CHECK, "--no-pci",
                               "--no-huge", "-m", 256, "--file-prefix", "phub-" + rack.name,
                               "--lcores", "0@(0-%d)" % (os.cpu_count() - 1),
                               "--vdev=net_tap0,iface=pt0", "--", "--queues", QUEUES, "--base",
                               BASE, "--iface", "pt0", "--seconds", 60] + list(args), name,
                              "steer_tap_check", out_suffix=".log")
        ready = wait_until(lambda: self.line("READY") or not self.run.alive(), 20, 0.1)
        assert self.line("READY"), "steer_tap_check did not start %s:\n%s%s" % (
            " ".join(args), self.out(), self.run.stderr())
        assert ready
        self.mac = self.line("READY").split()[4]
        p = rack._vrack("attach-tap", "--name", rack.name, "--timeout", 10)
        assert p.returncode == 0, "attach-tap: " + p.stderr
        # Nobody answers ARP in this test: the worker is told the DPDK port's MAC.
        rack.exec(1, "ip", "neigh", "replace", PBOX_IP, "lladdr", self.mac, "dev", "eth0",
                  "nud", "permanent", check=True)

    def out(self):
        return self.run.stdout()

    def line(self, word):
        return next((line for line in self.out().splitlines() if line.startswith(word)), None)

    def stop(self):
        """SIGTERM, up to 10 s for its counters, then its output."""
        self.run.proc.terminate()
        try:
            self.run.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.run.proc.kill()
            self.run.proc.wait()
        return self.out()


def verify(recv_log, sent_log=None, have_raw=False):
    """What is wrong in the counters of RECV_LOG: every datagram on the right queue and no bad
    UDP checksum; with SENT_LOG (udp_send's "port P sent N" lines) also enough of everything
    sent arrived."""
    bad = []
    got, kind, csum = collections.Counter(), collections.Counter(), 0
    for f in (line.split() for line in recv_log.splitlines()):
        if f[:1] != ["queue"]:
            continue
        q = int(f[1])
        if f[2] == "udp":
            port, tagged, n = int(f[3]), int(f[5]), int(f[7])
            want = port - BASE - 1 if BASE < port <= BASE + QUEUES else 0
            if q != want:
                bad.append("%d datagram(s) for port %d (vlan %d) in queue %d, not %d"
                           % (n, port, tagged, q, want))
            got[port, tagged] += n
            csum += int(f[9])
        else:
            if q != 0:
                bad.append("%s %s frame(s) in queue %d, not 0" % (f[4], f[2], q))
            kind[f[2]] += int(f[4])
    if csum:
        bad.append("%d datagram(s) with a bad UDP checksum" % csum)
    if sent_log is None:
        return bad
    sent = collections.Counter()
    for f in (line.split() for line in sent_log.splitlines()):
        if f[:1] == ["port"]:
            sent[int(f[1])] += int(f[3])
    for port, n_sent in sent.items():
        # Ports past the counted span are only "udp-other".
        n = got[port, 0] if BASE <= port < BASE + PORT_SPAN else kind["udp-other"]
        if n < n_sent * 0.9:
            bad.append("port %d: %d of %d datagrams arrived" % (port, n, n_sent))
    for k in range(QUEUES if have_raw else 0):
        if got[BASE + 1 + k, 1] < 2 * PER_KIND * 0.9:
            bad.append("port %d: %d of %d VLAN-tagged frames arrived"
                       % (BASE + 1 + k, got[BASE + 1 + k, 1], 2 * PER_KIND))
    for k in ("frag", "arp", "icmp", "ipv6") if have_raw else ("frag",):
        if kind[k] == 0:
            bad.append("no %s frame arrived" % k)
    return bad


def udp_send(rack, *args):
    p = rack.exec(1, UDP_SEND, "-d", PBOX_IP, *map(str, args), timeout=60)
    assert p.returncode == 0, "udp_send %s: %s" % (" ".join(map(str, args)), p.stderr)
    return p.stdout


def test_steer_tap(rack):
    # --- phase 1: where each kind of frame lands ---
    recv = Receiver(rack, "steer", "--api-checks")
    api = [line for line in recv.out().splitlines() if line.startswith("api-check")]
    print("\n".join(api))
    print("steer_tap_check ready: net_tap0 (pt0), %d Rx queues, MAC %s" % (QUEUES, recv.mac))
    data_ports = "%d-%d" % (BASE + 1, BASE + QUEUES)
    sent = udp_send(rack, "-p", data_ports, "-n", PER_PORT, "-r", 20000)
    # The control port, the first port past the data ports, a port far off.
    sent += udp_send(rack, "-p", "%d,%d,5000" % (BASE, BASE + QUEUES + 1), "-n", 50, "-r", 20000)
    # 12000-byte datagrams at MTU 9000: two IPv4 fragments each (not counted as sent to a port).
    udp_send(rack, "-p", BASE + 1, "-n", 20, "-s", 12000, "-r", 2000)
    p = rack.exec(1, sys.executable, os.path.join(HERE, "steer_frames.py"), recv.mac, PBOX_IP,
                  str(BASE), str(QUEUES), str(PER_KIND), timeout=60)
    assert p.returncode == 0, "steer_frames.py: " + p.stderr
    time.sleep(1)
    out = recv.stop()
    print("datagrams sent:\n" + "\n".join("  " + line for line in sent.splitlines()
                                          if line.startswith("port")))
    print("received (queue, kind, port, VLAN-tagged, count):\n" + "\n".join(
        "  " + line for line in out.splitlines() if line.startswith(("queue", "summary"))))
    assert recv.line("summary"), "steer_tap_check printed no summary:\n" + recv.run.stderr()
    assert all(" ok: " in line for line in api) and api, "the steering API's checks: %s" % api
    bad = verify(out, sent, have_raw=True)
    assert not bad, "steering:\n  " + "\n  ".join(bad)
    print("ok   every datagram for port %d+k landed in queue k, the rest in queue 0"
          % (BASE + 1))

    # --- phase 2: rate through the tap with steering, a sender as fast as it can for 2 s ---
    recv = Receiver(rack, "rate", "--busy")
    rate_sent = udp_send(rack, "-p", data_ports, "-t", 2, "-s", 1000)
    time.sleep(0.5)
    out = recv.stop()
    summary = (recv.line("summary") or "").split()
    n_sent = next((line.split()[1] for line in rate_sent.splitlines()
                   if line.startswith("sent")), "?")
    print("rate: %s datagrams/s of 1000 bytes received through the tap with steering (%s "
          "received of %s sent in 2 s; a kernel sender on the other CPU)"
          % (summary[8] if len(summary) > 8 else "?", summary[2] if len(summary) > 2 else "?",
             n_sent))
    bad = verify(out)
    assert not bad, "steering under load: a datagram in the wrong queue:\n  " + "\n  ".join(bad)
