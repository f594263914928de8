# SPDX-License-Identifier: BSD-3-Clause
"""docs/pytorch.md's code blocks run as written: every fenced block carries a name
(<!-- snippet: NAME --> on the line before it); the Python ones run here, each as the body of
a program whose beginning defines what the block leaves to the reader (build_model, loader,
rank...) and whose end checks what the block did, 2 ranks under Debian's torchrun against the
soft PBox; the torchrun recipe runs in tests/integration/test_torch_rack.py."""

import json
import os
import re
import shutil
import subprocess
import textwrap

import pytest

from conftest import BUILD, ROOT

DOC = os.path.join(ROOT, "docs", "pytorch.md")
BLOCK = re.compile(r"(?:<!-- snippet: (\S+) -->\n)?```(\w*)\n(.*?)```", re.S)

# What each block leaves to the reader, defined before it runs.
COMMON = '''
import os, json, sys
import torch

def build_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))

g = torch.Generator().manual_seed(1)
X = torch.randn(256, 8, generator=g)
Y = (X[:, 0] > 0).long() + (X[:, 1] > 0).long()
loader = [(X[i:i + 32], Y[i:i + 32]) for i in range(0, 256, 32)]
loss_fn = torch.nn.functional.cross_entropy
epochs = 4

def shard_of_every_batch(loader, rank, world):
    for x, y in loader:
        a, b = rank * len(x) // world, (rank + 1) * len(x) // world
        yield x[a:b], y[a:b]

before = loss_fn(build_model()(X), Y).item()

def learned(opt, factor):
    """After a block trained model with opt: its loss below factor times the untrained one's,
    opt closed; returns what the ranks must agree on."""
    after = loss_fn(model(X), Y).item()
    assert after < factor * before, (before, after)
    opt.close()
    return {"after": after, "w": [p.detach().flatten().tolist() for p in model.parameters()]}
'''

BEFORE = {
    "three-line": "",
    "param-groups": '''
import phub.torch as pt
pt.init()
model = build_model()
''',
    "ddp-hook": '''
model = build_model()
''',
    # No GPU here: .cuda() stays on the CPU and the staging a GPU takes is forced instead.
    "gpu-model": '''
import phub.torch as pt
pt.init()
os.environ["PHUB_FORCE_STAGING"] = "1"
torch.nn.Module.cuda = lambda self, *a, **k: self
''',
    # The block's autocast names CUDA, which this machine lacks: CPU autocast in its place.
    "bf16-autocast": '''
import phub.torch as pt
pt.init()
model = build_model()
opt = pt.DistributedOptimizer(model, "momentum", lr=0.1, momentum=0.9)
_autocast = torch.autocast
torch.autocast = lambda device_type, **k: _autocast(device_type="cpu", **k)
data = [b for e in range(epochs) for b in shard_of_every_batch(loader, pt.rank(),
                                                                  pt.world_size())]
''',
    "accumulation": '''
import phub.torch as pt
pt.init()
model = build_model()
micro_batches = [(x[i:i + 4], y[i:i + 4]) for e in range(epochs)
                 for x, y in shard_of_every_batch(loader, pt.rank(), pt.world_size())
                 for i in range(0, len(x), 4)]
''',
    "no-sync": '''
import phub.torch as pt
pt.init()
model = build_model()
opt = pt.DistributedOptimizer(model, "momentum", lr=0.1, momentum=0.9)
micro_batches = [(X[i:i + 8], Y[i:i + 8]) for i in range(0, 64, 8)]
micro_batches = [(x[pt.rank() * 4:(pt.rank() + 1) * 4], y[pt.rank() * 4:(pt.rank() + 1) * 4])
                 for x, y in micro_batches]
''',
    # The block names the PBox by server and uses the default port; the soft PBox of the
    # test listens elsewhere, so connect() gets the port the environment says.
    "binding": '''
import functools
import numpy as np
import phub
_connect = phub.connect
phub.connect = functools.partial(_connect, port=int(os.environ["PHUB_PORT"]))
server = os.environ["PHUB_SERVER"]
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
w0, w1 = np.ones(100000, np.float32), np.ones(1000, np.float32)
grad = np.full(100000, rank + 1.0, np.float32)
out = np.empty(100000, np.float32)
''',
}

