# SPDX-License-Identifier: BSD-3-Clause
"""End-to-end checks of phub-bench against the soft PBox (kernel UDP, no DPDK, no root).

  phub-bench (parent: forks, supervises, reports)
    |-- rank 0 --.
    |-- rank 1 --+-- UDP on 127.0.0.1 --> phub-soft-pbox  control :P, data :P+1, :P+2
    '-- rank N --'        (libphub)        (started here on ephemeral ports, killed by PID)

meson runs one test of this file per meson test, with the build's own binaries (so that the
ASan and TSan builds test theirs): PHUB_BENCH (phub-bench), PHUB_SOFT_PBOX (phub-soft-pbox) and,
for test_run, PHUB_BENCH_ARGS (phub-bench options, one a line). By hand:
  PHUB_BENCH=build/app/phub-bench/phub-bench \
  PHUB_SOFT_PBOX=build/tests/support/phub-soft-pbox PHUB_BENCH_ARGS=$'--workers\n2' \
  python3 -m pytest -s app/phub-bench/test_bench_soft.py::test_run

  test_run          run with the options; pass when it exits 0 with "verified": true
  test_json_shape   stdout is exactly one JSON object with the documented fields
  test_unreachable  no PBox: a clear error and exit 1 within a bounded time
  test_wrong_nonce  rank 1 joins rank 0's job with another nonce: refused, exit 1
  test_worker_dies  a worker is killed mid-run: the parent says so and exits 1, no hang
  test_elastic      an elastic job of 4 ranks, one phub-bench per rank: rank 3 dies (SIGKILL, no
                    LEAVE) after iteration 4, the soft PBox removes it after --worker-dead-ms
                    (1.5 s: above libphub's 1 s keep-alive, or the waiting ranks look silent
                    too) and the three others finish with the model their membership reference
                    computes, bit for bit, and report 3 ranks left
  test_elastic_rejoin  the same, then rank 3 is started again once removed: the PBox takes it
                    back at an iteration boundary, and all four finish with the model of that
                    history
  test_pbox_dies    the PBox is killed mid-run: the workers fail and the parent exits 1
  test_fault        PHUB_BENCH_FAULT=ulp (rank 0's model one ulp off): SGD fails the check with
                    the key and element named; Nesterov accepts it as rounding (not bitwise)
  test_model_names  --model takes phub-plan's names in any case and the paper's abbreviations,
                    or a layout file; --list-models lists them; an unknown one is a usage error
                    (no PBox)
  test_racks        --servers with two "racks" on the one soft PBox (a flat job there: this
                    checks the ranks' placement, the world size, verification and the digest,
                    not the ring); the option's refusals (with --server, --workers that differ,
                    prefixes)
  test_netns        the worker (rank 0) enters /run/netns/<prefix>1, where the soft PBox listens
                    on its own loopback (root only; skipped otherwise); a missing namespace is
                    an error
A test that needs the soft PBox skips, with the reason, when it has not been built.
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BENCH = os.environ.get("PHUB_BENCH", os.path.join(ROOT, "build", "app", "phub-bench", "phub-bench"))
SOFT = os.environ.get("PHUB_SOFT_PBOX",
                      os.path.join(ROOT, "build", "tests", "support", "phub-soft-pbox"))
PID = os.getpid()


class Bench:
    """One case's soft PBox, background ranks and files in a directory of its own; close()
    stops them by PID whatever the test's outcome."""

    def __init__(self):
        self.tmp = tempfile.mkdtemp(prefix="phub-bench-test.")
        self.pbox = None
        self.port = None
        self.bg = []
        self.netns = None

    def path(self, name):
        return os.path.join(self.tmp, name)

    def read(self, name):
        with open(self.path(name)) as f:
            return f.read()

    def start_pbox(self, *args, wrap=()):
        """The soft PBox on ephemeral ports; its control port from its first line."""
        if not os.access(SOFT, os.X_OK):
            pytest.skip(f"{SOFT} not built")
        with open(self.path("pbox.out"), "w") as out, open(self.path("pbox.err"), "w") as err:
            self.pbox = subprocess.Popen([*wrap, SOFT, "--port", "0", "--lcores", "2", *args],
                                         stdout=out, stderr=err)
        for _ in range(100):
            m = re.search(r"control 127\.0\.0\.1:(\d+),", self.read("pbox.out"))
            if m:
                self.port = int(m.group(1))
                return
            assert self.pbox.poll() is None, "the soft PBox did not start"
            time.sleep(0.05)
        pytest.fail("the soft PBox did not print its port")

    def spawn(self, args, out, env=None):
        """phub-bench ARGS in the background, stdout and stderr to OUT.out and OUT.err."""
        with open(self.path(out + ".out"), "w") as o, open(self.path(out + ".err"), "w") as e:
            p = subprocess.Popen([BENCH, *args], stdout=o, stderr=e, env=env)
        self.bg.append(p)
        return p

    def wait(self, p, seconds):
        """Wait for a background phub-bench at most SECONDS, then kill it: its exit code, 124
        when it had to be killed."""
        try:
            return p.wait(seconds)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            return 124

    def run(self, *args, server=True, env=None):
        """phub-bench with a hard bound, against this PBox with --quiet (server=None: ARGS
        only); its exit code, its output in bench.out and bench.err."""
        pre = ["--server", "127.0.0.1"] if server else []
        if server is not None:
            pre += ["--port", str(self.port), "--quiet"]
        e = dict(os.environ, **env) if env else None
        return self.wait(self.spawn([*pre, *args], "bench", e), 150)

    def report(self, name="bench.out"):
        """The one JSON document phub-bench printed (json.load raises on anything else)."""
        with open(self.path(name)) as f:
            return json.load(f)

    def dump(self):
        for name in sorted(os.listdir(self.tmp)):
            with open(self.path(name), errors="replace") as f:
                lines = f.readlines()
            print(f"--- {name}\n" + "".join(lines[-40:]), end="")

    def close(self):
        for p in self.bg:
            if p.poll() is None:
                p.kill()
                p.wait()
        if self.pbox is not None and self.pbox.poll() is None:
            self.pbox.terminate()
            self.wait(self.pbox, 10)
        if self.netns:
            subprocess.run(["ip", "netns", "del", self.netns], check=False)
        shutil.rmtree(self.tmp, ignore_errors=True)


