"""`fault gpu NODE` (provisioner/cluster/faults/gpu.py) on a fake provider: the state file and
the kernel-log line it writes, the job processes a fatal fault kills, its refusals, and
heal's undo (the health check's drain undone, an admin's kept), `fault heal NODE`."""

from __future__ import annotations

import json
from typing import List

import pytest
from click.testing import CliRunner

from provisioner.cli.fault import command as fault_command
from provisioner.cluster.faults import gpu
from provisioner.cluster.faults.record import active
from provisioner.cluster.faults.registry import fault_named, heal
from provisioner.cluster.model.provider import NodeProcesses
from provisioner.cluster.model.state import ClusterState
from provisioner.errors import UsageError
from tests.unit.cluster.fakes import FakeProvider, ScriptedRunner, home, make_cluster  # noqa: F401

GPU_NODES = {"fakeGpus": True, "nodes": [{"name": "node1", "gpus": [0, 1]}, {"name": "node2", "gpus": [2, 3]}],
             "healthCheck": {"interval": 5}}


class ProcessesProvider(FakeProvider, NodeProcesses):
    def node_pids(self, state: ClusterState, node: str) -> List[int]:
        return [31, 32, 33, 34]


def environ(**env) -> bytes:
    return b"\0".join(f"{k}={v}".encode() for k, v in env.items()) + b"\0"


def faults_of(c) -> dict:
    return json.loads(gpu.faults_file(c).read_text())


def test_xid_79_writes_the_state_file_and_the_kernel_log(home):
    c = make_cluster("g1", FakeProvider(), **GPU_NODES)
    out = gpu.inject_gpu(c, "node1", gpu=1, xid=79)
    assert out.splitlines()[0].startswith("node node1 gpu1: Xid 79 (GPU has fallen off the bus)")
    assert "the health check drains node1 within 5 s" in out
    entry = faults_of(c)["node1"]["1"]
    assert {k: entry[k] for k in ("xid", "ecc_errors", "lost")} == {"xid": 79, "ecc_errors": 0, "lost": False}
    assert entry["since"].endswith("+00:00")
    kmsg = (c.placement.config_dir / "kmsg" / "node1").read_text()
    assert "NVRM: Xid (PCI:0000:2A:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus." in kmsg
    assert [f["node"] for f in active(c, "gpu")] == ["node1"]
    gpu.inject_gpu(c, "node1", gpu=0, ecc=2)  # a second GPU of the node: one record, both in the file
    assert len(active(c, "gpu")) == 1 and faults_of(c)["node1"]["0"]["ecc_errors"] == 2
    gpu.inject_gpu(c, "node2", xid=48)  # a double-bit ECC error counts as one
    assert faults_of(c)["node2"]["0"]["ecc_errors"] == 1


def test_a_fatal_fault_kills_the_step_tasks_on_that_gpu(home):
    files = {"/proc/31/environ": environ(SLURM_JOB_ID=7, SLURM_JOB_GPUS="0"),  # the batch script
             "/proc/32/environ": environ(SLURM_JOB_ID=7, SLURM_STEP_ID=0, SLURM_STEP_GPUS="0"),  # its step's task
             "/proc/33/environ": environ(SLURM_JOB_ID=8, SLURM_STEP_ID=0, SLURM_STEP_GPUS="1"),  # another GPU
             "/proc/32/comm": b"python3\n"}
    runner = ScriptedRunner(files=files)
    c = make_cluster("g2", ProcessesProvider(runner), **GPU_NODES)
    out = gpu.inject_gpu(c, "node1", gpu=0, xid=79)
    assert runner.killed == [([32], 9)]
    assert "killed 1 job processes on gpu0" in out
    assert "pid=32, name=python3" in (c.placement.config_dir / "kmsg" / "node1").read_text()
    runner.killed.clear()
    runner.files.pop("/proc/32/environ")  # no step holds it: the batch step's processes go
    gpu.inject_gpu(c, "node1", gpu=0, lost=True)
    assert runner.killed == [([31], 9)]
    runner.killed.clear()
    gpu.inject_gpu(c, "node1", gpu=1, ecc=1)  # ECC errors alone kill nothing
    gpu.inject_gpu(c, "node1", gpu=1, xid=13)
    assert runner.killed == []


