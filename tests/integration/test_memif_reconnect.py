# SPDX-License-Identifier: BSD-3-Clause
"""phub-pbox with a net_memif server port outlives its memif clients (meson:
pbox-memif-reconnect): phub-loadgen connects, trains, and is killed mid-traffic (SIGKILL) or
leaves (SIGINT) or finishes, ROUNDS times in a row; every new client must be served and the
PBox must stop cleanly at the end. Guards the memif gate (lib/net/phub_memif_gate.h) against DPDK
net_memif unmapping the shared region under a running burst. --no-huge: the race fires far
more often with hugepages (see docs/history/performance-log.md, "Pitfalls found on the way"),
so a pass here is a regression check, not proof of the fix.

  CPU 0: phub-loadgen r (memif client) <==== net_memif ====> phub-pbox (server), lcore 1
         killed / stopped / done, then r+1 connects

The same for the packet-path benchmark's summing floor server (phub-loadgen --reflect-ackv
--reflect-sum, meson: floor-memif-reconnect), which died of the same race (2 of 45 generators
in a row on a loaded machine) before it took the gate too.
"""

import json
import os
import signal
import subprocess
import time

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("PHUB_BUILD_DIR", os.path.join(ROOT, "build"))
PBOX = os.environ.get("PHUB_PBOX") or os.path.join(BUILD, "app", "pbox", "phub-pbox")
LOADGEN = os.environ.get("PHUB_LOADGEN") or os.path.join(BUILD, "app", "phub-loadgen",
                                                         "phub-loadgen")
ROUNDS = int(os.environ.get("PHUB_MEMIF_ROUNDS") or 6)
PREFIX = "phub-mr-%d" % os.getpid()


def memif_dev(role, sock):
    return "net_memif0,role=%s,socket=%s,socket-abstract=no,id=0,bsize=16384" % (role, sock)


