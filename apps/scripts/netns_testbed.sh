#!/usr/bin/env bash
# Emulated hosts on one machine: N network namespaces mt-h0..mt-h{N-1}, each with one veth link
# ("eth0", 10.77.0.<i+1>/24) into a bridge in the switch namespace mt-sw. Every link is shaped in
# both directions with tc: tbf for the rate, netem (parent of the tbf) for the one-way delay.
# Only 10.77.0.0/24 is used, nothing is added to the root namespace, and `down` removes it all.
#
#   netns_testbed.sh up N PRESET [RATE] [DELAY]   # PRESET see below; RATE 1gbit, DELAY 0ms
#   netns_testbed.sh run I -- CMD...              # run CMD inside host I (ip netns exec mt-hI)
#   netns_testbed.sh vary I LOW HIGH [PERIOD]     # host I's link: LOW, HIGH, LOW... every PERIOD s
#   netns_testbed.sh cross I J [ON] [OFF]         # hotspots: host I floods host J for ON s every ON+OFF s
#   netns_testbed.sh drops                        # packets the links dropped since `up` (tc -s qdisc)
#   netns_testbed.sh down                         # delete every mt-* namespace (safe to repeat)
#   netns_testbed.sh dry-run [N PRESET RATE DELAY]  # print the commands `up` would run, then `down`
#
# Presets:
#   flat        every host link at RATE/DELAY, one bridge (a single switch).
#   two_racks   hosts 0..N/2-1 on bridge "rack0", the rest on "rack1"; host links at RATE/DELAY,
#               the two bridges joined by one inter-rack link at INTER_RATE (env; default RATE/4)
#               whose switch buffer holds UPLINK_QUEUE (env; default 1s) of traffic, where host
#               links queue 100 ms (tbf's latency: what waits longer is dropped).
#   straggler   flat, but the last host's link runs at RATE/10 (one slow machine or cable).
#   contention  flat; `up` builds it, and the caller runs `vary 0 RATE/5 RATE 2 &` during the job
#               (another job's traffic taking bandwidth on host 0's link now and then; dry-run
#               prints one round of it). `vary` runs until killed; it only works with DELAY 0ms.
#   two_paths   two_racks built twice (two planes): every host has eth0 (10.77.0.<i+1>) on racks
#               rack0/rack1 joined by up0/up1, and eth1 (10.77.1.<i+1>) on racks rack0b/rack1b
#               joined by upb0/upb1, each inter-rack link at INTER_RATE: two parallel paths
#               between the racks, one per source address (DLCP sprays packets over both; TCP
#               takes one).
# Env PRIO_QUEUES=1 gives every switch port (the switch's side of every link) priority queues
# keyed by DSCP at its rate (htb instead of tbf): 4 bands, CS4 / CS3 / CS2 and unmarked traffic /
# CS1 (DLCP's classes 3, 2, 1, 0), served in that order, each a pfifo of BAND_LIMITS packets
# (env; default "1000 500 200 50"), so the lowest class waits longest and is dropped first.
# `cross` floods with iperf3 (UDP) when it is installed, else with dd into a UDP socket towards
# 10.77.0.250, an address no host has but whose frames go to host J (a static neighbour entry),
# so they cross the switch and J's link and J drops them silently. It runs until killed; `down`
# ends every process still inside the testbed's namespaces.
# Env HOST_QUEUE (default 100ms, like the switch) is how much a host's own side of its link may
# queue before it drops: a time (100ms, 1s) or bytes (1514000b: 1000 full frames, a Linux host's
# default txqueuelen). A real host queues in front of its NIC and TCP Small Queues keep that queue
# from overflowing, but a tbf of 100 ms at 25 Mbit/s holds 200 frames: a host with several TCP
# flows at once (a parameter-server worker pushing to S servers) dropped tens of thousands of
# packets at its own egress, which one flow (a ring) never does (docs/PERF.md).
# DELAY needs the netem qdisc (absent from some kernels, e.g. our VM: then use 0ms).
# Env HOST_CPUS (e.g. 0.5; default unset: no limit) gives every host a CPU share of its own, a
# cgroup quota of that many cores: the emulated hosts share this machine's cores, and without
# a quota a host whose rank waits on the network lends its core to the others, so compute time
# would depend on what the other hosts do, which no real cluster does (and no cost model
# predicts). `run` starts the command in its host's cgroup; `down` removes the cgroups.
# Without a writable cpu cgroup (v1 or v2) `up` says so and goes on without the quota.
# Env MT_TESTBED_PREFIX (default mt) names the namespaces: <prefix>-sw, <prefix>-h<i>.
# Parameter servers on hosts of their own: `up N+S ...`, then run rank r in host r with
# WORLD_SIZE=N+S MINTRAIN_NUM_SERVERS=S: hosts N..N+S-1 are the servers (apps/README.md).
# Example: netns_testbed.sh up 4 flat 25mbit && netns_testbed.sh run 1 -- ip -br addr
set -euo pipefail

