"""A cluster made by root serves other local users (docs/users.md).

Throwaway local users (useradd here, userdel at the end) log in with a fresh shell
(`su - USER`: their own HOME and umask, nothing of the test's environment), point at the
cluster with `simcluster env`, and run sinfo and sbatch: their jobs run with their uid,
gid, HOME and umask, and write to their home. The cluster's secrets (munge key, JWT key,
database password) stay unreadable to them. With accounting, `--users` gives each user an
account of their own: jobs are charged to it and a partition's AllowAccounts tells them apart.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Iterator, List

import pytest

from tests.conftest import REPO, TEST_HOME_ROOT, daemons_under, run_cli

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root: makes local users and a root cluster")]

# What only root (the cluster's SlurmUser) may read, relative to the cluster's directory.
SECRETS = ("etc/munge.key", "etc/jwt_hs256.key", "etc/slurmdbd.conf")


def login(user: str, script: str, timeout: float = 180) -> subprocess.CompletedProcess:
    """``script`` in a fresh login shell of ``user``, with only the checkout on PYTHONPATH
    and a `simcluster` function (the checkout's CLI, as an installed one would be)."""
    prelude = (f"export PYTHONPATH={REPO}; simcluster() {{ {sys.executable} -m provisioner \"$@\"; }}\n")
    return subprocess.run(["su", "-", user, "-c", prelude + script], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=timeout)


@pytest.fixture
def make_users() -> Iterator:
    """make_users(n): n throwaway local users (a home each), removed at the end."""
    made: List[str] = []

    def make(n: int) -> List[str]:
        if shutil.which("useradd") is None or shutil.which("su") is None:
            pytest.skip("useradd and su are needed to make throwaway users")
        for _ in range(n):
            name = f"sct{uuid.uuid4().hex[:8]}"
            subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", name], check=True)
            made.append(name)
        probe = login(made[0], "simcluster --version")
        if probe.returncode != 0:
            pytest.skip(f"a local user cannot run this checkout's Python ({sys.executable}): "
                        f"{probe.stderr.strip()[:200]} (put the checkout and its .venv where other users can read them)")
        return made[-n:]

    yield make
    for name in made:
        uid = pwd.getpwnam(name).pw_uid
        for entry in os.listdir("/proc"):  # only this throwaway user's processes (none should be left)
            try:
                if entry.isdigit() and Path(f"/proc/{entry}").stat().st_uid == uid:
                    os.kill(int(entry), 9)
            except (OSError, ProcessLookupError):
                pass
        subprocess.run(["userdel", "--remove", name], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.fixture
def root_home() -> Iterator[Path]:
    """A SIMCLUSTER_HOME of root's that other users can reach (as /var/lib/simcluster is)."""
    TEST_HOME_ROOT.mkdir(parents=True, exist_ok=True)
    os.chmod(TEST_HOME_ROOT, 0o1777)
    home = TEST_HOME_ROOT / f"us-{uuid.uuid4().hex[:6]}"
    yield home
    for d in sorted(home.iterdir()) if home.is_dir() else ():
        if d.is_dir():
            run_cli(["down", "--name", d.name], home)
    leftover = daemons_under(home)
    shutil.rmtree(home, ignore_errors=True)
    assert leftover == [], leftover


def _readable_by_others(path: Path, root: Path) -> bool:
    """Can a user who is neither the owner nor in the group read ``path`` under ``root``?"""
    for d in [root, *(p for p in path.parents if root in p.parents)]:
        if not d.stat().st_mode & stat.S_IXOTH:
            return False
    return bool(path.stat().st_mode & stat.S_IROTH)


def _env(home: Path, name: str) -> str:
    return f'export SIMCLUSTER_HOME={home}; eval "$(simcluster env --name {name})"\n'


def test_another_user_runs_jobs_as_themselves_and_reads_no_secret(make_users, root_home):
    user, = make_users(1)
    pw = pwd.getpwnam(user)
    name = f"us{uuid.uuid4().hex[:5]}"
    run_cli(["up", "--name", name, "--nodes", "2", "--fake-gpus", "2", "--rest", "--users", user], root_home,
            check=True)
    state = root_home / name
    assert stat.S_IMODE(state.stat().st_mode) == 0o755
    assert stat.S_IMODE((state / "munge").stat().st_mode) == 0o711

    # Every file under the state directory, as another user sees it: the client configs
    # and the hosts file readable, no secret (nor the database, the logs of root's daemons).
    readable = {str(p.relative_to(state)) for p in state.rglob("*")
                if p.is_file() and not p.is_symlink() and _readable_by_others(p, state)}
    for wanted in ("etc/slurm.conf", "etc/gres.conf", "etc/cgroup.conf", "etc/hosts", "state.json"):
        assert wanted in readable, sorted(readable)
    for secret in SECRETS:
        assert secret not in readable, secret
    keys = [(state / k).read_bytes() for k in SECRETS[:2]]
    assert all(len(k) >= 32 for k in keys)
    for rel in readable:  # nor is a key's content copied anywhere they can read
        data = (state / rel).read_bytes()
        assert not any(k in data for k in keys), rel

    # A fresh login shell: their umask changed to tell it from the default.
    out = login(user, _env(root_home, name) + f"""
umask 0027
sinfo -h -o '%D %T'
cd "$HOME"
sbatch --wait -o "$HOME/ids.out" --wrap 'id -u; id -g; echo "$HOME"; umask; pwd; echo hi > "$HOME/from-job"' >/dev/null
cat "$HOME/ids.out"
for f in {' '.join(SECRETS[:2])}; do echo "secret $f: $(cat {state}/$f 2>&1 >/dev/null)"; done
""")
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["2", "idle"], out.stdout
    assert lines[1:6] == [str(pw.pw_uid), str(pw.pw_gid), pw.pw_dir, "0027", pw.pw_dir], out.stdout
    written = Path(pw.pw_dir) / "from-job"
    assert written.read_text() == "hi\n" and written.stat().st_uid == pw.pw_uid
    for secret in SECRETS[:2]:
        assert f"secret {secret}: cat: {state}/{secret}: Permission denied" in lines, out.stdout

    # status, list and env work for them; changing root's cluster does not.
    status = login(user, f"SIMCLUSTER_HOME={root_home} simcluster status --name {name} --json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["healthy"] is True, status.stdout
    listed = login(user, f"SIMCLUSTER_HOME={root_home} simcluster list --json")
    assert [(c["name"], c["status"], c["owner"]) for c in json.loads(listed.stdout)] == [(name, "running", "root")]
    down = login(user, f"SIMCLUSTER_HOME={root_home} simcluster down --name {name}")
    assert down.returncode == 2 and "only root may change them" in down.stderr, down.stderr
    assert state.is_dir()


def test_users_with_accounting_have_an_account_each(make_users, root_home, tmp_path):
    alice, bob = make_users(2)
    name = f"ua{uuid.uuid4().hex[:5]}"
    spec = tmp_path / "users.yaml"
    spec.write_text(f"""
name: {name}
nodes: 1
accounting: true
users: [{alice}, {bob}]
partitions:
  - {{name: main, nodes: ALL, default: true}}
  - {{name: only-{alice[-4:]}, nodes: ALL, options: {{AllowAccounts: {alice}}}}}
""")
    run_cli(["up", "-c", str(spec)], root_home, check=True)
    only = f"only-{alice[-4:]}"
    # The database password is in slurmdbd.conf (0600) and in no file another user can read
    # (logs of the database's bootstrap and of sacctmgr included).
    state = root_home / name
    password = next(line.split("=", 1)[1] for line in (state / "etc/slurmdbd.conf").read_text().splitlines()
                    if line.startswith("StoragePass="))
    assert len(password) >= 16
    for path in state.rglob("*"):
        if path.is_file() and not path.is_symlink() and _readable_by_others(path, state):
            assert password.encode() not in path.read_bytes(), path
    assocs = run_cli(["exec", "--name", name, "--", "sacctmgr", "-n", "-P", "show", "user", "format=user,defaultaccount"],
                     root_home, check=True).stdout.split()
    assert f"{alice}|{alice}" in assocs and f"{bob}|{bob}" in assocs, assocs

    # sacct has the job's final record within about a second of its end (docs/accounting.md).
    ran = login(alice, _env(root_home, name) + f"""
j=$(sbatch --parsable --wait -p {only} -o /dev/null --wrap true)
for i in $(seq 100); do
  row=$(sacct -n -X -P -j $j --format=User,Account,State)
  case "$row" in *COMPLETED*) break;; esac
  sleep 0.2
done
echo "$row"
""")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert ran.stdout.split()[-1] == f"{alice}|{alice}|COMPLETED", ran.stdout + ran.stderr

    # Slurm takes bob's job and holds it (without EnforcePartLimits it is not refused at
    # submission): the partition allows alice's account only.
    refused = login(bob, _env(root_home, name) + f"""
j=$(sbatch --parsable -p {only} -o /dev/null --wrap true)
sleep 1; echo "reason: $(squeue -h -j $j -o '%T %r')"; scancel $j
sbatch --wait -o /dev/null --wrap true >/dev/null; echo "main rc=$?"
echo "secret: $(cat {root_home / name}/etc/slurmdbd.conf 2>&1 >/dev/null)"
""")
    assert (f"reason: PENDING Job's account not permitted to use this partition ({only} allows {alice} not {bob})"
            in refused.stdout), refused.stdout + refused.stderr
    assert "main rc=0" in refused.stdout, refused.stdout + refused.stderr
    assert f"secret: cat: {root_home / name}/etc/slurmdbd.conf: Permission denied" in refused.stdout, refused.stdout
