#!/usr/bin/env python3
"""The PyTorch peer of bench_lenet: the same LeNet-5, data, batch, optimizer and thread count.

Prints one line, "pytorch_lenet img_s=<images per second>", which bench_lenet parses.
Run with Debian's python3-torch: /usr/bin/python3 apps/bench/pytorch_lenet.py --threads 2
"""
import argparse
import gzip
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def load_idx_images(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    n, h, w = (int.from_bytes(data[i:i + 4], "big") for i in (4, 8, 12))
    return np.frombuffer(data, dtype=np.uint8, offset=16).reshape(n, 1, h, w)


def load_idx_labels(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    return np.frombuffer(data, dtype=np.uint8, offset=8).astype(np.int64)


class LeNet5(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, num_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--iters", type=int, default=400)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    images = torch.from_numpy(load_idx_images(f"{args.data}/train-images-idx3-ubyte.gz").copy())
    labels = torch.from_numpy(load_idx_labels(f"{args.data}/train-labels-idx1-ubyte.gz").copy())
    model = LeNet5()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    perm = torch.randperm(images.shape[0])

    def step(i):
        # Batch assembly is part of the step, as in mintrain's loader: gather, scale, normalize.
        idx = perm[(i * args.batch) % (images.shape[0] - args.batch):][: args.batch]
        x = (images[idx].float() / 255.0 - 0.2860) / 0.3530
        y = labels[idx]
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    for i in range(args.warmup):
        step(i)
    t0 = time.perf_counter()
    for i in range(args.iters):
        step(args.warmup + i)
    dt = time.perf_counter() - t0
    print(f"pytorch_lenet img_s={args.iters * args.batch / dt:.1f} torch={torch.__version__}")


if __name__ == "__main__":
    main()
