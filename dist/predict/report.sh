#!/usr/bin/env bash
# One-command comparison of the distributed algorithms on an emulated cluster: 4 (or --nproc)
# ranks of LeNet-5 (or --model resnet20) on Fashion-MNIST (configs/lenet_fashion_mnist_dist.prototxt,
# or --config FILE, e.g. the survey's synthetic ResNet-20 and BERT-tiny jobs;
# batch 16 per rank unless --batch), one rank per
# network namespace of apps/scripts/netns_testbed.sh (links shaped by tbf, no delay: this VM has no
# netem), for every algorithm x network preset:
#   algorithms  by default S-SGD BSP, S-SGD MGWFBP, CD-SGD TWO_BIT, DS-Sync (butterfly groups of 2; on
#               two_racks told the racks, cross-rack groups every 2nd iteration)
#   presets     flat, two_racks (ranks split in two halves; inter-rack link RATE/4 or
#               --inter-rate, its switch buffer UPLINK_QUEUE, env, default the testbed's 1s),
#               straggler (one host at RATE/10);
#               contention (host 0's link alternating RATE/5 and RATE every 2 s) on request,
#               from CONTENTION_AFTER seconds (env, default 0) after the hosts are up, on host
#               CONTENTION_HOST (env, default 0; with S servers, host N+s is server s's)
#               (env RUN_TIMEOUT, default 900: seconds a rank may run before it is stopped;
#               raise it for 1,000 iterations of a cell slower than 0.9 s an iteration)
#               (env HOST_QUEUE, the testbed's, bounds each host's own side of its link:
#               default 100ms, 1514000b for a Linux host's 1000 frames; the report names it)
# It collects every rank's log and metrics.jsonl, then writes DIR/report.md (a table: time per
# iteration, throughput, final test accuracy, wall time, the packets the testbed's links dropped
# during the run (netns_testbed.sh drops); and the cost model's prediction when
# `mintrain model` exists) and PNG plots made by gnuplot:
#   iter_time.png, throughput.png, accuracy_vs_time.png, predicted_vs_measured.png (with the model)
#
#   bash dist/predict/report.sh [--quick] [--out DIR] [--bin PATH] [--rate RATE] [--presets "P ..."]
#                               [--algorithms "A ..."] [--nproc N] [--model NAME] [--batch B]
#                               [--inter-rate RATE] [--epochs E] [--iters I] [--host-cpus C]
#                               [--max-steal P] [--set KEY=VALUE]... [--out-of-sample "N1 N2"]
#                               [--config FILE]
#
# Parameter servers (ps_bsp, ps_wfbp, ps_staggered, bytescheduler_ps, auto_ps; flat, two_racks and
# contention presets, where the contended host 0 is worker 0): the testbed
# gets N+S hosts and runs with WORLD_SIZE=N+S MINTRAIN_NUM_SERVERS=S (ranks N..N+S-1 are the
# servers), each server behind its own shaped link (--servers S, default 1). Flat: rank r in host r.
# two_racks: each rack holds half the workers and half the servers (with an odd S the second rack
# the extra one): workers 0..N/2-1 and servers 0..S/2-1 in the first rack, the rest in the second,
# so a server's traffic from the other rack's workers crosses the inter-rack link.
#
# Beside the algorithms, three rows that are not mintrain's synchronizers (--algorithms names them):
#   pytorch_ddp    the peer: PyTorch DDP on Gloo (apps/bench/pytorch_ddp.py, $PYTHON, default
#                  /usr/bin/python3, Debian's python3-torch), N ranks in the same hosts, the same
#                  model and per-rank batch, its synthetic batch of the same shapes (so --config must
#                  train on synthetic data, or the model must be lenet5 or mlp, whose 1x28x28 input is
#                  Fashion-MNIST's), one thread per rank, DDP's default 25 MB buckets; warm-up of one
#                  progress window, then as many iterations as the mintrain runs minus one window;
#                  its time per iteration is the median of the same windows' means (window_ms)
#   pytorch_ddp_powersgd  the same with DDP's PowerSGD communication hook (rank 2, error feedback)
#   one_worker     one process training alone (no synchronizer) in host 0: scaling efficiency's base
#   compute_alone  N processes training alone at once, one per host, no synchronizer: what the
#                  shared cores give each worker without any communication (the median process)
#
# --quick    3 short epochs of 60 iterations (each run 5-100 s; ~6 minutes in all at 100mbit)
#            instead of 5 epochs of 300 iterations
# --out      output folder (default runs/report; emptied first): report.md, *.png, the plot data
#            (*.dat), runs/<preset>/<algorithm>/rank<r>.log (every rank's output) and out/ (rank 0's
#            metrics.jsonl and resolved config; only rank 0 writes them)
# --bin      the mintrain binary to use as it is (default $MT_BIN; without either, the script
#            builds build/release/apps/mintrain first, so the report never runs a stale binary)
# --rate     host link rate, tc units (default 100mbit)
# --presets  space-separated list (default "flat two_racks straggler"; add contention if wanted)
# --algorithms  space-separated subset of: ssgd_bsp ssgd_wfbp ssgd_fusion ssgd_mgwfbp
#            ssgd_hierarchical (FUSION, each allreduce reduce-scattered in the rack, its shards
#            across the racks, allgathered in the rack; racks of --nproc/2 on every preset;
#            predicted on two_racks only, by `mintrain model --allreduce hierarchical`)
#            cdsgd_two_bit ssgd_two_bit (compressed S-SGD) ssgd_powersgd (S-SGD's PowerSGD hook at
#            rank 2, compressing after the first progress window, as the DDP row) ssgd_bf16 (its bf16
#            hook) dssync ps_bsp ps_wfbp ps_staggered (parameter server;
#            ps_staggered predicted as WFBP-PS's DAG, on flat)
#            bytescheduler_a2a bytescheduler_ps (ByteScheduler on allreduce / on the servers)
#            auto (dist.algorithm "auto": its trials included in the run; racks of --nproc/2 on two_racks)
#            auto_ps (auto started with the --servers parameter servers: the PS's schedules are
#            candidates too)
#            pytorch_ddp pytorch_ddp_powersgd one_worker compute_alone (the rows above)
#            (default "ssgd_bsp ssgd_mgwfbp cdsgd_two_bit dssync")
# --nproc    ranks, one per emulated host (default 4; even, for two_racks); the workers with a PS
# --servers  parameter servers for the PS methods, each on a host of its own (default 1)
# --config   the job (default configs/lenet_fashion_mnist_dist.prototxt); the survey's are
#            configs/survey_resnet20_synthetic.prototxt and configs/survey_bert_tiny_synthetic.prototxt
# --model    the config's model by default; or any model of the registry that takes the config's
#            input (lenet5, resnet20 on the default 1x28x28 Fashion-MNIST)
# --batch    per-rank batch (default 16)
# --inter-rate  two_racks: the link between the racks (default RATE/4)
# --epochs, --iters  epochs and training iterations per epoch (override --quick's or the defaults)
# --host-cpus  give each emulated host a CPU quota of this many cores (default 0: none, the hosts
#            share the cores freely). A quota keeps a rank's compute speed from depending on the
#            other hosts' phases, but its communication threads then share its fraction of a core:
#            WFBP and MG-WFBP slow far below what the cost model predicts (docs/PERF.md)
# --max-steal  a training run or communication profile during which the hypervisor took more
#            than P% of this virtual machine's CPU time (steal in /proc/stat) ran on a slower
#            machine than the others: it is run again, up to twice (default 5; 100: never). The
#            report shows every run's steal.
# --set KEY=VALUE    a config override for every run (and the model), e.g. dist.cdsgd.k=0
# --out-of-sample "2 4"  the cost model's out-of-sample check, on the flat preset: the network is
#            also profiled on each of these smaller N (the model's sizes), and on --nproc ranks at
#            powers of two that are none of the model's sizes; two more predictions of --nproc ranks
#            are made from them (`mintrain model --comm-profile` with the files of the smaller N:
#            the network model extrapolates; with the other sizes: the measured curve interpolates)
#            and shown beside the in-sample one (the model's own sizes at --nproc)
# Needs root (network namespaces), gnuplot (Debian: gnuplot-nox), the Fashion-MNIST files in
# /usr/share/datasets/fashion-mnist (the default config) and, for pytorch_ddp, python3-torch. The
# testbed (namespaces prefixed MT_TESTBED_PREFIX, default mtr here) is torn down at the end, also
# on failure or Ctrl-C. Time per iteration is the median over the progress windows of rank 0's
# metrics (time/iteration deltas; windows that contain an evaluation are left out); throughput is
# the samples all ranks train per second at that time per iteration (ranks x batch / time);
# wall time is from starting the ranks until the last one exits (rendezvous and evaluation
# included). The ranks share this machine's cores, so compute is slower than on real hosts.
set -euo pipefail
cd "$(dirname "$0")/../.."

