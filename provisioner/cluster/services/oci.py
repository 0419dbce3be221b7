"""Slurm's own OCI containers: `srun --container=BUNDLE`, run by crun.

Slurm runs a step's task through the commands oci.conf names (RunTimeRun, RunTimeQuery,
RunTimeKill, RunTimeDelete), after writing the bundle's config.json, adapted to the step,
into the node's spool directory. render.py renders oci.conf and oci_runtime.sh (the one
script those commands call: crun with its state per node, so several slurmd on one host
never share a container id space) beside slurm.conf, where Slurm looks for oci.conf.

This module makes bundles (`simcluster image bundle SOURCE -o DIR`): rootfs/ from a
squashfs file or a docker engine image, and config.json from `crun spec`, adapted so a
task keeps its node's host name and network (no uts or network namespace), reads the
node's /etc/hosts, and writes only to /tmp (a tmpfs). docs/containers.md says what a task
sees and what differs between Slurm releases.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Dict, List

from provisioner.cluster.services.containers import DOCKERD, docker_image_of, export_rootfs, run_tool
from provisioner.errors import PrerequisiteError, UsageError

# The script every oci.conf command calls (configs/templates/oci_runtime.sh.j2).
RUNTIME_SCRIPT = "oci_runtime.sh"
# crun's state (--root) per node: <run dir>/crun/<node>.
STATE_DIR = "crun"

NO_CRUN = "crun is not installed: `make setup-containers` installs it"
# Namespaces a task does not get of its own: it keeps its node's host name and network
# (node names resolve, the ports it binds are the node's).
SHARED_NAMESPACES = ("network", "uts")
# The node's files a task reads, mounted read-only where this machine has them.
NODE_FILES = ("/etc/hosts", "/etc/resolv.conf")


def crun_path() -> str:
    """crun on this machine, or one clear line that says how to install it."""
    path = shutil.which("crun")
    if path is None:
        raise PrerequisiteError(NO_CRUN)
    return path


def adapt_config(config: Dict, env: List[str]) -> Dict:
    """`crun spec`'s config.json made fit for Slurm steps on a simcluster node.

    Slurm replaces process.args with the step's command and appends the step's
    environment to process.env; the rest is the bundle's own."""
    config = json.loads(json.dumps(config))  # a copy
    process = config.setdefault("process", {})
    # srun's I/O is the task's stdin/stdout/stderr: no terminal (Slurm sets it too).
    process["terminal"] = False
    process["args"] = ["/bin/sh"]
    process["cwd"] = "/"
    if env:
        process["env"] = [line for line in env if "=" in line]
    config["root"] = {"path": "rootfs", "readonly": True}
    config.pop("hostname", None)
    linux = config.setdefault("linux", {})
    linux["namespaces"] = [ns for ns in linux.get("namespaces", []) if ns.get("type") not in SHARED_NAMESPACES]
    mounts = [m for m in config.get("mounts", []) if m.get("destination") not in (*NODE_FILES, "/tmp")]
    mounts += [{"destination": path, "type": "bind", "source": path, "options": ["rbind", "ro"]}
               for path in NODE_FILES if Path(path).exists()]
    # The root stays read-only (one bundle serves every node and job); /tmp is the task's.
    mounts.append({"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
                   "options": ["nosuid", "nodev", "mode=1777"]})
    config["mounts"] = mounts
    return config


def _unpack_sqsh(source: Path, rootfs: Path) -> List[str]:
    if shutil.which("unsquashfs") is None:
        raise PrerequisiteError("unsquashfs is not installed: `make setup-containers` installs squashfs-tools")
    run_tool(["unsquashfs", "-f", "-no-progress", "-quiet", "-d", str(rootfs), str(source)], f"unsquashfs {source}")
    # `image import` and enroot keep the image's ENV in /etc/environment.
    envfile = rootfs / "etc" / "environment"
    try:
        return [line.strip() for line in envfile.read_text().splitlines() if "=" in line and not line.startswith("#")]
    except OSError:
        return []


def make_bundle(source: str, out: Path) -> Path:
    """`simcluster image bundle SOURCE -o DIR`: an OCI bundle (DIR/rootfs, DIR/config.json)
    for `srun --container=DIR`. SOURCE is a squashfs file (`image import`'s, enroot's) or
    dockerd://IMAGE. Made in a temporary directory beside DIR first: a failed bundle leaves
    no DIR; an existing DIR is refused (it may be a bundle a job uses now)."""
    out = out.resolve()
    if out.exists():
        raise UsageError(f"-o {out}: already exists; remove it or name a new directory")
    if not out.parent.is_dir():
        raise UsageError(f"-o {out}: directory {out.parent} does not exist")
    if source.startswith(DOCKERD) or "://" in source:
        image, sqsh = docker_image_of(source), None
    else:
        image, sqsh = None, Path(source)
        if not sqsh.is_file():
            raise UsageError(f"{source}: no such file (name a .sqsh file or dockerd://IMAGE)")
    crun = crun_path()
    tmp = Path(tempfile.mkdtemp(prefix=".simcluster-bundle-", dir=out.parent))
    try:
        rootfs = tmp / "rootfs"
        rootfs.mkdir()
        env = _unpack_sqsh(sqsh, rootfs) if sqsh else export_rootfs(image, rootfs)
        run_tool([crun, "spec"], "crun spec", cwd=str(tmp))
        config = adapt_config(json.loads((tmp / "config.json").read_text()), env)
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        tmp.chmod(0o755)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def containers_left(state_dir: Path) -> Dict[str, List[str]]:
    """{node: [container ids]} crun still knows in a cluster's state directory
    (<run dir>/crun): empty once every step has ended and Slurm deleted its container."""
    left: Dict[str, List[str]] = {}
    if not state_dir.is_dir():
        return left
    for node_dir in sorted(p for p in state_dir.iterdir() if p.is_dir()):
        ids = [p.name for p in node_dir.iterdir() if p.is_dir()]
        if ids:
            left[node_dir.name] = sorted(ids)
    return left
