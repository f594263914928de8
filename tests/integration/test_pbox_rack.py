# SPDX-License-Identifier: BSD-3-Clause
"""End-to-end exchanges through the DPDK PBox in a virtual rack: phub-bench workers in their
own namespaces push gradients, the PBox sums and optimizes them, and every worker checks its
model against a local reference. One scenario per test (meson: pbox-<scenario>); the rack
fixture (conftest.py) tears the rack down whatever happens, and ends every scenario by
stopping the PBox with SIGTERM and finding its clean stop in its log.

                     R-tor: bridge br0
         +--------------+-----------+---- ... ---+
        tp0            tw1         tw2          twN
         |              |           |            |
  R-pbox: pv0 - pbr0 - pt0 (net_tap, 2 queues, BPF steering) - phub-pbox lcores 1, 2
                       R-w1        R-w2   ...   R-wN: phub-bench ranks 0 .. N-1

restart, sigterm and their kin stop the PBox in the middle of the run (SIGKILL, SIGTERM at an
iteration boundary) and start it again on its checkpoints in $STATE_ROOT/R/checkpoints.
"""

import json
import os
import re
import signal
import subprocess
import threading
import time

import pytest

from phubrack import telemetry
from phubrack.rack import MIXED, expect, wait_until

EXACT = ('r["verified"]', 'r["bitwise"]')


def timeouts(worker_dead_ms):
    return 'c.setdefault("timeouts", {})["worker_dead_ms"] = %d' % worker_dead_ms


def killed_rank(run):
    """A rank's phub-bench killed with its worker, and reaped."""
    worker = run.worker()
    if worker:
        subprocess.run(["kill", "-KILL", str(worker)])
    run.proc.kill()
    run.proc.wait()


# -- exchanges ----------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 2, 3, 4, 8], ids=str)
def test_workers(rack, n):
    rack.up(n)
    r = rack.bench(n, "--layout", rack.layout(MIXED), "--iterations", 4, "--optimizer", "sgd")
    expect(r, *EXACT, "r['workers'] == %d" % n)


def test_tiny_keys(rack):
    rack.up(2)
    r = rack.bench(2, "--layout", rack.layout([1] * 200, "tiny"), "--iterations", 4)
    expect(r, *EXACT, 'r["keys"] == 200')


def test_big_key(rack):
    rack.up(2)
    r = rack.bench(2, "--keys", 1, "--key-elems", 1000003, "--iterations", 3)
    expect(r, *EXACT)


def dtype_run(rack, dtype):
    rack.up(3)
    r = rack.bench(3, "--layout", rack.layout(MIXED), "--iterations", 4, "--dtype", dtype)
    expect(r, *EXACT, "r['dtype'] == %r" % dtype)


def test_fp16(rack):
    dtype_run(rack, "fp16")


def test_bf16(rack):
    dtype_run(rack, "bf16")


def optimizer_run(rack, optimizer):
    rack.up(3)
    r = rack.bench(3, "--layout", rack.layout(MIXED), "--iterations", 5, "--optimizer",
                   optimizer, "--lr", 0.05)
    expect(r, 'r["verified"]', "r['optimizer'] == %r" % optimizer)


def test_nesterov(rack):
    optimizer_run(rack, "nesterov")


def test_adam(rack):
    optimizer_run(rack, "adam")


def two_jobs(rack, config_edit=None):
    """Two jobs with their own nonces at once on one PBox, each exact."""
    rack.up(4, config_edit=config_edit)
    a = rack.bench_bg(2, "--job", "job-a", "--nonce", "0x5ad1c0ffee7e4b31", "--layout",
                      rack.layout(MIXED), "--iterations", 5, name="a")
    # job b's ranks on workers 3 and 4
    b = rack.bench_bg(2, "--job", "job-b", "--nonce", "0x7e11d00d2b9a4c63", "--keys", 6,
                      "--key-elems", 3000, "--optimizer", "nesterov", "--iterations", 5,
                      name="b", prefix=rack.netns_alias("b", 3, 4))
    ra, rb = a.report(), b.report()
    expect(ra, *EXACT, 'r["job"] == "job-a"')
    expect(rb, 'r["verified"]', 'r["job"] == "job-b"')


def test_two_jobs(rack):
    two_jobs(rack)


def test_priority_hold(rack):
    # Every datagram goes through the data lcores' P3 hold (config priority_hold).
    two_jobs(rack, 'c["priority_hold"] = 128')
    assert "P3 hold of 128 frames" in rack.log(), "the PBox's data lcores did not use the hold"


def test_loss_1pct(rack):
    # 1% loss both ways on worker 1's link: retransmissions and PULLs, still the exact model.
    rack.up(3, "--netem", "w1:loss 1%")
    r = rack.bench(3, "--layout", rack.layout(MIXED), "--iterations", 8)
    expect(r, *EXACT, 'r["retransmits"] + r["pulls"] > 0')


