# SPDX-License-Identifier: BSD-3-Clause
"""scripts/virtual-rack itself, with no PBox (meson: virtual_rack): links, addresses, MTU,
checksum offload, impairment (loss, and delay and reordering through the delay line), the
PBox config, attach-tap, status, exec, refusals and down.

                    R-tor: br0
       +-----------+-----------+-----------+
      tp0         tp1         tw1         tw2   (tw1: 50% loss both ways, then off;
                                                 w1's eth0: delay, reordering, then off)
       |           |           |           |
      pv0         pv1         eth0        eth0
       |           |          R-w1        R-w2
     pbr0        pbr1      10.77.0.101  10.77.0.102
       |  R-pbox   |
      pt0 (a tap made by the test, as net_tap would)

The tap rack's tests share one rack (vr<pid>, id 77) and run in the order written: the loss
`up --netem` set is measured before anything turns it off, and down comes last. The af_packet
rack (va<pid>, id 5) is another.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from phubrack import rack as rack_mod

HERE = os.path.dirname(os.path.abspath(__file__))
VRACK = os.environ.get("PHUB_VRACK") or os.path.join(HERE, "..", "..", "scripts", "virtual-rack")
TAP = "vr%d" % os.getpid()
AFP = "va%d" % os.getpid()


def vrack(*args, env=None):
    """scripts/virtual-rack ARGS, its output captured."""
    return subprocess.run([VRACK] + [str(a) for a in args], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, **(env or {})))


def sh(*cmd):
    """CMD's standard output (it must succeed)."""
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def namespaces(prefix):
    """The network namespaces whose names start with PREFIX."""
    return [line.split()[0] for line in sh("ip", "netns", "list").splitlines()
            if line.startswith(prefix)]


def rack_config(name):
    """The PBox config virtual-rack wrote for rack NAME (the state file's config=)."""
    with open(os.path.join(rack_mod.STATE_ROOT, name, "state")) as f:
        path = dict(line.rstrip("\n").split("=", 1) for line in f if "=" in line)["config"]
    with open(path) as f:
        return json.load(f)


def data_lcores(n):
    """The EAL lcores of a rack with N data lcores: one per CPU, then lcore@CPU."""
    ncpu = os.cpu_count()
    return [0] + [i if i < ncpu else "%d@%d" % (i, i % ncpu) for i in range(1, n + 1)]


def mac(r, who, dev="eth0"):
    return re.search(r"link/ether (\S+)", r.exec(who, "ip", "-o", "link", "show", dev,
                                                  check=True).stdout).group(1)


def has_ethtool():
    if shutil.which("ethtool") is None:
        pytest.skip("ethtool not installed")


@pytest.fixture(scope="module")
def tap_rack():
    """A tap rack: 2 workers, 2 ports, 2 data lcores, id 77, 50% loss on worker 1."""
    why = rack_mod.can_run()
    if why:
        pytest.skip(why)
    r = rack_mod.Rack(TAP, 77, VRACK, None, None)
    try:
        r.plumb(2, "--ports", 2, "--lcores", 2, "--netem", "w1:loss 50%")
        yield r
    finally:
        r.close()


def test_namespaces(tap_rack):
    for who in ("tor", "pbox", 1, 2):
        assert tap_rack.exec(who, "true").returncode == 0, "no namespace " + tap_rack.ns(who)


def test_worker_addresses(tap_rack):
    for w in (1, 2):
        out = sh("ip", "-n", tap_rack.ns(w), "-4", "-o", "addr", "show", "eth0")
        assert " 10.77.0.10%d/24 " % w in out, out


def test_pbox_namespace_has_no_ipv4(tap_rack):
    out = sh("ip", "-n", tap_rack.ns("pbox"), "-4", "-o", "addr", "show")
    assert not [line for line in out.splitlines() if " lo " not in line and "inet" in line], out


