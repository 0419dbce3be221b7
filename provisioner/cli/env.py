"""`simcluster env`: shell exports that point Slurm commands at a cluster."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import List

import click

from provisioner.cli.common import name_option

# Where Slurm commands must run on the cluster's controller (a container), these get
# wrapper scripts that run them there, with the cluster's own client binaries.
SLURM_COMMANDS = ("sinfo", "squeue", "sbatch", "srun", "salloc", "scontrol", "scancel", "sacct", "sacctmgr",
                  "sshare", "sprio", "sstat", "sattach", "sreport")
# Commands whose working directory matters (job files, output paths): only these say
# when they run somewhere else than the user is.
CWD_COMMANDS = ("sbatch", "srun", "salloc")
WD = "@SIMCLUSTER_WORKDIR@"  # stands for the working directory in the exec prefix


def wrapper_script(cmd: str, batch_prefix: List[str], tty_prefix: List[str], host_dir: str, cluster_dir: str) -> str:
    """A /bin/sh script that runs Slurm command ``cmd`` where the cluster's commands run.

    The working directory and arguments inside the cluster's shared directory on this host
    become the same paths as the nodes see them; elsewhere the command runs in the shared
    directory (which is all the nodes can see) and says so once on stderr.
    """
    def quoted(prefix: List[str]) -> str:
        return " ".join('"$wd"' if a == WD else shlex.quote(a) for a in prefix)
    host, inner = shlex.quote(host_dir), shlex.quote(cluster_dir)
    note = (f'\n     echo "simcluster: $PWD is not in the cluster\'s shared directory $host: {cmd} runs in $inner there" >&2'
            if cmd in CWD_COMMANDS and host_dir != cluster_dir else "")  # local: nothing is translated
    return f"""#!/bin/sh
# Written by `simcluster env`: {cmd} with the cluster's own Slurm client (its version, its config).
host={host}; inner={inner}
case "$PWD/" in
  "$host"/*) wd="$inner${{PWD#"$host"}}" ;;
  *) wd="$inner"{note} ;;
esac
n=$#
while [ "$n" -gt 0 ]; do
  a=$1; shift; n=$((n - 1))
  case "$a" in "$host"|"$host"/*) a="$inner${{a#"$host"}}" ;; esac
  set -- "$@" "$a"
done
if [ -t 0 ] && [ -t 1 ]; then
  exec {quoted(tty_prefix)} {shlex.quote(cmd)} "$@"
fi
exec {quoted(batch_prefix)} {shlex.quote(cmd)} "$@"
"""


@click.command("env")
@name_option
def command(name):
    """Print exports for the cluster: eval "$(simcluster env)"; then sinfo, sbatch, srun.

    For a docker cluster it also puts wrapper scripts first on PATH (in the cluster's state
    directory, bin/): sbatch, srun, squeue, scontrol, sinfo, sacct, scancel ... then run the
    cluster's own Slurm commands (its version) in the controller container, from this
    host's shell and from scripts. Run them from the cluster's shared directory (`simcluster
    status` shows it): that directory is /shared on every node.

    For a local cluster an ordinary user made whose nodes have a network of their own (a
    user namespace of the cluster's: `simcluster status` says so), it puts the same wrappers
    on PATH: they run this host's Slurm commands as you, on the cluster's network, the only
    place the nodes' addresses are reached from (docs/rootless.md).

    For a cluster made with --rest it exports SLURMRESTD_URL as well, and never a token:
    SLURM_JWT in a shell makes its srun (and every job submitted from it) authenticate with
    JWT, which slurmd refuses. Get a token for REST calls with `simcluster token`.

    For a cluster made with --metrics it exports SIMCLUSTER_METRICS_URL, the URL its
    Prometheus exporter serves (docs/metrics.md).

    For a cluster with fake GPUs it puts simcluster's nvidia-smi on PATH as well: with
    SLURMD_NODENAME=NODE it shows that node's GPUs, otherwise this machine's own nvidia-smi
    answers (if it has one).
    """
    # lazy: the cluster model loads only when the command runs, not for --help
    from provisioner.cluster.services import fakegpus
    from provisioner.named_clusters import load
    cluster = load(name)
    for key, value in cluster.placement.client_env.items():
        click.echo(f"export {key}={shlex.quote(value)}")
    # Fake GPUs: simcluster's nvidia-smi here too, as in jobs (off the nodes it answers with
    # this machine's own nvidia-smi if there is one, else "No devices were found").
    shim = fakegpus.shim_path(cluster.placement.config_dir)
    if cluster.spec.fake_gpus and shim.is_file():
        click.echo(f'export PATH={shlex.quote(str(shim.parent))}:"$PATH"')
    # REST clusters: slurmrestd's URL, no token (rest.env_lines says why; docs/rest.md).
    from provisioner.cluster.services import rest  # lazy: loaded with the cluster model, not for --help
    for line in rest.env_lines(cluster):
        click.echo(line)
    from provisioner.cluster.services import metrics  # lazy: the same
    for line in metrics.env_lines(cluster):
        click.echo(line)
    runner = cluster.runner()
    batch = runner.exec_prefix(WD, interactive=False)
    if batch:
        pl = cluster.placement
        bin_dir = Path(cluster.state.root) / "bin"
        bin_dir.mkdir(exist_ok=True)
        tty = runner.exec_prefix(WD, interactive=True)
        for cmd in SLURM_COMMANDS:
            path = bin_dir / cmd
            path.write_text(wrapper_script(cmd, batch, tty, str(pl.job_root), pl.job_root_in_cluster))
            path.chmod(0o755)
        click.echo(f'export PATH={shlex.quote(str(bin_dir))}:"$PATH"')
