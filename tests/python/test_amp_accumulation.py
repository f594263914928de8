# SPDX-License-Identifier: BSD-3-Clause
"""Mixed precision (bf16 autocast; fp16 and GradScaler refused) and gradient accumulation
(backward_passes_per_step, no_sync) with DistributedOptimizer against the soft PBox."""

import pytest
import torch

import phub.torch as pt
from conftest import run_ranks
from test_optimizer import Net, assert_steps_match, make_data, nets_for

torch.set_num_threads(1)
CE = torch.nn.functional.cross_entropy


def start(soft_pbox, job, world):
    pt.init(server="127.0.0.1", port=soft_pbox.port, job=job, nonce=7, rank=0,
            world_size=world, deterministic=True)


@pytest.mark.parametrize("mode,staging", [("k", False), ("k", True), ("no_sync", False)])
def test_accumulation_equals_one_process_with_k_times_the_batch(soft_pbox, job, mode, staging):
    """2 ranks x K=3 micro-batches of 4 (loss / K) against one process with batches of 24."""
    K, world, micro = 3, 2, 4
    data = make_data(4, batch=world * K * micro)
    torch.manual_seed(1)
    ref_net = Net()
    ref_opt = torch.optim.SGD(ref_net.parameters(), lr=0.1, momentum=0.9)
    ref = []
    for x, y in data:
        ref_opt.zero_grad()
        CE(ref_net(x), y).backward()
        ref_opt.step()
        ref.append([p.detach().clone() for p in ref_net.parameters()])
    start(soft_pbox, job, world)
    nets = nets_for(world)

    def rank(r):
        net = nets[r]
        opt = pt.DistributedOptimizer(net, "momentum", lr=0.1, momentum=0.9, rank=r,
                                      backward_passes_per_step=K if mode == "k" else 1,
                                      staging=staging)
        out = []
        for x, y in data:
            opt.zero_grad()
            for k in range(K):
                s = slice((r * K + k) * micro, (r * K + k + 1) * micro)
                if mode == "no_sync" and k < K - 1:
                    with opt.no_sync():
                        (CE(net(x[s]), y[s]) / K).backward()
                else:
                    (CE(net(x[s]), y[s]) / K).backward()
                if k < K - 1:       # nothing left before the last pass
                    assert opt.push_order == [] and opt.session.pending() == 0
            opt.step()
            assert len(opt.push_order_last) == 6
            out.append([p.detach().clone() for p in net.parameters()])
        opt.close()
        return out

    # Sums of 4, then of 3 passes, then of 2 ranks against one sum of 24: the same numbers in
    # another order, a few ulp apart, grown over 4 steps.
    assert_steps_match(ref, run_ranks(world, rank))


def test_a_backward_pass_too_many_is_refused(soft_pbox, job):
    start(soft_pbox, job, 1)
    net = Net()
    opt = pt.DistributedOptimizer(net, "sgd", lr=0.1, backward_passes_per_step=2)
    x, y = make_data(1)[0]
    for _ in range(2):
        CE(net(x), y).backward()
    with pytest.raises(RuntimeError, match="backward_passes_per_step=2"):
        CE(net(x), y).backward()
    opt.close()


def test_bf16_autocast_trains_with_fp32_parameters(soft_pbox, job):
    world = 2
    data = make_data(4)

    def shard(x, r):
        return slice(r * len(x) // world, (r + 1) * len(x) // world)

    def reference(autocast):
        # One process: each rank's shard under autocast, the mean of their gradients.
        torch.manual_seed(1)
        net = Net()
        opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        out = []
        for x, y in data:
            grads = []
            for r in range(world):
                opt.zero_grad()
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                    loss = CE(net(x[shard(x, r)]), y[shard(x, r)])
                loss.backward()
                grads.append([p.grad.clone() for p in net.parameters()])
            for p, a, b in zip(net.parameters(), *grads):
                p.grad = (a + b) / world
            opt.step()
            out.append([p.detach().clone() for p in net.parameters()])
        return out

    ref = reference(True)
    start(soft_pbox, job, world)
    nets = nets_for(world)

    def rank(r):
        net = nets[r]
        opt = pt.DistributedOptimizer(net, "momentum", lr=0.1, momentum=0.9, rank=r)
        out = []
        for x, y in data:
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logits = net(x[shard(x, r)])
                assert logits.dtype == torch.bfloat16
                loss = CE(logits, y[shard(x, r)])
            loss.backward()
            assert all(p.dtype == torch.float32 and p.grad.dtype == torch.float32
                       for p in net.parameters())
            opt.step()
            out.append([p.detach().clone() for p in net.parameters()])
        opt.close()
        return out

    assert_steps_match(ref, run_ranks(world, rank))
    # bf16 made a difference beyond the tolerance: the test can tell autocast from fp32.
    fp32 = reference(False)
    assert not all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(fp32[-1], ref[-1]))


def test_fp16_autocast_and_grad_scaler_are_refused(soft_pbox, job, monkeypatch):
    start(soft_pbox, job, 1)
    net = Net()
    opt = pt.DistributedOptimizer(net, "sgd", lr=0.1)
    x, y = make_data(1)[0]
    # CUDA's autocast flag (fp16 by default) can be set without a GPU: the refusal comes
    # before the forward, before any scaled gradient could leave.
    torch.set_autocast_enabled(True)
    try:
        with pytest.raises(RuntimeError, match="bfloat16"):
            net(x)
    finally:
        torch.set_autocast_enabled(False)
    CE(net(x), y).backward()
    # GradScaler disables itself without CUDA: made to believe it has CUDA (and given the
    # scale its scale() would make), its step() calls ours as on a GPU.
    monkeypatch.setattr(torch.cuda.amp.grad_scaler, "amp_definitely_not_available",
                        lambda: False)
    scaler = torch.cuda.amp.GradScaler()
    scaler._lazy_init_scale_growth_tracker(torch.device("cpu"))
    with pytest.raises(RuntimeError, match="GradScaler"):
        scaler.step(opt)
    opt.close()
