# SPDX-License-Identifier: BSD-3-Clause
"""PyTorch through the DPDK PBox in a virtual rack (meson: torch-digits*, torchrun-2x2).

test_digits: python/examples/train_digits.py runs one PHub rank in each worker namespace
(phub.torch.DistributedOptimizer over libphub.so.0), deterministic training with an LR
schedule whose lr reaches the PBox in the PUSHes' HYPER extension. Rank 0 must reach 95% test
accuracy; every step's loss must be the one of the same run against the soft PBox on loopback
(the same engine: bit for bit), and that run's must follow one process training on the same
global batches (train_digits.py --check). The session learns the path's MTU at JOIN: no rank
sets one.

  R-pbox: phub-pbox (net_tap, 2 lcores; or as the case's rack options say)
  R-w1: rank 0     R-w2: rank 1

test_torchrun_2x2: docs/pytorch.md's two-host recipe (the block marked "snippet:
torchrun-two-hosts"), run as written in each worker namespace, 2 nodes x 2 processes through
phub-pbox, the job declared in the PBox's config (jobs[0]: name, nonce, workers 4). Before it,
a JOIN with WORLD_SIZE 2 and one with another nonce must be refused with messages that name
jobs[0].workers and WORLD_SIZE, and the nonce. Every step's global loss must equal the same
training against the soft PBox on loopback (4 ranks, deterministic: bit for bit).

  R-w1 (10.I.0.101): node 0, ranks 0 1, torchrun's rendezvous (master)
  R-w2 (10.I.0.102): node 1, ranks 2 3
  the host: phub-soft-pbox on loopback, the reference run

test_ddp_hook_auth: DDP with phub.torch.allreduce_hook and auth=True, on a job the PBox's
config declares with "auth": "required" (the nonce never leaves the workers, every datagram
carries a MAC). One rank in each worker namespace, DDP's process group over gloo between them;
each rank trains the same model first with gloo's allreduce (the reference), then with the
hook through the PBox: every parameter and loss must be bitwise equal, no datagram may fail
its MAC, and a JOIN of the job without auth must be refused with the reason.

  R-pbox: phub-pbox, jobs[0] = ddpauth-ddp, auth "required", optimizer none
  R-w1 (10.I.0.101): rank 0, gloo's rendezvous     R-w2 (10.I.0.102): rank 1
"""

import importlib.util
import json
import os
import re
import subprocess
import time

import pytest

RACK_PREFIX = "pyt"
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("PHUB_BUILD_DIR", os.path.join(ROOT, "build"))
DIGITS = os.path.join(ROOT, "python", "examples", "train_digits.py")
PYTHON = "/usr/bin/python3"
# What every process of the tests sees: Debian's python3 first, the package from the tree.
PENV = {"PATH": "/usr/bin:/bin", "PYTHONPATH": os.path.join(ROOT, "python"),
        "PHUB_BUILD_DIR": BUILD, "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1"}


def need(*modules):
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip("python3 lacks %s" % ", ".join(missing))


def in_ns(rack, who, *cmd, **env):
    """CMD in a namespace of the rack with PENV and ENV."""
    return ["ip", "netns", "exec", rack.ns(who), "env"] + [
        "%s=%s" % kv for kv in dict(PENV, **env).items()] + list(cmd)


def tail(text, n=20):
    return "\n".join(text.splitlines()[-n:])


def steps_equal(rack_losses, ref):
    """None when every step's loss is the reference's, else what differs."""
    if len(rack_losses) == len(ref) and rack_losses == ref:
        return None
    diff = [i for i, (a, b) in enumerate(zip(rack_losses, ref)) if a != b]
    return "%d of %d steps differ from the loopback run (first at step %d)" % (
        len(diff), len(ref), diff[0] if diff else min(len(rack_losses), len(ref)))


TRAIN = ["--epochs", 10, "--optimizer", "sgd", "--lr", 0.5, "--lr-step", 5, "--deterministic"]
# Momentum, a StepLR schedule and two parameter groups on af_packet ports at jumbo frames and
# at 1500: no rank sets an MTU (issue 21: the HYPER extension must fit).
SCHED = ["--epochs", 10, "--optimizer", "momentum", "--lr", 0.05, "--momentum", 0.9,
         "--lr-step", 3, "--param-groups", "--deterministic"]