args_given="$*"
quick=0
out=runs/report
bin=${MT_BIN:-}
rate=100mbit
presets="flat two_racks straggler"
algorithm_list="ssgd_bsp ssgd_mgwfbp cdsgd_two_bit dssync"
epochs_opt="" iters_opt=""
extra_sets=()
nproc=4
model=""
config=configs/lenet_fashion_mnist_dist.prototxt
batch=16
inter_rate=""
host_cpus=0
max_steal=5
out_of_sample=""
servers=1
while [[ $# -gt 0 ]]; do
  case $1 in
    --quick) quick=1 ;;
    --out) out=${2:?--out needs a folder}; shift ;;
    --bin) bin=${2:?--bin needs a path}; shift ;;
    --rate) rate=${2:?--rate needs e.g. 100mbit}; shift ;;
    --presets) presets=${2:?--presets needs a list}; shift ;;
    --nproc) nproc=${2:?--nproc needs a number}; shift ;;
    --epochs) epochs_opt=${2:?--epochs needs a number}; shift ;;
    --iters) iters_opt=${2:?--iters needs a number}; shift ;;
    --set) extra_sets+=(--set "${2:?--set needs KEY=VALUE}"); shift ;;
    --algorithms) algorithm_list=${2:?--algorithms needs a list}; shift ;;
    --model) model=${2:?--model needs a name}; shift ;;
    --config) config=${2:?--config needs a .prototxt file}; shift ;;
    --batch) batch=${2:?--batch needs a number}; shift ;;
    --inter-rate) inter_rate=${2:?--inter-rate needs e.g. 100mbit}; shift ;;
    --host-cpus) host_cpus=${2:?--host-cpus needs a number of cores}; shift ;;
    --max-steal) max_steal=${2:?--max-steal needs a percentage}; shift ;;
    --servers) servers=${2:?--servers needs a number}; shift ;;
    --out-of-sample) out_of_sample=${2:?--out-of-sample needs a list of N, e.g. "2 4"}; shift ;;
    -h|--help) awk 'NR > 1 && /^set -euo/ { exit } NR > 1' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "report.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

[[ $(id -u) -eq 0 ]] || {
  echo "report.sh: must run as root (it builds network namespaces with veth links and tc); try: sudo bash $0 $*" >&2
  exit 1; }
if [[ -z $bin ]]; then
  # An incremental build of the one target (the first one configures; apps/scripts/install_deps.sh
  # installs what it needs): the report always measures the checkout it is run from.
  bin=build/release/apps/mintrain
  echo "report.sh: building $bin (--bin PATH or MT_BIN uses another binary as it is)" >&2
  build_log=$(mktemp)
  { cmake --preset release && cmake --build --preset release --target mintrain -j"$(nproc)"; } >"$build_log" 2>&1 || {
    tail -20 "$build_log" >&2
    echo "report.sh: building mintrain failed (above: the end of its output); fix it or pass --bin PATH" >&2
    rm -f "$build_log"
    exit 2; }
  rm -f "$build_log"
fi
[[ -x $bin ]] || {
  echo "report.sh: no mintrain binary at '$bin'; build it (bash apps/scripts/build.sh) or pass another --bin PATH" >&2
  exit 2; }
command -v gnuplot >/dev/null || {
  echo "report.sh: gnuplot not found; install it (Debian: apt-get install gnuplot-nox)" >&2; exit 2; }
for p in $presets; do
  case $p in flat|two_racks|straggler|contention) ;;
    *) echo "report.sh: unknown preset '$p' (flat, two_racks, straggler, contention)" >&2; exit 2 ;;
  esac
done

for a in $algorithm_list; do
  case $a in ssgd_bsp|ssgd_wfbp|ssgd_fusion|ssgd_mgwfbp|ssgd_hierarchical|cdsgd_two_bit|ssgd_two_bit|ssgd_powersgd|ssgd_bf16|dssync|ps_bsp|ps_wfbp|ps_staggered|bytescheduler_a2a|bytescheduler_ps|auto|auto_ps|pytorch_ddp|pytorch_ddp_powersgd|one_worker|compute_alone) ;;
    *) echo "report.sh: unknown algorithm '$a' (ssgd_bsp ssgd_wfbp ssgd_fusion ssgd_mgwfbp ssgd_hierarchical cdsgd_two_bit ssgd_two_bit ssgd_powersgd ssgd_bf16 dssync ps_bsp ps_wfbp ps_staggered bytescheduler_a2a bytescheduler_ps auto auto_ps pytorch_ddp pytorch_ddp_powersgd one_worker compute_alone)" >&2; exit 2 ;;
  esac
done
[[ -f $config ]] || { echo "report.sh: no config file '$config' (--config)" >&2; exit 2; }
# The first field named $2 inside the top-level block $1 of the config (e.g. data / type).
config_field() { awk -v b="$1" -v f="$2" '$1 == b && $2 == "{" { inside = 1; next }
  inside && /^}/ { exit }
  inside && $1 == f":" { v = $2; gsub(/"/, "", v); print v; exit }' "$config"; }
[[ -n $model ]] || model=$(config_field model name)
[[ -n $model ]] || { echo "report.sh: $config names no model.name; pass --model" >&2; exit 2; }
data_type=$(config_field data type)
PYTHON=${PYTHON:-/usr/bin/python3}
if [[ " $algorithm_list " == *" pytorch_ddp"* ]]; then
  "$PYTHON" -c 'import torch' 2>/dev/null || {
    echo "report.sh: pytorch_ddp needs PyTorch, and $PYTHON cannot import torch; install it (Debian: apt-get install python3-torch) or set PYTHON" >&2
    exit 2; }
  "$PYTHON" -c 'import sys; sys.path.insert(0, "apps/bench"); import pytorch_train; sys.exit(sys.argv[1] not in pytorch_train.MODELS)' "$model" || {
    echo "report.sh: pytorch_ddp has no model '$model' (apps/bench/pytorch_train.py MODELS)" >&2; exit 2; }
  # The peer trains on a synthetic batch of the model's usual shapes: a fair row needs the same.
  [[ $data_type == synthetic* || $model == lenet5 || $model == mlp ]] || {
    echo "report.sh: pytorch_ddp trains $model on synthetic data of its usual shape, but $config trains on '$data_type'; use --config configs/survey_${model}_synthetic.prototxt (or a config with data.type synthetic)" >&2
    exit 2; }
fi

export MT_TESTBED_PREFIX=${MT_TESTBED_PREFIX:-mtr}   # apart from the tests' and benchmarks' testbeds
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
TESTBED=apps/scripts/netns_testbed.sh
CONFIG=$config
NPROC=$nproc
BATCH=$batch
[[ $NPROC =~ ^[0-9]+$ ]] && ((NPROC >= 2)) || { echo "report.sh: --nproc must be a number >= 2" >&2; exit 2; }
[[ $BATCH =~ ^[0-9]+$ ]] && ((BATCH >= 1)) || { echo "report.sh: --batch must be a number >= 1" >&2; exit 2; }
[[ " $presets " != *" two_racks "* ]] || ((NPROC % 2 == 0)) || {
  echo "report.sh: two_racks needs an even --nproc (two racks of NPROC/2)" >&2; exit 2; }
RACK=$((NPROC / 2))
[[ $servers =~ ^[0-9]+$ ]] && ((servers >= 1)) || { echo "report.sh: --servers must be a number >= 1" >&2; exit 2; }
for n in $out_of_sample; do
  [[ $n =~ ^[0-9]+$ ]] && ((n >= 2 && n < NPROC)) || {
    echo "report.sh: --out-of-sample takes ranks counts >= 2 and below --nproc ($NPROC), not '$n'" >&2; exit 2; }
done
DSSYNC_GROUP=2   # DS-Sync's group size in every run (and in its group profile)
if ((quick)); then epochs=3 limit=60 every=10 eval_limit=2; else epochs=5 limit=300 every=20 eval_limit=5; fi
epochs=${epochs_opt:-$epochs}
limit=${iters_opt:-$limit}
[[ $epochs =~ ^[0-9]+$ && $limit =~ ^[0-9]+$ ]] && ((epochs >= 1 && limit >= 1)) || {
  echo "report.sh: --epochs and --iters must be numbers >= 1" >&2; exit 2; }
# The measured time per iteration is the median over progress lines (every `every` iterations,
# the first of an epoch left out): at least 4 of them per epoch, so that one slow stretch (a
# retransmission stall on a slow link) moves a median, not the only sample; and an even count
# of iterations each, so that every one holds as many of DS-Sync's crossing averages (every
# 2nd iteration on two racks) as of the others.
((limit >= 5 * every)) || every=$(( limit / 5 ))
((every < 2)) || every=$(( every / 2 * 2 ))
((every >= 1)) || every=1
to_bits() { bash -c 'r=${1,,}; [[ $r =~ ^([0-9]+)(bit|kbit|mbit|gbit)?$ ]] || exit 1
  case ${BASH_REMATCH[2]} in kbit) m=1000;; mbit) m=1000000;; gbit) m=1000000000;; *) m=1;; esac
  echo $((BASH_REMATCH[1] * m))' _ "$1"; }
