#!/usr/bin/env bash
# A one-node Slurm cluster on a bare Debian or Ubuntu machine, for deploy/slurm/submit.sh
# (docs/cluster.md, "Slurm"): installs slurm-wlm and munge with apt-get when they are missing,
# writes slurm.conf for this node's CPUs and memory (as `slurmd -C` measures them), and starts
# munged, slurmctld and slurmd (with systemd where it runs, by hand elsewhere, e.g. in a
# container). Safe to run again: it installs nothing twice, rewrites only a slurm.conf it wrote
# itself, restarts the Slurm daemons only when that file changed, and starts what is not running.
usage="usage: setup-node.sh [--dir DIR] [--stop]
  (no option)  this machine's Slurm: /etc/slurm/slurm.conf, /etc/munge/munge.key, /var/spool/slurm*
  --dir DIR    a cluster of its own under DIR (conf, munge key and socket, state, logs): nothing
               in /etc is touched; then export SLURM_CONF=DIR/slurm.conf before sbatch/squeue
  --stop       stop the daemons this script started (with the same --dir)
  variables:   SLURMCTLD_PORT (6817), SLURMD_PORT (6818), PARTITION (ch34)"
set -euo pipefail

die() { echo "setup-node.sh: error: $*" >&2; exit 1; }
say() { echo "setup-node.sh: $*"; }

DIR="" STOP=0
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) [ $# -ge 2 ] || die "--dir needs a folder"$'\n'"$usage"; DIR="$2"; shift 2 ;;
    --stop) STOP=1; shift ;;
    -h|--help) echo "$usage"; exit 0 ;;
    *) die "unknown argument '$1'"$'\n'"$usage" ;;
  esac
done
[ "$(id -u)" = 0 ] || die "run it as root (sudo $0): it installs packages and starts slurmd, which runs jobs as their users"

MARK="# written by deploy/slurm/setup-node.sh"
PARTITION="${PARTITION:-ch34}"
if [ -n "$DIR" ]; then
  mkdir -p "$DIR"; DIR="$(cd "$DIR" && pwd)"
  CONF="$DIR/slurm.conf" KEY="$DIR/munge.key" SOCKET="$DIR/munge.sock"
  STATE="$DIR/state" SPOOL="$DIR/spool" LOGS="$DIR" RUN="$DIR" SLURM_USER=root
else
  CONF=/etc/slurm/slurm.conf KEY=/etc/munge/munge.key SOCKET=/run/munge/munge.socket.2
  STATE=/var/spool/slurmctld SPOOL=/var/spool/slurmd LOGS=/var/log/slurm RUN=/run/slurm
  SLURM_USER=slurm; id slurm >/dev/null 2>&1 || SLURM_USER=root
fi
MUNGE_PID="$RUN/munged.pid"
[ -n "$DIR" ] || MUNGE_PID=/run/munge/munged.pid
export SLURM_CONF="$CONF"
# systemd drives the machine's own daemons where it is PID 1; a --dir cluster is always by hand.
SYSTEMD=0
[ -z "$DIR" ] && [ -d /run/systemd/system ] && SYSTEMD=1

# A daemon is running while its pid file names a live process (an exited daemon that nobody reaped
# stays a zombie, state Z, where PID 1 is no init).
running() {
  local pid
  pid="$(cat "$1" 2>/dev/null)" && [ -n "$pid" ] || return 1
  [ -r "/proc/$pid/status" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$pid/status" 2>/dev/null
}
stop_pid() {
  local pid
  pid="$(cat "$1" 2>/dev/null)" || true
  if running "$1"; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do running "$1" || break; sleep 0.2; done
  fi
  rm -f "$1"
}
stop_slurm() {
  if [ "$SYSTEMD" = 1 ]; then systemctl stop slurmd slurmctld; return; fi
  stop_pid "$RUN/slurmd.pid"; stop_pid "$RUN/slurmctld.pid"
}

if [ "$STOP" = 1 ]; then
  stop_slurm
  if [ "$SYSTEMD" = 1 ]; then systemctl stop munge; else stop_pid "$MUNGE_PID"; fi
  say "stopped"; exit 0
fi

# 1. The packages.
missing=()
for tool in munged slurmctld slurmd sbatch sinfo; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
  command -v apt-get >/dev/null 2>&1 ||
    die "${missing[*]} missing and no apt-get here: install Slurm (slurm-wlm) and munge from your distribution"
  say "installing slurm-wlm and munge (missing: ${missing[*]})"
  apt-get update -qq || die "apt-get update failed: this machine needs its package mirror"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null ||
    die "apt-get install slurm-wlm munge failed (see the lines above)"
fi

# 2. The munge key: one for the cluster, readable by munged alone.
if [ ! -s "$KEY" ]; then
  mkdir -p "$(dirname "$KEY")"
  say "writing a munge key: $KEY"
  (umask 077; dd if=/dev/urandom of="$KEY" bs=1024 count=1 status=none)
fi
if [ -z "$DIR" ] && id munge >/dev/null 2>&1; then
  chown munge:munge "$KEY"
  mkdir -p /run/munge /var/lib/munge /var/log/munge
  chown munge:munge /run/munge /var/lib/munge /var/log/munge
fi
chmod 400 "$KEY"

# 3. slurm.conf for this node: its line as slurmd measures it (CPUs, sockets, cores, memory).
node="$(slurmd -C | head -n 1)"
case "$node" in NodeName=*RealMemory=*) ;; *) die "slurmd -C did not describe this node: $node" ;; esac
host="${node%% *}"; host="${host#NodeName=}"
[ -n "$DIR" ] && auth="AuthInfo=socket=$SOCKET" || auth=""
if [ -e "$CONF" ] && ! grep -qxF "$MARK" "$CONF"; then
  die "$CONF exists and was not written by this script: keep your cluster (submit.sh needs only sbatch) or move the file away and run this again, or use --dir DIR for a cluster of its own"