def test_deterministic(rack):
    # Gradients whose sums round, 1% loss on worker 1's link: arrivals out of rank order,
    # yet the deterministic job's model is the rank-order reference bit for bit.
    rack.up(3, "--netem", "w1:loss 1%")
    mixed = rack.layout(MIXED)
    r = rack.bench(3, "--layout", mixed, "--iterations", 8, "--gradients", "random",
                   "--deterministic", "--job", "det")
    expect(r, *EXACT, 'r["deterministic"]', 'r["verify_mode"] == "exact"',
           'r["retransmits"] + r["pulls"] > 0')
    # The same in the default mode: sums in arrival order, right within tolerance.
    a = rack.bench(3, "--layout", mixed, "--iterations", 8, "--gradients", "random",
                   "--job", "arrival", name="arrival")
    expect(a, 'r["verified"]', 'r["verify_mode"] == "tolerance"')
    print("arrival order: bitwise %s, max abs error %g" % (a["bitwise"], a["max_abs_error"]))
    # A rank that asks otherwise than the job is refused with LAYOUT_MISMATCH.
    opts = ("--keys", 2, "--key-elems", 100, "--job", "mixed", "--connect-timeout-ms", 3000)
    m0 = rack.start_rank(0, 2, *opts, "--deterministic", name="m0")
    time.sleep(0.5)
    m1 = rack.start_rank(1, 2, *opts, name="m1")
    assert m1.wait(30) != 0, "a default rank joined a deterministic job"
    assert "layout_mismatch" in m1.stderr(), \
        "no layout_mismatch for the rank that differs:\n" + m1.stderr()
    m0.wait()


def test_mixed_acks(rack):
    # One job answered in both forms: rank 1 asked for one ACK per PUSH (--no-ackv), ranks 0
    # and 2 for ACKV. A data lcore asks a session's wish once per loop turn (datapath.c,
    # rank_ackv_cached()); had it answered one rank with another's wish, rank 1 would get ACKV
    # entries or the others plain ACKs, and the counts below would not hold. Exact models.
    rack.up(3)
    before = rack.telemetry("/phub/stats")
    opts = ("--layout", rack.layout(MIXED), "--iterations", 6, "--job", "mixedacks")
    runs = [rack.start_rank(r, 3, *opts, *(["--no-ackv"] if r == 1 else []), name="k%d" % r)
            for r in range(3)]
    reports = [run.report() for run in runs]
    for r in reports:
        expect(r, *EXACT)
    d = telemetry.stats_delta(before, rack.telemetry("/phub/stats"))
    pushes, acks = d.get("pushes", 0), d.get("acks_sent", 0)
    ackv = d.get("ackv_entries", 0) + d.get("acks_in_model", 0)
    resent = [r.get("retransmits", 0) for r in reports]
    print("pushes %d: ACKs %d, in ACKV or MODEL %d; retransmits %s" % (pushes, acks, ackv, resent))
    # Each rank's PUSHes a third of them; a retransmission may be answered again.
    assert acks > 0 and ackv > 0, "one form of answer was never sent"
    assert acks + ackv >= pushes, "a PUSH was not answered"
    assert acks <= pushes / 3 + resent[1], "ranks that asked for ACKV got plain ACKs"
    assert ackv <= pushes * 2 / 3 + resent[0] + resent[2], "rank 1 got ACKV entries"


def test_csum(rack):
    # CRC32C both ways (issue 9): a worker that asks for it in its JOIN gets CSUM on its
    # JOIN_ACK, ACKs and MODELs, checked on arrival; a PUSH damaged after its CRC was computed
    # (a valid UDP checksum: only the CRC can tell) is dropped and counted as bad_csum, and the
    # same PUSH intact is ACKed. Then 2 workers with --csum train on, bitwise exact.
    rack.up(2)
    before = rack.telemetry("/phub/stats")
    p = rack.exec(1, rack.hostile_bin, "--server", rack.server, "--csum", timeout=120)
    assert p.returncode == 0, "phub-hostile --csum failed:\n" + p.stderr
    after = rack.telemetry("/phub/stats")
    print(p.stdout)
    expect(json.loads(p.stdout), 'r["join_ack_csum"]', 'r["acks_csum"] >= r["segments"]',
           'r["acks_plain"] == 0', 'r["models_csum"] >= r["segments"]',
           'r["models_plain"] == 0', 'r["bad_received"] == 0',
           'r["initial_acked"] == r["segments"]', 'r["damaged_acked"] == 0',
           'r["intact_acked"] == 1')
    d = telemetry.stats_delta(before, after).get("drops.bad_csum", 0)
    print("PBox: bad_csum +%d" % d)
    assert d == 1, "the damaged PUSH was not counted as bad_csum once (+%d)" % d
    r = rack.bench(2, "--layout", rack.layout(MIXED), "--iterations", 4, "--csum")
    expect(r, *EXACT)
    # Every MODEL's CRC right: a MODEL whose headers were copied from another rank's without
    # a new CRC was dropped by the worker, who PULLed it again (1,187 PULLs in this job; 0
    # since). A few PULLs may still come from a loaded machine's delays.
    print("csum job: retransmits %d, pulls %d" % (r["retransmits"], r["pulls"]))
    assert r["pulls"] < 100, "the csum job's workers PULLed %d times" % r["pulls"]