PREFIX=${MT_TESTBED_PREFIX:-mt}   # another prefix gives a separate testbed (the tests use one)
[[ $PREFIX =~ ^[a-z][a-z0-9-]{0,15}$ ]] || { echo "bad MT_TESTBED_PREFIX '$PREFIX'" >&2; exit 2; }
SW=${PREFIX}-sw
SUBNET=10.77.0
SUBNET2=10.77.1    # the second plane of two_paths
DRY=0

usage() { sed -n '2,53p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }

# Every command that changes the system goes through x: printed in dry-run, run otherwise.
x() {
  if ((DRY)); then echo "$*"; else "$@"; fi
}

need_root() {
  if ((DRY)); then return; fi
  if [[ $(id -u) -ne 0 ]]; then
    echo "netns_testbed.sh: must run as root (network namespaces, veth and tc need CAP_NET_ADMIN);" \
         "try: sudo $0 $*  (or 'dry-run' to only print the commands)" >&2
    exit 1
  fi
}

host() { echo "${PREFIX}-h$1"; }

# tc on one interface in namespace $1: netem delay (if any) then tbf at the rate. The bucket holds
# 10 ms worth of bytes: a link that idled lets that much through at the veth's speed before it
# settles at its rate (as cloud links with burst credit do), so an allreduce after compute is
# faster than one right after another; `mintrain profile-comm --idle-ms` measures it that way.
#
# $5 (default 100ms) is how long tbf may queue a packet before it drops it: the switch's buffer.
# tbf's queue bound: "limit BYTES" for "<bytes>b", else "latency TIME".
queue_arg() { if [[ $1 =~ ^[0-9]+b$ ]]; then echo "limit ${1%b}"; else echo "latency $1"; fi; }
shape() {
  local ns=$1 dev=$2 rate=$3 delay=$4 queue=${5:-100ms}
  local bits burst
  bits=$(rate_bits "$rate")
  burst=$((bits / 8 / 100))          # 10 ms worth of bytes, at least a few full frames
  ((burst < 15000)) && burst=15000
  local prio=0
  [[ ${PRIO_QUEUES:-0} == 1 && $ns == "$SW" ]] && prio=1
  if [[ $delay == 0 || $delay == 0ms ]]; then
    if ((prio)); then
      prio_queues "$ns" "$dev" "root handle 1:" 1 "$rate" "$burst"
    else
      x ip netns exec "$ns" tc qdisc replace dev "$dev" root handle 1: tbf rate "$rate" burst "$burst" $(queue_arg "$queue")
    fi
  else
    x ip netns exec "$ns" tc qdisc replace dev "$dev" root handle 1: netem delay "$delay"
    if ((prio)); then
      prio_queues "$ns" "$dev" "parent 1: handle 2:" 2 "$rate" "$burst"
    else
      x ip netns exec "$ns" tc qdisc replace dev "$dev" parent 1: handle 2: tbf rate "$rate" burst "$burst" $(queue_arg "$queue")
    fi
  fi
}

# Priority queues by DSCP at the link's rate (PRIO_QUEUES=1), with htb (this kernel family may
# lack the prio qdisc): class M:1 at the rate, four bands below it that each keep 1% of it and
# borrow the rest in priority order (band 1 first): band 1 CS4, band 2 CS3, band 3 CS2 and
# everything unmarked (the default), band 4 CS1. Band b queues BAND_LIMITS[b] packets; what does
# not fit is dropped, so the lowest band, served last with the shortest queue, loses first.
# $3: where the htb goes ("root handle 1:" or under netem); $4: its major number.
prio_queues() {
  local ns=$1 dev=$2 at=$3 m=$4 rate=$5 burst=$6 limits b
  read -r -a limits <<<"${BAND_LIMITS:-1000 500 200 50}"
  local floor=$(( $(rate_bits "$rate") / 100 ))
  ((floor < 8000)) && floor=8000
  x ip netns exec "$ns" tc qdisc replace dev "$dev" $at htb default 13
  x ip netns exec "$ns" tc class replace dev "$dev" parent "$m:" classid "$m:1" htb rate "$rate" ceil "$rate" burst "$burst"
  local tos=(0x80 0x60 0x40 0x20)   # DSCP CS4, CS3, CS2, CS1 in the TOS byte
  for b in 1 2 3 4; do
    x ip netns exec "$ns" tc class replace dev "$dev" parent "$m:1" classid "$m:1$b" htb rate "${floor}bit" quantum 1514 \
      ceil "$rate" burst "$burst" prio "$((b - 1))"
    x ip netns exec "$ns" tc qdisc replace dev "$dev" parent "$m:1$b" handle "${m}$b:" pfifo limit "${limits[$((b - 1))]}"
    x ip netns exec "$ns" tc filter replace dev "$dev" parent "$m:" protocol ip prio "$b" u32 \
      match ip dsfield "${tos[$((b - 1))]}" 0xfc flowid "$m:1$b"
  done
}

# "25mbit" -> 25000000 (tc units: kbit, mbit, gbit, bit; decimal).
rate_bits() {
  local r=${1,,} n unit
  [[ $r =~ ^([0-9]+)([a-z]*)$ ]] || { echo "bad rate '$1' (want e.g. 1gbit, 25mbit)" >&2; exit 2; }
  n=${BASH_REMATCH[1]}; unit=${BASH_REMATCH[2]}
  case $unit in
    ""|bit) echo "$n" ;;
    kbit) echo $((n * 1000)) ;;
    mbit) echo $((n * 1000000)) ;;
    gbit) echo $((n * 1000000000)) ;;
    *) echo "bad rate unit '$unit' (kbit, mbit, gbit)" >&2; exit 2 ;;
  esac
}

