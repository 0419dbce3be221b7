"""The metrics exporter's parsers and collector, fed with Slurm outputs recorded on a real
22.05 cluster (tests/data/metrics/: `scontrol -o show node|partition`, `scontrol -o -d show
job`, `sdiag`) and fake-GPU data files of the shapes the cluster writes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from provisioner.cluster.model.placement import CONTROLLER, HOST
from provisioner.cluster.model.state import ClusterState
from provisioner.cluster.services import metrics
from provisioner.cluster.services.fakegpus.nvidia_smi import gpu_uuid
from provisioner.cluster.services.metrics import gpus as gpu_model
from provisioner.cluster.services.metrics import parse
from provisioner.cluster.services.metrics.collector import SLURM_CALLS, ClusterCollector, SlurmSource
from provisioner.config.load import load_spec
from provisioner.config.overrides import spec_overrides
from provisioner.errors import ConfigError

DATA = Path(__file__).resolve().parents[3] / "data" / "metrics"


def text(name: str) -> str:
    return (DATA / name).read_text()


def recorded(jobs="job-multinode.txt", nodes="node-multinode.txt", fail=()):
    """A fetch answering each Slurm call from a recorded output; ``fail``: calls that fail."""
    files = {"node": nodes, "partition": "partition.txt", "job": jobs}
    calls = []

    def fetch(argv):
        calls.append(list(argv))
        name = "sdiag" if argv[0] == "sdiag" else argv[-1]
        if name in fail:
            return False, ""
        return True, text("sdiag-22.05.txt" if name == "sdiag" else files[name])
    return fetch, calls


def scrape(collector) -> dict:
    """{family name: [(labels, value)]} of one scrape, read back with prometheus_client's parser."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)
    out = {}
    for fam in text_string_to_metric_families(generate_latest(reg).decode()):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def gpu_dir(tmp_path, data="fake-gpus-mig.json", faults=True) -> Path:
    shutil.copy(DATA / data, tmp_path / gpu_model.DATA_FILE)
    if faults:
        shutil.copy(DATA / "gpu-faults.json", tmp_path / gpu_model.FAULTS_FILE)
    return tmp_path


# -- parsers -----------------------------------------------------------------------------------

def test_key_values_keep_blanks_of_a_reason():
    kv = parse.key_values("NodeName=node2 State=IDLE+DRAIN Partitions=main  Reason=gpu xid 79 test [root@2026-11-28]")
    assert kv == {"NodeName": "node2", "State": "IDLE+DRAIN", "Partitions": "main",
                  "Reason": "gpu xid 79 test [root@2026-11-28]"}


@pytest.mark.parametrize("raw,state", [("IDLE", "idle"), ("MIXED", "mixed"), ("ALLOCATED", "allocated"),
                                       ("IDLE+DRAIN", "drained"), ("MIXED+DRAIN", "draining"),
                                       ("ALLOCATED+DRAIN", "draining"), ("DOWN+NOT_RESPONDING", "down"),
                                       ("DOWN*+DRAIN", "down"), ("IDLE+COMPLETING", "completing"),
                                       ("IDLE*", "idle"), ("", "unknown")])
def test_node_state_names(raw, state):
    assert parse.node_state(raw) == state


def test_nodes_from_scontrol():
    nodes = {n.name: n for n in parse.parse_nodes(text("node-2nodes-drain.txt"))}
    assert nodes["node1"].state == "allocated" and nodes["node1"].cpus == 2 and nodes["node1"].cpus_alloc == 2
    assert nodes["node2"].state == "drained" and nodes["node2"].raw_state == "IDLE+DRAIN"
    assert nodes["node2"].reason == "gpu xid 79 test"  # the [user@time] suffix is dropped
    assert nodes["node2"].partitions == ("main",) and nodes["node2"].memory_mb == 24105


def test_partitions_from_scontrol():
    [p] = parse.parse_partitions(text("partition.txt"))
    assert (p.name, p.state, p.nodes, p.cpus, p.default) == ("main", "up", 2, 4, True)


def test_jobs_and_their_gpus_per_node():
    jobs = {j.job_id: j for j in parse.parse_jobs(text("job-multinode.txt"))}
    assert {i: j.state for i, j in jobs.items()} == {"1": "cancelled", "2": "cancelled", "3": "running",
                                                    "4": "pending"}
    # "Nodes=node[1-2] ... GRES=gpu:1(IDX:0)": index 0 on each node of the range
    assert jobs["3"].gpus == (parse.GresHeld("node1", "", (0,)), parse.GresHeld("node2", "", (0,)))
    assert jobs["3"].user == "root" and jobs["3"].partition == "main"
    assert jobs["4"].gpus == () and jobs["1"].gpus == ()
    # A finished job's allocation is gone (GRES= empty), even while it completes.
    assert all(not j.gpus for j in parse.parse_jobs(text("job-ended.txt")))
    assert parse.parse_jobs("No jobs in the system\n") == []


