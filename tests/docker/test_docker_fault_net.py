"""`fault net NODE` on the docker backend. A --privileged cluster (setting a container's link
down needs CAP_NET_ADMIN): the node's eth0 goes down inside its container and heal, `stop`
and a repairing `up` bring it back first, so the node answers after each (skipped where the
engine cannot start --privileged containers at all). An unprivileged cluster: refused with
one line, nothing recorded."""

from __future__ import annotations

import subprocess

import pytest

from tests.conftest import wait_for
from tests.docker.conftest import docker_module_cluster

UP_ARGS = ["--backend", "docker", "--privileged", "--nodes", "2", "--fast-failure"]


@pytest.fixture(scope="module")
def dc(docker_engine):
    try:
        with docker_module_cluster(*UP_ARGS) as c:
            yield c
    except AssertionError as exc:
        if "operation not permitted" not in str(exc) or "exited" not in str(exc).splitlines()[0]:
            raise
        # A sandboxed engine (its own capability bounding set lacks some) cannot start
        # --privileged containers at all (as in tests/docker/test_docker_cgroups.py).
        pytest.skip(f"this docker engine cannot run --privileged containers: {str(exc).strip().splitlines()[-1]}")


def test_an_unprivileged_cluster_refuses_it_with_one_line(docker_engine):
    with docker_module_cluster("--backend", "docker", "--nodes", "1") as c:
        bad = c.cli("fault", "net", "node1", check=False)
        assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
        assert "setting node1's network down failed" in bad.stderr
        assert c.status()["faults"] == []
        assert "UP" in link_flags(c, "node1")


def link_flags(dc, node: str) -> list:
    out = subprocess.run(["docker", "exec", f"simcluster-{dc.name}-{node}", "ip", "-o", "link", "show", "eth0"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=30).stdout
    return out.split("<", 1)[1].split(">", 1)[0].split(",") if "<" in out else [out]


def node_state(dc, node: str) -> str:
    return dc.slurm("sinfo", "-h", "-N", "-n", node, "-o", "%T", check=False).stdout.strip()


def test_net_heal_stop_and_repair_bring_the_link_back(dc):
    assert "took node node2 off the network" in dc.cli("fault", "net", "node2").stdout
    assert "UP" not in link_flags(dc, "node2")
    assert [f["what"] for f in dc.status()["faults"]] == ["net"]
    assert "node2 back on the network" in dc.cli("fault", "heal").stdout
    assert "UP" in link_flags(dc, "node2")
    wait_for("node2 idle after the heal", lambda: node_state(dc, "node2") == "idle", timeout=120)

    dc.cli("fault", "net", "node2")
    stopped = dc.cli("stop").stdout
    assert "node2 back on the network" in stopped, stopped
    assert dc.status()["faults"] == []
    dc.cli("start", timeout=600)
    wait_for("node2 idle after the start", lambda: node_state(dc, "node2") == "idle", timeout=120)

    dc.cli("fault", "net", "node1")
    repaired = dc.cli("up", *UP_ARGS, timeout=600).stdout
    assert "node1 back on the network" in repaired, repaired
    assert "UP" in link_flags(dc, "node1")
    wait_for("node1 idle after the repair", lambda: node_state(dc, "node1") == "idle", timeout=120)
    out = dc.slurm("srun", "-N2", "hostname", check=False).stdout.split()
    assert sorted(out) == ["node1", "node2"], out
