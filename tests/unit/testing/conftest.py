"""Fakes for the pytest plugin's modules: a Slurm client that answers from a script of
states, and a Cluster with just the pieces SlurmCluster reads. No daemon is started."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Dict, List, Optional

import pytest

from provisioner.cluster.model.command_runner import Result


class FakeClient:
    """show_job answers from ``jobs`` (a list of dicts per job id, the last one repeats);
    run answers from ``outputs`` by the command's first word; every call is recorded."""

    poll_s = 0.01

    def __init__(self, jobs: Optional[Dict[str, List[Dict[str, str]]]] = None,
                 outputs: Optional[Dict[str, Result]] = None, job_id: str = "42"):
        self.jobs = jobs or {}
        self.outputs = outputs or {}
        self.job_id = job_id
        self.calls: List[tuple] = []

    def show_job(self, job_id: str) -> Dict[str, str]:
        self.calls.append(("show_job", job_id))
        seq = self.jobs.get(job_id, [{}])
        return dict(seq.pop(0) if len(seq) > 1 else seq[0])

    def run(self, argv, timeout=None, env=None, cwd=None, stdin=None) -> Result:
        self.calls.append(("run", list(argv)))
        return self.outputs.get(argv[0], Result(list(argv), 1, "", "not scripted"))

    def scancel(self, *job_ids: str) -> None:
        self.calls.append(("scancel", *job_ids))

    def sbatch(self, script: str, args=(), env=None) -> str:
        self.calls.append(("sbatch", script, list(args), env))
        return self.job_id


def fake_cluster(job_root: Path, job_root_in_cluster: str, client: FakeClient, accounting: bool = False,
                 name: str = "c1"):
    """The parts of provisioner.cluster.model.handle.Cluster that SlurmCluster and Job read."""
    placement = SimpleNamespace(job_root=job_root, job_root_in_cluster=job_root_in_cluster,
                                client_env={"SLURM_CONF": f"{job_root_in_cluster}/etc/slurm.conf"})
    return SimpleNamespace(name=name, placement=placement, client=client,
                           state=SimpleNamespace(backend="local"), node_names=["node1", "node2"],
                           spec=SimpleNamespace(accounting=accounting))


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A SIMCLUSTER_HOME of this test's own (owners' records go there)."""
    path = tmp_path / "home"
    monkeypatch.setenv("SIMCLUSTER_HOME", str(path))
    return path