# What each block must have done, checked after it; result is what the ranks must agree on.
AFTER = {
    "three-line": '''
result = learned(opt, 0.7)
''',
    "param-groups": '''
assert [g["weight_decay"] for g in opt.param_groups] == [5e-5, 0.0]
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
for epoch in range(epochs):
    for x, y in shard_of_every_batch(loader, pt.rank(), pt.world_size()):
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
    sched.step()
result = learned(opt, 0.7)
''',
    "ddp-hook": '''
sgd = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
for epoch in range(epochs):
    for x, y in shard_of_every_batch(loader, pt.rank(), pt.world_size()):
        sgd.zero_grad()
        loss_fn(ddp(x), y).backward()
        sgd.step()
assert state.session is not None and state.session.stats()["pushes"] > 0, \
    "the hook never reached the PBox"
after = loss_fn(model(X), Y).item()
# One process on the whole batches: the mean of the equal shards' mean gradients.
ref = build_model()
ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
for epoch in range(epochs):
    for x, y in loader:
        ref_opt.zero_grad()
        loss_fn(ref(x), y).backward()
        ref_opt.step()
ref_after = loss_fn(ref(X), Y).item()
assert after < 0.95 * before and abs(after - ref_after) <= 1e-4 * ref_after, \
    (before, after, ref_after)
state.close()
dist.destroy_process_group()
result = {"after": after, "w": [p.detach().flatten().tolist() for p in model.parameters()]}
''',
    "gpu-model": '''
assert opt._staging is not None, "the staging path was not taken"
for epoch in range(epochs):
    for x, y in shard_of_every_batch(loader, pt.rank(), pt.world_size()):
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
result = learned(opt, 0.7)
del os.environ["PHUB_FORCE_STAGING"]
''',
    "bf16-autocast": '''
torch.autocast = _autocast
result = learned(opt, 0.7)
''',
    "accumulation": '''
result = learned(opt, 0.8)
''',
    "no-sync": '''
result = learned(opt, 1.0)
''',
    "binding": '''
phub.connect = _connect
# SGD on the PBox: w - lr * mean(grad) = 1 - 0.1 * 1.5 (ranks 0 and 1 push 1 and 2).
assert np.allclose(out, 1 - 0.1 * 1.5), out[:4]
result = {"out": float(out[0])}
''',
}

DRIVER = '''
import json, os, sys, traceback
blocks = json.load(open(sys.argv[1]))
rank = os.environ["RANK"]
results = {}
for name, code in blocks:
    os.environ["PHUB_JOB"] = "docs-" + name
    # Each block starts as a program of its own would: no init() of an earlier block.
    import phub.torch
    phub.torch._config = None
    try:
        env = {"__name__": "__snippet__"}
        exec(compile(code, f"docs/pytorch.md:{name}", "exec"), env)
        results[name] = env["result"]
    except BaseException:
        results[name] = {"error": traceback.format_exc()}
with open(os.path.join(os.path.dirname(sys.argv[1]), f"rank{rank}.json"), "w") as f:
    json.dump(results, f)
'''


def blocks():
    text = open(DOC).read()
    return [(m.group(1), m.group(2), m.group(3)) for m in BLOCK.finditer(text)]


def test_every_block_is_named_and_has_a_runner():
    found = blocks()
    assert found, "no fenced code block in docs/pytorch.md"
    unnamed = [code.splitlines()[0] if code else "" for name, _, code in found if name is None]
    assert not unnamed, f"blocks without <!-- snippet: NAME -->: {unnamed}"
    rack_test = open(os.path.join(ROOT, "tests", "integration", "test_torch_rack.py")).read()
    for name, lang, _ in found:
        if lang == "python":
            assert name in BEFORE and name in AFTER, f"no runner for python block {name}"
        else:
            assert f"snippet: {name}" in rack_test, f"no test runs the {lang} block {name}"


def test_python_blocks_run_in_two_ranks_under_torchrun(soft_pbox, tmp_path):
    torchrun = shutil.which("torchrun", path="/usr/bin:/usr/local/bin")
    if torchrun is None:
        pytest.skip("no torchrun")
    progs = [(name, textwrap.dedent(COMMON) + BEFORE[name] + code + AFTER[name])
             for name, lang, code in blocks() if lang == "python"]
    (tmp_path / "blocks.json").write_text(json.dumps(progs))
    (tmp_path / "driver.py").write_text(DRIVER)
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        master_port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "PHUB_JOB", "PHUB_NONCE", "PHUB_RANK",
                        "PHUB_WORLD_SIZE")}
    env.update(PHUB_SERVER="127.0.0.1", PHUB_PORT=str(soft_pbox.port), PHUB_NONCE="0x55",
               PYTHONPATH=os.path.join(ROOT, "python"), PHUB_BUILD_DIR=BUILD,
               OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    r = subprocess.run([torchrun, "--redirects", "1", "--tee", "1", "--nproc_per_node", "2",
                        "--master_port", str(master_port), "driver.py",
                        str(tmp_path / "blocks.json")], env=env, cwd=str(tmp_path),
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    ranks = [json.load(open(tmp_path / f"rank{i}.json")) for i in range(2)]
    for name, _ in progs:
        for i in range(2):
            assert "error" not in ranks[i][name], f"block {name}, rank {i}:\n" + \
                ranks[i][name]["error"]
        assert ranks[0][name] == ranks[1][name], f"block {name}: the ranks disagree"
