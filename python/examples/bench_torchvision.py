#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""torchvision ResNet-18/50 (random weights, synthetic images, real forward and backward) with N
workers: PHub (DistributedOptimizer, SGD with momentum on the PBox) against DDP over gloo, in
the same run. Prints images/s and how much of the communication hid behind backward.

    bench_torchvision.py --models resnet18,resnet50 --workers 2,4      # a soft PBox is started
    bench_torchvision.py --server 10.0.0.1 --port 47000 ...            # the PBox of a rack

Overlap, for both: comm = from the first gradient handed to the network to the last result
back; exposed = the part of it the training loop waits for once its own backward compute is
done (PHub: the wait in step(); DDP: backward's time beyond the same model's backward without
DDP, measured in the same process); overlap = 1 - exposed / comm.
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

import torch  # noqa: E402


def make_model(name):
    import torchvision
    torch.manual_seed(0)
    return getattr(torchvision.models, name)(weights=None)


def _median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else float("nan")


def worker(rank, args, mode, model_name, world, out):
    if args.netns_prefix:
        from _rack import enter_netns
        enter_netns(f"{args.netns_prefix}{rank + 1}")
    torch.set_num_threads(args.threads)
    model = make_model(model_name)
    x = torch.randn(args.batch, 3, args.image_size, args.image_size,
                    generator=torch.Generator().manual_seed(rank))
    y = torch.randint(0, 1000, (args.batch,), generator=torch.Generator().manual_seed(rank))
    loss_fn = torch.nn.CrossEntropyLoss()

    # Backward without any communication, for DDP's exposed time.
    local = make_model(model_name)
    bwd_local = []
    for i in range(2):
        loss = loss_fn(local(x), y)
        t = time.perf_counter()
        loss.backward()
        bwd_local.append(time.perf_counter() - t)
    del local

    comm, exposed, step_times = [], [], []
    if mode == "phub":
        import phub.torch as pt
        pt.init(server=args.server, port=args.port, job=f"{args.job}-{model_name}-{world}",
                nonce=args.nonce, rank=rank, world_size=world,
                window_bytes=args.window_bytes,
                # The initial round moves every rank's weights (100 MB for ResNet-50).
                connect_timeout_ms=120000)
        opt = pt.DistributedOptimizer(model, "momentum", lr=0.01, momentum=0.9)
        net = model
    else:
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        dist.init_process_group("gloo", init_method="file://" + out + ".store", rank=rank,
                                world_size=world)
        net = DDP(model)
        opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
        times = {}

        def timed_allreduce(state, bucket):
            times.setdefault("first", time.perf_counter())
            buf = bucket.buffer().div_(world)
            fut = dist.all_reduce(buf, async_op=True).get_future()

            def done(f):
                times["last"] = time.perf_counter()
                return f.value()[0]
            return fut.then(done)
        net.register_comm_hook(None, timed_allreduce)

    for it in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = loss_fn(net(x), y)
        tb = time.perf_counter()
        if mode == "ddp":
            times.clear()
        loss.backward()
        te = time.perf_counter()
        opt.step()
        t1 = time.perf_counter()
        if it < args.warmup:
            continue
        step_times.append(t1 - t0)
        if mode == "phub":
            wait = opt.timing["step_wait_s"]
            first = opt.timing["first_push"] or tb
            comm.append(t1 - first if first else float("nan"))
            exposed.append(wait)
        else:
            comm.append(times.get("last", te) - times.get("first", tb))
            exposed.append(max(0.0, (te - tb) - min(bwd_local)))
    res = {"rank": rank, "step_s": _median(step_times), "comm_s": _median(comm),
           "exposed_s": _median(exposed), "bwd_local_s": min(bwd_local)}
    if mode == "phub":
        res["stats"] = opt.session.stats()
        opt.close()
    else:
        import torch.distributed as dist
        dist.destroy_process_group()
    with open(f"{out}.{rank}", "w") as f:
        json.dump(res, f)