fi
conf="$MARK
# A one-node cluster for the chapter-34 kit: no accounting, no cgroups (any machine, containers too).
ClusterName=ch34
SlurmctldHost=$host
SlurmUser=$SLURM_USER
SlurmdUser=root
SlurmctldPort=${SLURMCTLD_PORT:-6817}
SlurmdPort=${SLURMD_PORT:-6818}
AuthType=auth/munge
CredType=cred/munge
$auth
StateSaveLocation=$STATE
SlurmdSpoolDir=$SPOOL
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
$node State=UNKNOWN
PartitionName=$PARTITION Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
changed=0
if [ ! -e "$CONF" ] || [ "$(cat "$CONF")" != "$conf" ]; then
  mkdir -p "$(dirname "$CONF")"
  printf '%s\n' "$conf" >"$CONF"
  changed=1
  say "wrote $CONF: ${node%% UpTime=*}"
fi
mkdir -p "$STATE" "$SPOOL" "$LOGS" "$RUN"
chown "$SLURM_USER" "$STATE" "$LOGS"

log_tail() {
  for log in "$LOGS/munged.log" /var/log/munge/munged.log "$LOGS/slurmctld.log" "$LOGS/slurmd.log"; do
    [ -s "$log" ] && { echo "--- $log"; tail -n 15 "$log"; }
  done >&2
  return 0
}

# 4. The daemons.
if [ "$SYSTEMD" = 1 ]; then
  systemctl enable --now munge
  [ "$changed" = 1 ] && systemctl restart slurmctld slurmd
  systemctl enable --now slurmctld slurmd
else
  if ! running "$MUNGE_PID"; then
    if [ -n "$DIR" ]; then
      munged --force --socket="$SOCKET" --key-file="$KEY" --pid-file="$MUNGE_PID" \
        --log-file="$LOGS/munged.log" --seed-file="$DIR/munged.seed" || { log_tail; die "munged did not start"; }
    else
      runuser -u munge -- munged || { log_tail; die "munged did not start"; }
    fi
  fi
  [ "$changed" = 1 ] && stop_slurm
  running "$RUN/slurmctld.pid" || slurmctld || { log_tail; die "slurmctld did not start"; }
  running "$RUN/slurmd.pid" || slurmd || { log_tail; die "slurmd did not start"; }
fi
munge -n --socket="$SOCKET" | unmunge --socket="$SOCKET" >/dev/null ||
  { log_tail; die "munge does not authenticate on $SOCKET (its key: $KEY)"; }

# 5. The node, ready for jobs (a node that came back from a restart may be marked down).
for i in $(seq 60); do
  state="$(sinfo -h -n "$host" -o %t 2>/dev/null || true)"
  case "$state" in
    idle|mix|alloc) break ;;
    down*|drain*|drng*) [ "$i" = 5 ] && scontrol update NodeName="$host" State=RESUME ;;
  esac
  sleep 1
done
case "$state" in
  idle|mix|alloc) ;;
  *) log_tail; die "node $host is '${state:-unknown}' after 60 s, not idle (logs above; scontrol show node $host)" ;;
esac
say "Slurm is up: node $host in partition $PARTITION ($CONF)."
[ -z "$DIR" ] || say "before sbatch, squeue or submit.sh: export SLURM_CONF=$CONF"
