#!/usr/bin/env bash
# The GPU check of the CUDA backend, in two halves, because binaries are built on a machine
# without a GPU and run on one that has no Debian libraries (see ../shared/tools/gpu-bundle):
#
#   apps/scripts/gpu_check.sh bundle [BUILD_DIR]   # here: build, then pack binaries (and the
#                                                  # Fashion-MNIST files) into build/gpu-bundle/
#   apps/scripts/gpu_check.sh run                  # on the GPU machine, from the repository root
#
# `run` executes, in order, stopping at nothing (every step reports; the exit status is the
# number of failed steps):
#   1. every bundled test binary (GPU tests included: there they run instead of skipping);
#   2. compute-sanitizer memcheck on test_ops_gpu (out-of-bounds and misaligned accesses,
#      leaks of device memory are not checked: the caching allocator keeps blocks on purpose);
#   3. one epoch of the default job on the GPU:
#        mintrain train configs/lenet_fashion_mnist.prototxt --set device=cuda --set epochs=1
# Logs go to $OUT (the device tool's output folder) when set, else build/gpu-bundle/logs.
set -uo pipefail
cd "$(dirname "$0")/../.."
mode="${1:-}"
# Under build/, which .gitignore already covers; the device tool must be told to carry it.
BUNDLE=build/gpu-bundle

case "$mode" in
  bundle)
    # A build without OpenCV by default: its image codecs (gdal, x265, icu ...) alone are
    # ~180 MiB of libraries, far over the carry budget, and the GPU checks do not need them.
    build="${2:-build/gpu-lean}"
    set -e
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DMT_ENABLE_OPENCV=OFF >/dev/null
    cmake --build "$build" -j"$(nproc)"
    rm -rf "$BUNDLE"
    # The carry budget (60 MiB with the data) does not hold every test binary: by default the
    # ones that touch the device; MT_GPU_TESTS="all" or a list of names picks others.
    sel="${MT_GPU_TESTS:-test_ops_gpu test_ops_nn test_device test_optim test_train_e2e}"
    if [ "$sel" = all ]; then
      mapfile -t tests < <(find "$build/tests" -maxdepth 1 -type f -name 'test_*' -perm -u+x | sort)
    else
      tests=()
      for t in $sel; do tests+=("$build/tests/$t"); done
    fi
    ../shared/tools/gpu-bundle -o "$BUNDLE" "$build/apps/mintrain" "${tests[@]}"
    strip --strip-unneeded "$BUNDLE"/bin/* "$BUNDLE"/lib/* 2>/dev/null || true  # symbols: half the size
    # The Fashion-MNIST files add 30 MiB: opt in with MT_GPU_DATA=1 when the budget allows, or
    # carry them separately and point MT_FASHION_MNIST at them for `run`.
    if [ "${MT_GPU_DATA:-0}" = 1 ] && [ -d /usr/share/datasets/fashion-mnist ]; then
      mkdir -p "$BUNDLE/data/fashion-mnist"
      cp /usr/share/datasets/fashion-mnist/*.gz "$BUNDLE/data/fashion-mnist/"
    fi
    du -sh "$BUNDLE"
    echo "now run, on the GPU machine (carry $BUNDLE): apps/scripts/gpu_check.sh run"
    ;;
  run)
    [ -f "$BUNDLE/env.sh" ] || { echo "no $BUNDLE/env.sh: run '$0 bundle' first (on the build machine)" >&2; exit 2; }
    # shellcheck disable=SC1091
    source "$BUNDLE/env.sh"
    logs="${OUT:-$BUNDLE/logs}"
    mkdir -p "$logs"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
    failed=0
    step() {  # step NAME COMMAND...: runs it, logs it, counts a failure
      local name=$1
      shift
      echo "=== $name"
      if "$@" >"$logs/$name.log" 2>&1; then
        echo "    ok   ($(tail -n 1 "$logs/$name.log"))"
      else
        echo "    FAILED (exit $?), last lines of $logs/$name.log:"
        tail -n 30 "$logs/$name.log" | sed 's/^/    /'
        failed=$((failed + 1))
      fi
    }
    # 1. Every test binary. The tests find their inputs from the source tree (the working
    # directory); GPU tests print SKIPPED only where no device is visible.
    for t in "$BUNDLE"/bin/test_*; do
      step "$(basename "$t")" "$t" --gtest_brief=1
    done
    grep -h "SKIPPED" "$logs"/test_ops_gpu.log 2>/dev/null | head -5
    # 2. Memory errors in the CUDA kernels.
    if command -v compute-sanitizer >/dev/null; then
      step memcheck compute-sanitizer --tool memcheck --error-exitcode 1 \
        "$BUNDLE/bin/test_ops_gpu" --gtest_filter='GpuOps.*'
    else
      echo "=== memcheck: compute-sanitizer not found on PATH; skipped"
      failed=$((failed + 1))
    fi
    # 3. A real training epoch on the GPU.
    data="${MT_FASHION_MNIST:-$BUNDLE/data/fashion-mnist}"
    [ -d "$data" ] || data=/usr/share/datasets/fashion-mnist
    step train_lenet_cuda "$BUNDLE/bin/mintrain" train configs/lenet_fashion_mnist.prototxt \
      --set device=cuda --set epochs=1 --set data.path="$data" --output "$logs/run_lenet_cuda"
    grep -i "accuracy" "$logs/train_lenet_cuda.log" | tail -n 2
    echo "gpu_check: $failed step(s) failed; logs in $logs"
    exit "$failed"
    ;;
  *)
    sed -n '2,16p' "$0"
    exit 2
    ;;
esac
