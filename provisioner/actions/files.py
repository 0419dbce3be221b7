"""Create the cluster directory: munge key, rendered configs, hosts file, fake GPU devices."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from provisioner.actions.context import UpContext
from provisioner.render import AccountingInputs, RenderInputs, render_all, render_hosts_file, write_files


def create_dirs(ctx: UpContext) -> None:
    layout = ctx.layout
    layout.root.mkdir(parents=True, exist_ok=True)
    os.chmod(layout.root, 0o700)
    for d in (layout.etc, layout.log, layout.run, layout.spool, layout.state_save, layout.dev):
        d.mkdir(exist_ok=True)
    # munged insists that its socket directory is not writable by others and is searchable.
    layout.munge_dir.mkdir(exist_ok=True)
    os.chmod(layout.munge_dir, 0o711)
    for node in ctx.spec.nodes:
        (layout.spool / node.name).mkdir(exist_ok=True)


def write_munge_key(ctx: UpContext) -> None:
    """A fresh random key per cluster, mode 0400, never shared with the system's munged."""
    fd = os.open(ctx.layout.munge_key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
    with os.fdopen(fd, "wb") as fh:
        fh.write(os.urandom(1024))


def write_configs(ctx: UpContext, accounting: Optional[AccountingInputs] = None) -> None:
    st = ctx.state
    inputs = RenderInputs(layout=ctx.layout, hostname=st.hostname, slurm_user=st.user,
                          controller_port=st.controller_port, node_ports=st.node_ports,
                          nss_wrapper_lib=st.nss_wrapper_lib, accounting=accounting)
    write_files(render_all(ctx.spec, inputs), ctx.layout.etc)
    ctx.layout.hosts_file.write_text(render_hosts_file(ctx.spec, ipv6_mapped=True))


def make_fake_gpus(ctx: UpContext) -> None:
    """Character devices (major 195, minor N) so gres scheduling works without GPUs.

    mknod needs root; without it each fake GPU is a link to /dev/null, which Slurm also
    accepts (it only checks that File= is a character device).
    """
    if not ctx.spec.fake_gpus:
        return
    for gpu in ctx.spec.all_gpus:
        path: Path = ctx.layout.dev / f"nvidia{gpu}"
        try:
            os.mknod(path, 0o666 | 0o020000, os.makedev(195, gpu))
        except PermissionError:
            path.symlink_to("/dev/null")
