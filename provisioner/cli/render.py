"""`simcluster render`: write a cluster's configs without starting anything."""

from __future__ import annotations

import socket
from pathlib import Path

import click

from provisioner.cli.options import load_spec_and_report, report_text, spec_options
from provisioner.errors import UsageError


@click.command("render")
@click.option("--out", "out_dir", required=True, metavar="DIR", help="Directory to write configs into.")
@click.option("--name", "-n", default=None, metavar="NAME", help="Cluster name (overrides the file).")
@spec_options(("config_path", "nodes", "gpus", "fake_gpus", "mig", "shards", "mps", "cpus", "memory", "accounting",
               "like_path", "gres_conf", "max_nodes"))
def command(out_dir, name, **options):
    """Render slurm.conf, gres.conf, cgroup.conf and the TaskProlog for review.

    Ports not fixed in the spec get Slurm's defaults (6817, then 6818+ for nodes); paths
    are those `up` would use. With --like, also like-spec.yaml (the mirror as a spec file
    to edit and `up --config`) and like-report.txt (every setting kept and dropped).
    """
    # lazy: the renderer (jinja2) and the cluster model load when the command runs, not for --help
    from provisioner.nodepaths import NodePaths
    from provisioner.like.specfile import spec_yaml
    from provisioner.paths import ClusterLayout
    from provisioner.render import DEFAULT_CONTROLLER_PORT, RenderInputs, default_ports, render_all, write_files
    spec, report = load_spec_and_report(name, options)
    inputs = RenderInputs(paths=NodePaths.of_layout(ClusterLayout.for_name(spec.name)),
                          hostname=socket.gethostname().split(".")[0],
                          slurm_user="slurm", controller_port=spec.controller_port or DEFAULT_CONTROLLER_PORT,
                          node_ports=default_ports(spec), nss_wrapper_lib="libnss_wrapper.so")
    files = render_all(spec, inputs)
    if report is not None:
        files["like-spec.yaml"] = spec_yaml(spec, report.source)
        files["like-report.txt"] = report.text()
        click.echo(report_text(report))
    try:
        written = write_files(files, Path(out_dir))
    except OSError as exc:
        raise UsageError(f"cannot write configs to {out_dir}: {exc.strerror or exc}",
                         "give --out a directory you can write to") from None
    for path in written:
        click.echo(f"wrote {path}")

