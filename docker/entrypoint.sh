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
# cgroup v2, in a cgroup namespace of the container's own that it may write (a --privileged
# node with limits: /proc/self/cgroup is "0::/"; never the host's tree): what systemd makes
# on a host, for Slurm's cgroup/v2 plugin (cgroup.conf IgnoreSystemd=yes), as the local
# backend does per node (provisioner/providers/local/cgroups.py). A cgroup that gives
# controllers to its children holds no process, so every process of the container moves
# to the leaf "init" (runc's exec then joins pid 1's cgroup: init), then the root and
# system.slice, where slurmd makes its <node>_slurmstepd.scope, give the controllers on.
# Tried a few times: an exec that lands in the root meanwhile makes the write EBUSY.
cg=/sys/fs/cgroup
if [ -f "$cg/cgroup.controllers" ] && [ -w "$cg/cgroup.subtree_control" ] && [ "$(cat /proc/self/cgroup)" = "0::/" ]; then
    want=""
    for c in cpuset cpu io memory pids; do
        case " $(cat "$cg/cgroup.controllers") " in *" $c "*) want="$want +$c";; esac
    done
    mkdir -p "$cg/init" "$cg/system.slice"
    n=0
    until { while read -r p; do echo "$p" >"$cg/init/cgroup.procs" 2>/dev/null || true; done <"$cg/cgroup.procs"
            echo "$want" >"$cg/cgroup.subtree_control"; } 2>/dev/null; do
        n=$((n+1)); [ $n -lt 50 ] || { echo "simcluster: cannot enable$want in $cg" >&2; break; }; sleep 0.1
    done
    echo "$want" >"$cg/system.slice/cgroup.subtree_control" || true
fi
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