# -- ports and steering -------------------------------------------------------------------------

def test_no_steering(rack):
    # Without the BPF program the tun driver spreads datagrams by flow hash, and a PUSH sent
    # to another lcore's UDP port (a stale map) must reach the owner of its chunk all the
    # same: handed off, none lost, none added twice. The workers' run checks the sums; then
    # phub-hostile sends a job's whole initial round to the wrong lcore's port on purpose
    # and gets every MODEL back, whichever lcore the flow hash gives it.
    rack.up(3, pbox_args=["--no-steering"])
    r = rack.bench(3, "--layout", rack.layout(MIXED), "--iterations", 6)
    expect(r, *EXACT)
    before = rack.telemetry("/phub/stats")["/phub/stats"]
    p = rack.exec(1, rack.hostile_bin, "--server", rack.server, "--misdirect", timeout=120)
    assert p.returncode == 0, "phub-hostile --misdirect: not every MODEL came back: " + p.stdout
    mis = json.loads(p.stdout)
    out = rack.telemetry("/phub/stats", "/phub/ports")
    s = out["/phub/stats"]
    handed = s["handed_off"] - before["handed_off"]
    print("misdirected:", mis, "handed off meanwhile:", handed, "drops:", s["drops"])
    assert all(port["steering"] == "none" for port in out["/phub/ports"].values())
    assert mis["models"] == mis["segments"] > 0
    assert mis["wrong_port"] != mis["right_port"]
    # Nothing else runs now. Ownership is checked once, from the chunk: each misdirected PUSH
    # is handed off once (the flow hash put it on another lcore than the chunk's) or not at
    # all (it landed on the chunk's own lcore, whatever port it named).
    assert handed <= mis["misdirected"]
    assert s["drops"].get("wrong_lcore", 0) == s["handed_off"]
    # The misdirected round adds no drop of another reason. (The bench before it may have: on
    # a loaded machine a worker's PULL can come before its segment's iteration is finished,
    # future_iteration.)
    added = {why: n - before["drops"].get(why, 0) for why, n in s["drops"].items()}
    assert {why for why, n in added.items() if n > 0} <= {"wrong_lcore", "not_for_us"}


def test_af_packet(rack):
    # One port per lcore (af_packet, MTU 9000): the other steering layout.
    rack.up(2, "--driver", "af_packet", "--ports", 2, "--lcores", 2, "--mtu", 9000)
    r = rack.bench(2, "--layout", rack.layout(MIXED), "--iterations", 4)
    expect(r, *EXACT)


def test_mtu_mismatch(rack):
    # A worker whose link is at 1500 while the PBox's ports are at 9000: its PUSHes would
    # leave as IP fragments the PBox never reassembles. The JOIN must fail at once, naming both
    # MTUs; the other worker, at 9000, is exact on its own.
    rack.up(2, "--driver", "af_packet", "--ports", 2, "--lcores", 2, "--mtu", 9000)
    rack.exec(2, "ip", "link", "set", "eth0", "mtu", "1500", check=True)
    # rank 0 of a one-worker job joins from <prefix>1: worker 2
    cmd = rack.bench_cmd(1, "--job", "small-link", "--keys", 2, "--key-elems", 10000,
                         "--iterations", 2, prefix=rack.netns_alias("s", 2), timeout=20)
    bad = rack.start(cmd, "bad")
    assert bad.wait(60) != 0, "a worker on an MTU 1500 link joined a PBox at MTU 9000"
    assert "route to it has MTU 1500" in bad.stderr(), \
        "the refusal does not name the route's MTU:\n" + bad.stderr()
    r = rack.bench(1, "--keys", 2, "--key-elems", 10000, "--iterations", 3)
    expect(r, *EXACT)


