"""`simcluster image`: build the docker backend's node image, import images as squashfs files
(--container-image), make OCI bundles (srun --container)."""

from __future__ import annotations

import time

import click

from provisioner.config.versions import DEFAULT_SLURM, normalize
from provisioner.errors import UsageError
from provisioner.progress import stderr as progress_stderr


@click.group("image")
def command():
    """Build the docker backend's node image; import docker images as squashfs files for containers."""


@command.command("build")
@click.option("--train", is_flag=True, help="Include the training stack (torch 2.13.0, deepspeed, megatron-core): torch is the build "
                   "pip finds, the CUDA one (several GB) unless pip is pointed at PyTorch's CPU index "
                   "(docs/deploy.md#training-stack).")
@click.option("--offline", is_flag=True, default=None,
              help="Bootstrap the base image with debootstrap without trying a registry first.")
@click.option("--no-cache", is_flag=True, help="Rebuild every layer.")
@click.option("--slurm", "slurm", default=None, metavar="22.05|24.11|26.05",
              help="Slurm release, installed from the Debian suite that ships it: 22.05 bookworm, "
                   "24.11 trixie, 26.05 sid  [default: 22.05]")
def build(train, offline, no_cache, slurm):
    """Build simcluster/node:<version>[-slurm<release>][-train] with no registry needed.

    The base is debian:<suite>-slim if a registry answers, else a debootstrap'ed <suite>
    imported offline (under a minute to three minutes, once per suite). A rebuild with
    nothing changed is cached. Prints the exact Slurm version installed.
    """
    try:
        release = normalize(slurm) if slurm is not None else DEFAULT_SLURM
    except ValueError as exc:
        raise UsageError(f"--slurm: {exc}") from None
    from provisioner.providers.docker.image import build_image, installed_slurm  # lazy: the docker SDK loads only here
    t0 = time.monotonic()
    tag = build_image(progress_stderr, train=train, offline=offline,
                      no_cache=no_cache, slurm=release)
    click.echo(f"built {tag} (Slurm {installed_slurm(tag)}) in {time.monotonic() - t0:.1f}s")


def _file_command(name: str, source_metavar: str, output_metavar: str, output_help: str):
    """A command that makes one file or directory (-o) of an image (SOURCE)."""
    def wrap(func):
        func = click.option("-o", "--output", "output", required=True, metavar=output_metavar, help=output_help)(func)
        return command.command(name)(click.argument("source", metavar=source_metavar)(func))
    return wrap


def _timed(make, source: str, output: str):
    """(what ``make(source, Path(output))`` made, the seconds it took)."""
    from pathlib import Path
    t0 = time.monotonic()
    return make(source, Path(output)), time.monotonic() - t0


@_file_command("import", "dockerd://IMAGE|docker://[USER@][REGISTRY#]IMAGE[:TAG]", "FILE.sqsh",
               "The squashfs file to write (replaced if it exists).")
def import_(source, output):
    """Make a squashfs file of a docker engine image, for --container-image (like `enroot import`).

    The image's file system and its ENV (in /etc/environment, where enroot keeps it).
    dockerd://IMAGE: an image of this machine's docker engine; docker://... (enroot's
    syntax) is pulled by the docker engine first (one line with docker's reason where no
    registry answers).
    """
    from provisioner.cluster.services.containers import import_image
    out, took = _timed(import_image, source, output)
    click.echo(f"imported {source} to {out} ({out.stat().st_size / 2**20:.0f} MiB) in {took:.1f}s")


@_file_command("bundle", "FILE.sqsh|dockerd://IMAGE", "DIR", "The bundle directory to make (must not exist).")
def bundle(source, output):
    """Make an OCI bundle (DIR/rootfs, DIR/config.json) for Slurm's own `srun --container=DIR`.

    rootfs/ is the image's file system; config.json is `crun spec`'s, made fit for Slurm
    steps: the node's host name, network and /etc/hosts, a read-only root, /tmp writable.
    """
    from provisioner.cluster.services.oci import make_bundle
    out, took = _timed(make_bundle, source, output)
    click.echo(f"bundled {source} to {out} in {took:.1f}s; run it: srun --container={out} ...")