# ---- per-host CPU share (HOST_CPUS) ----------------------------------------------------------
CG_PERIOD_US=10000   # a short period: a throttled rank waits at most ~10 ms, not cgroup's 100 ms

# The cpu cgroup hierarchy: "v1 DIR" (cpu controller mounted on its own) or "v2 DIR" (unified), or
# nothing when neither is there to write.
cg_hierarchy() {
  if [[ -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]]; then echo "v1 /sys/fs/cgroup/cpu"
  elif grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then echo "v2 /sys/fs/cgroup"
  fi
}

# Writes $2 into file $1 (printed in dry-run).
xw() {
  if ((DRY)); then echo "echo $2 > $1"; else echo "$2" >"$1"; fi
}

# Host $1's cgroup with a quota of HOST_CPUS cores.
cg_make() {
  local h=$1 kind dir quota
  read -r kind dir <<<"$(cg_hierarchy)"
  if [[ -z $kind ]]; then
    echo "netns_testbed.sh: no cpu cgroup to write (neither /sys/fs/cgroup/cpu nor a unified" \
         "hierarchy with the cpu controller), so the hosts share the cores without HOST_CPUS" >&2
    return 0
  fi
  quota=$(awk -v c="$HOST_CPUS" -v p="$CG_PERIOD_US" 'BEGIN { printf "%d", c * p }')
  # A read-only cgroup mount (a container's) refuses the writes: say so, and go on without.
  if ! {
    x mkdir -p "$dir/$h" &&
      if [[ $kind == v1 ]]; then
        xw "$dir/$h/cpu.cfs_period_us" "$CG_PERIOD_US" && xw "$dir/$h/cpu.cfs_quota_us" "$quota"
      else
        { grep -qw cpu "$dir/cgroup.subtree_control" 2>/dev/null || xw "$dir/cgroup.subtree_control" "+cpu"; } &&
          xw "$dir/$h/cpu.max" "$quota $CG_PERIOD_US"
      fi
  } 2>/dev/null; then
    rmdir "$dir/$h" 2>/dev/null || true
    echo "netns_testbed.sh: cannot set $h's CPU quota under $dir (read-only cgroups?), so the hosts" \
         "share the cores without HOST_CPUS" >&2
  fi
  return 0
}

