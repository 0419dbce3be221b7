"""A provider for unit tests: the Provider core written out with no daemon and no machine.

``FakeProvider`` keeps its cluster in a directory under the test's SIMCLUSTER_HOME and
hands out one ``ScriptedRunner`` (every key is "this host", as on the local backend):
commands are answered from a table, files from a dict, pids are alive when listed. So
the shared code (lifecycle, steps, status, logs) runs as it does on a real backend,
against answers the test chose.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

import pytest
from provisioner.cluster.model.command_runner import Result, Runner
from provisioner.cluster.model.handle import Cluster
from provisioner.cluster.model.placement import Placement
from provisioner.cluster.model.provider import Machines, Provider
from provisioner.cluster.model.state import ClusterState
from provisioner.config.types import ClusterSpec
from provisioner.nodepaths import NodePaths
from provisioner.paths import ClusterLayout
from provisioner.render import RenderInputs, default_ports
from tests.unit.conftest import spec_from


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A SIMCLUSTER_HOME of the test's own: the fake clusters' directories go there."""
    path = tmp_path / "h"
    monkeypatch.setenv("SIMCLUSTER_HOME", str(path))
    return path


class ScriptedRunner(Runner):
    """Commands answered from ``answers`` (argv prefix -> (rc, stdout, stderr)), files from
    ``files`` (path -> bytes), pids alive when in ``alive``; every command is recorded."""

    where = "this host"

    def __init__(self, answers: Optional[Dict[Tuple[str, ...], Tuple[int, str, str]]] = None,
                 files: Optional[Dict[str, bytes]] = None, alive: Iterable[int] = ()):
        self.answers = dict(answers or {})
        self.files = dict(files or {})
        self.alive: Set[int] = set(alive)
        self.calls: List[List[str]] = []
        self.killed: List[Tuple[List[int], int]] = []

    def run(self, argv: Sequence[str], env: Optional[Mapping[str, str]] = None, stdin: Optional[str] = None,
            timeout: float = 10.0, cwd: Optional[str] = None) -> Result:
        argv = [str(a) for a in argv]
        self.calls.append(argv)
        for prefix in sorted(self.answers, key=len, reverse=True):
            if tuple(argv[:len(prefix)]) == prefix:
                rc, out, err = self.answers[prefix]
                return Result(argv, rc, out, err)
        return Result(argv, 127, "", f"{argv[0]}: not scripted")

    def pids_alive(self, pids: Iterable[int], marker: Optional[str] = None) -> Dict[int, bool]:
        return {p: p in self.alive for p in pids}

    def read_file(self, path: str) -> Optional[bytes]:
        return self.files.get(path)

    def start_daemon(self, argv, log_path, env=None) -> int:
        raise AssertionError("a unit test starts no daemon")

    def kill(self, pids, sig=9) -> None:
        """Every signal kills (a daemon that exits on SIGTERM); recorded as (pids, sig)."""
        self.killed.append((sorted(pids), int(sig)))
        self.alive -= set(pids)

    def write_file(self, path, data, mode=0o644) -> None:
        self.files[path] = data

    def exec_prefix(self, cwd, interactive) -> List[str]:
        return []


class FakeProvider(Provider):
    """The core only (no capability): provision records ports and the placement."""

    name = "fake"
    poll_s = 0.01

    def __init__(self, runner: Optional[ScriptedRunner] = None, fail: Optional[BaseException] = None):
        self.the_runner = runner or ScriptedRunner()
        self.fail = fail  # raised by provision, after it recorded its ports
        self.deleted: List[str] = []
        self.provisioned: List[str] = []

    def provision(self, spec: ClusterSpec, state: ClusterState, progress) -> None:
        self.provisioned.append(spec.name)
        state.controller_port = 26817
        state.node_ports = {n.name: 26818 + i for i, n in enumerate(spec.nodes)}
        for sub in ("etc", "log", "run"):
            (Path(state.root) / sub).mkdir(parents=True, exist_ok=True)
        state.placement = self.placement(state).to_dict()
        if self.fail is not None:
            raise self.fail

    def placement(self, state: ClusterState) -> Placement:
        layout = state.layout
        spec = state.cluster_spec
        render = RenderInputs(paths=NodePaths.of_layout(layout), hostname="simhost", slurm_user="slurm",
                              controller_port=state.controller_port, node_ports=default_ports(spec))
        return Placement(render=render, daemon_user="slurm", munged_on=["controller"], config_dir=layout.etc,
                         job_root=layout.root, job_root_in_cluster=str(layout.root), python_bin="/usr/bin",
                         gpus_renumbered=False, dbd_port=26900, storage_port=26901,
                         usage="  eval \"$(simcluster env)\"")

    def runner(self, state: ClusterState, key: str) -> Runner:
        return self.the_runner

    def delete(self, state: ClusterState) -> List[int]:
        self.deleted.append(state.name)
        return []

    def discover(self, name: str) -> Optional[ClusterState]:
        return None


class FakeMachinesProvider(FakeProvider, Machines):
    """FakeProvider whose machines can be stopped as a whole (a container per cluster)."""

    def __init__(self, *args, running: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        self.running = running

    def machines_running(self, state: ClusterState) -> Dict[str, bool]:
        return {"controller": self.running}

    def start_machines(self, state: ClusterState, keys: List[str]) -> None:
        self.running = True


def make_state(name: str, provider: FakeProvider, **spec) -> ClusterState:
    """The state a finished provision leaves (placement stored), with the given spec keys."""
    s = spec_from({"name": name, "nodes": 2, **spec})
    layout = ClusterLayout.for_name(name)
    layout.root.mkdir(parents=True, exist_ok=True)
    st = ClusterState(name=name, backend=provider.name, spec=s.to_dict(), root=str(layout.root),
                      hostname="simhost", user="u", controller_port=0, node_ports={})
    provider.provision(s, st, lambda line: None) if provider.fail is None else None
    return st


def make_cluster(name: str, provider: FakeProvider, pids: Optional[Dict[str, int]] = None,
                 phase: str = "running", **spec) -> Cluster:
    """A Cluster of ``provider`` with daemons ``pids`` recorded (default: all of them, alive)."""
    st = make_state(name, provider, **spec)
    st.phase = phase
    if pids is None:
        pids = {"munged": 11, "slurmctld": 12, **{f"slurmd:{n['name']}": 20 + i
                                                 for i, n in enumerate(st.spec["nodes"])}}
        provider.the_runner.alive |= set(pids.values())
    st.pids = dict(pids)
    return Cluster(st, provider)
