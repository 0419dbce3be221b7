"""`simcluster image build`: the node image for the docker backend."""

from __future__ import annotations

import sys
import time

import click



@click.group("image")
def command():
    """Build the docker backend's node image."""


@command.command("build")
@click.option("--train", is_flag=True, help="Include the training stack (torch 2.13.0 CPU wheel, deepspeed, megatron-core).")
@click.option("--offline", is_flag=True, default=None,
              help="Bootstrap the base image with debootstrap without trying a registry first.")
@click.option("--no-cache", is_flag=True, help="Rebuild every layer.")
def build(train, offline, no_cache):
    """Build simcluster/node:<version>[-train] with no registry needed.

    The base is debian:bookworm-slim if a registry answers, else a debootstrap'ed bookworm
    imported offline (about a minute, once). A rebuild with nothing changed is cached.
    """
    from provisioner.providers.docker.image import build_image  # the docker SDK loads only here
    t0 = time.monotonic()
    tag = build_image(lambda m: print(m, file=sys.stderr, flush=True), train=train, offline=offline,
                      no_cache=no_cache)
    click.echo(f"built {tag} in {time.monotonic() - t0:.1f}s")
