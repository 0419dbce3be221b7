"""`simcluster render`: write a cluster's configs without starting anything."""

from __future__ import annotations

import socket
from pathlib import Path

import click

from provisioner.cli.common import fake_gpus_value
from provisioner.config import load_spec
from provisioner.errors import UsageError
from provisioner.paths import ClusterLayout
from provisioner.render import DEFAULT_CONTROLLER_PORT, RenderInputs, default_ports, render_all, write_files


@click.command("render")
@click.option("--config", "-c", "config_path", default=None, metavar="FILE", help="Cluster spec YAML.")
@click.option("--out", "out_dir", required=True, metavar="DIR", help="Directory to write configs into.")
@click.option("--name", "-n", default=None, metavar="NAME", help="Cluster name (overrides the file).")
@click.option("--nodes", "-N", type=int, default=None, metavar="K", help="Number of nodes.")
@click.option("--gpus", default=None, metavar="IDS", help="GPU ids: '6,7', '0-3'.")
@click.option("--fake-gpus", "fake_gpus", is_flag=False, flag_value="all", default=None, metavar="[K]",
              help="Simulated GPUs, as for 'up'.")
def command(config_path, out_dir, name, nodes, gpus, fake_gpus):
    """Render slurm.conf, gres.conf, cgroup.conf and the TaskProlog for review.

    Ports not fixed in the spec get Slurm's defaults (6817, then 6818+ for nodes); paths
    are those `up` would use.
    """
    overrides = {"name": name, "nodes": nodes, "gpus": gpus}
    fake = fake_gpus_value(fake_gpus)
    if fake is not None:
        overrides["fakeGpus"] = fake
    spec = load_spec(config_path, overrides)
    inputs = RenderInputs(layout=ClusterLayout.for_name(spec.name), hostname=socket.gethostname().split(".")[0],
                          slurm_user="slurm", controller_port=spec.controller_port or DEFAULT_CONTROLLER_PORT,
                          node_ports=default_ports(spec), nss_wrapper_lib="libnss_wrapper.so")
    try:
        written = write_files(render_all(spec, inputs), Path(out_dir))
    except OSError as exc:
        raise UsageError(f"cannot write configs to {out_dir}: {exc.strerror or exc}",
                         "give --out a directory you can write to") from None
    for path in written:
        click.echo(f"wrote {path}")