def run(args, mode, model_name, world, tmp):
    import torch.multiprocessing as mp
    out = os.path.join(tmp, f"{mode}-{model_name}-{world}")
    mp.start_processes(worker, args=(args, mode, model_name, world, out), nprocs=world,
                       join=True, start_method="spawn")
    ranks = []
    for r in range(world):
        with open(f"{out}.{r}") as f:
            ranks.append(json.load(f))
    step = max(r["step_s"] for r in ranks)          # the slowest rank sets the pace
    comm = _median([r["comm_s"] for r in ranks])
    exposed = _median([r["exposed_s"] for r in ranks])
    res = {"mode": mode, "model": model_name, "workers": world, "batch_per_worker": args.batch,
           "images_per_s": world * args.batch / step, "step_s": step, "comm_s": comm,
           "exposed_s": exposed,
           "overlap": max(0.0, 1.0 - exposed / comm) if comm > 0 else float("nan")}
    if mode == "phub":
        # libphub's counters over the whole run (warm-up included), summed over the ranks.
        res["phub"] = {k: sum(r["stats"][k] for r in ranks)
                       for k in ("pushes", "retransmits", "pulls", "replays", "rx_dropped")}
    print(f"{model_name:9s} N={world}  {mode:4s}  {res['images_per_s']:8.1f} images/s  "
          f"step {step * 1000:8.1f} ms  comm {comm * 1000:8.1f} ms  exposed "
          f"{exposed * 1000:8.1f} ms  overlap {res['overlap'] * 100:5.1f}%" +
          (f"  (pushes {res['phub']['pushes']}, retransmits {res['phub']['retransmits']}, "
           f"pulls {res['phub']['pulls']})" if mode == "phub" else ""), flush=True)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="resnet18,resnet50")
    ap.add_argument("--workers", default="2,4", help="comma-separated worker counts")
    ap.add_argument("--modes", default="phub,ddp")
    ap.add_argument("--batch", type=int, default=16, help="images per worker per step")
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per worker")
    ap.add_argument("--window-bytes", type=int, default=0,
                    help="libphub's window of bytes in flight (0: its default, 256 KiB)")
    ap.add_argument("--server", help="PBox address; default: start a soft PBox on loopback")
    ap.add_argument("--port", type=int, default=47000)
    ap.add_argument("--netns-prefix", help="worker rank r runs in network namespace "
                    "<prefix><r+1> (a virtual rack's workers: --netns-prefix <rack>-w)")
    ap.add_argument("--job", default="bench")
    ap.add_argument("--nonce", type=lambda s: int(s, 0), default=0xbe7c)
    ap.add_argument("--build", default=os.environ.get("PHUB_BUILD_DIR",
                                                      os.path.join(HERE, "..", "..", "build")))
    ap.add_argument("--json", help="write the results as JSON")
    args = ap.parse_args()
    os.environ.setdefault("PHUB_BUILD_DIR", args.build)
    modes = args.modes.split(",")
    pbox = None
    if "phub" in modes and args.server is None:
        exe = os.path.join(args.build, "tests", "support", "phub-soft-pbox")
        pbox = subprocess.Popen([exe, "--port", "0", "--lcores", "2"], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True)
        m = re.search(r"control 127\.0\.0\.1:(\d+),", pbox.stdout.readline())
        if not m:
            pbox.kill()
            raise SystemExit(f"bench_torchvision: {exe} did not start")
        args.server, args.port = "127.0.0.1", int(m.group(1))
        print(f"soft PBox on 127.0.0.1:{args.port} (one thread: a stand-in, not the appliance)")
    results = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for model_name in args.models.split(","):
                for world in (int(w) for w in args.workers.split(",")):
                    for mode in modes:
                        results.append(run(args, mode, model_name, world, tmp))
    finally:
        if pbox is not None:
            pbox.terminate()
            pbox.wait()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