def test_af_xdp(rack):
    # af_xdp ports: 4 workers, a 3.2 MB job in full-size datagrams. Frames above what the
    # UMEM chunk holds were dropped by the kernel and the initial round never finished.
    rack.up(4, "--driver", "af_xdp")
    r = rack.bench(4, "--keys", 8, "--key-elems", 100000, "--iterations", 3)
    expect(r, *EXACT)
    imissed = rack.telemetry("/phub/ports")["/phub/ports"]["p0"]["imissed"]
    assert imissed == 0, "the af_xdp socket missed %d frames" % imissed
    # The PBox's XDP program passes what is not the PBox's to the kernel of R-pbox: an
    # address of its own on the same veth answers ping and TCP (an ssh-like session).
    assert "XDP program xdp_pbox on pv0" in rack.log(), \
        "the PBox did not configure its XDP program"
    host = "10.%d.0.250" % rack.id
    rack.exec("pbox", "ip", "addr", "add", host + "/24", "dev", "pv0", check=True)
    p = rack.probe(1, "ping", host, timeout=30)
    assert p.returncode == 0, "no ping through the af_xdp interface:\n" + p.stdout + p.stderr
    server = threading.Thread(target=rack.probe, args=("pbox", "serve", host, "2222"),
                              kwargs={"timeout": 30})
    server.start()
    time.sleep(0.5)
    reply = rack.probe(1, "hello", host, "2222", timeout=30).stdout.strip()
    server.join()
    assert reply == "SSH-2.0-pbox-host hello", \
        "no TCP session with the PBox host's kernel on the af_xdp interface: %r" % reply
    # And the PBox still serves after that traffic.
    r2 = rack.bench(2, "--keys", 4, "--key-elems", 50000, "--iterations", 2, "--job", "again",
                    name="r2")
    expect(r2, 'r["verified"]')


def test_resnet50_default_memory(rack):
    # The README's model on a rack of default memory (--memory-mb unset): ResNet-50, Adam,
    # checkpoints on, beside af_packet's 16 KB mbuf pools. A rack of 512 MB refused it.
    rack.up(2, "--driver", "af_packet", "--mtu", 9000)
    r = rack.bench(2, "--model", "resnet50", "--iterations", 2, "--optimizer", "adam",
                   "--lr", 0.001)
    expect(r, 'r["verified"]')


def test_telemetry(rack):
    # The counters agree with what the workers sent: 5 keys of one segment each, 3 ranks,
    # iterations + 1 rounds (the initial-model round), no loss.
    rack.up(3)
    r = rack.bench(3, "--keys", 5, "--key-elems", 100, "--iterations", 6)
    expect(r, 'r["verified"]', 'r["retransmits"] == 0')
    out = rack.telemetry("/phub/stats", "/phub/lcores", "/phub/ports", "/phub/jobs")
    s, lcores, ports = out["/phub/stats"], out["/phub/lcores"], out["/phub/ports"]
    rounds, segments, workers = 7, 5, 3
    checks = {
        "pushes": s["pushes"] == workers * segments * rounds,
        "segments_optimized": s["segments_optimized"] == segments * rounds,
        "models_sent": s["models_sent"] >= workers * segments * rounds,
        # tap ports take multi-segment frames: a payload under 2 KB (these are 400 bytes) is
        # copied behind each frame's headers, a larger one chained from the job's model
        # memory; never the fallback copy (a port that kept frames after its flush)
        "MODEL payloads inline or by reference":
            s["model_payloads_inline"] + s["model_payloads_by_reference"] == segments * rounds
            and s["model_payloads_inline"] == segments * rounds
            and s["model_payloads_copied"] == 0,
        "lcores add up": sum(c["pushes"] for c in lcores.values()) == s["pushes"],
        "both lcores worked": all(c["pushes"] > 0 for c in lcores.values()),
        "steering": all(p["steering"] == "tap_bpf" for p in ports.values()),
        "no wrong lcore": s["handed_off"] == 0,
        # ARP for the workers' own addresses is broadcast to the PBox too: "not_for_us"
        "nothing else dropped": set(s["drops"]) <= {"not_for_us"} and s["tx_dropped"] == 0,
        "no encode errors": s["encode_errors"] == 0,
        "rx matches port": s["rx_packets"] == sum(p["ipackets"] for p in ports.values()),
        "jobs freed": out["/phub/jobs"] == {},
    }
    print("telemetry:", {k: s[k] for k in (
        "pushes", "segments_optimized", "models_sent", "model_payloads_by_reference",
        "model_payloads_copied", "model_payloads_inline", "rx_packets", "tx_packets",
        "handed_off", "drops")})
    assert [k for k, ok in checks.items() if not ok] == [], \
        "telemetry does not match what was sent"


# -- the PBox restarted -------------------------------------------------------------------------

def wait_ckpt(rack, at_least, run=None, timeout=30):
    """Until a checkpoint of iteration AT_LEAST or later is on disk (or RUN has ended)."""
    wait_until(lambda: rack.newest_ckpt() >= at_least or (run and not run.alive()), timeout)


def restart_run(rack):
    # 200 iterations, though the kill comes at a checkpoint of 6: the PBox writes a checkpoint
    # only when its writer is free, and on a loaded machine writing the first one (fsync) took
    # 0.3 s, in which a job of 40 iterations ended before any later checkpoint was on disk.
    rack.up(3, "--checkpoint-interval", 2)
    run = rack.bench_bg(3, "--keys", 8, "--key-elems", 10000, "--iterations", 200,
                        "--optimizer", "sgd", "--dead-ms", 30000)
    wait_ckpt(rack, 6, run)
    assert run.alive(), "phub-bench ended before the PBox was killed"
    return run


