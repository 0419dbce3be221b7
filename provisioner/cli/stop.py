"""`simcluster stop`: stop every daemon of a cluster and keep its state (`start` brings it back)."""

from __future__ import annotations

import click

from provisioner.cli.common import check_name
from provisioner.errors import UsageError


def names_of(name, all_, want_phase):
    """--name N or --all (every cluster whose phase is not ``want_phase``)."""
    # lazy: the cluster model loads only when the command runs, not for --help
    from provisioner.named_clusters import list_clusters
    if all_ and name:
        raise UsageError("give either --name or --all, not both")
    if not all_:
        return [name or "default"]
    return [c["name"] for c in list_clusters() if c["status"] != "orphaned" and c["status"] != want_phase]


@click.command("stop")
@click.option("--name", "-n", default=None, metavar="NAME", callback=check_name,
              help="Cluster to stop  [default: default]")
@click.option("--all", "all_", is_flag=True, help="Stop every running cluster on this machine.")
def command(name, all_):
    """Stop a cluster's daemons (docker: its containers), keeping jobs, state and accounting.

    SIGTERM goes to the slurmds first, then slurmctld (which saves its state), slurmdbd,
    MariaDB and munged; what does not stop within 15 s is killed. 'simcluster start' (or
    'up' with the same spec) brings the cluster back.
    """
    # lazy: the cluster model loads only when the command runs, not for --help
    from provisioner.named_clusters import stop
    names = names_of(name, all_, "stopped")
    for n in names:
        click.echo(stop(n))
    if all_ and not names:
        click.echo("no running clusters")