def test_tor_links_mtu_9000(tap_rack):
    out = sh("ip", "-n", tap_rack.ns("tor"), "-o", "link", "show")
    bad = [line for line in out.splitlines() if " lo:" not in line and "mtu 9000 " not in line]
    assert not bad, bad


def test_pbox_bridges(tap_rack):
    for p in (0, 1):
        out = sh("ip", "-n", tap_rack.ns("pbox"), "-o", "link", "show", "pv%d" % p)
        assert "master pbr%d" % p in out, out


def test_workers_tx_csum_off(tap_rack):
    has_ethtool()
    out = tap_rack.exec(2, "ethtool", "-k", "eth0", check=True).stdout
    assert re.search(r"^tx-checksumming: off", out, re.M), out


def test_config(tap_rack):
    # The exact schema for this rack.
    c = rack_config(TAP)
    assert set(c) == {"eal", "ports", "udp_base_port", "chunk_bytes", "idle", "jobs",
                      "checkpoint", "telemetry"}, c
    assert c["eal"] == {"lcores": data_lcores(2), "main_lcore": 0, "memory_mb": 2048,
                        "no_huge": True, "file_prefix": "phub-" + TAP, "extra_args": []}, c["eal"]
    assert len(c["ports"]) == 2
    for p, port in enumerate(c["ports"]):
        assert port == {"name": "p%d" % p, "device": "net_tap%d,iface=pt%d" % (p, p),
                        "driver": "tap", "ipv4": "10.77.0.%d/24" % (p + 1), "mtu": 1500,
                        "rx_desc": 1024, "tx_desc": 1024, "lcores": [1, 2]}, port
    assert c["udp_base_port"] == 47000 and c["chunk_bytes"] == 32768
    assert c["idle"] == {"policy": "adaptive", "spin_polls": 64, "max_sleep_us": 200}
    assert c["jobs"] == [] and c["telemetry"] == {"enabled": True}
    # The rack's own checkpoints, gone with the rack.
    assert c["checkpoint"] == {"dir": "%s/%s/checkpoints" % (rack_mod.STATE_ROOT, TAP),
                               "interval_iterations": 100}, c["checkpoint"]


def test_up_of_existing_rack_refused(tap_rack):
    assert vrack("up", "--name", TAP).returncode != 0


def test_status(tap_rack):
    out = vrack("status", "--name", TAP).stdout
    assert "no process runs in %s-pbox" % TAP in out, out


def test_exec(tap_rack):
    out = vrack("exec", "--name", TAP, "--worker", 2, "--", "ip", "-4", "-o", "addr", "show",
                "eth0").stdout
    assert "10.77.0.102" in out, out


def udp_noports(r, w):
    """Datagrams worker W received for a port nobody listens on (Udp NoPorts)."""
    lines = [line.split() for line in r.exec(w, "cat", "/proc/net/snmp",
                                             check=True).stdout.splitlines()
             if line.startswith("Udp:")]
    return int(dict(zip(lines[0], lines[1]))["NoPorts"])


def blast_to_w1(r, count):
    """COUNT datagrams worker 2 -> worker 1's port 9: how many worker 1 received."""
    before = udp_noports(r, 1)
    r.probe(2, "udp-blast", "10.77.0.101", 9, count, check=True)
    time.sleep(0.2)
    return udp_noports(r, 1) - before


def test_loss_50pct(tap_rack):
    # Worker 2 -> worker 1 crosses tw1's egress (worker 1's "rx"): half the datagrams are
    # lost. A static neighbour entry, since lost ARP would drop more than the loss rate says.
    tap_rack.exec(2, "ip", "neigh", "replace", "10.77.0.101", "lladdr", mac(tap_rack, 1), "dev",
                  "eth0", "nud", "permanent", check=True)
    got = blast_to_w1(tap_rack, 2000)
    print("worker 1 received %d of 2000 datagrams with loss 50%%" % got)
    assert 800 <= got <= 1200, got


