"""Sanity checks before anything is created: binaries, libraries, GPUs, ports, paths."""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from provisioner.cluster.model.command_runner import find_binary
from provisioner.config.types import ClusterSpec
from provisioner.errors import PrerequisiteError, UsageError
from provisioner.paths import ClusterLayout
from provisioner.providers.local import names
from provisioner.providers.local.ports import check_ports_free

REQUIRED_BINARIES = {
    "munged": "munge",
    "slurmctld": "slurmctld",
    "slurmd": "slurmd",
    "sinfo": "slurm-client",
    "scontrol": "slurm-client",
    "srun": "slurm-client",
}
NSS_WRAPPER_CANDIDATES = [
    "/usr/lib/x86_64-linux-gnu/libnss_wrapper.so",
    "/usr/lib/aarch64-linux-gnu/libnss_wrapper.so",
    "/usr/lib64/libnss_wrapper.so",
    "/usr/lib/libnss_wrapper.so",
]
SOCKET_PATH_MAX = 107  # sun_path is 108 bytes with the trailing NUL


def require_binaries(required: Dict[str, str] = REQUIRED_BINARIES, what: str = "missing program(s)") -> None:
    """Raise PrerequisiteError naming the missing programs of ``required`` ({binary: package})."""
    missing = [b for b in required if not find_binary(b)]
    if missing:
        pkgs = " ".join(sorted({required[b] for b in missing}))
        raise PrerequisiteError(f"{what}: {', '.join(missing)}", f"run 'make setup' or 'sudo apt-get install {pkgs}'",
                                doc="docs/troubleshooting.md#missing-programs")


def find_nss_wrapper() -> str:
    for cand in NSS_WRAPPER_CANDIDATES:
        if os.path.exists(cand):
            return cand
    raise PrerequisiteError("libnss_wrapper.so not found (needed so node names resolve inside jobs)",
                            "run 'make setup' or 'sudo apt-get install libnss-wrapper'",
                            doc="docs/troubleshooting.md#name-resolution-library-not-found")


def check_gpus(spec: ClusterSpec, dev_dir: Path = Path("/dev")) -> None:
    if spec.fake_gpus:
        return
    for node in spec.nodes:
        for gpu in node.gpus:
            path = dev_dir / f"nvidia{gpu}"
            try:
                is_char = stat.S_ISCHR(path.stat().st_mode)
            except OSError:
                is_char = False
            if not is_char:
                raise UsageError(f"GPU {gpu} not found ({path} is not a character device)",
                                 "list GPUs that exist (nvidia-smi -L), or add --fake-gpus to simulate them",
                                 doc="docs/troubleshooting.md#gpu-not-found")


def check_paths(layout: ClusterLayout) -> None:
    sock = str(layout.munge_socket)
    if len(sock.encode()) > SOCKET_PATH_MAX:
        raise UsageError(f"cluster directory path is too long for a unix socket ({len(sock)} > "
                         f"{SOCKET_PATH_MAX} characters): {layout.root}",
                         "set SIMCLUSTER_HOME to a shorter directory", doc="docs/troubleshooting.md#socket-path-too-long")


def check_users(spec: ClusterSpec, layout: ClusterLayout) -> None:
    """``users`` (docs/users.md): each must be a local user already (simcluster creates no
    system accounts); only root's slurmd can run jobs as someone else; and they must reach
    the cluster's directory (every directory above it searchable by others)."""
    if not spec.users:
        return
    missing = []
    for user in spec.users:
        try:
            pwd.getpwnam(user)
        except KeyError:
            missing.append(user)
    if missing:
        raise UsageError(f"users: no local user {', '.join(repr(u) for u in missing)} on this host",
                         f"create {'it' if len(missing) == 1 else 'them'} first: " + "; ".join(f"useradd --create-home {u}" for u in missing),
                         doc="docs/users.md")
    me = pwd.getpwuid(os.geteuid()).pw_name
    others = [u for u in spec.users if u != me]
    if os.geteuid() != 0 and others:
        raise UsageError(f"users: jobs of {', '.join(others)} need a cluster made by root (only root's slurmd "
                         f"runs jobs as another user; this one would run every job as {me})",
                         "run up as root (sudo simcluster up ...), or leave --users out", doc="docs/users.md")
    for parent in reversed(layout.root.parents):
        try:
            mode = parent.stat().st_mode
        except OSError:
            break  # made by `up` itself (state_dir_mode)
        if not mode & stat.S_IXOTH:
            raise UsageError(f"users: other users cannot reach the cluster's directory {layout.root} "
                             f"({parent} is mode {stat.S_IMODE(mode):04o})",
                             "let SIMCLUSTER_HOME default to /var/lib/simcluster (root), or point it at a "
                             "directory every user can enter", doc="docs/users.md")


def explicit_ports(spec: ClusterSpec) -> List[int]:
    ports = [n.port for n in spec.nodes if n.port]
    if spec.controller_port:
        ports.append(spec.controller_port)
    return ports


def name_resolver() -> Tuple[str, Optional[str]]:
    """How node names will resolve in jobs: (names.NAMESPACE, None) where a private
    /etc/hosts per slurmd is allowed, else (names.NSS_WRAPPER, its library) or an error."""
    if names.namespaces_work(Path("/etc/hosts")):
        return names.NAMESPACE, None
    return names.NSS_WRAPPER, find_nss_wrapper()


def pid_namespaces_work() -> bool:
    """Can each slurmd get a PID namespace of its own here (names.namespace_prefix)? Needs
    tini (Debian package `tini`) and a kernel that lets us make the namespace and mount
    its /proc. Where not, nodes share the host's process table, as before."""
    init = names.pid_init()
    return bool(init) and names.namespaces_work(Path("/etc/hosts"), init)


def run_preflight(spec: ClusterSpec, layout: ClusterLayout) -> Tuple[str, Optional[str]]:
    """Run every check; return the name resolver to use (see name_resolver)."""
    require_binaries()
    resolver = name_resolver()
    check_gpus(spec)
    check_paths(layout)
    check_users(spec, layout)
    check_ports_free(explicit_ports(spec))
    return resolver
