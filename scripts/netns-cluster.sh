#!/usr/bin/env bash
# netns-cluster.sh: a cluster of N "hosts" on this machine, each a Linux network namespace with
# its own address on one bridge, its link optionally limited in bandwidth, for tests and
# benchmarks of jobs across hosts (docs/clusters.md, "A test cluster of network namespaces").
#
#   netns-cluster.sh up NAME N [RATE]      make hosts NAME-h0 .. NAME-h<N-1>; RATE: unlimited
#                                          (default) or a tc rate such as 10gbit, 1gbit, 100mbit
#   netns-cluster.sh addresses NAME        the hosts' addresses, one a line, host 0 first
#   netns-cluster.sh exec HOST CMD...      run CMD on HOST (an address or NAME-hI); the pid
#                                          stays CMD's (exec all the way), so signals reach it
#   netns-cluster.sh shell HOST WORDS...   run WORDS joined into one line by HOST's /bin/sh, as
#                                          ssh HOST WORDS... does (mpirun's plm_rsh_agent)
#   netns-cluster.sh pids NAME             the processes running on its hosts, one a line
#   netns-cluster.sh rate NAME RATE        change every host's limit in a running cluster
#   netns-cluster.sh link-down HOST        pull HOST's cable (its bridge-side end goes down)
#   netns-cluster.sh link-up HOST          plug it in again
#   netns-cluster.sh down NAME             kill what runs inside, delete everything; idempotent
#                                          (not while an 'up' of the same NAME still runs)
#
# Addresses: cluster NAME gets the first free /24 of 198.18.0.0/15 (RFC 2544's range for
# benchmarks, never routed on the internet), host i gets .i+1 in it. The bridge has no address
# and nothing routes between it and the machine's own interfaces, so no packet of a cluster
# leaves the machine, and two clusters (two /24s, two bridges) cannot see each other.
#
# Bandwidth: tc's tbf on both ends of each host's veth pair: the host's eth0 limits what it
# sends (upload), the bridge-side end what it receives (download). netem is not in this
# kernel, so there is no added latency or loss; fq and fq_codel are absent too.
#
# Exit codes: 0 done; 1 failed (the message says why); 2 bad usage; 77 this machine cannot
# make namespaces here (not root, no ip/tc, no permission, no veth/bridge/tbf): tests skip
# with the printed reason.
set -euo pipefail

readonly kStateDir=/run/netns-cluster  # NAME.hosts: "namespace address bridge-side-veth" lines
readonly kMaxHosts=250

usage() {
  # The commands of the top comment.
  echo "usage:" >&2
  sed -n '/^#   netns-cluster.sh up/,/^#$/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}/ /' >&2
  exit 2
}

die() {
  echo "netns-cluster: $*" >&2
  exit 1
}

# The reason this machine cannot host a cluster: the tests skip on exit 77.
cannot() {
  echo "netns-cluster: cannot make network namespaces here: $*" >&2
  exit 77
}

# STEP failed with REASON: exit 77 when the machine lacks a permission or a kernel feature,
# else 1 (a leftover of another run, say: "File exists" must fail a test, not skip it).
failed() {
  case $2 in
    *"not permitted"* | *"Permission denied"* | *"not supported"* | *"Unknown device type"* | \
      *"unknown"* | *"No such file or directory"*)
      cannot "$1: $2" ;;
    *) die "$1: $2" ;;
  esac
}

check_name() {
  [[ $1 =~ ^[A-Za-z0-9_]{1,32}$ ]] || die "cluster name '$1': use 1 to 32 of A-Z a-z 0-9 _"
}

check_machine() {
  [[ $(id -u) -eq 0 ]] || cannot "it needs root (uid 0), this is uid $(id -u)"
  command -v ip >/dev/null || cannot "no 'ip' command (apt-get install iproute2)"
  command -v tc >/dev/null || cannot "no 'tc' command (apt-get install iproute2)"
}

# "unlimited", or a rate tc understands: digits and kbit, mbit or gbit. Prints bits per second.
rate_bits() {
  local rate=$1
  [[ $rate =~ ^([1-9][0-9]*)(kbit|mbit|gbit)$ ]] ||
    die "rate '$rate': use unlimited or N kbit|mbit|gbit (N at least 1)"
  local -A scale=([kbit]=1000 [mbit]=1000000 [gbit]=1000000000)
  echo $((BASH_REMATCH[1] * scale[${BASH_REMATCH[2]}]))
}