DIGITS_CASES = {
    "default": ([], TRAIN),
    "sched-mtu9000": (["--driver", "af_packet", "--ports", 2, "--mtu", 9000], SCHED),
    "sched-mtu1500": (["--driver", "af_packet", "--ports", 2, "--mtu", 1500], SCHED),
}


@pytest.mark.parametrize("case", list(DIGITS_CASES), ids=str)
def test_digits(rack, case):
    need("torch", "sklearn")
    up_args, train = DIGITS_CASES[case]
    rack.up(2, *up_args)
    print("rack: %s; training: %s" % (up_args or "net_tap defaults", train))
    ranks = [rack.start(in_ns(rack, r + 1, "timeout", 150, PYTHON, DIGITS, "--mode", "phub",
                              "--rank", r, "--workers", 2, "--server", rack.server,
                              "--port", 47000, "--job", "digits-rack", *train, "--json",
                              rack.path("rank%d.json" % r)),
                        "rank%d" % r, "rank %d" % r, out_suffix=".out") for r in (0, 1)]
    for run in ranks:
        assert run.wait(200) == 0, "%s exited non-zero:\n%s\n%s\nthe PBox's log:\n%s" % (
            run.what, tail(run.stdout()), tail(run.stderr()), tail(rack.log()))
    print(ranks[0].stdout())
    # The same training against the soft PBox on loopback, and one process on the same
    # batches.
    lo = subprocess.run([PYTHON, DIGITS, "--mode", "phub", "--workers", "2",
                         *[str(a) for a in train], "--check", "--build", BUILD, "--json",
                         rack.path("loopback.json")],
                        env=dict(os.environ, **PENV), capture_output=True, text=True,
                        timeout=200)
    assert lo.returncode == 0, "the loopback run or its check failed:\n" + tail(
        lo.stdout + lo.stderr)
    print("\n".join(line for line in lo.stdout.splitlines() if line.startswith("check:")))
    r0, r1, ref = (json.load(open(rack.path(f))) for f in ("rank0.json", "rank1.json",
                                                           "loopback.json"))
    acc = r0["epochs"][-1]["accuracy"]
    assert acc >= 0.95, "test accuracy %.1f%% below 95%%" % (acc * 100)
    losses = [(a[1] + b[1]) / 2 for a, b in zip(r0["steps"], r1["steps"])]
    assert steps_equal(losses, ref["results"][0]["loss"]) is None, steps_equal(
        losses, ref["results"][0]["loss"])
    print("test accuracy %.1f%% after %d epochs in the rack; all %d steps' losses equal to "
          "the loopback run's" % (acc * 100, len(r0["epochs"]), len(losses)))


# -- torchrun -----------------------------------------------------------------------------------

JOB, NONCE, EPOCHS = "digits", "0x6a1f3c5e7d9b2408", 4
JOIN_ONCE = """import torch, phub.torch as pt
pt.init()
pt.DistributedOptimizer(torch.nn.Linear(4, 2), "momentum", lr=0.05, momentum=0.9)"""


def recipe(rack, node):
    """docs/pytorch.md's two-host recipe for node NODE: the documentation's addresses become
    the rack's, and the run writes each rank's losses (deterministic, short)."""
    with open(os.path.join(ROOT, "docs", "pytorch.md")) as f:
        m = re.search(r"<!-- snippet: torchrun-two-hosts -->\n```sh\n(.*?)```", f.read(), re.S)
    assert m, "docs/pytorch.md has no block marked 'snippet: torchrun-two-hosts'"
    text = m.group(1).replace("10.0.0.101", "10.%d.0.101" % rack.id)
    text = re.sub(r"\b10\.0\.0\.1\b", rack.server, text)
    text, n = re.subn(r"^NODE=0\b.*$", "NODE=%d" % node, text, flags=re.M)
    assert n == 1, "the recipe has no line 'NODE=0'"
    return text.rstrip("\n") + " --deterministic --epochs %d --json %s\n" % (
        EPOCHS, rack.path("rank.json"))


def soft_pbox(rack):
    """phub-soft-pbox on loopback (a rank that imports torch on a loaded machine may join
    long after the others): its Run and control port."""
    run = rack.start([os.path.join(BUILD, "tests", "support", "phub-soft-pbox"), "--port", 0,
                      "--lcores", 2, "--worker-dead-ms", 60000], "soft", "the soft PBox",
                     out_suffix=".out")
    for _ in range(50):
        m = re.search(r"control 127\.0\.0\.1:([0-9]+)", run.stdout())
        if m:
            return run, int(m.group(1))
        if not run.alive():
            break
        time.sleep(0.1)
    raise AssertionError("no soft PBox:\n" + run.stdout() + run.stderr())


