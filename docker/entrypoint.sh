#!/bin/sh
# simcluster node entrypoint: role "controller" runs slurmctld, role "node" runs slurmd.
# Configs and the munge key come read-only from /etc/simcluster (mounted by simcluster);
# fake GPUs are character devices made here, as /dev/nvidiaN (major 195, minor N).
set -eu
ROLE="${1:?usage: simcluster-entrypoint controller|node}"
export SLURM_CONF=/etc/simcluster/slurm.conf

install -m 0400 -o munge -g munge /etc/simcluster/munge.key /etc/munge/munge.key
chown munge:munge /run/munge
su -s /bin/sh munge -c "munged --force"

for gpu in ${SIMCLUSTER_FAKE_GPUS:-}; do
  [ -e "/dev/nvidia$gpu" ] || mknod -m 666 "/dev/nvidia$gpu" c 195 "$gpu"
done

case "$ROLE" in
  controller) exec slurmctld -D -f "$SLURM_CONF" ;;
  node)
    # Node containers start first, so that slurmctld can resolve every node name when it
    # starts (it retries an unknown name for 10 s). slurmd registers once it answers.
    tries=0
    until scontrol ping >/dev/null 2>&1; do
      tries=$((tries + 1))
      [ "$tries" -lt 1200 ] || { echo "slurmctld never answered" >&2; exit 1; }
      sleep 0.1
    done
    exec slurmd -D -N "$(hostname)" -f "$SLURM_CONF" ;;
  *) echo "unknown role: $ROLE" >&2; exit 2 ;;
esac
