# SPDX-License-Identifier: BSD-3-Clause
"""phub-pbox refuses to start, with a non-zero exit and a message that names what to fix, for
each way a start can fail; and a good config over net_null starts and stops on SIGTERM (meson:
pbox-startup-failures). No network: every port is a net_null device in this process.

  phub-pbox --(net_null0)--> nothing
"""

import json
import os
import re
import signal
import subprocess
import time

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PBOX = os.environ.get("PHUB_PBOX") or os.path.join(
    os.environ.get("PHUB_BUILD_DIR", os.path.join(ROOT, "build")), "app", "pbox", "phub-pbox")
PREFIX = "phub-startup-%d" % os.getpid()


@pytest.fixture(autouse=True)
def root(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("DPDK's EAL needs root here")
    yield
    subprocess.run(["rm", "-rf", "/var/run/dpdk/" + PREFIX])


def config(tmp_path, name, lcores=(0, 1), memory_mb=256, device="net_null0", driver="null",
           port_lcores=(1,), mtu=1500):
    """A one-port config in tmp_path/NAME.json: its path."""
    c = {"eal": {"lcores": list(lcores), "main_lcore": 0, "memory_mb": memory_mb,
                 "no_huge": True, "file_prefix": PREFIX},
         "ports": [{"name": "p0", "device": device, "driver": driver, "ipv4": "10.99.0.1/24",
                    "mtu": mtu, "lcores": list(port_lcores)}],
         "checkpoint": {"dir": str(tmp_path / "checkpoints")}}
    path = tmp_path / (name + ".json")
    path.write_text(json.dumps(c, indent=1))
    return path


def refuses(what, cfg, pattern, *args):
    """phub-pbox -c CFG exits non-zero within 60 s and its output matches PATTERN."""
    try:
        p = subprocess.run([PBOX, "-c", str(cfg)] + list(args), capture_output=True, text=True,
                           timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("%s: still running after 60 s" % what)
    out = p.stdout + p.stderr
    assert p.returncode != 0, "%s: exit 0" % what
    m = re.search(pattern, out)
    assert m, "%s: no message matching '%s':\n%s" % (what, pattern, out[-800:])
    print("ok   %s: %s" % (what, out[out.rfind("\n", 0, m.start()) + 1:].split("\n")[0]))
    return out


def test_missing_config(tmp_path):
    refuses("a missing config file", tmp_path / "nothing.json",
            r"nothing.json.*(No such file|cannot read)")


def test_syntax_error(tmp_path):
    path = tmp_path / "syntax.json"
    path.write_text('{ "eal": { "lcores": [0, 1] }, "ports": [ ] , }\n')
    refuses("a config with a syntax error", path, r"syntax.json:1:[0-9]+: ")


def test_pci_device_missing(tmp_path):
    refuses("a PCI device that is not there", config(tmp_path, "pci", device="0000:7f:1f.7",
                                                     driver="mlx5"),
            r"(device 0000:7f:1f.7 not found|0000:7f:1f.7)")


def test_lcore_without_cpu(tmp_path):
    refuses("an lcore on a CPU that does not exist",
            config(tmp_path, "cpu", lcores=(0, 1, 97), port_lcores=(97,)),
            r"EAL start failed.*eal\.\*")


def test_memory_below_bound(tmp_path):
    path = config(tmp_path, "memory", memory_mb=8)
    text = path.read_text()
    # The message points at the line of the value.
    line = 1 + text[:text.index('"memory_mb"')].count("\n")
    refuses("eal.memory_mb below its bound", path, r"memory.json:%d:[0-9]+: eal.memory_mb" % line)


def test_pools_too_big(tmp_path):
    # 64 MB cannot hold the pools of 9000-byte mbufs: found at run time, named.
    refuses("too little memory for the mbuf pools", config(tmp_path, "pools", memory_mb=64,
                                                           mtu=9000),
            r"cannot create a pool .*eal.memory_mb")


def test_declared_job_check_config(tmp_path):
    # A declared job that says what it trains is checked by --check-config against the job
    # limit, then EAL memory, each refusal naming the key to raise and to what; raised, the
    # check passes.
    path = config(tmp_path, "declared")
    c = json.loads(path.read_text())
    c["jobs"] = [{"name": "big", "nonce": "0x5be1c2f07a9d3e64", "workers": 4,
                  "parameters": 100000000, "optimizer": {"type": "adam", "lr": 0.001}}]
    path.write_text(json.dumps(c, indent=1))
    for key in ("limits.job_memory_mb", "eal.memory_mb"):
        out = refuses("a declared job over " + key, path,
                      r"jobs\[0\] \(big\) needs [0-9]+ MB, more than", "--check-config")
        msg = re.search(r".*jobs\[0\] \(big\) needs [0-9]+ MB, more than.*", out).group(0)
        want = re.search(r" raise (it|eal\.memory_mb) to ([0-9]+) or more", msg)
        assert key in msg and want, "a declared job over %s: not named: %s" % (key, msg)
        section, name = key.split(".")
        c.setdefault(section, {})[name] = int(want.group(2))
        path.write_text(json.dumps(c, indent=1))
    p = subprocess.run([PBOX, "-c", str(path), "--check-config"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0 and "jobs[0] big: 100.0M parameters" in p.stdout + p.stderr, \
        "the declared job still does not pass: %s" % (p.stdout + p.stderr)[-300:]
    print("ok   --check-config: the job fits once the keys are raised")


def test_good_config_starts_and_stops(tmp_path):
    # A good config starts; a second PBox with the same file prefix is refused; SIGTERM stops it.
    path = config(tmp_path, "good")
    log = tmp_path / "good.out"
    with open(log, "w") as out:
        proc = subprocess.Popen([PBOX, "-c", str(path)], stdout=out, stderr=subprocess.STDOUT)
    try:
        for _ in range(100):
            if "phub.pbox: ready" in log.read_text():
                break
            time.sleep(0.1)
        assert "phub.pbox: ready" in log.read_text(), \
            "a good config over net_null did not start:\n" + log.read_text()[-800:]
        print("ok   a good config over net_null starts")
        refuses("a second PBox with the same file prefix", path, r"(file prefix|another primary)")
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(20)
        except subprocess.TimeoutExpired:
            pytest.fail("SIGTERM: still running after 20 s")
        assert rc == 0 and "phub.pbox: stopped:" in log.read_text(), "SIGTERM: exit %d" % rc
        print("ok   SIGTERM stops it cleanly (exit 0)")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
