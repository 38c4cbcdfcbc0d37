#!/usr/bin/env bash
# The GPU check of the CUDA backend and the GPU benchmark, in two halves, because binaries are
# built on a machine without a GPU and run on one that has no Debian libraries:
#
#   apps/scripts/gpu_check.sh bundle [BUILD_DIR]   # here: build, then pack binaries (and the
#                                                  # Fashion-MNIST files) into build/gpu-bundle/
#                                                  # and build/gpu-bundle.tar.xz
#   apps/scripts/gpu_check.sh run [STEP...]        # on the GPU machine, from the repository root:
#                                                  # the steps below, all by default, or those
#                                                  # named (tests, bench, memcheck, train, and
#                                                  # profile, which only runs when named)
#   apps/scripts/gpu_check.sh bench                # on the GPU machine: step 2 alone
#   apps/scripts/gpu_check.sh accept               # on the GPU machine: the data-parallel
#                                                  # acceptance runs (below), 70 s on an H200
#
# The bundle holds the binaries, every shared library they load but glibc's, the C++ runtime and
# NVIDIA's (the GPU machine has its own), env.sh (the library path the steps use) and the
# Fashion-MNIST files.
# Carry build/gpu-bundle.tar.xz to the GPU machine (the device tool's carry: ["build/gpu-bundle.tar.xz"]):
# unpacked, the bundle is over the 60 MiB carry budget (Debian's OpenBLAS alone, with kernels for
# every CPU, is 36 MiB); `run` and `bench` unpack it when build/gpu-bundle/ is not there.
#
# `run` executes, in order, stopping at nothing (every step reports; the exit status is the
# number of failed steps), each step under a time limit (all of them: 4 minutes on an H200):
#   1. every bundled test binary (GPU tests included: there they run instead of skipping), each
#      within MT_GPU_TEST_LIMIT seconds (240);
#   2. the training benchmark against PyTorch: apps/scripts/bench_train.sh
#      --device cuda, its GPU matrix (ResNet-50 224x224 batch 128 fp32/tf32/bf16, ResNet-20
#      batch 128 fp32/bf16, LeNet-5 batch 64, BERT-base seq 128 batch 32 fp32/bf16), both sides
#      of each case one after the other (3 min 10 s on an H200); it is cut at 5 minutes
#      (`bench` alone: 9), later cases listed as skipped;
#   3. compute-sanitizer memcheck on test_ops_gpu (out-of-bounds and misaligned accesses,
#      leaks of device memory are not checked: the caching allocator keeps blocks on purpose);
#   4. one epoch of the default job on the GPU:
#        mintrain train configs/lenet_fashion_mnist.prototxt --set device=cuda --set epochs=1
#   5. (`profile`, only when named) the large cases, where we trail PyTorch, per op: bench_train.sh
#      --profile on ResNet-50 and BERT-base (MT_GPU_PROFILE_CASES), both sides' kernel time per op
#      side by side, into profile.md (raw lines in profile.log).
# What comes back from the device tool is at most 8 files, so $OUT (else build/gpu-bundle/logs)
# gets 6, each written as its step ends: summary.txt (the lines printed here), tests.log (every
# test binary's output in turn), bench_train.md (the table), bench_train.log (both sides' raw
# output), memcheck.log, train_lenet_cuda.log. The training run's folder stays in the bundle.
#
# `accept` runs every data-parallel algorithm the way a user starts it, through `mintrain
# launch --nproc-per-node 1 -- train configs/lenet_fashion_mnist_dist.prototxt --set
# device=cuda`, with dist.force_distributed so that the one process takes the distributed path
# (NCCL world of one: set-up checks, broadcasts, every collective, the stop vote): S-SGD with
# each schedule (bsp, wfbp, fusion, mgwfbp), CD-SGD and DS-Sync, one epoch at batch 64 each,
# and the same config on the CPU (Gloo) for S-SGD, CD-SGD and DS-Sync. A run fails when it
# fails, or when its test accuracy is more than 1.5 points below the CPU run's of the same
# algorithm (S-SGD's schedules all do the same arithmetic). It writes accept.log and adds its
# lines to summary.txt.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
mode="${1:-}"
# Under build/, which .gitignore already covers; the device tool must be told to carry it.
BUNDLE=build/gpu-bundle

