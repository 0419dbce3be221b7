"""The faults (provisioner/cluster/faults/): the registry's rows and what is made of them
(the commands, Injector, slurm_faults), and each kind's inject on a fake provider (no
daemon: the runner records the signals and commands)."""

from __future__ import annotations

import signal
from typing import List

import pytest

from provisioner.cli.fault import command as fault_command
from provisioner.cluster.faults import daemons, drain, kill, pause
from provisioner.cluster.faults.record import active, check_can_inject
from provisioner.cluster.faults.registry import FAULTS, JOB, NODE, fault_named, heal, node_problems
from provisioner.cluster.model.provider import NodeProcesses
from provisioner.cluster.model.state import ClusterState
from provisioner.errors import UsageError
from provisioner.named_clusters import Injector
from provisioner.testing.faults import SlurmFaults
from tests.unit.cluster.fakes import FakeProvider, ScriptedRunner, home, make_cluster  # noqa: F401


class ProcessesProvider(FakeProvider, NodeProcesses):
    """A fake whose nodes' processes can be listed (local, docker)."""

    def node_pids(self, state: ClusterState, node: str) -> List[int]:
        return [31, 32, 33]


# -- the registry and what is made of it -------------------------------------------------------------
def test_rows_are_unique_and_every_undo_verb_is_a_row():
    verbs = [f.verb for f in FAULTS]
    assert len(verbs) == len(set(verbs))
    assert {f.undone_by for f in FAULTS} - {""} <= set(verbs)
    assert all(f.target in (NODE, "cluster", JOB) for f in FAULTS)
    assert fault_named("kill_controller").verb == "kill-controller"  # the Python name finds it too
    with pytest.raises(UsageError, match="unknown fault 'melt'"):
        fault_named("melt")


def test_commands_injector_and_slurm_faults_are_made_from_the_rows():
    assert sorted(fault_command.commands) == sorted(f.verb for f in FAULTS)
    for f in FAULTS:
        assert callable(getattr(Injector, f.method)) and callable(getattr(SlurmFaults, f.method)), f.verb
        cmd = fault_command.commands[f.verb]
        args = [p.name for p in cmd.params if p.param_type_name == "argument"]
        assert args == ([] if f.target == "cluster" and not f.node_optional else ["target"]), f.verb
        assert {o for p in cmd.params for o in p.opts} >= {p.flag for p in f.params}


def test_status_says_what_a_pause_makes_of_a_node():
    faults = [{"what": "pause", "node": "node2"}, {"what": "drain", "node": "node1"}, {"what": "kill-controller"}]
    assert node_problems(faults) == {"node2": "paused by 'simcluster fault pause'"}


# -- injecting -------------------------------------------------------------------------------------
def test_bad_input_is_one_line_and_changes_nothing(home):
    c = make_cluster("f1", ProcessesProvider())
    with pytest.raises(UsageError, match=r"unknown node 'node9' in cluster 'f1' \(nodes are: node1, node2\)"):
        kill.kill_node(c, "node9")
    assert c.state.faults == [] and c.provider.the_runner.killed == []
    stopped = make_cluster("f2", ProcessesProvider(), phase="stopped")
    with pytest.raises(UsageError, match="cluster 'f2' is stopped"):
        check_can_inject(stopped)
    with pytest.raises(UsageError, match="has no accounting"):
        daemons.stop_accounting(c)


def test_kill_sigkills_the_node_processes_and_records_it(home):
    c = make_cluster("f3", ProcessesProvider())
    assert kill.kill_node(c, "node1") == "killed node node1: slurmd and 2 job processes (SIGKILL)"
    assert c.provider.the_runner.killed == [([31, 32, 33], signal.SIGKILL)]
    assert [(f["what"], f["node"]) for f in ClusterState.load(c.state.layout).faults] == [("kill", "node1")]


def test_kill_needs_a_provider_that_lists_node_processes(home):
    c = make_cluster("f4", FakeProvider())
    assert fault_named("kill").needs is NodeProcesses
    with pytest.raises(UsageError, match="the fake backend cannot list a node's processes"):
        kill.kill_node(c, "node1")


def test_pause_stops_the_processes_once(home):
    c = make_cluster("f5", ProcessesProvider())
    assert pause.pause_node(c, "node2").startswith("paused node node2: SIGSTOP to slurmd")
    assert c.provider.the_runner.killed == [([31, 32, 33], signal.SIGSTOP)]
    assert active(c, "pause", "node2")[0]["pids"] == [31, 32, 33]
    with pytest.raises(UsageError, match="node node2 is already paused"):
        pause.pause_node(c, "node2")


def test_kill_controller_signals_only_a_live_slurmctld(home):
    c = make_cluster("f6", FakeProvider())
    assert daemons.kill_controller(c).startswith("killed slurmctld (SIGKILL)")
    assert c.provider.the_runner.killed == [([12], signal.SIGKILL)]
    assert [f["what"] for f in c.state.faults] == ["kill-controller"]
    with pytest.raises(UsageError, match="slurmctld is not running"):
        daemons.kill_controller(c)


def test_drain_and_heals_undo(home):
    runner = ScriptedRunner({("scontrol", "update"): (0, "", "")})
    c = make_cluster("f7", FakeProvider(runner))
    assert drain.drain_node(c, "node1", "maintenance") == "drained node node1 (reason: maintenance)"
    assert runner.calls[-1] == ["scontrol", "update", "nodename=node1", "state=drain", "reason=maintenance"]
    assert fault_named("drain").undo is drain.undrain
    assert drain.undrain(c, active(c, "drain")[0]) == "undrained node1"
    assert runner.calls[-1] == ["scontrol", "update", "nodename=node1", "state=resume"]


def test_heal_refuses_a_stopped_cluster(home):
    c = make_cluster("f8", FakeProvider(), phase="stopped")
    with pytest.raises(UsageError, match="cluster 'f8' is stopped"):
        heal(c)


def test_every_fault_is_documented():
    from provisioner.paths import REPO_ROOT
    doc = (REPO_ROOT / "docs" / "faults.md").read_text()
    missing = [f.verb for f in FAULTS if f"fault {f.verb}" not in doc]
    assert not missing, f"docs/faults.md does not show: {missing} (add a row to its table of fault commands)"