def test_restart(rack):
    # SIGKILL mid-training, once a checkpoint of iteration >= 6 is on disk: the PBox started
    # again restores the job, the workers JOIN again by themselves, go back to the
    # checkpoint (its model checked against their reference) and end with the exact model
    # of an uninterrupted run. The job's files go when it ends.
    run = restart_run(rack)
    killed_at = rack.newest_ckpt()
    rack.pbox_kill()
    print("PBox killed; newest checkpoint: iteration %d" % killed_at)
    rack.pbox_restart()
    assert re.search(r"phub\.pbox: job phub-bench \(id [0-9]+\) restored from .* iteration "
                     r"[0-9]+", rack.log()), "the restarted PBox did not restore the job"
    r = run.report()
    expect(r, *EXACT, 'r["reconnects"] == 3',
           'all(w["reconnects"] == 1 for w in r["per_worker"])')
    print("workers went back to %s, rollbacks %s" % (
        [w["resumed_at"] for w in r["per_worker"]], r["rollbacks"]))
    assert rack.newest_ckpt() == -1, "the job ended but its checkpoints stay"


def test_restart_damaged(rack):
    # As restart, with one byte of the newest checkpoint flipped while the PBox is down: the
    # file is refused by its CRC, set aside, and the job comes back from the one before it;
    # the workers go back that much further and still end with the exact model.
    run = restart_run(rack)
    rack.pbox_kill()
    newest = rack.newest_ckpt()
    damaged = "%s/phub-bench.%010d.ckpt" % (rack.ckpt_dir, newest)
    with open(damaged, "r+b") as f:
        f.seek(1000)
        b = f.read(1)
        f.seek(1000)
        f.write(bytes([b[0] ^ 0x40]))
    print("PBox killed; checkpoint of iteration %d damaged" % newest)
    rack.pbox_restart()
    log = rack.log()
    assert re.search(r"refused: .*corrupt", log), "the damaged file was not refused"
    back = re.findall(r" restored from .* in [0-9.]+ ms: iteration ([0-9]+),", log)
    print("restored from iteration", back)
    assert len(back) == 1 and int(back[0]) < newest, \
        "the job did not come back from the checkpoint before the damaged one"
    assert os.path.exists(damaged + ".corrupt"), "the damaged file was not set aside"
    expect(run.report(), *EXACT, 'r["reconnects"] == 3')


def test_restart_twice(rack):
    # Issue 9: SIGKILL twice, a few seconds apart, while 4 workers train with a checkpoint
    # every 4 iterations and rank 1's link loses bursts (Gilbert-Elliott, about 20%: bad
    # state 20% of the time, every datagram in it lost). The second restart comes while the
    # lossy rank may still be JOINing or rolling back from the first; every rank must JOIN
    # again and every model end bitwise exact.
    rack.up(4, "--checkpoint-interval", 4)
    run = rack.bench_bg(4, "--keys", 8, "--key-elems", 10000, "--iterations", 36,
                        "--optimizer", "sgd", "--dead-ms", 30000, "--pause-at", "1:1500")
    # The loss starts once the job runs (its initial model is checkpointed): the first JOIN
    # and ARP, which retry once a second in the kernel, are not what this test is about.
    # The workers wait 1.5 s after iteration 1 so that the loss is on before the job goes
    # on: without it, 36 iterations took 0.15 s and could end before the first kill.
    wait_ckpt(rack, 0, run)
    p = rack._vrack("netem", "--name", rack.name, "--worker", "2", "loss", "gemodel", "5%",
                    "20%")
    assert p.returncode == 0, "netem on worker 2:\n" + p.stderr
    for kill_no in (1, 2):
        wait_ckpt(rack, kill_no * 4, run)
        assert run.alive(), "phub-bench ended before kill %d" % kill_no
        rack.pbox_kill()
        print("PBox killed (%d); newest checkpoint: iteration %d" % (kill_no,
                                                                    rack.newest_ckpt()))
        rack.pbox_restart()
        # The second kill comes while the first restart's re-JOINs may be under way.
        if kill_no == 1:
            time.sleep(2)
    try:
        expect(run.report(), *EXACT)
    except AssertionError:
        print(rack.log()[-3000:], run.stderr()[-3000:])
        raise
    # A worker's LEAVE is answered within 500 ms or not waited for; on the lossy link every
    # one of its tries may fall into one loss burst (netem's Gilbert-Elliott state moves per
    # datagram, and a LEAVE is the only one). The PBox then ends the job once that rank has
    # been silent for timeouts.worker_dead_ms (10 s): the files must go either way.
    wait_until(lambda: rack.telemetry("/phub/jobs").get("/phub/jobs") == {}, 15, 0.1)
    print("\n".join(re.findall(r".*(?:phub-bench \(id [0-9]+\) ended|rank [0-9]+ silent for|"
                               r"rank [0-9]+ left).*", rack.log())[-5:]))
    assert rack.newest_ckpt() == -1, "the job ended but its checkpoints stay"


def pbox_sigterm(rack):
    assert rack.pbox_stop(), "the PBox did not stop on SIGTERM"


