"""`simcluster fault`: inject reversible faults into a cluster (docs/faults.md).

One command per row of provisioner/cluster/faults/registry.py (FAULTS): its argument (NODE,
JOBID or none) and options come from the row, so a new fault kind needs no code here.
"""

from __future__ import annotations

import click

from provisioner.cli.common import name_option
from provisioner.cli.options import ssh_options
from provisioner.cluster.faults.registry import CLUSTER, FAULTS, Fault, Param
from provisioner.errors import ClusterNotFound, UsageError

_TYPES = {"text": click.STRING, "seconds": click.IntRange(min=0), "int": click.IntRange(min=0), "float": click.FLOAT}


def _inject(name, verb, *args, where=None, **kwargs):
    """``Injector(name).inject(verb, *args)``: a cluster fault under the cluster's lock, a job
    fault without it (cluster/faults/job.py says why); an unknown cluster is bad input here
    (exit 2). With --ssh (``where``: the ssh_options), the deployed cluster whose controller
    that is, through its hosts' systemd (providers/ssh/faults.py)."""
    # lazy: the cluster model loads only when a fault command runs, not for --help
    from provisioner.named_clusters import Injector
    if where and where.get("ssh"):
        from provisioner.providers.ssh import open_cluster
        from provisioner.providers.ssh.faults import check_available, run_fault
        check_available(verb)
        with open_cluster(where["ssh"], where["ssh_key"], where["known_hosts"], where["insecure_host_key"],
                          probe_gpus=False) as cluster:
            return run_fault(cluster, verb, *args, **kwargs)
    try:
        return Injector(name).inject(verb, *args, **kwargs)
    except ClusterNotFound as exc:
        raise UsageError(exc.message, exc.hint) from None


@click.group("fault")
def command():
    """Break a cluster or a job on purpose, the way real ones break; 'fault heal' undoes the cluster faults.

    \b
      simcluster fault kill node2          # slurmd and node2's job steps die (a crashed host)
      simcluster fault reboot node2        # node2's host reboots; back when node2 takes jobs again
      simcluster fault pause node2         # SIGSTOP (docker: pause the container); fault resume node2
      simcluster fault kill-controller     # slurmctld dies; heal/up/start restart it from saved state
      simcluster fault stop-accounting     # slurmdbd down; jobs run, sacct catches up after heal
      simcluster fault drain node1 --reason maintenance
      simcluster fault gpu node1 --xid 79  # a GPU falls off the bus; the health check drains node1
      simcluster fault heal                # undo everything, restart any dead daemon
      simcluster fault heal node1          # undo node1's faults only
      simcluster fault time-limit 42 --in 120   # job 42 ends (TIMEOUT) in ~2 min, its --signal before
      simcluster fault preempt 42          # requeue/cancel job 42 as its PreemptMode says

    Faults in effect are listed by 'simcluster status' (the job faults change only a job). Use --fast-failure clusters to see
    a dead node DOWN in ~12 s instead of ~80 s.

    A cluster made by 'simcluster deploy': add --ssh USER@HOST (its controller; passwordless
    sudo there and on the compute hosts, which are reached through it). kill, reboot, drain,
    kill-controller, stop-accounting, heal, time-limit and preempt work there:

    \b
      simcluster fault kill node2 --ssh admin@ctl       # systemctl kill slurmd and node2's job steps
      simcluster fault reboot node2 --ssh admin@ctl     # the host reboots; waits until node2 is back
      simcluster fault heal --ssh admin@ctl             # start every stopped unit, resume the nodes
    """


def _option(param: Param):
    dest = param.dest or param.flag.lstrip("-").replace("-", "_")
    if param.type == "flag":
        return click.option(param.flag, dest, is_flag=True, default=False, help=param.help)
    kind = click.Choice(list(param.choices), case_sensitive=False) if param.type == "choice" else _TYPES[param.type]
    return click.option(param.flag, dest, type=kind, required=param.required, default=param.default,
                        metavar=param.metavar or None, help=param.help)


def _fault_command(fault: Fault):
    """The click command of one fault row."""
    def run(name, target=None, ssh=None, ssh_key=None, known_hosts=None, insecure_host_key=False, **options):
        args = () if target is None or fault.node_optional else (target,)
        values = [options[p.dest or p.flag.lstrip("-").replace("-", "_")] for p in fault.params]
        extra = {"progress": lambda m: click.echo(m, err=True)} if fault.progress else {}
        if fault.node_optional and target is not None:
            extra["node"] = target
        where = dict(ssh=ssh, ssh_key=ssh_key, known_hosts=known_hosts, insecure_host_key=insecure_host_key)
        click.echo(_inject(name, fault.verb, *args, *values, where=where, **extra))
    run.__name__ = fault.method
    run = ssh_options(run)
    run = name_option(run)
    for param in reversed(fault.params):
        run = _option(param)(run)
    if fault.target != CLUSTER:
        run = click.argument("target", metavar=fault.target.upper() if fault.target == "node" else "JOBID")(run)
    elif fault.node_optional:
        run = click.argument("target", metavar="[NODE]", required=False)(run)
    return command.command(fault.verb, help=fault.help)(run)


for _fault in FAULTS:
    _fault_command(_fault)
