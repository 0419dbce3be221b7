"""Where a cluster's files live: one directory per cluster under $SIMCLUSTER_HOME."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

REPO_ROOT = Path(__file__).resolve().parents[1]
# What `up`, `image build` and `deploy` read at run time: the Slurm config templates
# (configs/templates), the node image's build context (docker/) and the Ansible playbook
# (ansible/), the container plugin's source (spank/: the node image compiles it). Their one source is the top level of the checkout; the build (setup.py) puts
# them into the package as provisioner/data/<same path>, so a wheel installed anywhere
# needs no checkout. Running from a checkout (the tree itself, an editable install) reads
# the top-level directories; an installed package reads its own copy.
RUN_TIME_DIRS = ("ansible", "docker", "configs/templates", "spank")
PACKAGED_DATA_DIR = Path(__file__).resolve().parent / "data"


def _data_root() -> Path:
    """The checkout's top level when this module runs from a checkout, else the package's data/."""
    if (REPO_ROOT / "pyproject.toml").is_file() and all((REPO_ROOT / d).is_dir() for d in RUN_TIME_DIRS):
        return REPO_ROOT
    return PACKAGED_DATA_DIR


DATA_DIR = _data_root()
DOCKER_CONTEXT_DIR = DATA_DIR / "docker"
PLAYBOOK_DIR = DATA_DIR / "ansible"
TEMPLATES_DIR = DATA_DIR / "configs" / "templates"


# Where root's clusters live by default: outside root's home (mode 0700 on Debian), so that
# every local user can reach them (docs/users.md). Other users' commands look here for a
# cluster their own $SIMCLUSTER_HOME does not have (clusters.find_state).
SYSTEM_HOME = Path("/var/lib/simcluster")


def simcluster_home() -> Path:
    """Root of all clusters' state: $SIMCLUSTER_HOME; else for root SYSTEM_HOME, for anyone
    else $XDG_STATE_HOME/simcluster (~/.local/state/simcluster)."""
    env = os.environ.get("SIMCLUSTER_HOME")
    if env:
        return Path(env).expanduser().resolve()
    if os.geteuid() == 0:
        return SYSTEM_HOME
    return personal_home()


def personal_home() -> Path:
    """$XDG_STATE_HOME/simcluster: an ordinary user's default SIMCLUSTER_HOME (and root's,
    before root's clusters moved to SYSTEM_HOME)."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base).resolve() / "simcluster"


def shared_home() -> Optional[Path]:
    """Where this user's commands also look for a cluster by name: root's SYSTEM_HOME, for
    anyone but root who did not set SIMCLUSTER_HOME; else None."""
    if os.environ.get("SIMCLUSTER_HOME") or os.geteuid() == 0:
        return None
    return SYSTEM_HOME


def state_dir_mode() -> int:
    """Mode of $SIMCLUSTER_HOME and of each cluster's directory when simcluster makes them:
    root's clusters serve every local user, who read the client configs and reach the
    munge socket in them (the secrets inside keep modes of their own: docs/users.md);
    an ordinary user's cluster runs jobs as that user only, and stays private."""
    return 0o755 if os.geteuid() == 0 else 0o700


@contextlib.contextmanager
def shared_umask() -> Iterator[None]:
    """As root, umask 022 while a cluster is made or started: what `up` writes and what its
    daemons create (configs 0644, directories 0755) is readable by every local user whatever
    root's own umask (secrets are written with modes of their own). Anyone else: unchanged."""
    if os.geteuid() != 0:
        yield
        return
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def templates_dir() -> Path:
    """configs/templates: the one source of Slurm config text ($SIMCLUSTER_TEMPLATES overrides)."""
    env = os.environ.get("SIMCLUSTER_TEMPLATES")
    return Path(env) if env else TEMPLATES_DIR


@dataclass(frozen=True)
class ClusterLayout:
    """Every path of one cluster, derived from its directory."""

    root: Path

    @classmethod
    def for_name(cls, name: str, home: Optional[Path] = None) -> "ClusterLayout":
        return cls((home or simcluster_home()) / name)

    @property
    def state_file(self) -> Path:
        return self.root / "state.json"

    @property
    def etc(self) -> Path:
        return self.root / "etc"

    @property
    def slurm_conf(self) -> Path:
        return self.etc / "slurm.conf"

    @property
    def task_prolog(self) -> Path:
        return self.etc / "task_prolog.sh"

    @property
    def hosts_file(self) -> Path:
        return self.etc / "hosts"

    @property
    def munge_dir(self) -> Path:
        return self.root / "munge"

    @property
    def munge_key(self) -> Path:
        # With the configs: every backend writes it there, next to slurm.conf.
        return self.etc / "munge.key"

    @property
    def munge_socket(self) -> Path:
        return self.munge_dir / "munge.socket"

    @property
    def log(self) -> Path:
        return self.root / "log"

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def spool(self) -> Path:
        return self.root / "spool"

    @property
    def state_save(self) -> Path:
        return self.root / "slurmctld"

    @property
    def dev(self) -> Path:
        return self.root / "dev"

    def daemon_log(self, daemon: str) -> Path:
        return self.log / f"{daemon}.log"