def test_torchrun_2x2(rack):
    need("torch", "sklearn", "numpy")
    import numpy as np
    # The job declared as an operator would: its name, nonce, world size and optimizer. Ranks
    # that import torch on a loaded machine may join far apart: not a dead worker.
    rack.up(2, config_edit="""c["jobs"] = [{"name": %r, "nonce": %r, "workers": 4,
    "dtype": "fp32", "deterministic": True,
    "optimizer": {"type": "momentum", "lr": 0.05, "momentum": 0.9}}]
c.setdefault("timeouts", {})["worker_dead_ms"] = 60000""" % (JOB, NONCE))
    # A launch of 1 node x 2 processes against the job declared for 4, then another nonce:
    # the worker's error names the config key and the variable to change.
    for world, nonce, wants in (
            (2, NONCE, ("jobs[0].workers is 4", "world size 2 from WORLD_SIZE", "PhubError")),
            (4, "0x1234", ("PhubAuthError", "wrong nonce", "nonce from PHUB_NONCE",
                           "jobs[].nonce"))):
        p = subprocess.run(in_ns(rack, 1, "timeout", "60", PYTHON, "-c", JOIN_ONCE,
                                 PHUB_SERVER=rack.server, PHUB_JOB=JOB, PHUB_NONCE=nonce,
                                 RANK="0", WORLD_SIZE=str(world)),
                           capture_output=True, text=True, timeout=90)
        out = p.stdout + p.stderr
        assert p.returncode != 0, "a JOIN with WORLD_SIZE %d, nonce %s was taken" % (world,
                                                                                   nonce)
        for want in wants:
            assert want in out, "the refusal does not say %r:\n%s" % (want, out)
        print(out.splitlines()[-1])
    nodes = []
    for node in (0, 1):
        script = rack.path("node%d.sh" % node)
        with open(script, "w") as f:
            f.write(recipe(rack, node))
        nodes.append(rack.start(in_ns(rack, node + 1, "timeout", 180, "bash", "-e", script),
                                "node%d" % node, "node %d's launch" % node,
                                out_suffix=".out", cwd=ROOT))
    print("node 0 ran:", open(rack.path("node0.sh")).read())
    for run in nodes:
        assert run.wait(240) == 0, "%s exited non-zero:\n%s\n%s\nthe PBox's log:\n%s" % (
            run.what, tail(run.stdout(), 30), tail(run.stderr()), tail(rack.log()))
    print("\n".join(line for line in nodes[0].stdout().splitlines() if "epoch" in line))
    # The same training against the soft PBox on loopback, 4 ranks in one launch.
    soft, port = soft_pbox(rack)
    lo = subprocess.run([PYTHON, DIGITS, "--mode", "phub", "--workers", "4", "--deterministic",
                         "--epochs", str(EPOCHS), "--server", "127.0.0.1", "--port", str(port),
                         "--json", rack.path("loopback.json")],
                        env=dict(os.environ, **PENV), cwd=ROOT, capture_output=True, text=True,
                        timeout=180)
    soft.proc.terminate()
    assert lo.returncode == 0, "the loopback run failed:\n" + tail(lo.stdout + lo.stderr)
    ranks = [json.load(open(rack.path("rank.json.%d" % r))) for r in range(4)]
    ref = json.load(open(rack.path("loopback.json")))["results"][0]["loss"]
    # The global loss of a step as train_digits.py computes it: the mean of the shards'.
    losses = np.mean([[s[1] for s in r["steps"]] for r in ranks], axis=0).tolist()
    assert steps_equal(losses, ref) is None, steps_equal(losses, ref)
    acc = ranks[0]["epochs"][-1]["accuracy"]
    assert acc >= 0.85, "test accuracy %.1f%% below 85%% after %d epochs" % (
        acc * 100, len(ranks[0]["epochs"]))
    print("2 nodes x 2 processes under torchrun, test accuracy %.1f%%; all %d steps' global "
          "losses equal to the loopback run's" % (acc * 100, len(ref)))


# -- DDP with the hook on an authenticated job --------------------------------------------------

