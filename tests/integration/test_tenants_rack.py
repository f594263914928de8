# SPDX-License-Identifier: BSD-3-Clause
"""Bad input and tenants on one DPDK PBox (meson: tenants-<scenario>): a hostile client beside
real jobs (every bad datagram counted under its drop reason, the jobs exact, nothing crashes; a
JOIN claiming a huge layout refused without the memory it claims), JOINs refused for a wrong
nonce or for memory limits while a job runs on, and eight jobs at once with a hostile client
guessing their ids and tokens. The rack fixture (conftest.py) always tears the rack down and
ends each scenario by stopping the PBox with SIGTERM and finding its clean stop.

                     R-tor: bridge br0
         +--------------+-----------+-----------+-----------+
        tp0            tw1         tw2         tw3         tw4
         |              |           |           |           |
  R-pbox: phub-pbox    R-w1        R-w2        R-w3        R-w4
                       ranks of several jobs per namespace (phub-bench --netns-prefix with
                       /run/netns aliases), phub-hostile in R-w1 beside them
"""

import json
import re
import time

from phubrack import report, telemetry
from phubrack.rack import MIXED, expect, rss_kb, wait_until

RACK_PREFIX = "pf"
RACK_IDS = (150, 100)
EXACT = ('r["verified"]', 'r["bitwise"]')
# What real workers beside may cause on their own (PULLs while a MODEL is not ready yet, late
# retransmits), what is only handed to another lcore, and ARP for other hosts. A MODEL or ACK
# that reaches a worker after its socket closed comes back as ICMP (not_udp).
BACKGROUND = {"future_iteration", "stale_iteration", "duplicate", "wrong_lcore", "not_for_us",
              "not_udp"}


def bench_bg(rack, name, workers, *args, prefix=None):
    """A phub-bench in the background; as the shell tests did, up to a minute to join."""
    return rack.bench_bg(workers, "--connect-timeout-ms", 60000, *args, name=name,
                         prefix=prefix, bench_timeout=100)


class HeldJob:
    """A job whose last rank is held back: its other ranks join and wait in the initial-model
    round (pushing, pulling, their partial sums in the PBox's slots) for as long as the test
    needs, whatever the machine's speed; once the last rank comes (release), the job runs to
    the end."""

    def __init__(self, rack, name, world, prefix, *args):
        self.rack, self.name, self.world, self.prefix, self.args = rack, name, world, prefix, args
        self.runs = [self._rank(r) for r in range(world - 1)]

    def _rank(self, r):
        return bench_bg(self.rack, "%s-%d" % (self.name, r), self.world, "--rank", r, "--job",
                        self.name, *self.args, prefix=self.prefix)

    def release(self):
        self.runs.append(self._rank(self.world - 1))

    def exact(self):
        """Every rank exits 0 with its model exact; one line of figures (the last rank's)."""
        reports = []
        for run in self.runs:
            run.wait(200)
            reports.append(expect(run.report(), *EXACT))
        print(report.summary("%s (rank %d of %d)" % (self.name, self.world - 1, self.world),
                             reports[-1]))
        return reports


def wait_jobs(rack, n):
    """Until N jobs have all their ranks but the held last one joined (up to 60 s): their ids."""
    def ready():
        jobs = rack.telemetry("/phub/jobs").get("/phub/jobs") or {}
        ids = [j["id"] for j in jobs.values() if j["joined"] == j["world_size"] - 1]
        return ids if len(ids) >= n else None
    ids = wait_until(ready, 60, 0.1)
    assert ids, "fewer than %d jobs joined within 60 s%s" % (n, rack.runs_said())
    return ids