def test_netem_off(tap_rack):
    tap_rack.netem(1, "off")
    got = blast_to_w1(tap_rack, 1000)
    assert got == 1000, "netem off: worker 1 received %d of 1000" % got


def delay_line_up(r):
    p = r.exec(1, "ip", "-o", "link", "show", "dev", "dl-eth0")
    return p.returncode == 0 and ",UP" in p.stdout


def test_delay_30ms(tap_rack):
    # Delay without sch_netem: a delay line (scripts/delayline.c) holds the frames the BPF
    # program diverts into its tap dl-eth0. Worker 1's tx delayed by 30 ms: no UDP round trip
    # to worker 2 is shorter.
    r = tap_rack
    r.exec(1, "ip", "neigh", "replace", "10.77.0.102", "lladdr", mac(r, 2), "dev", "eth0", "nud",
           "permanent", check=True)
    r.netem(1, "--dir", "tx", "delay", "30ms")
    assert delay_line_up(r), "the delay line's tap dl-eth0 is not up in worker 1"
    echo = r.start(["ip", "netns", "exec", r.ns(2), sys.executable, "-m", "phubrack.probe",
                    "udp-echo", "0.0.0.0", 5997], "echo", "udp echo",
                   env=dict(os.environ, PYTHONPATH=rack_mod.PYTHON_DIR))
    time.sleep(0.3)
    try:
        rtt = float(r.probe(1, "udp-rtt", "10.77.0.102", 5997, 5, check=True).stdout)
    finally:
        echo.proc.kill()
        echo.proc.wait()
    print("shortest of 5 round trips worker 1 -> 2 with delay 30ms: %.1f ms" % rtt)
    assert rtt >= 30, rtt


def test_reorder_50pct(tap_rack):
    # With "reorder 50%" half the frames are held and overtaken.
    r = tap_rack
    r.netem(1, "--dir", "tx", "delay", "20ms", "reorder", "50%")
    out = r.path("reorder.json")
    recv = r.start(["ip", "netns", "exec", r.ns(2), "timeout", 60, sys.executable,
                    os.path.join(HERE, "loss_pattern.py"), "recv", 5998, 2000, out], "recv",
                   "loss_pattern.py recv", out_suffix=".log")
    time.sleep(0.5)
    r.exec(1, sys.executable, os.path.join(HERE, "loss_pattern.py"), "send", "10.77.0.102",
           5998, 2000, check=True)
    assert recv.wait(90) == 0, recv.stderr()
    with open(out) as f:
        res = json.load(f)
    print("reorder 50%%: %d of %d reordered, largest extent %d, %d lost" %
          (res["reordered"], res["sent"], res["max_extent"], res["sent"] - res["unique"]))
    assert res["unique"] == res["sent"] and res["reordered"] >= 500, res


def test_netem_off_ends_delay_line(tap_rack):
    r = tap_rack
    if not delay_line_up(r):
        r.netem(1, "--dir", "tx", "delay", "20ms")
    r.netem(1, "off")
    assert r.exec(1, "ip", "link", "show", "dev", "dl-eth0").returncode != 0, "dl-eth0 is left"
    pids = sh("ip", "netns", "pids", r.ns(1)).split()
    assert not pids, "processes left in worker 1's namespace: %s" % pids


def test_attach_tap(tap_rack):
    # attach-tap joins a tap named like net_tap's to its bridge, with the rack's MTU and a MAC
    # of its own.
    r = tap_rack
    r.exec("pbox", "ip", "tuntap", "add", "pt0", "mode", "tap", check=True)
    before = mac(r, "pbox", "pt0")
    p = vrack("attach-tap", "--name", TAP, "--port", 0, "--timeout", 5)
    assert p.returncode == 0, p.stderr
    out = sh("ip", "-n", r.ns("pbox"), "-o", "link", "show", "pt0")
    assert "master pbr0" in out and "mtu 9000 " in out, out
    assert mac(r, "pbox", "pt0") != before, "pt0's kernel MAC was not changed"


