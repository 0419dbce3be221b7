"""`simcluster fault`: inject reversible faults into a cluster (docs/faults.md)."""

from __future__ import annotations


import click

from provisioner.cli.common import name_option
from provisioner.errors import ClusterNotFound, UsageError


def _on_job(name, verb, *args, **kwargs):
    """``faults.<verb>(cluster, *args)`` for a fault of one job: the cluster is loaded
    without its lock (a job fault changes no cluster state: cluster/faults/kinds.py says why)."""
    # lazy: the cluster model loads only when a fault command runs, not for --help
    from provisioner.cluster.faults import kinds as faults
    from provisioner.named_clusters import load
    try:
        cluster = load(name)
    except ClusterNotFound as exc:
        raise UsageError(exc.message, exc.hint) from None
    return getattr(faults, verb)(cluster, *args, **kwargs)


def _inject(name, verb, *args):
    """``Injector(name).<verb>(*args)``: the fault under the cluster's lock; an unknown
    cluster is bad input here (exit 2)."""
    # lazy: the cluster model loads only when a fault command runs, not for --help
    from provisioner.named_clusters import Injector
    try:
        return getattr(Injector(name), verb)(*args)
    except ClusterNotFound as exc:
        raise UsageError(exc.message, exc.hint) from None


@click.group("fault")
def command():
    """Break a cluster or a job on purpose, the way real ones break; 'fault heal' undoes the cluster faults.

    \b
      simcluster fault kill node2          # slurmd and node2's job steps die (a crashed host)
      simcluster fault pause node2         # SIGSTOP (docker: pause the container); fault resume node2
      simcluster fault kill-controller     # slurmctld dies; heal/up/start restart it from saved state
      simcluster fault stop-accounting     # slurmdbd down; jobs run, sacct catches up after heal
      simcluster fault drain node1 --reason maintenance
      simcluster fault heal                # undo everything, restart any dead daemon
      simcluster fault time-limit 42 --in 120   # job 42 ends (TIMEOUT) in ~2 min, its --signal before
      simcluster fault preempt 42          # requeue/cancel job 42 as its PreemptMode says

    Faults in effect are listed by 'simcluster status' (the job faults change only a job). Use --fast-failure clusters to see
    a dead node DOWN in ~12 s instead of ~80 s.
    """


def _node_command(verb, doc):
    @command.command(verb, help=doc)
    @click.argument("node")
    @name_option
    def run(node, name):
        click.echo(_inject(name, verb, node))
    return run


_node_command("kill", "SIGKILL a node's slurmd, slurmstepd and job tasks (like a crashed host; local: off its "
                      "network first, and heal brings it back rebooted).")
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


@command.command("time-limit")
@click.argument("job_id", metavar="JOBID")
@click.option("--in", "in_s", type=click.IntRange(min=0), required=True, metavar="SECONDS",
              help="The job's new end, from now (the smallest whole-minute TimeLimit that reaches it).")
@name_option
def time_limit(job_id, in_s, name):
    """Move a running job's end to about SECONDS from now (scontrol update TimeLimit).

    Its --signal then comes at its offset before the new end and it ends TIMEOUT, as a
    24-hour job does at hour 24. Slurm keeps limits in whole minutes and acts on them in
    a pass every 30 s: the signal comes up to 30 s early, the end up to 30 s late.
    """
    click.echo(_on_job(name, "time_limit", job_id, in_s))


@command.command("preempt")
@click.argument("job_id", metavar="JOBID")
@click.option("--mode", type=click.Choice(["requeue", "cancel"], case_sensitive=False), default=None,
              help="Requeue or cancel, whatever PreemptMode says  [default: its QoS/partition/cluster PreemptMode]")
@name_option
def preempt(job_id, mode, name):
    """Preempt a running job as Slurm would: GraceTime, the signal, then requeue or cancel.

    The mode and GraceTime are read from the cluster as slurmctld decides them
    (PreemptType preempt/qos: the job's QoS; preempt/partition_prio: its partition;
    else the cluster's PreemptMode). Done with Slurm's own commands (scancel --signal,
    scontrol requeue, scancel): sacct shows REQUEUED or CANCELLED, not PREEMPTED.
    """
    click.echo(_on_job(name, "preempt", job_id, mode and mode.lower(), lambda m: click.echo(m, err=True)))
