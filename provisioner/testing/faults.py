"""`slurm_faults`: `simcluster fault` for a test, every fault healed when the test ends.

Each call loads the cluster afresh and holds its lock, exactly like the `simcluster fault`
commands (both go through provisioner/named_clusters.py's Injector); the fixture remembers every cluster it was used
on, and at teardown runs `fault heal` on each and waits until all of its nodes are ready,
so the next test that reuses a session cluster finds it whole. The job faults
(``time_limit``, ``preempt``) call the same functions as `simcluster fault time-limit` and
`fault preempt`, without the lock as those do; they change only a job, and heal has
nothing to undo.
"""

from __future__ import annotations

from typing import Dict, List, Optional

from provisioner.cluster.faults.registry import FAULTS, JOB, Fault, fault_named
from provisioner.cluster.model.wait import nodes_ready
from provisioner.errors import ClusterNotFound, StartupError
from provisioner.named_clusters import Injector, load
from provisioner.testing.handle import SlurmCluster


class SlurmFaults:
    """One method per fault of cluster/faults/registry.py, as `simcluster fault` has them:
    kill / pause / resume / drain NODE, kill_controller, stop_accounting, heal, and the job
    faults time_limit / preempt (whose job may be a Job of slurm_cluster.sbatch, acting on
    its cluster); each returns `simcluster fault`'s message. ``cluster=`` picks another
    cluster (a factory's)."""

    def __init__(self, default: Optional[SlurmCluster]):
        self.default = default
        self._touched: Dict[str, Injector] = {}

    def _inj(self, cluster: Optional[SlurmCluster]) -> Injector:
        target = cluster or self.default
        if target is None:
            raise ValueError("slurm_faults: no cluster given and no slurm_cluster in this test")
        if target.name not in self._touched:
            self._touched[target.name] = Injector(target.name)
        return self._touched[target.name]

    def inject(self, verb: str, *args, cluster: Optional[SlurmCluster] = None, **kwargs) -> str:
        """Fault ``verb`` with ``args``, as `simcluster fault <verb>` does it."""
        if fault_named(verb).target == JOB and args:  # a Job: its id, and its cluster unless one is given
            cluster = cluster or getattr(args[0], "cluster", None)
            args = (_job_id(args[0]),) + args[1:]
        return self._inj(cluster).inject(verb, *args, **kwargs)

    def heal(self, cluster: Optional[SlurmCluster] = None, timeout: float = 120.0) -> str:
        """Undo every fault in effect and restart dead daemons in place (`simcluster fault heal`)."""
        return self._inj(cluster).heal(timeout)

    def heal_all(self, timeout: float = 120.0) -> List[str]:
        """Teardown: heal every cluster this fixture touched; return the messages."""
        done = []
        for name, inj in self._touched.items():
            try:
                done.append(inj.heal(timeout))
            except ClusterNotFound:
                continue  # a factory cluster already taken down
            wait_all_ready(name, timeout)
        return done


def _fault_method(fault: Fault):
    def method(self: SlurmFaults, *args, cluster: Optional[SlurmCluster] = None, **kwargs) -> str:
        return self.inject(fault.verb, *args, cluster=cluster, **kwargs)
    method.__name__ = method.__qualname__ = fault.method
    method.__doc__ = fault.help.splitlines()[0]
    return method


for _fault in FAULTS:  # kill, pause, ..., time_limit, preempt: one per row (heal above keeps its signature)
    if not hasattr(SlurmFaults, _fault.method):
        setattr(SlurmFaults, _fault.method, _fault_method(_fault))


def _job_id(job) -> str:
    """A job id, from a Job (slurm_cluster.sbatch's) or a number or string."""
    return str(getattr(job, "id", job))


def wait_all_ready(name: str, timeout: float) -> None:
    """Until every node of cluster ``name`` answers and can run work (AssertionError naming
    the nodes that cannot, after ``timeout``). `fault heal` waits only for the nodes it
    undrained to take jobs (the others just have to answer); the next test on a reused
    cluster must find every node usable."""
    try:
        nodes_ready(load(name), timeout)  # the wait `up` uses: what was last seen, the log tails
    except StartupError as exc:
        raise AssertionError(f"slurm_faults: cluster '{name}' healed, but {exc.message}\n{exc.details}") from None
