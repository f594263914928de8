# SPDX-License-Identifier: BSD-3-Clause
"""A virtual rack with phub-pbox in it, driven from Python: what the rack's pytest scenarios
(tests/integration/test_*.py, the `rack` fixture of their conftest.py) do with it.

The plumbing (namespaces, veths, bridges, tc) stays in scripts/virtual-rack; a Rack runs it,
starts and stops the PBox, runs phub-bench in the workers' namespaces and reads the PBox's
telemetry and log. close() undoes everything it made, whatever state the scenario left.
"""

import glob
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from . import config, report, telemetry

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STATE_ROOT = os.environ.get("PHUB_VRACK_STATE_DIR", "/run/phub-vrack")
# A layout of keys that are not multiples of a segment (352 fp32 at MTU 1500) or of a chunk
# (8096 elements): tiny keys, a key of many chunks, odd sizes.
MIXED = [1, 3, 7, 351, 353, 1000, 8096, 8097, 50000, 17]


class RackError(AssertionError):
    """Something the scenario needed from the rack did not happen; str() says what."""


def seed_id(seed, lo=100, span=150):
    """A rack id in lo .. lo+span-1 from a scenario's name (md5's first 16 bits), so that
    scenarios keep their own rack and subnet 10.<id>.0.0/24 from run to run."""
    return int(hashlib.md5(seed.encode()).hexdigest()[:4], 16) % span + lo


def can_run():
    """None when a rack can be brought up here, else why not (for a skip)."""
    if os.geteuid() != 0:
        return "the virtual rack needs root (network namespaces)"
    if not os.path.exists("/dev/net/tun"):
        return "no /dev/net/tun for net_tap"
    return None


def wait_until(cond, timeout, step=0.05):
    """cond() until it is true or TIMEOUT seconds have passed; its last value."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v or time.monotonic() >= deadline:
            return v
        time.sleep(step)


def rss_kb(pid):
    """The resident set of process PID in kB (VmRSS)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RackError("process %d has no VmRSS" % pid)


def _tail(path, n=5):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


