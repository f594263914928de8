# SPDX-License-Identifier: BSD-3-Clause
"""Authenticated jobs (jobs[].auth "required", docs/protocol.md section 8) in the rack, meson:
auth-rack and auth-ring.

auth-rack: the DPDK PBox with an on-path host: the ToR floods every frame (a hub: bridge
ageing 0), and worker namespace 3 records the job's frames (JOIN included), then replays,
reorders, flips bits, forges with the tokens it saw and JOINs with what it saw
(auth_attacker.py). The job must end bitwise exact, each attempt counted under its drop reason
exactly, no nonce seen in clear, and a worker without auth refused with the reason.

                     h25a-tor: bridge br0, ageing_time 0 (floods every frame)
         +--------------+-----------+-----------+
        tp0            tw1         tw2         tw3
         |              |           |           |
  h25a-pbox: phub-pbox h25a-w1     h25a-w2     h25a-w3: auth_attacker.py (AF_PACKET,
  10.25.0.1            rank 0      rank 1       promiscuous eth0, 10.25.0.103)

auth-ring: an authenticated job across two racks (racks h25a.0, 10.25.0.0/24, and h25a.1,
10.26.0.0/24; spine 10.27): the workers JOIN their rack's PBox with auth, the PBoxes'
RING_HELLOs carry a proof of the nonce instead of the nonce, and the job ends exact.
"""

import json
import os
import subprocess
import sys
import time

import pytest

from phubrack import report, telemetry
from phubrack.rack import expect

HERE = os.path.dirname(os.path.abspath(__file__))
EXACT = ('r["verified"]', 'r["bitwise"]')
NONCE = "0x25a5eedc0ffee001"
JOB = "authjob"
LAYOUT = ("--keys", 4, "--key-elems", 6000, "--optimizer", "sgd", "--lr", 0.01)


@pytest.mark.rack_name("h25a", 25)
def test_auth_rack(rack):
    rack.up(3, config_edit="c['jobs'] = [{'name': %r, 'nonce': %r, 'workers': 2, 'auth': "
                           "'required', 'optimizer': {'type': 'sgd', 'lr': 0.01}}]"
                           % (JOB, NONCE))
    # The on-path host: the bridge forwards every frame to every port, worker 3 listens to all.
    rack.exec("tor", "ip", "link", "set", "br0", "type", "bridge", "ageing_time", "0",
              check=True)
    rack.exec(3, "ip", "link", "set", "eth0", "promisc", "on", check=True)

    before = rack.telemetry("/phub/stats")
    attack_out = rack.path("attack.json")
    attacker = rack.start(["ip", "netns", "exec", rack.ns(3), sys.executable,
                           os.path.join(HERE, "auth_attacker.py"), "eth0", rack.server, 5000,
                           attack_out], "attacker", "auth_attacker.py", out_suffix=".out",
                          env=dict(os.environ, ATTACKER_IP="10.%d.0.103" % rack.id))
    time.sleep(1)
    job = rack.bench_bg(2, "--auth", "--job", JOB, "--nonce", NONCE, *LAYOUT, "--iterations",
                        6000, "--connect-timeout-ms", 60000, name="auth", bench_timeout=100)
    assert attacker.wait(200) == 0, "the attacker failed:\n" + attacker.stderr()
    # Still running when the attack ends: the attempts met a live session.
    during = rack.telemetry("/phub/jobs")
    print("   jobs when the attack ended: %s" % [(j["name"], j["joined"]) for j in
                                                 during.get("/phub/jobs", {}).values()])
    job.wait(200)
    print(report.summary("authenticated job under attack", expect(job.report(), *EXACT)))
    time.sleep(1.5)  # the control plane's counters reach telemetry within a second
    after = rack.telemetry("/phub/stats")
    assert "/phub/stats" in before and "/phub/stats" in after, "no telemetry from the PBox"

    with open(attack_out) as f:
        attack = json.load(f)
    delta = {k[len("drops."):]: v for k, v in telemetry.stats_delta(before, after).items()
             if k.startswith("drops.") and v}
    print("attacker: recorded %d frames (%d JOIN, %d authenticated PUSH), sent %d:" %
          (attack["recorded"], attack["joins_seen"], attack["pushes_seen"], attack["sent"]))
    print("  ", ", ".join("%s %s" % kv for kv in attack.get("attempts", {}).items()))
    print("   PBox counted:", dict(sorted(delta.items())))
    bad = []
    if attack["join_nonces_in_clear"] != 0:
        bad.append("%d JOINs carried the nonce in clear" % attack["join_nonces_in_clear"])
    if attack["plain_pushes_seen"] != 0:
        bad.append("%d PUSHes of the job without a MAC" % attack["plain_pushes_seen"])
    if not attack.get("expect"):
        bad.append("the attacker recorded nothing to attack with")
    for reason, n in attack.get("expect", {}).items():
        if delta.get(reason, 0) != n:
            bad.append("%s: sent %d, counted %d" % (reason, n, delta.get(reason, 0)))
    # Nothing else under an auth reason: the job's own datagrams all passed.
    for reason in ("auth_unexpected", "auth_wrong_channel", "bad_auth_ext"):
        if delta.get(reason, 0):
            bad.append("%s: %d without a cause" % (reason, delta[reason]))
    if JOB not in [j["name"] for j in during.get("/phub/jobs", {}).values()]:
        bad.append("the job had ended before the attack did: the attempts met no session")
    assert not bad, "the PBox's counters do not match the attack:\n  " + "\n  ".join(bad)

    # A worker without auth: refused at JOIN, told why.
    plain = subprocess.run(rack.bench_cmd(1, "--job", JOB, "--nonce", NONCE, *LAYOUT,
                                          "--iterations", 2, "--connect-timeout-ms", 5000),
                           capture_output=True, text=True, timeout=60)
    assert plain.returncode != 0, "a worker without auth joined the authenticated job"
    assert "requires authenticated JOIN" in plain.stderr, \
        "the plain JOIN was not refused with the reason:\n" + plain.stderr


@pytest.mark.rack_name("h25a", 25)
def test_auth_ring(multirack):
    mr, nonce = multirack, "0x25a5eed0a11ce001"
    mr.up(2, 2, "--ring-job", "ring:" + nonce)
    mr.edit_configs('c["jobs"][0]["auth"] = "required"')
    mr.pbox_start()
    run = mr.start(mr.ring_cmd("--job", "ring", "--nonce", nonce, "--auth",
                               "--connect-timeout-ms", 30000, "--keys", 8, "--key-elems", 20000,
                               "--iterations", 30), "ring", "the authenticated ring job")
    run.wait(200)
    print(report.summary("authenticated ring job, 2 racks", expect(run.report(), *EXACT)))
    assert "ring position 0 of 2 linked" in mr.log(0), \
        "rack 0 never linked its ring (RING_HELLO's proof of the nonce refused?)"
