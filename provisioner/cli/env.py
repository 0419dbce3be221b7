"""`simcluster env`: shell exports that point Slurm commands at a cluster."""

from __future__ import annotations

import shlex

import click

from provisioner.cli.common import name_option
from provisioner.providers import provider_for

# Docker backend: these commands become shell functions that run in the controller.
SLURM_COMMANDS = ("sinfo", "squeue", "sbatch", "srun", "salloc", "scontrol", "scancel", "sacct", "sacctmgr", "sshare")


@click.command("env")
@name_option
def command(name):
    """Print exports for the cluster: eval "$(simcluster env)"; then sinfo, sbatch, srun.

    For a docker cluster it prints shell functions instead, so the same Slurm commands run
    inside the controller container (job files go in the cluster's shared directory).
    """
    provider = provider_for(name)
    for key, value in provider.client_env(name).items():
        click.echo(f"export {key}={shlex.quote(value)}")
    if provider.name == "docker":
        for cmd in SLURM_COMMANDS:
            argv = " ".join(shlex.quote(a) for a in provider.exec_argv(name, [cmd]))
            click.echo(f'{cmd}() {{ {argv} "$@"; }}')
