"""What a docker cluster's node containers can do with the image and engine they have: the
image a cluster runs (choose_image: --image, else simcluster's own for the spec's Slurm
release, built or rebuilt when needed), whether they enforce cgroup limits (and the line
`status` shows where they do not), and whether they can run container jobs (a mount probe
in a node). The provider asks these at provision time and keeps the answers in the
cluster's placement.
"""

from __future__ import annotations

from typing import Dict, List, Optional

from provisioner.cluster.model.state import ClusterState
from provisioner.config.types import ClusterSpec
from provisioner.errors import UsageError
from provisioner.progress import Progress
from provisioner.providers.docker import image
from provisioner.render import shape_is_real

# Why a cluster's nodes get no cgroup limits (Placement.node_cgroups), by cause.
UNPRIVILEGED_NOTE = ("not enforced: unprivileged containers cannot manage their cgroups "
                     "('up --privileged' enforces --mem, GPU devices and cores)")
UNKNOWN_CGROUPS_NOTE = "not enforced: the docker engine does not say its host's cgroup version"
# The image feature (io.simcluster.features) of an entrypoint that prepares a node's cgroup
# v2 tree for Slurm (docker/entrypoint.sh).
CGROUP2_FEATURE = "cgroup2"


def cgroups_note(privileged: bool, cgroup_version: Optional[str], features: Optional[List[str]] = None,
                 tag: str = "") -> str:
    """"" where the node containers can run Slurm's cgroup plugins (privileged: a private
    cgroup namespace each, writable; cgroup v1, or v2 with an image whose entrypoint
    prepares the tree), else why not. ``cgroup_version`` is what the engine reports ("1",
    "2"; None: not said); ``features``: the image's (None: not asked)."""
    if not privileged:
        return UNPRIVILEGED_NOTE
    if cgroup_version == "2" and features is not None and CGROUP2_FEATURE not in features:
        return (f"not enforced: image {tag} was built before cgroup v2 support (the docker engine's host has "
                "cgroup v2); rebuild it: simcluster image build")
    return "" if cgroup_version in ("1", "2") else UNKNOWN_CGROUPS_NOTE


def uses_cgroups(state: ClusterState) -> bool:
    """Does this cluster enforce cgroup limits (decided at provision time, kept in its state)?"""
    return bool(state.provider_data.get("cgroups"))


def choose_image(spec: ClusterSpec, progress: Progress) -> str:
    """The image to run: --image as it is, else the default one of the spec's Slurm
    release, built when missing and rebuilt when an older simcluster built it from other
    docker/ files."""
    release = spec.slurm_release or image.DEFAULT_SLURM
    tag = spec.image or image.default_image(release)
    labels = image.image_labels(tag)
    ours = tag in (image.image_tag(False, release), image.image_tag(True, release))
    if labels is None and spec.image and not ours:
        raise UsageError(f"image {tag} not found", "build it, or leave out --image to use simcluster's own")
    if labels is not None and spec.image and spec.slurm and image.image_slurm(labels) != spec.slurm:
        raise UsageError(f"image {tag} carries Slurm {image.image_slurm(labels)}, not {spec.slurm}",
                         f"leave out --image, or build one: simcluster image build --slurm {spec.slurm}")
    stale = labels is not None and not spec.image and not image.is_current(labels)
    build_flags = f"{' --train' if tag.endswith('-train') else ''}" + \
                  (f" --slurm {release}" if release != image.DEFAULT_SLURM else "")
    if labels is None or stale:
        progress(f" - image {tag} was built from older build files: rebuilding it" if stale else
                 f" - image {tag} not found: building it (once; later builds are cached)")
        tag = image.build_image(progress, train=tag.endswith("-train"), slurm=release)
        labels = image.image_labels(tag) or {}
    if spec.accounting and "accounting" not in image.image_features(labels):
        raise UsageError(f"image {tag} was built before accounting support (it has no slurmdbd)",
                         f"rebuild it: simcluster image build{build_flags}")
    return tag


# What the container plugin needs of a node container (spank/simcluster_pyxis.c): a mount
# namespace of its own, a tmpfs, and an overlay with its upper directory on it.
MOUNT_PROBE = ('d=$(mktemp -d) && trap \'rm -rf "$d"\' EXIT && unshare --mount sh -c \'mount -t tmpfs none "$1" '
               '&& mkdir "$1/l" "$1/u" "$1/w" "$1/m" && mount -t overlay overlay '
               '-o "lowerdir=$1/l,upperdir=$1/u,workdir=$1/w" "$1/m"\' sh "$d"')
CONTAINERS_OK = "container options: srun --container-image=FILE.sqsh|dockerd://IMAGE ... (docs/containers.md)"


def containers_note(labels: Dict[str, str], tag: str, slurm_flag: str, probe) -> str:
    """"" where the nodes can run container jobs, else the one line that says why not and
    what fixes it. ``probe()`` runs MOUNT_PROBE in a node: (ok, its error output)."""
    what = "container options (--container-image, ...)"
    if "containers" not in image.image_features(labels):
        return f"{what}: image {tag} has no container plugin; rebuild it: simcluster image build{slurm_flag}"
    ok, err = probe()
    if not ok:
        err = (err.strip().splitlines() or ["refused"])[-1]
        return (f"{what}: the node containers cannot mount ({err[:120]}; the engine's seccomp, AppArmor or "
                "SELinux policy refuses CAP_SYS_ADMIN's mounts): up --privileged gives the nodes every privilege")
    return ""


def cgroups_described(spec: ClusterSpec, host_cpus: Optional[int], v2: bool = False) -> str:
    """Placement.node_cgroups of a cluster that enforces limits."""
    cores = ", cores)" if shape_is_real(spec, host_cpus) else \
        "; cores not pinned: the nodes claim more CPUs than the engine's host has)"
    return ("enforced: proctrack/cgroup and task/cgroup" + (" (cgroup v2)" if v2 else "") +
            " in each node container's own cgroup namespace (--mem, GPU devices" + cores)


def slurm_flag(spec: ClusterSpec) -> str:
    """The `simcluster image build` flag that builds the spec's Slurm release ("" for the default)."""
    release = spec.slurm_release or image.DEFAULT_SLURM
    return "" if release == image.DEFAULT_SLURM else f" --slurm {release}"