# Steps of `run` and `bench` need the bundle's libraries and somewhere to write.
prepare() {
  # Python's tarfile unpacks it where no xz program is installed.
  if [ ! -f "$BUNDLE/env.sh" ] && [ -f "$BUNDLE.tar.xz" ]; then
    if command -v xz >/dev/null; then
      tar -C "$(dirname "$BUNDLE")" -xJf "$BUNDLE.tar.xz"
    else
      python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
        "$BUNDLE.tar.xz" "$(dirname "$BUNDLE")"
    fi
  fi
  [ -f "$BUNDLE/env.sh" ] || {
    echo "no $BUNDLE/env.sh or $BUNDLE.tar.xz: run '$0 bundle' first (on the build machine) and carry" \
      "$BUNDLE.tar.xz" >&2
    exit 2
  }
  # PyTorch, the benchmark's peer, runs with the library path from before env.sh: the bundle's
  # Debian libraries (libgomp, zlib ...) must not replace the ones its wheels were built with.
  export MT_PEER_LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}"
  # shellcheck disable=SC1091
  source "$BUNDLE/env.sh"
  # Benchmark tables name the commit the binaries were built from (the tree here may have no .git).
  MT_REVISION=$(cat "$BUNDLE/revision.txt" 2>/dev/null) && export MT_REVISION
  out="${OUT:-$BUNDLE/logs}"
  mkdir -p "$out"
  failed=0
}
say() { echo "$*" | tee -a "$out/summary.txt"; }
# step LABEL LOG LIMIT COMMAND...: runs COMMAND for at most LIMIT seconds, appending its output to
# $out/LOG.log, and counts a failure.
step() {
  local label=$1 log="$out/$2.log" limit=$3 t0=$SECONDS rc=0
  shift 3
  echo "=== $label" >>"$log"
  timeout --kill-after=15 "$limit" "$@" >>"$log" 2>&1 || rc=$?
  if [ $rc -eq 0 ]; then
    say "=== $label: ok in $((SECONDS - t0)) s ($(tail -n 1 "$log"))"
  else
    [ $rc -eq 124 ] || [ $rc -eq 137 ] && say "=== $label: stopped at its limit of $limit s"
    say "=== $label: FAILED (exit $rc) in $((SECONDS - t0)) s, last lines of $log:"
    tail -n 30 "$log" | sed 's/^/    /' | tee -a "$out/summary.txt"
    failed=$((failed + 1))
  fi
  return $rc
}
# The benchmark: bench_train.sh on the GPU (its defaults there are the GPU matrix) within
# BUDGET seconds (it stops a side that would run past it); each side of a case may take 150 s.
bench() {
  local budget=$1
  if step bench_train bench_train $((budget + 60)) apps/scripts/bench_train.sh --device cuda \
    --bin "$BUNDLE/bin/bench_train" --budget "$budget" --timeout 150 \
    --out "$out/bench_train.md" --log "$out/bench_train.raw"; then
    tee -a "$out/summary.txt" <"$out/bench_train.md"  # (a failed step has printed it already)
  fi
  # The step's own log (progress lines) and the raw results go back as one file.
  cat "$out/bench_train.raw" >>"$out/bench_train.log" 2>/dev/null && rm -f "$out/bench_train.raw"
}