@pytest.mark.parametrize("spec, kwargs, says", [
    ({"nodes": 2}, {"xid": 79}, "node node1 of cluster 'g3' has no GPUs: `fault gpu` injects faults into fake GPUs"),
    (GPU_NODES, {}, "give one fault: --xid N, --ecc N or --lost"),
    (GPU_NODES, {"xid": 79, "lost": True}, "give one fault"),
    (GPU_NODES, {"gpu": 2, "xid": 79}, "node node1 has GPUs 0-1, not 2"),
    (GPU_NODES, {"ecc": 0}, "--ecc takes a number of uncorrectable ECC errors of at least 1"),
    (GPU_NODES, {"xid": 0}, "--xid takes an Xid of 1-999, not 0"),
])
def test_bad_input_is_one_line_and_changes_nothing(home, spec, kwargs, says):
    c = make_cluster("g3", FakeProvider(), **spec)
    with pytest.raises(UsageError) as err:
        gpu.inject_gpu(c, "node1", **kwargs)
    assert says in err.value.message and "\n" not in err.value.message
    assert not gpu.faults_file(c).exists() and c.state.faults == []


def test_a_cluster_without_health_check_says_nothing_drains(home):
    c = make_cluster("g4", FakeProvider(), **{**GPU_NODES, "healthCheck": False})
    assert "runs no health check" in gpu.inject_gpu(c, "node2", xid=79)
    assert "health checks leave the node in service" in gpu.inject_gpu(c, "node2", xid=31)


@pytest.mark.parametrize("reason, resumed", [("gpu0: Xid 79 (GPU has fallen off the bus)", True),
                                             ("maintenance", False)])
def test_heal_clears_the_fault_and_resumes_only_the_health_checks_drain(home, reason, resumed):
    runner = ScriptedRunner({("sinfo",): (0, f"drained|{reason}\n", ""), ("scontrol", "update"): (0, "", "")})
    c = make_cluster("g5", FakeProvider(runner), **GPU_NODES)
    gpu.inject_gpu(c, "node1", xid=79)
    gpu.inject_gpu(c, "node2", lost=True)
    assert fault_named("gpu").undo is gpu.clear_gpu
    said = gpu.clear_gpu(c, active(c, "gpu", "node1")[0])
    assert list(faults_of(c)) == ["node2"]  # node1's fault cleared, node2's kept
    resumes = [call for call in runner.calls if call[:2] == ["scontrol", "update"]]
    assert resumes == ([["scontrol", "update", "nodename=node1", "state=resume"]] if resumed else [])
    assert said.startswith("undrained node1" if resumed else "cleared node1's GPU fault")


def test_heal_node_undoes_only_that_nodes_faults(home, monkeypatch):
    runner = ScriptedRunner({("sinfo",): (0, "idle|none\n", ""), ("scontrol", "update"): (0, "", "")})
    c = make_cluster("g6", FakeProvider(runner), **GPU_NODES)
    gpu.inject_gpu(c, "node1", xid=79)
    gpu.inject_gpu(c, "node2", xid=79)
    monkeypatch.setattr("provisioner.cluster.faults.registry.repair", lambda c, progress, timeout: [])
    monkeypatch.setattr("provisioner.cluster.faults.registry._wait_usable", lambda *a: None)
    said = heal(c, timeout=5, node="node1")
    assert "cleared node1's GPU fault" in said and "node2" not in said
    assert [f["node"] for f in c.state.faults] == ["node2"] and list(faults_of(c)) == ["node2"]
    with pytest.raises(UsageError, match="unknown node 'node9'"):
        heal(c, timeout=5, node="node9")


def test_the_command_takes_its_options_and_heal_an_optional_node():
    gpu_help = CliRunner().invoke(fault_command, ["gpu", "--help"]).output
    for text in ("--xid XID", "--ecc N", "--lost", "--gpu N", "simcluster fault gpu node1 --xid 79"):
        assert text in gpu_help
    assert "fault heal [OPTIONS] [NODE]" in CliRunner().invoke(fault_command, ["heal", "--help"]).output
