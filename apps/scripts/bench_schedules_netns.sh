#!/usr/bin/env bash
# S-SGD schedules under a limited network: 4 emulated hosts (netns_testbed.sh, one rank per
# namespace, links shaped by tc), each running one rank of apps/bench/bench_schedules, which times
# BSP, WFBP, FUSION and MG-WFBP on ResNet-20 with synthetic CIFAR-shaped data and prints the cost
# model's prediction next to each. This script then adds the acceptance figures:
#   compute ms  = forward+backward of the BSP run (4 ranks computing at once on the shared cores;
#                 BSP never overlaps, so nothing else runs during it)
#   comm ms     = BSP's wait+update (one allreduce of all gradients, flattened; SGD's update is
#                 well under 1 ms) -- communication alone, over the shaped links
#   ratio       = measured iteration / max(compute, comm); target for MGWFBP: <= 1.15 and < BSP
# and CD-SGD's (bench_schedules' rows COMPUTE and CDSGD, in the same run):
#   compute alone = every rank training on its own, all at once (no synchronizer)
#   CD-SGD ratio  = CD-SGD's iteration / compute alone; target: <= 1.1, and faster than the
#                   PowerSGD peer below
# Then, in the same testbed, the peer: PyTorch DDP (apps/bench/pytorch_ddp.py, Gloo, the same
# model, batch and threads) once per hook in PEER_HOOKS. The testbed is torn down at the end,
# also on failure or Ctrl-C.
#
#   bench_schedules_netns.sh [RATE] [BATCH] [ITERS]     # defaults: 25mbit 16 8
# Env: BUILD (default build/dev), NPROC (4), WARMUP (3), PRESET (flat), MASTER_PORT (29577),
#      PEER_HOOKS ("none"; e.g. "none fp16 powersgd"; "" skips the peer), PYTHON (/usr/bin/python3),
#      CDSGD_K (0: CD-SGD's full-precision iteration every k-th, bench_schedules --cdsgd-k).
set -euo pipefail

cd "$(dirname "$0")/../.."
RATE=${1:-25mbit}
BATCH=${2:-16}
ITERS=${3:-8}
NPROC=${NPROC:-4}
WARMUP=${WARMUP:-3}
PRESET=${PRESET:-flat}
PORT=${MASTER_PORT:-29577}
PEER_HOOKS=${PEER_HOOKS-none}
PYTHON=${PYTHON:-/usr/bin/python3}
CDSGD_K=${CDSGD_K:-0}
BUILD=${BUILD:-build/dev}
BENCH=$BUILD/apps/bench/bench_schedules
TESTBED=apps/scripts/netns_testbed.sh

[[ $(id -u) -eq 0 ]] || { echo "bench_schedules_netns.sh: must run as root (network namespaces)" >&2; exit 1; }
[[ -x $BENCH ]] || { echo "build $BENCH first: cmake --build $BUILD --target bench_schedules" >&2; exit 1; }

LOG=$(mktemp -d /tmp/mt-bench-netns.XXXXXX)
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  "$TESTBED" down
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$TESTBED" down   # a stale testbed from an interrupted run
"$TESTBED" up "$NPROC" "$PRESET" "$RATE" 0ms

echo "ranks: $BENCH --model resnet20 --batch $BATCH --iters $ITERS --warmup $WARMUP --threads 1" \
     "--cdsgd-k $CDSGD_K --interface eth0, one per namespace; logs in $LOG"
for ((r = 0; r < NPROC; r++)); do
  "$TESTBED" run "$r" -- env RANK=$r WORLD_SIZE=$NPROC LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 \
      MASTER_ADDR=10.77.0.1 MASTER_PORT=$PORT OMP_NUM_THREADS=1 \
      "$BENCH" --model resnet20 --batch "$BATCH" --iters "$ITERS" --warmup "$WARMUP" \
      --threads 1 --cdsgd-k "$CDSGD_K" --interface eth0 >"$LOG/rank$r.log" 2>&1 &
  pids+=($!)
done
failed=0
for p in "${pids[@]}"; do wait "$p" || failed=1; done
pids=()
cat "$LOG/rank0.log"
if ((failed)); then
  for ((r = 1; r < NPROC; r++)); do echo "--- rank $r"; tail -5 "$LOG/rank$r.log"; done
  echo "bench_schedules_netns.sh: a rank failed" >&2
  exit 1
fi