class Run:
    """A phub-bench process started in the background; its JSON report in out, stderr in err."""

    def __init__(self, proc, out, err, what):
        self.proc, self.out, self.err, self.what = proc, out, err, what

    @property
    def pid(self):
        return self.proc.pid

    def alive(self):
        return self.proc.poll() is None

    def wait(self, timeout=240):
        """The exit status (after timeout seconds: killed, and RackError)."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise RackError("%s still ran after %d s" % (self.what, timeout))

    def stderr(self):
        with open(self.err, errors="replace") as f:
            return f.read()

    def stdout(self):
        with open(self.out, errors="replace") as f:
            return f.read()

    def report(self):
        """The exit status must be 0; then the report, a dict."""
        rc = self.wait()
        if rc != 0:
            raise RackError("%s exited %d:\n%s" % (self.what, rc, _tail(self.err)))
        return report.load(self.out)

    def worker(self):
        """The pid of this phub-bench's first child, the worker process that talks to the
        PBox (None when there is none)."""
        p = subprocess.run(["pgrep", "-P", str(self.pid)], capture_output=True, text=True)
        pids = p.stdout.split()
        return int(pids[0]) if pids else None


class Rack:
    """Rack NAME of id ID (subnet 10.ID.0.0/24, the PBox at 10.ID.0.1) and its scratch dir."""

    def __init__(self, name, rack_id, vrack, pbox_bin, bench_bin, hostile_bin=None):
        self.name, self.id = name, rack_id
        self.vrack, self.pbox_bin, self.bench_bin = vrack, pbox_bin, bench_bin
        self.hostile_bin = hostile_bin
        self.server = "10.%d.0.1" % rack_id
        self.state_dir = os.path.join(STATE_ROOT, name)
        self.ckpt_dir = os.path.join(self.state_dir, "checkpoints")
        self.tmp = tempfile.mkdtemp(prefix="phub-%s." % name)
        self.pbox_args = []
        self.started = False
        self._runs = []
        self._aliases = []

    # -- the rack and its PBox --------------------------------------------------------------

    def _vrack(self, *args, timeout=120):
        return subprocess.run([self.vrack] + [str(a) for a in args], capture_output=True, text=True,
                              timeout=timeout)

    def plumb(self, workers, *options):
        """virtual-rack up with WORKERS workers and OPTIONS: the namespaces and links, the
        PBox's config written, no PBox started."""
        self._vrack("down", "--name", self.name)
        p = self._vrack("up", "--name", self.name, "--id", str(self.id), "--workers",
                        workers, *options, timeout=300)
        if p.returncode != 0:
            raise RackError("the rack did not come up:\n" + p.stdout + p.stderr)

    def up(self, workers, *options, config_edit=None, pbox_args=()):
        """The rack (plumb), the config edited (Python statements on the dict c,
        docs/config.md), then the PBox started."""
        self.plumb(workers, *options)
        if config_edit:
            config.edit(os.path.join(self.state_dir, "pbox.json"), config_edit)
        self.pbox_args = list(pbox_args)
        self.pbox_start()

    def pbox_start(self):
        p = self._vrack("pbox-start", "--name", self.name, "--bin", self.pbox_bin, "--",
                        *self.pbox_args)
        if p.returncode != 0:
            raise RackError("the PBox did not start:\n" + p.stdout + p.stderr)
        self.started = True

    def pbox_restart(self):
        """Start the PBox again; the log so far is kept as pbox-1.log in tmp."""
        shutil.copy(self.log_path(), os.path.join(self.tmp, "pbox-1.log"))
        self.pbox_start()

    def pbox_stop(self):
        """SIGTERM (virtual-rack pbox-stop): True when the PBox stopped with status 0."""
        self.started = False
        return self._vrack("pbox-stop", "--name", self.name).returncode == 0

    def pbox_kill(self):
        """SIGKILL to the PBox, back once it is gone."""
        _kill_and_wait(self.pbox_pid())
        self.started = False

    def pbox_pid(self):
        with open(os.path.join(self.state_dir, "pbox.pid")) as f:
            return int(f.read())

    def log_path(self):
        return os.path.join(self.state_dir, "pbox.log")

    def log(self):
        with open(self.log_path(), errors="replace") as f:
            return f.read()

    def log_tail(self, n=20):
        """The end of the PBox's log without its lcores' serving lines, for a failure."""
        if not os.path.exists(self.log_path()):
            return ""
        return "\nthe PBox's log ends with:\n" + _log_tail(self.log(), n)

    def stop_check(self):
        """The PBox stops on SIGTERM and logs its clean stop (every scenario's last check)."""
        stopped = self.pbox_stop()
        log = self.log()
        assert stopped, "the PBox did not stop on SIGTERM" + self.log_tail()
        assert "phub.pbox: stopped:" in log, "the PBox did not log its clean stop" + \
            self.log_tail()

    def close(self):
        """Kill what the scenario left running, remove the namespace aliases, bring the rack
        down and remove the scratch dir."""
        for run in self._runs:
            if run.alive():
                run.proc.kill()
                run.proc.wait()
        for path in self._aliases:
            if os.path.islink(path):
                os.unlink(path)
        self._vrack("down", "--name", self.name)
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- namespaces and telemetry -----------------------------------------------------------

    def ns(self, who):
        """The namespace of "pbox", "tor" or worker i (an int)."""
        return "%s-%s" % (self.name, "w%d" % who if isinstance(who, int) else who)

    def exec(self, who, *cmd, **kw):
        """CMD in a namespace of the rack (subprocess.run's keywords; text output captured)."""
        kw.setdefault("capture_output", True)
        kw.setdefault("text", True)
        return subprocess.run(["ip", "netns", "exec", self.ns(who)] + [str(c) for c in cmd], **kw)

    def probe(self, who, *args, **kw):
        """python3 -m phubrack.probe ARGS in a namespace of the rack (see probe.py)."""
        env = dict(os.environ, PYTHONPATH=PYTHON_DIR, PYTHONDONTWRITEBYTECODE="1")
        return self.exec(who, sys.executable, "-m", "phubrack.probe", *args, env=env, **kw)

    def netns_alias(self, prefix, *workers):
        """<rack>-<prefix>1 -> worker W1's namespace and so on: a phub-bench with
        --netns-prefix <rack>-<prefix> puts its rank i on worker W(i+1). Gone at close()."""
        for i, w in enumerate(workers, 1):
            path = "/run/netns/%s-%s%d" % (self.name, prefix, i)
            if os.path.lexists(path):
                os.unlink(path)
            os.symlink("/run/netns/" + self.ns(w), path)
            self._aliases.append(path)
        return "%s-%s" % (self.name, prefix)

    def netem(self, worker, *args):
        """virtual-rack netem on worker WORKER's link, both directions (ARGS: netem's, or
        "off"); RackError when it refuses."""
        p = self._vrack("netem", "--name", self.name, "--worker", worker, *args)
        if p.returncode != 0:
            raise RackError("netem %s on worker %s: %s" % (" ".join(map(str, args)), worker,
                                                           p.stderr))

    def pin_arp(self, *workers):
        """Make each worker's neighbour entry for the PBox permanent (after a clean run has
        resolved it), so that an impaired link loses datagrams and not ARP replies."""
        for w in workers:
            words = self.exec(w, "ip", "neigh", "show", self.server).stdout.split()
            if "lladdr" not in words[:-1]:
                raise RackError("worker %d has no neighbour entry for %s" % (w, self.server))
            mac = words[words.index("lladdr") + 1]
            self.exec(w, "ip", "neigh", "replace", self.server, "lladdr", mac, "dev", "eth0",
                      "nud", "permanent", check=True)

    def link_tx_packets(self, w):
        """Frames worker W's eth0 sent. Each datagram of a UDP GSO message counts (UDP
        OutDatagrams would count the message once), before the link's impairment drops any:
        the rack's BPF fallback loses them at the ToR's end."""
        return int(self.exec(w, "cat", "/sys/class/net/eth0/statistics/tx_packets",
                             check=True).stdout)

    def udp_in_csum_errors(self, w):
        """Datagrams worker W's kernel dropped for a bad UDP checksum."""
        lines = [line.split() for line in self.exec(w, "cat", "/proc/net/snmp",
                                                    check=True).stdout.splitlines()
                 if line.startswith("Udp:")]
        return int(dict(zip(lines[0], lines[1]))["InCsumErrors"])

    def telemetry(self, *commands):
        """The PBox's answers to telemetry COMMANDS as one dict ({} when it does not answer)."""
        return telemetry.query("phub-" + self.name, commands)

    def wait_job_iterations(self, job, n, timeout=30):
        """Until job JOB has finished N iterations; RackError after TIMEOUT seconds."""
        answer = {}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            answer = self.telemetry("/phub/job," + job)
            # null while the job is not there yet
            if (answer.get("/phub/job") or {}).get("iterations_done", 0) >= n:
                return
            time.sleep(0.1)
        raise RackError("job %s did not reach iteration %d: %s%s" % (job, n, answer,
                                                                   self.runs_said()))

    def runs_said(self):
        """The end of what every background run wrote on stderr, for a failure's message."""
        return "".join("\n%s (%s): %s" % (run.what, "running" if run.alive() else
                                          "exit %d" % run.proc.returncode, _tail(run.err, 3))
                       for run in self._runs)

    def newest_ckpt(self):
        """The iteration of the newest checkpoint file, -1 when there is none."""
        its = [int(f[:-len(".ckpt")].rsplit(".", 1)[1])
               for f in glob.glob(os.path.join(self.ckpt_dir, "*.ckpt"))]
        return max(its, default=-1)

    # -- phub-bench -------------------------------------------------------------------------

    def path(self, name):
        return os.path.join(self.tmp, name)

    def layout(self, keys, name="mixed"):
        """A --layout file of KEYS (element counts) in the scratch dir, written once: ranks
        started one after another read the same file."""
        path = self.path(name + ".json")
        if not os.path.exists(path):
            with open(path + ".tmp", "w") as f:
                json.dump(keys, f)
            os.replace(path + ".tmp", path)
        return path

    def bench_cmd(self, workers, *args, prefix=None, timeout=120, server=None):
        return [self.bench_bin, "--server", server or self.server, "--workers", str(workers),
                "--netns-prefix", prefix or self.ns("w"), "--json", "--quiet",
                "--timeout", str(timeout)] + [str(a) for a in args]

    def start(self, cmd, name, what=None, out_suffix=".json", **kw):
        """CMD in the background, stdout in tmp/NAME.json (or NAME + out_suffix), stderr in
        tmp/NAME.err; kw: Popen's (cwd, env)."""
        cmd = [str(c) for c in cmd]
        out, err = self.path(name + out_suffix), self.path(name + ".err")
        with open(out, "w") as o, open(err, "w") as e:
            proc = subprocess.Popen(cmd, stdout=o, stderr=e,
                                    stdin=subprocess.DEVNULL, **kw)
        run = Run(proc, out, err, what or "phub-bench %s" % " ".join(cmd[1:]))
        self._runs.append(run)
        return run

    def bench_bg(self, workers, *args, name="r", prefix=None, bench_timeout=120, server=None):
        """phub-bench's WORKERS ranks in the workers' namespaces, in the background
        (bench_timeout: its --timeout; server: another PBox than the rack's)."""
        return self.start(self.bench_cmd(workers, *args, prefix=prefix, timeout=bench_timeout,
                                         server=server), name)

    def bench(self, workers, *args, name="r", prefix=None, timeout=240, bench_timeout=120,
              server=None):
        """phub-bench in the foreground: its report, or RackError with its stderr."""
        run = self.bench_bg(workers, *args, name=name, prefix=prefix,
                            bench_timeout=bench_timeout, server=server)
        run.wait(timeout)
        return run.report()

    def start_rank(self, rank, workers, *args, name):
        """Rank RANK of a WORKERS-rank job as a phub-bench of its own, in the background, so
        that it alone can be stopped or killed."""
        return self.start(self.bench_cmd(workers, "--rank", rank, *args), name,
                          "rank %d" % rank)


