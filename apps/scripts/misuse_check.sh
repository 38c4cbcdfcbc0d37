#!/usr/bin/env bash
# Replays faults and misuses a user or a scheduler inflicts on a run, and checks each outcome:
# the exit status and a fragment of what mintrain says (or must not say). Each case trains a few
# seconds at most (tiny configs, max_steps); the whole script takes about a minute on 2 cores.
#
#   apps/scripts/misuse_check.sh [MINTRAIN]      (default: build/cpu/apps/mintrain)
#
# Prints one line per case ("ok" or "FAIL", the status, the command) and exits 1 if any failed.
# The same behaviours have GoogleTest tests (tests/test_cli.cpp, test_launch.cpp,
# test_reliability.cpp, test_run_folder.cpp, test_launch_scripts.cpp, test_plot.cpp,
# test_mlm_data.cpp); this is the end-to-end replay of them, in one place.
set -uo pipefail

HERE=$(cd "$(dirname "$0")/../.." && pwd)
MINTRAIN=$(realpath "${1:-$HERE/build/cpu/apps/mintrain}")
[[ -x "$MINTRAIN" ]] || { echo "misuse_check: no mintrain at $MINTRAIN; build it first (cmake --build --preset cpu)" >&2; exit 2; }
CFG=$HERE/configs/mlp_synthetic.prototxt
WORK=$(mktemp -d "${TMPDIR:-/tmp}/mt_misuse.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
failed=0 n=0

# check NAME STATUS FRAGMENT [!ABSENT] -- COMMAND...: runs COMMAND (output in NAME.out/NAME.err);
# it must exit STATUS, say FRAGMENT (stdout or stderr), and not say ABSENT.
check() {
  local name=$1 want=$2 fragment=$3 absent=""
  shift 3
  if [[ "${1:-}" == !* ]]; then absent=${1#!}; shift; fi
  [[ "${1:-}" == "--" ]] && shift
  timeout 120 "$@" >"$name.out" 2>"$name.err"
  report "$name" "$want" $? "$fragment" "$absent" "$*"
}

# report NAME WANT GOT FRAGMENT ABSENT COMMAND: one line, from NAME.out/NAME.err.
report() {
  local name=$1 want=$2 got=$3 fragment=$4 absent=$5 command=$6 why=""
  local said
  said=$(cat "$name.out" "$name.err" 2>/dev/null)
  command=${command//$PATH/\$PATH}
  command=${command//$WORK/\$WORK}
  command=${command//$HERE\//}
  [[ "$got" == "$want" ]] || why="exit $got, expected $want"
  [[ -z "$fragment" || "$said" == *"$fragment"* ]] || why="${why:+$why; }no \"$fragment\""
  [[ -z "$absent" || "$said" != *"$absent"* ]] || why="${why:+$why; }says \"$absent\""
  n=$((n + 1))
  if [[ -z "$why" ]]; then
    printf 'ok    %-3s %-28s %s\n' "$got" "$name" "$command"
  else
    printf 'FAIL  %-3s %-28s %s\n      %s\n' "$got" "$name" "$command" "$why"
    sed 's/^/      | /' "$name.err" | tail -5
    failed=$((failed + 1))
  fi
}

# also NAME WHAT TEST...: one more condition of a case, counted as a case of its own.
also() {
  local name=$1 what=$2
  shift 2
  n=$((n + 1))
  if "$@"; then
    printf 'ok    %-3s %-28s %s\n' "" "$name" "$what"
  else
    printf 'FAIL  %-3s %-28s %s\n' "" "$name" "$what"
    failed=$((failed + 1))
  fi
}

# Starts `mintrain ARGS` in the background (output in NAME.out/NAME.err); $! is its pid.
start() {
  local name=$1
  shift
  "$MINTRAIN" "$@" >"$name.out" 2>"$name.err" &
}

# Waits for PID up to SECONDS, then kills it; returns its status (124 when it was killed).
finish() {
  local pid=$1 deadline=$((SECONDS + $2))
  while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
  if kill -0 "$pid" 2>/dev/null; then
    kill -KILL "$pid"
    wait "$pid" 2>/dev/null
    return 124
  fi
  wait "$pid"
}

# Waits until FILE holds TEXT (up to 60 s).
await() {
  local file=$1 text=$2
  for _ in $(seq 600); do
    grep -qF -- "$text" "$file" 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

# The pid of the launcher's worker of RANK.
worker() {
  local launcher=$1 rank=$2 child
  for child in $(cat "/proc/$launcher/task/$launcher/children" 2>/dev/null); do
    tr '\0' '\n' <"/proc/$child/environ" 2>/dev/null | grep -qx "RANK=$rank" && { echo "$child"; return; }
  done
}

echo "== exit statuses: 2 a malformed command line (one line), 3 what a rerun cannot fix"
check usage-one-line 2 'see `mintrain train --help`' '!usage: mintrain' -- "$MINTRAIN" train "$CFG" --bogus
check plot-no-arguments 2 'no run folder given' -- "$MINTRAIN" plot
check missing-dataset 3 '/nonexistent' -- "$MINTRAIN" train "$HERE/configs/lenet_fashion_mnist.prototxt" --set data.path=/nonexistent
check launch-permanent 3 'a permanent error' '!restart 1/2' -- \
  "$MINTRAIN" launch --nproc-per-node 2 --max-restarts 2 -- train "$HERE/configs/lenet_fashion_mnist.prototxt" --set data.path=/nonexistent
check ps-without-servers 3 'dist.algorithm "ps" needs parameter servers' '!restart 1/2' -- \
  "$MINTRAIN" launch --nproc-per-node 2 --max-restarts 2 -- train "$CFG" --set dist.algorithm=ps --set max_steps=2 --output ps
check server-count-differs 3 'dist.ps.servers is 2 but the job started 1' '!restart 1/2' -- "$MINTRAIN" launch \
  --nproc-per-node 2 --nservers 1 --max-restarts 2 -- train "$CFG" --set dist.algorithm=ps --set dist.ps.servers=2 --output ps2
check linear-warmup-too-long 3 'max_steps 10' -- "$MINTRAIN" train "$CFG" --set max_steps=10 --set lr_schedule.type=linear --set lr_schedule.warmup_epochs=1 --output linear

echo "== checks at start"
check cosine-warmup-too-long 0 'warning: the learning-rate warm-up (lr_schedule.warmup_epochs 1 = 32 steps) is not shorter than the run (max_steps 10)' -- \
  "$MINTRAIN" train "$CFG" --set max_steps=10 --set lr_schedule.type=cosine --set lr_schedule.warmup_epochs=1 --output cosine
check momentum-1.5 3 'optimizer.momentum must be in [0, 1)' -- "$MINTRAIN" train "$CFG" --set optimizer.momentum=1.5
check threads-1000 0 'threads 1000 lowered to the' -- "$MINTRAIN" train "$CFG" --set threads=1000 --set max_steps=2 --output threads
check one-process-cdsgd 0 'dist.algorithm "cdsgd" is not used: this is one process' -- \
  "$MINTRAIN" train "$CFG" --set dist.algorithm=cdsgd --set max_steps=2 --output cdsgd
check unselected-settings 0 'warning: dist.bytescheduler is set but dist.algorithm is "ssgd"' -- \
  "$MINTRAIN" train "$CFG" --set dist.bytescheduler.partition_bytes=4096 --set max_steps=2 --output unselected
mkdir -p corpus
for _ in $(seq 200); do echo "alpha beta gamma delta epsilon zeta eta theta iota kappa ."; echo; done > corpus/text
printf '[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n' > corpus/vocab.txt
check unk-corpus 3 'of the corpus'"'"'s 2200 tokens are [UNK]' -- "$MINTRAIN" train "$HERE/configs/bert_tiny_mlm.prototxt" \
  --set "data.text.corpus=[$WORK/corpus/text]" --set data.text.vocab_file="$WORK/corpus/vocab.txt" --set data.text.seq_len=16 --set max_steps=2 --output unk

echo "== friction"
check help-enumerated-values 0 'dist.bytescheduler.architecture: ' -- "$MINTRAIN" help
check print-every-0 0 'epoch 2/2 iter 32/32' '!iter 16/32' -- "$MINTRAIN" train "$CFG" --set epochs=2 --set logging.print_every_iters=0 --output per_epoch
check eval-names-checkpoint 0 "checkpoint per_epoch/checkpoints/iter-000000064.ckpt: iteration 64, after epoch 2" -- \
  "$MINTRAIN" eval "$CFG" --checkpoint per_epoch
check nonfinite-skip-advice 1 '10 steps in a row were NaN/Inf' '!on_nonfinite' -- \
  "$MINTRAIN" train "$CFG" --set optimizer.lr=1e30 --set on_nonfinite=skip --set max_steps=40 --set checkpoint.dir= --output nan
if command -v gnuplot >/dev/null; then
  printf '{"type":"train","iter":50,"loss":1.0,"ti' >> per_epoch/metrics.jsonl
  check plot-cut-last-line 0 'is cut short' -- "$MINTRAIN" plot per_epoch
else
  echo "skip  plot-cut-last-line (gnuplot is not installed)"
fi

echo "== resume"
mkdir -p died && echo '{"type":"train","epoch":1,"iter":16,"loss":2.3,"time":1}' > died/metrics.jsonl
check resume-auto-no-checkpoint 0 'starting it over; its files were moved to' '!with --resume auto' -- \
  "$MINTRAIN" train "$CFG" --set max_steps=4 --resume auto --output died
"$MINTRAIN" train "$CFG" --set epochs=1 --output locked >/dev/null 2>&1
flock locked/.mintrain.lock sleep 20 &
holder=$!
sleep 0.3
check resume-auto-locked 1 'is in use by another run' '!resumed from' -- "$MINTRAIN" train "$CFG" --set epochs=2 --resume auto --output locked
kill "$holder" 2>/dev/null; wait "$holder" 2>/dev/null
"$MINTRAIN" train "$CFG" --set epochs=2 --output damaged >/dev/null 2>&1
truncate -s 100 damaged/checkpoints/iter-000000064.ckpt
check damaged-set-aside 0 'iter-000000064.ckpt.damaged' -- \
  "$MINTRAIN" train "$CFG" --set max_steps=48 --set checkpoint.every_iters=8 --resume auto --output damaged
"$MINTRAIN" train "$CFG" --set data.batch_size=16 --set max_steps=40 --set checkpoint.every_iters=8 --set checkpoint.keep_last=0 \
  --set logging.print_every_iters=8 --output shape >/dev/null 2>&1
check resume-other-global-batch 0 'numbered past iteration 12 (iter-000000016.ckpt, iter-000000024.ckpt, iter-000000032.ckpt, iter-000000040.ckpt)' -- \
  "$MINTRAIN" train "$CFG" --set data.batch_size=32 --set max_steps=32 --set checkpoint.every_iters=8 --set checkpoint.keep_last=0 \
  --set logging.print_every_iters=8 --output shape --resume shape/checkpoints/iter-000000024.ckpt
also shape-metrics 'no record past the resume point in metrics.jsonl' test -z "$(grep '"iter":40,' shape/metrics.jsonl)"

echo "== signals and restarts under launch"
long=(train "$CFG" --set epochs=100000 --set logging.print_every_iters=50)
start sigterm-one-worker launch --nproc-per-node 2 --max-restarts 3 -- "${long[@]}" --output sigterm
launcher=$!
await sigterm-one-worker.out "[rank 0] epoch 1/" && kill -TERM "$(worker "$launcher" 1)"
finish "$launcher" 60
report sigterm-one-worker 143 $? 'a stop request (Terminated) reached the workers, not launch' 'restart 1/' \
  "launch --nproc-per-node 2 --max-restarts 3 -- train ...; kill -TERM <rank 1>"
start sighup-launch launch --nproc-per-node 2 --max-restarts 3 -- "${long[@]}" --output sighup
launcher=$!
await sighup-launch.out "[rank 0] epoch 1/" && kill -HUP "$launcher"
finish "$launcher" 60
report sighup-launch 129 $? '[rank 0] stopped at epoch' 'restart 1/' "launch --nproc-per-node 2 -- train ...; kill -HUP <launch>"
start sighup-train train "$CFG" --set epochs=100000 --output sighup_alone
pid=$!
await sighup-train.out "epoch 1/100000 iter" && kill -HUP "$pid"
finish "$pid" 60
report sighup-train 129 $? 'stopped at epoch' '' "train ... --set epochs=100000; kill -HUP <train>"
start first-epoch-death launch --nproc-per-node 2 --max-restarts 1 -- train "$CFG" --set epochs=1 \
  --set data.synthetic.size=32768 --set logging.print_every_iters=8 --output first_epoch
launcher=$!
await first-epoch-death.out "[rank 0] epoch 1/1 iter 8/" && kill -KILL "$(worker "$launcher" 1)"
finish "$launcher" 60
report first-epoch-death 0 $? '--resume auto: no checkpoint to continue from' '' \
  "launch --nproc-per-node 2 --max-restarts 1 -- train ... (epochs=1); kill -KILL <rank 1> in epoch 1"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
  "$MINTRAIN" train "$CFG" --output lonely >rendezvous-stop.out 2>rendezvous-stop.err &
pid=$!
sleep 1 && kill -TERM "$pid"
finish "$pid" 5
report rendezvous-stop 143 $? 'stopped (a stop request) while waiting for rank 0' '' \
  "RANK=1 WORLD_SIZE=2 ... train (rank 0 never starts); kill -TERM <rank 1> (within 5 s)"
ranks=()
for rank in 0 1; do
  RANK=$rank WORLD_SIZE=2 LOCAL_RANK=$rank LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    timeout 60 "$MINTRAIN" train "$CFG" --set max_steps=2 --output "out$rank" >"differ$rank.out" 2>"differ$rank.err" &
  ranks+=($!)
done
wait "${ranks[0]}"; rc0=$?
wait "${ranks[1]}"; rc1=$?
cat differ0.out differ1.out > ranks-differ.out; cat differ0.err differ1.err > ranks-differ.err
report ranks-differ 3 "$rc1" 'output_dir: "out0" -> "out1"' '' \
  "RANK=0 ... train --output out0 & RANK=1 ... train --output out1 (rank 0 exit $rc0)"
also ranks-differ-rank0 "rank 0 exits 3 too (it exited $rc0)" test "$rc0" = 3

echo "== launch_ssh.sh and launch_slurm.sbatch (ssh, scontrol and srun stand-ins)"
mkdir -p bin
cat > bin/ssh <<'EOF'
#!/bin/bash
while [[ $# -gt 0 ]]; do case "$1" in -o|-p|-i|-l) shift 2 ;; -*) shift ;; *) break ;; esac; done
host=$1; shift
[[ $host == unreachable ]] && { echo "ssh: connect to host $host port 22: Connection timed out" >&2; exit 255; }
exec bash -c "$*"
EOF
chmod +x bin/ssh
printf '127.0.0.1\nlocalhost\n' > two_hosts
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
PATH=$WORK/bin:$PATH MINTRAIN=$MINTRAIN MT_STOP_TIMEOUT=30 bash "$HERE/apps/scripts/launch_ssh.sh" two_hosts \
  --master-port "$port" -- "${long[@]}" --output ssh_run >ssh-sigterm.out 2>ssh-sigterm.err &
script=$!
await ssh-sigterm.out "[127.0.0.1] [rank 0] epoch 1/" && kill -TERM "$script"
finish "$script" 90
report ssh-sigterm 143 $? 'stopping the job on every host' 'still ran pids' "launch_ssh.sh two_hosts -- train ...; kill -TERM <script>"
printf '127.0.0.1\nunreachable\n' > dead_host
check ssh-unreachable 255 'launch_ssh: unreachable: ssh failed (exit 255' -- env PATH="$WORK/bin:$PATH" MINTRAIN="$MINTRAIN" \
  bash "$HERE/apps/scripts/launch_ssh.sh" dead_host -- train "$CFG" --set dist.timeout_seconds=5 --output ssh_dead
printf '#!/bin/sh\necho "scontrol: error: Invalid node list" >&2\nexit 1\n' > bin/scontrol
printf '#!/bin/sh\necho srun ran\n' > bin/srun
chmod +x bin/scontrol bin/srun
check slurm-scontrol-fails 1 'Invalid node list' '!srun ran' -- env PATH="$WORK/bin:$PATH" SLURM_JOB_NODELIST='n[1-2]' \
  SLURM_JOB_ID=1 SLURM_SUBMIT_DIR=. bash "$HERE/apps/scripts/launch_slurm.sbatch" "$CFG"

echo "$((n - failed)) of $n cases as expected"
((failed == 0))
