"""`simcluster export-logs DIR`: a debug bundle for a bug report."""

from __future__ import annotations

from pathlib import Path

import click

from provisioner.cli.common import name_option
from provisioner.cli.options import cluster_from_options, ssh_options


@click.command("export-logs")
@click.argument("out_dir", metavar="DIR")
@name_option
@ssh_options
def command(out_dir, name, **where):
    """Copy configs (passwords redacted), every daemon log, `scontrol show node/job/partition/config`,
    accounting reports, state and versions into DIR; docker clusters add inspect output and
    container logs.

    With --ssh USER@HOST, the cluster is one made by 'simcluster deploy': the same bundle,
    read on its controller (configs, slurmctld's log) and on its nodes through srun (each
    slurmd's log).
    """
    from provisioner.cluster.inspect.logs import export_logs  # lazy: the cluster model loads when the command runs, not for --help
    with cluster_from_options(name, **where) as cluster:
        written = export_logs(cluster, Path(out_dir))
    click.echo(f"wrote {len(written)} files to {out_dir}")
