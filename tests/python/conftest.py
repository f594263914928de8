# SPDX-License-Identifier: BSD-3-Clause
"""Fixtures of the Python tests: the phub package from the source tree and a soft PBox.

meson runs pytest with PHUB_BUILD_DIR (where libphub.so.0 and phub-soft-pbox are) and
PYTHONPATH=python; by hand: PHUB_BUILD_DIR=build PYTHONPATH=python python3 -m pytest tests/python
"""

import os
import re
import subprocess
import sys
import threading
import time

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.setdefault("PHUB_BUILD_DIR", os.path.join(ROOT, "build"))
sys.path.insert(0, os.path.join(ROOT, "python"))

SOFT_PBOX = os.path.join(BUILD, "tests", "support", "phub-soft-pbox")


class SoftPBox:
    """phub-soft-pbox on ephemeral loopback ports, stopped by its PID."""

    def __init__(self, *args, port=0):
        if not os.path.exists(SOFT_PBOX):
            pytest.skip(f"{SOFT_PBOX} not built")
        self.proc = subprocess.Popen([SOFT_PBOX, "--port", str(port), "--lcores", "2", *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        m = re.search(r"control 127\.0\.0\.1:(\d+),", line)
        if not m:
            self.stop()
            raise RuntimeError(f"soft PBox did not start: {line!r}")
        self.port = int(m.group(1))

    def checkpoint(self):
        """SIGUSR1: the soft PBox checkpoints every job (--checkpoint-dir); its answer line."""
        import signal
        self.proc.send_signal(signal.SIGUSR1)
        return self.proc.stdout.readline()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.err = self.proc.stderr.read()
        self.proc.stdout.close()
        self.proc.stderr.close()


@pytest.fixture
def soft_pbox():
    sp = SoftPBox()
    yield sp
    sp.stop()


_job_seq = [0]


@pytest.fixture
def job(request):
    """A job name of its own per test (several tests share one soft PBox in a session)."""
    _job_seq[0] += 1
    return f"py{os.getpid() % 10000}-{_job_seq[0]}-{request.node.name[:30]}".replace("[", "-") \
        .replace("]", "").replace(" ", "")


def run_ranks(n, fn, timeout=60):
    """fn(rank) on n threads at once (each rank's connect is a barrier); their results in rank
    order; the first exception is raised again."""
    results = [None] * n
    errors = [None] * n

    def body(r):
        try:
            results[r] = fn(r)
        except BaseException as e:  # noqa: BLE001
            errors[r] = e

    threads = [threading.Thread(target=body, args=(r,), daemon=True) for r in range(n)]
    for t in threads:
        t.start()
    deadline = time.time() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.time()))
        if t.is_alive():
            raise TimeoutError(f"rank thread still running after {timeout} s")
    for e in errors:
        if e is not None:
            raise e
    return results


def train_rank(net, opt, data, rank, world, sched=None, before_step=None):
    """Rank `rank` of `world` trains net with opt over data, one step per batch on its shard
    (an equal cut of the batch, in rank order), before_step() between backward and step;
    closes opt and returns the parameters after every step."""
    import torch  # only the tests that train need it

    out = []
    for x, y in data:
        shard = slice(rank * len(x) // world, (rank + 1) * len(x) // world)
        opt.zero_grad()
        # The mean over the shard; the PBox averages the shards' means: the global mean.
        torch.nn.functional.cross_entropy(net(x[shard]), y[shard]).backward()
        if before_step is not None:
            before_step()
        opt.step()
        if sched is not None:
            sched.step()
        out.append([p.detach().clone() for p in net.parameters()])
    opt.close()
    return out