class MultiRack(Rack):
    """Multi-rack NAME of base id ID (scripts/virtual-rack up --racks, python/phubrack's
    multirack.py for its plan): racks NAME.0 .. NAME.(R-1), rack q of id ID+q with its PBox at
    10.(ID+q).0.1, and the spine NAME-spine on 10.(ID+R).0.0/24. Its PBoxes are started and
    stopped one by one (rack=q); servers is phub-bench's --servers for every worker of every
    rack, ring_cmd a phub-bench of every rank across the racks."""

    def __init__(self, name, base_id, vrack, pbox_bin, bench_bin, hostile_bin=None):
        super().__init__(name, base_id, vrack, pbox_bin, bench_bin, hostile_bin)
        self.racks, self.servers = 0, ""
        self._serving = set()

    def up(self, racks, workers, *options, lcores=1, memory_mb=512):
        """virtual-rack up --racks RACKS --workers WORKERS (one count, or one per rack: "1,2,3")
        with OPTIONS; the PBoxes are not started (edit_configs first, then pbox_start)."""
        self._vrack("down", "--name", self.name)
        p = self._vrack("up", "--name", self.name, "--racks", racks, "--id", self.id,
                        "--workers", workers, "--lcores", lcores, "--memory-mb", memory_mb,
                        *options, timeout=300)
        if p.returncode != 0:
            raise RackError("the multi-rack did not come up:\n" + p.stdout + p.stderr)
        counts = str(workers).split(",")
        self.racks = racks
        self.servers = ",".join("10.%d.0.1:%s" % (self.id + q, counts[q if len(counts) > 1 else 0])
                                for q in range(racks))
        print("multi-rack %s up: %d racks, --servers %s" % (self.name, racks, self.servers))

    def rack_dir(self, q):
        return os.path.join(STATE_ROOT, "%s.%d" % (self.name, q))

    def config_path(self, q):
        return os.path.join(self.rack_dir(q), "pbox.json")

    def edit_configs(self, statements):
        """Python statements on every rack's PBox config c (docs/config.md)."""
        for q in range(self.racks):
            config.edit(self.config_path(q), statements)

    def pbox_start(self, rack=None):
        """Rack RACK's PBox on its config (every rack's when RACK is None)."""
        for q in range(self.racks) if rack is None else [rack]:
            p = self._vrack("pbox-start", "--name", self.name, "--rack", q, "--bin",
                            self.pbox_bin)
            if p.returncode != 0:
                raise RackError("rack %d's PBox did not start on its config:\n%s%s"
                                % (q, p.stdout, p.stderr))
            self._serving.add(q)
        self.started = True

    def pbox_stop(self, rack=0):
        """SIGTERM to rack RACK's PBox: True when it stopped with status 0."""
        self._serving.discard(rack)
        self.started = bool(self._serving)
        return self._vrack("pbox-stop", "--name", self.name, "--rack", rack).returncode == 0

    def pbox_pid(self, rack=0):
        with open(os.path.join(self.rack_dir(rack), "pbox.pid")) as f:
            return int(f.read())

    def pbox_kill(self, rack=0):
        """SIGKILL to rack RACK's PBox, back once it is gone."""
        _kill_and_wait(self.pbox_pid(rack))
        self._serving.discard(rack)
        self.started = bool(self._serving)

    def log_path(self, rack=0):
        return os.path.join(self.rack_dir(rack), "pbox.log")

    def log(self, rack=0):
        with open(self.log_path(rack), errors="replace") as f:
            return f.read()

    def log_tail(self, n=15):
        return "".join("\n--- rack %d's PBox's log ends with:\n%s" % (q, _log_tail(self.log(q), n))
                       for q in range(self.racks) if os.path.exists(self.log_path(q)))

    def stop_check(self):
        """Every PBox still serving stops on SIGTERM and logs its clean stop."""
        bad = []
        for q in sorted(self._serving):
            if not self.pbox_stop(q):
                bad.append("rack %d's PBox did not stop on SIGTERM" % q)
            if "phub.pbox: stopped:" not in self.log(q):
                bad.append("rack %d's PBox did not log its clean stop" % q)
        assert not bad, "; ".join(bad) + self.log_tail()

    def ns(self, who, rack=0):
        """The namespace of "spine", or of "pbox", "tor" or worker i (an int) of rack RACK."""
        if who == "spine":
            return self.name + "-spine"
        return "%s.%d-%s" % (self.name, rack, "w%d" % who if isinstance(who, int) else who)

    def exec(self, who, *cmd, rack=0, **kw):
        kw.setdefault("capture_output", True)
        kw.setdefault("text", True)
        return subprocess.run(["ip", "netns", "exec", self.ns(who, rack)] + [str(c) for c in cmd],
                              **kw)

    def telemetry(self, *commands, rack=0):
        """Rack RACK's PBox's answers to telemetry COMMANDS as one dict."""
        return telemetry.query("phub-%s.%d" % (self.name, rack), commands)

    def ring_cmd(self, *args, timeout=60, servers_opt="--servers", quiet=True):
        """phub-bench with every rank of every rack, each in its rack's worker namespace
        (servers_opt: "--racks", its other spelling; quiet=False: progress on stderr)."""
        return [self.bench_bin, servers_opt, self.servers, "--netns-prefix",
                self.name + ".%r-w", "--json"] + (["--quiet"] if quiet else []) + \
            ["--timeout", str(timeout)] + [str(a) for a in args]


def _log_tail(log, n):
    return "\n".join([line for line in log.splitlines() if "serving" not in line][-n:])


def _kill_and_wait(pid, timeout=10):
    """SIGKILL to PID, back once it is gone. A zombie is waited for too, for a while: the
    leader of a process whose other threads (the DPDK lcores) still exit shows as a zombie
    while they hold its memory and file locks, which a PBox started again on the same file
    prefix would meet."""
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while os.path.exists("/proc/%d" % pid) and not (_zombie(pid) and
                                                     time.monotonic() > deadline):
        time.sleep(0.05)


def _zombie(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def expect(r, *conditions):
    """Every Python condition on the phub-bench report r holds, else AssertionError naming the
    first that does not, with the report's key fields."""
    bad = report.failed(r, conditions)
    assert not bad, "not true: %s in %s" % (bad[0], report.context(r))
    return r
