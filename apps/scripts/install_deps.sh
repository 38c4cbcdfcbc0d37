#!/usr/bin/env bash
# Installs what mintrain builds and runs with, from Debian 12's archive. Safe to re-run: it
# skips apt when everything is already there. The CUDA toolkit (with cuDNN, cuBLAS, NCCL) is
# not from Debian: where /usr/local/cuda exists the build uses it, elsewhere it builds CPU-only.
# Usage: install_deps.sh [main]   (main: only what the main job builds and runs with, which is
# under half of the download; the rest adds image datasets, plots and the tests)
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config
  ccache                              # caches compiles: a second build of a fresh clone is fast
  libprotobuf-dev protobuf-compiler   # run configs (text protobuf)
  nlohmann-json3-dev                  # profile files (mintrain model, profile-comm)
  libopenblas-dev                     # CPU GEMM
  libdnnl-dev                         # CPU convolutions (oneDNN; the build works without it)
  zlib1g-dev                          # gzip'd IDX files, checksums
  libicu-dev                          # Unicode tables of the BERT tokenizer
  libgloo-dev                         # CPU collectives (distributed module)
  dataset-fashion-mnist               # the default job's data
)
if [[ "${1:-}" != main ]]; then
  PACKAGES+=(
    libopencv-dev                       # image decoding (image_folder / image_list datasets)
    gnuplot-nox                         # mintrain plot
    libgtest-dev libgmock-dev fortunes bc   # tests
    clang libclang-rt-dev libomp-dev        # the sanitizer builds (asan, fuzz presets)
  )
fi
if [[ "${MT_WITH_MPI:-0}" == 1 ]]; then
  PACKAGES+=(openmpi-bin libopenmpi-dev)  # MPI_Allreduce peer in bench_mpi_allreduce (optional)
fi
if [[ "${MT_WITH_TORCH:-0}" == 1 ]]; then
  PACKAGES+=(python3-torch python3-torchvision)  # the peers in benchmarks (optional)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install_deps: all packages present"
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install_deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  SUDO=sudo
fi
echo "install_deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