def test_sigterm(rack):
    # SIGTERM while the workers wait at an iteration boundary (after iteration 8): the PBox
    # writes the live state of iteration 8, the restarted one restores it, and the workers
    # carry on with iteration 9 without going back.
    rack.up(3, "--checkpoint-interval", 0)
    run = rack.bench_bg(3, "--keys", 6, "--key-elems", 5000, "--iterations", 16,
                        "--optimizer", "momentum", "--lr", 0.05, "--pause-at", "8:4000",
                        "--dead-ms", 30000)

    def at_boundary():
        jobs = rack.telemetry("/phub/jobs").get("/phub/jobs") or {}
        return any(j.get("iterations_done") == 9 == j.get("iteration_newest")
                   for j in jobs.values()
                   if j["name"] == "phub-bench")
    assert wait_until(at_boundary, 15, 0.1), "the job never rested after iteration 8"
    pbox_sigterm(rack)
    assert re.search(r"checkpoint of iteration 8 written \(live state\)", rack.log()), \
        "no checkpoint of iteration 8 on SIGTERM"
    rack.pbox_restart()
    assert re.search(r"restored from .* iteration 8,", rack.log()), \
        "the restarted PBox did not restore iteration 8"
    expect(run.report(), 'r["verified"]', 'r["reconnects"] == 3', 'r["rollbacks"] == 0')


def test_sigterm_running(rack):
    # SIGTERM while the workers run flat out: the lcores run on until every segment has
    # passed the next iteration boundary, that state is written (not the periodic snapshot
    # of iteration 0), restored, and the run ends with the reference model.
    rack.up(3, "--checkpoint-interval", 1000)
    run = rack.bench_bg(3, "--keys", 8, "--key-elems", 10000, "--iterations", 300,
                        "--optimizer", "adam", "--lr", 0.01, "--dead-ms", 30000)

    def running():
        jobs = rack.telemetry("/phub/jobs").get("/phub/jobs") or {}
        return any(j.get("iterations_done", 0) >= 10 for j in jobs.values())
    wait_until(running, 15, 0.1)
    pbox_sigterm(rack)
    log = rack.log()
    assert re.search(r"1 of 1 job\(s\) reached an iteration boundary", log), \
        "the job did not reach an iteration boundary"
    saved = [int(s) for s in re.findall(r"checkpoint of iteration ([0-9]+) written \(", log)]
    assert saved and saved[-1] >= 10, "no snapshot of the running job on SIGTERM"
    rack.pbox_restart()
    assert re.search(r"restored from .* iteration %d," % saved[-1], rack.log()), \
        "the restarted PBox did not restore iteration %d" % saved[-1]
    expect(run.report(), 'r["verified"]', 'r["reconnects"] == 3')


def test_restart_orphan(rack):
    # The PBox is killed with a checkpoint on disk, and so are its workers: the PBox started
    # again restores the job, no worker ever JOINs it, and once timeouts.worker_dead_ms has
    # passed without a joined rank the PBox frees it and removes its checkpoint files. A
    # worker that comes later gets a new job of that name, from iteration 0, and ends exact.
    rack.up(2, "--checkpoint-interval", 2, config_edit=timeouts(1500))
    ranks = [rack.start_rank(r, 2, "--keys", 4, "--key-elems", 10000, "--iterations", 100000,
                             "--optimizer", "sgd", "--job", "orphan", "--dead-ms", 30000,
                             name="o%d" % r) for r in (0, 1)]
    wait_ckpt(rack, 2)
    assert rack.newest_ckpt() >= 2, "no checkpoint of iteration 2 or later"
    # The PBox first: killed before it, the workers would time out and the job end as usual.
    rack.pbox_kill()
    for run in ranks:
        killed_rank(run)
    print("PBox and workers killed; newest checkpoint: iteration %d" % rack.newest_ckpt())
    # The PBox restores the job, and starts its worker_dead_ms, before it says it is ready:
    # the lower bound counts from before the restart, the print from the ready PBox.
    restarted = time.monotonic()
    rack.pbox_restart()
    ready = time.monotonic()
    assert re.search(r"job orphan \(id [0-9]+\) restored from", rack.log()), \
        "the restarted PBox did not restore the job"

    def orphan_jobs():
        """How many jobs named orphan /phub/jobs lists (-1: no answer)."""
        jobs = rack.telemetry("/phub/jobs").get("/phub/jobs")
        return -1 if jobs is None else sum(j["name"] == "orphan" for j in jobs.values())
    assert orphan_jobs() == 1, "the restored job is not in /phub/jobs"
    gone = wait_until(lambda: orphan_jobs() == 0, 10, 0.1)
    elapsed_ms = (time.monotonic() - ready) * 1000
    since_restart_ms = (time.monotonic() - restarted) * 1000
    print("the restored job left /phub/jobs %d ms after the PBox was ready, %d ms after its"
          " restart began" % (elapsed_ms, since_restart_ms))
    assert gone, "the restored job is still there after %d ms" % elapsed_ms
    assert since_restart_ms >= 1500, \
        "the restored job was freed before worker_dead_ms (1500 ms)"
    assert re.search(r"job orphan \(id [0-9]+\): restored from checkpoint, no worker joined "
                     r"within worker_dead_ms 1500 ms: freed", rack.log()), \
        "the PBox did not log why it freed the job"
    assert rack.newest_ckpt() == -1, "the freed job's checkpoints stay"
    # A worker that comes back now starts the job anew: the initial-model round, no resume.
    r = rack.bench(2, "--keys", 4, "--key-elems", 10000, "--iterations", 3, "--optimizer",
                   "sgd", "--job", "orphan")
    expect(r, *EXACT, 'r["reconnects"] == 0', 'all(w["resumed_at"] == 0 for w in r["per_worker"])')


