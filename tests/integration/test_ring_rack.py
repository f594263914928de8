# SPDX-License-Identifier: BSD-3-Clause
"""Jobs across racks (docs/hierarchy.md), meson: ring-<scenario>: a virtual multi-rack of R
racks, each with its own ToR, PBox (one data lcore, adaptive idle) and workers, the PBoxes'
uplinks on one spine; phub-bench puts a job's ranks across the racks (--servers), each rank
joining its own rack's PBox with its global rank and the total world size, and verifies every
model. The multirack fixture (conftest.py) tears it down whatever happens, and ends each
scenario by stopping every PBox still serving with SIGTERM and finding its clean stop.

                         R-spine: bridge br0 (--spine-rate, --spine-netem)
             +-------------------+-------------------+
            up0                 up1                 up2
  R.0-pbox: uplink       R.1-pbox: uplink     R.2-pbox: uplink    10.(I+Q).0.(q+1)
            p0 (ToR R.0-tor)     p0 (R.1-tor)        p0 (R.2-tor)  10.(I+q).0.1
            workers R.0-w*       workers R.1-w*      workers R.2-w*

ring-topology runs on any PBox: the multi-rack's namespaces, addresses, spine links (rate and
impairment), the ring keys of every config, datagrams across the spine, each rack's PBox serving
a single-rack job (configs stripped of the ring keys), a flat job across the routed spine
(--routed), refusals, down. The others need the PBox's ring: 2 x 2 exact with /phub/ring's
answers, racks of 1, 2, 3 workers with odd keys, fp16 and Adam, loss and duplication on the
spine, deterministic sums, a PBox killed (every rank fails within the bound), a host on the
spine guessing ring tokens, and a PBox killed and restarted on its checkpoints (ring-restart).
"""

import json
import os
import re
import subprocess
import threading
import time

import pytest

from phubrack import config, report
from phubrack.multirack import strip_ring
from phubrack.rack import STATE_ROOT, expect, wait_until

# The ring tests' racks: pf<I>, I in 150 .. 249; a multi-rack takes I .. I+R.
RACK_PREFIX = "pf"
RACK_IDS = (150, 100)
NONCE = "0x5ad1c0ffee7e4b31"
NONCE_B = "0x7e11d00d2b9a4c63"
EXACT = ('r["verified"]', 'r["bitwise"]')
# A layout of odd keys, a key over 1M elements among them (4.4 MB in fp32).
ODD = [1, 3, 7, 351, 353, 1000, 8097, 50000, 1048577, 17]


def ring_bg(mr, name, *args, job="ring", nonce=NONCE, timeout=60):
    """Every rank of ring job JOB, each from its rack, in the background (timeout: phub-bench's
    --timeout)."""
    return mr.start(mr.ring_cmd("--job", job, "--nonce", nonce, "--connect-timeout-ms", 30000,
                                *args, timeout=timeout), name, "the ring job " + job)


def ring_report(run, label="ring"):
    """The ring job's report (its exit status 0), one line of it printed."""
    run.wait(200)
    r = run.report()
    print(report.brief(label, r))
    return r


def ring_bench(mr, name, *args, **kw):
    return ring_report(ring_bg(mr, name, *args, **kw))


def up(mr, racks, workers, *options):
    mr.up(racks, workers, *options)
    return mr


def vrack_ok(mr, *args):
    return mr._vrack(*args).returncode == 0


