"""Unit-test helpers: pinned render inputs, and a SIMCLUSTER_HOME for CLI error paths.

Unit tests start no daemon. The CLI error tests run the real command line in a fresh,
short SIMCLUSTER_HOME and check afterwards that it holds no cluster and that no process
mentions it. Unlike ``sim_home`` this fixture never runs ``down --all`` (that would also
remove docker clusters other people run on this machine): a leftover is a test failure.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from provisioner.config.validate import validate
from provisioner.nodepaths import NodePaths
from provisioner.paths import ClusterLayout
from provisioner.render import RenderInputs, default_ports
from tests.conftest import TEST_HOME_ROOT, daemons_under, run_cli

# Host facts pinned for validation, so results do not depend on the machine.
HOST_CPUS = 4
HOST_MEMORY_MB = 8000
NSS_LIB = "/usr/lib/x86_64-linux-gnu/libnss_wrapper.so"


def spec_from(raw: Dict, host_cpus: int = HOST_CPUS, host_memory_mb: int = HOST_MEMORY_MB):
    return validate(dict(raw), host_cpus=host_cpus, host_memory_mb=host_memory_mb)


def fixed_inputs(spec, root: str = "/state/x", nss: Optional[str] = NSS_LIB,
                 controller_port: int = 6817) -> RenderInputs:
    """RenderInputs that never look at the machine: fixed host, user, ports and paths."""
    return RenderInputs(paths=NodePaths.of_layout(ClusterLayout(Path(root))), hostname="simhost", slurm_user="slurm",
                        controller_port=controller_port, node_ports=default_ports(spec),
                        nss_wrapper_lib=nss)


def cluster_dirs(home: Path) -> List[str]:
    """Directories under a SIMCLUSTER_HOME: each would be a (half-made) cluster."""
    if not home.exists():
        return []
    return sorted(p.name for p in home.iterdir() if p.is_dir())


@pytest.fixture
def cli_home():
    """A fresh, short SIMCLUSTER_HOME that must hold no cluster and no process at the end."""
    TEST_HOME_ROOT.mkdir(parents=True, exist_ok=True)
    home = TEST_HOME_ROOT / f"u{uuid.uuid4().hex[:8]}"
    yield home
    leftover_dirs = cluster_dirs(home)
    leftover_procs = daemons_under(home)
    for name in leftover_dirs:  # clean up only what this test made: local clusters, by name
        if (home / name / "state.json").exists():  # else `down` could find a docker cluster of that name
            run_cli(["down", "--name", name], home)
    shutil.rmtree(home, ignore_errors=True)
    assert not leftover_dirs, f"cluster directories left in {home}: {leftover_dirs}"
    assert not leftover_procs, f"processes left running: {leftover_procs}"
