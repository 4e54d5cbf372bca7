# A one-node Slurm cluster on 127.0.0.1 for the `scale` tests: munged, slurmctld and slurmd from
# Debian, every file (configuration, key, sockets, pid files, logs, state) under one directory.
# Source this file, then:
#
#   slurm_start DIR      # writes DIR/slurm.conf, starts the three daemons, waits for `idle`,
#                        # exports SLURM_CONF; fails loudly (exit 1) when a piece is missing
#   slurm_stop           # stops slurmd, slurmctld, munged by their pid files, waiting for each
#   slurm_wait_job ID... # polls squeue every 0.2 s until none of the jobs is queued or running
#   slurm_job_state ID   # prints the final state of a job (COMPLETED, FAILED, CANCELLED, ...)
#
# slurm_start installs `trap slurm_stop EXIT` (chained with an existing EXIT trap is not
# attempted: callers that need their own cleanup call slurm_stop from it). Slurm's ports are fixed
# (6817/6818), so slurm_start first stops a cluster that a crashed run left in DIR, found by its
# own pid files, and refuses when something else holds the ports.

slurm_die() {
  echo "slurm_cluster: error: $*" >&2
  [[ -n ${SLURM_CLUSTER_DIR:-} && -d $SLURM_CLUSTER_DIR/log ]] &&
    tail -n 20 "$SLURM_CLUSTER_DIR"/log/*.log >&2 2> /dev/null
  exit 1
}

# stop_pidfile FILE NAME (tests/lib/daemon.sh)
# shellcheck source=../lib/daemon.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/daemon.sh"

slurm_stop() {
  local d=${SLURM_CLUSTER_DIR:-}
  [[ -n $d ]] || return 0
  stop_pidfile "$d/slurmd.pid" slurmd
  stop_pidfile "$d/slurmctld.pid" slurmctld
  local m
  m=$(cat "$d/munge.dir" 2> /dev/null || true)
  if [[ $m == /*/kiln-munge.* && -d $m ]]; then
    stop_pidfile "$m/munged.pid" munged
    rm -rf "$m"
  fi
  rm -f "$d/munge.dir"
}

slurm_start() {
  local d=$1 tool host
  for tool in munged mungekey slurmctld slurmd sinfo sbatch squeue srun scancel sacct runuser; do
    command -v "$tool" > /dev/null || PATH=$PATH:/usr/sbin:/sbin command -v "$tool" > /dev/null ||
      slurm_die "$tool not found: install the Debian packages slurmctld slurmd slurm-client munge (scripts/setup.sh)"
  done
  PATH=$PATH:/usr/sbin:/sbin
  id munge > /dev/null 2>&1 || slurm_die "no 'munge' user: install the Debian package munge"
  [[ $(id -u) -eq 0 ]] || slurm_die "the one-node cluster runs its daemons as root"
  mkdir -p "$d"
  d=$(cd "$d" && pwd)
  export SLURM_CLUSTER_DIR=$d
  slurm_stop  # a cluster left by a crashed run in this directory
  trap slurm_stop EXIT
  if (exec 3<> /dev/tcp/127.0.0.1/6817) 2> /dev/null || (exec 3<> /dev/tcp/127.0.0.1/6818) 2> /dev/null; then
    slurm_die "port 6817 or 6818 on 127.0.0.1 is already in use (another Slurm?)"
  fi
  rm -rf "$d/state" "$d/spool" "$d/log"
  mkdir -p "$d/state" "$d/spool" "$d/log"
  host=$(hostname -s)
  # munged runs as user munge, which may not be able to enter DIR (a checkout under a 0700
  # `mktemp -d`, a home directory), and refuses a key or socket directory that others can write.
  # So its key, socket, pid, log and seed live in a directory of its own under
  # /tmp (mode 1777, whatever TMPDIR says), owned by munge, 0755; DIR/munge.dir names it for slurm_stop.
  local m
  m=$(mktemp -d /tmp/kiln-munge.XXXXXX) || slurm_die "mktemp for munged's directory failed"
  echo "$m" > "$d/munge.dir"
  chown munge: "$m"
  chmod 755 "$m"
  runuser -u munge -- test -x "$m" ||
    slurm_die "user munge cannot enter $m: a parent of it is not searchable by others (ls -ld $(dirname "$m"))"
  mungekey --create --keyfile="$m/munge.key" > /dev/null 2>&1 ||
    slurm_die "mungekey --create failed"
  chown munge: "$m/munge.key"
  chmod 600 "$m/munge.key"
  runuser -u munge -- munged --key-file="$m/munge.key" --socket="$m/munge.sock" \
    --pid-file="$m/munged.pid" --log-file="$m/munged.log" \
    --seed-file="$m/munged.seed" ||
    { cat "$m/munged.log" >&2 2> /dev/null; slurm_die "munged did not start"; }
  cat > "$d/slurm.conf" << EOF
ClusterName=kilnci
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$m/munge.sock
CredType=cred/munge
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd.pid
SlurmctldLogFile=$d/log/slurmctld.log
SlurmdLogFile=$d/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerParameters=sched_min_interval=0
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
KillWait=5
MinJobAge=300
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=1000 State=UNKNOWN
PartitionName=ci Nodes=$host Default=YES MaxTime=30 State=UP OverSubscribe=FORCE:4
EOF
  export SLURM_CONF=$d/slurm.conf
  slurmctld -f "$SLURM_CONF" || slurm_die "slurmctld did not start"
  slurmd -f "$SLURM_CONF" || slurm_die "slurmd did not start"
  local state=""
  for _ in $(seq 1 150); do
    state=$(sinfo -h -o %T 2> /dev/null || true)
    [[ $state == idle ]] && return 0
    sleep 0.2
  done
  slurm_die "the node did not become idle in 30 s (sinfo says '$state')"
}

slurm_wait_job() {
  local waited=0
  while [[ -n $(squeue -h -j "$(IFS=,; echo "$*")" -o %i 2> /dev/null) ]]; do
    sleep 0.2
    waited=$((waited + 1))
    ((waited < 1500)) || slurm_die "jobs $* still queued or running after 300 s"
  done
}

# The state of job $1 (for an array, one line per task): from scontrol while slurmctld keeps the
# finished job (MinJobAge above).
slurm_job_state() {
  scontrol -o show job "$1" 2> /dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'
}
