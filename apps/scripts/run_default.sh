#!/usr/bin/env bash
# The main job, from a fresh Debian 12 machine: install dependencies, build, and train the
# default config (LeNet-5 on Fashion-MNIST, CPU). Extra arguments go to `mintrain train`,
# e.g. --set epochs=1.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash apps/scripts/install_deps.sh
bash apps/scripts/build.sh release
exec build/release/apps/mintrain train configs/lenet_fashion_mnist.prototxt "$@"
