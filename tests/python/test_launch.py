# SPDX-License-Identifier: BSD-3-Clause
"""Launching as PyTorch users do: phub.torch.init() from torchrun's environment, refusals that
say where a value came from, python3 -m phub.run's parsing, and Debian 12's torchrun started
with the flags docs/pytorch.md gives (a 2-process training). The pip install: test_pip.py."""

import json
import os
import shutil
import subprocess
import textwrap

import pytest

import phub
import phub.torch as pt
from conftest import BUILD, ROOT, run_ranks

LIB = os.path.join(BUILD, "lib", "client", "libphub.so.0")
TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                 "MASTER_PORT", "TORCHELASTIC_RUN_ID", "PHUB_JOB", "PHUB_NONCE", "PHUB_RANK",
                 "PHUB_WORLD_SIZE", "PHUB_SERVER", "PHUB_PORT")


@pytest.fixture
def clean_env(monkeypatch):
    for v in TORCHRUN_VARS:
        monkeypatch.delenv(v, raising=False)
    return monkeypatch


def torchrun_env(mp, rank, run_id="none"):
    for k, v in dict(RANK=str(rank), WORLD_SIZE="4", LOCAL_RANK=str(rank % 2),
                     LOCAL_WORLD_SIZE="2", MASTER_ADDR="10.0.0.101", MASTER_PORT="29500",
                     TORCHELASTIC_RUN_ID=run_id, PHUB_SERVER="10.0.0.1").items():
        mp.setenv(k, v)


def test_init_takes_everything_from_torchrun(clean_env):
    torchrun_env(clean_env, 3)
    c = pt.init()
    assert (c["server"], c["rank"], c["world_size"]) == ("10.0.0.1", 3, 4)
    assert (pt.local_rank(), pt.local_world_size()) == (1, 2)
    # No PHUB_JOB: the launch's rendezvous point names the job, the same on every rank.
    assert c["job"] == "torchrun-10.0.0.101:29500"
    assert c["sources"]["world_size"] == "WORLD_SIZE" and c["sources"]["job"] == \
        "the torchrun launch"
    torchrun_env(clean_env, 0)
    c0 = pt.init()
    assert (c0["job"], c0["nonce"]) == (c["job"], c["nonce"]) and c["nonce"] != 0
    # Another launch (another rendezvous id) is another job with another nonce.
    torchrun_env(clean_env, 0, run_id="exp7")
    c7 = pt.init()
    assert c7["job"] == "torchrun-exp7" and c7["nonce"] != c["nonce"]
    # PHUB_JOB names a job the user chose (a declared one, say): its nonce is not guessed.
    clean_env.setenv("PHUB_JOB", "resnet50")
    with pytest.raises(ValueError, match="PHUB_NONCE"):
        pt.init()
    clean_env.setenv("PHUB_NONCE", "0x5be1c2f07a9d3e64")
    c = pt.init()
    assert (c["job"], c["nonce"], c["sources"]["nonce"]) == \
        ("resnet50", 0x5be1c2f07a9d3e64, "PHUB_NONCE")
    # PHUB_RANK and PHUB_WORLD_SIZE win over torchrun's; arguments win over both.
    clean_env.setenv("PHUB_WORLD_SIZE", "8")
    assert pt.init(rank=5)["world_size"] == 8 and pt.rank() == 5


def test_init_refuses_what_cannot_be_a_rank(clean_env):
    torchrun_env(clean_env, 4)
    with pytest.raises(ValueError, match=r"rank 4 \(RANK\) is not below the world size 4"):
        pt.init()
    clean_env.setenv("PHUB_NONCE", "secret")
    with pytest.raises(ValueError, match="PHUB_NONCE"):
        pt.init(rank=0)
    clean_env.delenv("PHUB_SERVER")
    with pytest.raises(ValueError, match="PHUB_SERVER"):
        pt.init(rank=0)


