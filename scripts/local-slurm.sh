#!/usr/bin/env bash
# Starts a one-node Slurm cluster on this machine (Debian's slurmctld,
# slurmd and munge; root), so that the srun tests (lit feature `slurm`,
# test/hardening/srun-real.test) run under a real srun. Not part of CI.
#
#   ./scripts/local-slurm.sh          # install, configure, start
#   ./scripts/local-slurm.sh --stop   # stop the daemons
set -euo pipefail
if [[ "${1:-}" == "--stop" ]]; then
  pkill -x slurmd || true
  pkill -x slurmctld || true
  pkill -x munged || true
  exit 0
fi
if [[ $EUID -ne 0 ]]; then
  echo "local-slurm.sh: run as root (it installs and starts daemons)" >&2
  exit 1
fi
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
  slurmd slurmctld slurm-client munge > /dev/null
host=$(hostname)
mkdir -p /var/lib/slurm/slurmd /var/lib/slurm/slurmctld /var/log/slurm \
  /run/munge /etc/slurm
cat > /etc/slurm/slurm.conf <<CONF
ClusterName=local
SlurmctldHost=$host
MpiDefault=none
ProctrackType=proctrack/linuxproc
ReturnToService=2
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmdSpoolDir=/var/lib/slurm/slurmd
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmUser=root
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
NodeName=$host CPUs=$(nproc) State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
if [[ ! -s /etc/munge/munge.key ]]; then
  dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2> /dev/null
  chmod 400 /etc/munge/munge.key
fi
chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge
pgrep -x munged > /dev/null || runuser -u munge -- /usr/sbin/munged
pgrep -x slurmctld > /dev/null || slurmctld
sleep 2
pgrep -x slurmd > /dev/null || slurmd
for _ in $(seq 30); do
  if sinfo -h -o %t | grep -qE '^(idle|mix)'; then
    sinfo
    exit 0
  fi
  sleep 1
done
echo "local-slurm.sh: the node did not become idle; see /var/log/slurm/" >&2
exit 1
