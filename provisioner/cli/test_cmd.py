"""`simcluster test`: up -> verify -> down in one command, for CI."""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

import click

from provisioner.cli.options import spec_options, load_spec_from_options
from provisioner.cli.verify import run_and_report, verify_options
from provisioner.errors import UsageError


@click.command("test")
@click.option("--name", "-n", default="simtest", show_default=True, metavar="NAME",
              help="Name of the throwaway cluster (must not exist yet).")
@spec_options(("nodes", "gpus", "fake_gpus", "cpus", "memory", "config_path", "backend", "image", "privileged",
               "accounting", "fast_failure", "slurm", "wait", "like_path", "gres_conf", "max_nodes"))
@verify_options
@click.option("--keep-on-failure", is_flag=True, help="When a check fails, keep the cluster running to debug it.")
@click.option("--logs-dir", default=None, metavar="DIR",
              help="Where a failed run's job outputs and daemon logs are copied before the cluster goes  "
                   "[default: a new directory under $TMPDIR]")
def command(name, suite, as_json, junit, timeout, keep_on_failure, logs_dir, **options):
    """Create a cluster, verify it, take it down; exit 1 if a check failed.

    \b
    Examples (CI):
      simcluster test --nodes 2 --fake-gpus 2 --junit verify.xml
      simcluster test --suite basic --keep-on-failure
      simcluster test --backend docker --slurm 24.11   # containers, another Slurm release
      simcluster test --backend docker --fake-gpus 2   # containers; training suites
                                                       # need 'simcluster image build --train'
    On failure the job outputs and daemon logs are copied to --logs-dir (or, with
    --keep-on-failure, the cluster stays up and its state directory is printed).
    """
    # lazy: the cluster model, verify and the provider load only when the command runs, not for --help
    from provisioner import named_clusters
    from provisioner.cluster.inspect.logs import export_logs
    from provisioner.providers import provider_named

    if named_clusters.find_state(name) is not None:
        raise UsageError(f"a cluster named '{name}' already exists; `test` makes (and removes) its own",
                         "pick another --name, or use 'simcluster verify' on the existing one")
    say = (lambda m: click.echo(m, err=True)) if as_json else click.echo
    spec = load_spec_from_options(name, options, say=say)
    t0 = time.monotonic()
    say(named_clusters.up(spec, provider_named(spec.backend)))
    run = None
    try:
        run = run_and_report(name, suite, as_json, junit, timeout)
    finally:
        failed = run is None or run.failed
        if failed and keep_on_failure:
            say(f"keeping cluster '{name}' (--keep-on-failure): state and daemon logs in "
                f"{named_clusters.load(name).state.root}"
                + (f", job outputs in {run.run_dir}" if run else "")
                + f"; remove it with 'simcluster down --name {name}'")
        else:
            if failed:
                saved = _save_logs(lambda dest: export_logs(named_clusters.load(name), dest), name, run, logs_dir)
                say(f"job outputs and daemon logs copied to {saved}")
            say(named_clusters.down(name))
    say(f"simcluster test: {'FAILED' if failed else 'passed'} in {time.monotonic() - t0:.1f}s")
    click.get_current_context().exit(1 if failed else 0)


def _save_logs(export, name: str, run, logs_dir) -> Path:
    """Copy what a failure needs (verify's job dirs + the export-logs bundle) out of the
    cluster's state directory, which `down` deletes."""
    dest = Path(logs_dir) if logs_dir else Path(tempfile.mkdtemp(prefix=f"simcluster-test-{name}-"))
    dest.mkdir(parents=True, exist_ok=True)
    try:
        export(dest / "cluster")
    except Exception as exc:  # a half-dead cluster: keep going, the job outputs matter most
        print(f"(export-logs failed: {exc})", file=sys.stderr)
    if run is not None and run.run_dir.is_dir():
        shutil.copytree(run.run_dir, dest / "verify", dirs_exist_ok=True)
    return dest
