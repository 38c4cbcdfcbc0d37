#!/usr/bin/env bash
# The main job, from a fresh Debian 12 machine: install dependencies, build, and train the
# default config (LeNet-5 on Fashion-MNIST) on the CPU as a data-parallel job of local
# processes (S-SGD over Gloo on loopback): MT_NPROC ranks (default 2), each with a per-rank
# batch of 64 / MT_NPROC so that the global batch and schedule match the 1-process run.
# Extra arguments go to `mintrain train`, e.g. --set epochs=1. Each run starts afresh: a
# previous run in runs/lenet_fashion_mnist_dist is moved aside (--overwrite), never deleted.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash apps/scripts/install_deps.sh
bash apps/scripts/build.sh release
NPROC="${MT_NPROC:-2}"
exec build/release/apps/mintrain launch --nproc-per-node "$NPROC" -- \
  train configs/lenet_fashion_mnist_dist.prototxt --set data.batch_size=$((64 / NPROC)) --overwrite "$@"