rate_bits=$(to_bits "$rate") || { echo "report.sh: bad --rate '$rate' (e.g. 100mbit)" >&2; exit 2; }
if [[ -n $inter_rate ]]; then
  inter_bits=$(to_bits "$inter_rate") || { echo "report.sh: bad --inter-rate '$inter_rate' (e.g. 100mbit)" >&2; exit 2; }
else
  inter_bits=$((rate_bits / 4))
fi
export INTER_RATE="${inter_bits}bit"   # read by the testbed's two_racks preset
decimal() { [[ $1 =~ ^([0-9]+[.]?[0-9]*|[.][0-9]+)$ ]]; }   # a number >= 0, e.g. 5, 0.5, .25
decimal "$host_cpus" || {
  echo "report.sh: --host-cpus must be a number of cores (0: no limit), not '$host_cpus'" >&2; exit 2; }
decimal "$max_steal" || {
  echo "report.sh: --max-steal must be a percentage (100: never run again), not '$max_steal'" >&2; exit 2; }
if awk -v c="$host_cpus" 'BEGIN { exit !(c > 0) }'; then
  export HOST_CPUS=$host_cpus          # read by the testbed's `up`: each host's CPU quota
else
  unset HOST_CPUS
fi

read -r -a algorithms <<<"$algorithm_list"
declare -A label=([ssgd_bsp]="S-SGD BSP" [ssgd_wfbp]="S-SGD WFBP" [ssgd_fusion]="S-SGD FUSION"
                  [ssgd_mgwfbp]="S-SGD MGWFBP" [ssgd_hierarchical]="S-SGD hierarchical allreduce"
                  [cdsgd_two_bit]="CD-SGD TWO_BIT"
                  [ssgd_two_bit]="compressed S-SGD TWO_BIT" [ssgd_powersgd]="S-SGD + PowerSGD hook (rank 2)"
                  [ssgd_bf16]="S-SGD + bf16 hook"
                  [dssync]="DS-Sync" [ps_bsp]="BSP-PS" [ps_wfbp]="WFBP-PS" [ps_staggered]="Staggered-PS"
                  [bytescheduler_a2a]="ByteScheduler-A2A" [bytescheduler_ps]="ByteScheduler-PS"
                  [auto]="auto (picks its own)" [auto_ps]="auto with servers (picks its own)"
                  [pytorch_ddp]="PyTorch DDP (Gloo)" [pytorch_ddp_powersgd]="PyTorch DDP + PowerSGD hook (rank 2)"
                  [one_worker]="1 worker alone"
                  [compute_alone]="N workers alone (no communication)")
# The config overrides of each algorithm (and of DS-Sync on two racks, below).
algo_sets() {
  case $1 in
    ssgd_bsp) echo "dist.algorithm=ssgd dist.ssgd.schedule=bsp" ;;
    ssgd_wfbp) echo "dist.algorithm=ssgd dist.ssgd.schedule=wfbp" ;;
    ssgd_fusion) echo "dist.algorithm=ssgd dist.ssgd.schedule=fusion" ;;
    ssgd_mgwfbp) echo "dist.algorithm=ssgd dist.ssgd.schedule=mgwfbp" ;;
    ssgd_hierarchical) echo "dist.algorithm=ssgd dist.ssgd.schedule=fusion dist.ssgd.allreduce=hierarchical dist.ssgd.ranks_per_rack=$RACK" ;;
    ssgd_two_bit) echo "dist.algorithm=ssgd dist.compressor.type=TWO_BIT" ;;
    # DDP's PowerSGD row compresses after its warm-up window (start_powerSGD_iter): the same here.
    ssgd_powersgd) echo "dist.algorithm=ssgd dist.ssgd.hook=powersgd dist.ssgd.powersgd.rank=2" \
                        "dist.ssgd.powersgd.start_iter=$every" ;;
    ssgd_bf16) echo "dist.algorithm=ssgd dist.ssgd.hook=bf16" ;;
    # The default 100 full-precision warm-up iterations would be most of a quick run.
    cdsgd_two_bit) echo "dist.algorithm=cdsgd dist.compressor.type=TWO_BIT dist.cdsgd.warmup_iters=20" ;;
    ps_bsp) echo "dist.algorithm=ps dist.ps.schedule=bsp" ;;
    ps_wfbp) echo "dist.algorithm=ps dist.ps.schedule=wfbp" ;;
    ps_staggered) echo "dist.algorithm=ps dist.ps.schedule=staggered" ;;
    # ByteScheduler's allreduce form sums host copies on Gloo (the CPU's backend anyway).
    bytescheduler_a2a) echo "dist.algorithm=bytescheduler dist.bytescheduler.architecture=a2a" ;;
    bytescheduler_ps) echo "dist.algorithm=bytescheduler dist.bytescheduler.architecture=ps" ;;
    auto|auto_ps) echo "dist.algorithm=auto"
          [[ $2 == two_racks ]] && echo "dist.ssgd.ranks_per_rack=$RACK" ;;
    dssync) echo "dist.algorithm=dssync dist.dssync.group_size=$DSSYNC_GROUP"
            [[ $2 == two_racks ]] && echo "dist.dssync.ranks_per_rack=$RACK dist.dssync.cross_period=2" ;;
  esac
}

