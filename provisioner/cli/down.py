"""`simcluster down`: stop every process of a cluster and remove its state."""

from __future__ import annotations

import click

from provisioner.cli.common import check_name
from provisioner.errors import UsageError
from provisioner.providers import all_providers, provider_for


@click.command("down")
@click.option("--name", "-n", default=None, metavar="NAME", callback=check_name,
              help="Cluster to remove  [default: default]")
@click.option("--all", "all_", is_flag=True, help="Remove every cluster on this machine (local and docker).")
def command(name, all_):
    """Stop a cluster's daemons (or containers) and jobs, and delete its state."""
    if all_ and name:
        raise UsageError("give either --name or --all, not both")
    if all_:
        removed = 0
        for provider in all_providers():
            for cluster in provider.list_clusters():
                click.echo(provider.down(cluster["name"]))
                removed += 1
        if not removed:
            click.echo("no clusters")
        return
    name = name or "default"
    click.echo(provider_for(name).down(name))
