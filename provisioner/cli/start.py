"""`simcluster start`: bring stopped clusters back in place (after `stop`, a crash or a reboot)."""

from __future__ import annotations

import click

from provisioner.cli.common import check_name
from provisioner.cli.stop import names_of


@click.command("start")
@click.option("--name", "-n", default=None, metavar="NAME", callback=check_name,
              help="Cluster to start  [default: default]")
@click.option("--all", "all_", is_flag=True, help="Start every stopped or degraded cluster on this machine.")
@click.option("--wait", type=float, default=None, metavar="SECONDS",
              help="How long to wait for the nodes to answer  [default: the cluster's --wait]")
def command(name, all_, wait):
    """Start a stopped cluster: the same ports, munge key, saved jobs and database.

    Only dead daemons are started (a pid that now belongs to another process, e.g. after
    a reboot, is never taken for the cluster's daemon); docker containers are started first.
    """
    # lazy: the cluster model loads only when the command runs, not for --help
    from provisioner.named_clusters import start
    names = names_of(name, all_, "running")
    for n in names:
        click.echo(start(n, timeout=wait))
    if all_ and not names:
        click.echo("no stopped clusters")
