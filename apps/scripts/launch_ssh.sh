#!/usr/bin/env bash
# Starts a mintrain job on several machines over ssh: one `mintrain launch` per host, each with
# its node rank. The first host is the master (it hosts the store).
#
#   apps/scripts/launch_ssh.sh HOSTFILE [--master-port P] -- train configs/x.prototxt [...]
#
# HOSTFILE: one host per line, optionally "slots=N" (workers on that host; default
# $NPROC_PER_NODE or 1); '#' starts a comment. Every host needs the same mintrain path
# ($MINTRAIN, default: this checkout's build/release/apps/mintrain) and the same config path,
# and passwordless ssh. All hosts must use the same slots (mintrain launch's ranks are
# node_rank * nproc_per_node + local rank). A shared MINTRAIN_JOB_TOKEN is made for the job.
# Parameter servers (dist.algorithm "ps", apps/README.md): NSERVERS=S in the environment passes
# `--nservers S` to every host's launcher (each must count the same world of workers + servers);
# the first host's starts the S servers beside its workers, as the ranks after every worker. For
# servers on hosts of their own, skip the launcher and start each process with the environment
# contract of apps/README.md (RANK, WORLD_SIZE=N+S, MINTRAIN_NUM_SERVERS=S, MASTER_ADDR/PORT).
set -euo pipefail

HOSTFILE=${1:?usage: launch_ssh.sh HOSTFILE [--master-port P] -- COMMAND ...}
shift
PORT=29500
if [[ "${1:-}" == "--master-port" ]]; then PORT=$2; shift 2; fi
[[ "${1:-}" == "--" ]] && shift
[[ $# -gt 0 ]] || { echo "launch_ssh: no command after --" >&2; exit 2; }

HERE=$(cd "$(dirname "$0")/../.." && pwd)
MINTRAIN=${MINTRAIN:-$HERE/build/release/apps/mintrain}
TOKEN=${MINTRAIN_JOB_TOKEN:-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')}

hosts=(); slots=()
while read -r host rest; do
  [[ -z "$host" || "$host" == \#* ]] && continue
  n=${NPROC_PER_NODE:-1}
  [[ "$rest" =~ slots=([0-9]+) ]] && n=${BASH_REMATCH[1]}
  hosts+=("$host"); slots+=("$n")
done < "$HOSTFILE"
[[ ${#hosts[@]} -gt 0 ]] || { echo "launch_ssh: no hosts in $HOSTFILE" >&2; exit 2; }
for n in "${slots[@]}"; do
  [[ "$n" == "${slots[0]}" ]] || { echo "launch_ssh: every host needs the same slots" >&2; exit 2; }
done

MASTER=${hosts[0]}
NNODES=${#hosts[@]}
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup INT TERM
for i in "${!hosts[@]}"; do
  cmd=$(printf '%q ' env MINTRAIN_JOB_TOKEN="$TOKEN" "$MINTRAIN" launch --nproc-per-node "${slots[$i]}" \
        --nnodes "$NNODES" --node-rank "$i" --master-addr "$MASTER" --master-port "$PORT" \
        ${NSERVERS:+--nservers "$NSERVERS"} -- "$@")
  # -tt: closing the local ssh (Ctrl-C) hangs up the remote launch, which stops its workers.
  ssh -tt -o BatchMode=yes "${hosts[$i]}" "cd $(printf '%q' "$PWD") && $cmd" 2>&1 | sed -u "s/^/[${hosts[$i]}] /" &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
exit $status
