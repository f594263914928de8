# SPDX-License-Identifier: BSD-3-Clause
"""Health and the systemd watchdog (meson: pbox-health): phub-pbox sends WATCHDOG=1 only while its
control loop and every data lcore turn; a stalled lcore (the test hook /phub/test/stall) stops
the pings and makes /phub/health "failing", which both undo once it turns again. Under a journal
stream ($JOURNAL_STREAM names stderr) each log line carries its syslog priority as "<N>".

  this test: a unix datagram socket ($NOTIFY_SOCKET) <-- phub-pbox (one net_null port, data
  lcore 1) <-- the telemetry socket (/phub/health, /phub/test/stall)
"""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))

from phubrack import telemetry  # noqa: E402  (after the path above)

# EAL file prefix (PHUB_EAL_PREFIX: another, to run beside a PBox of this one).
PREFIX = os.environ.get("PHUB_EAL_PREFIX") or "phub-health-t"
PBOX = os.environ.get("PHUB_PBOX") or os.path.join(
    os.environ.get("PHUB_BUILD_DIR", os.path.join(ROOT, "build")), "app", "pbox", "phub-pbox")


class Notify:
    """$NOTIFY_SOCKET: every datagram received, with the monotonic time it came."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.sock.settimeout(0.2)
        self.received = []
        self.running = True
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while self.running:
            try:
                msg = self.sock.recv(4096).decode().replace("\n", " ")
            except socket.timeout:
                continue
            self.received.append((time.monotonic(), msg))

    def has(self, text):
        return any(text in m for _, m in self.received)

    def pings(self, t0=0.0, t1=float("inf")):
        """WATCHDOG=1 datagrams received between two monotonic times."""
        return sum(1 for t, m in self.received if "WATCHDOG=1" in m and t0 <= t <= t1)

    def close(self):
        self.running = False
        self.thread.join()
        self.sock.close()


def tel(*commands):
    return telemetry.query(PREFIX, commands)


def status():
    return (tel("/phub/health").get("/phub/health") or {}).get("status")


@pytest.fixture
def pbox(tmp_path):
    """phub-pbox on one net_null port under a notify socket and a journal stream: (its
    process, the Notify listener, its log's path)."""
    config = {
        "eal": {"lcores": [0, 1], "memory_mb": 512, "no_huge": True, "file_prefix": PREFIX,
                "extra_args": ["--single-file-segments"]},
        "drivers_dir": os.path.join(ROOT, "drivers-cfg"),
        "ports": [{"name": "n0", "device": "net_null0,no-rx=1", "driver": "null",
                   "ipv4": "10.99.0.1/24", "mtu": 1500, "lcores": [1]}],
        "idle": {"policy": "adaptive"},
        "checkpoint": {"dir": str(tmp_path / "ckpt")},
    }
    (tmp_path / "pbox.json").write_text(json.dumps(config))
    notify = Notify(str(tmp_path / "notify.sock"))
    # stderr is a file; the journal's stream is named by its device and inode, as systemd does.
    log = tmp_path / "log"
    log.touch()
    st = os.stat(log)
    env = dict(os.environ, NOTIFY_SOCKET=str(tmp_path / "notify.sock"), WATCHDOG_USEC="400000",
               PHUB_PBOX_TEST_HOOKS="1", JOURNAL_STREAM="%d:%d" % (st.st_dev, st.st_ino))
    with open(log, "a") as out:
        proc = subprocess.Popen([PBOX, "-c", str(tmp_path / "pbox.json")], stdout=out,
                                stderr=subprocess.STDOUT, env=env)
    try:
        yield proc, notify, log
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        notify.close()


def test_pbox_health(pbox):
    proc, notify, log = pbox

    def fail_with_log(what):
        return "%s\n--- log\n%s" % (what, log.read_text())

    for _ in range(300):
        if notify.has("READY=1") or proc.poll() is not None:
            break
        time.sleep(0.1)
    assert notify.has("READY=1"), fail_with_log("no READY=1 from phub-pbox")

    time.sleep(1.5)
    n = notify.pings()
    assert n >= 3, fail_with_log("%d WATCHDOG=1 in 1.5 s with WATCHDOG_USEC=400000 (want >= 3)"
                                 % n)
    s = status()
    assert s == "ok", fail_with_log("health %r on an idle PBox, want ok: %s"
                                    % (s, tel("/phub/health")))
    print("serving: %d pings, health %s" % (n, s))

    # Lcore 1 stands still for 3 s: after the ping that may have seen it turn, none.
    t0 = time.monotonic()
    assert '"stall_ms": 3000' in json.dumps(tel("/phub/test/stall,1,3000")), \
        fail_with_log("/phub/test/stall refused")
    time.sleep(2)
    t1 = time.monotonic()
    health = json.dumps(tel("/phub/health"))
    print("stalled:", health)
    assert '"status": "failing"' in health, fail_with_log("health not failing while lcore 1 "
                                                          "stalls")
    assert "lcore 1: no loop turn" in health, fail_with_log("health does not name lcore 1")
    during = notify.pings(t0 + 0.5, t1)
    assert during == 0, fail_with_log("%d WATCHDOG=1 sent while lcore 1 stood still" % during)
    # It turns again: the pings resume and health is ok.
    time.sleep(2.5)
    t2 = time.monotonic()
    time.sleep(1)
    after = notify.pings(t2, time.monotonic())
    assert after >= 1, fail_with_log("no WATCHDOG=1 after the lcore turned again")
    s = status()
    assert s == "ok", fail_with_log("health %r after the stall, want ok: %s"
                                    % (s, tel("/phub/health")))
    print("after the stall: %d pings in 1 s, health %s" % (after, s))

    # The journal's lines: each once, with its priority (ERR 3, NOTICE 5), none without one.
    text = log.read_text()
    assert re.search(r"^<3>phub\.pbox: watchdog: lcore 1 made no progress", text, re.M), \
        fail_with_log("the withheld ping is not logged at priority 3 (err)")
    assert re.search(r"^<5>phub\.pbox: ready:", text, re.M), \
        fail_with_log("ready is not logged at priority 5 (notice)")
    assert text.count("phub.pbox: ready:") == 1, fail_with_log("ready logged more than once")
    bare = [line for line in text.splitlines() if line and not re.match(r"^<[0-7]>", line)]
    assert not bare, fail_with_log("lines without a priority prefix under JOURNAL_STREAM: %s"
                                   % bare[:3])

    proc.send_signal(signal.SIGTERM)
    rc = proc.wait(30)
    assert rc == 0, fail_with_log("phub-pbox exit %d after SIGTERM" % rc)


def test_pbox_notify(tmp_path):
    """sd_notify as systemd's Type=notify reads it (meson: pbox-notify): READY=1 once the PBox
    serves, never before its log says ready, and STOPPING=1 on SIGTERM; no watchdog asked for.

      this test: a unix datagram socket ($NOTIFY_SOCKET) <-- phub-pbox (one net_null port)
    """
    config = {
        "eal": {"lcores": [0, 1], "memory_mb": 512, "no_huge": True, "file_prefix":
                PREFIX + "-notify", "extra_args": ["--single-file-segments"]},
        "drivers_dir": os.path.join(ROOT, "drivers-cfg"),
        "ports": [{"name": "n0", "device": "net_null0", "driver": "null",
                   "ipv4": "10.99.0.1/24", "mtu": 1500, "lcores": [1]}],
        "idle": {"policy": "adaptive"},
        "checkpoint": {"dir": str(tmp_path / "ckpt")},
        "telemetry": {"enabled": False},
    }
    (tmp_path / "pbox.json").write_text(json.dumps(config))
    notify = Notify(str(tmp_path / "notify.sock"))
    log = tmp_path / "log"
    env = dict(os.environ, NOTIFY_SOCKET=str(tmp_path / "notify.sock"))
    env.pop("WATCHDOG_USEC", None)
    with open(log, "w") as out:
        proc = subprocess.Popen([PBOX, "-c", str(tmp_path / "pbox.json")], stdout=out,
                                stderr=subprocess.STDOUT, env=env)
    try:
        for _ in range(300):
            if notify.has("READY=1") or proc.poll() is not None:
                break
            time.sleep(0.1)
        assert notify.has("READY=1"), "no READY=1 from phub-pbox\n" + log.read_text()
        # READY comes after the log says ready, never before.
        assert "phub.pbox: ready:" in log.read_text(), "READY=1 before ready"
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(30)
        assert rc == 0, "phub-pbox exit %d after SIGTERM\n%s" % (rc, log.read_text())
        time.sleep(0.2)
        assert notify.has("STOPPING=1"), "no STOPPING=1: %s\n%s" % (
            [m for _, m in notify.received], log.read_text())
        for _, m in notify.received:
            print("  received:", m)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        notify.close()
