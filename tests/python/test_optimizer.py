# SPDX-License-Identifier: BSD-3-Clause
"""phub.torch.DistributedOptimizer against the soft PBox: the same steps as one process."""

import os
import signal
import time

import pytest
import torch

import phub
import phub.torch as pt
from conftest import run_ranks, train_rank

torch.set_num_threads(1)


class Net(torch.nn.Module):
    """Three layers; registered out of forward order on purpose (c, then a, then b)."""

    def __init__(self, width=16, dtype=torch.float32):
        super().__init__()
        self.c = torch.nn.Linear(width, 4).to(dtype)
        self.a = torch.nn.Linear(8, width).to(dtype)
        self.b = torch.nn.Linear(width, width).to(dtype)
        self.probe = None

    def forward(self, x):
        h = torch.relu(self.a(x))
        if self.probe is not None:
            h = self.probe(h)
        return self.c(torch.tanh(self.b(h)))


def make_data(steps, batch=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(batch, 8, generator=g), torch.randint(0, 4, (batch,), generator=g))
            for _ in range(steps)]


def reference(kind, data, lr, groups=None, sched=None, **hyper):
    torch.manual_seed(1)
    net = Net()
    params = groups(net) if groups else net.parameters()
    if kind == "sgd":
        opt = torch.optim.SGD(params, lr=lr, weight_decay=hyper.get("weight_decay", 0.0))
    elif kind == "momentum":
        opt = torch.optim.SGD(params, lr=lr, momentum=hyper["momentum"],
                              weight_decay=hyper.get("weight_decay", 0.0))
    elif kind == "adam":
        opt = torch.optim.Adam(params, lr=lr, betas=hyper["betas"], eps=hyper["eps"])
    s = sched(opt) if sched else None
    out = []
    for x, y in data:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
        if s:
            s.step()
        out.append([p.detach().clone() for p in net.parameters()])
    return out


def nets_for(world):
    """One Net a rank, built before the rank threads start: torch's generator is one for the
    process. Only rank 0's weights count (the PBox takes its model), so the others differ."""
    nets = []
    for r in range(world):
        torch.manual_seed(1 if r == 0 else 100 + r)
        nets.append(Net())
    return nets


def assert_steps_match(ref, ranks, only=None, what=""):
    """The parameters of each rank (all, or those in only) after every step are the one
    process's: the same sums in another order, a few ulp apart."""
    for step, want in enumerate(ref):
        for r in (range(len(ranks)) if only is None else only):
            for w, g in zip(want, ranks[r][step]):
                torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6,
                                           msg=f"{what}rank {r} step {step}")


def distributed(soft_pbox, job, kind, data, lr, world=2, groups=None, sched=None, **hyper):
    pt.init(server="127.0.0.1", port=soft_pbox.port, job=job, nonce=7, rank=0,
            world_size=world, deterministic=True)
    nets = nets_for(world)

    def rank(r):
        net = nets[r]
        params = groups(net) if groups else net
        opt = pt.DistributedOptimizer(params, kind, lr=lr, rank=r, **hyper)
        return train_rank(net, opt, data, r, world, sched=sched(opt) if sched else None)

    return run_ranks(world, rank)


@pytest.mark.parametrize("kind,hyper", [
    ("sgd", dict(weight_decay=1e-3)),
    ("momentum", dict(momentum=0.9, weight_decay=1e-3)),
    ("adam", dict(betas=(0.9, 0.99), eps=1e-6)),
])
def test_step_for_step_as_one_process(soft_pbox, job, kind, hyper):
    data = make_data(6)
    lr = 0.05
    ref = reference(kind, data, lr, **hyper)
    ranks = distributed(soft_pbox, job, kind, data, lr, **hyper)
    assert_steps_match(ref, ranks, what=f"{kind}: ")
    # The ranks agree bit for bit: they received the same models.
    for a, b in zip(ranks[0][-1], ranks[1][-1]):
        assert torch.equal(a, b)


@pytest.mark.skipif(not hasattr(phub.library(), "phub_set_key_hyper"),
                    reason="libphub without phub_set_key_hyper")
def test_lr_scheduler_and_two_groups(soft_pbox, job):
    """Biases without weight decay and with twice the lr; StepLR halves every 2 steps."""
    data = make_data(6)

    def groups(net):
        decay = [p for n, p in net.named_parameters() if n.endswith("weight")]
        plain = [p for n, p in net.named_parameters() if n.endswith("bias")]
        return [{"params": decay, "weight_decay": 1e-2},
                {"params": plain, "weight_decay": 0.0, "lr": 0.2}]

    def sched(opt):
        return torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)

    ref = reference("momentum", data, 0.1, groups=groups, sched=sched, momentum=0.5)
    ranks = distributed(soft_pbox, job, "momentum", data, 0.1, groups=groups, sched=sched,
                        momentum=0.5)
    assert_steps_match(ref, ranks, only=[0])
    # Without the schedule and the groups the weights would differ: the test can fail.
    plain = reference("momentum", data, 0.1, momentum=0.5)
    assert not torch.allclose(plain[-1][0], ref[-1][0], rtol=1e-4, atol=1e-5)


