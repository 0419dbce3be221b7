"""The GitHub Action (action.yml + scripts/action/), run here with fake GITHUB_ENV/GITHUB_PATH files.

GitHub is not reachable from here, so the action's steps run as GitHub would run them:
the scripts, with the inputs as INPUT_* variables; a "later step" then uses only what the
action exported (GITHUB_ENV, GITHUB_PATH) to submit a job.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict

import pytest
import yaml

from tests.conftest import REPO

ACTION = REPO / "scripts" / "action"


def action_env(tmp_path: Path, home: Path, **inputs: str) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("INPUT_", "SLURM_", "GITHUB_"))}
    for name in ("GITHUB_ENV", "GITHUB_PATH", "GITHUB_OUTPUT"):
        env[name] = str(tmp_path / name.lower())
        Path(env[name]).touch()
    env.update(RUNNER_TEMP=str(tmp_path / "runner-temp"), GITHUB_ACTION_PATH=str(REPO), SIMCLUSTER_HOME=str(home))
    Path(env["RUNNER_TEMP"]).mkdir(exist_ok=True)
    # The install step put simcluster on PATH; here it is the checkout's venv.
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    env.update({f"INPUT_{k.upper()}": v for k, v in inputs.items()})
    return env


def step(script: str, env: Dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(ACTION / script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=timeout)


def later_step_env(env: Dict[str, str]) -> Dict[str, str]:
    """What a step after the action sees: the runner's environment plus GITHUB_ENV and GITHUB_PATH."""
    later = {k: v for k, v in env.items() if not k.startswith("INPUT_")}
    for line in Path(env["GITHUB_ENV"]).read_text().splitlines():
        key, _, value = line.partition("=")
        later[key] = value
    extra = Path(env["GITHUB_PATH"]).read_text().split()
    later["PATH"] = ":".join(list(reversed(extra)) + [later["PATH"]])
    return later


def test_action_yml_runs_the_scripts_with_every_input():
    action = yaml.safe_load((REPO / "action.yml").read_text())
    assert action["runs"]["using"] == "composite"
    assert set(action["inputs"]) >= {"nodes", "gpus", "backend", "slurm", "accounting"}
    steps = action["runs"]["steps"]
    used_inputs = set()
    for s in steps:
        if "run" in s:
            script = re.search(r"scripts/action/(\S+\.sh)", s["run"]).group(1)
            text = (ACTION / script).read_text()
            for var, value in s.get("env", {}).items():
                assert var in text, f"{script} never reads {var}"
                m = re.search(r"inputs\.(\w+)", value)
                if m:
                    used_inputs.add(m.group(1))
    assert used_inputs == set(action["inputs"])
    failure_steps = [s for s in steps if s.get("if") == "failure()"]
    assert [s.get("id") or s.get("uses") for s in failure_steps] == ["logs", "actions/upload-artifact@v4"]
    assert failure_steps[1]["with"]["path"] == "${{ steps.logs.outputs.dir }}"
    # The logs step knows whether root made the cluster (its logs are root's then).
    assert failure_steps[0]["env"]["UP_SUDO"] == "${{ steps.up.outputs.sudo }}"


def test_install_step_plans_packages_and_puts_simcluster_on_path(tmp_path):
    env = action_env(tmp_path, tmp_path / "home", backend="local", accounting="true")
    env["SIMCLUSTER_ACTION_DRY_RUN"] = "1"
    proc = step("install.sh", env)
    assert proc.returncode == 0, proc.stderr
    venv = f"{env['RUNNER_TEMP']}/simcluster-venv"
    assert f"+ python3 -m venv {venv}" in proc.stdout
    assert f"+ {venv}/bin/pip install -q --disable-pip-version-check {REPO}" in proc.stdout
    assert Path(env["GITHUB_PATH"]).read_text() == f"{venv}/bin\n"
    # Bad input: one line, exit 2, nothing done.
    env["INPUT_BACKEND"] = "kubernetes"
    Path(env["GITHUB_PATH"]).write_text("")
    proc = step("install.sh", env)
    assert proc.returncode == 2
    assert proc.stderr == "::error::simcluster action: input 'backend' must be one of: local docker; got 'kubernetes'\n"
    assert Path(env["GITHUB_PATH"]).read_text() == ""


@pytest.mark.parametrize("inputs, message", [
    ({"nodes": "two"}, "input 'nodes' must be a positive whole number; got 'two'"),
    ({"accounting": "maybe"}, "input 'accounting' must be true or false; got 'maybe'"),
    ({"sudo": "yes please"}, "input 'sudo' must be one of: auto true false; got 'yes please'"),
])
def test_up_step_rejects_bad_inputs_in_one_line(tmp_path, inputs, message):
    env = action_env(tmp_path, tmp_path / "home", **inputs)
    proc = step("up.sh", env)
    assert (proc.returncode, proc.stderr) == (2, f"::error::simcluster action: {message}\n")
    assert not (tmp_path / "home").exists()


@pytest.mark.integration
def test_up_step_hands_a_working_cluster_to_later_steps(sim_home, tmp_path):
    env = action_env(tmp_path, sim_home, name="pyt-action", nodes="2", gpus="fake:2")
    proc = step("up.sh", env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "cluster 'pyt-action' is up" in proc.stdout
    exported = Path(env["GITHUB_ENV"]).read_text()
    assert f"SLURM_CONF={sim_home}/pyt-action/etc/slurm.conf" in exported.splitlines()
    assert "name=pyt-action" in Path(env["GITHUB_OUTPUT"]).read_text().splitlines()
    later = later_step_env(env)
    job = subprocess.run(["bash", "-c", "srun -N2 --gres=gpu:1 bash -c 'echo $SLURMD_NODENAME $CUDA_VISIBLE_DEVICES'"],
                         env=later, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    constrained = json.loads((sim_home / "pyt-action" / "state.json").read_text())["provider_data"].get("cgroups")
    assert sorted(job.stdout.splitlines()) == ["node1 0", "node2 0" if constrained else "node2 1"], job.stderr
    # The failure step bundles the logs for upload-artifact.
    logs = step("logs.sh", env)
    bundle = Path(env["RUNNER_TEMP"]) / "simcluster-logs-pyt-action"
    assert logs.returncode == 0 and f"dir={bundle}" in Path(env["GITHUB_OUTPUT"]).read_text()
    assert (bundle / "logs" / "slurmctld.log").stat().st_size > 0


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("docker") is None, reason="docker CLI missing")
def test_up_step_docker_puts_slurm_command_wrappers_on_path(sim_home, tmp_path):
    env = action_env(tmp_path, sim_home, name="pyt-action-d", nodes="2", backend="docker")
    proc = step("up.sh", env, timeout=900)
    if proc.returncode != 0 and "docker engine" in proc.stderr:
        pytest.skip(proc.stderr.strip().splitlines()[-1])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # Slurm commands run in the controller container through wrappers in a directory on GITHUB_PATH.
    path_dirs = Path(env["GITHUB_PATH"]).read_text().split()
    assert len(path_dirs) == 1
    assert {"sbatch", "srun", "sinfo", "scontrol"} <= {p.name for p in Path(path_dirs[0]).iterdir()}
    assert not any(line.startswith("PATH=") for line in Path(env["GITHUB_ENV"]).read_text().splitlines())
    later = later_step_env(env)
    job = subprocess.run(["bash", "-c", "srun -N2 hostname"], env=later, cwd=tmp_path, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, timeout=120)
    assert sorted(job.stdout.split()) == ["node1", "node2"], job.stderr
