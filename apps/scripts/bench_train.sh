#!/usr/bin/env bash
# Training throughput of mintrain and PyTorch (eager) on the same cases, in one run, as one
# markdown table: case, device, precision, batch, ours, PyTorch, ratio, target, parameters.
#
#   apps/scripts/bench_train.sh [--device cpu|cuda] [--cases "CASE ..."] [--iters N] [--warmup N]
#                               [--repeats N] [--threads N] [--cudnn-benchmark 0|1] [--python PY]
#                               [--bin PATH] [--timeout S] [--budget S] [--out FILE.md] [--log FILE]
#                               [--profile N]
#
# CASE is MODEL:PRECISION:BATCH (bench_train --help lists the models; precision fp32, tf32, bf16
# or fp16), e.g. resnet50:bf16:128. Each case runs bench_train (our side, apps/train_benchmark.h)
# and then apps/bench/pytorch_train.py (the peer), each in its own process, one after the other.
# Both time full training steps on synthetic data already on the device: --warmup steps, then
# --repeats spans of --iters steps ended by a device synchronize; the figure is the median span.
#
# Defaults (the GPU matrix on cuda; on cpu a small one, about a minute on 2 cores):
#   cuda  lenet5:fp32:64 resnet20:fp32:128 resnet20:bf16:128 bert_base:bf16:32 bert_base:fp32:32
#         resnet50:bf16:128 resnet50:tf32:128 resnet50:fp32:128
#   cpu   lenet5:fp32:64 resnet20:fp32:32 bert_tiny:fp32:16
# --iters    steps per timed span; default per model (below), chosen so that a span lasts well
#            over the clock's and the launch queue's noise, and the cuda matrix (16 processes:
#            start-up, cuDNN autotuning, warm-up, 3 spans) took 3 min 10 s on an H200
# --warmup   untimed steps first (default 5 on cuda, 2 on cpu; lenet5 20)
# --repeats  timed spans (default 3)
# --threads  CPU threads for both sides (OMP_NUM_THREADS and the programs' --threads); 0 = their
#            default, all cores (default 0)
# --cudnn-benchmark  1 (default): both sides time cuDNN's algorithms for each new shape during
#            warm-up (PyTorch's cudnn.benchmark); 0: both take cuDNN's heuristics, no search
# --python   the interpreter with PyTorch (default: the first of python3 and /usr/bin/python3
#            that imports torch; without one every PyTorch cell says so and the rest still runs)
# --bin      bench_train (default build/release/apps/bench/bench_train)
# --timeout  seconds one side of one case may take before it is stopped (default 240)
# --budget   seconds for the whole run (default 0: no limit): each side is stopped when it runs
#            out, and the cases after it are listed as skipped
# --out      also write the table (with the machine) to this file; --log: the raw result lines
# --profile  N > 0: after its timed spans each side profiles N more steps per op (ours: self time
#            per kernel, backward node and step phase, core/op_profile.h; PyTorch: torch.profiler's
#            self time per op; on cuda both sides give the kernels' device time), and a table
#            per case after the main one lists each side's largest entries side by side, in ms
#            per step (default 0: no profile)
# The exit status is 0 when every cell has a figure, 1 otherwise, 2 for a bad command line.
# MT_REVISION, when set, is the commit the table names (gpu_check.sh: the bundle's), else git's.
# MT_PEER_LD_LIBRARY_PATH, when set, is the library path PyTorch runs with: gpu_check.sh gives
# the one from before the bundle's env.sh, so that PyTorch never loads the bundle's libraries.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2

die() { echo "bench_train.sh: error: $*" >&2; exit 2; }

device=cpu cases="" iters="" warmup="" repeats=3 threads=0 cudnn_benchmark=1 python="" bin=build/release/apps/bench/bench_train
timeout_s=240 budget=0 out="" log="" profile=0
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    --*) [ $# -ge 2 ] || die "$1 needs a value; see --help" ;;
    *) die "unexpected argument \"$1\"; see --help" ;;
  esac
  case "$1" in
    --device) device=$2 ;;
    --cases) cases=$2 ;;
    --iters) iters=$2 ;;
    --warmup) warmup=$2 ;;
    --repeats) repeats=$2 ;;
    --threads) threads=$2 ;;
    --cudnn-benchmark) cudnn_benchmark=$2 ;;
    --python) python=$2 ;;
    --bin) bin=$2 ;;
    --timeout) timeout_s=$2 ;;
    --budget) budget=$2 ;;
    --out) out=$2 ;;
    --log) log=$2 ;;
    --profile) profile=$2 ;;
    *) die "unknown option \"$1\"; see --help" ;;
  esac
  shift 2
