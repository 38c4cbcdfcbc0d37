#!/usr/bin/env bash
# DLCP against S-SGD over TCP in training, under hotspots (DLCP's tail-latency check, on MODEL):
# 4 emulated hosts (netns_testbed.sh, two_paths preset: two racks of 2, host links RATE, two
# inter-rack planes of INTER_RATE each, switch ports with DSCP priority bands), host 0 flooding
# host 2 across plane A (eth0) for ON s every ON+OFF s with `cross`. One rank per host trains
# configs/lenet_fashion_mnist.prototxt (its model MODEL) for ITERS iterations (data.limit_train_batches) with a
# timeline (dist.timeline_file) and a metrics record every METRICS_EVERY iterations, then
# evaluates; first S-SGD BSP over Gloo (TCP on eth0), then DLCP's ring at p = LOSS on eth0 too (dist.dlcp.paths empty: the address that reaches the
# master), then with ALGOS' dlcp_spray the same ring sprayed over both planes (dist.dlcp.paths
# ["eth0", "eth1"]: each host binds its own interfaces' addresses). Prints, per algorithm, the
# median and 99th percentile of rank 0's iteration time (differences between the starts of its
# timeline's forward spans, the first WARMUP iterations left out), its DLCP loss and resends (the
# metrics records' mean), and the test accuracy. The times come from the timeline, not from a
# metrics record per iteration, because each record averages the metrics over the ranks with a
# blocking Gloo allreduce: TCP traffic on eth0 every iteration, which a job logging every few
# dozen iterations does not have and which stalled DLCP's runs behind the flood. The testbed (and the cross traffic) is torn down at the end, also on failure or
# Ctrl-C.
#
#   bench_dlcp_train_netns.sh [ITERS] [BATCH]     # defaults: 200 16 (per rank)
# Env: MODEL (lenet5; resnet20's 800 packet ranges let p = 1 % lose 8 contributions an iteration),
#      EVAL_BATCHES (0: the whole test set; else data.limit_eval_batches), BUILD (build/release),
#      RATE (100mbit), INTER_RATE (25mbit), ON/OFF (1 1), LOSS (0.01),
#      DEADLINE_MS (20), WARMUP (5), METRICS_EVERY (50), ALGOS ("ssgd dlcp"; add dlcp_spray), MASTER_PORT (29588), OUT (a new
#      folder under /tmp), MT_TESTBED_PREFIX (mt-dlcpt), DLCP_GLOO_INTERFACE (eth0: where the DLCP
#      runs' own TCP traffic goes, the stop vote and the metrics; eth1 takes it off the flooded
#      plane, to tell the transport's stalls from TCP's).
set -euo pipefail

cd "$(dirname "$0")/../.."
ITERS=${1:-200}
BATCH=${2:-16}
MODEL=${MODEL:-lenet5}
EVAL_BATCHES=${EVAL_BATCHES:-0}
BUILD=${BUILD:-build/release}
RATE=${RATE:-100mbit}
export INTER_RATE=${INTER_RATE:-25mbit}
ON=${ON:-1}
OFF=${OFF:-1}
LOSS=${LOSS:-0.01}
DEADLINE_MS=${DEADLINE_MS:-20}
DLCP_GLOO_INTERFACE=${DLCP_GLOO_INTERFACE:-eth0}
WARMUP=${WARMUP:-5}
METRICS_EVERY=${METRICS_EVERY:-50}
ALGOS=${ALGOS:-ssgd dlcp}
PORT=${MASTER_PORT:-29588}
export MT_TESTBED_PREFIX=${MT_TESTBED_PREFIX:-mt-dlcpt}
MINTRAIN=$BUILD/apps/mintrain
TESTBED=apps/scripts/netns_testbed.sh
NPROC=4

[[ $(id -u) -eq 0 ]] || { echo "bench_dlcp_train_netns.sh: must run as root (network namespaces)" >&2; exit 1; }
[[ -x $MINTRAIN ]] || { echo "build $MINTRAIN first: cmake --build $BUILD --target mintrain" >&2; exit 1; }

