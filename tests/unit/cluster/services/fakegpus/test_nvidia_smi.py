"""simcluster's nvidia-smi for fake GPUs (provisioner/cluster/services/fakegpus/nvidia_smi.py), run
as jobs run it: the installed copy as a program, with fake-gpus.json and Slurm's job
variables. Its layout is checked against the real nvidia-smi's (driver 535)."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

import pytest

from provisioner.cluster.services import fakegpus
from provisioner.cluster.services.fakegpus import nvidia_smi

UUID_RE = r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


def smi(config_dir: Path, *args: str, path: str = "", **env: str) -> subprocess.CompletedProcess:
    """Run the installed shim; ``env`` is all of the job's environment besides PATH."""
    full = {"PATH": f"{path}:{Path(sys.executable).parent}:/usr/bin:/bin".lstrip(":"), **env}
    return subprocess.run([str(config_dir / "bin" / "nvidia-smi"), *args], env=full, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=30)


def in_job(node: str = "node1", **env: str) -> Dict[str, str]:
    return {"SLURM_JOB_ID": "7", "SLURMD_NODENAME": node, **env}


# -- the table ----------------------------------------------------------------------------------

def test_table_looks_like_the_real_one(config_dir):
    out = smi(config_dir, **in_job(SLURM_JOB_GPUS="0,1"))
    assert out.returncode == 0 and out.stderr == ""
    lines = out.stdout.splitlines()
    assert re.match(r"^\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4} {7}$", lines[0])
    assert all(len(line) == 89 for line in lines[1:]), [line for line in lines[1:] if len(line) != 89]
    # Lines as the real nvidia-smi 535 prints them on an H100 (the rest is fixed text).
    assert lines[2] == "| NVIDIA-SMI 535.183.06             Driver Version: 535.183.06   CUDA Version: 12.2     |"
    assert lines[3] == "|-----------------------------------------+----------------------+----------------------+"
    assert lines[8] == "|   0  NVIDIA H100 80GB HBM3          On  | 00000000:18:00.0 Off |                    0 |"
    assert lines[9] == "| N/A   30C    P0              69W / 700W |      0MiB / 81559MiB |      0%      Default |"
    assert lines[10] == "|                                         |                      |             Disabled |"
    assert lines[12] == "|   1  NVIDIA H100 80GB HBM3          On  | 00000000:2A:00.0 Off |                    0 |"
    assert "|  No running processes found" in out.stdout
    assert out.stdout.count("NVIDIA H100 80GB HBM3") == 2


def test_table_of_a_step_shows_only_its_gpus_with_their_index_on_the_node(config_dir):
    out = smi(config_dir, **in_job(SLURM_JOB_GPUS="0,1", SLURM_STEP_GPUS="1"))
    gpu_rows = [line for line in out.stdout.splitlines() if "NVIDIA H100" in line]
    assert len(gpu_rows) == 1 and gpu_rows[0].startswith("|   1  ")


# -- -L and --query-gpu -------------------------------------------------------------------------

def test_list_gpus_with_stable_uuids(config_dir):
    out = smi(config_dir, "-L", **in_job(SLURM_JOB_GPUS="0,1"))
    assert out.returncode == 0
    lines = out.stdout.splitlines()
    assert [re.sub(UUID_RE, "U", line) for line in lines] == [
        "GPU 0: NVIDIA H100 80GB HBM3 (UUID: U)", "GPU 1: NVIDIA H100 80GB HBM3 (UUID: U)"]
    assert lines[0].endswith(f"(UUID: {fakegpus.gpu_uuid('prod', 'node1', 0)})")
    assert smi(config_dir, "--list-gpus", **in_job(SLURM_JOB_GPUS="0,1")).stdout == out.stdout
    # Another node's GPU 0 is another GPU; untyped GPUs have the generic name.
    other = smi(config_dir, "-L", **in_job("node2", SLURM_JOB_GPUS="0")).stdout
    assert other.startswith("GPU 0: NVIDIA Simulated GPU (UUID: ") and lines[0].split("UUID")[1] not in other


QUERY = ("index,name,uuid,memory.total,memory.used,memory.free,utilization.gpu,utilization.memory,"
         "temperature.gpu,power.draw,pci.bus_id,driver_version")


