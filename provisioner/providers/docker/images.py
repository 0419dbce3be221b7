"""Container images for a docker cluster's jobs: `dockerd://IMAGE` from the host's engine.

The container plugin (spank/simcluster_pyxis.c) unpacks `--container-image=dockerd://IMAGE`
with the docker CLI, which a docker cluster's containers do not have. So the commands
`simcluster exec` and the wrappers of `simcluster env` run go through this module first
(DockerExecRunner.exec_prefix): on this host, where the engine is, it unpacks each
dockerd:// image they name into the cluster's shared state, once per image id, exactly where
the plugin looks for it (<shared>/containers/images/dockerd-<id>), and records the id under
the image's name (images/dockerd-names/), so srun in the controller and the steps on the
nodes find it without a docker engine. `down` removes the cluster's directory and with it
every image unpacked here; the user's .sqsh files are never touched.

The unpacking goes through the engine (export of a container made from the image, never
started, into the controller container's /shared with put_archive), so the files keep their
owners even where the host user is not root. Paths of this host's shared directory in the
container options' values become the nodes' paths (/shared/...).

Run as ``python -m provisioner.providers.docker.images HOST_SHARED INNER_SHARED CONTAINER --
docker exec ...``; the shell prefix of exec_prefix starts Python only for commands with a
container option or sbatch (its script may name one), so sinfo and squeue stay fast.
"""

from __future__ import annotations

import fcntl
import os
import re
import sys
from pathlib import Path
from typing import Iterable, List, Optional

CONTAINERS_DIR = "containers"  # the plugin's state_dir below the shared directory (render.py, provider.py)
NAMES_DIR = "dockerd-names"
DOCKERD = "dockerd://"
# A dockerd:// image in an option or in a batch script's #SBATCH and srun lines.
IMAGE_RE = re.compile(r"--container-image(?:=|\s+)[\"']?dockerd://([^\s\"',]+)")
SAFE = re.compile(r"[A-Za-z0-9._-]")


def name_file(name: str) -> str:
    """The file name the plugin reads an image's id from (dockerd_ref in the plugin): every
    byte but [A-Za-z0-9._-] as %XX."""
    return "".join(c if SAFE.fullmatch(c) else "".join(f"%{b:02X}" for b in c.encode()) for c in name)


def images_named(argv: List[str], host_shared: Path, inner_shared: str) -> List[str]:
    """The dockerd:// images a command line (docker exec [-w DIR] CONTAINER CMD ...) names:
    in its options and, for sbatch, in the files it names that are in the shared directory
    (the batch script; a relative path is in DIR)."""
    text = " ".join(argv)
    found = IMAGE_RE.findall(text)
    cwd = argv[argv.index("-w") + 1] if "-w" in argv[:-1] else inner_shared
    if "sbatch" in argv:
        for arg in argv[argv.index("sbatch") + 1:]:
            path = host_path(os.path.join(cwd, arg), host_shared, inner_shared)
            if path is not None and path.is_file() and path.stat().st_size < 1 << 20:
                found += IMAGE_RE.findall(path.read_text(errors="replace"))
    return list(dict.fromkeys(found))


def host_path(arg: str, host_shared: Path, inner_shared: str) -> Optional[Path]:
    """``arg`` (as the cluster sees it) on this host, where it is in the shared directory."""
    inner = inner_shared.rstrip("/")
    if arg == inner or arg.startswith(inner + "/"):
        return host_shared / arg[len(inner):].lstrip("/")
    return None


def to_cluster_paths(argv: Iterable[str], host_shared: Path, inner_shared: str) -> List[str]:
    """This host's shared directory in the values of --container-* options
    (--container-image=/host/.../shared/img.sqsh) as the nodes see it."""
    host = str(host_shared).rstrip("/")
    out = []
    for arg in argv:
        if arg.startswith("--container-") and host in arg:
            arg = re.sub(re.escape(host) + r"(?=/|$|:|,)", inner_shared.rstrip("/"), arg)
        out.append(arg)
    return out


def unpack(name: str, host_shared: Path, inner_shared: str, container: str) -> str:
    """Unpack dockerd://``name`` for the cluster (once per image id) and record its id under
    its name; returns the id. One clear line (UsageError) where the engine has no such image."""
    from docker.errors import DockerException, ImageNotFound

    from provisioner.errors import UsageError
    from provisioner.providers.docker.engine import client, explain
    from provisioner.providers.docker.exec_runner import DockerExecRunner

    api = client().api
    try:
        info = api.inspect_image(name)
    except ImageNotFound:
        raise UsageError(f"--container-image={DOCKERD}{name}: this machine's docker engine has no image {name}",
                         "docker images lists them; docker pull or simcluster image build makes them") from None
    except DockerException as exc:
        raise explain(exc, f"inspecting image {name}") from None
    image_id = info["Id"]
    key = f"dockerd-{image_id.split(':')[-1][:16]}"  # the plugin's key (unpack_image)
    images = host_shared / CONTAINERS_DIR / "images"
    (images / NAMES_DIR).mkdir(parents=True, exist_ok=True)
    inner = f"{inner_shared.rstrip('/')}/{CONTAINERS_DIR}/images/{key}"
    with open(images / f"{key}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the plugin takes the same lock: one unpack per cluster
        if not (images / key).exists():
            runner = DockerExecRunner(container)
            res = runner.run(["sh", "-c", 'rm -rf "$1" && mkdir -p "$1"', "sh", f"{inner}.tmp"], timeout=300)
            if not res.ok:
                raise UsageError(f"{DOCKERD}{name}: cannot make {inner}.tmp in {container}: {res.stderr.strip()}")
            cid = api.create_container(name, command=["/bin/true"], entrypoint=[])["Id"]
            try:
                # The export streams straight into the controller's /shared (no copy here).
                api.put_archive(container, f"{inner}.tmp", api.export(cid))
            except DockerException as exc:
                raise explain(exc, f"unpacking {DOCKERD}{name}") from None
            finally:
                api.remove_container(cid, force=True)
            env = [e for e in (info.get("Config") or {}).get("Env") or [] if "=" in e]
            if env:  # the image's ENV, where the plugin (and enroot) read it
                runner.write_file(f"{inner}.tmp/etc/environment", "".join(f"{e}\n" for e in env).encode())
            res = runner.run(["mv", f"{inner}.tmp", inner], timeout=60)
            if not res.ok:
                raise UsageError(f"{DOCKERD}{name}: {res.stderr.strip()}")
    ref = images / NAMES_DIR / name_file(name)
    part = ref.with_name(ref.name + f".{os.getpid()}")
    part.write_text(image_id + "\n")
    os.replace(part, ref)
    return image_id


def main(args: List[str]) -> int:
    """HOST_SHARED INNER_SHARED CONTAINER -- COMMAND...: unpack what COMMAND names, then exec it."""
    host_shared, inner_shared, container, sep, *command = args
    assert sep == "--" and command, "usage: HOST_SHARED INNER_SHARED CONTAINER -- COMMAND..."
    host = Path(host_shared)
    command = to_cluster_paths(command, host, inner_shared)
    names = images_named(command, host, inner_shared)
    if names:
        from provisioner.errors import SimclusterError
        try:
            for name in names:
                unpack(name, host, inner_shared, container)
        except SimclusterError as exc:
            print(f"error: {exc.one_line()}", file=sys.stderr)
            return exc.exit_code
    os.execvp(command[0], command)
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
