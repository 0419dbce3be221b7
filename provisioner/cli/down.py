"""`simcluster down`: stop every process of a cluster and remove its state."""

from __future__ import annotations

import os

import click

from provisioner.cli.common import check_name
from provisioner.errors import UsageError


@click.command("down")
@click.option("--name", "-n", default=None, metavar="NAME", callback=check_name,
              help="Cluster to remove  [default: default]")
@click.option("--all", "all_", is_flag=True, help="Remove every cluster on this machine (local and docker).")
@click.option("--sudo", is_flag=True, help="Remove root's cluster that 'up --sudo' made: this command runs as root "
                                           "through 'sudo -n'.")
def command(name, all_, sudo):
    """Stop a cluster's daemons (or containers) and jobs, and delete its state.

    --sudo: a cluster made with `up --sudo` is root's; `down --sudo` runs this command as
    root through `sudo -n` (never a password prompt), and says so.
    """
    # lazy: the cluster model and provider registry load only when the command runs, not for --help
    from provisioner.named_clusters import down, list_clusters
    if all_ and name:
        raise UsageError("give either --name or --all, not both")
    if sudo and os.geteuid() != 0:
        from provisioner.paths import ClusterLayout
        own = ClusterLayout.for_name(name or "default")
        # A state file of this user's (not root's, which a SIMCLUSTER_HOME shared with root may
        # hold): root would find no such cluster, or another one of that name.
        if not all_ and own.state_file.exists() and own.state_file.stat().st_uid == os.getuid():
            raise UsageError(f"cluster '{name or 'default'}' is yours (rootless, in {own.root}), not root's",
                             f"remove it without --sudo: simcluster down --name {name or 'default'}")
        from provisioner.progress import stderr as progress
        from provisioner.sudo import rerun_as_root
        click.get_current_context().exit(rerun_as_root("down --all" if all_ else f"down '{name or 'default'}'", progress))
    if all_:
        clusters = list_clusters()
        for cluster in clusters:
            click.echo(down(cluster["name"]))
        if not clusters:
            click.echo("no clusters")
        return
    click.echo(down(name or "default"))
