"""`fault net NODE` on a real 2-node local cluster (--fast-failure): the node's network goes
away while its slurmd runs on, slurmctld marks it DOWN (not responding) while node1 keeps
running jobs, and heal brings the link back and the node idle again; `stop` and a repairing
`up` bring it back first too, so the node answers after `start` and after the repair."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.conftest import module_cluster, run_cli, wait_for

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.geteuid() != 0, reason="a network namespace per node needs root")]


@pytest.fixture(scope="module")
def nc():
    with module_cluster("fnet", "--nodes", "2", "--fast-failure") as c:
        yield c


def sinfo(c, node: str, fmt: str) -> str:
    return c.run(["sinfo", "-h", "-N", "-n", node, "-o", fmt], check=False).stdout.strip()


def test_net_takes_a_node_off_the_network_and_heal_brings_it_back(nc):
    slurmd = json.loads((nc.root / "state.json").read_text())["pids"]["slurmd:node2"]
    job = nc.run(["sbatch", "--parsable", "-w", "node1", "-o", "/dev/null", "--wrap", "sleep 300"]).stdout.strip()
    wait_for("the job on node1 to run", lambda: "RUNNING" in nc.run(["squeue", "-h", "-j", job, "-o", "%T"]).stdout)
    out = run_cli(["fault", "net", "node2", "--name", nc.name], nc.home, check=True).stdout
    assert "took node node2 off the network" in out
    again = run_cli(["fault", "net", "node2", "--name", nc.name], nc.home)
    assert again.returncode == 2 and len(again.stderr.splitlines()) == 1, again.stderr
    # SlurmdTimeout=5: not responding at the next ping, DOWN soon after; slurmd runs on.
    wait_for("node2 DOWN, not responding", lambda: sinfo(nc, "node2", "%T").startswith("down"), timeout=90)
    assert "Not responding" in sinfo(nc, "node2", "%E")
    assert os.path.exists(f"/proc/{slurmd}")
    table = run_cli(["status", "--name", nc.name], nc.home).stdout
    assert "off the network by 'simcluster fault net'" in table, table
    assert "RUNNING" in nc.run(["squeue", "-h", "-j", job, "-o", "%T"]).stdout
    quick = nc.run(["srun", "-w", "node1", "-N1", "hostname"], timeout=60).stdout
    assert "node1" in quick
    healed = run_cli(["fault", "heal", "--name", nc.name], nc.home, check=True).stdout
    assert "node2 back on the network" in healed, healed
    wait_for("node2 idle again", lambda: sinfo(nc, "node2", "%T") == "idle", timeout=90)
    assert nc.run(["srun", "-w", "node2", "-N1", "hostname"], timeout=60).stdout.strip() == "node2"
    assert json.loads(run_cli(["status", "--name", nc.name, "--json"], nc.home).stdout)["faults"] == []
    nc.run(["scancel", job])


def netns_file(c, node: str) -> str:
    """The node's network namespace file, as the placement's slurmd prefix names it."""
    prefix = json.loads((c.root / "state.json").read_text())["placement"]["slurmd_prefix"]
    arg = next(a for i, a in enumerate(prefix) if "@NODE@" in a and (a.startswith("--net=") or prefix[i - 1] == "--net"))
    return arg.split("=", 1)[-1].replace("@NODE@", node)


def link_flags(c, node: str) -> str:
    out = subprocess.run(["nsenter", f"--net={netns_file(c, node)}", "ip", "-o", "link", "show", "eth0"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=20).stdout
    return out.split("<", 1)[1].split(">", 1)[0] if "<" in out else out


def test_stop_brings_the_link_back_first_and_start_finds_the_node_on_the_network(nc):
    run_cli(["fault", "net", "node2", "--name", nc.name], nc.home, check=True)
    assert "UP" not in link_flags(nc, "node2").split(",")
    stopped = run_cli(["stop", "--name", nc.name], nc.home, check=True).stdout
    assert "node2 back on the network" in stopped, stopped
    # The namespace outlives the stop: its link is up again, and no record claims otherwise.
    assert "UP" in link_flags(nc, "node2").split(",")
    assert json.loads((nc.root / "state.json").read_text())["faults"] == []
    run_cli(["start", "--name", nc.name], nc.home, check=True)
    wait_for("node2 idle after the start", lambda: sinfo(nc, "node2", "%T") == "idle", timeout=90)
    assert nc.run(["srun", "-w", "node2", "-N1", "hostname"], timeout=60).stdout.strip() == "node2"


def test_a_repairing_up_brings_the_link_back_before_it_restarts_the_node(nc):
    run_cli(["fault", "net", "node1", "--name", nc.name], nc.home, check=True)
    wait_for("node1 not responding", lambda: sinfo(nc, "node1", "%T").endswith("*")
             or sinfo(nc, "node1", "%T").startswith("down"), timeout=90)
    repaired = run_cli(["up", "--name", nc.name, "--nodes", "2", "--fast-failure"], nc.home, check=True).stdout
    assert "node1 back on the network" in repaired, repaired
    assert "UP" in link_flags(nc, "node1").split(",")
    wait_for("node1 idle after the repair", lambda: sinfo(nc, "node1", "%T") == "idle", timeout=90)
    assert nc.run(["srun", "-w", "node1", "-N1", "hostname"], timeout=60).stdout.strip() == "node1"
    assert json.loads(run_cli(["status", "--name", nc.name, "--json"], nc.home).stdout)["faults"] == []
