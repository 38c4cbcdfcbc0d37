"""The torchvision side of bench_image_pipeline: ImageFolder + DataLoader throughput.

Same work as mintrain's side: read + decode (PIL), RandomResizedCrop(size), RandomHorizontalFlip,
ToTensor, Normalize(ImageNet mean/std), batches collated by the DataLoader; the consumer does
nothing. One untimed warm-up epoch per setting, then `epochs` timed epochs. Prints one line
per num_workers value: "workers=N img_s=X".

    /usr/bin/python3 apps/bench/torchvision_pipeline.py --root DIR/train --workers 0,1,2
"""
import argparse
import time

import torch
import torchvision.datasets as datasets
import torchvision.transforms as T


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--root", required=True)
    p.add_argument("--workers", default="0,1,2")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--epochs", type=int, default=3)
    a = p.parse_args()

    # One thread per process: the per-thread comparison is the point, and DataLoader workers
    # run with one thread anyway.
    torch.set_num_threads(1)
    transform = T.Compose([
        T.RandomResizedCrop(a.size),
        T.RandomHorizontalFlip(),
        T.ToTensor(),
        T.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
    ])
    dataset = datasets.ImageFolder(a.root, transform=transform)
    for w in [int(x) for x in a.workers.split(",")]:
        loader = torch.utils.data.DataLoader(dataset, batch_size=a.batch, shuffle=True, num_workers=w,
                                             persistent_workers=w > 0)
        for _ in loader:  # warm-up: page cache, worker start
            pass
        n = 0
        t0 = time.perf_counter()
        for _ in range(a.epochs):
            for x, y in loader:
                n += y.numel()
        dt = time.perf_counter() - t0
        print(f"workers={w} img_s={n / dt:.1f}", flush=True)
        del loader


if __name__ == "__main__":
    main()
