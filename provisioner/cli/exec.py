"""`simcluster exec -- CMD`: run any command in the cluster's environment."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from provisioner.cli.common import name_option
from provisioner.errors import UsageError


@click.command("exec", context_settings={"ignore_unknown_options": True})
@name_option
@click.argument("argv", nargs=-1, type=click.UNPROCESSED, required=True)
def command(name, argv):
    """Run CMD against the cluster, e.g. simcluster exec -- sbatch job.sh

    Local backend: CMD runs here with SLURM_CONF set. Docker backend: CMD runs in the
    controller container, in /shared (or the matching directory when you are inside the
    cluster's shared directory on the host).
    """
    # lazy: the cluster model loads only when the command runs, not for --help
    from provisioner.named_clusters import load
    from provisioner.cluster.model.jobfiles import HostDirFiles
    cluster = load(name)
    pl = cluster.placement
    cwd = Path.cwd()
    inside = cwd == pl.job_root or pl.job_root in cwd.parents
    workdir = HostDirFiles(pl.job_root, pl.job_root_in_cluster).cluster_path(cwd) if inside else pl.job_root_in_cluster
    full = cluster.runner().exec_prefix(workdir, interactive=sys.stdin.isatty()) + list(argv)
    env = dict(os.environ)
    env.update(pl.client_env)
    try:
        os.execvpe(full[0], full, env)
    except FileNotFoundError:
        raise UsageError(f"command not found: {full[0]}") from None
