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

from provisioner.cluster.faults import kinds as faults
from provisioner.cluster.model.wait import nodes_ready
from provisioner.named_clusters import Injector, load
from provisioner.errors import ClusterNotFound, StartupError
from provisioner.testing.handle import SlurmCluster


class SlurmFaults:
    """kill / pause / resume / drain NODE, kill_controller, stop_accounting, heal, and the
    job faults time_limit / preempt; each returns `simcluster fault`'s message.
    ``cluster=`` picks another cluster (a factory's)."""

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

    def kill(self, node: str, cluster: Optional[SlurmCluster] = None) -> str:
        """SIGKILL the node's slurmd, slurmstepd and job tasks (a crashed host)."""
        return self._inj(cluster).kill(node)

    def pause(self, node: str, cluster: Optional[SlurmCluster] = None) -> str:
        return self._inj(cluster).pause(node)

    def resume(self, node: str, cluster: Optional[SlurmCluster] = None) -> str:
        return self._inj(cluster).resume(node)

    def drain(self, node: str, reason: str = "slurm_faults", cluster: Optional[SlurmCluster] = None) -> str:
        return self._inj(cluster).drain(node, reason)

    def kill_controller(self, cluster: Optional[SlurmCluster] = None) -> str:
        return self._inj(cluster).kill_controller()

    def stop_accounting(self, cluster: Optional[SlurmCluster] = None) -> str:
        return self._inj(cluster).stop_accounting()

    def time_limit(self, job_id, seconds: int, cluster: Optional[SlurmCluster] = None) -> str:
        """`simcluster fault time-limit JOB --in SECONDS`: the running job ends (TIMEOUT) in about
        ``seconds``, its --signal at its offset before that. ``job_id``: a number, or a Job
        (slurm_cluster.sbatch's), whose cluster it then acts on."""
        return faults.time_limit(self._cluster(cluster, job_id), _job_id(job_id), int(seconds))

    def preempt(self, job_id, mode: Optional[str] = None, cluster: Optional[SlurmCluster] = None) -> str:
        """`simcluster fault preempt JOB [--mode requeue|cancel]`: preempted as its QoS /
        partition / cluster PreemptMode says (``mode`` replaces it), after GraceTime and the
        signal; returns once it is requeued or cancelled."""
        return faults.preempt(self._cluster(cluster, job_id), _job_id(job_id), mode)

    def _cluster(self, cluster: Optional[SlurmCluster], job):
        """The loaded cluster a job fault acts on: ``cluster``, the Job's, or the default."""
        return load(self._inj(cluster or getattr(job, "cluster", None)).name)

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
