"""`simcluster list`: clusters on this machine."""

from __future__ import annotations

import click

from provisioner.cli.common import echo_json


@click.command("list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def command(as_json):
    """List local clusters (under $SIMCLUSTER_HOME) and docker clusters, with their status.

    For anyone but root (without SIMCLUSTER_HOME set) root's clusters are listed too
    (in /var/lib/simcluster), marked with their owner: every local user may use them."""
    # lazy: the cluster model loads only when the command runs, not for --help
    from provisioner.named_clusters import list_clusters
    clusters = list_clusters(with_shared=True)
    _note_old_root_clusters()
    if as_json:
        echo_json(clusters)
        return
    if not clusters:
        click.echo("no clusters (create one with 'simcluster up')")
        return
    click.echo(f"{'NAME':<20} {'BACKEND':<8} {'NODES':>5}  STATUS")
    for c in clusters:
        whose = f" ({c['owner']}'s)" if c["shared"] else ""
        click.echo(f"{c['name']:<20} {c['backend']:<8} {c['nodes'] if c['nodes'] is not None else '?':>5}  "
                   f"{c['status']}{whose}")


def _note_old_root_clusters() -> None:
    """Root's clusters used to live in root's own home, where no other user reaches them;
    `list` names the ones still there (on stderr), with the way to take them down."""
    import os

    from provisioner.cluster.model.state import all_states
    from provisioner.paths import personal_home
    if os.geteuid() != 0 or os.environ.get("SIMCLUSTER_HOME"):
        return
    old = personal_home()
    names = [st.name for st in all_states(old)]
    if names:
        click.echo(f"note: clusters in root's old state directory {old}, which other users cannot reach: "
                   f"{', '.join(names)} (list them: SIMCLUSTER_HOME={old} simcluster list; take them down with "
                   f"SIMCLUSTER_HOME={old} simcluster down --all; see docs/users.md)", err=True)