# -- workers that stop, die and come back -------------------------------------------------------

def test_straggler(rack):
    # Rank 1's worker stops (SIGSTOP) mid-run: telemetry names it as the rank the oldest
    # iteration waits on, and as the one not heard from; after SIGCONT the run ends exact.
    rack.up(3)
    ranks = [rack.start_rank(r, 3, "--keys", 8, "--key-elems", 100000, "--iterations", 50,
                             "--job", "strag", name="s%d" % r) for r in range(3)]
    rack.wait_job_iterations("strag", 3)
    victim = ranks[1].worker()
    subprocess.run(["kill", "-STOP", str(victim)], check=True)
    try:
        time.sleep(3)
        j = rack.telemetry("/phub/job,strag").get("/phub/job") or {}
    finally:
        subprocess.run(["kill", "-CONT", str(victim)], check=True)
    ranks_tel = {r: j["rank_%d" % r] for r in range(3)}
    print("waiting_on", j["waiting_on"], "at iteration", j["waiting_iteration"],
          {r: (v["last_heard_ms"], v.get("newest_iteration"), v.get("lag"))
           for r, v in ranks_tel.items()})
    assert j["waiting_on"] == [1]
    assert ranks_tel[1]["last_heard_ms"] >= 2500
    assert all(ranks_tel[r]["last_heard_ms"] < ranks_tel[1]["last_heard_ms"] - 1000
               for r in (0, 2))
    assert all(v["address"].startswith("10.") for v in ranks_tel.values())
    for run in ranks:
        expect(run.report(), *EXACT)


def elastic_config(name, nonce):
    return timeouts(1500) + """
c["jobs"] = [{"name": "%s", "nonce": "%s", "workers": 4, "deterministic": True,
    "on_worker_dead": "continue", "optimizer": {"type": "sgd", "lr": 0.01}}]""" % (name, nonce)


def test_elastic(rack):
    # A job of 4 declared on_worker_dead "continue": rank 3 is killed (it SIGKILLs itself
    # after iteration 4, no LEAVE), the PBox removes it after timeouts.worker_dead_ms from
    # iteration 5 on, tells the others (WORLD), and ranks 0-2 finish the 10 iterations with
    # the model a reference of that membership history computes, bit for bit (rank order).
    rack.up(4, config_edit=elastic_config("elastic", "0x5ad1c0ffee7e4b37"))
    start = time.monotonic()
    opts = ("--layout", rack.layout(MIXED), "--iterations", 10, "--gradients", "random",
            "--deterministic", "--job", "elastic", "--nonce", "0x5ad1c0ffee7e4b37",
            "--optimizer", "sgd", "--lr", 0.01)
    ranks = [rack.start_rank(r, 4, *opts, *(("--die-at", 4) if r == 3 else ()),
                             name="e%d" % r) for r in range(4)]
    assert ranks[3].wait() != 0, "rank 3 did not die"
    assert "dies after iteration 4" in ranks[3].stderr(), "rank 3 did not die at 4"
    for run in ranks[:3]:
        expect(run.report(), *EXACT, 'r["verify_mode"] == "exact"',
               'r["per_worker"][0]["world_end"] == 3', 'r["per_worker"][0]["removed"] == 1',
               'r["per_worker"][0]["iterations"] == 10')
    print("three ranks finished %d ms after the start" % ((time.monotonic() - start) * 1000))
    removed = re.findall(r".*removed from iteration.*", rack.log())
    print("\n".join(removed))
    assert any(re.search(r"rank 3 silent for [0-9]* ms .*removed from iteration 5 on", line)
               for line in removed), "the PBox did not log the removal"


