#!/usr/bin/env bash
# A real one-node Slurm cluster on this machine, for checking `sweep --launcher slurm` (CI runs it as root):
#   source <(bash ci/slurm_cluster.sh start)    # installs slurm-wlm and munge when absent, starts the daemons,
#                                               # prints the `export SLURM_CONF=...` the clients need
#   bash ci/slurm_cluster.sh stop
# No systemd: munged runs as user munge, slurmctld and slurmd as root, with their state, logs and slurm.conf in
# $SLURM_STATE (default /tmp/attention-lab-slurm); /etc/slurm is not touched. One partition, `debug`, holds the
# node with every core and 90% of the memory (a job without --mem gets its cores' share); jobs may be requeued (JobRequeue=1).
set -euo pipefail
STATE=${SLURM_STATE:-/tmp/attention-lab-slurm}
fail() { echo "slurm_cluster: $*" >&2; exit 1; }

start() {
  [ "$(id -u)" = 0 ] || fail "starting slurmctld and slurmd needs root (CI runs as root); this is uid $(id -u)"
  if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    echo "slurm_cluster: installing Debian's slurm-wlm and munge" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge >"$STATE.apt.log" 2>&1 \
      || { apt-get update -q >>"$STATE.apt.log" 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
           slurm-wlm munge >>"$STATE.apt.log" 2>&1; } || fail "apt-get install slurm-wlm munge failed: $STATE.apt.log"
  fi
  stop_daemons
  mkdir -p "$STATE/ctld" "$STATE/d" /run/munge
  chown munge:munge /run/munge && chmod 755 /run/munge
  [ -s /etc/munge/munge.key ] || { mungekey --create >/dev/null 2>&1 || fail "no munge key and mungekey failed"; }
  runuser -u munge -- /usr/sbin/munged --force || fail "munged did not start"
  local node mem
  node=$(hostname -s)
  mem=$(awk '/MemTotal/ {printf "%d", $2 / 1024 * 0.9}' /proc/meminfo)
  cat >"$STATE/slurm.conf" <<EOF
ClusterName=attention-lab
SlurmctldHost=$node
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
JobRequeue=1
KillWait=30
MinJobAge=3600
DefMemPerCPU=$((mem / $(nproc)))
NodeName=$node CPUs=$(nproc) RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
  export SLURM_CONF=$STATE/slurm.conf
  slurmctld || fail "slurmctld did not start: $STATE/slurmctld.log"
  slurmd || fail "slurmd did not start: $STATE/slurmd.log"
  for _ in $(seq 60); do  # the node registers within seconds
    if sinfo -h -o %T 2>/dev/null | grep -qx idle; then
      echo "export SLURM_CONF=$SLURM_CONF"
      return 0
    fi
    sleep 1
  done
  fail "the node did not come up idle within 60 s (sinfo: $(sinfo -h 2>&1 | head -1)); logs in $STATE"
}

stop_daemons() {
  for pidfile in "$STATE/slurmd.pid" "$STATE/slurmctld.pid"; do
    [ -s "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null || true
  done
  pkill -x slurmd 2>/dev/null || true
  pkill -x slurmctld 2>/dev/null || true
  pkill -x munged 2>/dev/null || true
  sleep 1
}

case "${1:-}" in
  start) start ;;
  stop) stop_daemons; rm -rf "$STATE" ;;
  *) fail "usage: bash ci/slurm_cluster.sh start|stop (got '${1:-}')" ;;
esac