def test_typed_and_mig_gres_and_shards():
    line = ("JobId=7 UserId=alice(1001) JobState=RUNNING Partition=gpu   Nodes=gpu[01-02] CPU_IDs=0-3 Mem=100 "
            "GRES=gpu:a100:2(IDX:0-1),shard:2(2/4,0/4)   Nodes=gpu03 CPU_IDs=0 Mem=100 GRES=gpu:3g.40gb:1(IDX:4) "
            "MinCPUsNode=1")
    [job] = parse.parse_jobs(line)
    assert job.user == "alice"
    assert job.gpus == (parse.GresHeld("gpu01", "a100", (0, 1)), parse.GresHeld("gpu02", "a100", (0, 1)),
                        parse.GresHeld("gpu03", "3g.40gb", (4,)))
    assert parse.index_list("0-2,5,x") == [0, 1, 2, 5]


def test_sdiag_text():
    v = parse.parse_sdiag(text("sdiag-22.05.txt"))
    assert v["server_threads"] == 3 and v["agent_queue_size"] == 0 and v["jobs_submitted"] == 4
    assert v["jobs_started"] == 3 and v["jobs_canceled"] == 2 and v["jobs_failed"] == 0
    # microseconds -> seconds; "Last cycle" of each section is its own
    assert v["main_cycle_max"] == pytest.approx(628e-6) and v["main_cycles"] == 8
    assert v["backfill_cycle_last"] == 0 and v["backfill_cycles"] == 0
    assert parse.parse_sdiag("sdiag: error: Unable to contact slurm controller") == {}


# -- the fake GPUs -------------------------------------------------------------------------------

def test_gpu_entries_in_slurms_order():
    """On a MIG node Slurm numbers the instances profile by profile, then GPU by GPU."""
    data = json.loads(text("fake-gpus-mig.json"))
    slots = gpu_model.entries(data["nodes"]["node1"], 2)
    assert [(i, inst["profile"], inst["gi"]) for i, inst in slots] == [
        (0, "1g.10gb", 2), (1, "1g.10gb", 2), (0, "3g.40gb", 1), (1, "3g.40gb", 1)]
    assert gpu_model.entries(data["nodes"]["node2"], 2) == [(0, None), (1, None)]
    assert gpu_model.entries({"mig": "nonsense"}, 2) == [(0, None), (1, None)]
    # A GPU left whole on a MIG node comes after the instances.
    assert gpu_model.entries({"mig": {"1": [{"profile": "7g.80gb", "gi": 0}]}}, 2) == [
        (1, {"profile": "7g.80gb", "gi": 0}), (0, None)]


def test_missing_or_broken_gpu_files_mean_nothing(tmp_path):
    assert gpu_model.read_json(tmp_path / "absent.json") == {}
    (tmp_path / "bad.json").write_text("{not json")
    assert gpu_model.read_json(tmp_path / "bad.json") == {}
    (tmp_path / "list.json").write_text("[1]")
    assert gpu_model.read_json(tmp_path / "list.json") == {}
    assert gpu_model.readings({"nodes": {"node1": {"gpus": 1}}}, {}, []) == []  # no model fields
    assert gpu_model.readings({}, {"node1": "x"}, []) == []


# -- the collector -------------------------------------------------------------------------------