def test_query_gpu_csv_with_the_real_headers_and_units(config_dir):
    out = smi(config_dir, f"--query-gpu={QUERY}", "--format=csv", **in_job(SLURM_JOB_GPUS="0,1"))
    assert out.returncode == 0
    header, *rows = out.stdout.splitlines()
    assert header == ("index, name, uuid, memory.total [MiB], memory.used [MiB], memory.free [MiB], "
                      "utilization.gpu [%], utilization.memory [%], temperature.gpu, power.draw [W], pci.bus_id, "
                      "driver_version")
    assert len(rows) == 2
    cells = rows[0].split(", ")
    assert cells[:2] == ["0", "NVIDIA H100 80GB HBM3"] and re.fullmatch(UUID_RE, cells[2])
    assert cells[3:9] == ["81559 MiB", "0 MiB", "81559 MiB", "0 %", "0 %", "30"]
    assert re.fullmatch(r"\d+\.\d\d W", cells[9]) and cells[10:] == ["00000000:18:00.0", "535.183.06"]


def test_query_gpu_noheader_nounits_and_two_argument_forms(config_dir):
    out = smi(config_dir, "--query-gpu", "index,memory.total,power.draw", "--format", "csv,noheader,nounits",
              **in_job(SLURM_JOB_GPUS="0,1"))
    assert out.returncode == 0
    assert [line.split(", ")[:2] for line in out.stdout.splitlines()] == [["0", "81559"], ["1", "81559"]]
    assert re.fullmatch(r"\d+\.\d\d", out.stdout.splitlines()[0].split(", ")[2])
    noheader = smi(config_dir, "--query-gpu=gpu_name,gpu_bus_id", "--format=csv,noheader", **in_job(SLURM_JOB_GPUS="1"))
    assert noheader.stdout == "NVIDIA H100 80GB HBM3, 00000000:2A:00.0\n"


def test_a_field_that_does_not_exist_is_refused_as_the_real_one_does(config_dir):
    out = smi(config_dir, "--query-gpu=index,bogus", "--format=csv", **in_job(SLURM_JOB_GPUS="0"))
    assert out.returncode == 2
    assert out.stdout == 'Field "bogus" is not a valid field to query.\n'
    no_format = smi(config_dir, "--query-gpu=index", **in_job(SLURM_JOB_GPUS="0"))
    assert no_format.returncode == 2 and "--format=csv" in no_format.stderr and no_format.stdout == ""
    bad_format = smi(config_dir, "--query-gpu=index", "--format=json", **in_job(SLURM_JOB_GPUS="0"))
    assert bad_format.returncode == 2 and len(bad_format.stderr.splitlines()) == 1


def test_query_compute_apps_has_a_header_and_no_processes(config_dir):
    out = smi(config_dir, "--query-compute-apps=pid,process_name,used_memory", "--format=csv",
              **in_job(SLURM_JOB_GPUS="0"))
    assert (out.returncode, out.stdout) == (0, "pid, process_name, used_gpu_memory [MiB]\n")


# -- -i -----------------------------------------------------------------------------------------

def test_id_selects_by_index_uuid_or_bus_id_among_the_visible_gpus(config_dir):
    job = in_job(SLURM_JOB_GPUS="0,1")
    assert smi(config_dir, "-i", "1", "-L", **job).stdout.startswith("GPU 1: ")
    uuid = fakegpus.gpu_uuid("prod", "node1", 0)
    assert smi(config_dir, f"--id={uuid}", "-L", **job).stdout.startswith("GPU 0: ")
    assert smi(config_dir, "-i", "00000000:2A:00.0", "--query-gpu=index", "--format=csv,noheader", **job).stdout == "1\n"
    assert len(smi(config_dir, "-i", "0,1", "-L", **job).stdout.splitlines()) == 2
    # A GPU the step was not given is not there, as under device cgroups.
    hidden = smi(config_dir, "-i", "1", "-L", **in_job(SLURM_JOB_GPUS="0"))
    assert (hidden.returncode, hidden.stdout) == (6, "No devices were found\n")


# -- jobs without GPUs, outside jobs ------------------------------------------------------------

@pytest.mark.parametrize("args", [(), ("-L",), ("--query-gpu=index", "--format=csv"), ("dmon", "-c", "1")])
def test_a_job_without_gpus_sees_none(config_dir, args):
    out = smi(config_dir, *args, **in_job())
    assert (out.returncode, out.stdout, out.stderr) == (6, "No devices were found\n", "")


