"""`simcluster scale`: grow or shrink a running cluster, its queued and running jobs kept."""

from __future__ import annotations

import click

from provisioner.cli.common import check_name
from provisioner.errors import UsageError
from provisioner.progress import stderr as progress_stderr


def _node_list(value):
    return [n.strip() for n in value.split(",") if n.strip()] if value else []


@click.command("scale")
@click.option("--name", "-n", default=None, metavar="NAME", callback=check_name,
              help="Cluster to scale  [default: default]")
@click.option("--nodes", "-N", type=int, default=None, metavar="K",
              help="Grow or shrink to K nodes (the newest nodes leave first).")
@click.option("--add", "add_", type=int, default=None, metavar="N", help="Add N nodes.")
@click.option("--remove", "remove_", default=None, metavar="NODE[,NODE]", help="Remove these nodes.")
@click.option("--cpus", type=int, default=None, metavar="C",
              help="CPUs each new node advertises  [default: the last node's]")
@click.option("--memory", default=None, metavar="M",
              help="Memory each new node advertises: MB or 240G  [default: the last node's]")
@click.option("--gpus", default=None, metavar="IDS|none",
              help="Physical GPU ids for the new nodes, split evenly ('4-7'), or none  [default: fake GPUs: as "
                   "many as the last node, the next free ids; real GPUs: must be given]")
@click.option("--drain", is_flag=True,
              help="Nodes with running jobs: drain them and wait until those jobs end, then remove them.")
@click.option("--force", is_flag=True,
              help="Nodes with running jobs: requeue the jobs (cancel those Slurm will not requeue) and remove "
                   "the nodes now; also remove nodes that queued jobs need.")
@click.option("--wait", type=float, default=None, metavar="SECONDS",
              help="How long to wait for nodes to come up or jobs to end  [default: the cluster's --wait]")
def command(name, nodes, add_, remove_, cpus, memory, gpus, drain, force, wait):
    """Add or remove nodes of a running cluster; queued and running jobs are kept.

    \b
    Examples:
      simcluster scale --add 2                 # two more nodes shaped like the last one
      simcluster scale --nodes 4               # grow (or shrink) to 4 nodes
      simcluster scale --remove node4          # refused while node4 runs a job ...
      simcluster scale --remove node4 --drain  # ... unless it may wait for it
      simcluster scale --remove node4 --force  # ... or requeue it

    New nodes are nodes like those `up` made: in slurm.conf, the hosts file, the
    partitions of the last node, `status`, stop/start, repair and faults. slurmctld is
    restarted without -c, so it keeps every job (docs/scale.md).
    """
    given = [flag for flag, v in (("--nodes", nodes), ("--add", add_), ("--remove", remove_)) if v is not None]
    if len(given) != 1:
        raise UsageError("say how to scale with exactly one of --nodes K, --add N, --remove NODE[,NODE]"
                         + (f" (got {' and '.join(given)})" if given else ""),
                         "e.g. simcluster scale --add 2")
    if (cpus or memory or gpus is not None) and (remove_ is not None):
        raise UsageError("--cpus, --memory and --gpus shape new nodes; they do not go with --remove")
    if drain and force:
        raise UsageError("give either --drain (wait for the jobs) or --force (requeue them), not both")
    # lazy: the cluster model loads only when the command runs, not for --help
    from provisioner.cluster.lifecycle import scale
    from provisioner.cluster.model.state import locked
    from provisioner.named_clusters import load
    from provisioner.config.parse import parse_gpu_list, parse_memory_mb
    mem = None
    if memory is not None:
        try:
            mem = parse_memory_mb(memory)
        except ValueError as exc:
            raise UsageError(f"--memory: {exc}") from None
    gpu_ids = None
    if gpus is not None:
        try:
            gpu_ids = [] if gpus.strip().lower() == "none" else parse_gpu_list(gpus)
        except ValueError as exc:
            raise UsageError(f"--gpus: {exc}") from None
    if cpus is not None and cpus < 1:
        raise UsageError(f"--cpus {cpus}: a node needs at least one CPU")
    name = name or "default"

    with locked(name):
        c = load(name)
        timeout = wait or c.spec.wait
        count, leaving = (add_, []) if add_ is not None else \
            (0, _node_list(remove_)) if remove_ is not None else scale.target(c.spec, nodes)
        if remove_ is not None and not leaving:
            raise UsageError("--remove: no node named", "e.g. --remove node3,node4")
        if count:
            joining = scale.new_nodes(c.spec, count, cpus=cpus, memory=mem, gpus=gpu_ids)
            _, line = scale.add(c, joining, progress_stderr, timeout)
        elif leaving:
            _, line = scale.remove(c, leaving, progress_stderr, timeout, force=force, drain=drain)
        else:
            line = f"cluster '{name}' has {len(c.spec.nodes)} nodes already (nothing to do)"
    click.echo(line)
