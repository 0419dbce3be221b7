"""`simcluster exec -- CMD`: run any command in the cluster's environment."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from provisioner.cli.common import name_option
from provisioner.errors import UsageError
from provisioner.providers import provider_for


@click.command("exec", context_settings={"ignore_unknown_options": True})
@name_option
@click.argument("argv", nargs=-1, type=click.UNPROCESSED, required=True)
def command(name, argv):
    """Run CMD against the cluster, e.g. simcluster exec -- sbatch job.sh

    Local backend: CMD runs here with SLURM_CONF set. Docker backend: CMD runs in the
    controller container, in /shared (or the matching directory when you are inside the
    cluster's shared directory on the host).
    """
    provider = provider_for(name)
    if provider.name == "docker":
        st = provider.status(name)
        workdir = "/shared"
        shared = Path(st.get("shared_dir") or "/nonexistent")
        cwd = Path.cwd()
        if cwd == shared or shared in cwd.parents:
            workdir = str(Path("/shared") / cwd.relative_to(shared))
        full = provider.exec_argv(name, list(argv), interactive=sys.stdin.isatty(), workdir=workdir)
        os.execvp(full[0], full)
    env = dict(os.environ)
    env.update(provider.client_env(name))
    try:
        os.execvpe(argv[0], list(argv), env)
    except FileNotFoundError:
        raise UsageError(f"command not found: {argv[0]}") from None
