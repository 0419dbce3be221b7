#!/bin/sh
# simcluster node entrypoint. The container idles; the cluster's daemons (munged, slurmctld
# or slurmd) are started either here, at the container's first start, from the boot script
# `up` wrote for this machine (/etc/simcluster/boot/$SIMCLUSTER_MACHINE.sh: the same
# command lines as the steps in provisioner/cluster/steps.py, which then adopt them), or
# by those steps through the engine's exec API (a restarted container, a node added by
# `scale`, the accounting daemons). Configs and the munge key come read-only from
# /etc/simcluster.
set -eu
# /run may be a fresh tmpfs; munged (run as root) wants its socket directory owned by root.
mkdir -p /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/slurm /run/munge
chown root:root /run/munge
chmod 0755 /run/munge
# Only the first start boots (mkdir succeeds once: the container's /run outlives a restart,
# where `start` restarts the daemons itself). The boot directory holds a pid file per
# daemon started and, once the script is over, "done": what the steps read to adopt them.
boot_dir=/run/simcluster-boot
if mkdir "$boot_dir" 2>/dev/null; then
    boot="/etc/simcluster/boot/${SIMCLUSTER_MACHINE:-none}.sh"
    # In a subshell of a subshell that ends at once: pid 1 (docker-init) reaps it, not sleep.
    ( ( if [ -f "$boot" ]; then sh "$boot" "$boot_dir" >/var/log/slurm/boot.log 2>&1 || true; fi
        : >"$boot_dir/done" ) & )
fi
exec sleep infinity
