"""Shared fixtures: a private SIMCLUSTER_HOME per test, a CLI runner, clusters that always go down.

Integration tests start real munged/slurmctld/slurmd. Every cluster a test creates is
removed by the fixture, and the session ends by checking that no daemon of any test
cluster is left running.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, Iterator, List, Optional

import pytest

REPO = Path(__file__).resolve().parents[1]
SIMCLUSTER = [sys.executable, "-m", "provisioner"]
# Short: the munge socket path must fit in 107 characters. A second session beside this one
# (scripts/test_lanes.py's VM lane) names its own, so neither counts the other's daemons.
TEST_HOME_ROOT = Path(os.environ.get("SIMCLUSTER_TEST_HOME_ROOT") or Path(tempfile.gettempdir()) / "simcluster-tests")


def run_cli(args: List[str], home: Path, check: bool = False, timeout: float = 180,
            env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
    """Run `simcluster ARGS` as a real subprocess with SIMCLUSTER_HOME=home."""
    full_env = dict(os.environ)
    full_env["SIMCLUSTER_HOME"] = str(home)
    full_env.pop("SLURM_CONF", None)
    if env:
        full_env.update(env)
    proc = subprocess.run(SIMCLUSTER + list(args), cwd=REPO, env=full_env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"simcluster {' '.join(args)} exited {proc.returncode}\n"
                             f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


def user_shell(home: Path, name: str, script: str, timeout: float = 180, cwd=None) -> subprocess.CompletedProcess:
    """Run ``script`` as a user does: a fresh bash (no SLURM_* of this process), then
    `eval "$(simcluster env --name NAME)"`, then the script's commands."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "SIMCLUSTER"))}
    env["SIMCLUSTER_HOME"] = str(home)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    # What the user types, with the exit status of `simcluster env` kept (eval's is not it).
    prologue = (f"simcluster() {{ {shlex.quote(sys.executable)} -m provisioner \"$@\"; }}\n"
                f'exports=$(simcluster env --name {shlex.quote(name)}) || exit 99\neval "$exports"\n')
    return subprocess.run(["bash", "-c", prologue + script], env=env, cwd=cwd or home, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=timeout)


def daemons_under(path: Path) -> List[str]:
    """Live (non-zombie) processes whose command line mentions ``path``."""
    found = []
    needle = str(path).encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
            stat = Path(f"/proc/{entry}/stat").read_bytes()
        except OSError:
            continue
        state = stat[stat.rfind(b")") + 2:stat.rfind(b")") + 3]
        if needle in cmd and state not in (b"Z", b"X"):
            text = cmd.replace(b"\0", b" ").decode(errors="replace")
            found.append(f"{entry}: {text}")
    return found


def docker_clusters_under(path: Path) -> List[str]:
    """Names of docker clusters whose state directory is under ``path`` (a test's home)."""
    if shutil.which("docker") is None:
        return []
    proc = subprocess.run(["docker", "ps", "-a", "--filter", "label=io.simcluster.cluster", "--format",
                           '{{.Label "io.simcluster.cluster"}} {{.Label "io.simcluster.state-dir"}}'],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=60)
    names = set()
    for line in proc.stdout.splitlines():
        name, _, state = line.partition(" ")
        if state == str(path) or state.startswith(str(path) + "/"):
            names.add(name)
    return sorted(names)


@pytest.fixture
def sim_home():
    """A fresh SIMCLUSTER_HOME; every cluster in it is taken down afterwards."""
    TEST_HOME_ROOT.mkdir(parents=True, exist_ok=True)
    home = TEST_HOME_ROOT / uuid.uuid4().hex[:8]
    home.mkdir()
    yield home
    # Only this test's local clusters: `down --all` would also remove every docker cluster
    # on the machine, including ones that are not the test's.
    if home.exists():
        for child in sorted(home.iterdir()):
            if (child / "state.json").exists():
                run_cli(["down", "--name", child.name], home)
    # Docker clusters have no state.json: found by the state-dir label their containers carry.
    left_in_docker = docker_clusters_under(home)
    for name in left_in_docker:
        run_cli(["down", "--name", name], home)
    leftover = daemons_under(home) + [f"docker cluster {n}" for n in left_in_docker]
    shutil.rmtree(home, ignore_errors=True)
    assert not leftover, f"processes left running after the test: {leftover}"