AUTH_JOB, AUTH_NONCE = "ddpauth", "0x25c0ffee9a7b3d41"
DDP_AUTH = """import json, sys
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
import phub, phub.torch as pt

rank, world, master, server, job, nonce, out = sys.argv[1:]
rank, world = int(rank), int(world)
torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)
dist.init_process_group("gloo", init_method="tcp://%s:29531" % master, rank=rank,
                        world_size=world)


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                               torch.nn.Linear(256, 256), torch.nn.Tanh(),
                               torch.nn.Linear(256, 10))


def train(ddp, steps=30):
    g = torch.Generator().manual_seed(1)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for _ in range(steps):
        x = torch.randn(32, 64, generator=g)
        y = torch.randint(0, 10, (32,), generator=g)
        n = 32 // world
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(ddp(x[rank * n:(rank + 1) * n]),
                                                 y[rank * n:(rank + 1) * n])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return [p.detach().clone() for p in ddp.parameters()], losses


ref, ref_losses = train(DDP(model()))
pt.init(server=server, port=47000, job=job, nonce=int(nonce, 0), rank=rank, world_size=world,
        deterministic=True)
refused = ""
if rank == 0:
    # The job requires auth: a JOIN without it is refused, and says why.
    try:
        phub.connect(server, job + "-ddp", int(nonce, 0), rank, world, [16], port=47000,
                     optimizer="none", auth=False, connect_timeout_ms=5000).close()
    except phub.PhubError as e:
        refused = str(e)
hooked = DDP(model())
state = pt.AllreduceState(auth=True)
hooked.register_comm_hook(state, pt.allreduce_hook)
got, got_losses = train(hooked)
stats = state.session.stats() if state.session is not None else {}
state.close()
dist.destroy_process_group()
json.dump({"params_equal": all(torch.equal(a, b) for a, b in zip(ref, got)),
           "params": len(ref), "ref_losses": ref_losses, "got_losses": got_losses,
           "pushes": stats.get("pushes", 0), "ops_completed": stats.get("ops_completed", 0),
           "rx_auth_failed": stats.get("rx_auth_failed", -1), "refused": refused},
          open(out, "w"))
"""


def test_ddp_hook_auth(rack):
    need("torch")
    rack.up(2, config_edit="""c["jobs"] = [{"name": %r, "nonce": %r, "workers": 2,
    "dtype": "fp32", "deterministic": True, "auth": "required",
    "optimizer": {"type": "none"}}]
c.setdefault("timeouts", {})["worker_dead_ms"] = 60000""" % (AUTH_JOB + "-ddp", AUTH_NONCE))
    script = rack.path("ddp_auth.py")
    with open(script, "w") as f:
        f.write(DDP_AUTH)
    master = "10.%d.0.101" % rack.id
    ranks = [rack.start(in_ns(rack, r + 1, "timeout", 170, PYTHON, script, r, 2, master,
                              rack.server, AUTH_JOB, AUTH_NONCE, rack.path("ddp%d.json" % r),
                              GLOO_SOCKET_IFNAME="eth0"),
                        "ddp%d" % r, "rank %d" % r, out_suffix=".out") for r in (0, 1)]
    for run in ranks:
        assert run.wait(200) == 0, "%s exited non-zero:\n%s\n%s\nthe PBox's log:\n%s" % (
            run.what, tail(run.stdout()), tail(run.stderr()), tail(rack.log()))
    res = [json.load(open(rack.path("ddp%d.json" % r))) for r in (0, 1)]
    for r, x in enumerate(res):
        # PHub carried the gradients (DDP's first iterations build its buckets), all sealed.
        assert x["pushes"] > 0 and x["ops_completed"] > 0, "rank %d: %s" % (r, x)
        assert x["rx_auth_failed"] == 0, "rank %d: %d datagrams failed their MAC" % (
            r, x["rx_auth_failed"])
        assert x["params_equal"], "rank %d: the parameters differ from gloo's" % r
        assert x["got_losses"] == x["ref_losses"], "rank %d: the losses differ" % r
    assert res[0]["ref_losses"][0] != res[0]["ref_losses"][-1], "it did not train"
    assert "authenticated" in res[0]["refused"], "a JOIN without auth was not refused " \
        "with the reason: %r" % res[0]["refused"]
    print("DDP with the PHub hook on an authenticated job: %d parameters and %d losses per "
          "rank bitwise equal to gloo's, %d and %d PUSHes, no MAC failed; without auth: %s" % (
              res[0]["params"], len(res[0]["got_losses"]), res[0]["pushes"], res[1]["pushes"],
              res[0]["refused"].splitlines()[0]))
