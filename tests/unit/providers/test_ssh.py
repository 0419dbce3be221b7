"""The SSH provider without a host: a scripted controller answers what Slurm would."""

from __future__ import annotations

import base64
import dataclasses
from pathlib import Path
from types import SimpleNamespace

import pytest

from provisioner.cluster import accounting
from provisioner.cluster.runner import Result, Runner
from provisioner.cluster.slurm import SlurmClient
from provisioner.cluster.status import ClusterStatus, DaemonStatus, NodeStatus
from provisioner.providers.ssh.cluster import ControllerUnavailable, read_cluster
from provisioner.providers.ssh.files import SSHJobFiles
from provisioner.providers.ssh.runner import remote_command
from provisioner.providers.ssh.status import ssh_cluster_status

CONFIG = """Configuration data as of 2026-11-23T10:00:00
ClusterName             = dt1
SLURM_CONF              = /etc/slurm/slurm.conf
SlurmctldPort           = 6817
SlurmdPort              = 6818
StateSaveLocation       = /var/lib/slurm/slurmctld
TaskProlog              = /etc/slurm/task_prolog.sh
"""
NODES = ("NodeName=node1 Arch=x86_64 CPUTot=4 RealMemory=4096 State=IDLE NodeAddr=node1 Port=6818\n"
         "NodeName=node2 Arch=x86_64 CPUTot=4 RealMemory=4096 State=IDLE NodeAddr=node2\n")
GRES = "# gres.conf\nNodeName=node1 Name=gpu File=/dev/nvidia0\nNodeName=node2 Name=gpu File=/dev/nvidia1\n"


class Controller(Runner):
    """Answers like the controller of a deployed 2-node cluster with the roles' fake GPUs."""

    where = "ctl"

    def __init__(self, slurmctld_up: bool = True, files=None, node_files=None):
        self.up = slurmctld_up
        self.files = {"/etc/slurm/gres.conf": GRES.encode(), **(files or {})}
        self.node_files = node_files or {}  # path -> text, as the compute nodes have it
        self.calls = []

    def run(self, argv, env=None, stdin=None, timeout=30.0, cwd=None):
        argv = list(argv)
        self.calls.append(argv)
        answer = self._answer(argv)
        if answer is None:
            return Result(argv, 1, "", f"{argv[0]}: error: Unable to contact slurm controller")
        return Result(argv, 0, answer, "")

    def _answer(self, argv):
        if argv[0] == "sh":
            return ""  # munge round trip, mkdir
        if argv[0] == "srun":
            script = argv[argv.index("-c") + 1]
            if "nvidia/version" in script:
                return "node1 fake\nnode2 fake\n"
            if "SIMCLUSTER_FILE" in script:
                text = self.node_files.get(argv[-1])
                return "" if text is None else f"SIMCLUSTER_FILE {base64.b64encode(text.encode()).decode()}\n"
            return ""
        if not self.up:
            return None
        return {
            ("scontrol", "show", "config"): CONFIG,
            ("scontrol", "ping"): "Slurmctld(primary) at ctl is UP\n",
            ("scontrol", "show", "nodes", "--oneliner"): NODES,
            ("scontrol", "show", "partition", "--oneliner"):
                "PartitionName=gpu AllowGroups=ALL Default=YES MaxTime=UNLIMITED Nodes=node[1-2] State=UP\n",
            ("scontrol", "show", "hostnames", "node[1-2]"): "node1\nnode2\n",
        }.get(tuple(argv)) or ("node1|idle|none\nnode2|idle|none\n" if argv[0] == "sinfo" else None)

    def read_file(self, path):
        return self.files.get(path)

    def write_file(self, path, data, mode=0o644):
        self.files[path] = data


def keys(d):
    return set(d)


