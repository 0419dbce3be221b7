"""`simcluster export-logs DIR`: a debug bundle for a bug report."""

from __future__ import annotations

from pathlib import Path

import click

from provisioner.cli.common import name_option
from provisioner.providers import provider_for


@click.command("export-logs")
@click.argument("out_dir", metavar="DIR")
@name_option
def command(out_dir, name):
    """Copy configs, every daemon log, `scontrol show node/job` and versions into DIR."""
    written = provider_for(name).collect_logs(name, Path(out_dir))
    click.echo(f"wrote {len(written)} files to {out_dir}")
