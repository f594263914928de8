# SPDX-License-Identifier: BSD-3-Clause
"""The staging path of GPU parameters (host buffers, side streams, a pushing thread), forced on
the CPU: the same models, bit for bit, as the direct path."""

import threading

import pytest
import torch

import phub
import phub.torch as pt
from conftest import run_ranks, train_rank
from test_optimizer import Net, make_data, nets_for

torch.set_num_threads(1)


def groups(net):
    decay = [p for n, p in net.named_parameters() if n.endswith("weight")]
    plain = [p for n, p in net.named_parameters() if n.endswith("bias")]
    return [{"params": decay, "weight_decay": 1e-2},
            {"params": plain, "weight_decay": 0.0, "lr": 0.2}]


def train(soft_pbox, job, kind, data, world=2, **kw):
    pt.init(server="127.0.0.1", port=soft_pbox.port, job=job, nonce=7, rank=0,
            world_size=world, deterministic=True)
    nets = nets_for(world)

    def rank(r):
        net = nets[r]
        if kind == "none":
            opt = pt.DistributedOptimizer(net, torch.optim.SGD(groups(net), lr=0.1,
                                                               momentum=0.5), rank=r, **kw)
        else:
            opt = pt.DistributedOptimizer(groups(net), kind, lr=0.1, momentum=0.5, rank=r, **kw)
        sched = torch.optim.lr_scheduler.StepLR(opt._local or opt, step_size=2, gamma=0.5)
        staged = opt._staging is not None
        return staged, train_rank(net, opt, data, r, world, sched=sched)

    return run_ranks(world, rank)


@pytest.mark.parametrize("kind", ["momentum", "none"])
def test_forced_staging_gives_the_same_models_bit_for_bit(soft_pbox, job, kind, monkeypatch):
    data = make_data(6)
    pushers = []
    pushpull = phub.Session.pushpull

    def spy(self, key, grad, out=None, **kw):
        # Staged, the gradient goes out of the host buffer the model comes back into.
        pushers.append((threading.current_thread().name, grad is out))
        return pushpull(self, key, grad, out, **kw)

    monkeypatch.setattr(phub.Session, "pushpull", spy)
    direct = train(soft_pbox, job, kind, data)
    assert not any(staged for staged, _ in direct)
    assert pushers and not any(name == "phub-stage" or same for name, same in pushers)
    pushers.clear()
    monkeypatch.setenv("PHUB_FORCE_STAGING", "1")
    staged = train(soft_pbox, job + "s", kind, data)
    # The gradients left from the staging threads, after their copies to host buffers.
    assert all(s for s, _ in staged)
    assert pushers and set(pushers) == {("phub-stage", True)}
    assert len(pushers) == 2 * 6 * 6                 # ranks x steps x parameters
    for r in range(2):
        for step, (a, b) in enumerate(zip(direct[r][1], staged[r][1])):
            for u, v in zip(a, b):
                assert torch.equal(u, v), f"rank {r} step {step}"
    assert not torch.equal(direct[0][1][0][0], direct[0][1][-1][0])      # it did train


def test_staging_false_is_for_cpu_parameters_only(soft_pbox, job):
    pt.init(server="127.0.0.1", port=soft_pbox.port, job=job, nonce=7, rank=0, world_size=1)
    net = Net().to("meta")
    with pytest.raises(ValueError, match="need staging"):
        pt.DistributedOptimizer(net, "sgd", staging=False)