done
case "$device" in cpu|cuda|cuda:[0-9]*) ;; *) die "--device: \"$device\" is not cpu, cuda or cuda:N" ;; esac
for v in iters warmup repeats threads timeout_s budget profile; do
  [[ -z "${!v}" || "${!v}" =~ ^[0-9]+$ ]] || die "--${v%_s}: \"${!v}\" is not a whole number (0, 1, 2, ...)"
done
[ "$repeats" -ge 1 ] || die "--repeats must be >= 1"
[[ "$cudnn_benchmark" =~ ^[01]$ ]] || die "--cudnn-benchmark: \"$cudnn_benchmark\" is not 0 or 1"
[ -z "$iters" ] || [ "$iters" -ge 1 ] || die "--iters must be >= 1"
[ -x "$bin" ] || die "no bench_train at \"$bin\"; build it (cmake --build build/release --target bench_train) or pass --bin"

if [ -z "$cases" ]; then
  if [ "$device" = cpu ]; then
    cases="lenet5:fp32:64 resnet20:fp32:32 bert_tiny:fp32:16"
  else
    # The quick cases first, the slowest (ResNet-50 in fp32) last: if --budget runs out, the
    # fewest figures are lost.
    cases="lenet5:fp32:64 resnet20:fp32:128 resnet20:bf16:128 bert_base:bf16:32 bert_base:fp32:32
           resnet50:bf16:128 resnet50:tf32:128 resnet50:fp32:128"
  fi
fi
for c in $cases; do
  [[ "$c" =~ ^[a-z0-9_]+:(fp32|tf32|bf16|fp16):[0-9]+$ ]] ||
    die "--cases: \"$c\" is not MODEL:PRECISION:BATCH (precision fp32, tf32, bf16 or fp16), e.g. resnet20:fp32:32"
done

# Steps per timed span when --iters is not given: a span should last a second or so. On the GPU
# a LeNet step is well under a millisecond and a ResNet-50 step at batch 128 about 0.05-0.3 s;
# on 2 CPU cores a LeNet step at batch 64 takes 3-8 ms, ResNet-20 at batch 32 about 0.1 s and
# BERT-tiny at batch 16 0.2-0.4 s.
default_iters() {
  local model=$1
  if [ "$device" = cpu ]; then
    case "$model" in lenet5|mlp) echo 400 ;; bert_*|resnet18|resnet50) echo 10 ;; *) echo 20 ;; esac
  else
    case "$model" in lenet5|mlp) echo 300 ;; resnet20|resnet32|resnet56) echo 50 ;; *) echo 10 ;; esac
  fi
}
default_warmup() {
  case "$1" in lenet5|mlp) echo 20 ;; *) [ "$device" = cpu ] && echo 2 || echo 5 ;; esac
}

# The interpreter with PyTorch: the one given, or the first that imports torch.
torch_version="" torch_why=""
peer_env=()
if [ -n "${MT_PEER_LD_LIBRARY_PATH+set}" ]; then
  peer_env=(env -u LD_LIBRARY_PATH)
  [ -z "$MT_PEER_LD_LIBRARY_PATH" ] || peer_env=(env "LD_LIBRARY_PATH=$MT_PEER_LD_LIBRARY_PATH")
fi
for p in ${python:-python3 /usr/bin/python3}; do
  if command -v "$p" >/dev/null &&
    torch_version=$(timeout 120 "${peer_env[@]}" "$p" -c 'import torch; print(torch.__version__)' 2>/dev/null); then
    python=$p
    break
  fi
  torch_version=""
done
if [ -z "$torch_version" ]; then
  torch_why="PyTorch not importable by ${python:-python3 or /usr/bin/python3} (apt-get install python3-torch, or pass --python)"
fi

field() {  # field NAME LINE: the value of NAME=... in a result line
  local re="(^| )$1=([^ ]*)"
  [[ "$2" =~ $re ]] && echo "${BASH_REMATCH[2]}"
}
error_of() {  # everything after "error=" (it may hold spaces), or the output's last line
  local line=$1 output=$2
  if [[ "$line" == *" error="* ]]; then echo "${line#* error=}"; else echo "$output" | tail -n 1; fi
}
short() { echo "$1" | tr '|\n' '/ ' | cut -c1-90 | sed 's/ *$//'; }  # fit a table cell

