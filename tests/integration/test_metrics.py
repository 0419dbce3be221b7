"""The Prometheus exporter on a real local cluster: `up --metrics` with fake GPUs.

One 2-node cluster for the module (real slurmctld and slurmd, the exporter as one of its
daemons): the URL from `simcluster env`, a scrape read back with prometheus_client's own
text parser, a drained node and its reason, a running job's GPUs busy and labelled with its
job id while the others read idle, the UUIDs our nvidia-smi prints, a GPU fault's Xid from
gpu-faults.json, a dead exporter restarted by `up`, `stop`/`start` taking it along, and
`down` leaving no exporter behind.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import daemons_under, module_cluster, run_cli, wait_for

pytestmark = pytest.mark.integration
NAME = "met1"
SPEC = ("--nodes", "2", "--fake-gpus", "4", "--metrics")


@pytest.fixture(scope="module")
def cluster():
    with module_cluster(NAME, *SPEC) as c:
        yield c


def cli(cluster, *args, check=True):
    return run_cli(list(args) + ["--name", NAME], cluster.home, check=check)


def metrics_url(cluster) -> str:
    return metrics_url_of(cluster.home, NAME)


def metrics_url_of(home, name: str) -> str:
    """SIMCLUSTER_METRICS_URL as `simcluster env --name NAME` exports it."""
    lines = run_cli(["env", "--name", name], home, check=True).stdout.splitlines()
    env = dict(line[len("export "):].split("=", 1) for line in lines if line.startswith("export "))
    return env["SIMCLUSTER_METRICS_URL"]


def scrape(url: str) -> dict:
    """{series name: [(labels, value)]} of one scrape, through prometheus_client's parser."""
    with urllib.request.urlopen(url, timeout=60) as resp:
        text = resp.read().decode()
    out: dict = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def gpu_series(got, name="DCGM_FI_DEV_GPU_UTIL"):
    return {(s["Hostname"], s["gpu"]): (s, v) for s, v in got.get(name, [])}


def test_env_status_and_loopback(cluster):
    url = metrics_url(cluster)
    assert url.startswith("http://127.0.0.1:") and url.endswith("/metrics"), url
    st = json.loads(cli(cluster, "status", "--json").stdout)
    assert st["healthy"] and st["metrics"]["alive"] and st["metrics"]["url"] == url
    assert "metrics healthy: exporter alive at " + url in cli(cluster, "status").stdout
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    state = json.loads((cluster.root / "state.json").read_text())
    assert state["metrics_port"] == port and state["pids"]["metrics"]
    assert port not in [state["controller_port"], *state["node_ports"].values()]


def test_scrape_shows_nodes_job_and_its_gpus(cluster):
    url = metrics_url(cluster)
    job = cluster.run(["sbatch", "--parsable", "-w", "node1", "--gres=gpu:1", "-o", "/dev/null",
                       "--wrap", "sleep 300"]).stdout.strip()
    cluster.run(["scontrol", "update", "nodename=node2", "state=drain", "reason=metrics test drain"])
    try:
        def job_running():
            got = scrape(url)
            util = gpu_series(got)
            return any(s["hpc_job"] == job and v > 0 for s, v in util.values()) and \
                ({"node": "node2", "state": "drained", "slurm_state": "IDLE+DRAIN", "reason": "metrics test drain"},
                 1.0) in got.get("slurm_node_state", [])
        wait_for(f"job {job} on a busy GPU and node2 drained in a scrape", job_running, timeout=60)
        got = scrape(url)
        util = gpu_series(got)
        busy = [k for k, (s, v) in util.items() if s["hpc_job"] == job]
        assert len(busy) == 1 and busy[0][0] == "node1", util
        assert all(v == 0 and s["hpc_job"] == "" for k, (s, v) in util.items() if k != busy[0]), util
        assert set(util) == {("node1", "0"), ("node1", "1"), ("node2", "0"), ("node2", "1")}
        assert ({"state": "running"}, 1.0) in got["slurm_jobs"]
        assert ({"state": "drained"}, 1.0) in got["slurm_nodes"]
        assert got["slurm_partition_nodes"][0][1] == 2
        assert got["slurm_scheduler_server_threads"][0][1] >= 1
        assert all(v == 1 for _, v in got["slurm_exporter_source_up"])
        used = gpu_series(got, "DCGM_FI_DEV_FB_USED")
        assert used[busy[0]][1] > 0 and all(v == 0 for k, (_, v) in used.items() if k != busy[0])
        # The UUIDs are the ones simcluster's nvidia-smi prints on each node.
        smi = cluster.root / "etc" / "bin" / "nvidia-smi"
        for node in ("node1", "node2"):
            listed = subprocess.run([sys.executable, str(smi), "-L"], env={**cluster.env(), "SLURMD_NODENAME": node},
                                    capture_output=True, text=True, timeout=30).stdout
            for gpu in ("0", "1"):
                assert util[(node, gpu)][0]["UUID"] in listed, (node, gpu, listed)
    finally:
        cluster.run(["scancel", job], check=False)
        cluster.run(["scontrol", "update", "nodename=node2", "state=resume"], check=False)


