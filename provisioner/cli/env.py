"""`simcluster env`: shell exports that point Slurm commands at a cluster."""

from __future__ import annotations

import shlex

import click

from provisioner.cli.common import name_option

# Where Slurm commands must run on the cluster's controller (a container), these become
# shell functions that run them there.
SLURM_COMMANDS = ("sinfo", "squeue", "sbatch", "srun", "salloc", "scontrol", "scancel", "sacct", "sacctmgr", "sshare")


@click.command("env")
@name_option
def command(name):
    """Print exports for the cluster: eval "$(simcluster env)"; then sinfo, sbatch, srun.

    For a docker cluster it prints shell functions instead, so the same Slurm commands run
    inside the controller container (job files go in the cluster's shared directory).
    """
    from provisioner.cluster.lifecycle import load
    cluster = load(name)
    for key, value in cluster.placement.client_env.items():
        click.echo(f"export {key}={shlex.quote(value)}")
    prefix = cluster.runner().exec_prefix(cluster.placement.job_root_in_cluster, interactive=False)
    if prefix:
        for cmd in SLURM_COMMANDS:
            click.echo(f'{cmd}() {{ {" ".join(shlex.quote(a) for a in prefix + [cmd])} "$@"; }}')
