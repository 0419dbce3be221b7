"""`simcluster fault`: inject reversible faults into a cluster (docs/faults.md)."""

from __future__ import annotations


import click

from provisioner.cli.common import name_option
from provisioner.errors import ClusterNotFound, UsageError


def _inject(name, verb, *args):
    """``Injector(name).<verb>(*args)``: the fault under the cluster's lock; an unknown
    cluster is bad input here (exit 2)."""
    # lazy: the cluster model loads only when a fault command runs, not for --help
    from provisioner.clusters import Injector
    try:
        return getattr(Injector(name), verb)(*args)
    except ClusterNotFound as exc:
        raise UsageError(exc.message, exc.hint) from None


@click.group("fault")
def command():
    """Break a cluster on purpose, the way real clusters break; every fault is undone by 'fault heal'.

    \b
      simcluster fault kill node2          # slurmd and node2's job steps die (a crashed host)
      simcluster fault pause node2         # SIGSTOP (docker: pause the container); fault resume node2
      simcluster fault kill-controller     # slurmctld dies; heal/up/start restart it from saved state
      simcluster fault stop-accounting     # slurmdbd down; jobs run, sacct catches up after heal
      simcluster fault drain node1 --reason maintenance
      simcluster fault heal                # undo everything, restart any dead daemon

    Faults in effect are listed by 'simcluster status'. Use --fast-failure clusters to see
    a dead node DOWN in ~12 s instead of ~80 s.
    """


def _node_command(verb, doc):
    @command.command(verb, help=doc)
    @click.argument("node")
    @name_option
    def run(node, name):
        click.echo(_inject(name, verb, node))
    return run


_node_command("kill", "SIGKILL a node's slurmd, slurmstepd and job tasks (like a crashed host).")
_node_command("pause", "Freeze a node: SIGSTOP its slurmd and job steps (docker: pause its container).")
_node_command("resume", "Undo 'fault pause NODE'.")


@command.command("drain")
@click.argument("node")
@click.option("--reason", required=True, metavar="TEXT", help="Why (shown by sinfo -R and status).")
@name_option
def drain(node, reason, name):
    """Drain a node (scontrol update state=DRAIN): running jobs finish, no new ones start."""
    click.echo(_inject(name, "drain", node, reason))


@command.command("kill-controller")
@name_option
def kill_controller(name):
    """SIGKILL slurmctld; 'fault heal', 'start' or 'up' restart it from its saved state."""
    click.echo(_inject(name, "kill_controller"))


@command.command("stop-accounting")
@name_option
def stop_accounting(name):
    """SIGKILL slurmdbd (accounting clusters): jobs run on, records reach sacct after heal."""
    click.echo(_inject(name, "stop_accounting"))


@command.command("heal")
@name_option
@click.option("--wait", type=float, default=None, metavar="SECONDS",
              help="How long to wait for the nodes to answer  [default: the cluster's --wait]")
def heal(name, wait):
    """Undo every fault in effect (resume, undrain) and restart every dead daemon in place."""
    click.echo(_inject(name, "heal", wait or None, lambda m: click.echo(m, err=True)))