# The cgroup directories of our hosts that exist.
cg_dirs() {
  local kind dir
  read -r kind dir <<<"$(cg_hierarchy)"
  [[ -n $kind ]] || return 0
  find "$dir" -maxdepth 1 -type d -regextype egrep -regex ".*/${PREFIX}-h[0-9]+" 2>/dev/null || true
}

# A veth pair: end $2 in namespace $1, end $4 in namespace $3 (created there, never in the root ns).
veth() {
  x ip netns exec "$1" ip link add "$2" type veth peer name "$4" netns "$3"
}

up() {
  local n=${1:?usage: up N PRESET [RATE] [DELAY]} preset=${2:?PRESET: flat or two_racks}
  local rate=${3:-1gbit} delay=${4:-0ms}
  [[ $n =~ ^[0-9]+$ ]] && ((n >= 1 && n <= 200)) || { echo "N must be 1..200" >&2; exit 2; }
  rate_bits "$rate" >/dev/null
  [[ -z ${HOST_CPUS:-} || $HOST_CPUS =~ ^([0-9]+[.]?[0-9]*|[.][0-9]+)$ ]] &&
    awk -v c="${HOST_CPUS:-1}" 'BEGIN { exit !(c > 0) }' ||
    { echo "HOST_CPUS must be a number of cores > 0, e.g. 0.5 (got '$HOST_CPUS')" >&2; exit 2; }
  case $preset in
    flat|two_racks|straggler|contention|two_paths) ;;
    *) echo "unknown preset '$preset' (flat, two_racks, straggler, contention, two_paths)" >&2; exit 2 ;;
  esac
  [[ ${HOST_QUEUE:-100ms} =~ ^[0-9]+(ms|s|b)$ ]] ||
    { echo "HOST_QUEUE must be a time (100ms, 1s) or bytes (1514000b) (got '$HOST_QUEUE')" >&2; exit 2; }
  if [[ -n ${BAND_LIMITS:-} ]]; then
    [[ $BAND_LIMITS =~ ^[0-9]+\ [0-9]+\ [0-9]+\ [0-9]+$ ]] ||
      { echo "BAND_LIMITS must be 4 packet counts, e.g. \"1000 500 200 50\" (got '$BAND_LIMITS')" >&2; exit 2; }
  fi
  need_root up "$@"
  # A half-built testbed is removed: on failure or interrupt, tear everything down.
  if ((!DRY)); then
    trap 'rc=$?; if ((rc != 0)); then echo "netns_testbed.sh: up failed, tearing down" >&2; down; fi' EXIT
    trap 'exit 130' INT TERM
  fi

  x ip netns add "$SW"
  x ip netns exec "$SW" ip link set lo up
  if [[ $delay != 0 && $delay != 0ms ]] && ((!DRY)); then  # netem is a module some kernels lack
    ip netns exec "$SW" tc qdisc add dev lo root netem delay "$delay" 2>/dev/null || {
      echo "netns_testbed.sh: this kernel has no netem qdisc (sch_netem), so DELAY must be 0ms;" \
           "the rate (tbf) still works" >&2; exit 1; }
    ip netns exec "$SW" tc qdisc del dev lo root
  fi
  local bridges=(br0)
  [[ $preset == two_racks ]] && bridges=(rack0 rack1)
  [[ $preset == two_paths ]] && bridges=(rack0 rack1 rack0b rack1b)
  local br
  for br in "${bridges[@]}"; do
    x ip netns exec "$SW" ip link add "$br" type bridge
    x ip netns exec "$SW" ip link set "$br" up
  done
  if [[ $preset == two_racks || $preset == two_paths ]]; then
    local inter=${INTER_RATE:-}
    [[ -n $inter ]] || inter="$(( $(rate_bits "$rate") / 4 ))bit"
    local planes=("up0 up1 rack0 rack1")
    [[ $preset == two_paths ]] && planes+=("upb0 upb1 rack0b rack1b")
    local plane a b ra rb
    for plane in "${planes[@]}"; do
      read -r a b ra rb <<<"$plane"
      veth "$SW" "$a" "$SW" "$b"
      x ip netns exec "$SW" ip link set "$a" master "$ra" up
      x ip netns exec "$SW" ip link set "$b" master "$rb" up
      # The link between the racks queues up to a second of traffic instead of 100 ms: DS-Sync's
      # groups all cross it at once (4 TCP flows each way at 8 ranks), and a 100 ms queue dropped
      # ~700 packets a run, each loss a retransmission stall of 200 ms or more at random; with a
      # deep buffer (as spine switches have) the flows share the link at its rate instead.
      shape "$SW" "$a" "$inter" "$delay" "${UPLINK_QUEUE:-1s}"
      shape "$SW" "$b" "$inter" "$delay" "${UPLINK_QUEUE:-1s}"
    done
  fi

  local i h port link_rate
  for ((i = 0; i < n; i++)); do
    h=$(host "$i"); port="p$i"
    link_rate=$rate
    [[ $preset == straggler ]] && ((i == n - 1)) && link_rate="$(( $(rate_bits "$rate") / 10 ))bit"
    br=${bridges[0]}
    [[ $preset == two_racks || $preset == two_paths ]] && ((i >= n / 2)) && br=${bridges[1]}
    x ip netns add "$h"
    x ip netns exec "$h" ip link set lo up
    veth "$h" eth0 "$SW" "$port"
    x ip netns exec "$h" ip addr add "$SUBNET.$((i + 1))/24" dev eth0
    x ip netns exec "$h" ip link set eth0 up
    x ip netns exec "$SW" ip link set "$port" master "$br" up
    [[ -z ${HOST_CPUS:-} ]] || cg_make "$h"
    shape "$h" eth0 "$link_rate" "$delay" "${HOST_QUEUE:-100ms}"   # host -> switch
    shape "$SW" "$port" "$link_rate" "$delay"   # switch -> host
    if [[ $preset == two_paths ]]; then         # the second plane: eth1 on rack0b/rack1b
      veth "$h" eth1 "$SW" "q$i"
      x ip netns exec "$h" ip addr add "$SUBNET2.$((i + 1))/24" dev eth1
      x ip netns exec "$h" ip link set eth1 up
      x ip netns exec "$SW" ip link set "q$i" master "${br}b" up
      shape "$h" eth1 "$link_rate" "$delay" "${HOST_QUEUE:-100ms}"
      shape "$SW" "q$i" "$link_rate" "$delay"
    fi
  done
  ((DRY)) || echo "testbed up: $n hosts ($preset, $rate, delay $delay${HOST_CPUS:+, $HOST_CPUS cores each}): $(host 0) = $SUBNET.1 .. $(host $((n - 1))) = $SUBNET.$n"
  ((DRY)) || trap - EXIT INT TERM
}