def hostile(rack, victim_name, victim_world, ids):
    """phub-hostile from worker 1's namespace against the jobs IDS; the PBox's drop counters
    must have risen by exactly what it sent of each kind (its bad LEAVEs included), and every
    JOIN of VICTIM_NAME with a guessed nonce must get bad_nonce with a text that says nothing of
    the job's shape, whatever shape the JOIN declared."""
    before = rack.telemetry("/phub/stats")
    victims = [a for v in ids for a in ("--victim", v)]
    p = rack.exec(1, rack.hostile_bin, "--server", rack.server, "--victim-name", victim_name,
                  "--victim-world", str(victim_world), *map(str, victims), timeout=120)
    assert p.returncode == 0, "phub-hostile failed:\n" + p.stderr
    h = json.loads(p.stdout)
    time.sleep(0.3)
    after = rack.telemetry("/phub/stats", "/phub/jobs")
    delta = {k: v for k, v in telemetry.stats_delta(before, after).items()
             if k.startswith("drops.") and v}
    delta = {k[len("drops."):]: v for k, v in delta.items()}
    bad = []
    for reason, n in h["expect"].items():
        if delta.get(reason, 0) != n:
            bad.append("%s: sent %d, counted %d" % (reason, n, delta.get(reason, 0)))
    for reason, n in h["at_least"].items():
        if delta.get(reason, 0) < n:
            bad.append("%s: sent %d, counted only %d" % (reason, n, delta.get(reason, 0)))
    extra = set(delta) - set(h["expect"]) - set(h["at_least"]) - BACKGROUND
    if extra:
        bad.append("counted without a cause: %s" % {k: delta[k] for k in extra})
    if h["foreign_models"]:
        bad.append("%d MODELs of other jobs reached the hostile client" % h["foreign_models"])
    # Half of the JOINs declare the job's own shape, half another one: before the nonce was
    # checked first, the latter got layout_mismatch, which told that the job exists and its
    # shape.
    answers = [e for e in h["errors"] if e["victim_join"]]
    if h["victim_joins"] == 0 or len(answers) != h["victim_joins"]:
        bad.append("%d JOINs with a guessed nonce, %d refusals" % (h["victim_joins"],
                                                                    len(answers)))
    if any((e["code"], e["text"]) != ("bad_nonce", "job %s: wrong nonce" % victim_name)
           for e in answers):
        bad.append("a JOIN with a guessed nonce got another refusal: %s" % answers)
    # A LEAVE sent again (its LEAVE_ACK lost) is ACKed again, not counted as a drop.
    if h["leave_acks"] != 3:
        bad.append("%d LEAVE_ACKs for our 3 LEAVEs" % h["leave_acks"])
    alive = [j for j in (after.get("/phub/jobs") or {}).values()
             if not j["name"].startswith("hostile")]
    if len(alive) < len(ids):
        bad.append("only %d of the %d jobs were still running after the attack"
                   % (len(alive), len(ids)))
    print("hostile: %d datagrams, %d reasons counted exactly:" % (h["sent"], len(h["expect"])))
    print("  ", ", ".join("%s %s" % kv for kv in sorted(h["expect"].items())))
    print("   at least:", h["at_least"], " refusals:", sorted({e["code"] for e in h["errors"]}))
    print("   JOINs with a guessed nonce:", h["victim_joins"], "answers:",
          sorted({(e["code"], e["text"]) for e in answers}))
    print("   beside:", {k: v for k, v in delta.items() if k in BACKGROUND})
    assert not bad, "the PBox's counters do not match what the hostile client sent:\n  " + \
        "\n  ".join(bad)
    return h


def test_tenants_hostile(rack):
    # Job A: mixed layout, ranks 0, 1 in w1, w2 and the held rank 2 in w3. Job B: one key of
    # 1000 elements, the shape of half of phub-hostile's JOINs with a guessed nonce (the other
    # half declares another: both must get bad_nonce); ranks in w3, w4 and w1.
    rack.up(4)
    a = HeldJob(rack, "job-a", 3, rack.netns_alias("ja", 1, 2, 3), "--nonce",
                "0x5ad1c0ffee7e4b31", "--layout", rack.layout(MIXED), "--optimizer", "sgd",
                "--iterations", 20)
    b = HeldJob(rack, "job-b", 3, rack.netns_alias("jb", 3, 4, 1), "--nonce",
                "0x7e11d00d2b9a4c63", "--keys", 1, "--key-elems", 1000, "--optimizer", "sgd",
                "--iterations", 200)
    h = hostile(rack, "job-b", 3, wait_jobs(rack, 2))
    print("   refusal texts: %s" % sorted({e["text"] for e in h["errors"]}))
    # One JOIN datagram that claims 10^8 keys: refused at once, and the PBox's memory does not
    # grow by what the claim would cost (800 MB before MAX_JOB_KEYS in control.c).
    rss0 = rss_kb(rack.pbox_pid())
    p = rack.exec(1, rack.hostile_bin, "--server", rack.server, "--join-keys", "100000000",
                  timeout=60)
    rss1 = rss_kb(rack.pbox_pid())
    claim = p.stdout + p.stderr
    print("a JOIN claiming 10^8 keys: %s, PBox RSS %d -> %d kB" % (claim.strip(), rss0, rss1))
    assert p.returncode == 0, "phub-hostile --join-keys failed"
    assert re.search(r'"code": "bad_request".*at most 65536 keys', claim), \
        "the JOIN claiming 10^8 keys was not refused"
    assert rss1 - rss0 < 16384, "the PBox grew by %d kB for one JOIN" % (rss1 - rss0)
    a.release()
    b.release()
    a.exact()
    b.exact()


