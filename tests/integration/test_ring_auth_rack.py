# SPDX-License-Identifier: BSD-3-Clause
"""An authenticated ring job (jobs[].auth "required") across three racks of a virtual
multi-rack (docs/protocol.md section 12, "An authenticated ring"):

- test_attack: an on-path host on the spine (tests/integration/ring_auth_attacker.py)
  replays, reorders, flips bits in, forges and strips the MAC of the ring's datagrams and
  RING_HELLOs between the PBoxes: the job ends bitwise exact, every PBox counts the ring
  datagrams it sealed and opened, and every attempt is dropped and counted under its auth_*
  reason, none taken or answered.
- test_restart: kill -9 of one rack's PBox mid-training under 2% spine loss, restarted from its
  checkpoints: it makes new link keys with its neighbours (its HELLOs bring new keys), the
  ring goes back to one checkpoint and the job ends bitwise exact.

meson runs them as ring-auth-attack and ring-auth-restart (tests/integration/meson.build); by
hand, as root, after `ninja -C build`:
  python3 -m pytest -q -s tests/integration/test_ring_auth_rack.py
Their multi-rack is h25ra (racks 10.70-10.72.0.0/24, spine 10.73.0.0/24).
"""

import json
import os
import subprocess
import sys
import tempfile
import time

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))

from phubrack import config, telemetry  # noqa: E402  (after the path above)
from phubrack import rack as rack_mod  # noqa: E402

from conftest import program  # noqa: E402

NAME = "h25ra"
ID = 70
RACKS = 3
NONCE = "0x25f00dcafe0a17c3"
HERE = os.path.dirname(os.path.abspath(__file__))
STATE = os.environ.get("PHUB_VRACK_STATE_DIR", "/run/phub-vrack")
AUTH_REASONS = ("auth_replay", "auth_bad_tag", "auth_missing", "auth_wrong_channel",
                "auth_unexpected")


def vrack(*args, timeout=120, check=True):
    return subprocess.run([program("PHUB_VRACK")] + list(args), capture_output=True,
                          text=True, timeout=timeout, check=check)


def tele(r, *commands):
    return telemetry.query("phub-%s.%d" % (NAME, r), commands)


def drops(r):
    return (tele(r, "/phub/stats").get("/phub/stats") or {}).get("drops", {})


def ring_jobs(r):
    return ((tele(r, "/phub/ring").get("/phub/ring") or {}).get("jobs") or {}).values()


def ring_totals(r):
    return tele(r, "/phub/ring").get("/phub/ring") or {}


@pytest.fixture
def multirack(request):
    why = rack_mod.can_run()
    if why:
        pytest.skip(why)
    vrack("down", "--name", NAME, check=False)
    extra = ["--spine-netem", "loss 2%"] if request.node.name == "test_restart" else []
    up = vrack("up", "--name", NAME, "--racks", str(RACKS), "--id", str(ID), "--workers", "1",
               "--lcores", "1", "--memory-mb", "512", "--ring-job", "ring:" + NONCE, *extra,
               check=False)
    if up.returncode != 0:
        vrack("down", "--name", NAME, check=False)
        pytest.fail("the multi-rack did not come up:\n" + up.stdout + up.stderr)
    try:
        yield
    finally:
        vrack("down", "--name", NAME, timeout=60, check=False)


def pbox_start(r):
    start = vrack("pbox-start", "--name", NAME, "--rack", str(r), "--bin", program("PHUB_PBOX"),
                  check=False)
    assert start.returncode == 0, "rack %d's PBox did not start:\n%s" % (
        r, start.stdout + start.stderr)


def configure(extra=""):
    for r in range(RACKS):
        config.edit("%s/%s.%d/pbox.json" % (STATE, NAME, r),
                    'c["jobs"][0]["auth"] = "required"' + extra)
        pbox_start(r)