def test_scrape_of_a_drained_node_and_running_gpu_job(tmp_path):
    fetch, calls = recorded(jobs="job-2nodes-drain.txt", nodes="node-2nodes-drain.txt")
    got = scrape(ClusterCollector(SlurmSource(fetch), "met1", gpu_dir(tmp_path, faults=False)))
    states = {s["node"]: (s["state"], s["reason"]) for s, v in got["slurm_node_state"] if v == 1}
    assert states == {"node1": ("allocated", ""), "node2": ("drained", "gpu xid 79 test")}
    counts = {s["state"]: v for s, v in got["slurm_nodes"]}
    assert counts["drained"] == 1 and counts["allocated"] == 1 and counts["idle"] == 0
    jobs = {s["state"]: v for s, v in got["slurm_jobs"]}
    assert jobs["running"] == 2 and jobs["pending"] == 2 and jobs["failed"] == 0
    assert ({"partition": "main", "state": "running"}, 2) in got["slurm_partition_jobs"]
    assert ({"user": "root", "state": "pending"}, 2) in got["slurm_user_jobs"]
    assert got["slurm_partition_nodes"] == [({"partition": "main"}, 2)]
    assert got["slurm_scheduler_server_threads"] == [({}, 3)]
    assert got["slurm_scheduler_main_cycle_max_seconds"][0][1] == pytest.approx(628e-6)
    assert all(v == 1 for _, v in got["slurm_exporter_source_up"])
    # Job 1 holds node1's gres entry 0 (IDX:0), there GPU 0's 1g.10gb instance: busy,
    # labelled with the job; the rest idle.
    util = {(s["Hostname"], s["gpu"], s["GPU_I_ID"]): (s["hpc_job"], v) for s, v in got["DCGM_FI_DEV_GPU_UTIL"]}
    assert util[("node1", "0", "2")][0] == "1" and 80 <= util[("node1", "0", "2")][1] <= 99
    assert [k for k, (job, _) in util.items() if job] == [("node1", "0", "2")]
    assert util[("node1", "0", "1")] == ("", 0) and util[("node2", "0", "")] == ("", 0)
    used = {(s["Hostname"], s["gpu"], s["GPU_I_ID"]): v for s, v in got["DCGM_FI_DEV_FB_USED"]}
    free = {(s["Hostname"], s["gpu"], s["GPU_I_ID"]): v for s, v in got["DCGM_FI_DEV_FB_FREE"]}
    assert used[("node1", "0", "2")] > 0 and used[("node1", "0", "2")] + free[("node1", "0", "2")] == 10 * 1024
    assert used[("node2", "0", "")] == 0 and free[("node2", "0", "")] == 81559
    labels = next(s for s, _ in got["DCGM_FI_DEV_GPU_TEMP"] if s["Hostname"] == "node2" and s["gpu"] == "1")
    assert labels["UUID"] == gpu_uuid("met1", "node2", 1) and labels["device"] == "nvidia1"
    assert labels["modelName"] == "NVIDIA H100 80GB HBM3" and labels["GPU_I_PROFILE"] == ""
    # MIG instances of node1's GPU 1: one series each, with the parent's UUID, profile and id.
    mig = [s for s, _ in got["DCGM_FI_DEV_FB_FREE"] if s["Hostname"] == "node1" and s["gpu"] == "1"]
    assert sorted((s["GPU_I_PROFILE"], s["GPU_I_ID"]) for s in mig) == [("1g.10gb", "2"), ("3g.40gb", "1")]
    assert {s["UUID"] for s in mig} == {gpu_uuid("met1", "node1", 1)}
    assert free[("node1", "1", "1")] == 40 * 1024
    assert sorted(c[0] + " " + c[-1] for c in calls) == ["scontrol job", "scontrol node", "scontrol partition",
                                                         "sdiag sdiag"]


def test_mig_instance_held_by_a_job_and_gpu_faults(tmp_path):
    line = ("JobId=12 UserId=root(0) JobState=RUNNING Partition=main NodeList=node1   Nodes=node1 CPU_IDs=0 "
            "Mem=10 GRES=gpu:3g.40gb:1(IDX:3) MinCPUsNode=1\n")
    data = json.loads(text("fake-gpus-mig.json"))
    faults = json.loads(text("gpu-faults.json"))
    rs = gpu_model.readings(data, faults, parse.parse_jobs(line), {"node1": [4, 5], "node2": [6, 7]})
    by = {(r.node, r.gpu, r.mig_id): r for r in rs}
    # IDX:3 = the second 3g.40gb instance in Slurm's order: GPU 1's
    assert by[("node1", 1, "1")].job == "12" and by[("node1", 1, "1")].util >= 80
    assert [k for k, r in by.items() if r.job] == [("node1", 1, "1")]
    assert by[("node1", 1, "1")].device == "nvidia5" and by[("node1", 1, "1")].mig_profile == "3g.40gb"
    # node2: GPU 0 reports Xid 79; GPU 1 is lost, so DCGM has no series of it.
    assert by[("node2", 0, "")].xid == 79 and by[("node2", 0, "")].ecc_dbe == 0
    assert ("node2", 1, "") not in by
    assert by[("node1", 0, "1")].xid == 0


def test_snapshot_is_shared_by_close_scrapes_and_calls_are_bounded(tmp_path):
    fetch, calls = recorded()
    source = SlurmSource(fetch, ttl=60)
    collector = ClusterCollector(source, "met1", gpu_dir(tmp_path))
    scrape(collector)
    scrape(collector)
    assert source.rounds == 1 and len(calls) == len(SLURM_CALLS) == 4
    source.ttl = 0
    scrape(collector)
    assert source.rounds == 2 and len(calls) == 8