pretty_case() {
  case "$1" in
    lenet5) echo "LeNet-5 28x28" ;; mlp) echo "MLP 28x28" ;;
    resnet20|resnet32|resnet56) echo "ResNet-${1#resnet} 32x32" ;;
    resnet18|resnet50) echo "ResNet-${1#resnet} 224x224" ;;
    bert_*) local s=${1#bert_}; echo "BERT-$s seq 128" ;;
    *) echo "$1" ;;
  esac
}
# The targets (CNNs and BERT-base against PyTorch) are GPU targets.
target_of() {
  [ "$device" = cpu ] && { echo "-"; return; }
  case "$1" in resnet50|resnet20) echo 1.0 ;; lenet5) echo 2.0 ;; bert_base) echo 1.0 ;; *) echo "-" ;; esac
}

# run_side TIMEOUT CMD...: runs one side with a time limit; sets $result_line and $output.
run_side() {
  local limit=$1
  shift
  local env=()
  [ "$threads" -gt 0 ] && env=(env "OMP_NUM_THREADS=$threads")
  output=$("${env[@]}" timeout --kill-after=10 "$limit" "$@" 2>&1)
  local rc=$?
  result_line=$(echo "$output" | grep -E '^(bench_train|pytorch_train) ' | tail -n 1)
  op_lines=$(echo "$output" | grep -E '^(bench_train|pytorch_train)_op ')
  [ -n "$log" ] && echo "$output" >>"$log"
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then output="stopped after ${limit} s (--timeout or --budget)"; result_line=""; fi
  return $rc
}

start=$SECONDS
side_limit() {  # seconds the next side may take: --timeout, or what is left of --budget
  local left=$((budget - (SECONDS - start)))
  if [ "$budget" -gt 0 ] && [ "$left" -lt "$timeout_s" ]; then echo "$left"; else echo "$timeout_s"; fi
}
# profile_table TITLE OURS THEIRS: the largest entries of the two sides' op lines side by side,
# then each side's total (its profiled step's time).
by_ms() { awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^ms_per_step=/) { split($i, a, "="); print a[2] "\t" $0 } }' | sort -gr | cut -f2-; }
profile_table() {
  local title=$1 ours=$2 theirs=$3 n=15
  echo
  echo "Per-op self time, $title (ms per step; a name in parentheses is time outside the kernels):"
  echo
  echo "| # | mintrain | ms | PyTorch | ms |"
  echo "|---:|---|---:|---|---:|"
  paste -d'\t' <(echo "$ours" | by_ms | head -n $n) <(echo "$theirs" | by_ms | head -n $n) |
    awk -F'\t' 'function f(l, k,   re, s) { re = "(^| )" k "=[^ ]*"; if (!match(l, re)) return ""; s = substr(l, RSTART, RLENGTH); sub(/^ /, "", s); sub(/^[^=]*=/, "", s); return s }
      { printf "| %d | %s | %s | %s | %s |\n", NR, f($1, "name"), f($1, "ms_per_step"), f($2, "name"), f($2, "ms_per_step") }'
  local total_ours total_theirs
  total_ours=$(echo "$ours" | by_ms | awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^ms_per_step=/) { split($i, a, "="); t += a[2] } } END { printf "%.3f", t }')
  total_theirs=$(echo "$theirs" | by_ms | awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^ms_per_step=/) { split($i, a, "="); t += a[2] } } END { printf "%.3f", t }')
  echo "| | all (the step) | $total_ours | all (the step) | $total_theirs |"
}