def pboxes_stop():
    for r in range(RACKS):
        stop = vrack("pbox-stop", "--name", NAME, "--rack", str(r), check=False)
        assert stop.returncode == 0, "rack %d's PBox did not stop on SIGTERM" % r


def test_attack(multirack):
    configure()
    tmp = tempfile.mkdtemp(prefix="phub-ring-auth.")
    report_path = os.path.join(tmp, "attack.json")
    go = os.path.join(tmp, "go")
    servers = ",".join("10.%d.0.1:1" % (ID + r) for r in range(RACKS))
    # The workers wait 12 s after iteration 3: the attack comes while the job is linked and
    # alive, and the ring quiet, so that every attempt's fate is known.
    bench = subprocess.Popen(
        [program("PHUB_BENCH"), "--servers", servers, "--netns-prefix", NAME + ".%r-w",
         "--job", "ring", "--nonce", NONCE, "--auth", "--json", "--quiet", "--timeout", "60",
         "--connect-timeout-ms", "30000", "--keys", "8", "--key-elems", "20000",
         "--iterations", "12", "--pause-at", "3:12000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # The on-path host records the ring's first iterations, then attacks in the pause.
    attacker = subprocess.Popen(
        ["ip", "netns", "exec", NAME + "-spine", sys.executable,
         os.path.join(HERE, "ring_auth_attacker.py"), "up", "40", report_path, go],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # The counters before the attack: once the workers pause (iteration 3 done everywhere).
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done = [(tele(r, "/phub/jobs").get("/phub/jobs") or {}) for r in range(RACKS)]
        if all(any(j.get("iterations_done", 0) >= 3 for j in d.values()) for d in done):
            break
        time.sleep(0.1)
    time.sleep(1.0)
    before = [drops(r) for r in range(RACKS)]
    totals_before = [ring_totals(r) for r in range(RACKS)]
    open(go, "w").close()
    a_out, a_err = attacker.communicate(timeout=90)
    time.sleep(0.5)
    after = [drops(r) for r in range(RACKS)]
    totals_after = [ring_totals(r) for r in range(RACKS)]
    jobs = [list(ring_jobs(r)) for r in range(RACKS)]
    out, err = bench.communicate(timeout=200)
    assert attacker.returncode == 0, "the attacker failed: " + a_err
    report = json.load(open(report_path))
    print("attacker: " + json.dumps(report))
    assert bench.returncode == 0, "the authenticated ring job failed: " + err[-2000:]
    result = json.loads(out)
    print("ring job: verified %s bitwise %s workers %s" % (
        result.get("verified"), result.get("bitwise"), result.get("workers")))
    assert result["verified"] and result["bitwise"] and result["workers"] == RACKS

    # Every ring datagram and HELLO the spine saw carried the MAC (and HELLO cap AUTH).
    assert report["plain_seen"] == 0 and report["hellos_without_cap_auth"] == 0, report
    assert report["data_seen"] > 0 and report["ackvs_seen"] > 0 and report["hellos_seen"] > 0
    # Every PBox sealed and opened ring datagrams of the job.
    for r in range(RACKS):
        assert jobs[r], "rack %d shows no ring job" % r
        j = jobs[r][0]
        print("rack %d: ring auth %s, sealed %d, opened %d" % (
            r, j["auth"], j["auth_sealed"], j["auth_opened"]))
        assert j["auth"] == 1 and j["auth_sealed"] > 0 and j["auth_opened"] > 0
    # Every attempt dropped under its reason, summed over the PBoxes it was sent to.
    delta = {k: sum(after[r].get(k, 0) - before[r].get(k, 0) for r in range(RACKS))
             for k in AUTH_REASONS}
    print("attempts %s; auth drops during the attack %s" % (report["expect"], delta))
    for reason, n in report["expect"].items():
        assert delta[reason] == n, "%s: %d counted for %d sent" % (reason, delta[reason], n)
    assert sum(report["expect"].values()) == report["sent"]
    # The HELLOs of a neighbour without auth were refused (and logged as such).
    refused = sum(totals_after[r].get("hellos_refused", 0) - totals_before[r].get(
        "hellos_refused", 0) for r in range(RACKS))
    assert refused == report["attempts"]["hello-without-auth"] > 0, refused
    # None taken, none answered: the ring steps taken and acknowledged during the attack are
    # at most the ones a PBox retransmitted meanwhile (a late RTO on a loaded machine), where
    # the attempts taken would be hundreds.
    def moved(k):
        return sum(totals_after[r].get(k, 0) - totals_before[r].get(k, 0) for r in range(RACKS))
    print("during the attack: ring steps taken %d, acknowledgements sent %d, retransmitted %d" % (
        moved("from_prev_datagrams"), moved("to_prev_acks"), moved("retransmitted_steps")))
    assert moved("from_prev_datagrams") <= moved("retransmitted_steps")
    assert moved("to_prev_acks") <= moved("retransmitted_steps")
    pboxes_stop()


def newest_ckpt(r):
    d = "%s/%s.%d/checkpoints" % (STATE, NAME, r)
    try:
        its = [int(f.split(".")[1]) for f in os.listdir(d)
               if f.startswith("ring.") and f.endswith(".ckpt")]
    except OSError:
        return -1
    return max(its) if its else -1


def test_restart(multirack):
    configure("; c['checkpoint']['interval_iterations'] = 2; "
              "c.setdefault('timeouts', {})['worker_dead_ms'] = 15000")
    servers = ",".join("10.%d.0.1:1" % (ID + r) for r in range(RACKS))
    bench = subprocess.Popen(
        [program("PHUB_BENCH"), "--servers", servers, "--netns-prefix", NAME + ".%r-w",
         "--job", "ring", "--nonce", NONCE, "--auth", "--json", "--quiet", "--timeout", "100",
         "--connect-timeout-ms", "30000", "--dead-ms", "30000", "--keys", "6",
         "--key-elems", "12000", "--iterations", "60", "--optimizer", "sgd"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while newest_ckpt(1) < 6 and bench.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert bench.poll() is None, "phub-bench ended before rack 1's PBox was killed"
    sealed_before = [j["auth_sealed"] for j in ring_jobs(1)]
    pid = int(open("%s/%s.1/pbox.pid" % (STATE, NAME)).read())
    os.kill(pid, 9)
    # Gone, not only dead: its memory and DPDK files freed before the new one starts.
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    print("rack 1's PBox killed at its checkpoint %d (it had sealed %s ring datagrams)" % (
        newest_ckpt(1), sealed_before))
    pbox_start(1)
    out, err = bench.communicate(timeout=200)
    if bench.returncode != 0:
        for r in range(RACKS):
            print("rack %d's log:\n%s\ndrops %s" % (r, "\n".join(
                line for line in open("%s/%s.%d/pbox.log" % (STATE, NAME, r)).read().splitlines()
                if "serving" not in line)[-3000:], drops(r)))
    assert bench.returncode == 0, "the authenticated ring job failed: " + err[-2000:]
    result = json.loads(out)
    print("ring job: verified %s bitwise %s reconnects %s rollbacks %s" % (
        result.get("verified"), result.get("bitwise"), result.get("reconnects"),
        result.get("rollbacks")))
    assert result["verified"] and result["bitwise"] and result["reconnects"] >= 3
    logs = [open("%s/%s.%d/pbox.log" % (STATE, NAME, r)).read() for r in range(RACKS)]
    assert "restored from" in logs[1], "rack 1's PBox did not restore the ring job"
    # Every MAC checked after the restart passed or was counted: no link was left without
    # keys (the ring would have stalled and the job failed above); nothing forged here.
    for r in range(RACKS):
        d = drops(r)
        print("rack %d: auth drops %s" % (r, {k: d.get(k, 0) for k in AUTH_REASONS}))
        assert d.get("auth_bad_tag", 0) == 0 and d.get("auth_missing", 0) == 0
    pboxes_stop()
