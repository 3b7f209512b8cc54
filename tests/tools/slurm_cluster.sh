#!/usr/bin/env bash
# A real single-node Slurm (munged, slurmctld, slurmd) for the srun tests, started and stopped
# by the test itself. Needs root and Debian's slurm-wlm and munge.
#
#   slurm_cluster.sh start DIR   # writes DIR/slurm.conf, starts the daemons, waits until the
#                                # node is idle (prints SLURM_CONF=DIR/slurm.conf on success)
#   slurm_cluster.sh stop DIR    # stops the daemons started with DIR
#
# The daemons' state, logs and pid files live under DIR; only munge's key and directories are
# system-wide (/etc/munge, /run/munge), as munged insists. Exit code 77: cannot run here (not
# root, or a program missing), with the reason on stderr.
set -euo pipefail

action=${1:?usage: slurm_cluster.sh start|stop DIR}
dir=${2:?usage: slurm_cluster.sh start|stop DIR}

stop() {
  for pid_file in "$dir"/slurmd.pid "$dir"/slurmctld.pid; do
    [[ -f $pid_file ]] && kill "$(cat "$pid_file")" 2>/dev/null || true
  done
  # Wait (bounded) for them to go, then make sure.
  for _ in $(seq 50); do
    alive=0
    for pid_file in "$dir"/slurmd.pid "$dir"/slurmctld.pid; do
      [[ -f $pid_file ]] && kill -0 "$(cat "$pid_file")" 2>/dev/null && alive=1
    done
    ((alive == 0)) && break
    sleep 0.1
  done
  for pid_file in "$dir"/slurmd.pid "$dir"/slurmctld.pid; do
    [[ -f $pid_file ]] && kill -9 "$(cat "$pid_file")" 2>/dev/null || true
  done
  if [[ -f $dir/started-munged ]]; then
    pkill -x munged 2>/dev/null || true
    # Gone before returning: a start right after (the next test) would find it still exiting,
    # take it for running, and wait for a node that cannot authenticate.
    for _ in $(seq 50); do
      pgrep -x munged >/dev/null || break
      sleep 0.1
    done
    pkill -9 -x munged 2>/dev/null || true
    rm -f "$dir/started-munged"
  fi
}

if [[ $action == stop ]]; then
  stop
  exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
  echo "slurm_cluster.sh: needs root to start munged and slurmd" >&2
  exit 77
fi
for program in munged slurmctld slurmd srun sinfo; do
  if ! command -v "$program" >/dev/null && [[ ! -x /usr/sbin/$program ]]; then
    echo "slurm_cluster.sh: $program is missing (apt-get install slurm-wlm munge)" >&2
    exit 77
  fi
done

mkdir -p "$dir/state" "$dir/spool"
node=$(hostname -s)
# Free ports for the two daemons: bind-and-release, as the tests do for workers.
read -r ctld_port slurmd_port < <(python3 - 2>/dev/null <<'EOF' || echo "$((20000 + RANDOM % 20000)) $((40000 + RANDOM % 20000))"
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])
EOF
)

# munge: a key, its directories owned by the munge user, and the daemon as that user.
if ! pgrep -x munged >/dev/null; then
  install -d -o munge -g munge -m 700 /etc/munge
  install -d -o munge -g munge -m 755 /run/munge
  install -d -o munge -g munge -m 700 /var/log/munge /var/lib/munge
  if [[ ! -s /etc/munge/munge.key ]]; then
    head -c 1024 /dev/urandom >/etc/munge/munge.key
  fi
  chown munge:munge /etc/munge/munge.key
  chmod 400 /etc/munge/munge.key
  runuser -u munge -- /usr/sbin/munged --force
  touch "$dir/started-munged"
fi
for _ in $(seq 50); do
  munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break
  sleep 0.1
done

cat >"$dir/slurm.conf" <<EOF
ClusterName=disttest
SlurmctldHost=$node
SlurmUser=root
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
NodeName=$node CPUs=2 State=UNKNOWN
PartitionName=test Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
export SLURM_CONF=$dir/slurm.conf
/usr/sbin/slurmctld -f "$SLURM_CONF"
/usr/sbin/slurmd -f "$SLURM_CONF"
for _ in $(seq 300); do
  if sinfo -h -o %T 2>/dev/null | grep -qx idle; then
    echo "SLURM_CONF=$SLURM_CONF"
    exit 0
  fi
  sleep 0.1
done
echo "slurm_cluster.sh: the node did not become idle within 30 s; sinfo says:" >&2
sinfo >&2 || true
tail -5 "$dir/slurmctld.log" "$dir/slurmd.log" >&2 || true
stop
exit 1