def namespaces(name):
    """The namespaces of rack or multi-rack NAME."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(name)]


def cmd_out(*cmd):
    return subprocess.run(cmd, capture_output=True, text=True).stdout


# -- the multi-rack itself --------------------------------------------------------------------

REFUSED = [["--ring-job", "ring:" + NONCE], ["--racks", "2", "--ring-job", "ring:0x1"],
           ["--racks", "2", "--config", "/tmp/x.json"], ["--racks", "17"],
           ["--racks", "2", "--id", "253"], ["--racks", "2", "--workers", "1,2,3"],
           ["--racks", "2", "--spine-netem", "r2:loss 1%"],
           ["--racks", "2", "--netem", "r0:w3:loss 1%"],
           ["--racks", "2", "--spine-rate", "1gbit", "--lcores", "x"]]


def test_ring_topology(multirack):
    mr, name, i = multirack, multirack.name, multirack.id
    # Refusals first: nothing is made.
    for args in REFUSED:
        accepted = vrack_ok(mr, "up", "--name", name, "--id", i, *args)
        if accepted:
            mr._vrack("down", "--name", name)
        assert not accepted, "up %s was accepted" % " ".join(args)
    assert namespaces(name) == [], "a refused up left something behind"

    up(mr, 2, 2, "--spine-rate", "100mbit", "--spine-netem", "r1:tx:loss 5% duplicate 5%",
       "--routed", "--ring-job", "ring:" + NONCE,
       "--ring-job", "local2:%s:1,2:fp16:adam:deterministic" % NONCE_B)
    spine_net = "10.%d.0" % (i + 2)
    for ns in ("spine", (0, "tor"), (0, "pbox"), (0, 1), (0, 2), (1, "tor"), (1, "pbox"),
               (1, 1), (1, 2)):
        path = "/run/netns/" + (mr.ns(ns) if ns == "spine" else mr.ns(ns[1], ns[0]))
        assert os.path.exists(path), "no namespace " + path
    bridge = cmd_out("ip", "-n", mr.ns("spine"), "-br", "link", "show", "master", "br0")
    for up_dev in ("up0", "up1"):
        assert re.search("^%s@" % up_dev, bridge, re.M), \
            "no uplink %s in the spine's bridge: %s" % (up_dev, bridge)
    assert "10.%d.0.102/24" % (i + 1) in cmd_out("ip", "-n", mr.ns(2, 1), "-br", "-4", "addr",
                                                "show", "eth0"), \
        "worker 2 of rack 1 is not 10.%d.0.102" % (i + 1)
    tbf = re.compile(r"tbf.*rate 100Mbit")
    assert tbf.search(cmd_out("tc", "-n", mr.ns("spine"), "qdisc", "show", "dev", "up0")), \
        "no tbf on rack 0's spine link (spine side)"
    assert tbf.search(cmd_out("tc", "-n", mr.ns("pbox", 1), "qdisc", "show", "dev", "pv1")), \
        "no tbf on rack 1's uplink (PBox side)"
    assert "impair-loss50000-dup50000" in cmd_out("tc", "-n", mr.ns("pbox", 1), "filter",
                                                  "show", "dev", "pv1", "egress"), \
        "no impairment program on rack 1's uplink"
    assert tbf.search(cmd_out("tc", "-n", mr.ns("tor", 1), "qdisc", "show", "dev", "sp0")), \
        "no tbf on rack 1's ToR link to the spine (--routed)"
    assert "impair-loss50000" in cmd_out("tc", "-n", mr.ns("tor", 1), "filter", "show", "dev",
                                         "sp0", "egress"), \
        "no impairment on rack 1's ToR link to the spine (--routed)"
    assert re.search(r"^10\.%d\.0\.0/24 via 10\.%d\.0\.254" % (i, i + 1),
                     cmd_out("ip", "-n", mr.ns(2, 1), "route"), re.M), \
        "rack 1's workers have no route to rack 0 through their ToR (--routed)"
    assert "impair" not in cmd_out("tc", "-n", mr.ns("pbox", 0), "filter", "show", "dev", "pv1",
                                   "egress"), \
        "rack 0's uplink is impaired (only rack 1's tx was asked for)"
    for r in (0, 1):
        q = 1 - r
        with open(mr.config_path(r)) as f:
            t = json.load(f)
        assert t["name"] == "rack%d" % r
        assert [p["name"] for p in t["ports"]] == ["p0", "uplink"]
        assert t["ports"][1]["ipv4"] == "%s.%d/24" % (spine_net, r + 1)
        assert t["ports"][1]["device"] == "net_tap1,iface=pt1"
        assert t["ports"][0]["ipv4"] == "10.%d.0.1/24" % (i + r)
        assert t["peers"] == [{"name": "rack%d" % q, "ipv4": "%s.%d" % (spine_net, q + 1),
                               "udp_port": 47000, "port": "uplink"}]
        assert t["jobs"][0] == {"name": "ring", "nonce": NONCE, "workers": 4,
                                "racks": [{"pbox": "rack0", "ranks": 2},
                                          {"pbox": "rack1", "ranks": 2}]}
        assert t["jobs"][1]["workers"] == 3 and t["jobs"][1]["deterministic"] is True
        assert t["jobs"][1]["racks"][1] == {"pbox": "rack1", "ranks": 2}
        assert t["jobs"][1]["optimizer"] == {"type": "adam"} and t["jobs"][1]["dtype"] == "fp16"

    # status, exec, netem
    p = mr._vrack("status", "--name", name)
    assert p.returncode == 0, "status of the multi-rack: " + p.stderr
    for want in ("racks=2", "namespace %s-spine" % name, "rack %s.1:" % name,
                 "namespace %s.1-w2" % name, "impairment (BPF) on pv1"):
        assert want in p.stdout + p.stderr, "status does not show '%s'" % want
    assert vrack_ok(mr, "exec", "--name", name, "--spine", "--", "ip", "link", "show", "br0")
    assert vrack_ok(mr, "exec", "--name", name, "--rack", 1, "--worker", 2, "--", "true")
    assert vrack_ok(mr, "exec", "--name", name + ".1", "--worker", 2, "--", "true")
    assert not vrack_ok(mr, "exec", "--name", name, "--worker", 1, "--", "true"), \
        "exec without --rack on a multi-rack was accepted"
    assert vrack_ok(mr, "netem", "--name", name, "--spine", 0, "--dir", "rx", "rate",
                    "100mbit"), "netem --spine"

    # Datagrams across the spine, PBox namespace to PBox namespace: the kernels borrow the
    # uplinks' addresses until the PBoxes start (rack 1's tx side loses and duplicates 5%).
    for r in (0, 1):
        subprocess.run(["ip", "-n", mr.ns("pbox", r), "addr", "add",
                        "%s.%d/24" % (spine_net, r + 1), "dev", "pbr1"], check=True)
    echo = threading.Thread(target=mr.probe, args=("pbox", "udp-echo", spine_net + ".2", "9999"),
                            kwargs={"rack": 1, "timeout": 60})
    echo.start()
    time.sleep(0.5)
    got = int(mr.probe("pbox", "udp-count", spine_net + ".2", "9999", "100", rack=0,
                       timeout=60).stdout or 0)
    print("across the spine: %d of 100 datagrams came back (5%% loss one way)" % got)
    assert got >= 80, "only %d of 100 datagrams crossed the spine and back" % got
    echo.join()
    for r in (0, 1):
        subprocess.run(["ip", "-n", mr.ns("pbox", r), "addr", "del",
                        "%s.%d/24" % (spine_net, r + 1), "dev", "pbr1"], check=True)

    # Each rack's PBox serves its own workers with the multi-rack up, its config stripped of
    # the ring keys and the uplink (multirack.strip_ring).
    for r in (0, 1):
        config.edit(mr.config_path(r), "strip_ring(c)", {"strip_ring": strip_ring})
    mr.pbox_start()
    for r in (0, 1):
        expect(mr.bench(2, "--job", "solo%d" % r, "--keys", 8, "--key-elems", 5000,
                        "--iterations", 5, name="solo%d" % r, prefix=mr.ns("w", r),
                        server="10.%d.0.1" % (i + r), timeout=120, bench_timeout=60), *EXACT)
    # phub-bench's --servers form with one rack: its namespaces by %r, against rack 1's PBox.
    one = mr.start([mr.bench_bin, "--servers", "10.%d.0.1:2" % (i + 1), "--netns-prefixes",
                    mr.ns("w", 1), "--job", "onerack", "--keys", 4, "--key-elems", 3000,
                    "--iterations", 3, "--json", "--quiet", "--timeout", 60], "one")
    one.wait(120)
    expect(one.report(), *EXACT, 'len(r["model_digest"]) == 16')
    # --routed: a flat job, rack 1's workers on rack 0's PBox across the spine and both ToRs.
    flat = mr.start([mr.bench_bin, "--racks", "10.%d.0.1:2,10.%d.0.1:2" % (i, i),
                     "--netns-prefix", name + ".%r-w", "--job", "flat", "--keys", 4,
                     "--key-elems", 3000, "--iterations", 3, "--json", "--quiet", "--timeout",
                     60], "flat")
    flat.wait(120)
    expect(flat.report(), *EXACT, 'r["workers"] == 4')
    mr.stop_check()

    assert vrack_ok(mr, "down", "--name", name), "down of the multi-rack"
    assert namespaces(name) == [], "namespaces left after down"
    left = [d for d in os.listdir(STATE_ROOT) if d == name or d.startswith(name + ".")] \
        if os.path.isdir(STATE_ROOT) else []
    assert left == [], "state left after down: %s" % left
    assert vrack_ok(mr, "down", "--name", name), "down of a multi-rack that is gone"


# -- ring jobs --------------------------------------------------------------------------------

def test_ring_2x2(multirack):
    mr = up(multirack, 2, 2, "--ring-job", "ring:" + NONCE)
    mr.pbox_start()
    run = ring_bg(mr, "r", "--keys", 8, "--key-elems", 20000, "--iterations", 30)
    # While the job runs, rack 0's /phub/ring names its neighbour.
    answer = {}

    def named():
        answer.update(mr.telemetry("/phub/ring", rack=0))
        return "rack1" in json.dumps(answer.get("/phub/ring")) or not run.alive()
    wait_until(named, 20, 0.2)
    assert "rack1" in json.dumps(answer.get("/phub/ring")), \
        "rack 0's /phub/ring did not name its peer rack1 while the job ran: %s" % answer
    expect(ring_report(run), *EXACT, 'r["workers"] == 4')


def test_ring_3x123(multirack):
    mr = up(multirack, 3, "1,2,3", "--ring-job", "ring:" + NONCE)
    mr.pbox_start()
    r = ring_bench(mr, "r", "--layout", mr.layout(ODD, "odd"), "--iterations", 4)
    expect(r, *EXACT, 'r["workers"] == 6', '[k["first_rank"] for k in r["racks"]] == [0, 1, 3]')


def test_ring_fp16_adam(multirack):
    mr = up(multirack, 2, 2, "--ring-job", "ring:%s::fp16:adam" % NONCE)
    mr.pbox_start()
    r = ring_bench(mr, "r", "--keys", 6, "--key-elems", 12000, "--iterations", 8, "--dtype",
                   "fp16", "--optimizer", "adam", "--lr", 0.001)
    expect(r, 'r["verified"]', 'r["dtype"] == "fp16"', 'r["optimizer"] == "adam"')


def test_ring_loss(multirack):
    mr = up(multirack, 2, 2, "--ring-job", "ring:" + NONCE, "--spine-netem",
            "loss 5% duplicate 5%")
    mr.pbox_start()
    expect(ring_bench(mr, "r", "--keys", 8, "--key-elems", 20000, "--iterations", 8), *EXACT)


def test_ring_deterministic(multirack):
    # Two jobs of the same shape, one run each: the same model bits.
    mr = up(multirack, 2, 2, "--ring-job", "ringa:%s:::sgd:deterministic" % NONCE,
            "--ring-job", "ringb:%s:::sgd:deterministic" % NONCE_B)
    mr.pbox_start()
    digests = []
    for job, nonce in (("ringa", NONCE), ("ringb", NONCE_B)):
        run = mr.start(mr.ring_cmd("--job", job, "--nonce", nonce, "--keys", 6, "--key-elems",
                                   15000, "--iterations", 6, "--gradients", "random",
                                   "--deterministic", servers_opt="--racks"), job)
        r = expect(ring_report(run, job), 'r["verified"]', 'len(r["model_digest"]) == 16')
        digests.append(r["model_digest"])
    print("model digests: %s, %s" % tuple(digests))
    assert digests[0] == digests[1], "two deterministic runs ended with different models"


def test_ring_hostile(multirack):
    mr = up(multirack, 2, 2, "--ring-job", "ring:" + NONCE)
    mr.pbox_start()
    # The ring job's workers wait 15 s after iteration 2: the spray comes while the job is
    # linked and alive whatever the machine's speed, and the uplink is quiet.
    ring = ring_bg(mr, "r", "--keys", 8, "--key-elems", 20000, "--iterations", 20,
                   "--pause-at", "2:15000")
    # A job of rack 0 alone beside it, on the same PBox and worker namespaces.
    local = mr.bench_bg(2, "--job", "local", "--nonce", NONCE_B, "--keys", 4, "--key-elems",
                        10000, "--iterations", 40, name="local", bench_timeout=60)

    # The ring job's id on rack 0's PBox, once it is linked to its neighbour.
    def linked():
        jobs = (mr.telemetry("/phub/ring", rack=0).get("/phub/ring") or {}).get("jobs") or {}
        return [k for k, j in jobs.items() if j["linked"]]
    ids = wait_until(linked, 10, 0.1)
    assert ids, "the ring job never showed linked in rack 0's /phub/ring"

    def bad_token():
        stats = mr.telemetry("/phub/stats", rack=0).get("/phub/stats") or {}
        return stats.get("drops", {}).get("bad_token", 0)
    before = bad_token()
    # A host on the spine (not a ring peer) sprays rack 0's uplink data port.
    spine_net = "10.%d.0" % (mr.id + 2)
    subprocess.run(["ip", "-n", mr.ns("spine"), "addr", "add", spine_net + ".200/24", "dev",
                    "br0"], check=True)
    p = mr.exec("spine", mr.hostile_bin, "--server", spine_net + ".1", "--port", "47001",
                "--ring-spray", ids[0], "--repeat", "50", timeout=60)
    assert p.returncode == 0, "phub-hostile --ring-spray failed: " + p.stderr
    sent = json.loads(p.stdout)["sent"]
    # The PBox counts what it took off the wire; give the last datagrams a moment.
    after = before

    def counted():
        nonlocal after
        after = bad_token()
        return after - before >= sent
    wait_until(counted, 5, 0.1)
    print("ring spray: %d datagrams with guessed tokens, bad_token %d -> %d"
          % (sent, before, after))
    assert ring.alive(), "the ring job ended before the spray was counted (make its pause longer)"
    assert sent == 200, "phub-hostile sent %d ring datagrams, not 200" % sent
    assert after - before >= sent, \
        "rack 0 counted %d bad_token drops for %d guessed tokens" % (after - before, sent)
    expect(ring_report(ring), *EXACT, 'r["workers"] == 4')
    expect(local.report(), *EXACT, 'r["workers"] == 2')


def test_ring_pbox_killed(multirack):
    dead_ms = 1500
    mr = up(multirack, 2, 2, "--ring-job", "ring:" + NONCE)
    mr.edit_configs("c.setdefault('timeouts', {})['worker_dead_ms'] = %d" % dead_ms)
    mr.pbox_start()
    # Each global rank a phub-bench of its own, so that each fails (or not) on its own.
    ranks = [mr.start(mr.ring_cmd("--job", "ring", "--nonce", NONCE, "--rank", g,
                                  "--connect-timeout-ms", 30000, "--dead-ms", dead_ms, "--keys",
                                  4, "--key-elems", 8000, "--iterations", 100000,
                                  servers_opt="--racks", quiet=False), "rank%d" % g,
                      "rank %d" % g) for g in range(4)]
    # Mid-training: every rank past iteration 3.
    past3 = re.compile(r"iteration ([3-9]|[1-9][0-9]+)/")
    assert wait_until(lambda: all(past3.search(run.stderr()) for run in ranks), 30, 0.1), \
        "the job did not reach iteration 3 on every rank" + mr.runs_said()
    killed_at = time.monotonic()
    mr.pbox_kill(1)
    # Every rank must fail within worker_dead_ms, plus slack for a loaded 2-core machine.
    bound_ms = dead_ms + 4000
    bad = []
    for g, run in enumerate(ranks):
        wait_until(lambda: not run.alive(),
                   max(0, killed_at + (bound_ms + 5000) / 1000 - time.monotonic()))
        if run.alive():
            bad.append("rank %d still runs %d ms after rack 1's PBox was killed"
                       % (g, bound_ms + 5000))
            run.proc.kill()
            run.proc.wait()
            continue
        took = int((time.monotonic() - killed_at) * 1000)
        rc, err = run.proc.returncode, run.stderr()
        said = [line for line in err.splitlines() if "phub-bench: rank" in line]
        print("rank %d: exit %d, %d ms after the kill: %s" % (g, rc, took, said[-1:]))
        if rc != 1:
            bad.append("rank %d exited %d, expected 1 (failed)" % (g, rc))
        if took > bound_ms:
            bad.append("rank %d failed %d ms after the kill (bound %d ms)" % (g, took, bound_ms))
        # Rack 0's ranks hear it from their own PBox: the error names the rack.
        if g < 2 and "rack1" not in err:
            bad.append("rank %d (rack 0) failed without naming rack1" % g)
        if g >= 2 and not re.search(r"rack1|10\.%d\.0\.1" % (mr.id + 1), err):
            bad.append("rank %d (rack 1) failed without naming its PBox" % g)
    assert not bad, "\n".join(bad)
    # Rack 0's PBox stops on SIGTERM after its peer died: the fixture's stop_check.


# -- a PBox restarted on its checkpoints ------------------------------------------------------

def newest_ckpt(mr, rack, job):
    """The iteration of rack RACK's newest checkpoint of JOB, -1 when there is none (the names
    are JOB.<10 digits>.ckpt)."""
    d = os.path.join(mr.rack_dir(rack), "checkpoints")
    its = [int(f[len(job) + 1:-len(".ckpt")]) for f in (os.listdir(d) if os.path.isdir(d) else [])
           if re.fullmatch(re.escape(job) + r"\.[0-9]+\.ckpt", f)]
    return max(its, default=-1)


@pytest.mark.rack_name("h25r", 26)
def test_ring_restart(multirack):
    """A ring job survives a PBox restart (docs/hierarchy.md "Failure behaviour"): 3 racks of
    1 worker under 2% loss on every spine link, one ring job with a checkpoint every 2
    iterations; rack 1's PBox is killed (SIGKILL) mid-training once a checkpoint of iteration
    >= 6 is on its disk, and started again on the same config. It restores the job from its
    newest checkpoint K and says so in its RING_HELLO; racks 0 and 2 go back to their own
    checkpoints of K (or, lacking it, to their newest before it, and rack 1 follows); every
    rank JOINs again, resumes after that checkpoint and ends with the model of an
    uninterrupted run, bit for bit (phub-bench's reference). Its own name and ids (10.26 ..
    10.29), apart from the other ring tests'."""
    nonce = "0x25c0ffee5eed4b31"
    mr = up(multirack, 3, 1, "--ring-job", "ring:" + nonce, "--spine-netem", "loss 2%")
    mr.edit_configs("c['checkpoint']['interval_iterations'] = 2; "
                    "c.setdefault('timeouts', {})['worker_dead_ms'] = 15000")
    mr.pbox_start()
    run = ring_bg(mr, "r", "--dead-ms", 30000, "--keys", 6, "--key-elems", 12000,
                  "--iterations", 24, "--optimizer", "sgd", nonce=nonce, timeout=100)
    # Mid-training: once rack 1 has a checkpoint of iteration 6 or later (a minute at most).
    wait_until(lambda: newest_ckpt(mr, 1, "ring") >= 6 or not run.alive(), 60)
    assert run.alive(), "phub-bench ended before rack 1's PBox was killed" + mr.runs_said()
    killed_at = newest_ckpt(mr, 1, "ring")
    mr.pbox_kill(1)
    print("rack 1's PBox killed; its newest checkpoint: iteration %d" % killed_at)
    mr.pbox_start(1)
    r = ring_report(run)
    expect(r, *EXACT, 'r["reconnects"] >= 3')
    print("workers went back to %s, rollbacks %s"
          % ([w["resumed_at"] for w in r["per_worker"]], r["rollbacks"]))
    # Every rack went back to one checkpoint: the newest restore in each log names the same.
    restored = re.compile(r"job ring \(id [0-9]+\) restored from .* ms: iteration ([0-9]+)")
    bases = [(restored.findall(mr.log(q)) or ["none"])[-1] for q in range(3)]
    print("each rack's job restored at:", bases)
    for q in (0, 2):
        print("\n".join(line for line in mr.log(q).splitlines()
                        if "ring peer rack1 is at its checkpoint" in line))
    assert bases[1] != "none", "rack 1's PBox did not restore the ring job"
    assert bases[0] == bases[1] == bases[2], \
        "the racks did not go back to one checkpoint: %s" % bases