def test_status_over_ssh_has_the_same_keys_as_every_backend():
    st = ssh_cluster_status(SlurmClient(Controller()), "root@ctl").to_dict()
    assert keys(st) == {f.name for f in dataclasses.fields(ClusterStatus)}
    assert keys(st["controller"]) == keys(st["munged"]) == {f.name for f in dataclasses.fields(DaemonStatus)}
    assert all(keys(n) == {f.name for f in dataclasses.fields(NodeStatus)} for n in st["nodes"])
    disabled = accounting.health(SimpleNamespace(spec=SimpleNamespace(accounting=False)), {})
    assert st["accounting"] == disabled


def test_status_over_ssh_reads_nodes_gpus_and_fake_devices():
    st = ssh_cluster_status(SlurmClient(Controller()), "root@ctl")
    assert st.healthy and st.backend == "ssh" and st.name == "dt1" and st.fake_gpus
    assert st.controller.responding and st.controller.port == 6817 and st.munged.alive
    assert [(n.name, n.state, n.gpus, n.cpus, n.memory_mb, n.port, n.slurmd_alive) for n in st.nodes] == [
        ("node1", "idle", [0], 4, 4096, 6818, True), ("node2", "idle", [1], 4, 4096, 6818, True)]


def test_status_over_ssh_of_a_dead_controller_is_unhealthy_not_an_error():
    st = ssh_cluster_status(SlurmClient(Controller(slurmctld_up=False)), "root@ctl")
    assert not st.healthy and st.phase == "stopped" and not st.controller.alive and st.nodes == []


def test_verify_spec_is_rebuilt_from_the_controller():
    cluster = read_cluster(SlurmClient(Controller()), "root@ctl")
    spec = cluster.spec(fake_gpus=True)
    assert spec.backend == "ssh" and spec.name == "dt1" and not spec.accounting and spec.fake_gpus
    assert [(n.name, n.gpus, n.cpus, n.memory) for n in spec.nodes] == [("node1", (0,), 4, 4096),
                                                                         ("node2", (1,), 4, 4096)]
    assert [(p.name, p.nodes, p.default) for p in spec.partitions] == [("gpu", ("node1", "node2"), True)]
    assert cluster.task_prolog and not cluster.device_files_fake()


def test_a_controller_that_does_not_answer_is_one_line():
    with pytest.raises(ControllerUnavailable) as exc:
        read_cluster(SlurmClient(Controller(slurmctld_up=False)), "root@ctl")
    assert "slurmctld on root@ctl does not answer" in exc.value.one_line() and "\n" not in exc.value.one_line()


def test_remote_command_quotes_env_cwd_and_timeout():
    line = remote_command(["sbatch", "a b.sh"], {"ROLE": "x y"}, "/tmp/d ir", 30)
    assert line == "cd '/tmp/d ir' && timeout -k 5 30 env 'ROLE=x y' sbatch 'a b.sh'"
    assert remote_command(["true"]) == "true"


def test_job_files_go_to_every_node_and_are_read_from_whichever_has_them():
    ctl = Controller(node_files={"/tmp/r/out-7.txt": "hello from node2\n"})
    client = SlurmClient(ctl)
    spec = read_cluster(client, "ctl").spec(fake_gpus=True)
    files = SSHJobFiles(client, spec, root=Path("/tmp/r"))
    files.make_dir(Path("/tmp/r/check"))
    srun = [c for c in ctl.calls if c[0] == "srun"]
    assert srun and "--nodelist=node1,node2" in srun[-1] and srun[-1][-1] == "/tmp/r/check"
    files.write_text(Path("/tmp/r/check/job.sh"), "#!/bin/sh\n", 0o755)
    assert files.read_text(Path("/tmp/r/check/job.sh")) == "#!/bin/sh\n"  # on the controller
    assert files.read_text(Path("/tmp/r/out-7.txt")) == "hello from node2\n"  # on a node
    assert files.read_text(Path("/tmp/r/missing.txt")) is None
    assert files.cluster_path(Path("/tmp/r/check")) == "/tmp/r/check"
