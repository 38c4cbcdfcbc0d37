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
#
# ssh: BatchMode and a connect timeout of MT_SSH_CONNECT_TIMEOUT seconds (10), then the words of
# MT_SSH_OPTS (e.g. MT_SSH_OPTS="-p 2222 -i ~/.ssh/cluster"). Every output line starts with its
# host. The job stops as a whole:
#   - SIGINT or SIGTERM to this script is sent to every host's launcher, which stops its workers
#     with a checkpoint; after MT_STOP_TIMEOUT seconds (75) the script asks each host what of
#     the job is left, kills it, names the host, and exits 128 + the signal;
#   - a host whose ssh or launcher fails (ssh exits 255 when it cannot connect) is named at once
#     and the other hosts are stopped the same way, instead of waiting out the rendezvous;
#     the script then exits with that host's status.
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
read -r -a SSH <<< "ssh -o BatchMode=yes -o ConnectTimeout=${MT_SSH_CONNECT_TIMEOUT:-10} ${MT_SSH_OPTS:-}"
STOP_TIMEOUT=${MT_STOP_TIMEOUT:-75}

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
# Node i's launcher writes its pid into "$PIDFILE-i" (on its host), for the stop.
PIDFILE="/tmp/mintrain-launch-$TOKEN.pid"
# The processes of this job on a host: the launcher and its workers carry MT_SSH_JOB=<token>,
# which only the remote command sets (this script and its ssh clients do not have it).
JOB_PIDS="for p in /proc/[0-9]*; do grep -qas 'MT_SSH_JOB=$TOKEN' \$p/environ && echo \${p#/proc/}; done; true"

declare -A host_of=() node_of=()  # ssh pid -> host, node rank
for i in "${!hosts[@]}"; do
  cmd=$(printf '%q ' env MINTRAIN_JOB_TOKEN="$TOKEN" MT_SSH_JOB="$TOKEN" "$MINTRAIN" launch --nproc-per-node "${slots[$i]}" \
        --nnodes "$NNODES" --node-rank "$i" --master-addr "$MASTER" --master-port "$PORT" \
        ${NSERVERS:+--nservers "$NSERVERS"} -- "$@")
  # -tt: a dropped connection hangs up the remote launcher, which stops its workers with a
  # checkpoint (SIGHUP). The output filter is a process substitution, so that $! is ssh itself.
  "${SSH[@]}" -tt "${hosts[$i]}" "cd $(printf '%q' "$PWD") && echo \$\$ > $PIDFILE-$i && exec $cmd" \
    > >(sed -u "s/^/[${hosts[$i]}] /") 2>&1 &
  host_of[$!]=${hosts[$i]}
  node_of[$!]=$i
done

# Sends `sig` to every host's launcher still running, waits for the ssh sessions to end, then
# kills and names whatever of the job a host still runs. Returns 1 when something was left.
stop_all() {
  local sig=$1 left=0 pid host pids i
  # A session that has only just connected may not have written its pid yet: wait up to 5 s.
  for pid in "${!host_of[@]}"; do
    local file=$PIDFILE-${node_of[$pid]}
    "${SSH[@]}" "${host_of[$pid]}" "for t in 1 2 3 4 5 6 7 8 9 10; do [ -s $file ] && break; sleep 0.5; done; \
      kill -$sig \$(cat $file 2>/dev/null) 2>/dev/null; true" </dev/null &
  done
  wait_sessions "$STOP_TIMEOUT"
  for i in "${!hosts[@]}"; do
    host=${hosts[$i]}
    pids=$("${SSH[@]}" "$host" "rm -f $PIDFILE-$i; $JOB_PIDS" </dev/null 2>/dev/null | tr -d '\r' | tr '\n' ' ') || true
    if [[ -n "${pids// /}" ]]; then
      echo "launch_ssh: $host still ran pids ${pids}$STOP_TIMEOUT s after the stop; killed them" >&2
      "${SSH[@]}" "$host" "kill -9 $pids 2>/dev/null; true" </dev/null || true
      left=1
    fi
  done
  return $left
}

# Waits up to `seconds` for the ssh sessions (forgetting each that ends).
wait_sessions() {
  local deadline=$((SECONDS + $1)) pid
  while ((${#host_of[@]} > 0 && SECONDS < deadline)); do
    for pid in "${!host_of[@]}"; do kill -0 "$pid" 2>/dev/null || unset "host_of[$pid]"; done
    sleep 0.2
  done
  for pid in "${!host_of[@]}"; do kill "$pid" 2>/dev/null || true; done
}

signal=""
trap 'signal=INT' INT
trap 'signal=TERM' TERM
status=0
while ((${#host_of[@]} > 0)); do
  done_pid=""
  rc=0
  wait -n -p done_pid "${!host_of[@]}" || rc=$?
  if [[ -n "$signal" ]]; then
    echo "launch_ssh: SIG$signal: stopping the job on every host" >&2
    stop_all "$signal" || true
    [[ "$signal" == INT ]] && exit 130
    exit 143
  fi
  [[ -z "$done_pid" ]] && continue
  host=${host_of[$done_pid]}
  unset "host_of[$done_pid]" "node_of[$done_pid]"
  if ((rc != 0)); then
    why="its launcher exited $rc"
    ((rc == 255)) && why="ssh failed (exit 255: it could not connect, or the connection dropped)"
    echo "launch_ssh: $host: $why; stopping the job on the other hosts" >&2
    stop_all TERM || true
    exit "$rc"
  fi
done
exit $status
