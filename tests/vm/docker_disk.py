"""A disk holding a docker engine's data root with one image loaded, for a guest's /var/lib/docker.

The docker backend's case runs the node image in the guest's own engine. Building it there,
or `docker load` of it there (~650 MB: extracting and hashing every layer under qemu's TCG,
after ssh carried it in), takes minutes; so the load is done on this host, at native speed,
into a throwaway engine with a data root of its own (the same storage driver, overlay2, and
the same Debian docker.io as the guest's), and that data root becomes an ext4 image
(mkfs.ext4 -d: owners, modes, device nodes and xattrs kept) that the guest mounts at
/var/lib/docker before its engine starts: its image store is then there at once.

Cached beside the VM images (tests/vm/image.py's cache_root) as
``docker-<image id, 12 hex>.raw``, by the image's id: a new node image (another checkout's
docker/ files) makes a new disk; disks unused for UNUSED_DAYS are removed. Building needs
root (a second dockerd), or runs itself through ``sudo -n``.

    python -m tests.vm.docker_disk simcluster/node:0.1.0
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

from tests.vm.image import REPO, UNUSED_DAYS, cache_root

# Room for the containers' writable layers and logs: the file is sparse.
FREE_BYTES = 1024 ** 3
# What of the throwaway engine's data root the guest's engine must not inherit: its networks
# (that engine ran without a bridge) and its own containerd's state (the guest's engine uses
# the system containerd).
NOT_CARRIED = ("network", "containerd", "runtimes", "tmp", "swarm")


def image_id(tag: str) -> str:
    proc = subprocess.run(["docker", "image", "inspect", "-f", "{{.Id}}", tag], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"no image {tag} in this host's docker engine: {proc.stderr.strip()}")
    return proc.stdout.strip().split(":")[-1]


def disk_path(tag: str, root: Optional[Path] = None) -> Path:
    return (root or cache_root()) / f"docker-{image_id(tag)[:12]}.raw"


def build(tag: str, root: Optional[Path] = None) -> Path:
    """The disk of image ``tag`` (of this host's engine): from the cache, else made now."""
    path = disk_path(tag, root)
    if path.exists():
        _touch(path)
        return path
    if os.geteuid() != 0:
        env = [f"SIMCLUSTER_VM_CACHE={root or cache_root()}"]
        subprocess.run(["sudo", "-n", "env", *env, sys.executable, "-m", "tests.vm.docker_disk", tag],
                       cwd=REPO, check=True)
        if not path.exists():
            raise RuntimeError(f"the docker disk build through sudo left no {path}")
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / ".docker-disk.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.exists():
            return path
        _build(tag, path)
        _touch(path)
        for old in path.parent.glob("docker-*.raw"):
            if old != path and time.time() - old.stat().st_mtime > UNUSED_DAYS * 86400:
                old.unlink(missing_ok=True)
    return path


def _touch(path: Path) -> None:
    try:
        os.utime(path)  # its mtime says when it was last used
    except OSError:
        pass


def _build(tag: str, path: Path) -> None:
    # A short directory for the engine's sockets (a unix socket path has ~107 bytes).
    work = Path(tempfile.mkdtemp(prefix="scvm-docker-"))
    data, run = work / "data", work / "run"
    run.mkdir()
    (work / "daemon.json").write_text("{}\n")  # none of this host's engine settings
    sock = f"unix://{run}/docker.sock"
    log = open(work / "dockerd.log", "w")
    # In a network namespace of its own: a dockerd started with `--bridge none` deletes the
    # host's docker0 (its default bridge's cleanup), which breaks the host's engine.
    engine = subprocess.Popen(
        ["unshare", "--net", "dockerd", "--config-file", str(work / "daemon.json"), "--data-root", str(data),
         "--exec-root", str(run / "exec"), "--pidfile", str(run / "docker.pid"), "-H", sock,
         "--bridge", "none", "--iptables=false", "--ip-masq=false", "--storage-driver", "overlay2"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        deadline = time.monotonic() + 60
        while subprocess.run(["docker", "-H", sock, "version"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL).returncode != 0:
            if engine.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the throwaway dockerd did not answer: {(work / 'dockerd.log').read_text()[-2000:]}")
            time.sleep(0.5)
        save = subprocess.Popen(["docker", "save", tag], stdout=subprocess.PIPE)
        load = subprocess.run(["docker", "-H", sock, "load"], stdin=save.stdout, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
        save.stdout.close()
        if save.wait() != 0 or load.returncode != 0:
            raise RuntimeError(f"docker save {tag} | docker load (throwaway engine) failed: {load.stdout[-2000:]}")
    finally:
        if engine.poll() is None:
            os.killpg(engine.pid, signal.SIGTERM)
            try:
                engine.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(engine.pid, signal.SIGKILL)
                engine.wait()
        log.close()
    try:
        for name in NOT_CARRIED:
            shutil.rmtree(data / name, ignore_errors=True)
        used = int(subprocess.run(["du", "-sb", str(data)], stdout=subprocess.PIPE, text=True,
                                  check=True).stdout.split()[0])
        subprocess.run(["mkfs.ext4", "-q", "-L", "docker", "-d", str(data), str(tmp),
                        f"{(used + FREE_BYTES) // 1024 ** 2}M"], check=True, stdout=subprocess.DEVNULL)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
        subprocess.run(["umount", "-R", str(run)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(work, ignore_errors=True)


def main(argv) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.vm.docker_disk IMAGE", file=sys.stderr)
        return 2
    started = time.monotonic()
    path = build(argv[0])
    print(f"{argv[0]}: {path} ({time.monotonic() - started:.0f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