def test_elastic_rejoin(rack):
    # As elastic, then rank 3 is started again once the PBox removed it: it JOINs, is taken
    # back two iterations ahead of the segments (while the others idle after iteration 6),
    # and the four finish 12 iterations with the model of that history, bit for bit.
    rack.up(4, config_edit=elastic_config("rejoin", "0x5ad1c0ffee7e4b38"))
    opts = ("--layout", rack.layout(MIXED), "--iterations", 12, "--gradients", "random",
            "--deterministic", "--job", "rejoin", "--nonce", "0x5ad1c0ffee7e4b38",
            "--optimizer", "sgd", "--lr", 0.01)
    ranks = [rack.start_rank(r, 4, *opts, *(("--die-at", 4) if r == 3 else
                                            ("--pause-at", "6:4000")), name="j%d" % r)
             for r in range(4)]
    assert ranks[3].wait() != 0, "rank 3 did not die"
    removed = re.compile(r"rank 3 silent .*removed from iteration 5 on")
    assert wait_until(lambda: removed.search(rack.log()), 5), "the PBox did not remove rank 3"
    ranks[3] = rack.start_rank(3, 4, *opts, name="j3")
    for run in ranks:
        expect(run.report(), *EXACT, 'r["verify_mode"] == "exact"',
               'r["per_worker"][0]["world_end"] == 4', 'r["per_worker"][0]["removed"] == 0')
    back = re.findall(r".*joins again from iteration.*", rack.log())
    print("\n".join(back))
    assert back, "the PBox did not take rank 3 back"


def test_worker_timeout(rack):
    # Rank 2 is killed (SIGKILL) and never comes back: after timeouts.worker_dead_ms the
    # PBox tells ranks 0 and 1 (ERROR worker_timeout, which they report) and frees the job.
    rack.up(3, config_edit=timeouts(1500))
    mixed = rack.layout(MIXED)
    ranks = [rack.start_rank(r, 3, "--layout", mixed, "--iterations", 100000, "--job",
                             "doomed", name="t%d" % r) for r in range(3)]
    rack.wait_job_iterations("doomed", 3)
    ranks[2].proc.send_signal(signal.SIGKILL)
    start = time.monotonic()
    for r in (0, 1):
        assert ranks[r].wait() != 0, "rank %d succeeded without rank 2" % r
    ranks[2].wait()
    elapsed_ms = (time.monotonic() - start) * 1000
    print("ranks 0 and 1 ended %d ms after rank 2 was killed" % elapsed_ms)
    # worker_dead_ms, two liveness checks, the LEAVE the workers still try: 4 s of slack
    assert elapsed_ms < 5500, "the other ranks waited %d ms" % elapsed_ms
    for r in (0, 1):
        err = ranks[r].stderr()
        assert re.search(r"worker_timeout: rank 2 silent for [0-9]* ms", err), \
            "rank %d does not say why:\n%s" % (r, err[-500:])
    assert "rank 2 silent for" in rack.log(), "the PBox did not log the timeout"
    assert rack.telemetry("/phub/jobs").get("/phub/jobs") == {}, "the job was not freed"


def test_workers_all_killed(rack):
    # Every worker of a job is killed (SIGKILL) while all of them sit at an iteration boundary:
    # nobody waits on anybody, yet after timeouts.worker_dead_ms the PBox frees the job.
    rack.up(2, config_edit=timeouts(1500))
    ranks = [rack.start_rank(r, 2, "--keys", 4, "--key-elems", 1000, "--iterations", 100,
                             "--pause-at", "3:60000", "--job", "wiped", name="k%d" % r)
             for r in (0, 1)]
    rack.wait_job_iterations("wiped", 3)
    time.sleep(0.5)  # both at the boundary, PINGing
    for run in ranks:
        killed_rank(run)
    start = time.monotonic()
    freed = wait_until(lambda: rack.telemetry("/phub/jobs").get("/phub/jobs") == {}, 10, 0.1)
    elapsed_ms = (time.monotonic() - start) * 1000
    print("the job was freed %d ms after its workers were killed" % elapsed_ms)
    assert freed, "the job of killed workers was not freed within 10 s"
    # Silence counts from the last PING, up to a second before the kill.
    silent = re.findall(r"job wiped \(id [0-9]+\): every joined rank silent for ([0-9]+) ms "
                        r"or more", rack.log())
    print("the PBox: every rank silent for %s ms" % silent)
    assert silent, "the PBox did not log why the job ended"
    assert int(silent[0]) >= 1500, "the job was freed before worker_dead_ms"


def test_worker_rejoin(rack):
    # Rank 2 is killed and started again before timeouts.worker_dead_ms: it joins from a new
    # address (a new session), resumes where the job is, and every model is exact.
    rack.up(3, config_edit=timeouts(5000))
    opts = ("--keys", 8, "--key-elems", 100000, "--iterations", 50, "--job", "phoenix")
    ranks = [rack.start_rank(r, 3, *opts, name="j%d" % r) for r in range(3)]
    rack.wait_job_iterations("phoenix", 5)
    ranks[2].proc.kill()
    ranks[2].wait()
    time.sleep(0.5)
    ranks[2] = rack.start_rank(2, 3, *opts, name="j2b")
    reports = [run.report() for run in ranks]
    print(ranks[2].stderr())
    assert "resumes job" in ranks[2].stderr(), "rank 2 did not resume"
    for r in reports:
        expect(r, *EXACT)
