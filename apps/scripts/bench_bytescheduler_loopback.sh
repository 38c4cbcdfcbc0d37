#!/bin/bash
# The survey's seven methods side by side on this machine's loopback (no emulated links): one
# ResNet-20 job per method, 4 workers (2 servers for the parameter-server methods), batch 16 per
# worker on synthetic 32x32 images, one thread per process, 60 steps; prints the throughput of
# steps 41-60 (after ByteScheduler's credit search) and the search's table. REPEATS=2 runs the
# list twice; METHODS="BSP-PS WFBP-PS ByteScheduler-PS" runs only the methods named. Numbers go
# to docs/PERF.md with the machine and its load.
#   apps/scripts/bench_bytescheduler_loopback.sh [build/release/apps/mintrain]
set -u
cd "$(dirname "$0")/../.."
MINTRAIN=${1:-build/release/apps/mintrain}
OUT=$(mktemp -d /tmp/bench-bytescheduler.XXXXXX)
common=(--set model.name=resnet20 --set data.batch_size=16 "--set" "data.synthetic={size:2048,shape:[3,32,32],classes:10}"
        --set threads=1 --set max_steps=60 --set epochs=100 --set logging.print_every_iters=20
        --set checkpoint.every_epochs=0 --set dist.timeout_seconds=120)
run() {
  local name="$1" servers="$2"
  shift 2
  if [[ -n "${METHODS:-}" && " $METHODS " != *" $name "* ]]; then return; fi
  local log="$OUT/${name}.log"
  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 timeout 900 "$MINTRAIN" launch --nproc-per-node 4 --nservers "$servers" -- \
    train configs/mlp_synthetic.prototxt "${common[@]}" "$@" --output "$OUT/run" --overwrite > "$log" 2>&1
  local ips
  ips=$(grep "rank 0" "$log" | grep "step 60/60" | sed -E "s/.* ([0-9]+) img\/s data-wait.*/\1/")
  echo "$name: ${ips:-failed (see $log)} img/s (steps 41-60)"
  grep "rank 0" "$log" | grep "credit search (" | sed 's/.*(worker 0.s iteration time):/    credit search:/'
}
for ((rep = 0; rep < ${REPEATS:-1}; ++rep)); do
  run BSP 0 --set dist.algorithm=ssgd --set dist.ssgd.schedule=bsp
  run WFBP 0 --set dist.algorithm=ssgd --set dist.ssgd.schedule=wfbp
  run MG-WFBP 0 --set dist.algorithm=ssgd --set dist.ssgd.schedule=mgwfbp
  run ByteScheduler-A2A 0 --set dist.algorithm=bytescheduler --set dist.bytescheduler.architecture=a2a \
    --set dist.bytescheduler.partition_bytes=65536
  run BSP-PS 2 --set dist.algorithm=ps --set dist.ps.schedule=bsp
  run WFBP-PS 2 --set dist.algorithm=ps --set dist.ps.schedule=wfbp
  run ByteScheduler-PS 2 --set dist.algorithm=bytescheduler --set dist.bytescheduler.architecture=ps \
    --set dist.bytescheduler.partition_bytes=65536
done
echo "logs: $OUT"