# The acceptance table from rank 0's markdown table.
awk -v rate="$RATE" -v batch="$BATCH" -v n="$NPROC" '
  toupper($0) ~ /^\| (BSP|WFBP|FUSION|MGWFBP|COMPUTE|CDSGD) \|/ {
    split($0, f, "|"); s = toupper(f[2]); gsub(/ /, "", s)
    it[s] = f[3] + 0; fb[s] = f[4] + 0; wu[s] = f[5] + 0; pred[s] = f[7] + 0
  }
  END {
    compute = fb["BSP"]; comm = wu["BSP"]; m = compute > comm ? compute : comm
    printf "\nResNet-20, %d ranks in namespaces, links %s (tbf, both directions), batch %d per rank\n", n, rate, batch
    printf "compute (BSP forward+backward, 4 ranks at once) %.1f ms; comm (BSP allreduce of all gradients) %.1f ms\n", compute, comm
    print "| schedule | measured ms/iter | compute ms | comm ms | max(compute, comm) ms | ratio | predicted ms |"
    print "|---|---:|---:|---:|---:|---:|---:|"
    split("BSP WFBP FUSION MGWFBP", order, " ")
    for (k = 1; k <= 4; k++) { s = order[k]
      printf "| %s | %.1f | %.1f | %.1f | %.1f | %.2f | %.1f |\n", s, it[s], compute, comm, m, it[s] / m, pred[s] }
    ok = it["MGWFBP"] <= 1.15 * m && it["MGWFBP"] < it["BSP"]
    printf "target (MGWFBP <= 1.15 x max and faster than BSP): %s (MGWFBP %.2f x max, %.2f x BSP)\n",
           ok ? "MET" : "NOT MET", it["MGWFBP"] / m, it["MGWFBP"] / it["BSP"]
    if (it["COMPUTE"] > 0 && it["CDSGD"] > 0)
      printf "compute alone %.1f ms/iter; CD-SGD %.1f ms/iter = %.2f x compute alone (target <= 1.1: %s); %.2f x BSP\n",
             it["COMPUTE"], it["CDSGD"], it["CDSGD"] / it["COMPUTE"],
             it["CDSGD"] <= 1.1 * it["COMPUTE"] ? "MET" : "NOT MET", it["CDSGD"] / it["BSP"]
  }' "$LOG/rank0.log"

# The peer in the same testbed: PyTorch DDP, one run per hook.
if [[ -n $PEER_HOOKS ]] && ! "$PYTHON" -c 'import torch' 2>/dev/null; then
  echo "PyTorch DDP peer skipped: $PYTHON cannot import torch (apt-get install python3-torch, or set PYTHON)"
  PEER_HOOKS=""
fi
for hook in $PEER_HOOKS; do
  PORT=$((PORT + 1))
  for ((r = 0; r < NPROC; r++)); do
    "$TESTBED" run "$r" -- env RANK=$r WORLD_SIZE=$NPROC MASTER_ADDR=10.77.0.1 MASTER_PORT=$PORT \
        GLOO_SOCKET_IFNAME=eth0 OMP_NUM_THREADS=1 \
        "$PYTHON" apps/bench/pytorch_ddp.py --model resnet20 --batch "$BATCH" --iters "$ITERS" \
        --warmup "$WARMUP" --threads 1 --hook "$hook" >"$LOG/ddp-$hook-rank$r.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || true; done
  pids=()
  grep -h '^pytorch_ddp' "$LOG/ddp-$hook-rank0.log" ||
    { echo "PyTorch DDP ($hook) gave no result:"; tail -5 "$LOG/ddp-$hook-rank0.log"; }
done
# CD-SGD against the PowerSGD peer of this run (its mean iteration, iter_ms).
cdsgd_ms=$(awk -F'|' 'toupper($2) ~ /^ *CDSGD *$/ { print $3 + 0 }' "$LOG/rank0.log")
powersgd_ms=$(grep -ho 'hook=powersgd .*iter_ms=[0-9.]*' "$LOG"/ddp-powersgd-rank0.log 2>/dev/null | grep -o 'iter_ms=[0-9.]*' | cut -d= -f2 || true)
if [[ -n $cdsgd_ms && -n $powersgd_ms ]]; then
  awk -v c="$cdsgd_ms" -v p="$powersgd_ms" 'BEGIN {
    printf "CD-SGD %.1f ms/iter vs PyTorch DDP + PowerSGD %.1f ms/iter: %.2fx (target: faster: %s)\n",
           c, p, p / c, c < p ? "MET" : "NOT MET" }'
fi
