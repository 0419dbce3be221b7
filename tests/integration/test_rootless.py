"""Rootless: an ordinary user brings up a cluster without sudo, and jobs run as that user."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.conftest import REPO, TEST_HOME_ROOT, daemons_under, wait_for

pytestmark = pytest.mark.integration
TEST_USER = "simcluster-test"
# Debian's default PATH for ordinary users (/etc/login.defs ENV_PATH, /etc/profile): no
# /usr/sbin or /sbin, where the packages install slurmd, slurmctld, munged.
DEBIAN_USER_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games"


def _as_user(user: str, argv, env=None, timeout=120) -> subprocess.CompletedProcess:
    full = ["runuser", "-u", user, "--", "env", *(f"{k}={v}" for k, v in (env or {}).items()), *argv]
    return subprocess.run(full, cwd="/", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=timeout)


@pytest.fixture
def unprivileged_user():
    """An ordinary user to run simcluster as (created when the suite runs as root)."""
    if os.getuid() != 0:
        yield pwd.getpwuid(os.getuid()).pw_name  # already rootless
        return
    if shutil.which("runuser") is None:
        pytest.skip("runuser not available to switch to an unprivileged user")
    try:
        pwd.getpwnam(TEST_USER)
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", TEST_USER], check=True)
    probe = _as_user(TEST_USER, [sys.executable, "-c", "import provisioner"], env={"PYTHONPATH": str(REPO)})
    if probe.returncode != 0:
        pytest.skip(f"{TEST_USER} cannot run this checkout's Python ({sys.executable}): {probe.stderr.strip()[:200]} "
                    "(put the checkout and its .venv where other users can read them)")
    yield TEST_USER


def test_rootless_cluster_runs_jobs_as_the_user(unprivileged_user):
    TEST_HOME_ROOT.mkdir(parents=True, exist_ok=True)
    os.chmod(TEST_HOME_ROOT, 0o1777)
    home = TEST_HOME_ROOT / f"rl-{uuid.uuid4().hex[:6]}"
    # The user's PATH as Debian sets it: simcluster finds the daemons by absolute path.
    env = {"SIMCLUSTER_HOME": str(home), "PYTHONPATH": str(REPO), "HOME": "/tmp", "PATH": DEBIAN_USER_PATH}
    cli = [sys.executable, "-m", "provisioner"]
    try:
        up = _as_user(unprivileged_user, cli + ["up", "--name", "rl", "--nodes", "2", "--fake-gpus", "2"], env)
        assert up.returncode == 0, up.stderr
        # What the nodes lack without root, said by `up` itself.
        assert "unlike a production host here: network: " in up.stdout, up.stdout
        assert "unlike a production host here: limits: " in up.stdout, up.stdout
        # ... and how to get them: root, or --sudo (never used unasked).
        assert "or with --sudo where you may use sudo without a password" in up.stdout, up.stdout
        conf = home / "rl" / "etc" / "slurm.conf"
        text = conf.read_text()
        assert f"SlurmUser={unprivileged_user}" in text and f"SlurmdUser={unprivileged_user}" in text
        job_env = dict(env, SLURM_CONF=str(conf))
        out = _as_user(unprivileged_user, ["srun", "-N2", "--gres=gpu:1", "bash", "-c",
                                           "echo $(id -un):$SLURMD_NODENAME:$CUDA_VISIBLE_DEVICES"], job_env)
        assert out.returncode == 0, out.stderr
        assert sorted(out.stdout.split()) == [f"{unprivileged_user}:node1:0", f"{unprivileged_user}:node2:1"]
        # Nodes in namespaces have host names of their own, and slurm.conf says so (slurmctld
        # finds an srun in a job by its host name); without them they share this host's.
        resolver = json.loads((home / "rl" / "state.json").read_text())["provider_data"]["resolver"]
        names = _as_user(unprivileged_user, ["sinfo", "-h", "-N", "-o", "%n"], job_env).stdout.split()
        own = ["node1", "node2"] if resolver == "mount-namespace" else [os.uname().nodename.split(".")[0]] * 2
        assert names == own, (resolver, names)
        # A step cancelled in a batch job: its srun hears of it from slurmctld.
        step_out = home / "step.out"
        job = _as_user(unprivileged_user, ["sbatch", "--parsable", "-N2", "-o", str(step_out), "--wrap",
                                           "srun sleep 60 & until squeue -h -s -j $SLURM_JOB_ID | grep -q $SLURM_JOB_ID.0; "
                                           "do sleep 0.2; done; scancel $SLURM_JOB_ID.0; wait"], job_env)
        assert job.returncode == 0, job.stderr
        wait_for("the batch job to end", lambda: not _as_user(unprivileged_user, ["squeue", "-h", "-j", job.stdout.strip()],
                                                                job_env).stdout.strip(), timeout=90)
        text = step_out.read_text()
        assert "srun: Job step aborted" in text and "Force Terminated" not in text, text
        # A daemon's command line names its program by absolute path (none by bare name).
        # (daemons_under has read each command line already: a short-lived helper that has
        # exited since must not fail the test by vanishing from /proc.)
        for line in daemons_under(home / "rl"):
            argv0 = line.split(": ", 1)[1].split(" ")[0]
            assert argv0.startswith("/"), line
        # Where the nodes have namespaces, a job finds the cluster's config without SLURM_CONF
        # at /etc/slurm, as on a production node; status says what they see either way.
        st = json.loads(_as_user(unprivileged_user, cli + ["status", "--name", "rl", "--json"], env).stdout)
        if st["node_etc_slurm"].startswith("the cluster's config"):
            job = _as_user(unprivileged_user, ["srun", "-N1", "-w", "node2", "sh", "-c",
                                               "env -u SLURM_CONF scontrol show config | grep ClusterName"], job_env)
            assert job.returncode == 0 and job.stdout.split()[-1] == "rl", job.stdout + job.stderr
        else:
            assert "SLURM_CONF" in st["node_etc_slurm"], st["node_etc_slurm"]
        # Without root no network namespace or cgroup can be made: status says what the
        # nodes share instead (never a silent difference).
        assert st["node_network"].startswith(("rootless", "no namespaces")), st["node_network"]
        assert "not enforced" in st["node_cgroups"], st["node_cgroups"]
        # Every daemon runs as the user, none as root.
        for line in daemons_under(home / "rl"):
            pid = int(line.split(":")[0])
            try:
                owner = Path(f"/proc/{pid}").stat().st_uid
            except FileNotFoundError:
                continue  # exited since it was listed
            assert owner == pwd.getpwnam(unprivileged_user).pw_uid, line
        down = _as_user(unprivileged_user, cli + ["down", "--name", "rl"], env)
        assert down.returncode == 0, down.stderr
        assert daemons_under(home) == []
        assert not (home / "rl").exists()
    finally:
        subprocess.run(cli + ["down", "--name", "rl"], env=dict(os.environ, SIMCLUSTER_HOME=str(home)),
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(home, ignore_errors=True)