def wait_for(path, text, proc, timeout=20):
    """Up to TIMEOUT s for TEXT in the file PATH while PROC lives."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(path) and text in open(path, errors="replace").read():
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.1)
    return False


class Procs:
    """The PBox and the clients: killed at the end whatever happened."""

    def __init__(self, tmp):
        self.tmp, self.procs = tmp, []

    def start(self, cmd, log):
        with open(log, "w") as out:
            p = subprocess.Popen([str(c) for c in cmd], stdout=out, stderr=subprocess.STDOUT)
        self.procs.append(p)
        return p

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        subprocess.run(["rm", "-rf", "/var/run/dpdk/" + PREFIX, "/var/run/dpdk/%s-lg" % PREFIX])


@pytest.fixture
def procs(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("DPDK's EAL needs root here")
    p = Procs(tmp_path)
    yield p
    p.close()


def test_pbox_memif_reconnect(procs, tmp_path):
    sock = tmp_path / "memif.sock"
    config = {
        "eal": {"lcores": [0, 1], "main_lcore": 0, "memory_mb": 256, "no_huge": True,
                "file_prefix": PREFIX, "extra_args": ["--single-file-segments"]},
        "ports": [{"name": "m0", "device": memif_dev("server", sock), "driver": "memif",
                   "ipv4": "10.77.0.1/24", "mtu": 9000, "lcores": [1]}],
        "udp_base_port": 47000,
        "chunk_bytes": 32768,
        "segment_bytes": 8192,
        "idle": {"policy": "adaptive"},
        "limits": {"max_jobs": 16, "max_workers_per_job": 8, "job_memory_mb": 32,
                   "total_memory_mb": 256},
        "checkpoint": {"dir": str(tmp_path / "checkpoints")},
        "telemetry": {"enabled": False},
    }
    (tmp_path / "pbox.json").write_text(json.dumps(config, indent=1))
    log = tmp_path / "pbox.log"
    pbox = procs.start([PBOX, "-c", tmp_path / "pbox.json"], log)

    def pbox_log():
        return "\n--- last lines of the PBox's log\n" + "\n".join(
            log.read_text(errors="replace").splitlines()[-20:])
    assert wait_for(log, "ready:", pbox), "phub-pbox did not start" + pbox_log()
    assert "memif gate:" in log.read_text(), \
        "phub-pbox did not put its memif port behind the gate" + pbox_log()

    def loadgen(r, *args):
        lg_log = tmp_path / ("lg-%d.log" % r)
        return procs.start([LOADGEN, "-l", 0, "--no-pci", "--no-huge", "--single-file-segments",
                            "-m", 256, "--file-prefix", PREFIX + "-lg",
                            "--log-level=lib.eal:notice", "--vdev", memif_dev("client", sock),
                            "--", "--workers", 2, "--keys", 8, "--key-elems", 32768, "--job",
                            "r%d" % r] + list(args), lg_log), lg_log

    for r in range(1, ROUNDS + 1):
        if r % 3 in (1, 2):
            # killed (1) or interrupted (2) while the job trains
            lg, _ = loadgen(r, "--duration", 30)
            assert wait_for(log, "job r%d-0: rank 1 of 2 joined" % r, lg), \
                "round %d: the client was not served%s" % (r, pbox_log())
            time.sleep(0.5)
            lg.send_signal(signal.SIGKILL if r % 3 == 1 else signal.SIGINT)
            lg.wait(60)
            how = "killed" if r % 3 == 1 else "interrupted"
        else:
            # runs to the end and must have exchanged
            lg, lg_log = loadgen(r, "--iterations", 20, "--json")
            rc = lg.wait(120)
            out = lg_log.read_text(errors="replace")
            assert rc == 0, "round %d: phub-loadgen exited %d: %s" % (r, rc, out[-300:])
            assert '"exchanges":20,' in out, "round %d: not 20 exchanges: %s" % (
                r, [line for line in out.splitlines() if line.startswith("{")])
            how = "completed"
        assert pbox.poll() is None, "round %d: phub-pbox died after a client %s%s" % (
            r, how, pbox_log())
        print("ok round %d: client %s, phub-pbox alive" % (r, how))

    pbox.send_signal(signal.SIGTERM)
    rc = pbox.wait(60)
    assert rc == 0, "phub-pbox exited %d on SIGTERM%s" % (rc, pbox_log())
    print("%d memif clients in a row, phub-pbox served each and stopped cleanly" % ROUNDS)


def test_floor_memif_reconnect(procs, tmp_path):
    sock = tmp_path / "memif.sock"
    log = tmp_path / "floor.log"
    floor = procs.start(["stdbuf", "-oL", LOADGEN, "-l", 1, "--no-pci", "--no-huge",
                         "--single-file-segments", "-m", 256, "--file-prefix", PREFIX,
                         "--log-level=lib.eal:notice", "--vdev", memif_dev("server", sock),
                         "--", "--reflect-ackv", "--reflect-sum"], log)

    def floor_log():
        return "\n--- last lines of the floor's log\n" + "\n".join(
            log.read_text(errors="replace").splitlines()[-20:])
    assert wait_for(log, "reflect: ready", floor), "the floor did not start" + floor_log()
    assert "behind the memif gate" in log.read_text(), \
        "the floor did not put its memif port behind the gate" + floor_log()

    for r in range(1, ROUNDS + 1):
        lg_log = tmp_path / ("lg-%d.log" % r)
        lg = procs.start([LOADGEN, "-l", 0, "--no-pci", "--no-huge", "--single-file-segments",
                          "-m", 256, "--file-prefix", PREFIX + "-lg",
                          "--log-level=lib.eal:notice", "--vdev", memif_dev("client", sock),
                          "--", "--json", "--blast", "--payload-bytes", 1024, "--workers", 2,
                          "--duration", 1], lg_log)
        if r % 2 == 1:
            # killed mid-traffic
            time.sleep(1.0)
            lg.send_signal(signal.SIGKILL)
            lg.wait(60)
            how = "killed"
        else:
            # runs to its end, and the floor answered it
            rc = lg.wait(60)
            out = lg_log.read_text(errors="replace")
            runs = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
            assert rc == 0 and len(runs) == 1, "round %d: phub-loadgen exited %d: %s" % (
                r, rc, out[-300:])
            assert runs[0]["rx_pkts"] > 0, "round %d: the floor answered nothing: %s" % (
                r, runs[0])
            how = "completed"
        assert floor.poll() is None, "round %d: the floor died after a client %s%s" % (
            r, how, floor_log())
        print("ok round %d: client %s, the floor alive" % (r, how))

    floor.send_signal(signal.SIGTERM)
    rc = floor.wait(60)
    assert rc == 0, "the floor exited %d on SIGTERM%s" % (rc, floor_log())
    sums = [json.loads(line) for line in log.read_text().splitlines()
            if line.startswith('{"mode":"reflect-sum"')]
    assert sums and sums[-1]["groups"] > 0, "the floor summed no group" + floor_log()
    print("%d memif clients in a row, the floor served each and stopped cleanly" % ROUNDS)