def test_step_gpus_win_over_the_jobs(config_dir):
    out = smi(config_dir, "-L", **in_job(SLURM_JOB_GPUS="0,1", SLURM_STEP_GPUS="0"))
    assert len(out.stdout.splitlines()) == 1 and out.stdout.startswith("GPU 0: ")
    none = smi(config_dir, "-L", **in_job(SLURM_JOB_GPUS="0,1", SLURM_STEP_GPUS=""))
    assert none.returncode == 6  # a step without GPUs in a job with some


def test_outside_a_job_a_node_shows_all_its_gpus(config_dir):
    out = smi(config_dir, "-L", SLURMD_NODENAME="node2")
    assert out.returncode == 0 and len(out.stdout.splitlines()) == 2


def test_off_the_nodes_the_machines_own_nvidia_smi_answers_or_none(config_dir, tmp_path):
    out = smi(config_dir, "-L")
    assert (out.returncode, out.stdout) == (6, "No devices were found\n")
    real_dir = tmp_path / "real"
    real_dir.mkdir()
    real = real_dir / "nvidia-smi"
    real.write_text("#!/bin/sh\necho \"the real one: $*\"\n")
    real.chmod(0o755)
    # The shim first on PATH (as `simcluster env` puts it), the machine's own after it.
    out = smi(config_dir, "-L", path=f"{config_dir / 'bin'}:{real_dir}")
    assert (out.returncode, out.stdout) == (0, "the real one: -L\n")


