#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""Train a small CNN on scikit-learn's bundled digits (8x8, 10 classes; no download) with PHub,
with DDP over gloo, or in one process, and compare them.

N workers each take their shard of every global batch. With PHub the PBox averages the shards'
gradients and runs the optimizer (phub.torch.DistributedOptimizer); with DDP, gloo averages and
each worker runs torch.optim. In deterministic mode with SGD the PHub run is large-batch SGD, so
it follows the single process with the same global batch step for step (--check compares);
with momentum, an LR schedule (--lr-step) or two parameter groups (--param-groups) it follows
it within float rounding, the PBox's fused kernels rounding once where torch rounds twice.

    train_digits.py --mode all --workers 2 --plot digits.png     # a soft PBox is started
    train_digits.py --mode phub --server 10.0.0.1 --port 47000   # the PBox of a rack
    train_digits.py --mode phub --rank 1 --workers 4 --server ...   # one rank (one namespace)
    python3 -m phub.run --nproc_per_node 2 ... train_digits.py   # each process a rank: torchrun
                                                 # (RANK, WORLD_SIZE, PHUB_SERVER, PHUB_JOB...)

Progress lines (rank 0): mode, epoch, mean training loss of rank 0's shards, test accuracy, images/s
(of the global batch). The JSON and the plot carry the global loss of every step.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

import numpy as np  # noqa: E402
import torch  # noqa: E402


def load_data(seed=0):
    """Digits as float tensors in [0, 1]: 1497 training and 300 test images, fixed split."""
    from sklearn.datasets import load_digits
    d = load_digits()
    x = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(d.target, dtype=torch.int64)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    test, train = perm[:300], perm[300:]
    return x[train], y[train], x[test], y[test]


def make_model(kind="cnn"):
    """cnn: a small CNN (26k parameters). mlp: a wide multi-layer perceptron (4.3M parameters,
    17 MB of fp32 gradients a step for a few MFLOP of compute), the shape of AlexNet's and VGG's
    fully connected heads: a model whose exchange, not its compute, sets the step time."""
    torch.manual_seed(0)
    if kind == "mlp":
        return torch.nn.Sequential(
            torch.nn.Flatten(), torch.nn.Linear(64, 2048), torch.nn.ReLU(),
            torch.nn.Linear(2048, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 10))
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(32 * 4 * 4, 64), torch.nn.ReLU(),
        torch.nn.Linear(64, 10))


def batches(n, batch, epoch):
    """The global batches of an epoch: one shuffled order, the same for every mode and rank."""
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(1000 + epoch))
    return [perm[i:i + batch] for i in range(0, n - batch + 1, batch)]


def accuracy(model, x, y):
    with torch.no_grad():
        return (model(x).argmax(1) == y).float().mean().item()


def param_groups(args, model):
    """The model's parameters, or with --param-groups two groups as users write them: the
    first layer at the job's lr, the others at half of it."""
    if not args.param_groups:
        return model.parameters()
    named = list(model.named_parameters())
    first = named[0][0].split(".")[0] + "."
    return [{"params": [p for n, p in named if n.startswith(first)]},
            {"params": [p for n, p in named if not n.startswith(first)], "lr": args.lr / 2}]


def torch_optimizer(args, params):
    if args.optimizer == "sgd":
        return torch.optim.SGD(params, lr=args.lr)
    if args.optimizer == "momentum":
        return torch.optim.SGD(params, lr=args.lr, momentum=args.momentum)
    if args.optimizer == "adam":
        return torch.optim.Adam(params, lr=args.lr)
    raise ValueError(args.optimizer)


