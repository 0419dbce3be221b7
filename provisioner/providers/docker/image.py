"""`simcluster image build`: the node image for the docker backend, built with no registry.

Everything goes through the Docker SDK (inspect, pull, build); only the import of a
debootstrapped root filesystem pipes tar into `docker import`.

One image per Slurm release (22.05, 24.11, 26.05), each from the Debian suite that ships
it (provisioner/config/versions.py): bookworm, trixie, sid. The base is
debian:<suite>-slim when a registry answers; otherwise (air-gapped sites, CI here) a
`debootstrap --variant=minbase <suite>` root filesystem imported with `docker import`.
Python packages come from a wheelhouse filled on the host, so the image gets the host's
CPU torch wheel instead of a multi-GB CUDA download (on suites whose python3 is not the
wheel's 3.11, the Dockerfile installs bookworm's python3.11 for the training venv).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from importlib.metadata import requires
from pathlib import Path
from typing import Dict, List, Optional

from provisioner import __version__
from provisioner.config.versions import DEFAULT_SLURM, SLURM_SUITES
from docker.errors import DockerException, ImageNotFound

from provisioner.errors import PrerequisiteError, SimclusterError
from provisioner.paths import DATA_DIR, DOCKER_CONTEXT_DIR
from provisioner.progress import Progress
from provisioner.providers.docker.engine import DockerError, client, explain, require_engine

IMAGE_REPO = "simcluster/node"
OFFLINE_BASE = "simcluster/base:bookworm"
REGISTRY_BASE = "debian:bookworm-slim"
LABEL_SLURM = "io.simcluster.slurm"  # the Slurm release an image carries (none: an older 22.05 image)
VERSION_FILE = "/usr/share/simcluster/slurm-version"  # the exact version the build installed
DEFAULT_MIRROR = "http://deb.debian.org/debian"
IMAGE_VENV = "/opt/simcluster/venv"  # the image's python (torch, deepspeed, megatron-core with --train)



def image_tag(train: bool = False, slurm: str = DEFAULT_SLURM) -> str:
    """simcluster/node:<version>[-train] for 22.05 (the names images always had),
    simcluster/node:<version>-slurm<release>[-train] for the others."""
    release = "" if slurm == DEFAULT_SLURM else f"-slurm{slurm}"
    return f"{IMAGE_REPO}:{__version__}{release}{'-train' if train else ''}"


def default_image(slurm: str = DEFAULT_SLURM) -> str:
    """The training image of release ``slurm`` if it was built, else the basic one."""
    return image_tag(True, slurm) if image_exists(image_tag(True, slurm)) else image_tag(False, slurm)


def base_tags(suite: str) -> "tuple[str, str]":
    """(offline base, registry base) of a Debian suite."""
    return f"simcluster/base:{suite}", f"debian:{suite}-slim"


def image_slurm(labels: Dict[str, str]) -> str:
    """The Slurm release an image carries (images from before versions were chosen: 22.05)."""
    return labels.get(LABEL_SLURM, DEFAULT_SLURM)


LABEL_CONTEXT = "io.simcluster.context"  # digest of docker/ files the image was built from
CONTEXT_FILES = ("Dockerfile", "entrypoint.sh")  # what docker/ puts in the build context
# The container options' SPANK plugin, compiled in the image against its own Slurm's headers
# (the Dockerfile's plugin stage): its source goes into the context as spank/.
SPANK_DIR = DATA_DIR / "spank"
SPANK_FILES = ("Makefile", "simcluster_pyxis.c")
PLUGIN_IN_IMAGE = "/usr/lib/simcluster/simcluster_pyxis.so"  # where the Dockerfile puts the plugin


def _context_sources() -> List["tuple[str, Path]"]:
    """(name in the build context, file here) of every file an image is built from."""
    return [(name, DOCKER_CONTEXT_DIR / name) for name in CONTEXT_FILES] + \
        [(f"spank/{name}", SPANK_DIR / name) for name in SPANK_FILES]


def context_digest() -> str:
    """sha256 (16 hex) of the files an image is built from: a changed entrypoint,
    Dockerfile or plugin source means an image built before is out of date."""
    h = hashlib.sha256()
    for name, path in _context_sources():
        h.update(name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


LABEL_FEATURES = "io.simcluster.features"  # what the image supports beyond the basics ("accounting")


def image_labels(tag: str) -> Optional[Dict[str, str]]:
    """The labels of image ``tag`` (one image inspect); None if there is no such image."""
    try:
        return client().api.inspect_image(tag)["Config"].get("Labels") or {}
    except ImageNotFound:
        return None
    except DockerException as exc:
        raise explain(exc, f"inspecting image {tag}") from None


def image_exists(tag: str) -> bool:
    return image_labels(tag) is not None


def is_current(labels: Dict[str, str]) -> bool:
    """Were these image labels written by a build from this simcluster's docker/ files?"""
    return labels.get(LABEL_CONTEXT) == context_digest()