def test_data_is_found_beside_slurm_conf_or_above_the_shim(config_dir, tmp_path):
    # The installed copy: etc/bin/nvidia-smi finds etc/fake-gpus.json with nothing set.
    assert smi(config_dir, "-L", SLURMD_NODENAME="node1").returncode == 0
    # A copy elsewhere (a docker node's /usr/local/bin): SLURM_CONF's directory.
    elsewhere = tmp_path / "usr-local-bin"
    elsewhere.mkdir()
    (elsewhere / "nvidia-smi").write_bytes((config_dir / "bin" / "nvidia-smi").read_bytes())
    (elsewhere / "nvidia-smi").chmod(0o755)
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "SLURMD_NODENAME": "node1"}

    def run(slurm_conf: Path) -> subprocess.CompletedProcess:
        return subprocess.run([str(elsewhere / "nvidia-smi"), "-L"], env={**env, "SLURM_CONF": str(slurm_conf)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
    found = run(config_dir / "slurm.conf")
    assert found.returncode == 0 and len(found.stdout.splitlines()) == 2
    lost = run(tmp_path / "nowhere" / "slurm.conf")
    if not Path("/etc/slurm/fake-gpus.json").exists():
        assert lost.returncode == 6 and "no fake-gpus.json found" in lost.stderr


# -- dmon ---------------------------------------------------------------------------------------

def test_dmon_count_and_delay(config_dir):
    out = smi(config_dir, "dmon", "-c", "2", "-d", "1", **in_job(SLURM_JOB_GPUS="0,1"))
    assert out.returncode == 0
    lines = out.stdout.splitlines()
    assert lines[:2] == ["# gpu   pwr gtemp mtemp    sm   mem   enc   dec  mclk  pclk",
                         "# Idx     W     C     C     %     %     %     %   MHz   MHz"]
    assert len(lines) == 2 + 2 * 2
    assert [line.split()[0] for line in lines[2:]] == ["0", "1", "0", "1"]
    assert lines[2].split()[1:] == ["69", "30", "36", "0", "0", "0", "0", "2619", "1980"]


def test_dmon_select_options_and_filename_as_a_launcher_script_uses_them(config_dir, tmp_path):
    log = tmp_path / "dmon.log"
    out = smi(config_dir, "dmon", "--delay", "1", "--select", "pumt", "--options", "DT", "--filename", str(log),
              "-c", "1", **in_job(SLURM_JOB_GPUS="0"))
    assert (out.returncode, out.stdout) == (0, "")
    lines = log.read_text().splitlines()
    assert lines[:2] == [
        "#Date       Time        gpu   pwr gtemp mtemp    sm   mem   enc   dec    fb  bar1 rxpci txpci",
        "#YYYYMMDD   HH:MM:SS    Idx     W     C     C     %     %     %     %    MB    MB  MB/s  MB/s"]
    assert re.fullmatch(r" \d{8}   \d\d:\d\d:\d\d      0" + r" +\d+" * 11, lines[2]), lines[2]
    assert len(lines) == 3


def test_dmon_runs_until_killed_and_flushes_every_line(config_dir, tmp_path):
    log = tmp_path / "dmon.log"
    shim = config_dir / "bin" / "nvidia-smi"
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", **in_job(SLURM_JOB_GPUS="0,1")}
    proc = subprocess.Popen([str(shim), "dmon", "-d", "1", "-f", str(log)], env=env)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (not log.exists() or len(log.read_text().splitlines()) < 6):
            time.sleep(0.1)
        assert proc.poll() is None  # still monitoring
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    lines = log.read_text().splitlines()
    assert len(lines) >= 6 and log.read_text().endswith("\n")  # two samples or more, whole lines


def test_dmon_refuses_what_it_does_not_know(config_dir):
    bad = smi(config_dir, "dmon", "-s", "pux", **in_job(SLURM_JOB_GPUS="0"))
    assert bad.returncode == 2 and "pucvmet" in bad.stderr and bad.stdout == ""
    other = smi(config_dir, "dmon", "--gpm-metrics", "1", **in_job(SLURM_JOB_GPUS="0"))
    assert other.returncode == 2 and "does not implement" in other.stderr


# -- loops, other forms ---------------------------------------------------------------------------

class Stop(Exception):
    pass


def run_in_process(config_dir: Path, argv: List[str], samples: int, **env: str) -> str:
    """The shim in this process with a sleep that stops it after ``samples`` samples."""
    slept: List[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) >= samples:
            raise Stop()
    out = io.StringIO()
    with pytest.raises(Stop):
        nvidia_smi.run(argv, {**env, "SIMCLUSTER_FAKE_GPUS": str(config_dir / "fake-gpus.json")}, out,
                       io.StringIO(), str(config_dir / "bin" / "nvidia-smi"), sleep=sleep)
    assert slept == [slept[0]] * samples
    return out.getvalue()


def test_loop_repeats_rows_under_one_header(config_dir):
    text = run_in_process(config_dir, ["--query-gpu=index,name", "--format=csv", "-l", "5"], 3,
                          **in_job(SLURM_JOB_GPUS="0"))
    assert text.splitlines() == ["index, name"] + ["0, NVIDIA H100 80GB HBM3"] * 3


def test_dmon_without_count_samples_until_stopped(config_dir):
    text = run_in_process(config_dir, ["dmon", "-s", "u"], 4, **in_job(SLURM_JOB_GPUS="0"))
    assert len(text.splitlines()) == 2 + 4


@pytest.mark.parametrize("args", [("-q", "-d", "PIDS"), ("topo", "-m"), ("-pm", "1"), ("--query-gpu=index", "--format=csv", "-x")])
def test_anything_else_says_it_is_not_implemented(config_dir, args):
    out = smi(config_dir, *args, **in_job(SLURM_JOB_GPUS="0"))
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith("simcluster's nvidia-smi shim does not implement ")
    assert len(out.stderr.splitlines()) == 1 and "Traceback" not in out.stderr


def test_version_and_help(config_dir):
    version = smi(config_dir, "--version")
    assert version.returncode == 0 and "DRIVER version      : 535.183.06" in version.stdout
    assert "CUDA Version        : 12.2" in version.stdout
    help_text = smi(config_dir, "-h")
    assert help_text.returncode == 0 and "--query-gpu" in help_text.stdout and "dmon" in help_text.stdout


def test_the_shim_starts_fast(config_dir):
    # Python's start and the standard library only: no import of simcluster on the nodes.
    for module in fakegpus.SHIM_MODULES:
        assert "import provisioner" not in module.read_text() and "from provisioner" not in module.read_text()
    probe = subprocess.run([sys.executable, "-X", "importtime", str(config_dir / "bin" / "nvidia-smi"), "-L"],
                           env={"SLURMD_NODENAME": "node1", "PATH": "/usr/bin:/bin"},
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
    assert "provisioner" not in probe.stderr and probe.returncode == 0
    assert os.access(config_dir / "bin" / "nvidia-smi", os.X_OK)
