"""Container jobs: pyxis-compatible options (--container-image, ...) through our SPANK plugin.

The plugin (spank/simcluster_pyxis.c, built by `make setup-containers` against this host's
Slurm headers) does the work inside slurmstepd; this module says where it is and whether a
cluster can use it (render.py renders the plugstack.conf that loads it), and makes the
squashfs images it runs (`simcluster image import`, like `enroot import`). docs/containers.md has the
option table against pyxis and what is not supported.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import List, Optional, Tuple

from provisioner.errors import PrerequisiteError, UsageError
from provisioner.paths import REPO_ROOT

PLUGIN_FILE = "simcluster_pyxis.so"
# Where `make setup-containers` puts the plugin (spank/Makefile).
PLUGIN_PATH = REPO_ROOT / "spank" / "build" / PLUGIN_FILE
# The plugin's directory in a cluster's own directory: unpacked images and containers.
CONTAINERS_DIR = "containers"

NOT_BUILT = "container options (--container-image, ...): no plugin built; `make setup-containers` builds it"
WRONG_RELEASE = ("container options (--container-image, ...): the plugin was built for Slurm {built}, "
                 "this host runs {host}; `make setup-containers` rebuilds it")
NOT_ROOT = "container options (--container-image, ...): need the local backend run as root (mounts per task)"

# Enroot's image URI schemes: dockerd:// (the docker engine's images) and docker:// (pulled
# from a registry by the docker engine first) are imported here.
DOCKERD = "dockerd://"
DOCKER = "docker://"
SCHEMES = ("dockerd://", "docker://", "podman://")


def plugin_path() -> Optional[Path]:
    """The built plugin, or None where `make setup-containers` has not run."""
    return PLUGIN_PATH if PLUGIN_PATH.is_file() else None


def built_for() -> str:
    """The Slurm release the plugin was built for (spank/Makefile writes it beside the plugin)."""
    try:
        return (PLUGIN_PATH.parent / "slurm-version").read_text().strip()
    except OSError:
        return ""


def unavailable_reason(is_root: bool, own_namespaces: bool, host_slurm: Optional[str]) -> str:
    """"" where a local cluster can load the plugin, else the one line that says why not.
    Slurm loads a SPANK plugin only into the release it was built for, its hooks mount as
    root, and each node must have its own mount namespace (names.py)."""
    if plugin_path() is None:
        return NOT_BUILT
    if built_for() != (host_slurm or ""):
        return WRONG_RELEASE.format(built=built_for() or "an unknown release", host=host_slurm or "no Slurm")
    if not (is_root and own_namespaces):
        return NOT_ROOT
    return ""


def parse_mounts(value: str) -> List[Tuple[str, str, bool]]:
    """--container-mounts=SRC:DST[:FLAGS][,...] as (src, dst, read_only), the plugin's rules:
    a lone SRC is mounted at the same path; FLAGS are joined by '+', 'ro' makes it read-only."""
    mounts = []
    for item in filter(None, value.split(",")):
        parts = item.split(":")
        if len(parts) > 3:
            raise UsageError(f"--container-mounts: '{item}' has too many ':' (use SRC:DST[:ro])")
        src, dst = parts[0], parts[1] if len(parts) > 1 else parts[0]
        flags = parts[2].split("+") if len(parts) > 2 else []
        if not (src.startswith("/") and dst.startswith("/")):
            raise UsageError(f"--container-mounts: '{item}' needs absolute paths (SRC:DST[:ro])")
        mounts.append((src, dst, "ro" in flags))
    return mounts


def docker_image_of(source: str) -> str:
    """The docker image a `dockerd://IMAGE` source names; one clear line for anything else
    (`docker://` sources are pulled first: pull_image)."""
    if source.startswith(DOCKERD) and len(source) > len(DOCKERD):
        return source[len(DOCKERD):]
    if source.startswith(SCHEMES):
        raise UsageError(f"{source}: only dockerd://IMAGE (an image of this machine's docker engine) and "
                         "docker://[USER@][REGISTRY#]IMAGE[:TAG] can be imported")
    raise UsageError(f"{source}: name an image as dockerd://IMAGE (e.g. dockerd://debian:bookworm) "
                     "or docker://[REGISTRY#]IMAGE[:TAG]")


def docker_reference(source: str) -> str:
    """enroot's `docker://[USER@][REGISTRY#]IMAGE[:TAG]` as docker's `REGISTRY/IMAGE[:TAG]`
    (USER names enroot's credentials; docker uses its own login). The plugin reads the same
    syntax (spank/simcluster_pyxis.c, docker_ref)."""
    rest = source[len(DOCKER):]
    if not rest:
        raise UsageError(f"{source}: name an image: docker://[USER@][REGISTRY#]IMAGE[:TAG]")
    hash_at, user_at = rest.find("#"), rest.find("@")
    if user_at >= 0 and (user_at < hash_at if hash_at >= 0 else not rest[user_at + 1:].startswith("sha256:")):
        rest = rest[user_at + 1:]
    registry, sep, image = rest.partition("#")
    return f"{registry}/{image}" if sep else registry


def pull_image(source: str) -> str:
    """`docker://...` pulled by this machine's docker engine; the docker image to import.
    Where no registry is reachable: one line with docker's reason and what to do instead."""
    ref = docker_reference(source)
    if shutil.which("docker") is None:
        raise PrerequisiteError("docker is not installed: `make setup-docker` installs and starts it")
    proc = subprocess.run(["docker", "pull", "-q", ref], capture_output=True, text=True)
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        raise UsageError(f"{source}: docker pull {ref} failed ({lines[-1] if lines else 'no reason given'}); where "
                         "no registry is reachable, docker load the image here and import dockerd://IMAGE")
    return ref


def environment_file(env: List[str]) -> str:
    """The image's ENV as /etc/environment lines, where enroot keeps it: the plugin sets these
    in each task (the task's own value wins for the names --container-env lists)."""
    return "".join(f"{line}\n" for line in env if "=" in line)


def run_tool(cmd: List[str], what: str, **kwargs) -> subprocess.CompletedProcess:
    """Run a tool (docker, mksquashfs, unsquashfs, crun): its output, or one line that names it
    (PrerequisiteError where it is not installed, UsageError with its last error line)."""
    try:
        return subprocess.run(cmd, check=True, capture_output=True, **kwargs)
    except FileNotFoundError:
        raise PrerequisiteError(f"{what}: {cmd[0]} is not installed") from None
    except subprocess.CalledProcessError as exc:
        err = (exc.stderr or b"").decode(errors="replace").strip().splitlines()
        raise UsageError(f"{what}: {err[-1] if err else f'{cmd[0]} failed'}") from None


def export_rootfs(image: str, rootfs: Path) -> List[str]:
    """The file system of docker image ``image`` unpacked into ``rootfs`` (docker export of a
    container made from it, never started; owners kept), and the image's ENV lines."""
    if shutil.which("docker") is None:
        raise PrerequisiteError("docker is not installed: `make setup-docker` installs and starts it")
    info = json.loads(run_tool(["docker", "image", "inspect", image], f"docker image {image}").stdout)[0]
    cid = run_tool(["docker", "create", image, "/bin/true"], f"docker create {image}").stdout.decode().strip()
    try:
        export = subprocess.Popen(["docker", "export", cid], stdout=subprocess.PIPE)
        untar = subprocess.run(["tar", "-x", "-C", str(rootfs), "--numeric-owner"], stdin=export.stdout,
                               capture_output=True)
        export.stdout.close()
        if export.wait() != 0 or untar.returncode != 0:
            raise UsageError(f"docker export {image}: {untar.stderr.decode(errors='replace').strip() or 'failed'}")
    finally:
        subprocess.run(["docker", "rm", "-f", cid], capture_output=True)
    return list((info.get("Config") or {}).get("Env") or [])


def import_image(source: str, out: Path) -> Path:
    """`simcluster image import dockerd://IMAGE -o FILE.sqsh`: the image's file system (docker
    export of a container made from it, never started) and its ENV in /etc/environment, as one
    squashfs file; `docker://...` is pulled first. Written to a temporary name first: a failed
    import leaves no FILE.sqsh."""
    image = docker_image_of(source) if not source.startswith(DOCKER) else docker_reference(source)
    if shutil.which("mksquashfs") is None:
        raise PrerequisiteError("mksquashfs is not installed: `make setup-containers` installs squashfs-tools")
    if shutil.which("docker") is None:
        raise PrerequisiteError("docker is not installed: `make setup-docker` installs and starts it")
    out = out.resolve()
    if not out.parent.is_dir():
        raise UsageError(f"-o {out}: directory {out.parent} does not exist")
    if source.startswith(DOCKER):
        image = pull_image(source)
    with tempfile.TemporaryDirectory(prefix="simcluster-import-", dir=out.parent) as tmp:
        rootfs = Path(tmp) / "rootfs"
        rootfs.mkdir()
        env = export_rootfs(image, rootfs)
        if env:
            (rootfs / "etc").mkdir(exist_ok=True)
            (rootfs / "etc" / "environment").write_text(environment_file(env))
        part = Path(tmp) / "image.sqsh"
        # lz4: several times quicker to make and unpack than the default gzip, a little larger.
        run_tool(["mksquashfs", str(rootfs), str(part), "-noappend", "-comp", "lz4", "-quiet", "-no-progress"],
             f"mksquashfs {out.name}")
        os.replace(part, out)
    return out
