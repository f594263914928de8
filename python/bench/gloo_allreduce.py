#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""Allreduce of ResNet-50's gradients with torch.distributed (gloo): the baseline beside PHub.

Each of N processes allreduces tensors of ResNet-50's parameter shapes (161 tensors, 25,557,032
fp32 values), or of the keys of a --layout file (a JSON list of element counts, as phub-bench
takes it), for K iterations after a warm-up and rank 0 prints one JSON object: exchanges/s (one
exchange = the allreduce of every tensor, timed by the slowest rank), p50/p99 ms, Gbit/s.
Rendezvous: a TCP store at --master-addr:--master-port (rank 0 listens there).
"""

import argparse
import json
import os
import resource
import sys
import time

import torch
import torch.distributed as dist

RESNET50_TENSORS = 161
RESNET50_PARAMS = 25_557_032


def resnet50_shapes_table():
    """ResNet-50's parameter shapes in torchvision's named_parameters() order, written out from
    the architecture (He et al. 2016, bottleneck blocks [3, 4, 6, 3]) for hosts without
    torchvision: conv weights, batch-norm weight and bias, the final fully connected layer."""
    shapes = []

    def conv_bn(out_ch, in_ch, k):
        shapes.append((out_ch, in_ch, k, k))
        shapes.append((out_ch,))
        shapes.append((out_ch,))

    conv_bn(64, 3, 7)
    inplanes = 64
    for planes, blocks in ((64, 3), (128, 4), (256, 6), (512, 3)):
        for b in range(blocks):
            conv_bn(planes, inplanes, 1)
            conv_bn(planes, planes, 3)
            conv_bn(planes * 4, planes, 1)
            if b == 0:
                conv_bn(planes * 4, inplanes, 1)  # downsample
            inplanes = planes * 4
    shapes.append((1000, 2048))
    shapes.append((1000,))
    return shapes


def resnet50_shapes():
    """torchvision's own definition when it is installed, else the table above."""
    try:
        import torchvision  # noqa: F401 (optional)
        model = torchvision.models.resnet50()
        return [tuple(p.shape) for p in model.parameters()], "torchvision"
    except ImportError:
        return resnet50_shapes_table(), "table"


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def percentile(sorted_values, p):
    if not sorted_values:
        return 0.0
    i = min(len(sorted_values) - 1, int(round(p * (len(sorted_values) - 1))))
    return sorted_values[i]