# What a bundle never ships: glibc's own libraries (the GPU machine's loader must find the glibc
# it was built with), the C++ runtime (the GPU machine's is the one its CUDA libraries load) and
# NVIDIA's libraries (it has its driver, the CUDA toolkit, cuDNN and NCCL).
not_shipped='^(linux-vdso|ld-linux[-a-z0-9_]*|libc|libm|libmvec|libpthread|libdl|librt|libresolv|libutil|libanl|libnss_[a-z]+|libthread_db|libstdc\+\+|libgcc_s|libcuda|libcudart|libcu(blas|dnn|rand|fft|sparse|solver)[A-Za-z_]*|libnccl|libnv[A-Za-z_-]*)\.so'
# pack_binaries BINARY...: each binary into $BUNDLE/bin and every shared library it loads (as ldd
# resolves them here) into $BUNDLE/lib, but not_shipped; and $BUNDLE/env.sh, which the steps
# source to find them.
pack_binaries() {
  local b name path
  mkdir -p "$BUNDLE/bin" "$BUNDLE/lib"
  for b in "$@"; do
    cp -L "$b" "$BUNDLE/bin/"
    if ldd "$b" | grep -q "not found"; then
      echo "gpu_check: $b needs libraries this machine lacks:" >&2
      ldd "$b" | grep "not found" >&2
      return 1
    fi
    while read -r name path; do
      [[ $name =~ $not_shipped ]] || [ -e "$BUNDLE/lib/$name" ] || cp -L "$path" "$BUNDLE/lib/$name"
    done < <(ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }')
  done
  # On the GPU machine: the bundle's libraries first, then CUDA's and the nvidia-* Python
  # packages' (cuDNN, NCCL, cuBLAS).
  cat >"$BUNDLE/env.sh" <<'ENV'
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
nv=$(python3 -c 'import glob, os, site
print(":".join(sorted({d for p in site.getsitepackages() for d in glob.glob(os.path.join(p, "nvidia", "*", "lib"))})))' 2>/dev/null)
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64${nv:+:$nv}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
ENV
}

case "$mode" in
  bundle)
    # A build without OpenCV by default: its image codecs (gdal, x265, icu ...) alone are
    # ~180 MiB of libraries, far over the carry budget, and the GPU checks do not need them.
    # Nor oneDNN (40 MiB, for CPU convolutions only): the CPU side of the GPU tests then runs
    # the reference convolution kernels.
    build="${2:-build/gpu-shared}"
    set -e
    # The carry budget (60 MiB with the data) does not hold every test binary: by default the
    # ones that touch the device; MT_GPU_TESTS="all" or a list of names picks others.
    sel="${MT_GPU_TESTS:-test_ops_gpu test_ops_nn test_ops_transformer_gpu test_compressors_gpu test_precision_gpu test_device test_optim test_bert test_train_e2e test_nccl_algorithms test_comm_hook test_cdsgd}"
    # Shared module libraries: statically linked, every test binary carried its own copy of
    # core's CUDA kernels (8 MiB each), and the bundle did not fit the carry budget. Only the
    # GPU machine's architecture (Hopper, sm_90) is built, which halves the kernels again.
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DMT_ENABLE_OPENCV=OFF -DMT_ENABLE_DNNL=OFF \
      -DBUILD_SHARED_LIBS=ON -DCMAKE_CUDA_ARCHITECTURES="${MT_GPU_ARCH:-90}" >/dev/null
    if [ "$sel" = all ]; then
      cmake --build "$build" -j"$(nproc)"
      mapfile -t tests < <(find "$build/tests" -maxdepth 1 -type f -name 'test_*' -perm -u+x | sort)
    else
      # Only what is bundled: building every test binary takes long on a small machine.
      # shellcheck disable=SC2086
      cmake --build "$build" -j"$(nproc)" --target mintrain bench_train $sel
      tests=()
      for t in $sel; do tests+=("$build/tests/$t"); done
    fi
    rm -rf "$BUNDLE"
    pack_binaries "$build/apps/mintrain" "$build/apps/bench/bench_train" "${tests[@]}"
    strip --strip-unneeded "$BUNDLE"/bin/* "$BUNDLE"/lib/* 2>/dev/null || true  # symbols: half the size
    git describe --always --dirty >"$BUNDLE/revision.txt" 2>/dev/null || true
    # The Fashion-MNIST files, for `train` and `accept` (30 MiB, already compressed), from
    # MT_FASHION_MNIST or Debian's place; MT_GPU_DATA=0 leaves them out (then carry them
    # separately and point MT_FASHION_MNIST at them there). The benchmark needs no data.
    if [ "${MT_GPU_DATA:-1}" = 1 ]; then
      fmnist="${MT_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}"
      [ -f "$fmnist/train-images-idx3-ubyte.gz" ] || {
        echo "gpu_check: no Fashion-MNIST in $fmnist (train-images-idx3-ubyte.gz ...): point MT_FASHION_MNIST" \
          "at its four .gz files, or give MT_GPU_DATA=0 to bundle without them" >&2
        exit 1
      }
      mkdir -p "$BUNDLE/data/fashion-mnist"
      cp "$fmnist"/*-ubyte.gz "$BUNDLE/data/fashion-mnist/"
    fi
    # What travels is the compressed bundle (a third of the size): it must fit the carry budget.
    # xz, not gzip: the libraries and data pack to 48 MiB instead of 62.
    XZ_OPT="-T0" tar -C "$(dirname "$BUNDLE")" -cJf "$BUNDLE.tar.xz" "$(basename "$BUNDLE")"
    packed=$(du -m "$BUNDLE.tar.xz" | cut -f1)
    echo "gpu_check: $BUNDLE is $(du -sm "$BUNDLE" | cut -f1) MiB, $BUNDLE.tar.xz $packed MiB"
    if [ "$packed" -ge 60 ]; then
      echo "gpu_check: $BUNDLE.tar.xz is over the 60 MiB carry budget; bundle fewer tests (MT_GPU_TESTS)" \
        "or carry the data separately (MT_GPU_DATA=0)" >&2
      exit 1
    fi
    echo "now run, on the GPU machine (carry $BUNDLE.tar.xz): apps/scripts/gpu_check.sh run"
    ;;
  run)
    prepare
    steps="${*:2}"
    steps="${steps:-tests bench memcheck train}"
    wants() { [[ " $steps " == *" $1 "* ]]; }
    say "gpu_check run ($steps): $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -n 1)"
    # 1. Every test binary. The tests find their inputs from the source tree (the working
    # directory). MT_STRICT_GPU=1: a GPU test that finds no usable device fails (with CUDA's
    # reason) instead of skipping, so this run cannot be green while testing nothing.
    export MT_STRICT_GPU=1
    if wants tests; then
      for t in "$BUNDLE"/bin/test_*; do
        step "$(basename "$t")" tests "${MT_GPU_TEST_LIMIT:-240}" "$t" --gtest_brief=1
      done
      grep -h "SKIPPED" "$out/tests.log" 2>/dev/null | head -5
    fi
    # 2. Training throughput against PyTorch, within 5 minutes.
    if wants bench; then bench 300; fi
    # 3. Memory errors in the CUDA kernels.
    if ! wants memcheck; then
      :
    elif command -v compute-sanitizer >/dev/null; then
      step memcheck memcheck 240 compute-sanitizer --tool memcheck --error-exitcode 1 \
        "$BUNDLE/bin/test_ops_gpu" --gtest_filter='GpuOps.*'
    else
      say "=== memcheck: compute-sanitizer not found on PATH; skipped"
      failed=$((failed + 1))
    fi
    # 4. A real training epoch on the GPU.
    data="${MT_FASHION_MNIST:-$BUNDLE/data/fashion-mnist}"
    [ -d "$data" ] || data=/usr/share/datasets/fashion-mnist
    if wants train; then
      step train_lenet_cuda train_lenet_cuda 180 "$BUNDLE/bin/mintrain" train configs/lenet_fashion_mnist.prototxt \
        --set device=cuda --set epochs=1 --set data.path="$data" --output "$BUNDLE/runs/lenet_cuda" --overwrite
      grep -i "accuracy" "$out/train_lenet_cuda.log" | tail -n 2
    fi
    # 5. Where the large models' step goes, per op, on both sides.
    if [[ " $steps " == *" profile "* ]]; then
      step profile profile 300 apps/scripts/bench_train.sh --device cuda --bin "$BUNDLE/bin/bench_train" \
        --cases "${MT_GPU_PROFILE_CASES:-resnet50:bf16:128 bert_base:bf16:32 resnet50:fp32:128}" \
        --iters 10 --repeats 1 --profile 5 --budget 240 --timeout 100 --out "$out/profile.md" --log "$out/profile.raw"
      cat "$out/profile.raw" >>"$out/profile.log" 2>/dev/null && rm -f "$out/profile.raw"
    fi
    say "gpu_check: $failed step(s) failed; logs in $out"
    exit "$failed"
    ;;
  accept)
    prepare
    say "gpu_check accept: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -n 1)"
    data="${MT_FASHION_MNIST:-$BUNDLE/data/fashion-mnist}"
    [ -d "$data" ] || data=/usr/share/datasets/fashion-mnist
    # accept_run NAME DEVICE --set ...: one epoch of the distributed LeNet config through launch.
    accept_run() {
      local name=$1 device=$2
      shift 2
      step "accept $name on $device" accept 240 "$BUNDLE/bin/mintrain" launch --nproc-per-node 1 -- \
        train configs/lenet_fashion_mnist_dist.prototxt --set device="$device" \
        --set dist.force_distributed=true --set epochs=1 --set data.batch_size=64 --set data.path="$data" \
        "$@" --output "$BUNDLE/runs/accept_${name}_$device" --overwrite
    }
    # The last evaluation's accuracy in a run's metrics.jsonl, or nothing.
    accuracy() {
      python3 -c 'import json,sys
acc=[r["acc"] for r in map(json.loads, filter(str.strip, open(sys.argv[1]))) if r.get("type")=="eval" and "acc" in r]
print(acc[-1] if acc else "")' "$BUNDLE/runs/$1/metrics.jsonl" 2>/dev/null
    }
    # check_accuracy GPU_RUN CPU_RUN: fails when the GPU run is more than 1.5 points below.
    check_accuracy() {
      local gpu cpu
      gpu=$(accuracy "$1")
      cpu=$(accuracy "$2")
      if [ -n "$gpu" ] && [ -n "$cpu" ] && python3 -c "import sys; sys.exit(0 if $gpu >= $cpu - 1.5 else 1)"; then
        say "=== accuracy $1: $gpu (CPU $cpu): ok"
      else
        say "=== accuracy $1: '$gpu' against the CPU's '$cpu': FAILED (more than 1.5 points below, or missing)"
        failed=$((failed + 1))
      fi
    }
    accept_run ssgd cpu --set dist.algorithm=ssgd --set dist.ssgd.schedule=fusion
    accept_run cdsgd cpu --set dist.algorithm=cdsgd
    accept_run dssync cpu --set dist.algorithm=dssync
    for schedule in bsp wfbp fusion mgwfbp; do
      accept_run "ssgd_$schedule" cuda --set dist.algorithm=ssgd --set dist.ssgd.schedule=$schedule
      check_accuracy "accept_ssgd_${schedule}_cuda" accept_ssgd_cpu
    done
    accept_run cdsgd cuda --set dist.algorithm=cdsgd
    check_accuracy accept_cdsgd_cuda accept_cdsgd_cpu
    accept_run dssync cuda --set dist.algorithm=dssync
    check_accuracy accept_dssync_cuda accept_dssync_cpu
    say "gpu_check accept: $failed step(s) failed; logs in $out"
    exit "$failed"
    ;;
  bench)
    # The benchmark alone, for a session that has run the rest: within 9 minutes, so that one
    # 10-minute command of the device tool holds it.
    prepare
    say "gpu_check bench: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -n 1)"
    bench 540
    exit "$failed"
    ;;
  *)
    sed -n '2,52p' "$0"
    exit 2
    ;;
esac