def test_attach_tap_timeout(tap_rack):
    # A port whose tap never comes fails within its timeout.
    assert vrack("attach-tap", "--name", TAP, "--port", 1, "--timeout", 1).returncode != 0


def test_down(tap_rack):
    p = vrack("down", "--name", TAP)
    assert p.returncode == 0, p.stderr
    assert not namespaces(TAP + "-"), namespaces(TAP + "-")
    assert not os.path.exists(os.path.join(rack_mod.STATE_ROOT, TAP)), "the rack's state is left"
    assert vrack("down", "--name", TAP).returncode == 0, "down of a removed rack failed"


def test_down_half_made(tap_rack):
    for ns in ("w3", "tor"):
        sh("ip", "netns", "add", "%s-%s" % (TAP, ns))
    p = vrack("down", "--name", TAP)
    assert p.returncode == 0, p.stderr
    assert not namespaces(TAP + "-"), namespaces(TAP + "-")


@pytest.fixture
def refused():
    """Rack va<pid>'s name, for an up that must fail and leave nothing; down afterwards."""
    why = rack_mod.can_run()
    if why:
        pytest.skip(why)
    yield AFP
    vrack("down", "--name", AFP)


def test_af_packet_needs_ports_equal_lcores(refused):
    assert vrack("up", "--name", refused, "--driver", "af_packet", "--ports", 2,
                 "--lcores", 3).returncode != 0


def test_af_xdp_refuses_mtu_9000(refused):
    assert vrack("up", "--name", refused, "--driver", "af_xdp", "--mtu", 9000).returncode != 0
    assert not namespaces(refused + "-"), namespaces(refused + "-")


def test_bad_netem_spec_refused(refused):
    # Refused before anything is made.
    assert vrack("up", "--name", refused, "--netem", "w9:loss 1%").returncode != 0
    assert not namespaces(refused + "-"), namespaces(refused + "-")


@pytest.fixture(scope="module")
def af_packet_rack():
    """An af_packet rack: one port per data lcore, checksum offload turned off by the python
    fallback."""
    why = rack_mod.can_run()
    if why:
        pytest.skip(why)
    r = rack_mod.Rack(AFP, 5, VRACK, None, None)
    try:
        vrack("down", "--name", AFP)
        p = vrack("up", "--name", AFP, "--id", 5, "--workers", 1, "--driver", "af_packet",
                  "--ports", 2, env={"PHUB_VRACK_CSUM_TOOL": "python"})
        assert p.returncode == 0, "up of an af_packet rack:\n" + p.stdout + p.stderr
        yield r
    finally:
        r.close()


def test_af_packet_config(af_packet_rack):
    # af_packet ports are veths with one lcore each.
    c = rack_config(AFP)
    assert c["eal"]["lcores"] == data_lcores(2), c["eal"]
    for p, port in enumerate(c["ports"]):
        assert port["device"] == ("net_af_packet%d,iface=pv%d,blocksz=16384,framesz=16384,"
                                  "framecnt=512,qpairs=1" % (p, p)), port
        assert port["driver"] == "af_packet" and port["lcores"] == [p + 1], port
        assert port["ipv4"] == "10.5.0.%d/24" % (p + 1), port


def test_af_packet_no_bridge(af_packet_rack):
    out = sh("ip", "-n", af_packet_rack.ns("pbox"), "-o", "link", "show", "type", "bridge")
    assert not out.strip(), out


def test_af_packet_python_csum_fallback(af_packet_rack):
    has_ethtool()
    out = af_packet_rack.exec(1, "ethtool", "-k", "eth0", check=True).stdout
    assert re.search(r"^tx-checksumming: off", out, re.M), out


def test_attach_tap_refuses_af_packet(af_packet_rack):
    assert vrack("attach-tap", "--name", AFP).returncode != 0
