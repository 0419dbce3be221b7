"""`simcluster exec -- CMD`: run any command in the cluster's environment."""

from __future__ import annotations

import os

import click

from provisioner.cli.common import name_option
from provisioner.errors import UsageError
from provisioner.providers import get_provider


@click.command("exec", context_settings={"ignore_unknown_options": True})
@name_option
@click.argument("argv", nargs=-1, type=click.UNPROCESSED, required=True)
def command(name, argv):
    """Run CMD with SLURM_CONF set for the cluster, e.g. simcluster exec -- sbatch job.sh"""
    env = dict(os.environ)
    env.update(get_provider("local").client_env(name))
    try:
        os.execvpe(argv[0], list(argv), env)
    except FileNotFoundError:
        raise UsageError(f"command not found: {argv[0]}") from None
