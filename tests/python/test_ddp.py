# SPDX-License-Identifier: BSD-3-Clause
"""phub.torch.allreduce_hook: DDP with the hook trains exactly as DDP with gloo's allreduce."""

import os
import tempfile

import torch
import torch.multiprocessing as mp

import phub.torch as pt

STEPS = 6


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.ReLU(),
                               torch.nn.Linear(32, 32), torch.nn.Tanh(), torch.nn.Linear(32, 3))


def _train(ddp, rank, no_sync=False):
    g = torch.Generator().manual_seed(1)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for _ in range(STEPS):
        x = torch.randn(8, 12, generator=g)
        y = torch.randint(0, 3, (8,), generator=g)
        xs, ys = x[rank * 4:(rank + 1) * 4], y[rank * 4:(rank + 1) * 4]
        opt.zero_grad()
        if no_sync:
            # Half the shard accumulates inside DDP's no_sync (no hook call), half syncs.
            with ddp.no_sync():
                (torch.nn.functional.cross_entropy(ddp(xs[:2]), ys[:2]) / 2).backward()
            loss = torch.nn.functional.cross_entropy(ddp(xs[2:]), ys[2:]) / 2
        else:
            loss = torch.nn.functional.cross_entropy(ddp(xs), ys)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return [p.detach().clone() for p in ddp.parameters()], losses


def _worker(rank, world, store, port, job, out):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank,
                            world_size=world)
    plain = DDP(_model())
    ref, ref_losses = _train(plain, rank)
    pt.init(server="127.0.0.1", port=port, job=job, nonce=11, rank=rank, world_size=world,
            deterministic=True)
    hooked = DDP(_model())
    state = pt.AllreduceState()
    hooked.register_comm_hook(state, pt.allreduce_hook)
    got, got_losses = _train(hooked, rank)
    stats = state.session.stats() if state.session is not None else None
    state.close()
    # The staging path of GPU buckets (host buffers, a pushing thread), forced on the CPU.
    staged = DDP(_model())
    state = pt.AllreduceState(job_suffix="-ddp-staged", staging=True)
    staged.register_comm_hook(state, pt.allreduce_hook)
    got_staged, _ = _train(staged, rank)
    staged_used = state._stage is not None and state.session.stats()["pushes"] > 0
    state.close()
    # DDP's no_sync() with the hook: as with gloo's allreduce.
    ref_ns, _ = _train(DDP(_model()), rank, no_sync=True)
    hooked = DDP(_model())
    state = pt.AllreduceState(job_suffix="-ddp-nosync")
    hooked.register_comm_hook(state, pt.allreduce_hook)
    got_ns, _ = _train(hooked, rank, no_sync=True)
    ns_used = state.session is not None and state.session.stats()["pushes"] > 0
    state.close()
    dist.destroy_process_group()
    torch.save({"ref": ref, "got": got, "ref_losses": ref_losses, "got_losses": got_losses,
                "stats": stats, "got_staged": got_staged, "staged_used": staged_used,
                "ref_ns": ref_ns, "got_ns": got_ns, "ns_used": ns_used},
               f"{out}.{rank}")


def test_ddp_hook_trains_exactly_as_gloo_allreduce(soft_pbox, job):
    with tempfile.TemporaryDirectory() as d:
        store = os.path.join(d, "store")
        out = os.path.join(d, "out")
        mp.start_processes(_worker, args=(2, store, soft_pbox.port, job, out), nprocs=2,
                           join=True, start_method="spawn")
        res = [torch.load(f"{out}.{r}") for r in range(2)]
    for r in res:
        # PHub carried the gradients after DDP's first two iterations.
        assert r["stats"] is not None and r["stats"]["pushes"] > 0
        assert r["stats"]["ops_completed"] >= STEPS - 2
        for a, b in zip(r["ref"], r["got"]):
            assert torch.equal(a, b)            # (a + b) / 2 on the PBox == a/2 + b/2 in gloo
        assert r["staged_used"]
        for a, b in zip(r["ref"], r["got_staged"]):
            assert torch.equal(a, b)
        assert r["ns_used"]
        for a, b in zip(r["ref_ns"], r["got_ns"]):
            assert torch.equal(a, b)
        assert not torch.equal(r["ref_ns"][0], r["ref"][0])     # no_sync did something else
        assert r["ref_losses"] == r["got_losses"]
    assert res[0]["ref_losses"][0] != res[0]["ref_losses"][-1]   # it did train
