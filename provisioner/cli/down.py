"""`simcluster down`: stop every process of a cluster and remove its state."""

from __future__ import annotations

import click

from provisioner.cli.common import check_name
from provisioner.errors import UsageError


@click.command("down")
@click.option("--name", "-n", default=None, metavar="NAME", callback=check_name,
              help="Cluster to remove  [default: default]")
@click.option("--all", "all_", is_flag=True, help="Remove every cluster on this machine (local and docker).")
def command(name, all_):
    """Stop a cluster's daemons (or containers) and jobs, and delete its state."""
    # lazy: the cluster model and provider registry load only when the command runs, not for --help
    from provisioner.clusters import down, list_clusters
    if all_ and name:
        raise UsageError("give either --name or --all, not both")
    if all_:
        clusters = list_clusters()
        for cluster in clusters:
            click.echo(down(cluster["name"]))
        if not clusters:
            click.echo("no clusters")
        return
    click.echo(down(name or "default"))
