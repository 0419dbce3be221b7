"""`simcluster deploy`: provision a Slurm cluster on real hosts with Ansible."""

from __future__ import annotations

import click

from provisioner.progress import stderr as progress_stderr


@click.command("deploy")
@click.option("--inventory", "-i", "inventory", required=True, metavar="FILE",
              help="Ansible inventory: one host in [controller], the nodes in [compute].")
@click.option("--config", "-c", "config_path", default=None, metavar="FILE",
              help="Cluster spec YAML (apiVersion: simcluster/v1), as for 'up'.")
@click.option("--check", is_flag=True,
              help="Show what would change and change nothing (Ansible's check and diff modes): "
                   "the tasks that would change, and each config file's change as a unified diff.")
@click.option("--training", is_flag=True,
              help="Also install torch 2.13.0 (and numpy) into "
                   "/opt/simcluster/venv on every compute host, from wheels collected here: torch "
                   "is the build pip finds, the CUDA one (several GB) unless pip is pointed at "
                   "PyTorch's CPU index (docs/deploy.md#training-stack).")
@click.option("--insecure-accept-host-key", "insecure", is_flag=True,
              help="Do not check SSH host keys (throwaway test hosts only).")
def command(inventory, config_path, check, training, insecure):
    """Install munge and Slurm on the inventory's hosts, render the configs from the same
    templates as 'up', start the daemons and wait until every node is idle.

    \b
    Examples:
      simcluster deploy -i inventory.ini
      simcluster deploy -i inventory.ini --config configs/examples/node6-node7-one-gpu-each.yaml
      simcluster deploy -i inventory.ini --training     # torch for DDP jobs
      simcluster deploy -i inventory.ini -c cluster.yaml --check   # what would change, first
      simcluster verify --ssh root@head --suite basic,ddp

    Running it again changes nothing unless the inventory or the spec changed; a changed
    spec is applied to the running cluster (the daemons restart, running jobs keep running).
    See ansible/inventory.example.ini and docs/deploy.md.
    """
    from provisioner.deploy.apply import deploy  # lazy: Ansible's modules load only here
    summary = deploy(inventory, config_path, progress_stderr, check=check,
                     training=training, insecure_host_keys=insecure)
    if summary.diff_text():
        click.echo(summary.diff_text(), nl=False)
    click.echo(summary.line())
