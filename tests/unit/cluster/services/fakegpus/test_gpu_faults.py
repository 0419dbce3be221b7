"""GPU faults as the fake driver reports them (fakegpus/gpu_faults.py): gpu-faults.json, the
kernel-log line, what the installed nvidia-smi shows of a faulted GPU, and the health
check's reading of the node and its decision (fakegpus/gpu_health.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from provisioner.cluster.services.fakegpus import gpu_faults, gpu_health


def set_fault(config_dir: Path, node: str, gpu: int, xid=None, ecc=0, lost=False) -> None:
    path = str(config_dir / gpu_faults.FAULTS_FILE)
    faults = gpu_faults.read_faults(path)
    faults.setdefault(node, {})[str(gpu)] = {"xid": xid, "ecc_errors": ecc, "lost": lost,
                                             "since": gpu_faults.iso_now(0)}
    gpu_faults.write_faults(path, faults)


def smi(config_dir: Path, *args: str, node: str = "node1") -> subprocess.CompletedProcess:
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "SLURMD_NODENAME": node}
    return subprocess.run([str(config_dir / "bin" / "nvidia-smi"), *args], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=30)


def test_the_state_file_has_the_shape_every_reader_expects(config_dir):
    set_fault(config_dir, "node1", 0, xid=79)
    data = json.loads((config_dir / "gpu-faults.json").read_text())
    assert data == {"node1": {"0": {"xid": 79, "ecc_errors": 0, "lost": False, "since": "1970-01-01T00:00:00+00:00"}}}
    gpu_faults.write_faults(str(config_dir / "gpu-faults.json"), {"node1": {}})  # a node without faults leaves
    assert json.loads((config_dir / "gpu-faults.json").read_text()) == {}
    assert gpu_faults.read_faults(str(config_dir / "missing.json")) == {}
    (config_dir / "bad.json").write_text("{not json")
    assert gpu_faults.read_faults(str(config_dir / "bad.json")) == {}


def test_the_kernel_log_line_is_the_drivers():
    line = gpu_faults.kmsg_line(8643.5, "00000000:18:00.0", {"xid": 79}, pid=1234, process="python3")
    assert line == ("[ 8643.500000] NVRM: Xid (PCI:0000:18:00): 79, pid=1234, name=python3, "
                    "GPU has fallen off the bus.\n")
    assert "pid='<unknown>'" in gpu_faults.kmsg_line(1, "00000000:2A:00.0", {"xid": 48})
    assert "NVRM: GPU at PCI:0000:2A:00: GPU has fallen off the bus." in \
        gpu_faults.kmsg_line(1, "00000000:2A:00.0", {"xid": None, "lost": True})


def test_xid_79_shows_err_in_the_table_and_unknown_error_in_queries(config_dir):
    set_fault(config_dir, "node1", 0, xid=79)
    table = smi(config_dir)
    assert table.returncode == 0
    rows = [line for line in table.stdout.splitlines() if "ERR!" in line]
    assert len(rows) == 3 and "00000000:18:00.0" in rows[0]
    assert all(len(line) == 89 for line in table.stdout.splitlines()[1:-1] if line.startswith("|"))
    q = smi(config_dir, "--query-gpu=index,temperature.gpu", "--format=csv,noheader")
    assert q.stdout.splitlines() == ["0, [Unknown Error]", "1, 31"]
    assert smi(config_dir, "-L").stdout.count("GPU ") == 2  # still listed: the device handle answers
    assert "ERR!" not in smi(config_dir, node="node2").stdout  # the other node is healthy


def test_a_lost_gpu_leaves_the_list_and_the_table_says_it_is_lost(config_dir):
    set_fault(config_dir, "node1", 1, lost=True)
    listed = smi(config_dir, "-L").stdout.splitlines()
    assert [line.split(":")[0] for line in listed] == ["GPU 0"]
    table = smi(config_dir)
    assert table.returncode == 15
    assert table.stdout == ("Unable to determine the device handle for GPU00000000:2A:00.0: GPU is lost.  "
                            "Reboot the system to recover this GPU\n")


def test_ecc_errors_show_in_the_table_queries_and_q(config_dir):
    set_fault(config_dir, "node1", 1, ecc=3)
    q = smi(config_dir, "--query-gpu=index,ecc.errors.uncorrected.volatile.total", "--format=csv,noheader")
    assert q.stdout.splitlines() == ["0, 0", "1, 3"]
    details = smi(config_dir, "-q", "-d", "ECC")
    assert details.returncode == 0
    uncorrectable = [line.split(":")[1].strip() for line in details.stdout.splitlines() if "DRAM Uncorrectable" in line]
    assert uncorrectable == ["0", "0", "3", "3"]  # volatile and aggregate, per GPU
    assert "Product Name" in smi(config_dir, "-q").stdout
    bad = smi(config_dir, "-q", "-d", "POWER")
    assert bad.returncode == 2 and "-d takes ECC" in bad.stderr and len(bad.stderr.splitlines()) == 1


@pytest.mark.parametrize("fault, reason", [
    ({"xid": 79}, "gpu0: Xid 79 (GPU has fallen off the bus)"),
    ({"xid": 48}, "gpu0: Xid 48 (Double Bit ECC Error)"),
    ({"xid": 13}, ""),  # an application's error: the node stays in service
    ({"ecc": 2}, "gpu0: 2 uncorrectable ECC errors"),
    ({"lost": True}, "gpu0: lost (nvidia-smi sees 1 of 2 GPUs)"),
])
def test_the_health_check_reads_the_fault_as_a_reason(config_dir, fault, reason):
    assert gpu_health.node_reason(str(config_dir), "node1") == ""
    set_fault(config_dir, "node1", 0, **fault)
    assert gpu_health.node_reason(str(config_dir), "node1") == reason
    assert gpu_health.node_reason(str(config_dir), "node2") == ""


def test_parse_node_reads_state_and_reason_of_scontrol_show_node():
    line = ("NodeName=node1 Arch=x86_64 CoresPerSocket=1 State=IDLE+DRAIN ThreadsPerCore=1 "
            "Reason=gpu0: Xid 79 (GPU has fallen off the bus) [root@2026-11-28T12:00:00]")
    assert gpu_health.parse_node(line) == ("IDLE+DRAIN", "gpu0: Xid 79 (GPU has fallen off the bus)")
    assert gpu_health.parse_node("NodeName=node1 State=IDLE Partitions=main") == ("IDLE", "")
    assert gpu_health.parse_node("NodeName=n State=DRAIN Reason=maintenance [admin@2026-01-01T00:00:00] "
                                 "Comment=x") == ("DRAIN", "maintenance")


XID79 = "gpu0: Xid 79 (GPU has fallen off the bus)"


@pytest.mark.parametrize("now, state, reason, action", [
    (XID79, "IDLE", "", ("drain", XID79)),
    (XID79, "MIXED", "", ("drain", XID79)),
    (XID79, "IDLE+DRAIN", XID79, ("", "")),  # drained for it already
    (XID79, "IDLE+DRAIN", "gpu1: lost (nvidia-smi sees 1 of 2 GPUs)", ("drain", XID79)),  # ours, now another
    (XID79, "IDLE+DRAIN", "maintenance", ("", "")),  # an admin's drain keeps its reason
    ("", "IDLE+DRAIN", XID79, ("resume", "")),  # healthy again: the check's own drain undone
    ("", "IDLE+DRAIN", "maintenance", ("", "")),  # never an admin's
    ("", "IDLE", "", ("", "")),
])
def test_the_health_check_drains_and_resumes_as_nhc_does(now, state, reason, action):
    assert gpu_health.decide(now, state, reason) == action


def test_the_health_check_program_runs_scontrol_for_its_node(config_dir):
    set_fault(config_dir, "node1", 0, xid=79)
    calls = []

    def run(argv, **kwargs):
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 0, "NodeName=node1 State=IDLE Partitions=main\n", "")
    assert gpu_health.main(["--config-dir", str(config_dir)], {"SLURMD_NODENAME": "node1"}, run) == 0
    assert calls[-1] == ["scontrol", "update", "nodename=node1", "state=drain", f"reason={XID79}"]
    assert gpu_health.main(["--config-dir", str(config_dir)], {}, run) == 2  # no node: usage