rm -rf "$out"
mkdir -p "$out/runs"
pids=()
vary_pid=""
cleanup() {
  local p
  for p in "${pids[@]}" $vary_pid; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  bash "$TESTBED" down || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { echo "report: $*" | tee -a "$out/report.log"; }
# CPU time the hypervisor gave to others ("steal", /proc/stat) and all CPU time, in ticks: their
# change over a run says how much of this virtual machine the run really had.
cpu_ticks() { awk '/^cpu / { print $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9; exit }' /proc/stat; }
# Runs "$@" and sets $steal to the percent of the CPU time stolen meanwhile and $wall to its
# seconds; while the steal is over --max-steal, runs it again (twice at most): a run on a
# machine slowed by its neighbours measures them, not the algorithm. Returns the last try's status.
steady() {
  local what=$1 try rc s0 a0 s1 a1 t0
  shift
  for try in 1 2 3; do
    read -r s0 a0 < <(cpu_ticks)
    t0=$(date +%s.%N)
    rc=0
    "$@" || rc=$?
    wall=$(echo "$(date +%s.%N) - $t0" | bc)
    read -r s1 a1 < <(cpu_ticks)
    steal=$(awk -v s=$((s1 - s0)) -v a=$((a1 - a0)) 'BEGIN { printf "%.1f", (a > 0 ? 100 * s / a : 0) }')
    awk -v s="$steal" -v m="$max_steal" 'BEGIN { exit !(s > m) }' || break
    if ((try < 3)); then
      log "$what: the hypervisor took $steal% of the CPU time meanwhile (more than --max-steal $max_steal%): again"
    else
      log "$what: the hypervisor took $steal% of the CPU time in the third try too; keeping it (see the steal column)"
    fi
  done
  return $rc
}
log "$(date -u '+%F %T') UTC; $NPROC ranks, $rate links, presets: $presets; $epochs epochs x $limit iterations;" \
    "${HOST_CPUS:-unlimited} cores per host; binary $bin"

# ---- the model's layer times, before the runs (they pick the sizes the network is profiled at) --
have_model=0
comm_sizes=""
dssync_sizes=""
idle_ms=""
dssync_compute_ms=""
if "$bin" model --help >/dev/null 2>&1; then
  have_model=1
  # Profile on the emulated hosts: one profiler per host, all at once, sharing the cores as the
  # ranks will (a profile of one process alone would be NPROC/cores times too fast when NPROC
  # exceeds the cores; with --host-cpus each on its host's quota), and the one with the median
  # forward + backward time feeds every prediction: a profiler's time depends on how much of the
  # others' start-up it overlaps (8 LeNet profilers on 2 cores measured 2 to 10 ms).
  bash "$TESTBED" down
  bash "$TESTBED" up "$NPROC" flat "$rate" 0ms >/dev/null
  prof_pids=()
  for ((r = 0; r < NPROC; r++)); do
    bash "$TESTBED" run "$r" -- "$bin" model "$CONFIG" --set "data.batch_size=$BATCH" --set dist.compressor.type=TWO_BIT --set "model.name=$model" \
        "${extra_sets[@]}" --workers 1 --profile-iters 40 --save-profile "$out/profile_rank$r.txt" \
        >"$out/profile_rank$r.log" 2>&1 &
    prof_pids+=($!)
  done
  prof_ok=1
  for p in "${prof_pids[@]}"; do wait "$p" || prof_ok=0; done
  profile_args=()
  if ((prof_ok)); then
    median_rank=$(for ((r = 0; r < NPROC; r++)); do
        grep -oE '^profile: .*forward [0-9.]+ ms, backward [0-9.]+ ms' "$out/profile_rank$r.log" |
          awk -v r="$r" '{ for (i = 1; i < NF; i++) { if ($i == "forward") f = $(i + 1); if ($i == "backward") b = $(i + 1) }
                           print f + b, r }'
      done | sort -g | awk '{ rank[NR] = $2 } END { print rank[int((NR + 1) / 2)] }')
    profile_args=(--layer-times "$out/profile_rank${median_rank:-0}.txt")
    log "layer times: profiler $median_rank of $NPROC (the median forward + backward)"
    # The network is profiled as training uses it: each allreduce after about an iteration's
    # compute of idling (a tbf link that idled lets its 10 ms bucket through at once; back to
    # back it never does). At most 50 ms: the bucket is full after 10, and longer waits would
    # only make the profile slow.
    idle_ms=$(grep -oE 'forward [0-9.]+ ms, backward [0-9.]+ ms' "$out/profile_rank${median_rank:-0}.log" |
      awk '{ t = $2 + $5; printf "%.1f", (t > 50 ? 50 : t) }')
    # DS-Sync's groups are timed in step with an iteration's whole compute (forward, backward and
    # the local step), so that partners fall out of step on the shared cores as they do in training.
    dssync_compute_ms=$(grep -oE 'forward [0-9.]+ ms, backward [0-9.]+ ms, update [0-9.]+ ms' \
        "$out/profile_rank${median_rank:-0}.log" | awk '{ printf "%.2f", $2 + $5 + $8 }')
  else
    log "profiling with $NPROC processes at once failed (see $out/profile_rank*.log); predicting from one process's profile"
  fi
  # Allreduce sizes for profile-comm: every distinct size of the model's gradients (the messages
  # WFBP sends; below 2N floats Gloo's ring leaves ranks out and is faster: on 8 ranks 6 floats
  # took 7 ms where 16 took 16) and the whole gradient (BSP's message), with x4 steps
  # filling every wider gap (merged messages): the measured curve holds the model's own messages,
  # and shaped links are not linear in size (tbf lets its 10 ms bucket through at the veth's speed).
  layer_file=$out/profile_rank${median_rank:-0}.txt
  grad_mb=$(grep -oE 'gradients [0-9.]+ MB' "$out/profile_rank0.log" 2>/dev/null | awk '{print $2}' || true)
  if [[ -s $layer_file ]] && grep -q '"bytes": [0-9]' "$layer_file"; then
    comm_sizes=$(grep -oE '"bytes": [0-9]+' "$layer_file" | awk '{ f = int($2 / 4); if (f > 0) print f }' | sort -g |
      awk '{ total += $1; if ($1 != last) size[++n] = last = $1 }
           END { if (total > last || n == 1) size[++n] = (total > last ? total : 2 * total)   # two at least
                 out = size[1]
                 for (i = 2; i <= n; i++) {
                   for (s = 4 * size[i - 1]; s < size[i]; s *= 4) out = out "," s   # no gap wider than x4
                   out = out "," size[i] }
                 print out }')
  fi
  if [[ -n $grad_mb ]]; then
    # DS-Sync averages the whole model (parameters and buffers) in one message: its groups are
    # timed at half, once and twice the gradient's size, around that message.
    dssync_sizes=$(awk -v mb="$grad_mb" 'BEGIN { f = mb * 262144; printf "%d,%d,%d", f / 2, f, 2 * f }')
  fi
fi

# ---- the runs ---------------------------------------------------------------------------------
port=29610
results=$out/results.tsv   # preset algorithm rc wall_s steal_pct drops
: >"$results"
# The host of rank $1 in a testbed of NPROC workers and SERVERS servers: rank r in host r, except
# on two_racks (RACKS=1) with servers, where each rack (hosts 0..H/2-1 and the rest, H = N+S)
# gets half the workers and half the servers: workers 0..N/2-1, servers 0..S/2-1, then the others.
host_of() {
  local r=$1 s=${SERVERS:-0} half
  if [[ ${RACKS:-0} != 1 ]] || ((s == 0)); then echo "$r"; return; fi
  half=$(((NPROC + s) / 2))
  if ((r < NPROC / 2)); then echo "$r"
  elif ((r < NPROC)); then echo $((half + r - NPROC / 2))
  elif ((r - NPROC < s / 2)); then echo $((NPROC / 2 + r - NPROC))
  else echo $((half + NPROC / 2 + r - NPROC - s / 2)); fi
}
# Runs `mintrain ARGS...` as NPROC ranks (plus SERVERS parameter servers when set), one per host
# of the testbed that is up (host_of); rank r's output goes to LOGPREFIX$r.log. Returns the first
# non-zero exit status.
run_ranks() {
  local logprefix=$1 r p rc=0 world=$((NPROC + ${SERVERS:-0}))
  shift
  port=$((port + 1))   # a fresh port: the previous run's sockets may linger in TIME_WAIT
  pids=()
  for ((r = 0; r < world; r++)); do
    bash "$TESTBED" run "$(host_of "$r")" -- env RANK=$r WORLD_SIZE=$world MINTRAIN_NUM_SERVERS=${SERVERS:-0} LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 \
        MASTER_ADDR=10.77.0.1 MASTER_PORT=$port OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
        timeout "${RUN_TIMEOUT:-900}" "$bin" "$@" >"$logprefix$r.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  pids=()
  return $rc
}
# One training run of every rank into $1 (a try of its own: the output of an earlier try goes).
train_once() {
  local dir=$1
  shift
  rm -rf "$dir/out"
  run_ranks "$dir/rank" train "$CONFIG" "$@" --set "model.name=$model" "${extra_sets[@]}" \
      --set "epochs=$epochs" --set "data.batch_size=$BATCH" --set "data.limit_train_batches=$limit" \
      --set "data.limit_eval_batches=$eval_limit" --set "logging.print_every_iters=$every" \
      --set dist.interface=eth0 --set dist.timeout_seconds=90 --set checkpoint.every_epochs=0 \
      --set checkpoint.dir= --output "$dir/out"
}
# COUNT processes training alone (no RANK, no synchronizer), one per host from host 0, all at
# once, into $1/out<r>: the 1-worker base and the compute of N workers without communication.
alone_once() {
  local dir=$1 r p rc=0
  rm -rf "$dir"/out*
  pids=()
  for ((r = 0; r < COUNT; r++)); do
    bash "$TESTBED" run "$r" -- env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
        timeout "${RUN_TIMEOUT:-900}" "$bin" train "$CONFIG" --set "model.name=$model" "${extra_sets[@]}" \
        --set "epochs=$epochs" --set "data.batch_size=$BATCH" --set "data.limit_train_batches=$limit" \
        --set "data.limit_eval_batches=$eval_limit" --set "logging.print_every_iters=$every" \
        --set checkpoint.every_epochs=0 --set checkpoint.dir= --output "$dir/out$r" >"$dir/rank$r.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  pids=()
  return $rc
}
# The peer: PyTorch DDP as NPROC ranks in hosts 0..NPROC-1, as many iterations as a mintrain run
# (the first progress window as warm-up), its time per iteration the median of the windows' means.
ddp_once() {
  local dir=$1 r p rc=0
  port=$((port + 1))
  pids=()
  for ((r = 0; r < NPROC; r++)); do
    bash "$TESTBED" run "$r" -- env RANK=$r WORLD_SIZE=$NPROC MASTER_ADDR=10.77.0.1 MASTER_PORT=$port \
        GLOO_SOCKET_IFNAME=eth0 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
        timeout "${RUN_TIMEOUT:-900}" "$PYTHON" apps/bench/pytorch_ddp.py --model "$model" --batch "$BATCH" --threads 1 \
        --hook "${DDP_HOOK:-none}" --warmup "$every" --iters "$ddp_iters" --window "$every" --timeout 120 >"$dir/rank$r.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  pids=()
  return $rc
}
ddp_iters=$((epochs * limit - every))
((ddp_iters >= every)) || ddp_iters=$every
for preset in $presets; do
  # The network as the ranks see it (allreduce alpha/beta, and gamma: the compute a message
  # takes when ranks share cores), measured on this preset's testbed for the cost model.
  # (Not `help | grep -q`: grep stops reading, the binary dies of SIGPIPE, and pipefail makes it false.)
  if grep -q profile-comm <<<"$("$bin" help 2>&1)"; then
    bash "$TESTBED" down
    bash "$TESTBED" up "$NPROC" "$preset" "$rate" 0ms >/dev/null
    mkdir -p "$out/comm"
    size_args=()
    [[ -n $comm_sizes ]] && size_args=(--sizes "$comm_sizes")
    [[ -n $idle_ms ]] && size_args+=(--idle-ms "$idle_ms")
    # A second per size instead of 0.3: at 8 ranks on 2 cores a small allreduce takes 20 ms
    # with a heavy tail, and the start-up alpha decides WFBP's prediction.
    size_args+=(--seconds-per-size 1)
    # DS-Sync's group averages, all groups at once as it runs them (several rings may share a
    # link, which one ring's profile never shows), for its prediction.
    if [[ " ${algorithms[*]} " == *" dssync "* ]]; then
      size_args+=(--dssync-group-size "$DSSYNC_GROUP")
      [[ -n $dssync_sizes ]] && size_args+=(--dssync-sizes "$dssync_sizes")
      # A crossing average on two racks takes seconds, spread by retransmission stalls: the
      # default 4 repeats (all that --seconds-per-size adds nothing to) leave its mean to chance.
      size_args+=(--dssync-repeats 10)
      [[ -n $dssync_compute_ms ]] && size_args+=(--dssync-compute-ms "$dssync_compute_ms")
      [[ $preset == two_racks ]] && size_args+=(--dssync-ranks-per-rack "$RACK")
    fi
    if steady "$preset: communication profile" run_ranks "$out/comm/${preset}_rank" profile-comm \
        --interface eth0 "${size_args[@]}" --out "$out/comm/$preset.json"; then
      log "$preset: communication profiled: $(grep -E '^(fit T|gamma)' "$out/comm/${preset}_rank0.log" | cut -c1-110 | tr '\n' ' ')"
    else
      log "$preset: profile-comm failed (see $out/comm/${preset}_rank0.log); the model uses the nominal link rate"
      rm -f "$out/comm/$preset.json"
    fi
    if [[ -n $out_of_sample && $preset == flat ]]; then
      # Out of sample: the same sizes on fewer ranks, and sizes the model never sends on NPROC.
      oos_args=(--seconds-per-size 1)
      [[ -n $idle_ms ]] && oos_args+=(--idle-ms "$idle_ms")
      for n in $out_of_sample; do
        bash "$TESTBED" down
        bash "$TESTBED" up "$n" "$preset" "$rate" 0ms >/dev/null
        if NPROC=$n steady "$preset: communication profile on $n ranks" run_ranks "$out/comm/${preset}_n${n}_rank" \
             profile-comm --interface eth0 ${comm_sizes:+--sizes "$comm_sizes"} "${oos_args[@]}" \
             --out "$out/comm/${preset}_n$n.json"; then
          log "$preset: profiled on $n ranks: $(grep -E '^fit T' "$out/comm/${preset}_n${n}_rank0.log" | cut -c1-110)"
        else
          log "$preset: profile-comm on $n ranks failed (see $out/comm/${preset}_n${n}_rank0.log)"
          rm -f "$out/comm/${preset}_n$n.json"
        fi
      done
      # Powers of two from 2 floats to twice the largest model size, leaving out the model's own.
      other_sizes=$(echo "${comm_sizes:-16}" | tr ',' '\n' | sort -g | awk '{ own[$1] = 1; max = $1 }
          END { for (s = 2; s <= 2 * max; s *= 2) if (!(s in own)) out = out (out == "" ? "" : ",") s; print out }')
      bash "$TESTBED" down
      bash "$TESTBED" up "$NPROC" "$preset" "$rate" 0ms >/dev/null
      if steady "$preset: communication profile at other sizes" run_ranks "$out/comm/${preset}_sizes_rank" \
          profile-comm --interface eth0 --sizes "$other_sizes" "${oos_args[@]}" --out "$out/comm/${preset}_sizes.json"; then
        log "$preset: profiled at sizes $other_sizes (floats): $(grep -E '^fit T' "$out/comm/${preset}_sizes_rank0.log" | cut -c1-110)"
      else
        log "$preset: profile-comm at other sizes failed (see $out/comm/${preset}_sizes_rank0.log)"
        rm -f "$out/comm/${preset}_sizes.json"
      fi
    elif [[ -n $out_of_sample ]]; then
      log "$preset: the out-of-sample check runs on the flat preset only"
    fi
  fi
  for algo in "${algorithms[@]}"; do
    run_dir=$out/runs/$preset/$algo
    ps_servers=0
    if [[ $algo == ps_* || $algo == bytescheduler_ps || $algo == auto_ps ]]; then
      [[ $preset == flat || $preset == two_racks || $preset == contention ]] || {
        log "$preset / ${label[$algo]}: the parameter server runs on the flat, two_racks and contention presets only"; continue; }
      ps_servers=$servers
    fi
    mkdir -p "$run_dir"
    bash "$TESTBED" down
    bash "$TESTBED" up "$((NPROC + ps_servers))" "$preset" "$rate" 0ms >/dev/null
    if [[ $preset == contention ]]; then
      # CONTENTION_AFTER=S (env): the network is quiet for S seconds, then contended, as when
      # another job starts mid-run (what auto's re-decision is for).
      # CONTENTION_HOST=H (env, default 0): the contended host (with servers, N+s is server s's).
      (sleep "${CONTENTION_AFTER:-0}"; exec bash "$TESTBED" vary "${CONTENTION_HOST:-0}" "$((rate_bits / 5))bit" "$rate" 2) &
      vary_pid=$!
    fi
    sets=()
    for kv in $(algo_sets "$algo" "$preset"); do sets+=(--set "$kv"); done
    # MG-WFBP plans with the network cost the model predicts with (not its own start-up timing):
    # the profile's alpha, beta and gamma (the emulated hosts share cores), so the run and the
    # prediction merge by the same rule (dist/merge_plan.h).
    if [[ $algo == ssgd_mgwfbp && -s $out/comm/$preset.json ]]; then
      for key in alpha_s:alpha beta_s_per_byte:beta gamma_s:gamma; do
        value=$(sed -n "s/.*\"${key%%:*}\": *\([-0-9.eE+]*\).*/\1/p" "$out/comm/$preset.json" | head -1)
        [[ -n $value ]] && sets+=(--set "dist.ssgd.${key#*:}=$value")
      done
    fi
    rc=0
    case $algo in
      pytorch_ddp) steady "$preset / ${label[$algo]}" ddp_once "$run_dir" || rc=$? ;;
      pytorch_ddp_powersgd) DDP_HOOK=powersgd steady "$preset / ${label[$algo]}" ddp_once "$run_dir" || rc=$? ;;
      one_worker) COUNT=1 steady "$preset / ${label[$algo]}" alone_once "$run_dir" || rc=$? ;;
      compute_alone) COUNT=$NPROC steady "$preset / ${label[$algo]}" alone_once "$run_dir" || rc=$? ;;
      *) RACKS=$([[ $preset == two_racks ]] && echo 1 || echo 0) SERVERS=$ps_servers \
           steady "$preset / ${label[$algo]}" train_once "$run_dir" "${sets[@]}" || rc=$? ;;
    esac
    if [[ -n $vary_pid ]]; then kill "$vary_pid" 2>/dev/null || true; wait "$vary_pid" 2>/dev/null || true; vary_pid=""; fi
    # Packets the links dropped during the run (the testbed was brought up for it; a try that
    # `steady` repeated adds its drops too): every loss is a retransmission stall.
    bash "$TESTBED" drops >"$run_dir/drops.txt" 2>&1 || true
    drops=$(awk '$1 == "total" { print $2 }' "$run_dir/drops.txt")
    printf '%s\t%s\t%s\t%.1f\t%s\t%s\n' "$preset" "$algo" "$rc" "$wall" "$steal" "${drops:-?}" >>"$results"
    if ((rc != 0)); then
      log "$preset / ${label[$algo]}: FAILED (exit $rc) after $(printf %.1f "$wall") s; last lines of rank 0:"
      tail -5 "$run_dir/rank0.log" | sed 's/^/    /' | tee -a "$out/report.log"
    else
      log "$preset / ${label[$algo]}: done in $(printf %.1f "$wall") s"
    fi
  done
