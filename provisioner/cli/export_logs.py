"""`simcluster export-logs DIR`: a debug bundle for a bug report."""

from __future__ import annotations

from pathlib import Path

import click

from provisioner.cli.common import name_option


@click.command("export-logs")
@click.argument("out_dir", metavar="DIR")
@name_option
def command(out_dir, name):
    """Copy configs (passwords redacted), every daemon log, `scontrol show node/job/partition/config`,
    accounting reports, state and versions into DIR; docker clusters add inspect output and
    container logs."""
    from provisioner.cluster.lifecycle import load
    from provisioner.cluster.logs import export_logs
    written = export_logs(load(name), Path(out_dir))
    click.echo(f"wrote {len(written)} files to {out_dir}")
