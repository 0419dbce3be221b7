"""The Prometheus exporter of a docker cluster (`up --backend docker --metrics`, docs/metrics.md).

The exporter runs on this host, as for a local cluster; its Slurm calls are execs in the
controller container. A 2-node cluster with fake GPUs: the URL from `simcluster env`, a
scrape read with prometheus_client's text parser (both nodes' states, a running job's GPU
labelled with its id), `status`, `stop`/`start` and a repairing `up` taking the exporter
along, and `down` leaving no exporter, even where the state file is gone.
"""

from __future__ import annotations

import json
import os
import signal
import urllib.request

import pytest

from provisioner.cluster.services.metrics import exporter_pids
from tests.conftest import run_cli, wait_for
from tests.docker.conftest import LABEL, docker_ids
from tests.integration.test_metrics import metrics_url_of, scrape

pytestmark = pytest.mark.integration
SPEC = ("--nodes", "2", "--fake-gpus", "2", "--metrics")


def exporter_gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(") ", 1)[1].startswith("Z")
    except OSError:
        return True


def test_docker_cluster_exporter(docker_cluster, sim_home):
    name = docker_cluster(*SPEC)
    root = sim_home / name
    url = metrics_url_of(sim_home, name)
    assert url.startswith("http://127.0.0.1:") and url.endswith("/metrics"), url
    st = json.loads(run_cli(["status", "--name", name, "--json"], sim_home, check=True).stdout)
    assert st["metrics"]["alive"] and st["metrics"]["url"] == url
    pid = json.loads((root / "state.json").read_text())["pids"]["metrics"]
    assert exporter_pids(str(root)) == [pid]  # a process of this host, not of a container

    job = run_cli(["exec", "--name", name, "--", "sbatch", "--parsable", "-w", "node1", "--gres=gpu:1",
                   "-o", "/dev/null", "--wrap", "sleep 300"], sim_home, check=True).stdout.strip()

    def busy() -> bool:
        got = scrape(url)
        return any(s["hpc_job"] == job and v > 0 for s, v in got.get("DCGM_FI_DEV_GPU_UTIL", []))
    wait_for(f"job {job}'s GPU busy in a scrape", busy, timeout=60)
    got = scrape(url)
    states = {s["node"]: s["state"] for s, v in got["slurm_node_state"] if v == 1}
    assert set(states) == {"node1", "node2"} and states["node2"] == "idle", states
    util = {(s["Hostname"], s["gpu"]): (s["hpc_job"], v) for s, v in got["DCGM_FI_DEV_GPU_UTIL"]}
    assert util[("node1", "0")][0] == job and util[("node2", "0")] == ("", 0.0), util
    assert all(v == 1 for _, v in got["slurm_exporter_source_up"])
    assert ({"state": "running"}, 1.0) in got["slurm_jobs"]

    # stop takes the exporter along, start brings it back on the same URL.
    run_cli(["stop", "--name", name], sim_home, check=True)
    assert exporter_gone(pid) and exporter_pids(str(root)) == []
    with pytest.raises(OSError):
        urllib.request.urlopen(url, timeout=5)
    run_cli(["start", "--name", name], sim_home, check=True, timeout=300)
    assert metrics_url_of(sim_home, name) == url
    wait_for("a scrape with both nodes", lambda: len(scrape(url).get("slurm_node_state", [])) == 2, timeout=60)

    # A dead exporter: status says so, `up` on the cluster restarts it.
    pid = json.loads((root / "state.json").read_text())["pids"]["metrics"]
    os.kill(pid, signal.SIGTERM)
    wait_for("the exporter to exit", lambda: exporter_gone(pid), timeout=30)
    assert "metrics UNHEALTHY: exporter DEAD" in run_cli(["status", "--name", name], sim_home).stdout
    out = run_cli(["up", "--backend", "docker", "--name", name, *SPEC], sim_home, check=True, timeout=300).stdout
    assert "restarted metrics" in out, out
    assert scrape(url)["slurm_node_state"]

    # down: no exporter, no container, even though the state lost the exporter's pid.
    state = json.loads((root / "state.json").read_text())
    pid = state["pids"].pop("metrics")
    (root / "state.json").write_text(json.dumps(state))
    run_cli(["down", "--name", name], sim_home, check=True)
    assert exporter_gone(pid) and exporter_pids(str(root)) == []
    assert docker_ids(f"label={LABEL}={name}") == []
    with pytest.raises(OSError):
        urllib.request.urlopen(url, timeout=5)


def test_down_without_a_state_file_stops_the_exporter(docker_cluster, sim_home):
    # The state file is gone: the containers are orphans, and the exporter, a process of
    # this host, goes with them.
    name = docker_cluster("--nodes", "2", "--metrics")
    root = sim_home / name
    url = metrics_url_of(sim_home, name)
    assert scrape(url)["slurm_node_state"]
    pids = exporter_pids(str(root))
    assert len(pids) == 1
    (root / "state.json").unlink()
    run_cli(["down", "--name", name], sim_home, check=True)
    assert exporter_gone(pids[0]) and exporter_pids(str(root)) == []
    assert docker_ids(f"label={LABEL}={name}") == []