done
bash "$TESTBED" down

# ---- the cost model's predictions, when this binary has `mintrain model` ----------------------
predicted=$out/predicted.tsv   # preset algorithm predicted_ms
predicted_n=$out/predicted_oos_n.tsv          # the same, from profiles on the smaller N
predicted_sizes=$out/predicted_oos_sizes.tsv  # the same, from a profile at other sizes
: >"$predicted"
: >"$predicted_n"
: >"$predicted_sizes"
# The row "NPROC  BSP (eff) WFBP (eff) FUSION (eff) MGWFBP (eff) CD-SGD (eff) DS-Sync (eff)" of
# `mintrain model`'s output $1, as "preset algorithm ms" lines for preset $2.
model_row() {
  awk -v n="$NPROC" -v p="$2" '
    /^milliseconds per iteration/ { table = 1; next }
    table && $1 == n { gsub(/\([^)]*\)/, ""); split($0, f, " ")
      printf "%s\tssgd_bsp\t%s\n%s\tssgd_wfbp\t%s\n%s\tssgd_fusion\t%s\n%s\tssgd_mgwfbp\t%s\n",
             p, f[2], p, f[3], p, f[4], p, f[5]
      printf "%s\tcdsgd_two_bit\t%s\n%s\tdssync\t%s\n", p, f[6], p, f[7]; exit }' "$1"
  # The seven methods' table: "N BSP-A2A WFBP-A2A MG-WFBP BytSched-A2A BSP-PS WFBP-PS BytSched-PS ...".
  awk -v n="$NPROC" -v p="$2" '
    /^the seven methods/ { table = 1; next }
    table && $1 == n { gsub(/\([^)]*\)/, ""); split($0, f, " ")
      printf "%s\tbytescheduler_a2a\t%s\n", p, f[5]
      if (f[6] != "-") printf "%s\tps_bsp\t%s\n%s\tps_wfbp\t%s\n%s\tbytescheduler_ps\t%s\n", p, f[6], p, f[7], p, f[8]
      # Staggered-PS: the WFBP-PS DAG of the model, whose FIFO server links take the copies of one
      # worker at a time, as the staggered order makes them do (pushes that collide are not in it).
      if (f[7] != "-") printf "%s\tps_staggered\t%s\n", p, f[7]
      exit }' "$1"
}
if ((have_model)); then
  gbps=$(echo "scale=6; $rate_bits / 1000000000" | bc)
  for preset in $presets; do
    dssync_sets=()
    for kv in $(algo_sets dssync "$preset"); do dssync_sets+=(--set "$kv"); done
    net=(--bandwidth-gbps "$gbps")
    case $preset in
      two_racks) net+=(--ranks-per-rack "$RACK" --inter-bandwidth-gbps "$(echo "scale=6; $inter_bits / 1000000000" | bc)") ;;
      # A ring is as fast as its slowest link: the straggler's.
      straggler) net=(--bandwidth-gbps "$(echo "scale=6; $gbps / 10" | bc)") ;;
      contention) ;;  # the model knows no time-varying links: the full rate
    esac
    comm_args=()
    # The emulated hosts share this machine's cores: the model's shared-cores terms apply.
    [[ -s $out/comm/$preset.json ]] && comm_args=(--comm-profile "$out/comm/$preset.json" --shared-cores)
    predict() {  # $1: output file; the rest: the communication profile arguments
      local file=$1
      shift
      "$bin" model "$CONFIG" --set "data.batch_size=$BATCH" --set dist.compressor.type=TWO_BIT --set "model.name=$model" \
          "${dssync_sets[@]}" "${extra_sets[@]}" "${profile_args[@]}" "$@" \
          --workers "$NPROC" --at "$NPROC" --servers "$servers" "${net[@]}" >"$file" 2>&1
    }
    predict "$out/model_$preset.txt" "${comm_args[@]}" || {
      log "mintrain model failed for $preset (see $out/model_$preset.txt)"; continue; }
    model_row "$out/model_$preset.txt" "$preset" >>"$predicted"
    if [[ $preset == two_racks && " ${algorithms[*]} " == *" ssgd_hierarchical "* ]]; then
      # The hierarchical allreduce runs FUSION's buckets: the FUSION column of the same job on it.
      if predict "$out/model_${preset}_hierarchical.txt" "${comm_args[@]}" --allreduce hierarchical; then
        model_row "$out/model_${preset}_hierarchical.txt" "$preset" |
          awk -F'\t' '$2 == "ssgd_fusion" { print $1 "\tssgd_hierarchical\t" $3 }' >>"$predicted"
      else
        log "mintrain model failed for the hierarchical allreduce (see $out/model_${preset}_hierarchical.txt)"
      fi
    fi
    if [[ -n $out_of_sample && $preset == flat ]]; then
      # The same prediction (same flags, --shared-cores included) from the out-of-sample profiles.
      files=""
      for n in $out_of_sample; do
        [[ -s $out/comm/${preset}_n$n.json ]] && files+=${files:+,}$out/comm/${preset}_n$n.json
      done
      if [[ -n $files ]] && predict "$out/model_${preset}_oos_n.txt" --comm-profile "$files" --shared-cores; then
        model_row "$out/model_${preset}_oos_n.txt" "$preset" >>"$predicted_n"
      else
        log "no out-of-sample prediction from other N for $preset (see $out/model_${preset}_oos_n.txt)"
      fi
      if [[ -s $out/comm/${preset}_sizes.json ]] &&
         predict "$out/model_${preset}_oos_sizes.txt" --comm-profile "$out/comm/${preset}_sizes.json" --shared-cores; then
        model_row "$out/model_${preset}_oos_sizes.txt" "$preset" >>"$predicted_sizes"
      else
        log "no out-of-sample prediction from other sizes for $preset (see $out/model_${preset}_oos_sizes.txt)"
      fi
    fi
  done