class Cluster:
    """A running test cluster: run Slurm commands against it."""

    def __init__(self, home: Path, name: str, up_output: subprocess.CompletedProcess):
        self.home, self.name, self.up_output = home, name, up_output

    @property
    def root(self) -> Path:
        return self.home / self.name

    @property
    def slurm_conf(self) -> Path:
        return self.root / "etc" / "slurm.conf"

    @property
    def gpus_constrained(self) -> bool:
        """True where the nodes have device cgroups (local as root): a job then sees only its
        own GPUs, numbered from 0 as Slurm numbers them, as in production; False: the
        TaskProlog gives the node's physical GPU ids."""
        state = json.loads((self.root / "state.json").read_text())
        return bool(state.get("provider_data", {}).get("cgroups"))

    def env(self) -> Dict[str, str]:
        env = dict(os.environ)
        env["SLURM_CONF"] = str(self.slurm_conf)
        env["SIMCLUSTER_HOME"] = str(self.home)
        return env

    def run(self, argv: List[str], timeout: float = 120, check: bool = True, cwd=None) -> subprocess.CompletedProcess:
        proc = subprocess.run(argv, env=self.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, timeout=timeout, cwd=cwd)
        if check and proc.returncode != 0:
            raise AssertionError(f"{argv} exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
        return proc

    def cli(self, args: List[str], **kw) -> subprocess.CompletedProcess:
        return run_cli(args + ["--name", self.name] if args and args[0] not in ("exec",) else args, self.home, **kw)


@pytest.fixture
def make_cluster(sim_home):
    """Factory: make_cluster('--nodes', '2', ...) brings a cluster up and returns a Cluster."""
    def _make(*args: str, name: Optional[str] = None) -> Cluster:
        name = name or f"t{uuid.uuid4().hex[:6]}"
        proc = run_cli(["up", "--name", name, *args], sim_home, check=True)
        return Cluster(sim_home, name, proc)
    return _make


@contextmanager
def module_cluster(name: str, *up_args: str) -> Iterator[Cluster]:
    """One cluster for a whole test module (a module-scoped fixture yields from this): its
    own SIMCLUSTER_HOME, taken down afterwards; a daemon left running fails the teardown."""
    TEST_HOME_ROOT.mkdir(parents=True, exist_ok=True)
    home = TEST_HOME_ROOT / uuid.uuid4().hex[:8]
    home.mkdir()
    try:
        proc = run_cli(["up", "--name", name, *up_args], home, check=True)
        yield Cluster(home, name, proc)
    finally:
        run_cli(["down", "--name", name], home)
        leftover = daemons_under(home)
        shutil.rmtree(home, ignore_errors=True)
        assert not leftover, f"processes left running after the module: {leftover}"


def pytest_sessionfinish(session, exitstatus):
    """Belt and braces: nothing under the test home may still run when the suite ends."""
    if TEST_HOME_ROOT.exists():
        leftover = daemons_under(TEST_HOME_ROOT) + [f"docker cluster {n}"
                                                    for n in docker_clusters_under(TEST_HOME_ROOT)]
        if leftover:
            print(f"\nERROR: test daemons left running: {leftover}", file=sys.stderr)
            session.exitstatus = 1


def not_passed(checks: List[Dict], node_cgroups: str, may_skip=()) -> Dict[str, tuple]:
    """The verify checks (``checks``: the report's) that did not PASS, less those that SKIP
    for what the cluster says it cannot enforce here (``node_cgroups``, status's line:
    an unprivileged docker cluster, a deployment without cgroups), with that reason in their
    message, never silently; and less the SKIPs of ``may_skip``."""
    limit = node_cgroups if "not enforced" in node_cgroups else ""
    return {c["name"]: (c["status"], c["message"], c.get("first_error"), (c.get("tail") or "")[-600:])
            for c in checks
            if c["status"] != "PASS"
            and not (c["status"] == "SKIP" and (c["name"] in may_skip or (limit and limit in c["message"])))}


def wait_for(what, cond, timeout=60.0, poll=0.3):
    """Poll ``cond()`` until it holds; fail the test naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(poll)
    raise AssertionError(f"timed out waiting for {what}")
