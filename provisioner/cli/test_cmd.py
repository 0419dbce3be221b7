"""`simcluster test`: up -> verify -> down in one command, for CI."""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

import click

from provisioner.cli.common import fake_gpus_value
from provisioner.cli.verify import run_and_report, verify_options
from provisioner.errors import UsageError


@click.command("test")
@click.option("--name", "-n", default="simtest", show_default=True, metavar="NAME",
              help="Name of the throwaway cluster (must not exist yet).")
@click.option("--nodes", "-N", type=int, default=None, metavar="K", help="Number of virtual nodes  [default: 2]")
@click.option("--gpus", default=None, metavar="IDS", help="Physical GPU ids given to nodes in order: '6,7'.")
@click.option("--fake-gpus", "fake_gpus", is_flag=False, flag_value="all", default=None, metavar="[K]",
              help="Simulate GPUs: alone, fake the --gpus list; with K, fake K GPUs.")
@click.option("--cpus", type=int, default=None, metavar="C", help="CPUs each node advertises.")
@click.option("--memory", default=None, metavar="M", help="Memory each node advertises: MB or 240G.")
@click.option("--config", "-c", "config_path", default=None, metavar="FILE", help="Cluster spec YAML; flags override it.")
@click.option("--backend", type=click.Choice(["local", "docker"]), default=None,
              help="Where the throwaway cluster runs  [default: local, or the config's backend]")
@click.option("--image", default=None, metavar="IMAGE",
              help="docker backend: node image  [default: the -train image when built, else the basic one]")
@verify_options
@click.option("--keep-on-failure", is_flag=True, help="When a check fails, keep the cluster running to debug it.")
@click.option("--logs-dir", default=None, metavar="DIR",
              help="Where a failed run's job outputs and daemon logs are copied before the cluster goes  "
                   "[default: a new directory under $TMPDIR]")
def command(name, nodes, gpus, fake_gpus, cpus, memory, config_path, backend, image, suite, as_json, junit, timeout,
            keep_on_failure, logs_dir):
    """Create a cluster, verify it, take it down; exit 1 if a check failed.

    \b
    Examples (CI):
      simcluster test --nodes 2 --fake-gpus 2 --junit verify.xml
      simcluster test --suite basic --keep-on-failure
      simcluster test --backend docker --fake-gpus 2   # containers; training suites
                                                       # need 'simcluster image build --train'
    On failure the job outputs and daemon logs are copied to --logs-dir (or, with
    --keep-on-failure, the cluster stays up and its state directory is printed).
    """
    from provisioner.config import load_spec
    from provisioner.errors import ClusterNotFound
    from provisioner.providers import provider_for, provider_for_spec

    try:
        provider_for(name)
    except ClusterNotFound:
        pass
    else:
        raise UsageError(f"a cluster named '{name}' already exists; `test` makes (and removes) its own",
                         "pick another --name, or use 'simcluster verify' on the existing one")
    overrides = {"name": name, "nodes": nodes, "gpus": gpus, "cpus": cpus, "memory": memory, "backend": backend,
                 "image": image}
    fake = fake_gpus_value(fake_gpus)
    if fake is not None:
        overrides["fakeGpus"] = fake
    spec = load_spec(config_path, overrides)
    provider = provider_for_spec(spec)
    say = (lambda m: click.echo(m, err=True)) if as_json else click.echo
    t0 = time.monotonic()
    say(provider.up(spec))
    run = None
    try:
        run = run_and_report(name, suite, as_json, junit, timeout)
    finally:
        failed = run is None or run.failed
        if failed and keep_on_failure:
            say(f"keeping cluster '{name}' (--keep-on-failure): state and daemon logs in "
                f"{Path(provider.status(name)['state_dir'])}"
                + (f", job outputs in {run.run_dir}" if run else "")
                + f"; remove it with 'simcluster down --name {name}'")
        else:
            if failed:
                saved = _save_logs(provider, name, run, logs_dir)
                say(f"job outputs and daemon logs copied to {saved}")
            say(provider.down(name))
    say(f"simcluster test: {'FAILED' if failed else 'passed'} in {time.monotonic() - t0:.1f}s")
    click.get_current_context().exit(1 if failed else 0)


def _save_logs(provider, name: str, run, logs_dir) -> Path:
    """Copy what a failure needs (verify's job dirs + the export-logs bundle) out of the
    cluster's state directory, which `down` deletes."""
    dest = Path(logs_dir) if logs_dir else Path(tempfile.mkdtemp(prefix=f"simcluster-test-{name}-"))
    dest.mkdir(parents=True, exist_ok=True)
    try:
        provider.collect_logs(name, dest / "cluster")
    except Exception as exc:  # a half-dead cluster: keep going, the job outputs matter most
        print(f"(export-logs failed: {exc})", file=sys.stderr)
    if run is not None and run.run_dir.is_dir():
        shutil.copytree(run.run_dir, dest / "verify", dirs_exist_ok=True)
    return dest
