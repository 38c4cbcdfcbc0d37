#!/usr/bin/env bash
# Soak test of fault tolerance: 4 local ranks train LeNet-5 on Fashion-MNIST under
# `mintrain launch --max-restarts 3` while this harness SIGKILLs a random worker twice, at
# random times; each time the launcher restarts the group from the newest checkpoint. Then the
# same job runs once more without faults, and the two must agree: both finish, with the same
# number of iterations, an evaluation for every epoch, and final test accuracies within
# 0.5 points.
#
#   bash apps/scripts/soak.sh            # the full run: 70 epochs, >= 10 min of training each
#   bash apps/scripts/soak.sh --quick    # a smoke version: 3 epochs (about a minute and a half)
#
# Options: --quick, --epochs N, --seed S (the random kills), --bin PATH (default
# build/release/apps/mintrain, or $MT_BIN), --out DIR (default runs/soak). Needs the Fashion-MNIST
# files in /usr/share/datasets/fashion-mnist (Debian's dataset-fashion-mnist). Exit status 0 when
# every check passes.
set -euo pipefail
cd "$(dirname "$0")/../.."

quick=0
epochs=""
seed="${RANDOM}"
bin="${MT_BIN:-build/release/apps/mintrain}"
out="runs/soak"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) quick=1 ;;
    --epochs) epochs="$2"; shift ;;
    --seed) seed="$2"; shift ;;
    --bin) bin="$2"; shift ;;
    --out) out="$2"; shift ;;
    *) echo "soak.sh: unknown option $1 (see the comment at the top)" >&2; exit 2 ;;
  esac
  shift
done
[[ -x "$bin" ]] || { echo "soak.sh: no mintrain binary at $bin (build first, or --bin PATH)" >&2; exit 2; }
RANDOM="$seed"

config=configs/lenet_fashion_mnist_dist.prototxt
sets=(--set checkpoint.keep_last=3 --set logging.print_every_iters=100)
if [[ "$quick" == 1 ]]; then
  epochs="${epochs:-3}"  # 1 epoch can end before the second kill on an idle machine
  sets+=(--set checkpoint.every_iters=100)
  first_kill=(4 8)      # a kill this many seconds (random) after the start / the first restart
else
  # An epoch of the 4-rank job takes 11-20 s on a 2-core machine (11 s when it is otherwise
  # idle: 40 epochs ran in 454 s), so 70 epochs stay over 10 minutes.
  epochs="${epochs:-70}"
  sets+=(--set checkpoint.every_iters=200)
  first_kill=(60 240)
fi
sets+=(--set "epochs=$epochs")
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

rm -rf "$out"
mkdir -p "$out"
log() { echo "soak: $*" | tee -a "$out/soak.log"; }
log "seed $seed, $epochs epoch(s), binary $bin, output $out"

# Not through $(...): a subshell's $RANDOM does not advance the parent's, so every call would
# return the same number.
random_delay() { delay=$((first_kill[0] + RANDOM % (first_kill[1] - first_kill[0] + 1))); }

# --- the run with faults -------------------------------------------------------------------
start=$(date +%s)
"$bin" launch --nproc-per-node 4 --max-restarts 3 -- train "$config" "${sets[@]}" \
  --output "$out/faulty" >"$out/faulty.out" 2>"$out/faulty.err" &
launcher=$!

kill_random_worker() {  # $1: which kill (1 or 2)
  local workers victim rank
  mapfile -t workers < <(pgrep -P "$launcher" || true)
  if [[ ${#workers[@]} -eq 0 ]]; then
    log "FAIL: no workers to kill (kill $1): the run ended early; lengthen it with --epochs"
    return 1
  fi
  victim=${workers[RANDOM % ${#workers[@]}]}
  rank=$(tr '\0' '\n' <"/proc/$victim/environ" | sed -n 's/^RANK=//p')
  log "kill $1: SIGKILL to rank $rank (pid $victim) at $(($(date +%s) - start)) s"
  kill -9 "$victim"
}

wait_for_restart() {  # $1: the restart number to wait for
  while kill -0 "$launcher" 2>/dev/null; do
    grep -q "restart $1/3 after" "$out/faulty.err" && return 0
    sleep 1
  done
  return 1
}

ok=1
random_delay
sleep "$delay"
kill_random_worker 1 || ok=0
if [[ "$ok" == 1 ]] && wait_for_restart 1; then
  log "restarted: $(grep -o 'restart 1/3 after.*' "$out/faulty.err")"
  random_delay
  sleep "$delay"
  kill_random_worker 2 || ok=0
  [[ "$ok" == 1 ]] && wait_for_restart 2 && log "restarted: $(grep -o 'restart 2/3 after.*' "$out/faulty.err")"
fi
status=0
wait "$launcher" || status=$?
faulty_seconds=$(($(date +%s) - start))
log "run with faults: exit $status after $faulty_seconds s"

# --- the same job without faults -----------------------------------------------------------
start=$(date +%s)
ref_status=0
"$bin" launch --nproc-per-node 4 -- train "$config" "${sets[@]}" --output "$out/reference" \
  >"$out/reference.out" 2>"$out/reference.err" || ref_status=$?
log "run without faults: exit $ref_status after $(($(date +%s) - start)) s"

# --- checks ----------------------------------------------------------------------------------
check() {  # $1: description, then the command
  local what="$1"
  shift
  if "$@"; then log "ok: $what"; else log "FAIL: $what"; ok=0; fi
}
done_line() { grep -o 'done: [0-9]* iterations.*' "$1" || true; }
iterations() { done_line "$1" | sed -n 's/done: \([0-9]*\) iterations.*/\1/p'; }
accuracy() { done_line "$1" | sed -n 's/.*test acc \([0-9.]*\)%.*/\1/p'; }
# The distinct epochs with a test evaluation in a metrics file.
evaluated_epochs() { grep '"type":"eval"' "$1" | sed 's/.*"epoch":\([0-9]*\).*/\1/' | sort -un | wc -l; }

check "the run with faults finished (exit 0)" test "$status" -eq 0
check "the reference run finished (exit 0)" test "$ref_status" -eq 0
check "two restarts, each from a checkpoint" \
  test "$(grep -c 'restart [12]/3 after' "$out/faulty.err" || true)" -eq 2 -a \
  "$(grep -c '\[rank 0\] resumed from' "$out/faulty.out" || true)" -eq 2
faulty_iters=$(iterations "$out/faulty.out")
ref_iters=$(iterations "$out/reference.out")
check "same number of iterations ($faulty_iters vs $ref_iters)" test -n "$faulty_iters" -a "$faulty_iters" = "$ref_iters"
check "a test evaluation for each of the $epochs epoch(s)" \
  test "$(evaluated_epochs "$out/faulty/metrics.jsonl")" -eq "$epochs"
faulty_acc=$(accuracy "$out/faulty.out")
ref_acc=$(accuracy "$out/reference.out")
check "final test accuracy within 0.5 points (${faulty_acc:-?}% with faults, ${ref_acc:-?}% without)" \
  awk -v a="${faulty_acc:-nan}" -v b="${ref_acc:-nan}" \
  'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "nan" && b != "nan" && d <= 0.5) }'
if [[ "$quick" == 0 ]]; then
  check "the run with faults trained for at least 10 minutes ($faulty_seconds s)" test "$faulty_seconds" -ge 600
fi

if [[ "$ok" == 1 ]]; then
  log "PASS (logs in $out)"
else
  log "FAILED (logs in $out)"
  exit 1
fi
