"""The daemons a docker cluster's containers start themselves (BootsDaemons): the plan is
the steps' own, and the boot script starts each daemon where start_daemon finds it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

from provisioner.cluster.lifecycle.steps import Boot, boot_plan
from provisioner.cluster.model.handle import Cluster
from provisioner.cluster.model.placement import CONTROLLER
from provisioner.cluster.model.state import ClusterState
from provisioner.cluster.services import daemons
from provisioner.providers.docker.boot import CONTROLLER_READY, boot_script
from provisioner.providers.docker.exec_runner import boot_id
from provisioner.providers.docker.provider import DockerProvider
from tests.unit.conftest import spec_from


def _cluster(tmp_path, **spec) -> Cluster:
    s = spec_from({"backend": "docker", "nodes": 2, **spec})
    state = ClusterState(name=s.name, backend="docker", spec=s.to_dict(), root=str(tmp_path / "c"), hostname="h",
                         user="u", controller_port=6817, node_ports={n.name: 6818 for n in s.nodes})
    state.placement = DockerProvider().placement(state).to_dict()
    return Cluster(state, DockerProvider())


def test_the_plan_is_what_the_steps_start_in_their_order(tmp_path):
    c = _cluster(tmp_path, gpus=[0, 1], fakeGpus=True)
    plan = boot_plan(c)
    assert sorted(plan) == sorted([CONTROLLER, "node1", "node2"])
    assert [b.launch.key for b in plan[CONTROLLER]] == ["munged", "slurmctld"]
    assert [b.launch.key for b in plan["node2"]] == ["munged:node2", "slurmd:node2"]
    # The very launches the steps start (command line, environment, log): adopted as they are.
    assert plan["node2"][0].launch == daemons.munged_launch(c, "node2")
    assert plan["node2"][1].launch == daemons.slurmd_launch(c, "node2")
    assert plan[CONTROLLER][1].launch == daemons.slurmctld_launch(c)
    munge_key, socket_path = c.paths.munge_key, c.paths.munge_socket
    assert plan["node1"][0].needs == (munge_key,)
    ctld = plan[CONTROLLER][1]
    assert ctld.needs == (socket_path,) and ctld.port == 6817 and not ctld.after_controller
    slurmd = plan["node2"][1]
    # A slurmd waits for munged, the controller and its fake GPU devices (made by the fake-gpus step).
    gpus = c.spec.node("node2").gpus
    assert slurmd.after_controller and slurmd.needs == (socket_path, *(f"/dev/nvidia{g}" for g in gpus))


def test_with_accounting_only_munged_boots(tmp_path):
    # slurmctld comes after MariaDB and slurmdbd, which their steps start.
    plan = boot_plan(_cluster(tmp_path, accounting=True))
    assert {k: [b.launch.key for b in v] for k, v in plan.items()} == {
        CONTROLLER: ["munged"], "node1": ["munged:node1"], "node2": ["munged:node2"]}


def _cmdline(pid: int) -> bytes:
    with open(f"/proc/{pid}/cmdline", "rb") as fh:
        return fh.read()


def test_the_script_waits_starts_records_and_announces(tmp_path):
    """Run a boot script here: the first daemon waits for a file, the second listens and is
    announced; each pid file, named by boot_id, holds the daemon's own pid."""
    need, ready, log = tmp_path / "key", tmp_path / "ready", tmp_path / "d.log"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    listener = daemons.Launch("slurmctld", [sys.executable, "-c", "import socket,time; s=socket.socket(); "
                                            f"s.bind(('127.0.0.1',{port})); s.listen(); time.sleep(60)"],
                              {"SIMCLUSTER_TEST_MARK": "1"}, str(log))
    first = daemons.Launch("munged", ["sleep", "61"], {"SIMCLUSTER_TEST_MARK": "1"}, str(log))
    script = boot_script("controller", [Boot(first, needs=(str(need),)), Boot(listener, port=port)], ready=str(ready))
    boot_dir = tmp_path / "boot"
    boot_dir.mkdir()
    proc = subprocess.Popen(["sh", "-c", script, "sh", str(boot_dir)])
    pids = []
    try:
        time.sleep(0.3)
        assert list(boot_dir.iterdir()) == []  # waiting for the key: nothing started yet
        need.write_text("k")
        assert proc.wait(timeout=30) == 0
        assert ready.exists()
        for launch in (first, listener):
            pid = int((boot_dir / f"{boot_id(launch.argv, launch.log, launch.env)}.pid").read_text())
            pids.append(pid)
            assert _cmdline(pid) == ("\0".join(launch.argv) + "\0").encode()
            with open(f"/proc/{pid}/environ", "rb") as fh:
                assert b"SIMCLUSTER_TEST_MARK=1" in fh.read().split(b"\0")
            assert os.getsid(pid) == pid  # a session of its own, as start_daemon's setsid
    finally:
        proc.kill()
        for pid in pids:
            os.kill(pid, signal.SIGKILL)


def test_a_node_waits_for_the_controller(tmp_path):
    ready = tmp_path / "ready"
    slurmd = daemons.Launch("slurmd:node1", ["sleep", "62"], {}, str(tmp_path / "d.log"))
    boot_dir = tmp_path / "boot"
    boot_dir.mkdir()
    proc = subprocess.Popen(["sh", "-c", boot_script("node1", [Boot(slurmd, after_controller=True)],
                                                      ready=str(ready)), "sh", str(boot_dir)])
    try:
        time.sleep(0.3)
        assert list(boot_dir.iterdir()) == []
        ready.touch()
        assert proc.wait(timeout=30) == 0
        pid = int((boot_dir / f"{boot_id(slurmd.argv, slurmd.log, slurmd.env)}.pid").read_text())
        os.kill(pid, signal.SIGKILL)
    finally:
        proc.kill()
    assert CONTROLLER_READY.startswith("/shared/")  # the one directory every container sees