def run(args, mode, rank, world, log_path):
    """One worker of one mode: trains, writes its per-step losses and (rank 0) the epochs."""
    if args.netns_prefix and mode in ("phub", "ddp"):
        from _rack import enter_netns
        enter_netns(f"{args.netns_prefix}{rank + 1}")
    torch.set_num_threads(1)
    if args.deterministic:
        torch.use_deterministic_algorithms(True)
    xtr, ytr, xte, yte = load_data()
    model = make_model(args.model)
    if mode == "phub":
        import phub.torch as pt
        if args.torchrun:
            # Everything from torchrun's environment and PHUB_SERVER (docs/pytorch.md).
            pt.init(server=args.server, port=args.port, job=args.job, nonce=args.nonce,
                    deterministic=args.deterministic)
        else:
            pt.init(server=args.server, port=args.port, job=args.job, nonce=args.nonce,
                    rank=rank, world_size=world, deterministic=args.deterministic)
        kw = dict(lr=args.lr)
        if args.optimizer == "momentum":
            kw["momentum"] = args.momentum
        opt = pt.DistributedOptimizer(param_groups(args, model), args.optimizer, **kw)
        net = model
    elif mode == "ddp":
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        dist.init_process_group("gloo", init_method="file://" + args.store, rank=rank,
                                world_size=world)
        net = DDP(model)
        opt = torch_optimizer(args, param_groups(args, net.module))
    elif mode == "reference":
        # Large-batch training as the PBox computes it: the shards' gradients summed in rank
        # order, times 1/N, then the optimizer (docs/kernels.md).
        net = model
        opt = ShardedReference(model, torch_optimizer(args, param_groups(args, model)),
                               args.workers, exact_sgd=args.optimizer == "sgd" and
                               not args.param_groups and not args.lr_step, lr=args.lr)
    else:
        net = model
        opt = torch_optimizer(args, param_groups(args, net))
    sched = None
    if args.lr_step:
        # Halve the lr every lr_step epochs; with PHub the new lr reaches the PBox in the
        # PUSHes' HYPER extension (docs/protocol.md section 14).
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=args.lr_step, gamma=0.5)
    steps, epochs = [], []
    t0 = time.perf_counter()
    for epoch in range(args.epochs):
        te = time.perf_counter()
        seen = 0
        losses = []
        for idx in batches(len(ytr), args.batch, epoch):
            if mode == "reference":
                loss = opt.step_on(idx, xtr, ytr)
                losses.append(loss)
                seen += len(idx)
                steps.append((time.perf_counter() - t0, loss))
                continue
            shard = idx[rank * len(idx) // world:(rank + 1) * len(idx) // world]
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(net(xtr[shard]), ytr[shard])
            loss.backward()
            opt.step()
            losses.append(loss.item())
            seen += len(idx)
            steps.append((time.perf_counter() - t0, loss.item()))
        rate = seen / (time.perf_counter() - te)
        if sched is not None:
            sched.step()
        if rank == 0:
            acc = accuracy(model, xte, yte)
            epochs.append({"epoch": epoch + 1, "time": time.perf_counter() - t0,
                           "loss": float(np.mean(losses)), "accuracy": acc,
                           "images_per_s": rate})
            print(f"{mode:6s} epoch {epoch + 1:3d}  loss {np.mean(losses):.4f}  "
                  f"test accuracy {acc * 100:5.1f}%  {rate:8.0f} images/s", flush=True)
    if mode == "phub":
        opt.close()
    elif mode == "ddp":
        import torch.distributed as dist
        dist.destroy_process_group()
    with open(f"{log_path}.{rank}", "w") as f:
        json.dump({"steps": steps, "epochs": epochs}, f)


class ShardedReference(torch.optim.Optimizer):
    """One process, the global batch cut into the workers' shards: the reference that PHub's
    deterministic training must follow step for step. A torch optimizer (its groups, its
    scheduler) steps on the shards' mean gradient; plain SGD at a fixed lr instead rounds as
    the PBox does, w - lr * g with one rounding each, so that it matches bit for bit."""

    def __init__(self, model, opt, shards, exact_sgd, lr):
        # An Optimizer of its own only so that a torch LR scheduler can drive opt through it.
        self.model = model
        self.opt = opt
        self.param_groups = opt.param_groups
        self.defaults = opt.defaults
        self.state = opt.state
        self.exact_sgd = exact_sgd
        self.lr = torch.tensor(lr, dtype=torch.float32)
        self.shards = shards

    def step_on(self, idx, x, y):
        params = list(self.model.parameters())
        total = [torch.zeros_like(p) for p in params]
        losses = []
        for r in range(self.shards):
            shard = idx[r * len(idx) // self.shards:(r + 1) * len(idx) // self.shards]
            for p in params:
                p.grad = None
            loss = torch.nn.functional.cross_entropy(self.model(x[shard]), y[shard])
            loss.backward()
            losses.append(loss.item())
            for t, p in zip(total, params):
                t.add_(p.grad)                  # rank order, as the deterministic PBox
        scale = torch.tensor(1.0 / self.shards, dtype=torch.float32)
        for t, p in zip(total, params):
            p.grad = t * scale
        self.step()
        return float(np.mean(losses))

    def step(self, closure=None):
        if not self.exact_sgd:
            return self.opt.step()
        with torch.no_grad():
            for p in self.model.parameters():
                p.sub_(self.lr * p.grad)
        return None

    def zero_grad(self):
        pass


def _spawned(rank, args, mode, world, log_path):
    run(args, mode, rank, world, log_path)


def run_mode(args, mode, tmp):
    world = 1 if mode in ("single", "reference") else args.workers
    log_path = os.path.join(tmp, mode)
    if mode == "ddp":
        args.store = os.path.join(tmp, "store")
    if world == 1:
        run(args, mode, 0, 1, log_path)
    else:
        import torch.multiprocessing as mp
        mp.start_processes(_spawned, args=(args, mode, world, log_path), nprocs=world,
                           join=True, start_method="spawn")
    logs = []
    for r in range(world):
        with open(f"{log_path}.{r}") as f:
            logs.append(json.load(f))
    # The global loss of a step: the mean of the shards' mean losses (equal shards).
    loss = np.mean([[s[1] for s in lg["steps"]] for lg in logs], axis=0)
    return {"mode": mode, "workers": world, "epochs": logs[0]["epochs"],
            "time": [s[0] for s in logs[0]["steps"]], "loss": loss.tolist()}


def start_soft_pbox(build):
    exe = os.path.join(build, "tests", "support", "phub-soft-pbox")
    p = subprocess.Popen([exe, "--port", "0", "--lcores", "2"], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)
    m = re.search(r"control 127\.0\.0\.1:(\d+),", p.stdout.readline())
    if not m:
        p.kill()
        raise SystemExit(f"train_digits: {exe} did not start")
    return p, int(m.group(1))


def plot(results, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for r in results:
        label = f"{r['mode']} ({r['workers']} worker{'s' if r['workers'] > 1 else ''})"
        a.plot(r["time"], r["loss"], label=label, linewidth=0.8)
        b.plot([e["time"] for e in r["epochs"]], [e["accuracy"] * 100 for e in r["epochs"]],
               marker="o", label=label)
    a.set_xlabel("wall time (s)")
    a.set_ylabel("training loss (global batch)")
    a.set_yscale("log")
    b.set_xlabel("wall time (s)")
    b.set_ylabel("test accuracy (%)")
    b.axhline(95, color="grey", linestyle=":", linewidth=0.8)
    for ax in (a, b):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=["phub", "ddp", "single", "all"], default="phub")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rank", type=int, help="run this one rank of --mode phub and exit")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch", type=int, default=64, help="global batch")
    ap.add_argument("--optimizer", choices=["sgd", "momentum", "adam"], default="momentum")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--lr-step", type=int, default=0,
                    help="halve the learning rate every N epochs (a torch LR scheduler)")
    ap.add_argument("--model", choices=["cnn", "mlp"], default="cnn",
                    help="cnn (26k parameters) or mlp (4.3M: the exchange sets the step time)")
    ap.add_argument("--param-groups", action="store_true",
                    help="two parameter groups: the convolution at --lr, the rest at half")
    ap.add_argument("--deterministic", action="store_true",
                    help="PBox sums in rank order; torch deterministic algorithms")
    ap.add_argument("--check", action="store_true",
                    help="also run one process with the same global batch (the shards' "
                         "gradients accumulated) and require the PHub loss within "
                         "--check-tolerance (relative) of it at every step")
    ap.add_argument("--check-tolerance", type=float, default=1e-5,
                    help="largest relative loss difference --check accepts (default 1e-5)")
    ap.add_argument("--server", help="PBox address; default: start a soft PBox on loopback")
    ap.add_argument("--port", type=int, help="the PBox's control port (default 47000, or "
                    "PHUB_PORT under torchrun)")
    ap.add_argument("--netns-prefix", help="worker rank r runs in network namespace "
                    "<prefix><r+1> (a virtual rack's workers: --netns-prefix <rack>-w)")
    ap.add_argument("--job", help="job name (default digits, or PHUB_JOB under torchrun)")
    ap.add_argument("--nonce", type=lambda s: int(s, 0),
                    help="the job's nonce (default 0x5eed, or PHUB_NONCE under torchrun)")
    ap.add_argument("--build", default=os.environ.get("PHUB_BUILD_DIR",
                                                      os.path.join(HERE, "..", "..", "build")))
    ap.add_argument("--plot", help="write a PNG of loss and accuracy against wall time")
    ap.add_argument("--json", help="write the results as JSON (under torchrun: each rank's "
                    "steps to JSON.RANK)")
    args = ap.parse_args()
    os.environ.setdefault("PHUB_BUILD_DIR", args.build)
    # Started by torchrun (or python3 -m phub.run): this process is the rank torchrun says,
    # and phub.torch.init() takes the rest from the environment.
    args.torchrun = args.rank is None and "LOCAL_RANK" in os.environ and "RANK" in os.environ
    if args.torchrun:
        if args.mode != "phub":
            ap.error("under torchrun each process is one PHub rank: --mode phub")
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        args.workers = world
        with tempfile.TemporaryDirectory() as tmp:
            run(args, "phub", rank, world, os.path.join(tmp, "phub"))
            if args.json:
                with open(os.path.join(tmp, f"phub.{rank}")) as f, \
                        open(f"{args.json}.{rank}", "w") as g:
                    g.write(f.read())
        return 0
    args.port = 47000 if args.port is None else args.port
    args.job = "digits" if args.job is None else args.job
    args.nonce = 0x5eed if args.nonce is None else args.nonce

    if args.rank is not None:
        if args.mode != "phub" or args.server is None:
            ap.error("--rank runs one PHub worker: --mode phub and --server are needed")
        with tempfile.TemporaryDirectory() as tmp:
            run(args, "phub", args.rank, args.workers, os.path.join(tmp, "phub"))
            if args.json:
                with open(os.path.join(tmp, f"phub.{args.rank}")) as f, \
                        open(args.json, "w") as g:
                    g.write(f.read())
        return 0

    modes = ["phub", "ddp", "single"] if args.mode == "all" else [args.mode]
    if args.check:
        if args.optimizer == "adam" or not args.deterministic:
            ap.error("--check compares deterministic SGD or momentum: add --deterministic, "
                     "and --optimizer sgd or momentum")
        if "phub" not in modes:
            modes.insert(0, "phub")
        modes.append("reference")
    pbox = None
    if "phub" in modes and args.server is None:
        pbox, args.port = start_soft_pbox(args.build)
        args.server = "127.0.0.1"
        print(f"soft PBox on 127.0.0.1:{args.port}", flush=True)
    results = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for mode in modes:
                results.append(run_mode(args, mode, tmp))
    finally:
        if pbox is not None:
            pbox.terminate()
            pbox.wait()
    summary = {"args": {k: v for k, v in vars(args).items() if k != "store"},
               "results": results}
    status = 0
    for r in results:
        final = r["epochs"][-1]["accuracy"]
        to95 = next((e["time"] for e in r["epochs"] if e["accuracy"] >= 0.95), None)
        r["final_accuracy"] = final
        r["time_to_95"] = to95
        print(f"{r['mode']}: final test accuracy {final * 100:.1f}%, time to 95%: "
              f"{'%.2f s' % to95 if to95 is not None else 'not reached'}, "
              f"training time {r['time'][-1]:.2f} s")
    if args.check:
        ph = next(r for r in results if r["mode"] == "phub")
        one = next(r for r in results if r["mode"] == "reference")
        rel = [abs(a - b) / abs(b) for a, b in zip(ph["loss"], one["loss"])]
        worst = max(rel)
        summary["check"] = {"steps": len(rel), "max_rel_diff": worst}
        ok = len(ph["loss"]) == len(one["loss"]) and worst <= args.check_tolerance
        print(f"check: {len(rel)} steps, largest relative loss difference PHub vs one "
              f"process {worst:.2e} "
              f"({'ok' if ok else f'FAILED: above {args.check_tolerance:g}'})")
        plain = next((r for r in results if r["mode"] == "single"), None)
        if plain is not None:
            # For information: a plain full-batch backward rounds its sums in another order.
            prel = max(abs(a - b) / abs(b) for a, b in zip(ph["loss"], plain["loss"]))
            summary["check"]["max_rel_diff_full_batch_backward"] = prel
            print(f"       against one full-batch backward (other rounding): {prel:.2e}")
        status = 0 if ok else 1
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f)
    if args.plot:
        what = ("wide MLP (4.3M parameters)" if args.model == "mlp" else "small CNN")
        plot(results, args.plot, f"{what} on scikit-learn digits: PHub, DDP over gloo, "
             "one process")
        print(f"plot: {args.plot}")
    return status


if __name__ == "__main__":
    sys.exit(main())
