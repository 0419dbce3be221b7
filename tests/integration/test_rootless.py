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
    """An ordinary user to run simcluster as: as root, a throwaway one (useradd here, userdel
    at the end), so the rootless tests run wherever the suite runs as root."""
    if os.getuid() != 0:
        yield pwd.getpwuid(os.getuid()).pw_name  # already rootless
        return
    for program in ("runuser", "useradd", "userdel"):
        if shutil.which(program) is None:
            pytest.skip(f"no {program} here to make a throwaway ordinary user")
    user = f"scrl{uuid.uuid4().hex[:6]}"
    subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", user], check=True)
    try:
        probe = _as_user(user, [sys.executable, "-c", "import provisioner"], env={"PYTHONPATH": str(REPO)})
        if probe.returncode != 0:
            pytest.skip(f"{user} cannot run this checkout's Python ({sys.executable}): {probe.stderr.strip()[:200]} "
                        "(put the checkout and its .venv where other users can read them)")
        yield user
    finally:
        # --force: processes of the user that died but were not reaped (zombies) still count.
        subprocess.run(["userdel", "--remove", "--force", user], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _user_namespaces_work(user: str) -> bool:
    """Can ``user`` make a user namespace with mount, UTS, PID and network namespaces here?
    (Where not, Ubuntu's AppArmor restriction or a container's seccomp: the fallback.)"""
    return _as_user(user, ["unshare", "--user", "--map-root-user", "--mount", "--uts", "--pid", "--fork", "--net",
                           "hostname", "probe"]).returncode == 0


def _in_user_shell(user: str, script: str, env, timeout=120) -> subprocess.CompletedProcess:
    """``script`` in bash as ``user``, pointed at the cluster by `simcluster env` as a user's
    shell would be (its wrappers first on PATH where the nodes have a network of their own)."""
    prelude = f'eval "$({sys.executable} -m provisioner env --name rl)" || exit 99\n'
    return _as_user(user, ["bash", "-c", prelude + script], env, timeout=timeout)


def test_rootless_cluster_runs_jobs_as_the_user(unprivileged_user):
    TEST_HOME_ROOT.mkdir(parents=True, exist_ok=True)
    os.chmod(TEST_HOME_ROOT, 0o1777)
    home = TEST_HOME_ROOT / f"rl-{uuid.uuid4().hex[:6]}"
    # The user's PATH as Debian sets it: simcluster finds the daemons by absolute path.
    env = {"SIMCLUSTER_HOME": str(home), "PYTHONPATH": str(REPO), "HOME": "/tmp", "PATH": DEBIAN_USER_PATH}
    cli = [sys.executable, "-m", "provisioner"]
    namespaces = _user_namespaces_work(unprivileged_user)
    holder = None
    try:
        up = _as_user(unprivileged_user, cli + ["up", "--name", "rl", "--nodes", "2", "--fake-gpus", "2"], env)
        assert up.returncode == 0, up.stderr
        data = json.loads((home / "rl" / "state.json").read_text())["provider_data"]
        # Where this user may make user namespaces, the nodes are hosts of their own: names,
        # mounts, process tables and a network (a namespace and address each); else the
        # libnss_wrapper fallback, and `up` says what the nodes lack.
        assert (data["resolver"] == "mount-namespace") == namespaces, (namespaces, data)
        assert bool(data.get("network")) == namespaces, (namespaces, data)
        if not namespaces:
            assert "unlike a production host here: network: " in up.stdout, up.stdout
        assert "unlike a production host here: limits: " in up.stdout, up.stdout
        # ... and how to get them: root, or --sudo (never used unasked).
        assert "or with --sudo where you may use sudo without a password" in up.stdout, up.stdout
        conf = home / "rl" / "etc" / "slurm.conf"
        text = conf.read_text()
        assert f"SlurmUser={unprivileged_user}" in text and f"SlurmdUser={unprivileged_user}" in text
        # From the user's shell (`simcluster env`): jobs run as the user, on their nodes.
        out = _in_user_shell(unprivileged_user, "srun -N2 --gres=gpu:1 bash -c "
                             "'echo $(id -un):$SLURMD_NODENAME:$CUDA_VISIBLE_DEVICES'", env)
        assert out.returncode == 0, out.stderr
        assert sorted(out.stdout.split()) == [f"{unprivileged_user}:node1:0", f"{unprivileged_user}:node2:1"]
        # Nodes in namespaces have host names of their own, and slurm.conf says so (slurmctld
        # finds an srun in a job by its host name); without them they share this host's.
        names = _in_user_shell(unprivileged_user, "sinfo -h -N -o %n", env).stdout.split()
        own = ["node1", "node2"] if namespaces else [os.uname().nodename.split(".")[0]] * 2
        assert names == own, (namespaces, names)
        if namespaces:
            net = data["network"]
            holder = int((Path(net["netns_dir"]) / "holder.pid").read_text().split()[0])
            # srun -N2 hostname from the user's shell prints the nodes' names; in a job each
            # node has its own address, process table (pid 1 is the node's init) and /etc/slurm.
            out = _in_user_shell(unprivileged_user, "srun -N2 hostname", env)
            assert sorted(out.stdout.split()) == ["node1", "node2"], out.stdout + out.stderr
            out = _in_user_shell(unprivileged_user, "srun -N2 bash -c 'echo $SLURMD_NODENAME $(hostname -i) "
                                 "$(cat /proc/1/comm) $(ps -e --no-headers | wc -l) "
                                 "$(env -u SLURM_CONF scontrol show config | grep -c ClusterName)'", env)
            assert out.returncode == 0, out.stderr
            for line in out.stdout.splitlines():
                node, addr, init, procs, conf_found = line.split()
                assert addr == net["addrs"][node], line
                assert init.startswith(("simcluster-nod", "tini")) and int(procs) < 20 and conf_found == "1", line
            # Two jobs on two nodes bind 0.0.0.0:29500 at once (the same port in two namespaces).
            bind = ("import socket, time; s = socket.socket(); s.bind(('0.0.0.0', 29500)); s.listen(); "
                    "time.sleep(2); print(socket.gethostname(), 'bound')")
            out = _in_user_shell(unprivileged_user, f'srun -N1 -w node1 python3 -c "{bind}" & '
                                 f'srun -N1 -w node2 python3 -c "{bind}"; wait', env)
            assert sorted(out.stdout.split("\n")[:2]) == ["node1 bound", "node2 bound"], out.stdout + out.stderr
            # verify --suite basic as the user: isolation passes (port, source address, /etc/slurm),
            # limits skip with the host's reason.
            ver = _as_user(unprivileged_user, cli + ["verify", "--name", "rl", "--suite", "basic", "--json"], env,
                           timeout=600)
            results = {r["name"]: r for r in json.loads(ver.stdout)["checks"]}
            # (the GPU part skips: without device cgroups every node's jobs may open every GPU)
            iso = results["basic.isolation"]
            assert iso["status"] in ("PASS", "SKIP"), iso
            for part in ("same port on 2 nodes", "peer address", "/etc/slurm"):
                assert f"{part}:" in iso["message"], (part, iso["message"])
            assert iso["status"] == "PASS" or "GPU devices SKIP" in iso["message"], iso["message"]
            assert results["basic.limits"]["status"] == "SKIP" and "rootless" in results["basic.limits"]["message"], \
                results["basic.limits"]
            assert not [n for n, r in results.items() if r["status"] == "FAIL"], ver.stdout
        # A step cancelled in a batch job: its srun hears of it from slurmctld.
        step_out = home / "step.out"
        job = _in_user_shell(unprivileged_user, f"sbatch --parsable -N2 -o {step_out} --wrap "
                             "'srun sleep 60 & until squeue -h -s -j $SLURM_JOB_ID | grep -q $SLURM_JOB_ID.0; "
                             "do sleep 0.2; done; scancel $SLURM_JOB_ID.0; wait'", env)
        assert job.returncode == 0, job.stderr
        wait_for("the batch job to end", lambda: not _in_user_shell(
            unprivileged_user, f"squeue -h -j {job.stdout.strip()}", env).stdout.strip(), timeout=90)
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
            job = _in_user_shell(unprivileged_user, "srun -N1 -w node2 sh -c "
                                 "'env -u SLURM_CONF scontrol show config | grep ClusterName'", env)
            assert job.returncode == 0 and job.stdout.split()[-1] == "rl", job.stdout + job.stderr
        else:
            assert "SLURM_CONF" in st["node_etc_slurm"], st["node_etc_slurm"]
        # status says what the nodes have (never a silent difference): a network of their own
        # in the cluster's user namespace, or the host's; no cgroups without root.
        if namespaces:
            assert st["node_network"].startswith("a network namespace each") and "user namespace" in \
                st["node_network"], st["node_network"]
        else:
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
        # The user namespace that kept the cluster's network is gone with it.
        if holder:
            assert not _alive(holder), f"the cluster's user namespace holder {holder} outlived down"
    finally:
        subprocess.run(cli + ["down", "--name", "rl"], env=dict(os.environ, SIMCLUSTER_HOME=str(home)),
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if holder and _alive(holder):
            os.kill(holder, 9)
        shutil.rmtree(home, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False
