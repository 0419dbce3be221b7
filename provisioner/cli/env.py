"""`simcluster env`: shell exports that point Slurm commands at a cluster."""

from __future__ import annotations

import shlex

import click

from provisioner.cli.common import name_option
from provisioner.providers import get_provider


@click.command("env")
@name_option
def command(name):
    """Print exports for the cluster: eval "$(simcluster env)"; then sinfo, sbatch, srun."""
    for key, value in get_provider("local").client_env(name).items():
        click.echo(f"export {key}={shlex.quote(value)}")