OUT=${OUT:-$(mktemp -d /tmp/mt-dlcp-train.XXXXXX)}
mkdir -p "$OUT"
pids=()
cross_pid=
cleanup() {
  local p
  [[ -n $cross_pid ]] && kill "$cross_pid" 2>/dev/null || true
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  "$TESTBED" down
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$TESTBED" down   # a stale testbed from an interrupted run
PRIO_QUEUES=1 "$TESTBED" up "$NPROC" two_paths "$RATE" 0ms
"$TESTBED" cross 0 2 "$ON" "$OFF" >"$OUT/cross.log" 2>&1 &
cross_pid=$!

for algo in $ALGOS; do
  # Every rank must start with the same config (the start-up check hashes its text), output
  # folder included: rank 0 alone writes there.
  config=$OUT/$algo.prototxt
  cp configs/lenet_fashion_mnist.prototxt "$config"
  if [[ $algo == dlcp || $algo == dlcp_spray ]]; then
    paths=""
    [[ $algo == dlcp_spray ]] && paths='paths: ["eth0", "eth1"]'
    echo "dist { algorithm: \"dlcp\" interface: \"$DLCP_GLOO_INTERFACE\"" \
         "dlcp { loss_bound: $LOSS deadline_ms: $DEADLINE_MS $paths } }" >>"$config"
  else
    echo "dist { algorithm: \"ssgd\" interface: \"eth0\" ssgd { schedule: \"bsp\" } }" >>"$config"
  fi
  for ((r = 0; r < NPROC; r++)); do
    "$TESTBED" run "$r" -- env RANK=$r WORLD_SIZE=$NPROC LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 \
        MASTER_ADDR=10.77.0.1 MASTER_PORT=$PORT OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
        "$MINTRAIN" train "$config" --output "$OUT/$algo-run" --overwrite \
        --set model.name="$MODEL" --set data.limit_eval_batches="$EVAL_BATCHES" \
        --set data.batch_size="$BATCH" --set epochs=1 --set data.limit_train_batches="$ITERS" \
        --set logging.metrics_every_iters="$METRICS_EVERY" --set dist.timeline_file="$OUT/$algo-tl-{rank}.json" \
        >"$OUT/$algo-rank$r.log" 2>&1 &
    pids+=($!)
  done
  failed=0
  for p in "${pids[@]}"; do wait "$p" || failed=1; done
  pids=()
  PORT=$((PORT + 1))
  if ((failed)); then
    for ((r = 0; r < NPROC; r++)); do echo "--- $algo rank $r"; tail -5 "$OUT/$algo-rank$r.log"; done
    echo "bench_dlcp_train_netns.sh: a rank failed" >&2
    exit 1
  fi
done

echo "$MODEL, 4 hosts (two_paths, PRIO_QUEUES=1, host links $RATE, inter-rack planes $INTER_RATE each)," \
     "cross 0 2 $ON $OFF; batch $BATCH per rank, $ITERS iterations, first $WARMUP left out; logs in $OUT"
echo "| algorithm | iteration p50 ms | p99 ms | max ms | DLCP loss | resends / iteration | test accuracy |"
echo "|---|---|---|---|---|---|---|"
for algo in $ALGOS; do
  python3 - "$OUT/$algo-run/metrics.jsonl" "$OUT/$algo-rank0.log" "$algo" "$WARMUP" "$OUT/$algo-tl-0.json" <<'EOF'
import json, re, sys
metrics, log, algo, warmup, timeline = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
loss, resends = [], []
for line in open(metrics):
    r = json.loads(line)
    if r.get("type") == "train" and "dlcp_loss" in r:
        loss.append(r["dlcp_loss"]); resends.append(r["dlcp_retransmissions"])
trace = json.load(open(timeline))
events = trace["traceEvents"] if isinstance(trace, dict) else trace
starts = sorted(e["ts"] for e in events if e.get("name") == "forward")  # one per iteration, in us
steps = sorted((b - a) / 1000 for a, b in zip(starts[warmup:], starts[warmup + 1:]))
pick = lambda q: steps[min(len(steps) - 1, int(q * (len(steps) - 1) + 0.5))]
acc = re.findall(r"test loss \S+ acc ([0-9.]+)%", open(log).read())
mean = lambda v: sum(v) / len(v) if v else float("nan")
extra = ("%.2f %%" % (100 * mean(loss)), "%.1f" % mean(resends)) if loss else ("-", "-")
print("| %s | %.0f | %.0f | %.0f | %s | %s | %s |" % (algo, pick(0.5), pick(0.99), steps[-1], extra[0], extra[1],
      (acc[-1] + " %") if acc else "?"))
EOF
done
