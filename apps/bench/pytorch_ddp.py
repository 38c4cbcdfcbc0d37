#!/usr/bin/env python3
"""The distributed peer: PyTorch DistributedDataParallel on Gloo, timed per iteration.

One process per rank, started like a mintrain rank (torchrun's environment contract: RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT; GLOO_SOCKET_IFNAME picks the interface, e.g. eth0 inside
an emulated host). The model, synthetic batch and optimizer are pytorch_train.py's, so a case
here is the same case as bench_train's (ResNet-20 matches layers/models/resnet.cpp layer for
layer). What travels is DDP's choice:
  --hook none       DDP's default: gradients in buckets of --bucket-cap-mb, allreduced as they fill
  --hook fp16       DDP's fp16_compress_hook (half the bytes)
  --hook powersgd   DDP's PowerSGD hook (low-rank, error feedback) of --powersgd-rank, as in
                    Vogels et al.; start_powerSGD_iter = --warmup + 1 so timed iterations compress
Timing: --warmup iterations, then --iters iterations, each timed on its own from the start of
forward to the end of the optimizer step (DDP's allreduce ends inside backward). Rank 0 prints
  pytorch_ddp model=resnet20 hook=none world=4 batch=16 iter_ms=... p50_ms=... p99_ms=... ...
window_ms is the median over windows of --window consecutive iterations of their mean: the
figure dist/predict/report.sh takes for mintrain's runs (the median of its progress windows),
so one slow iteration (a retransmission stall) counts alike on both sides.
(batch is per rank). An error prints the same line ending in error=<why>, exit status 1.
  RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29600 \
    /usr/bin/python3 apps/bench/pytorch_ddp.py --model resnet20 --batch 16
"""
import argparse
import datetime
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pytorch_train  # noqa: E402  (the models and synthetic batches of the single-process peer)

HOOKS = ["none", "fp16", "powersgd"]


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, choices=pytorch_train.MODELS)
    ap.add_argument("--batch", type=int, default=16, help="per rank")
    ap.add_argument("--hook", default="none", choices=HOOKS)
    ap.add_argument("--powersgd-rank", type=int, default=2)
    ap.add_argument("--bucket-cap-mb", type=float, default=25.0, help="DDP's default: 25")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=8)
    ap.add_argument("--window", type=int, default=0,
                    help="iterations per window of window_ms (0: all timed iterations in one window)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds any collective may wait")
    ap.add_argument("--image-size", type=int, default=0)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=30522)
    args = ap.parse_args(argv)
    for flag, value, low in (("--batch", args.batch, 1), ("--iters", args.iters, 1),
                             ("--warmup", args.warmup, 0), ("--threads", args.threads, 1),
                             ("--window", args.window, 0),
                             ("--powersgd-rank", args.powersgd_rank, 1)):
        if value < low:
            ap.error(f"{flag} must be >= {low}, got {value}")
    if args.bucket_cap_mb <= 0 or args.timeout <= 0:
        ap.error("--bucket-cap-mb and --timeout must be > 0")
    missing = [v for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if v not in os.environ]
    if missing:
        ap.error("set " + ", ".join(missing) + " in the environment (one process per rank, as torchrun)")
    # pytorch_train's helpers read these fields too.
    args.device, args.precision, args.attention = "cpu", "fp32", "matmul"
    return args


def line(args, world, **fields):
    head = f"pytorch_ddp model={args.model} hook={args.hook} world={world} batch={args.batch}"
    return " ".join([head] + [f"{k}={v}" for k, v in fields.items()])


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def run(args, torch, nn, F, dist):
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)  # the same initial weights everywhere (DDP also broadcasts rank 0's)
    model, shape, classes = pytorch_train.build_model(args.model, args, torch, nn, F)
    model.train()
    x, y = pytorch_train.synthetic_batch(torch, args, shape, classes, torch.device("cpu"))
    if args.hook == "powersgd":
        # One bucket: with DDP's two (a small first one), PyTorch 1.13 + Gloo failed here with a
        # message-size mismatch: each bucket's PowerSGD callback issues its next allreduce when
        # its future completes, and the two can complete in another order on another rank.
        dist._DEFAULT_FIRST_BUCKET_BYTES = int(args.bucket_cap_mb * 1024 * 1024)
    ddp = DDP(model, bucket_cap_mb=args.bucket_cap_mb)
    if args.hook == "fp16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif args.hook == "powersgd":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
        state = powerSGD_hook.PowerSGDState(process_group=None,
                                            matrix_approximation_rank=args.powersgd_rank,
                                            start_powerSGD_iter=args.warmup + 1)
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    if shape is not None:
        loss_fn = lambda: F.cross_entropy(ddp(x), y)  # noqa: E731
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    else:
        loss_fn = lambda: ddp(x, y)  # noqa: E731
        opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4, eps=1e-6, weight_decay=0.01)

    times = []
    for i in range(args.warmup + args.iters):
        start = time.perf_counter()
        loss = loss_fn()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if i >= args.warmup:
            times.append((time.perf_counter() - start) * 1e3)
    # Every rank's mean, so a straggler shows: rank 0 reports the slowest rank's mean too.
    mean = torch.tensor([statistics.mean(times)])
    dist.all_reduce(mean, op=dist.ReduceOp.MAX)
    window = args.window or len(times)
    windows = [statistics.mean(times[i:i + window]) for i in range(0, len(times) - window + 1, window)]
    return dict(iter_ms=f"{statistics.mean(times):.1f}", p50_ms=f"{statistics.median(times):.1f}",
                window_ms=f"{statistics.median(windows):.1f}",
                p99_ms=f"{percentile(times, 0.99):.1f}", slowest_rank_ms=f"{mean.item():.1f}",
                iters=args.iters, bucket_cap_mb=args.bucket_cap_mb, loss=f"{loss.item():.4f}",
                params=sum(p.numel() for p in model.parameters()), torch=torch.__version__)


def main(argv):
    args = parse_args(argv)
    world = int(os.environ["WORLD_SIZE"])
    try:
        import torch
        import torch.distributed as dist
        import torch.nn as nn
        import torch.nn.functional as F
    except ImportError as e:
        print(line(args, world, error=f"PyTorch is not importable by {sys.executable} ({e}); "
                                      "apt-get install python3-torch"), flush=True)
        return 1
    try:
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
        fields = run(args, torch, nn, F, dist)
        if dist.get_rank() == 0:
            print(line(args, world, **fields), flush=True)
        dist.destroy_process_group()
        return 0
    except Exception as e:  # a peer gone, a timeout: a line that says why
        print(line(args, world, error=f"{type(e).__name__}: {e}".replace("\n", " ")[:300]), flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
