"""``--max-nodes N``: a subset of a production cluster's nodes that keeps names and shapes.

Every partition keeps at least one node of each distinct shape it has (CPUs, memory, GPU
count and type, features), picked in the partition's own order; the rest of the budget
goes to the partitions in turn (each takes its next node), so a 4-node header still fits
a partition when N allows it. Nodes keep their production names.
"""

from __future__ import annotations

from typing import Dict, Hashable, List, Optional, Sequence, Tuple


def needed(partitions: Sequence[Tuple[str, Sequence[str]]], shape_of: Dict[str, Hashable]) -> List[str]:
    """Nodes, in partition order, that leave every partition one node of each of its
    shapes (a node already picked for another partition counts for this one too)."""
    keep: List[str] = []
    kept = set()
    for _, members in partitions:
        have = {shape_of[n] for n in members if n in kept}
        for n in members:
            s = shape_of[n]
            if s not in have:
                have.add(s)
                keep.append(n)
                kept.add(n)
    return keep


def shapes_per_partition(partitions: Sequence[Tuple[str, Sequence[str]]],
                         shape_of: Dict[str, Hashable]) -> Dict[str, int]:
    """{partition: number of distinct shapes} (for the error that says what N needs)."""
    return {name: len({shape_of[n] for n in members}) for name, members in partitions}


def select(order: Sequence[str], partitions: Sequence[Tuple[str, Sequence[str]]],
           shape_of: Dict[str, Hashable], max_nodes: int) -> Optional[List[str]]:
    """The nodes a mirror of at most ``max_nodes`` keeps, in the conf's ``order``; None when
    ``max_nodes`` is fewer than ``needed`` gives."""
    keep = needed(partitions, shape_of)
    if len(keep) > max_nodes:
        return None
    kept = set(keep)
    cursors = [0] * len(partitions)
    progressed = True
    while len(kept) < max_nodes and progressed:
        progressed = False
        for i, (_, members) in enumerate(partitions):
            if len(kept) >= max_nodes:
                break
            while cursors[i] < len(members) and members[cursors[i]] in kept:
                cursors[i] += 1
            if cursors[i] < len(members):
                kept.add(members[cursors[i]])
                progressed = True
    return [n for n in order if n in kept]