rows=() failed=0 spans="" profiles=""
for c in $cases; do
  IFS=: read -r model precision batch <<<"$c"
  w=${warmup:-$(default_warmup "$model")}
  n=${iters:-$(default_iters "$model")}
  [[ "$spans" == *"$model "* ]] || spans+="${spans:+, }$model $w+$n"
  common=(--model "$model" --batch "$batch" --device "$device" --precision "$precision"
          --warmup "$w" --iters "$n" --repeats "$repeats" --threads "$threads" --cudnn-benchmark "$cudnn_benchmark")
  [ "$profile" -eq 0 ] || common+=(--profile "$profile")
  our_ops="" their_ops=""
  ours="" theirs="" theirs_note="" ratio="-" ours_params="" their_params="" unit=""
  if [ "$(side_limit)" -le 5 ]; then
    ours="skipped: over the --budget of $budget s" theirs="skipped"
    failed=$((failed + 1))
  else
    echo "bench_train.sh: $c on $device: mintrain ..." >&2
    if run_side "$(side_limit)" "$bin" "${common[@]}" && [ -n "$result_line" ]; then
      ours=$(field throughput "$result_line") unit=$(field unit "$result_line")
      ours_params=$(field params "$result_line")
      our_ops=$op_lines
    else
      ours="failed: $(short "$(error_of "$result_line" "$output")")"
      failed=$((failed + 1))
    fi
    if [ -n "$torch_why" ]; then
      theirs="n/a: $torch_why"
      failed=$((failed + 1))
    else
      echo "bench_train.sh: $c on $device: PyTorch ..." >&2
      if run_side "$(side_limit)" "${peer_env[@]}" "$python" apps/bench/pytorch_train.py "${common[@]}" &&
        [ -n "$result_line" ]; then
        theirs=$(field throughput "$result_line") unit=${unit:-$(field unit "$result_line")}
        their_params=$(field params "$result_line")
        their_ops=$op_lines
        [ -z "$(field attention "$result_line")" ] || theirs_note=" ($(field attention "$result_line") attention)"
      else
        theirs="n/a: $(short "$(error_of "$result_line" "$output")")"
        failed=$((failed + 1))
      fi
    fi
  fi
  target=$(target_of "$model")
  if [[ "$ours" =~ ^[0-9.]+$ && "$theirs" =~ ^[0-9.]+$ ]]; then
    ratio=$(awk -v a="$ours" -v b="$theirs" 'BEGIN { printf "%.2fx", a / b }')
    if [ "$target" != "-" ]; then
      met=$(awk -v a="$ours" -v b="$theirs" -v t="$target" 'BEGIN { print (a / b >= t) ? "met" : "not met" }')
      target=">= ${target}x: $met"
    fi
  elif [ "$target" != "-" ]; then
    target=">= ${target}x"
  fi
  # Whole units, but a decimal below 100 (ResNet-50 on a CPU runs at a few images a second).
  rate() { awk -v r="$1" 'BEGIN { printf (r < 100 ? "%.1f" : "%.0f"), r }'; }
  [[ "$ours" =~ ^[0-9.]+$ ]] && ours="$(rate "$ours") $unit/s"
  [[ "$theirs" =~ ^[0-9.]+$ ]] && theirs="$(rate "$theirs") $unit/s$theirs_note"
  if [ -n "$ours_params" ] && [ -n "$their_params" ]; then
    if [ "$ours_params" = "$their_params" ]; then params="equal ($ours_params)"
    else params="DIFFER: $ours_params vs $their_params"; fi
  else
    params=${ours_params:-${their_params:-"-"}}
  fi
  rows+=("| $(pretty_case "$model") | $device | $precision | $batch | $ours | $theirs | $ratio | $target | $params |")
  if [ "$profile" -gt 0 ]; then
    profiles+=$(profile_table "$(pretty_case "$model") $precision batch $batch, $profile steps" "$our_ops" "$their_ops")
    profiles+=$'\n'
  fi
done

# The machine, the versions and the settings, then the table.
if [ "$device" = cpu ]; then
  machine="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) cores"
  [ "$threads" -gt 0 ] && machine+=", $threads threads"
else
  machine=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1)
  machine="GPU ${machine:-unknown (nvidia-smi failed)}"
fi
rev=${MT_REVISION:-$(git describe --always --dirty 2>/dev/null || echo "unknown commit")}
table=$(
  echo "mintrain ($rev) vs PyTorch ${torch_version:-n/a} eager, $machine, $(date -u +%Y-%m-%d). Each figure:"
  echo "the median of $repeats timed spans of training steps after a warm-up (steps: warm-up+span: $spans)."
  echo
  echo "| case | device | precision | batch | mintrain | PyTorch | ratio | target | parameters |"
  echo "|---|---|---|---:|---:|---:|---:|---|---|"
  printf '%s\n' "${rows[@]}"
  [ -z "$profiles" ] || printf '%s' "$profiles"
)
echo "$table"
[ -z "$out" ] || echo "$table" >"$out"
echo "bench_train.sh: $((SECONDS - start)) s" >&2
[ "$failed" -eq 0 ]