def test_a_failed_call_leaves_only_its_series_out(tmp_path):
    fetch, _ = recorded(fail=("sdiag", "job"))
    got = scrape(ClusterCollector(SlurmSource(fetch), "met1", gpu_dir(tmp_path)))
    up = {s["source"]: v for s, v in got["slurm_exporter_source_up"]}
    assert up == {"jobs": 0, "nodes": 1, "partitions": 1, "sdiag": 0}
    assert "slurm_node_state" in got and "slurm_jobs" not in got and "slurm_scheduler_server_threads" not in got
    # GPUs are still there, all idle (no job list to say otherwise).
    assert got["DCGM_FI_DEV_GPU_UTIL"] and all(v == 0 for _, v in got["DCGM_FI_DEV_GPU_UTIL"])


def test_device_numbers_are_read_at_each_scrape(tmp_path):
    fetch, _ = recorded()
    minors = {"node1": [4, 5]}
    collector = ClusterCollector(SlurmSource(fetch), "met1", gpu_dir(tmp_path), lambda: minors)
    devices = {(s["Hostname"], s["gpu"]): s["device"] for s, _ in scrape(collector)["DCGM_FI_DEV_GPU_TEMP"]}
    assert devices[("node1", "1")] == "nvidia5" and devices[("node2", "0")] == "nvidia0"
    minors["node2"] = [6]  # a node `scale` added
    devices = {(s["Hostname"], s["gpu"]): s["device"] for s, _ in scrape(collector)["DCGM_FI_DEV_GPU_TEMP"]}
    assert devices[("node2", "0")] == "nvidia6"


def test_no_gpu_series_without_fake_gpus(tmp_path):
    fetch, _ = recorded()
    assert not any(k.startswith("DCGM") for k in scrape(ClusterCollector(SlurmSource(fetch), "met1", tmp_path)))
    assert not any(k.startswith("DCGM") for k in scrape(ClusterCollector(SlurmSource(fetch), "met1", None)))


# -- the spec ------------------------------------------------------------------------------------

def test_metrics_spec_key_and_flag():
    assert spec_overrides(metrics=True) == {"metrics": True}
    assert spec_overrides(metrics=None) == {}
    spec = load_spec(None, {"name": "m", "metrics": True})
    assert spec.metrics and spec.metrics_port is None
    spec = load_spec(None, {"name": "m", "metrics": {"port": 19400}})
    assert spec.metrics and spec.metrics_port == 19400
    assert not load_spec(None, {"name": "m"}).metrics


@pytest.mark.parametrize("value,message", [("yes", "expected true, false or {port: N}"),
                                           ({"port": 80}, "expected a TCP port from 1024 to 65535"),
                                           ({"prot": 9400}, "unknown key 'prot'")])
def test_metrics_spec_errors(value, message):
    with pytest.raises(ConfigError) as exc:
        load_spec(None, {"name": "m", "metrics": value})
    assert message in str(exc.value)


def test_metrics_on_docker_clusters():
    # The exporter runs on this host for both backends `up` makes (docs/metrics.md).
    spec = load_spec(None, {"name": "m", "backend": "docker", "metrics": {"port": 19401}})
    assert spec.backend == "docker" and spec.metrics and spec.metrics_port == 19401
    assert load_spec(None, {"name": "m", "backend": "docker", "metrics": True}).metrics


def test_the_exporter_runs_on_this_host_on_every_backend():
    assert ClusterState.runner_key(metrics.DAEMON) == HOST
    assert ClusterState.runner_key("slurmctld") == CONTROLLER
    assert ClusterState.runner_key("slurmd:node1") == "node1"


def test_exporter_pids_by_command_line(tmp_path):
    # What `down` finds where the state file lost the pid: only the exporter of that very
    # state directory (not one of a directory whose name merely starts the same).
    argv = [sys.executable, "-c", "import time; time.sleep(60)", "-m", metrics.EXPORTER_MODULE, "--state-dir"]
    ours = subprocess.Popen([*argv, str(tmp_path / "c1")])
    other = subprocess.Popen([*argv, str(tmp_path / "c10")])
    try:
        assert metrics.exporter_pids(str(tmp_path / "c1")) == [ours.pid]
        assert metrics.stop_exporters(str(tmp_path / "c1")) == []
        assert ours.wait(timeout=30) != 0
        assert other.poll() is None
        assert metrics.exporter_pids(str(tmp_path / "c2")) == []
    finally:
        for proc in (ours, other):
            proc.kill()
            proc.wait()
