"""Which partitions reach which nodes: a job runs in one partition, so reaching every node
takes one job per partition in covering_partitions (verify's checks, and the SSH job-file
transport's one-task-per-node sruns)."""

from __future__ import annotations

from typing import List, Optional, Tuple

from provisioner.config.types import ClusterSpec


def covering_partitions(spec: ClusterSpec) -> List[Tuple[Optional[str], List[str]]]:
    """Partitions whose nodes together cover every node, the default one first.

    A job runs in one partition, so "srun over all nodes" means one job per partition
    needed to reach them all (usually just the default partition). Nodes in no
    partition come last with partition None (Slurm cannot run anything there).
    """
    names = [n.name for n in spec.nodes]
    parts = sorted(spec.partitions, key=lambda p: (not p.default, -len(p.nodes)))
    if not parts:
        return [(None, names)]
    left, chosen = set(names), []
    for p in parts:
        if left & set(p.nodes):
            chosen.append((p.name, [n for n in names if n in p.nodes]))
            left -= set(p.nodes)
    if left:  # nodes in no partition: Slurm cannot run anything there; show it
        chosen.append((None, sorted(left)))
    return chosen