def cpu_seconds():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world-size", type=int, required=True)
    ap.add_argument("--master-addr", required=True, help="rank 0's address (TCP store)")
    ap.add_argument("--master-port", type=int, default=29500)
    ap.add_argument("--iterations", type=int, default=10, help="measured exchanges")
    ap.add_argument("--warmup", type=int, default=2, help="exchanges before measuring")
    ap.add_argument("--mode", choices=("per-tensor", "bucket"), default="per-tensor",
                    help="one allreduce per tensor (issued asynchronously, then waited), or "
                         "DDP-style flat buckets of --bucket-mb")
    ap.add_argument("--bucket-mb", type=float, default=25.0)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--timeout-s", type=int, default=120)
    ap.add_argument("--layout", help="JSON list of tensor sizes in elements (default ResNet-50)")
    ap.add_argument("--model-name", default=None, help="the model's name in the output")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    if args.layout:
        with open(args.layout) as f:
            sizes = json.load(f)
        if not isinstance(sizes, list) or not sizes or \
                not all(isinstance(n, int) and n > 0 for n in sizes):
            sys.exit(f"--layout {args.layout}: expected a JSON list of positive integers")
        shapes, source = [(n,) for n in sizes], args.layout
    else:
        shapes, source = resnet50_shapes()
    total = sum(numel(s) for s in shapes)
    if not args.layout and (len(shapes) != RESNET50_TENSORS or total != RESNET50_PARAMS):
        sys.exit(f"ResNet-50 layout from {source}: {len(shapes)} tensors, {total} values; "
                 f"expected {RESNET50_TENSORS} and {RESNET50_PARAMS}")

    from datetime import timedelta
    dist.init_process_group("gloo", init_method=f"tcp://{args.master_addr}:{args.master_port}",
                            rank=args.rank, world_size=args.world_size,
                            timeout=timedelta(seconds=args.timeout_s))
    grads = [torch.full(s, 1e-3 * (args.rank + 1), dtype=torch.float32) for s in shapes]
    if args.mode == "bucket":
        limit = int(args.bucket_mb * (1 << 20) / 4)
        buckets, cur, n = [], [], 0
        # DDP fills buckets in reverse order of the parameters (gradients arrive backwards).
        for g in reversed(grads):
            cur.append(g)
            n += g.numel()
            if n >= limit:
                buckets.append(cur)
                cur, n = [], 0
        if cur:
            buckets.append(cur)
        flats = [torch.cat([g.reshape(-1) for g in b]) for b in buckets]
        work_items = flats
    else:
        work_items = grads

    def exchange():
        handles = [dist.all_reduce(t, async_op=True) for t in work_items]
        for h in handles:
            h.wait()

    for _ in range(args.warmup):
        exchange()
    dist.barrier()
    times = []
    t_start = time.perf_counter()
    cpu_start = cpu_seconds()
    mono_start = time.monotonic()
    for _ in range(args.iterations):
        t0 = time.perf_counter()
        exchange()
        times.append(time.perf_counter() - t0)
    elapsed = time.perf_counter() - t_start
    cpu = torch.tensor([cpu_seconds() - cpu_start], dtype=torch.float64)
    dist.all_reduce(cpu, op=dist.ReduceOp.SUM)

    # The slowest rank sets the pace: per-iteration and total maxima over ranks.
    per_iter = torch.tensor(times, dtype=torch.float64)
    dist.all_reduce(per_iter, op=dist.ReduceOp.MAX)
    total_t = torch.tensor([elapsed], dtype=torch.float64)
    dist.all_reduce(total_t, op=dist.ReduceOp.MAX)
    if args.rank == 0:
        ms = sorted(float(v) * 1e3 for v in per_iter)
        rate = args.iterations / float(total_t[0])
        model_bits = total * 4 * 8
        n = args.world_size
        print(json.dumps({
            "backend": "gloo", "torch": torch.__version__, "model": args.model_name or ("layout" if args.layout else "resnet50"),
            "layout_source": source, "tensors": len(shapes), "params": total,
            "world_size": n, "mode": args.mode, "iterations": args.iterations,
            "warmup": args.warmup, "threads": args.threads,
            "exchanges_per_s": round(rate, 3),
            "p50_ms": round(percentile(ms, 0.50), 2), "p99_ms": round(percentile(ms, 0.99), 2),
            # The fastest exchange (each the slowest rank's), as phub-bench's best_ms.
            "best_ms": round(ms[0], 2),
            # Model bits reduced per second, and the ring's bus bandwidth per rank
            # (2 (n - 1) / n of the model crosses each rank's link per allreduce).
            "gbps": round(model_bits * rate / 1e9, 3),
            "bus_gbps": round(model_bits * rate * 2 * (n - 1) / n / 1e9, 3),
            # Every rank's process CPU (user + system, all threads) over the timed exchanges,
            # per GB of gradient in and model out (2 model bytes a rank an exchange), as
            # phub-bench's cpu_s_per_gb counts it.
            "cpu_s": round(float(cpu[0]), 3),
            # Rank 0's timed span on CLOCK_MONOTONIC, for system-wide figures beside it.
            "timed_from_monotonic_s": round(mono_start, 4),
            "timed_to_monotonic_s": round(mono_start + elapsed, 4),
            "cpu_s_per_gb": round(float(cpu[0]) / (2 * total * 4 * n * args.iterations / 1e9), 4),
            "host": os.uname().nodename,
        }), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