def test_gpu_fault_file_sets_the_xid(cluster):
    url = metrics_url(cluster)
    faults = cluster.root / "etc" / "gpu-faults.json"
    faults.write_text(json.dumps({"node2": {"1": {"xid": 79, "ecc_errors": 2, "lost": False,
                                                  "since": "2026-11-28T12:00:00"}}}))
    try:
        wait_for("the Xid in a scrape", lambda: gpu_series(scrape(url), "DCGM_FI_DEV_XID_ERRORS")
                 .get(("node2", "1"), (None, 0))[1] == 79, timeout=30)
        got = scrape(url)
        assert gpu_series(got, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")[("node2", "1")][1] == 2
        assert gpu_series(got, "DCGM_FI_DEV_XID_ERRORS")[("node2", "0")][1] == 0
    finally:
        faults.unlink()


def test_up_restarts_a_dead_exporter(cluster):
    pid = json.loads((cluster.root / "state.json").read_text())["pids"]["metrics"]
    os.kill(pid, 15)
    wait_for("the exporter to exit", lambda: not os.path.exists(f"/proc/{pid}") or
             open(f"/proc/{pid}/stat").read().split(") ")[1].startswith("Z"), timeout=30)
    assert "metrics UNHEALTHY: exporter DEAD" in cli(cluster, "status", check=False).stdout
    out = run_cli(["up", "--name", NAME, *SPEC], cluster.home, check=True).stdout
    assert "restarted metrics" in out, out
    assert scrape(metrics_url(cluster))["slurm_nodes"]


def test_stop_and_start_take_the_exporter_along(cluster):
    url = metrics_url(cluster)
    pid = json.loads((cluster.root / "state.json").read_text())["pids"]["metrics"]
    cli(cluster, "stop")
    assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split(") ")[1].startswith("Z")
    with pytest.raises(OSError):
        urllib.request.urlopen(url, timeout=5)
    cli(cluster, "start")
    assert metrics_url(cluster) == url  # the same port after a start
    wait_for("a scrape with every node", lambda: sum(v for _, v in scrape(url).get("slurm_nodes", [])) == 2,
             timeout=60)


def test_down_stops_the_exporter(cluster):
    url = metrics_url(cluster)
    pid = json.loads((cluster.root / "state.json").read_text())["pids"]["metrics"]
    cli(cluster, "down")
    assert not os.path.exists(f"/proc/{pid}") or "exporter" not in open(f"/proc/{pid}/cmdline").read()
    assert not [p for p in daemons_under(cluster.home) if "metrics" in p]
    with pytest.raises(OSError):
        urllib.request.urlopen(url, timeout=5)
