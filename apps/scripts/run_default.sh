#!/usr/bin/env bash
# The main job, from a fresh Debian 12 machine: install what it needs, build the `mintrain`
# command (and only what it links), and train the default config (LeNet-5 on Fashion-MNIST) on
# the CPU as a data-parallel job of local processes (S-SGD over Gloo on loopback): MT_NPROC
# ranks (default 2), each with a per-rank batch of 64 / MT_NPROC so that the global batch and
# schedule match the 1-process run. Extra arguments go to `mintrain train`, e.g. --set epochs=1.
# Each run starts afresh: a previous run in runs/lenet_fashion_mnist_dist is moved aside
# (--overwrite), never deleted. A second run reuses build/release and starts training at once.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash apps/scripts/install_deps.sh main
# The CUDA kernels add half again to the build: compiled only where a GPU can run them, or when
# asked.
if [[ "${MT_CUDA:-0}" == 1 ]] || nvidia-smi -L >/dev/null 2>&1; then
  cuda=ON
else
  cuda=OFF
  echo "run_default: no GPU found (nvidia-smi -L), building for the CPU only; MT_CUDA=1 also builds the GPU parts (needs the CUDA toolkit)"
fi
bash apps/scripts/build.sh release -DMT_ENABLE_CUDA=$cuda mintrain
NPROC="${MT_NPROC:-2}"
exec build/release/apps/mintrain launch --nproc-per-node "$NPROC" -- \
  train configs/lenet_fashion_mnist_dist.prototxt --set data.batch_size=$((64 / NPROC)) --overwrite "$@"