else
  log "this mintrain has no 'model' command: the report has no predicted-vs-measured part"
fi

# ---- numbers from the metrics ----------------------------------------------------------------
# Per run: median ms/iteration over the progress windows, samples/s at it, final test accuracy; and the
# (seconds, test accuracy) points of its evaluations for the accuracy plot.
summary=$out/summary.tsv   # preset algorithm ms_per_iter samples_s final_acc wall_s predicted_ms rc steal_pct
                           # predicted_oos_n_ms predicted_oos_sizes_ms drops
: >"$summary"
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "?"; else if (NR % 2) print v[(NR + 1) / 2];
                                               else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# JSON lines with a fixed set of numeric fields: pulled out with sed, no JSON tool needed
# (throughput as img_s, or tok_s for BERT).
fields='s/.*"type":"\([a-z]*\)".*"iter":\([0-9.eE+-]*\).*"acc":\([0-9.eE+-]*\).*"[a-z]*_s":\([0-9.eE+-]*\).*"time":\([0-9.eE+-]*\).*/\1 \2 \3 \4 \5/p'
window_ms() {  # $1: metrics.txt; the median over its progress windows of ms per iteration
  awk '$1 == "eval" { after_eval = 1; next }
       $1 == "train" { if (have && !after_eval && $2 > it) print 1000 * ($5 - t) / ($2 - it)
                       have = 1; after_eval = 0; it = $2; t = $5 }' "$1" | median
}
while IFS=$'\t' read -r preset algo rc wall steal drops; do
  dir=$out/runs/$preset/$algo
  m=$dir/out/metrics.jsonl
  [[ $algo == one_worker || $algo == compute_alone ]] && m=$dir/out0/metrics.jsonl
  acc_file=$out/acc_${preset}_${algo}.dat
  ms="?" ips="?" acc="?"
  if [[ $algo == pytorch_ddp* ]]; then
    # Rank 0's line; samples/s from the time per iteration, all ranks (the peer prints no rate).
    ms=$(grep -ho '^pytorch_ddp .*window_ms=[0-9.]*' "$dir/rank0.log" 2>/dev/null | grep -o 'window_ms=[0-9.]*' | cut -d= -f2 || true)
    [[ -n $ms ]] && ips=$(awk -v ms="$ms" -v n="$NPROC" -v b="$BATCH" 'BEGIN { print n * b * 1000 / ms }') || ms="?"
  elif [[ $algo == one_worker || $algo == compute_alone ]]; then
    # Each process's median window; the median process; samples/s of all of them together.
    count=1; [[ $algo == compute_alone ]] && count=$NPROC
    for ((r = 0; r < count; r++)); do
      [[ -s $dir/out$r/metrics.jsonl ]] || continue
      sed -n "$fields" "$dir/out$r/metrics.jsonl" >"$dir/metrics$r.txt"
      window_ms "$dir/metrics$r.txt"
    done >"$dir/ms_per_process.txt"
    [[ -s $dir/ms_per_process.txt ]] && ms=$(median <"$dir/ms_per_process.txt")
    [[ $ms != "?" ]] && ips=$(awk -v ms="$ms" -v n="$count" -v b="$BATCH" 'BEGIN { print n * b * 1000 / ms }')
    [[ -s $dir/metrics0.txt ]] && cp "$dir/metrics0.txt" "$dir/metrics.txt"
  elif [[ -s $m ]]; then
    sed -n "$fields" "$m" >"$dir/metrics.txt"
    ms=$(window_ms "$dir/metrics.txt")
    [[ $ms != "?" ]] && ips=$(awk -v ms="$ms" -v n="$NPROC" -v b="$BATCH" 'BEGIN { print n * b * 1000 / ms }')
  fi
  if [[ -s $dir/metrics.txt ]]; then
    acc=$(awk '$1 == "eval" { a = $3 } END { print a == "" ? "?" : a }' "$dir/metrics.txt")
    awk '$1 == "eval" { print $5, $3 }' "$dir/metrics.txt" >"$acc_file"
  fi
  [[ -s ${acc_file} ]] || echo "? ?" >"$acc_file"
  lookup() { awk -F'\t' -v p="$preset" -v a="$algo" '$1 == p && $2 == a { print $3 }' "$1"; }
  pred=$(lookup "$predicted")
  pred_n=$(lookup "$predicted_n")
  pred_sizes=$(lookup "$predicted_sizes")
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$preset" "$algo" "$ms" "$ips" "$acc" "$wall" "${pred:-?}" "$rc" \
      "$steal" "${pred_n:-?}" "${pred_sizes:-?}" "$drops" >>"$summary"
