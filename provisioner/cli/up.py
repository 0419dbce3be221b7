"""`simcluster up`: create a cluster and wait until every node is idle."""

from __future__ import annotations

import os

import click

from provisioner.cli.options import load_spec_from_options, spec_options


@click.command("up")
@click.option("--name", "-n", default=None, metavar="NAME", help="Cluster name  [default: default]")
@spec_options()
@click.option("--retain", is_flag=True, help="On failure keep what was started, for debugging.")
@click.option("--recreate", is_flag=True, help="Delete an existing cluster of this name (jobs, state, accounting) "
                                               "and create it anew.")
@click.option("--sudo", is_flag=True, help="Not root, but may use sudo without a password (GitHub's runners): make "
                                           "root's cluster through 'sudo -n' (own network namespaces, hostnames, "
                                           "cgroups, GPU devices), which serves you; remove it with 'down --sudo'.")
def command(name, retain, recreate, sudo, **options):
    """Create a cluster: a private munged, slurmctld, one slurmd per node.

    \b
    Examples:
      simcluster up --nodes 2 --gpus 6,7              # GPU host: node1 gets GPU 6, node2 GPU 7
      simcluster up --nodes 2 --gpus 6,7 --fake-gpus  # same cluster on a CPU-only host
      simcluster up --nodes 4 --fake-gpus 8 --cpus 112 --memory 240000
      simcluster up --fake-gpus 2 --mig 3g.40gb:2     # MIG: --gres=gpu:3g.40gb:1 (docs/gpus.md)
      simcluster up --fake-gpus 2 --shards 4          # 4 shards per GPU: --gres=shard:1
      simcluster up --config configs/examples/node6-node7-one-gpu-each.yaml --fake-gpus
      simcluster up --backend docker --nodes 2        # containers (builds the image once)
      simcluster up --nodes 2 --accounting            # + slurmdbd and MariaDB: sacct, sshare
      simcluster up --like prod/slurm.conf --max-nodes 6   # production's partitions, GPUs, QoS
      sudo simcluster up --users alice,bob --accounting    # other local users' jobs, an account each

    Each node is a host of its own: as root a network namespace and cgroups each (--mem
    and GPU devices enforced; a job sees its GPUs numbered from 0, as Slurm numbers them),
    rootless the physical GPU ids and a loopback address each (`up` says what is missing;
    which GPU ids a job sees: docs/gpus.md#which-gpu-ids-a-job-sees).
    Node names resolve inside jobs. Running `up` again with the same spec (or `up --name NAME`
    alone: the cluster's stored spec, also after `simcluster scale`) does nothing, or, if
    daemons died (a crash, a reboot, `simcluster fault`), restarts them in place: same ports,
    state, munge key and database; queued jobs and accounting are kept. Only --recreate or
    `simcluster down` wipe a cluster.

    --like reads a production slurm.conf instead of --config and prints what it kept and
    dropped in one line (every setting with -v); see docs/like.md.

    A cluster made by root (state in /var/lib/simcluster) serves every local user: they
    run `eval "$(simcluster env --name NAME)"`, sinfo, sbatch, and their jobs run as
    them; the munge key, JWT key and database password stay root's. --users names
    users who must exist already (useradd --create-home NAME; `up` creates none) and,
    with --accounting, gives each an account of their own (docs/users.md).

    --sudo (for a user who may run sudo without a password, as on GitHub's hosted
    runners): only this `up` runs as root, through `sudo -n` with the same simcluster, and
    says so; the cluster is root's, with everything root's has, and serves you: `simcluster
    env`, sbatch, srun and status from your shell, your jobs as you. `simcluster down --sudo`
    removes it. Never a password prompt, never sudo without --sudo (docs/requirements.md).
    """
    # lazy: the cluster model, jinja2 and the provider load only when the command runs, not for --help
    from click.core import ParameterSource

    from provisioner.named_clusters import find_state, up
    from provisioner.providers import provider_named
    ctx = click.get_current_context()
    given = [k for k in options if ctx.get_parameter_source(k) is not ParameterSource.DEFAULT]
    if sudo and os.geteuid() != 0:
        # The spec is read here first, as the user: bad input stops before anything runs as root.
        spec_name = name if name and not given else load_spec_from_options(name, options).name
        ctx.exit(_up_as_root(spec_name))
    existing = find_state(name or "default") if name and not given and not recreate else None
    # `up --name X` alone on an existing cluster repairs it as it is, whatever made its spec
    # (flags, --config, --like, `simcluster scale`): the spec is the stored one.
    spec = existing.cluster_spec if existing is not None else load_spec_from_options(name, options)
    result = up(spec, provider_named(spec.backend), retain=retain, recreate=recreate)
    # Name only what these nodes lack: with user namespaces they have their own network and
    # name, and on a delegating cgroup v2 host their limits too.
    lacking = [gives for what, gives in (("network", "their own network namespace and hostname"),
                                          ("limits", "cgroups for their limits"))
               if f"unlike a production host here: {what}:" in result]
    if os.geteuid() != 0 and spec.backend == "local" and lacking:
        result += (f"\n(root gives the nodes what they lack here ({' and '.join(lacking)}): "
                   "run up as root, or with --sudo where you may use sudo without a password)")
    click.echo(result)


def _up_as_root(name: str) -> int:
    """`up --sudo` by an ordinary user: this same command line again as root (provisioner.sudo),
    saying first what runs as root and why, and after it how the user reaches the cluster."""
    from provisioner.progress import stderr as progress
    from provisioner.sudo import ROOT_GIVES, invoking_user, rerun_as_root
    user = invoking_user()
    status = rerun_as_root(f"up '{name}'", lambda line: progress(f"{line}: root gives {ROOT_GIVES}; the cluster is "
                                                                  f"root's and serves {user}, whose jobs run as {user}"))
    if status == 0:
        click.echo(f"as {user}: eval \"$(simcluster env --name {name})\"; sbatch/srun/sinfo from your shell; "
                   f"remove it with 'simcluster down --sudo --name {name}'")
    return status
