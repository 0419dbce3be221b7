"""`simcluster up`: create a cluster and wait until every node is idle."""

from __future__ import annotations

import click

from provisioner.cli.common import fake_gpus_value
from provisioner.config import load_spec
from provisioner.providers import provider_for_spec


@click.command("up")
@click.option("--name", "-n", default=None, metavar="NAME", help="Cluster name  [default: default]")
@click.option("--nodes", "-N", "nodes", type=int, default=None, metavar="K", help="Number of virtual nodes  [default: 2]")
@click.option("--gpus", default=None, metavar="IDS",
              help="Physical GPU ids given to nodes in order, evenly: '6,7', '0-3'.")
@click.option("--fake-gpus", "fake_gpus", is_flag=False, flag_value="all", default=None, metavar="[K]",
              help="Simulate GPUs (no GPU needed): alone, fake the --gpus list; with K, fake K GPUs (ids 0..K-1).")
@click.option("--cpus", type=int, default=None, metavar="C", help="CPUs each node advertises  [default: host's]")
@click.option("--memory", default=None, metavar="M", help="Memory each node advertises: MB or 240G  [default: host's]")
@click.option("--backend", default=None, metavar="local|docker",
              help="local: processes on this host; docker: a container per node  [default: local]")
@click.option("--image", default=None, metavar="IMAGE", help="docker backend: node image, used as it is  [default: the -train image when built, "
                   "else the basic one; rebuilt when made from older docker/ files]")
@click.option("--privileged", is_flag=True, default=None, help="docker backend: run containers --privileged.")
@click.option("--accounting", is_flag=True, default=None,
              help="Add slurmdbd with a private MariaDB: sacct, sacctmgr, sshare and fair-share work.")
@click.option("--config", "-c", "config_path", default=None, metavar="FILE",
              help="Cluster spec YAML (apiVersion: simcluster/v1); flags override it.")
@click.option("--wait", "wait", type=float, default=None, metavar="SECONDS",
              help="How long to wait for all nodes to be idle  [default: 60]")
@click.option("--retain", is_flag=True, help="On failure keep what was started, for debugging.")
def command(name, nodes, gpus, fake_gpus, cpus, memory, backend, image, privileged, accounting, config_path, wait,
            retain):
    """Create a cluster: a private munged, slurmctld, one slurmd per node.

    \b
    Examples:
      simcluster up --nodes 2 --gpus 6,7              # GPU host: node1 gets GPU 6, node2 GPU 7
      simcluster up --nodes 2 --gpus 6,7 --fake-gpus  # same cluster on a CPU-only host
      simcluster up --nodes 4 --fake-gpus 8 --cpus 112 --memory 240000
      simcluster up --config configs/examples/seed-node6-node7.yaml --fake-gpus
      simcluster up --backend docker --nodes 2        # containers (builds the image once)
      simcluster up --nodes 2 --accounting            # + slurmdbd and MariaDB: sacct, sshare

    Every job step sees its node's physical GPU ids in CUDA_VISIBLE_DEVICES, and node
    names resolve inside jobs. Running `up` again with the same spec does nothing.
    """
    fake = fake_gpus_value(fake_gpus)
    overrides = {"name": name, "nodes": nodes, "gpus": gpus, "cpus": cpus, "memory": memory,
                 "backend": backend, "wait": wait, "image": image, "privileged": privileged,
                 "accounting": accounting}
    if fake is not None:
        overrides["fakeGpus"] = fake
    spec = load_spec(config_path, overrides)
    provider = provider_for_spec(spec)
    click.echo(provider.up(spec, retain=retain))
