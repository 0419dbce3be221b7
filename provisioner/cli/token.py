"""`simcluster token`: a JWT for the cluster's REST API (clusters made with --rest)."""

from __future__ import annotations

import click

from provisioner.cli.common import name_option


@click.command("token")
@name_option
@click.option("--user", "-u", "user", default=None, metavar="USER",
              help="Whom the token is for  [default: you]; only root and SlurmUser may name another user.")
@click.option("--lifespan", type=click.IntRange(min=1), default=None, metavar="SECONDS",
              help="How long the token is valid  [default: Slurm's, 1800]")
def command(name, user, lifespan):
    """Print a JWT for Slurm's REST API (scontrol token), to send as X-SLURM-USER-TOKEN.

    \b
    Examples:
      simcluster token --name c1
      curl -H "X-SLURM-USER-NAME: $USER" -H "X-SLURM-USER-TOKEN: $(simcluster token)" \\
           "$SLURMRESTD_URL/slurm/v0.0.38/ping"

    `simcluster env` exports SLURMRESTD_URL, not the token. Do not export the token as
    SLURM_JWT in a shell that runs srun or sbatch: srun then authenticates with JWT, which
    slurmd refuses (docs/rest.md).
    """
    from provisioner.cluster.services import rest  # lazy: the cluster model loads when the command runs
    from provisioner.named_clusters import load
    from provisioner.errors import UsageError
    cluster = load(name)
    if not cluster.spec.rest:
        raise UsageError(f"cluster '{name}' has no REST API",
                         f"make it with one: simcluster up --name {name} --rest --recreate (or rest: true)")
    click.echo(rest.token(cluster, user, lifespan))
