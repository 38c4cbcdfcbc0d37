#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine: install dependencies, build, run ctest.
# GPU tests skip themselves (visibly) where there is no CUDA device.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash apps/scripts/install_deps.sh
bash apps/scripts/build.sh release
# Suites run side by side, one OpenMP thread each: OpenMP threads that outnumber the cores
# spin at barriers waiting for descheduled peers and slow everything down many times over.
OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 ctest --preset release -j"$(nproc)"
