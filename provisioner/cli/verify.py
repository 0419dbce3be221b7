"""`simcluster verify`: real multi-node jobs prove the cluster works; exit 1 if any check fails."""

from __future__ import annotations

import sys

import click

from provisioner.cli.common import name_option
from provisioner.cli.options import cluster_from_options, ssh_options
from provisioner.errors import UsageError


def verify_options(f):
    """--suite/--json/--junit/--timeout, shared with `simcluster test`."""
    f = click.option("--timeout", type=float, default=None, metavar="S",
                     help="Per-check time limit in seconds  [default: 60 basic, 240 training; signals 105]")(f)
    f = click.option("--junit", "junit", default=None, metavar="FILE", help="Also write JUnit XML to FILE (for CI).")(f)
    f = click.option("--json", "as_json", is_flag=True, help="Print the results as JSON on stdout (lines go to stderr).")(f)
    f = click.option("--suite", "-s", default="all", show_default=True, metavar="LIST",
                     help="basic,signals,rest,ddp,fsdp,deepspeed,megatron,faults or all (all = every suite but "
                          "faults: that one breaks the cluster on purpose, needs 'up --fast-failure' and "
                          "takes 1-2 minutes; on other clusters its checks SKIP; of signals, all runs "
                          "signals.time-limit only)")(f)
    return f


def check_verify_options(suite: str, timeout) -> list:
    """The suites --suite names; bad --suite or --timeout is exit 2, before anything connects."""
    from provisioner.verify import parse_suites  # lazy: the checks load when the command runs, not for --help
    suites = parse_suites(suite)
    if timeout is not None and timeout <= 0:
        raise UsageError("--timeout must be a positive number of seconds")
    return suites


def run_and_report(name: str, suite: str, as_json: bool, junit, timeout, target=None) -> "object":
    """Run verify on ``target`` (default: cluster ``name`` of this machine); print lines,
    table, JSON; write JUnit. Returns the VerifyRun."""
    # lazy: the checks, the report and the cluster model load when the command runs, not for --help
    from provisioner.verify import run_verify
    from provisioner.verify.report import LiveReporter, format_notes, suite_seconds, summary_table, to_json, write_junit
    from provisioner.verify.targets import target_for

    suites = check_verify_options(suite, timeout)
    stream = sys.stderr if as_json else sys.stdout
    live = LiveReporter(stream)
    target = target or target_for(name)
    name = target.name
    run = run_verify(name, suites, live, timeout=timeout, header=live.header, target=target)
    print("", file=stream)
    print(summary_table(run.results, run.seconds, suite_seconds(run.results)), file=stream)
    notes = format_notes(run.results)
    if notes:
        print(notes, file=stream)
    if run.failed:
        logs = target.log_hint("slurmctld")
        where = "" if target.files.on_this_host else " on the cluster's hosts"
        print(f"FAILED: job scripts and full outputs are in {run.run_dir}{where}; {logs}", file=stream)
    if junit:
        write_junit(junit, name, run.results, run.seconds)
    if as_json:
        click.echo(to_json(name, run.results, run.seconds, run.run_dir, run.suites))
    return run


@click.command("verify")
@name_option
@verify_options
@ssh_options
def command(name, suite, as_json, junit, timeout, **where):
    """Prove the cluster works: real multi-node jobs, a line per check, exit 1 on failure.

    \b
    Suites (default: all):
      basic      controller, nodes, srun env over all nodes, GPU ids per node, sbatch
                 output, MPI, job array, afterok dependency, requeue + resume from
                 checkpoint, nodes isolated as hosts (one port on two nodes, own source
                 address, /etc/slurm, GPU devices), --mem enforced (a few seconds)
      signals    --signal=B:USR1 reaches the batch script before the time limit (up to
                 30 s: slurmctld checks time limits every 30 s); named (--suite signals,
                 all,signals) also a 24-hour job's checkpoint trap via fault time-limit
                 (2-2.5 min) and a preempted job resuming from its checkpoint
      ddp        DistributedDataParallel across 2 nodes (torchrun)
      fsdp       FSDP fully_shard across 2 nodes, sharding + DCP checkpoint reload
      deepspeed  DeepSpeed ZeRO-3 across 2 nodes (srun python, no launcher)
      megatron   megatron-core GPTModel with tensor parallel 2 across 2 nodes
    Training suites need the training stack (`make setup-train`, or pip's
    extra simcluster[train]; docker clusters: an image from `simcluster image
    build --train`); without it they are SKIP. They use CUDA + NCCL on nodes
    with real GPUs, else CPU + gloo.

    \b
    Works on local and docker clusters alike; on docker, Slurm commands run in
    the controller container and job files go to the shared directory
    (/shared in every container).

    \b
    Examples:
      simcluster verify --suite basic           # seconds: for CI
      simcluster verify --suite all --json --junit verify.xml
      simcluster verify --ssh root@head --suite basic,ddp   # a cluster made by 'simcluster deploy'

    \b
    With --ssh, the same checks run on a cluster made by 'simcluster deploy':
    Slurm commands on its controller over SSH, job files copied to every host
    (no shared filesystem needed), training in the venv 'deploy --training' makes.
    """
    from provisioner.verify.targets import target_of  # lazy: as above
    check_verify_options(suite, timeout)
    with cluster_from_options(name, **where) as cluster:
        run = run_and_report(name, suite, as_json, junit, timeout, target=target_of(cluster))
    click.get_current_context().exit(1 if run.failed else 0)
