#!/usr/bin/env python3
"""The accuracy peer of the distributed LeNet job: PyTorch DDP trains it, with or without a hook.

The job is configs/lenet_fashion_mnist_dist.prototxt's: LeNet-5 (pytorch_train.py's, as
layers/models/lenet5.cpp) on Fashion-MNIST, --nproc ranks x batch 16, each rank its shard of every
epoch's shuffle; SGD lr 0.05, Nesterov momentum 0.9, weight decay 5e-4; a cosine decay to 0 over
the epochs after a linear warm-up from 0.1 x lr over the first 0.2 epoch, set every iteration.
--hook powersgd registers DDP's PowerSGD hook with mintrain's defaults (rank 2, 100 iterations
uncompressed, error feedback, warm start, compression only where it saves 2x). The ranks are
processes on this machine, joined over loopback with Gloo. Rank 0 prints one line:
  pytorch_ddp_accuracy hook=powersgd seed=1 world=4 iters=4690 test_acc=90.12 seconds=...
  /usr/bin/python3 apps/bench/pytorch_ddp_accuracy.py --hook powersgd --seed 1
"""
import argparse
import datetime
import gzip
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pytorch_train  # noqa: E402  (the LeNet-5 that matches mintrain's)

MEAN, STD = 0.2860, 0.3530  # the config's train and eval transforms


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hook", default="none", choices=["none", "powersgd"])
    ap.add_argument("--powersgd-rank", type=int, default=2)
    ap.add_argument("--powersgd-start", type=int, default=101, help="first compressed iteration (1-based)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--nproc", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch", type=int, default=16, help="per rank")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--port", type=int, default=29650)
    args = ap.parse_args(argv)
    for flag, value in (("--nproc", args.nproc), ("--epochs", args.epochs), ("--batch", args.batch),
                        ("--powersgd-rank", args.powersgd_rank)):
        if value < 1:
            ap.error(f"{flag} must be >= 1, got {value}")
    return args


def read_idx(torch, path):
    """An idx file (gzip or plain) as a uint8 tensor of its shape."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    dims = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return torch.frombuffer(bytearray(raw[4 + 4 * dims:]), dtype=torch.uint8).view(*shape)


def split_files(folder, prefix):
    """The images and labels files of a split, or None when the folder lacks them."""
    for suffix in (".gz", ""):
        images = os.path.join(folder, f"{prefix}-images-idx3-ubyte{suffix}")
        labels = os.path.join(folder, f"{prefix}-labels-idx1-ubyte{suffix}")
        if os.path.exists(images) and os.path.exists(labels):
            return images, labels
    return None


def load_split(torch, folder, prefix):
    images, labels = split_files(folder, prefix)
    x = (read_idx(torch, images).float().div(255.0) - MEAN) / STD
    return x.unsqueeze(1), read_idx(torch, labels).long()


def lr_at(epoch, epochs, base=0.05, warmup=0.2, start_factor=0.1):
    lr = 0.5 * base * (1.0 + math.cos(math.pi * min(epoch, epochs) / epochs))
    return lr if epoch >= warmup else lr * (start_factor + (1.0 - start_factor) * epoch / warmup)


def rank_main(rank, args):
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(args.port))
    dist.init_process_group("gloo", rank=rank, world_size=args.nproc, timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(args.seed)
    train_x, train_y = load_split(torch, args.data, "train")
    model = pytorch_train.lenet5(torch, nn, F)
    if args.hook == "powersgd":
        dist._DEFAULT_FIRST_BUCKET_BYTES = 25 * 1024 * 1024  # one bucket (see pytorch_ddp.py)
    ddp = DDP(model)
    if args.hook == "powersgd":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=args.powersgd_rank,
                                            start_powerSGD_iter=args.powersgd_start, min_compression_rate=2,
                                            use_error_feedback=True, warm_start=True)
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)
    n = train_x.shape[0]
    per_rank = math.ceil(n / args.nproc)
    steps = math.ceil(per_rank / args.batch)
    start, it = time.perf_counter(), 0
    for epoch in range(args.epochs):
        order = torch.randperm(n, generator=torch.Generator().manual_seed(args.seed * 1000 + epoch))
        order = torch.cat([order, order[:per_rank * args.nproc - n]])  # pad, as DistributedSampler
        shard = order[rank::args.nproc]
        for s in range(steps):
            for g in opt.param_groups:
                g["lr"] = lr_at(epoch + s / steps, args.epochs)
            idx = shard[s * args.batch:(s + 1) * args.batch]
            loss = F.cross_entropy(ddp(train_x[idx]), train_y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            it += 1
    seconds = time.perf_counter() - start
    if rank == 0:
        test_x, test_y = load_split(torch, args.data, "t10k")
        model.eval()
        with torch.no_grad():
            correct = sum(int((model(test_x[i:i + 500]).argmax(1) == test_y[i:i + 500]).sum())
                          for i in range(0, test_x.shape[0], 500))
        print(f"pytorch_ddp_accuracy hook={args.hook} seed={args.seed} world={args.nproc} iters={it} "
              f"test_acc={100.0 * correct / test_x.shape[0]:.2f} seconds={seconds:.1f} torch={torch.__version__}",
              flush=True)
    dist.barrier()
    dist.destroy_process_group()


def main(argv):
    args = parse_args(argv)
    for prefix in ("train", "t10k"):
        if split_files(args.data, prefix) is None:
            print(f"pytorch_ddp_accuracy error=no {prefix}-images-idx3-ubyte[.gz] and {prefix}-labels-idx1-ubyte[.gz] "
                  f"in {args.data}; apt-get install dataset-fashion-mnist, or pass --data FOLDER", flush=True)
            return 1
    try:
        import torch.multiprocessing as mp
    except ImportError as e:
        print(f"pytorch_ddp_accuracy error=PyTorch is not importable ({e}); apt-get install python3-torch")
        return 1
    mp.spawn(rank_main, args=(args,), nprocs=args.nproc, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