down() {
  need_root down
  local ns list
  # Deleting a namespace deletes its veth ends, so both halves of every link go.
  if ((DRY)); then
    list="$SW $(for ((i = 0; i < ${1:-0}; i++)); do host "$i"; done)"
  else
    list=$(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${PREFIX}-(h[0-9]+|sw)$" || true)
  fi
  local pids
  for ns in $list; do
    # Processes still inside (cross traffic, a rank): deleting the namespace would not end them.
    if ((!DRY)); then
      pids=$(ip netns pids "$ns" 2>/dev/null || true)
      [[ -z $pids ]] || kill $pids 2>/dev/null || true
    fi
    x ip netns del "$ns"
  done
  # The hosts' cgroups (HOST_CPUS), once their processes are gone: a cgroup with a process left in
  # it cannot be removed, so a rank still exiting gets a few tries.
  local kind dir d try
  if ((DRY)); then
    read -r kind dir <<<"$(cg_hierarchy)"
    if [[ -n ${HOST_CPUS:-} && -n $kind ]]; then
      for ((i = 0; i < ${1:-0}; i++)); do echo "rmdir $dir/$(host "$i")"; done
    fi
    return 0
  fi
  for d in $(cg_dirs); do
    for try in 1 2 3 4 5 6 7 8 9 10; do
      rmdir "$d" 2>/dev/null && break
      sleep 0.2
    done
    [[ ! -d $d ]] || echo "netns_testbed.sh: could not remove cgroup $d (a process is still in it)" >&2
  done
  return 0
}

# Background contention on host I's link, both directions: LOW for PERIOD s, then HIGH, and so on
# until killed (dry-run: one round, without the sleeps). tbf is replaced in place, so traffic keeps
# flowing; only the rate changes.
vary() {
  local i=${1:?usage: vary I LOW HIGH [PERIOD]} low=${2:?LOW rate} high=${3:?HIGH rate}
  local period=${4:-2}
  [[ $i =~ ^[0-9]+$ ]] || { echo "vary: host index must be a number" >&2; exit 2; }
  [[ $period =~ ^[0-9]+([.][0-9]+)?$ ]] || { echo "vary: PERIOD must be seconds, e.g. 2" >&2; exit 2; }
  rate_bits "$low" >/dev/null
  rate_bits "$high" >/dev/null
  need_root vary
  local r
  while true; do
    for r in "$low" "$high"; do
      shape "$(host "$i")" eth0 "$r" 0ms
      shape "$SW" "p$i" "$r" 0ms
      ((DRY)) || sleep "$period"
    done
    ((DRY)) && return 0
  done
}

# Hotspots from host I to host J: a flood for ON s, then OFF s of quiet, until killed (dry-run:
# one round, without the sleeps).
cross() {
  local i=${1:?usage: cross I J [ON] [OFF]} j=${2:?usage: cross I J [ON] [OFF]} on=${3:-1} off=${4:-3}
  [[ $i =~ ^[0-9]+$ && $j =~ ^[0-9]+$ && $i != "$j" ]] || { echo "cross: I and J must be two host numbers" >&2; exit 2; }
  [[ $on =~ ^[0-9]+([.][0-9]+)?$ && $off =~ ^[0-9]+([.][0-9]+)?$ ]] ||
    { echo "cross: ON and OFF must be seconds, e.g. 1 3" >&2; exit 2; }
  need_root cross
  local hi hj
  hi=$(host "$i"); hj=$(host "$j")
  if command -v iperf3 >/dev/null; then
    local report=/dev/null   # iperf3's report; in dry-run the command line itself must show
    ((DRY)) && report=/dev/stdout
    # -D returns before the daemon listens: a client started at once may find no server (and
    # that round sends nothing), so wait up to 2 s for its listening socket.
    iperf3_server() {
      x ip netns exec "$hj" iperf3 -s -D -1
      ((DRY)) && return 0
      local k
      for ((k = 0; k < 40; k++)); do
        ip netns exec "$hj" ss -ltnH 'sport = :5201' | grep -q . && return 0
        sleep 0.05
      done
    }
    iperf3_server
    while true; do
      x ip netns exec "$hi" iperf3 -c "$SUBNET.$((j + 1))" -u -b 0 -l 1400 -t "$on" >"$report" || true
      ((DRY)) && return 0
      sleep "$off"
      iperf3_server
    done
  fi
  local mac=02:00:00:00:00:00
  ((DRY)) || mac=$(ip netns exec "$hj" cat /sys/class/net/eth0/address)
  x ip netns exec "$hi" ip neigh replace "$SUBNET.250" lladdr "$mac" dev eth0 nud permanent
  while true; do
    x ip netns exec "$hi" timeout "$on" bash -c "exec dd if=/dev/zero bs=1400 status=none >/dev/udp/$SUBNET.250/9" || true
    ((DRY)) && return 0
    sleep "$off"
  done
}

# Packets dropped since `up` by every shaping qdisc of the testbed (a full switch buffer, tbf's
# latency, or a full priority band), from `tc -s qdisc`: one line "total N" and, before it, one
# "NAMESPACE DEVICE N" per link that dropped any (the uplinks between racks are up0/up1 in the
# switch namespace). Counts add the qdiscs of a link (netem and tbf, or htb and its bands).
drops() {
  need_root drops
  local ns
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${PREFIX}-(h[0-9]+|sw)$" || true); do
    ip netns exec "$ns" tc -s qdisc show | awk -v ns="$ns" '
      $1 == "qdisc" { for (i = 1; i <= NF; i++) if ($i == "dev") dev = $(i + 1) }
      /dropped/ { for (i = 1; i <= NF; i++) if ($i == "(dropped") { n = $(i + 1); sub(/,/, "", n); d[dev] += n } }
      END { for (k in d) if (d[k] > 0) print ns, k, d[k] }'
  done | awk '{ print; total += $3 } END { print "total", total + 0 }'
}

run() {
  local i=${1:?usage: run I -- CMD...}
  shift
  [[ ${1:-} == -- ]] && shift
  (($#)) || { echo "usage: run I -- CMD..." >&2; exit 2; }
  need_root run
  local h d
  h=$(host "$i")
  # Into the host's cgroup first (HOST_CPUS), so the command and all it starts run on its share.
  for d in $(cg_dirs); do
    [[ ${d##*/} == "$h" ]] && echo $$ >"$d/cgroup.procs"
  done
  exec ip netns exec "$h" "$@"
}

cmd=${1:-}
shift || true
case $cmd in
  up) up "$@" ;;
  down) down ;;
  run) run "$@" ;;
  vary) vary "$@" ;;
  cross) cross "$@" ;;
  drops) drops ;;
  dry-run)
    DRY=1
    echo "# up ${1:-4} ${2:-flat} ${3:-1gbit} ${4:-0ms}"
    up "${1:-4}" "${2:-flat}" "${3:-1gbit}" "${4:-0ms}"
    if [[ ${2:-flat} == contention ]]; then
      low="$(( $(rate_bits "${3:-1gbit}") / 5 ))bit"
      echo "# vary 0 $low ${3:-1gbit} 2 (in the background while the job runs)"
      vary 0 "$low" "${3:-1gbit}" 2
    fi
    if [[ -n ${CROSS:-} ]]; then   # CROSS="I J": one round of cross traffic
      echo "# cross $CROSS 1 3 (in the background while the job runs)"
      read -r ci cj <<<"$CROSS"
      cross "$ci" "$cj" 1 3
    fi
    echo "# down"
    down "${1:-4}"
    ;;
  -h|--help|help|"") usage ;;
  *) echo "unknown command '$cmd'" >&2; usage ;;
esac