def refused(rack, label, pattern, workers, *args):
    """A phub-bench that must exit 1 with an error matching PATTERN."""
    run = rack.start(rack.bench_cmd(workers, "--connect-timeout-ms", 5000, *args,
                                    prefix=rack.ns("jx"), timeout=30), label)
    rc, err = run.wait(60), run.stderr()
    assert rc == 1 and re.search(pattern, err), \
        "%s: exit %d, no error matching '%s':\n%s" % (label, rc, pattern, err[-500:])
    print("%s refused: %s" % (label, re.search("refused.*", err).group(0)))


def test_tenants_limits(rack):
    # Small limits written into the rack's config: 6 MB per job, 9 MB in all.
    rack.up(4, config_edit='c["limits"] = {"job_memory_mb": 6, "total_memory_mb": 9}')
    # Job A: 400,000 fp32 elements with SGD, 4.9 MB (model, sums, the checkpoint snapshot
    # buffer, slots); its last rank held until the others have been refused.
    a = HeldJob(rack, "job-a", 3, rack.netns_alias("ja", 1, 2, 3), "--nonce",
                "0x5ad1c0ffee7e4b31", "--keys", 4, "--key-elems", 100000, "--optimizer", "sgd",
                "--iterations", 8)
    wait_jobs(rack, 1)
    rack.netns_alias("jx", 3, 4)
    # 600,000 elements: 7.3 MB, above the per-job limit.
    refused(rack, "too-big", r"no_memory.*limits\.job_memory_mb", 1, "--job", "too-big",
            "--keys", 6, "--key-elems", 100000, "--optimizer", "sgd", "--iterations", 2)
    # 4.9 MB more would make 9.8 MB: within the per-job limit, above the total.
    refused(rack, "over-total", r"no_memory.* 4 MB left of 9 MB \(limits\.total_memory_mb\)", 1,
            "--job", "over-total", "--keys", 4, "--key-elems", 100000, "--optimizer", "sgd",
            "--iterations", 2)
    # Rank 1 of job A again with a guessed nonce, from another namespace.
    refused(rack, "wrong-nonce", "bad_nonce", 3, "--rank", 1, "--job", "job-a", "--nonce",
            "0x1111111111111111", "--keys", 4, "--key-elems", 100000, "--optimizer", "sgd",
            "--iterations", 2)
    a.release()
    a.exact()
    # Job A left: its memory is free again, and the job refused for the total now fits.
    later = bench_bg(rack, "later", 1, "--job", "over-total", "--keys", 4, "--key-elems", 100000,
                     "--optimizer", "sgd", "--iterations", 2, prefix=rack.netns_alias("jy", 3))
    later.wait(200)
    print(report.summary("over-total after job A left", expect(later.report(), *EXACT)))


def test_tenants_eight_jobs(rack):
    # Eight jobs, each its own name, nonce and layout; odd ones with two workers, even ones
    # with one (each plus its held rank); their ranks spread over the four namespaces.
    rack.up(4)
    jobs = []
    for k in range(1, 9):
        prefix = rack.netns_alias("j%d-" % k, k % 4 + 1, (k + 1) % 4 + 1, (k + 2) % 4 + 1)
        nonce = "0x%08x%08x" % (k * 2654435761 % 4294967296, k * 40503)
        jobs.append(HeldJob(rack, "tenant-%d" % k, k % 2 + 2, prefix, "--nonce", nonce,
                            "--keys", 6, "--key-elems", 3000 + 500 * k, "--optimizer", "sgd",
                            "--iterations", 10))
    hostile(rack, "tenant-2", 2, wait_jobs(rack, 8))
    for job in jobs:
        job.release()
    for k, job in enumerate(jobs, 1):
        expect(job.exact()[0], "r['job'] == 'tenant-%d'" % k)