# Limits what DEV (in namespace NS, "" for the root one) sends to RATE, or lifts the limit.
shape() {
  local ns=$1 dev=$2 rate=$3
  local -a in_ns=()
  [[ -n $ns ]] && in_ns=(-n "$ns")
  if [[ $rate == unlimited ]]; then
    tc "${in_ns[@]}" qdisc del dev "$dev" root 2>/dev/null || true
    return
  fi
  # The bucket must hold at least one timer tick of traffic (4 ms at HZ=250) or tbf cannot
  # reach the rate; 256 KiB is enough up to about 0.5 Gbit/s, which measured 0.95 at 1gbit.
  local burst=$(($(rate_bits "$rate") / 8 / 250))
  ((burst < 262144)) && burst=262144
  local reason
  reason=$(tc "${in_ns[@]}" qdisc replace dev "$dev" root tbf rate "$rate" burst "$burst" \
    latency 50ms 2>&1) || failed "tc qdisc replace dev $dev root tbf" "$reason"
}

# The first /24 of 198.18.0.0/15 that no cluster holds (by its state file, or by a bridge or
# veth of its names that a crashed 'up' may have left), as its index 0..511.
free_subnet() {
  local used=" " k f
  for f in "$kStateDir"/*.hosts; do
    [[ -e $f ]] && used+="$(head -n1 "$f" | awk '{print $4}') "
  done
  # nc<K>br and nc<K>h<I>, as nc<K>br.
  used+="$(ip -o link show | awk '{sub(":", "", $2); sub("@.*", "", $2); print $2}' |
    sed -n 's/^nc\([0-9]*\)\(br\|h[0-9]*\)$/nc\1br/p' | tr '\n' ' ')"
  for ((k = 0; k < 512; k++)); do
    [[ $used == *" nc${k}br "* ]] || {
      echo "$k"
      return
    }
  done
  die "all 512 subnets of 198.18.0.0/15 are taken: run 'down' on clusters no longer needed"
}

# Address of host I (0-based) in subnet K; I = 0 gives the subnet's first host, .1.
subnet_address() {
  echo "198.$((18 + $1 / 256)).$(($1 % 256)).$(($2 + 1))"
}

# Makes host I of cluster NAME in subnet K on bridge BR, limited to RATE.
make_host() {
  local name=$1 i=$2 k=$3 br=$4 rate=$5
  local ns="$name-h$i" veth="nc${k}h$i" address
  address=$(subnet_address "$k" "$i")
  local reason
  reason=$(ip netns add "$ns" 2>&1) || failed "ip netns add $ns" "$reason"
  # Recorded at once, so that a failure from here on is undone by 'down'.
  echo "$ns $address $veth" >>"$kStateDir/$name.hosts"
  reason=$(ip link add "$veth" type veth peer name eth0 netns "$ns" 2>&1) ||
    failed "ip link add $veth type veth" "$reason"
  ip link set "$veth" master "$br" up
  ip -n "$ns" link set lo up # loopback inside the host: its own processes talk over it
  ip -n "$ns" addr add "$address/24" dev eth0
  ip -n "$ns" link set eth0 up
  shape "$ns" eth0 "$rate" # upload
  shape "" "$veth" "$rate" # download
}

# The EXIT trap of 'up': after a failure, deletes what was made, keeping the exit code.
undo_up() {
  local rc=$?
  ((rc == 0)) || cmd_down "$1" >/dev/null 2>&1 || true
  exit "$rc"
}

cmd_up() {
  (($# >= 2 && $# <= 3)) || usage
  local name=$1 count=$2 rate=${3:-unlimited}
  check_name "$name"
  if ! [[ $count =~ ^[0-9]+$ ]] || ((count < 1 || count > kMaxHosts)); then
    die "host count '$count': use 1 to $kMaxHosts"
  fi
  [[ $rate == unlimited ]] || rate_bits "$rate" >/dev/null
  check_machine
  mkdir -p "$kStateDir"
  # One 'up' at a time chooses a subnet, so two clusters never get the same one.
  exec 9>"$kStateDir/.lock"
  flock -w 30 9 || die "another netns-cluster.sh up holds $kStateDir/.lock for 30 s"
  [[ ! -e $kStateDir/$name.hosts ]] || die "cluster '$name' exists: run 'down $name' first"
  local k
  k=$(free_subnet)
  local br="nc${k}br"
  echo "subnet $(subnet_address "$k" 0) bridge $br" >"$kStateDir/$name.hosts"
  # From here on, any failure undoes what was made (set -e ends the function, the trap runs).
  trap 'undo_up "$name"' EXIT
  local reason
  reason=$(ip link add "$br" type bridge 2>&1) || failed "ip link add $br type bridge" "$reason"
  ip link set "$br" alias "netns-cluster $name"
  # A machine with br_netfilter loaded (Docker's) would run bridged frames through iptables,
  # whose FORWARD policy may drop them; this bridge's traffic is none of iptables' business.
  ip link set "$br" type bridge nf_call_iptables 0 2>/dev/null || true
  ip link set "$br" up
  for ((i = 0; i < count; i++)); do make_host "$name" "$i" "$k" "$br" "$rate"; done
  flock -u 9
  trap - EXIT
  cmd_addresses "$name"
}

# The hosts of cluster NAME: "namespace address veth" lines.
hosts_of() {
  [[ -e $kStateDir/$1.hosts ]] || die "no cluster '$1' (no $kStateDir/$1.hosts)"
  tail -n +2 "$kStateDir/$1.hosts"
}

cmd_addresses() {
  (($# == 1)) || usage
  check_name "$1"
  hosts_of "$1" | awk '{print $2}'
}

# Prints "namespace address veth" of HOST, an address or a namespace name, in any cluster.
find_host() {
  local f
  for f in "$kStateDir"/*.hosts; do
    [[ -e $f ]] || continue
    local line
    line=$(tail -n +2 "$f" | awk -v h="$1" '$1 == h || $2 == h' | head -n1)
    [[ -n $line ]] && { echo "$line"; return; }
  done
  die "no host '$1' in any cluster ($kStateDir/*.hosts)"
}

cmd_exec() {
  (($# >= 2)) || usage
  local host=$1
  shift
  local line
  line=$(find_host "$host")
  local ns=${line%% *}
  # A temporary directory per host, as real hosts have: the hosts share this machine's /tmp,
  # where Open MPI's daemons of one job on several "hosts" (one host name) would share a session
  # directory that each of them creates and removes (a daemon once failed, finding it gone).
  local tmp=$kStateDir/tmp/$ns
  mkdir -p "$tmp"
  # exec: the caller's pid becomes ip's, then CMD's (ip netns exec execs too), so a signal to
  # that pid reaches CMD itself and its exit code is CMD's.
  TMPDIR=$tmp exec ip netns exec "$ns" "$@"
}

# As ssh: the words are joined with spaces and the host's shell parses the line (mpirun's rsh
# launcher passes "PATH=...; export PATH; ... orted ..." as words and relies on that).
cmd_shell() {
  (($# >= 2)) || usage
  local host=$1
  shift
  cmd_exec "$host" /bin/sh -c "$*"
}

cmd_pids() {
  (($# == 1)) || usage
  check_name "$1"
  local ns _
  while read -r ns _; do
    ip netns pids "$ns" 2>/dev/null || true
  done < <(hosts_of "$1")
}

cmd_rate() {
  (($# == 2)) || usage
  check_name "$1"
  [[ $2 == unlimited ]] || rate_bits "$2" >/dev/null
  local ns address veth
  while read -r ns address veth; do
    shape "$ns" eth0 "$2"
    shape "" "$veth" "$2"
  done < <(hosts_of "$1")
}

# link-down / link-up HOST: the bridge-side end of its veth, as a cable pulled at the switch:
# the host keeps its address and sockets, its packets and those sent to it are lost.
cmd_link() {
  (($# == 2)) || usage
  local line
  line=$(find_host "$2")
  ip link set "${line##* }" "$1"
}

# Kills every process in namespace NS (SIGKILL: a test's leftovers), waiting up to 5 s.
kill_inside() {
  local ns=$1 pids
  for ((tries = 0; tries < 50; tries++)); do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [[ -z $pids ]] && return
    # shellcheck disable=SC2086  # one pid a word
    kill -KILL $pids 2>/dev/null || true
    sleep 0.1
  done
  echo "netns-cluster: processes $pids in $ns outlived SIGKILL for 5 s" >&2
}

cmd_down() {
  (($# == 1)) || usage
  local name=$1
  check_name "$name"
  check_machine
  # The namespaces by name, whether or not the state file lists them all (an 'up' that died).
  local ns
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$name-h[0-9]+$" || true); do
    kill_inside "$ns"
    ip netns del "$ns" 2>/dev/null || true # deletes its veth pair too
    rm -rf "${kStateDir:?}/tmp/$ns"
  done
  # The bridge by its alias, as above.
  local br
  for br in $(ip -o link show type bridge 2>/dev/null |
    awk -v a="alias netns-cluster $name\$" '$0 ~ a { sub(":", "", $2); print $2 }'); do
    ip link del "$br" 2>/dev/null || true
  done
  # Root-side veths whose namespace outlived its name (a process was still inside).
  if [[ -e $kStateDir/$name.hosts ]]; then
    local veth
    for veth in $(tail -n +2 "$kStateDir/$name.hosts" | awk '{print $3}'); do
      ip link del "$veth" 2>/dev/null || true
    done
  fi
  rm -f "$kStateDir/$name.hosts"
}

main() {
  (($# >= 1)) || usage
  local command=$1
  shift
  case $command in
    up) cmd_up "$@" ;;
    addresses) cmd_addresses "$@" ;;
    exec) cmd_exec "$@" ;;
    shell) cmd_shell "$@" ;;
    pids) cmd_pids "$@" ;;
    rate) cmd_rate "$@" ;;
    link-down) cmd_link down "$@" ;;
    link-up) cmd_link up "$@" ;;
    down) cmd_down "$@" ;;
    -h | --help | help) usage ;;
    *)
      echo "netns-cluster: unknown command '$command'" >&2
      usage
      ;;
  esac
}

main "$@"
