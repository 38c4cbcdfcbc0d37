#!/usr/bin/env bash
# A job across machines as a user starts one, on emulated hosts: three network namespaces
# (netns_testbed.sh, flat), an sshd in each, and apps/scripts/launch_ssh.sh over real ssh from
# host 0, one worker per host. Checks that a job starts and trains to the end; that SIGTERM to
# launch_ssh.sh stops every host's job with a checkpoint (exit 143, no mintrain left on any
# host); that a host whose sshd is down is named at once and nothing waits out the rendezvous.
# Root only (says so and exits 0 otherwise); installs openssh-server when missing; always tears
# the hosts down. About a minute.
#
#   apps/scripts/multihost_check.sh [MINTRAIN]    (default: build/cpu/apps/mintrain)
set -uo pipefail
HERE=$(cd "$(dirname "$0")/../.." && pwd)
MINTRAIN=$(realpath "${1:-$HERE/build/cpu/apps/mintrain}")
TESTBED="$HERE/apps/scripts/netns_testbed.sh"
CFG="$HERE/configs/mlp_synthetic.prototxt"
if ((EUID != 0)); then echo "multihost_check: skipped: network namespaces need root"; exit 0; fi
[[ -x $MINTRAIN ]] || { echo "multihost_check: no mintrain at $MINTRAIN: build it first" >&2; exit 2; }
if [[ ! -x /usr/sbin/sshd ]]; then
  apt-get install -y -qq openssh-server >/dev/null 2>&1 ||
    { apt-get update -qq && apt-get install -y -qq openssh-server >/dev/null; } || exit 2
fi

WORK=$(mktemp -d /tmp/mt_multihost.XXXXXX)
cleanup() {
  bash "$TESTBED" down >/dev/null 2>&1  # ends every process left in the hosts, sshd included
  [[ -n ${KEEP:-} ]] || rm -rf "$WORK"
}
trap cleanup EXIT
cd "$WORK" || exit 2
bash "$TESTBED" down >/dev/null 2>&1
bash "$TESTBED" up 3 flat 1gbit >/dev/null || { echo "multihost_check: the testbed did not come up" >&2; exit 2; }

# One key for root on every host; each sshd is its namespace's own process.
ssh-keygen -q -t ed25519 -N '' -f key && ssh-keygen -q -t ed25519 -N '' -f host_key || exit 2
cp key.pub authorized_keys
mkdir -p /run/sshd
cat > sshd_config <<EOF
HostKey $WORK/host_key
AuthorizedKeysFile $WORK/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
StrictModes no
UsePAM no
AcceptEnv MINTRAIN_* OMP_NUM_THREADS
EOF
for h in 0 1 2; do bash "$TESTBED" run "$h" -- /usr/sbin/sshd -f sshd_config -o "PidFile=$WORK/sshd$h.pid"; done
printf '10.77.0.1\n10.77.0.2\n10.77.0.3\n' > hosts
export MINTRAIN MT_SSH_OPTS="-i $WORK/key -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"
export MT_SSH_CONNECT_TIMEOUT=3 MT_STOP_TIMEOUT=30 OMP_NUM_THREADS=1

n=0 failed=0
verdict() {  # NAME OK(0/1) WHAT
  n=$((n + 1))
  if (($2 == 0)); then printf 'ok    %-16s %s\n' "$1" "$3"; else printf 'FAIL  %-16s %s\n' "$1" "$3"; failed=$((failed + 1)); fi
}
on_host0() { ip netns exec mt-h0 "$@"; }
mintrain_left() {  # how many mintrain processes any host still runs
  local count=0 h
  for h in 0 1 2; do count=$((count + $(ip netns pids "mt-h$h" | xargs -r ps -o comm= -p | grep -c mintrain))); done
  echo "$count"
}

# 1. A job over three hosts trains to the end.
on_host0 bash "$HERE/apps/scripts/launch_ssh.sh" hosts -- train "$CFG" --set max_steps=20 --output run >start.out 2>&1
status=$?
grep -q 'done: 20 iterations' start.out
verdict start $((status != 0 || $? != 0)) "3 hosts, launch_ssh.sh: exit $status, $(grep -c 'distributed:.*world of 3' start.out) header(s) naming a world of 3"

# 2. SIGTERM to launch_ssh.sh: every host's job stops with a checkpoint, nothing is left.
# Not through on_host0: a function in the background is a subshell, and $! must be the script.
ip netns exec mt-h0 bash "$HERE/apps/scripts/launch_ssh.sh" hosts -- train "$CFG" --set epochs=100000 \
  --set logging.print_every_iters=50 --output stop >stop.out 2>&1 &
script=$!
for _ in $(seq 600); do grep -q '\[rank 0\] epoch 1/' stop.out && break; sleep 0.1; done
kill -TERM "$script"
wait "$script"
status=$?
left=$(mintrain_left)
grep -q 'stopped at epoch' stop.out
verdict stop-by-signal $((status != 143 || left != 0 || $? != 0)) "kill -TERM <launch_ssh.sh>: exit $status (143), $left mintrain left on the hosts, stop point checkpointed"

# 3. A host whose sshd is down: named within seconds, the other hosts stopped.
kill "$(cat sshd2.pid)"
start=$SECONDS
on_host0 bash "$HERE/apps/scripts/launch_ssh.sh" hosts -- train "$CFG" --set max_steps=20 --output dead >dead.out 2>&1
status=$?
took=$((SECONDS - start))
left=$(mintrain_left)
grep -q 'launch_ssh: 10.77.0.3' dead.out
verdict dead-host $((status == 0 || took > 20 || left != 0 || $? != 0)) "sshd down on 10.77.0.3: exit $status after $took s, host named, $left mintrain left"

echo "$((n - failed)) of $n cases as expected"
if ((failed)); then tail -n 5 ./*.out; fi
((failed == 0))
