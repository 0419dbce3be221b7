"""A user who is not root but may use sudo without a password (GitHub's hosted runners: user
`runner`, `NOPASSWD: ALL`): from a fresh clone, `make setup`, the action's install and up steps,
then their own shell, as that user. They get root's cluster (`up --sudo`: a network namespace
and hostname per node, cgroups, GPU devices), jobs run as them in their own directories, and
sudo ran nothing but apt-get (make, the install step) and simcluster's own `up`/`down`, as a
sudo log (`Defaults logfile=`) shows.

The throwaway user, its sudoers drop-in and the clone in its home are made here (root) and
removed at the end. The clone is this checkout's HEAD plus its uncommitted changes to tracked
files. `make setup` makes the clone's own .venv (about 15 s here, where pip finds the wheels
in a local cache; minutes where it downloads them).
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from provisioner import paths
from provisioner.providers.local import network, network_plan
from tests.conftest import REPO, SIMCLUSTER, daemons_under

pytestmark = pytest.mark.integration
# Debian's default PATH for ordinary users (as a runner's shell has it): no /usr/sbin.
USER_PATH = "/usr/local/bin:/usr/bin:/bin"
SYSTEM_HOME = paths.SYSTEM_HOME


def as_user(user: str, script: str, env: Optional[Dict[str, str]] = None, timeout: float = 300,
            cwd: Optional[str] = None) -> subprocess.CompletedProcess:
    """``script`` in bash as ``user``, in a clean login-like environment (nothing of root's)."""
    home = pwd.getpwnam(user).pw_dir
    base = {"HOME": home, "USER": user, "LOGNAME": user, "PATH": USER_PATH, "LANG": "C.UTF-8", **(env or {})}
    return subprocess.run(["runuser", "-u", user, "--", "env", "-i", *(f"{k}={v}" for k, v in base.items()),
                           "bash", "-c", script], cwd=cwd or home, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=timeout)


def sudo_commands(log: Path) -> List[str]:
    """The commands sudo ran, in order, from its log file (one line each: loglinelen=0)."""
    if not log.exists():
        return []
    return [m.group(1) for m in re.finditer(r"COMMAND=(.*)$", log.read_text(), re.M)]


def simcluster_as_root(commands: List[str]) -> List[str]:
    """Of sudo's commands, the simcluster subcommands (`up`, `down` ...) that ran as root."""
    found = []
    for c in commands:
        m = re.search(r" (?:-P -m provisioner|-c .*main\(\)'?|\S*/bin/simcluster) (\S+)", c)
        if m:
            found.append(m.group(1))
    return found


@pytest.fixture(scope="module")
def sudo_user():
    """A throwaway user with passwordless sudo that logs every command it runs."""
    if os.geteuid() != 0:
        pytest.skip("makes a throwaway user and a sudoers drop-in: needs root")
    for program in ("sudo", "runuser", "useradd", "git", "make"):
        if shutil.which(program) is None:
            pytest.skip(f"no {program} on this machine (apt-get install {program})")
    user = f"scsudo{uuid.uuid4().hex[:6]}"
    log_dir = Path(tempfile.mkdtemp(prefix="simcluster-sudo-log-"))
    dropin = Path("/etc/sudoers.d") / user
    subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", user], check=True)
    try:
        dropin.write_text(f"Defaults:{user} logfile={log_dir}/sudo.log, loglinelen=0, !lecture\n"
                          f"{user} ALL=(ALL:ALL) NOPASSWD: ALL\n")
        dropin.chmod(0o440)
        probe = as_user(user, "sudo -n true")
        if probe.returncode != 0:
            pytest.skip(f"sudo refuses the throwaway user: {probe.stderr.strip()[:200]}")
        (log_dir / "sudo.log").unlink()
        yield user, log_dir / "sudo.log"
    finally:
        dropin.unlink(missing_ok=True)
        subprocess.run(["userdel", "--remove", user], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(log_dir, ignore_errors=True)


def fresh_clone(user: str) -> Path:
    """This checkout as a fresh clone in ``user``'s home, owned by them: HEAD, plus the
    uncommitted changes to tracked files (so the test checks the code in front of you)."""
    dest = Path(pwd.getpwnam(user).pw_dir) / "simcluster"
    git = ["git", "-c", f"safe.directory={REPO}", "-c", f"safe.directory={dest}"]
    subprocess.run(git + ["clone", "-q", "--no-hardlinks", str(REPO), str(dest)], check=True)
    diff = subprocess.run(git + ["-C", str(REPO), "diff", "HEAD", "--binary"], check=True,
                          stdout=subprocess.PIPE).stdout
    if diff.strip():
        subprocess.run(git + ["-C", str(dest), "apply", "--whitespace=nowarn"], input=diff, check=True)
    subprocess.run(["chown", "-R", f"{user}:", str(dest)], check=True)
    return dest


def test_sudo_user_gets_roots_cluster_from_a_fresh_clone(sudo_user):
    user, sudo_log = sudo_user
    uid = pwd.getpwnam(user).pw_uid
    home = Path(pwd.getpwnam(user).pw_dir)
    name = f"pyt-sudo-{uuid.uuid4().hex[:6]}"
    clone = fresh_clone(user)
    try:
        # 1. make setup, as the user: sudo for apt-get only (nothing here when every package
        # is installed already), the venv and simcluster-node-start as the user.
        t0 = time.monotonic()
        setup = as_user(user, "make setup", cwd=str(clone), timeout=900)
        setup_s = time.monotonic() - t0
        assert setup.returncode == 0, setup.stdout[-2000:] + setup.stderr[-2000:]
        ran = sudo_commands(sudo_log)
        assert all(re.match(r"/usr/bin/(env DEBIAN_FRONTEND=noninteractive )?apt-get ", c) for c in ran), ran
        assert (clone / ".venv" / "bin" / "simcluster").exists() and (clone / ".venv").stat().st_uid == uid
        print(f"make setup as {user}: {setup_s:.1f}s, sudo ran {len(ran)} apt-get command(s)")

        # 2. The action's install step, as the user: apt-get through sudo only for missing
        # packages, simcluster into a venv of the user's (its bin/ on GITHUB_PATH).
        gh = home / "gh"
        gh.mkdir()
        for f in ("env", "path", "output"):
            (gh / f).touch()
        action_env = {"GITHUB_ENV": f"{gh}/env", "GITHUB_PATH": f"{gh}/path", "GITHUB_OUTPUT": f"{gh}/output",
                      "RUNNER_TEMP": f"{gh}/tmp", "GITHUB_ACTION_PATH": str(clone)}
        subprocess.run(["chown", "-R", f"{user}:", str(gh)], check=True)
        install = as_user(user, f"mkdir -p {gh}/tmp && bash {clone}/scripts/action/install.sh",
                          dict(action_env, INPUT_BACKEND="local"), timeout=900)
        assert install.returncode == 0, install.stdout[-2000:] + install.stderr[-2000:]
        venv_bin = (gh / "path").read_text().split()[-1]
        assert Path(venv_bin, "simcluster").exists()

        # 3. The action's up step, as the user: `up --sudo` (input sudo: auto), said so.
        up_env = dict(action_env, PATH=f"{venv_bin}:{USER_PATH}", INPUT_NAME=name, INPUT_NODES="2",
                      INPUT_GPUS="fake:2")
        before = len(sudo_commands(sudo_log))
        up = as_user(user, f"bash {clone}/scripts/action/up.sh", up_env)
        assert up.returncode == 0, up.stdout + up.stderr
        assert f"::notice::simcluster up runs as root through sudo (input sudo: auto; {user} is not root)" in up.stdout
        assert f"+ simcluster up --name {name} " in up.stdout and "--sudo" in up.stdout
        assert f"up '{name}': as root through 'sudo -n' (--sudo; {user} is not root)" in up.stderr
        assert f"cluster '{name}' is up (local)" in up.stdout, up.stdout
        assert "sudo=true" in (gh / "output").read_text().splitlines()
        assert simcluster_as_root(sudo_commands(sudo_log)[before:]) == ["up"]
        state_dir = SYSTEM_HOME / name
        state = json.loads((state_dir / "state.json").read_text())

        # 4. A later step: only what the action exported. Every node a host of its own
        # (hostnames node1, node2); the user's job runs as them and writes into their dir.
        later = {"PATH": ":".join(reversed((gh / "path").read_text().split())) + ":" + USER_PATH}
        for line in (gh / "env").read_text().splitlines():
            key, _, value = line.partition("=")
            if key != "PATH":
                later[key] = value
        work = home / "work"
        step = as_user(user, f"mkdir -p {work} && cd {work} && srun -N2 hostname | sort && "
                             "sbatch --wait -N2 -o out.txt --wrap 'id -u; srun -N2 hostname | sort' >/dev/null && "
                             "squeue -h -u \"$USER\" | wc -l && sinfo -h -o '%D %t'", later)
        assert step.returncode == 0, step.stdout + step.stderr
        assert step.stdout.split("\n")[:2] == ["node1", "node2"], step.stdout
        assert step.stdout.split("\n")[2:4] == ["0", "2 idle"], step.stdout
        out = work / "out.txt"
        assert out.read_text().split() == [str(uid), "node1", "node2"]
        assert out.stat().st_uid == uid

        # 5. The user's own shell (the clone's venv): `simcluster env`, status and list find
        # root's cluster; it has what root's has (a network namespace each, cgroups where the
        # host has them), never the rootless stand-ins.
        shell = as_user(user, f"export PATH={clone}/.venv/bin:$PATH; eval \"$(simcluster env --name {name})\" && "
                              f"sinfo -h -o %D && simcluster status --name {name} --json", cwd=str(work))
        assert shell.returncode == 0, shell.stdout + shell.stderr
        count, _, status_json = shell.stdout.partition("\n")
        assert count == "2"
        status = json.loads(status_json)
        assert status["node_network"].startswith("a network namespace each"), status["node_network"]
        assert not status["node_cgroups"].startswith("rootless"), status["node_cgroups"]
        gpus = sorted(p for p in (state_dir / "dev").iterdir() if p.name.startswith("nvidia"))
        assert len(gpus) == 2 and all(p.is_char_device() for p in gpus), gpus

        # The action's failure step: root's daemon logs, bundled through sudo, handed to the user.
        logs = as_user(user, f"bash {clone}/scripts/action/logs.sh",
                       dict(later, GITHUB_OUTPUT=action_env["GITHUB_OUTPUT"], RUNNER_TEMP=action_env["RUNNER_TEMP"],
                            INPUT_NAME=name, UP_SUDO="true"))
        bundle = Path(action_env["RUNNER_TEMP"]) / f"simcluster-logs-{name}"
        assert logs.returncode == 0 and "(root's, through sudo)" in logs.stdout, logs.stdout + logs.stderr
        controller_log = bundle / "logs" / "slurmctld.log"
        assert controller_log.stat().st_size > 0 and controller_log.stat().st_uid == uid

        # 6. down: without --sudo it is refused (root's cluster); with it, everything goes.
        refused = as_user(user, f"{clone}/.venv/bin/simcluster down --name {name}")
        assert refused.returncode != 0 and "root's" in refused.stderr, refused.stderr
        down = as_user(user, f"{clone}/.venv/bin/simcluster down --sudo --name {name}")
        assert down.returncode == 0, down.stdout + down.stderr
        assert f"down '{name}': as root through 'sudo -n'" in down.stderr
        assert not state_dir.exists()
        assert daemons_under(state_dir) == []
        assert network.leftovers(network_plan.tag_of(state["root"])) == []
        # sudo ran apt-get, the probe `true`, simcluster's up, export-logs (and the chown of its
        # bundle) and down: nothing else.
        ran = sudo_commands(sudo_log)
        others = [c for c in ran if not re.match(r"/usr/bin/(env DEBIAN_FRONTEND=noninteractive )?apt-get |"
                                                 r"/usr/bin/true$", c)]
        assert simcluster_as_root(others) == ["up", "export-logs", "down"], ran
        assert [c for c in others if not simcluster_as_root([c])] == [f"/usr/bin/chown -R {uid}:{uid} {bundle}"], ran
    finally:
        subprocess.run(SIMCLUSTER + ["down", "--name", name], env=dict(os.environ, SIMCLUSTER_HOME=str(SYSTEM_HOME)),
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
