#!/bin/sh
# simcluster node entrypoint: the container only idles. simcluster starts munged, slurmd,
# slurmctld (and MariaDB, slurmdbd) through the engine's exec API, with the same steps as
# on every backend (provisioner/cluster/steps.py); configs and the munge key come
# read-only from /etc/simcluster.
set -eu
# /run may be a fresh tmpfs; munged (run as root) wants its socket directory owned by root.
mkdir -p /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/slurm /run/munge
chown root:root /run/munge
chmod 0755 /run/munge
exec sleep infinity