def image_is_current(tag: str) -> bool:
    """Was ``tag`` built from this simcluster's docker/ files?"""
    labels = image_labels(tag)
    return labels is not None and is_current(labels)


def image_features(labels: Dict[str, str]) -> List[str]:
    """What an image says it supports (its io.simcluster.features label; [] for older images)."""
    return labels.get(LABEL_FEATURES, "").split()


def host_mirror() -> str:
    """The Debian mirror this host's apt uses (so debootstrap works wherever apt does)."""
    for path in (Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list")):
        try:
            text = path.read_text()
        except OSError:
            continue
        m = re.search(r"^URIs:\s*(\S+/debian)/?\s*$", text, re.M) or \
            re.search(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+/debian)/?\s+bookworm", text, re.M)
        if m:
            return m.group(1)
    return DEFAULT_MIRROR


def ensure_base(progress: Progress, offline: Optional[bool] = None, suite: str = "bookworm") -> str:
    """Return a usable base image tag of Debian ``suite``, bootstrapping one offline if no
    registry answers."""
    offline_base, registry_base = base_tags(suite)
    if image_exists(offline_base):
        return offline_base
    if offline is not True:
        if image_exists(registry_base):
            return registry_base
        progress(f" - pulling {registry_base} ...")
        try:
            repo, _, tag = registry_base.partition(":")
            client().api.pull(repo, tag=tag)
            return registry_base
        except DockerException:
            pass  # no registry: the offline base below
        progress("   no registry reachable: building the base image offline with debootstrap")
    bootstrap_base(progress, offline_base, suite)
    return offline_base


def bootstrap_base(progress: Progress, tag: str = OFFLINE_BASE, suite: str = "bookworm") -> None:
    if shutil.which("debootstrap") is None:
        raise PrerequisiteError("debootstrap is needed to build the base image offline",
                                "sudo apt-get install debootstrap (or make a registry with debian:bookworm-slim reachable)")
    if os.geteuid() != 0:
        raise PrerequisiteError("building the base image offline needs root (debootstrap)",
                                "run 'sudo simcluster image build' once")
    mirror = host_mirror()
    with tempfile.TemporaryDirectory(prefix="simcluster-rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        progress(f" - debootstrap --variant=minbase {suite} from {mirror} (one to three minutes)")
        proc = subprocess.Popen(["debootstrap", "--variant=minbase", suite, str(rootfs), mirror],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        last: List[str] = []
        for n, line in enumerate(proc.stdout):
            last = (last + [line.rstrip()])[-15:]
            if line.startswith("I: ") and any(k in line for k in ("Retrieving Release", "Validating Packages",
                                                                   "Installing core",
                                                                   "Unpacking the base", "Configuring the base",
                                                                   "installed successfully")):
                progress(f"   {line.strip()}")
        if proc.wait() != 0:
            raise SimclusterError("debootstrap failed", details="\n".join(last))
        # sid's Release files are valid for about a week only: a mirror snapshot older than
        # that (offline sites) would stop every later apt-get update in the image build.
        (rootfs / "etc/apt/apt.conf.d/99simcluster-offline-mirror").write_text(
            'Acquire::Check-Valid-Until "false";\n')
        progress(f" - importing the root filesystem as {tag}")
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        # The one docker CLI call: it streams the tar from the pipe (the SDK's import
        # would hold the whole root filesystem in memory).
        imp = subprocess.run(["docker", "import", "-c", 'CMD ["/bin/bash"]', "-", tag],
                             stdin=tar.stdout, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        tar.wait()
        if imp.returncode != 0:
            raise DockerError(f"docker import failed: {imp.stderr.strip()}")


def train_requirements() -> List[str]:
    """The `train` extra of this package (torch pinned to the host's CPU wheel)."""
    reqs = []
    for req in requires("simcluster") or []:
        if "extra ==" in req and re.search(r"extra\s*==\s*['\"]train['\"]", req):
            reqs.append(req.split(";")[0].strip())
    return reqs


def wheel_cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "simcluster" / "wheelhouse"


def fill_wheelhouse(dest: Path, train: bool, progress: Progress, refresh: bool = False) -> None:
    """Put the wheels of the `train` extra into ``dest`` (the build context).

    `pip wheel` resolves into a cache on the host; a stamp there remembers which wheels a
    requirement set resolved to, so a rebuild with the same requirements skips pip (~5 s)
    and gets the very same files (docker's layer cache then hits). ``refresh`` resolves again.
    """
    dest.mkdir(parents=True, exist_ok=True)
    reqs = train_requirements() if train else []
    (dest / "requirements.txt").write_text("".join(f"{r}\n" for r in reqs))
    if not reqs:
        return
    cache = wheel_cache()
    cache.mkdir(parents=True, exist_ok=True)
    stamp = cache / f"resolved-{hashlib.sha256(' '.join(sorted(reqs)).encode()).hexdigest()[:16]}.txt"
    try:
        wheels = [cache / n for n in stamp.read_text().split()] if not refresh else []
    except OSError:
        wheels = []
    if not wheels or not all(w.exists() for w in wheels):
        progress(f" - collecting wheels for {', '.join(reqs)} (cache: {cache})")
        proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--wheel-dir", str(cache),
                               "--find-links", str(cache), *reqs],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if proc.returncode != 0:
            raise SimclusterError("could not collect the training wheels for the image",
                                  details=proc.stdout[-3000:])
        # Every wheel in the cache goes in (pip installs the versions it resolves to, with
        # --no-index); the stamp lists them so the next build copies the same set.
        wheels = sorted(cache.glob("*.whl"))
        stamp.write_text("".join(f"{w.name}\n" for w in wheels))
    else:
        progress(f" - wheels for {', '.join(reqs)}: {len(wheels)} from {cache} (resolved before; "
                 "--no-cache resolves again)")
    for whl in wheels:
        target = dest / whl.name
        try:
            os.link(whl, target)  # same bytes as last time: docker's layer cache still hits
        except OSError:
            shutil.copy2(whl, target)


def build_image(progress: Progress, train: bool = False, offline: Optional[bool] = None,
                no_cache: bool = False, base: Optional[str] = None, tag: Optional[str] = None,
                slurm: str = DEFAULT_SLURM) -> str:
    """Build the node image of Slurm release ``slurm``; ``base``/``tag`` override the
    defaults (benchmarks use their own)."""
    require_engine()
    base = base or ensure_base(progress, offline, SLURM_SUITES[slurm])
    tag = tag or image_tag(train, slurm)
    with tempfile.TemporaryDirectory(prefix="simcluster-build-") as tmp:
        ctx = Path(tmp)
        for name, path in _context_sources():
            (ctx / name).parent.mkdir(exist_ok=True)
            shutil.copy2(path, ctx / name)
        fill_wheelhouse(ctx / "wheelhouse", train, progress, refresh=no_cache)
        progress(f" - docker build {tag} (from {base})")
        tail: List[str] = []
        error = ""
        try:
            # The SDK's streaming build: each decoded chunk is a log line ("stream"), an
            # "error", or "aux" data; the steps' lines are the progress output.
            for chunk in client().api.build(path=str(ctx), tag=tag, rm=True, nocache=no_cache, decode=True,
                                            buildargs={"BASE": base, "TRAIN": str(int(train)), "SLURM": slurm},
                                            labels={LABEL_CONTEXT: context_digest(), LABEL_SLURM: slurm}):
                if "error" in chunk:
                    error = str(chunk["error"]).strip()
                for line in str(chunk.get("stream", "")).splitlines():
                    tail.append(line)
                    del tail[:-30]
                    if line.startswith("Step "):
                        progress(f"   {line[:150]}")
        except DockerException as exc:
            raise explain(exc, f"docker build of {tag}") from None
        if error:
            # The Dockerfile's own checks say what is wrong on a line of their own.
            said = [ln.split("simcluster-error:", 1)[1].strip() for ln in tail if "simcluster-error:" in ln]
            raise DockerError(said[-1] if said else f"docker build of {tag} failed: {error.splitlines()[-1]}",
                              details="\n".join(tail))
    return tag


def installed_slurm(tag: str) -> str:
    """The exact Slurm version the build of ``tag`` installed ('24.11.5'), read from the image."""
    try:
        out = client().containers.run(tag, [VERSION_FILE], entrypoint="cat", remove=True)
    except DockerException:
        return "?"
    return out.decode(errors="replace").strip() or "?"
