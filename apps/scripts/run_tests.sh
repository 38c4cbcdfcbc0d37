#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine: install dependencies, build the tests
# (build/test: CUDA code for one architecture where a toolkit is found, so that it compiles on
# every run), run them with ctest, check the source tree (code-line budgets, includes that run
# upward), then run the suites that read hostile input or handle faults again under
# AddressSanitizer and UndefinedBehaviorSanitizer (MT_SKIP_SANITIZERS=1 skips that part); the
# ten slowest tests print last. GPU tests skip themselves (visibly) where there is no CUDA device.
set -euo pipefail
cd "$(dirname "$0")/../.."
log=build/test/ctest.log
rm -f "$log"
slowest() {  # at the end of the output, whatever ends it; the script's exit status stays
  local status=$?
  [[ -f $log ]] || return "$status"
  echo "The ten slowest tests:"
  # head leaves early, so sort can die of SIGPIPE: with pipefail that status (141) would be the
  # script's when it ends on its own.
  sed -nE 's/^.*Test +#[0-9]+: ([^ ]+) .* ([0-9.]+) sec$/\2 s  \1/p' "$log" | sort -rn | head -n 10 || true
  return "$status"
}
trap slowest EXIT

bash apps/scripts/install_deps.sh
# With a GPU, the CUDA code is built for that GPU, so that the GPU tests run on it.
arch=()
if nvidia-smi -L >/dev/null 2>&1; then arch=(-DCMAKE_CUDA_ARCHITECTURES=native); fi
bash apps/scripts/build.sh test "${arch[@]}"

# Suites run side by side, one OpenMP thread each (the preset's environment): OpenMP threads
# that outnumber the cores spin at barriers waiting for descheduled peers and slow everything
# down many times over.
# A failed test runs once more and fails only if it fails twice: Gloo's loopback connect
# sometimes ends in "Connection closed by peer" while many multi-process suites start at once
# (rare, not understood; a test's own failure repeats). The log shows every first failure.
status=0
ctest --preset test -j"$(nproc)" --repeat until-pass:2 | tee "$log" || status=$?
# The line counts print with the results, passed or failed, so growth is seen.
bash apps/scripts/line_counts.sh || status=1
bash apps/scripts/include_check.sh || status=1
if ((status != 0)); then exit "$status"; fi

# Sanitizers: the suites that read hostile input (configs, archives and checkpoints, IDX/CIFAR
# files, tokenizer text, garbage on the store's socket, whatever arrives on DLCP's UDP port) or
# handle faults (dead ranks, signals, restarts, loss scaling), built with AddressSanitizer and
# UndefinedBehaviorSanitizer; only these and the `mintrain` they run are built. The whole suite
# under them is a longer check (tests/README.md).
if [[ "${MT_SKIP_SANITIZERS:-0}" != 1 ]]; then
  sanitized=(test_serialize test_config test_tokenizer test_data test_dist_comm test_compressors
             test_loss_scaler test_reliability test_dlcp_packet)
  bash apps/scripts/build.sh asan mintrain "${sanitized[@]}"
  ctest --preset asan -L "^($(IFS='|'; echo "${sanitized[*]}"))\$"
fi