class _Probe(torch.autograd.Function):
    """Identity whose backward records how many gradients had left when it ran."""
    seen = []

    @staticmethod
    def forward(ctx, x, opt):
        ctx.opt = opt
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        _Probe.seen.append((len(ctx.opt.push_order), ctx.opt.session.pending()))
        return grad, None


def test_hooks_push_during_backward_and_forward_priorities(soft_pbox, job):
    pt.init(server="127.0.0.1", port=soft_pbox.port, job=job, nonce=7, rank=0, world_size=1)
    torch.manual_seed(0)
    net = Net()
    opt = pt.DistributedOptimizer(net, "sgd", lr=0.1)
    net.probe = lambda h: _Probe.apply(h, opt)
    x, y = make_data(1)[0]
    _Probe.seen.clear()
    torch.nn.functional.cross_entropy(net(x), y).backward()
    # When backward reached the output of layer a, the gradients of c and b (4 tensors) had
    # been pushed already, a's (2) not yet.
    assert _Probe.seen == [(4, _Probe.seen[0][1])]
    assert _Probe.seen[0][1] >= 0
    assert len(opt.push_order) == 6
    # Registration order is c, a, b; forward order a, b, c: priorities follow forward order.
    prio = {n: opt.priority(p) for n, p in net.named_parameters()}
    assert prio == {"a.weight": 0, "a.bias": 1, "b.weight": 2, "b.bias": 3,
                    "c.weight": 4, "c.bias": 5}
    # Backward produced c first, a last.
    names = {id(p): n for n, p in net.named_parameters()}
    order = [names[id(p)] for p in opt.push_order]
    assert order.index("c.weight") < order.index("a.weight")
    opt.step()
    opt.close()


def test_first_layers_models_come_back_first(job):
    """The PBox is stopped while backward pushes everything (last layer first); once it runs
    again, the first layers' models arrive first: they overtook the queued later layers."""
    from conftest import SoftPBox
    sp = SoftPBox("--lcores", "1")
    try:
        pt.init(server="127.0.0.1", port=sp.port, job=job, nonce=7, rank=0, world_size=1)
        torch.manual_seed(0)
        layers = [torch.nn.Linear(96, 96) for _ in range(4)]
        net = torch.nn.Sequential(*layers)
        opt = pt.DistributedOptimizer(net, "sgd", lr=0.01, window_bytes=2048,
                                      record_completions=True)
        x = torch.randn(4, 96)
        loss = net(x).square().mean()
        os.kill(sp.proc.pid, signal.SIGSTOP)
        try:
            loss.backward()
            time.sleep(0.2)
        finally:
            os.kill(sp.proc.pid, signal.SIGCONT)
        opt.step()
        done = [opt.key_of(p) for p in opt.completion_order]
        weights = [opt.key_of(layer.weight) for layer in layers]
        got = [k for k in done if k in weights]
        # FIFO would give the backward order, layers 3, 2, 1, 0.
        assert got == weights, f"weights completed in key order {got}"
        opt.close()
    finally:
        sp.stop()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_fp16_bf16_parameters(soft_pbox, job, dtype):
    pt.init(server="127.0.0.1", port=soft_pbox.port, job=job, nonce=7, rank=0, world_size=1)
    torch.manual_seed(0)
    # CPU matmul has no fp16 kernel in torch 1.13: fp16/bf16 parameters, fp32 arithmetic.
    w1 = torch.nn.Parameter(torch.randn(16, 8).to(dtype))
    w2 = torch.nn.Parameter(torch.randn(4, 16).to(dtype))
    b2 = torch.nn.Parameter(torch.randn(4).to(dtype))
    net = torch.nn.ParameterList([w1, w2, b2])
    opt = pt.DistributedOptimizer(net, "sgd", lr=0.1)
    before = [p.detach().float().clone() for p in net.parameters()]
    x, y = make_data(1)[0]
    h = torch.relu(x @ w1.float().t())
    torch.nn.functional.cross_entropy(h @ w2.float().t() + b2.float(), y).backward()
    grads = [p.grad.float().clone() for p in net.parameters()]
    opt.step()
    for b, g, p in zip(before, grads, net.parameters()):
        assert p.dtype == dtype
        want = (b - 0.1 * g).to(dtype)        # fp32 master weight on the PBox, narrowed
        torch.testing.assert_close(p.detach(), want, rtol=0, atol=0)
    opt.close()


