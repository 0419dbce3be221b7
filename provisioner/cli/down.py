"""`simcluster down`: stop every process of a cluster and remove its state."""

from __future__ import annotations

import click

from provisioner.errors import UsageError
from provisioner.providers import get_provider
from provisioner.state import all_states


@click.command("down")
@click.option("--name", "-n", default=None, metavar="NAME", help="Cluster to remove  [default: default]")
@click.option("--all", "all_", is_flag=True, help="Remove every cluster on this machine.")
def command(name, all_):
    """Stop a cluster's daemons and jobs, and delete its state directory."""
    if all_ and name:
        raise UsageError("give either --name or --all, not both")
    if all_:
        states = all_states()
        if not states:
            click.echo("no clusters")
        for st in states:
            click.echo(get_provider(st.backend).down(st.name))
        return
    click.echo(get_provider("local").down(name or "default"))