done <"$results"

# ---- plots -----------------------------------------------------------------------------------
preset_list=($presets)
# Grouped-bar data: one row per algorithm, one column per preset.
bars() {  # $1: summary column
  printf 'algorithm'; printf ' %s' "${preset_list[@]}"; echo
  local a p v
  for a in "${algorithms[@]}"; do
    printf '"%s"' "${label[$a]}"
    for p in "${preset_list[@]}"; do
      v=$(awk -F'\t' -v p="$p" -v a="$a" -v c="$1" '$1 == p && $2 == a { print $c }' "$summary")
      printf ' %s' "${v:-?}"
    done
    echo
  done
}
bars 3 >"$out/iter_time.dat"
bars 4 >"$out/throughput.dat"
ncol=$((${#preset_list[@]} + 1))
what="$model, $data_type data, $NPROC ranks x batch $BATCH, $rate links"
common="set terminal pngcairo noenhanced size 1000,600 font 'sans,11'; set datafile missing '?'; set key outside right top;
set grid ytics; set style data histograms; set style histogram clustered gap 1; set style fill solid 0.8 border -1;
set boxwidth 0.9; set xtics nomirror; set yrange [0:*]"
{ gnuplot <<EOF
$common
set output '$out/iter_time.png'
set title "Time per iteration by algorithm and network\n$what"
set xlabel 'algorithm'; set ylabel 'time per iteration (ms)'
plot for [c=2:$ncol] '$out/iter_time.dat' using c:xtic(1) title columnheader(c)
set output '$out/throughput.png'
set title "Training throughput by algorithm and network\n$what"
set xlabel 'algorithm'; set ylabel 'throughput, all ranks (samples/s)'
plot for [c=2:$ncol] '$out/throughput.dat' using c:xtic(1) title columnheader(c)
EOF
} || log "gnuplot failed on the bar charts (no data?)"

# Accuracy vs wall-clock: one line per algorithm (colour) and preset (dash type).
plot_cmd=""
ci=0
for a in "${algorithms[@]}"; do
  ci=$((ci + 1)); di=0
  for p in "${preset_list[@]}"; do
    di=$((di + 1))
    plot_cmd+="${plot_cmd:+, }'$out/acc_${p}_${a}.dat' using 1:2 with linespoints lc $ci dt $di pt $((di + 5)) lw 2 title '${label[$a]}, $p'"
  done
done
{ gnuplot <<EOF
set terminal pngcairo noenhanced size 1200,700 font 'sans,11'
set datafile missing '?'
set output '$out/accuracy_vs_time.png'
set title "Test accuracy against wall-clock time (an evaluation after every epoch)\n$what"
set xlabel 'wall-clock time since the start of training (s)'; set ylabel 'test accuracy (%)'
set key outside right top; set grid
plot $plot_cmd
EOF
} || log "gnuplot failed on the accuracy plot (no data?)"

if ((have_model)) && [[ -s $predicted ]]; then
  awk -F'\t' '$3 != "?" && $7 != "?" { print $7, $3, $1, $2 }' "$summary" >"$out/predicted_vs_measured.dat"
  # Colour: the preset; point shape: the algorithm.
  pm_cmd="x title 'predicted = measured' lc rgb 'gray' dt 2"
  ci=0
  for p in "${preset_list[@]}"; do
    ci=$((ci + 1)); pi=0
    for a in "${algorithms[@]}"; do
      pi=$((pi + 1))
      pm_cmd+=", '$out/predicted_vs_measured.dat' using 1:(stringcolumn(3) eq '$p' && stringcolumn(4) eq '$a' ? \$2 : 1/0) with points pt $((pi * 2 + 3)) ps 1.6 lc $ci title '${label[$a]}, $p'"
    done
  done
  { gnuplot <<EOF
set terminal pngcairo noenhanced size 1150,700 font 'sans,11'
set output '$out/predicted_vs_measured.png'
set title "Cost model vs measurement, time per iteration\n$what"
set xlabel 'predicted time per iteration (ms)'; set ylabel 'measured time per iteration (ms)'
set key outside right top; set grid; set xrange [0:*]; set yrange [0:*]; set offsets 0, graph 0.05, graph 0.05, 0
plot $pm_cmd
EOF
  } || log "gnuplot failed on the predicted-vs-measured plot"
fi

# ---- the report ------------------------------------------------------------------------------
{
  echo "# Distributed algorithms on an emulated cluster"
  echo
  eval_batch=$(config_field data eval_batch_size)
  eval_batch=${eval_batch:-500}
  echo "$what; $epochs epochs x $limit iterations per epoch, test accuracy on $((eval_limit * eval_batch * NPROC)) test examples (each rank evaluates $eval_limit batches of $eval_batch)."
  echo "Generated $(date -u '+%F %T') UTC by \`bash dist/predict/report.sh${args_given:+ $args_given}\`" \
       "(network namespaces, tbf rate shaping, no delay; all ranks share this machine's $(nproc --all) cores)."
  echo
  if ((have_model)); then
    echo "| algorithm | preset | ms / iteration | predicted ms / iteration | throughput (samples/s) | final test accuracy (%) | wall time (s) | CPU steal (%) | packets dropped |"
    echo "|---|---|---:|---:|---:|---:|---:|---:|---:|"
  else
    echo "| algorithm | preset | ms / iteration | throughput (samples/s) | final test accuracy (%) | wall time (s) | CPU steal (%) | packets dropped |"
    echo "|---|---|---:|---:|---:|---:|---:|---:|"
  fi
  while IFS=$'\t' read -r preset algo ms ips acc wall pred rc steal pred_n pred_sizes drops; do
    f() { [[ $1 == "?" ]] && echo "-" || printf "%.${2}f" "$1"; }
    note=""; ((rc == 0)) || note=" (failed, exit $rc)"
    if ((have_model)); then
      echo "| ${label[$algo]}$note | $preset | $(f "$ms" 1) | $(f "$pred" 1) | $(f "$ips" 0) | $(f "$acc" 2) | $(f "$wall" 1) | $steal | $drops |"
    else
      echo "| ${label[$algo]}$note | $preset | $(f "$ms" 1) | $(f "$ips" 0) | $(f "$acc" 2) | $(f "$wall" 1) | $steal | $drops |"
    fi
  done <"$summary"
  echo
  echo "Presets: flat = every host link at $rate (on every preset a host link queues 100ms at the switch's side, ${HOST_QUEUE:-100ms} at the host's); two_racks = hosts 0-$((RACK - 1)) and $RACK-$((NPROC - 1)) in two racks joined by one" \
       "link at $((inter_bits / 1000000)) Mbit/s (switch buffer ${UPLINK_QUEUE:-1s}); straggler = host $((NPROC - 1))'s link at $((rate_bits / 10 / 1000000)) Mbit/s;" \
       "contention = host ${CONTENTION_HOST:-0}'s link alternating $((rate_bits / 5 / 1000000)) and $((rate_bits / 1000000)) Mbit/s every 2 s${CONTENTION_AFTER:+, from $CONTENTION_AFTER s after the hosts came up}."
  echo "ms / iteration: median over rank 0's progress windows (every $every iterations) of the time/iteration" \
       "deltas in metrics.jsonl (PyTorch DDP: the median of its windows' means); throughput: ranks x batch / that time; wall time: start of" \
       "the ranks to the exit of the last one (rendezvous, profiling and evaluations included); CPU steal: the" \
       "share of this virtual machine's CPU time its hypervisor gave to others during the run (a run over" \
       "$max_steal% was run again, twice at most)."
  ((have_model)) || echo "No predicted times: this mintrain binary has no \`model\` command."
  if ((have_model)) && [[ -n $out_of_sample ]]; then
    echo
    echo "Out of sample (flat): predicted ms / iteration on $NPROC ranks, in brackets predicted / measured."
    echo "In-sample: the network profiled on $NPROC ranks at the model's own sizes; other N: profiled on"
    echo "$out_of_sample ranks only (the network model extrapolates to $NPROC); other sizes: profiled on $NPROC ranks"
    echo "at powers of two that are none of the model's sizes (the measured curve interpolates)."
    echo
    echo "| algorithm | measured | in-sample | other N ($out_of_sample) | other sizes |"
    echo "|---|---:|---:|---:|---:|"
    while IFS=$'\t' read -r preset algo ms ips acc wall pred rc steal pred_n pred_sizes drops; do
      [[ $preset == flat ]] || continue
      r() { [[ $1 == "?" || $ms == "?" ]] && echo "-" || awk -v p="$1" -v m="$ms" 'BEGIN { printf "%.1f (%.2f)", p, p / m }'; }
      echo "| ${label[$algo]} | $(f "$ms" 1) | $(r "$pred") | $(r "$pred_n") | $(r "$pred_sizes") |"
    done <"$summary"
  fi
  echo
  echo "![time per iteration](iter_time.png)"
  echo "![throughput](throughput.png)"
  echo "![accuracy vs time](accuracy_vs_time.png)"
  ((have_model)) && echo "![predicted vs measured](predicted_vs_measured.png)"
  true
} >"$out/report.md"
cat "$out/report.md"
log "wrote $out/report.md and $(ls "$out"/*.png 2>/dev/null | wc -l) plots"
failed=$(awk -F'\t' '$3 != 0' "$results" | wc -l)
((failed == 0)) || { log "$failed run(s) failed; see $out/runs/*/*/rank*.log"; exit 1; }