def test_refused_join_says_where_each_value_came_from(clean_env, soft_pbox, job):
    """Rank 0 made the job with one nonce; rank 1, launched with another PHUB_NONCE, is
    refused: the exception carries the PBox's reason and names the variables it took."""
    import torch

    clean_env.setenv("PHUB_SERVER", "127.0.0.1")
    clean_env.setenv("PHUB_PORT", str(soft_pbox.port))
    clean_env.setenv("PHUB_JOB", job)
    clean_env.setenv("PHUB_NONCE", "0x2222")
    clean_env.setenv("RANK", "1")
    clean_env.setenv("WORLD_SIZE", "2")

    def body(r):
        if r == 0:
            # Waits for a rank 1 that never comes.
            with pytest.raises(phub.PhubTimeoutError):
                phub.connect("127.0.0.1", job, 0x1111, 0, 2, [6], port=soft_pbox.port,
                             connect_timeout_ms=3000)
            return None
        import time
        time.sleep(0.3)
        pt.init()
        with pytest.raises(phub.PhubAuthError) as ei:
            pt.DistributedOptimizer(torch.nn.Linear(2, 2), "sgd", lr=0.1)
        return str(ei.value)

    text = run_ranks(2, body, timeout=30)[1]
    assert "wrong nonce" in text and job in text
    assert "nonce from PHUB_NONCE" in text and "world size 2 from WORLD_SIZE" in text
    assert "jobs[].nonce (PHUB_NONCE)" in text


def test_phub_run_parses_every_redirect_value():
    from torch.distributed.elastic.multiprocessing import api

    import phub.run
    phub.run._fix_std_parsing()
    assert api.Std.from_str("0") == api.Std.NONE
    assert api.Std.from_str("3") == api.Std.ALL
    assert api.Std.from_str("0:1,1:3") == {0: api.Std.OUT, 1: api.Std.ALL}
    with pytest.raises(ValueError):
        api.Std.from_str("4")


TRAIN = textwrap.dedent('''
    import json, os, sys
    import torch
    import phub, phub.torch as pt

    pt.init()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    g = torch.Generator().manual_seed(1)
    x = torch.randn(256, 8, generator=g)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0).long()
    loss_fn = torch.nn.functional.cross_entropy
    before = loss_fn(model(x), y).item()
    opt = pt.DistributedOptimizer(model, "momentum", lr=0.1, momentum=0.9)
    n, r = pt.world_size(), pt.rank()
    for epoch in range(5):
        for i in range(0, 256, 32):
            xb, yb = x[i:i + 32], y[i:i + 32]
            opt.zero_grad()
            loss_fn(model(xb[r * 32 // n:(r + 1) * 32 // n]),
                    yb[r * 32 // n:(r + 1) * 32 // n]).backward()
            opt.step()
    after = loss_fn(model(x), y).item()
    opt.close()
    with open(os.path.join(sys.argv[1], f"rank{r}.json"), "w") as f:
        json.dump({"before": before, "after": after, "phub": phub.__file__,
                   "library": phub.library()._name, "local_rank": pt.local_rank(),
                   "params": [p.detach().flatten().tolist() for p in model.parameters()]}, f)
''')


def launch_and_check(cmd, env, tmp, nproc=2):
    """Run a torchrun-style launch of TRAIN and check every rank trained to the same weights."""
    r = subprocess.run(cmd, env=env, cwd=tmp, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, f"{cmd}: exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    ranks = [json.load(open(os.path.join(tmp, f"rank{i}.json"))) for i in range(nproc)]
    for i, res in enumerate(ranks):
        assert res["after"] < 0.7 * res["before"], res
        assert res["params"] == ranks[0]["params"], f"rank {i}'s weights differ from rank 0's"
        assert res["local_rank"] == i
    return ranks, r


def launch_env(soft_pbox, job):
    env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_VARS}
    env.update(PHUB_SERVER="127.0.0.1", PHUB_PORT=str(soft_pbox.port), PHUB_JOB=job,
               PHUB_NONCE="0x77", OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    return env


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_debian_torchrun_starts_with_the_documented_flags(soft_pbox, job, tmp_path):
    """Debian 12's torchrun with --redirects 1 --tee 1 (docs/pytorch.md), 2 processes."""
    torchrun = shutil.which("torchrun", path="/usr/bin:/usr/local/bin")
    if torchrun is None:
        pytest.skip("no torchrun")
    (tmp_path / "train.py").write_text(TRAIN)
    env = launch_env(soft_pbox, job)
    env["PYTHONPATH"] = os.path.join(ROOT, "python")
    env["PHUB_BUILD_DIR"] = BUILD
    launch_and_check([torchrun, "--redirects", "1", "--tee", "1", "--nproc_per_node", "2",
                      "--master_port", str(free_port()), "train.py", str(tmp_path)],
                     env, str(tmp_path))