@pytest.fixture
def b(request):
    failed = request.session.testsfailed
    bench = Bench()
    yield bench
    # The call's report is counted before the teardown: the files of a failed case are shown.
    if request.session.testsfailed > failed:
        bench.dump()
    bench.close()


def free_port():
    """A UDP port on 127.0.0.1 that nothing listens on (free when asked)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_run(b):
    extra = [a for a in os.environ.get("PHUB_BENCH_ARGS", "").split("\n") if a]
    b.start_pbox()
    assert b.run("--job", f"run-{PID}", "--iterations", "5", "--json", *extra) == 0
    r = b.report()
    assert r["verified"] is True
    assert r["exchanges_per_s"] > 0
    assert all(w["verified"] for w in r["per_worker"])
    assert len(r["per_worker"]) == r["workers"]


def test_json_shape(b):
    b.start_pbox()
    assert b.run("--job", f"shape-{PID}", "--workers", "2", "--keys", "5", "--key-elems", "3000",
                 "--iterations", "6", "--warmup", "2", "--json") == 0
    r = b.report()
    assert r["workers"] == 2
    assert r["model_bytes"] == 5 * 3000 * 4
    assert r["iterations"] == 6 and r["warmup"] == 2 and r["keys"] == 5
    assert r["verified"] is True and r["bitwise"] is True
    assert r["dtype"] == "fp32" and r["optimizer"] == "sgd" and r["model"] == "synthetic"
    assert isinstance(r["exchanges_per_s"], float) and r["exchanges_per_s"] > 0
    assert r["goodput_gbps"] > 0 and r["wire_gbps"] > 0
    assert 0 < r["p50_ms"] <= r["p99_ms"]
    assert isinstance(r["retransmits"], int) and isinstance(r["pulls"], int)
    assert r["max_abs_error"] == 0
    assert [w["rank"] for w in r["per_worker"]] == [0, 1]
    assert all(w["timed_iterations"] == 4 for w in r["per_worker"])
    assert all(w["iterations"] == 6 for w in r["per_worker"])
    assert abs(sum(w["exchanges_per_s"] for w in r["per_worker"]) - r["exchanges_per_s"]) \
        <= 1e-8 * max(1.0, r["exchanges_per_s"])
    # No rank verifies (a CPU's work for a while) before every rank's timed loop ended.
    assert min(w["verify_from_monotonic_s"] for w in r["per_worker"]) >= \
        max(w["timed_to_monotonic_s"] for w in r["per_worker"])
    # Without --json: a table on stdout, the same verdict.
    assert b.run("--job", f"table-{PID}", "--workers", "1", "--keys", "2", "--key-elems", "100",
                 "--iterations", "3") == 0, "phub-bench (table)"
    assert re.search(r"^  all ", b.read("bench.out"), re.M), "no total line in the table"


def test_unreachable(b):
    b.port = free_port()
    start = time.monotonic()
    rc = b.run("--job", f"unreach-{PID}", "--workers", "2", "--keys", "2", "--key-elems", "100",
               "--connect-timeout-ms", "1500", "--json")
    took = time.monotonic() - start
    assert rc == 1
    assert took <= 21, f"took {took:.1f} s to give up"
    assert "cannot join" in b.read("bench.err"), "no clear error on stderr"
    r = b.report()
    assert r["verified"] is False
    assert "cannot join" in r["error"]
    assert not any(w["ok"] for w in r["per_worker"])


def test_wrong_nonce(b):
    b.start_pbox()
    # Rank 0 creates the job with nonce 1 and waits for rank 1 in the initial round.
    b.spawn(["--server", "127.0.0.1", "--port", str(b.port), "--quiet", "--job", f"nonce-{PID}",
             "--workers", "2", "--rank", "0", "--nonce", "0x1", "--keys", "2", "--key-elems",
             "100", "--connect-timeout-ms", "20000"], "rank0")
    time.sleep(1)
    assert b.run("--job", f"nonce-{PID}", "--workers", "2", "--rank", "1", "--nonce", "0x2",
                 "--keys", "2", "--key-elems", "100", "--connect-timeout-ms", "5000",
                 "--json") == 1
    assert re.search("nonce|permission", b.read("bench.err"), re.I), \
        "the refusal does not say why"
    r = b.report()
    assert r["verified"] is False
    assert r["per_worker"][0]["rank"] == 1


def elastic_ranks(b, common, extra):
    """Ranks 0-3 of an elastic job, one phub-bench each (bench<r>.out), EXTRA(r) their own
    options."""
    return [b.spawn([*common, "--rank", str(r), *extra(r)], f"bench{r}") for r in range(4)]


def elastic_common(b, job, iterations):
    return ["--server", "127.0.0.1", "--port", str(b.port), "--quiet", "--json", "--job", job,
            "--workers", "4", "--keys", "5", "--key-elems", "3000", "--iterations",
            str(iterations), "--gradients", "random", "--deterministic", "--elastic"]


def test_elastic(b):
    b.start_pbox("--worker-dead-ms", "1500")
    common = elastic_common(b, f"elastic-{PID}", 8)
    ranks = elastic_ranks(b, common, lambda r: ["--die-at", "4"] if r == 3 else [])
    rcs = [b.wait(p, 120) for p in ranks]
    assert rcs[3] != 0, "rank 3 did not die"
    assert "dies after iteration 4" in b.read("bench3.err"), "rank 3 did not die at 4"
    for r in range(3):
        assert rcs[r] == 0, f"rank {r} exited {rcs[r]}"
        rep = b.report(f"bench{r}.out")
        assert rep["verified"] is True and rep["verify_mode"] == "exact"
        assert all(w["bitwise"] for w in rep["per_worker"])
        assert all(w["world_end"] == 3 and w["removed"] == 1 for w in rep["per_worker"])
        assert rep["per_worker"][0]["iterations"] == 8
    print("PASS: three ranks finished without the fourth, models exact to their reference")


def test_elastic_rejoin(b):
    b.start_pbox("--worker-dead-ms", "1500", "--log")
    job = f"rejoin-{PID}"
    common = elastic_common(b, job, 12)
    # The others wait after iteration 6 (PINGing: worker_dead_ms is above libphub's 1 s
    # keep-alive), so that rank 3 is back before the end.
    ranks = elastic_ranks(b, common,
                          lambda r: ["--die-at", "4"] if r == 3 else ["--pause-at", "6:3000"])
    assert b.wait(ranks[3], 120) != 0, "rank 3 did not die"
    for _ in range(100):
        if "removed from iteration" in b.read("pbox.err"):
            break
        time.sleep(0.05)
    assert re.search(r"rank 3 silent .*removed from iteration 5 on", b.read("pbox.err")), \
        "the PBox did not remove rank 3"
    rc3 = b.wait(b.spawn([*common, "--rank", "3"], "again3"), 120)
    rcs = [b.wait(p, 120) for p in ranks[:3]]
    m = re.search(r"rank 3, removed from iteration 5, joins again from iteration (\d+)",
                  b.read("pbox.err"))
    assert m, "the PBox did not take rank 3 back"
    back = m.group(1)
    print(f"rank 3: out from iteration 5, back from iteration {back}")
    assert f"resumes job '{job}' at iteration {back}" in b.read("again3.err"), \
        f"rank 3 did not resume at {back}"
    assert rc3 == 0, f"rank 3 (again) exited {rc3}"
    for r, out in [(0, "bench0"), (1, "bench1"), (2, "bench2"), (3, "again3")]:
        assert r == 3 or rcs[r] == 0, f"rank {r} exited {rcs[r]}"
        rep = b.report(out + ".out")
        assert rep["verified"] is True and rep["verify_mode"] == "exact"
        assert all(w["bitwise"] for w in rep["per_worker"])
        assert all(w["world_end"] == 4 and w["removed"] == 0 for w in rep["per_worker"])
    print("PASS: rank 3 died, was removed, came back; four models exact to that history")


def test_worker_dies(b):
    b.start_pbox()
    parent = b.spawn(["--server", "127.0.0.1", "--port", str(b.port), "--quiet", "--job",
                      f"dies-{PID}", "--workers", "2", "--keys", "4", "--key-elems", "2000",
                      "--iterations", "1000000", "--json"], "bench")
    victim = None
    for _ in range(100):
        out = subprocess.run(["pgrep", "-P", str(parent.pid), "-n"], capture_output=True,
                             text=True).stdout.strip()
        if out:
            victim = int(out)
            break
        time.sleep(0.05)
    assert victim, "no worker process found"
    time.sleep(1)
    os.kill(victim, signal.SIGKILL)
    rc = b.wait(parent, 30)
    assert rc == 1, f"exit {rc}, expected 1 (124: the parent hung)"
    assert re.search("died|killed by signal 9", b.read("bench.err")), "the death is not reported"
    r = b.report()
    assert r["verified"] is False
    assert any(not w["ok"] for w in r["per_worker"])


def test_pbox_dies(b):
    b.start_pbox()
    parent = b.spawn(["--server", "127.0.0.1", "--port", str(b.port), "--quiet", "--job",
                      f"pdies-{PID}", "--workers", "2", "--keys", "4", "--key-elems", "2000",
                      "--iterations", "1000000", "--dead-ms", "2000", "--json"], "bench")
    time.sleep(2)
    b.pbox.kill()
    b.pbox.wait()
    rc = b.wait(parent, 60)
    assert rc == 1, f"exit {rc}, expected 1 (124: the parent hung)"
    r = b.report()
    assert r["verified"] is False
    assert all(not w["ok"] for w in r["per_worker"])
    assert r["per_worker"][0]["iterations"] > 0


def test_fault(b):
    b.start_pbox()
    ulp = {"PHUB_BENCH_FAULT": "ulp"}
    assert b.run("--job", f"fault-{PID}", "--workers", "2", "--keys", "5", "--key-elems", "1000",
                 "--json", env=ulp) == 1, "a wrong model, expected exit 1"
    assert "model differs from the reference in 1 of 5000 elements; first: key 2 element 0" \
        in b.read("bench.err"), "the mismatch is not described"
    r = b.report()
    assert r["verified"] is False and r["failed_workers"] == 0
    assert r["per_worker"][0]["mismatches"] == 1 and r["per_worker"][1]["mismatches"] == 0
    assert r["per_worker"][1]["verified"] is True
    assert 0 < r["max_abs_error"] < 1e-6
    assert b.run("--job", f"fault2-{PID}", "--workers", "2", "--keys", "5", "--key-elems", "1000",
                 "--optimizer", "nesterov", "--json", env=ulp) == 0, \
        "a one-ulp difference with Nesterov, expected exit 0"
    r = b.report()
    assert r["verified"] is True and r["bitwise"] is False and r["max_abs_error"] > 0


def test_racks(b):
    b.start_pbox()
    assert b.run("--job", f"racks-{PID}", "--servers", "127.0.0.1:1,127.0.0.1:2", "--keys", "4",
                 "--key-elems", "3000", "--iterations", "3", "--json", server=False) == 0
    r = b.report()
    assert r["verified"] is True and r["workers"] == 3 and len(r["per_worker"]) == 3
    assert [k["first_rank"] for k in r["racks"]] == [0, 1]
    assert [k["ranks"] for k in r["racks"]] == [1, 2]
    assert r["verify_mode"] == "exact"
    assert len(r["model_digest"]) == 16
    assert all(w["model_digest"] == r["model_digest"] for w in r["per_worker"])
    digest = r["model_digest"]
    # The same run again, by the deprecated spelling --racks: it still works, says so, and
    # gives the same model, the same digest.
    assert b.run("--job", f"racks2-{PID}", "--racks", "127.0.0.1:2,127.0.0.1:1", "--keys", "4",
                 "--key-elems", "3000", "--iterations", "3", "--json", server=False) == 0
    assert "--racks is deprecated: use --servers" in b.read("bench.err")
    assert b.report()["model_digest"] == digest
    # Random gradients across racks: within tolerance, whatever --deterministic says.
    assert b.run("--job", f"racks3-{PID}", "--servers", "127.0.0.1:1,127.0.0.1:1", "--keys", "2",
                 "--key-elems", "3000", "--iterations", "3", "--gradients", "random",
                 "--deterministic", "--json", server=False) == 0
    assert b.report()["verify_mode"] == "tolerance"
    for bad in ["--server 127.0.0.1", "--workers 4", "--netns-prefixes a,b,c",
                "--netns-prefix a --netns-prefixes a,b"]:
        rc = b.run("--servers", "127.0.0.1:1,127.0.0.1:2", "--keys", "1", "--key-elems", "10",
                   *bad.split(), server=False)
        assert rc == 2, f"--servers with {bad}: exit {rc}, expected 2"
    assert b.run("--server", "127.0.0.1", "--workers", "2", "--netns-prefixes", "a,b", "--keys",
                 "1", "--key-elems", "10", server=False) == 2, "--netns-prefixes without --servers"
    assert b.run("--servers", "127.0.0.1:0", "--keys", "1", "--key-elems", "10",
                 server=False) == 2, "--servers 127.0.0.1:0"
    assert "--servers: rack 0: ranks '0'" in b.read("bench.err"), \
        "--servers 127.0.0.1:0: the reason is not said"


def test_netns(b):
    if os.geteuid() != 0 or not shutil.which("ip"):
        pytest.skip("needs root and ip(8)")
    prefix = f"phb{PID}-w"
    netns = prefix + "1"
    subprocess.run(["ip", "netns", "add", netns], check=True)
    b.netns = netns
    subprocess.run(["ip", "-n", netns, "link", "set", "lo", "up"], check=True)
    # ip netns exec execs the program: the process started is the soft PBox itself.
    b.start_pbox(wrap=["ip", "netns", "exec", netns])
    assert b.run("--job", f"netns-{PID}", "--workers", "1", "--netns-prefix", prefix, "--keys",
                 "4", "--key-elems", "1000", "--json") == 0
    assert b.report()["verified"] is True
    assert b.run("--job", f"netns2-{PID}", "--workers", "1", "--netns-prefix",
                 f"nonexistent-{PID}-", "--keys", "1", "--key-elems", "10", "--json") == 1, \
        "a missing namespace, expected exit 1"
    assert f"cannot open network namespace /run/netns/nonexistent-{PID}-1" \
        in b.read("bench.err"), "the missing namespace is not named"


def test_model_names(b):
    def layout(*args):
        rc = b.run(*args, "--print-layout", server=None)
        with open(b.path("bench.out")) as o, open(b.path("bench.err")) as e:
            text = o.read() + e.read()
        return rc, text.rstrip("\n").split("\n")[-1], text

    for m in ["resnet50", "RN50", "Resnet50", "rn50"]:
        rc, last, _ = layout("--model", m)
        assert rc == 0, f"--model {m}"
        assert last == "# resnet50: 161 keys, 25557032 elements", f"--model {m}"
    # A network of phub-plan's table without a layer list here: its Table 3 size.
    rc, last, _ = layout("--model", "GN")
    assert rc == 0 and last == "# googlenet: 3 keys, 9961472 elements"
    # A file: --model FILE as --layout FILE.
    for o in ["--model", "--layout"]:
        rc, last, _ = layout(o, os.path.join(HERE, "test_layout.json"))
        assert rc == 0 and last == "# test_layout.json: 12 keys, 596521 elements", f"{o} FILE"
    rc, _, text = layout("--model", "resnet9000")
    assert rc == 2, "--model resnet9000: expected exit 2"
    assert "unknown model 'resnet9000'" in text, "no clear error"
    assert b.run("--list-models", server=None) == 0
    rows = b.read("bench.out").split("\n")[:-1]
    assert len(rows) == 10, "--list-models: not 9 models and a header"
    assert "resnet50\tRN50\t161\t25557032\ttorchvision tensors" in rows, "no resnet50 row"
