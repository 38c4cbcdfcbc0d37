#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine: install dependencies, build, run ctest.
# GPU tests skip themselves (visibly) where there is no CUDA device.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash apps/scripts/install_deps.sh
bash apps/scripts/build.sh release
ctest --preset release -j"$(nproc)"