def test_none_returns_the_mean_gradient_and_runs_a_local_optimizer(soft_pbox, job):
    pt.init(server="127.0.0.1", port=soft_pbox.port, job=job, nonce=7, rank=0, world_size=2,
            deterministic=True)
    data = make_data(3)
    ref = reference("momentum", data, 0.05, momentum=0.9)

    nets = nets_for(2)

    def rank(r):
        net = nets[r]
        local = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
        return train_rank(net, pt.DistributedOptimizer(net, local, rank=r), data, r, 2)

    assert_steps_match(ref, run_ranks(2, rank), only=[1])


def test_init_from_environment(monkeypatch):
    monkeypatch.setenv("PHUB_SERVER", "10.1.2.3")
    monkeypatch.setenv("PHUB_JOB", "envjob")
    monkeypatch.setenv("PHUB_NONCE", "0x2a")
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("PHUB_PORT", "47010")
    c = pt.init()
    assert (c["server"], c["job"], c["nonce"], c["rank"], c["world_size"], c["port"]) == \
        ("10.1.2.3", "envjob", 42, 3, 4, 47010)
    monkeypatch.delenv("PHUB_JOB")
    with pytest.raises(ValueError, match="PHUB_JOB"):
        pt.init()


def test_synchronize_then_clip_then_step(soft_pbox, job):
    """Sum mode with a local optimizer: the caller clips the mean gradient between
    synchronize() and step(), which then only runs the local optimizer."""
    pt.init(server="127.0.0.1", port=soft_pbox.port, job=job, nonce=7, rank=0, world_size=2,
            deterministic=True)
    data = make_data(3)
    torch.manual_seed(1)
    ref_net = Net()
    ref_opt = torch.optim.SGD(ref_net.parameters(), lr=0.5)
    ref = []
    for x, y in data:
        ref_opt.zero_grad()
        torch.nn.functional.cross_entropy(ref_net(x), y).backward()
        torch.nn.utils.clip_grad_norm_(ref_net.parameters(), 0.05)
        ref_opt.step()
        ref.append([p.detach().clone() for p in ref_net.parameters()])
    nets = nets_for(2)

    def rank(r):
        net = nets[r]
        opt = pt.DistributedOptimizer(net, torch.optim.SGD(net.parameters(), lr=0.5), rank=r)

        def clip():
            opt.synchronize()
            norm = torch.nn.utils.clip_grad_norm_(net.parameters(), 0.05)
            assert norm > 0.05                  # the clip bites: the test can tell

        return train_rank(net, opt, data, r, 2, before_step=clip)

    assert_steps_match(ref, run_ranks(2, rank), only=[0])


def test_pbox_restart_from_an_older_checkpoint_rolls_back(job, tmp_path):
    """The PBox checkpoints at step 2, the job goes on to step 4, the PBox dies and comes back
    from its checkpoint: the next step raises PhubStaleError, resume() puts step 2's weights
    back and says the next push is iteration 3, and training goes on from there."""
    import signal
    from conftest import SoftPBox
    sp = SoftPBox("--checkpoint-dir", str(tmp_path))
    port = sp.port
    try:
        pt.init(server="127.0.0.1", port=port, job=job, nonce=7, rank=0, world_size=1)
        torch.manual_seed(0)
        net = Net()
        opt = pt.DistributedOptimizer(net, "momentum", lr=0.1, momentum=0.9, dead_ms=2000)
        data = make_data(8)

        def train(x, y):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(x), y).backward()
            opt.step()

        for x, y in data[:2]:
            train(x, y)
        at2 = [p.detach().clone() for p in net.parameters()]
        assert "checkpoint of 1 job" in sp.checkpoint()
        for x, y in data[2:4]:
            train(x, y)
        at4 = [p.detach().clone() for p in net.parameters()]
        sp.proc.send_signal(signal.SIGKILL)
        sp.stop()
        sp = SoftPBox("--checkpoint-dir", str(tmp_path), port=port)
        with pytest.raises(phub.PhubStaleError) as ei:
            train(*data[4])
        assert str(ei.value)
        assert opt.resume() == 3
        for a, b in zip(at2, net.parameters()):
            assert torch.equal(a, b.detach())
        # Steps 3 and 4 again give what they gave the first time: the PBox restored the
        # momentum of step 2 with the weights.
        for x, y in data[2:4]:
            train(x, y)
        for a, b in zip(at4, net.parameters()):
            assert torch.equal(a, b.detach())
        assert not torch.equal(at2[0], at4[0])
        st = opt.session.stats()
        assert st["rollbacks"] == 1 and st["reconnects"] >= 1
        opt.close()
    finally:
        sp.stop()
